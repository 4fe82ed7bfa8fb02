// The pixel path in one process: a service-side buffer drawn with Cairo, shared as its memfd,
// checked and composited by the host's side. Exact pixels for solid fills.
@testable import RemoteHost
@testable import RemoteService
import RemoteTestSupport
import Testing

@Suite("Pixel path")
struct PixelPathTests {
    /// Opaque colours as premultiplied ARGB32 words.
    static let blueWord: UInt32 = 0xFF00_00FF, redWord: UInt32 = 0xFFFF_0000
    static let blue = Color(red: 0, green: 0, blue: 1), red = Color(red: 1, green: 0, blue: 0)

    @Test("what the service draws with Cairo is what the host's image shows, pixel for pixel")
    func solidFills() async throws {
        try await withoutLeaks {
            let buffer = try SurfaceBuffer(id: 1, width: 64, height: 48)
            buffer.draw { context in
                context.fill(PixelRect(x: 0, y: 0, width: 64, height: 48), with: Self.blue)
                context.fill(PixelRect(x: 10, y: 20, width: 5, height: 7), with: Self.red)
            }
            let compositor = SurfaceCompositor()
            try compositor.receive(.attachBuffer(buffer.layout), attachments: [try buffer.attachment()])
            try compositor.receive(.commit(bufferID: 1, damage: [], frame: 1), attachments: [])
            let image = compositor.image
            #expect(image.width == 64 && image.height == 48)
            for (x, y) in [(0, 0), (63, 47), (9, 20), (15, 26), (10, 27)] { #expect(image.pixel(x: x, y: y) == Self.blueWord, "(\(x), \(y))") }
            for (x, y) in [(10, 20), (14, 26), (12, 23)] { #expect(image.pixel(x: x, y: y) == Self.redWord, "(\(x), \(y))") }
        }
    }

    @Test("a buffer pool: a gone buffer's memory makes the next buffer of its size (the same memfd, zeroed), not one of another size; at most maxBuffers and maxBytes are kept, the oldest let go (its memfd closed)")
    func bufferPool() async throws {
        try await withoutLeaks {
            func inode(_ buffer: SurfaceBuffer) throws -> UInt {
                guard let fd = try buffer.attachment().take() else { return 0 }
                return UInt(try Syscall.status(ofPath: "/proc/self/fd/\(fd.rawValue)").st_ino)
            }
            // 16 × 16 × 4 = 1 KiB a buffer.
            let pool = SurfaceBufferPool(maxBuffers: 2, maxBytes: 3 << 10)
            var first: SurfaceBuffer? = try SurfaceBuffer(id: 1, width: 16, height: 16, pool: pool)
            first?.draw { $0.fill(PixelRect(x: 0, y: 0, width: 16, height: 16), with: Self.red) }
            let firstInode = try inode(try #require(first))
            first = nil
            #expect(pool.contents == (1, 1 << 10))
            let other = try SurfaceBuffer(id: 2, width: 8, height: 8, pool: pool)
            #expect(try inode(other) != firstInode && pool.contents.buffers == 1, "another size makes new memory")
            let second = try SurfaceBuffer(id: 3, width: 16, height: 16, pool: pool)
            #expect(try inode(second) == firstInode && pool.contents == (0, 0), "the kept memory is used again")
            #expect(second.pixel(x: 3, y: 3) == 0, "and zeroed: nothing of the last view shows")
            // Three 1 KiB buffers and one of 256 bytes go back: two are kept, the newest.
            var many: [SurfaceBuffer] = try (4...6).map { try SurfaceBuffer(id: UInt32($0), width: 16, height: 16, pool: pool) }
            many.removeAll()
            #expect(pool.contents == (2, 2 << 10))
            _ = consume other
            #expect(pool.contents == (2, (1 << 10) + 256), "the oldest was let go")
            _ = consume second
        }
    }

    @Test("a half-transparent colour is stored premultiplied")
    func premultiplied() async throws {
        try await withoutLeaks {
            let buffer = try SurfaceBuffer(id: 1, width: 4, height: 4)
            buffer.draw { $0.fill(PixelRect(x: 0, y: 0, width: 4, height: 4), with: Color(red: 1, green: 0, blue: 0, alpha: 0.5)) }
            let word = buffer.pixel(x: 1, y: 1)
            #expect(word >> 24 == 0x80 && (word >> 16) & 0xFF == 0x80 && word & 0xFFFF == 0, "\(String(word, radix: 16))")
        }
    }

    @Test("drawing clipped to the damage leaves the rest of the buffer alone")
    func clippedDrawing() async throws {
        try await withoutLeaks {
            let buffer = try SurfaceBuffer(id: 1, width: 16, height: 16)
            buffer.draw { $0.fill(PixelRect(x: 0, y: 0, width: 16, height: 16), with: Self.blue) }
            buffer.draw(clippedTo: [PixelRect(x: 4, y: 4, width: 2, height: 2)]) { $0.fill(PixelRect(x: 0, y: 0, width: 16, height: 16), with: Self.red) }
            #expect(buffer.pixel(x: 4, y: 4) == Self.redWord && buffer.pixel(x: 5, y: 5) == Self.redWord)
            #expect(buffer.pixel(x: 3, y: 4) == Self.blueWord && buffer.pixel(x: 6, y: 6) == Self.blueWord)
        }
    }
}
