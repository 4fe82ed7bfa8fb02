import RemoteCore

/// The checks of a manifest's bytes as text, made before any JSON reader sees them, so that
/// the readers that follow (`JSONDecoder`, ``DuplicateKeyScanner``) read the same text and
/// cannot disagree about it.
///
/// - A manifest is UTF-8, as RFC 8259 (section 8.1) requires of JSON exchanged between
///   systems, without a byte-order mark. `JSONDecoder` also takes UTF-16 and UTF-32 (it
///   guesses from a byte-order mark or from where the NUL bytes are), which the duplicate-key
///   scan, reading bytes, would see as other keys: `"netw\u006frk"` in UTF-16 is a second
///   `network` to the decoder and no key at all to a byte scan.
/// - It nests at most ``ServiceRegistry/maxNestingDepth`` levels of arrays and objects:
///   `JSONDecoder` refuses 513 with only "not valid JSON".
enum ManifestText {
    /// Why `bytes` are not a manifest's text (UTF-8, no byte-order mark, no NUL), or `nil`.
    static func encodingProblem(in bytes: [UInt8]) -> String? {
        let rule = "a manifest must be UTF-8 (RFC 8259, 8.1)"
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) {
            return "starts with a UTF-8 byte-order mark (EF BB BF): a manifest is UTF-8 without one (RFC 8259, 8.1)"
        }
        if bytes.starts(with: [0xFF, 0xFE, 0, 0]) || bytes.starts(with: [0, 0, 0xFE, 0xFF]) {
            return "is UTF-32 (it starts with a UTF-32 byte-order mark): \(rule)"
        }
        if bytes.starts(with: [0xFF, 0xFE]) || bytes.starts(with: [0xFE, 0xFF]) {
            return "is UTF-16 (it starts with a UTF-16 byte-order mark): \(rule)"
        }
        if let nul = bytes.firstIndex(of: 0) {
            // JSON text starts with an ASCII character, so the NUL bytes around the first one
            // say the encoding without a byte-order mark (RFC 4627, section 3).
            if bytes.count >= 4, bytes[1] == 0, bytes[2] == 0, (bytes[0] == 0) != (bytes[3] == 0) {
                return "is UTF-32 (NUL bytes around each character): \(rule)"
            }
            if bytes.count >= 2, (bytes[0] == 0) != (bytes[1] == 0) {
                return "is UTF-16 (a NUL byte beside each ASCII character): \(rule)"
            }
            return "holds a NUL byte at offset \(nul): \(rule), and JSON writes NUL as \\u0000"
        }
        var index = 0
        while index < bytes.count {
            guard let (_, next) = Unicode.UTF8.wellFormedScalar(in: bytes, at: index) else {
                let hex = String(bytes[index], radix: 16, uppercase: true)
                return "is not UTF-8: the byte 0x\(hex.count < 2 ? "0" : "")\(hex) at offset \(index) does not start a valid sequence: \(rule)"
            }
            index = next
        }
        return nil
    }

    /// The deepest nesting of arrays and objects in `bytes` (`0` for a lone scalar), read
    /// without validating them: brackets inside strings do not count.
    static func nestingDepth(of bytes: [UInt8]) -> Int {
        var depth = 0, deepest = 0
        var inString = false, escaped = false
        for byte in bytes {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""):
                inString = true
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                depth += 1
                deepest = max(deepest, depth)
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                depth = max(0, depth - 1)
            default:
                break
            }
        }
        return deepest
    }
}
