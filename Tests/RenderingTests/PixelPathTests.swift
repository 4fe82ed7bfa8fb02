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
