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
    /// The pidfd, shared with the loop's handler: used under its lock, and closed under it when
    /// this object goes, so a handler still running then never uses a closed (or reused) number.
    private let descriptor: Descriptor
    private let loop: EventLoop
    private let registration: EventLoop.Registration
    /// Opened once the process has exited: how it ended, for a child; `nil` otherwise.
    private let exit: Latch<Termination?>

    private final class Descriptor: Sendable {
        /// The pidfd, `nil` once closed.
        private let state: Mutex<Int32?>

        init(_ fd: consuming OwnedFD) {
            state = Mutex(fd.release())
        }

        /// Runs `body` with the pidfd unless it is closed.
        func withDescriptor<R>(_ body: (Int32) throws(SystemCallError) -> R) throws(SystemCallError) -> R? {
            try state.withLock { (fd) throws(SystemCallError) -> R? in
                guard let fd else { return nil }
                return try body(fd)
            }
        }

        func close() {
            state.withLock { fd in
                if let open = fd { Syscall.close(open) }
                fd = nil
            }
        }

        deinit { close() }
    }

    /// Holds process `pid` (for a child: not reaped yet, so its pid cannot have been reused).
    package init(pid: Int32, isChild: Bool, loop: EventLoop = .shared) throws(SystemCallError) {
        let owned = try Syscall.processDescriptor(pid)
        let exit = Latch<Termination?>()
        let shared = Mutex<(descriptor: Descriptor?, registration: EventLoop.Registration?)>((nil, nil))
        // The pidfd becomes readable when the process exits: reap it (a child) and tell every
        // waiter. Reaping never blocks the loop: a wake-up before the exit is armed again.
        let handler: EventLoop.Handler = { _ in
            guard isChild else {
                exit.open(nil)
                return
            }
            let (descriptor, registration) = shared.withLock { ($0.descriptor, $0.registration) }
            do {
                switch try descriptor?.withDescriptor({ (fd) throws(SystemCallError) in try Syscall.reap(fd, block: false) }) {
                case .some(.some(let termination)):
                    exit.open(termination)
                case .some(.none):
                    if let registration { loop.arm(registration, events: EPOLLIN.rawValue) }
                case .none:
                    break  // closed: the object is gone
                }
            } catch {
                // Reaped by someone else (a host that ignores SIGCHLD, a stray waitpid(-1)): it
                // has ended, but how is unknown.
                exit.open(.unknown)
            }
        }
        let registered = try loop.register(owned, handler: handler)
        let descriptor = Descriptor(owned)
        shared.withLock { $0 = (descriptor, registered) }
        self.pid = pid
        self.isChild = isChild
        self.loop = loop
        self.registration = registered
        self.exit = exit
        self.descriptor = descriptor
        loop.arm(registered, events: EPOLLIN.rawValue)
    }

    deinit {
        loop.deregister(registration)
        if isChild, exit.value == nil {
            // Nobody waited for it to end: leave neither a zombie nor an orphan behind.
            _ = try? descriptor.withDescriptor { (fd) throws(SystemCallError) in
                Syscall.sendSignal(fd, SIGKILL)
                _ = try Syscall.reap(fd, block: true)
            }
        }
        descriptor.close()
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
        (try? descriptor.withDescriptor { fd in Syscall.sendSignal(fd, signal) }) ?? false
    }
}

/// How a process ended: a value, not an error.
public enum Termination: Sendable, Hashable, CustomStringConvertible {
    /// It called `exit(code)`.
    case exited(Int32)
    /// A signal ended it.
    case killed(signal: Int32, coreDumped: Bool)
    /// It ended, but its status was collected elsewhere (a host that ignores `SIGCHLD`, another
    /// `waitpid(-1)` in the process), so how is unknown.
    case unknown

    public var description: String {
        switch self {
        case .unknown: "ended (its status was collected elsewhere: how is unknown)"
        case .exited(let code): "exited with code \(code)"
        case .killed(let signal, let dumped):
            "killed by \(Self.signalName(signal)) (\(String(cString: strsignal(signal))))\(dumped ? ", core dumped" : "")"
        }
    }

    /// The name of signal `signal` (`SIGILL`, like `sigabbrev_np`), or `signal N` for one
    /// without a name (a real-time signal).
    public static func signalName(_ signal: Int32) -> String {
        let names = ["SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE", "SIGKILL", "SIGUSR1",
                     "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM", "SIGSTKFLT", "SIGCHLD", "SIGCONT", "SIGSTOP",
                     "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGURG", "SIGXCPU", "SIGXFSZ", "SIGVTALRM", "SIGPROF", "SIGWINCH",
                     "SIGIO", "SIGPWR", "SIGSYS"]
        return (1...names.count).contains(Int(signal)) ? names[Int(signal) - 1] : "signal \(signal)"
    }
}
