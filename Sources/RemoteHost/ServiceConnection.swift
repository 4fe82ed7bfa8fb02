import RemoteCore
import Synchronization

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
///   requests outstanding at that moment failed with ``RemoteError/Code/interrupted``. The next
///   message relaunches it.
/// - ``Event/invalidated(_:)``: the connection can never work (unknown service, invalid
///   manifest, sandbox refused, crash loop, ``invalidate()``, launcher shut down). Always the
///   last event; every call from then on throws ``RemoteError/Code/invalidated``.
public final class ServiceConnection: Sendable {
    /// Lifecycle events, in order. ``events`` finishes after ``invalidated(_:)``.
    public enum Event: Sendable {
        case interrupted(RemoteError)
        case invalidated(RemoteError)
    }

    /// The service's identifier.
    public let identifier: String
    /// Unique in this process (an address could be reused by a later connection).
    let serial: UInt64
    private static let serials = Atomic<UInt64>(1)
    /// Lifecycle events (single consumer).
    public let events: AsyncStream<Event>

    private let launcher: Launcher
    private let onRequest: Connection.RequestHandler
    private let onMessage: Connection.MessageHandler
    private let eventSink: AsyncStream<Event>.Continuation
    private let state = Mutex(State())

    private struct State {
        var channel: Channel?
        var connecting = false
        var waiters: [CheckedContinuation<Void, Never>] = []
        var invalidation: RemoteError?
        /// The remote view showing this connection's service, if any (weak: the view owns us).
        weak var view: RemoteView?
        /// Whether ``Event/invalidated(_:)`` went out (the stream is finished).
        var announced = false
        /// Failures being reported right now; the invalidation waits for them, so that the
        /// crash that ends in a crash loop is reported (interrupted) before the loop (invalidated).
        var reporting = 0
    }

    /// One connection to one process of the service.
    private final class Channel: Sendable {
        let instance: ServiceInstance
        let connection: Connection
        init(instance: ServiceInstance, connection: Connection) {
            self.instance = instance
            self.connection = connection
        }
    }

    init(identifier: String, launcher: Launcher, onRequest: @escaping Connection.RequestHandler,
         onMessage: @escaping Connection.MessageHandler) {
        self.identifier = identifier
        serial = Self.serials.wrappingAdd(1, ordering: .relaxed).oldValue
        self.launcher = launcher
        self.onRequest = onRequest
        self.onMessage = onMessage
        (events, eventSink) = AsyncStream.makeStream()
    }

    /// The pid of the process serving this connection right now (bubblewrap's when sandboxed),
    /// or `nil` when none is.
    public var processIdentifier: Int32? {
        state.withLock { state in
            guard let channel = state.channel, channel.instance.ended == nil else { return nil }
            return channel.instance.process.pid
        }
    }

    /// Sends `message` as a request and waits for the reply, launching the service if needed.
    ///
    /// - Throws: ``RemoteError``: `interrupted` if the service died first, `invalidated` if it
    ///   can never be reached, `timeout`, `cancelled`, `remoteError` (the service's own failure),
    ///   `protocolViolation`.
    public func request(_ message: ServiceMessage, timeout: Duration? = nil) async throws(RemoteError) -> ServiceMessage {
        var retried = false
        while true {
            let channel = try await currentChannel()
            channel.instance.begin()
            do {
                let reply = try await channel.connection.request(message, timeout: timeout)
                channel.instance.end()
                return reply
            } catch {
                channel.instance.end()
                // The service exited idle just as this was sent (it had no request outstanding
                // when it decided to): send it once more, to a new process.
                if !retried, await racedIdleExit(error, on: channel) {
                    retried = true
                    continue
                }
                throw normalized(error)
            }
        }
    }

    /// Sends a one-way message, launching the service if needed; returns once it is sent.
    public func send(_ message: ServiceMessage) async throws(RemoteError) {
        var retried = false
        while true {
            let channel = try await currentChannel()
            channel.instance.touch()
            do {
                try await channel.connection.send(message)
                return
            } catch {
                if !retried, await racedIdleExit(error, on: channel) {
                    retried = true
                    continue
                }
                throw normalized(error)
            }
        }
    }

    /// Whether `error` on `channel` came from the service exiting idle just then (it had nothing
    /// outstanding when it decided to, so what was being sent was never handled).
    private func racedIdleExit(_ error: RemoteError, on channel: Channel) async -> Bool {
        guard error.code == .interrupted || error.code == .invalidated, state.withLock({ $0.invalidation == nil }) else { return false }
        return await channel.instance.waitForEnd(until: .now.advanced(by: channel.instance.stopGrace))?.kind == .idleExit
    }

    /// A channel that closed under this connection is an interruption, not an invalidation:
    /// only this object's own state says when it can never work again.
    private func normalized(_ error: RemoteError) -> RemoteError {
        guard error.code == .invalidated, state.withLock({ $0.invalidation == nil }) else { return error }
        return RemoteError(.interrupted, error.reason)
    }

    /// Ends the connection for good: it is closed in order, and the service process is stopped
    /// (goodbye → SIGTERM → SIGKILL) unless other connections share it. Idempotent.
    public func invalidate() async {
        let error = RemoteError(.invalidated, "the connection to \(identifier) was invalidated by the host")
        guard let channel = takeInvalidation(error) else { return }
        announceInvalidation()
        launcher.unregister(self)
        guard let channel else { return }
        // Counted before closing: the close lets serve() take this client off the count.
        let last = channel.instance.manifest.instances == .perConnection || channel.instance.clientCount <= 1
        await channel.connection.close(reason: "invalidated by the host")
        if last {
            await channel.instance.stop(TerminationReason(kind: .stopped, detail: "invalidated by the host"),
                                        grace: launcher.configuration.stopGracePeriod)
        }
    }

    /// Called by the launcher when the service can never be launched again.
    nonisolated func invalidated(by error: RemoteError) {
        guard let channel = takeInvalidation(error) else { return }
        announceInvalidation()
        if let channel { _ = launcher.submit { await channel.connection.close(reason: error.reason) } }
    }

    /// Records `error` as the invalidation and takes the channel: `nil` when the connection was
    /// already invalidated, else the channel it had (itself `nil` if none).
    private func takeInvalidation(_ error: RemoteError) -> Channel?? {
        state.withLock { state -> Channel?? in
            guard state.invalidation == nil else { return nil }
            state.invalidation = error
            defer { state.channel = nil }
            return .some(state.channel)
        }
    }

    /// Sends ``Event/invalidated(_:)`` and finishes ``events``, once no failure is being reported.
    private func announceInvalidation() {
        let error = state.withLock { state -> RemoteError? in
            guard let invalidation = state.invalidation, !state.announced, state.reporting == 0 else { return nil }
            state.announced = true
            return invalidation
        }
        guard let error else { return }
        eventSink.yield(.invalidated(error))
        eventSink.finish()
    }

    /// Whether `instance` ended (or is ending) as an idle exit, waiting as long as stopping takes.
    private func endedIdle(_ instance: ServiceInstance) async -> Bool {
        guard !instance.isUsable || instance.ended != nil else { return false }
        let bound = instance.stopGrace * 3 + .seconds(1)
        return await instance.waitForEnd(until: .now.advanced(by: bound))?.kind == .idleExit
    }

    // MARK: channels

    private enum Next {
        case use(Channel)
        case fail(RemoteError)
        case wait
        case connect
    }

    /// The open channel, or a new one (launching the service if needed). One caller connects;
    /// concurrent callers wait for it.
    private func currentChannel() async throws(RemoteError) -> Channel {
        while true {
            let next = state.withLock { state -> Next in
                if let invalidation = state.invalidation { return .fail(invalidation) }
                if let channel = state.channel, !channel.connection.isClosed, channel.instance.isUsable { return .use(channel) }
                if state.connecting { return .wait }
                state.connecting = true
                state.reporting += 1
                return .connect
            }
            switch next {
            case .use(let channel):
                return channel
            case .fail(let error):
                throw error
            case .wait:
                await withCheckedContinuation { continuation in
                    let ready = state.withLock { state in
                        if !state.connecting { return true }
                        state.waiters.append(continuation)
                        return false
                    }
                    if ready { continuation.resume() }
                }
            case .connect:
                defer {
                    let waiters = state.withLock { state in
                        state.connecting = false
                        state.reporting -= 1
                        defer { state.waiters.removeAll() }
                        return state.waiters
                    }
                    for waiter in waiters { waiter.resume() }
                    announceInvalidation()
                }
                do {
                    return try await connect()
                } catch {
                    if error.code == .invalidated {
                        invalidated(by: error)
                    } else if error.code == .interrupted {
                        eventSink.yield(.interrupted(error))
                    }
                    throw error
                }
            }
        }
    }

    private func connect() async throws(RemoteError) -> Channel {
        var instance = try await launcher.instance(for: self)
        let connection: Connection
        do {
            connection = try await open(instance)
        } catch {
            // It exited idle just then: once more, on a new process.
            guard await endedIdle(instance) else { throw error }
            instance = try await launcher.instance(for: self)
            connection = try await open(instance)
        }
        let channel = Channel(instance: instance, connection: connection)
        // Current before it runs, so that however soon it ends, serve() reports it.
        let invalidation = state.withLock { state -> RemoteError? in
            if let invalidation = state.invalidation { return invalidation }
            state.channel = channel
            return nil
        }
        if let invalidation {
            await connection.close(reason: "invalidated")
            if instance.closeChannel() == 0 || instance.manifest.instances == .perConnection {
                await instance.stop(TerminationReason(kind: .stopped, detail: "invalidated by the host"), grace: instance.stopGrace)
            }
            throw invalidation
        }
        guard launcher.submit({ await self.serve(channel) }) else {
            state.withLock { if $0.channel === channel { $0.channel = nil } }
            instance.closeChannel()
            throw RemoteError(.invalidated, "the launcher shut down")
        }
        // A view shown at a size before: the new process gets it too (once the channel runs), and
        // the traits and focus it was given.
        if let view = state.withLock({ $0.view }), let size = view.size {
            view.serviceChanged()
            try await connection.send(.resize(size))
            for message in view.stateToReplay { try await connection.send(message) }
        }
        return channel
    }

    /// A new connection to `instance` whose surface messages go to the remote view, if any.
    private func open(_ instance: ServiceInstance) async throws(RemoteError) -> Connection {
        let onMessage = self.onMessage
        let configuration = Connection.Configuration(role: .host, identifier: launcher.configuration.hostIdentifier)
        // Surface replies go back on the same connection, made below.
        let replies = Mutex<Connection?>(nil)
        let connection = try await instance.openChannel(
            configuration: configuration, onRequest: onRequest,
            onMessage: { [weak instance] message in
                instance?.touch()
                await onMessage(message)
            },
            onSurface: { [weak self, weak instance] message, attachments in
                instance?.touch()
                guard let self, let instance else { return }
                await self.surfaceMessage(message, attachments, instance: instance, replies: replies)
            })
        replies.withLock { $0 = connection }
        return connection
    }

    private func surfaceMessage(_ message: SurfaceMessage, _ attachments: [Attachment], instance: ServiceInstance,
                                replies: borrowing Mutex<Connection?>) async {
        do throws(RemoteError) {
            guard let view = state.withLock({ $0.view }) else {
                throw RemoteError(.protocolViolation, "\(message.name) but no remote view shows \(identifier)")
            }
            for reply in try view.receive(message, attachments: attachments) {
                try? await replies.withLock({ $0 })?.send(reply)
            }
        } catch {
            // A broken surface rule ends the service, with the reason.
            await instance.stop(TerminationReason(kind: .protocolViolation, detail: error.reason), grace: instance.stopGrace)
        }
    }

    /// Shows this connection's service in `view` (one view per connection).
    func attach(_ view: RemoteView) {
        state.withLock { $0.view = view }
    }

    /// Sends a surface message to the service, launching it if needed.
    func sendSurface(_ message: SurfaceMessage) async throws(RemoteError) {
        let channel = try await currentChannel()
        channel.instance.touch()
        do { try await channel.connection.send(message) } catch { throw normalized(error) }
    }

    /// Runs one channel until it closes, and reports how, if it matters to the user.
    private func serve(_ channel: Channel) async {
        var failure: RemoteError?
        do throws(RemoteError) {
            try await channel.connection.run()
        } catch {
            failure = error
        }
        channel.instance.closeChannel()
        let current = state.withLock { state -> Bool in
            guard state.channel === channel else { return false }
            state.channel = nil
            if state.announced { return false }
            state.reporting += 1
            return true
        }
        guard current else { return }
        defer {
            state.withLock { $0.reporting -= 1 }
            announceInvalidation()
        }
        // An idle exit is not news: the next message relaunches it, as if nothing happened.
        if await endedIdle(channel.instance) { return }
        let goodbye = channel.connection.peerGoodbyeReason
        if let failure {
            if failure.code == .protocolViolation {
                await channel.instance.stop(TerminationReason(kind: .protocolViolation, detail: failure.reason),
                                            grace: launcher.configuration.stopGracePeriod)
            }
            // Say how the process ended (it normally has already; a process the host must stop
            // takes at most the three steps of stopping).
            var error = failure
            let bound = channel.instance.stopGrace * 3 + .seconds(1)
            if failure.code == .interrupted, let reason = await channel.instance.waitForEnd(until: .now.advanced(by: bound)) {
                error = RemoteError(.interrupted, "\(identifier) ended: \(reason)")
            }
            eventSink.yield(.interrupted(error))
        } else if let goodbye, goodbye != FrameworkMessage.idleExitReason {
            eventSink.yield(.interrupted(RemoteError(.interrupted, "\(identifier) closed the connection: \(goodbye)")))
        }
    }
}
