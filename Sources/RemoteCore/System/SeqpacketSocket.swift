import CRemoteViewLinux
import Glibc
import Synchronization

/// An `AF_UNIX` `SOCK_SEQPACKET` socket carrying one ``Envelope`` per packet, its fds riding on
/// the same `sendmsg` as `SCM_RIGHTS` (received with `MSG_CMSG_CLOEXEC`), spoken packet by
/// packet from async code: the raw peer of `remoteview-check` and of the hostile tests, which
/// write what a ``Connection`` never would. A ``Connection`` runs over a ``SeqpacketChannel``
/// instead (docs/Architecture.md, "The connection core").
///
/// Non-blocking underneath: a call that would block waits on the shared ``EventLoop`` instead of
/// holding a thread, and a send waits at most ``sendTimeout`` for a peer that stopped reading.
/// At most ``maxWaitingSends`` sends wait at once: past that, a send fails at once, so a peer
/// that stopped reading never makes this process hold an unbounded number of packets.
package final class SeqpacketSocket: @unchecked Sendable {
    // @unchecked: `fd`, `registration` and `timeout` are immutable; `batch` (with the last id
    // received) is only touched by the single receiver that `state.receiving` admits; the last
    // id sent is in `numbering`; everything else is in `state`.

    /// The descriptor, owned by this object and closed when it goes away (for this module's
    /// tests to borrow).
    let fd: Int32
    /// How long a send waits for a peer that does not read.
    package let sendTimeout: Duration
    /// How many sends may wait at once for room in the peer's receive queue; one more fails
    /// at once, as *timeout*.
    package let maxWaitingSends: Int
    /// The default ``maxWaitingSends``: far above what a caller that awaits each send (or a
    /// few at once) ever reaches, and a bound on one that starts a task per event.
    package static let defaultMaxWaitingSends = 1024
    private let loop: EventLoop
    private let registration: EventLoop.Registration
    private let batch: ReceiveBatch
    /// The inbound id rule and decoding: the single receiver's.
    private var framer = EnvelopeFramer()
    private let waiters: Waiters
    /// The id of the last packet written; taken with each write (see ``send(_:written:)``).
    private let numbering = Mutex<UInt64>(0)

    private final class Waiters: Sendable {
        let state = Mutex(State())
    }

    private struct State {
        var closed = false
        /// Calls using `fd` right now; the fd is closed when this reaches 0 after ``close()``.
        var inFlight = 0
        var released = false
        var receiving = false
        var readWaiter: Waiter<Void>?
        /// The socket became readable (or hung up) while no reader waited: the next wait
        /// returns at once (the interest is edge-triggered, so that edge does not come again).
        var readable = false
        /// Woken with `true` when the socket may be writable again, `false` when it closed.
        var writeWaiters = WaiterQueue<Bool>()
        /// Whether `EPOLLOUT` is watched (only while sends wait: every packet the peer reads
        /// would be an edge otherwise).
        var watchingWrites = false
        /// The loop registration, for the handler (made before the registration exists).
        var registration: EventLoop.Registration?
    }

    /// What the registration watches: `EPOLLIN` always, `EPOLLOUT` while sends wait.
    private static func events(watchingWrites: Bool) -> UInt32 {
        EPOLLIN.rawValue | (watchingWrites ? EPOLLOUT.rawValue : 0)
    }

    /// Takes ownership of a connected seqpacket socket (made non-blocking here).
    package init(_ socket: consuming OwnedFD, sendTimeout: Duration = .seconds(10), maxWaitingSends: Int = defaultMaxWaitingSends,
                 loop: EventLoop = .shared) throws(SystemCallError) {
        let waiters = Waiters()
        try Syscall.setNonBlocking(socket.rawValue, true)
        batch = try ReceiveBatch.take()
        // Runs on the loop thread, once per round in which the socket became ready again
        // (edge-triggered, armed for good: no epoll_ctl per wait). Readable or hung up: the
        // reader is woken, or the readiness is kept for its next wait. Writable: every waiting
        // sender is woken to retry (and arms again if it still would block), and EPOLLOUT is
        // no longer watched.
        registration = try loop.register(socket, edgeTriggered: Self.events(watchingWrites: false)) { events in
            let wakesReader = events & (EPOLLIN.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0
            let wakesWriters = events & (EPOLLOUT.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0
            let (reader, writers) = waiters.state.withLock { state -> (Waiter<Void>?, [Waiter<Bool>]) in
                var reader: Waiter<Void>?
                if wakesReader {
                    reader = state.readWaiter.take()
                    if reader == nil { state.readable = true }
                }
                guard wakesWriters, !state.writeWaiters.isEmpty || state.watchingWrites else { return (reader, []) }
                if state.watchingWrites, !state.closed, let registration = state.registration {
                    state.watchingWrites = false
                    loop.watch(registration, edgeTriggered: Self.events(watchingWrites: false))
                }
                return (reader, state.writeWaiters.takeAll())
            }
            reader?.resume(returning: ())
            writers.resumeAll(returning: true)
        }
        waiters.state.withLock { [registration] in $0.registration = registration }
        self.waiters = waiters
        self.fd = socket.release()
        self.sendTimeout = sendTimeout
        self.maxWaitingSends = maxWaitingSends
        self.loop = loop
    }

    /// A connected pair, for a host and a service it is about to spawn (or for tests).
    package static func pair() throws(SystemCallError) -> SocketPair {
        let (a, b) = try Syscall.seqpacketPair(nonBlocking: false)
        return SocketPair(first: OwnedFD(adopting: a), second: OwnedFD(adopting: b))
    }

    deinit {
        // Closed first, under the lock the handler takes: a handler the loop fetched before
        // the deregistration then cannot change the registration of the closed fd (or of
        // another socket given its number).
        let release = waiters.state.withLock { state -> Bool in
            state.closed = true
            guard !state.released else { return false }
            state.released = true
            return true
        }
        if release { releaseDescriptor() }
        batch.giveBack()
    }

    // MARK: descriptor lifetime

    /// Admits one use of `fd`; `false` once closed. Pair with ``leave()``.
    private func enter() -> Bool {
        waiters.state.withLock { state in
            if state.closed { return false }
            state.inFlight += 1
            return true
        }
    }

    /// Ends one use of `fd`; the last one after ``close()`` closes it, so the number is never
    /// reused under a call in flight, and it is closed as soon as nothing uses it.
    private func leave() {
        let release = waiters.state.withLock { state in
            state.inFlight -= 1
            guard state.closed, state.inFlight == 0, !state.released else { return false }
            state.released = true
            return true
        }
        if release { releaseDescriptor() }
    }

    private func releaseDescriptor() {
        loop.deregister(registration)
        Syscall.close(fd)
    }

    // MARK: sending and receiving

    package func close() {
        let closing = waiters.state.withLock { state -> (Waiter<Void>?, [Waiter<Bool>])? in
            if state.closed { return nil }
            state.closed = true
            state.inFlight += 1  // this call's own use of fd, ended by leave() below
            return (state.readWaiter.take(), state.writeWaiters.takeAll())
        }
        guard let (reader, writers) = closing else { return }
        Syscall.shutdownBoth(fd)
        // Give up this call's use before waking anyone, so whoever returns because of the close
        // finds the fd already closed unless another call is still using it.
        leave()
        reader?.resume(returning: ())
        writers.resumeAll(returning: false)
    }

    /// Sends one envelope, numbered as it is written (see ``send(_:written:)``).
    @discardableResult
    nonisolated(nonsending) package func send(_ envelope: Envelope) async throws(RemoteError) -> UInt64 {
        try await send(envelope, written: { _ in })
    }

    /// Sends one envelope with its attachments, numbering it: its own `id` is ignored, and the
    /// packet gets the next id at the moment it is written, so ids increase in write order
    /// whichever task sends first. `written` runs with the id once written, before any later
    /// packet is. Waits while the peer's queue is full, up to ``sendTimeout``.
    @discardableResult
    nonisolated(nonsending) package func send(_ envelope: Envelope, written: (UInt64) -> Void) async throws(RemoteError) -> UInt64 {
        let packet = try EnvelopeCodec.encodeUnnumbered(envelope)
        var fds: [Int32] = []
        fds.reserveCapacity(envelope.attachments.count)
        for attachment in envelope.attachments {
            guard let fd = attachment.descriptor else {
                throw RemoteError(.invalidArgument, "\(envelope.body.name) has an attachment whose fd was already taken")
            }
            fds.append(fd)
        }
        // The deadline starts at the first time the peer's queue is full (most sends never wait).
        var deadline: ContinuousClock.Instant?
        while true {
            guard enter() else { throw RemoteError(.invalidated, "the connection was closed") }
            let result: IOResult<UInt64>
            do {
                defer { leave() }
                // The id is taken and the packet written under one lock, so ids go out in order;
                // an attempt that would block takes none.
                result = try numbering.withLock { (last: inout UInt64) throws(SystemCallError) -> IOResult<UInt64> in
                    let id = last + 1
                    guard case .done = try Self.sendPacket(fd, id: id, packet, fds) else { return .wouldBlock }
                    last = id
                    written(id)
                    return .done(id)
                }
            } catch {
                if error.errno == EPIPE || error.errno == ECONNRESET || error.errno == ENOTCONN {
                    throw RemoteError(.interrupted, "the peer closed the connection")
                }
                throw RemoteError(.interrupted, "\(error)")
            }
            switch result {
            case .done(let id): return id
            case .wouldBlock:
                if deadline == nil { deadline = .now.advanced(by: sendTimeout) }
                let writable: Writable
                do throws(WaitError) {
                    writable = try await waitWritable(until: deadline!)
                } catch .deadlinePassed {
                    throw RemoteError(.timeout, "the peer has not read for \(sendTimeout); its receive queue is full")
                } catch {
                    throw RemoteError(.cancelled, "sending \(envelope.body.name) was cancelled while the peer's queue was full")
                }
                switch writable {
                case .maybe: break
                case .closed: throw RemoteError(.invalidated, "the connection was closed")
                case .tooManyWaiting:
                    throw RemoteError(.timeout, "the peer is not reading: \(maxWaitingSends) sends already wait for room in its receive queue, \(envelope.body.name) is not sent")
                }
            }
        }
    }

    nonisolated(nonsending) package func receive() async throws(RemoteError) -> Envelope? {
        let admitted = waiters.state.withLock { state in
            if state.receiving { return false }
            state.receiving = true
            return true
        }
        precondition(admitted, "SeqpacketSocket.receive() called by two receivers at once")
        defer { waiters.state.withLock { $0.receiving = false } }
        while true {
            guard enter() else {
                // Closed: the fds of packets read but not handed out go now, not when the
                // socket object goes.
                batch.discardRest()
                return nil
            }
            let packet: IOResult<Envelope?>
            do {
                defer { leave() }
                packet = try receivePacket()
            }
            switch packet {
            case .done(let envelope):
                return envelope
            case .wouldBlock:
                do throws(WaitError) {
                    try await waitReadable()
                } catch {
                    throw RemoteError(.cancelled, "receiving was cancelled")
                }
            }
        }
    }

    // MARK: waiting

    /// Returns when the socket may be readable (or closed).
    ///
    /// - Throws: ``WaitError/cancelled`` when the receiving task is cancelled.
    nonisolated(nonsending) private func waitReadable() async throws(WaitError) {
        let waiter = Waiter<Void>()
        guard enter() else { return }
        let waits = waiters.state.withLock { state -> Bool in
            if state.closed { return false }
            if state.readable {
                // It became readable (or hung up) since the reader last looked: look again.
                state.readable = false
                return false
            }
            state.readWaiter = waiter
            return true
        }
        leave()
        guard waits else { return }
        do {
            try await waiter.wait()
        } catch {
            waiters.state.withLock { if $0.readWaiter === waiter { $0.readWaiter = nil } }
            throw error
        }
    }

    /// What a wait for room to send found.
    private enum Writable {
        /// The socket may be writable again.
        case maybe
        /// It is closed.
        case closed
        /// ``maxWaitingSends`` sends wait already; this one did not.
        case tooManyWaiting
    }

    /// Waits until the socket may be writable again, or is closed; returns at once when
    /// ``maxWaitingSends`` sends wait already.
    ///
    /// - Throws: ``WaitError`` at `deadline`, or when the sending task is cancelled.
    nonisolated(nonsending) private func waitWritable(until deadline: ContinuousClock.Instant) async throws(WaitError) -> Writable {
        let waiter = Waiter<Bool>()
        var full = false
        guard watchWrites({ state in
            if state.writeWaiters.count >= maxWaitingSends { full = true } else { state.writeWaiters.append(waiter) }
        }) else { return .closed }
        if full { return .tooManyWaiting }
        let waiters = self.waiters
        return try await waiter.wait(until: deadline, onAbandon: {
            waiters.state.withLock { $0.writeWaiters.remove(waiter) }
        }) ? .maybe : .closed
    }

    /// Records a waiting sender with `register` and watches `EPOLLOUT` if it is not watched
    /// yet, under the lock that ``close()`` and the handler take (so a close in between is
    /// seen, and the handler's unwatching cannot undo this); `false` once closed. Watching
    /// again checks readiness at once, so room that came since the failed send is reported.
    private func watchWrites(_ register: (inout State) -> Void) -> Bool {
        guard enter() else { return false }
        defer { leave() }
        return waiters.state.withLock { state -> Bool in
            if state.closed { return false }
            register(&state)
            if !state.watchingWrites, !state.writeWaiters.isEmpty {
                state.watchingWrites = true
                loop.watch(registration, edgeTriggered: Self.events(watchingWrites: true))
            }
            return true
        }
    }

    // MARK: packets

    /// Writes `packet` exactly as given, outside the numbering (it is not counted in
    /// ``lastSentID``): for a tool that tries how a peer handles a packet no sender should
    /// write (an id out of order, an unknown body). Fails at once if the queue is full.
    package func sendUnnumbered(_ packet: [UInt8]) throws(RemoteError) {
        guard enter() else { throw RemoteError(.invalidated, "the connection was closed") }
        defer { leave() }
        let result: IOResult<Int>
        do throws(SystemCallError) {
            result = try numbering.withLock { _ throws(SystemCallError) -> IOResult<Int> in
                try packet.withUnsafeBytes { bytes in Result { () throws(SystemCallError) -> IOResult<Int> in
                    try Self.sendPacket(fd, bytes, UnsafeRawBufferPointer(start: nil, count: 0), [])
                } }.get()
            }
        } catch {
            throw RemoteError(.interrupted, "\(error)")
        }
        guard case .done = result else { throw RemoteError(.timeout, "the peer's receive queue is full") }
    }

    package var lastSentID: UInt64 {
        numbering.withLock { $0 }
    }

    /// One `sendmsg` of `packet` numbered `id`: the id field and the rest as two iovecs, the fds
    /// as one `SCM_RIGHTS` message.
    private static func sendPacket(_ fd: Int32, id: UInt64, _ packet: EnvelopeCodec.UnnumberedPacket,
                                   _ fds: [Int32]) throws(SystemCallError) -> IOResult<Int> {
        try EnvelopeCodec.UnnumberedPacket.withIDField(id) { (field) throws(SystemCallError) -> IOResult<Int> in
            // (ArraySlice.withUnsafeBytes rethrows untyped, so the typed error rides in a Result.)
            try packet.bytes.withUnsafeBytes { rest in Result { () throws(SystemCallError) -> IOResult<Int> in
                try sendPacket(fd, field, rest, fds)
            } }.get()
        }
    }

    /// One `sendmsg` of the bytes of `first` then `second` as one packet (two iovecs), `fds` as
    /// one `SCM_RIGHTS` message.
    private static func sendPacket(_ fd: Int32, _ first: UnsafeRawBufferPointer, _ second: UnsafeRawBufferPointer,
                                   _ fds: [Int32]) throws(SystemCallError) -> IOResult<Int> {
        // sendmsg only reads the iovecs' bytes.
        var iov = (iovec(iov_base: UnsafeMutableRawPointer(mutating: first.baseAddress), iov_len: first.count),
                   iovec(iov_base: UnsafeMutableRawPointer(mutating: second.baseAddress), iov_len: second.count))
        return try withUnsafeMutableBytes(of: &iov) { (iovs) throws(SystemCallError) -> IOResult<Int> in
            var message = msghdr()
            message.msg_iov = iovs.baseAddress!.assumingMemoryBound(to: iovec.self)
            message.msg_iovlen = 2
            guard !fds.isEmpty else { return try Syscall.sendMessage(fd, &message) }
            let payloadLength = fds.count * MemoryLayout<Int32>.size
            let controlLength = rv_cmsg_space(payloadLength)
            let control = UnsafeMutableRawPointer.allocate(byteCount: controlLength, alignment: MemoryLayout<cmsghdr>.alignment)
            defer { control.deallocate() }
            control.initializeMemory(as: UInt8.self, repeating: 0, count: controlLength)
            message.msg_control = control
            message.msg_controllen = controlLength
            let header = rv_cmsg_firsthdr(&message)!
            header.pointee.cmsg_level = SOL_SOCKET
            header.pointee.cmsg_type = Int32(SCM_RIGHTS)
            header.pointee.cmsg_len = rv_cmsg_len(payloadLength)
            let data = UnsafeMutableRawPointer(rv_cmsg_data(header))
            for (index, descriptor) in fds.enumerated() {
                data.storeBytes(of: descriptor, toByteOffset: index * MemoryLayout<Int32>.size, as: Int32.self)
            }
            return try Syscall.sendMessage(fd, &message)
        }
    }

    /// The next envelope: from the batch the last `recvmmsg` read, or from a new batch; `nil` at
    /// end of file, or would-block.
    ///
    /// One `recvmmsg` reads every packet queued, up to ``ReceiveBatch/capacity``. When it
    /// returns fewer, the queue was empty as it returned, so once the batch is handed out this
    /// reports would-block without another call: a packet that comes later is an edge the loop
    /// reports (`readable`). A message therefore costs one system call, not the two (the packet,
    /// then `EAGAIN`) that reading until would-block costs, and pipelined messages share one.
    ///
    /// A peer that closes with unread data in its own queue leaves `ECONNRESET` pending here,
    /// and Linux reports it *before* the packets still queued for us (its goodbye, say). The
    /// error is consumed by reporting it, so read on: what is queued comes next, then end of file.
    private func receivePacket() throws(RemoteError) -> IOResult<Envelope?> {
        let batch = self.batch
        if batch.next == batch.count {
            if batch.drained {
                batch.drained = false
                return .wouldBlock
            }
            switch try readBatch() {
            case .wouldBlock: return .wouldBlock
            case .done(false): return .done(nil)  // end of file after a reset
            case .done(true): break
            }
        }
        let index = batch.next
        batch.next += 1
        do {
            guard let packet = try batch.packet(at: index) else { return .done(nil) }
            return .done(try framer.decode(packet))
        } catch {
            // Nothing after a violation is read: the fds of the rest of the batch are closed now.
            batch.discardRest()
            throw error
        }
    }

    /// One `recvmmsg` into the batch; `false` at end of file after a reset.
    private func readBatch(afterReset: Bool = false) throws(RemoteError) -> IOResult<Bool> {
        let batch = self.batch
        batch.prepare()
        let result: IOResult<Int>
        do {
            result = try Syscall.receiveMessages(fd, batch.messages, count: ReceiveBatch.capacity)
        } catch {
            if error.errno == ECONNRESET { return afterReset ? .done(false) : try readBatch(afterReset: true) }
            throw RemoteError(.interrupted, "\(error)")
        }
        // (recvmmsg returns -1 with EAGAIN rather than 0 for an empty queue; a 0 is taken as
        // would-block too, without concluding the queue was empty.)
        guard case .done(let count) = result, count > 0 else { return .wouldBlock }
        batch.received(count)
        return .done(true)
    }
}

/// Two connected descriptors: both ends of a socket pair (one for the host, one for the service
/// it spawns), or a pipe (`first` reads, `second` writes).
@frozen package struct SocketPair: ~Copyable {
    package var first: OwnedFD
    package var second: OwnedFD
}
