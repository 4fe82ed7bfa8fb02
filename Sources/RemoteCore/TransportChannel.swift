import Glibc
import Synchronization

/// One packet as a transport without an fd carries it: an envelope's bytes and the fds (share
/// items' memfds) that ride with it. A transport that crosses machines carries the fds' contents
/// and makes new fds of them on the far side.
@_spi(RemoteViewTransport)
public struct TransportPacket: Sendable {
    /// The envelope's bytes (at most `WireLimits.maxPacketBytes`, 64 KiB).
    public var bytes: [UInt8]
    /// The fds that ride with it, owned: at most `WireLimits.maxAttachments`.
    public var attachments: [Attachment]

    /// A packet of `bytes` with `attachments`.
    public init(bytes: [UInt8], attachments: [Attachment] = []) {
        self.bytes = bytes
        self.attachments = attachments
    }
}

/// The transport seam: a ``PacketChannel`` for a transport that has no fd and runs on threads of
/// its own (a gRPC stream), so that a ``Connection`` runs over it exactly as over a socket
/// (docs/Architecture.md, "The connection core").
///
/// The transport hands what arrives to ``receive(_:)`` and ``receiveEnd(_:)`` from any thread;
/// they are posted to the connection's loop, in order. What the connection writes is handed to
/// the transport's `sink` once per round of the loop, as a socket's writes are flushed, and the
/// transport reports each packet it has sent with ``didSend(bytes:)``: above
/// ``highWaterMark`` bytes not yet sent the channel is not writable, and above
/// ``maxPendingBytes`` a write fails as *timeout*, naming the bound. A peer that stops reading
/// holds up at most that much memory.
///
/// ```swift
/// let channel = TransportChannel { output in
///     switch output {
///     case .packets(let packets): stream.send(packets)  // then channel.didSend(bytes:) for each
///     case .close: stream.finish()
///     }
/// }
/// let connection = Connection(transport: channel, configuration: configuration)
/// ```
@_spi(RemoteViewTransport)
public final class TransportChannel: PacketChannel, RoundFlusher, @unchecked Sendable {
    // @unchecked: everything mutable but `pending` is touched on `loop` only (checked in debug
    // builds); `pending` is atomic, lowered by the transport's threads.

    /// What the channel hands its transport.
    public enum Output: Sendable {
        /// Packets to send, in order (those written in one round of the loop).
        case packets([TransportPacket])
        /// The connection closed its channel: send what was handed over, then end the stream.
        /// Nothing follows.
        case close
    }

    package let loop: any Loop
    private let sink: @Sendable (Output) -> Void
    private var inbound: (any PacketInbound)?
    /// Arrived and not delivered yet (reading paused, or not started); `nil` stands for the end.
    private var arrived: [Arrival] = []
    private var queue: [OutboundPacket] = []
    private var paused = false
    private var closed = false
    private var delivering = false
    private var flushAsked = false
    private var ended = false
    /// The writability last reported to the inbound stage.
    private var reportedWritable = true
    /// Bytes handed to the transport and not reported sent.
    private let pending = Atomic<Int>(0)
    /// Bytes received and not delivered yet, and the transport's readers waiting for room.
    private let room = Mutex<(undelivered: Int, ended: Bool, waiters: [CheckedContinuation<Void, Never>])>((0, false, []))

    private enum Arrival {
        case packet(TransportPacket)
        case end(RemoteError?)
    }

    /// Above this many bytes handed to the transport and not yet sent, the channel is not
    /// writable (1 MiB).
    public static let highWaterMark = 1 << 20
    /// Above this many, a write fails as *timeout* (8 MiB): the peer has stopped reading.
    public static let maxPendingBytes = 8 << 20
    /// Above this many bytes received and not yet delivered (the connection is slower than the
    /// peer, or its reading is paused), ``waitForRoom()`` waits (1 MiB).
    public static let receiveHighWaterMark = 1 << 20

    /// A channel on RemoteView's event loop whose writes go to `sink`, called on that loop: it
    /// must not block (hand the packets to the transport's own writer).
    public convenience init(sink: @escaping @Sendable (Output) -> Void) {
        self.init(loop: EventLoop.shared, sink: sink)
    }

    /// A channel on `loop` whose writes go to `sink`.
    package init(loop: any Loop, sink: @escaping @Sendable (Output) -> Void) {
        self.loop = loop
        self.sink = sink
    }

    // MARK: the transport's side (any thread)

    /// A packet arrived from the peer. Delivered in order, on the loop. A transport that reads
    /// as fast as the network gives calls ``waitForRoom()`` before reading the next, so that a
    /// peer faster than the connection waits (as a socket's peer does when the socket is full).
    public func receive(_ packet: TransportPacket) {
        let count = packet.bytes.count
        room.withLock { $0.undelivered += count }
        loop.execute { [self] in
            guard !closed, !ended else { return delivered(count) }
            arrived.append(.packet(packet))
            deliver()
        }
    }

    /// The peer's stream ended: `nil` in order (the peer's end of file), or why it failed (the
    /// link was lost; the peer broke the transport's rules). Delivered after what arrived before
    /// it; what arrives after it is dropped.
    public func receiveEnd(_ error: RemoteError?) {
        loop.execute { [self] in
            guard !closed, !ended else { return }
            ended = true
            arrived.append(.end(error))
            deliver()
        }
    }

    /// Returns once fewer than ``receiveHighWaterMark`` bytes received wait to be delivered, or
    /// the channel has ended: the transport reads the next packet then.
    public func waitForRoom() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = room.withLock { room -> Bool in
                guard room.undelivered >= Self.receiveHighWaterMark, !room.ended else { return true }
                room.waiters.append(continuation)
                return false
            }
            if ready { continuation.resume() }
        }
    }

    /// `count` bytes were delivered (or dropped): waiting readers go on below the mark, and all
    /// of them, for good, once the channel has ended.
    private func delivered(_ count: Int, ended: Bool = false) {
        let waiters = room.withLock { room -> [CheckedContinuation<Void, Never>] in
            room.undelivered -= count
            if ended { room.ended = true }
            guard room.ended || room.undelivered < Self.receiveHighWaterMark else { return [] }
            defer { room.waiters = [] }
            return room.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// The transport has sent `bytes` of what it was handed (a packet's ``TransportPacket/bytes``
    /// count): the channel may be writable again.
    public func didSend(bytes: Int) {
        let left = pending.subtract(bytes, ordering: .relaxed).newValue
        if left < Self.highWaterMark, left + bytes >= Self.highWaterMark {
            loop.execute { [self] in reportWritability() }
        }
    }

    // MARK: PacketChannel (on the loop)

    package func start(_ inbound: any PacketInbound) {
        loop.preconditionInLoop("TransportChannel.start")
        precondition(self.inbound == nil, "TransportChannel.start called twice")
        guard !closed else { return }
        self.inbound = inbound
        deliver()
    }

    package func write(_ packet: OutboundPacket) throws(RemoteError) {
        loop.preconditionInLoop("TransportChannel.write")
        guard !closed else { throw RemoteError(.invalidated, "the connection was closed") }
        let waiting = pending.load(ordering: .relaxed) + queue.reduce(0) { $0 + $1.count }
        guard waiting + packet.count <= Self.maxPendingBytes else {
            throw RemoteError(.timeout, "the transport has \(waiting) bytes not yet sent, its bound is \(Self.maxPendingBytes): the peer is not reading")
        }
        queue.append(packet)
        if !flushAsked {
            flushAsked = true
            loop.flushAtEndOfRound(self)
        }
    }

    package var isWritable: Bool { pending.load(ordering: .relaxed) < Self.highWaterMark }

    package func pauseReading() {
        loop.preconditionInLoop("TransportChannel.pauseReading")
        paused = true
    }

    package func resumeReading() {
        loop.preconditionInLoop("TransportChannel.resumeReading")
        guard paused else { return }
        paused = false
        loop.execute { [weak self] in self?.deliver() }
    }

    package func close() {
        loop.preconditionInLoop("TransportChannel.close")
        guard !closed else { return }
        inbound = nil
        flush()
        closed = true
        dropArrived()
        sink(.close)
    }

    /// Forgets what arrived and was not delivered (its fds are closed), and lets the
    /// transport's readers go on for good.
    private func dropArrived() {
        let count = arrived.reduce(0) { total, arrival in
            if case .packet(let packet) = arrival { return total + packet.bytes.count }
            return total
        }
        arrived.removeAll()
        delivered(count, ended: true)
    }

    package func flush() {
        flushAsked = false
        guard !closed, !queue.isEmpty else { return }
        // The transport gets fds of its own, as SCM_RIGHTS gives a peer: the connection's
        // attachments still own theirs. One that cannot be duplicated (no fds left) ends the
        // channel: a packet without it would not be the one written.
        var packets: [TransportPacket] = []
        do throws(SystemCallError) {
            for packet in queue {
                var attachments: [Attachment] = []
                for attachment in packet.attachments {
                    guard let fd = attachment.descriptor else { throw SystemCallError(call: "dup", errno: EBADF) }
                    attachments.append(Attachment(OwnedFD(adopting: try Syscall.duplicate(fd))))
                }
                packets.append(TransportPacket(bytes: packet.bytes, attachments: attachments))
            }
        } catch {
            queue.removeAll()
            let inbound = self.inbound
            self.inbound = nil
            closed = true
            dropArrived()
            sink(.close)
            inbound?.channelClosed(RemoteError(.interrupted, "cannot hand a packet's fds to the transport: \(error)"))
            return
        }
        queue.removeAll()
        pending.add(packets.reduce(0) { $0 + $1.bytes.count }, ordering: .relaxed)
        sink(.packets(packets))
        reportWritability()
    }

    private func reportWritability() {
        guard let inbound, !closed else { return }
        let writable = isWritable
        guard writable != reportedWritable else { return }
        reportedWritable = writable
        inbound.channelWritabilityChanged(writable)
    }

    /// Hands out what arrived, in order, while reading is not paused.
    private func deliver() {
        guard !delivering, let inbound else { return }
        delivering = true
        defer { delivering = false }
        while !paused && !closed && !arrived.isEmpty {
            switch arrived.removeFirst() {
            case .end(let error):
                closed = true
                self.inbound = nil
                dropArrived()
                inbound.channelClosed(error)
                sink(.close)
                return
            case .packet(let packet):
                packet.bytes.withUnsafeBytes { bytes in
                    inbound.channelRead(InboundPacket(bytes: bytes, attachments: packet.attachments))
                }
                delivered(packet.bytes.count)
            }
        }
    }
}

extension Connection {
    /// A connection over a transport without an fd (``TransportChannel``), on RemoteView's
    /// event loop. Requests from the peer go to `onRequest`, one-way messages to `onMessage`.
    @_spi(RemoteViewTransport)
    public convenience init(transport: TransportChannel, configuration: Configuration,
                            onRequest: @escaping RequestHandler = Connection.refuseRequests,
                            onMessage: @escaping MessageHandler = { _, _ in }) {
        self.init(channel: transport, configuration: configuration, onRequest: onRequest, onMessage: onMessage)
    }
}
