import Glibc
import RemoteCore

/// The unprivileged user ids a root host's services run as, one per service identifier, like
/// systemd's `DynamicUser=`.
///
/// A sandbox run by root maps root to root: the kernel would see a service's uid as 0 and let it
/// write the host's kernel settings (`/proc/sys/kernel/core_pattern`, whose next use runs a
/// program of the writer's choice as root). So when the host runs as root, each sandboxed
/// service runs as a uid and gid of its own from ``ids``: the launcher's child drops to them
/// (no supplementary groups) once it has joined the service's control groups and set its
/// limits, before it runs bubblewrap. A host that is not root runs its services as itself, as
/// before.
///
/// An identifier gets the same uid at every launch, and keeps it across restarts of the host,
/// so its data folder keeps its owner; two identifiers never share one, so no service can read
/// another's data. The assignments are kept in ``table``, one line `UID IDENTIFIER` each, under
/// an exclusive lock (`flock`) while one is added; a new identifier takes the first free uid
/// from a place derived from its name (so a lost table gives most identifiers their old uids
/// back), skipping any uid or gid the user or group database knows.
public struct ServiceUserPool: Sendable, Hashable {
    /// The user and group ids given out (a service's gid is its uid). Never 0, never the
    /// invalid `UInt32.max`.
    public var ids: ClosedRange<UInt32>
    /// The file that keeps which identifier has which uid (made if missing, with its folder;
    /// it must belong to the host's user, root, and be writable by it only).
    public var table: String

    /// The default range: 65,536 ids from 0x7000_0000 (1879048192), in the range systemd's
    /// documentation of uid ranges ("Users, Groups, UIDs and GIDs on systemd Systems") leaves
    /// unused, above the ranges it gives containers, and below the 2^31 where signedness
    /// troubles start.
    public static let defaultIDs: ClosedRange<UInt32> = 0x7000_0000...0x7000_FFFF

    /// The default table, beside a root host's default data root.
    public static let defaultTable = "/var/lib/remoteview/service-uids"

    /// A pool of `ids`, whose assignments are kept in `table`.
    public init(ids: ClosedRange<UInt32> = defaultIDs, table: String = defaultTable) {
        self.ids = ids
        self.table = table
    }

    /// The largest table read.
    static let maxTableSize = 4 << 20

    /// The uid and gid `identifier` runs as: its line of the table, or a new one.
    ///
    /// - Throws: `invalidated` when the pool is unusable (a range holding 0, a table that is not
    ///   a regular file owned and only writable by root, a malformed line, every id taken).
    func identity(for identifier: String) throws(RemoteError) -> ChildProcess.Identity {
        let fail = { (reason: String) in RemoteError(.invalidated, "cannot choose the uid \(identifier) runs as (the host is root; Launcher.Configuration.serviceUsers, table \(table)): \(reason)") }
        guard ids.lowerBound > 0, ids.upperBound < UInt32.max else { throw fail("the range \(ids) holds 0 or 4294967295") }
        guard table.hasPrefix("/"), let slash = table.lastIndex(of: "/") else { throw fail("the table is not an absolute path") }
        do { try SandboxPaths.makeFolders(String(table[..<slash]), mode: { _ in 0o755 }) } catch { throw fail("\(error)") }
        do {
            // Its folder and the file both root's and writable by root only: nobody else may
            // choose which uid a service gets.
            let tableFolder = try Syscall.status(ofPath: String(table[..<slash]))
            guard tableFolder.st_uid == Syscall.effectiveUserID, tableFolder.st_mode & (S_IWGRP | S_IWOTH) == 0 else {
                throw fail("its folder must be owned by the host's user (root) and writable by it only")
            }
            let file = try Syscall.openOrCreate(table, mode: 0o644)
            let status = try Syscall.status(file)
            guard status.isRegularFile, status.st_uid == Syscall.effectiveUserID, status.st_mode & (S_IWGRP | S_IWOTH) == 0 else {
                throw fail("it must be a regular file owned by the host's user (root) and writable by it only")
            }
            try Syscall.lockExclusively(file, name: table)
            let bytes = try Syscall.readToEnd(file, limit: Self.maxTableSize, name: table)
            var owners: [UInt32: Substring] = [:], assigned: [Substring: UInt32] = [:]
            // Whole lines only: a line cut short (a full disk while it was written) is ignored,
            // and the next one written after a line break.
            let complete = bytes.lastIndex(of: 0x0a).map { bytes[...$0] } ?? []
            for (index, line) in String(decoding: complete, as: UTF8.self).split(separator: "\n").enumerated() {
                let fields = line.split(separator: " ")
                guard fields.count == 2, let uid = UInt32(fields[0]) else {
                    throw fail("line \(index + 1) is not \"UID IDENTIFIER\"")
                }
                // A later line wins: a range that changed gives an identifier a new line.
                if let old = assigned.updateValue(uid, forKey: fields[1]) { owners[old] = nil }
                if let other = owners[uid], other != fields[1] {
                    throw fail("line \(index + 1) gives uid \(uid) to \(fields[1]), which \(other) has: two services would share it")
                }
                owners[uid] = fields[1]
            }
            if let mine = assigned[identifier[...]], ids.contains(mine) { return try mapped(ChildProcess.Identity(user: mine, group: mine)) }
            let count = UInt64(ids.upperBound - ids.lowerBound) + 1
            let start = Self.hash(identifier) % count
            for step in 0..<count {
                let uid = ids.lowerBound + UInt32((start + step) % count)
                guard owners[uid] == nil, Syscall.userEntryExists(uid) == false, Syscall.groupEntryExists(uid) == false else { continue }
                let line = (bytes.count == complete.count ? "" : "\n") + "\(uid) \(identifier)\n"
                try Syscall.writeAll(file, Array(line.utf8), at: bytes.count)
                return try mapped(ChildProcess.Identity(user: uid, group: uid))
            }
            throw fail("every id of \(ids) is taken")
        } catch let error as RemoteError {
            throw error
        } catch {
            throw fail("\(error)")
        }
    }

    /// `identity`, when this process's user namespace maps its uid and gid
    /// (`/proc/self/uid_map`, `gid_map`): root in a container maps only some ids, and a drop to
    /// another fails.
    ///
    /// - Throws: `invalidated`, naming the maps, when it does not.
    private func mapped(_ identity: ChildProcess.Identity) throws(RemoteError) -> ChildProcess.Identity {
        for (map, id) in [("uid_map", identity.user), ("gid_map", identity.group)] {
            let text = String(decoding: Syscall.readSmallFile("/proc/self/\(map)", limit: 1 << 16) ?? [], as: UTF8.self)
            let ranges = text.split(separator: "\n").compactMap { line -> ClosedRange<UInt64>? in
                let fields = line.split(whereSeparator: \.isWhitespace).compactMap { UInt64($0) }
                guard fields.count == 3, fields[2] > 0 else { return nil }
                return fields[0]...(fields[0] + fields[2] - 1)
            }
            guard ranges.contains(where: { $0.contains(UInt64(id)) }) else {
                let shown = text.split(separator: "\n").map { $0.split(whereSeparator: \.isWhitespace).joined(separator: " ") }.joined(separator: "; ")
                throw RemoteError(.invalidated, "cannot run services as \(identity): this process's user namespace does not map \(id) (/proc/self/\(map): \(shown)); a root host in a container must give its services ids it maps (Launcher.Configuration.serviceUsers)")
            }
        }
        return identity
    }

    /// FNV-1a, 64 bits: the same on every run and machine (Swift's `Hasher` is seeded per process).
    static func hash(_ text: String) -> UInt64 {
        var value: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            value ^= UInt64(byte)
            value = value &* 0x0000_0100_0000_01b3
        }
        return value
    }
}
