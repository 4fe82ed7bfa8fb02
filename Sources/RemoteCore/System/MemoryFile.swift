import CRemoteViewLinux
import Glibc

/// Anonymous shared memory (`memfd_create`) that can be sealed, the way large data and
/// pixels cross the process boundary instead of paths (Wayland's `wl_shm`, made safe by seals).
///
/// A receiver checks ``seals`` before trusting the size: a file sealed against shrinking can
/// never be truncated under a reader's mapping.
public struct MemoryFile: ~Copyable, Sendable {
    /// Seals, as `F_SEAL_*` bits.
    public struct Seals: OptionSet, Sendable, Hashable {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }
        /// `F_SEAL_SHRINK`: the size can no longer decrease.
        public static let shrink = Seals(rawValue: rv_f_seal_shrink)
        /// `F_SEAL_GROW`: the size can no longer increase.
        public static let grow = Seals(rawValue: rv_f_seal_grow)
        /// `F_SEAL_WRITE`: the contents can no longer change.
        public static let write = Seals(rawValue: rv_f_seal_write)
        /// `F_SEAL_SEAL`: no more seals can be added.
        public static let seal = Seals(rawValue: rv_f_seal_seal)
    }

    /// The memfd.
    public let fd: OwnedFD

    /// A new, empty, sealable memfd (`MFD_CLOEXEC | MFD_ALLOW_SEALING`). `name` shows in
    /// `/proc/PID/fd` as `memfd:NAME`.
    public init(name: String) throws(SystemCallError) {
        fd = OwnedFD(adopting: try Syscall.memoryFileCreate(name))
    }

    /// Wraps a descriptor received from a peer (not trusted: check ``seals`` and ``size``).
    public init(adopting fd: consuming OwnedFD) {
        self.fd = fd
    }

    /// A memfd holding `bytes`, sealed against any change (shrink, grow, write, further seals).
    public static func sealed(name: String, contents bytes: some Collection<UInt8>) throws(SystemCallError) -> MemoryFile {
        let file = try MemoryFile(name: name)
        let array = Array(bytes)
        try Syscall.truncate(file.fd.rawValue, array.count)
        try Syscall.writeAll(file.fd.rawValue, array, at: 0)
        try file.addSeals([.shrink, .grow, .write, .seal])
        return file
    }

    /// Gives up the memfd, e.g. to attach it to a message: `Attachment(file.takeDescriptor())`.
    public consuming func takeDescriptor() -> OwnedFD {
        fd
    }

    /// The file's size in bytes (`fstat`).
    public var size: Int {
        get throws(SystemCallError) { Int(try Syscall.status(fd.rawValue).st_size) }
    }

    /// Sets the size (`ftruncate`).
    public func resize(to size: Int) throws(SystemCallError) {
        try Syscall.truncate(fd.rawValue, size)
    }

    /// The seals in force; throws `EINVAL` when the descriptor is not a sealable memfd.
    public var seals: Seals {
        get throws(SystemCallError) { Seals(rawValue: try Syscall.seals(fd.rawValue)) }
    }

    /// Adds seals (`F_ADD_SEALS`).
    public func addSeals(_ seals: Seals) throws(SystemCallError) {
        try Syscall.addSeals(fd.rawValue, seals.rawValue)
    }

    /// Writes `bytes` at `offset`.
    public func write(_ bytes: some Collection<UInt8>, at offset: Int = 0) throws(SystemCallError) {
        try Syscall.writeAll(fd.rawValue, Array(bytes), at: offset)
    }

    /// Reads up to `count` bytes from `offset` (fewer at end of file).
    ///
    /// Never allocates more than the file holds past `offset`, but a received file's size is
    /// the sender's to choose (a sealed, sparse memfd can claim 64 GiB): to read a whole file
    /// from a peer, use ``contents(limit:)``, which states the most you take.
    public func read(count: Int, at offset: Int = 0) throws(SystemCallError) -> [UInt8] {
        let available = max(0, try size - offset)
        return try Syscall.readAll(fd.rawValue, count: min(max(0, count), available), at: offset)
    }

    /// The whole file, when it holds at most `limit` bytes.
    ///
    /// - Throws: `RemoteError` `invalidArgument` naming the size and the limit when the file is
    ///   larger (nothing is read then), or the system call that failed.
    public func contents(limit: Int) throws(RemoteError) -> [UInt8] {
        let bytes: Int
        do { bytes = try size } catch { throw RemoteError(.invalidArgument, "cannot read the memfd: \(error)") }
        guard bytes <= limit else {
            throw RemoteError(.invalidArgument, "the memfd holds \(bytes) bytes, more than the \(limit) this reader takes")
        }
        do { return try Syscall.readAll(fd.rawValue, count: bytes, at: 0) } catch {
            throw RemoteError(.invalidArgument, "cannot read the memfd: \(error)")
        }
    }
}

extension MemoryFile {
    /// Checks a memfd a peer sent for data that must not change under its reader: sealed
    /// against shrinking, growing and writing, and holding exactly `declared` bytes (`fstat`).
    ///
    /// - Throws: `RemoteError` `protocolViolation` starting with `what` (the item or message
    ///   it came with) and saying what was wrong.
    package func checkReceived(declaring declared: Int, as what: String) throws(RemoteError) {
        let seals: Seals, actual: Int
        do {
            seals = try self.seals
            actual = try size
        } catch {
            throw RemoteError(.protocolViolation, "\(what): its fd is not a sealed memfd (\(error))")
        }
        guard seals.isSuperset(of: [.shrink, .grow, .write]) else {
            throw RemoteError(.protocolViolation, "\(what): its memfd is not sealed against shrinking, growing and writing (seals \(seals.rawValue))")
        }
        guard actual == declared else {
            throw RemoteError(.protocolViolation, "\(what) declares \(declared) bytes but its memfd holds \(actual)")
        }
    }

    /// Maps the first `length` bytes shared (`mmap(MAP_SHARED)`), readable and, when
    /// `writable`, writable; the mapping lasts as long as the returned object. With `populate`
    /// (`MAP_POPULATE`), every page is allocated and mapped at once, in one call, instead of by
    /// a page fault at its first touch: for a file of this process's that it will fill
    /// anyway (a surface buffer; never a peer's file, whose size the peer chose).
    package func map(length: Int, writable: Bool, populate: Bool = false) throws(SystemCallError) -> MemoryMapping {
        MemoryMapping(base: try Syscall.mapShared(fd.rawValue, length: length, writable: writable, populate: populate), length: length)
    }
}

/// A shared mapping (`mmap`), undone (`munmap`) when the object goes away.
package final class MemoryMapping: @unchecked Sendable {
    // @unchecked: `base` and `length` never change; what is written through `base` is the
    // owner's to confine.

    /// The first byte.
    package let base: UnsafeMutableRawPointer
    /// The mapped length in bytes.
    package let length: Int

    fileprivate init(base: UnsafeMutableRawPointer, length: Int) {
        self.base = base
        self.length = length
    }

    deinit {
        Syscall.unmap(base, length: length)
    }
}
