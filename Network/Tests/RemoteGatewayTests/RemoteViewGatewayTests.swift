import FoundationEssentials
import Glibc
import GRPCCore
import GRPCNIOTransportHTTP2
import Logging
@testable import RemoteGateway
@_spi(RemoteViewTransport) import RemoteHost
import Synchronization
import Testing

/// A remote view through the gateway over real TLS on the loopback: the gateway shows the
/// fixture's toolkit screen itself and streams its frames (diffed, compressed) on `View`; the
/// host composites them and sends input on `Input`. What the host shows equals what a local
/// view of the same service shows.
@Suite("Gateway: remote views", .serialized)
struct RemoteViewGatewayTests {
    static func center(of name: String, in connection: ServiceConnection) async throws -> (Double, Double) {
        let layout = try await connection.request(ServiceMessage(type: "layout")).text ?? ""
        let line = try #require(layout.split(separator: "\n").first { $0.hasPrefix(name + " ") }, "\(layout)")
        let numbers = line.split(separator: " ").dropFirst().compactMap { Double($0) }
        return (numbers[0] + numbers[2] / 2, numbers[1] + numbers[3] / 2)
    }

    @Test("the far screen, typed into, resized: the host's image equals a local view's of the same service at each step; bytes on the wire per typed character stay small")
    func typingEqualsLocal() async throws {
        try await ConnectTests.withConnectGateway { client, farm, _ in
            try await ConnectTests.withHostLauncher(client) { host in
                let remote = RemoteView(connection: host.connection(to: "com.example.ui@farm"))
                let local = RemoteView(connection: farm.connection(to: "com.example.ui"))
                for view in [remote, local] {
                    try await view.present(width: 320, height: 260)
                    try await view.settle()
                }
                #expect(remote.image.width == 320 && remote.image.height == 260)
                #expect(remote.image == local.image, "the first frame")

                let (x, y) = try await Self.center(of: "field", in: local.connection)
                for view in [remote, local] {
                    try await view.click(x: x, y: y)
                    try await view.send(.focus(true))
                    try await view.settle()
                }
                #expect(remote.image == local.image, "the focused field")

                let connector = try #require(host.configuration.remoteServices as? GatewayConnector)
                let before = try #require(connector.wireBytes(on: "farm"))
                let typed = "hello, far"
                for character in typed {
                    try await remote.type(String(character))
                    try await remote.settle()
                }
                let after = try #require(connector.wireBytes(on: "farm"))
                for character in typed { try await local.type(String(character)) }
                try await local.settle()
                #expect(remote.image == local.image, "the typed text")
                let perCharacter = (after.total - before.total) / typed.count
                // A character's frame (the field's text and caret), its presented, the input, its
                // settle and the semantic tree's update.
                #expect(perCharacter <= 2048, "\(perCharacter) bytes per character: \(before) → \(after)")

                try await remote.present(width: 280, height: 300, scalePermille: 1_250)
                try await local.present(width: 280, height: 300, scalePermille: 1_250)
                try await remote.settle()
                try await local.settle()
                #expect(remote.image.width == 350 && remote.image.height == 375)
                #expect(remote.image == local.image, "resized")
                await remote.connection.invalidate()
                await local.connection.invalidate()
            }
        }
    }

    @Test("kill -9 of the far screen: the host's view keeps its last frame, and the connection says how the process ended")
    func killKeepsLastFrame() async throws {
        try await ConnectTests.withConnectGateway { client, farm, _ in
            try await ConnectTests.withHostLauncher(client) { host in
                let connection = host.connection(to: "com.example.ui@farm")
                let remote = RemoteView(connection: connection)
                try await remote.present(width: 200, height: 160)
                try await remote.settle()
                let last = remote.image
                #expect(last.width == 200)
                let process = try #require(await farm.status().first { $0.identifier == "com.example.ui" }?.processes.first)
                var events = connection.events.makeAsyncIterator()
                kill(process.servicePid ?? process.pid, SIGKILL)
                guard case .interrupted(let error)? = await events.next() else {
                    Issue.record("no interrupted event")
                    return
                }
                #expect(error.reason.contains("killed by SIGKILL"), "\(error)")
                #expect(remote.image == last, "the last frame is kept")
                await connection.invalidate()
            }
        }
    }

    @Test("a host of framing version 1 (before views had streams of their own) still gets its view's buffer as it is: its first frame shows")
    func framingVersionOne() async throws {
        try await ConnectTests.withConnectGateway { client, _, _ in
            var old = client
            old.framingVersion = 1
            try await ConnectTests.withHostLauncher(old) { host in
                let connection = host.connection(to: "com.example.ui@farm")
                let remote = RemoteView(connection: connection)
                try await remote.present(width: 120, height: 90)
                let damage = try await firstTermination(within: .seconds(15)) { () -> Bool? in
                    var frames = remote.damage.makeAsyncIterator()
                    return await frames.next() != nil
                }
                #expect(damage)
                #expect(remote.image.width == 120 && remote.image.height == 90, "the first frame, its buffer copied across")
                await connection.invalidate()
            }
        }
    }

    /// A gateway whose `View` stream lies once: everything is the real gateway's, but once the
    /// first real frame has gone out, `frames` (made for its size in pixels) follow it.
    struct LyingView: RegistrableRPCService {
        let real: GatewayService
        let frames: @Sendable (_ width: Int, _ height: Int) -> [[UInt8]]
        /// Whether it lied (once: a reconnected view is told the truth).
        let lied = Shared(false)

        /// Writes what the real gateway writes; after the first whole frame, the lies.
        struct LyingWriter: RPCWriterProtocol {
            let writer: RPCWriter<[UInt8]>
            let frames: @Sendable (Int, Int) -> [[UInt8]]
            let lied: Shared<Bool>
            let state = Shared<(Int, Int)?>(nil)

            func write(_ element: [UInt8]) async throws {
                try await writer.write(element)
                // The first frame message's header names the view's size.
                if element.first == 1, element.count >= 18, state.value.withLock({ $0 }) == nil {
                    let number = { (offset: Int) in element[offset..<offset + 4].reversed().reduce(0) { $0 << 8 | Int($1) } }
                    state.value.withLock { $0 = (number(10), number(14)) }
                }
                guard let size = state.value.withLock({ $0 }), element.count >= 2, element[1] == 1,
                      !lied.value.withLock({ lied in defer { lied = true }; return lied }) else { return }
                let lies = frames(size.0, size.1)
                for lie in lies { try await writer.write(lie) }
            }

            func write(contentsOf elements: some Sequence<[UInt8]>) async throws {
                for element in elements { try await write(element) }
            }
        }

        func registerMethods<Transport: ServerTransport>(with router: inout RPCRouter<Transport>) {
            real.registerMethods(with: &router)
            let (frames, sessions, logger, lied) = (frames, real.sessions, real.logger, lied)
            router.registerHandler(forMethod: GatewayMethods.view, deserializer: RawBytes(), serializer: RawBytes()) { request, context in
                let client = try GatewayService.identify(context, logger: logger)
                return StreamingServerResponse { writer in
                    try await GatewayService.serveView(request.messages, RPCWriter(wrapping: LyingWriter(writer: writer, frames: frames, lied: lied)),
                                                       client: client, sessions: sessions, logger: logger)
                    return [:]
                }
            }
        }
    }

    @Test("a gateway whose frames lie about their damage, their decompressed size or the view's size, after a true frame: the host's view refuses the frame before writing, ends the channel naming the rule, keeps the true frame, and the host goes on", arguments: [
        ("a run outside the damage", "view.frame.outside-damage"),
        ("a decoded size over what the damage can need", "view.frame.decoded-size"),
        ("lz4 that decompresses to another size", "view.frame.decoded-size"),
        ("a size the host never gave", "at 64×64 pixels, but the view is 200×160"),
    ])
    func lyingFrames(_ lie: String, _ rule: String) async throws {
        let frames: @Sendable (Int, Int) -> [[UInt8]] = { width, height in
            let damage = [PixelRect(x: 0, y: 0, width: 16, height: 16)]
            var header = ViewFrame.Header(frame: 1 << 40, width: width, height: height, codec: .raw, decodedBytes: 0, payloadBytes: 0, damage: damage)
            var payload: [UInt8]
            switch lie {
            case "a run outside the damage":
                payload = [2]
                for value in [10, 0, 32] { payload.append(littleEndian: UInt16(value)) }
                payload += Array(repeating: 0xFF, count: 32 * 4)
            case "a decoded size over what the damage can need":
                (header.codec, header.decodedBytes) = (.zstd, ViewFrame.maxDecodedBytes(damage: damage) + 1)
                payload = Array(repeating: 0, count: 64)
            case "lz4 that decompresses to another size":
                let big = ViewFrameEncoder.compress(Array(repeating: 2, count: 4096), with: .lz4)
                (header.codec, header.decodedBytes) = (.lz4, 512)
                payload = big
            default:
                (header.width, header.height) = (64, 64)
                payload = []
            }
            if header.codec == .raw { header.decodedBytes = payload.count }
            header.payloadBytes = payload.count
            // Encoded by hand: the decoder refuses some of these headers already.
            return [ViewFrame.frame(header, last: true, payload: payload).encoded()]
        }
        try await ConnectTests.withConnectGateway(lyingView: frames) { client, farm, _ in
            try await ConnectTests.withHostLauncher(client) { host in
                let connection = host.connection(to: "com.example.ui@farm")
                let remote = RemoteView(connection: connection)
                let events = connection.events
                try? await remote.present(width: 200, height: 160)
                let event = try await firstTermination(within: .seconds(15)) { () -> ServiceConnection.Event? in
                    var iterator = events.makeAsyncIterator()
                    return await iterator.next()
                }
                guard case .interrupted(let error) = event else {
                    Issue.record("expected interrupted, got \(String(describing: event))")
                    return
                }
                #expect(error.reason.contains(rule), "\(lie): \(error.reason)")
                // The first, true frame stays; nothing of the lie was written.
                let local = RemoteView(connection: farm.connection(to: "com.example.ui"))
                try await local.present(width: 200, height: 160)
                try await local.settle()
                #expect(remote.image == local.image, "the image is the true frame's")
                await local.connection.invalidate()
                // The host goes on: the next call reconnects.
                #expect(try await connection.request(ServiceMessage(type: "echo", text: "still here")).text == "still here")
                await connection.invalidate()
            }
        }
    }
}
