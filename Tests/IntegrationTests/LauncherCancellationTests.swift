import Glibc
import RemoteHost
import RemoteTestSupport
import Testing

/// Tier 3: the waits a host's caller can reach in the launcher end when the caller's task is
/// cancelled, long before whatever they waited for, and leave nothing behind (no fd, no child).
/// A task started with `Task.immediate` runs until it first suspends, so by the time the call
/// returns it has reached its wait (or is on its way to the launcher's actor).
@Suite("Cancelling the launcher's waits", .serialized)
struct LauncherCancellationTests {
    @Test("the relaunch backoff, the wait for another caller's connect, and the wait for another connection's launch are all cancelled at once")
    func launchWaits() async throws {
        var configuration = fastLauncherConfiguration()
        configuration.backoff = .seconds(3600)
        configuration.maximumBackoff = .seconds(3600)
        configuration.crashLoopLimit = 100
        try await withServices(["test.json": ServiceFolder.manifest(mode: "exit")], configuration: configuration) { launcher, _ in
            let first = launcher.connection(to: "com.example.test"), second = launcher.connection(to: "com.example.test")
            // It crashes at start-up: the next launch waits an hour.
            #expect(await requestError(first, ServiceMessage(type: "echo"))?.code == .interrupted)
            let backoff = Task.immediate { try await first.request(ServiceMessage(type: "echo")) }
            let sameConnection = Task.immediate { try await first.request(ServiceMessage(type: "echo")) }
            let otherConnection = Task.immediate { try await second.request(ServiceMessage(type: "echo")) }
            for task in [backoff, sameConnection, otherConnection] { task.cancel() }
            for task in [backoff, sameConnection, otherConnection] {
                let error = await #expect(throws: RemoteError.self) { try await task.value }
                #expect(error?.code == .cancelled, "\(String(describing: error))")
            }
            let status = try #require(await launcher.status().first)
            #expect(status.launches == 1 && status.state == .notRunning, "nothing launched meanwhile: \(status)")
        }
    }

    @Test("a cancelled invalidate() returns at once; the launcher still sees the stop through to SIGKILL")
    func invalidateCancelled() async throws {
        var configuration = fastLauncherConfiguration()
        configuration.stopGracePeriod = .seconds(2)
        try await withServices(["test.json": ServiceFolder.manifest(mode: "ignore-goodbye")], within: .seconds(30),
                               configuration: configuration) { launcher, _ in
            let events = launcher.events()
            let connection = launcher.connection(to: "com.example.test")
            _ = try await connection.request(ServiceMessage(type: "echo"))
            let pid = try #require(connection.processIdentifier)
            let invalidating = Task.immediate { await connection.invalidate() }
            invalidating.cancel()
            await invalidating.value
            // It ignores goodbye and SIGTERM: stopping it takes two grace periods, so it is
            // still there when the cancelled invalidate() has returned.
            #expect(childProcesses().contains(pid), "invalidate() returned before the stop was through")
            let reason = try await termination(of: pid, in: events)
            #expect(reason.kind == .stopped && reason.signal == SIGKILL, "\(reason)")
            let error = await requestError(connection, ServiceMessage(type: "echo"))
            #expect(error?.code == .invalidated)
        }
    }

    @Test("a wait for a child process's exit is cancelled; the process runs on")
    func processExit() async throws {
        try await withoutLeaks {
            let process = try ChildProcess.start(executable: "/bin/sleep", arguments: ["3600"], options: ChildProcess.Options())
            let waiting = Task.immediate { try await process.waitForExit() }
            waiting.cancel()
            await #expect(throws: CancellationError.self) { try await waiting.value }
            #expect(process.termination == nil)
            process.send(signal: SIGKILL)
            #expect(try await process.waitForExit() == .killed(signal: SIGKILL, coreDumped: false))
        }
    }
}

/// Cancelling the task that runs a launcher shuts it down in order, and a channel whose
/// listeners could not tell the new process what it must know is not used.
@Suite("Cancelling a launcher; failed replays", .serialized)
struct LauncherShutdownTests {
    @Test("cancelling Launcher.run(), with a launch in flight, stops every service in order and invalidates every connection")
    func runCancelled() async throws {
        let folder = try ServiceFolder(["test.json": ServiceFolder.manifest(), "other.json": ServiceFolder.manifest(identifier: "com.example.other")])
        defer { folder.remove() }
        try await withoutLeaks(within: .seconds(20)) {
            let launcher = Launcher(registry: ServiceRegistry(scanning: [folder.path]), configuration: fastLauncherConfiguration())
            let events = launcher.events()
            let running = Task { await launcher.run() }
            let connection = launcher.connection(to: "com.example.test"), other = launcher.connection(to: "com.example.other")
            _ = try await connection.request(ServiceMessage(type: "echo"))
            let pid = try #require(connection.processIdentifier)
            let launching = Task.immediate { try? await other.request(ServiceMessage(type: "echo")) }
            running.cancel()
            await running.value  // returns once everything is reaped
            _ = await launching.value
            let reason = try await termination(of: pid, in: events)
            #expect(reason.kind == .stopped && reason.exitCode == 0, "stopped in order (goodbye, then it exited): \(reason)")
            for client in [connection, other] {
                var last: ServiceConnection.Event?
                for await event in client.events { last = event }
                guard case .invalidated(let error)? = last else { Issue.record("expected invalidated last, got \(String(describing: last))"); continue }
                #expect(error.reason.contains("shut down"), "\(error)")
            }
        }
    }

    /// A listener whose first replay fails (as a cancelled caller's would).
    final class FailingFirstReplay: ServiceChannelListener {
        let opened = Mutex(0)
        func channelWillRun(_ channel: ServiceChannel) {}
        func channelDidOpen(_ channel: ServiceChannel) async throws(RemoteError) {
            let count = opened.withLock { count in
                count += 1
                return count
            }
            if count == 1 { throw RemoteError(.cancelled, "the first replay is cut short") }
        }
    }

    @Test("a channel whose listener fails to tell the new process what it must know is closed; the next caller makes one that is told")
    func failedReplay() async throws {
        try await withServices(["test.json": ServiceFolder.manifest()]) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            let listener = FailingFirstReplay()
            connection.addListener(listener)
            let first = await requestError(connection, ServiceMessage(type: "echo"))
            #expect(first?.code == .cancelled, "\(String(describing: first))")
            let reply = try await connection.request(ServiceMessage(type: "echo", text: "told"))
            #expect(reply.text == "told")
            #expect(listener.opened.withLock { $0 } == 2, "a new channel, told this time")
            #expect(await launcher.status().first?.launches == 1, "the same process: only the channel was replaced")
        }
    }
}
