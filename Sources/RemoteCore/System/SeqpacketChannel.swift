import CRemoteViewLinux
import Glibc

/// An `AF_UNIX` `SOCK_SEQPACKET` socket as a ``PacketChannel``: one packet per envelope, its fds
/// as one `SCM_RIGHTS` message, received with `MSG_CMSG_CLOEXEC`.
///
/// Confined to its ``EventLoop``. The socket is registered once, edge-triggered, for
/// `EPOLLIN`. Reading takes up to ``ReceiveBatch/capacity`` queued packets with one `recvmmsg`
/// and hands them to the inbound stage one at a time; a batch that came back full is followed by
/// another in a later turn of the loop, so one busy peer cannot hold the others off. A batch that
/// came back short met an empty queue, so the channel waits for the next edge without the call
/// that would only say `EAGAIN`.
///
/// Writes are queued and written at the end of the loop's round: one `sendmsg` for one packet,
/// one `sendmmsg` for several (like libwayland's `wl_connection_flush` and NIO's pending
/// writes). When the peer's queue is full, the channel watches `EPOLLOUT` and keeps the packets,
/// at most ``maxQueuedPackets``; one more fails at once, naming the bound, and a queue that has
/// not moved for ``sendTimeout`` ends the channel as *timeout*.
///
/// The read side can be lent to a blocking caller (``lendReadSide()``): the loop stops watching
/// for `EPOLLIN`, the caller reads with a blocking `recvmsg` on its own thread
/// (``receiveLent(until:)``) and hands each packet back through the loop
/// (``deliverLent()``), and the loop takes the read side back (``returnReadSide()``). Writing
/// goes on as usual meanwhile. The socket itself is blocking; every call the loop makes on it
/// says `MSG_DONTWAIT`.
package final class SeqpacketChannel: PacketChannel, RoundFlusher, @unchecked Sendable {
    // @unchecked: everything mutable is touched on `eventLoop` only (checked in debug builds;
    // a thread that borrowed the loop counts as it), except the receive batch and
    // `receiveTimeout` while the read side is lent, which only the reader touches; `fd` and the
    // registration are set in init, before the loop can call in.
    package var loop: any Loop { eventLoop }
    private let eventLoop: EventLoop
    private let fd: Int32
    private var registration: EventLoop.Registration?
    /// Whom the loop tells that the socket is ready: this channel, from ``start(_:)`` until it
    /// closes. No closure holds the channel weakly: a weak reference would give it a side table,
    /// and then every retain and release of it would take the runtime's slow path.
    private let readiness = Readiness()
    private let batch: ReceiveBatch
    private var inbound: (any PacketInbound)?
    /// An edge came that has not been read yet.
    private var readable = false
    private var paused = false
    private var closed = false
    /// In `readAvailable()` (a stage it calls may pause, close or write).
    private var reading = false
    private var queue: [OutboundPacket] = []
    private var flushAsked = false
    /// The peer's queue was full: `EPOLLOUT` is watched, and writing waits for it.
    private var blocked = false
    /// The peer has closed its end: what is written is dropped (reading goes on, to the end of
    /// what the peer sent, its goodbye say, then end of file).
    private var peerGone = false
    private var blockedTimer: LoopTimer?
    /// The read side is lent to a blocking caller: the loop does not read, and does not watch
    /// `EPOLLIN`.
    private var lent = false
    /// Closed while lent: the socket is shut down (which ends the caller's `recvmsg`), and
    /// released once the read side comes back.
    private var releaseWhenReturned = false
    /// The receive timeout set on the socket (`SO_RCVTIMEO`; `nil`: none), touched by whoever
    /// holds the read side.
    private var receiveTimeout: Duration?

    /// How long the peer may leave packets waiting (its queue full) before the channel ends as
    /// *timeout*.
    package let sendTimeout: Duration
    /// The most packets that may wait for a peer whose queue is full; one more is refused.
    package let maxQueuedPackets: Int
    /// The default ``maxQueuedPackets``.
    package static let defaultMaxQueuedPackets = 1024
    /// The most packets one `sendmmsg` writes.
    static let writeBatch = 16
    /// Above this many packets waiting, the channel is not writable (``isWritable``) until they
    /// are down to ``lowWaterMark``.
    package static let highWaterMark = 256
    package static let lowWaterMark = 64
    package private(set) var isWritable = true
    /// The headers, vectors, prefixes and control buffers of one `sendmmsg`, made once.
    private let sendBuffers = SendBuffers()

    private final class SendBuffers {
        let messages = UnsafeMutablePointer<rv_mmsghdr>.allocate(capacity: SeqpacketChannel.writeBatch)
        let vectors = UnsafeMutablePointer<iovec>.allocate(capacity: 2 * SeqpacketChannel.writeBatch)
        let prefixes = UnsafeMutableRawPointer.allocate(byteCount: SeqpacketChannel.writeBatch * OutboundPacket.Prefix.capacity, alignment: 8)
        static let controlLength = rv_cmsg_space(WireLimits.maxAttachments * MemoryLayout<Int32>.size)
        let control = UnsafeMutableRawPointer.allocate(byteCount: SeqpacketChannel.writeBatch * controlLength, alignment: MemoryLayout<cmsghdr>.alignment)

        init() {
            messages.initialize(repeating: rv_mmsghdr(), count: SeqpacketChannel.writeBatch)
            vectors.initialize(repeating: iovec(), count: 2 * SeqpacketChannel.writeBatch)
        }

        deinit {
            messages.deallocate()
            vectors.deallocate()
            prefixes.deallocate()
            control.deallocate()
        }
    }

    /// Takes ownership of a connected seqpacket socket (made blocking here: the loop's calls
    /// say `MSG_DONTWAIT`, and a blocking caller's `recvmsg` waits) and registers it with `loop`.
    package init(_ socket: consuming OwnedFD, sendTimeout: Duration = .seconds(10), maxQueuedPackets: Int = defaultMaxQueuedPackets,
                 loop: EventLoop = .shared) throws(SystemCallError) {
        try Syscall.setNonBlocking(socket.rawValue, false)
        batch = try ReceiveBatch.take()
        eventLoop = loop
        self.sendTimeout = sendTimeout
        self.maxQueuedPackets = maxQueuedPackets
        fd = socket.rawValue
        registration = try loop.register(socket, edgeTriggered: EPOLLIN.rawValue) { [readiness] events in readiness.channel?.ready(events) }
        _ = socket.release()
    }

    deinit {
        if !closed { releaseSocket() }
        batch.giveBack()
    }

    // MARK: PacketChannel

    package func start(_ inbound: any PacketInbound) {
        loop.preconditionInLoop("SeqpacketChannel.start")
        precondition(self.inbound == nil, "SeqpacketChannel.start called twice")
        guard !closed else { return }  // nothing to read, and nothing to be told
        self.inbound = inbound
        readiness.channel = self  // until it closes
        // What came before it started is read now (its edge was reported already).
        readable = true
        readAvailable()
    }

    package func write(_ packet: OutboundPacket) throws(RemoteError) {
        loop.preconditionInLoop("SeqpacketChannel.write")
        // Also after the channel ended under the peer: what is written then is dropped, while
        // what the peer sent before its end is still being delivered.
        if peerGone { return }
        guard !closed else { throw RemoteError(.invalidated, "the connection was closed") }
        if blocked, queue.count >= maxQueuedPackets {
            throw RemoteError(.timeout, "the peer is not reading: \(maxQueuedPackets) packets already wait for room in its receive queue, this one is not sent")
        }
        queue.append(packet)
        if isWritable && queue.count >= Self.highWaterMark {
            isWritable = false
            inbound?.channelWritabilityChanged(false)
        }
        if !flushAsked && !blocked {
            flushAsked = true
            eventLoop.flushAtEndOfRound(self)
        }
    }

    package func pauseReading() {
        loop.preconditionInLoop("SeqpacketChannel.pauseReading")
        paused = true
    }

    package func resumeReading() {
        loop.preconditionInLoop("SeqpacketChannel.resumeReading")
        guard paused else { return }
        paused = false
        eventLoop.execute { [self] in readAvailable() }
    }

    package func close() {
        loop.preconditionInLoop("SeqpacketChannel.close")
        guard !closed else { return }
        // Not called back from here on, even if the last flush fails.
        inbound = nil
        // What was queued (a goodbye, say) goes first, as far as the peer takes it.
        flush()
        if !closed { closeSocket() }
    }

    // MARK: reading

    /// The loop saw the socket ready (on the loop).
    private func ready(_ events: UInt32) {
        guard !closed else { return }
        if events & (EPOLLOUT.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0, blocked {
            blocked = false
            watchInterest()
            flush()
        }
        if events & (EPOLLIN.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
            readable = true
            // Lent: the blocking caller reads it (or, once the read side is back, the loop).
            if !lent { readAvailable() }
        }
    }

    /// Watches what the channel waits for: `EPOLLIN` unless the read side is lent, `EPOLLOUT`
    /// while the peer's queue is full. (Hang-up and error are always reported.)
    private func watchInterest() {
        guard let registration else { return }
        eventLoop.watch(registration, edgeTriggered: (lent ? 0 : EPOLLIN.rawValue) | (blocked ? EPOLLOUT.rawValue : 0))
    }

    /// Hands out what is queued, batch by batch, until the queue is empty, reading is paused,
    /// or a full batch has been handed out (the next one comes in a later turn).
    private func readAvailable() {
        guard !reading, !lent, let inbound else { return }
        reading = true
        defer { reading = false }
        var handedOut = 0
        while !paused && !closed {
            if batch.next < batch.count {
                guard handOutNext(to: inbound) else { return }
                handedOut += 1
                continue
            }
            // The batch is handed out. It met an empty queue (and no edge came since): wait.
            if batch.drained && !readable { return }
            if handedOut >= ReceiveBatch.capacity {
                // Full, so more may be queued: in a later turn, after the other descriptors.
                eventLoop.execute { [self] in readAvailable() }
                return
            }
            readable = false
            switch readBatch() {
            case .failure(let error): return fail(error)
            case .success(false): return end(nil)
            case .success(true): continue
            }
        }
    }

    /// Hands the batch's next packet to `inbound`; `false` when it was the end of file or broke
    /// the transport's rules (the channel has ended then).
    private func handOutNext(to inbound: any PacketInbound) -> Bool {
        let index = batch.next
        batch.next += 1
        let packet: InboundPacket?
        do {
            packet = try batch.packet(at: index)
        } catch {
            fail(error)
            return false
        }
        guard let packet else {
            end(nil)
            return false
        }
        inbound.channelRead(packet)
        return true
    }

    /// One `recvmmsg` into the batch: `true` when it read packets or the queue was empty,
    /// `false` at end of file after a reset.
    ///
    /// A peer that closes with unread data in its own queue leaves `ECONNRESET` pending here,
    /// and Linux reports it *before* the packets still queued for us (its goodbye, say). The
    /// error is consumed by reporting it, so read on: what is queued comes next, then end of file.
    private func readBatch(afterReset: Bool = false) -> Result<Bool, RemoteError> {
        batch.prepare()
        let result: IOResult<Int>
        do {
            result = try Syscall.receiveMessages(fd, batch.messages, count: ReceiveBatch.capacity)
        } catch {
            if error.errno == ECONNRESET { return afterReset ? .success(false) : readBatch(afterReset: true) }
            return .failure(RemoteError(.interrupted, "\(error)"))
        }
        // (recvmmsg returns -1 with EAGAIN rather than 0 for an empty queue; a 0 is taken as
        // would-block too, without concluding the queue was empty.)
        guard case .done(let count) = result, count > 0 else {
            batch.drained = true
            return .success(true)
        }
        batch.received(count)
        return .success(true)
    }

    // MARK: writing

    /// Writes what is queued (on the loop, at the end of the round the first packet was queued in).
    package func flush() {
        flushAsked = false
        guard !closed, !blocked else { return }
        while !queue.isEmpty {
            let count = min(queue.count, Self.writeBatch)
            let result: IOResult<Int>
            do {
                result = try send(count: count)
            } catch {
                guard [EPIPE, ECONNRESET, ENOTCONN].contains(error.errno) else {
                    return fail(RemoteError(.interrupted, "\(error)"))
                }
                // The peer closed its end. What it sent before may still be queued for us (its
                // goodbye): the channel reads on, and ends at the end of file, as the peer ended
                // it. Nothing more is written.
                peerGone = true
                queue.removeAll()
                if !isWritable {
                    isWritable = true
                    inbound?.channelWritabilityChanged(true)
                }
                readable = true
                eventLoop.execute { [self] in readAvailable() }
                return
            }
            guard case .done(let written) = result, written > 0 else { return wait() }
            queue.removeFirst(written)
            if let blockedTimer {
                eventLoop.cancel(blockedTimer)
                self.blockedTimer = nil
            }
            if !isWritable && queue.count <= Self.lowWaterMark {
                isWritable = true
                inbound?.channelWritabilityChanged(true)
            }
            if written < count { return wait() }
        }
    }

    /// The peer's queue is full: watch `EPOLLOUT`, and end the channel if nothing moves for
    /// ``sendTimeout``.
    private func wait() {
        blocked = true
        watchInterest()
        if blockedTimer == nil {
            let timeout = sendTimeout
            // Held strongly until it fires or is cancelled (closing cancels it).
            blockedTimer = eventLoop.schedule(at: .now.advanced(by: timeout)) { [self] in
                guard !closed, blocked else { return }
                blockedTimer = nil
                fail(RemoteError(.timeout, "the peer has not read for \(timeout); its receive queue is full"))
            }
        }
    }

    /// One `sendmsg` for one packet, one `sendmmsg` for several (the first ``writeBatch`` of
    /// the queue): how many were written. The headers, vectors and control buffers are the
    /// channel's own, made once; the packets' bytes are pointed at, not copied.
    private func send(count: Int) throws(SystemCallError) -> IOResult<Int> {
        let buffers = sendBuffers
        var controlOffset = 0
        for index in 0..<count {
            let packet = queue[index]
            buffers.messages[index] = rv_mmsghdr()
            buffers.messages[index].msg_hdr.msg_iov = buffers.vectors + 2 * index
            buffers.messages[index].msg_hdr.msg_iovlen = 2
            var fdCount = 0
            for attachment in packet.attachments {
                guard let descriptor = attachment.descriptor else { continue }
                buffers.control.storeBytes(of: descriptor, toByteOffset: controlOffset + rv_cmsg_len(0) + fdCount * MemoryLayout<Int32>.size, as: Int32.self)
                fdCount += 1
            }
            guard fdCount > 0 else { continue }
            let length = rv_cmsg_space(fdCount * MemoryLayout<Int32>.size)
            // The fds were stored after where the header goes; the header is written over the
            // space in front of them now (cmsg data starts at CMSG_LEN(0)).
            buffers.messages[index].msg_hdr.msg_control = buffers.control + controlOffset
            buffers.messages[index].msg_hdr.msg_controllen = length
            let header = rv_cmsg_firsthdr((buffers.messages + index).pointer(to: \.msg_hdr)!)!
            header.pointee.cmsg_level = SOL_SOCKET
            header.pointee.cmsg_type = Int32(SCM_RIGHTS)
            header.pointee.cmsg_len = rv_cmsg_len(fdCount * MemoryLayout<Int32>.size)
            controlOffset += length
        }
        // The prefixes are copied into the channel's own buffer (at most 16 bytes each), the
        // bodies pointed at where they are: the queue holds them until the call returns.
        return try Self.withBodies(of: queue, upTo: count, index: 0, buffers: buffers) { () throws(SystemCallError) -> IOResult<Int> in
            if count == 1 {
                return try Syscall.sendMessage(fd, (buffers.messages + 0).pointer(to: \.msg_hdr)!).map { _ in 1 }
            }
            return try Syscall.sendMessages(fd, buffers.messages, count: count)
        }
    }

    /// Points the vectors of packets `index..<count` at their prefix (copied into `buffers`)
    /// and body for the duration of `body`.
    private static func withBodies<R>(of queue: [OutboundPacket], upTo count: Int, index: Int, buffers: SendBuffers,
                                      _ body: () throws(SystemCallError) -> R) throws(SystemCallError) -> R {
        guard index < count else { return try body() }
        let packet = queue[index]
        let prefix = buffers.prefixes + index * OutboundPacket.Prefix.capacity
        packet.prefix.withUnsafeBytes { bytes in
            if bytes.count > 0 { prefix.copyMemory(from: bytes.baseAddress!, byteCount: bytes.count) }
        }
        buffers.vectors[2 * index] = iovec(iov_base: prefix, iov_len: packet.prefix.count)
        return try packet.body.withUnsafeBytes { bytes in
            Result { () throws(SystemCallError) -> R in
                buffers.vectors[2 * index + 1] = iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count)
                return try withBodies(of: queue, upTo: count, index: index + 1, buffers: buffers, body)
            }
        }.get()
    }

    // MARK: ending

    /// The peer closed its end (`nil`), or the channel failed: closed, and the inbound stage told.
    private func end(_ error: RemoteError?) {
        peerGone = true
        closeSocket()
        let inbound = self.inbound
        self.inbound = nil
        inbound?.channelClosed(error)
    }

    private func fail(_ error: RemoteError) {
        guard !closed else { return }
        end(error)
    }

    private func closeSocket() {
        closed = true
        readiness.channel = nil
        queue.removeAll()
        if let blockedTimer { eventLoop.cancel(blockedTimer) }
        blockedTimer = nil
        // The fds of packets read but not handed out go now; while the read side is lent, the
        // reader owns the batch, and they go when it comes back.
        if !lent { batch.discardRest() }
        releaseSocket()
    }

    private func releaseSocket() {
        if lent {
            // The blocking caller's recvmsg ends (end of file); the fd stays its until it gives
            // the read side back, so its number cannot be reused under it.
            Syscall.shutdownBoth(fd)
            releaseWhenReturned = true
            return
        }
        if let registration { eventLoop.deregister(registration) }
        registration = nil
        Syscall.shutdownBoth(fd)
        Syscall.close(fd)
    }

    // MARK: lending the read side (a blocking call)

    /// Lends the read side to a blocking caller (on the loop), if nothing the loop read waits
    /// to be handed out and reading is not paused: from now on the loop does not watch
    /// `EPOLLIN` nor read; the caller reads with ``receiveLent(until:)`` and hands each packet
    /// over with ``deliverLent()``, on the loop, until ``returnReadSide()``. Packets queued in
    /// the socket come to the caller first, in order. `false`: not lent.
    package func lendReadSide() -> Bool {
        loop.preconditionInLoop("SeqpacketChannel.lendReadSide")
        guard !closed, !lent, !paused, !reading, inbound != nil, batch.next >= batch.count else { return false }
        lent = true
        readable = false
        watchInterest()
        return true
    }

    /// What ``receiveLent(until:)`` got.
    package enum LentReceipt: Sendable {
        /// A packet, or the end of file, waits to be handed over (``deliverLent()``).
        case received
        /// Nothing came before the deadline.
        case timedOut
        /// The receive failed.
        case failed(RemoteError)
        /// The socket's receive timeout could not be set: the caller cannot wait here with a
        /// deadline, and gives the read side back.
        case cannotWait
    }

    /// Blocks the calling thread (the one the read side is lent to, not the loop) in `recvmsg`
    /// until a packet, the end of file or an error comes, or `deadline` passes (`nil`: no
    /// limit). No `epoll_wait`. The deadline is the socket's receive timeout (`SO_RCVTIMEO`),
    /// set only when none is set, when the time left is shorter, or when what is set is less
    /// than half of it (a timeout left short by an earlier call): whole seconds while more than
    /// two are left, so calls with the same timeout leave it as it is. A wait that ends early
    /// waits again for what is left.
    package func receiveLent(until deadline: ContinuousClock.Instant?) -> LentReceipt {
        assert(lent, "SeqpacketChannel.receiveLent without the read side")
        batch.prepare()
        var afterReset = false
        while true {
            if let deadline {
                let left = ContinuousClock.now.duration(to: deadline)
                guard left > .zero else { return .timedOut }
                if receiveTimeout.map({ left < $0 || $0 < left / 2 }) ?? true {
                    let wait = left > .seconds(2) ? .seconds(left.components.seconds) : left
                    guard rv_set_receive_timeout(fd, wait.saturatingNanoseconds) == 0 else { return .cannotWait }
                    receiveTimeout = wait
                }
            } else if receiveTimeout != nil {
                guard rv_set_receive_timeout(fd, 0) == 0 else { return .cannotWait }
                receiveTimeout = nil
            }
            let count = rv_recvmsg_blocking(fd, (batch.messages + 0).pointer(to: \.msg_hdr)!)
            if count >= 0 {
                batch.messages[0].msg_len = UInt32(count)
                batch.received(1)
                return .received
            }
            switch errno {
            case EINTR, EAGAIN:
                // A signal, or the receive timeout: wait again for what is left, if anything.
                continue
            case ECONNRESET where !afterReset:
                // As in readBatch: the peer closed with our packets unread; what it sent comes next.
                afterReset = true
                continue
            case ECONNRESET:
                batch.messages[0].msg_len = 0
                batch.received(1)
                return .received
            case let code:
                return .failed(RemoteError(.interrupted, "recvmsg failed: \(String(cString: strerror(code)))"))
            }
        }
    }

    /// Hands the packet (or end of file) the blocking caller received to the inbound stage, as
    /// the loop's own reading would (on the loop).
    package func deliverLent() {
        loop.preconditionInLoop("SeqpacketChannel.deliverLent")
        guard batch.next < batch.count else { return }
        guard !closed, let inbound else { return batch.discardRest() }
        _ = handOutNext(to: inbound)
    }

    /// The blocking caller's receive failed: the channel ends with that error (on the loop).
    package func failLent(_ error: RemoteError) {
        loop.preconditionInLoop("SeqpacketChannel.failLent")
        fail(error)
    }

    /// Whether the inbound stage paused reading (it waits for async work): a blocking caller
    /// gives the read side back then, so the pause holds.
    package var isReadingPaused: Bool { paused }

    /// Takes the read side back (on the loop): `EPOLLIN` is watched again, and a packet that is
    /// queued already is reported at once; a channel closed meanwhile lets its socket go now.
    package func returnReadSide() {
        loop.preconditionInLoop("SeqpacketChannel.returnReadSide")
        guard lent else { return }
        lent = false
        if releaseWhenReturned {
            releaseWhenReturned = false
            batch.discardRest()
            releaseSocket()
            return
        }
        guard !closed else { return }
        // An edge that came while lent (or a hang-up) was recorded; the loop reads it now.
        if readable { eventLoop.execute { [self] in readAvailable() } }
        watchInterest()
    }
}

extension IOResult {
    /// The value transformed, or still would-block.
    func map<T>(_ transform: (Value) -> T) -> IOResult<T> {
        switch self {
        case .done(let value): .done(transform(value))
        case .wouldBlock: .wouldBlock
        }
    }
}

/// What a ``SeqpacketChannel``'s loop registration calls: the channel once started, until it
/// closes (touched on the loop only). A channel never started is held by no one but its owner,
/// and its deinit releases the socket. Readiness before ``SeqpacketChannel/start(_:)`` is not
/// reported: start reads what is queued, and a connection writes nothing that could fill the
/// peer's queue before it starts (its handshake and what waited, in the same loop job).
private final class Readiness: @unchecked Sendable {
    // @unchecked: set and read on the channel's loop only.
    var channel: SeqpacketChannel?
}
