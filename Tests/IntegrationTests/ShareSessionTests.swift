import Glibc
import RemoteHost
import RemoteTestSupport
import Testing

/// Shares across processes, sandbox on: items in (inline and as sealed memfds), the view, the
/// activity's updates in order, the outcome and the returned items; and the ways a share ends
/// badly: dismissed, killed mid-share, a service that ignores the cancel, one that breaks the
/// rules, one that does not take shares.
@Suite("Share sessions across processes", .serialized)
struct ShareSessionTests {
    static let green: UInt32 = 0xFF00_FF00

    static func manifests(mode: String = "share", rules: String = #"[{"type": "text/plain", "min": 0, "max": 2}, {"type": "text/uri-list", "min": 0, "max": 1}, {"type": "application/octet-stream", "min": 0, "max": 4}]"#) -> [String: String] {
        ["share.json": ServiceFolder.manifest(mode: mode, extra: #""activation": { "contentTypes": \#(rules) }, "instances": "perConnection""#)]
    }

    static func items() throws -> [ShareItem] {
        [try .text("hello share"), try .url("https://example.com/a?b=c"),
         try .file(named: "bytes.bin", contentType: "application/octet-stream", contents: [1, 2, 3, 0xFE])]
    }

    @Test("items reach the activity intact, its view and updates reach the host in order, its items come back")
    func roundTrip() async throws {
        try await withServices(Self.manifests()) { launcher, folder in
            let sheet = ShareSheet(registry: ServiceRegistry(scanning: [folder.path]), items: try Self.items())
            let activity = try #require(sheet.activity("com.example.test"), "offered: \(sheet.explanations)")
            #expect(activity.title == "Test service")
            let session = try await sheet.perform(activity, launcher: launcher)
            let updates = ShareUpdates(session)
            try await session.view.present(width: 40, height: 30)
            _ = try await nextDamage(session.view)
            #expect(session.view.image.pixel(x: 20, y: 15) == Self.green)

            let report = try await session.connection.request(ServiceMessage(type: "share.items")).text ?? ""
            #expect(report == """
                begun 1
                text text/plain 11 hello share
                url text/uri-list 25 https://example.com/a?b=c
                file application/octet-stream 4 bytes.bin 1,2,3,fe
                """, "each item as shared; the controller heard of the share once")
            _ = try await session.connection.request(ServiceMessage(type: "share.progress", text: "0.5"))
            _ = try await session.connection.request(ServiceMessage(type: "share.complete"))

            guard case .completed(let returned) = await session.outcome else { Issue.record("outcome \(await session.outcome)"); return }
            #expect(returned.count == 2)
            #expect(returned.first?.text == "HELLO SHARE" && returned.first?.contentType == "text/plain")
            #expect(returned.last?.fileName == "bytes.bin.reversed")
            #expect(try returned.last?.data(limit: 1 << 20) == [0xFE, 3, 2, 1])
            let seen = await updates.all
            #expect(seen.map(\.state) == [.preparing, .preparing, .ready, .working, .done], "\(seen)")
            #expect(seen.map(\.progress) == [nil, nil, nil, 0.5, 1])
            #expect(seen.last?.title == "Test share" && seen.last?.subtitle == "3 items")
            #expect(session.latestUpdate?.state == .done)
            await session.close()
        }
    }

    @Test("a dismissed share ends cancelled when the activity answers share_cancel")
    func dismissal() async throws {
        try await withServices(Self.manifests()) { launcher, folder in
            let sheet = ShareSheet(registry: ServiceRegistry(scanning: [folder.path]), items: [try .text("bye")])
            let session = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher)
            try await session.view.present(width: 20, height: 20)
            try await ShareUpdates(session).wait(for: .ready)
            guard case .cancelled = await session.cancel() else { Issue.record("outcome \(await session.outcome)"); return }
            await session.close()
        }
    }

    @Test("with preferences, a completed share is counted before its outcome is known (by kind); a cancelled one is not; one completed while another process keeps the lock is concluded uncounted")
    func counted() async throws {
        let state = try TemporaryFolder("remoteview-preferences")
        defer { state.remove() }
        let preferences = SharePreferences(folder: state.path)
        try await withServices(Self.manifests()) { launcher, folder in
            let registry = ServiceRegistry(scanning: [folder.path])
            let sheet = ShareSheet(registry: registry, items: [try .text("count me"), try .url("https://example.com")], preferences: preferences)
            let session = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher)
            try await session.view.present(width: 20, height: 20)
            _ = try await session.connection.request(ServiceMessage(type: "share.complete"))
            guard case .completed = try await session.outcome(timeout: .seconds(10)) else { Issue.record("outcome \(await session.outcome)"); return }
            #expect(preferences.snapshot().uses["com.example.test"]?.mapValues(\.count) == [.text: 1, .url: 1])
            await session.close()

            let cancelled = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher)
            try await cancelled.view.present(width: 20, height: 20)
            _ = try await cancelled.wait(for: .ready, timeout: .seconds(10))
            guard case .cancelled = await cancelled.cancel() else { Issue.record("outcome \(await cancelled.outcome)"); return }
            #expect(preferences.snapshot().uses["com.example.test"]?[.text]?.count == 1)
            await cancelled.close()

            // Another process keeps the preferences' lock: the share completes all the same,
            // uncounted, with a warning.
            let holder = try Syscall.openFolder(preferences.folder)
            try Syscall.lockExclusively(holder, name: "the test's lock")
            let blocked = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher)
            try await blocked.view.present(width: 20, height: 20)
            _ = try await blocked.connection.request(ServiceMessage(type: "share.complete"))
            guard case .completed = try await blocked.outcome(timeout: .seconds(10)) else { Issue.record("outcome \(await blocked.outcome)"); return }
            holder.close()
            #expect(preferences.snapshot().uses["com.example.test"]?[.text]?.count == 1)
            await blocked.close()
        }
    }

    @Test("an activity that fails says why")
    func failure() async throws {
        try await withServices(Self.manifests()) { launcher, folder in
            let sheet = ShareSheet(registry: ServiceRegistry(scanning: [folder.path]), items: [try .text("x")])
            let session = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher)
            try await session.view.present(width: 20, height: 20)  // the activity's controller comes with its view
            _ = try await session.connection.request(ServiceMessage(type: "share.fail", text: "the disk is full"))
            guard case .failed(let message) = await session.outcome else { Issue.record("outcome \(await session.outcome)"); return }
            #expect(message.contains("the disk is full"))
            await session.close()
        }
    }

    @Test("a service killed mid-share: interrupted with how it ended, the last frame kept, the host fine")
    func killedMidShare() async throws {
        try await withServices(Self.manifests()) { launcher, folder in
            let events = launcher.events()
            let sheet = ShareSheet(registry: ServiceRegistry(scanning: [folder.path]), items: [try .text("doomed")])
            let session = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher)
            try await session.view.present(width: 32, height: 24)
            _ = try await nextDamage(session.view)
            let pid = try #require(session.connection.processIdentifier)
            kill(pid, SIGKILL)
            guard case .interrupted(let error) = await session.outcome else { Issue.record("outcome \(await session.outcome)"); return }
            #expect(error.reason.contains("killed") || error.reason.contains("SIGKILL"), "\(error.reason)")
            #expect(session.view.image.width == 32 && session.view.image.pixel(x: 16, y: 12) == Self.green, "the last frame stays")
            _ = try await termination(of: "com.example.test", in: events)
            await session.close()
            // The host still works: another share with the same activity runs.
            let again = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher)
            try await again.view.present(width: 20, height: 20)
            _ = try await again.connection.request(ServiceMessage(type: "share.complete"))
            guard case .completed = await again.outcome else { Issue.record("outcome \(await again.outcome)"); return }
            await again.close()
        }
    }

    @Test("a finished share's view launches nothing: after a crash mid-share, settle, present, input and requests throw shareEnded naming the share and how it ended, framePresented() does nothing, the last frame stays, and the launcher started one process; while a completed share's process runs, its view still works")
    func endedShareLaunchesNothing() async throws {
        try await withServices(Self.manifests()) { launcher, folder in
            let events = launcher.events()
            let sheet = ShareSheet(registry: ServiceRegistry(scanning: [folder.path]), items: [try .text("doomed")])
            let session = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher, presentation: .manual)
            try await session.view.present(width: 32, height: 24)
            _ = try await nextDamage(session.view)
            let pid = try #require(session.connection.processIdentifier)
            kill(pid, SIGKILL)
            // At once, before the share's end is known: the process is going, and nothing may
            // launch another for the share (counted below). The call may still be answered,
            // when the kill (of bwrap, whose child the kernel then kills) has not reached the
            // service yet; if it fails, it says why.
            do throws(RemoteError) {
                try await session.view.settle(timeout: .seconds(30))
            } catch {
                #expect(error.code == .shareEnded || error.code == .interrupted, "\(error)")
            }
            _ = await session.outcome
            _ = try await termination(of: "com.example.test", in: events)
            let ended: [(String, @Sendable () async throws -> Void)] = [
                ("settle", { try await session.view.settle() }),
                ("present", { try await session.view.present(width: 40, height: 30) }),
                ("input", { try await session.view.click(x: 5, y: 5) }),
                ("request", { _ = try await session.connection.request(ServiceMessage(type: "echo")) }),
            ]
            for (what, call) in ended {
                let error = await #expect(throws: RemoteError.self, "\(what)") { try await call() }
                #expect(error?.code == .shareEnded && error?.reason.contains("the share with com.example.test has ended (interrupted)") == true,
                        "\(what): \(String(describing: error))")
            }
            try await session.view.framePresented()
            #expect(session.view.image.width == 32 && session.view.image.pixel(x: 16, y: 12) == Self.green, "the last frame stays")
            #expect(await launcher.status().first?.launches == 1, "nothing relaunched the activity")
            await session.close()

            // Completed, its process still running: the view still works until it goes.
            let again = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher)
            try await again.view.present(width: 20, height: 20)
            _ = try await again.connection.request(ServiceMessage(type: "share.complete"))
            guard case .completed = await again.outcome else { Issue.record("outcome \(await again.outcome)"); return }
            try await again.view.present(width: 24, height: 20)
            try await again.view.settle()
            #expect(again.view.image.width == 24)
            await again.close()
        }
    }

    @Test("a failure carries its evidence to the host's app: an activity's fatal error mid-share is in the interrupted outcome (with its last stderr lines), and one that fails at start-up makes perform throw with its exit code")
    func failureEvidence() async throws {
        try await withServices(Self.manifests()) { launcher, folder in
            let sheet = ShareSheet(registry: ServiceRegistry(scanning: [folder.path]), items: [try .text("nine words")])
            let session = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher)
            _ = await requestError(session.connection, ServiceMessage(type: "fatal", text: "Word Count crashes on purpose after item 1"))
            guard case .interrupted(let error) = await session.outcome else { Issue.record("outcome \(await session.outcome)"); return }
            #expect(error.reason.contains("killed by SIGILL (Illegal instruction)") && error.reason.contains("Fatal error: Word Count crashes on purpose after item 1"),
                    "\(error.reason)")
            #expect(error.standardErrorTail.first == "about to fail: Word Count crashes on purpose after item 1", "\(error.standardErrorTail)")
            #expect("\(await session.outcome)".contains("Fatal error: Word Count crashes"))
            await session.close()
        }
        try await withServices(Self.manifests(mode: "exit")) { launcher, folder in
            let sheet = ShareSheet(registry: ServiceRegistry(scanning: [folder.path]), items: [try .text("nine words")])
            let error = await #expect(throws: RemoteError.self) {
                _ = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher)
            }
            #expect(error?.reason.contains("exited with code 7 before its handshake") == true, "\(String(describing: error))")
        }
    }

    @Test("an activity that never answers share_cancel is stopped after the grace period, with that as the reason")
    func ignoresCancel() async throws {
        try await withServices(Self.manifests(mode: "share-ignore-cancel")) { launcher, folder in
            let events = launcher.events()
            let sheet = ShareSheet(registry: ServiceRegistry(scanning: [folder.path]), items: [try .text("stubborn")])
            let session = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher,
                                                  cancelGrace: .milliseconds(300))
            try await session.view.present(width: 20, height: 20)
            try await ShareUpdates(session).wait(for: .ready)
            guard case .interrupted(let error) = await session.cancel() else { Issue.record("outcome \(await session.outcome)"); return }
            #expect(error.reason.contains("did not answer share_cancel within 0.3 s"), "\(error.reason)")
            let (_, reason) = try await termination(of: "com.example.test", in: events)
            #expect(reason.kind == .protocolViolation && reason.detail.contains("share_cancel"), "\(reason)")
            await session.close()
        }
    }

    @Test("anything after share_complete is a violation: the service is ended, the first answer stands")
    func secondAnswer() async throws {
        try await withServices(Self.manifests()) { launcher, folder in
            let events = launcher.events()
            let sheet = ShareSheet(registry: ServiceRegistry(scanning: [folder.path]), items: [try .text("twice")])
            let session = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher)
            try await session.view.present(width: 20, height: 20)
            _ = try? await session.connection.request(ServiceMessage(type: "share.complete-twice"))
            guard case .completed = await session.outcome else { Issue.record("outcome \(await session.outcome)"); return }
            let (_, reason) = try await termination(of: "com.example.test", in: events)
            #expect(reason.kind == .protocolViolation && reason.detail.contains("after the share's share_complete"), "\(reason.detail)")
            await session.close()
        }
    }

    @Test("a service that does not announce the share capability gets no share, and the error names it")
    func noCapability() async throws {
        try await withServices(Self.manifests(mode: "view")) { launcher, folder in
            let sheet = ShareSheet(registry: ServiceRegistry(scanning: [folder.path]), items: [try .text("x")])
            let error = await #expect(throws: RemoteError.self) {
                try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher)
            }
            #expect(error?.reason.contains("does not announce the \"share\" capability") == true, "\(String(describing: error))")
        }
    }

    @Test("an activity the sheet does not offer cannot be performed, and the error says why")
    func notOffered() async throws {
        try await withServices(Self.manifests(rules: #"[{"type": "image/*"}]"#)) { launcher, folder in
            let sheet = ShareSheet(registry: ServiceRegistry(scanning: [folder.path]), items: [try .text("x")])
            #expect(sheet.activities.isEmpty)
            let explanation = try #require(sheet.explanations.first)
            let error = await #expect(throws: RemoteError.self) { try await sheet.perform(explanation.activity, launcher: launcher) }
            #expect(error?.reason.contains(explanation.reason) == true)
        }
    }
}

/// The host API a first host gets right (issue "A share sheet people would copy", item 4):
/// waits with a timeout for a state and for the outcome, each tried on its timeout path, and
/// several readers of `updates`, each with every update from the start.
extension ShareSessionTests {
    @Test("wait(for:timeout:) returns the first update in a state (at once when it came already), throws timeout while none comes, and shareEnded when the share ends without one; outcome(timeout:) throws timeout while the share runs, then returns it")
    func waitsWithTimeouts() async throws {
        try await withServices(Self.manifests()) { launcher, folder in
            let sheet = ShareSheet(registry: ServiceRegistry(scanning: [folder.path]), items: [try .text("wait for it")])
            let session = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher)
            try await session.view.present(width: 20, height: 20)
            let ready = try await session.wait(for: .ready, timeout: .seconds(10))
            #expect(ready.state == .ready)
            #expect(try await session.wait(for: .preparing, timeout: .zero).state == .preparing, "one that came already: at once")
            let working = await #expect(throws: RemoteError.self) { try await session.wait(for: .working, timeout: .milliseconds(200)) }
            #expect(working?.code == .timeout && working?.reason.contains("no update in state working") == true, "\(String(describing: working))")
            let running = await #expect(throws: RemoteError.self) { try await session.outcome(timeout: .milliseconds(200)) }
            #expect(running?.code == .timeout && running?.reason.contains("has not ended after") == true, "\(String(describing: running))")
            // The share goes on after a timeout: it completes, and both waits see it.
            _ = try await session.connection.request(ServiceMessage(type: "share.progress", text: "0.5"))
            #expect(try await session.wait(for: .working, timeout: .seconds(10)).progress == 0.5)
            _ = try await session.connection.request(ServiceMessage(type: "share.complete"))
            guard case .completed = try await session.outcome(timeout: .seconds(10)) else { Issue.record("outcome \(await session.outcome)"); return }
            #expect(try await session.wait(for: .done, timeout: .zero).progress == 1)
            await session.close()

            // A share that ends (cancelled) without ever working.
            let other = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher)
            try await other.view.present(width: 20, height: 20)
            try await other.wait(for: .ready, timeout: .seconds(10))
            let waiting = Task { () async throws(RemoteError) -> ActivityUpdate in try await other.wait(for: .working, timeout: .seconds(10)) }
            _ = await other.cancel()
            let ended = await #expect(throws: RemoteError.self) { try await waiting.value }
            #expect(ended?.code == .shareEnded && ended?.reason.contains("without an update in state working") == true, "\(String(describing: ended))")
            await other.close()
        }
    }

    @Test("several readers of updates each get every update from the session's start, a late one by replay, and each stream ends with the outcome")
    func severalReaders() async throws {
        try await withServices(Self.manifests()) { launcher, folder in
            let sheet = ShareSheet(registry: ServiceRegistry(scanning: [folder.path]), items: [try .text("twice")])
            let session = try await sheet.perform(try #require(sheet.activity("com.example.test")), launcher: launcher)
            let early = ShareUpdates(session), alsoEarly = ShareUpdates(session)
            try await session.view.present(width: 20, height: 20)
            try await session.wait(for: .ready, timeout: .seconds(10))
            _ = try await session.connection.request(ServiceMessage(type: "share.progress", text: "0.25"))
            _ = try await session.connection.request(ServiceMessage(type: "share.complete"))
            _ = try await session.outcome(timeout: .seconds(10))
            // Started after the end: the whole history, then the end.
            let late = ShareUpdates(session)
            let (a, b, c) = (await early.all, await alsoEarly.all, await late.all)
            #expect(a.map(\.state) == [.preparing, .preparing, .ready, .working, .done], "\(a)")
            #expect(b == a && c == a, "every reader sees every update: \(b), \(c)")
            await session.close()
        }
    }
}
