import Glibc
@testable import RemoteCore
import Testing

/// Thrown when awaited work misses its deadline.
public struct DeadlineExceeded: Error, CustomStringConvertible {
    public let what: String
    public let deadline: Duration
    public var description: String { "\(what) did not finish within \(deadline)" }
}

/// Runs `body`, failing with ``DeadlineExceeded`` if it has not finished after `deadline`.
///
/// Every test that waits awaits its event through this: nothing sleeps to synchronise, and a
/// hang becomes a failure that names what hung.
public func withDeadline<R: Sendable>(_ deadline: Duration = .seconds(10), _ what: String = "the test",
                                      _ body: @escaping @Sendable () async throws -> R) async throws -> R {
    try await withThrowingTaskGroup(of: R?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            // The event loop's timer, not Task.sleep: a cancelled Task.sleep keeps its task and
            // Dispatch timer until the time it was given (about 200 bytes each), which made
            // every awaited event look like a leak to the heap tests.
            try await EventLoop.shared.sleep(until: .now.advanced(by: deadline))
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let result = first else {
            throw DeadlineExceeded(what: what, deadline: deadline)
        }
        return result
    }
}

/// The fd numbers open in this process, with what each one is (its `/proc/self/fd` link).
public func openDescriptorTargets() -> [Int32: String] {
    var result: [Int32: String] = [:]
    for name in (try? Syscall.directoryEntries("/proc/self/fd")) ?? [] {
        // The folder's own descriptor is gone by now: its link no longer resolves.
        guard let fd = Int32(name), let target = Syscall.symbolicLinkTarget("/proc/self/fd/\(name)") else { continue }
        result[fd] = target
    }
    return result
}

/// The fd numbers open in this process.
public func openDescriptors() -> Set<Int32> {
    Set(openDescriptorTargets().keys)
}

/// Pids of this process's living (or unreaped) children.
/// Runs each of `commands` (an executable, then its arguments) at once, through the shell with
/// standard error joined to standard output; returns each one's exit status and output, in
/// order. (Blocking: for short commands whose output fits a pipe's buffer while the others run.)
public func runCommands(_ commands: [[String]]) throws -> [(status: Int32, output: String)] {
    let pipes = try commands.map { command in
        let line = command.map { "'" + $0.replacing("'", with: "'\\''") + "'" }.joined(separator: " ") + " 2>&1"
        guard let pipe = popen(line, "r") else { throw RemoteError(.invalidArgument, "cannot run \(line)") }
        return pipe
    }
    return pipes.map { pipe in
        var output: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = fread(&buffer, 1, buffer.count, pipe)
            if count <= 0 { break }
            output += buffer[..<count]
        }
        let status = pclose(pipe)
        return ((status >> 8) & 0xFF, String(decoding: output, as: UTF8.self))
    }
}

public func childProcesses() -> Set<Int32> {
    Set(Syscall.childProcesses(of: Syscall.processID))
}

/// This process's own folders in the `memory` and `pids` hierarchies of control groups v1,
/// where its launchers make theirs (none without those hierarchies).
public func ownControlGroupFolders() -> [String] {
    let own = Syscall.controlGroups()
    return ["memory", "pids"].compactMap { controller in
        guard let path = own[controller] else { return nil }
        let folder = "/sys/fs/cgroup/\(controller)\(path == "/" ? "" : path)"
        return Syscall.isDirectory(folder) ? folder : nil
    }
}

/// The control group folders (`remoteview-PID-N`) that process `pid`'s launchers made beside
/// this process's, as paths.
public func launcherControlGroups(ofProcess pid: Int32 = Syscall.processID) -> Set<String> {
    Set(ownControlGroupFolders().flatMap { folder in
        ((try? Syscall.directoryEntries(folder)) ?? []).filter { $0.hasPrefix("remoteview-\(pid)-") }.map { folder + "/" + $0 }
    })
}

/// What leaked: fds, child processes and launchers' control groups present after `body` that
/// were not there before.
public struct Leaks: Equatable, CustomStringConvertible {
    public var descriptors: Set<Int32>
    public var children: Set<Int32>
    public var controlGroups: Set<String> = []
    public var isEmpty: Bool { descriptors.isEmpty && children.isEmpty && controlGroups.isEmpty }
    public var description: String {
        let fds = descriptors.sorted().map { "\($0) -> \(Self.target(of: $0))" }
        return "leaked fds \(fds), child processes \(children.sorted()), control groups \(controlGroups.sorted())"
    }

    static func target(of fd: Int32) -> String {
        Syscall.symbolicLinkTarget("/proc/self/fd/\(fd)") ?? "?"
    }
}

/// Runs `body` within `deadline` and records a test issue for every fd or child process it
/// leaked. The way every test that opens fds or starts processes runs.
public func withoutLeaks<R: Sendable>(within deadline: Duration = .seconds(10),
                                      sourceLocation: SourceLocation = #_sourceLocation,
                                      _ body: @escaping @Sendable () async throws -> R) async throws -> R {
    let (result, leaks) = try await measuringLeaks { try await withDeadline(deadline, "the test", body) }
    #expect(leaks.isEmpty, "\(leaks)", sourceLocation: sourceLocation)
    return result
}

/// Runs `body` and returns it together with what it leaked. Process-wide descriptors that are
/// made once on first use (the shared event loop's epoll and eventfd, Dispatch's timerfd behind
/// `Task.sleep`) are created first, so they never count as a leak.
///
/// Run the tests serially (`swift test --no-parallel`): fds are per process.
func measuringLeaks<R>(_ body: () async throws -> R) async rethrows -> (R, Leaks) {
    _ = EventLoop.shared
    _ = try? await withDeadline { 0 }
    let descriptors = openDescriptors()
    let children = childProcesses()
    let groups = launcherControlGroups()
    let result = try await body()
    // Dispatch (behind Task.sleep) makes its timerfds lazily, per clock and quality of service;
    // RemoteView itself never creates a timerfd, so one is never ours.
    let leaked = openDescriptors().subtracting(descriptors).filter { Leaks.target(of: $0) != "anon_inode:[timerfd]" }
    return (result, Leaks(descriptors: leaked, children: childProcesses().subtracting(children),
                          controlGroups: launcherControlGroups().subtracting(groups)))
}

/// A fresh folder under /tmp, for files a test writes (manifests); ``remove()`` deletes it.
public struct TemporaryFolder: Sendable {
    public let path: String

    /// - Parameter searchable: Whether other users may pass through the folder (mode 0711, not
    ///   mkdtemp's 0700), as a data root must when the host is root: its services run as uids
    ///   of their own.
    public init(_ prefix: String = "remoteview-test", searchable: Bool = false) throws {
        var template = Array("/tmp/\(prefix)-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw SystemCallError(call: "mkdtemp", errno: errno) }
        path = String(cString: made)
        if searchable { chmod(path, 0o711) }
    }

    /// Writes `contents` to `name` in the folder (mode `mode`) and returns its path.
    @discardableResult
    public func write(_ name: String, _ contents: String, mode: mode_t = 0o644) throws -> String {
        let file = path + "/" + name
        let fd = open(file, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw SystemCallError(call: "open(\(file))", errno: errno) }
        defer { close(fd) }
        let bytes = Array(contents.utf8)
        guard bytes.withUnsafeBytes({ Glibc.write(fd, $0.baseAddress, $0.count) }) == bytes.count else {
            throw SystemCallError(call: "write(\(file))", errno: errno)
        }
        return file
    }

    /// Deletes the folder and the files in it.
    public func remove() {
        for name in (try? Syscall.directoryEntries(path)) ?? [] { unlink(path + "/" + name) }
        rmdir(path)
    }
}
