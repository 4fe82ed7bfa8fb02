import Logging
import Synchronization

/// The loop-confined heart of a ``Connection``: it owns the connection's
/// ``ConnectionStateMachine`` (no lock), its ``EnvelopeFramer``, the table of this side's
/// outstanding requests by id (in the machine, each holding its caller's continuation) with
/// their deadlines, and the dispatch of what the peer sends
/// (docs/Architecture.md, "The connection core"). Like async-http-client's
/// `HTTP1ClientChannelHandler`, which owns its state machine on its channel's event loop.
///
/// Everything here runs on ``loop`` (asserted in debug builds): the channel calls in there, and
/// ``Connection`` hands its calls over with `loop.run`, inline when the caller is on the loop's
/// thread already. The way back to async code is a continuation this handler resumes, or a task
/// it starts (a request handler, a route that waits).
final class ConnectionHandler: PacketInbound, @unchecked Sendable {
    // @unchecked: every stored `var` is touched on `loop` only (checked in debug builds); the
    // `let`s are set in init. What async code reads without the loop is in `status`.
    typealias Machine = ConnectionStateMachine<Outstanding, UnsafeContinuation<Result<Handshake, RemoteError>, Never>>

    let loop: any Loop
    private let channel: any PacketChannel
    private let configuration: Connection.Configuration
    private let logger: Logger
    private let responder: RequestResponder
    private let onMessage: Connection.MessageHandler
    /// Offered each one-way message first, inline on the loop (`false`: to ``onMessage``).
    private let onSynchronousMessage: (@Sendable (ServiceMessage, ConnectionContext) -> Bool)?
    private let eventSink: AsyncStream<ConnectionEvent>.Continuation
    /// What async code reads without hopping onto the loop.
    let status: ConnectionStatus
    /// The connection, for the contexts handed to handlers: held from ``run(_:connection:)``
    /// until the end is reported (as the context holds it), and never weakly, so the connection
    /// needs no side table and its every retain stays on the fast path.
    private var connection: Connection?

    private var framer = EnvelopeFramer()
    private var machine = Machine()
    /// Who handles the message families beyond requests and messages; let go at the end (they
    /// often hold the connection).
    private var routes = Routes()
    /// The context handed to every handler, once the peer's handshake is known.
    private var context: ConnectionContext?
    /// This side's handshake, once written.
    private var ours: Handshake?
    /// The peer's handshake has been read (or refused): what comes next is dispatched.
    private var handshakeRead = false
    private var handshakeTimer: LoopTimer?
    /// The requests' deadlines: a FIFO for equal timeouts and a timer wheel for the rest, under
    /// one loop timer; no timer is scheduled or cancelled per request.
    private var deadlines = DeadlineQueue()
    private var deadlineTimer: LoopTimer?
    private var deadlineTimerAt: ContinuousClock.Instant?
    /// The ids a firing of the deadline timer found due (kept for its capacity).
    private var dueIDs: [UInt64] = []
    /// What callers asked to write before ``run(_:)``: written after this side's handshake.
    private var early: [Early] = []

    private enum Early {
        case write(EnvelopeCodec.UnnumberedPacket, [Attachment], StaticString)
        case request(Outstanding, EnvelopeCodec.UnnumberedPacket, [Attachment], expectsPong: Bool)
    }
    /// Cancels that arrived before what they cancel (a caller's cancellation handler races its
    /// own hand-over), by the caller's token: what they cancel fails as it arrives. The caller
    /// takes its token back once it has its answer (``forgetCancel(token:)``), so a cancel that
    /// came after the answer does not stay. Almost always empty.
    private var earlyCancels: [UInt64] = []
    /// ``Connection/run()``'s continuation: resumed with how the connection ended.
    private var running: UnsafeContinuation<RemoteError?, Never>?
    /// The channel has ended; `outcome` is how the connection did.
    private var ended = false
    private var outcome: RemoteError?
    /// Request handlers still running after the end: the end waits for them.
    private var handlersLeft = 0
    /// What waits for the delivery task, in order (docs/Architecture.md, "The connection core").
    private var inbox: [Delivery] = []
    /// The delivery task: whether it runs, whether it is working through a batch, and its
    /// continuation while it waits for the next.
    private var deliveryStarted = false
    private var delivering = false
    private var deliveryWaiting: UnsafeContinuation<[Delivery]?, Never>?
    /// Reading is paused because the inbox is full.
    private var inboxFull = false
    /// Above this many deliveries waiting, reading pauses until the delivery task has caught up.
    static let maxInbox = 64

    /// One thing for the delivery task: a one-way message or a routed family's message with the
    /// handler to await for it (no closure is made per message), or an envelope that arrived
    /// behind one and is dispatched, in order, once the ones before it have finished.
    enum Delivery: Sendable {
        /// A one-way message; `offered`: the synchronous message handler has seen it already
        /// (and left it), so only ``onMessage`` is asked.
        case message(ServiceMessage, ConnectionContext, offered: Bool)
        case surface(Connection.SurfaceHandler, SurfaceMessage, [Attachment], ConnectionContext)
        case input(Connection.InputHandler, InputEvent, ConnectionContext)
        case share(Connection.ShareHandler, ShareMessage, [Attachment], ConnectionContext)
        case envelope(Envelope)
        /// The channel ended (`nil`: the peer's end of file) behind what is queued before it:
        /// the connection ends in its turn.
        case channelEnded(RemoteError?)
    }
    private var finished = false
    /// What the last outbox drain took, emptied: the outbox's next array.
    private var drained: [Outbox.Entry] = []
    /// Senders waiting for room (``Connection/send(_:)`` while the channel is not writable).
    private var roomWaiters: [UnsafeContinuation<Void, Never>] = []

    struct Routes {
        var surface: Connection.SurfaceHandler?
        var input: Connection.InputHandler?
        var share: Connection.ShareHandler?
    }

    init(channel: any PacketChannel, configuration: Connection.Configuration, logger: Logger,
         responder: RequestResponder, onSynchronousMessage: (@Sendable (ServiceMessage, ConnectionContext) -> Bool)?,
         onMessage: @escaping Connection.MessageHandler,
         eventSink: AsyncStream<ConnectionEvent>.Continuation, status: ConnectionStatus) {
        self.loop = channel.loop
        self.channel = channel
        self.configuration = configuration
        self.logger = logger
        self.responder = responder
        self.onMessage = onMessage
        self.onSynchronousMessage = onSynchronousMessage
        self.eventSink = eventSink
        self.status = status
    }

    // MARK: from the connection (on the loop)

    /// ``Connection/run()``: writes this side's handshake (what was asked before follows it),
    /// starts the handshake's deadline, and starts reading.
    func run(_ continuation: UnsafeContinuation<RemoteError?, Never>, connection: Connection) {
        loop.preconditionInLoop("ConnectionHandler.run")
        running = continuation
        self.connection = connection
        switch machine.run() {
        case .finish:
            // Closed before it ran.
            end(nil)
        case .handshake:
            let ours = Handshake(role: configuration.role, identifier: configuration.identifier,
                                 capabilities: configuration.capabilities, maxProtocolVersion: configuration.protocolVersions.upperBound)
            self.ours = ours
            do {
                try channel.write(try framer.encode(Envelope(body: .handshake(ours))).packet)
            } catch {
                return end(error)
            }
            // Requests and messages may follow it at once, before the peer's handshake arrives
            // (as XPC queues messages to a connection still being set up): the peer reads them
            // after the handshake, and if the handshake fails, so do they. A first request to a
            // service being launched then costs no extra wake-up and round trip.
            let early = self.early
            self.early = []
            for entry in early {
                switch entry {
                case .write(let packet, let attachments, let name):
                    write(packet, attachments: attachments, name: name)
                case .request(let call, let packet, let attachments, let expectsPong):
                    request(call, packet, attachments: attachments, expectsPong: expectsPong)
                }
            }
            // Writing what waited can end the connection (the channel closed under it).
            guard !ended else { return }
            let timeout = configuration.handshakeTimeout
            // Strong captures here and below: each is let go when its timer fires or is cancelled
            // (at the end at the latest), and a weak one would give the handler a side table.
            handshakeTimer = loop.schedule(at: loop.now.advanced(by: timeout)) { [self] in
                self.handshakeTimer = nil
                self.end(RemoteError(.timeout, "the peer sent no handshake within \(timeout)"))
            }
            channel.start(self)
        }
    }

    /// ``Connection/close(reason:)``.
    func close(reason: String) {
        loop.preconditionInLoop("ConnectionHandler.close")
        guard case .close(let sayGoodbye, let failures) = machine.close() else {
            // The peer's channel ended and its last messages wait to be delivered: this side's
            // close cuts them short.
            if machine.peerEndPending, running != nil { end(nil) }
            return
        }
        status.closing(goodbye: nil)
        // What the routes hold often holds the connection; a connection that never runs would
        // keep them for ever.
        routes = Routes()
        // Nothing but a handshake may come first, so a goodbye only follows one.
        if sayGoodbye { writeFramed(Envelope(body: .goodbye(reason: reason))) }
        let closed = RemoteError(.invalidated, "the connection was closed: \(reason)")
        fail(failures, with: closed)
        failEarly(with: closed)
        channel.close()
        // A connection that runs ends now; one that has not waits for run(), which ends at once.
        if running != nil { end(nil) }
    }

    /// Routes a message family (``Connection/route(surface:)`` …), unless the connection is
    /// closing.
    func setRoute(_ change: (inout Routes) -> Void) {
        loop.preconditionInLoop("ConnectionHandler.setRoute")
        guard !machine.isClosed else { return }
        change(&routes)
    }

    /// Writes a one-way envelope encoded by the caller (a message, surface, input or share
    /// message); before ``run(_:)`` it waits for this side's handshake. A connection closed
    /// meanwhile drops it.
    func write(_ packet: EnvelopeCodec.UnnumberedPacket, attachments: [Attachment], name: StaticString) {
        loop.preconditionInLoop("ConnectionHandler.write")
        switch machine.canSend() {
        case nil:
            early.append(.write(packet, attachments, name))
        case .failure(let error):
            logger.debug("\(name) not sent: \(error)")
        case .success:
            do {
                try channel.write(framer.frame(packet, attachments: attachments).packet)
            } catch {
                // Past the channel's bound for a peer that does not read: it has not read for
                // long, and everything after would be lost too.
                end(error)
            }
        }
    }

    /// Before the loop writes something of its own (a reply, a request, a message sent on its
    /// thread), what other threads handed over first: it may follow one of those causally
    /// while that one's drain still waits in the loop's queue (a view's commit sent from the
    /// frame loop's thread, then the settle that waited for it answered on the loop). One
    /// atomic load when nothing waits.
    @inline(__always)
    func catchUpOutbox() {
        if status.outbox.hasPending { drainOutbox() }
    }

    /// The messages other threads put in the outbox since it was last drained, written in order.
    func drainOutbox() {
        loop.preconditionInLoop("ConnectionHandler.drainOutbox")
        status.outbox.drain(into: &drained)
        for entry in drained { writeMessage(entry.packet, attachments: entry.attachments, name: entry.name) }
        drained.removeAll(keepingCapacity: true)
    }

    /// A message handed over by ``Connection/send(_:)``: counted out of the backlog, written.
    func writeMessage(_ packet: EnvelopeCodec.UnnumberedPacket, attachments: [Attachment], name: StaticString) {
        write(packet, attachments: attachments, name: name)
        status.backlog.subtract(1, ordering: .relaxed)
        resumeRoomWaitersIfRoom()
    }

    /// Sends request `call` (encoded by the caller) and enters it in the machine's table under
    /// its id; its answer, deadline or the connection's end resumes its caller.
    func request(_ call: Outstanding, _ packet: EnvelopeCodec.UnnumberedPacket, attachments: [Attachment], expectsPong: Bool) {
        loop.preconditionInLoop("ConnectionHandler.request")
        catchUpOutbox()
        if takeEarlyCancel(call.token) {
            return call.resume(.failure(RemoteError(.cancelled, "\(call.exchange) was cancelled before it was sent")))
        }
        switch machine.canSend() {
        case nil:
            early.append(.request(call, packet, attachments, expectsPong: expectsPong))
            return
        case .failure(let error):
            return call.resume(.failure(error))
        case .success:
            break
        }
        let (framed, id) = framer.frame(packet, attachments: attachments)
        do {
            try channel.write(framed)
        } catch {
            return call.resume(.failure(error))
        }
        if case .failure(let error) = machine.requestSent(id, expectsPong: expectsPong, requester: call) {
            return call.resume(.failure(error))
        }
        if let deadline = call.deadline { addDeadline(deadline, id: id) }
    }

    // MARK: a blocking call (docs/Architecture.md, "The blocking call")

    /// What a blocking caller (``Connection/requestSync(_:timeout:)``) does next.
    enum BlockingStep: Sendable {
        /// Read: the channel's read side is lent to the caller, which receives on its own thread
        /// and hands what it got to ``lentReceived(_:on:for:token:deadline:)``.
        case read(SeqpacketChannel)
        /// Wait for the result: the loop finishes the call (its answer, its deadline, or the
        /// connection's end). `timer` watches a deadline that only the caller watched before;
        /// the caller cancels it once it has its result.
        case wait(timer: LoopTimer?)
    }

    /// Sends a blocking caller's request: with the read side lent to the caller when nothing
    /// stands between the socket and the caller's reply (the connection is open, no delivery
    /// waits, reading is not paused), else the loop's way, as ``request(_:_:attachments:expectsPong:)``.
    func requestBlocking(_ result: BlockingResult<Result<Envelope, RemoteError>>, token: UInt64, exchange: Exchange,
                         timeout: Duration?, deadline: ContinuousClock.Instant?,
                         _ packet: EnvelopeCodec.UnnumberedPacket, attachments: [Attachment]) -> BlockingStep {
        loop.preconditionInLoop("ConnectionHandler.requestBlocking")
        catchUpOutbox()
        guard case .success = machine.canSend(), replyWouldBeDispatchedAtOnce,
              let lendable = channel as? SeqpacketChannel, lendable.lendReadSide() else {
            request(Outstanding(caller: .thread(result), token: token, exchange: exchange, timeout: timeout, deadline: deadline),
                    packet, attachments: attachments, expectsPong: false)
            return .wait(timer: nil)
        }
        // The caller watches its own deadline while it reads: the queue has no entry for it.
        let call = Outstanding(caller: .thread(result), token: token, exchange: exchange, timeout: timeout, deadline: nil)
        let (framed, id) = framer.frame(packet, attachments: attachments)
        do {
            try channel.write(framed)
        } catch {
            lendable.returnReadSide()
            call.resume(.failure(error))
            return .wait(timer: nil)
        }
        if case .failure(let error) = machine.requestSent(id, expectsPong: false, requester: call) {
            lendable.returnReadSide()
            call.resume(.failure(error))
            return .wait(timer: nil)
        }
        return .read(lendable)
    }

    /// What the blocking caller's receive got goes on as the loop's own reading would; then the
    /// caller reads on, or the read side comes back to the loop (the call is finished, the
    /// connection ended, or what came must wait for the delivery task, so the reply may too) and
    /// the caller waits for the loop to finish the call.
    func lentReceived(_ receipt: SeqpacketChannel.LentReceipt, on lent: SeqpacketChannel,
                      for result: BlockingResult<Result<Envelope, RemoteError>>, token: UInt64,
                      deadline: ContinuousClock.Instant?) -> BlockingStep {
        loop.preconditionInLoop("ConnectionHandler.lentReceived")
        var readOn = true
        switch receipt {
        case .received: lent.deliverLent()
        case .failed(let error): lent.failLent(error)
        case .timedOut: blockingCallTimedOut(token: token)
        case .cannotWait: readOn = false
        }
        if readOn, !result.isComplete, replyWouldBeDispatchedAtOnce, !lent.isReadingPaused { return .read(lent) }
        lent.returnReadSide()
        guard !result.isComplete, let deadline else { return .wait(timer: nil) }
        return .wait(timer: loop.schedule(at: deadline) { [self] in blockingCallTimedOut(token: token) })
    }

    /// A blocking caller's deadline passed: its request times out (the peer is sent a cancel),
    /// or, kept for after this side's handshake, fails. Nothing when it has finished.
    func blockingCallTimedOut(token: UInt64) {
        loop.preconditionInLoop("ConnectionHandler.blockingCallTimedOut")
        if let id = machine.outstandingID(where: { $0.token == token }) {
            requestTimedOut(id)
        } else if let kept = takeEarlyRequest(token: token) {
            kept.resume(.failure(RemoteError(.timeout, "no reply to \(kept.exchange) within \(kept.timeout.map { "\($0)" } ?? "its deadline"): the connection never opened")))
        }
    }

    /// The request with `token` kept for after this side's handshake, taken out of the list.
    private func takeEarlyRequest(token: UInt64) -> Outstanding? {
        guard let index = early.firstIndex(where: { if case .request(let kept, _, _, _) = $0 { kept.token == token } else { false } }),
              case .request(let kept, _, _, _) = early.remove(at: index) else { return nil }
        return kept
    }

    /// Nothing stands between the socket and a blocking caller's reply: the connection is
    /// open and no delivery waits, so the reply would be dispatched as it is read.
    private var replyWouldBeDispatchedAtOnce: Bool {
        !ended && !delivering && inbox.isEmpty
    }

    // MARK: request deadlines

    /// The cancels waiting for what they cancel (for tests).
    var earlyCancelCount: Int { earlyCancels.count }

    /// The entries in the deadline queue, and those of them in its wheel (for tests).
    var waitingDeadlines: (all: Int, inWheel: Int) { (deadlines.count, deadlines.wheelEntries) }

    /// A request of the machine's table has finished: its deadline's entry no longer counts.
    private func deadlineFinished(_ call: Outstanding) {
        if call.deadline != nil { deadlines.finished() }
    }

    private func addDeadline(_ deadline: ContinuousClock.Instant, id: UInt64) {
        deadlines.add(deadline, id: id)
        armDeadlineTimer()
    }

    /// Watches the first deadline with the one timer, unless it already fires no later.
    private func armDeadlineTimer() {
        guard let first = deadlines.nextDue else { return }
        if let at = deadlineTimerAt, at <= first { return }
        if let deadlineTimer { loop.cancel(deadlineTimer) }
        deadlineTimerAt = first
        deadlineTimer = loop.schedule(at: first) { [self] in deadlinesDue() }
    }

    /// Drops the entries of requests that have finished (answered, cancelled, failed), as the
    /// queue finds them.
    private func dropFinishedDeadlines() {
        deadlines.dropFinished { machine.isOutstanding($0) }
    }

    /// The timer came due: every request whose deadline has passed times out.
    private func deadlinesDue() {
        loop.preconditionInLoop("ConnectionHandler.deadlinesDue")
        deadlineTimer = nil
        deadlineTimerAt = nil
        var due = dueIDs
        dueIDs = []
        deadlines.takeDue(now: loop.now, into: &due)
        for id in due where !ended {
            requestTimedOut(id)  // counted out there; nothing when it was answered
        }
        due.removeAll(keepingCapacity: true)
        dueIDs = due
        guard !ended else { return }
        dropFinishedDeadlines()
        armDeadlineTimer()
    }

    /// The caller with `token` was cancelled: its request fails now and the peer is sent a
    /// cancel (one kept for after this side's handshake just fails), or its wait for the peer's
    /// handshake fails. A cancel for something not here yet waits for it (``earlyCancels``).
    func cancel(token: UInt64) {
        loop.preconditionInLoop("ConnectionHandler.cancel")
        if let id = machine.outstandingID(where: { $0.token == token }) {
            guard let requester = machine.requestEnded(id) else { return }
            complete(requester, .failure(RemoteError(.cancelled, "\(requester.exchange) was cancelled")))
            writeBestEffort(Envelope(body: .cancel(requestID: id)))
        } else if let kept = takeEarlyRequest(token: token) {
            kept.resume(.failure(RemoteError(.cancelled, "\(kept.exchange) was cancelled before it was sent")))
        } else if let opener = machine.abandon(opener: token) {
            opener.resumeInOrder(returning: .failure(RemoteError(.cancelled, "cancelled while waiting for the peer's handshake")))
        } else {
            earlyCancels.append(token)
        }
    }

    /// Whether a cancel for `token` came before what it cancels (taken, if so).
    private func takeEarlyCancel(_ token: UInt64) -> Bool {
        guard !earlyCancels.isEmpty, let index = earlyCancels.firstIndex(of: token) else { return false }
        earlyCancels.remove(at: index)
        return true
    }

    /// The cancelled caller with `token` has its answer: a cancel of it that came too late to
    /// find it goes.
    func forgetCancel(token: UInt64) {
        loop.preconditionInLoop("ConnectionHandler.forgetCancel")
        guard !earlyCancels.isEmpty else { return }
        earlyCancels.removeAll { $0 == token }
    }

    private func requestTimedOut(_ id: UInt64) {
        guard let requester = machine.requestEnded(id) else { return }
        deadlineFinished(requester)
        requester.resume(.failure(RemoteError(.timeout, "no reply to \(requester.exchange) within \(requester.timeout.map { "\($0)" } ?? "its deadline")")))
        writeBestEffort(Envelope(body: .cancel(requestID: id)))
    }

    /// The caller with `token` waits for the peer's handshake.
    func waitForOpen(_ continuation: UnsafeContinuation<Result<Handshake, RemoteError>, Never>, token: UInt64) {
        loop.preconditionInLoop("ConnectionHandler.waitForOpen")
        if takeEarlyCancel(token) {
            return continuation.resumeInOrder(returning: .failure(RemoteError(.cancelled, "cancelled while waiting for the peer's handshake")))
        }
        switch machine.openness(continuation, token: token) {
        case .ready(let peer): continuation.resumeInOrder(returning: .success(peer))
        case .failed(let error): continuation.resumeInOrder(returning: .failure(error))
        case .wait: break
        }
    }

    /// A sender waits until the channel takes more (or the connection ends).
    func waitForRoom(_ continuation: UnsafeContinuation<Void, Never>) {
        loop.preconditionInLoop("ConnectionHandler.waitForRoom")
        if ended || status.hasRoom || status.isClosed.load(ordering: .relaxed) { return continuation.resumeInOrder() }
        roomWaiters.append(continuation)
    }

    // MARK: from the channel (on the loop)

    func channelRead(_ packet: InboundPacket) {
        guard !ended else { return }
        // A request, reply or message stays where it was unpacked until it is handed on: its
        // type and payload are copied then, and a reply nobody waits for any more never is.
        defer { framer.endPacket() }
        let decoded: EnvelopeCodec.Decoded
        do {
            decoded = try framer.decodeInPlace(packet)
        } catch {
            return end(error)
        }
        if !handshakeRead { return handshakeArrived(decoded.envelope) }
        // Behind a handler still running, everything waits its turn, so nothing the peer sent
        // after a message is handled before it (a settle's reply never overtakes the commits
        // before it).
        if delivering || !inbox.isEmpty { return deliver(.envelope(decoded.envelope)) }
        do {
            let delivery = switch decoded {
            case .serviceMessage(let view): try dispatch(view)
            case .envelope(let envelope): try dispatch(envelope)
            }
            if let delivery { deliver(delivery) }
        } catch {
            end(error)
        }
    }

    /// The channel ended. What the peer sent before that and still waits for the delivery
    /// task (its last state, a message, its goodbye) is delivered first, as XPC delivers a
    /// connection's messages before its error: the end takes its turn. What waits for an
    /// answer fails at once, since none can come.
    ///
    /// Only the peer's end of file waits so; a failure (a send that timed out on a peer that
    /// stopped reading, a read error) ends the connection at once.
    func channelClosed(_ error: RemoteError?) {
        if error == nil, !ended, delivering || !inbox.isEmpty {
            // Answers that came before the end are delivered to their callers in their turn; a
            // goodbye among what waits says the peer closed in order.
            var answered: Set<UInt64> = []
            var goodbye: String?
            for case .envelope(let envelope) in inbox {
                if envelope.body.isReply, let replyTo = envelope.replyTo { answered.insert(replyTo) }
                if case .goodbye(let reason) = envelope.body, goodbye == nil { goodbye = reason }
            }
            if let (failures, failure) = machine.peerEnded(nil, answered: answered, goodbye: goodbye) {
                // Nothing more goes out: a sender gets the error, and one that waits for room
                // stops waiting (the channel will take nothing more).
                status.peerEnded(failure)
                releaseRoomWaiters()
                fail(failures, with: failure)
                deliver(.channelEnded(nil))
                return
            }
        }
        end(error)
    }

    func channelWritabilityChanged(_ isWritable: Bool) {
        status.writable.store(isWritable, ordering: .relaxed)
        if isWritable { resumeRoomWaitersIfRoom() }
    }

    private func resumeRoomWaitersIfRoom() {
        guard status.hasRoom else { return }
        releaseRoomWaiters()
    }

    /// Lets every sender waiting for room look again (there is room, the connection ended, or
    /// one of them was cancelled: the others wait again).
    func releaseRoomWaiters() {
        loop.preconditionInLoop("ConnectionHandler.releaseRoomWaiters")
        guard !roomWaiters.isEmpty else { return }
        let waiters = roomWaiters
        roomWaiters = []
        for waiter in waiters { waiter.resumeInOrder() }
    }

    // MARK: handshake and dispatch

    private func handshakeArrived(_ first: Envelope) {
        handshakeRead = true
        if let handshakeTimer { loop.cancel(handshakeTimer) }
        handshakeTimer = nil
        guard case .handshake(let theirs) = first.body else {
            return end(refuse(.unexpected, "expected a handshake first, got \(first.body.name)"))
        }
        switch machine.handshakeReceived(theirs, ours: ours!, expecting: configuration.expectedPeerIdentifier,
                                         lowestVersion: configuration.protocolVersions.lowerBound) {
        case .open(let openers):
            guard let connection else { return end(RemoteError(.invalidated, "the connection was released while running")) }
            context = ConnectionContext(connection: connection, peer: theirs, logger: logger)
            status.opened(theirs)
            for opener in openers { opener.resumeInOrder(returning: .success(theirs)) }
            logger.debug("connected to \(theirs.role) \(theirs.identifier.escapedForTerminal()) (protocol \(ours!.agreedVersion(with: theirs)))")
            eventSink.yield(.connected(theirs))
        case .refuse(let violation):
            end(violation)
        case .ignore:
            eventSink.yield(.connected(theirs))  // as when open: the handshake did complete
        }
    }

    /// A protocol violation this side reports to the peer with `code` (not the default, malformed).
    private func refuse(_ code: ProtocolErrorCode, _ reason: String) -> RemoteError {
        machine.refuse(code)
        return RemoteError(.protocolViolation, reason)
    }

    /// Handles one envelope from the peer, once open: on the loop, except a one-way message the
    /// synchronous message handler does not take and the routed families, whose handler it
    /// returns for the delivery task to await (in order, behind what it awaits already).
    private func dispatch(_ envelope: Envelope) throws(RemoteError) -> Delivery? {
        switch envelope.body {
        case .handshake:
            throw refuse(.unexpected, "a second handshake (envelope \(envelope.id))")
        case .goodbye(let reason):
            logger.debug("the peer said goodbye: \(reason.escapedForTerminal())")
            let failures = machine.goodbyeReceived(reason)
            status.closing(goodbye: reason)
            fail(failures, with: RemoteError(.interrupted, "the peer closed the connection: \(reason.escapedForTerminal())"))
            channel.close()
            end(nil)
        case .protocolError(let code, let reason):
            throw RemoteError(.protocolViolation, "the peer reported a protocol error (\(code)): \(reason.escapedForTerminal())")
        case .ping:
            writeBestEffort(Envelope(replyTo: envelope.id, body: .pong(nonce: 0)))
        case .pong, .reply, .failure:
            try answerArrived(to: envelope.replyTo!, kind: envelope.body.name) { envelope }
        case .request(let type, let payload):
            try startHandler(for: ServiceMessage(type: type, payload: payload, attachments: envelope.attachments), id: envelope.id)
        case .message(let type, let payload):
            return messageArrived(ServiceMessage(type: type, payload: payload, attachments: envelope.attachments))
        case .cancel(let requestID):
            machine.cancelReceived(requestID)?.cancel()
        case .surface(let message):
            guard message.sender != configuration.role else {
                throw refuse(.unexpected, "\(message.name) may only be sent by the \(message.sender), and this side is the \(configuration.role)")
            }
            guard let handler = routes.surface else {
                throw refuse(.unexpected, "\(message.name) on a connection that carries no surface")
            }
            return .surface(handler, message, envelope.attachments, context!)
        case .input(let event):
            guard configuration.role == .service else {
                throw refuse(.unexpected, "\(event.name) is input, which only the host sends, and this side is the host")
            }
            guard let handler = routes.input else {
                throw refuse(.unexpected, "\(event.name) on a connection that carries no view")
            }
            return .input(handler, event, context!)
        case .share(let message):
            guard message.sender != configuration.role else {
                throw refuse(.unexpected, "\(message.name) may only be sent by the \(message.sender), and this side is the \(configuration.role)")
            }
            guard let handler = routes.share else {
                throw refuse(.unexpected, "\(message.name) on a connection that carries no share")
            }
            return .share(handler, message, envelope.attachments, context!)
        }
        return nil
    }

    /// Handles a request, reply or message from the peer, once open, as ``dispatch(_:)-(Envelope)``
    /// does, copying its type and payload out of the arena only where they are handed on.
    private func dispatch(_ view: EnvelopeCodec.ServiceMessageView) throws(RemoteError) -> Delivery? {
        switch view.kind {
        case .reply:
            try answerArrived(to: view.replyTo!, kind: "reply") { view.envelope }
        case .request:
            try startHandler(for: view.message, id: view.id)
        case .message:
            return messageArrived(view.message)
        }
        return nil
    }

    /// A one-way message, dispatched in its turn (nothing before it still being handled): the
    /// synchronous handler takes it inline, or it goes to the delivery task. Not on a thread
    /// that borrowed the loop for a blocking call: no handler runs there.
    private func messageArrived(_ message: ServiceMessage) -> Delivery? {
        guard let onSynchronousMessage else { return .message(message, context!, offered: true) }
        if loop.isBorrowed { return .message(message, context!, offered: false) }
        if onSynchronousMessage(message, context!) { return nil }
        return .message(message, context!, offered: true)
    }

    /// An answer (reply, failure or pong) to request `replyTo` arrived: its caller gets
    /// `answer()` (made only then), unless the request timed out or was cancelled.
    private func answerArrived(to replyTo: UInt64, kind: String, _ answer: () -> Envelope) throws(RemoteError) {
        guard replyTo <= framer.lastSentID else {
            throw RemoteError(.protocolViolation, "\(kind) to envelope \(replyTo), which was never sent")
        }
        switch machine.answerReceived(to: replyTo, isPong: kind == "pong", kind: kind) {
        case .deliver(let requester): complete(requester, .success(answer()))
        case .drop: break  // an answer to a request that timed out or was cancelled
        case .violation(let error): throw error
        }
    }

    // MARK: the delivery task

    /// Hands `delivery` to the connection's delivery task, in order behind what waits already.
    /// The task is started on first use; when it waits for work, it is resumed with what is
    /// queued (a batch, not one at a time). A full inbox pauses reading until it has caught up.
    private func deliver(_ delivery: Delivery) {
        inbox.append(delivery)
        if let waiting = deliveryWaiting {
            deliveryWaiting = nil
            delivering = true
            let batch = inbox
            inbox = []
            waiting.resumeInOrder(returning: batch)
        } else if !deliveryStarted {
            deliveryStarted = true
            startDeliveryTask()
        }
        if inbox.count >= Self.maxInbox && !inboxFull {
            inboxFull = true
            channel.pauseReading()
        }
    }

    /// The delivery task: it awaits the message handler and the routes one at a time, in
    /// order, and hands envelopes that came behind them back to the loop. It prefers the loop's
    /// executor where the loop is one (``EventLoop``): a handler starts on the loop's thread, in
    /// the round that read its message, and a handler that does not
    /// suspend costs no thread hand-off.
    private func startDeliveryTask() {
        // On the loop's thread throughout: it prefers the loop's executor, and comes back to it
        // after every handler, wherever that went meanwhile.
        Task(executorPreference: loop) { [self] in
            while let batch = await nextDeliveries() {
                for delivery in batch {
                    loop.preconditionInLoop("the delivery task")
                    // Once the connection has ended, nothing more is handled (as nothing more
                    // is read).
                    if ended { break }
                    if case .channelEnded(let error) = delivery {
                        end(error)
                        continue
                    }
                    var next = delivery
                    if case .envelope(let envelope) = delivery {
                        // It came behind a handler: dispatched now, in order; a handler it
                        // brings is awaited here, before what came after it.
                        do throws(RemoteError) {
                            guard let dispatched = try dispatch(envelope) else { continue }
                            next = dispatched
                        } catch {
                            end(error)
                            continue
                        }
                    }
                    do throws(RemoteError) {
                        try await perform(next)
                    } catch {
                        end(error)
                    }
                }
            }
            deliveryEnded()
        }
    }

    /// Awaits the handler of one delivery (never an envelope: those are dispatched first).
    private func perform(_ delivery: Delivery) async throws(RemoteError) {
        switch delivery {
        case .message(let message, let context, let offered):
            // Not offered (read by a thread borrowing the loop): offered now, on the loop.
            if !offered, let onSynchronousMessage, onSynchronousMessage(message, context) { return }
            await onMessage(message, context)
        case .surface(let handler, let message, let attachments, let context): try await handler(message, attachments, context)
        case .input(let handler, let event, let context): await handler(event, context)
        case .share(let handler, let message, let attachments, let context): try await handler(message, attachments, context)
        case .envelope: preconditionFailure("an envelope is dispatched before it is performed")
        case .channelEnded: preconditionFailure("the channel's end is taken in the delivery loop")
        }
    }

    /// The delivery task's next batch, once there is one; `nil` once the connection has ended.
    private func nextDeliveries() async -> [Delivery]? {
        await withOrderedContinuation { (continuation: UnsafeContinuation<[Delivery]?, Never>) in
            loop.run { self.deliveryWaits(continuation) }
        }
    }

    private func deliveryWaits(_ continuation: UnsafeContinuation<[Delivery]?, Never>) {
        if ended { return continuation.resumeInOrder(returning: nil) }
        if inboxFull {
            inboxFull = false
            channel.resumeReading()
        }
        guard inbox.isEmpty else {
            delivering = true
            let batch = inbox
            inbox = []
            return continuation.resumeInOrder(returning: batch)
        }
        delivering = false
        deliveryWaiting = continuation
    }

    private func deliveryEnded() {
        deliveryStarted = false
        finishIfDone()
    }

    private func startHandler(for request: @autoclosure () -> ServiceMessage, id: UInt64) throws(RemoteError) {
        guard try machine.requestReceived(id, limit: configuration.maxIncomingRequests).get() == .start else { return }
        let shared = configuration.sharedIncomingRequests
        if let shared, !shared.reserve(1) {
            machine.handlerFinished(id)
            throw RemoteError(.protocolViolation, "more than \(shared.limit) requests outstanding at once across the process's connections")
        }
        let message = request()  // copied out of the arena now that a handler takes it
        let context = self.context!
        if loop.isBorrowed {
            // Read by a thread blocked in a call of its own, which borrows the loop: no handler
            // runs on that thread (as XPC runs none on a thread blocked in a call), so the loop
            // starts this one, synchronous form first, in a task that prefers it.
            let handoff = Handoff(message)
            let loop = self.loop
            let task = Task(executorPreference: loop) { [self] in
                await answer(handoff, id: id, context, triedSynchronously: false, synchronousFirst: true)
                shared?.release(1)
                loop.run { [self] in handlerFinished(id) }
            }
            machine.handlerStarted(id, task: task)
            return
        }
        var triedSynchronously = false
        if let immediate = responder.immediate {
            // A synchronous handler answers here, inline on the loop: its reply joins what this
            // round writes (one send for the read batch's replies), with no task and no hand-off.
            let outcome: Result<ServiceMessage, any Error>?
            (outcome, triedSynchronously) = Self.trySynchronously(immediate, message, context)
            if let outcome {
                machine.handlerFinished(id)
                shared?.release(1)
                let (reply, attachments) = Self.reply(to: id, outcome, of: message.type, logger: logger)
                writeReply(reply, attachments: attachments)
                return
            }
            // Left to the asynchronous handler (it must wait for something).
        }
        // The handler starts at once, on the loop's thread, and runs here until it first
        // suspends, as an XPC handler runs on its connection's queue: a handler that answers
        // without waiting costs no thread hand-off. The request travels in a handoff and the
        // work runs in answer()'s own frame, so every fd of the request and the reply is
        // released before the task ends (which the end of the connection awaits). A handler
        // that finished before its task was recorded is never recorded.
        let handoff = Handoff(message)
        let loop = self.loop
        let tried = triedSynchronously
        let task = Task.immediate { [self] in
            await answer(handoff, id: id, context, triedSynchronously: tried)
            shared?.release(1)
            loop.run { [self] in handlerFinished(id) }
        }
        machine.handlerStarted(id, task: task)
    }

    private func handlerFinished(_ id: UInt64) {
        machine.handlerFinished(id)
    }

    /// Runs the request handler for request `id` (its synchronous form first when asked: the
    /// task then runs on the loop) and sends its reply or failure (off the loop once the
    /// handler has suspended).
    private func answer(_ handoff: Handoff<ServiceMessage>, id: UInt64, _ context: ConnectionContext, triedSynchronously: Bool,
                        synchronousFirst: Bool = false) async {
        guard let message = handoff.take() else { return }
        var outcome: Result<ServiceMessage, any Error>?
        var tried = triedSynchronously
        if synchronousFirst, let immediate = responder.immediate {
            (outcome, tried) = Self.trySynchronously(immediate, message, context)
        }
        if outcome == nil {
            do {
                outcome = .success(try await responder.later(message, context, tried))
            } catch {
                outcome = .failure(error)
            }
        }
        guard let outcome, !Task.isCancelled else { return }
        let (reply, attachments) = Self.reply(to: id, outcome, of: message.type, logger: logger)
        loop.run { self.writeReply(reply, attachments: attachments) }
    }

    /// Offers a request to the synchronous handler: its outcome (`nil`: left to the `async`
    /// one), and whether it saw the request (so the `async` one is told).
    private static func trySynchronously(_ immediate: @Sendable (ServiceMessage, ConnectionContext) throws -> RequestResponder.Immediate,
                                         _ message: ServiceMessage, _ context: ConnectionContext) -> (Result<ServiceMessage, any Error>?, tried: Bool) {
        do {
            switch try immediate(message, context) {
            case .reply(let reply): return (.success(reply), false)
            case .declined: return (nil, true)
            case .notTried: return (nil, false)
            }
        } catch {
            return (.failure(error), false)
        }
    }

    /// What a handler's outcome for request `id` sends back, encoded (where the handler
    /// finished), with its fds: its reply, the ``ServiceFailure`` it threw, or any other error as
    /// a failure in the domain `RemoteView.HandlerError`. A reply that cannot be encoded is
    /// replaced by a failure saying so.
    private static func reply(to id: UInt64, _ outcome: Result<ServiceMessage, any Error>, of type: String,
                              logger: Logger) -> (EncodedReply, [Attachment]) {
        let body: Envelope.Body, attachments: [Attachment]
        switch outcome {
        case .success(let reply):
            (body, attachments) = (.reply(type: reply.type, payload: reply.payload), reply.attachments)
        case .failure(let failure as ServiceFailure):
            (body, attachments) = (.failure(failure), [])
        case .failure(let error):
            (body, attachments) = (.failure(ServiceFailure(domain: "RemoteView.HandlerError", code: 1, message: "\(error)")), [])
        }
        return (encodeReply(to: id, body, attachments: attachments, of: type, logger: logger), attachments)
    }

    /// The reply to request `id`, encoded; one that cannot be is replaced by a failure saying so.
    private static func encodeReply(to id: UInt64, _ body: Envelope.Body, attachments: [Attachment], of type: String,
                                    logger: Logger) -> EncodedReply {
        do throws(RemoteError) {
            return .packet(try EnvelopeCodec.encodeUnnumbered(Envelope(replyTo: id, body: body, attachments: attachments)))
        } catch {
            logger.error("reply to \"\(type.escapedForTerminal())\" cannot be sent: \(error.reason)")
            return .replaced(Envelope(replyTo: id, body: .failure(ServiceFailure(domain: ServiceFailure.frameworkDomain, code: ServiceFailure.FrameworkCode.replyNotSent,
                                                                                message: "the reply could not be sent: \(error.reason)"))))
        }
    }

    /// Writes an encoded reply, or the failure that replaces one that could not be encoded.
    private func writeReply(_ reply: EncodedReply, attachments: [Attachment]) {
        catchUpOutbox()
        switch reply {
        case .packet(let packet): write(packet, attachments: attachments, name: "reply")
        case .replaced(let failure): writeBestEffort(failure)
        }
    }

    /// A reply encoded, or the failure envelope that replaces one too large to send.
    enum EncodedReply: Sendable {
        case packet(EnvelopeCodec.UnnumberedPacket)
        case replaced(Envelope)
    }

    /// Writes an envelope the connection makes itself (a pong, a cancel, a failure reply) while
    /// it may send; one that cannot be written is only logged.
    private func writeBestEffort(_ envelope: Envelope) {
        guard case .success = machine.canSend() else { return }
        writeFramed(envelope)
    }

    /// Writes an envelope the connection makes itself, whatever the state (a goodbye and a
    /// protocol error go as the connection closes, before the channel does).
    private func writeFramed(_ envelope: Envelope) {
        do {
            try channel.write(try framer.encode(envelope).packet)
        } catch {
            logger.debug("could not send \(envelope.body.name): \(error)")
        }
    }

    // MARK: ending

    /// Fails what waits for something the connection can no longer carry.
    private func fail(_ failures: Machine.Failures, with error: RemoteError) {
        for opener in failures.openers { opener.resumeInOrder(returning: .failure(error)) }
        for requester in failures.requests { complete(requester, .failure(error)) }
    }

    /// Fails the requests asked for before ``run(_:)``, and forgets the messages.
    private func failEarly(with error: RemoteError) {
        let early = self.early
        self.early = []
        for case .request(let call, _, _, _) in early { call.resume(.failure(error)) }
    }

    /// Resumes a requester taken out of the machine's table; its deadline's entry goes once it
    /// is first in line.
    private func complete(_ requester: Outstanding, _ result: Result<Envelope, RemoteError>) {
        requester.resume(result)
        if !ended { deadlineFinished(requester) }
        dropFinishedDeadlines()
    }

    /// The connection ends: at the peer's end of file or goodbye (`nil`), this side's close, or
    /// with `error`. Tells the peer of a violation it found, fails what waits, cancels the
    /// request handlers; ``Connection/run()`` returns once they and the routes have finished.
    private func end(_ error: RemoteError?) {
        guard !ended else { return }
        ended = true
        if let handshakeTimer { loop.cancel(handshakeTimer) }
        handshakeTimer = nil
        if let deadlineTimer { loop.cancel(deadlineTimer) }
        deadlineTimer = nil
        deadlineTimerAt = nil
        deadlines.removeAll()
        let ending = machine.channelEnded(error)
        outcome = ending.outcome
        if let code = ending.protocolError, let outcome = ending.outcome {
            logger.error("protocol violation by the peer: \(outcome.reason)")
            writeFramed(Envelope(body: .protocolError(code, reason: outcome.reason)))
        }
        channel.close()
        status.closed(ending.outcome)
        fail(ending.failures, with: ending.failure)
        releaseRoomWaiters()
        failEarly(with: ending.failure)
        // The delivery task finishes what it holds, then ends; what waited for it is dropped.
        inbox = []
        if let waiting = deliveryWaiting {
            deliveryWaiting = nil
            waiting.resumeInOrder(returning: nil)
        }
        // Handlers hold what the routes hold; both are let go once nothing can call them.
        handlersLeft = ending.handlers.count
        for handler in ending.handlers { handler.cancel() }
        if !ending.handlers.isEmpty {
            let handlers = ending.handlers
            Task { [self] in
                for handler in handlers { await handler.value }
                loop.run {
                    self.handlersLeft = 0
                    self.finishIfDone()
                }
            }
        }
        finishIfDone()
    }

    private func finishIfDone() {
        guard ended, !finished, handlersLeft == 0, !deliveryStarted else { return }
        finished = true
        // Reported in a later job, once what ended it has unwound: the packet that broke the
        // protocol (and its fds) is gone by then, so whoever awaits run() finds nothing of it.
        loop.execute { [self] in reportEnd() }
    }

    private func reportEnd() {
        routes = Routes()
        context = nil
        connection = nil
        if let outcome { logger.debug("closed: \(outcome)") }
        eventSink.yield(.closed(outcome))
        eventSink.finish()
        let running = self.running
        self.running = nil
        running?.resumeInOrder(returning: outcome)
    }
}

/// What one of this side's requests is, for the errors that name it: described only when an
/// error does, so a request that is answered builds no string.
enum Exchange: Sendable, CustomStringConvertible {
    case request(type: String)
    case ping

    var description: String {
        switch self {
        case .request(let type): "request \"\(type.escapedForTerminal())\""
        case .ping: "ping"
        }
    }
}

/// One of this side's requests, waiting for its answer: a plain value in the machine's table,
/// under the request's id, holding its caller's continuation. Made by the caller, then the
/// loop's; resumed exactly once, by whoever takes it out of the table (or out of the requests
/// kept for after this side's handshake). The caller names it by `token` when it is cancelled.
struct Outstanding: Sendable {
    /// Who waits: a task, or a thread blocked in ``Connection/requestSync(_:timeout:)``.
    enum Caller: Sendable {
        case task(UnsafeContinuation<Result<Envelope, RemoteError>, Never>)
        case thread(BlockingResult<Result<Envelope, RemoteError>>)
    }
    let caller: Caller
    let token: UInt64
    let exchange: Exchange
    let timeout: Duration?
    /// The deadline the handler's queue watches (`nil` for a blocking caller that reads for
    /// itself and watches its own).
    let deadline: ContinuousClock.Instant?

    func resume(_ result: Result<Envelope, RemoteError>) {
        switch caller {
        case .task(let continuation): continuation.resumeInOrder(returning: result)
        case .thread(let waiting): waiting.complete(result)
        }
    }
}

/// What async code may read of a connection without hopping onto its loop: published by the
/// handler as the connection changes (its one lock, taken once per change and per read), and
/// the sender's backlog and the channel's writability (atomics).
final class ConnectionStatus: Sendable {
    struct Snapshot: Sendable {
        var peer: Handshake?
        var open = false
        var closed = false
        var goodbye: String?
        /// Why nothing more may be sent, once closing or closed.
        var unusable: RemoteError?
    }

    let snapshot = Mutex(Snapshot())
    /// Messages sent from threads other than the loop's, waiting for the loop in order.
    let outbox = Outbox()
    /// A cheap check before each send: closing or closed.
    let isClosed = Atomic<Bool>(false)
    /// The channel's writability (``PacketChannel/isWritable``).
    let writable = Atomic<Bool>(true)
    /// Messages handed to the loop and not written into the channel yet.
    let backlog = Atomic<Int>(0)
    private let tokens = Atomic<UInt64>(0)

    /// The most messages that may be handed to the loop before it has taken them.
    static let maxBacklog = 256

    var hasRoom: Bool {
        writable.load(ordering: .relaxed) && backlog.load(ordering: .relaxed) < Self.maxBacklog
    }

    func nextToken() -> UInt64 { tokens.add(1, ordering: .relaxed).newValue }

    func opened(_ peer: Handshake) {
        snapshot.withLock {
            $0.peer = peer
            $0.open = true
        }
    }

    func closing(goodbye: String?) {
        snapshot.withLock {
            $0.open = false
            $0.closed = true
            if let goodbye { $0.goodbye = goodbye }
            if $0.unusable == nil { $0.unusable = RemoteError(.invalidated, goodbye == nil ? "the connection is closing" : "the connection is closed") }
        }
        isClosed.store(true, ordering: .releasing)
    }

    /// The peer's channel ended while its last messages wait to be delivered: nothing more may
    /// be sent (`failure` says why), and a sender waiting for room gives up.
    func peerEnded(_ failure: RemoteError) {
        snapshot.withLock {
            $0.open = false
            $0.closed = true
            $0.unusable = failure
        }
        isClosed.store(true, ordering: .releasing)
        writable.store(true, ordering: .relaxed)
    }

    func closed(_ outcome: RemoteError?) {
        snapshot.withLock {
            $0.open = false
            $0.closed = true
            $0.unusable = outcome ?? RemoteError(.invalidated, "the connection is closed")
        }
        isClosed.store(true, ordering: .releasing)
    }

    /// Why a send fails now, or `nil` when it may go.
    var unusable: RemoteError? {
        guard isClosed.load(ordering: .relaxed) else { return nil }
        return snapshot.withLock { $0.unusable } ?? RemoteError(.invalidated, "the connection is closed")
    }
}

/// How a connection answers the peer's requests: first inline on the loop, if it can; what that
/// leaves, in a task of its own each.
package struct RequestResponder: Sendable {
    /// What the inline step did with a request.
    package enum Immediate: Sendable {
        /// Answered it.
        case reply(ServiceMessage)
        /// The synchronous handler saw it and left it (`nil`): the task must not ask it again.
        case declined
        /// It was not offered to the synchronous handler (it must wait for something first).
        case notTried
    }
    package var immediate: (@Sendable (ServiceMessage, ConnectionContext) throws -> Immediate)?
    /// The task's step; its flag says whether the synchronous handler has seen the request.
    package var later: @Sendable (ServiceMessage, ConnectionContext, _ triedSynchronously: Bool) async throws -> ServiceMessage

    package init(immediate: (@Sendable (ServiceMessage, ConnectionContext) throws -> Immediate)?,
                 later: @escaping @Sendable (ServiceMessage, ConnectionContext, _ triedSynchronously: Bool) async throws -> ServiceMessage) {
        self.immediate = immediate
        self.later = later
    }

    /// Every request to `handler`, in a task of its own.
    package static func asynchronous(_ handler: @escaping Connection.RequestHandler) -> Self {
        Self(immediate: nil, later: { message, context, _ in try await handler(message, context) })
    }

    /// Every request to `synchronous` first, inline; what it leaves to `asynchronous`, in a task.
    package static func synchronous(_ synchronous: @escaping Connection.SynchronousRequestHandler,
                                    then asynchronous: @escaping Connection.RequestHandler) -> Self {
        Self(immediate: { message, context in try synchronous(message, context).map { .reply($0) } ?? .declined },
             later: { message, context, _ in try await asynchronous(message, context) })
    }
}

/// One-way messages sent from other threads than the loop's, in order: the first of a burst
/// hands one job to the loop (``post(_:)`` says when), which writes all that came meanwhile
/// (docs/Architecture.md, "The connection core"). One lock per message, no allocation once its
/// arrays have grown, and one hand-over per burst instead of one per message.
final class Outbox: Sendable {
    struct Entry: Sendable {
        var packet: EnvelopeCodec.UnnumberedPacket
        var attachments: [Attachment]
        var name: StaticString
    }

    private struct State {
        var entries: [Entry] = []
        /// A drain is handed to the loop and has not taken the entries yet.
        var scheduled = false
    }
    private let state = Mutex(State())
    /// Entries wait: what the loop writes itself checks it first (``ConnectionHandler/catchUpOutbox()``).
    private let pending = Atomic<Bool>(false)

    /// Whether entries wait to be drained (no lock).
    var hasPending: Bool { pending.load(ordering: .acquiring) }

    /// Queues `entry`; the first of a burst calls `schedule` (which hands a drain to the loop)
    /// before the lock is let go, so a sender that finds a drain scheduled knows it is queued on
    /// the loop already, ahead of whatever that sender hands over next. (The loop's own lock,
    /// taken by `schedule`, never waits for this one.)
    func post(_ entry: Entry, schedule: () -> Void) {
        state.withLock { state in
            state.entries.append(entry)
            pending.store(true, ordering: .releasing)
            guard !state.scheduled else { return }
            state.scheduled = true
            schedule()
        }
    }

    /// Takes what waits (on the loop) into `taken`, which must be empty: the arrays are swapped,
    /// so the drainer's emptied array is the next burst's, and nothing is allocated.
    func drain(into taken: inout [Entry]) {
        state.withLock { state in
            state.scheduled = false
            pending.store(false, ordering: .relaxed)
            swap(&state.entries, &taken)
        }
    }
}

/// Passes a value into a task exactly once, so the task's captures do not keep it alive.
final class Handoff<Value: Sendable>: Sendable {
    private let value: Mutex<Value?>
    init(_ value: Value) { self.value = Mutex(value) }
    func take() -> Value? { value.withLock { $0.take() } }
}
