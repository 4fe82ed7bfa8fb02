import Glibc

/// A buffer a peer attached, checked and mapped read-only: the host's view of a service's pixels.
///
/// The checks that make reading it safe come first, in this order: the descriptor is a memfd
/// (`F_GET_SEALS` works), it is sealed against shrinking and growing (so it can never be
/// truncated under the mapping: no `SIGBUS`), and `fstat` says it holds at least
/// stride × height bytes. Anything else is refused with the reason, as a protocol violation.
/// The mapping is undone when the object goes away.
public final class MappedBuffer: @unchecked Sendable {
    // @unchecked: `base` points at a read-only shared mapping that lives exactly as long as
    // this object; nothing is ever written through it.

    /// What the peer said about the buffer.
    public let layout: BufferDescription
    /// The first byte of the mapping (read-only).
    public let base: UnsafeRawPointer
    private let length: Int

    /// Checks and maps `fd` (borrowed: the mapping outlives it, the caller closes it).
    ///
    /// - Throws: ``RemoteError`` `protocolViolation` naming what was wrong with the buffer.
    public init(mapping fd: borrowing OwnedFD, as description: BufferDescription) throws(RemoteError) {
        if let problem = description.problem { throw RemoteError(.protocolViolation, problem) }
        let id = description.id
        let seals: Int32
        do { seals = try Syscall.seals(fd.rawValue) } catch {
            throw RemoteError(.protocolViolation, "buffer \(id) is not a sealable memfd (\(error))")
        }
        let required = MemoryFile.Seals([.shrink, .grow])
        guard MemoryFile.Seals(rawValue: seals).isSuperset(of: required) else {
            throw RemoteError(.protocolViolation, "buffer \(id) is not sealed against shrinking and growing (seals \(seals))")
        }
        let status: stat
        do { status = try Syscall.status(fd.rawValue) } catch {
            throw RemoteError(.protocolViolation, "buffer \(id) cannot be measured (\(error))")
        }
        let size = Int(status.st_size)
        guard size >= description.byteCount else {
            throw RemoteError(.protocolViolation, "buffer \(id) holds \(size) bytes, less than its stride × height (\(description.byteCount))")
        }
        // Whole blocks of the file (st_blksize): a hugetlb memfd (MFD_HUGETLB, sealable too) is
        // mapped in whole huge pages and munmap fails unless given whole ones, so mapping just
        // stride × height would trap the host when the buffer goes. A hugetlb file's size is whole
        // huge pages, so its mapping stays inside it; a regular memfd's blocks are pages (or 2 MiB
        // with shmem THP), and any tail past its end is never read: nothing past stride × height
        // is. Bounded: at most 256 MiB rounded up to at most 1 GiB (the largest huge page).
        let block = (1...(1 << 30)).contains(Int(status.st_blksize)) ? Int(status.st_blksize) : 1
        let length = (description.byteCount + block - 1) / block * block
        do {
            base = UnsafeRawPointer(try Syscall.mapShared(fd.rawValue, length: length, writable: false))
        } catch {
            throw RemoteError(.protocolViolation, "buffer \(id) cannot be mapped (\(error))")
        }
        self.length = length
        self.layout = description
    }

    deinit {
        Syscall.unmap(UnsafeMutableRawPointer(mutating: base), length: length)
    }

    /// The 32-bit pixel at (`x`, `y`), as stored (premultiplied ARGB in a native word).
    public func pixel(x: Int, y: Int) -> UInt32 {
        precondition(x >= 0 && x < layout.width && y >= 0 && y < layout.height, "pixel (\(x), \(y)) outside the buffer")
        return base.loadUnaligned(fromByteOffset: y * layout.stride + x * 4, as: UInt32.self)
    }
}
