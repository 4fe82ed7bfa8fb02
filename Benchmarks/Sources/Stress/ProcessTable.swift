import CStress
import Glibc
import RemoteHost

/// What `/proc` says about this process and the others: fds, mappings, children, process trees,
/// command lines and start times. For the stress runs' leak checks and for finding what to kill.
enum ProcFS {
    /// The contents of `path`, at most `limit` bytes, or `nil` when it cannot be read.
    static func read(_ path: String, limit: Int = 4 << 20) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var contents: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while contents.count < limit {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                return nil
            }
            if count == 0 { break }
            contents.append(contentsOf: buffer[..<count])
        }
        return contents
    }

    static func text(_ path: String) -> String? {
        read(path).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The names in `folder` (without `.` and `..`).
    static func entries(_ folder: String) -> [String] {
        guard let directory = opendir(folder) else { return [] }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            // Through a pointer: copying d_name's whole array can read past readdir's buffer.
            let name = String(cString: UnsafeRawPointer(entry).advanced(by: MemoryLayout<dirent>.offset(of: \dirent.d_name)!)
                .assumingMemoryBound(to: CChar.self))
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Where the symbolic link at `path` points.
    static func link(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink(path, &buffer, buffer.count - 1)
        guard length >= 0 else { return nil }
        return String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The children of `pid` (of all its threads), from `/proc/PID/task/*/children`.
    static func children(of pid: Int32) -> [Int32] {
        let base = pid == getpid() ? "/proc/self" : "/proc/\(pid)"
        return entries(base + "/task").flatMap { task in
            (text("\(base)/task/\(task)/children") ?? "").split(separator: " ").compactMap { Int32($0.trimmingSpaces) }
        }
    }

    /// Every process below `pid`, with its depth (1: a child).
    static func descendants(of pid: Int32) -> [(pid: Int32, depth: Int)] {
        var found: [(pid: Int32, depth: Int)] = []
        var next = children(of: pid).map { ($0, 1) }
        while let (child, depth) = next.popLast(), found.count < 64 {
            found.append((child, depth))
            next += children(of: child).map { ($0, depth + 1) }
        }
        return found
    }

    /// The command line of `pid`, its arguments separated by spaces.
    static func commandLine(of pid: Int32) -> String? {
        read("/proc/\(pid)/cmdline", limit: 1 << 16).map { String(decoding: $0.map { $0 == 0 ? 0x20 : $0 }, as: UTF8.self) }
    }

    /// The fields of `/proc/PID/stat` after the command name: [0] is the state, [19] the start
    /// time in clock ticks since boot.
    static func statFields(of pid: Int32) -> [Substring]? {
        guard let stat = text("/proc/\(pid)/stat"), let close = stat.lastIndex(of: ")") else { return nil }
        return stat[stat.index(after: close)...].split(separator: " ")
    }

    /// Clock ticks since boot now, on the clock of `/proc/PID/stat`'s start times.
    static func bootTicks() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_BOOTTIME, &now)
        let ticks = UInt64(sysconf(Int32(_SC_CLK_TCK)))
        return UInt64(now.tv_sec) * ticks + UInt64(now.tv_nsec) * ticks / 1_000_000_000
    }

    /// Processes anywhere on the machine whose command line contains `marker` and which started
    /// at or after `ticks` (since boot), other than this one: pid, state and command line.
    static func processes(containing marker: String, startedSince ticks: UInt64) -> [(pid: Int32, state: String, commandLine: String)] {
        let me = getpid()
        return entries("/proc").compactMap { name -> (pid: Int32, state: String, commandLine: String)? in
            guard let pid = Int32(name), pid != me, let commandLine = commandLine(of: pid), commandLine.contains(marker),
                  let fields = statFields(of: pid), fields.count > 19, let started = UInt64(fields[19]), started >= ticks else { return nil }
            return (pid, String(fields[0]), commandLine)
        }
    }
}

/// This process's resources at one moment, for the leak check after a run.
struct HostSnapshot {
    /// Open fds and what each points to (the listing's own directory fd left out).
    var descriptors: [Int32: String]
    /// Lines of `/proc/self/maps`.
    var mappings: Int
    /// Mappings of memfds.
    var memfdMappings: Int
    /// Child processes (zombies included).
    var children: [Int32]
    var memory: MemoryUsage

    static func take() -> HostSnapshot {
        var descriptors: [Int32: String] = [:]
        for name in ProcFS.entries("/proc/self/fd") {
            guard let fd = Int32(name), let target = ProcFS.link("/proc/self/fd/\(name)") else { continue }
            descriptors[fd] = target
        }
        // The directory being listed has an fd of its own, gone now.
        descriptors = descriptors.filter { fd, _ in fcntl(fd, F_GETFD) >= 0 }
        let maps = ProcFS.text("/proc/self/maps") ?? ""
        let lines = maps.split(separator: "\n")
        return HostSnapshot(descriptors: descriptors, mappings: lines.count, memfdMappings: lines.filter { $0.contains("/memfd:") }.count,
                            children: ProcFS.children(of: getpid()).sorted(), memory: .current())
    }

    var memfds: Int { descriptors.values.filter { $0.hasPrefix("/memfd:") }.count }
}

/// A process to signal, by pidfd: a signal never reaches another process that was given the
/// same pid after this one was reaped (pid_max is 32768 here; a storm starts thousands).
final class ProcessHandle: Sendable {
    let pid: Int32
    private let fd: Int32

    /// The process `pid` if it is still one of this run's: its command line contains `marker`
    /// (the service executable's path, on bubblewrap's command line too). Checked after the
    /// pidfd is open, so the check is about the process the pidfd refers to.
    init?(pid: Int32, marker: String) {
        let fd = cstress_pidfd_open(pid)
        guard fd >= 0 else { return nil }
        guard let commandLine = ProcFS.commandLine(of: pid), commandLine.contains(marker) else {
            close(fd)
            return nil
        }
        self.pid = pid
        self.fd = fd
    }

    deinit { close(fd) }

    /// Sends `signal`; `false` when the process has exited.
    func send(_ signal: Int32) -> Bool {
        cstress_pidfd_send_signal(fd, signal) == 0
    }
}

private extension Substring {
    var trimmingSpaces: Substring {
        var text = self
        while let last = text.last, last == "\n" || last == " " { text.removeLast() }
        return text
    }
}
