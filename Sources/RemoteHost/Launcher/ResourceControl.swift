import Glibc
import RemoteCore
import Synchronization

/// How a launcher enforces a manifest's `limits.memoryMiB` and `limits.processes`
/// (``ServiceStatus/limitEnforcement``). `openFiles` and `cpuSeconds` are rlimits, always applied.
public enum LimitEnforcement: String, Sendable, Codable, Hashable {
    /// Control groups v1: a `memory` and a `pids` group per service process, which the process
    /// joins before it runs (so bubblewrap and everything in the sandbox is in them).
    case cgroupV1 = "cgroup v1 (memory, pids)"
    /// Not enforced: no control group hierarchy this process may write to (the launcher logs
    /// why). The limits are still validated and reported.
    case none
}

/// The launcher's control groups: detects the hierarchies it may write to, and makes one group
/// per service process under its own folder.
///
/// Control groups v1 with the `memory` and `pids` controllers writable (as root, or under a
/// delegated hierarchy) is what this supports. A cgroup v2 host (a systemd desktop with a
/// delegated `user@UID.service` subtree) is detected and reported as not enforced yet:
/// docs/Manifest.md says so.
final class ResourceControl: Sendable {
    /// How limits are enforced.
    let enforcement: LimitEnforcement
    /// Why, in words, for the log.
    let explanation: String
    /// The launcher's own folder in each hierarchy (`memory`, `pids`), when enforced.
    private let bases: (memory: String, pids: String)?
    private let serial = Atomic<Int>(0)

    private init(enforcement: LimitEnforcement, explanation: String, bases: (memory: String, pids: String)?) {
        self.enforcement = enforcement
        self.explanation = explanation
        self.bases = bases
    }

    /// Finds the hierarchies this process may make groups in, and makes the launcher's folder
    /// (`remoteview-PID-N`) in each.
    static func detect(launcher: Int) -> ResourceControl {
        var own: [String: String] = [:]
        let text = String(decoding: Syscall.readSmallFile("/proc/self/cgroup", limit: 1 << 16) ?? [], as: UTF8.self)
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3 else { continue }
            for controller in parts[1].split(separator: ",") { own[String(controller)] = String(parts[2]) }
        }
        guard let memory = own["memory"], let pids = own["pids"],
              Syscall.isRegularFile("/sys/fs/cgroup/memory/cgroup.procs"), Syscall.isRegularFile("/sys/fs/cgroup/pids/cgroup.procs") else {
            let reason = Syscall.isRegularFile("/sys/fs/cgroup/cgroup.controllers")
                ? "this host has control groups v2, which the launcher does not use yet"
                : "no cgroup v1 memory and pids hierarchies are mounted at /sys/fs/cgroup"
            return ResourceControl(enforcement: .none, explanation: reason, bases: nil)
        }
        let name = "remoteview-\(Syscall.processID)-\(launcher)"
        let bases = (memory: BubblewrapCommand.normalised("/sys/fs/cgroup/memory/\(memory)/\(name)"),
                     pids: BubblewrapCommand.normalised("/sys/fs/cgroup/pids/\(pids)/\(name)"))
        do {
            try Syscall.makeDirectory(bases.memory)
            do { try Syscall.makeDirectory(bases.pids) } catch {
                try? Syscall.removeDirectory(bases.memory)
                throw error
            }
        } catch {
            return ResourceControl(enforcement: .none, explanation: "cannot make the launcher's control groups (\(error))", bases: nil)
        }
        return ResourceControl(enforcement: .cgroupV1, explanation: "control groups under \(bases.memory) and \(bases.pids)", bases: bases)
    }

    /// A group for one process of `identifier` with `limits` (`processes` plus `extraProcesses`,
    /// bubblewrap's own two), or `nil` when limits are not enforced.
    ///
    /// - Throws: when the group cannot be made or its limits written.
    func makeGroup(for identifier: String, limits: ServiceManifest.Limits, extraProcesses: Int) throws(SystemCallError) -> ControlGroup? {
        guard let bases else { return nil }
        let name = "\(identifier).\(serial.wrappingAdd(1, ordering: .relaxed).oldValue)"
        let group = ControlGroup(memory: bases.memory + "/" + name, pids: bases.pids + "/" + name, limits: limits)
        do {
            try Syscall.makeDirectory(group.memory)
            try Syscall.makeDirectory(group.pids)
            let bytes = UInt64(limits.memoryMiB) << 20
            try Syscall.writeFile(group.memory + "/memory.limit_in_bytes", String(bytes))
            // With swap accounting, swap counts too: the limit is on memory and swap together.
            if Syscall.isRegularFile(group.memory + "/memory.memsw.limit_in_bytes") {
                try Syscall.writeFile(group.memory + "/memory.memsw.limit_in_bytes", String(bytes))
            }
            try Syscall.writeFile(group.pids + "/pids.max", String(limits.processes + extraProcesses))
        } catch {
            group.remove()
            throw error
        }
        return group
    }

    /// Removes the launcher's folders (once every group in them is gone).
    func remove() {
        guard let bases else { return }
        try? Syscall.removeDirectory(bases.memory)
        try? Syscall.removeDirectory(bases.pids)
    }
}

/// One service process's control groups.
final class ControlGroup: Sendable {
    /// Its folder in the `memory` hierarchy.
    let memory: String
    /// Its folder in the `pids` hierarchy.
    let pids: String
    /// The limits it enforces.
    let limits: ServiceManifest.Limits

    init(memory: String, pids: String, limits: ServiceManifest.Limits) {
        self.memory = memory
        self.pids = pids
        self.limits = limits
    }

    /// Memory in use by its processes, bytes (`memory.usage_in_bytes`).
    var memoryInUse: UInt64? { Self.number(memory + "/memory.usage_in_bytes") }

    /// Processes in it (`pids.current`), bubblewrap's included.
    var processCount: Int? { Self.number(pids + "/pids.current").map { Int($0) } }

    /// How many times the kernel's out-of-memory killer ended one of its processes.
    var outOfMemoryKills: Int {
        let text = String(decoding: Syscall.readSmallFile(memory + "/memory.oom_control") ?? [], as: UTF8.self)
        for line in text.split(separator: "\n") where line.hasPrefix("oom_kill ") {
            return Int(line.dropFirst("oom_kill ".count)) ?? 0
        }
        return 0
    }

    /// Removes both folders (they must be empty of processes).
    func remove() {
        try? Syscall.removeDirectory(memory)
        try? Syscall.removeDirectory(pids)
    }

    private static func number(_ path: String) -> UInt64? {
        Syscall.readSmallFile(path).flatMap { String(decoding: $0, as: UTF8.self).split(separator: "\n").first.flatMap { UInt64($0) } }
    }
}
