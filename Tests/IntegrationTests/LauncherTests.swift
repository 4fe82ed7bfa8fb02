import CProto
import Glibc
import Logging
import RemoteCore
import RemoteHost
import RemoteTestSupport
import Synchronization
import Testing

/// The launcher across real processes, sandbox on: the fixture service started on demand under
/// bubblewrap from manifests the tests write. Every test checks for leaked fds and children.
@Suite("Launcher", .serialized)
struct LauncherTests {

    @Test("nothing starts until the first message; then the service runs sandboxed and answers")
    func launchOnFirstMessage() async throws {
        try await withServices(["test.json": ServiceFolder.manifest()]) { launcher, _ in
            let children = childProcesses()
            let connection = launcher.connection(to: "com.example.test")
            #expect(childProcesses() == children, "a connection alone must not start anything")
            #expect(await launcher.status().first?.state == .notRunning)

            let reply = try await connection.request(ServiceMessage(type: "echo", text: "hello"))
            #expect(reply.text == "hello")
            let pid = try #require(connection.processIdentifier)
            #expect(childProcesses().contains(pid))
            let status = try #require(await launcher.status().first)
            #expect(status.state == .running && status.launches == 1)
            #expect(status.processes.first?.sandboxed == true)
            #expect(status.processes.first?.residentBytes ?? 0 > 0)
            // Inside the pid namespace the service is not the host's child's pid.
            let inner = try await connection.request(ServiceMessage(type: "pid")).text
            #expect(inner != String(pid))
        }
    }

    @Test("what many tasks send while the service starts is queued in order and sent once it runs, as XPC queues a connection's messages; a request among them goes after the messages before it")
    func queuedInOrder() async throws {
        try await withServices(["test.json": ServiceFolder.manifest()]) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            // Each task runs until it first suspends, which is once its message is queued with
            // the service's supervisor: they are queued in this loop's order.
            var sends: [Task<Void, any Error>] = []
            for index in 0..<20 {
                sends.append(Task.immediate { try await connection.send(ServiceMessage(type: "note", text: "\(index)")) })
            }
            let middle = Task.immediate { try await connection.request(ServiceMessage(type: "notes")) }
            for index in 20..<40 {
                sends.append(Task.immediate { try await connection.send(ServiceMessage(type: "note", text: "\(index)")) })
            }
            for send in sends { try await send.value }
            let before = try #require(try await middle.value.text).split(separator: " ").map(String.init)
            #expect(Array(before.prefix(20)) == (0..<20).map(String.init), "the request went after the 20 messages queued before it: \(before)")
            let all = try await connection.request(ServiceMessage(type: "notes")).text
            #expect(all == (0..<40).map(String.init).joined(separator: " "))
            #expect(await launcher.status().first?.launches == 1)
        }
    }

    @Test("a launched service's event loop has a thread of its own, apart from the main actor, whose thread is not parked: the main actor runs where an async main's drain puts it")
    func loopHasItsOwnThread() async throws {
        try await withServices(["test.json": ServiceFolder.manifest()]) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            let reply = try await connection.request(ServiceMessage(type: "threads")).text
            // dispatch_main() parks the main thread; pool threads serve the main queue.
            #expect(reply == "main actor on the main thread: false; event loop there: false")
        }
    }

    @Test("the low-latency path: a caller preferring ServiceConnection.readerExecutor launches the service, gets its replies (8 at once too) and each resumes it on the loop thread that read it; a remote error still throws")
    func readerExecutorPreference() async throws {
        try await withServices(["test.json": ServiceFolder.manifest()]) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            try await withTaskExecutorPreference(ServiceConnection.readerExecutor) {
                for index in 0..<100 {
                    let reply = try await connection.request(ServiceMessage(type: "echo", text: "\(index)"))
                    #expect(reply.text == "\(index)")
                    #expect(EventLoop.shared.isLoopThread, "resumed on the thread that read the reply")
                }
                try await withThrowingTaskGroup(of: Bool.self) { group in
                    for index in 0..<8 {
                        group.addTask {
                            let reply = try await connection.request(ServiceMessage(type: "echo", text: "\(index)"))
                            return reply.text == "\(index)" && EventLoop.shared.isLoopThread
                        }
                    }
                    for try await good in group { #expect(good) }
                }
                let error = await #expect(throws: RemoteError.self) { try await connection.request(ServiceMessage(type: "fail")) }
                #expect(error?.code == .remoteError)
            }
            await connection.invalidate()
        }
    }

    @Test("inside the sandbox: no host files, no host environment, loopback only")
    func sandboxConfines() async throws {
        try await withServices(["test.json": ServiceFolder.manifest()]) { launcher, folder in
            let secret = "/tmp/remoteview-secret-\(getpid())"
            let fd = open(secret, O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
            #expect(fd >= 0)
            close(fd)
            defer { unlink(secret) }
            setenv("REMOTEVIEW_TEST_SECRET", "host-only", 1)
            defer { unsetenv("REMOTEVIEW_TEST_SECRET") }

            let connection = launcher.connection(to: "com.example.test")
            func stat(_ path: String) async throws -> String? {
                try await connection.request(ServiceMessage(type: "stat", text: path)).text
            }
            #expect(try await stat(secret)?.hasPrefix("absent") == true, "the host's /tmp is private")
            #expect(try await stat(folder.path)?.hasPrefix("absent") == true, "the manifest folder is not bound")
            #expect(try await stat("/root")?.hasPrefix("absent") == true, "no host home")
            #expect(try await stat("/etc/passwd")?.hasPrefix("absent") == true, "no host /etc")
            #expect(try await stat("/usr/lib")?.hasPrefix("exists") == true, "the read-only system is there")
            // Netlink, which lists interfaces, is refused without the network entitlement (the
            // seccomp filter); the net namespace has only lo anyway (SecurityTests tries inet).
            #expect(try await connection.request(ServiceMessage(type: "interfaces")).text == "error: Address family not supported by protocol")
            let environment = try await connection.request(ServiceMessage(type: "environment")).text ?? ""
            #expect(!environment.contains("REMOTEVIEW_TEST_SECRET"))
            // Who it is, from its manifest (ServiceMain.exit(sharing:) needs nothing else).
            let variables = environment.split(separator: "\n")
            #expect(variables.contains("REMOTEVIEW_IDENTIFIER=com.example.test") && variables.contains("REMOTEVIEW_TITLE=Test service"), "\(environment)")
            #expect(!environment.contains("LISTEN_FDS"), "the SDK clears LISTEN_* once it took fd 3")
            // What tells the launcher's fd 3 from systemd's (Protocol.md), as the process started.
            let start = try await connection.request(ServiceMessage(type: "start-environment")).text?.split(separator: "\n") ?? []
            #expect(start.contains("LISTEN_FDS=1") && start.contains("LISTEN_FDNAMES=remoteview"), "\(start)")
        }
    }

    @Test("a manifest entitled to the network shares the host's interfaces")
    func networkEntitlement() async throws {
        let hostInterfaces = Self.interfaces()
        try await withServices(["test.json": ServiceFolder.manifest(extra: #""sandbox": {"network": true}"#)]) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            let interfaces = try await connection.request(ServiceMessage(type: "interfaces")).text
            #expect(interfaces == hostInterfaces)
        }
    }

    @Test("the data folder entitlement: the service writes into <dataRoot>/<identifier>, made with mode 0700 (a root host's: owned by the service's uid); without it there is none",
          arguments: [true, false])
    func dataFolder(sandboxed: Bool) async throws {
        let root = try TemporaryFolder("remoteview-data", searchable: true)
        defer { Self.removeTree(root.path) }
        var configuration = fastLauncherConfiguration()
        configuration.dataRoot = root.path + "/share/services"
        if !sandboxed { configuration.sandbox = .unsandboxed }
        let dataRoot = configuration.dataRoot
        let manifests = ["data.json": ServiceFolder.manifest(identifier: "com.example.data", extra: #""sandbox": {"dataFolder": true}"#),
                         "plain.json": ServiceFolder.manifest(identifier: "com.example.plain")]
        try await withServices(manifests, configuration: configuration) { launcher, _ in
            let folder = dataRoot + "/com.example.data"
            let connection = launcher.connection(to: "com.example.data")
            let written = try await connection.request(ServiceMessage(type: "data.write", text: "note.txt=kept")).text
            #expect(written == (sandboxed ? "/data" : folder) + "/note.txt")
            #expect(Syscall.readSmallFile(folder + "/note.txt").map { String(decoding: $0, as: UTF8.self) } == "kept")
            var info = stat()
            #expect(stat(folder, &info) == 0 && info.st_mode & 0o777 == 0o700)
            // A root host's sandboxed service runs as a uid of its own, which owns its folder and
            // passes through (but cannot list) the folders above it.
            let ownUID = sandboxed && getuid() == 0
            let uid = await launcher.status().first { $0.identifier == "com.example.data" }?.processes.first?.userID
            #expect(info.st_uid == (ownUID ? try #require(uid) : getuid()) && uid.map { info.st_gid == $0 } ?? true, "\(info.st_uid)")
            #expect(stat(root.path + "/share", &info) == 0 && info.st_mode & 0o777 == (ownUID ? 0o711 : 0o700), "missing parents")
            if sandboxed {
                let inside = try await connection.request(ServiceMessage(type: "stat", text: folder)).text
                #expect(inside?.hasPrefix("absent") == true, "the host path itself is not in the sandbox, only /data")
            }

            let plain = launcher.connection(to: "com.example.plain")
            let error = await requestError(plain, ServiceMessage(type: "data.write", text: "note.txt=lost"))
            #expect(error?.remote?.message == "no data directory")
            #expect(stat(dataRoot + "/com.example.plain", &info) != 0, "no folder without the entitlement")
        }
    }

    @Test("a data folder that is a symbolic link is refused: bound read-write, it could hand over any host folder")
    func dataFolderLink() async throws {
        let root = try TemporaryFolder("remoteview-data")
        let elsewhere = try TemporaryFolder("remoteview-elsewhere")
        defer { Self.removeTree(root.path); elsewhere.remove() }
        #expect(symlink(elsewhere.path, root.path + "/com.example.data") == 0)
        var configuration = fastLauncherConfiguration()
        configuration.dataRoot = root.path
        let manifest = ServiceFolder.manifest(identifier: "com.example.data", extra: #""sandbox": {"dataFolder": true}"#)
        try await withServices(["data.json": manifest], configuration: configuration) { launcher, _ in
            let connection = launcher.connection(to: "com.example.data")
            let error = await requestError(connection, ServiceMessage(type: "data.write", text: "note.txt=x"))
            #expect(error?.code == .invalidated)
            #expect(error?.reason.contains("cannot prepare the data folder of com.example.data (sandbox.dataFolder)") == true, "\(String(describing: error))")
            #expect(error?.reason.contains("symbolic link") == true)
            #expect(await launcher.status().first?.launches == 0)
        }
    }

    /// Deletes `path` and everything below it.
    static func removeTree(_ path: String) {
        for name in (try? Syscall.directoryEntries(path)) ?? [] where unlink(path + "/" + name) != 0 {
            removeTree(path + "/" + name)
        }
        rmdir(path)
    }

    @Test("a blocking call from a thread of its own launches the service, then is answered on that thread; a crash fails it with interrupted, the next relaunches; on the loop's thread it refuses at once")
    func blockingCall() async throws {
        try await withServices(["test.json": ServiceFolder.manifest(idleTimeout: 30)]) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            // Nothing runs yet: the call launches the service within its timeout.
            let first = await onOwnThread { Outcome { () throws(RemoteError) in try connection.requestSync(ServiceMessage(type: "echo", text: "launched"), timeout: .seconds(20)) } }
            #expect(first == .reply("launched"))
            let pid = try #require(connection.processIdentifier)
            let replies = await onOwnThread {
                (0..<100).map { index in Outcome { () throws(RemoteError) in try connection.requestSync(ServiceMessage(type: "echo", text: "\(index)")) } }
            }
            #expect(replies == (0..<100).map { .reply("\($0)") })
            #expect(await onOwnThread { Outcome { () throws(RemoteError) in try connection.requestSync(ServiceMessage(type: "fail")) } } == .error(.remoteError))
            // The process dies under a blocking call: interrupted; the next call relaunches.
            let crashed = await onOwnThread { Outcome { () throws(RemoteError) in try connection.requestSync(ServiceMessage(type: "crash")) } }
            #expect(crashed == .error(.interrupted))
            let again = await onOwnThread { Outcome { () throws(RemoteError) in try connection.requestSync(ServiceMessage(type: "echo", text: "again"), timeout: .seconds(20)) } }
            #expect(again == .reply("again"))
            #expect(connection.processIdentifier != pid)
            let onLoop = await onOwnThread {
                EventLoop.shared.runAndWait { Outcome { () throws(RemoteError) in try connection.requestSync(ServiceMessage(type: "echo")) } }
            }
            #expect(onLoop == .error(.invalidArgument))
        }
    }

    @Test("idle exit: the process exits by itself and is reaped; the next message relaunches it")
    func idleExit() async throws {
        try await withServices(["test.json": ServiceFolder.manifest(idleTimeout: 0.3)]) { launcher, _ in
            let events = launcher.events()
            let connection = launcher.connection(to: "com.example.test")
            _ = try await connection.request(ServiceMessage(type: "echo", text: "one"))
            let first = try #require(connection.processIdentifier)
            let reason = try await termination(of: first, in: events)
            #expect(reason.kind == .idleExit)
            #expect(reason.detail.contains("exited by itself"))
            #expect(!childProcesses().contains(first), "the idle process is reaped")

            #expect(try await connection.request(ServiceMessage(type: "echo", text: "two")).text == "two")
            let second = try #require(connection.processIdentifier)
            #expect(second != first)
            #expect(await launcher.status().first?.launches == 2)
        }
    }

    @Test("a service that ignores its idle timeout is stopped by the host")
    func hostEnforcesIdle() async throws {
        try await withServices(["test.json": ServiceFolder.manifest(mode: "ignore-idle", idleTimeout: 0.2)]) { launcher, _ in
            let events = launcher.events()
            let connection = launcher.connection(to: "com.example.test")
            _ = try await connection.request(ServiceMessage(type: "echo"))
            let pid = try #require(connection.processIdentifier)
            let reason = try await termination(of: pid, in: events)
            #expect(reason.kind == .idleExit)
            #expect(reason.detail.contains("stopped by the host"))
        }
    }

    @Test("kill -9: the outstanding request fails with interrupted, an event says so, the next request relaunches")
    func killedService() async throws {
        try await withServices(["test.json": ServiceFolder.manifest()]) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            _ = try await connection.request(ServiceMessage(type: "echo"))
            let servicePid = try #require(await launcher.status().first?.processes.first?.servicePid)
            let first = try #require(connection.processIdentifier)

            async let outstanding: RemoteError? = {
                do { _ = try await connection.request(ServiceMessage(type: "sleep")); return nil } catch let error as RemoteError { return error } catch { return nil }
            }()
            // Outstanding in the service before the kill (a "sleep" sent after it would go to the
            // next process).
            #expect(try await connection.request(ServiceMessage(type: "blocked", text: "1")).text == "1")
            kill(servicePid, SIGKILL)
            let error = await outstanding
            #expect(error?.code == .interrupted)

            var iterator = connection.events.makeAsyncIterator()
            guard case .interrupted(let event) = await iterator.next() else {
                Issue.record("expected an interrupted event")
                return
            }
            #expect(event.reason.contains("killed by SIGKILL"), "\(event.reason)")

            #expect(try await connection.request(ServiceMessage(type: "echo", text: "again")).text == "again")
            #expect(connection.processIdentifier != first)
            let status = try #require(await launcher.status().first)
            #expect(status.launches == 2 && status.crashes == 1)
            #expect(status.lastTermination?.kind == .killed && status.lastTermination?.signal == SIGKILL)
        }
    }

    @Test("a service that crashes at start-up is relaunched with backoff, then invalidated as a crash loop")
    func crashLoop() async throws {
        try await withServices(["test.json": ServiceFolder.manifest(mode: "exit")]) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            var failures: [RemoteError.Code] = []
            for _ in 0..<10 {
                do {
                    _ = try await connection.request(ServiceMessage(type: "echo"))
                    Issue.record("the crashing service answered")
                } catch let error as RemoteError {
                    failures.append(error.code)
                    if error.code == .invalidated {
                        #expect(error.reason.contains("crash loop"), "\(error.reason)")
                        #expect(error.reason.contains("exited with code 7"), "\(error.reason)")
                        break
                    }
                }
            }
            #expect(failures == [.interrupted, .interrupted, .interrupted, .invalidated])
            var events: [ServiceConnection.Event] = []
            for await event in connection.events { events.append(event) }
            #expect(events.count == 4)
            guard case .invalidated(let last) = events.last else { Issue.record("invalidated must come last"); return }
            #expect(last.reason.contains("crash loop"))
            let status = try #require(await launcher.status().first)
            #expect(status.state == .invalidated && status.launches == 3 && status.crashes == 3)
        }
    }

    @Test("a crash carries its evidence: the signal by name, Swift's fatal error and the last lines on stderr reach the request's error, the interrupted event, the termination event and the status; the stack trace is one log entry")
    func crashEvidence() async throws {
        let records = LogRecords()
        try await withServices(["test.json": ServiceFolder.manifest()], configuration: fastLauncherConfiguration(Logger(label: "tests") { _ in records.handler() })) { launcher, _ in
            let events = launcher.events()
            let connection = launcher.connection(to: "com.example.test")
            _ = try await connection.request(ServiceMessage(type: "echo"))
            let pid = try #require(connection.processIdentifier)
            let error = await requestError(connection, ServiceMessage(type: "fatal", text: "Word Count crashes on purpose after item 1"))
            let reason = try await termination(of: pid, in: events)
            #expect(reason.kind == .killed && reason.signal == SIGILL, "\(reason)")
            #expect(reason.detail == "killed by SIGILL (Illegal instruction)", "\(reason)")
            #expect(reason.fatalError?.hasSuffix("Fatal error: Word Count crashes on purpose after item 1") == true, "\(reason)")
            #expect(reason.standardErrorTail.first == "about to fail: Word Count crashes on purpose after item 1", "\(reason.standardErrorTail)")
            #expect(!reason.standardErrorTail.contains { $0.contains("Current stack trace") }, "the crash report stays out of the tail")
            #expect("\(reason)".contains("; stderr: ") && "\(reason)".contains("Fatal error: Word Count crashes on purpose after item 1"), "\(reason)")
            #expect(error?.code == .interrupted && error?.reason.contains("killed by SIGILL") == true
                    && error?.reason.contains("Fatal error: Word Count crashes on purpose") == true, "\(String(describing: error))")
            #expect(error?.standardErrorTail == reason.standardErrorTail)
            guard case .interrupted(let event) = try await nextEvent(of: connection) else { Issue.record("no interrupted event"); return }
            #expect(event.reason.contains("Fatal error: Word Count crashes on purpose") && event.standardErrorTail == reason.standardErrorTail, "\(event)")
            #expect(await launcher.status().first?.lastTermination?.fatalError == reason.fatalError)
        }
        let lines = records.lines.map(\.message)
        let report = lines.filter { $0.hasPrefix("crash report (") }
        #expect(report.count == 1 && report[0].contains("Current stack trace:") && report[0].contains("\n0 "), "\(report)")
        #expect(!lines.contains { $0.hasPrefix("0 ") || $0.hasPrefix("1 ") }, "no log entry per stack frame")
    }

    @Test("a start-up failure says how it ended and what it said: the exit code and the last stderr line, in the error, the crash loop's invalidation and the status; no log line blames the host",
          arguments: ["script", "false"])
    func startUpFailureEvidence(kind: String) async throws {
        let records = LogRecords()
        let folder = try TemporaryFolder("remoteview-startup", searchable: true)
        defer { folder.remove() }
        let executable = kind == "false" ? "/bin/false"
            : try folder.write("wordcount", "#!/bin/sh\necho 'cannot open /etc/wordcount.conf' >&2\nexit 1\n", mode: 0o755)
        let manifest = ServiceFolder.manifest(identifier: "com.example.wordcount").replacing(testServiceExecutable, with: executable)
        try await withServices(["wc.json": manifest], configuration: fastLauncherConfiguration(Logger(label: "tests") { _ in records.handler() })) { launcher, _ in
            let connection = launcher.connection(to: "com.example.wordcount")
            let said = kind == "false" ? "" : "; stderr: cannot open /etc/wordcount.conf"
            var last: RemoteError?
            for _ in 0..<10 {
                last = await requestError(connection, ServiceMessage(type: "echo"))
                if last?.code != .interrupted { break }
                #expect(last?.reason == "com.example.wordcount ended: exited: exited with code 1 before its handshake\(said)", "\(String(describing: last))")
            }
            #expect(last?.code == .invalidated && last?.reason.contains("last: exited: exited with code 1 before its handshake\(said)") == true, "\(String(describing: last))")
            if kind == "script" { #expect(last?.standardErrorTail == ["cannot open /etc/wordcount.conf"]) }
            let status = try #require(await launcher.status().first)
            #expect(status.lastTermination?.exitCode == 1 && status.lastTermination?.kind == .exited, "\(status)")
        }
        let blaming = records.lines.map(\.message).filter { $0.contains("by the host") || $0.hasPrefix("stopping: stopped") }
        #expect(blaming.isEmpty, "\(blaming)")
    }

    @Test("a service the host stops while it starts ended by the host's stop, not its own crash; a stack trace's report ends at the first line that is not of it, and what follows is logged and kept as usual")
    func stopDuringStartAndCrashReportEnd() async throws {
        let records = LogRecords()
        try await withServices(["mute.json": ServiceFolder.manifest(identifier: "com.example.mute", mode: "mute-until-closed"),
                                "test.json": ServiceFolder.manifest()],
                               configuration: fastLauncherConfiguration(Logger(label: "tests") { _ in records.handler() })) { launcher, _ in
            let events = launcher.events()
            let mute = launcher.connection(to: "com.example.mute")
            let pending = Task { try? await mute.request(ServiceMessage(type: "echo"), timeout: .seconds(10)) }
            let pid = try await launch(of: "com.example.mute", in: events)
            await mute.invalidate()
            let reason = try await termination(of: pid, in: events)
            #expect(reason.kind == .stopped && !reason.isCrash, "\(reason)")
            _ = await pending.value

            let connection = launcher.connection(to: "com.example.test")
            _ = try await connection.request(ServiceMessage(type: "print-lines", text: "Current stack trace:\n0    frame zero\n1    frame one\nback to normal"))
            _ = try await connection.request(ServiceMessage(type: "print-lines", text: "still normal"))
            let process = try #require(connection.processIdentifier)
            await connection.invalidate()
            let ended = try await termination(of: process, in: events)
            #expect(ended.standardErrorTail.suffix(2) == ["back to normal", "still normal"], "\(ended.standardErrorTail)")
        }
        let lines = records.lines.map(\.message)
        #expect(lines.contains("crash report (3 lines):\nCurrent stack trace:\n0    frame zero\n1    frame one"), "\(lines)")
        #expect(lines.contains("back to normal") && lines.contains("still normal"), "\(lines)")
    }

    @Test("an unknown service and an invalid manifest invalidate the connection with the reason")
    func unknownAndInvalid() async throws {
        let invalid = ServiceFolder.manifest(identifier: "com.example.broken", extra: #""colour": "blue""#)
        try await withServices(["broken.json": invalid]) { launcher, folder in
            let unknown = launcher.connection(to: "com.example.nothing")
            let error = await #expect(throws: RemoteError.self) { try await unknown.request(ServiceMessage(type: "echo")) }
            #expect(error?.code == .invalidated)
            #expect(error?.reason.contains("no service \"com.example.nothing\"") == true, "\(error?.reason ?? "")")
            var iterator = unknown.events.makeAsyncIterator()
            guard case .invalidated = await iterator.next() else { Issue.record("expected invalidated"); return }
            #expect(await iterator.next() == nil, "invalidated is the last event")

            let broken = launcher.connection(to: "com.example.broken")
            let brokenError = await #expect(throws: RemoteError.self) { try await broken.send(ServiceMessage(type: "echo")) }
            #expect(brokenError?.code == .invalidated)
            #expect(brokenError?.reason.contains("\(folder.path)/broken.json: colour: unknown key") == true, "\(brokenError?.reason ?? "")")
        }
    }

    @Test("bubblewrap missing: invalidated with what to do, never an unsandboxed fallback")
    func bubblewrapMissing() async throws {
        var configuration = fastLauncherConfiguration()
        configuration.sandbox = .bubblewrap(path: "/nonexistent/bwrap")
        try await withServices(["test.json": ServiceFolder.manifest()], configuration: configuration) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            let error = await #expect(throws: RemoteError.self) { try await connection.request(ServiceMessage(type: "echo")) }
            #expect(error?.code == .invalidated)
            #expect(error?.reason.contains("apt-get install bubblewrap") == true, "\(error?.reason ?? "")")
            #expect(await launcher.status().first?.launches == 0)
        }
    }

    @Test("bubblewrap refusing to build the sandbox invalidates the service with bubblewrap's reason")
    func bubblewrapRefuses() async throws {
        let vanishing = try TemporaryFolder("remoteview-vanishing")
        let executable = try vanishing.write("service", "#!/bin/sh\nexit 0\n", mode: 0o755)
        let manifest = ServiceFolder.manifest().replacing(testServiceExecutable, with: executable)
        try await withServices(["test.json": manifest]) { launcher, _ in
            vanishing.remove()  // valid when scanned, gone at launch: bubblewrap cannot bind it
            let connection = launcher.connection(to: "com.example.test")
            var failures: [RemoteError] = []
            for _ in 0..<3 {
                do { _ = try await connection.request(ServiceMessage(type: "echo")) } catch let error as RemoteError {
                    failures.append(error)
                    if error.code == .invalidated { break }
                }
            }
            #expect(failures.last?.code == .invalidated)
            #expect(failures.last?.reason.contains("bubblewrap refused to create the sandbox") == true, "\(failures)")
            let status = try #require(await launcher.status().first)
            #expect(status.launches == 1, "a refused sandbox is not retried")
            #expect(status.lastTermination?.kind == .sandboxRefused)
        }
    }

    @Test("invalidate(): goodbye, and a service that ignores it and SIGTERM is killed")
    func invalidateStops() async throws {
        let manifests = ["polite.json": ServiceFolder.manifest(identifier: "com.example.polite"),
                         "stubborn.json": ServiceFolder.manifest(identifier: "com.example.stubborn", mode: "ignore-goodbye")]
        try await withServices(manifests) { launcher, _ in
            let events = launcher.events()
            let polite = launcher.connection(to: "com.example.polite")
            _ = try await polite.request(ServiceMessage(type: "echo"))
            let politePid = try #require(polite.processIdentifier)
            await polite.invalidate()
            let politeEnd = try await termination(of: politePid, in: events)
            #expect(politeEnd.kind == .stopped && politeEnd.exitCode == 0, "\(politeEnd)")
            let error = await #expect(throws: RemoteError.self) { try await polite.request(ServiceMessage(type: "echo")) }
            #expect(error?.code == .invalidated)

            let stubborn = launcher.connection(to: "com.example.stubborn")
            _ = try await stubborn.request(ServiceMessage(type: "echo"))
            let stubbornPid = try #require(stubborn.processIdentifier)
            await stubborn.invalidate()
            let stubbornEnd = try await termination(of: stubbornPid, in: events)
            #expect(stubbornEnd.kind == .stopped && stubbornEnd.signal == SIGKILL, "\(stubbornEnd)")
        }
    }

    @Test("a service that breaks the protocol is ended with the reason; others are unaffected")
    func protocolViolation() async throws {
        let manifests = ["bad.json": ServiceFolder.manifest(identifier: "com.example.bad", mode: "garbage"),
                         "good.json": ServiceFolder.manifest(identifier: "com.example.good")]
        try await withServices(manifests) { launcher, _ in
            let events = launcher.events()
            let good = launcher.connection(to: "com.example.good")
            _ = try await good.request(ServiceMessage(type: "echo"))
            let bad = launcher.connection(to: "com.example.bad")
            await #expect(throws: RemoteError.self) { try await bad.request(ServiceMessage(type: "echo")) }
            var reason: TerminationReason?
            for await event in events {
                if case .terminated("com.example.bad", _, let ended) = event { reason = ended; break }
            }
            #expect(reason?.kind == .protocolViolation, "\(String(describing: reason))")
            #expect(try await good.request(ServiceMessage(type: "echo", text: "still here")).text == "still here")
        }
    }

    @Test("shared services serve every connection from one process; perConnection gives each its own")
    func instancePolicies() async throws {
        let manifests = ["shared.json": ServiceFolder.manifest(identifier: "com.example.shared"),
                         "own.json": ServiceFolder.manifest(identifier: "com.example.own", extra: #""instances": "perConnection""#)]
        try await withServices(manifests) { launcher, _ in
            let a = launcher.connection(to: "com.example.shared"), b = launcher.connection(to: "com.example.shared")
            _ = try await a.request(ServiceMessage(type: "echo"))
            _ = try await b.request(ServiceMessage(type: "echo"))
            #expect(a.processIdentifier != nil && a.processIdentifier == b.processIdentifier)
            #expect(await launcher.status().first { $0.identifier == "com.example.shared" }?.processes.first?.clients == 2)

            let c = launcher.connection(to: "com.example.own"), d = launcher.connection(to: "com.example.own")
            _ = try await c.request(ServiceMessage(type: "echo"))
            _ = try await d.request(ServiceMessage(type: "echo"))
            #expect(c.processIdentifier != nil && d.processIdentifier != nil && c.processIdentifier != d.processIdentifier)
            #expect(await launcher.status().first { $0.identifier == "com.example.own" }?.processes.count == 2)
        }
    }

    @Test("invalidating one of two connections to a shared service leaves the other one its process")
    func invalidateSharedClient() async throws {
        try await withServices(["test.json": ServiceFolder.manifest()]) { launcher, _ in
            let a = launcher.connection(to: "com.example.test"), b = launcher.connection(to: "com.example.test")
            _ = try await a.request(ServiceMessage(type: "echo"))
            _ = try await b.request(ServiceMessage(type: "echo"))
            let pid = try #require(b.processIdentifier)
            await a.invalidate()
            #expect(try await b.request(ServiceMessage(type: "echo", text: "still")).text == "still")
            #expect(b.processIdentifier == pid)
            #expect(await launcher.status().first?.launches == 1)
        }
    }

    @Test("shutting the launcher down invalidates every connection, used or not, and any made afterwards")
    func shutdownInvalidatesAll() async throws {
        try await withServices(["test.json": ServiceFolder.manifest()]) { launcher, _ in
            let used = launcher.connection(to: "com.example.test"), unused = launcher.connection(to: "com.example.test")
            _ = try await used.request(ServiceMessage(type: "echo"))
            await launcher.shutdown()
            for connection in [used, unused] {
                var last: ServiceConnection.Event?
                for await event in connection.events { last = event }
                guard case .invalidated(let error)? = last else { Issue.record("expected invalidated last"); return }
                #expect(error.reason.contains("shut down"))
            }
            let late = launcher.connection(to: "com.example.test")
            let error = await #expect(throws: RemoteError.self) { try await late.request(ServiceMessage(type: "echo")) }
            #expect(error?.code == .invalidated)
        }
    }

    @Test("the service's stdout and stderr reach the host's log with its identifier")
    func outputCaptured() async throws {
        let records = LogRecords()
        let logger = Logger(label: "tests") { _ in records.handler() }
        try await withServices(["test.json": ServiceFolder.manifest()], configuration: fastLauncherConfiguration(logger)) { launcher, _ in
            let events = launcher.events()
            let connection = launcher.connection(to: "com.example.test")
            _ = try await connection.request(ServiceMessage(type: "print", text: "marker-42"))
            let pid = try #require(connection.processIdentifier)
            await connection.invalidate()
            _ = try await termination(of: pid, in: events)
        }
        let lines = records.lines.filter { $0.message.contains("marker-42") }
        #expect(lines.map(\.message).sorted() == ["err: marker-42", "out: marker-42"])
        #expect(lines.allSatisfy { $0.metadata["service"] == "com.example.test" })
    }

    @Test("a service that leaves nothing behind gets no warning when it ends: the sandbox's own pid 1, found a moment after it, is reaped quietly (a share of the built demo, run as make demo runs it, prints none either)")
    func noFalseLeftovers() async throws {
        let records = LogRecords()
        try await withServices(["test.json": ServiceFolder.manifest()], configuration: fastLauncherConfiguration(Logger(label: "tests") { _ in records.handler() })) { launcher, _ in
            for _ in 0..<5 {
                let events = launcher.events()
                let connection = launcher.connection(to: "com.example.test")
                _ = try await connection.request(ServiceMessage(type: "echo"))
                let pid = try #require(connection.processIdentifier)
                await connection.invalidate()
                _ = try await termination(of: pid, in: events)
            }
        }
        let warnings = records.lines.filter { $0.message.contains("left behind") }
        #expect(warnings.isEmpty, "\(warnings.map(\.message))")
        // make demo's default: a share with Notes, headless, in a process of its own.
        let demo = testServiceExecutable.replacing("remoteview-test-service", with: "demo-share")
        let (status, output) = try runCommands([["timeout", "120", demo]])[0]
        #expect(status == 0 && output.contains("outcome: completed"), "\(output)")
        #expect(!output.contains("warning"), "\(output)")
    }

    @Test("when the host is killed, its services are gone within a second, and the next launcher removes its control groups")
    func hostDeathTakesServices() async throws {
        let folder = try ServiceFolder(["test.json": ServiceFolder.manifest()])
        defer { folder.remove() }
        try await withoutLeaks(within: .seconds(20)) {
            let output = try Syscall.pipe()
            var options = ChildProcess.Options()
            options.pass(output.second, as: 1)
            let host = try ChildProcess.start(executable: testHostExecutable,
                                              arguments: [folder.path, "com.example.test"], options: options)
            let reader = try ReadableDescriptor(output.first)
            var line: [UInt8] = []
            while !line.contains(0x0a) {
                guard let chunk = try reader.read(upTo: 256) else { _ = await reader.waitReadable(); continue }
                if chunk.isEmpty { break }
                line += chunk
            }
            let pids = String(decoding: line, as: UTF8.self).split(whereSeparator: \.isWhitespace).dropFirst().compactMap { Int32($0) }
            #expect(pids.count == 3, "the host printed \(String(decoding: line, as: UTF8.self))")
            // Watch the sandbox's processes (bubblewrap, its pid 1, the service) by pidfd: once
            // they are gone, the control groups are empty.
            let watchers = try pids.map { pid in try ProcessDescriptor(pid: pid, isChild: false) }
            host.send(signal: SIGKILL)
            _ = try await host.waitForExit()
            try await withDeadline(.seconds(1), "the services' exit after the host's death") {
                for watcher in watchers { _ = try await watcher.waitForExit() }
            }
            // The killed host could not remove its control groups; the next launcher does.
            let stale = launcherControlGroups(ofProcess: host.pid)
            guard !stale.isEmpty else { return }   // no writable control groups on this machine
            try await withLauncher(registry: ServiceRegistry(scanning: [folder.path])) { _ in }
            #expect(launcherControlGroups(ofProcess: host.pid).isEmpty, "left behind: \(launcherControlGroups(ofProcess: host.pid).sorted())")
        }
    }

    // MARK: helpers

    /// This process's network interfaces, sorted, comma-separated.
    static func interfaces() -> String {
        var names: [String] = []
        if let list = if_nameindex() {
            var entry = list
            while entry.pointee.if_index != 0, let name = entry.pointee.if_name {
                names.append(String(cString: name))
                entry += 1
            }
            if_freenameindex(list)
        }
        return names.sorted().joined(separator: ",")
    }
}
