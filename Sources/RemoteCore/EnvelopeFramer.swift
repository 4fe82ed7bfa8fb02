/// The envelope stage of a connection's pipeline: turns packets into envelopes and envelopes
/// into packets, with the protocol's id rule both ways (docs/Protocol.md, "Envelope rules").
///
/// Inbound, every packet is decoded and validated (``EnvelopeCodec``) and its id must be above
/// the last one's. Outbound, an envelope arrives encoded without its id (by the caller, on its
/// own thread: ``EnvelopeCodec/encodeUnnumbered(_:)``; a request, reply or message only checked
/// there, and packed here, with its id, into a buffer of the connection's ``PacketPool``), and is
/// numbered as it is framed: the
/// pipeline frames on its loop, in the order it queues packets, which is the order they are
/// written, so ids increase in write order with no lock and no layer asking another for the
/// last id sent.
///
/// A value, owned by one loop-confined stage (the connection's handler).
package struct EnvelopeFramer: Sendable {
    /// The id of the last envelope received (0 before the first).
    package private(set) var lastReceivedID: UInt64 = 0
    /// The id of the last envelope framed to send (0 before the first).
    package private(set) var lastSentID: UInt64 = 0
    /// Where every packet is unpacked, reused (so unpacking allocates nothing per packet).
    private let arena = UnpackArena()
    /// Where a request, reply or message is packed as it is numbered, reused once written.
    private let pool = PacketPool()

    package init() {}

    /// The envelope `packet` holds, its attachments with it.
    ///
    /// - Throws: `protocolViolation` for a packet that does not decode, breaks a rule of the
    ///   schema, or whose id is not above the last one received.
    package mutating func decode(_ packet: InboundPacket) throws(RemoteError) -> Envelope {
        defer { arena.end() }
        return try decodeInPlace(packet).envelope
    }

    /// The envelope `packet` holds, checked as ``decode(_:)`` checks it, with a request, reply
    /// or message left where it was unpacked: valid until ``endPacket()`` or the next decode,
    /// so whoever dispatches it copies only what it hands on.
    package mutating func decodeInPlace(_ packet: InboundPacket) throws(RemoteError) -> EnvelopeCodec.Decoded {
        arena.end()  // whatever the last packet left
        let decoded = try EnvelopeCodec.decodeInPlace(packet.bytes, attachments: packet.attachments, arena: arena)
        guard decoded.id > lastReceivedID else {
            throw RemoteError(.protocolViolation, "\(decoded.name) envelope \(decoded.id) follows envelope \(lastReceivedID): ids must increase per direction")
        }
        lastReceivedID = decoded.id
        return decoded
    }

    /// The packet ``decodeInPlace(_:)`` returned is done with: what it was unpacked into goes.
    package func endPacket() {
        arena.end()
    }

    /// `packet` (an envelope encoded without its id) numbered with the next id: the id field goes
    /// in front of it, as the packet's prefix. Returns the packet and its id.
    package mutating func frame(_ packet: EnvelopeCodec.UnnumberedPacket, attachments: [Attachment]) -> (packet: OutboundPacket, id: UInt64) {
        lastSentID += 1
        if let (deferred, bound) = packet.deferred {
            // Packed now, with its id, into a buffer of the pool: no allocation.
            var envelope = deferred
            envelope.id = lastSentID
            let buffer = pool.buffer(capacity: bound)
            EnvelopeCodec.pack(envelope, into: buffer)
            return (OutboundPacket(body: PacketBody(buffer), attachments: attachments), lastSentID)
        }
        let prefix = EnvelopeCodec.UnnumberedPacket.withIDField(lastSentID) { OutboundPacket.Prefix($0) }
        return (OutboundPacket(prefix: prefix, body: packet.bytes, attachments: attachments), lastSentID)
    }

    /// `envelope` as a numbered packet (encoded here, for the few the connection makes itself:
    /// its handshake, a pong, a goodbye).
    ///
    /// - Throws: `invalidArgument` when it cannot be encoded; no id is taken then.
    package mutating func encode(_ envelope: Envelope) throws(RemoteError) -> (packet: OutboundPacket, id: UInt64) {
        frame(try EnvelopeCodec.encodeUnnumbered(envelope), attachments: envelope.attachments)
    }
}
