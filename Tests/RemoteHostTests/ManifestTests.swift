import FoundationEssentials
import Glibc
@testable import RemoteHost
import RemoteTestSupport
import Testing

/// Manifests and the registry, in memory and on disk: every invalid value is refused with the
/// file, the key and the reason, and one bad manifest never hides the good ones.
@Suite("Manifests and the registry")
struct ManifestTests {
    /// A folder with an executable called `service` (a shell script is enough to validate).
    static func folder(_ manifests: [String: String]) throws -> TemporaryFolder {
        let folder = try TemporaryFolder("remoteview-manifests")
        try folder.write("service", "#!/bin/sh\nexit 0\n", mode: 0o755)
        try write(iconPNG, to: folder.path + "/icon.png")
        for (name, json) in manifests { try folder.write(name, json) }
        return folder
    }

    /// A 4 × 4 PNG.
    static let iconPNG = try! RemoteImage(width: 4, height: 4) { _, _ in 0xFF00_80FF }.pngData()

    static let valid = """
        {
          "identifier": "com.example.mail",
          "executable": "service",
          "arguments": ["--share"],
          "display": { "title": "Mail", "subtitle": "Send by mail", "icon": "icon.png" },
          "activation": { "contentTypes": [ { "type": "text/plain", "min": 1, "max": 5 }, { "type": "Image/*", "max": 10 } ] },
          "sandbox": { "network": true, "readOnlyPaths": ["/usr/share"], "dataFolder": true },
          "idleTimeout": 2.5,
          "instances": "perConnection",
          "limits": { "memoryMiB": 128, "openFiles": 64, "processes": 4, "cpuSeconds": 30 }
        }
        """

    @Test("a complete manifest decodes to the values it states, with paths resolved against its folder")
    func complete() throws {
        let folder = try Self.folder(["mail.json": Self.valid])
        defer { folder.remove() }
        let manifest = try ServiceRegistry.load(file: folder.path + "/mail.json")
        #expect(manifest.identifier == "com.example.mail")
        #expect(manifest.executablePath == folder.path + "/service")
        #expect(manifest.arguments == ["--share"])
        #expect(manifest.display.subtitle == "Send by mail")
        #expect(manifest.icon?.path == folder.path + "/icon.png" && manifest.icon?.pngData == Self.iconPNG)
        #expect(manifest.icon?.width == 4 && manifest.icon?.height == 4)
        #expect(manifest.activation?.contentTypes.map(\.type) == ["text/plain", "image/*"], "stored in lower case")
        #expect(manifest.activation?.contentTypes[1].min == 1 && manifest.activation?.contentTypes[1].max == 10)
        #expect(manifest.sandbox.network && manifest.sandbox.readOnlyPaths == ["/usr/share"] && manifest.sandbox.dataFolder)
        #expect(manifest.idleTimeout == .milliseconds(2500))
        #expect(manifest.instances == .perConnection)
        #expect(manifest.limits == ServiceManifest.Limits(memoryMiB: 128, openFiles: 64, processes: 4, cpuSeconds: 30))
    }

    @Test("a minimal manifest gets the documented defaults")
    func defaults() throws {
        let folder = try Self.folder(["min.json": #"{"identifier": "com.example.min", "executable": "service", "display": {"title": "Min"}}"#])
        defer { folder.remove() }
        let manifest = try ServiceRegistry.load(file: folder.path + "/min.json")
        #expect(manifest.arguments.isEmpty && manifest.activation == nil)
        #expect(manifest.sandbox == ServiceManifest.Sandbox(network: false, readOnlyPaths: [], dataFolder: false))
        #expect(manifest.idleTimeout == ServiceManifest.defaultIdleTimeout)
        #expect(manifest.instances == .shared)
        #expect(manifest.limits == ServiceManifest.Limits())
    }

    /// (what to change in the valid manifest, the key the error must name, words the reason must contain)
    static let invalid: [(String, String, String, String?)] = [
        (#""identifier": "com.example.mail""#, #""identifier": "mail""#, "identifier", "reverse-DNS"),
        (#""identifier": "com.example.mail""#, #""identifier": "com..mail""#, "identifier", "reverse-DNS"),
        (#""identifier": "com.example.mail""#, #""identifier": "com.-bad.mail""#, "identifier", "reverse-DNS"),
        (#""identifier": "com.example.mail""#, #""identifier": 42"#, "identifier", "expected a string"),
        (#""executable": "service""#, #""executable": "missing""#, "executable", "No such file"),
        (#""executable": "service""#, #""executable": "icon.png""#, "executable", "not an executable"),
        (#""executable": "service""#, #""executable": """#, "executable", "non-empty"),
        (#""title": "Mail""#, #""title": """#, "display.title", "1 to 200"),
        (#""title": "Mail", "#, "", "display.title", "missing"),
        (#""min": 1, "max": 5"#, #""min": 6, "max": 5"#, "activation.contentTypes[0].max", "at least min"),
        (#""min": 1, "max": 5"#, #""min": 1, "max": 17"#, "activation.contentTypes[0].max", "a share carries at most 16 items"),
        (#""min": 1, "max": 5"#, #""min": 17, "max": 17"#, "activation.contentTypes[0].min", "0...16"),
        (#""min": 1, "max": 5"#, #""min": -1, "max": 5"#, "activation.contentTypes[0].min", "0...16"),
        (#""min": 1, "max": 5"#, #""min": 0, "max": 0"#, "activation.contentTypes[0].max", "1...16"),
        (#""type": "text/plain""#, #""type": "public.png""#, "activation.contentTypes[0].type",
         #""public.png" is not a MIME type (type/subtype, or type/* for a whole family, e.g. image/*)"#),
        (#""type": "text/plain""#, #""type": "plain text!""#, "activation.contentTypes[0].type", "is not a MIME type"),
        (#""type": "text/plain""#, #""type": "*/*""#, "activation.contentTypes[0].type", "is not a MIME type"),
        (#""type": "text/plain""#, #""type": "image/png*""#, "activation.contentTypes[0].type", "is not a MIME type"),
        (#""type": "text/plain""#, #""type": "text/plain; charset=utf-8""#, "activation.contentTypes[0].type", "is not a MIME type"),
        (#""contentTypes": [ { "type": "text/plain", "min": 1, "max": 5 }, { "type": "Image/*", "max": 10 } ]"#, #""contentTypes": []"#, "activation.contentTypes", "1 to 32"),
        (#""network": true"#, #""network": "yes""#, "sandbox.network", "true or false"),
        (#""dataFolder": true"#, #""dataFolder": 1"#, "sandbox.dataFolder", "true or false"),
        (#""readOnlyPaths": ["/usr/share"]"#, #""readOnlyPaths": ["relative/path"]"#, "sandbox.readOnlyPaths", "absolute"),
        (#""readOnlyPaths": ["/usr/share"]"#, #""readOnlyPaths": ["/usr/../etc"]"#, "sandbox.readOnlyPaths", "normalised"),
        (#""readOnlyPaths": ["/usr/share"]"#, #""readOnlyPaths": ["/nonexistent/path"]"#, "sandbox.readOnlyPaths[0]", "cannot be bound"),
        (#""idleTimeout": 2.5"#, #""idleTimeout": 0"#, "idleTimeout", "[0.1, 86400]"),
        (#""idleTimeout": 2.5"#, #""idleTimeout": -1"#, "idleTimeout", "[0.1, 86400]"),
        (#""idleTimeout": 2.5"#, #""idleTimeout": 1e-300"#, "idleTimeout", "before it can start"),
        (#""readOnlyPaths": ["/usr/share"]"#, #""readOnlyPaths": ["/etc"]"#, "sandbox.readOnlyPaths[0]", "/etc as a whole"),
        (#""readOnlyPaths": ["/usr/share"]"#, #""readOnlyPaths": ["/usr/share", "/proc"]"#, "sandbox.readOnlyPaths[1]", "/proc is never bound"),
        (#""readOnlyPaths": ["/usr/share"]"#, #""readOnlyPaths": ["/proc/self/environ"]"#, "sandbox.readOnlyPaths[0]", "refused"),
        (#""readOnlyPaths": ["/usr/share"]"#, #""readOnlyPaths": ["/sys"]"#, "sandbox.readOnlyPaths[0]", "/sys is never bound"),
        (#""readOnlyPaths": ["/usr/share"]"#, #""readOnlyPaths": ["/dev"]"#, "sandbox.readOnlyPaths[0]", "/dev is never bound"),
        (#""readOnlyPaths": ["/usr/share"]"#, #""readOnlyPaths": ["/root"]"#, "sandbox.readOnlyPaths[0]", "/root is never bound"),
        (#""readOnlyPaths": ["/usr/share"]"#, #""readOnlyPaths": ["/run"]"#, "sandbox.readOnlyPaths[0]", "/run is never bound"),
        (#""readOnlyPaths": ["/usr/share"]"#, #""readOnlyPaths": ["/tmp"]"#, "sandbox.readOnlyPaths[0]", "/tmp is never bound"),
        (#""readOnlyPaths": ["/usr/share"]"#, #""readOnlyPaths": ["/etc/shadow"]"#, "sandbox.readOnlyPaths[0]", "/etc/shadow is never bound"),
        (#""readOnlyPaths": ["/usr/share"]"#, #""readOnlyPaths": ["/etc/ssl"]"#, "sandbox.readOnlyPaths[0]", "it contains /etc/ssl/private"),
        (#""readOnlyPaths": ["/usr/share"]"#, #""readOnlyPaths": ["/var"]"#, "sandbox.readOnlyPaths[0]", "it contains"),
        (#""readOnlyPaths": ["/usr/share"]"#, #""readOnlyPaths": ["/var/run"]"#, "sandbox.readOnlyPaths[0]", "/run is never bound"),
        (#""readOnlyPaths": ["/usr/share"]"#, #""readOnlyPaths": ["/"]"#, "sandbox.readOnlyPaths", "below /"),
        (#""network": true"#, #""network": true, "network": false"#, "sandbox.network", "appears twice"),
        (#""network": true"#, #""network": true, "network": false"#, "sandbox.network", "appears twice"),
        (#""identifier": "com.example.mail","#, #""identifier": "com.example.mail", "identifier": "com.example.other","#, "identifier", "appears twice"),
        (#""max": 10"#, #""max": 10, "max": 1"#, "activation.contentTypes[1].max", "appears twice"),
        (#""instances": "perConnection""#, #""instances": "pooled""#, "instances", nil),
        (#""memoryMiB": 128"#, #""memoryMiB": 1"#, "limits.memoryMiB", "16...65536"),
        (#""openFiles": 64"#, #""openFiles": 1000000"#, "limits.openFiles", "16...65536"),
        (#""processes": 4"#, #""processes": 0"#, "limits.processes", "1...4096"),
        (#""cpuSeconds": 30"#, #""cpuSeconds": 1.5"#, "limits.cpuSeconds", nil),
        (#""identifier": "com.example.mail","#, #""identifier": "com.example.mail", "colour": "blue","#, "colour", "unknown key"),
        (#""network": true"#, #""network": true, "camera": true"#, "sandbox.camera", "unknown key"),
        (#""max": 10"#, #""max": 10, "maximum": 3"#, "activation.contentTypes[1].maximum", "unknown key"),
    ]

    @Test("every invalid value is refused, naming the file, the key and the reason", arguments: 0..<invalid.count)
    func refused(_ index: Int) throws {
        let (original, replacement, key, words) = Self.invalid[index]
        #expect(Self.valid.contains(original), "test table out of date: \(original)")
        let folder = try Self.folder(["bad.json": Self.valid.replacing(original, with: replacement)])
        defer { folder.remove() }
        let error = #expect(throws: ManifestError.self) { try ServiceRegistry.load(file: folder.path + "/bad.json") }
        #expect(error?.file == folder.path + "/bad.json")
        #expect(error?.key == key, "\(String(describing: error))")
        if let words { #expect(error?.reason.contains(words) == true, "\(String(describing: error))") }
    }

    @Test("readOnlyPaths are checked with their links resolved: a link to /proc is refused, and one to a shareable folder is fine")
    func readOnlyPathLinks() throws {
        let folder = try Self.folder([:])
        defer { folder.remove() }
        #expect(symlink("/proc", folder.path + "/proc-link") == 0 && symlink("/usr/share", folder.path + "/share-link") == 0)
        try folder.write("mail.json", Self.valid.replacing(#""readOnlyPaths": ["/usr/share"]"#, with: #""readOnlyPaths": ["\#(folder.path)/share-link"]"#))
        #expect(try ServiceRegistry.load(file: folder.path + "/mail.json").sandbox.readOnlyPaths == [folder.path + "/share-link"])
        try folder.write("mail.json", Self.valid.replacing(#""readOnlyPaths": ["/usr/share"]"#,
                                                           with: #""readOnlyPaths": ["\#(folder.path)/share-link", "\#(folder.path)/proc-link"]"#))
        let error = #expect(throws: ManifestError.self) { try ServiceRegistry.load(file: folder.path + "/mail.json") }
        #expect(error?.key == "sandbox.readOnlyPaths[1]" && error?.reason.contains("(/proc) is refused") == true, "\(String(describing: error))")
    }

    @Test("a FIFO or a link to a device named *.json is reported without being opened, and the other services are listed")
    func fifoManifest() async throws {
        let folder = try Self.folder(["mail.json": Self.valid])
        defer { folder.remove() }
        #expect(mkfifo(folder.path + "/fifo.json", 0o644) == 0)
        #expect(symlink("/dev/zero", folder.path + "/zero.json") == 0)
        // Opening the FIFO for reading would block until a writer came: this must return.
        let registry = try await withDeadline(.seconds(5), "scanning a folder with a FIFO") { ServiceRegistry(scanning: [folder.path]) }
        #expect(registry.sortedServices.map(\.identifier) == ["com.example.mail"])
        let problems = registry.problems.map(\.description).sorted()
        #expect(problems == [folder.path + "/fifo.json: not a regular file (a FIFO, device, socket or folder)",
                             folder.path + "/zero.json: not a regular file (a FIFO, device, socket or folder)"], "\(problems)")
        SecurityTable.record("a FIFO (and a link to `/dev/zero`) named `*.json` in a manifest folder",
                             "reported as \"not a regular file\" without being opened; the other manifests are listed",
                             contained: registry.sortedServices.count == 1 && problems.count == 2)
    }

    @Test("not JSON, not an object, too large: refused for the whole file", arguments: ["{", "[]", "null", String(repeating: " ", count: 70_000) + "{}"])
    func notAManifest(_ text: String) throws {
        let folder = try Self.folder(["bad.json": text])
        defer { folder.remove() }
        let error = #expect(throws: ManifestError.self) { try ServiceRegistry.load(file: folder.path + "/bad.json") }
        #expect(error?.key == nil, "\(String(describing: error))")
    }

    @Test("the registry lists the valid services and reports each invalid one without hiding the rest")
    func registry() throws {
        let first = try Self.folder([
            "mail.json": Self.valid,
            "broken.json": Self.valid.replacing(#""com.example.mail""#, with: #""com.example.broken""#).replacing(#""idleTimeout": 2.5"#, with: #""idleTimeout": "soon""#),
            "garbage.json": "not json",
            "notes.txt": "ignored: not a .json file",
        ])
        let second = try Self.folder([
            "dup.json": Self.valid,
            "echo.json": #"{"identifier": "com.example.echo", "executable": "service", "display": {"title": "Echo"}}"#,
        ])
        defer { first.remove(); second.remove() }
        let registry = ServiceRegistry(scanning: [first.path, second.path, "/nonexistent/folder"])
        #expect(registry.sortedServices.map(\.identifier) == ["com.example.echo", "com.example.mail"])
        #expect(registry.services["com.example.mail"]?.file == first.path + "/mail.json")
        let problems = registry.problems.map(\.description)
        #expect(problems.count == 4, "\(problems)")
        #expect(problems.contains { $0.hasPrefix(first.path + "/broken.json: idleTimeout: expected a number") })
        #expect(problems.contains { $0.hasPrefix(first.path + "/garbage.json: not valid JSON") })
        #expect(problems.contains { $0.hasPrefix(second.path + "/dup.json: identifier: \"com.example.mail\" is already declared by") })
        #expect(problems.contains { $0.hasPrefix("/nonexistent/folder: cannot read the manifest folder") })

        guard case .failure(.invalid(let problem)) = registry.lookup("com.example.broken") else {
            Issue.record("the broken manifest must be found as invalid")
            return
        }
        #expect(problem.key == "idleTimeout")
        guard case .failure(.unknown) = registry.lookup("com.example.none") else {
            Issue.record("an unknown identifier is unknown")
            return
        }
        guard case .success(let echo) = registry.lookup("com.example.echo") else {
            Issue.record("echo is valid")
            return
        }
        #expect(echo.display.title == "Echo")
    }
}

// MARK: issue 25, finding 3: what the duplicate-key scan and the decoder read must be the same text

/// Writes `bytes` to `name` in `folder` (the helper writes UTF-8 strings only).
private func write(_ bytes: [UInt8], to path: String) throws {
    let fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0o644)
    guard fd >= 0 else { throw SystemCallError(call: "open(\(path))", errno: errno) }
    defer { close(fd) }
    guard bytes.withUnsafeBytes({ Glibc.write(fd, $0.baseAddress, $0.count) }) == bytes.count else {
        throw SystemCallError(call: "write(\(path))", errno: errno)
    }
}

@Suite("Manifests: the text is UTF-8, keys compare byte for byte")
struct ManifestEncodingTests {
    /// The valid manifest with a duplicate written through an escape, which a UTF-16 reader and
    /// the decoder would take as the first `network`, jq and Python as the last.
    static let duplicate = ManifestTests.valid.replacing(#""network": true"#, with: #""network": true, "netw\u006frk": false"#)

    static func utf16(_ text: String, bigEndian: Bool = false) -> [UInt8] {
        text.utf16.flatMap { bigEndian ? [UInt8($0 >> 8), UInt8($0 & 0xFF)] : [UInt8($0 & 0xFF), UInt8($0 >> 8)] }
    }

    static func utf32(_ text: String) -> [UInt8] {
        text.unicodeScalars.flatMap { scalar in (0..<4).map { UInt8((scalar.value >> (8 * $0)) & 0xFF) } }
    }

    /// (what the file holds, words its refusal must say)
    static let encodings: [(String, [UInt8], [String])] = [
        ("UTF-16LE with its byte-order mark", [0xFF, 0xFE] + utf16(duplicate), ["UTF-16", "must be UTF-8"]),
        ("UTF-16LE without a byte-order mark", utf16(duplicate), ["UTF-16", "must be UTF-8"]),
        ("UTF-16BE with its byte-order mark", [0xFE, 0xFF] + utf16(duplicate, bigEndian: true), ["UTF-16", "must be UTF-8"]),
        ("UTF-16BE without a byte-order mark", utf16(duplicate, bigEndian: true), ["UTF-16", "must be UTF-8"]),
        ("UTF-32LE with its byte-order mark", [0xFF, 0xFE, 0, 0] + utf32(duplicate), ["UTF-32", "must be UTF-8"]),
        ("UTF-32LE without a byte-order mark", utf32(duplicate), ["UTF-32", "must be UTF-8"]),
        ("UTF-8 with a byte-order mark", [0xEF, 0xBB, 0xBF] + Array(ManifestTests.valid.utf8), ["byte-order mark", "UTF-8 without one"]),
        ("invalid UTF-8 (a Latin-1 é in the title)", Array(ManifestTests.valid.utf8).replacing(Array("Mail".utf8), with: [0x4D, 0xE9]),
         ["not UTF-8", "0xE9", "offset"]),
        ("a NUL byte", Array(ManifestTests.valid.utf8) + [0], ["NUL", "offset"]),
    ]

    @Test("a manifest that is not UTF-8 is refused, saying so, before the duplicate-key scan or the decoder reads it",
          arguments: 0..<encodings.count)
    func notUTF8(_ index: Int) throws {
        let (what, bytes, words) = Self.encodings[index]
        let folder = try ManifestTests.folder([:])
        defer { folder.remove() }
        try write(bytes, to: folder.path + "/bad.json")
        let error = #expect(throws: ManifestError.self, "\(what)") { try ServiceRegistry.load(file: folder.path + "/bad.json") }
        #expect(error?.key == nil, "\(what): \(String(describing: error))")
        for word in words { #expect(error?.reason.contains(word) == true, "\(what): \(String(describing: error))") }
        #expect(error.map { !$0.description.unicodeScalars.contains { $0.value == 0 } } == true, "no raw NUL in \(String(describing: error))")
    }

    @Test("the same duplicate in UTF-8 is caught with its path")
    func escapedDuplicate() throws {
        let folder = try ManifestTests.folder(["dup.json": Self.duplicate])
        defer { folder.remove() }
        let error = #expect(throws: ManifestError.self) { try ServiceRegistry.load(file: folder.path + "/dup.json") }
        #expect(error?.key == "sandbox.network" && error?.reason.contains("appears twice") == true, "\(String(describing: error))")
    }

    @Test("a key that is not ASCII is refused with its path, escaped: the Kelvin sign is not K, é is not e\\u{301}",
          arguments: [(#""networ\u212A": false"#, #"sandbox.networ\u{212A}"#),
                      ("\"networ\u{212A}\": false", #"sandbox.networ\u{212A}"#),
                      (#""n\u00e9twork": false"#, #"sandbox.n\u{E9}twork"#),
                      (#""ne\u0301twork": false"#, #"sandbox.ne\u{301}twork"#),
                      (#""network\u202e": false"#, #"sandbox.network\u{202E}"#)])
    func notASCIIKey(_ key: String, _ shown: String) throws {
        let folder = try ManifestTests.folder(["key.json": ManifestTests.valid.replacing(#""network": true"#, with: #""network": true, "# + key)])
        defer { folder.remove() }
        let error = #expect(throws: ManifestError.self) { try ServiceRegistry.load(file: folder.path + "/key.json") }
        #expect(error?.key == shown, "\(String(describing: error))")
        #expect(error?.reason.contains("not ASCII") == true, "\(String(describing: error))")
        #expect(error.map { !$0.description.unicodeScalars.contains { !$0.isASCII } } == true, "\(String(describing: error))")
    }

    @Test("the scan compares keys byte for byte after unescaping, and reports every key that is not ASCII, with its path")
    func scanner() {
        func findings(_ json: String) -> [String] {
            DuplicateKeyScanner.findings(in: Array(json.utf8)).map { "\($0.kind) \($0.keyPath)" }
        }
        #expect(findings(#"{"K": 1, "\u212A": 2}"#) == [#"notASCII \u{212A}"#], "Set<String> and JSONDecoder take these as one key")
        #expect(findings("{\"\u{E1}\": 1, \"a\u{301}\": 2}") == [#"notASCII \u{E1}"#, #"notASCII a\u{301}"#])
        #expect(findings(#"{"a": {"b": 1, "\u0062": 2}, "c": [{"d": 0}, {"d": 1, "d": 2}]}"#) == ["duplicate a.b", "duplicate c[1].d"])
        #expect(findings(#"{"a\"b": 1, "a\u0022b": 2, "x\\": 1, "x\u005c": 2}"#) == [#"duplicate a"b"#, #"duplicate x\"#])
        #expect(findings(#"[{"a": 1,}, {"a": 1, "a": 2,},]"#) == ["duplicate [1].a"], "JSONDecoder takes trailing commas")
        #expect(findings(#"{"a": "{\"a\": 1, \"a\": 2}"}"#).isEmpty, "a string is not an object")
    }
}

// MARK: issue 25, finding 4: what a manifest says reaches the terminal escaped

@Suite("Manifests: titles and errors are safe to print")
struct ManifestTextSafetyTests {
    /// (the title or subtitle as JSON writes it, the key refused, the character named)
    static let refused: [(String, String, String)] = [
        (#""title": "\u0007\u001b[31mred""#, "display.title", "U+0007"),
        (#""title": "Mail\u001b]0;pwned\u0007""#, "display.title", "U+001B"),
        (#""title": "Mail\u007f""#, "display.title", "U+007F"),
        (#""title": "Mail\u009b31m""#, "display.title", "U+009B"),
        (#""title": "Mail\n2""#, "display.title", "U+000A"),
        (#""title": "lmth.\u202Eexe""#, "display.title", "U+202E"),
        (#""title": "a\u2066b\u2069""#, "display.title", "U+2066"),
        (#""subtitle": "Send \u202Aby mail""#, "display.subtitle", "U+202A"),
        (#""subtitle": "\u0085""#, "display.subtitle", "U+0085"),
    ]

    @Test("a title or subtitle with a C0 or C1 control, DEL, or a bidi embedding, override or isolate is refused, naming the key and the character",
          arguments: 0..<refused.count)
    func refusedText(_ index: Int) throws {
        let (json, key, character) = Self.refused[index]
        let original = key == "display.title" ? #""title": "Mail""# : #""subtitle": "Send by mail""#
        let folder = try ManifestTests.folder(["bad.json": ManifestTests.valid.replacing(original, with: json)])
        defer { folder.remove() }
        let error = #expect(throws: ManifestError.self) { try ServiceRegistry.load(file: folder.path + "/bad.json") }
        #expect(error?.key == key && error?.reason.contains(character) == true, "\(String(describing: error))")
    }

    @Test("right-to-left text, LRM and RLM, and emoji are fine in a title and a subtitle")
    func rightToLeft() throws {
        let json = ManifestTests.valid.replacing(#""title": "Mail""#, with: #""title": "דואר\u200F 📬""#)
            .replacing(#""subtitle": "Send by mail""#, with: #""subtitle": "\u200Eשלח בדואר (mail)""#)
        let folder = try ManifestTests.folder(["rtl.json": json])
        defer { folder.remove() }
        let manifest = try ServiceRegistry.load(file: folder.path + "/rtl.json")
        #expect(manifest.display.title == "דואר\u{200F} 📬" && manifest.display.subtitle == "\u{200E}שלח בדואר (mail)")
    }

    /// Whether `text` holds anything a terminal would act on.
    static func isSafe(_ text: String) -> Bool {
        !text.unicodeScalars.contains { $0.isEscapedForTerminal }
    }

    @Test("a refused identifier, a MIME type and a path are quoted escaped: U+202E cannot turn the line around")
    func quotedValues() throws {
        for (original, replacement, shown) in [
            (#""identifier": "com.example.mail""#, #""identifier": "com.example.\u202Elmth""#, #""com.example.\u{202E}lmth""#),
            (#""type": "text/plain""#, #""type": "text/\u001b[2Jplain""#, #""text/\u{1B}[2Jplain""#),
            (#""readOnlyPaths": ["/usr/share"]"#, #""readOnlyPaths": ["rel\u0007ative"]"#, #""rel\u{07}ative""#),
        ] {
            let folder = try ManifestTests.folder(["bad.json": ManifestTests.valid.replacing(original, with: replacement)])
            defer { folder.remove() }
            let error = #expect(throws: ManifestError.self) { try ServiceRegistry.load(file: folder.path + "/bad.json") }
            #expect(error.map { Self.isSafe($0.reason) && Self.isSafe($0.description) && $0.reason.contains(shown) } == true,
                    "\(String(describing: error))")
        }
    }

    @Test("a file name with controls is escaped in every message of the registry, and a lookup's error too")
    func fileName() throws {
        let name = "evil\u{1B}[2J\u{202E}nosj.json"
        let folder = try ManifestTests.folder([
            name: ManifestTests.valid.replacing(#""com.example.mail""#, with: "\"com.example.\\u001b]0;x\\u0007\"").replacing("Mail", with: "Evil"),
            "dup.json": ManifestTests.valid, "dup2.json": ManifestTests.valid,
        ])
        defer { folder.remove() }
        let registry = ServiceRegistry(scanning: [folder.path])
        #expect(registry.problems.count == 2, "\(registry.problems)")
        for problem in registry.problems {
            #expect(Self.isSafe(problem.description), "\(problem.description.unicodeScalars.map(\.value))")
        }
        #expect(registry.problems.contains { $0.description.contains(#"evil\u{1B}[2J\u{202E}nosj.json"#) }, "\(registry.problems)")
        guard case .failure(let lookup) = registry.lookup("com.example.\u{1B}]0;x\u{7}") else {
            Issue.record("the bad manifest must be found as invalid")
            return
        }
        #expect(Self.isSafe(lookup.description) && lookup.description.contains(#"com.example.\u{1B}]0;x\u{07}"#), "\(lookup.description)")
        guard case .failure(let unknown) = registry.lookup("no\u{7}such") else {
            Issue.record("an unknown identifier is unknown")
            return
        }
        #expect(Self.isSafe(unknown.description), "\(unknown.description)")
    }
}

// MARK: issue 25, finding 4: an icon is a small PNG from the manifest's folder or an icon folder

@Suite("Manifests: icons", .serialized)
struct ManifestIconTests {
    /// Loads `folder/mail.json` (the valid manifest with `"icon": ICON`) and returns the
    /// manifest and the registry's warnings.
    static func load(_ folder: TemporaryFolder, icon: String) throws -> (ServiceManifest, [ManifestError]) {
        try folder.write("mail.json", ManifestTests.valid.replacing(#""icon": "icon.png""#, with: #""icon": "\#(icon)""#))
        let registry = ServiceRegistry(scanning: [folder.path])
        #expect(registry.problems.isEmpty, "\(registry.problems)")
        var warnings: [ManifestError] = []
        let manifest = try ServiceRegistry.load(file: folder.path + "/mail.json", warnings: &warnings)
        #expect(registry.warnings == warnings, "the registry reports what load(file:warnings:) reports")
        return (manifest, warnings)
    }

    /// Expects `icon` to be left out with a warning on `display.icon` that says `words`.
    static func expectLeftOut(_ folder: TemporaryFolder, icon: String, _ words: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let (manifest, warnings) = try load(folder, icon: icon)
        #expect(manifest.icon == nil, "\(icon)", sourceLocation: sourceLocation)
        #expect(warnings.count == 1 && warnings.first?.key == "display.icon" && warnings.first?.reason.contains(words) == true,
                "\(icon): \(warnings)", sourceLocation: sourceLocation)
        #expect(warnings.first?.reason.hasSuffix("the service is listed without its icon") == true, sourceLocation: sourceLocation)
        #expect(ShareActivity(manifest: manifest).icon == nil, sourceLocation: sourceLocation)
    }

    @Test("an icon outside the manifest's folder and the icon folders is left out, with a warning: /etc/shadow is never opened")
    func outside() throws {
        let folder = try ManifestTests.folder([:])
        defer { folder.remove() }
        try Self.expectLeftOut(folder, icon: "/etc/shadow", "is neither in the manifest's folder nor in an icon folder")
        try Self.expectLeftOut(folder, icon: "/proc/self/environ", "is neither in the manifest's folder nor in an icon folder")
        try Self.expectLeftOut(folder, icon: "../icon.png", "leads out of")
        try Self.expectLeftOut(folder, icon: folder.path + "/../../etc/passwd", "leads out of")
    }

    @Test("a symbolic link in the folder that leads out of it is refused on the opened path (openat2, RESOLVE_BENEATH); one that stays in is fine")
    func links() throws {
        let folder = try ManifestTests.folder([:])
        let outside = try TemporaryFolder("remoteview-icon-outside")
        defer { rmdir(folder.path + "/sub"); folder.remove(); outside.remove() }
        try write(ManifestTests.iconPNG, to: outside.path + "/real.png")
        #expect(symlink(outside.path + "/real.png", folder.path + "/out.png") == 0)
        #expect(symlink("/etc/passwd", folder.path + "/passwd.png") == 0)
        #expect(mkdir(folder.path + "/sub", 0o755) == 0 && symlink("../..", folder.path + "/sub/up") == 0)
        #expect(symlink("icon.png", folder.path + "/same.png") == 0)
        defer { unlink(folder.path + "/sub/up") }
        try Self.expectLeftOut(folder, icon: "out.png", "leads out of")
        try Self.expectLeftOut(folder, icon: "passwd.png", "leads out of")
        try Self.expectLeftOut(folder, icon: "sub/up/" + String(folder.path.split(separator: "/").last!) + "/icon.png", "leads out of")  // out and back in
        let (same, warnings) = try Self.load(folder, icon: "same.png")
        #expect(same.icon?.pngData == ManifestTests.iconPNG && warnings.isEmpty, "\(warnings)")
        let (sub, _) = try Self.load(folder, icon: "sub/../icon.png")
        #expect(sub.icon?.pngData == ManifestTests.iconPNG)
        let (absolute, _) = try Self.load(folder, icon: folder.path + "/icon.png")
        #expect(absolute.icon?.path == folder.path + "/icon.png" && ShareActivity(manifest: absolute).icon?.width == 4)
    }

    @Test("an icon that is not a regular file, not a PNG, over 1 MiB or over 1024 × 1024 pixels is left out, with the reason")
    func bounds() async throws {
        let folder = try ManifestTests.folder([:])
        defer { rmdir(folder.path + "/folder.png"); folder.remove() }
        #expect(mkfifo(folder.path + "/fifo.png", 0o644) == 0 && mkdir(folder.path + "/folder.png", 0o755) == 0)
        try folder.write("text.png", "not really a png")
        try write([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + [UInt8](repeating: 0, count: ServiceManifest.Icon.maxBytes), to: folder.path + "/huge.png")
        try write(try RemoteImage(width: 1025, height: 2) { _, _ in 0 }.pngData(), to: folder.path + "/wide.png")
        var tall = ManifestTests.iconPNG
        tall.replaceSubrange(20..<24, with: [0x7F, 0xFF, 0xFF, 0xFF])  // IHDR height, read before decoding
        try write(tall, to: folder.path + "/tall.png")
        try await withDeadline(.seconds(5), "loading a manifest whose icon is a FIFO") {
            try Self.expectLeftOut(folder, icon: "fifo.png", "is not a regular file")
        }
        try Self.expectLeftOut(folder, icon: "folder.png", "is not a regular file")
        try Self.expectLeftOut(folder, icon: "missing.png", "No such file")
        try Self.expectLeftOut(folder, icon: "text.png", "is not a PNG")
        try Self.expectLeftOut(folder, icon: "huge.png", "more than 1048576")
        try Self.expectLeftOut(folder, icon: "wide.png", "declares 1025 × 2 pixels")
        try Self.expectLeftOut(folder, icon: "tall.png", "declares 4 × 2147483647 pixels")
        let (square, _) = try Self.load(folder, icon: "icon.png")
        #expect(square.icon?.width == 4)
    }

    @Test("an absolute icon path inside $XDG_DATA_HOME/icons is read beneath that folder")
    func xdgIconFolder() throws {
        let folder = try ManifestTests.folder([:])
        let data = try TemporaryFolder("remoteview-xdg-data")
        defer { folder.remove(); unlink(data.path + "/icons/app.png"); rmdir(data.path + "/icons"); data.remove() }
        #expect(mkdir(data.path + "/icons", 0o755) == 0)
        try write(ManifestTests.iconPNG, to: data.path + "/icons/app.png")
        try folder.write("outside.png", "")
        let saved = getenv("XDG_DATA_HOME").map { String(cString: $0) }
        setenv("XDG_DATA_HOME", data.path, 1)
        defer { if let saved { setenv("XDG_DATA_HOME", saved, 1) } else { unsetenv("XDG_DATA_HOME") } }
        let (manifest, warnings) = try Self.load(folder, icon: data.path + "/icons/app.png")
        #expect(manifest.icon?.path == data.path + "/icons/app.png" && warnings.isEmpty, "\(warnings)")
        try Self.expectLeftOut(folder, icon: data.path + "/icons/../../etc/passwd", "leads out of")
        try Self.expectLeftOut(folder, icon: data.path + "/app.png", "is neither in the manifest's folder nor in an icon folder")
    }
}

// MARK: issue 25, finding 5: each refusal says what is wrong

@Suite("Manifests: precise refusals")
struct ManifestRefusalTests {
    @Test("a file that does not exist says so; a symbolic link to none is called a broken link")
    func missing() throws {
        let folder = try ManifestTests.folder([:])
        defer { folder.remove() }
        let missing = #expect(throws: ManifestError.self) { try ServiceRegistry.load(file: folder.path + "/none.json") }
        #expect(missing?.reason == "does not exist", "\(String(describing: missing))")
        #expect(symlink(folder.path + "/gone.json", folder.path + "/link.json") == 0)
        let broken = #expect(throws: ManifestError.self) { try ServiceRegistry.load(file: folder.path + "/link.json") }
        #expect(broken?.reason == "is a symbolic link to \(folder.path)/gone.json, which does not exist (a broken link)", "\(String(describing: broken))")
    }

    /// (what to change in the valid manifest, the key, the whole reason)
    static let cases: [(String, String, String, String)] = [
        (#""memoryMiB": 128"#, #""memoryMiB": 18446744073709551617"#, "limits.memoryMiB", "1.8446744073709552e+19 is not in 16...65536"),
        (#""openFiles": 64"#, #""openFiles": -18446744073709551617"#, "limits.openFiles", "-1.8446744073709552e+19 is not in 16...65536"),
        (#""cpuSeconds": 30"#, #""cpuSeconds": 1e300"#, "limits.cpuSeconds", "1e+300 is not in 1...86400"),
        (#""processes": 4"#, #""processes": 4.5"#, "limits.processes", "4.5 is not an integer"),
        (#""max": 5"#, #""max": 1e20"#, "activation.contentTypes[0].max", "1e+20 is not in 1...16 (at least min and 1; a share carries at most 16 items)"),
        (#""instances": "perConnection""#, #""instances": "x""#, "instances", #""x" is not one of "shared", "perConnection""#),
        (#""instances": "perConnection""#, #""instances": "\u001b[2J""#, "instances", #""\u{1B}[2J" is not one of "shared", "perConnection""#),
    ]

    @Test("a huge integer is out of range, not 'not an integer'; a bad instances value lists the good ones", arguments: 0..<cases.count)
    func reasons(_ index: Int) throws {
        let (original, replacement, key, reason) = Self.cases[index]
        #expect(ManifestTests.valid.contains(original), "test table out of date: \(original)")
        let folder = try ManifestTests.folder(["bad.json": ManifestTests.valid.replacing(original, with: replacement)])
        defer { folder.remove() }
        let error = #expect(throws: ManifestError.self) { try ServiceRegistry.load(file: folder.path + "/bad.json") }
        #expect(error?.key == key && error?.reason == reason, "\(String(describing: error))")
    }

    @Test("JSON nested too deeply says so, with the limit, whatever JSONDecoder says", arguments: [17, 100, 600])
    func tooDeep(_ depth: Int) throws {
        let nested = String(repeating: "[", count: depth - 1) + String(repeating: "]", count: depth - 1)
        let folder = try ManifestTests.folder(["deep.json": ManifestTests.valid.replacing(#""arguments": ["--share"]"#, with: #""arguments": \#(nested)"#)])
        defer { folder.remove() }
        let error = #expect(throws: ManifestError.self) { try ServiceRegistry.load(file: folder.path + "/deep.json") }
        #expect(error?.key == nil && error?.reason == "nested \(depth) levels deep: at most \(ServiceRegistry.maxNestingDepth) levels of arrays and objects (a manifest needs 4)",
                "\(String(describing: error))")
    }

    @Test("16 levels are read as usual (and refused for what they hold)")
    func deepEnough() throws {
        let nested = String(repeating: "[", count: 15) + String(repeating: "]", count: 15)
        let folder = try ManifestTests.folder(["deep.json": ManifestTests.valid.replacing(#""arguments": ["--share"]"#, with: #""arguments": \#(nested)"#)])
        defer { folder.remove() }
        let error = #expect(throws: ManifestError.self) { try ServiceRegistry.load(file: folder.path + "/deep.json") }
        #expect(error?.key == "arguments[0]" && error?.reason == "expected a string", "\(String(describing: error))")
    }
}

// MARK: issue 33, item 4: a MIME type the shared MIME-info database does not know

@Suite("Manifests: MIME types the database does not know")
struct ManifestUnknownTypeTests {
    /// Loads a manifest whose activation takes `types` and returns the registry's warnings.
    static func warnings(for types: [String]) throws -> [ManifestError] {
        let rules = types.map { #"{ "type": "\#($0)", "min": 0, "max": 1 }"# }.joined(separator: ", ")
        let folder = try ManifestTests.folder(["mail.json": ManifestTests.valid.replacing(
            #"[ { "type": "text/plain", "min": 1, "max": 5 }, { "type": "Image/*", "max": 10 } ]"#, with: "[\(rules)]")])
        defer { folder.remove() }
        let registry = ServiceRegistry(scanning: [folder.path])
        #expect(registry.problems.isEmpty && registry.services.count == 1, "loaded, with warnings only: \(registry.problems)")
        return registry.warnings.filter { $0.key?.hasPrefix("activation.") == true }
    }

    @Test("a misspelt type loads with a warning naming the known type within two edits; a private type loads with a warning and no guess; known types, aliases and families give none")
    func unknownTypes() throws {
        try #require(MIMEDatabase.system.isKnown("text/plain"), "shared-mime-info is installed (scripts/bootstrap)")
        let misspelt = try Self.warnings(for: ["text/plian"])
        #expect(misspelt.count == 1 && misspelt.first?.key == "activation.contentTypes[0].type", "\(misspelt)")
        #expect(misspelt.first?.reason.contains(#""text/plian" is not in the shared MIME-info database (did you mean text/plain?)"#) == true, "\(misspelt)")
        #expect(try Self.warnings(for: ["image/pgn"]).first?.reason.contains("did you mean image/png?") == true)
        let private_ = try Self.warnings(for: ["application/x-example-notebook"])
        #expect(private_.count == 1 && private_.first?.reason.contains("did you mean") == false, "\(private_)")
        #expect(try Self.warnings(for: ["text/plain", "image/*", "image/pjpeg", "text/uri-list", "application/octet-stream"]).isEmpty)
    }

    @Test("the edit distance counts insertions, deletions, substitutions and swaps of neighbours, and stops past its limit")
    func editDistance() {
        func distance(_ a: String, _ b: String) -> Int { MIMEDatabase.editDistance(Array(a.utf8), Array(b.utf8), limit: 2) }
        #expect(distance("text/plain", "text/plain") == 0)
        #expect(distance("text/plian", "text/plain") == 1, "a swap")
        #expect(distance("text/plai", "text/plain") == 1 && distance("text/plainn", "text/plain") == 1 && distance("text/plaim", "text/plain") == 1)
        #expect(distance("text/pl", "text/plain") == 3, "past the limit: limit + 1")
        #expect(distance("", "ab") == 2 && distance("ab", "") == 2)
    }
}

// MARK: issue 33, item 1: installed activities

@Suite("Manifests: installed activities")
struct InstalledActivitiesTests {
    @Test("the installed folders are the user's ($XDG_DATA_HOME/remoteview/manifests) then each system one ($XDG_DATA_DIRS), after the host's; a missing one is no problem")
    func folders() throws {
        #expect(ServiceRegistry.installedFolders(dataHome: "/home/u/.local/share", dataDirectories: ["/usr/local/share", "/usr/share"])
                == ["/home/u/.local/share/remoteview/manifests", "/usr/local/share/remoteview/manifests", "/usr/share/remoteview/manifests"])
        let registry = ServiceRegistry(scanning: [], installed: ["/nonexistent/remoteview/manifests"])
        #expect(registry.problems.isEmpty && registry.services.isEmpty, "\(registry.problems)")
    }

    @Test("a user's activity shadows the system's of the same identifier: kept, marked, with a warning; a duplicate among the host's folders is still a problem")
    func shadowing() throws {
        let user = try ManifestTests.folder(["mail.json": ManifestTests.valid])
        let system = try ManifestTests.folder(["mail.json": ManifestTests.valid.replacing(#""title": "Mail""#, with: #""title": "System mail""#)])
        let named = try ManifestTests.folder(["mail.json": ManifestTests.valid])
        defer { [user, system, named].forEach { $0.remove() } }
        let registry = ServiceRegistry(scanning: [], installed: [user.path, system.path])
        let mail = try #require(registry.services["com.example.mail"])
        #expect(mail.display.title == "Mail" && mail.shadows == [system.path + "/mail.json"])
        #expect(registry.problems.isEmpty)
        #expect(registry.warnings.contains { $0.reason.contains("the user's \"com.example.mail\" shadows the one installed at \(system.path)/mail.json") }, "\(registry.warnings)")
        // The host's own folder comes first: the user's copy is then a duplicate, reported.
        let both = ServiceRegistry(scanning: [named.path], installed: [user.path, system.path])
        #expect(both.services["com.example.mail"]?.file == named.path + "/mail.json")
        #expect(both.problems.count == 2 && both.problems.allSatisfy { $0.reason.contains("is already declared by \(named.path)/mail.json") }, "\(both.problems)")
    }

    @Test("a manifest written again (as install writes it) decodes to the same manifest")
    func encodeRoundTrip() throws {
        let folder = try ManifestTests.folder(["mail.json": ManifestTests.valid])
        defer { folder.remove() }
        let manifest = try ServiceRegistry.load(file: folder.path + "/mail.json")
        let encoder = JSONEncoder()
        let written = try encoder.encode(manifest)
        try folder.write("again.json", String(decoding: written, as: UTF8.self))
        let again = try ServiceRegistry.load(file: folder.path + "/again.json")
        #expect(again.identifier == manifest.identifier && again.executablePath == manifest.executablePath && again.display == manifest.display
                && again.activation == manifest.activation && again.sandbox == manifest.sandbox && again.idleTimeout == manifest.idleTimeout
                && again.instances == manifest.instances && again.limits == manifest.limits && again.arguments == manifest.arguments)
    }
}
