import RemoteCore

/// A host's connection to a service by name, with XPC's semantics: the service process is
/// launched on first use, relaunched on the next message after it crashed or exited idle, and
/// the connection object survives all of that.
///
/// ```swift
/// let mail = launcher.connection(to: "com.example.share.mail")
/// let reply = try await mail.request(ServiceMessage(type: "compose", text: "hello"))
/// for await event in mail.events { ... }   // .interrupted, then finally .invalidated
/// ```
///
/// - ``Event/interrupted(_:)``: the service died (or broke the protocol and was ended);
///   requests outstanding at that moment failed with `RemoteError.Code.interrupted`. The next
///   message relaunches it.
/// - ``Event/invalidated(_:)``: the connection can never work (unknown service, invalid
///   manifest, sandbox refused, crash loop, ``invalidate()``, launcher shut down). Always the
///   last event; every call from then on throws `RemoteError.Code.invalidated`.
///
/// A connection released without ``invalidate()`` is invalidated then, like an XPC connection
/// released without a cancel: its channel closes and its process stops unless others share it.
///
/// Each process it talks to is reached over a channel of its own (a `Connection`). What
/// rides on a channel besides requests and messages (a remote view's surface, a share) is
/// added by listeners (`ServiceChannelListener`) that hear when a channel opens; the
/// connection itself knows nothing of them.
///
/// The connection is a thin handle on its service's supervisor (one per service, which owns the
/// processes' lives). While a channel to a running process is open, its messages go straight
/// onto that channel: the handle reads the channel its supervisor published, with no lock and
/// no question to the supervisor. Otherwise (before the first launch, while a process starts
/// or ends) they go to the supervisor, which queues them in order and sends them once a
/// process is connected, as XPC queues a connection's messages.
public final class ServiceConnection: Sendable {
    /// Lifecycle events, in order. ``events`` finishes after ``invalidated(_:)``.
    public enum Event: Sendable {
        case interrupted(RemoteError)
        case invalidated(RemoteError)
    }

    /// The service's identifier.
    public let identifier: String
    /// Lifecycle events (single consumer).
    public let events: AsyncStream<Event>

    private let client: ServiceClient
    /// `nil` for a service the launcher does not know (the connection is invalidated at once),
    /// and for a remote one.
    let supervisor: ServiceSupervisor?
    /// A remote service's link (through a gateway), in place of a supervisor.
    private let remote: RemoteLink?

    init(identifier: String, supervisor: ServiceSupervisor?, onRequest: @escaping Connection.RequestHandler,
         onMessage: @escaping Connection.MessageHandler) {
        self.identifier = identifier
        self.supervisor = supervisor
        remote = nil
        let (events, eventSink) = AsyncStream.makeStream(of: Event.self)
        self.events = events
        client = ServiceClient(eventSink: eventSink, onRequest: onRequest, onMessage: onMessage)
    }

    /// A connection to a service on another machine, through `connector`.
    init(identifier: String, target: RemoteTarget, connector: any RemoteServiceConnector, configuration: Launcher.Configuration,
         onRequest: @escaping Connection.RequestHandler, onMessage: @escaping Connection.MessageHandler) {
        self.identifier = identifier
        supervisor = nil
        let (events, eventSink) = AsyncStream.makeStream(of: Event.self)
        self.events = events
        let client = ServiceClient(eventSink: eventSink, onRequest: onRequest, onMessage: onMessage)
        self.client = client
        remote = RemoteLink(target: target, connector: connector, configuration: configuration, client: client)
    }

    /// Called by the launcher once it made the connection: the supervisor starts serving it, or,
    /// when there is none (or it has finished), it is invalidated with `error`. A remote
    /// service's serves itself.
    func register(orInvalidateWith error: @autoclosure () -> RemoteError) {
        if remote != nil { return }
        if let supervisor, supervisor.post(.clientAdded(client)) { return }
        client.invalidate(error())
    }

    /// The gateway a remote service is reached through, by its name in the host's configuration
    /// (`identifier@name`); `nil` for a local service, and for a remote one named by its bare
    /// identifier (the first gateway offering it is found on first use).
    public var gateway: String? { remote?.target.gateway }

    /// Ends a remote service's connection for good with `error` (the launcher shut down).
    func invalidateRemote(_ error: RemoteError) {
        remote?.invalidate(error)
    }

    /// Whether the service runs on another machine, reached through a gateway.
    public var isRemote: Bool { remote != nil }

    /// The executor of the thread that reads every connection of this process (RemoteView's
    /// event loop): the low-latency path for a caller that makes many small requests.
    ///
    /// A reply is read on that thread; a caller on the global concurrent executor (what an
    /// app's task gets) is then handed to a pool thread, which costs a wake-up and a context
    /// switch per reply. A caller that prefers this executor is resumed on the thread that read
    /// its reply, with no hand-off:
    ///
    /// ```swift
    /// try await withTaskExecutorPreference(ServiceConnection.readerExecutor) {
    ///     for item in items { _ = try await index.request(ServiceMessage(type: "add", text: item)) }
    /// }
    /// ```
    ///
    /// The rule that comes with it: code run this way runs on the thread every connection,
    /// timer and process watch of the process shares, so it must not block (no blocking system
    /// call, no synchronous wait for another task, no long computation between two `await`s).
    /// Blocking there stops every connection at once, its own reply included.
    public static var readerExecutor: any TaskExecutor { EventLoop.shared }

    /// The pid of the process serving this connection right now (bubblewrap's when sandboxed),
    /// or `nil` when none is.
    public var processIdentifier: Int32? {
        guard remote == nil, let route = client.announced, route.instance.ended == nil else { return nil }
        return route.instance.process.pid
    }

    /// Only the first process is ever launched for this connection (a share's: its activity
    /// runs once, for its items): once it has gone, a use that would need another throws what
    /// `refusal` says (awaited then, so that it can say how the work ended).
    package func allowOneProcess(refusal: @escaping @Sendable () async -> RemoteError) {
        client.launchRefusal.withLock { $0 = refusal }
        supervisor?.post(.oneProcess(client.id))
        remote?.allowOneChannel(refusal: refusal)
    }

    /// Attaches `listener` (a libwayland listener attached to its object), held weakly: it
    /// hears about every channel opened from now on, and about the channel open now, if any
    /// (``ServiceChannelListener/channelWillRun(_:)`` at once; there is nothing to replay yet).
    package func addListener(_ listener: any ServiceChannelListener) {
        if let remote { return remote.addListener(listener) }
        if let open = client.addListener(listener), open.instance.ended == nil, let supervisor {
            listener.channelWillRun(ServiceChannel(route: open, supervisor: supervisor))
        }
    }

    // MARK: requests and messages

    /// Sends `message` as a request and waits for the reply, launching the service if needed.
    ///
    /// - Throws: `RemoteError`: `interrupted` if the service died first, `invalidated` if it
    ///   can never be reached, `timeout`, `cancelled`, `remoteError` (the service's own failure),
    ///   `protocolViolation`.
    public func request(_ message: ServiceMessage, timeout: Duration? = nil) async throws(RemoteError) -> ServiceMessage {
        if let remote { return try await remote.channel().request(message, timeout: timeout) }
        return try await perform(retrying: true) { route, handedOff throws(RemoteError) in
            route.instance.idleClock.begin()
            defer { route.instance.idleClock.end() }
            if let handedOff { return try await route.connection.request(message, timeout: timeout, handedOff: handedOff) }
            return try await route.connection.request(message, timeout: timeout)
        }
    }

    /// Sends `message` as a request and blocks the calling thread until the reply comes,
    /// launching the service if needed: for callers that are not `async` (XPC's
    /// `xpc_connection_send_message_with_reply_sync`).
    ///
    /// While the service's process runs and is connected, the calling thread sends the request
    /// and reads the reply itself, in a blocking `recvmsg` (`Connection.requestSync(_:timeout:)`):
    /// no task, no hand-off to another thread, and the event loop is not woken for it when it
    /// sleeps. Otherwise the thread waits for the service's supervisor to launch it (or for the
    /// launch under way) and sends the request once the process is connected, all within
    /// `timeout`. A process that exited idle just as the request was sent is launched again and
    /// sent it once more, as ``request(_:timeout:)`` does.
    ///
    /// - Important: It blocks a thread. Do not call it from a task on Swift's cooperative
    ///   thread pool (one thread per core: a blocked one stalls other tasks), nor on RemoteView's
    ///   event loop thread (code preferring ``readerExecutor``), where it would wait for itself:
    ///   there it throws at once. Call it from a thread of your own.
    ///
    /// - Parameters:
    ///   - message: The request: its type, payload and attachments.
    ///   - timeout: How long to wait for the reply, launch included; `nil` uses the
    ///     connection's default for the request and does not limit the launch.
    /// - Throws: `RemoteError`: as ``request(_:timeout:)`` does; `invalidArgument` on the event
    ///   loop's thread; `timeout` when no reply came within `timeout`, the launch included.
    public func requestSync(_ message: ServiceMessage, timeout: Duration? = nil) throws(RemoteError) -> ServiceMessage {
        guard !EventLoop.shared.isLoopThread else {
            throw RemoteError(.invalidArgument, "requestSync(\"\(message.type.escapedForTerminal())\") to \(identifier) was called on RemoteView's event loop thread, which must read the reply: it would wait for itself (use request(_:timeout:) there)")
        }
        if remote != nil { return try remoteRequestSync(message, timeout: timeout) }
        let deadline = timeout.map { ContinuousClock.now.advanced(by: $0) }
        let first: ServiceRoute
        if let published = client.route.load() {
            first = published
        } else {
            first = try routeBlocking(for: message, until: deadline) { .work(client.id, SupervisorWork(kind: .route($0))) }
        }
        do throws(RemoteError) {
            return try requestSync(message, on: first, until: deadline)
        } catch where error.endsChannel {
            // Decided by the supervisor once the process's end is known: a new process after
            // an idle exit (once), or how it ended.
            let again = try routeBlocking(for: message, until: deadline) {
                .workFailed(client.id, SupervisorWork(kind: .route($0)), first.instance, error)
            }
            do throws(RemoteError) {
                return try requestSync(message, on: again, until: deadline)
            } catch where error.endsChannel {
                _ = try routeBlocking(for: message, until: deadline) {
                    .workFailed(client.id, SupervisorWork(kind: .route($0), isRetry: true), again.instance, error)
                }
                throw error
            }
        }
    }

    /// A blocking request to a remote service: the calling thread waits for a task that makes
    /// it (the channel is a network stream's, with no socket to read on this thread).
    private func remoteRequestSync(_ message: ServiceMessage, timeout: Duration?) throws(RemoteError) -> ServiceMessage {
        let result = BlockingResult<Result<ServiceMessage, RemoteError>>.make()
        let task = Task {
            do throws(RemoteError) { result.complete(.success(try await request(message, timeout: timeout))) } catch { result.complete(.failure(error)) }
        }
        guard let outcome = result.wait(timeout: timeout) else {
            task.cancel()
            throw RemoteError(.timeout, "no reply to request \"\(message.type.escapedForTerminal())\" from \(identifier) within its timeout, its connection included")
        }
        return try outcome.get()
    }

    /// One blocking request on `route`, as traffic on its process's idle clock.
    private func requestSync(_ message: ServiceMessage, on route: ServiceRoute, until deadline: ContinuousClock.Instant?) throws(RemoteError) -> ServiceMessage {
        route.instance.idleClock.begin()
        defer { route.instance.idleClock.end() }
        return try route.connection.requestSync(message, timeout: deadline.map { ContinuousClock.now.duration(to: $0) })
    }

    /// A channel from the supervisor, for a blocked thread: ``hand(_:)``'s twin, waiting until
    /// `deadline` at most.
    private func routeBlocking(for message: ServiceMessage, until deadline: ContinuousClock.Instant?,
                               _ work: (WorkTicket<ServiceRoute>) -> ServiceSupervisor.Event) throws(RemoteError) -> ServiceRoute {
        let ticket = WorkTicket<ServiceRoute>()
        guard let supervisor, supervisor.post(work(ticket)) else { throw invalidation }
        guard let result = ticket.blockingValue(until: deadline) else {
            supervisor.post(.abandoned(client.id, ticket: ticket.id))
            let timedOut = RemoteError(.timeout, "no reply to request \"\(message.type.escapedForTerminal())\" from \(identifier) within its timeout, its launch included")
            ticket.complete(.failure(timedOut))
            ticket.markHandedOff()
            // Given a channel just then: it is used.
            if case .success(let route)? = ticket.blockingValue(until: .now) { return route }
            throw timedOut
        }
        // The request goes out on this thread, at once: what is queued behind it may go first
        // only if the loop takes it in between.
        ticket.markHandedOff()
        return try result.get()
    }

    /// Sends a one-way message, launching the service if needed; returns once it is sent.
    public func send(_ message: ServiceMessage) async throws(RemoteError) {
        if let remote { return try await remote.channel().send(message) }
        if let route = client.route.load() {
            route.instance.idleClock.touch()
            do throws(RemoteError) {
                return try await route.connection.send(message)
            } catch where error.endsChannel {
                let (again, ticket) = try await settle(error, on: route, isRetry: false)
                again.instance.idleClock.touch()
                // What is queued behind it goes once this is sent (the send returns then).
                defer { ticket.markHandedOff() }
                do throws(RemoteError) {
                    return try await again.connection.send(message)
                } catch where error.endsChannel {
                    _ = try await settle(error, on: again, isRetry: true)
                    throw error
                }
            }
        }
        // No channel: the supervisor sends it, in order with what was queued before it.
        _ = try await hand { (ticket: WorkTicket<Void>) in .work(client.id, SupervisorWork(kind: .message(message, ticket))) }
    }

    /// Runs `body` on the current channel's connection (launching the service if needed), as
    /// traffic on the idle clock: how listeners send what they add to the conversation. It is
    /// not run again after an idle exit; its failure says how the process ended.
    package func withChannel<R>(_ body: (Connection) async throws(RemoteError) -> R) async throws(RemoteError) -> R {
        if let remote { return try await body(remote.channel()) }
        return try await perform(retrying: false) { route, handedOff throws(RemoteError) in
            handedOff?()
            route.instance.idleClock.touch()
            return try await body(route.connection)
        }
    }

    /// Runs `body` on a channel: the published one, or one the supervisor gives (then `body`
    /// calls the hand-off it is given once what it sends is in the connection's hands). A
    /// failure from the channel's end is handed to the supervisor, which decides once the
    /// process's end is known: `body` again on a new process after an idle exit (once, when
    /// `retrying`), or the error that says how the process ended.
    func perform<R>(retrying: Bool, _ body: (ServiceRoute, (@Sendable () -> Void)?) async throws(RemoteError) -> R) async throws(RemoteError) -> R {
        let (route, ticket) = try await channel()
        let first: R
        let handOff: (@Sendable () -> Void)? = ticket.map { ticket in { @Sendable in ticket.markHandedOff() } }
        do throws(RemoteError) {
            defer { ticket?.markHandedOff() }
            first = try await body(route, handOff)
        } catch where error.endsChannel {
            let (again, ticket) = try await settle(error, on: route, isRetry: !retrying)
            defer { ticket.markHandedOff() }
            do throws(RemoteError) {
                return try await body(again, { @Sendable in ticket.markHandedOff() })
            } catch where error.endsChannel {
                _ = try await settle(error, on: again, isRetry: true)
                throw error
            }
        }
        return first
    }

    /// The published channel, or one from the supervisor (with its ticket).
    private func channel() async throws(RemoteError) -> (ServiceRoute, WorkTicket<ServiceRoute>?) {
        if let route = client.route.load() { return (route, nil) }
        let (route, ticket) = try await hand { .work(client.id, SupervisorWork(kind: .route($0))) }
        return (route, ticket)
    }

    /// Hands `error` (the end of `route`'s channel) to the supervisor and waits for its decision:
    /// a new channel to send again on, or the error to throw. The caller marks the ticket handed
    /// off once what it sends again is in the connection's hands (the work queued behind it waits
    /// for that; a failed ticket is marked already).
    private func settle(_ error: RemoteError, on route: ServiceRoute, isRetry: Bool) async throws(RemoteError) -> (ServiceRoute, WorkTicket<ServiceRoute>) {
        try await hand { .workFailed(client.id, SupervisorWork(kind: .route($0), isRetry: isRetry), route.instance, error) }
    }

    /// Hands the supervisor the work `work` makes of a new ticket and waits for its answer; a
    /// cancelled caller takes the work back.
    private func hand<Value>(_ work: (WorkTicket<Value>) -> ServiceSupervisor.Event) async throws(RemoteError) -> (Value, WorkTicket<Value>) {
        let ticket = WorkTicket<Value>()
        guard let supervisor, supervisor.post(work(ticket)) else { throw invalidation }
        let id = client.id
        return (try await ticket.value(onCancel: { supervisor.post(.abandoned(id, ticket: ticket.id)) }), ticket)
    }

    /// Why calls fail once the connection can never work again.
    private var invalidation: RemoteError {
        client.invalidation.withLock { $0 } ?? .launcherShutDown
    }

    // MARK: invalidation

    /// Ends the connection for good: it is closed in order, and the service process is stopped
    /// (goodbye → SIGTERM → SIGKILL) unless other connections share it. Idempotent.
    ///
    /// Returns once the process is stopped; a cancelled caller returns at once, and the
    /// supervisor sees the stop through.
    public func invalidate() async {
        let error = RemoteError(.invalidated, "the connection to \(identifier) was invalidated by the host")
        if let remote { return remote.invalidate(error) }
        let done = Latch<Void>()
        guard let supervisor, supervisor.post(.clientRemoved(client.id, error, stopDetail: "invalidated by the host", done: done)) else {
            client.invalidate(error)
            return
        }
        _ = try? await done.wait()
    }

    /// A connection released without ``invalidate()`` is invalidated, as an XPC connection
    /// released without a cancel is: its channel is closed in order, and its process stopped
    /// unless other connections share it (by its supervisor: nobody waits for it). A consumer of
    /// ``events`` sees ``Event/invalidated(_:)``, then the end of the stream.
    ///
    /// Nothing the launcher runs for a connection holds it (its supervisor holds only what it
    /// serves), so the last reference is the user's. A request or message handler that
    /// captures its own connection strongly keeps it alive, as an XPC event handler capturing
    /// its connection does: capture it weakly.
    deinit {
        let error = RemoteError(.invalidated, "the connection to \(identifier) was released without being invalidated")
        client.invalidate(error)
        supervisor?.post(.clientRemoved(client.id, error, stopDetail: "released by the host", done: nil))
        remote?.invalidate(error)
    }
}

/// Something attached to a ``ServiceConnection`` that hears about its channels, as a libwayland
/// listener is attached to its object: a ``RemoteView`` (its surface and input), and whatever
/// else rides on the conversation. The connection calls every listener for every channel, and
/// knows nothing of what they do.
package protocol ServiceChannelListener: AnyObject, Sendable {
    /// A channel (to a first or a relaunched process) is made and about to run: route the
    /// message families this listener handles (``ServiceChannel/route(surface:)``), and start
    /// afresh with a new process.
    func channelWillRun(_ channel: ServiceChannel)

    /// The channel runs: send what a new process must know before anything else (a view's
    /// size, traits and focus), on `channel.connection` (not ``ServiceConnection/withChannel(_:)``,
    /// which would wait for this very connect attempt). Callers waiting for the channel go once
    /// every listener returned; if one throws, the channel is closed and the next caller makes
    /// another.
    func channelDidOpen(_ channel: ServiceChannel) async throws(RemoteError)

    /// The channel closed: `error` says how, as ``ServiceConnection/events`` reports it (the
    /// process's end included), or is `nil` when the end is no news (an idle exit, a close in
    /// order). A channel that ran is always closed this way, once.
    func channelDidClose(_ channel: ServiceChannel, error: RemoteError?)
}

extension ServiceChannelListener {
    /// Nothing to do by default.
    package func channelDidClose(_ channel: ServiceChannel, error: RemoteError?) {}
}

/// One channel of a ``ServiceConnection``, as its listeners see it: the connection to one
/// process of the service, and what a listener may do about that process. The process is a
/// local one (its supervisor's), or one on another machine, reached through a gateway.
package struct ServiceChannel: Sendable {
    /// The connection to the process.
    package let connection: Connection
    private let owner: Owner

    private enum Owner: Sendable {
        case local(ServiceRoute, ServiceSupervisor)
        case remote(RemoteLink, (any RemoteViewStream)?)
    }

    init(route: ServiceRoute, supervisor: ServiceSupervisor) {
        connection = route.connection
        owner = .local(route, supervisor)
    }

    init(connection: Connection, remote: RemoteLink, view: (any RemoteViewStream)?) {
        self.connection = connection
        owner = .remote(remote, view)
    }

    /// A remote process's view streams, when its transport carries them: its frames arrive
    /// there, composited on its machine, and its input goes there (not as surface messages).
    package var viewStream: (any RemoteViewStream)? {
        if case .remote(_, let view) = owner { return view }
        return nil
    }

    /// The local process's idle clock; `nil` for a remote one (its machine keeps it).
    private var idleClock: IdleClock? {
        if case .local(let route, _) = owner { return route.instance.idleClock }
        return nil
    }

    /// What the process's surfaces map in the host together, against the launcher's bound.
    package var mappings: SharedBudget {
        switch owner {
        case .local(let route, _): route.instance.mappings
        case .remote(let link, _): link.mappings
        }
    }

    /// The most bytes a view's restorable state may hold (the manifest's
    /// `limits.restorableStateKiB`); 0: the host keeps no state for this service (nor for a
    /// remote one).
    package var restorableStateLimit: Int {
        if case .local(let route, _) = owner { return route.instance.manifest.limits.restorableStateBytes }
        return 0
    }

    /// Routes the surface family from the service to `handler` (each message counts as activity
    /// on the process's idle clock). Only in ``ServiceChannelListener/channelWillRun(_:)``.
    package func route(surface handler: @escaping Connection.SurfaceHandler) {
        let clock = idleClock
        connection.route(surface: { message, attachments, context throws(RemoteError) in
            clock?.touch()
            try await handler(message, attachments, context)
        })
    }

    /// Routes the share family from the service to `handler` (each message counts as activity
    /// on the process's idle clock). Only in ``ServiceChannelListener/channelWillRun(_:)``.
    package func route(share handler: @escaping Connection.ShareHandler) {
        let clock = idleClock
        connection.route(share: { message, attachments, context throws(RemoteError) in
            clock?.touch()
            try await handler(message, attachments, context)
        })
    }

    /// Work in progress on the process (a share running): it does not count as idle until
    /// ``endWork()``, like an outstanding request. A remote process's machine keeps its clock.
    package func beginWork() {
        idleClock?.begin()
    }

    /// The work ``beginWork()`` began is over.
    package func endWork() {
        idleClock?.end()
    }

    /// Whether `other` is the same channel (the same connection to the same process).
    package func isSame(as other: ServiceChannel) -> Bool {
        connection === other.connection
    }

    /// ``endService(violating:)`` for later, holding nothing of the channel: for what the
    /// channel itself keeps (a view stream's receiver), which must not keep the channel.
    package var endsService: @Sendable (String) -> Void {
        switch owner {
        case .local(let route, let supervisor):
            let instance = route.instance
            return { [weak instance, weak supervisor] rule in
                guard let instance else { return }
                supervisor?.post(.stopRequested(instance, TerminationReason(kind: .protocolViolation, detail: rule)))
            }
        case .remote(let link, _):
            return { [weak link, weak connection] rule in
                guard let connection else { return }
                link?.endService(violating: rule, on: connection)
            }
        }
    }

    /// Ends the process for breaking a rule of what the listener handles (named in `rule`): its
    /// supervisor stops it, and its end is reported as a protocol violation. A remote one's
    /// channel is closed, and its machine's launcher stops it in order.
    package func endService(violating rule: String) {
        switch owner {
        case .local(let route, let supervisor):
            supervisor.post(.stopRequested(route.instance, TerminationReason(kind: .protocolViolation, detail: rule)))
        case .remote(let link, _):
            link.endService(violating: rule, on: connection)
        }
    }
}
