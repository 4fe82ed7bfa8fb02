@_spi(RemoteViewTransport) import RemoteCore

/// What a relay with a view hands its frames to: the gateway's encoder, which sends them on
/// the far host's `View` stream (docs/Gateway.md, "Views").
@_spi(RemoteViewTransport)
public protocol RelayedViewSink: AnyObject, Sendable {
    /// The service committed `frame`, composited into the relay's image. Called on RemoteView's
    /// event loop: the sink must not block it. Once it has taken the frame (encoded it), it
    /// calls ``ServiceRelay/frameTaken(_:)``; the service draws its next frame only then.
    func frame(_ frame: RelayedFrame)
}

/// One frame of a relayed view: the image as of the commit, and what changed.
@_spi(RemoteViewTransport)
public struct RelayedFrame: Sendable {
    /// The service's frame number.
    public let number: UInt64
    /// The rects the commit changed (the whole image after a change of size).
    public let damage: [PixelRect]
    private let image: CompositedImage

    init(number: UInt64, damage: [PixelRect], image: CompositedImage) {
        self.number = number
        self.damage = damage
        self.image = image
    }

    public var width: Int { image.width }
    public var height: Int { image.height }

    /// Runs `body` on the image's pixels: rows of ``width`` premultiplied ARGB words.
    public func withPixels<R>(_ body: (UnsafeBufferPointer<UInt32>) throws -> R) rethrows -> R {
        try image.pixels.withUnsafeBufferPointer(body)
    }
}

/// A relayed view's frames, as a value: the frame the service committed and waits to have
/// taken, the one the sink is taking, those sent to the far host and not yet presented there,
/// and the service's packets held behind them. No clock, lock or stream of its own: the
/// relay feeds it events on its loop and performs its actions.
///
/// ```
/// committed ──(sink attached, nothing taking, < 2 unpresented)──▶ take ──taken──▶ unpresented, until the host's presented
///     │                                                                     │
///     └── held until then (no sink yet)                                     └──▶ release (frame_done to the service)
///                                                                                once fewer than 2 are unpresented
/// ```
///
/// Toward the service one frame is in flight, as with a local host; across the network at
/// most ``maxUnpresented``, so a link's round trip does not cost every frame, and a slow link
/// lowers the frame rate instead of queueing frames. The service's `frame_done` waits for a free
/// slot (it is owed, then sent at the `presented` that frees one): the frame it then draws goes
/// out at once, with the input that came meanwhile, instead of waiting, drawn, behind the frames
/// ahead of it.
package struct RelayedViewStateMachine: Sendable {
    /// Frames sent to the host and not yet presented, at most: the bound the host's compositor
    /// enforces (one number for both sides of the network).
    package static let maxUnpresented = SurfaceCompositor.maxRemoteFramesInFlight

    package enum Action: Sendable, Equatable {
        /// Hand frame `frame`, with `damage`, to the sink.
        case take(frame: UInt64, damage: [PixelRect])
        /// Give the service its buffer back and allow its next frame.
        case release
        /// Forward the service's packets held behind frames the host has now presented.
        case forwardHeld
    }

    /// Committed, composited, not yet handed to the sink.
    package private(set) var held: (frame: UInt64, damage: [PixelRect])?
    /// Handed to the sink, not yet taken.
    private(set) var taking: UInt64?
    /// Taken and sent, not yet presented by the host, oldest first.
    private(set) var unpresented: [UInt64] = []
    private(set) var sinkAttached = false
    /// The last frame the service committed.
    private(set) var lastCommitted: UInt64?
    /// The service's packets wait until the host presented this frame.
    private(set) var holdingUntil: UInt64?
    /// A frame was taken while no slot was free: the service's `frame_done` waits for one.
    private(set) var releaseOwed = false

    /// The service committed `frame`: composited, it waits to be taken.
    package mutating func committed(frame: UInt64, damage: [PixelRect]) -> [Action] {
        // The compositor allows one frame in flight: a commit while one is held is refused there.
        held = (frame, damage)
        lastCommitted = frame
        return next()
    }

    /// The sink took `frame`: it is on its way to the host, and the service may draw again.
    package mutating func taken(frame: UInt64) -> [Action] {
        guard taking == frame else { return [] }
        taking = nil
        guard sinkAttached else { return [.release] + next() }
        unpresented.append(frame)
        guard unpresented.count < Self.maxUnpresented else {
            releaseOwed = true
            return next()
        }
        return [.release] + next()
    }

    /// The host presented every frame up to `frame`.
    ///
    /// - Throws: `RemoteError` `protocolViolation` when no such frame is on its way.
    package mutating func presented(frame: UInt64) throws(RemoteError) -> [Action] {
        guard let index = unpresented.firstIndex(of: frame) else {
            throw RemoteError(.protocolViolation, "rule view.presented: the host presented frame \(frame), which is not in flight (\(unpresented.isEmpty ? "none is" : "frames \(unpresented.map(String.init).joined(separator: ", ")) are"))")
        }
        unpresented.removeFirst(index + 1)
        var actions: [Action] = []
        if let until = holdingUntil, until <= frame {
            holdingUntil = nil
            actions.append(.forwardHeld)
        }
        if releaseOwed {
            releaseOwed = false
            actions.append(.release)
        }
        return actions + next()
    }

    /// A reply the host waits on to know its image is current (a settle's, a ping's) came from
    /// the service: whether it, and everything after it, must wait for the frames committed
    /// before it to be presented.
    package mutating func replyMustWait() -> Bool {
        if holdingUntil != nil { return true }
        guard sinkAttached, let last = lastCommitted, held?.frame == last || taking == last || unpresented.contains(last) else { return false }
        holdingUntil = last
        return true
    }

    package init() {}

    /// Whether the service's packets are held now (each waits behind the one before it).
    package var isHolding: Bool { holdingUntil != nil }

    /// A sink takes the frames (the host's `View` stream opened).
    package mutating func attach() -> [Action] {
        sinkAttached = true
        unpresented = []
        return next()
    }

    /// The sink is gone (the `View` stream ended): nothing is presented any more, so nothing
    /// waits for it. A frame being taken is released when taken; a held frame waits for the
    /// next sink.
    package mutating func detach() -> [Action] {
        sinkAttached = false
        unpresented = []
        var actions: [Action] = []
        if holdingUntil != nil {
            holdingUntil = nil
            actions.append(.forwardHeld)
        }
        if releaseOwed {
            releaseOwed = false
            actions.append(.release)
        }
        return actions
    }

    private mutating func next() -> [Action] {
        guard sinkAttached, taking == nil, unpresented.count < Self.maxUnpresented, let frame = held else { return [] }
        held = nil
        taking = frame.frame
        return [.take(frame: frame.frame, damage: frame.damage)]
    }
}

/// The part of a ``ServiceRelay`` with a view that reads what crosses it (confined to the
/// relay's loop). Toward the service, the relay writes packets of its own (a frame's
/// `release_buffer` and `frame_done`, the far host's input), so it numbers every packet the
/// far host sent again: id × 2³², with what it writes itself numbered in between, and a
/// `cancel`'s request id likewise. The service's replies to the far host go back as their
/// request's own id.
final class RelaySplice {
    let compositor: SurfaceCompositor
    var machine = RelayedViewStateMachine()
    var sink: (any RelayedViewSink)?
    /// The far host's last id, and how many packets the relay wrote after it.
    private var lastHostID: UInt64 = 0
    private var written: UInt64 = 0
    /// The host's settle requests and pings whose answers say "what you see is current".
    private var waitedOn: Set<UInt64> = []
    /// The service's packets held behind frames the host has not presented yet.
    var held: [TransportPacket] = []
    private let arena = UnpackArena()

    /// Of the far host's ids, the highest the relay can number again.
    static let maxHostID: UInt64 = 1 << 32 - 1
    /// The most settle requests and pings the relay follows at once.
    static let maxWaitedOn = 1024
    /// Above this many held packets, the service's socket is not read until they go.
    static let maxHeld = 256

    init(compositor: SurfaceCompositor) {
        self.compositor = compositor
    }

    /// A packet from the far host, numbered again for the service.
    ///
    /// - Throws: `RemoteError` `protocolViolation`: a packet that is no RemoteView envelope, an
    ///   id the relay cannot number again, or a frame's buffer or `frame_done`, which the far
    ///   host sends as `presented` on its `View` stream.
    func fromHost(_ packet: TransportPacket) throws(RemoteError) -> OutboundPacket {
        var envelope = try decode(packet.bytes, attachments: packet.attachments)
        guard envelope.id <= Self.maxHostID else {
            throw RemoteError(.protocolViolation, "rule relay.id: the host's packet \(envelope.id) has an id above \(Self.maxHostID), which a relay with a view cannot number again")
        }
        guard envelope.id > lastHostID else {
            throw RemoteError(.protocolViolation, "rule relay.id: the host's packet \(envelope.id) after its packet \(lastHostID): ids must increase")
        }
        switch envelope.body {
        case .surface(.resize(let size)):
            compositor.sizeGiven(size)
        case .surface(.releaseBuffer), .surface(.frameDone):
            throw RemoteError(.protocolViolation, "rule relay.frame-done: the host sent \(envelope.body.name) on Connect; a relayed view's frames are presented on the View stream")
        case .request(let type, _) where type == FrameworkMessage.settle:
            waitOn(envelope.id)
        case .ping:
            waitOn(envelope.id)
        case .cancel(let request):
            envelope.body = .cancel(requestID: request << 32)
        default:
            break
        }
        lastHostID = envelope.id
        written = 0
        envelope.id <<= 32
        return OutboundPacket(bytes: try EnvelopeCodec.encode(envelope), attachments: envelope.attachments)
    }

    private func decode(_ bytes: [UInt8], attachments: [Attachment]) throws(RemoteError) -> Envelope {
        let result = bytes.withUnsafeBytes { raw -> Result<Envelope, RemoteError> in
            do throws(RemoteError) { return .success(try EnvelopeCodec.decode(raw, attachments: attachments, arena: arena)) } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    private func waitOn(_ id: UInt64) {
        if waitedOn.count >= Self.maxWaitedOn { waitedOn.removeAll() }
        waitedOn.insert(id)
    }

    /// A packet the relay writes to the service itself, numbered after the host's last.
    ///
    /// - Throws: `RemoteError` `protocolViolation` before the host's handshake (the service
    ///   reads a handshake first).
    func own(_ body: Envelope.Body) throws(RemoteError) -> OutboundPacket {
        guard lastHostID > 0 else {
            throw RemoteError(.protocolViolation, "rule relay.order: \(body.name) before the host's handshake")
        }
        guard written < Self.maxHostID else {
            throw RemoteError(.protocolViolation, "rule relay.id: more than \(Self.maxHostID) packets of the relay's own after the host's packet \(lastHostID)")
        }
        written += 1
        return OutboundPacket(bytes: try EnvelopeCodec.encode(Envelope(id: lastHostID << 32 | written, body: body)))
    }

    /// The far host's input from its `Input` stream, as the service's packet.
    ///
    /// - Throws: `RemoteError` `protocolViolation` for anything but an input event.
    func input(_ bytes: [UInt8]) throws(RemoteError) -> OutboundPacket {
        let envelope = try decode(bytes, attachments: [])
        guard case .input = envelope.body else {
            throw RemoteError(.protocolViolation, "rule view.input: the Input stream carries input events, not \(envelope.body.name)")
        }
        return try own(envelope.body)
    }

    /// What a packet from the service becomes.
    enum FromService {
        /// Forward it to the far host (as it came, or with its reply's id given back).
        case forward(TransportPacket)
        /// A surface message the relay's view took; the machine's actions follow.
        case taken([RelayedViewStateMachine.Action])
    }

    /// A packet from the service: a surface message for the relay's view (composited, with the
    /// same checks as a local host's), or a packet for the far host.
    ///
    /// - Throws: `RemoteError` `protocolViolation` naming what the service broke: the relay
    ///   ends it, as a local host would.
    func fromService(_ packet: InboundPacket) throws(RemoteError) -> FromService {
        var envelope = try EnvelopeCodec.decode(packet.bytes, attachments: packet.attachments, arena: arena)
        switch envelope.body {
        case .surface(let message):
            switch message {
            case .attachBuffer, .destroyBuffer:
                try compositor.receive(message, attachments: envelope.attachments)
                return .taken([])
            case .commit(_, _, let frame):
                let damage = try compositor.receive(message, attachments: envelope.attachments)
                return .taken(machine.committed(frame: frame, damage: damage))
            default:
                break
            }
        case .reply, .failure, .pong:
            guard let replyTo = envelope.replyTo, replyTo & 0xFFFF_FFFF == 0 else {
                throw RemoteError(.protocolViolation, "\(envelope.body.name) to packet \(envelope.replyTo ?? 0), which the host never sent (the relay wrote it)")
            }
            envelope.replyTo = replyTo >> 32
            if waitedOn.remove(replyTo >> 32) != nil { _ = machine.replyMustWait() }
            return .forward(TransportPacket(bytes: try EnvelopeCodec.encode(envelope), attachments: envelope.attachments))
        default:
            break
        }
        return .forward(TransportPacket(bytes: Array(packet.bytes), attachments: envelope.attachments))
    }
}
