import Glibc
import RemoteHost
import RemoteTestSupport
import Testing

/// A service of protocol version 1, frozen (`Tests/FrozenPeers/v1`, issue 26): written in C from
/// `docs/Protocol.md` as it stood before commit 6835398 and never changed since, launched
/// sandboxed by today's host. Each behaviour that text promised a service author is checked
/// here; a host change that fails one breaks the services written for version 1, and needs a new
/// protocol version instead.
@Suite("A frozen service of protocol version 1 against today's host", .serialized)
struct FrozenPeerTests {
    static let folder = UppercaseShareTests.repository + "/Tests/FrozenPeers/v1"
    static let executable = folder + "/frozen-v1-service"
    static let identifier = "com.example.frozen-v1"

    /// Runs `body` with a launcher (sandboxed, the default) over the frozen peer's own manifest
    /// folder, checking that nothing leaks.
    static func withFrozenPeer(_ body: @escaping @Sendable (Launcher) async throws -> Void) async throws {
        try #require(Syscall.isRegularFile(executable), "build the frozen peer first: make -C Tests/FrozenPeers/v1 (make test does)")
        let registry = ServiceRegistry(scanning: [folder])
        #expect(registry.problems.isEmpty, "\(registry.problems)")
        try await withoutLeaks(within: .seconds(20)) {
            try await withLauncher(registry: registry, configuration: fastLauncherConfiguration()) { launcher in
                try await body(launcher)
            }
        }
    }

    /// The peer's pixel at (`x`, `y`) of a `width` × `height` frame, as its `pixel_at` draws it:
    /// a 1-pixel white border; inside, quadrants split at (width / 2, height / 2): red, green,
    /// blue, and a translucent premultiplied 0x80402010.
    static func expectedPixel(x: Int, y: Int, width: Int, height: Int) -> UInt32 {
        if x == 0 || y == 0 || x == width - 1 || y == height - 1 { return 0xFFFF_FFFF }
        if y < height / 2 { return x < width / 2 ? 0xFFFF_0000 : 0xFF00_FF00 }
        return x < width / 2 ? 0xFF00_00FF : 0x8040_2010
    }

    @Test("echo: type and payload come back byte for byte, over two clients of one sandboxed process")
    func echo() async throws {
        try await Self.withFrozenPeer { launcher in
            let first = launcher.connection(to: Self.identifier)
            let second = launcher.connection(to: Self.identifier)
            let bytes = (0..<60_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 8) }
            async let one = first.request(ServiceMessage(type: "echo", payload: bytes))
            async let two = second.request(ServiceMessage(type: "echo", text: "two"))
            let (reply, other) = try await (one, two)
            #expect(reply.type == "echo" && reply.payload == bytes)
            #expect(other.type == "echo" && other.text == "two")
            #expect(try await first.request(ServiceMessage(type: "echo")).payload.isEmpty, "an empty payload")
            #expect(first.processIdentifier != nil && first.processIdentifier == second.processIdentifier, "one shared process serves both")
            let status = try #require(await launcher.status().first)
            #expect(status.launches == 1 && status.crashes == 0, "\(String(describing: status.lastTermination))")
            #expect(status.processes.first?.sandboxed == true)
            if getuid() == 0 { #expect(status.processes.first?.userID.map { $0 != 0 } == true, "a root host runs it as a uid of its own") }
        }
    }

    @Test("an unknown request is answered in the peer's own domain, as version 1 allowed")
    func unknownRequest() async throws {
        try await Self.withFrozenPeer { launcher in
            let connection = launcher.connection(to: Self.identifier)
            let error = try #require(await requestError(connection, ServiceMessage(type: "frobnicate", text: "x")))
            #expect(error.code == .remoteError, "\(error)")
            #expect(error.remote == ServiceFailure(domain: "frozen-v1", code: 404, message: "no request of type \"frobnicate\""), "\(error)")
            #expect(error.remote?.isUnknownRequest == false)
            // The connection and the process live on.
            #expect(try await connection.request(ServiceMessage(type: "echo", text: "after")).text == "after")
            #expect(await launcher.status().first?.launches == 1)
        }
    }

    @Test("a view at 1, 1.5 and 2 times shows exactly the pixels the peer drew", arguments: [RemoteView.Presentation.immediate, .manual])
    func view(_ presentation: RemoteView.Presentation) async throws {
        try await Self.withFrozenPeer { launcher in
            let view = RemoteView(connection: launcher.connection(to: Self.identifier), presentation: presentation)
            // 66 × 50 points: odd and even pixel sizes, each exact at these scales.
            for (scale, width, height) in [(1_000, 66, 50), (1_500, 99, 75), (2_000, 132, 100)] {
                try await view.present(width: 66, height: 50, scalePermille: scale)
                #expect(try await nextDamage(view) == [PixelRect(x: 0, y: 0, width: width, height: height)], "scale \(scale)")
                let wrong = view.withImage { image -> [String] in
                    guard image.width == width, image.height == height else { return ["the image is \(image.width)×\(image.height)"] }
                    var wrong: [String] = []
                    for y in 0..<height {
                        for x in 0..<width where image.pixel(x: x, y: y) != Self.expectedPixel(x: x, y: y, width: width, height: height) {
                            wrong.append("(\(x), \(y)): \(String(image.pixel(x: x, y: y), radix: 16))")
                        }
                    }
                    return wrong
                }
                let differing = wrong.count
                #expect(differing == 0, "scale \(scale), \(width)×\(height): pixels differ, e.g. \(wrong.prefix(4))")
                if presentation == .manual { try await view.framePresented() }
            }
            // Settling, as version 1 defined it: answered once nothing is left to commit.
            try await view.settle()
            #expect(view.image.width == 132)
            let status = try #require(await launcher.status().first)
            #expect(status.launches == 1 && status.crashes == 0, "\(String(describing: status.lastTermination))")
        }
    }

    @Test("idle exit: the peer says goodbye and exits by itself; the next request relaunches it")
    func idleExit() async throws {
        try #require(Syscall.isRegularFile(Self.executable), "build the frozen peer first: make -C Tests/FrozenPeers/v1 (make test does)")
        // The peer's manifest with a short idle timeout, in a folder of the test's own.
        let manifest = """
            {"identifier": "\(Self.identifier)", "executable": "\(Self.executable)",
             "display": {"title": "Frozen peer (protocol 1)"}, "idleTimeout": 0.3}
            """
        try await withServices(["frozen-v1.json": manifest]) { launcher, _ in
            let events = launcher.events()
            let connection = launcher.connection(to: Self.identifier)
            #expect(try await connection.request(ServiceMessage(type: "echo", text: "one")).text == "one")
            let first = try #require(connection.processIdentifier)
            let reason = try await termination(of: first, in: events)
            #expect(reason.kind == .idleExit, "\(reason)")
            #expect(reason.detail.contains("exited by itself"), "\(reason)")
            #expect(!childProcesses().contains(first), "the idle process is reaped")

            #expect(try await connection.request(ServiceMessage(type: "echo", text: "two")).text == "two")
            let second = try #require(connection.processIdentifier)
            #expect(second != first)
            let status = try #require(await launcher.status().first)
            #expect(status.launches == 2 && status.crashes == 0, "\(String(describing: status.lastTermination))")
        }
    }
}
