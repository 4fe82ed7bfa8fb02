import Glibc
import Logging
import RemoteCore

/// A service process started exactly as the launcher starts one (the sandbox, the seccomp
/// filter, the limits, the environment, the socket at fd 3), whose fd 3 the caller speaks on
/// itself, packet by packet: for a tool that tries a service against the protocol
/// (`remoteview-check`), not for a host, which uses ``Launcher``.
package final class RawServiceProcess: Sendable {
    /// The process the launcher would have started (bubblewrap's, when sandboxed).
    package let process: ChildProcess
    /// The host's end of the process's fd 3: nothing has been said on it yet.
    package let socket: SeqpacketSocket
    private let started: ServiceInstance.Started
    private let resources: ResourceControl
    /// The readers of its stdout and stderr (to the logger), so that a chatty service never
    /// blocks on a full pipe.
    private let readers: [Task<Void, Never>]

    private init(started: ServiceInstance.Started, socket: SeqpacketSocket, resources: ResourceControl) {
        self.started = started
        self.resources = resources
        self.socket = socket
        process = started.process
        readers = started.captures.map { capture in Task { await capture.run() } }
    }

    /// Starts `manifest`'s service, sandboxed unless `sandbox` is ``SandboxPolicy/unsandboxed``,
    /// its output logged to `logger`; as a uid of `users` when this process is root.
    package static func start(_ manifest: ServiceManifest, sandbox: SandboxPolicy, dataRoot: String, users: ServiceUserPool = ServiceUserPool(),
                              logger: Logger) async throws(RemoteError) -> RawServiceProcess {
        let resources = ResourceControl.detect(launcher: Int(Syscall.processID))
        do throws(RemoteError) {
            let started = try await ServiceInstance.start(manifest, sandbox: sandbox, dataRoot: dataRoot, users: users,
                                                          resources: resources, logger: logger)
            let socket: SeqpacketSocket
            do throws(SystemCallError) {
                guard let fd = started.socket.take() else { preconditionFailure("a started process's socket is taken once") }
                socket = try SeqpacketSocket(fd)
            } catch {
                await started.abandon()
                throw RemoteError(.interrupted, "cannot talk to \(manifest.identifier) on its socket: \(error)")
            }
            return RawServiceProcess(started: started, socket: socket, resources: resources)
        } catch {
            resources.remove()
            throw error
        }
    }

    /// How the process ended as the launcher would report it, with what it last wrote to
    /// stderr (``TerminationReason/standardErrorTail``, ``TerminationReason/fatalError``): its
    /// exit code, or its signal by name (bubblewrap's `128 + N` read as signal N). Waits at most
    /// until `deadline` for the end (`nil` if it still runs then), and a moment more for the
    /// last of its stderr.
    package func ending(before deadline: ContinuousClock.Instant) async -> TerminationReason? {
        guard let termination = await exit(before: deadline) else { return nil }
        var reason = TerminationReason.ended(started.serviceTermination(termination))
        (reason.standardErrorTail, reason.fatalError) = await started.evidence()
        return reason
    }

    /// How the process ended, waiting at most until `deadline`; `nil` if it still runs then.
    package func exit(before deadline: ContinuousClock.Instant) async -> Termination? {
        let process = self.process
        return await withTaskGroup(of: Termination?.self) { group in
            group.addTask { try? await process.waitForExit() }
            group.addTask {
                try? await EventLoop.shared.sleep(until: deadline)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    /// Ends the process if it still runs (SIGKILL, its whole control group too), reaps it, and
    /// removes what was made for it. Returns how it ended.
    @discardableResult
    package func stop() async -> Termination {
        socket.close()
        if process.termination == nil { process.send(signal: SIGKILL) }
        let termination = await process.waitForExitUncancellably()
        if let group = started.group {
            _ = await group.killMembers(until: .now.advanced(by: .seconds(2)))
            _ = await group.remove(until: .now.advanced(by: .seconds(2)))
        }
        resources.remove()
        // The pipes reach end of file when the sandbox is gone; a stray holder is not waited for.
        for capture in started.captures { capture.stop() }
        for reader in readers { await reader.value }
        return termination
    }
}
