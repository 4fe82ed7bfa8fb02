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

        public init(role: PeerRole, identifier: String, capabilities: [String] = [],
                    handshakeTimeout: Duration = .seconds(5), defaultRequestTimeout: Duration? = .seconds(30),
                    maxIncomingRequests: Int = 256) {
            self.role = role
            self.identifier = identifier
            self.capabilities = capabilities
            self.handshakeTimeout = handshakeTimeout
            self.defaultRequestTimeout = defaultRequestTimeout
            self.maxIncomingRequests = maxIncomingRequests
        }
    }

    /// Answers one request from the peer. Throw a ``ServiceFailure`` to send that error back.
    /// The task is cancelled if the peer cancels the request or the connection closes.
    ///
    /// A handler starts on the connection's read loop and runs there until it first suspends
    /// (as an XPC handler runs on its connection's queue), so one that answers at once costs no
    /// thread hand-off; long synchronous work delays the connection's next messages, so move it
    /// off (`await` something) first.
    public typealias RequestHandler = @Sendable (ServiceMessage) async throws -> ServiceMessage
    /// Receives one one-way message. Messages are delivered one at a time, in order, on the
    /// connection's read loop (like a request handler until it first suspends): the next one
    /// waits until this returns, so hand long work off.
    public typealias MessageHandler = nonisolated(nonsending) @Sendable (ServiceMessage) async -> Void
    /// Receives one surface message (with the buffer's memfd for `attach_buffer`), in order,
    /// already validated and known to come from the side that may send it.
    package typealias SurfaceHandler = nonisolated(nonsending) @Sendable (SurfaceMessage, [Attachment]) async -> Void

    /// This side's configuration.
    public let configuration: Configuration
    /// What happens to the connection, in order; finishes after ``ConnectionEvent/closed(_:)``.
    public let events: AsyncStream<ConnectionEvent>

    private let transport: any Transport
    private let onRequest: RequestHandler
    private let onMessage: MessageHandler
    private let onSurface: SurfaceHandler?
    private let eventSink: AsyncStream<ConnectionEvent>.Continuation
    private let loop: EventLoop
    private let logger: Logger
    private let nextID = Atomic<UInt64>(1)
    private let state = Mutex(State())

    private enum Phase {
        case idle
        case handshaking
        case open(Handshake)
        case closed(RemoteError?)
    }

    private struct Pending {
        var expectsPong: Bool
        var continuation: CheckedContinuation<Result<Envelope, RemoteError>, Never>?
        var arrived: Result<Envelope, RemoteError>?
        var timer: EventLoop.TimerID?
    }

    private struct State {
        var phase: Phase = .idle
        var openWaiters: [CheckedContinuation<Result<Handshake, RemoteError>, Never>] = []
        /// Whether this side's handshake is on the wire: from then on, messages may follow it.
        var handshakeSent = false
        var sendWaiters: [CheckedContinuation<RemoteError?, Never>] = []
        var pending: [UInt64: Pending] = [:]
        var incoming: [UInt64: Task<Void, Never>] = [:]
        /// Handlers that finished before their task was recorded in `incoming`.
        var finishedEarly: Set<UInt64> = []
        var closingLocally = false
        var peerGoodbye: String?
        var peerHandshake: Handshake?
        /// The code to report when this side refuses the peer; `nil` means malformed.
        var refusal: ProtocolErrorCode?
    }

    /// A connection over `transport`. Requests from the peer go to `onRequest`, one-way messages
    /// to `onMessage`; the defaults refuse requests and drop messages.
    package init(transport: any Transport, configuration: Configuration,
                 onRequest: @escaping RequestHandler = Connection.refuseRequests,
                 onMessage: @escaping MessageHandler = { _ in },
                 onSurface: SurfaceHandler? = nil,
                 loop: EventLoop = .shared) {
        self.transport = transport
        self.configuration = configuration
        self.onRequest = onRequest
        self.onMessage = onMessage
        self.onSurface = onSurface
        self.loop = loop
        (events, eventSink) = AsyncStream.makeStream(of: ConnectionEvent.self)
        var logger = Logger(label: "remoteview.connection")
        logger[metadataKey: "self"] = "\(configuration.role) \(configuration.identifier)"
        self.logger = logger
    }

    /// A connection over a connected `SOCK_SEQPACKET` socket, taking ownership of it.
    public convenience init(socket: consuming OwnedFD, configuration: Configuration,
                            onRequest: @escaping RequestHandler = Connection.refuseRequests,
                            onMessage: @escaping MessageHandler = { _ in }) throws(SystemCallError) {
        self.init(transport: try SeqpacketSocket(socket), configuration: configuration,
                  onRequest: onRequest, onMessage: onMessage)
    }

    /// A connection over a connected socket that also carries a surface (`onSurface` gets the
    /// surface messages the peer may send).
    package convenience init(socket: consuming OwnedFD, configuration: Configuration,
                             onRequest: @escaping RequestHandler, onMessage: @escaping MessageHandler,
                             onSurface: @escaping SurfaceHandler) throws(SystemCallError) {
        self.init(transport: try SeqpacketSocket(socket), configuration: configuration,
                  onRequest: onRequest, onMessage: onMessage, onSurface: onSurface)
    }

    /// A connection to the `SOCK_SEQPACKET` Unix socket at `path` (e.g. one that
    /// `systemd-socket-activate --accept --seqpacket` listens on).
    public convenience init(connectingTo path: String, configuration: Configuration,
                            onRequest: @escaping RequestHandler = Connection.refuseRequests,
                            onMessage: @escaping MessageHandler = { _ in }) throws(SystemCallError) {
        try self.init(socket: OwnedFD(adopting: Syscall.connectSeqpacket(to: path)), configuration: configuration,
                      onRequest: onRequest, onMessage: onMessage)
    }

    /// The default request handler: answers every request with a `RemoteView` failure.
    public static let refuseRequests: RequestHandler = { message in
        throw ServiceFailure(domain: "RemoteView", code: 1, message: "no handler for request \"\(message.type)\"")
    }

    /// The peer's handshake, once it has arrived (and still after the connection closed).
    public var peer: Handshake? {
        state.withLock { $0.peerHandshake }
    }

    /// The reason the peer gave in its goodbye, once it has said goodbye.
    public var peerGoodbyeReason: String? {
        state.withLock { $0.peerGoodbye }
    }

    /// Whether the connection has closed (or is closing on this side).
    public var isClosed: Bool {
        state.withLock { state in
            if state.closingLocally { return true }
            if case .closed = state.phase { return true }
            return false
        }
    }

    // MARK: running

    /// Handshakes, then serves the connection until it closes.
    ///
    /// Returns when either side closed it in order (``close(reason:)`` or the peer's goodbye).
    /// Throws the reason otherwise: ``RemoteError/Code/interrupted`` when the peer vanished,
    /// ``RemoteError/Code/protocolViolation`` when it broke the protocol (it is told why before
    /// the connection closes), ``RemoteError/Code/timeout`` when it never handshook.
    /// Every outstanding request has failed and every incoming handler has finished by then.
    public func run() async throws(RemoteError) {
        let started = state.withLock { state in
            guard case .idle = state.phase else { return false }
            state.phase = .handshaking
            return true
        }
        precondition(started, "Connection.run() called twice")
        // The read loop runs on the event loop's thread: the thread that learns the socket is
        // readable reads it and dispatches, with no hand-off to a pool thread in between.
        let outcome = await withTaskExecutorPreference(loop) {
            await serve()
        }
        if let outcome, !(state.withLock { $0.closingLocally }) { throw outcome }
    }

    /// The most envelopes the read loop handles before it lets other work on its thread run.
    private static let envelopesPerTurn = 32

    /// Handshakes and serves until the connection closes; returns how it ended (`nil`: in order).
    nonisolated(nonsending) private func serve() async -> RemoteError? {
        var outcome: RemoteError?
        do {
            try await handshake()
            var turn = 0
            while let envelope = try await transport.receive() {
                try await dispatch(envelope)
                if state.withLock({ if case .closed = $0.phase { true } else { false } }) { break }
                turn += 1
                if turn == Self.envelopesPerTurn {
                    turn = 0
                    await Task.yield()
                }
            }
            outcome = state.withLock { state in
                if state.closingLocally { return nil }
                if case .closed(let reason) = state.phase { return reason }
                return RemoteError(.interrupted, "the peer closed the connection without saying goodbye (it may have crashed)")
            }
        } catch {
            let (closingLocally, refusal) = state.withLock { ($0.closingLocally, $0.refusal) }
            outcome = closingLocally ? nil : error
            if error.code == .protocolViolation && !closingLocally {
                logger.error("protocol violation by the peer: \(error.reason)")
                await sendBestEffort(.protocolError(refusal ?? .malformed, reason: error.reason))
            }
        }
        await finish(outcome)
        return outcome
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
        let (closing, handshook) = state.withLock { state -> (Bool, Bool) in
            if case .closed = state.phase { return (false, false) }
            if state.closingLocally { return (false, false) }
            state.closingLocally = true
            if case .open = state.phase { return (true, true) }
            return (true, false)
        }
        guard closing else { return }
        // Nothing but a handshake may come first, so a goodbye only follows one.
        if handshook { await sendBestEffort(.goodbye(reason: reason)) }
        fail(all: RemoteError(.invalidated, "the connection was closed: \(reason)"))
        transport.close()
    }

    // MARK: requests and messages

    /// Sends `message` as a request and waits for the peer's reply.
    ///
    /// - Parameter timeout: How long to wait for the reply; `nil` uses the configuration's default.
    /// - Throws: ``RemoteError``: `timeout` at the deadline and `cancelled` when the calling task
    ///   is cancelled (the peer is sent a cancel either way), `remoteError` with the peer's
    ///   ``ServiceFailure``, `interrupted`/`invalidated`/`protocolViolation` when the connection ends.
    public func request(_ message: ServiceMessage, timeout: Duration? = nil) async throws(RemoteError) -> ServiceMessage {
        let reply = try await exchange(.request(type: message.type, payload: message.payload),
                                       attachments: message.attachments, expectsPong: false,
                                       timeout: timeout ?? configuration.defaultRequestTimeout, what: "request \"\(message.type)\"")
        switch reply.body {
        case .reply(let type, let payload):
            return ServiceMessage(type: type, payload: payload, attachments: reply.attachments)
        case .failure(let failure):
            throw RemoteError(.remoteError, "request \"\(message.type)\" failed: \(failure)", remote: failure)
        default:
            preconditionFailure("dispatch only delivers replies and failures to requests")
        }
    }

    /// Sends a one-way message; returns once it is handed to the transport.
    nonisolated(nonsending) public func send(_ message: ServiceMessage) async throws(RemoteError) {
        try await waitUntilSendable()
        try await transport.send(Envelope(id: makeID(), body: .message(type: message.type, payload: message.payload),
                                          attachments: message.attachments))
    }

    /// Sends a surface message (with the buffer's memfd for `attach_buffer`); returns once sent.
    nonisolated(nonsending) package func send(_ message: SurfaceMessage, attachments: [Attachment] = []) async throws(RemoteError) {
        guard message.sender == configuration.role else {
            throw RemoteError(.invalidArgument, "\(message.name) is sent by the \(message.sender), not the \(configuration.role)")
        }
        try await waitUntilSendable()
        try await transport.send(Envelope(id: makeID(), body: .surface(message), attachments: attachments))
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
        let id = makeID()
        try state.withLock { (state) throws(RemoteError) in
            if case .closed(let reason) = state.phase { throw reason ?? RemoteError(.invalidated, "the connection is closed") }
            state.pending[id] = Pending(expectsPong: expectsPong)
        }
        if let timeout {
            let timer = loop.schedule(at: .now.advanced(by: timeout)) { [weak self] in
                self?.resolve(id, .failure(RemoteError(.timeout, "no reply to \(what) within \(timeout)")))
            }
            state.withLock { $0.pending[id]?.timer = timer }
        }
        do {
            try await transport.send(Envelope(id: id, body: body, attachments: attachments))
        } catch {
            if let pending = state.withLock({ $0.pending.removeValue(forKey: id) }), let timer = pending.timer { loop.cancel(timer) }
            throw error
        }
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let early = state.withLock { state -> Result<Envelope, RemoteError>? in
                    if let arrived = state.pending[id]?.arrived {
                        state.pending[id] = nil
                        return arrived
                    }
                    state.pending[id]?.continuation = continuation
                    return nil
                }
                if let early { continuation.resume(returning: early) }
            }
        } onCancel: {
            resolve(id, .failure(RemoteError(.cancelled, "\(what) was cancelled")))
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

    /// Delivers the outcome of outgoing request `id` to whoever awaits it (or keeps it until they do).
    private func resolve(_ id: UInt64, _ result: Result<Envelope, RemoteError>) {
        let (continuation, timer) = state.withLock { state -> (CheckedContinuation<Result<Envelope, RemoteError>, Never>?, EventLoop.TimerID?) in
            guard var pending = state.pending[id], pending.arrived == nil else { return (nil, nil) }
            if let continuation = pending.continuation {
                state.pending[id] = nil
                return (continuation, pending.timer)
            }
            pending.arrived = result
            state.pending[id] = pending
            return (nil, pending.timer)
        }
        if let timer { loop.cancel(timer) }
        continuation?.resume(returning: result)
    }

    // MARK: handshake and dispatch

    private func handshake() async throws(RemoteError) {
        let ours = Handshake(role: configuration.role, identifier: configuration.identifier,
                             capabilities: configuration.capabilities)
        try await transport.send(Envelope(id: makeID(), body: .handshake(ours)))
        // Requests and messages may follow it at once, before the peer's handshake arrives (as
        // XPC queues messages to a connection still being set up): the peer reads them after
        // the handshake, and if the handshake fails, so do they. A first request to a service
        // being launched then costs no extra wake-up and round trip.
        let senders = state.withLock { state in
            state.handshakeSent = true
            defer { state.sendWaiters.removeAll() }
            return state.sendWaiters
        }
        for sender in senders { sender.resume(returning: nil) }
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
        guard theirs.protocolVersion == ours.protocolVersion else {
            throw refuse(.versionMismatch, "protocol version mismatch: this \(ours.role) speaks version \(ours.protocolVersion), the \(theirs.role) \"\(theirs.identifier)\" speaks version \(theirs.protocolVersion)")
        }
        guard theirs.role != ours.role else {
            throw refuse(.role, "both peers claim to be the \(ours.role)")
        }
        let waiters = state.withLock { state in
            state.phase = .open(theirs)
            state.peerHandshake = theirs
            defer { state.openWaiters.removeAll() }
            return state.openWaiters
        }
        for waiter in waiters { waiter.resume(returning: .success(theirs)) }
        logger.debug("connected to \(theirs.role) \(theirs.identifier) (protocol \(theirs.protocolVersion))")
        eventSink.yield(.connected(theirs))
    }

    /// A protocol violation this side reports to the peer with `code` (not the default, malformed).
    private func refuse(_ code: ProtocolErrorCode, _ reason: String) -> RemoteError {
        state.withLock { $0.refusal = code }
        return RemoteError(.protocolViolation, reason)
    }

    private func handshakeTimeout() -> RemoteError {
        RemoteError(.timeout, "the peer sent no handshake within \(configuration.handshakeTimeout)")
    }

    /// Waits until this side's handshake is sent (messages may follow it), or the connection ends.
    nonisolated(nonsending) private func waitUntilSendable() async throws(RemoteError) {
        // Once the handshake is sent (every send but the first few), no continuation at all.
        if let ready = state.withLock({ Self.sendability($0) }) { return try ready.get() }
        let failure = await withCheckedContinuation { (continuation: CheckedContinuation<RemoteError?, Never>) in
            let ready = state.withLock { state -> Result<Void, RemoteError>? in
                let ready = Self.sendability(state)
                if ready == nil { state.sendWaiters.append(continuation) }
                return ready
            }
            switch ready {
            case .success: continuation.resume(returning: nil)
            case .failure(let error): continuation.resume(returning: error)
            case nil: break
            }
        }
        if let failure { throw failure }
    }

    /// Whether a message may be sent now (`success`), never will be (`failure`), or must wait
    /// for this side's handshake to be sent (`nil`).
    private static func sendability(_ state: State) -> Result<Void, RemoteError>? {
        if state.closingLocally { return .failure(RemoteError(.invalidated, "the connection is closing")) }
        if case .closed(let reason) = state.phase { return .failure(reason ?? RemoteError(.invalidated, "the connection is closed")) }
        return state.handshakeSent ? .success(()) : nil
    }

    private func waitUntilOpen() async throws(RemoteError) -> Handshake {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Handshake, RemoteError>, Never>) in
            let ready = state.withLock { state -> Result<Handshake, RemoteError>? in
                switch state.phase {
                case .open(let handshake): return .success(handshake)
                case .closed(let reason): return .failure(reason ?? RemoteError(.invalidated, "the connection is closed"))
                case .idle, .handshaking:
                    if state.closingLocally { return .failure(RemoteError(.invalidated, "the connection is closing")) }
                    state.openWaiters.append(continuation)
                    return nil
                }
            }
            if let ready { continuation.resume(returning: ready) }
        }
        return try result.get()
    }

    nonisolated(nonsending) private func dispatch(_ envelope: Envelope) async throws(RemoteError) {
        switch envelope.body {
        case .handshake:
            throw refuse(.unexpected, "a second handshake (envelope \(envelope.id))")
        case .goodbye(let reason):
            logger.debug("the peer said goodbye: \(reason)")
            state.withLock { state in
                state.peerGoodbye = reason
                if !state.closingLocally { state.phase = .closed(nil) }
            }
            fail(all: RemoteError(.interrupted, "the peer closed the connection: \(reason)"))
        case .protocolError(let code, let reason):
            throw RemoteError(.protocolViolation, "the peer reported a protocol error (\(code)): \(reason)")
        case .ping:
            try await transport.send(Envelope(id: makeID(), replyTo: envelope.id, body: .pong(nonce: 0)))
        case .pong, .reply, .failure:
            let replyTo = envelope.replyTo!
            guard replyTo < nextID.load(ordering: .relaxed) else {
                throw RemoteError(.protocolViolation, "\(envelope.body.name) to envelope \(replyTo), which was never sent")
            }
            let expectsPong = state.withLock { $0.pending[replyTo]?.expectsPong }
            // Unknown ids are replies to requests that timed out or were cancelled: dropped.
            guard let expectsPong else { return }
            guard expectsPong == (envelope.body.name == "pong") else {
                throw RemoteError(.protocolViolation, "\(envelope.body.name) answers envelope \(replyTo), which expects \(expectsPong ? "a pong" : "a reply or failure")")
            }
            resolve(replyTo, .success(envelope))
        case .request(let type, let payload):
            let message = ServiceMessage(type: type, payload: payload, attachments: envelope.attachments)
            try startHandler(for: message, id: envelope.id)
        case .message(let type, let payload):
            await onMessage(ServiceMessage(type: type, payload: payload, attachments: envelope.attachments))
        case .cancel(let requestID):
            state.withLock { $0.incoming[requestID] }?.cancel()
        case .surface(let message):
            guard message.sender != configuration.role else {
                throw refuse(.unexpected, "\(message.name) may only be sent by the \(message.sender), and this side is the \(configuration.role)")
            }
            guard let onSurface else {
                throw refuse(.unexpected, "\(message.name) on a connection that carries no surface")
            }
            await onSurface(message, envelope.attachments)
        }
    }

    private func startHandler(for message: ServiceMessage, id: UInt64) throws(RemoteError) {
        try state.withLock { (state) throws(RemoteError) in
            guard state.incoming[id] == nil else {
                throw RemoteError(.protocolViolation, "request id \(id) is already outstanding")
            }
            guard state.incoming.count < configuration.maxIncomingRequests else {
                throw RemoteError(.protocolViolation, "more than \(configuration.maxIncomingRequests) requests outstanding at once")
            }
        }
        // The handler starts at once, on this (the read loop's) thread, and runs here until it
        // first suspends, as an XPC handler runs on its connection's queue: a handler that
        // answers without waiting costs no thread hand-off. The request travels in a handoff and
        // the work runs in answer()'s own frame, so every fd of the request and the reply is
        // released before the task leaves `incoming` (which is what finish() awaits).
        // A handler that finished before its task was recorded is never recorded.
        let handoff = Handoff(message)
        let task = Task.immediate { [weak self] in
            await self?.answer(handoff, id: id)
            self?.state.withLock { state in
                if state.incoming.removeValue(forKey: id) == nil { state.finishedEarly.insert(id) }
            }
        }
        state.withLock { state in
            if state.finishedEarly.remove(id) == nil { state.incoming[id] = task }
        }
    }

    /// Runs the request handler for request `id` and sends its reply or failure.
    private func answer(_ handoff: Handoff<ServiceMessage>, id: UInt64) async {
        guard let message = handoff.take() else { return }
        var attachments: [Attachment] = []
        let body: Envelope.Body
        do {
            let reply = try await onRequest(message)
            body = .reply(type: reply.type, payload: reply.payload)
            attachments = reply.attachments
        } catch let failure as ServiceFailure {
            body = .failure(failure)
        } catch {
            body = .failure(ServiceFailure(domain: "RemoteView.HandlerError", code: 1, message: "\(error)"))
        }
        guard !Task.isCancelled else { return }
        do {
            try await transport.send(Envelope(id: makeID(), replyTo: id, body: body, attachments: attachments))
        } catch where error.code == .invalidArgument {
            logger.error("reply to \"\(message.type)\" cannot be sent: \(error.reason)")
            await sendBestEffort(.failure(ServiceFailure(domain: "RemoteView", code: 2, message: "the reply could not be sent: \(error.reason)")), replyTo: id)
        } catch {
            logger.debug("reply to \"\(message.type)\" not sent: \(error)")
        }
    }

    // MARK: ending

    /// Fails every outstanding request and every caller waiting for the handshake.
    private func fail(all error: RemoteError) {
        let (ids, waiters, senders) = state.withLock { state in
            defer { state.openWaiters.removeAll(); state.sendWaiters.removeAll() }
            return (Array(state.pending.keys), state.openWaiters, state.sendWaiters)
        }
        for waiter in waiters { waiter.resume(returning: .failure(error)) }
        for sender in senders { sender.resume(returning: error) }
        for id in ids { resolve(id, .failure(error)) }
    }

    private func finish(_ outcome: RemoteError?) async {
        let handlers = state.withLock { state in
            if case .closed = state.phase {} else { state.phase = .closed(outcome) }
            return Array(state.incoming.values)
        }
        // A request sent behind this side's handshake to a peer that never answered it did not
        // time out itself: the connection it was on failed under it (XPC's "interrupted").
        let failure = outcome.map { $0.code == .timeout ? RemoteError(.interrupted, $0.reason) : $0 }
        fail(all: failure ?? RemoteError(.invalidated, "the connection is closed"))
        transport.close()
        for handler in handlers { handler.cancel() }
        for handler in handlers { await handler.value }
        if let outcome { logger.debug("closed: \(outcome)") }
        eventSink.yield(.closed(outcome))
        eventSink.finish()
    }

    nonisolated(nonsending) private func sendBestEffort(_ body: Envelope.Body, replyTo: UInt64? = nil) async {
        do {
            try await transport.send(Envelope(id: makeID(), replyTo: replyTo, body: body))
        } catch {
            logger.debug("could not send \(body.name): \(error)")
        }
    }

    private func makeID() -> UInt64 {
        nextID.wrappingAdd(1, ordering: .relaxed).oldValue
    }
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
