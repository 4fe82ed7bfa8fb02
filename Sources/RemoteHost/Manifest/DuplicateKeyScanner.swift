/// Finds every object key that appears twice in the same JSON object, and every key that is
/// not ASCII.
///
/// `JSONDecoder` accepts `{"a": 1, "a": 2}` and keeps one of the values without a word, so a
/// manifest could say `"network": false` where a reviewer looks and `"network": true` where the
/// decoder looks. The manifest loader runs this over the file after it decoded, and refuses the
/// file when a key repeats.
///
/// Keys compare byte for byte, as UTF-8, after their escapes are decoded (`"a"` and `"\u0061"`
/// are the same key), as jq and Python's `json` compare them. Never by Unicode canonical
/// equivalence, as Swift's `String` does (and `JSONDecoder` with it): to a `Set<String>`, the
/// Kelvin sign `"\u212A"` is `"K"` and `"e\u0301"` is `"é"`. Since every key of the schema is
/// ASCII, a key that is not is reported too (and refused by the loader): between ASCII keys
/// both comparisons agree, so the decoder cannot take two keys for one that this scan tells
/// apart.
///
/// It reads the text as JSON (RFC 8259) in UTF-8 and does not validate it: it is only run on
/// text the decoder has accepted, after ``ManifestText/encodingProblem(in:)`` made sure it is
/// UTF-8 (a UTF-16 file would read as other keys here than there). Nesting is tracked with an
/// explicit stack, so depth costs no recursion. `Fuzz/Sources/FuzzDuplicates` compares it with
/// a second detector written apart from it.
struct DuplicateKeyScanner {
    /// One step of the path to a value: a key of an object (its bytes, unescaped) or an index
    /// of an array.
    enum PathComponent: Hashable {
        case key([UInt8])
        case index(Int)
    }

    /// A key this scan reports.
    struct Finding: Equatable {
        enum Kind: Equatable {
            /// The key appears earlier in the same object.
            case duplicate
            /// The key holds a byte beyond ASCII, once unescaped.
            case notASCII
        }

        var kind: Kind
        /// Where the key's object is (`[]` for the top level).
        var path: [PathComponent]
        /// The key, unescaped, as UTF-8.
        var key: [UInt8]
        /// The offset of the key's opening quote in the text.
        var offset: Int

        /// The path and the key as manifest errors name keys (`sandbox.network`,
        /// `activation.contentTypes[1].max`), with every scalar beyond ASCII or that a terminal
        /// would act on escaped (`networ\u{212A}`).
        var keyPath: String {
            DuplicateKeyScanner.render(path + [.key(key)])
        }
    }

    private enum Container {
        /// An object: the keys seen so far, the path to it, and the key whose value is next.
        case object(keys: Set<[UInt8]>, path: [PathComponent], pending: [UInt8]?)
        /// An array: the path to it and the index of the next element.
        case array(path: [PathComponent], next: Int)
    }

    private let bytes: [UInt8]
    private var position = 0

    private init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// Every repeated key and every key that is not ASCII, in the order of the text.
    static func findings(in bytes: [UInt8]) -> [Finding] {
        var scanner = DuplicateKeyScanner(bytes)
        return scanner.scan()
    }

    /// `path` written as manifest errors name keys, escaped.
    static func render(_ path: [PathComponent]) -> String {
        var result = ""
        for component in path {
            switch component {
            case .key(let key):
                if !result.isEmpty { result += "." }
                result += String(decoding: key, as: UTF8.self)
            case .index(let index):
                result += "[\(index)]"
            }
        }
        return result.escapedForTerminal(asciiOnly: true)
    }

    private mutating func scan() -> [Finding] {
        var findings: [Finding] = []
        var stack: [Container] = []
        // Whether the next string is an object key (after `{` or a `,` inside an object).
        var expectingKey = false
        while position < bytes.count {
            let byte = bytes[position]
            switch byte {
            case UInt8(ascii: "{"):
                stack.append(.object(keys: [], path: pathOfNextValue(in: stack), pending: nil))
                expectingKey = true
                position += 1
            case UInt8(ascii: "["):
                stack.append(.array(path: pathOfNextValue(in: stack), next: 0))
                expectingKey = false
                position += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                _ = stack.popLast()
                valueEnded(in: &stack)
                expectingKey = false
                position += 1
            case UInt8(ascii: ","):
                if case .object? = stack.last { expectingKey = true }
                position += 1
            case UInt8(ascii: "\""):
                let offset = position
                guard let string = readString() else { return findings }
                if expectingKey, case .object(var keys, let path, _)? = stack.last {
                    if string.contains(where: { $0 >= 0x80 }) {
                        findings.append(Finding(kind: .notASCII, path: path, key: string, offset: offset))
                    }
                    if !keys.insert(string).inserted {
                        findings.append(Finding(kind: .duplicate, path: path, key: string, offset: offset))
                    }
                    stack[stack.count - 1] = .object(keys: keys, path: path, pending: string)
                    expectingKey = false
                } else {
                    valueEnded(in: &stack)
                }
            case UInt8(ascii: ":"), UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"), UInt8(ascii: "\r"):
                position += 1
            default:
                // A number, true, false or null: skip to the next structural character.
                while position < bytes.count, !Self.ends(bytes[position]) { position += 1 }
                valueEnded(in: &stack)
            }
        }
        return findings
    }

    /// The path of the value that comes next in `stack`'s innermost container.
    private func pathOfNextValue(in stack: [Container]) -> [PathComponent] {
        switch stack.last {
        case .object(_, let path, let pending)?:
            guard let pending else { return path }
            return path + [.key(pending)]
        case .array(let path, let next)?:
            return path + [.index(next)]
        case nil:
            return []
        }
    }

    /// A value ended: an array moves on to its next index, an object forgets the pending key.
    private func valueEnded(in stack: inout [Container]) {
        switch stack.last {
        case .object(let keys, let path, _)?:
            stack[stack.count - 1] = .object(keys: keys, path: path, pending: nil)
        case .array(let path, let next)?:
            stack[stack.count - 1] = .array(path: path, next: next + 1)
        case nil:
            break
        }
    }

    private static func ends(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: ","), UInt8(ascii: "}"), UInt8(ascii: "]"), UInt8(ascii: " "), UInt8(ascii: "\t"),
             UInt8(ascii: "\n"), UInt8(ascii: "\r"), UInt8(ascii: ":"), UInt8(ascii: "\""), UInt8(ascii: "{"), UInt8(ascii: "["):
            true
        default:
            false
        }
    }

    /// `\n`, `\t`, `\r`, `\b`, `\f` and what they stand for.
    private static let simpleEscapes: [UInt8: UInt8] = [UInt8(ascii: "n"): 0x0A, UInt8(ascii: "t"): 0x09, UInt8(ascii: "r"): 0x0D,
                                                        UInt8(ascii: "b"): 0x08, UInt8(ascii: "f"): 0x0C]

    /// Reads the string that starts at `position` (a quote), decoding its escapes, as UTF-8;
    /// `nil` when the text ends inside it.
    private mutating func readString() -> [UInt8]? {
        position += 1
        var result: [UInt8] = []
        while position < bytes.count {
            let byte = bytes[position]
            position += 1
            if byte == UInt8(ascii: "\"") { return result }
            guard byte == UInt8(ascii: "\\") else {
                result.append(byte)
                continue
            }
            guard position < bytes.count else { return nil }
            let escape = bytes[position]
            position += 1
            if let replacement = Self.simpleEscapes[escape] {
                result.append(replacement)
            } else if escape == UInt8(ascii: "u") {
                guard var unit = readHex() else { return nil }
                // A surrogate pair is two escapes. A lone surrogate becomes U+FFFD here; the
                // decoder refuses the text, so the scan never sees one in a manifest it reports on.
                if (0xD800..<0xDC00).contains(unit), position + 1 < bytes.count,
                   bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u") {
                    position += 2
                    guard let low = readHex() else { return nil }
                    if (0xDC00..<0xE000).contains(low) {
                        unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                    } else {
                        result += Self.utf8(of: "\u{FFFD}")
                        unit = low
                    }
                }
                result += Self.utf8(of: Unicode.Scalar(unit) ?? "\u{FFFD}")
            } else {
                result.append(escape)  // \" \\ \/
            }
        }
        return nil
    }

    private static func utf8(of scalar: Unicode.Scalar) -> [UInt8] {
        Array(UTF8.encode(scalar)!)
    }

    /// Four hex digits at `position`.
    private mutating func readHex() -> UInt32? {
        guard position + 4 <= bytes.count else { return nil }
        var value: UInt32 = 0
        for byte in bytes[position..<position + 4] {
            guard let digit = Character(Unicode.Scalar(byte)).hexDigitValue else { return nil }
            value = value << 4 | UInt32(digit)
        }
        position += 4
        return value
    }
}
