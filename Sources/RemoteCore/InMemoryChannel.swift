/// A ``PacketChannel`` with no socket: packets go from one channel of a ``pair(loop:)`` to the
/// other on the same ``Loop``, or, for a channel of its own, in through ``push(_:attachments:)``
/// and out into ``written``. Like SwiftNIO's `EmbeddedChannel`: with a ``ManualLoop`` a test
/// drives a connection's whole pipeline with no socket, no thread and no clock.
///
/// Fds travel as duplicates (as `SCM_RIGHTS` gives the receiver its own), so each side closes
/// its own. Writes are flushed at the end of the loop's round, as a socket's are, and a packet
/// is delivered to the peer in that flush.
package final class InMemoryChannel: PacketChannel, RoundFlusher, @unchecked Sendable {
    // @unchecked: everything mutable is touched on `loop` only (checked in debug builds).
    package let loop: any Loop
    private weak var peer: InMemoryChannel?
    private var inbound: (any PacketInbound)?
    /// Arrived and not delivered yet (reading paused, or not started).
    private var arrived: [(bytes: [UInt8], attachments: [Attachment])?] = []
    private var queue: [OutboundPacket] = []
    private var paused = false
    private var closed = false
    private var delivering = false
    private var flushAsked = false

    /// What was written and flushed, for a channel with no peer: a test reads it.
    package private(set) var written: [OutboundPacket] = []

    /// A channel whose writes collect in ``written`` and whose input comes from ``push(_:attachments:)``.
    package init(loop: any Loop) {
        self.loop = loop
    }

    /// Two channels connected to each other.
    package static func pair(loop: any Loop) -> (InMemoryChannel, InMemoryChannel) {
        let first = InMemoryChannel(loop: loop), second = InMemoryChannel(loop: loop)
        first.peer = second
        second.peer = first
        return (first, second)
    }

    /// A packet arrives, as if the peer had written it (on the loop).
    package func push(_ bytes: [UInt8], attachments: [Attachment] = []) {
        loop.preconditionInLoop("InMemoryChannel.push")
        guard !closed else { return }
        arrived.append((bytes, attachments))
        deliver()
    }

    /// The peer closes its end: end of file, after what arrived before it.
    package func pushEndOfFile() {
        loop.preconditionInLoop("InMemoryChannel.pushEndOfFile")
        guard !closed else { return }
        arrived.append(nil)
        deliver()
    }

    /// Takes what was written so far (a channel with no peer).
    package func takeWritten() -> [OutboundPacket] {
        defer { written = [] }
        return written
    }

    // MARK: PacketChannel

    package func start(_ inbound: any PacketInbound) {
        loop.preconditionInLoop("InMemoryChannel.start")
        precondition(self.inbound == nil, "InMemoryChannel.start called twice")
        self.inbound = inbound
        deliver()
    }

    package func write(_ packet: OutboundPacket) throws(RemoteError) {
        loop.preconditionInLoop("InMemoryChannel.write")
        guard !closed else { throw RemoteError(.invalidated, "the connection was closed") }
        queue.append(packet)
        if !flushAsked {
            flushAsked = true
            loop.flushAtEndOfRound(self)
        }
    }

    /// Always: the peer's side is an array.
    package var isWritable: Bool { true }

    package func pauseReading() {
        loop.preconditionInLoop("InMemoryChannel.pauseReading")
        paused = true
    }

    package func resumeReading() {
        loop.preconditionInLoop("InMemoryChannel.resumeReading")
        guard paused else { return }
        paused = false
        loop.execute { [weak self] in self?.deliver() }
    }

    package func close() {
        loop.preconditionInLoop("InMemoryChannel.close")
        guard !closed else { return }
        inbound = nil
        flush()
        closed = true
        arrived.removeAll()
        peer?.pushEndOfFile()
        peer = nil
    }

    package func flush() {
        flushAsked = false
        guard !closed else { return }
        let packets = queue
        queue.removeAll()
        guard let peer else {
            written += packets
            return
        }
        for packet in packets {
            // The receiver gets fds of its own, as SCM_RIGHTS gives them.
            let copies = packet.attachments.compactMap { attachment in
                attachment.descriptor.flatMap { try? Syscall.duplicate($0) }.map { Attachment(OwnedFD(adopting: $0)) }
            }
            peer.push(packet.bytes, attachments: copies)
        }
    }

    /// Hands out what arrived, in order, while reading is not paused.
    private func deliver() {
        guard !delivering, let inbound else { return }
        delivering = true
        defer { delivering = false }
        while !paused && !closed && !arrived.isEmpty {
            guard let packet = arrived.removeFirst() else {
                closed = true
                self.inbound = nil
                inbound.channelClosed(nil)
                return
            }
            packet.bytes.withUnsafeBytes { bytes in
                inbound.channelRead(InboundPacket(bytes: bytes, attachments: packet.attachments))
            }
        }
    }
}
