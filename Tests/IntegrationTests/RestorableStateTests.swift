import Glibc
import RemoteHost
import RemoteService
import RemoteTestSupport
import Testing

/// A view that comes back with its state (docs/Protocol.md, "Restorable state"): the fixture's
/// toolkit screen ("ui" mode) and share activity, sandboxed, shown in a host's RemoteView. The
/// service sends its state after frames the host showed; the process is killed (SIGKILL) or
/// exits idle; the next process starts with the state. Every wait is for an event (a stored
/// state, a termination) under a deadline, and `withServices` checks that nothing leaked.
@Suite("Restorable state across processes", .serialized)
struct RestorableStateTests {
    static let width = 320, height = 260

    /// The fixture screen's state, as its restorable state encodes it.
    struct ScreenState: Equatable {
        var text: String
        var selection: Range<Int>
        var focused: Bool
        var count: Int
        var padding: Int

        init?(_ bytes: [UInt8]) {
            var reader = StateArchive.Reader(bytes)
            guard let text = reader.string(), let lower = reader.int(), let upper = reader.int(), lower <= upper, let focused = reader.bool(),
                  let count = reader.int(), let padding = reader.bytes(), reader.isAtEnd else { return nil }
            (self.text, selection, self.focused, self.count, self.padding) = (text, lower..<upper, focused, count, padding.count)
        }
    }

    /// The first state `view` stores that `condition` accepts.
    static func stored(_ view: RemoteView, _ what: String, _ condition: @escaping @Sendable ([UInt8]) -> Bool) async throws -> [UInt8] {
        try await withDeadline(.seconds(10), "a stored state: \(what)") {
            for await state in view.restorableStates where condition(state) { return state }
            throw StreamEnded(what: "a stored state: \(what)")
        }
    }

    /// The fixture's "key: value" state.
    static func report(_ view: RemoteView) async throws -> [String: String] {
        try await RemoteViewInputTests.Screen(view: view).state()
    }

    /// The fixture's screen ("ui" mode, with `extra` manifest keys) presented, its first frame
    /// drawn; `body` gets the view and the launcher's events.
    static func withScreen(idleTimeout: Double = 30, extra: String? = nil,
                           _ body: @escaping @Sendable (RemoteView, AsyncStream<LauncherEvent>) async throws -> Void) async throws {
        try await withServices(["ui.json": ServiceFolder.manifest(mode: "ui", idleTimeout: idleTimeout, extra: extra)]) { launcher, _ in
            let events = launcher.events()
            let view = RemoteView(connection: launcher.connection(to: "com.example.test"))
            try await view.present(width: Self.width, height: Self.height)
            _ = try await nextDamage(view)
            try await body(view, events)
        }
    }

    /// Clicks the screen's Add button once (unless not `adding`) and its text field, then types `text`.
    static func edit(_ view: RemoteView, adding: Bool = true, typing text: String) async throws {
        let layout = try await view.connection.request(ServiceMessage(type: "layout")).text ?? ""
        func centre(_ name: String) throws -> (Double, Double) {
            let words = try #require(layout.split(separator: "\n").first { $0.hasPrefix(name + " ") }).split(separator: " ").compactMap { Double($0) }
            return (words[0] + words[2] / 2, words[1] + words[3] / 2)
        }
        let button = try centre("button"), field = try centre("field")
        if adding { try await view.click(x: button.0, y: button.1) }
        try await view.click(x: field.0, y: field.1)
        try await view.type(text)
    }

    /// Kills the view's process with SIGKILL and waits for the launcher to see it end.
    static func kill9(_ view: RemoteView, _ events: AsyncStream<LauncherEvent>) async throws -> Int32 {
        let pid = try #require(view.connection.processIdentifier)
        kill(pid, SIGKILL)
        let reason = try await termination(of: pid, in: events)
        #expect(reason.kind == .killed, "\(reason)")
        return pid
    }

    @Test("the typed text, its caret, the focus and a count come back after kill -9: the host stored the service's last state and the new process starts with it, before its first layout")
    func afterKill() async throws {
        try await Self.withScreen { view, events in
            // The launcher tells the service its limit (the manifest's default, 64 KiB).
            let environment = try await view.connection.request(ServiceMessage(type: "environment")).text ?? ""
            #expect(environment.split(separator: "\n").contains("REMOTEVIEW_RESTORABLE_STATE_KIB=64"), "\(environment)")

            try await Self.edit(view, typing: "hello")
            try await view.press(keyCode: 80)  // left: the caret between "hell" and "o"
            let expected = try await Self.stored(view, "hello, the caret at 4, focused, count 1") { bytes in
                ScreenState(bytes).map { $0.text == "hello" && $0.selection == 4..<4 && $0.focused && $0.count == 1 } ?? false
            }
            #expect(view.restorableState == expected)

            let killed = try await Self.kill9(view, events)
            // The next request relaunches it; the view's state went first.
            let report = try await Self.report(view)
            #expect(view.connection.processIdentifier != killed)
            #expect(report["field"] == "hello" && report["selection"] == "4 4" && report["first"] == "true", "\(report)")
            #expect(report["count"] == "1" && report["status"] == "count 1", "\(report)")
            #expect(report["restored"] == String(expected.count), "\(report)")
            #expect(report["log"]?.hasPrefix("loaded,restored,resized 320x260") == true, "restored after the view loaded, before its first size: \(report)")
        }
    }

    @Test("a view made with a state on a connection whose process runs already gives it to that process before its first size")
    func restoringOnAnOpenConnection() async throws {
        try await withServices(["ui.json": ServiceFolder.manifest(mode: "ui")]) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            #expect(try await connection.request(ServiceMessage(type: "echo", text: "up")).text == "up")
            var archive = StateArchive()
            archive.append("from before")
            archive.append(4)
            archive.append(4)
            archive.append(true)
            archive.append(2)
            archive.append(bytes: [])
            let view = RemoteView(connection: connection, restoringState: archive.bytes)
            try await view.present(width: Self.width, height: Self.height)
            _ = try await nextDamage(view)
            let report = try await Self.report(view)
            #expect(report["field"] == "from before" && report["selection"] == "4 4" && report["count"] == "2", "\(report)")
            #expect(report["restored"] == String(archive.bytes.count), "\(report)")
        }
    }

    @Test("a state over 16 KiB travels in a sealed memfd and comes back whole")
    func largeState() async throws {
        try await Self.withScreen { view, events in
            _ = try await view.connection.request(ServiceMessage(type: "pad", text: "40000"))
            let expected = try await Self.stored(view, "40,000 bytes of padding") { ScreenState($0)?.padding == 40_000 }
            #expect(expected.count > RestorableStateLimits.maxInlineBytes)
            _ = try await Self.kill9(view, events)
            let report = try await Self.report(view)
            #expect(report["restored"] == String(expected.count), "\(report)")
            #expect(report["status"] == "count 0", "\(report)")
        }
    }

    @Test("limits.restorableStateKiB 0: the host does not announce restorable-state, keeps nothing, and a relaunched view starts afresh")
    func turnedOff() async throws {
        try await Self.withScreen(extra: #""limits": { "restorableStateKiB": 0 }"#) { view, events in
            let environment = try await view.connection.request(ServiceMessage(type: "environment")).text ?? ""
            #expect(environment.split(separator: "\n").contains("REMOTEVIEW_RESTORABLE_STATE_KIB=0"), "\(environment)")
            try await Self.edit(view, typing: "gone")
            try await view.settle()
            #expect(try await Self.report(view)["field"] == "gone")
            _ = try await Self.kill9(view, events)
            let report = try await Self.report(view)
            #expect(report["field"] == "" && report["restored"] == "none" && report["count"] == "0", "\(report)")
            #expect(view.restorableState == nil)
        }
    }

    @Test("an idle exit loses nothing: with an idle timeout (0.1 s) shorter than the 250 ms between states, the service sends its last state before its goodbye, and the next process starts with it")
    func idleExit() async throws {
        try await Self.withScreen(idleTimeout: 0.1) { view, events in
            // The controller was asked for its state at the first frame (it had none); the edit
            // right after is due 250 ms after that ask, after the idle exit: only the state
            // sent before the goodbye carries it.
            try await Self.edit(view, adding: false, typing: "abc")
            let reason = try await firstEvent("an idle exit", in: events) { event -> TerminationReason? in
                if case .terminated(_, _, let reason) = event, reason.kind == .idleExit { reason } else { nil }
            }
            #expect(reason.kind == .idleExit)
            let report = try await Self.report(view)
            #expect(report["field"] == "abc" && report["selection"] == "3 3" && report["restored"] != "none", "\(report)")
        }
    }

    @Test("ShareSession.retry(): after the activity is killed, a new session with a new process and view gets the same items and the state the view last had")
    func shareRetry() async throws {
        let rules = #"[{"type": "text/plain", "min": 0, "max": 2}, {"type": "application/octet-stream", "min": 0, "max": 4}]"#
        let manifests = ["share.json": ServiceFolder.manifest(mode: "share", extra: #""activation": { "contentTypes": \#(rules) }, "instances": "perConnection""#)]
        try await withServices(manifests) { launcher, folder in
            let events = launcher.events()
            let items = [try ShareItem.text("a photo of the sea"),
                         try ShareItem.file(named: "sea.bin", contentType: "application/octet-stream", contents: [9, 8, 7])]
            let sheet = ShareSheet(registry: ServiceRegistry(scanning: [folder.path]), items: items)
            let session = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher)
            try await session.view.present(width: 40, height: 30)
            _ = try await nextDamage(session.view)
            let before = try await session.connection.request(ServiceMessage(type: "share.items")).text ?? ""
            _ = try await session.connection.request(ServiceMessage(type: "share.note", text: "half a caption"))
            _ = try await Self.stored(session.view, "the note") { $0 == Array("half a caption".utf8) }

            let killed = try await Self.kill9(session.view, events)
            guard case .interrupted = await session.outcome else { Issue.record("outcome \(await session.outcome)"); return }
            #expect(session.items.count == 2, "an ended session keeps its items for a retry")

            let retried = try await session.retry()
            #expect(retried !== session && retried.view !== session.view)
            try await retried.view.present(width: 40, height: 30)
            _ = try await nextDamage(retried.view)
            #expect(retried.connection.processIdentifier != killed)
            #expect(try await retried.connection.request(ServiceMessage(type: "share.items")).text == before, "the same items")
            #expect(try await retried.connection.request(ServiceMessage(type: "share.restored")).text == "half a caption")
            #expect(retried.view.restorableState == Array("half a caption".utf8))
            _ = try await retried.connection.request(ServiceMessage(type: "share.complete"))
            guard case .completed = await retried.outcome else { Issue.record("outcome \(await retried.outcome)"); return }
            await retried.close()
            await session.close()
        }
    }

    @Test("an ended share lets its items go after its retry retention; retry() then says so")
    func retryAfterRetention() async throws {
        let manifests = ["share.json": ServiceFolder.manifest(mode: "share", extra: #""activation": { "contentTypes": [{"type": "text/plain"}] }"#)]
        try await withServices(manifests) { launcher, folder in
            let sheet = ShareSheet(registry: ServiceRegistry(scanning: [folder.path]), items: [try .text("x")])
            let session = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher, retryRetention: .zero)
            try await session.view.present(width: 20, height: 20)
            _ = try await session.connection.request(ServiceMessage(type: "share.complete"))
            guard case .completed = await session.outcome else { Issue.record("outcome \(await session.outcome)"); return }
            #expect(session.items.isEmpty)
            do {
                _ = try await session.retry()
                Issue.record("a share whose items were let go was retried")
            } catch let error as RemoteError {
                #expect(error.code == .shareEnded && error.reason.contains("its items were let go"), "\(error)")
            }
            await session.close()
        }
    }
}
