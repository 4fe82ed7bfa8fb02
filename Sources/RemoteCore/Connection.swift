import Logging
import Synchronization

/// One conversation between a host and a service: handshake, requests with replies, one-way
/// messages, cancellation and deadlines, and an orderly close. Like an `xpc_connection_t`.
///
/// A connection does nothing until ``run()`` is awaited; `run()` handshakes, then serves
/// incoming messages until the connection closes, and returns (or throws) only when it has.
/// Run it in a task that lives as long as the connection, e.g. with ``withRunning(_:)``:
///
/// ```swift
/// let reply = try await connection.withRunning { connection in
///     try await connection.request(ServiceMessage(type: "echo", text: "hello"))
/// }
/// ```
///
/// Everything the peer sends is validated before a handler sees it; a protocol violation
/// ends the connection with a ``RemoteError`` whose reason says what was wrong.
///
/// A connection is a pipeline on an event loop (`docs/Architecture.md`, "The connection core"):
/// a packet channel, the envelope framer and a handler that owns the connection's state
/// machine, all confined to the loop's thread. This class is their `Sendable` face: each call
/// hands its work to the loop (at once when the caller is on the loop's thread) and, where it
/// waits, is resumed by the loop.
public final class Connection: Sendable {
    /// Who this side is and how long it waits.
    public struct Configuration: Sendable {
        /// This side's role; the peer must have the other one.
        public var role: PeerRole
        /// This side's reverse-DNS identifier, sent in the handshake.
        public var identifier: String
        /// Optional features this side supports.
        public var capabilities: [String]
        /// How long to wait for the peer's handshake.
        public var handshakeTimeout: Duration
        /// The deadline for a request that names none; `nil` waits as long as the connection lives.
        public var defaultRequestTimeout: Duration?
        /// The most requests the peer may have outstanding with this side at once.
        public var maxIncomingRequests: Int
        /// The identifier the peer must give in its handshake (a host knows which service it
        /// launched); `nil` takes any. Another one is a protocol violation that names both.
        public var expectedPeerIdentifier: String?
        /// What the peer's outstanding requests count against across all its connections (a
        /// host counts a service process's), besides ``maxIncomingRequests`` on this one; a
        /// request past it is a protocol violation that names the limit.
        package var sharedIncomingRequests: SharedBudget?
        /// The protocol versions this side speaks (`docs/Protocol.md`, "Versions"): its
        /// handshake offers the highest (`max_protocol_version`), the version in force is the
        /// lower of the two sides' highest, and a peer whose highest is below the lowest here is
        /// refused (`VERSION_MISMATCH`, naming both). Default: every version this build speaks,
        /// 1 through ``remoteViewLatestProtocolVersion``; a range beyond those is a programming
        /// error (the connection traps when it is made).
        public var protocolVersions: ClosedRange<UInt32> = remoteViewProtocolVersion...remoteViewLatestProtocolVersion

        public init(role: PeerRole, identifier: String, capabilities: [String] = [],
                    handshakeTimeout: Duration = .seconds(5), defaultRequestTimeout: Duration? = .seconds(30),
                    maxIncomingRequests: Int = 256, expectedPeerIdentifier: String? = nil) {
            self.role = role
            self.identifier = identifier
            self.capabilities = capabilities
            self.handshakeTimeout = handshakeTimeout
            self.defaultRequestTimeout = defaultRequestTimeout
            self.maxIncomingRequests = maxIncomingRequests
            self.expectedPeerIdentifier = expectedPeerIdentifier
            self.sharedIncomingRequests = nil
        }
    }

    /// Answers one request from the peer. Throw a ``ServiceFailure`` to send that error back.
    /// The task is cancelled if the peer cancels the request or the connection closes.
    ///
    /// A handler starts on the connection's event loop thread and runs there until it first
    /// suspends (as an XPC handler runs on its connection's queue), so one that answers at once
    /// costs no thread hand-off; long synchronous work delays every connection's next messages,
    /// so move it off (`await` something) first.
    public typealias RequestHandler = @Sendable (ServiceMessage, ConnectionContext) async throws -> ServiceMessage
    /// Answers a request at once, without waiting for anything, or returns `nil` to leave it to
    /// the asynchronous ``RequestHandler``: the fast form (`docs/Architecture.md`, "The
    /// connection core"). Throw a ``ServiceFailure`` to send that error back.
    ///
    /// It runs inline on the connection's event loop thread, as the request is read, with no
    /// task and no thread hand-off; its reply is written with the rest of what that read batch
    /// produced. Every connection on the loop waits while it runs, so it must be quick and must
    /// not block: a request that needs to wait for anything returns `nil` here and is answered
    /// by the `async` handler, in a task. It is never cancelled, since it has ended before a
    /// cancel could be read.
    ///
    /// Where a call accepts either form, Swift picks this one for a trailing closure that does
    /// not `await`. Such a handler behaved the same as an `async` one: a request handler starts
    /// on the loop's thread and, never suspending, finished there.
    public typealias SynchronousRequestHandler = @Sendable (ServiceMessage, ConnectionContext) throws -> ServiceMessage?
    /// Receives one one-way message. Messages are delivered one at a time, in order: each starts
    /// on the connection's event loop thread (like a request handler until it first suspends),
    /// and the connection reads nothing more until it returns, so hand long work off.
    public typealias MessageHandler = nonisolated(nonsending) @Sendable (ServiceMessage, ConnectionContext) async -> Void
    /// Receives one message of the surface family (with the buffer's memfd for
    /// `attach_buffer`), in order, validated and known to come from the side that may send it.
    /// A handler that finds the message breaks a rule only it can check throws a
    /// `protocolViolation` naming it: the connection then ends as for any other violation (the
    /// peer is told, outstanding requests fail with that error, nothing after it is read).
    package typealias SurfaceHandler = nonisolated(nonsending) @Sendable (SurfaceMessage, [Attachment], ConnectionContext) async throws(RemoteError) -> Void
    /// Receives one input event (a service receives them from its host), in order, validated.
    package typealias InputHandler = nonisolated(nonsending) @Sendable (InputEvent, ConnectionContext) async -> Void
    /// Receives one message of the share family (with the file items' memfds), in order,
    /// validated and known to come from the side that may send it; throws a violation as a
    /// ``SurfaceHandler`` does.
    package typealias ShareHandler = nonisolated(nonsending) @Sendable (ShareMessage, [Attachment], ConnectionContext) async throws(RemoteError) -> Void

    /// This side's configuration.
    public let configuration: Configuration
    /// What happens to the connection, in order; finishes after ``ConnectionEvent/closed(_:)``.
    public let events: AsyncStream<ConnectionEvent>

    private let handler: ConnectionHandler
    private let loop: any Loop
    private let status = ConnectionStatus()

    /// A connection over `channel` (made on its loop's behalf: nothing has reached the loop
    /// yet). Requests from the peer go to `onRequest`, one-way messages to `onMessage`; the
    /// defaults refuse requests and drop messages.
    package convenience init(channel: any PacketChannel, configuration: Configuration,
                             onRequest: @escaping RequestHandler = Connection.refuseRequests,
                             onMessage: @escaping MessageHandler = { _, _ in }) {
        self.init(channel: channel, configuration: configuration, responder: .asynchronous(onRequest), onMessage: onMessage)
    }

    /// A connection over `channel` whose requests go to `responder` (a synchronous handler
    /// first, inline on the loop, when it has one), and whose one-way messages go to
    /// `onSynchronousMessage` first when there is one: inline on the loop, as they are read,
    /// when no earlier message is still being handled (and no blocking caller has borrowed the
    /// loop); it returns `false` to leave one to `onMessage`, which later ones then wait behind.
    package init(channel: any PacketChannel, configuration: Configuration, responder: RequestResponder,
                 onSynchronousMessage: (@Sendable (ServiceMessage, ConnectionContext) -> Bool)? = nil,
                 onMessage: @escaping MessageHandler = { _, _ in }) {
        precondition(configuration.protocolVersions.lowerBound >= remoteViewProtocolVersion
                     && configuration.protocolVersions.upperBound <= remoteViewLatestProtocolVersion,
                     "Connection.Configuration.protocolVersions \(configuration.protocolVersions) is not within the versions this build speaks, \(remoteViewProtocolVersion)...\(remoteViewLatestProtocolVersion)")
        self.configuration = configuration
        let (events, eventSink) = AsyncStream.makeStream(of: ConnectionEvent.self)
        self.events = events
        var logger = Logger(label: "remoteview.connection")
        logger[metadataKey: "self"] = "\(configuration.role) \(configuration.identifier.escapedForTerminal())"
        loop = channel.loop
        handler = ConnectionHandler(channel: channel, configuration: configuration, logger: logger,
                                    responder: responder, onSynchronousMessage: onSynchronousMessage, onMessage: onMessage,
                                    eventSink: eventSink, status: status)
    }

    /// Runs `body` with the handler on its loop: at once when the caller is on the loop's thread,
    /// queued otherwise. The one way from async code into the pipeline.
    @inline(__always)
    private func onLoop(_ body: @escaping @Sendable (ConnectionHandler) -> Void) {
        let handler = self.handler
        loop.run { body(handler) }
    }

    /// A connection over a connected `SOCK_SEQPACKET` socket, taking ownership of it.
    public convenience init(socket: consuming OwnedFD, configuration: Configuration,
                            onRequest: @escaping RequestHandler = Connection.refuseRequests,
                            onMessage: @escaping MessageHandler = { _, _ in }) throws(SystemCallError) {
        self.init(channel: try SeqpacketChannel(socket), configuration: configuration,
                  onRequest: onRequest, onMessage: onMessage)
    }

    /// A connection over a connected `SOCK_SEQPACKET` socket, taking ownership of it, whose
    /// requests go first to `onSynchronousRequest`, inline on the event loop, and those it
    /// leaves (`nil`) to `onRequest`.
    public convenience init(socket: consuming OwnedFD, configuration: Configuration,
                            onSynchronousRequest: @escaping SynchronousRequestHandler,
                            onRequest: @escaping RequestHandler = Connection.refuseRequests,
                            onMessage: @escaping MessageHandler = { _, _ in }) throws(SystemCallError) {
        self.init(channel: try SeqpacketChannel(socket), configuration: configuration,
                  responder: .synchronous(onSynchronousRequest, then: onRequest), onMessage: onMessage)
    }

    /// A connection to the `SOCK_SEQPACKET` Unix socket at `path` (e.g. one that
    /// `systemd-socket-activate --accept --seqpacket` listens on).
    public convenience init(connectingTo path: String, configuration: Configuration,
                            onRequest: @escaping RequestHandler = Connection.refuseRequests,
                            onMessage: @escaping MessageHandler = { _, _ in }) throws(SystemCallError) {
        try self.init(socket: Syscall.connectSeqpacket(to: path), configuration: configuration,
                      onRequest: onRequest, onMessage: onMessage)
    }

    /// A connection to the `SOCK_SEQPACKET` Unix socket at `path`, whose requests go first to
    /// `onSynchronousRequest`, inline on the event loop, and those it leaves (`nil`) to `onRequest`.
    public convenience init(connectingTo path: String, configuration: Configuration,
                            onSynchronousRequest: @escaping SynchronousRequestHandler,
                            onRequest: @escaping RequestHandler = Connection.refuseRequests,
                            onMessage: @escaping MessageHandler = { _, _ in }) throws(SystemCallError) {
        try self.init(socket: Syscall.connectSeqpacket(to: path), configuration: configuration,
                      onSynchronousRequest: onSynchronousRequest, onRequest: onRequest, onMessage: onMessage)
    }

    /// The default request handler: answers every request with
    /// ``ServiceFailure/unknownRequest(_:handler:)`` (domain `RemoteView`, code 1).
    public static let refuseRequests: RequestHandler = { message, context in
        throw ServiceFailure.unknownRequest(message.type, handler: context.connection.configuration.identifier)
    }

    /// Routes the surface family (`attach_buffer` … `preferred_size`) to `handler`, from now
    /// on; without a route, a surface message is a protocol violation. Route before the peer can
    /// send the family (before ``run()``, or before asking the peer for it). Does nothing once
    /// the connection is closing: routes are let go then.
    package func route(surface handler: @escaping SurfaceHandler) {
        setRoute { $0.surface = handler }
    }

    /// Routes the input family (`pointer` … `traits`) to `handler`, from now on; without a
    /// route, input is a protocol violation. Does nothing once the connection is closing.
    package func route(input handler: @escaping InputHandler) {
        setRoute { $0.input = handler }
    }

    /// Routes the share family (`share_request` … `share_complete`) to `handler`, from now on;
    /// without a route, a share message is a protocol violation. Does nothing once the
    /// connection is closing.
    package func route(share handler: @escaping ShareHandler) {
        setRoute { $0.share = handler }
    }

    /// Changes the routes on the loop, unless the connection is closing (they are let go then).
    /// Queued behind what was asked before it, so a route set before asking the peer for its
    /// family is in place when the family comes.
    private func setRoute(_ change: @escaping @Sendable (inout ConnectionHandler.Routes) -> Void) {
        onLoop { $0.setRoute(change) }
    }

    /// The peer's handshake, once it has arrived (and still after the connection closed).
    public var peer: Handshake? {
        status.snapshot.withLock { $0.peer }
    }

    /// The protocol version in force with `peer` (its handshake): the lower of the highest
    /// versions the two sides speak (`docs/Protocol.md`, "Versions").
    public func protocolVersion(with peer: Handshake) -> UInt32 {
        min(configuration.protocolVersions.upperBound, peer.highestVersion)
    }

    /// The reason the peer gave in its goodbye, once it has said goodbye.
    public var peerGoodbyeReason: String? {
        // Set only as the connection closes: an open one answers with no lock.
        guard status.isClosed.load(ordering: .acquiring) else { return nil }
        return status.snapshot.withLock { $0.goodbye }
    }

    /// Whether the connection has closed (or is closing on this side).
    public var isClosed: Bool {
        status.isClosed.load(ordering: .relaxed)
    }

    // MARK: running

    /// Handshakes, then serves the connection until it closes.
    ///
    /// Returns when either side closed it in order (``close(reason:)`` or the peer's goodbye).
    /// Throws the reason otherwise: ``RemoteError/Code/interrupted`` when the peer vanished,
    /// ``RemoteError/Code/protocolViolation`` when it broke the protocol (it is told why before
    /// the connection closes), ``RemoteError/Code/timeout`` when it never handshook.
    /// Every outstanding request has failed and every incoming handler has finished by then.
    ///
    /// Cancelling the task that runs it closes the connection as ``close(reason:)`` does.
    public func run() async throws(RemoteError) {
        let outcome = await withTaskCancellationHandler {
            await withOrderedContinuation { (continuation: UnsafeContinuation<RemoteError?, Never>) in
                onLoop { [self] in $0.run(continuation, connection: self) }
            }
        } onCancel: {
            onLoop { $0.close(reason: "the task running the connection was cancelled") }
        }
        if let outcome { throw outcome }
    }

    /// Runs the connection, waits for the handshake, lets `body` use it, then closes it in order.
    ///
    /// If the connection fails first, `body`'s calls fail with the connection's error.
    public func withRunning<R: Sendable>(_ body: @Sendable (Connection) async throws -> R) async throws -> R {
        try await withThrowingTaskGroup(of: R?.self) { group in
            group.addTask { try await self.run(); return nil }
            let result: R
            do {
                _ = try await waitUntilOpen()
                result = try await body(self)
            } catch {
                await close(reason: "the host's work ended with an error")
                try? await group.waitForAll()
                throw error
            }
            await close(reason: "done")
            try await group.waitForAll()
            return result
        }
    }

    /// How many entries wait in the connection's deadline queue, and how many of them in its
    /// timer wheel (for tests).
    package func deadlineQueueLength() async -> (all: Int, inWheel: Int) {
        await withOrderedContinuation { (continuation: UnsafeContinuation<(all: Int, inWheel: Int), Never>) in
            onLoop { continuation.resumeInOrder(returning: $0.waitingDeadlines) }
        }
    }

    /// How many cancels wait for what they cancel (for tests: none, once every cancelled
    /// caller has its answer).
    package func earlyCancelCount() async -> Int {
        await withOrderedContinuation { (continuation: UnsafeContinuation<Int, Never>) in
            loop.execute { [handler] in continuation.resumeInOrder(returning: handler.earlyCancelCount) }
        }
    }

    /// Starts closing the connection as ``close(reason:)`` does, without waiting: at once on
    /// the loop's thread, else handed to the loop.
    package func startClosing(reason: String) {
        onLoop { $0.close(reason: reason) }
    }

    /// Ends the connection in order: says goodbye, fails outstanding requests with
    /// ``RemoteError/Code/invalidated``, and makes ``run()`` return.
    public func close(reason: String = "closed") async {
        await withOrderedContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            onLoop { handler in
                handler.close(reason: reason)
                continuation.resumeInOrder()
            }
        }
    }

    // MARK: requests and messages

    /// Sends `message` as a request and waits for the peer's reply.
    ///
    /// - Parameters:
    ///   - message: The request: its type, payload and attachments.
    ///   - timeout: How long to wait for the reply; `nil` uses the configuration's default.
    /// - Throws: ``RemoteError``: `timeout` at the deadline and `cancelled` when the calling task
    ///   is cancelled (the peer is sent a cancel either way), `remoteError` with the peer's
    ///   ``ServiceFailure``, `interrupted`/`invalidated`/`protocolViolation` when the connection ends.
    public func request(_ message: ServiceMessage, timeout: Duration? = nil) async throws(RemoteError) -> ServiceMessage {
        let reply = try await exchange(.request(type: message.type, payload: message.payload),
                                       attachments: message.attachments, expectsPong: false,
                                       timeout: timeout ?? configuration.defaultRequestTimeout, what: .request(type: message.type))
        return try Self.message(answering: message, with: reply)
    }

    /// ``request(_:timeout:)``, calling `handedOff` once the request is in the loop's hands (or
    /// failed before): what is sent on this connection after that goes out after it. How a
    /// supervisor sends the work queued while a process started in order.
    package func request(_ message: ServiceMessage, timeout: Duration?, handedOff: @escaping @Sendable () -> Void) async throws(RemoteError) -> ServiceMessage {
        let reply: Envelope
        do {
            reply = try await exchange(.request(type: message.type, payload: message.payload),
                                       attachments: message.attachments, expectsPong: false,
                                       timeout: timeout ?? configuration.defaultRequestTimeout, what: .request(type: message.type),
                                       handedOff: handedOff)
        } catch {
            handedOff()
            throw error
        }
        return try Self.message(answering: message, with: reply)
    }

    /// The answer to request `request`, as its caller gets it: the reply, or the peer's
    /// ``ServiceFailure`` thrown as a `remoteError`.
    private static func message(answering request: ServiceMessage, with reply: Envelope) throws(RemoteError) -> ServiceMessage {
        switch reply.body {
        case .reply(let type, let payload):
            return ServiceMessage(type: type, payload: payload, attachments: reply.attachments)
        case .failure(let failure):
            throw RemoteError(.remoteError, "request \"\(request.type.escapedForTerminal())\" failed: \(failure)", remote: failure)
        default:
            preconditionFailure("dispatch only delivers replies and failures to requests")
        }
    }

    /// Sends `message` as a request and blocks the calling thread until the reply comes: for
    /// callers that are not `async` (XPC's `xpc_connection_send_message_with_reply_sync`).
    ///
    /// The calling thread sends the request and reads the reply itself, in a blocking
    /// `recvmsg`: while it waits, the event loop does not watch the connection's socket, and
    /// whatever else the peer sends meanwhile is handed to the connection in order, as the loop
    /// would have handled it; your handlers run on the loop, never on the calling thread. When
    /// the loop sleeps, the call borrows it for the moments it needs it and does not wake it
    /// (unless what came meanwhile gives the loop work); when it is busy, the call queues behind
    /// its work (docs/Architecture.md, "The blocking call"). What the thread sent before this
    /// call (with ``send(_:)-(ServiceMessage)`` too) goes out before the request.
    ///
    /// The reply waits behind one-way messages that came before it, as with
    /// ``request(_:timeout:)``: a message handler that waits for a thread which is blocked in
    /// this call deadlocks it until its timeout.
    ///
    /// - Important: It blocks a thread. Do not call it from a task on Swift's cooperative
    ///   thread pool (which has one thread per core: a blocked one stalls other tasks, and
    ///   with all blocked, whatever the call waits for in a task never runs), nor on the
    ///   connection's event loop thread, where it would wait for itself: there it throws at
    ///   once. Call it from a thread of your own (a C library's callback thread, a
    ///   `Thread`/`pthread`, the main thread of a program that is not `async`).
    ///
    /// - Parameters:
    ///   - message: The request: its type, payload and attachments.
    ///   - timeout: How long to wait for the reply; `nil` uses the configuration's default.
    /// - Throws: ``RemoteError``: `invalidArgument` on the event loop's thread (or on a
    ///   connection whose loop only a test turns); `timeout` at the deadline (the peer is sent a
    ///   cancel); `remoteError` with the peer's ``ServiceFailure``;
    ///   `interrupted`/`invalidated`/`protocolViolation` when the connection ends.
    public func requestSync(_ message: ServiceMessage, timeout: Duration? = nil) throws(RemoteError) -> ServiceMessage {
        let what = Exchange.request(type: message.type)
        guard let eventLoop = loop as? EventLoop else {
            throw RemoteError(.invalidArgument, "\(what) cannot block: this connection's loop runs only when its test turns it")
        }
        guard !eventLoop.isLoopThread else {
            throw RemoteError(.invalidArgument, "requestSync for \(what) was called on RemoteView's event loop thread, which must read the reply: it would wait for itself (use request(_:timeout:) there)")
        }
        if let unusable = status.unusable { throw unusable }
        let attachments = message.attachments
        let packet = try EnvelopeCodec.encodeUnnumbered(Envelope(body: .request(type: message.type, payload: message.payload), attachments: attachments))
        let timeout = timeout ?? configuration.defaultRequestTimeout
        let deadline = timeout.map { ContinuousClock.now.advanced(by: $0) }
        let token = status.nextToken()
        let result = BlockingResult<Result<Envelope, RemoteError>>.make()
        let handler = self.handler
        // Borrowed while the loop sleeps (no closure is allocated); handed to it otherwise.
        var step = eventLoop.borrow {
            handler.requestBlocking(result, token: token, exchange: what, timeout: timeout, deadline: deadline, packet, attachments: attachments)
        } ?? eventLoop.runAndWait {
            handler.requestBlocking(result, token: token, exchange: what, timeout: timeout, deadline: deadline, packet, attachments: attachments)
        }
        while case .read(let channel) = step {
            let receipt = channel.receiveLent(until: deadline)
            step = eventLoop.borrow {
                handler.lentReceived(receipt, on: channel, for: result, token: token, deadline: deadline)
            } ?? eventLoop.runAndWait {
                handler.lentReceived(receipt, on: channel, for: result, token: token, deadline: deadline)
            }
        }
        var outcome = result.wait(timeout: deadline.map { ContinuousClock.now.duration(to: $0) })
        if outcome == nil {
            // Never sent (the connection has not opened): it fails now, wherever it waits.
            eventLoop.execute { handler.blockingCallTimedOut(token: token) }
            outcome = result.wait()
        }
        if case .wait(let timer?) = step {
            // On the loop, if it sleeps: a cancel handed over would wake it.
            if eventLoop.borrow({ eventLoop.cancel(timer) }) == nil { eventLoop.cancel(timer) }
        }
        return try Self.message(answering: message, with: outcome!.get())
    }

    /// Sends a one-way message; returns once the connection has it, in order behind what was
    /// sent before (sent before ``run()``, it follows this side's handshake). Waits while the
    /// peer is not reading and what waits for it is at the connection's bound.
    ///
    /// - Throws: ``RemoteError``: `invalidArgument` when the message cannot be encoded (too
    ///   large, too many fds), `invalidated` (or how it ended) once the connection is closing.
    nonisolated(nonsending) public func send(_ message: ServiceMessage) async throws(RemoteError) {
        try await deliver(Envelope(body: .message(type: message.type, payload: message.payload), attachments: message.attachments), name: "message")
    }

    /// Sends a surface message (with the buffer's memfd for `attach_buffer`), as ``send(_:)-(ServiceMessage)``.
    nonisolated(nonsending) package func send(_ message: SurfaceMessage, attachments: [Attachment] = []) async throws(RemoteError) {
        guard message.sender == configuration.role else {
            throw RemoteError(.invalidArgument, "\(message.name) is sent by the \(message.sender), not the \(configuration.role)")
        }
        try await deliver(Envelope(body: .surface(message), attachments: attachments), name: "surface message")
    }

    /// Sends an input event (a host to its service's view), as ``send(_:)-(ServiceMessage)``.
    nonisolated(nonsending) package func send(_ event: InputEvent) async throws(RemoteError) {
        guard configuration.role == .host else {
            throw RemoteError(.invalidArgument, "\(event.name) is input, sent by the host, not the \(configuration.role)")
        }
        try await deliver(Envelope(body: .input(event)), name: "input event")
    }

    /// Sends a share message (with the file items' memfds, in item order), as ``send(_:)-(ServiceMessage)``.
    nonisolated(nonsending) package func send(_ message: ShareMessage, attachments: [Attachment] = []) async throws(RemoteError) {
        guard message.sender == configuration.role else {
            throw RemoteError(.invalidArgument, "\(message.name) is sent by the \(message.sender), not the \(configuration.role)")
        }
        try await deliver(Envelope(body: .share(message), attachments: attachments), name: "share message")
    }

    /// Encodes `envelope` on the caller's thread (so a bad one fails here), waits for room if
    /// the connection has none, and hands it to the loop, which numbers and writes it: at once
    /// on the loop's thread, else through the connection's outbox, where a burst of messages
    /// from other threads waits for one hand-over.
    nonisolated(nonsending) private func deliver(_ envelope: Envelope, name: StaticString) async throws(RemoteError) {
        if let unusable = status.unusable { throw unusable }
        let packet = try EnvelopeCodec.encodeUnnumbered(envelope)
        while !status.hasRoom {
            if Task.isCancelled { throw RemoteError(.cancelled, "sending a \(name) was cancelled while the peer's queue was full") }
            await withTaskCancellationHandler {
                await withOrderedContinuation { (continuation: UnsafeContinuation<Void, Never>) in
                    onLoop { $0.waitForRoom(continuation) }
                }
            } onCancel: {
                onLoop { $0.releaseRoomWaiters() }
            }
            if let unusable = status.unusable { throw unusable }
        }
        status.backlog.add(1, ordering: .relaxed)
        let attachments = envelope.attachments
        if loop.inLoop {
            handler.catchUpOutbox()
            handler.writeMessage(packet, attachments: attachments, name: name)
        } else {
            // The first of a burst hands one drain to the loop, which takes the whole burst.
            let handler = self.handler, loop = self.loop
            status.outbox.post(.init(packet: packet, attachments: attachments, name: name)) {
                loop.execute { handler.drainOutbox() }
            }
        }
    }

    /// Measures one round trip to the peer (a ping answered by the connection itself, not a handler).
    public func ping(timeout: Duration? = nil) async throws(RemoteError) -> Duration {
        let start = ContinuousClock.now
        _ = try await exchange(.ping(nonce: 0), attachments: [], expectsPong: true,
                               timeout: timeout ?? configuration.defaultRequestTimeout, what: .ping)
        return ContinuousClock.now - start
    }

    /// Sends a request (or ping) and waits for its answer: encoded here, numbered and written on
    /// the loop, which keeps it in its table by id until its answer, deadline or the
    /// connection's end resumes this caller. No object is made for it, and no lock taken: a
    /// cancellation posts a cancel, by the caller's token, to the loop.
    private func exchange(_ body: Envelope.Body, attachments: [Attachment], expectsPong: Bool,
                          timeout: Duration?, what: Exchange, handedOff: (@Sendable () -> Void)? = nil) async throws(RemoteError) -> Envelope {
        if let unusable = status.unusable { throw unusable }
        let packet = try EnvelopeCodec.encodeUnnumbered(Envelope(body: body, attachments: attachments))
        if Task.isCancelled { throw RemoteError(.cancelled, "\(what) was cancelled before it was sent") }
        let token = status.nextToken()
        let deadline = timeout.map { loop.now.advanced(by: $0) }
        let result = await withTaskCancellationHandler {
            await withOrderedContinuation { (continuation: UnsafeContinuation<Result<Envelope, RemoteError>, Never>) in
                let call = Outstanding(caller: .task(continuation), token: token, exchange: what, timeout: timeout, deadline: deadline)
                // Not through onLoop: a closure for the hand-over is made (and allocated) only
                // when there is one.
                if loop.inLoop {
                    handler.request(call, packet, attachments: attachments, expectsPong: expectsPong)
                } else {
                    let handler = self.handler
                    loop.execute { handler.request(call, packet, attachments: attachments, expectsPong: expectsPong) }
                }
                handedOff?()
            }
        } onCancel: {
            onLoop { $0.cancel(token: token) }
        }
        forgetCancelIfCancelled(token)
        return try result.get()
    }

    /// A cancelled caller with `token` has its answer: the cancel its cancellation handler
    /// posted may have come after it (and found nothing), so the loop lets it go. Queued, never
    /// inline: it must follow that cancel, which may still wait in the loop's queue. (Once the
    /// call to `withTaskCancellationHandler` has returned, its handler has run or never will.)
    private func forgetCancelIfCancelled(_ token: UInt64) {
        guard Task.isCancelled else { return }
        let handler = self.handler
        loop.execute { handler.forgetCancel(token: token) }
    }

    // MARK: the peer's handshake

    /// The peer's handshake, once it has arrived (waiting for it if needed): what it says it
    /// is and supports.
    ///
    /// - Throws: ``RemoteError`` when the connection failed before the handshake, or the caller
    ///   was cancelled.
    package func peerHandshake() async throws(RemoteError) -> Handshake {
        try await waitUntilOpen()
    }

    /// Waits for the peer's handshake.
    private func waitUntilOpen() async throws(RemoteError) -> Handshake {
        // Once open (every call but the first few: RemoteView asks before each input event),
        // no hop onto the loop at all.
        if let peer = status.snapshot.withLock({ $0.open ? $0.peer : nil }) { return peer }
        let token = status.nextToken()
        let result = await withTaskCancellationHandler {
            await withOrderedContinuation { (continuation: UnsafeContinuation<Result<Handshake, RemoteError>, Never>) in
                onLoop { $0.waitForOpen(continuation, token: token) }
            }
        } onCancel: {
            onLoop { $0.cancel(token: token) }
        }
        forgetCancelIfCancelled(token)
        return try result.get()
    }
}

/// What a handler is given with each message: the connection it came on, who the peer is, and
/// a logger that names the connection. Like the `ChannelHandlerContext` swift-nio hands every
/// callback, so a handler can answer on its own connection without a second set-up step.
public struct ConnectionContext: Sendable {
    /// The connection the message came on (send on it, close it).
    public let connection: Connection
    /// What the peer said about itself in its handshake.
    public let peer: Handshake
    /// A logger whose metadata names this connection.
    public let logger: Logger

    /// The protocol version in force on the connection (``Connection/protocolVersion(with:)``):
    /// a rule of a later version does not apply to this peer.
    public var protocolVersion: UInt32 { connection.protocolVersion(with: peer) }
}

/// What happened to a ``Connection``, in order, from ``Connection/events``.
public enum ConnectionEvent: Sendable {
    /// The handshake completed; the peer said this about itself.
    case connected(Handshake)
    /// The connection ended: `nil` when either side closed it in order, else the reason.
    case closed(RemoteError?)
}
