import FoundationEssentials
import Glibc
import Logging
import RemoteHost
import RemoteTestSupport
import Testing

/// Issue 25, finding 4: what a manifest or a service wrote reaches the host's log and the demo's
/// output escaped (`String.escapedForTerminal`), never as escape sequences a terminal would run.
@Suite("What services and manifests wrote is printed escaped", .serialized)
struct TerminalOutputTests {
    /// Whether `text` holds anything a terminal would act on.
    static func isSafe(_ text: String) -> Bool {
        !text.unicodeScalars.contains { $0.isEscapedForTerminal }
    }

    @Test("a service's stdout and stderr lines reach the log escaped: escape sequences, bidi controls and bytes that are not UTF-8")
    func outputEscaped() async throws {
        let records = LogRecords()
        let logger = Logger(label: "tests") { _ in records.handler() }
        // OSC 0 (set the window title), RLO, an invalid byte, then CSI 2J (clear the screen).
        let bytes = Array("marker-43 \u{1B}]0;pwned\u{7} \u{202E}txt.exe ".utf8) + [0xFF, 0xC0, 0xAF] + Array(" \u{1B}[2J\u{9B}0m".utf8)
        try await withServices(["test.json": ServiceFolder.manifest()], configuration: fastLauncherConfiguration(logger)) { launcher, _ in
            let events = launcher.events()
            let connection = launcher.connection(to: "com.example.test")
            _ = try await connection.request(ServiceMessage(type: "print", payload: bytes))
            let pid = try #require(connection.processIdentifier)
            await connection.invalidate()
            _ = try await termination(of: pid, in: events)
        }
        let lines = records.lines.map(\.message).filter { $0.contains("marker-43") }.sorted()
        let escaped = #"marker-43 \u{1B}]0;pwned\u{07} \u{202E}txt.exe \xFF\xC0\xAF \u{1B}[2J\u{9B}0m"#
        #expect(lines == ["err: " + escaped, "out: " + escaped], "\(lines)")
        #expect(records.lines.allSatisfy { Self.isSafe($0.message) })
    }

    @Test("demo-share list: a manifest's bad title and a file name with controls are reported escaped, and the valid ones listed")
    func demoShareList() throws {
        let executable = testServiceExecutable.replacing("remoteview-test-service", with: "demo-share")
        let folder = try ServiceFolder([
            "title.json": ServiceFolder.manifest(identifier: "com.example.title")
                .replacing(#""title": "Test service""#, with: #""title": "\u0007\u001b[31mred""#),
            "evil\u{1B}[2J\u{202E}nosj.json": ServiceFolder.manifest(identifier: "com.example.\\u202eevil"),
            "ok.json": ServiceFolder.manifest(identifier: "com.example.ok", extra: #""activation": {"contentTypes": [{"type": "text/plain"}]}"#)
                .replacing(#""title": "Test service""#, with: #""title": "שלום", "subtitle": "\u200Fok""#),
        ])
        defer { folder.remove() }
        let (status, output) = try runCommands([[executable, "list", "--services", folder.path, "--text", "hi"]])[0]
        #expect(status == 0, "\(output)")
        #expect(output.split(separator: "\n").allSatisfy { Self.isSafe(String($0)) }, "\(output.unicodeScalars.filter { $0.isEscapedForTerminal }.map(\.value))")
        #expect(output.contains("display.title: holds U+0007"), "\(output)")
        #expect(output.contains(#"evil\u{1B}[2J\u{202E}nosj.json: identifier: "com.example.\u{202E}evil" is not a reverse-DNS identifier"#), "\(output)")
        #expect(output.contains("com.example.ok") && output.contains("שלום") && output.contains("\u{200F}ok"), "RLM is kept: \(output)")
    }
}

extension TerminalOutputTests {
    @Test("termination reasons, share outcomes and activities print escaped: a detail or a message may quote the service")
    func descriptions() throws {
        #expect(Self.isSafe(TerminationReason(kind: .protocolViolation, detail: "it said goodbye (\"\u{1B}]0;x\u{7}\")").description))
        #expect(Self.isSafe(ShareOutcome.failed("\u{202E}no").description))
        #expect(Self.isSafe(ShareOutcome.cancelled(reason: "\u{1B}[2J").description))
    }
}
