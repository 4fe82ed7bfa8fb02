import CProto
import CSpawn
import Glibc
import RemoteCore
import Synchronization

/// A service process the host started, tracked by pidfd and reaped exactly once.
///
/// The launcher's spawning half: vfork + execve in a small C shim (`CSpawn`) with the chosen fds
/// arranged (the service's socket at fd 3 under `LISTEN_FDS=1`), every other inherited fd
/// closed, signal mask and dispositions reset, a death signal and resource limits set. Exit is
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

    /// A resource limit the child gets (`setrlimit`).
    public struct ResourceLimit: Sendable, Hashable {
        /// `RLIMIT_*`.
        public var resource: Int32
        /// The soft limit (the signal or error comes here).
        public var soft: UInt64
        /// The hard limit (never raised by the child).
        public var hard: UInt64
        public init(resource: Int32, soft: UInt64, hard: UInt64? = nil) {
            self.resource = resource
            self.soft = soft
            self.hard = hard ?? soft
        }
    }

    /// How to start a process.
    public struct Options: Sendable {
        /// The child's fd `i` is a copy of `descriptors[i]` (`-1`: `/dev/null`); every other fd
        /// is closed. The caller keeps its own descriptors.
        public var descriptors: [Int32] = [-1, -1, -1]
        /// The child's whole environment.
        public var environment: [String: String] = [:]
        /// Sent to the child when the thread that started it exits (`PR_SET_PDEATHSIG`);
        /// ``launch(executable:arguments:options:)`` starts children from the event loop's
        /// thread, which lives as long as the process, so this means "when the host dies".
        public var deathSignal: Int32? = SIGKILL
        /// Start a new session (`setsid`), detaching from the host's terminal.
        public var newSession = false
        /// Applied in the child before `execve`.
        public var limits: [ResourceLimit] = []

        public init() {}
    }

    /// Starts `executable` with `socket` as its fd 3 and `LISTEN_FDS=1` (the socket-activation
    /// convention), stdin/stdout/stderr on `/dev/null`, from the calling thread.
    ///
    /// - Throws: ``SystemCallError`` naming the step that failed (e.g. `execve` with `ENOENT`).
    public static func spawn(executable: String, arguments: [String] = [], environment: [String: String] = [:],
                             socket: borrowing OwnedFD) throws(SystemCallError) -> ChildProcess {
        var options = Options()
        options.descriptors = [-1, -1, -1, socket.rawValue]
        options.environment = environment.merging(["LISTEN_FDS": "1", "LISTEN_FDNAMES": "remoteview"]) { _, new in new }
        options.deathSignal = nil
        return try start(executable: executable, arguments: arguments, options: options)
    }

    /// Starts a process from the event loop's long-lived thread, so its death signal fires
    /// only when this process dies (not when some worker thread retires).
    ///
    /// The descriptors in `options` must stay open until this returns.
    public static func launch(executable: String, arguments: [String], options: Options) async throws(SystemCallError) -> ChildProcess {
        let loop = EventLoop.shared
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<ChildProcess, SystemCallError>, Never>) in
            loop.execute {
                do throws(SystemCallError) {
                    continuation.resume(returning: .success(try start(executable: executable, arguments: arguments, options: options)))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
        }
        return try result.get()
    }

    /// Starts a process from the calling thread (see ``rv_spawn``).
    public static func start(executable: String, arguments: [String], options: Options) throws(SystemCallError) -> ChildProcess {
        guard options.descriptors.count <= Int(RV_SPAWN_MAX_FDS), options.limits.count <= Int(RV_SPAWN_MAX_LIMITS) else {
            throw SystemCallError(call: "spawn(\(executable)): too many descriptors or limits", errno: EINVAL)
        }
        var request = rv_spawn_request()
        withUnsafeMutableBytes(of: &request.fds) { raw in
            let fds = raw.bindMemory(to: Int32.self)
            for (index, fd) in options.descriptors.enumerated() { fds[index] = fd }
        }
        request.fd_count = Int32(options.descriptors.count)
        request.death_signal = options.deathSignal ?? 0
        request.new_session = options.newSession ? 1 : 0
        withUnsafeMutableBytes(of: &request.limit_resources) { raw in
            for (index, limit) in options.limits.enumerated() { raw.bindMemory(to: Int32.self)[index] = limit.resource }
        }
        withUnsafeMutableBytes(of: &request.limit_soft) { raw in
            for (index, limit) in options.limits.enumerated() { raw.bindMemory(to: UInt64.self)[index] = limit.soft }
        }
        withUnsafeMutableBytes(of: &request.limit_hard) { raw in
            for (index, limit) in options.limits.enumerated() { raw.bindMemory(to: UInt64.self)[index] = limit.hard }
        }
        request.limit_count = Int32(options.limits.count)

        let argv = CStringArray([executable] + arguments)
        let envp = CStringArray(options.environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" })
        defer { argv.free(); envp.free() }
        var failedStep: UnsafePointer<CChar>? = nil
        let pid = executable.withCString { path in
            request.path = path
            request.argv = UnsafePointer(argv.pointers)
            request.envp = UnsafePointer(envp.pointers)
            return rv_spawn(&request, &failedStep)
        }
        guard pid > 0 else {
            let step = failedStep.map { String(cString: $0) } ?? "spawn"
            throw SystemCallError(call: "\(step)(\(executable))", errno: errno)
        }

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

    /// The process and its descendants (a sandboxed service runs under bubblewrap, as its
    /// grandchild), parents first, from `/proc/PID/task/*/children`.
    public func processTree() -> [Int32] {
        Self.processTree(of: pid)
    }

    /// `pid` and its descendants, parents first (at most 64).
    package static func processTree(of pid: Int32) -> [Int32] {
        var tree = [pid], index = 0
        while index < tree.count, tree.count < 64 {
            tree += Self.children(of: tree[index])
            index += 1
        }
        return tree
    }

    /// Resident memory of the whole process tree, in bytes (`/proc/PID/statm`), or `nil` once gone.
    public func residentBytes() -> UInt64? {
        let page = UInt64(sysconf(Int32(_SC_PAGESIZE)))
        var total: UInt64 = 0
        var found = false
        for pid in processTree() {
            guard let fields = Self.readSmallFile("/proc/\(pid)/statm")?.split(separator: " "), fields.count > 1,
                  let pages = UInt64(fields[1]) else { continue }
            total += pages * page
            found = true
        }
        return found ? total : nil
    }

    private static func children(of pid: Int32) -> [Int32] {
        guard let tasks = opendir("/proc/\(pid)/task") else { return [] }
        defer { closedir(tasks) }
        var result: [Int32] = []
        while let entry = readdir(tasks) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard Int32(name) != nil, let text = readSmallFile("/proc/\(pid)/task/\(name)/children") else { continue }
            result += text.split(whereSeparator: \.isWhitespace).compactMap { Int32($0) }
        }
        return result
    }

    static func readSmallFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Syscall.close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = read(fd, &buffer, buffer.count)
        guard count >= 0 else { return nil }
        return String(decoding: buffer[..<count], as: UTF8.self)
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
