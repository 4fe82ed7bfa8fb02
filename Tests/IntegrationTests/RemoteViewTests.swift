import Glibc
import RemoteHost
import RemoteTestSupport
import Testing

/// A service's view embedded in the host across processes, sandbox on: the pixels the service
/// drew with Cairo, the damage of each frame, and relaunch at the same size.
@Suite("Remote views across processes", .serialized)
struct RemoteViewTests {
    static let blue: UInt32 = 0xFF00_00FF, red: UInt32 = 0xFFFF_0000

    /// The next frame's damage, with a deadline.
    static func nextDamage(_ view: RemoteView) async throws -> [PixelRect] {
        try await withDeadline(.seconds(10), "a frame") {
            var iterator = view.damage.makeAsyncIterator()
            guard let damage = await iterator.next() else { throw CancellationError() }
            return damage
        }
    }

    @Test("the host's image has the pixels the service drew; a change commits only its rect")
    func pixelsAndDamage() async throws {
        try await LauncherTests().withServices(["view.json": ServiceFolder.manifest(mode: "view")]) { launcher, _ in
            let view = RemoteView(connection: launcher.connection(to: "com.example.test"))
            try await view.present(width: 64, height: 48)
            #expect(try await Self.nextDamage(view) == [PixelRect(x: 0, y: 0, width: 64, height: 48)])
            var image = view.image
            #expect(image.width == 64 && image.height == 48)
            for (x, y) in [(0, 0), (63, 47), (32, 24)] { #expect(image.pixel(x: x, y: y) == Self.blue) }

            _ = try await view.connection.request(ServiceMessage(type: "paint", text: "ff0000 10 20 5 7"))
            #expect(try await Self.nextDamage(view) == [PixelRect(x: 10, y: 20, width: 5, height: 7)], "only the changed rect is committed")
            image = view.image
            for (x, y) in [(10, 20), (14, 26)] { #expect(image.pixel(x: x, y: y) == Self.red, "(\(x), \(y))") }
            for (x, y) in [(9, 20), (15, 26), (10, 27), (0, 0)] { #expect(image.pixel(x: x, y: y) == Self.blue, "(\(x), \(y))") }
            #expect(image.rgba[((20 * 64) + 10) * 4 ..< ((20 * 64) + 10) * 4 + 4] == [255, 0, 0, 255])
        }
    }

    @Test("a view at scale 2 gets buffers of twice the size in pixels")
    func scaled() async throws {
        try await LauncherTests().withServices(["view.json": ServiceFolder.manifest(mode: "view")]) { launcher, _ in
            let view = RemoteView(connection: launcher.connection(to: "com.example.test"))
            try await view.present(width: 20, height: 10, scalePermille: 2_000)
            #expect(try await Self.nextDamage(view) == [PixelRect(x: 0, y: 0, width: 40, height: 20)])
            #expect(view.image.width == 40 && view.image.height == 20)
        }
    }
}
