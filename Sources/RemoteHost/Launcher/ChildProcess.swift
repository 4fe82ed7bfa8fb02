import CSpawn
import Glibc
import RemoteCore

/// A service process the host started, held by pidfd and reaped exactly once.
///
/// The launcher's spawning half: vfork + execve in a small C shim (`CSpawn`, through
/// `Syscall.spawn`) with the chosen descriptors arranged (the service's socket at fd 3 under
/// `LISTEN_FDS=1`), every other inherited descriptor closed, signal mask and dispositions reset,
/// a death signal and resource limits set. Its exit is collected through the pidfd on the
/// shared event loop, so waiting holds no thread.
public final class ChildProcess: Sendable {
    /// The process id, as the host sees it.
    public let pid: Int32
    private let handle: ProcessDescriptor

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

    /// A user and group id for a child to run as (`setresuid`, `setresgid`).
    public struct Identity: Sendable, Hashable, CustomStringConvertible {
        /// The user id.
        public var user: UInt32
        /// The group id.
        public var group: UInt32

        /// A user id and a group id.
        public init(user: UInt32, group: UInt32) {
            self.user = user
            self.group = group
        }

        public var description: String { "uid \(user), gid \(group)" }
    }

    /// How to start a process.
    public struct Options: Sendable {
        /// The child's descriptors, by number: the host's descriptor to copy (borrowed until the
        /// process has started), or `nil` for `/dev/null`. Every other descriptor is closed.
        fileprivate var descriptors: [Int32] = [-1, -1, -1]
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
        /// The control groups the child joins before anything else (their folders; at most 4),
        /// so every process it starts is in them too.
        public var controlGroups: [String] = []
        /// The user and group the child drops to, with no supplementary groups, once it is in
        /// its control groups and under its limits (`setgroups`, `setresgid`, `setresuid`);
        /// `nil`: it keeps the host's. Only a host running as root can drop.
        public var identity: Identity?
        /// Whether the child keeps to Landlock's abstract-socket scope
        /// (`LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET`, Landlock ABI 6), and so does everything it
        /// runs: it cannot connect to an abstract Unix socket (`@name`: X11's, the session
        /// bus's) made outside it. Sets `PR_SET_NO_NEW_PRIVS`, so a setuid program it runs gets
        /// no privileges. Where the kernel lacks the scope (``Landlock/abi`` below 6) the start
        /// fails: ask ``Landlock/scopesAbstractSockets`` first.
        public var restrictsAbstractSockets = false

        public init() {}

        /// The child's descriptor `number` becomes a copy of `descriptor`, which must stay open
        /// until the process has started (the caller keeps it; like `posix_spawn_file_actions_adddup2`).
        /// Numbers up to 31 are possible; those not given are `/dev/null` (0 to 2) or closed.
        public mutating func pass(_ descriptor: borrowing OwnedFD, as number: Int) {
            precondition((0..<Int(RV_SPAWN_MAX_FDS)).contains(number), "a child's descriptor number must be 0…\(RV_SPAWN_MAX_FDS - 1)")
            while descriptors.count <= number { descriptors.append(-1) }
            descriptors[number] = descriptor.rawValue
        }

        /// The child's descriptor `number` becomes the file at `path`, opened for reading by the
        /// host when the process starts, before any drop of ``identity`` (like
        /// `posix_spawn_file_actions_addopen`): a file the child's own user could not reach.
        /// It is opened beneath `folder` (`openat2` with `RESOLVE_BENEATH`: no `..` or symbolic
        /// link leads out of it), and must be a regular file whose mode has every bit of
        /// `mode` (`S_IROTH`, say); otherwise the start fails with `EACCES`.
        public mutating func pass(fileAt path: String, beneath folder: String, requiring mode: mode_t, as number: Int) {
            precondition((0..<Int(RV_SPAWN_MAX_FDS)).contains(number), "a child's descriptor number must be 0…\(RV_SPAWN_MAX_FDS - 1)")
            precondition(path.hasPrefix(folder + "/"), "\(path) is not beneath \(folder)")
            files.append((path, folder, mode, number))
        }

        /// The files ``pass(fileAt:beneath:requiring:as:)`` names.
        fileprivate var files: [(path: String, folder: String, mode: mode_t, number: Int)] = []
    }

    /// Starts `executable` with `socket` as its fd 3 and `LISTEN_FDS=1` (the socket-activation
    /// convention), stdin/stdout/stderr on `/dev/null`, from the calling thread.
    ///
    /// - Throws: `SystemCallError` naming the step that failed (e.g. `execve` with `ENOENT`).
    public static func spawn(executable: String, arguments: [String] = [], environment: [String: String] = [:],
                             socket: borrowing OwnedFD) throws(SystemCallError) -> ChildProcess {
        var options = Options()
        options.pass(socket, as: 3)
        options.environment = environment.merging(["LISTEN_FDS": "1", "LISTEN_FDNAMES": "remoteview"]) { _, new in new }
            .merging(SanitizerEnvironment.forService(sandboxed: false)?.variables ?? [:]) { own, _ in own }
        options.deathSignal = nil
        return try start(executable: executable, arguments: arguments, options: options)
    }

    /// Starts a process from the event loop's long-lived thread, so its death signal fires
    /// only when this process dies (not when some worker thread retires).
    ///
    /// The descriptors in `options` must stay open until this returns.
    public static func launch(executable: String, arguments: [String], options: Options) async throws(SystemCallError) -> ChildProcess {
        let started = Waiter<Result<ChildProcess, SystemCallError>>()
        EventLoop.shared.execute {
            started.resume(returning: Result { () throws(SystemCallError) in
                try start(executable: executable, arguments: arguments, options: options)
            })
        }
        // Seen through when the task is cancelled: once asked for, the process starts (in well
        // under a millisecond), and it must have an owner.
        return try await started.waitUncancellably()!.get()
    }

    /// Starts a process from the calling thread (see `rv_spawn`).
    public static func start(executable: String, arguments: [String], options: Options) throws(SystemCallError) -> ChildProcess {
        guard options.descriptors.count <= Int(RV_SPAWN_MAX_FDS), options.limits.count <= Int(RV_SPAWN_MAX_LIMITS),
              options.controlGroups.count <= Int(RV_SPAWN_MAX_GROUPS) else {
            throw SystemCallError(call: "spawn(\(executable)): too many descriptors, limits or control groups", errno: EINVAL)
        }
        // Opened here, written by the child ("0": itself) before it runs anything.
        var groups: [Int32] = [], files: [Int32] = []
        defer { for fd in groups + files { Syscall.close(fd) } }
        for group in options.controlGroups { groups.append(try Syscall.openForWriting(group + "/cgroup.procs").release()) }
        var descriptors = options.descriptors
        for (path, folder, mode, number) in options.files {
            let file = try Syscall.openBeneath(try Syscall.openDirectory(folder), String(path.dropFirst(folder.count + 1)))
            let status = try Syscall.status(file)
            guard status.isRegularFile, status.st_mode & mode == mode else {
                throw SystemCallError(call: "open(\(path)): not a regular file of mode \(String(mode, radix: 8)) or more", errno: EACCES)
            }
            files.append(file.release())
            while descriptors.count <= number { descriptors.append(-1) }
            descriptors[number] = files.last!
        }
        var request = rv_spawn_request()
        withUnsafeMutableBytes(of: &request.fds) { raw in
            let fds = raw.bindMemory(to: Int32.self)
            for (index, fd) in descriptors.enumerated() { fds[index] = fd }
        }
        request.fd_count = Int32(descriptors.count)
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
        withUnsafeMutableBytes(of: &request.group_fds) { raw in
            for (index, fd) in groups.enumerated() { raw.bindMemory(to: Int32.self)[index] = fd }
        }
        request.group_count = Int32(groups.count)
        if let identity = options.identity {
            request.drop_credentials = 1
            request.uid = identity.user
            request.gid = identity.group
        }
        request.landlock_scopes = options.restrictsAbstractSockets ? RV_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET : 0

        let argv = CStringArray([executable] + arguments)
        let envp = CStringArray(options.environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" })
        defer { argv.free(); envp.free() }
        // Spawned and recorded under the lock that orphan collection lists children under, so
        // a process just started is never taken for another's orphan.
        let spawned = started.withLock { started in
            let result = executable.withCString { path in
                request.path = path
                request.argv = UnsafePointer(argv.pointers)
                request.envp = UnsafePointer(envp.pointers)
                return Result { () throws(SystemCallError) in try Syscall.spawn(&request, executable: executable) }
            }
            if case .success(let pid) = result { started[pid] = Started(child: nil, pending: true) }
            return result
        }
        let pid = try spawned.get()
        // Not reaped yet, so the pid cannot have been reused.
        do {
            let child = ChildProcess(pid: pid, handle: try ProcessDescriptor(pid: pid, isChild: true))
            started.withLock { $0[pid] = Started(child: child, pending: false) }
            return child
        } catch {
            Syscall.kill(pid, SIGKILL)
            Syscall.reapBlocking(pid)
            _ = started.withLock { $0.removeValue(forKey: pid) }
            throw error
        }
    }

    private init(pid: Int32, handle: ProcessDescriptor) {
        self.pid = pid
        self.handle = handle
    }

    deinit {
        let pid = self.pid
        Self.started.withLock { started in
            if let entry = started[pid], entry.child == nil, !entry.pending { started[pid] = nil }
        }
    }

    // MARK: orphans

    private struct Started {
        weak var child: ChildProcess?
        /// Spawned, its object not made yet.
        var pending: Bool
    }

    /// The processes this type started, by pid, while their objects live: never taken for an
    /// orphan (a pid is only reused once its process is reaped, which its object does).
    private static let started = Mutex<[Int32: Started]>([:])

    /// Whether `pid` is a process started here that has not been reaped.
    private static func isStartedAndRunning(_ pid: Int32, in started: [Int32: Started]) -> Bool {
        guard let entry = started[pid] else { return false }
        return entry.pending || entry.child.map { $0.termination == nil } ?? false
    }

    /// A process found where a service process had ended (come back to the host, or still in
    /// its control groups), as it was before it was killed.
    package struct Straggler: Sendable, Hashable {
        package var pid: Int32
        /// Its command name (`comm`).
        package var name: String
        /// Whether it still ran (not a zombie).
        package var wasRunning: Bool
        /// Whether it is the sandbox's own first process: bubblewrap as pid 1 of the sandbox's pid
        /// namespace (`NSpid` ends in 1), which ends with the service, and may be found a moment
        /// after it. Never something the service left behind.
        package var isSandboxInit: Bool

        /// `pid` as `/proc` shows it now; `nil` once it is gone.
        package static func found(_ pid: Int32, status: Syscall.ProcessStatus? = nil) -> Straggler? {
            guard let status = status ?? Syscall.processStatus(of: pid) else { return nil }
            let namespaces = Syscall.namespacePIDs(of: pid) ?? []
            return Straggler(pid: pid, name: status.name, wasRunning: status.state != "Z",
                             isSandboxInit: status.name == "bwrap" && namespaces.count > 1 && namespaces.last == 1)
        }
    }

    /// What a process left behind, for ``collectOrphans(of:until:)``.
    package struct Leftovers: Sendable {
        /// Its session (and process group): its pid, since it was started in a session of its own.
        package var session: Int32
        /// Descendants it was seen with.
        package var descendants: Set<Int32> = []
        /// The arguments it was started with, when it is bubblewrap: a process that came back
        /// with the same arguments, or a bubblewrap that is a zombie or already exiting, is the sandbox's pid 1 (a fork of it).
        package var bubblewrapArguments: [String]?

        package init(session: Int32, descendants: Set<Int32> = [], bubblewrapArguments: [String]? = nil) {
            self.session = session
            self.descendants = descendants
            self.bubblewrapArguments = bubblewrapArguments
        }

        /// Whether this process's child `pid`, whose `/proc` status is `status`, is one of them.
        func include(_ pid: Int32, _ status: Syscall.ProcessStatus) -> Bool {
            if descendants.contains(pid) || status.session == session || status.group == session { return true }
            guard let bubblewrapArguments, status.name == "bwrap" else { return false }
            // A zombie, or a process already exiting (its memory, and so its arguments, gone):
            // the sandbox's pid 1 dying of its death signal, about to be a zombie here.
            guard status.state != "Z", let arguments = Syscall.commandLine(of: pid), !arguments.isEmpty else { return true }
            return arguments == bubblewrapArguments
        }
    }

    /// Kills and reaps this process's children that `leftovers` describes, except the processes
    /// started here that still run. Returns their pids.
    ///
    /// With this process a child subreaper (``OrphanAdoption``), what a service
    /// leaves behind when its first process dies comes back here rather than to the system's
    /// init: under bubblewrap, the sandbox's pid 1 when the outer bubblewrap died before it
    /// could pass on its death signal (its session is the outer bubblewrap's pid, since the
    /// launcher starts that in a session of its own); unsandboxed, the service's children. Each
    /// gets `SIGKILL` through a pidfd, and is reaped. One that has not exited by `deadline` (a
    /// process stuck in the kernel) is given up on: it is among the pids returned, unreaped.
    ///
    /// - Returns: Each process collected, as it was found (still running or a zombie).
    package static func collectOrphans(of leftovers: Leftovers, until deadline: ContinuousClock.Instant) async -> [Straggler] {
        var collected: [Straggler] = []
        // Killing pid 1 of a pid namespace takes the namespace's processes along; an orphan's
        // own children come back here in turn: look again until nothing is left.
        for _ in 0..<8 {
            // Listed under the lock a spawn records its process under (see start).
            let orphans = started.withLock { started in
                Syscall.childProcesses(of: Syscall.processID).compactMap { pid -> Straggler? in
                    guard !isStartedAndRunning(pid, in: started), let status = Syscall.processStatus(of: pid),
                          leftovers.include(pid, status) else { return nil }
                    return Straggler.found(pid, status: status)
                }
            }
            if orphans.isEmpty { break }
            var held: [ProcessDescriptor] = []
            for pid in orphans.map(\.pid) {
                // Our child, not reaped: its pid cannot have been reused.
                guard let orphan = try? ProcessDescriptor(pid: pid, isChild: true) else { continue }
                orphan.send(signal: SIGKILL)
                held.append(orphan)
            }
            for orphan in held {
                if (try? await orphan.waitForExit(until: deadline)) == nil { return collected + orphans }
            }
            collected += orphans
        }
        return collected
    }

    /// How the process ended, once it has.
    public var termination: Termination? { handle.termination }

    /// Waits until the process exits and returns how.
    ///
    /// - Throws: `CancellationError` when the waiting task is cancelled (the process runs on).
    public func waitForExit() async throws(CancellationError) -> Termination {
        do {
            // A child's exit is always known.
            return try await handle.waitForExit()!
        } catch {
            throw CancellationError()
        }
    }

    /// Waits until the process exits, even when the waiting task is cancelled: for the
    /// launcher, which must book every end.
    package func waitForExitUncancellably() async -> Termination {
        // A child's end is always known.
        await handle.waitForExitUncancellably()!
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
            tree += Syscall.childProcesses(of: tree[index])
            index += 1
        }
        return tree
    }

    /// Resident memory of the whole process tree, in bytes (`/proc/PID/statm`), or `nil` once gone.
    public func residentBytes() -> UInt64? {
        let page = UInt64(Syscall.pageSize)
        var total: UInt64 = 0
        var found = false
        for pid in processTree() {
            guard let statm = Syscall.readSmallFile("/proc/\(pid)/statm") else { continue }
            let fields = String(decoding: statm, as: UTF8.self).split(separator: " ")
            guard fields.count > 1, let pages = UInt64(fields[1]) else { continue }
            total += pages * page
            found = true
        }
        return found ? total : nil
    }

    /// Sends `signal` through the pidfd (never to a reused pid). Does nothing once it has exited.
    public func send(signal: Int32) {
        handle.send(signal: signal)
    }
}

/// A NULL-terminated `char *[]` for `rv_spawn`.
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

/// Whether this process is a child subreaper (`PR_SET_CHILD_SUBREAPER`), counted over the
/// launchers that want it: the first makes it one, the last to finish (or go) undoes it, unless
/// it already was one before. So orphans come back to the host while a launcher runs, and go to
/// the system's init as usual otherwise.
enum OrphanAdoption {
    private static let state = Mutex<(holders: Int, before: Bool?)>((0, nil))

    /// One more launcher wants orphans back; `nil`, or why the process cannot be a subreaper.
    static func acquire() -> SystemCallError? {
        state.withLock { state -> SystemCallError? in
            if state.holders == 0 {
                let already = Syscall.isChildSubreaper
                state.before = already
                if !already {
                    do throws(SystemCallError) { try Syscall.setChildSubreaper(true) } catch { return error }
                }
            }
            state.holders += 1
            return nil
        }
    }

    /// A launcher that acquired no longer needs orphans back.
    static func release() {
        state.withLock { state in
            guard state.holders > 0 else { return }
            state.holders -= 1
            if state.holders == 0, state.before == false { try? Syscall.setChildSubreaper(false) }
        }
    }
}
