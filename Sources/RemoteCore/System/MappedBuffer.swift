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
        let size: Int
        do { size = Int(try Syscall.status(fd.rawValue).st_size) } catch {
            throw RemoteError(.protocolViolation, "buffer \(id) cannot be measured (\(error))")
        }
        guard size >= description.byteCount else {
            throw RemoteError(.protocolViolation, "buffer \(id) holds \(size) bytes, less than its stride × height (\(description.byteCount))")
        }
        do {
            base = UnsafeRawPointer(try Syscall.mapShared(fd.rawValue, length: description.byteCount, writable: false))
        } catch {
            throw RemoteError(.protocolViolation, "buffer \(id) cannot be mapped (\(error))")
        }
        length = description.byteCount
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
