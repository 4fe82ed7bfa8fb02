// libFuzzer target: the manifest loader's duplicate-key scan against a second detector written
// for this test (docs/Fuzzing.md).
//
// On every input the manifest loader would hand to both readers (UTF-8 by
// ManifestText.encodingProblem) and that JSONDecoder accepts as JSON:
//
// 1. DuplicateKeyScanner (the loader's) and ReferenceDetector (below: a recursive-descent
//    parser that builds a tree, keys as Unicode scalars; no code shared with the scanner) must
//    report the same keys, in the same order: each repeated key and each key beyond ASCII,
//    with its kind, the path of its object, the key and its offset;
// 2. the reference must accept what the decoder accepts;
// 3. in every object whose keys the loader would let through (ASCII, none repeated), the
//    decoder must see as many distinct keys as there are, with the same names: it may not
//    take two keys for one that the scan tells apart.
//
// JSONDecoder checks a text's structure first and each value only when it is decoded, so the
// value of a repeated key, which it never decodes (it keeps the first), may be anything that
// scans: `{"a": 1, "a": 1E0-2}`, `{"a": 1, "a": "\uEEE\"}` and `{"a": 1, "a": {"\x": 1}}` are
// accepted. The reference scans as leniently and decodes every string strictly; a string it
// cannot decode must come after a repeated key (where the loader refuses the file), and the
// reports are compared up to it.
//
// A disagreement aborts with both answers, and libFuzzer saves the input.
import FoundationEssentials
import Glibc
@testable import RemoteHost

private func fail(_ message: String) -> Never {
    let line = Array("fuzz-duplicates: \(message)\n".utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    abort()
}

// MARK: what the decoder sees

/// Any JSON value, as JSONDecoder decodes it (objects through `[String: JSONValue]`, so keys
/// are compared as Swift compares strings).
private indirect enum JSONValue: Decodable {
    case null, bool(Bool), number(Double), string(String), array([JSONValue]), object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }
}

// MARK: the reference detector

/// A JSON parser of its own: recursive descent over the bytes, keys decoded to Unicode scalars
/// (its own UTF-8 decoding and escapes), a tree of the values with each object's keys in order.
/// Its structure is RFC 8259's with JSONDecoder's trailing comma in an array or an object; its
/// values are scanned as JSONDecoder scans them before it decodes any (a number is `-` or a
/// digit, then digits, `.`, `e`, `E`, `+` and `-`; a string runs to the first quote no escape
/// takes, a backslash taking the byte after it, or `\u` the four after it, none of them a quote;
/// `true`, `false` and `null` are spelled out). Every string is then decoded strictly (RFC
/// 8259's escapes, surrogates in pairs, no raw control character), keys into their scalars.
private struct ReferenceDetector {
    enum Component: Equatable {
        case key([UInt32])
        case index(Int)
    }

    struct Report: Equatable {
        var duplicate: Bool
        var path: [Component]
        var key: [UInt32]
        var offset: Int
    }

    indirect enum Node {
        case scalar
        /// A string value that cannot be decoded, at this offset.
        case undecodable(Int)
        case array([Node])
        /// Each member's key (`nil`: it cannot be decoded), the offset of its quote, its value.
        case object([(key: [UInt32]?, offset: Int, value: Node)])
    }

    struct Refused: Error {
        var reason: String
        var offset: Int
    }

    let text: [UInt8]
    var at = 0
    var depth = 0

    init(_ text: [UInt8]) {
        self.text = text
    }

    static func parse(_ text: [UInt8]) throws(Refused) -> Node {
        var parser = ReferenceDetector(text)
        parser.skipSpace()
        let node = try parser.value()
        parser.skipSpace()
        guard parser.at == text.count else { throw Refused(reason: "text after the value", offset: parser.at) }
        return node
    }

    /// Every key beyond ASCII and every repeated key, in the order of the text, up to the first
    /// string that cannot be decoded (and that string's offset, if there is one).
    static func reports(_ node: Node) -> (reports: [Report], undecodable: Int?) {
        var result: [Report] = []
        var undecodable: Int?
        func walk(_ node: Node, _ path: [Component]) {
            switch node {
            case .scalar:
                break
            case .undecodable(let offset):
                undecodable = offset
            case .array(let elements):
                for (index, element) in elements.enumerated() where undecodable == nil { walk(element, path + [.index(index)]) }
            case .object(let members):
                var seen: [[UInt32]] = []
                for member in members where undecodable == nil {
                    guard let key = member.key else {
                        undecodable = member.offset
                        return
                    }
                    if key.contains(where: { $0 > 0x7F }) {
                        result.append(Report(duplicate: false, path: path, key: key, offset: member.offset))
                    }
                    if seen.contains(key) {
                        result.append(Report(duplicate: true, path: path, key: key, offset: member.offset))
                    }
                    seen.append(key)
                    walk(member.value, path + [.key(key)])
                }
            }
        }
        walk(node, [])
        return (result, undecodable)
    }

    mutating func skipSpace() {
        while at < text.count, [0x20, 0x09, 0x0A, 0x0D].contains(text[at]) { at += 1 }
    }

    func peek() -> UInt8? { at < text.count ? text[at] : nil }

    mutating func expect(_ byte: UInt8) throws(Refused) {
        guard peek() == byte else { throw Refused(reason: "expected \(Character(Unicode.Scalar(byte)))", offset: at) }
        at += 1
    }

    mutating func value() throws(Refused) -> Node {
        guard let byte = peek() else { throw Refused(reason: "no value", offset: at) }
        switch byte {
        case UInt8(ascii: "{"):
            return try object()
        case UInt8(ascii: "["):
            return try array()
        case UInt8(ascii: "\""):
            let offset = at
            try skipString()
            var string = ReferenceDetector(Array(text[offset..<at]))
            if (try? string.string()) == nil { return .undecodable(offset) }
        case UInt8(ascii: "t"):
            try literal("true")
        case UInt8(ascii: "f"):
            try literal("false")
        case UInt8(ascii: "n"):
            try literal("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            // Its digits are checked only when it is decoded.
            at += 1
            while let byte = peek(), Self.numberBytes.contains(byte) { at += 1 }
        default:
            throw Refused(reason: "no value", offset: at)
        }
        return .scalar
    }

    static let numberBytes = Set("0123456789.eE+-".utf8)

    mutating func nest() throws(Refused) {
        depth += 1
        // JSONDecoder's own limit is 512; deeper text is refused by both (and never compared).
        if depth > 600 { throw Refused(reason: "too deep", offset: at) }
    }

    mutating func object() throws(Refused) -> Node {
        try nest()
        defer { depth -= 1 }
        at += 1
        var members: [(key: [UInt32]?, offset: Int, value: Node)] = []
        skipSpace()
        while peek() != UInt8(ascii: "}") {
            let offset = at
            try skipString()
            var key = ReferenceDetector(Array(text[offset..<at]))
            let decoded = try? key.string()
            skipSpace()
            try expect(UInt8(ascii: ":"))
            skipSpace()
            members.append((decoded, offset, try value()))
            skipSpace()
            if peek() == UInt8(ascii: ",") {
                at += 1
                skipSpace()
            } else if peek() != UInt8(ascii: "}") {
                throw Refused(reason: "expected , or }", offset: at)
            }
        }
        at += 1
        return .object(members)
    }

    mutating func array() throws(Refused) -> Node {
        try nest()
        defer { depth -= 1 }
        at += 1
        var elements: [Node] = []
        skipSpace()
        while peek() != UInt8(ascii: "]") {
            elements.append(try value())
            skipSpace()
            if peek() == UInt8(ascii: ",") {
                at += 1
                skipSpace()
            } else if peek() != UInt8(ascii: "]") {
                throw Refused(reason: "expected , or ]", offset: at)
            }
        }
        at += 1
        return .array(elements)
    }

    mutating func literal(_ word: String) throws(Refused) {
        for byte in word.utf8 { try expect(byte) }
    }

    /// A string as JSONDecoder scans it: up to the first quote no escape takes (a backslash
    /// takes the byte after it; `\u` the four after it, none of which may be a quote).
    mutating func skipString() throws(Refused) {
        try expect(UInt8(ascii: "\""))
        while true {
            guard let byte = peek() else { throw Refused(reason: "unterminated string", offset: at) }
            at += 1
            if byte == UInt8(ascii: "\"") { return }
            if byte == UInt8(ascii: "\\") {
                guard let escape = peek() else { throw Refused(reason: "unterminated escape", offset: at) }
                at += 1
                guard escape == UInt8(ascii: "u") else { continue }
                for _ in 0..<4 {
                    guard let next = peek(), next != UInt8(ascii: "\"") else { throw Refused(reason: "a quote in a \\u escape", offset: at) }
                    at += 1
                }
            }
        }
    }

    /// A string's scalars, decoded strictly.
    mutating func string() throws(Refused) -> [UInt32] {
        try expect(UInt8(ascii: "\""))
        var scalars: [UInt32] = []
        while true {
            guard let byte = peek() else { throw Refused(reason: "unterminated string", offset: at) }
            switch byte {
            case UInt8(ascii: "\""):
                at += 1
                return scalars
            case UInt8(ascii: "\\"):
                at += 1
                guard let escape = peek() else { throw Refused(reason: "unterminated escape", offset: at) }
                at += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): scalars.append(UInt32(escape))
                case UInt8(ascii: "b"): scalars.append(8)
                case UInt8(ascii: "f"): scalars.append(12)
                case UInt8(ascii: "n"): scalars.append(10)
                case UInt8(ascii: "r"): scalars.append(13)
                case UInt8(ascii: "t"): scalars.append(9)
                case UInt8(ascii: "u"):
                    let unit = try hex4()
                    if (0xDC00...0xDFFF).contains(unit) { throw Refused(reason: "a lone low surrogate", offset: at) }
                    if (0xD800...0xDBFF).contains(unit) {
                        guard peek() == UInt8(ascii: "\\") else { throw Refused(reason: "a lone high surrogate", offset: at) }
                        at += 1
                        try expect(UInt8(ascii: "u"))
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw Refused(reason: "a high surrogate without its low", offset: at) }
                        scalars.append(0x10000 + (unit - 0xD800) * 0x400 + (low - 0xDC00))
                    } else {
                        scalars.append(unit)
                    }
                default:
                    throw Refused(reason: "an unknown escape", offset: at)
                }
            case 0x00..<0x20:
                throw Refused(reason: "a raw control character in a string", offset: at)
            case 0x20..<0x80:
                scalars.append(UInt32(byte))
                at += 1
            default:
                // The text is valid UTF-8 (checked before): the lead byte gives the length.
                let length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : 2
                var value = UInt32(byte) & (length == 2 ? 0x1F : length == 3 ? 0x0F : 0x07)
                for offset in 1..<length { value = value << 6 | (UInt32(text[at + offset]) & 0x3F) }
                scalars.append(value)
                at += length
            }
        }
    }

    mutating func hex4() throws(Refused) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let byte = peek() else { throw Refused(reason: "short \\u escape", offset: at) }
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw Refused(reason: "not a hex digit", offset: at)
            }
            value = value * 16 + digit
            at += 1
        }
        return value
    }
}

// MARK: the comparisons

/// The scanner's findings in the reference's terms.
private func translated(_ findings: [DuplicateKeyScanner.Finding]) -> [ReferenceDetector.Report] {
    func scalars(_ bytes: [UInt8]) -> [UInt32] { String(decoding: bytes, as: UTF8.self).unicodeScalars.map(\.value) }
    return findings.map { finding in
        ReferenceDetector.Report(duplicate: finding.kind == .duplicate,
                                 path: finding.path.map { component in
                                     switch component {
                                     case .key(let key): .key(scalars(key))
                                     case .index(let index): .index(index)
                                     }
                                 },
                                 key: scalars(finding.key), offset: finding.offset)
    }
}

/// Check 3: in each object whose keys are ASCII and distinct, the decoder sees them all.
private func compareKeys(_ node: ReferenceDetector.Node, _ decoded: JSONValue, path: String = "") {
    switch (node, decoded) {
    case (.scalar, _):
        break
    case (.undecodable(let offset), _):
        fail("at \(path): the decoder decodes the string at offset \(offset), which the reference cannot")
    case (.array(let elements), .array(let values)):
        guard elements.count == values.count else { fail("at \(path): \(elements.count) elements, the decoder has \(values.count)") }
        for (index, element) in elements.enumerated() { compareKeys(element, values[index], path: path + "[\(index)]") }
    case (.object(let members), .object(let values)):
        let decodedKeys = members.compactMap(\.key)
        // The loader refuses these (and the decoder accepts a key it cannot decode only there).
        guard decodedKeys.count == members.count, decodedKeys.allSatisfy({ $0.allSatisfy { $0 < 0x80 } }),
              Set(decodedKeys).count == members.count else { return }
        let keys = decodedKeys.map { String(String.UnicodeScalarView($0.compactMap(Unicode.Scalar.init))) }
        guard Set(keys) == Set(values.keys), values.count == members.count else {
            fail("at \(path): the keys \(keys) are distinct, the decoder has \(values.keys.sorted())")
        }
        for (member, name) in zip(members, keys) {
            compareKeys(member.value, values[name]!, path: path + "." + name)
        }
    default:
        fail("at \(path): the reference and the decoder disagree on the kind of value")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    // What the loader does first: text that is not UTF-8 reaches neither reader.
    guard ManifestText.encodingProblem(in: bytes) == nil,
          let decoded = try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)) else { return 0 }
    let tree: ReferenceDetector.Node
    do {
        tree = try ReferenceDetector.parse(bytes)
    } catch {
        fail("JSONDecoder accepts what the reference refuses (\(error.reason) at offset \(error.offset))")
    }
    var (expected, undecodable) = ReferenceDetector.reports(tree)
    var found = translated(DuplicateKeyScanner.findings(in: bytes))
    if let undecodable {
        // Never decoded, so inside the value of a repeated key, where the loader refuses the file.
        guard expected.contains(where: { $0.duplicate && $0.offset < undecodable }) else {
            fail("JSONDecoder accepts a string the reference cannot decode (offset \(undecodable)), with no repeated key before it")
        }
        found = found.filter { $0.offset < undecodable }
        expected = expected.filter { $0.offset < undecodable }
    }
    if found != expected {
        fail("the scan reports \(found), the reference \(expected)")
    }
    compareKeys(tree, decoded)
    return 0
}
