// The host's side of a shared buffer: what it refuses to map, and why a sealed buffer cannot
// hurt it afterwards.
@testable import RemoteCore
import Glibc
import RemoteTestSupport
import Testing

@Suite("Mapped buffers")
struct MappedBufferTests {
    static let layout = BufferDescription(id: 3, width: 4, height: 2, stride: 16)

    /// A memfd of `size` bytes, with `seals`, whose pixel (1, 1) is 0xFF00FF00.
    static func memfd(size: Int = 32, seals: MemoryFile.Seals = [.shrink, .grow]) throws -> MemoryFile {
        let file = try MemoryFile(name: "buffer")
        try file.resize(to: size)
        if size >= 24 { try file.write(withUnsafeBytes(of: UInt32(0xFF00_FF00).littleEndian, Array.init), at: 16 + 4) }
        if !seals.isEmpty { try file.addSeals(seals) }
        return file
    }

    @Test("a sealed memfd of the declared size maps read-only and shows its pixels")
    func maps() async throws {
        try await withoutLeaks {
            let file = try Self.memfd()
            let buffer = try MappedBuffer(mapping: file.fd, as: Self.layout)
            #expect(buffer.pixel(x: 1, y: 1) == 0xFF00_FF00)
            #expect(buffer.pixel(x: 0, y: 0) == 0)
        }
    }

    @Test("refused: unsealed, only half sealed, smaller than stride × height, not a memfd, an impossible layout")
    func refuses() async throws {
        try await withoutLeaks {
            func refusal(_ make: () throws -> MemoryFile, _ layout: BufferDescription = Self.layout) throws -> String? {
                let file = try make()
                do {
                    _ = try MappedBuffer(mapping: file.fd, as: layout)
                    return nil
                } catch {
                    #expect(error.code == .protocolViolation)
                    return error.reason
                }
            }
            #expect(try refusal { try Self.memfd(seals: []) }?.contains("not sealed against shrinking and growing") == true)
            #expect(try refusal { try Self.memfd(seals: [.grow]) }?.contains("not sealed") == true)
            #expect(try refusal { try Self.memfd(size: 31) }?.contains("holds 31 bytes, less than its stride × height (32)") == true)
            #expect(try refusal({ try Self.memfd() }, BufferDescription(id: 3, width: 4, height: 2, stride: 12))?.contains("stride 12") == true)
            let pipe = try Syscall.pipe()
            let error = #expect(throws: RemoteError.self) { try MappedBuffer(mapping: pipe.first, as: Self.layout) }
            #expect(error?.reason.contains("not a sealable memfd") == true, "\(String(describing: error))")
        }
    }

    @Test("once mapped, the service cannot shrink the buffer (no SIGBUS), only change its pixels")
    func sealedAgainstTruncation() async throws {
        try await withoutLeaks {
            let file = try Self.memfd()
            let buffer = try MappedBuffer(mapping: file.fd, as: Self.layout)
            // The service still holds the memfd: truncating it is refused by the seal.
            let error = #expect(throws: SystemCallError.self) { try file.resize(to: 0) }
            #expect(error?.errno == EPERM)
            // Every byte the host may read is still there; a pixel changed by the service shows.
            try file.write(withUnsafeBytes(of: UInt32(0x8000_0080).littleEndian, Array.init), at: 28)
            #expect(buffer.pixel(x: 3, y: 1) == 0x8000_0080)
            var sum: UInt64 = 0
            for y in 0..<2 { for x in 0..<4 { sum &+= UInt64(buffer.pixel(x: x, y: y)) } }
            #expect(sum == UInt64(0xFF00_FF00) + UInt64(0x8000_0080))
        }
    }

    @Test("a sealed hugetlb memfd is mapped, and unmapped, in whole huge pages: never a trap in the host")
    func hugePages() async throws {
        try await withoutLeaks {
            // MFD_HUGETLB (linux/memfd.h): a memfd on hugetlbfs, which can be sealed too. munmap of
            // a huge-page mapping fails (EINVAL) unless its length is whole huge pages.
            guard let fd = try? Syscall.memoryFileCreate("huge-buffer", flags: 0x0004) else { return }  // no hugetlbfs here: nothing to map
            let file = MemoryFile(adopting: OwnedFD(adopting: fd))
            let hugePage = Int(try Syscall.status(fd).st_blksize)
            try file.resize(to: hugePage)  // hugetlbfs files are whole huge pages
            try file.addSeals([.shrink, .grow])
            do throws(RemoteError) {
                // With huge pages reserved (/proc/sys/vm/nr_hugepages): mapped, read, and unmapped
                // when `buffer` goes.
                let buffer = try MappedBuffer(mapping: file.fd, as: Self.layout)
                #expect(buffer.pixel(x: 3, y: 1) == 0)
            } catch {
                // Without: refused, with the reason.
                #expect(error.code == .protocolViolation && error.reason.contains("cannot be mapped"), "\(error)")
            }
        }
    }
}

@Suite("Memory files from a peer")
struct PeerMemoryFileTests {
    @Test("a memfd sent opened the wrong way (write-only, read-only) is an error naming the call, not a crash")
    func openedTheWrongWay() async throws {
        try await withoutLeaks {
            let file = try MemoryFile(name: "item")
            try file.resize(to: 16)
            let writeOnly = MemoryFile(adopting: OwnedFD(adopting: open("/proc/self/fd/\(file.fd.rawValue)", O_WRONLY | O_CLOEXEC)))
            let readOnly = MemoryFile(adopting: OwnedFD(adopting: open("/proc/self/fd/\(file.fd.rawValue)", O_RDONLY | O_CLOEXEC)))
            let read = #expect(throws: SystemCallError.self) { try writeOnly.read(count: 16) }
            #expect(read?.call == "pread" && read?.errno == EBADF)
            let write = #expect(throws: SystemCallError.self) { try readOnly.write([1, 2, 3]) }
            #expect(write?.call == "pwrite" && write?.errno == EBADF)
            #expect(try readOnly.read(count: 16) == [UInt8](repeating: 0, count: 16))
        }
    }
}
