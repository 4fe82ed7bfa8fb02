import Glibc
@_spi(RemoteViewTransport) import RemoteCore
@_spi(RemoteViewTransport) import RemoteHost
import RemoteTestSupport
import Synchronization
import Testing

/// A relay with a view, without a network: a host's launcher reaches a service of another
/// launcher through an in-process connector, whose view streams copy each relayed frame's damage
/// as they are (the gateway's encoder is `Network/`'s). The relay composites the service's
/// frames, numbers the host's packets again around its own, holds a settle's answer behind the
/// frames before it, and the host's `RemoteView` shows what a local one shows.
@Suite("Relayed views", .serialized)
struct RelayedViewTests {
    /// Frames and input between a host's view and a relay with a view, in process: each frame's
    /// damage is copied as it is.
    final class LoopbackViewStream: RemoteViewStream, RelayedViewSink {
        let relay: ServiceRelay
        private let receiver = Synchronization.Mutex<RemoteFrameReceiver?>(nil)

        init(relay: ServiceRelay) { self.relay = relay }

        func start(_ receiver: RemoteFrameReceiver) {
            self.receiver.withLock { $0 = receiver }
            relay.attach(self)
        }

        func frame(_ frame: RelayedFrame) {
            // Taken first: the host's presented may follow at once, and must find it on its way.
            relay.frameTaken(frame.number)
            guard let receiver = receiver.withLock({ $0 }) else { return }
            do throws(RemoteError) {
                try receiver.receive(frame: frame.number, width: frame.width, height: frame.height, damage: frame.damage) { pixels in
                    frame.withPixels { source in
                        for rect in frame.damage {
                            for row in rect.y..<rect.y + rect.height {
                                let start = row * frame.width + rect.x
                                (pixels.baseAddress! + start).update(from: source.baseAddress! + start, count: rect.width)
                            }
                        }
                    }
                }
            } catch {
                receiver.end(error)
            }
        }

        func send(input packet: [UInt8]) async throws(RemoteError) {
            try await relay.send(input: packet)
        }

        func sync() async throws(RemoteError) {}  // input is written to the relay in order already

        func presented(frame: UInt64) {
            let relay = relay
            Task { try? await relay.presented(frame: frame) }
        }
    }

    /// A connector to the services of another launcher, `far`, through relays with views.
    final class LoopbackConnector: RemoteServiceConnector {
        let far: Launcher
        let gateways = ["far"]
        /// The far side's connections, invalidated at the end.
        let opened = Synchronization.Mutex<[ServiceConnection]>([])

        init(far: Launcher) { self.far = far }

        func services(on gateway: String) async throws(RemoteError) -> [ServiceManifest] { [] }

        func connect(to identifier: String, on gateway: String, configuration: Connection.Configuration,
                     onRequest: @escaping Connection.RequestHandler,
                     onMessage: @escaping Connection.MessageHandler) async throws(RemoteError) -> RemoteServiceChannel {
            let connection = far.connection(to: identifier)
            opened.withLock { $0.append(connection) }
            let link = RelayTests.Link()
            let relay = try await connection.openRelay(view: true, onPacket: { link.channel.receive($0) }, onEnd: { link.channel.receiveEnd($0) })
            link.relay.withLock { $0 = relay }
            let host = Connection(transport: link.channel, configuration: configuration, onRequest: onRequest, onMessage: onMessage)
            return RemoteServiceChannel(connection: host, view: LoopbackViewStream(relay: relay))
        }
    }

    /// A near launcher that reaches `far`'s services as `identifier@far`.
    static func withNear(_ far: Launcher, _ body: @escaping @Sendable (Launcher, LoopbackConnector) async throws -> Void) async throws {
        var configuration = fastLauncherConfiguration()
        let connector = LoopbackConnector(far: far)
        configuration.remoteServices = connector
        let folder = try ServiceFolder([:])
        defer { folder.remove() }
        try await withLauncher(registry: ServiceRegistry(scanning: [folder.path]), configuration: configuration) { near in
            try await body(near, connector)
        }
        for connection in connector.opened.withLock({ $0 }) { await connection.invalidate() }
    }

    static func center(_ rect: PixelRect) -> (Double, Double) {
        (Double(rect.x) + Double(rect.width) / 2, Double(rect.y) + Double(rect.height) / 2)
    }

    @Test("a relayed view shows what a local view of the same service shows, before and after typing into its text field; settle covers the input sent before it")
    func pixelsEqualLocal() async throws {
        try await withServices(["ui.json": ServiceFolder.manifest(mode: "ui")], within: .seconds(40)) { far, _ in
            try await Self.withNear(far) { near, _ in
                let remote = RemoteView(connection: near.connection(to: "com.example.test@far"))
                let local = RemoteView(connection: far.connection(to: "com.example.test"))
                for view in [remote, local] {
                    try await view.present(width: 320, height: 260)
                    try await view.settle()
                }
                #expect(remote.image.width == 320 && remote.image.height == 260)
                #expect(remote.image == local.image, "the first frame")

                let layoutText = try await local.connection.request(ServiceMessage(type: "layout")).text ?? ""
                let field = try #require(layoutText.split(separator: "\n").first { $0.hasPrefix("field ") })
                let numbers = field.split(separator: " ").dropFirst().compactMap { Double($0) }
                let (x, y) = (numbers[0] + numbers[2] / 2, numbers[1] + numbers[3] / 2)
                for view in [remote, local] {
                    try await view.click(x: x, y: y)
                    try await view.send(.focus(true))
                    try await view.type("hello")
                    try await view.press(keyCode: 42)  // backspace
                    try await view.type("p!")
                    try await view.settle()
                }
                let state = try await remote.connection.request(ServiceMessage(type: "state")).text ?? ""
                #expect(state.contains("field: hellp!"), "\(state)")
                #expect(remote.image == local.image, "the typed text, the caret and the focus ring")
                #expect(remote.image != RemoteImage(width: 320, height: 260) { _, _ in 0 })
                await local.connection.invalidate()
                await remote.connection.invalidate()
            }
        }
    }

    @Test("a relayed view resized draws at the new size; killed with SIGKILL, it keeps its last frame and the connection says how the process ended")
    func resizeAndKill() async throws {
        try await withServices(["ui.json": ServiceFolder.manifest(mode: "ui")], within: .seconds(40)) { far, _ in
            try await Self.withNear(far) { near, connector in
                let connection = near.connection(to: "com.example.test@far")
                let remote = RemoteView(connection: connection)
                try await remote.present(width: 200, height: 150)
                try await remote.settle()
                #expect(remote.image.width == 200 && remote.image.height == 150)
                try await remote.present(width: 300, height: 220, scalePermille: 1_500)
                try await remote.settle()
                #expect(remote.image.width == 450 && remote.image.height == 330)
                let last = remote.image

                let pid = try #require(connector.opened.withLock { $0.first }?.processIdentifier)
                let events = connection.events
                kill(pid, SIGKILL)
                let event = try await withDeadline(.seconds(10), "the interrupted event") { () async -> ServiceConnection.Event? in
                    var iterator = events.makeAsyncIterator()
                    return await iterator.next()
                }
                guard case .interrupted(let error)? = event else {
                    Issue.record("expected interrupted, got \(String(describing: event))")
                    return
                }
                #expect(error.code == .interrupted, "\(error)")
                #expect(remote.image == last, "the last frame is kept")
            }
        }
    }

    @Test("the relay's frames as a value: one frame in flight toward the service, two across the network, the service's frame_done owed until a slot frees, a settle's answer held behind the frames")
    func stateMachine() throws {
        var machine = RelayedViewStateMachine()
        let rect = [PixelRect(x: 0, y: 0, width: 4, height: 4)]
        typealias Action = RelayedViewStateMachine.Action
        // Each step: what the machine does, and what it was expected to.
        var steps: [(done: [Action], expected: [Action], what: String)] = []
        func step(_ done: [Action], _ expected: [Action], _ what: String) { steps.append((done, expected, what)) }
        step(machine.committed(frame: 1, damage: rect), [], "no sink yet: held")
        step(machine.attach(), [.take(frame: 1, damage: rect)], "a sink takes the held frame")
        step(machine.taken(frame: 1), [.release], "taken, one slot left: the service may draw")
        step(machine.committed(frame: 2, damage: rect), [.take(frame: 2, damage: rect)], "a slot is free: it goes")
        step(machine.taken(frame: 2), [], "taken into the last slot: the service's frame_done waits for a free one")
        let waits = machine.replyMustWait()
        #expect(waits, "a settle's answer waits for frame 2")
        #expect(machine.isHolding)
        step(try machine.presented(frame: 1), [.release], "a slot freed: the service draws now, with what came meanwhile")
        #expect(machine.isHolding, "the answer still waits for frame 2")
        step(machine.committed(frame: 3, damage: rect), [.take(frame: 3, damage: rect)], "it goes at once")
        step(machine.taken(frame: 3), [], "the last slot again")
        step(try machine.presented(frame: 3), [.forwardHeld, .release], "frames 2 and 3 presented: the answer goes, the service draws")
        let goesAtOnce = !machine.replyMustWait()
        #expect(goesAtOnce, "nothing on its way: an answer goes at once")
        var copy = machine
        #expect(throws: RemoteError.self) { try copy.presented(frame: 9) }
        step(machine.committed(frame: 4, damage: rect), [.take(frame: 4, damage: rect)], "the next frame goes")
        let waitsAgain = machine.replyMustWait()
        #expect(waitsAgain)
        step(machine.detach(), [.forwardHeld], "the stream ended: nothing waits for it")
        step(machine.taken(frame: 4), [.release], "a frame taken after the stream ended goes back to the service")
        for (done, expected, what) in steps { #expect(done == expected, "\(what)") }
    }

    @Test("a far host that sends frame_done on the connection, presents a frame that is not on its way, or sends input before its handshake or input that is none, is refused, naming the rule")
    func hostileHost() async throws {
        try await withServices(["ui.json": ServiceFolder.manifest(mode: "ui")], within: .seconds(40)) { far, _ in
            let connection = far.connection(to: "com.example.test")
            let link = RelayTests.Link()
            let ended = Latch<RemoteError?>()
            let relay = try await connection.openRelay(view: true, onPacket: { link.channel.receive($0) }, onEnd: { error in
                ended.open(error)
                link.channel.receiveEnd(error)
            })
            link.relay.withLock { $0 = relay }
            await #expect(throws: RemoteError.self) { try await relay.presented(frame: 1) }
            let early = await #expect(throws: RemoteError.self) { try await relay.send(input: InputEvent.text("x").relayPacket()) }
            #expect(early?.reason.contains("relay.order") == true, "input before the host's handshake: \(String(describing: early))")
            let notInput = await #expect(throws: RemoteError.self) { try await relay.send(input: [0x08, 0x01]) }
            #expect(notInput?.code == .protocolViolation, "\(String(describing: notInput))")
            let host = RelayTests.farHost(link)
            // The far host's connection ends with the relay, saying why.
            await #expect(throws: RemoteError.self) {
                try await host.withRunning { host in
                    _ = try await host.ping(timeout: .seconds(10))
                    try? await host.send(.frameDone(frame: 1))
                    _ = try await withDeadline(.seconds(10), "the relay ends") { try await ended.wait() }
                    _ = try await host.ping(timeout: .seconds(10))
                }
            }
            let error = try await withDeadline(.seconds(10), "the relay ends") { try await ended.wait() }
            #expect(error?.reason.contains("relay.frame-done") == true, "\(String(describing: error))")
            await connection.invalidate()
        }
    }
}
