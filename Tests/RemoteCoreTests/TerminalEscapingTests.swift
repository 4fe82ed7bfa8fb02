import FoundationEssentials
@testable import RemoteCore
import Testing

/// The one escaping of what a manifest, a service or a peer wrote before the host prints it
/// (`String.escapedForTerminal`, `String(decodingForTerminal:)`), and JSON output's own
/// escaping of the same scalars (`String(jsonForTerminal:)`).
@Suite("Escaping for the terminal")
struct TerminalEscapingTests {
    @Test("C0 and C1 controls, DEL and the bidi embedding, override and isolate controls are escaped as \\u{XX}")
    func controls() {
        #expect("\u{7}\u{1B}[31mred".escapedForTerminal() == #"\u{07}\u{1B}[31mred"#)
        #expect("a\nb\rc\td\u{0}".escapedForTerminal() == #"a\u{0A}b\u{0D}c\u{09}d\u{00}"#)
        #expect("\u{7F}\u{80}\u{85}\u{9B}\u{9F}".escapedForTerminal() == #"\u{7F}\u{80}\u{85}\u{9B}\u{9F}"#)
        #expect("com.example.\u{202E}lmth".escapedForTerminal() == #"com.example.\u{202E}lmth"#)
        for scalar in [0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069] as [UInt32] {
            let text = String(Unicode.Scalar(scalar)!)
            #expect(text.escapedForTerminal() == "\\u{\(String(scalar, radix: 16, uppercase: true))}")
        }
    }

    @Test("ordinary text is left as it is: right-to-left text, LRM and RLM, emoji, combining marks, a backslash")
    func ordinaryText() {
        for text in ["Mail", "שלום עולם", "مرحبا\u{200F}", "a\u{200E}b\u{061C}", "👋🏽 👨‍👩‍👧", "e\u{301}", "ÿ\u{A0}", #"C:\path \u{1B}"#, ""] {
            #expect(text.escapedForTerminal() == text, "\(text.unicodeScalars.map(\.value))")
        }
    }

    @Test("escaping twice changes nothing")
    func idempotent() {
        let once = "\u{1B}]0;title\u{7}\u{202E}x\u{9B}".escapedForTerminal()
        #expect(once.escapedForTerminal() == once)
        #expect(!once.unicodeScalars.contains { $0.isEscapedForTerminal })
    }

    @Test("asciiOnly also escapes every scalar beyond ASCII, so a look-alike key shows as what it is")
    func asciiOnly() {
        #expect("networ\u{212A}".escapedForTerminal(asciiOnly: true) == #"networ\u{212A}"#)
        #expect("n\u{E9}twork\u{1B}".escapedForTerminal(asciiOnly: true) == #"n\u{E9}twork\u{1B}"#)
        #expect("networK".escapedForTerminal(asciiOnly: true) == "networK")
    }

    @Test("bytes that are not well-formed UTF-8 are escaped as \\xFF, each byte, and the valid text around them is kept")
    func invalidBytes() {
        #expect(String(decodingForTerminal: Array("plain é 👋".utf8)) == "plain é 👋")
        #expect(String(decodingForTerminal: [0x61, 0xFF, 0x62]) == #"a\xFFb"#)
        #expect(String(decodingForTerminal: [0xC0, 0xAF]) == #"\xC0\xAF"#, "an overlong '/'")
        #expect(String(decodingForTerminal: [0xE0, 0x80, 0xAF]) == #"\xE0\x80\xAF"#, "an overlong '/' in three bytes")
        #expect(String(decodingForTerminal: [0xED, 0xA0, 0x80]) == #"\xED\xA0\x80"#, "a surrogate (CESU-8)")
        #expect(String(decodingForTerminal: [0xF4, 0x90, 0x80, 0x80]) == #"\xF4\x90\x80\x80"#, "above U+10FFFF")
        #expect(String(decodingForTerminal: [0xE2, 0x82]) == #"\xE2\x82"#, "truncated")
        #expect(String(decodingForTerminal: [0xE2, 0x82, 0x41]) == #"\xE2\x82A"#, "truncated, then ASCII")
        #expect(String(decodingForTerminal: [0x1B, 0x5B, 0x32, 0x4A, 0xC2, 0x9B]) == #"\u{1B}[2J\u{9B}"#, "controls in valid UTF-8")
        #expect(String(decodingForTerminal: [0xE2, 0x80, 0xAE]) == #"\u{202E}"#)
    }

    @Test("every scalar is either kept or escaped, and the escaped text holds no scalar a terminal acts on")
    func everyScalar() {
        for value in UInt32(0)...0x3000 {
            guard let scalar = Unicode.Scalar(value) else { continue }
            let escaped = String(scalar).escapedForTerminal()
            #expect(escaped == (scalar.isEscapedForTerminal ? "\\u{\(value < 16 ? "0" : "")\(String(value, radix: 16, uppercase: true))}" : String(scalar)))
            #expect(!escaped.unicodeScalars.contains { $0.isEscapedForTerminal })
        }
    }

    @Test("errors, failures and updates that quote a peer print escaped: a codec refusal, a refused URL or file name, RemoteError, ServiceFailure, ActivityUpdate")
    func quotedByMessages() throws {
        func isSafe(_ text: String?) -> Bool { text.map { !$0.unicodeScalars.contains { $0.isEscapedForTerminal } } ?? false }
        let identifier = #expect(throws: RemoteError.self) { try EnvelopeCodec.checkIdentifier("com.example.\u{1B}]0;x\u{7}") }
        #expect(isSafe(identifier?.reason) && identifier?.reason.contains(#"com.example.\u{1B}]0;x\u{07}"#) == true, "\(String(describing: identifier))")
        let type = #expect(throws: RemoteError.self) { try EnvelopeCodec.checkType("echo\u{9B}2J", "request") }
        #expect(isSafe(type?.reason), "\(String(describing: type))")
        let url = #expect(throws: RemoteError.self) { try ShareItem.url("https://example.com/\u{1B}[2J") }
        #expect(isSafe(url?.reason) && url?.reason.contains(#"\u{1B}[2J"#) == true, "\(String(describing: url))")
        let name = #expect(throws: RemoteError.self) { try ShareItem.file(named: "a/\u{202E}fdp.exe", contentType: "text/plain", contents: [0]) }
        #expect(isSafe(name?.reason), "\(String(describing: name))")
        #expect(isSafe(RemoteError(.interrupted, "the peer closed the connection: \u{1B}[2J").description))
        #expect(isSafe(ServiceFailure(domain: "com.example\u{202E}", code: 1, message: "no\u{7}").description))
        #expect(isSafe(ActivityUpdate(title: "Posting\u{1B}[2J", subtitle: "\u{2066}x", progress: 0.5, state: .working).description))
    }

    @Test("JSON output: JSONEncoder escapes C0 itself; DEL, C1 and bidi controls are escaped as \\uXXXX, and the value reads back unchanged")
    func json() throws {
        let value = ["title": "\u{7}\u{1B}[31mred\u{7F}\u{85}\u{202E}x\u{2066}y\u{0} שלום 👋"]
        let encoded = try JSONEncoder().encode(value)
        let plain = String(decoding: encoded, as: UTF8.self)
        #expect(plain.contains(#"\u0007\u001b[31m"#) && plain.contains(#"\u0000"#), "JSONEncoder escapes C0: \(plain)")
        #expect(!plain.unicodeScalars.contains { $0.value < 0x20 })
        let safe = String(jsonForTerminal: encoded)
        #expect(!safe.unicodeScalars.contains { $0.isEscapedForTerminal }, "\(safe)")
        #expect(safe.contains(#"\u007f\u0085\u202ex\u2066y"#) && safe.contains("שלום 👋"), "\(safe)")
        #expect(try JSONDecoder().decode([String: String].self, from: Data(safe.utf8)) == value)
        // Pretty-printed: the white space between values stays, the strings' controls are escaped.
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let pretty = String(jsonForTerminal: try encoder.encode(["a": value, "b": ["x": "line\nfeed\u{202E}"]]))
        #expect(pretty.contains("\n  \"a\" : {\n") && pretty.contains(#""line\nfeed\u202e""#), "\(pretty)")
        #expect(!pretty.unicodeScalars.contains { $0.isEscapedForTerminal && !["\n", "\t", "\r"].contains($0) })
        #expect(try JSONDecoder().decode([String: [String: String]].self, from: Data(pretty.utf8))["a"] == value)
    }
}
