/// Moves packets and the fds that ride with them between two peers, and nothing else: no codec,
/// no numbering, no state machine (docs/Architecture.md, "The connection core").
///
/// A channel is confined to its ``loop``: every call is made there, and every callback comes
/// there. ``SeqpacketChannel`` is a `SOCK_SEQPACKET` socket; ``InMemoryChannel`` carries packets
/// within one process, for tests. A transport without an fd that runs on threads of its own (a
/// network stream) conforms by posting what it receives to the loop and taking what is written
/// from it there.
package protocol PacketChannel: AnyObject {
    /// The loop the channel is confined to.
    var loop: any Loop { get }

    /// Starts delivering what arrives to `inbound`, packet by packet, until end of file, a
    /// failure, or ``close()``. Once.
    func start(_ inbound: any PacketInbound)

    /// Queues `packet`; it is written at the end of this round of the loop, with the others
    /// queued in it (one system call for several, where the transport can).
    ///
    /// - Throws: ``RemoteError``: `invalidated` once closed, `timeout` when the peer has not
    ///   read and the packets waiting for it reached the channel's bound (naming it).
    func write(_ packet: OutboundPacket) throws(RemoteError)

    /// Whether the packets waiting to be written are below the channel's high-water mark: a
    /// producer that can wait should, until ``PacketInbound/channelWritabilityChanged(_:)``
    /// says so (as NIO's `Channel.isWritable`).
    var isWritable: Bool { get }

    /// Stops delivering until ``resumeReading()``: what arrives meanwhile waits, in order (in
    /// the socket, or in the channel). For an inbound stage that waits for async work.
    func pauseReading()

    /// Delivers again, beginning with what waited, in order (in a later turn of the loop).
    func resumeReading()

    /// Closes the channel: what was queued is written first, as far as the peer takes it; then
    /// the peer sees end of file, nothing more is delivered or written, and the fds of packets
    /// not delivered are closed. `inbound` is not called back.
    func close()
}

/// What a ``PacketChannel`` delivers to: the next stage of the pipeline (the connection's
/// handler, with its ``EnvelopeFramer``). Called on the channel's loop.
package protocol PacketInbound: AnyObject {
    /// A packet arrived. Its bytes are valid for this call only; its attachments are owned by
    /// the packet (closed unless someone takes them).
    func channelRead(_ packet: InboundPacket)

    /// The channel ended by itself: `nil` at the peer's end of file, or why (a packet that
    /// breaks the transport's rules, a send that timed out, a failed system call). Once; not
    /// after ``PacketChannel/close()``.
    func channelClosed(_ error: RemoteError?)

    /// ``PacketChannel/isWritable`` changed.
    func channelWritabilityChanged(_ isWritable: Bool)
}

/// One packet read: its bytes and the fds that came with it.
package struct InboundPacket {
    /// The packet's bytes, valid while the callback that gets it runs.
    package let bytes: UnsafeRawBufferPointer
    /// The fds that came with it, owned.
    package let attachments: [Attachment]

    package init(bytes: UnsafeRawBufferPointer, attachments: [Attachment]) {
        self.bytes = bytes
        self.attachments = attachments
    }
}

/// One packet to write: a short prefix (the envelope's id field, which the framer puts in front
/// of an envelope encoded without it), its body, and the fds to send with it (sent as
/// duplicates: the attachments still own theirs, and are let go once the packet is written).
/// The channel writes the prefix and the body as one packet (two `iovec`s), copying neither.
package struct OutboundPacket: Sendable {
    /// At most 16 bytes, kept inline (no allocation).
    package struct Prefix: Sendable {
        private var storage: (UInt64, UInt64) = (0, 0)
        package private(set) var count = 0

        package static let capacity = 16

        package init() {}

        /// `bytes` (at most ``capacity``).
        package init(_ bytes: UnsafeRawBufferPointer) {
            precondition(bytes.count <= Self.capacity, "a packet prefix holds at most \(Self.capacity) bytes")
            withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: bytes) }
            count = bytes.count
        }

        /// The prefix's bytes, valid in `body`.
        package func withUnsafeBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
            var copy = storage
            return try Swift.withUnsafeBytes(of: &copy) { (raw) throws(E) -> R in
                try body(UnsafeRawBufferPointer(rebasing: raw[0..<count]))
            }
        }

        /// The prefix's bytes, as an array.
        package var bytes: [UInt8] { withUnsafeBytes { Array($0) } }
    }

    package var prefix: Prefix
    package var body: PacketBody
    package var attachments: [Attachment]

    package init(prefix: Prefix = Prefix(), body: ArraySlice<UInt8>, attachments: [Attachment] = []) {
        self.init(prefix: prefix, body: PacketBody(body), attachments: attachments)
    }

    package init(prefix: Prefix = Prefix(), body: PacketBody, attachments: [Attachment] = []) {
        self.prefix = prefix
        self.body = body
        self.attachments = attachments
    }

    /// A packet of `bytes`, with no prefix.
    package init(bytes: [UInt8], attachments: [Attachment] = []) {
        self.init(body: bytes[...], attachments: attachments)
    }

    /// The packet's bytes in one array (the prefix, then the body): for channels that copy anyway.
    package var bytes: [UInt8] { prefix.bytes + body.array }

    /// The packet's length in bytes.
    package var count: Int { prefix.count + body.count }
}

/// The bytes of an outbound packet after its prefix: an array's, or a ``PacketBuffer`` of the
/// connection's ``PacketPool`` that the packet was packed into where it was queued.
package struct PacketBody: Sendable {
    private enum Storage: Sendable {
        case array(ArraySlice<UInt8>)
        case pooled(PacketBuffer)
    }
    private let storage: Storage

    package init(_ bytes: ArraySlice<UInt8>) { storage = .array(bytes) }
    package init(_ buffer: PacketBuffer) { storage = .pooled(buffer) }

    package var count: Int {
        switch storage {
        case .array(let bytes): bytes.count
        case .pooled(let buffer): buffer.count
        }
    }

    /// The bytes, valid in `body`.
    package func withUnsafeBytes<R, E: Error>(_ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
        switch storage {
        case .array(let bytes):
            return try bytes.withUnsafeBytes { raw in Result { () throws(E) -> R in try body(raw) } }.get()
        case .pooled(let buffer):
            return try body(UnsafeRawBufferPointer(start: buffer.base, count: buffer.count))
        }
    }

    /// The bytes as an array (for channels that copy anyway).
    package var array: [UInt8] { withUnsafeBytes { Array($0) } }
}

/// One outbound packet's bytes, reused by its ``PacketPool`` once the channel has let the packet
/// go. Touched on the connection's loop only.
package final class PacketBuffer: @unchecked Sendable {
    // @unchecked: made, filled, written and reused on one loop (a connection's).
    package let base: UnsafeMutableRawPointer
    package let capacity: Int
    /// The bytes in use.
    package var count = 0

    init(capacity: Int) {
        self.capacity = capacity
        base = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
    }

    deinit { base.deallocate() }
}

/// A connection's outbound packet buffers (its framer's, on its loop): a packet is packed into
/// one where it is queued, and the buffer is taken again once the channel has written the packet
/// and let it go (nothing else holds it then), so a conversation packs every packet into the
/// same few buffers and allocates none. At most ``maxBuffers`` (64) of at most 8 KiB are kept
/// (512 KiB at worst); past them (a queue backed up behind a peer that does not read), and for
/// a larger packet, a buffer is one packet's, of its size.
///
/// Packets are written, and their buffers let go, in the order they were packed, so the buffer
/// after the last one taken is the oldest: if it and the next few are still queued, so are the
/// rest, and the search stops there (``probes``) rather than looking at every buffer for every
/// packet of a burst.
package final class PacketPool: @unchecked Sendable {
    // @unchecked: used by one framer, on its connection's loop.
    private var buffers: [PacketBuffer] = []
    /// Where the next search starts: packets are written, and their buffers let go, in the
    /// order they were packed, so the buffer after the last one taken is usually the free one.
    private var next = 0
    static let maxBuffers = 64
    /// How many buffers from the oldest on a search looks at.
    static let probes = 4
    /// Larger buffers are one packet's: a burst of large messages leaves no megabytes behind.
    static let maxPooledCapacity = 8_192
    /// The smallest buffer made: most envelopes fit.
    static let minimumCapacity = 1_024

    package init() {}

    /// A free buffer of at least `capacity` bytes, emptied.
    package func buffer(capacity: Int) -> PacketBuffer {
        var tooSmall: Int?
        for step in 0..<min(buffers.count, Self.probes) {
            let index = (next + step) % buffers.count
            guard isKnownUniquelyReferenced(&buffers[index]) else { continue }
            if buffers[index].capacity >= capacity {
                buffers[index].count = 0
                next = index + 1
                return buffers[index]
            }
            tooSmall = tooSmall ?? index
        }
        if capacity <= Self.maxPooledCapacity, tooSmall != nil || buffers.count < Self.maxBuffers {
            var size = Self.minimumCapacity
            while size < capacity { size *= 2 }
            let buffer = PacketBuffer(capacity: size)
            if let tooSmall {
                buffers[tooSmall] = buffer
                next = tooSmall + 1
            } else {
                buffers.append(buffer)
                next = buffers.count
            }
            return buffer
        }
        // Every pooled buffer near the oldest is still queued (or the packet is large): one of
        // its own, no larger than it needs.
        return PacketBuffer(capacity: (capacity + 63) & ~63)
    }
}
