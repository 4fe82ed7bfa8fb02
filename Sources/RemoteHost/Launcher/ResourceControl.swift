import Glibc
import RemoteCore
import struct Synchronization.Atomic

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
        let own = Syscall.controlGroups()
        guard let memory = own["memory"], let pids = own["pids"],
              Syscall.isRegularFile("/sys/fs/cgroup/memory/cgroup.procs"), Syscall.isRegularFile("/sys/fs/cgroup/pids/cgroup.procs") else {
            let reason = Syscall.isRegularFile("/sys/fs/cgroup/cgroup.controllers")
                ? "this host has control groups v2, which the launcher does not use yet"
                : "no cgroup v1 memory and pids hierarchies are mounted at /sys/fs/cgroup"
            return ResourceControl(enforcement: .none, explanation: reason, bases: nil)
        }
        let parents = (memory: BubblewrapCommand.normalised("/sys/fs/cgroup/memory/\(memory)"),
                       pids: BubblewrapCommand.normalised("\(ControlGroup.pidsRoot)/\(pids)"))
        // A host that was killed could not remove its folders: the first launcher after it does.
        for parent in [parents.memory, parents.pids] { removeStaleFolders(in: parent) }
        let name = "remoteview-\(Syscall.processID)-\(launcher)"
        let bases = (memory: parents.memory + "/" + name, pids: parents.pids + "/" + name)
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

    /// Removes the `remoteview-PID-N` folders in `parent` of hosts that no longer run (a host
    /// killed by SIGKILL leaves its folders behind), with their groups. Whatever still runs in
    /// such a group (a sandbox that outlived its host) is killed first; a group that is not
    /// empty yet stays for the next launcher to remove.
    static func removeStaleFolders(in parent: String) {
        for name in (try? Syscall.directoryEntries(parent)) ?? [] where name.hasPrefix("remoteview-") {
            let fields = name.dropFirst("remoteview-".count).split(separator: "-")
            guard fields.count == 2, let pid = Int32(fields[0]), Int(fields[1]) != nil,
                  pid != Syscall.processID, !Syscall.processExists(pid) else { continue }
            let folder = parent + "/" + name
            guard Syscall.isDirectory(folder) else { continue }
            for group in (try? Syscall.directoryEntries(folder)) ?? [] where Syscall.isDirectory(folder + "/" + group) {
                ControlGroup.killMembers(of: folder + "/" + group)
                try? Syscall.removeDirectory(folder + "/" + group)
            }
            try? Syscall.removeDirectory(folder)
        }
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

    /// Removes both folders once the processes still in them are gone, by `deadline`; returns
    /// whether it did.
    ///
    /// Called when the service's process is reaped: the sandbox's other processes are then
    /// dying with their pid namespace, but a group cannot be removed (`EBUSY`) until the last
    /// has left it, and control groups v1 tell no one when that happens. So whatever is still
    /// in the group is killed (``killMembers(until:)``: it belongs to the service), and the
    /// removal is retried with a growing pause (1 ms, doubling, at most 50 ms).
    func remove(until deadline: ContinuousClock.Instant) async -> Bool {
        var pause = Duration.milliseconds(1)
        while true {
            // Both hierarchies hold the same processes: they joined both at once.
            _ = await killMembers(until: deadline)
            var gone = true
            for folder in [memory, pids] {
                do { try Syscall.removeDirectory(folder) } catch where error.errno != ENOENT { gone = false } catch {}
            }
            if gone { return true }
            let next = ContinuousClock.now.advanced(by: pause)
            guard next < deadline else { return false }
            do { try await EventLoop.shared.sleep(until: next) } catch { return false }
            pause = min(pause * 2, .milliseconds(50))
        }
    }

    /// Kills every process in the group and waits, until `deadline`, for each to exit; returns
    /// their pids.
    ///
    /// Whatever is in a service's group is the service's, wherever it went: the sandbox's pid 1,
    /// or, unsandboxed, a daemon that left the service's session and process group. Each is held
    /// by a pidfd before it is signalled, and only if it is still in the group then, so a
    /// reused pid is never signalled. A process that forks as it is killed puts its child in
    /// the group: the group is read again until nothing new is in it.
    func killMembers(until deadline: ContinuousClock.Instant) async -> Set<Int32> {
        var held: [Int32: ProcessDescriptor] = [:]
        for _ in 0..<8 {
            let fresh = Self.members(of: pids).filter { held[$0] == nil }
            if fresh.isEmpty { break }
            for pid in fresh {
                guard let member = try? ProcessDescriptor(pid: pid, isChild: false), isMember(pid) else { continue }
                member.send(signal: SIGKILL)
                held[pid] = member
            }
        }
        for member in held.values { _ = try? await member.waitForExit(until: deadline) }
        return Set(held.keys)
    }

    /// Whether process `pid` is in this group's `pids` folder (`/proc/PID/cgroup`).
    private func isMember(_ pid: Int32) -> Bool {
        Syscall.controlGroups(of: pid)["pids"] == String(pids.dropFirst(ControlGroup.pidsRoot.count))
    }

    /// Where control groups v1 `pids` hierarchy is mounted.
    static let pidsRoot = "/sys/fs/cgroup/pids"

    /// The processes in the group at `folder` (its `cgroup.procs`).
    static func members(of folder: String) -> [Int32] {
        let text = String(decoding: Syscall.readSmallFile(folder + "/cgroup.procs", limit: 1 << 20) ?? [], as: UTF8.self)
        return text.split(separator: "\n").compactMap { Int32($0) }.filter { $0 > 1 }
    }

    /// Sends SIGKILL to every process in the group at `folder`, by pid: for a group of a host
    /// that is gone (``ResourceControl/removeStaleFolders(in:)``); a live service's group is
    /// emptied through pidfds (``killMembers(until:)``).
    static func killMembers(of folder: String) {
        for pid in members(of: folder) { Syscall.kill(pid, SIGKILL) }
    }

    private static func number(_ path: String) -> UInt64? {
        Syscall.readSmallFile(path).flatMap { String(decoding: $0, as: UTF8.self).split(separator: "\n").first.flatMap { UInt64($0) } }
    }
}
