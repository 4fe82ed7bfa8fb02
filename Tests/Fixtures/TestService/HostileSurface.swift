// Hostile surfaces for HostileSurfaceTests: modes ("surface-MODE") in which the service serves
// its clients itself, with RemoteCore's Connection (like "talk-back"), so that it can send the
// host surface messages that RemoteService's presenter never would. On the host's first resize
// each client runs the mode's script: what it breaks, or (truncate) what it tries.
import Glibc
import RawPacket
import RemoteService

enum HostileSurface {
    enum Mode: String {
        /// attach_buffer of a memfd that is not sealed.
        case unsealed
        /// attach_buffer of a sealed memfd holding half of stride × height.
        case short
        /// attach_buffer with a stride of 2 × width: a raw packet, since the codec refuses to encode it.
        case stride
        /// A good first frame, then a commit whose damage rect reaches past the right edge.
        case damage
        /// A good first frame; then, asked to settle, a commit whose damage reaches past the
        /// right edge, and the settled reply right behind it.
        case settleDamage
        /// commit of buffer 9, never attached (buffer 1 is).
        case unattached
        /// A first frame of half the size the host gave.
        case wrongSize
        /// A good first frame from a client connection that does not announce "surfaces".
        case unannounced
        /// The same, from connections that speak protocol version 1 only (a service written
        /// before version 2), and only when the host asks (a resize): lawful under version 1.
        case unannouncedVersion1
        /// A good view of protocol version 2 that answers an unknown request (a settle) in its
        /// own domain, which version 2 forbids.
        case ownDomain
        /// Commits buffer 1 twice in a row without waiting for its release or frame_done.
        case unreleased
        /// Commits `floodFrames` frames, alternating two buffers, never waiting for frame_done.
        case flood
        /// Tries to shrink and grow its sealed buffer after attaching it and after the host read
        /// it; draws a second frame when the "next" request says so, and replies with what it saw.
        case truncate
        /// A first frame, then a restorable_state without announcing "restorable-state".
        case stateUnannounced
        /// Announces "restorable-state"; a first frame, then a state of 2048 bytes inline (the
        /// test's manifest allows 1 KiB).
        case stateOverLimit
        /// Announces "restorable-state"; a first frame, then a state of 20,000 bytes in a memfd
        /// that is not sealed.
        case stateUnsealed
        /// A first frame, then a focus_leave without announcing "focus-leave".
        case focusUnannounced
        // Hostile semantic trees (HostileSurfaceTests' tree tests): each announces
        // "accessibility" (but treeUnannounced), draws a first frame, then sends its tree.
        /// A whole tree of 5104 nodes (a root, three groups of 1700 labels) in parts of 1000 that
        /// each say more: over 4096 across them, though no part is.
        case treeNodeCount
        /// A chain 70 nodes deep.
        case treeDepth
        /// A label of 2000 bytes: a raw packet, since the codec refuses to encode it.
        case treeTextLength
        /// A child 17 times the view's width to the right.
        case treeFrame
        /// A frame of NaN width: a raw packet.
        case treeFrameNaN
        /// A node that is the child of two parents.
        case treeStructure
        /// A first update that is not whole.
        case treeNotWhole
        /// A focus on a node that is not in the tree.
        case treeFocus
        /// A good tree, without announcing "accessibility".
        case treeUnannounced
        /// A good tree whose button reaches past the view's right edge (clipped, not a violation),
        /// then, on "next", its label changed alone.
        case treeClipped

        /// Whether the mode announces "accessibility".
        var announcesAccessibility: Bool { rawValue.hasPrefix("tree") && self != .treeUnannounced }
    }

    static let configuration = Connection.Configuration(role: .service, identifier: serviceIdentifier, capabilities: ["surfaces"])
    /// The frames of the flood.
    static let floodFrames: UInt64 = 1000
    /// What the hostile frames are filled with (premultiplied ARGB words): frame 1 and buffer 1
    /// green, later frames and buffer 2 magenta.
    static let first: UInt32 = 0xFF00_FF00, second: UInt32 = 0xFFFF_00FF

    static func run(_ name: String) async -> Never {
        guard let mode = Mode(rawValue: name) else {
            print("remoteview-test-service: unknown surface mode \(name)")
            exit(64)
        }
        let control: Connection
        do {
            switch try SocketActivation.takeSocket() {
            case .connected(let socket):
                var configuration = configuration
                if mode == .unannouncedVersion1 { configuration.protocolVersions = 1...1 }
                control = try Connection(socket: socket, configuration: configuration, onMessage: { message, _ in accept(message, mode) })
            case .listening:
                exit(70)
            }
        } catch {
            exit(70)
        }
        // fd 3 closes when the host ends this process (for breaking a rule) or is done with it.
        do { try await control.run() } catch {}
        exit(0)
    }

    /// Serves the client connection a `remoteview.connect` message brings.
    static func accept(_ message: ServiceMessage, _ mode: Mode) {
        guard message.type == FrameworkMessage.connect, message.attachments.count == 1,
              let socket = message.attachments[0].take() else { return }
        // A second descriptor of the socket, for the packet the codec will not encode.
        var raw: RawSocket?
        if mode == .stride || mode == .treeTextLength || mode == .treeFrameNaN, let copy = try? socket.duplicate() { raw = RawSocket(copy) }
        let client = Client(mode: mode, raw: raw)
        var configuration = configuration
        if mode == .unannounced || mode == .unannouncedVersion1 { configuration.capabilities = [] }
        if mode == .stateOverLimit || mode == .stateUnsealed { configuration.capabilities = ["surfaces", "restorable-state"] }
        if mode == .unannouncedVersion1 { configuration.protocolVersions = 1...1 }
        if mode.announcesAccessibility { configuration.capabilities = ["surfaces", "accessibility"] }
        guard let connection = try? Connection(socket: socket, configuration: configuration,
                                               onRequest: { request, _ in try await client.serve(request) }) else { return }
        connection.route(surface: { message, _, context in client.receive(message, on: context.connection) })
        Task { try? await connection.run() }
        // Draws at once, unasked, at 64×48: a host that was never told of a view gets frames.
        if mode == .unannounced { client.receive(.resize(SurfaceSize(width: 64, height: 48)), on: connection) }
    }

    /// A socket the fixture writes raw packets to.
    final class RawSocket: Sendable {
        let socket: OwnedFD
        init(_ socket: consuming OwnedFD) { self.socket = socket }
    }

    /// One client connection and its script.
    final class Client: Sendable {
        let mode: Mode
        let raw: RawSocket?
        /// The connection the script sends on (the one its first resize came on).
        private let connection = Mutex<Connection?>(nil)
        /// The script, started by the host's first resize.
        private let script = Mutex<Task<String, Never>?>(nil)
        /// release_buffer and frame_done from the host, in order (the script is the one reader).
        private let fromHost: AsyncStream<SurfaceMessage>
        private let fromHostSink: AsyncStream<SurfaceMessage>.Continuation
        /// The size of the first frame, once the host has taken it (settleDamage mode).
        private let firstFrame = Latch<(Int, Int)>()
        /// "next" requests (truncate mode).
        private let proceed: AsyncStream<Void>
        private let proceedSink: AsyncStream<Void>.Continuation

        init(mode: Mode, raw: RawSocket?) {
            self.mode = mode
            self.raw = raw
            (fromHost, fromHostSink) = AsyncStream.makeStream()
            (proceed, proceedSink) = AsyncStream.makeStream()
        }

        /// A surface message from the host: the first resize starts the script.
        func receive(_ message: SurfaceMessage, on connection: Connection) {
            guard case .resize(let size) = message else {
                fromHostSink.yield(message)
                return
            }
            script.withLock { script in
                guard script == nil else { return }
                self.connection.withLock { $0 = connection }
                let (width, height) = size.pixels
                script = Task { await self.run(width: width, height: height) }
            }
        }

        func serve(_ request: ServiceMessage) async throws -> ServiceMessage {
            switch request.type {
            case "echo":
                return ServiceMessage(type: "echo", payload: request.payload)
            case FrameworkMessage.settle where mode == .settleDamage:
                // Behind the first frame: a bad commit, then the reply the host must never take.
                guard let (width, _) = await firstFrame.waitUncancellably(until: .now.advanced(by: .seconds(10))) else {
                    throw ServiceFailure(domain: "test", code: 1, message: "no frame_done of the first frame")
                }
                try await commit(1, [PixelRect(x: width - 4, y: 0, width: 10, height: 10)], frame: 2)
                return ServiceMessage(type: FrameworkMessage.settled)
            case "next", "report":
                // What the script did, once it is done ("next" first lets truncate's second frame go).
                if request.type == "next" { proceedSink.yield() }
                let script = self.script.withLock { $0 }
                return ServiceMessage(type: "report", text: await script?.value ?? "no script: the host never sent a size")
            default:
                // remoteview.settle too, except in settleDamage mode: these services do not settle.
                // A version-1 service may say so in its own domain, as version 1 allowed.
                if mode == .unannouncedVersion1 || mode == .ownDomain { throw ServiceFailure(domain: "hostile", code: 404, message: "no \(request.type) here") }
                throw ServiceFailure.unknownRequest(request.type, handler: serviceIdentifier)
            }
        }

        // MARK: scripts

        /// The mode's script at `width` × `height` pixels; returns what it did, for "report".
        private func run(width: Int, height: Int) async -> String {
            do {
                return try await script(width: width, height: height)
            } catch {
                return "failed: \(error)"
            }
        }

        private func script(width: Int, height: Int) async throws -> String {
            let whole = PixelRect(x: 0, y: 0, width: width, height: height)
            switch mode {
            case .unsealed:
                try await attach(Buffer(id: 1, width: width, height: height, colour: first, seal: false))
                return "attached an unsealed buffer"
            case .short:
                let buffer = try Buffer(id: 1, width: width, height: height, colour: first, bytes: width * 4 * height / 2)
                try await attach(buffer)
                return "attached a buffer of \(try buffer.file.size) bytes"
            case .stride:
                // A buffer that really holds stride × height bytes: only the stride is wrong.
                let layout = BufferDescription(id: 1, width: width, height: height, stride: width * 2)
                let file = try MemoryFile(name: "hostile-stride")
                try file.resize(to: layout.byteCount)
                try file.addSeals([.shrink, .grow])
                guard let socket = raw?.socket.rawValue else { return "no socket to send on" }
                do {
                    try rawSend(socket, HostileSurface.attachBufferPacket(layout), fds: [file.fd.rawValue])
                } catch {
                    return "sendmsg failed: \(error)"
                }
                return "sent attach_buffer with stride \(layout.stride)"
            case .damage:
                let buffer = try Buffer(id: 1, width: width, height: height, colour: first)
                try await attach(buffer)
                try await commit(1, [], frame: 1)
                guard await frameDone(1) else { return "no frame_done for frame 1" }
                try buffer.fill(second)
                try await commit(1, [PixelRect(x: width - 4, y: 0, width: 10, height: 10)], frame: 2)
                return "committed damage past the right edge"
            case .settleDamage:
                let buffer = try Buffer(id: 1, width: width, height: height, colour: first)
                try await attach(buffer)
                try await commit(1, [], frame: 1)
                guard await frameDone(1) else { return "no frame_done for frame 1" }
                _ = firstFrame.open((width, height))
                return "drew the first frame"
            case .unannounced, .unannouncedVersion1, .ownDomain:
                try await attach(Buffer(id: 1, width: width, height: height, colour: first))
                try await commit(1, [], frame: 1)
                return "committed a first frame"
            case .focusUnannounced:
                try await attach(Buffer(id: 1, width: width, height: height, colour: first))
                try await commit(1, [], frame: 1)
                guard await frameDone(1) else { return "no frame_done for frame 1" }
                try await send(.focusLeave(.forward), [])
                return "sent focus_leave"
            case .treeNodeCount, .treeDepth, .treeTextLength, .treeFrame, .treeFrameNaN, .treeStructure, .treeNotWhole, .treeFocus,
                 .treeUnannounced, .treeClipped:
                try await attach(Buffer(id: 1, width: width, height: height, colour: first))
                try await commit(1, [], frame: 1)
                guard await frameDone(1) else { return "no frame_done for frame 1" }
                return try await sendTree(width: Double(width), height: Double(height))
            case .stateUnannounced, .stateOverLimit, .stateUnsealed:
                try await attach(Buffer(id: 1, width: width, height: height, colour: first))
                try await commit(1, [], frame: 1)
                guard await frameDone(1) else { return "no frame_done for frame 1" }
                switch mode {
                case .stateUnsealed:
                    let file = try MemoryFile(name: "hostile-state")
                    try file.write([UInt8](repeating: 7, count: 20_000))
                    try await send(.restorableState(.memfd(size: 20_000)), [Attachment(file.takeDescriptor())])
                case .stateOverLimit:
                    try await send(.restorableState(.inline([UInt8](repeating: 7, count: 2048))), [])
                default:
                    try await send(.restorableState(.inline([1, 2, 3])), [])
                }
                return "sent a restorable state"
            case .wrongSize:
                try await attach(Buffer(id: 1, width: width / 2, height: height / 2, colour: first))
                try await commit(1, [], frame: 1)
                return "committed a buffer of half the size"
            case .unattached:
                try await attach(Buffer(id: 1, width: width, height: height, colour: first))
                try await commit(9, [], frame: 1)
                return "committed buffer 9"
            case .unreleased:
                let buffer = try Buffer(id: 1, width: width, height: height, colour: first)
                try await attach(buffer)
                try await commit(1, [], frame: 1)
                try buffer.fill(second)
                try await commit(1, [whole], frame: 2)
                guard await frameDone(2) else { return "no frame_done for frame 2" }
                return "committed buffer 1 twice without waiting"
            case .flood:
                let buffers = [try Buffer(id: 1, width: width, height: height, colour: first),
                               try Buffer(id: 2, width: width, height: height, colour: second)]
                for buffer in buffers { try await attach(buffer) }
                for frame in 1...HostileSurface.floodFrames { try await commit(frame % 2 == 1 ? 1 : 2, [whole], frame: frame) }
                // The last frame_done says the host has read every commit.
                guard await frameDone(HostileSurface.floodFrames) else { return "no frame_done for frame \(HostileSurface.floodFrames)" }
                return "committed \(HostileSurface.floodFrames) frames without waiting"
            case .truncate:
                let buffer = try Buffer(id: 1, width: width, height: height, colour: first)
                try await attach(buffer)
                let afterAttach = buffer.tryResizing()
                try await commit(1, [], frame: 1)
                guard await frameDone(1) else { return "no frame_done for frame 1" }
                // The host has read frame 1 and still maps the buffer: try again, then draw frame 2
                // when the test says so (so that it can look at frame 1 first).
                var iterator = proceed.makeAsyncIterator()
                guard await iterator.next() != nil else { return "never told to go on" }
                let afterFrame = buffer.tryResizing()
                try buffer.fill(second)
                try await commit(1, [whole], frame: 2)
                guard await frameDone(2) else { return "no frame_done for frame 2" }
                return "after attach: \(afterAttach); after frame 1: \(afterFrame); size \(try buffer.file.size)"
            }
        }

        /// The mode's tree for a view of `width` × `height` points.
        private func sendTree(width: Double, height: Double) async throws -> String {
            typealias Node = AccessibilityNodeDescription
            let full = AccessibilityFrame(x: 0, y: 0, width: width, height: height)
            func update(_ nodes: [Node], focus: UInt32 = 0, whole: Bool = true, more: Bool = false) -> SurfaceMessage {
                .accessibilityUpdate(AccessibilityUpdateWire(nodes: nodes, root: whole ? 1 : 0, focus: focus, whole: whole, more: more))
            }
            switch mode {
            case .treeNodeCount:
                let groups: [UInt32] = [2, 3, 4]
                var nodes = [Node(id: 1, role: .group, frame: full, children: groups)]
                for (index, group) in groups.enumerated() {
                    let labels = (0..<1_700).map { UInt32(10 + index * 1_700 + $0) }
                    nodes.append(Node(id: group, role: .group, frame: full, children: labels))
                    nodes += labels.map { Node(id: $0, role: .label, frame: full) }
                }
                for chunk in stride(from: 0, to: nodes.count, by: 1_000) {
                    try await send(update(Array(nodes[chunk..<min(chunk + 1_000, nodes.count)]), more: chunk + 1_000 < nodes.count), [])
                }
                return "sent a tree of \(nodes.count) nodes"
            case .treeDepth:
                let nodes = (1...70).map { Node(id: UInt32($0), role: .group, frame: full, children: $0 < 70 ? [UInt32($0 + 1)] : []) }
                try await send(update(nodes), [])
                return "sent a chain 70 deep"
            case .treeTextLength, .treeFrameNaN:
                guard let socket = raw?.socket.rawValue else { return "no socket to send on" }
                let packet = mode == .treeTextLength ? HostileSurface.treePacket(label: [UInt8](repeating: 0x61, count: 2_000), width: 10)
                    : HostileSurface.treePacket(label: Array("Save".utf8), width: .nan)
                try rawSend(socket, packet, fds: [])
                return "sent a raw tree"
            case .treeFrame:
                try await send(update([Node(id: 1, role: .group, frame: full, children: [2]),
                                       Node(id: 2, role: .button, label: "Far", frame: AccessibilityFrame(x: 17 * width, y: 0, width: 10, height: 10))]), [])
                return "sent a frame 17 times away"
            case .treeStructure:
                try await send(update([Node(id: 1, role: .group, frame: full, children: [2, 3]),
                                       Node(id: 2, role: .group, frame: full, children: [3]),
                                       Node(id: 3, role: .label, label: "twice", frame: full)]), [])
                return "sent a node with two parents"
            case .treeNotWhole:
                try await send(update([Node(id: 1, role: .group, frame: full)], whole: false), [])
                return "sent a first update that is not whole"
            case .treeFocus:
                try await send(update([Node(id: 1, role: .group, frame: full)], focus: 9), [])
                return "sent a focus on node 9"
            default:
                let button = Node(id: 2, role: .button, label: "Wide", actions: [.press],
                                  frame: AccessibilityFrame(x: width - 10, y: 4, width: 40, height: 20))
                try await send(update([Node(id: 1, role: .group, frame: full, children: [2]), button], focus: 2), [])
                guard mode == .treeClipped else { return "sent a tree" }
                var iterator = proceed.makeAsyncIterator()
                guard await iterator.next() != nil else { return "never told to go on" }
                var renamed = button
                renamed.label = "Narrow"
                try await send(update([renamed], focus: 2, whole: false), [])
                return "sent a tree, then one node"
            }
        }

        private func attach(_ buffer: Buffer) async throws {
            try await send(.attachBuffer(buffer.layout), [try Attachment(duplicating: buffer.file.fd)])
        }

        private func commit(_ id: UInt32, _ damage: [PixelRect], frame: UInt64) async throws {
            try await send(.commit(bufferID: id, damage: damage, frame: frame), [])
        }

        private func send(_ message: SurfaceMessage, _ attachments: [Attachment]) async throws {
            guard let connection = connection.withLock({ $0 }) else { throw RemoteError(.invalidated, "no connection") }
            try await connection.send(message, attachments: attachments)
        }

        /// Waits for the host's frame_done of `frame`; `false` if the connection ended first.
        private func frameDone(_ frame: UInt64) async -> Bool {
            for await message in fromHost {
                if case .frameDone(let done) = message, done == frame { return true }
            }
            return false
        }
    }

    /// A buffer this process draws into: a memfd filled with one colour.
    final class Buffer: Sendable {
        let layout: BufferDescription
        let file: MemoryFile

        /// `bytes` (default stride × height) in a memfd sealed against shrinking and growing
        /// unless `seal` is false.
        init(id: UInt32, width: Int, height: Int, colour: UInt32, seal: Bool = true, bytes: Int? = nil) throws {
            layout = BufferDescription(id: id, width: width, height: height, stride: width * 4)
            file = try MemoryFile(name: "hostile-surface-\(id)")
            try file.resize(to: bytes ?? layout.byteCount)
            try fill(colour)
            if seal { try file.addSeals([.shrink, .grow]) }
        }

        /// Fills every pixel the file holds with `colour`.
        func fill(_ colour: UInt32) throws {
            let count = min(layout.byteCount, try file.size) / 4
            let words = [UInt32](repeating: colour.littleEndian, count: count)
            try file.write(words.withUnsafeBytes { Array($0) })
        }

        /// Tries to shrink the file to nothing and to half, and to grow it to twice its size:
        /// what each `ftruncate` said.
        func tryResizing() -> String {
            let size = layout.byteCount
            return [("shrink to 0", 0), ("shrink to \(size / 2)", size / 2), ("grow to \(size * 2)", size * 2)].map { what, target in
                let result = ftruncate(file.fd.rawValue, off_t(target))
                return "\(what): " + (result == 0 ? "done" : errno == EPERM ? "EPERM" : "errno \(errno)")
            }.joined(separator: ", ")
        }
    }

    // MARK: raw packets

    /// Protobuf's wire format by hand, for packets the codec refuses to encode.
    enum Wire {
        static func varint(_ value: UInt64) -> [UInt8] {
            var value = value, bytes: [UInt8] = []
            while value >= 0x80 {
                bytes.append(UInt8(value & 0x7F) | 0x80)
                value >>= 7
            }
            return bytes + [UInt8(value)]
        }
        static func field(_ number: UInt64, _ value: UInt64) -> [UInt8] { varint(number << 3) + varint(value) }
        static func field(_ number: UInt64, bytes: [UInt8]) -> [UInt8] { varint(number << 3 | 2) + varint(UInt64(bytes.count)) + bytes }
        static func field(_ number: UInt64, float: Float) -> [UInt8] {
            let bits = float.bitPattern
            return varint(number << 3 | 5) + [UInt8(bits & 0xFF), UInt8(bits >> 8 & 0xFF), UInt8(bits >> 16 & 0xFF), UInt8(bits >> 24)]
        }
    }

    /// A whole accessibility_update of one node (id 1, a group, root and the whole tree) with
    /// `label` and `width`, encoded by hand, because the codec refuses an overlong label or a
    /// NaN frame.
    static func treePacket(label: [UInt8], width: Float) -> [UInt8] {
        let node = Wire.field(1, 1) + Wire.field(2, 1) + Wire.field(3, bytes: label) + Wire.field(9, float: width) + Wire.field(10, float: 10)
        let update = Wire.field(1, bytes: node) + Wire.field(2, 1) + Wire.field(4, 1)
        return Wire.field(1, 1 << 40) + Wire.field(110, bytes: update)
    }

    /// An attach_buffer envelope for `layout`, encoded by hand, because the codec refuses to
    /// encode an impossible layout. Declares one fd.
    static func attachBufferPacket(_ layout: BufferDescription) -> [UInt8] {
        let body = Wire.field(1, UInt64(layout.id)) + Wire.field(2, UInt64(layout.width)) + Wire.field(3, UInt64(layout.height))
            + Wire.field(4, UInt64(layout.stride)) + Wire.field(5, 1)  // ARGB8888_PREMULTIPLIED
        // A large id: above any the connection has used.
        return Wire.field(1, 1 << 40) + Wire.field(3, 1) + Wire.field(100, bytes: body)
    }
}
