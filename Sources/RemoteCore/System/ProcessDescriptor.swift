import CRemoteViewLinux
import Glibc
import Synchronization

/// A process held by a pidfd (`pidfd_open(2)`): signals go through it, so they can never reach
/// a process that reused the pid, and its exit is awaited on the shared ``EventLoop`` without a
/// thread.
///
/// For a child of this process, the exit is also collected (`waitid(P_PIDFD)`) as soon as it
/// happens, so no zombie is left, and ``termination`` says how it ended. Any other process
/// (a grandchild in a sandbox, say) can be watched too; its termination is unknown.
package final class ProcessDescriptor: Sendable {
    /// The process id, as this process sees it.
    package let pid: Int32
    /// Whether the process is this process's child (and so is reaped here).
    package let isChild: Bool
    private let descriptor: Int32
    private let loop: EventLoop
    private let registration: EventLoop.Registration
    /// Opened once the process has exited: how it ended, for a child; `nil` otherwise.
    private let exit: Latch<Termination?>

    /// Holds process `pid` (for a child: not reaped yet, so its pid cannot have been reused).
    package init(pid: Int32, isChild: Bool, loop: EventLoop = .shared) throws(SystemCallError) {
        let owned = try Syscall.processDescriptor(pid)
        let exit = Latch<Termination?>()
        let raw = owned.rawValue
        // One-shot: the pidfd becomes readable once, when the process exits.
        let registration = try loop.register(owned) { _ in
            guard isChild else {
                exit.open(nil)
                return
            }
            // A blocking reap cannot block: the process has exited.
            exit.open(try? Syscall.reap(raw, block: true))
        }
        self.pid = pid
        self.isChild = isChild
        self.loop = loop
        self.registration = registration
        self.exit = exit
        descriptor = owned.release()
        loop.arm(registration, events: EPOLLIN.rawValue)
    }

    deinit {
        loop.deregister(registration)
        if isChild, exit.value == nil {
            // Nobody waited for it to end: leave neither a zombie nor an orphan behind.
            Syscall.sendSignal(descriptor, SIGKILL)
            _ = try? Syscall.reap(descriptor, block: true)
        }
        Syscall.close(descriptor)
    }

    /// Whether the process has exited (and, for a child, been reaped).
    package var hasExited: Bool { exit.value != nil }

    /// How a child ended, once it has; `nil` while it runs, and for a process that is not a child.
    package var termination: Termination? { exit.value ?? nil }

    /// Waits until the process has exited; returns how, for a child.
    ///
    /// - Throws: ``WaitError`` at `deadline`, or when the waiting task is cancelled.
    nonisolated(nonsending) package func waitForExit(until deadline: ContinuousClock.Instant? = nil) async throws(WaitError) -> Termination? {
        try await exit.wait(until: deadline)
    }

    /// Waits until the process has exited, even when the waiting task is cancelled (see
    /// ``Waiter/waitUncancellably(until:loop:)``); `nil` for a process that is not a child.
    nonisolated(nonsending) package func waitForExitUncancellably() async -> Termination? {
        await exit.waitUncancellably() ?? nil
    }

    /// Sends `signal` through the pidfd; does nothing once the process has exited. Returns
    /// whether it was sent.
    @discardableResult
    package func send(signal: Int32) -> Bool {
        Syscall.sendSignal(descriptor, signal)
    }
}

/// How a process ended: a value, not an error.
public enum Termination: Sendable, Hashable, CustomStringConvertible {
    /// It called `exit(code)`.
    case exited(Int32)
    /// A signal ended it.
    case killed(signal: Int32, coreDumped: Bool)

    public var description: String {
        switch self {
        case .exited(let code): "exited with code \(code)"
        case .killed(let signal, let dumped):
            "killed by signal \(signal) (\(String(cString: strsignal(signal))))\(dumped ? ", core dumped" : "")"
        }
    }
}
