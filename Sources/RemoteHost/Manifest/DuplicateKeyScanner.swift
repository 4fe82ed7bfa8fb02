/// Finds the first object key that appears twice in the same JSON object.
///
/// `JSONDecoder` accepts `{"a": 1, "a": 2}` and keeps one of the values without a word, so a
/// manifest could say `"network": false` where a reviewer looks and `"network": true` where the
/// decoder looks. The manifest loader runs this over the file after it decoded, and refuses the
/// file when a key repeats.
///
/// It reads the text as JSON (RFC 8259) and does not validate it: it is only run on text the
/// decoder has accepted. Keys compare after their escapes are decoded (`"a"` and `"\u0061"` are
/// the same key). Nesting is tracked with an explicit stack, so depth costs no recursion.
struct DuplicateKeyScanner {
    /// A repeated key: where its object is (a dotted path with indices, as manifest errors
    /// name keys; `nil` for the top level) and the key.
    struct Duplicate: Equatable {
        var path: String?
        var key: String
    }

    private enum Container {
        /// An object: the keys seen so far, the path to it, and the key whose value is next.
        case object(keys: Set<String>, path: String?, pending: String?)
        /// An array: the path to it and the index of the next element.
        case array(path: String?, next: Int)
    }

    private let bytes: [UInt8]
    private var position = 0

    private init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// The first key that repeats within one object, or `nil`.
    static func firstDuplicate(in bytes: [UInt8]) -> Duplicate? {
        var scanner = DuplicateKeyScanner(bytes)
        return scanner.scan()
    }

    private mutating func scan() -> Duplicate? {
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
                guard let string = readString() else { return nil }
                if expectingKey, case .object(var keys, let path, _)? = stack.last {
                    if !keys.insert(string).inserted { return Duplicate(path: path, key: string) }
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
        return nil
    }

    /// The dotted path of the value that comes next in `stack`'s innermost container.
    private func pathOfNextValue(in stack: [Container]) -> String? {
        switch stack.last {
        case .object(_, let path, let pending)?:
            guard let pending else { return path }
            return path.map { "\($0).\(pending)" } ?? pending
        case .array(let path, let next)?:
            return (path ?? "") + "[\(next)]"
        case nil:
            return nil
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

    /// Reads the string that starts at `position` (a quote), decoding its escapes; `nil` when
    /// the text ends inside it.
    private mutating func readString() -> String? {
        position += 1
        var scalars = String.UnicodeScalarView()
        var raw: [UInt8] = []
        func flush() {
            scalars.append(contentsOf: String(decoding: raw, as: UTF8.self).unicodeScalars)
            raw.removeAll(keepingCapacity: true)
        }
        while position < bytes.count {
            let byte = bytes[position]
            position += 1
            if byte == UInt8(ascii: "\"") {
                flush()
                return String(scalars)
            }
            guard byte == UInt8(ascii: "\\") else {
                raw.append(byte)
                continue
            }
            guard position < bytes.count else { return nil }
            let escape = bytes[position]
            position += 1
            if let replacement = Self.simpleEscapes[escape] {
                raw.append(replacement)
            } else if escape == UInt8(ascii: "u") {
                guard var unit = readHex() else { return nil }
                flush()
                // A surrogate pair is two escapes; a lone surrogate becomes U+FFFD, as the decoder reads it.
                if (0xD800..<0xDC00).contains(unit), position + 1 < bytes.count,
                   bytes[position] == UInt8(ascii: "\\"), bytes[position + 1] == UInt8(ascii: "u") {
                    position += 2
                    guard let low = readHex() else { return nil }
                    if (0xDC00..<0xE000).contains(low) {
                        unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                    } else {
                        scalars.append("\u{FFFD}")
                        unit = low
                    }
                }
                scalars.append(Unicode.Scalar(unit) ?? "\u{FFFD}")
            } else {
                raw.append(escape)  // \" \\ \/
            }
        }
        return nil
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
