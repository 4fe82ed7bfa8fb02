import Glibc
import RemoteHost
import RemoteTestSupport
import Testing

/// A service's view embedded in the host across processes, sandbox on: the pixels the service
/// drew with Cairo, the damage of each frame, and relaunch at the same size.
@Suite("Remote views across processes", .serialized)
struct RemoteViewTests {
    static let blue: UInt32 = 0xFF00_00FF, red: UInt32 = 0xFFFF_0000

    @Test("the host's image has the pixels the service drew; a change commits only its rect")
    func pixelsAndDamage() async throws {
        try await withServices(["view.json": ServiceFolder.manifest(mode: "view")]) { launcher, _ in
            let view = RemoteView(connection: launcher.connection(to: "com.example.test"))
            try await view.present(width: 64, height: 48)
            #expect(try await nextDamage(view) == [PixelRect(x: 0, y: 0, width: 64, height: 48)])
            var image = view.image
            #expect(image.width == 64 && image.height == 48)
            for (x, y) in [(0, 0), (63, 47), (32, 24)] { #expect(image.pixel(x: x, y: y) == Self.blue) }

            _ = try await view.connection.request(ServiceMessage(type: "paint", text: "ff0000 10 20 5 7"))
            #expect(try await nextDamage(view) == [PixelRect(x: 10, y: 20, width: 5, height: 7)], "only the changed rect is committed")
            image = view.image
            for (x, y) in [(10, 20), (14, 26)] { #expect(image.pixel(x: x, y: y) == Self.red, "(\(x), \(y))") }
            for (x, y) in [(9, 20), (15, 26), (10, 27), (0, 0)] { #expect(image.pixel(x: x, y: y) == Self.blue, "(\(x), \(y))") }
            #expect(image.rgba[((20 * 64) + 10) * 4 ..< ((20 * 64) + 10) * 4 + 4] == [255, 0, 0, 255])
            // Read in place, the same pixels.
            #expect(view.withImage { $0.pixel(x: 10, y: 20) == Self.red && $0.pixel(x: 0, y: 0) == Self.blue && $0.width == 64 })

            // A PNG snapshot reads back as the same pixels; a bad path is an error that names it.
            let folder = try TemporaryFolder("remoteview-snapshot")
            defer { folder.remove() }
            try image.writePNG(to: folder.path + "/frame.png")
            #expect(try RemoteImage(contentsOfPNG: folder.path + "/frame.png") == image)
            let error = #expect(throws: RemoteError.self) { try image.writePNG(to: "/nonexistent/frame.png") }
            #expect(error?.reason.contains("/nonexistent/frame.png") == true)
        }
    }

    @Test("a view made for a connection whose service already runs shows it (it hears about the open channel)")
    func viewOnRunningConnection() async throws {
        try await withServices(["view.json": ServiceFolder.manifest(mode: "view")]) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            #expect(try await connection.request(ServiceMessage(type: "echo", text: "first")).text == "first")
            let pid = connection.processIdentifier
            let view = RemoteView(connection: connection)
            try await view.present(width: 24, height: 16)
            #expect(try await nextDamage(view) == [PixelRect(x: 0, y: 0, width: 24, height: 16)])
            #expect(view.image.pixel(x: 12, y: 8) == Self.blue)
            #expect(connection.processIdentifier == pid, "the same process, not a relaunch")
            #expect(await launcher.status().first?.launches == 1)
        }
    }

    @Test("a view released while its service still draws for it ends nothing: the service and the connection live on")
    func releasedViewIsNoViolation() async throws {
        // Found by remoteview-stress killstorm: a client let go of its view, then invalidated its
        // connection; a commit in between was taken for a protocol violation, and the process
        // (shared: every client's) was ended.
        try await withServices(["view.json": ServiceFolder.manifest(mode: "view")]) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            var view: RemoteView? = RemoteView(connection: connection)
            try await view?.present(width: 32, height: 24)
            _ = try await nextDamage(try #require(view))
            let pid = connection.processIdentifier
            view = nil
            // The service still shows the view on this connection and draws one more frame.
            #expect(try await connection.request(ServiceMessage(type: "paint", text: "ff0000 0 0 4 4")).type == "painted")
            // settle is answered after that commit, on the same socket: the host has read it.
            _ = try await connection.request(ServiceMessage(type: FrameworkMessage.settle))
            #expect(try await connection.request(ServiceMessage(type: "echo", text: "still")).text == "still")
            #expect(connection.processIdentifier == pid, "the same process")
            let status = try #require(await launcher.status().first)
            #expect(status.launches == 1 && status.crashes == 0, "\(String(describing: status.lastTermination))")
        }
    }

    @Test("a relaunched service draws again at the size the view was given")
    func relaunchKeepsSize() async throws {
        try await withServices(["view.json": ServiceFolder.manifest(mode: "view")]) { launcher, _ in
            let view = RemoteView(connection: launcher.connection(to: "com.example.test"))
            try await view.present(width: 30, height: 20)
            _ = try await nextDamage(view)
            let servicePid = try #require(await launcher.status().first?.processes.first?.servicePid)
            kill(servicePid, SIGKILL)
            // The next message relaunches it; the new process gets the size and draws a whole frame.
            var relaunched = false
            for _ in 0..<3 where !relaunched {
                do {
                    _ = try await view.connection.request(ServiceMessage(type: "paint", text: "ff0000 0 0 2 2"))
                    relaunched = true
                } catch let error as RemoteError {
                    #expect(error.code == .interrupted, "\(error)")
                }
            }
            #expect(relaunched)
            var damage = try await nextDamage(view)
            if damage != [PixelRect(x: 0, y: 0, width: 30, height: 20)] { damage = try await nextDamage(view) }
            #expect(await launcher.status().first?.launches == 2)
            #expect(view.image.width == 30 && view.image.height == 20)
        }
    }

    @Test("a view at scale 2 gets buffers of twice the size in pixels")
    func scaled() async throws {
        try await withServices(["view.json": ServiceFolder.manifest(mode: "view")]) { launcher, _ in
            let view = RemoteView(connection: launcher.connection(to: "com.example.test"))
            try await view.present(width: 20, height: 10, scalePermille: 2_000)
            #expect(try await nextDamage(view) == [PixelRect(x: 0, y: 0, width: 40, height: 20)])
            #expect(view.image.width == 40 && view.image.height == 20)
        }
    }
}
