extension Unicode.Scalar {
    /// Whether ``Swift/String/escapedForTerminal(asciiOnly:)`` writes this scalar as an escape:
    /// a scalar a terminal or a bidi-aware renderer acts on instead of showing.
    ///
    /// - C0 controls (U+0000–U+001F: escape sequences, the bell, carriage return, new line),
    ///   DEL (U+007F) and C1 controls (U+0080–U+009F: CSI, OSC and the other 8-bit
    ///   introducers some terminals still honour);
    /// - the bidi embedding and override controls (U+202A–U+202E: LRE, RLE, PDF, LRO, RLO) and
    ///   isolate controls (U+2066–U+2069: LRI, RLI, FSI, PDI), which reorder the rest of a line
    ///   (the "Trojan Source" trick, CVE-2021-42574).
    ///
    /// Not the marks LRM (U+200E), RLM (U+200F) and ALM (U+061C): they change no order beyond
    /// their own neighbours, and right-to-left text needs them.
    public var isEscapedForTerminal: Bool {
        switch value {
        case 0x00...0x1F, 0x7F...0x9F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }
}

extension String {
    /// This text as it may be printed to a terminal or a log: each scalar a terminal would act
    /// on (``Swift/Unicode/Scalar/isEscapedForTerminal``) written as a Swift string literal
    /// writes it, `\u{1B}` (upper-case hexadecimal, at least two digits); everything else as it
    /// is, right-to-left text and emoji included.
    ///
    /// Like `vis(3)` or Python's `repr()`, for what a manifest, a service or a remote peer wrote
    /// and the host prints: a title, a reason a service gave, an identifier that was refused, a
    /// line of a service's standard error. Unlike them it leaves `\` as it is: the result is for
    /// reading, not for decoding again (where the exact bytes matter, JSON output carries them),
    /// and escaping twice changes nothing. ``init(decodingForTerminal:)`` does the same for bytes
    /// that may not be UTF-8.
    ///
    /// ```swift
    /// "\u{7}\u{1B}[31mred".escapedForTerminal()       // \u{07}\u{1B}[31mred
    /// "abc\u{202E}fed".escapedForTerminal()           // abc\u{202E}fed
    /// "שלום 👋".escapedForTerminal()                   // שלום 👋
    /// ```
    ///
    /// - Parameter asciiOnly: Also escape every scalar beyond ASCII, for a name that should be
    ///   ASCII (a manifest's key) and whose look-alikes must show as what they are: the Kelvin
    ///   sign as `\u{212A}`, not as a `K`.
    public func escapedForTerminal(asciiOnly: Bool = false) -> String {
        let escapes = unicodeScalars.contains { $0.isEscapedForTerminal || (asciiOnly && !$0.isASCII) }
        guard escapes else { return self }
        var result = ""
        result.reserveCapacity(utf8.count + 16)
        for scalar in unicodeScalars {
            Self.appendForTerminal(scalar, to: &result, asciiOnly: asciiOnly)
        }
        return result
    }

    /// Decodes `utf8` for a terminal or a log, as ``escapedForTerminal(asciiOnly:)`` writes a
    /// string: the scalars it escapes as `\u{1B}`, and each byte that is not part of a
    /// well-formed UTF-8 sequence (RFC 3629; an overlong form, a surrogate, a stray continuation
    /// byte, a truncated sequence) as `\xFF`, as Python's `backslashreplace` does, where
    /// `String(decoding:as:)` would put U+FFFD and lose which byte it was.
    ///
    /// - Parameter utf8: Bytes a peer wrote, such as a line of a service's standard error.
    public init(decodingForTerminal utf8: some Collection<UInt8>) {
        var result = ""
        result.reserveCapacity(utf8.count)
        var index = utf8.startIndex
        while index != utf8.endIndex {
            if let (scalar, next) = Unicode.UTF8.wellFormedScalar(in: utf8, at: index) {
                Self.appendForTerminal(scalar, to: &result, asciiOnly: false)
                index = next
            } else {
                result += "\\x" + Self.hex(UInt32(utf8[index]))
                index = utf8.index(after: index)
            }
        }
        self = result
    }

    private static func appendForTerminal(_ scalar: Unicode.Scalar, to result: inout String, asciiOnly: Bool) {
        if scalar.isEscapedForTerminal || (asciiOnly && !scalar.isASCII) {
            result += "\\u{" + hex(scalar.value) + "}"
        } else {
            result.unicodeScalars.append(scalar)
        }
    }

    /// `value` in upper-case hexadecimal, at least two digits.
    private static func hex(_ value: UInt32) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return digits.count < 2 ? "0" + digits : digits
    }

    /// `json`, JSON text as `JSONEncoder` writes it, with every scalar a terminal would act on
    /// (``Swift/Unicode/Scalar/isEscapedForTerminal``) written as JSON's `\uXXXX` escape, but
    /// the white space between values (tab, line feed, carriage return).
    ///
    /// JSON escapes only U+0000–U+001F itself, and `JSONEncoder` writes DEL, the C1 controls and
    /// the bidi controls as they are. Outside a string JSON text holds none of them but its white
    /// space (a string holds no raw tab or line feed: `JSONEncoder` escapes them), and inside one
    /// `\uXXXX` stands for the same scalar (every one of them is in the Basic Multilingual
    /// Plane), so the value read back is unchanged; only the terminal that prints it sees
    /// escapes.
    package init(jsonForTerminal json: some Collection<UInt8>) {
        let text = String(decoding: json, as: UTF8.self)
        let escapes = { (scalar: Unicode.Scalar) in scalar.isEscapedForTerminal && !["\t", "\n", "\r"].contains(scalar) }
        guard text.unicodeScalars.contains(where: escapes) else {
            self = text
            return
        }
        var result = ""
        for scalar in text.unicodeScalars {
            if escapes(scalar) {
                let digits = String(scalar.value, radix: 16)
                result += "\\u" + String(repeating: "0", count: 4 - digits.count) + digits
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        self = result
    }
}

extension Unicode.UTF8 {
    /// The scalar of the well-formed UTF-8 sequence that starts at `index` in `bytes`, and the
    /// index after it; `nil` when the bytes there are not one (The Unicode Standard, table 3-7:
    /// no overlong forms, no surrogates, nothing above U+10FFFF, no stray continuation byte).
    package static func wellFormedScalar<Bytes: Collection<UInt8>>(in bytes: Bytes, at index: Bytes.Index) -> (Unicode.Scalar, Bytes.Index)? {
        let lead = bytes[index]
        var next = bytes.index(after: index)
        if lead < 0x80 { return (Unicode.Scalar(lead), next) }
        let count: Int, lowest: UInt32
        var value: UInt32
        switch lead {
        case 0xC2...0xDF: (count, lowest, value) = (1, 0x80, UInt32(lead & 0x1F))
        case 0xE0...0xEF: (count, lowest, value) = (2, 0x800, UInt32(lead & 0x0F))
        case 0xF0...0xF4: (count, lowest, value) = (3, 0x10000, UInt32(lead & 0x07))
        default: return nil  // a continuation byte, C0, C1 (overlong) or F5–FF
        }
        for _ in 0..<count {
            guard next != bytes.endIndex, bytes[next] & 0xC0 == 0x80 else { return nil }
            value = value << 6 | UInt32(bytes[next] & 0x3F)
            next = bytes.index(after: next)
        }
        // Unicode.Scalar refuses surrogates and values above U+10FFFF.
        guard value >= lowest, let scalar = Unicode.Scalar(value) else { return nil }
        return (scalar, next)
    }
}
