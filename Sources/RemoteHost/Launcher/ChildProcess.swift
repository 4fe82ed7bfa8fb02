import CProto
import Glibc
import RemoteCore
import Synchronization

/// A service process the host started, tracked by pidfd and reaped exactly once.
///
/// The launcher's spawning half: `posix_spawn` with the service's socket end at fd 3 and
/// `LISTEN_FDS=1` (systemd socket activation), every other inherited fd closed
/// (`posix_spawn_file_actions_addclosefrom_np`), signal mask and dispositions reset. Exit is
/// observed through the pidfd on the shared event loop, so waiting holds no thread.
public final class ChildProcess: Sendable {
    /// The process id, as the host sees it.
    public let pid: Int32
    private let pidfd: Int32
    private let registration: EventLoop.Registration
    private let loop: EventLoop
    private let watch: Watch

    private final class Watch: Sendable {
        let state = Mutex(State())
    }

    private struct State {
        var termination: Termination?
        var waiters: [CheckedContinuation<Termination, Never>] = []
    }

    /// Starts `executable` with `socket` as its fd 3.
    ///
    /// - Parameters:
    ///   - executable: An absolute path.
    ///   - arguments: `argv[1...]`.
    ///   - environment: The child's whole environment; `LISTEN_FDS` and `LISTEN_FDNAMES` are added.
    ///   - socket: The service's end of the socket pair; closed in this process once spawned.
    /// - Throws: ``SystemCallError`` naming `posix_spawn` (e.g. `ENOENT` for a missing executable).
    public static func spawn(executable: String, arguments: [String] = [], environment: [String: String] = [:],
                             socket: consuming OwnedFD) throws(SystemCallError) -> ChildProcess {
        // posix_spawn's dup2(fd, 3) clears close-on-exec only when fd is not already 3.
        let source = socket.rawValue == SocketActivation.firstDescriptor ? try socket.duplicate() : socket
        // `source` (and `socket`, if duplicated) close when this function returns.

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, source.rawValue, SocketActivation.firstDescriptor)
        rv_spawn_file_actions_addclosefrom(&actions, SocketActivation.firstDescriptor + 1)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        var allSignals = sigset_t()
        sigfillset(&allSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        posix_spawnattr_setsigdefault(&attributes, &allSignals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        var fullEnvironment = environment
        fullEnvironment["LISTEN_FDS"] = "1"
        fullEnvironment["LISTEN_FDNAMES"] = "remoteview"
        let argv = CStringArray([executable] + arguments)
        let envp = CStringArray(fullEnvironment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" })
        defer { argv.free(); envp.free() }

        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv.pointers, envp.pointers)
        guard result == 0 else { throw SystemCallError(call: "posix_spawn(\(executable))", errno: result) }

        // Not reaped yet, so the pid cannot have been reused.
        let pidfd = rv_pidfd_open(pid, 0)
        guard pidfd >= 0 else {
            let code = errno
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
            throw SystemCallError(call: "pidfd_open", errno: code)
        }
        try? Syscall.setCloseOnExec(pidfd, true)
        return try ChildProcess(pid: pid, pidfd: pidfd)
    }

    private init(pid: Int32, pidfd: Int32, loop: EventLoop = .shared) throws(SystemCallError) {
        let watch = Watch()
        self.pid = pid
        self.pidfd = pidfd
        self.loop = loop
        self.watch = watch
        self.registration = try loop.register(pidfd) { _ in
            // The pidfd is readable: the process has exited. Reap it and tell every waiter.
            guard let termination = Self.reap(pidfd, block: false) else { return }
            let waiters = watch.state.withLock { state in
                state.termination = termination
                defer { state.waiters.removeAll() }
                return state.waiters
            }
            for waiter in waiters { waiter.resume(returning: termination) }
        }
    }

    /// How the process ended, once it has.
    public var termination: Termination? {
        watch.state.withLock { $0.termination }
    }

    /// Waits until the process exits and returns how.
    public func waitForExit() async -> Termination {
        await withCheckedContinuation { continuation in
            let done = watch.state.withLock { state -> Termination? in
                if let termination = state.termination { return termination }
                state.waiters.append(continuation)
                return nil
            }
            if let done { continuation.resume(returning: done) } else { loop.arm(registration, events: EPOLLIN.rawValue) }
        }
    }

    /// Sends `signal` through the pidfd (never to a reused pid). Does nothing once it has exited.
    public func send(signal: Int32) {
        _ = rv_pidfd_send_signal(pidfd, signal, 0)
    }

    deinit {
        loop.deregister(registration)
        if watch.state.withLock({ $0.termination }) == nil {
            // Nobody waited for it: do not leave a zombie or an orphan behind.
            _ = rv_pidfd_send_signal(pidfd, SIGKILL, 0)
            _ = Self.reap(pidfd, block: true)
        }
        Syscall.close(pidfd)
    }

    private static func reap(_ pidfd: Int32, block: Bool) -> Termination? {
        var exited: Int32 = 0, code: Int32 = 0, status: Int32 = 0
        while rv_waitid_pidfd(pidfd, block ? 1 : 0, &exited, &code, &status) != 0 {
            if errno != EINTR { return nil }
        }
        guard exited != 0 else { return nil }
        if code == rv_cld_exited { return .exited(status) }
        return .killed(signal: status, coreDumped: code == rv_cld_dumped)
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

/// A NULL-terminated `char *[]` for `posix_spawn`.
private struct CStringArray {
    let pointers: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>

    init(_ strings: [String]) {
        pointers = .allocate(capacity: strings.count + 1)
        for (index, string) in strings.enumerated() { pointers[index] = strdup(string) }
        pointers[strings.count] = nil
    }

    func free() {
        var index = 0
        while let string = pointers[index] {
            Glibc.free(string)
            index += 1
        }
        pointers.deallocate()
    }
}
