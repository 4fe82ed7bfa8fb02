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
/// The connection's life is a state machine value (`ConnectionStateMachine`, see
/// `docs/Architecture.md`) held under one lock; this class does the I/O the machine asks for.
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
    /// A handler starts on the connection's read loop and runs there until it first suspends
    /// (as an XPC handler runs on its connection's queue), so one that answers at once costs no
    /// thread hand-off; long synchronous work delays the connection's next messages, so move it
    /// off (`await` something) first.
    public typealias RequestHandler = @Sendable (ServiceMessage, ConnectionContext) async throws -> ServiceMessage
    /// Receives one one-way message. Messages are delivered one at a time, in order, on the
    /// connection's read loop (like a request handler until it first suspends): the next one
    /// waits until this returns, so hand long work off.
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

    private let transport: any Transport
    private let onRequest: RequestHandler
    private let onMessage: MessageHandler
    private let eventSink: AsyncStream<ConnectionEvent>.Continuation
    private let loop: EventLoop
    private let logger: Logger
    private let machine = Mutex(ConnectionStateMachine())
    /// Who handles the message families beyond requests and messages; let go when the
    /// connection ends (they often hold the connection).
    private let routes = Mutex(Routes())

    /// The handlers of the message families the connection routes to others.
    private struct Routes {
        var surface: SurfaceHandler?
        var input: InputHandler?
        var share: ShareHandler?
    }

    /// A connection over `transport`. Requests from the peer go to `onRequest`, one-way messages
    /// to `onMessage`; the defaults refuse requests and drop messages.
    package init(transport: any Transport, configuration: Configuration,
                 onRequest: @escaping RequestHandler = Connection.refuseRequests,
                 onMessage: @escaping MessageHandler = { _, _ in },
                 loop: EventLoop = .shared) {
        precondition(configuration.protocolVersions.lowerBound >= remoteViewProtocolVersion
                     && configuration.protocolVersions.upperBound <= remoteViewLatestProtocolVersion,
                     "Connection.Configuration.protocolVersions \(configuration.protocolVersions) is not within the versions this build speaks, \(remoteViewProtocolVersion)...\(remoteViewLatestProtocolVersion)")
        self.transport = transport
        self.configuration = configuration
        self.onRequest = onRequest
        self.onMessage = onMessage
        self.loop = loop
        (events, eventSink) = AsyncStream.makeStream(of: ConnectionEvent.self)
        var logger = Logger(label: "remoteview.connection")
        logger[metadataKey: "self"] = "\(configuration.role) \(configuration.identifier)"
        self.logger = logger
    }

    /// A connection over a connected `SOCK_SEQPACKET` socket, taking ownership of it.
    public convenience init(socket: consuming OwnedFD, configuration: Configuration,
                            onRequest: @escaping RequestHandler = Connection.refuseRequests,
                            onMessage: @escaping MessageHandler = { _, _ in }) throws(SystemCallError) {
        self.init(transport: try SeqpacketSocket(socket), configuration: configuration,
                  onRequest: onRequest, onMessage: onMessage)
    }

    /// A connection to the `SOCK_SEQPACKET` Unix socket at `path` (e.g. one that
    /// `systemd-socket-activate --accept --seqpacket` listens on).
    public convenience init(connectingTo path: String, configuration: Configuration,
                            onRequest: @escaping RequestHandler = Connection.refuseRequests,
                            onMessage: @escaping MessageHandler = { _, _ in }) throws(SystemCallError) {
        try self.init(socket: Syscall.connectSeqpacket(to: path), configuration: configuration,
                      onRequest: onRequest, onMessage: onMessage)
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

    /// Changes the routes unless the connection is closing (checked under the routes' lock, which
    /// ``close(reason:)`` takes after the machine's, so a route set meanwhile is let go there).
    private func setRoute(_ change: (inout Routes) -> Void) {
        routes.withLock { routes in
            if machine.withLock({ $0.isClosed }) { return }
            change(&routes)
        }
    }

    /// The peer's handshake, once it has arrived (and still after the connection closed).
    public var peer: Handshake? {
        machine.withLock { $0.peer }
    }

    /// The protocol version in force with `peer` (its handshake): the lower of the highest
    /// versions the two sides speak (`docs/Protocol.md`, "Versions").
    public func protocolVersion(with peer: Handshake) -> UInt32 {
        min(configuration.protocolVersions.upperBound, peer.highestVersion)
    }

    /// The reason the peer gave in its goodbye, once it has said goodbye.
    public var peerGoodbyeReason: String? {
        machine.withLock { $0.goodbyeReason }
    }

    /// Whether the connection has closed (or is closing on this side).
    public var isClosed: Bool {
        machine.withLock { $0.isClosed }
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
        let action = machine.withLock { $0.run() }
        // The read loop runs on the event loop's thread: the thread that learns the socket is
        // readable reads it and dispatches, with no hand-off to a pool thread in between.
        let outcome = await withTaskExecutorPreference(loop) {
            await serve(action)
        }
        if let outcome { throw outcome }
    }

    /// The most envelopes the read loop handles before it lets the loop look at the other
    /// descriptors and the timers (``EventLoop/nextRound()``).
    private static let envelopesPerTurn = 32

    /// Handshakes and serves until the connection closes; returns how it ended (`nil`: in order).
    nonisolated(nonsending) private func serve(_ action: ConnectionStateMachine.RunAction) async -> RemoteError? {
        var error: RemoteError?
        if action == .handshake {
            do {
                let peer = try await handshake()
                let context = ConnectionContext(connection: self, peer: peer, logger: logger)
                var turn = 0
                while let envelope = try await transport.receive() {
                    guard try await dispatch(envelope, context) else { break }
                    turn += 1
                    if turn == Self.envelopesPerTurn {
                        turn = 0
                        await loop.nextRound()
                    }
                }
            } catch let failure {
                if failure.code == .cancelled && Task.isCancelled {
                    await close(reason: "the task running the connection was cancelled")
                }
                error = failure
            }
        }
        let ending = machine.withLock { $0.readLoopEnded(error) }
        if let code = ending.protocolError, let outcome = ending.outcome {
            logger.error("protocol violation by the peer: \(outcome.reason)")
            await sendBestEffort(.protocolError(code, reason: outcome.reason))
        }
        ending.failures.fail(with: ending.failure)
        transport.close()
        // Handlers hold what the routes hold; let go of both once nothing can call them.
        for handler in ending.handlers { handler.cancel() }
        for handler in ending.handlers { await handler.value }
        routes.withLock { $0 = Routes() }
        if let outcome = ending.outcome { logger.debug("closed: \(outcome)") }
        eventSink.yield(.closed(ending.outcome))
        eventSink.finish()
        return ending.outcome
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

    /// Ends the connection in order: says goodbye, fails outstanding requests with
    /// ``RemoteError/Code/invalidated``, and makes ``run()`` return.
    public func close(reason: String = "closed") async {
        guard case .close(let sayGoodbye, let failures) = machine.withLock({ $0.close() }) else { return }
        // What the routes hold often holds this connection; a connection that never runs would
        // keep them for ever (a running one lets them go at its end too).
        routes.withLock { $0 = Routes() }
        // Nothing but a handshake may come first, so a goodbye only follows one.
        if sayGoodbye { await sendBestEffort(.goodbye(reason: reason)) }
        failures.fail(with: RemoteError(.invalidated, "the connection was closed: \(reason)"))
        transport.close()
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
                                       timeout: timeout ?? configuration.defaultRequestTimeout, what: "request \"\(message.type.escapedForTerminal())\"")
        switch reply.body {
        case .reply(let type, let payload):
            return ServiceMessage(type: type, payload: payload, attachments: reply.attachments)
        case .failure(let failure):
            throw RemoteError(.remoteError, "request \"\(message.type.escapedForTerminal())\" failed: \(failure)", remote: failure)
        default:
            preconditionFailure("dispatch only delivers replies and failures to requests")
        }
    }

    /// Sends a one-way message; returns once it is handed to the transport.
    nonisolated(nonsending) public func send(_ message: ServiceMessage) async throws(RemoteError) {
        try await waitUntilSendable()
        try await transport.send(Envelope(body: .message(type: message.type, payload: message.payload),
                                          attachments: message.attachments))
    }

    /// Sends a surface message (with the buffer's memfd for `attach_buffer`); returns once sent.
    nonisolated(nonsending) package func send(_ message: SurfaceMessage, attachments: [Attachment] = []) async throws(RemoteError) {
        guard message.sender == configuration.role else {
            throw RemoteError(.invalidArgument, "\(message.name) is sent by the \(message.sender), not the \(configuration.role)")
        }
        try await waitUntilSendable()
        try await transport.send(Envelope(body: .surface(message), attachments: attachments))
    }

    /// Sends an input event (a host to its service's view); returns once sent.
    nonisolated(nonsending) package func send(_ event: InputEvent) async throws(RemoteError) {
        guard configuration.role == .host else {
            throw RemoteError(.invalidArgument, "\(event.name) is input, sent by the host, not the \(configuration.role)")
        }
        try await waitUntilSendable()
        try await transport.send(Envelope(body: .input(event)))
    }

    /// Sends a share message (with the file items' memfds, in item order); returns once sent.
    nonisolated(nonsending) package func send(_ message: ShareMessage, attachments: [Attachment] = []) async throws(RemoteError) {
        guard message.sender == configuration.role else {
            throw RemoteError(.invalidArgument, "\(message.name) is sent by the \(message.sender), not the \(configuration.role)")
        }
        try await waitUntilSendable()
        try await transport.send(Envelope(body: .share(message), attachments: attachments))
    }

    /// Measures one round trip to the peer (a ping answered by the connection itself, not a handler).
    public func ping(timeout: Duration? = nil) async throws(RemoteError) -> Duration {
        let start = ContinuousClock.now
        _ = try await exchange(.ping(nonce: 0), attachments: [], expectsPong: true,
                               timeout: timeout ?? configuration.defaultRequestTimeout, what: "ping")
        return ContinuousClock.now - start
    }

    private func exchange(_ body: Envelope.Body, attachments: [Attachment], expectsPong: Bool,
                          timeout: Duration?, what: String) async throws(RemoteError) -> Envelope {
        try await waitUntilSendable()
        if Task.isCancelled { throw RemoteError(.cancelled, "\(what) was cancelled before it was sent") }
        let waiter = ConnectionStateMachine.ReplyWaiter()
        // The waiter is recorded as the request is written, under the transport's numbering
        // lock: ids go out in write order, and the read loop, which checks an answer's
        // `reply_to` against `lastSentID` (taking that lock), finds the waiter recorded.
        var recorded: Result<Void, RemoteError> = .success(())
        let id = try await transport.send(Envelope(body: body, attachments: attachments)) { id in
            recorded = machine.withLock { $0.requestSent(id, expectsPong: expectsPong, waiter: waiter) }
        }
        try recorded.get()
        let result: Result<Envelope, RemoteError>
        do throws(WaitError) {
            result = try await waiter.wait(until: timeout.map { .now.advanced(by: $0) }, loop: loop)
        } catch {
            machine.withLock { $0.requestEnded(id) }
            result = .failure(error == .deadlinePassed ? RemoteError(.timeout, "no reply to \(what) within \(timeout!)")
                                                       : RemoteError(.cancelled, "\(what) was cancelled"))
        }
        switch result {
        case .success(let envelope):
            return envelope
        case .failure(let error):
            if error.code == .cancelled || error.code == .timeout {
                await sendBestEffort(.cancel(requestID: id))
            }
            throw error
        }
    }

    // MARK: handshake and dispatch

    /// Sends this side's handshake, then reads the peer's; returns it.
    nonisolated(nonsending) private func handshake() async throws(RemoteError) -> Handshake {
        let ours = Handshake(role: configuration.role, identifier: configuration.identifier,
                             capabilities: configuration.capabilities, maxProtocolVersion: configuration.protocolVersions.upperBound)
        try await transport.send(Envelope(body: .handshake(ours)))
        // Requests and messages may follow it at once, before the peer's handshake arrives (as
        // XPC queues messages to a connection still being set up): the peer reads them after
        // the handshake, and if the handshake fails, so do they. A first request to a service
        // being launched then costs no extra wake-up and round trip.
        machine.withLock { $0.handshakeSent() }.resumeAll(returning: .success(()))
        let transport = self.transport
        let timedOut = Atomic<Bool>(false)
        let timer = loop.schedule(at: .now.advanced(by: configuration.handshakeTimeout)) {
            timedOut.store(true, ordering: .relaxed)
            transport.close()
        }
        defer { loop.cancel(timer) }
        let first: Envelope?
        do {
            first = try await transport.receive()
        } catch {
            if timedOut.load(ordering: .relaxed) { throw handshakeTimeout() }
            throw error
        }
        guard let first else {
            if timedOut.load(ordering: .relaxed) { throw handshakeTimeout() }
            throw RemoteError(.interrupted, "the peer closed the connection before its handshake (it may have crashed at start-up)")
        }
        guard case .handshake(let theirs) = first.body else {
            throw refuse(.unexpected, "expected a handshake first, got \(first.body.name)")
        }
        switch machine.withLock({ $0.handshakeReceived(theirs, ours: ours, expecting: configuration.expectedPeerIdentifier,
                                                       lowestVersion: configuration.protocolVersions.lowerBound) }) {
        case .open(let openers):
            openers.resumeAll(returning: .success(theirs))
            logger.debug("connected to \(theirs.role) \(theirs.identifier) (protocol \(ours.agreedVersion(with: theirs)))")
            eventSink.yield(.connected(theirs))
        case .refuse(let violation):
            throw violation
        case .ignore:
            eventSink.yield(.connected(theirs))  // as when open: the handshake did complete
        }
        return theirs
    }

    /// A protocol violation this side reports to the peer with `code` (not the default, malformed).
    private func refuse(_ code: ProtocolErrorCode, _ reason: String) -> RemoteError {
        machine.withLock { $0.refuse(code) }
        return RemoteError(.protocolViolation, reason)
    }

    private func handshakeTimeout() -> RemoteError {
        RemoteError(.timeout, "the peer sent no handshake within \(configuration.handshakeTimeout)")
    }

    /// Waits until this side's handshake is sent (messages may follow it), or the connection ends.
    nonisolated(nonsending) private func waitUntilSendable() async throws(RemoteError) {
        // Once the handshake is sent (every send but the first few), no waiter at all.
        if let ready = machine.withLock({ $0.canSend() }) { return try ready.get() }
        let waiter = Waiter<Result<Void, RemoteError>>()
        switch machine.withLock({ $0.sendability(waiter) }) {
        case .ready: return
        case .failed(let error): throw error
        case .wait: break
        }
        do {
            try await waiter.wait(onAbandon: { [weak self] in self?.machine.withLock { $0.abandon(sender: waiter) } }).get()
        } catch let error as RemoteError {
            throw error
        } catch {
            throw RemoteError(.cancelled, "cancelled while waiting for the connection to open")
        }
    }

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
        // Once open (every call but the first few: RemoteView asks before each input event), no
        // waiter at all.
        if let peer = machine.withLock({ $0.openPeer }) { return peer }
        let waiter = Waiter<Result<Handshake, RemoteError>>()
        switch machine.withLock({ $0.openness(waiter) }) {
        case .ready(let peer): return peer
        case .failed(let error): throw error
        case .wait: break
        }
        do {
            return try await waiter.wait(onAbandon: { [weak self] in self?.machine.withLock { $0.abandon(opener: waiter) } }).get()
        } catch let error as RemoteError {
            throw error
        } catch {
            throw RemoteError(.cancelled, "cancelled while waiting for the peer's handshake")
        }
    }

    /// Handles one envelope from the peer; `false` once the conversation is over (a goodbye).
    nonisolated(nonsending) private func dispatch(_ envelope: Envelope, _ context: ConnectionContext) async throws(RemoteError) -> Bool {
        switch envelope.body {
        case .handshake:
            throw refuse(.unexpected, "a second handshake (envelope \(envelope.id))")
        case .goodbye(let reason):
            logger.debug("the peer said goodbye: \(reason.escapedForTerminal())")
            machine.withLock { $0.goodbyeReceived(reason) }.fail(with: RemoteError(.interrupted, "the peer closed the connection: \(reason.escapedForTerminal())"))
            return false
        case .protocolError(let code, let reason):
            throw RemoteError(.protocolViolation, "the peer reported a protocol error (\(code)): \(reason.escapedForTerminal())")
        case .ping:
            try await transport.send(Envelope(replyTo: envelope.id, body: .pong(nonce: 0)))
        case .pong, .reply, .failure:
            let replyTo = envelope.replyTo!
            guard replyTo <= transport.lastSentID else {
                throw RemoteError(.protocolViolation, "\(envelope.body.name) to envelope \(replyTo), which was never sent")
            }
            switch machine.withLock({ $0.answerReceived(to: replyTo, isPong: envelope.body.name == "pong", kind: envelope.body.name) }) {
            case .deliver(let waiter): waiter.resume(returning: .success(envelope))
            case .drop: break  // an answer to a request that timed out or was cancelled
            case .violation(let error): throw error
            }
        case .request(let type, let payload):
            let message = ServiceMessage(type: type, payload: payload, attachments: envelope.attachments)
            try startHandler(for: message, id: envelope.id, context)
        case .message(let type, let payload):
            await onMessage(ServiceMessage(type: type, payload: payload, attachments: envelope.attachments), context)
        case .cancel(let requestID):
            machine.withLock { $0.cancelReceived(requestID) }?.cancel()
        case .surface(let message):
            guard message.sender != configuration.role else {
                throw refuse(.unexpected, "\(message.name) may only be sent by the \(message.sender), and this side is the \(configuration.role)")
            }
            guard let handler = routes.withLock({ $0.surface }) else {
                throw refuse(.unexpected, "\(message.name) on a connection that carries no surface")
            }
            try await handler(message, envelope.attachments, context)
        case .input(let event):
            guard configuration.role == .service else {
                throw refuse(.unexpected, "\(event.name) is input, which only the host sends, and this side is the host")
            }
            guard let handler = routes.withLock({ $0.input }) else {
                throw refuse(.unexpected, "\(event.name) on a connection that carries no view")
            }
            await handler(event, context)
        case .share(let message):
            guard message.sender != configuration.role else {
                throw refuse(.unexpected, "\(message.name) may only be sent by the \(message.sender), and this side is the \(configuration.role)")
            }
            guard let handler = routes.withLock({ $0.share }) else {
                throw refuse(.unexpected, "\(message.name) on a connection that carries no share")
            }
            try await handler(message, envelope.attachments, context)
        }
        return true
    }

    private func startHandler(for message: ServiceMessage, id: UInt64, _ context: ConnectionContext) throws(RemoteError) {
        guard try machine.withLock({ $0.requestReceived(id, limit: configuration.maxIncomingRequests) }).get() == .start else { return }
        let shared = configuration.sharedIncomingRequests
        if let shared, !shared.reserve(1) {
            machine.withLock { $0.handlerFinished(id) }
            throw RemoteError(.protocolViolation, "more than \(shared.limit) requests outstanding at once across the process's connections")
        }
        // The handler starts at once, on this (the read loop's) thread, and runs here until it
        // first suspends, as an XPC handler runs on its connection's queue: a handler that
        // answers without waiting costs no thread hand-off. The request travels in a handoff and
        // the work runs in answer()'s own frame, so every fd of the request and the reply is
        // released before the task leaves the machine (which is what the end of serve() awaits).
        // A handler that finished before its task was recorded is never recorded.
        let handoff = Handoff(message)
        let task = Task.immediate { [weak self] in
            await self?.answer(handoff, id: id, context)
            self?.machine.withLock { $0.handlerFinished(id) }
            shared?.release(1)
        }
        machine.withLock { $0.handlerStarted(id, task: task) }
    }

    /// Runs the request handler for request `id` and sends its reply or failure.
    private func answer(_ handoff: Handoff<ServiceMessage>, id: UInt64, _ context: ConnectionContext) async {
        guard let message = handoff.take() else { return }
        var attachments: [Attachment] = []
        let body: Envelope.Body
        do {
            let reply = try await onRequest(message, context)
            body = .reply(type: reply.type, payload: reply.payload)
            attachments = reply.attachments
        } catch let failure as ServiceFailure {
            body = .failure(failure)
        } catch {
            body = .failure(ServiceFailure(domain: "RemoteView.HandlerError", code: 1, message: "\(error)"))
        }
        guard !Task.isCancelled else { return }
        do {
            try await transport.send(Envelope(replyTo: id, body: body, attachments: attachments))
        } catch where error.code == .invalidArgument {
            logger.error("reply to \"\(message.type.escapedForTerminal())\" cannot be sent: \(error.reason)")
            await sendBestEffort(.failure(ServiceFailure(domain: ServiceFailure.frameworkDomain, code: ServiceFailure.FrameworkCode.replyNotSent, message: "the reply could not be sent: \(error.reason)")), replyTo: id)
        } catch {
            logger.debug("reply to \"\(message.type.escapedForTerminal())\" not sent: \(error)")
        }
    }

    nonisolated(nonsending) private func sendBestEffort(_ body: Envelope.Body, replyTo: UInt64? = nil) async {
        do {
            try await transport.send(Envelope(replyTo: replyTo, body: body))
        } catch {
            logger.debug("could not send \(body.name): \(error)")
        }
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

/// Passes a value into a task exactly once, so the task's captures do not keep it alive.
private final class Handoff<Value: Sendable>: Sendable {
    private let value: Mutex<Value?>
    init(_ value: Value) { self.value = Mutex(value) }
    func take() -> Value? { value.withLock { $0.take() } }
}

/// What happened to a ``Connection``, in order, from ``Connection/events``.
public enum ConnectionEvent: Sendable {
    /// The handshake completed; the peer said this about itself.
    case connected(Handshake)
    /// The connection ended: `nil` when either side closed it in order, else the reason.
    case closed(RemoteError?)
}
