import Glibc
import RemoteCore
import struct Synchronization.Atomic

/// How a launcher enforces a manifest's `limits.memoryMiB` and `limits.processes`
/// (``ServiceStatus/limitEnforcement``). `openFiles` and `cpuSeconds` are rlimits, always applied.
public enum LimitEnforcement: Sendable, Codable, Hashable, CustomStringConvertible {
    /// Control groups v1: a `memory` and a `pids` group per service process, which the process
    /// joins before it runs (so bubblewrap and everything in the sandbox is in them). Both
    /// limits are enforced.
    case cgroupV1
    /// Control groups v2 (the unified hierarchy, as a systemd session delegates it): one group
    /// per service process, which it joins before it runs, with `memory.max` (and no swap) and
    /// `pids.max`. A limit is enforced only when its controller (`memory`, `pids`) is delegated
    /// to the host's group; the launcher logs which.
    case cgroupV2(memory: Bool, processes: Bool)
    /// Not enforced: no control group hierarchy this process may write to (the launcher logs
    /// why). The limits are still validated and reported.
    case notEnforced

    /// Whether `limits.memoryMiB` is enforced.
    public var enforcesMemory: Bool {
        switch self {
        case .cgroupV1: true
        case .cgroupV2(let memory, _): memory
        case .notEnforced: false
        }
    }

    /// Whether `limits.processes` is enforced.
    public var enforcesProcesses: Bool {
        switch self {
        case .cgroupV1: true
        case .cgroupV2(_, let processes): processes
        case .notEnforced: false
        }
    }

    public var description: String {
        switch self {
        case .cgroupV1: "cgroup v1 (memory, pids)"
        case .cgroupV2(let memory, let processes):
            "cgroup v2 (" + ([memory ? "memory" : nil, processes ? "pids" : nil].compactMap { $0 }.joined(separator: ", ").nonEmpty ?? "no controllers") + ")"
        case .notEnforced: "not enforced"
        }
    }
}

private extension String {
    var nonEmpty: String? { isEmpty ? nil : self }
}

/// The launcher's control groups: detects the hierarchies it may write to, and makes one group
/// per service process under its own folder.
///
/// - Control groups v1, with the `memory` and `pids` hierarchies writable (as root, or
///   delegated), are used when they are mounted: a group in each per service process.
/// - Otherwise control groups v2 (the unified hierarchy, wherever it is mounted): one group per
///   service process, below the host's own group. v2 lets a group with processes in it give
///   controllers to its children only at the root ("no internal processes"), so when the
///   host's group is not the root and holds only the host, the host first moves into a leaf
///   of its own, `remoteview-host-PID`, and its old group enables `memory` and `pids` for its
///   children (what `systemd-run --user --scope -p Delegate=yes` or a `Delegate=yes` unit
///   hands over). That is decided once per process.
final class ResourceControl: Sendable {
    /// How limits are enforced.
    let enforcement: LimitEnforcement
    /// Why, in words, for the log.
    let explanation: String
    /// The launcher's own folders, when enforced: one per v1 hierarchy (`memory`, `pids`), or
    /// the one v2 folder.
    private let layout: ControlGroup.Version?
    private let serial = Atomic<Int>(0)

    private init(enforcement: LimitEnforcement, explanation: String, layout: ControlGroup.Version?) {
        self.enforcement = enforcement
        self.explanation = explanation
        self.layout = layout
    }

    /// Finds the hierarchies this process may make groups in, and makes the launcher's folder
    /// (`remoteview-PID-N`) in each.
    static func detect(launcher: Int) -> ResourceControl {
        let own = Syscall.controlGroups()
        let name = "remoteview-\(Syscall.processID)-\(launcher)"
        if let memory = own["memory"], let pids = own["pids"],
           Syscall.isRegularFile("/sys/fs/cgroup/memory/cgroup.procs"), Syscall.isRegularFile(ControlGroup.pidsRoot + "/cgroup.procs") {
            let parents = (memory: BubblewrapCommand.normalised("/sys/fs/cgroup/memory/\(memory)"),
                           pids: BubblewrapCommand.normalised("\(ControlGroup.pidsRoot)/\(pids)"))
            // A host that was killed could not remove its folders: the first launcher after it does.
            for parent in [parents.memory, parents.pids] { removeStaleFolders(in: parent, version: .v1) }
            let bases = (memory: parents.memory + "/" + name, pids: parents.pids + "/" + name)
            do {
                try Syscall.makeDirectory(bases.memory)
                do { try Syscall.makeDirectory(bases.pids) } catch {
                    try? Syscall.removeDirectory(bases.memory)
                    throw error
                }
            } catch {
                return ResourceControl(enforcement: .notEnforced, explanation: "cannot make the launcher's control groups (\(error))", layout: nil)
            }
            return ResourceControl(enforcement: .cgroupV1, explanation: "control groups under \(bases.memory) and \(bases.pids)",
                                   layout: .v1(memory: bases.memory, pids: bases.pids))
        }
        let parent: UnifiedParent
        switch unifiedParent {
        case .failure(let reason):
            return ResourceControl(enforcement: .notEnforced, explanation: reason.text, layout: nil)
        case .success(let found):
            parent = found
        }
        let folder = parent.folder + "/" + name
        do {
            try Syscall.makeDirectory(folder)
            if !parent.controllers.isEmpty {
                try Syscall.writeFile(folder + "/cgroup.subtree_control", parent.controllers.map { "+" + $0 }.joined(separator: " "))
            }
        } catch {
            try? Syscall.removeDirectory(folder)
            return ResourceControl(enforcement: .notEnforced, explanation: "cannot make the launcher's control group \(folder) (\(error))", layout: nil)
        }
        let enforcement = LimitEnforcement.cgroupV2(memory: parent.controllers.contains("memory"), processes: parent.controllers.contains("pids"))
        var explanation = "control groups v2 under \(folder)"
        let missing = ["memory", "pids"].filter { !parent.controllers.contains($0) }
        if !missing.isEmpty {
            explanation += "; the host's group \(parent.folder) is not given the \(missing.joined(separator: " and ")) controller\(missing.count == 2 ? "s" : "")"
                + " (its cgroup.controllers: \"\(parent.offered.joined(separator: " "))\"), so "
                + (missing.count == 2 ? "neither limit is" : missing == ["memory"] ? "limits.memoryMiB is not" : "limits.processes is not")
                + " enforced; the groups still bound each service's lifetime"
        }
        return ResourceControl(enforcement: enforcement, explanation: explanation, layout: .v2(folder: folder, root: parent.root))
    }

    /// Where the launchers of this process make their folders in control groups v2.
    private struct UnifiedParent: Sendable {
        /// The unified hierarchy's mount point.
        var root: String
        /// The folder the launchers' folders go in: the host's group (before it moved into its
        /// leaf, when it had to).
        var folder: String
        /// Of `memory` and `pids`, those enabled for the folder's children.
        var controllers: [String]
        /// What the folder's `cgroup.controllers` offered.
        var offered: [String]
    }

    private struct Refusal: Error { var text: String }

    /// Decided once per process: a second decision would find the host already in its leaf.
    private static let unifiedParent: Result<UnifiedParent, Refusal> = findUnifiedParent()

    private static func findUnifiedParent() -> Result<UnifiedParent, Refusal> {
        guard let root = unifiedMountPoint() else {
            return .failure(Refusal(text: "no control group hierarchy is mounted that the launcher can use (neither v1 memory and pids at /sys/fs/cgroup nor v2)"))
        }
        guard let own = Syscall.controlGroups()[""] else {
            return .failure(Refusal(text: "/proc/self/cgroup names no control group v2 for this process"))
        }
        let folder = BubblewrapCommand.normalised(root + "/" + own)
        let offered = words(in: folder + "/cgroup.controllers")
        let wanted = ["memory", "pids"].filter(offered.contains)
        guard (try? Syscall.checkAccess(folder, W_OK)) != nil else {
            return .failure(Refusal(text: "the host's control group \(folder) (v2) is not writable by this process: run the host in a delegated group (systemd-run --user --scope -p Delegate=yes)"))
        }
        removeStaleFolders(in: folder, version: .v2)
        // "No internal processes": a group other than the root that holds processes may not
        // give its children domain controllers (memory: EBUSY), and with a threaded one
        // enabled (pids) its children are no domains at all (EOPNOTSUPP). So the host, if it
        // is alone in its group, moves into a leaf of its own first.
        let members = ControlGroup.members(of: folder)
        if own != "/", members.contains(Syscall.processID) {
            let others = members.filter { $0 != Syscall.processID }
            if others.isEmpty {
                let leaf = folder + "/remoteview-host-\(Syscall.processID)"
                do {
                    try Syscall.makeDirectory(leaf)
                    try Syscall.writeFile(leaf + "/cgroup.procs", String(Syscall.processID))
                } catch {
                    try? Syscall.removeDirectory(leaf)
                    return .failure(Refusal(text: "cannot move the host into its own leaf \(leaf) (\(error))"))
                }
            } else if !wanted.isEmpty {
                return .failure(Refusal(text: "the host's control group \(folder) (v2) holds other processes too (\(others.prefix(8).map(String.init).joined(separator: ", "))), so it cannot give controllers to groups below it: run the host in a group of its own (systemd-run --user --scope -p Delegate=yes)"))
            }
        }
        let enabled = words(in: folder + "/cgroup.subtree_control")
        let enable = wanted.filter { !enabled.contains($0) }.map { "+" + $0 }.joined(separator: " ")
        if !enable.isEmpty {
            do {
                try Syscall.writeFile(folder + "/cgroup.subtree_control", enable)
            } catch {
                return .failure(Refusal(text: "cannot enable \(enable) in \(folder)/cgroup.subtree_control (\(error))"))
            }
        }
        return .success(UnifiedParent(root: root, folder: folder, controllers: wanted.filter(words(in: folder + "/cgroup.subtree_control").contains),
                                      offered: offered))
    }

    /// The space-separated words of a control file (`cgroup.controllers`, `cgroup.subtree_control`).
    private static func words(in file: String) -> [String] {
        String(decoding: Syscall.readSmallFile(file) ?? [], as: UTF8.self).split(whereSeparator: { $0 == " " || $0 == "\n" }).map(String.init)
    }

    /// The mount point of control groups v2 (`cgroup2` in `/proc/self/mountinfo`): at
    /// `/sys/fs/cgroup` on a unified host, at `/sys/fs/cgroup/unified` on a hybrid one.
    static func unifiedMountPoint() -> String? {
        let text = String(decoding: Syscall.readSmallFile("/proc/self/mountinfo", limit: 1 << 20) ?? [], as: UTF8.self)
        var found: [String] = []
        for line in text.split(separator: "\n") {
            // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL…] - TYPE SOURCE SUPEROPTIONS
            let halves = line.split(separator: " - ", maxSplits: 1)
            guard halves.count == 2, halves[1].split(separator: " ").first == "cgroup2" else { continue }
            let fields = halves[0].split(separator: " ")
            // Only a mount of the hierarchy's root: a bind mount of a subtree would shift paths.
            guard fields.count >= 5, fields[3] == "/" else { continue }
            found.append(unescapedMountPath(String(fields[4])))
        }
        return found.first { $0 == "/sys/fs/cgroup" } ?? found.first { $0 == "/sys/fs/cgroup/unified" } ?? found.first
    }

    /// A mountinfo path with its octal escapes (`\040` for a space) decoded.
    private static func unescapedMountPath(_ text: String) -> String {
        var bytes: [UInt8] = []
        var input = Array(text.utf8)[...]
        while let byte = input.popFirst() {
            if byte == UInt8(ascii: "\\"), input.count >= 3, let value = UInt8(String(decoding: input.prefix(3), as: UTF8.self), radix: 8) {
                bytes.append(value)
                input = input.dropFirst(3)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A group for one process of `identifier` with `limits` (`processes` plus `extraProcesses`,
    /// bubblewrap's own two), or `nil` when no control groups are used.
    ///
    /// - Throws: when the group cannot be made or its limits written.
    func makeGroup(for identifier: String, limits: ServiceManifest.Limits, extraProcesses: Int) throws(SystemCallError) -> ControlGroup? {
        guard let layout else { return nil }
        let name = "\(identifier).\(serial.wrappingAdd(1, ordering: .relaxed).oldValue)"
        let bytes = String(UInt64(limits.memoryMiB) << 20)
        let processes = String(limits.processes + extraProcesses)
        let group = ControlGroup(version: layout.appending(name), limits: limits)
        do {
            for folder in group.folders { try Syscall.makeDirectory(folder) }
            switch group.version {
            case .v1(let memory, let pids):
                try Syscall.writeFile(memory + "/memory.limit_in_bytes", bytes)
                // With swap accounting, swap counts too: the limit is on memory and swap together.
                if Syscall.isRegularFile(memory + "/memory.memsw.limit_in_bytes") {
                    try Syscall.writeFile(memory + "/memory.memsw.limit_in_bytes", bytes)
                }
                try Syscall.writeFile(pids + "/pids.max", processes)
            case .v2(let folder, _):
                if enforcement.enforcesMemory {
                    try Syscall.writeFile(folder + "/memory.max", bytes)
                    // v2 counts swap apart: none at all keeps memory and swap within the limit.
                    if Syscall.isRegularFile(folder + "/memory.swap.max") { try Syscall.writeFile(folder + "/memory.swap.max", "0") }
                    // An out-of-memory kill ends the whole service, not one of its processes.
                    if Syscall.isRegularFile(folder + "/memory.oom.group") { try Syscall.writeFile(folder + "/memory.oom.group", "1") }
                }
                if enforcement.enforcesProcesses { try Syscall.writeFile(folder + "/pids.max", processes) }
            }
        } catch {
            group.remove()
            throw error
        }
        return group
    }

    /// Removes the launcher's folders (once every group in them is gone).
    func remove() {
        for folder in layout?.folders ?? [] { try? Syscall.removeDirectory(folder) }
    }

    /// Removes the `remoteview-PID-N` folders in `parent` of hosts that no longer run (a host
    /// killed by SIGKILL leaves its folders behind), with their groups, and (v2) the empty
    /// `remoteview-host-PID` leaf of such a host. Whatever still runs in such a group (a
    /// sandbox that outlived its host) is killed first; a group that is not empty yet stays for
    /// the next launcher to remove.
    static func removeStaleFolders(in parent: String, version: ControlGroup.Kind) {
        for name in (try? Syscall.directoryEntries(parent)) ?? [] where name.hasPrefix("remoteview-") {
            let fields = name.dropFirst("remoteview-".count).split(separator: "-")
            let owner: Int32?
            if fields.count == 2, fields[0] == "host" { owner = Int32(fields[1]) }
            else if fields.count == 2, Int(fields[1]) != nil { owner = Int32(fields[0]) }
            else { owner = nil }
            guard let pid = owner, pid != Syscall.processID, !Syscall.processExists(pid) else { continue }
            let folder = parent + "/" + name
            guard Syscall.isDirectory(folder) else { continue }
            for group in (try? Syscall.directoryEntries(folder)) ?? [] where Syscall.isDirectory(folder + "/" + group) {
                ControlGroup.killMembers(of: folder + "/" + group, version: version)
                try? Syscall.removeDirectory(folder + "/" + group)
            }
            try? Syscall.removeDirectory(folder)
        }
    }
}

/// One service process's control groups.
final class ControlGroup: Sendable {
    /// Which hierarchy a group lives in.
    enum Kind: Sendable { case v1, v2 }

    /// Where its folders are (or a launcher's, which hold its groups).
    enum Version: Sendable {
        /// Its folders in the v1 `memory` and `pids` hierarchies.
        case v1(memory: String, pids: String)
        /// Its one folder in the unified hierarchy, mounted at `root`.
        case v2(folder: String, root: String)

        /// The folders: the ones a process joins (writes its pid to `cgroup.procs` of).
        var folders: [String] {
            switch self {
            case .v1(let memory, let pids): [memory, pids]
            case .v2(let folder, _): [folder]
            }
        }

        /// The same place one folder `name` further down.
        func appending(_ name: String) -> Version {
            switch self {
            case .v1(let memory, let pids): .v1(memory: memory + "/" + name, pids: pids + "/" + name)
            case .v2(let folder, let root): .v2(folder: folder + "/" + name, root: root)
            }
        }
    }

    let version: Version
    /// The limits it enforces.
    let limits: ServiceManifest.Limits

    init(version: Version, limits: ServiceManifest.Limits) {
        self.version = version
        self.limits = limits
    }

    /// Its folders: the ones a process joins (writes its pid to `cgroup.procs` of).
    var folders: [String] { version.folders }

    /// The folder that holds its processes (v1: the `pids` one; both hold the same).
    private var processFolder: String {
        switch version {
        case .v1(_, let pids): pids
        case .v2(let folder, _): folder
        }
    }

    /// Memory in use by its processes, bytes (`memory.usage_in_bytes`, v2 `memory.current`);
    /// `nil` when not counted.
    var memoryInUse: UInt64? {
        switch version {
        case .v1(let memory, _): Self.number(memory + "/memory.usage_in_bytes")
        case .v2(let folder, _): Self.number(folder + "/memory.current")
        }
    }

    /// Processes in it (`pids.current`), bubblewrap's included; `nil` when not counted.
    var processCount: Int? { Self.number(processFolder + "/pids.current").map { Int($0) } }

    /// How many times the kernel's out-of-memory killer ended one of its processes (v1
    /// `memory.oom_control`, v2 `memory.events`: `oom_kill N`).
    var outOfMemoryKills: Int {
        let file = switch version {
        case .v1(let memory, _): memory + "/memory.oom_control"
        case .v2(let folder, _): folder + "/memory.events"
        }
        let text = String(decoding: Syscall.readSmallFile(file) ?? [], as: UTF8.self)
        for line in text.split(separator: "\n") where line.hasPrefix("oom_kill ") {
            return Int(line.dropFirst("oom_kill ".count)) ?? 0
        }
        return 0
    }

    /// Removes its folders (they must be empty of processes).
    func remove() {
        for folder in folders { try? Syscall.removeDirectory(folder) }
    }

    /// Removes its folders once the processes still in them are gone, by `deadline`; returns
    /// whether it did.
    ///
    /// Called when the service's process is reaped: the sandbox's other processes are then
    /// dying with their pid namespace, but a group cannot be removed (`EBUSY`) until the last
    /// has left it. So whatever is still in the group is killed (``killMembers(until:)``: it
    /// belongs to the service), and the removal is retried with a growing pause (1 ms,
    /// doubling, at most 50 ms).
    func remove(until deadline: ContinuousClock.Instant) async -> Bool {
        var pause = Duration.milliseconds(1)
        while true {
            _ = await killMembers(until: deadline)
            var gone = true
            for folder in folders {
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
    /// the group: the group is read again until nothing new is in it. (v2's `cgroup.kill`
    /// would kill them all at once, but tells nothing of when they are gone.)
    func killMembers(until deadline: ContinuousClock.Instant) async -> [ChildProcess.Straggler] {
        var held: [Int32: (ProcessDescriptor, ChildProcess.Straggler)] = [:]
        for _ in 0..<8 {
            let fresh = Self.members(of: processFolder).filter { held[$0] == nil }
            if fresh.isEmpty { break }
            for pid in fresh {
                // Seen before it is killed: what it was is gone with it.
                guard let member = try? ProcessDescriptor(pid: pid, isChild: false), isMember(pid),
                      let straggler = ChildProcess.Straggler.found(pid) else { continue }
                member.send(signal: SIGKILL)
                held[pid] = (member, straggler)
            }
        }
        for (member, _) in held.values { _ = try? await member.waitForExit(until: deadline) }
        return held.values.map(\.1).sorted { $0.pid < $1.pid }
    }

    /// Whether process `pid` is in this group (`/proc/PID/cgroup`).
    private func isMember(_ pid: Int32) -> Bool {
        switch version {
        case .v1(_, let pids):
            Syscall.controlGroups(of: pid)["pids"] == String(pids.dropFirst(ControlGroup.pidsRoot.count))
        case .v2(let folder, let root):
            Syscall.controlGroups(of: pid)[""] == String(folder.dropFirst(root == "/" ? 0 : root.count))
        }
    }

    /// Where control groups v1 `pids` hierarchy is mounted.
    static let pidsRoot = "/sys/fs/cgroup/pids"

    /// The processes in the group at `folder` (its `cgroup.procs`).
    static func members(of folder: String) -> [Int32] {
        let text = String(decoding: Syscall.readSmallFile(folder + "/cgroup.procs", limit: 1 << 20) ?? [], as: UTF8.self)
        return text.split(separator: "\n").compactMap { Int32($0) }.filter { $0 > 1 }
    }

    /// Kills every process in the group at `folder`: for a group of a host that is gone
    /// (``ResourceControl/removeStaleFolders(in:version:)``); a live service's group is emptied
    /// through pidfds (``killMembers(until:)``). v2 writes `cgroup.kill` (Linux 5.14), which
    /// reaches a process that forks as it is killed; otherwise each pid gets SIGKILL.
    static func killMembers(of folder: String, version: Kind) {
        if version == .v2, (try? Syscall.writeFile(folder + "/cgroup.kill", "1")) != nil { return }
        for pid in members(of: folder) { Syscall.kill(pid, SIGKILL) }
    }

    private static func number(_ path: String) -> UInt64? {
        Syscall.readSmallFile(path).flatMap { String(decoding: $0, as: UTF8.self).split(separator: "\n").first.flatMap { UInt64($0) } }
    }
}
