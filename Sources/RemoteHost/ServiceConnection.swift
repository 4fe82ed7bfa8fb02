import RemoteCore
import struct Synchronization.Atomic

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
    private let machine = Mutex(ServiceConnectionStateMachine<Channel>())
    /// Who hears about new channels (weakly: they own this connection), and the last channel
    /// they were told about (a listener added later hears about it at once).
    private let listeners = Mutex<(entries: [WeakListener], announced: Channel?)>(([], nil))
    /// The process of the last channel made (weakly: the launcher owns it).
    private let lastInstance = Mutex(WeakInstance())

    /// One connection to one process of the service.
    final class Channel: Sendable {
        let instance: ServiceInstance
        let connection: Connection
        init(instance: ServiceInstance, connection: Connection) {
            self.instance = instance
            self.connection = connection
        }

        /// Whether new work can go to it.
        var isUsable: Bool { !connection.isClosed && instance.isUsable }

        /// Whether it still counts among its instance's clients.
        private let counted = Atomic<Bool>(true)

        /// Takes it off its instance's clients, once (whoever sees it closed first: its job, or
        /// the invalidation that closed it); returns how many clients are left, or `nil` when it
        /// was already off.
        @discardableResult
        func leave() -> Int? {
            counted.exchange(false, ordering: .acquiringAndReleasing) ? instance.closeChannel() : nil
        }
    }

    private struct WeakListener {
        weak var listener: (any ServiceChannelListener)?
    }

    private struct WeakInstance {
        weak var instance: ServiceInstance?
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
        guard let channel = machine.withLock({ $0.channel }), channel.instance.ended == nil else { return nil }
        return channel.instance.process.pid
    }

    /// Only the first process is ever launched for this connection (a share's: its activity
    /// runs once, for its items): once it has gone, a use that would need another throws what
    /// `refusal` says (awaited then, so that it can say how the work ended).
    package func allowOneProcess(refusal: @escaping @Sendable () async -> RemoteError) {
        launchRefusal.withLock { $0 = refusal }
        machine.withLock { $0.allowOneChannel() }
    }

    /// What ``allowOneProcess(refusal:)`` gave.
    private let launchRefusal = Mutex<(@Sendable () async -> RemoteError)?>(nil)

    /// Attaches `listener` (a libwayland listener attached to its object), held weakly: it
    /// hears about every channel opened from now on, and about the channel open now, if any
    /// (``ServiceChannelListener/channelWillRun(_:)`` at once; there is nothing to replay yet).
    package func addListener(_ listener: any ServiceChannelListener) {
        let open = listeners.withLock { listeners -> Channel? in
            listeners.entries.removeAll { $0.listener == nil }
            listeners.entries.append(WeakListener(listener: listener))
            return listeners.announced
        }
        if let open, open.isUsable {
            listener.channelWillRun(ServiceChannel(connection: open.connection, instance: open.instance))
        }
    }

    // MARK: requests and messages

    /// Sends `message` as a request and waits for the reply, launching the service if needed.
    ///
    /// - Throws: `RemoteError`: `interrupted` if the service died first, `invalidated` if it
    ///   can never be reached, `timeout`, `cancelled`, `remoteError` (the service's own failure),
    ///   `protocolViolation`.
    public func request(_ message: ServiceMessage, timeout: Duration? = nil) async throws(RemoteError) -> ServiceMessage {
        try await request(message, timeout: timeout, retried: false)
    }

    /// ``request(_:timeout:)``; `retried`: the request was sent once already, to a process that
    /// exited idle, and is not sent again after another idle exit.
    private func request(_ message: ServiceMessage, timeout: Duration?, retried: Bool) async throws(RemoteError) -> ServiceMessage {
        var retried = retried
        while true {
            let channel = try await currentChannel()
            channel.instance.idleClock.begin()
            do {
                let reply = try await channel.connection.request(message, timeout: timeout)
                channel.instance.idleClock.end()
                return reply
            } catch {
                channel.instance.idleClock.end()
                // The service exited idle just as this was sent (it had no request outstanding
                // when it decided to): send it once more, to a new process.
                let end = await processEnd(after: error, on: channel, waiting: !retried)
                if !retried, end?.kind == .idleExit {
                    retried = true
                    continue
                }
                throw explained(error, end: end)
            }
        }
    }

    /// Sends `message` as a request and blocks the calling thread until the reply comes,
    /// launching the service if needed: for callers that are not `async` (XPC's
    /// `xpc_connection_send_message_with_reply_sync`).
    ///
    /// While the service's process runs and is connected, the calling thread sends the request
    /// and reads the reply itself, in a blocking `recvmsg` (`Connection.requestSync(_:timeout:)`):
    /// no task, no hand-off to another thread, and the event loop is not woken for it when it
    /// sleeps. Otherwise the call starts the launch (or joins the one under way) and sends the
    /// request once the process is connected, all within `timeout`. A process that exited idle
    /// just as the request was sent is launched again and sent it once more, as
    /// ``request(_:timeout:)`` does.
    ///
    /// - Important: It blocks a thread. Do not call it from a task on Swift's cooperative
    ///   thread pool (one thread per core: a blocked one stalls other tasks, and the launch
    ///   this call may wait for runs in a task), nor on RemoteView's event loop thread (code
    ///   preferring ``readerExecutor``), where it would wait for itself: there it throws at once.
    ///   Call it from a thread of your own.
    ///
    /// - Parameters:
    ///   - message: The request: its type, payload and attachments.
    ///   - timeout: How long to wait for the reply, launch included; `nil` uses the
    ///     connection's default for the request and does not limit the launch.
    /// - Throws: `RemoteError`: as ``request(_:timeout:)`` does; `invalidArgument` on the event
    ///   loop's thread; `timeout` when the process was launched and no reply came within `timeout`.
    public func requestSync(_ message: ServiceMessage, timeout: Duration? = nil) throws(RemoteError) -> ServiceMessage {
        guard !EventLoop.shared.isLoopThread else {
            throw RemoteError(.invalidArgument, "requestSync(\"\(message.type.escapedForTerminal())\") to \(identifier) was called on RemoteView's event loop thread, which must read the reply: it would wait for itself (use request(_:timeout:) there)")
        }
        let deadline = timeout.map { ContinuousClock.now.advanced(by: $0) }
        // A process that runs and is connected: the call is its connection's, on this thread.
        if let channel = machine.withLock({ $0.channel }), channel.isUsable {
            channel.instance.idleClock.begin()
            do {
                let reply = try channel.connection.requestSync(message, timeout: timeout)
                channel.instance.idleClock.end()
                return reply
            } catch {
                channel.instance.idleClock.end()
                guard error.code == .interrupted || error.code == .invalidated else { throw error }
                // The process ended under the call: how, and, after an idle exit (the service
                // had nothing outstanding, so it never handled this), once more to a new one,
                // within what is left of the timeout.
                return try blocking(message, until: deadline) { [self] () async throws(RemoteError) -> ServiceMessage in
                    let end = await processEnd(after: error, on: channel, waiting: true)
                    guard end?.kind == .idleExit else { throw explained(error, end: end) }
                    return try await request(message, timeout: deadline.map { ContinuousClock.now.duration(to: $0) }, retried: true)
                }
            }
        }
        return try blocking(message, until: deadline) { [self] () async throws(RemoteError) -> ServiceMessage in
            try await request(message, timeout: deadline.map { ContinuousClock.now.duration(to: $0) }, retried: false)
        }
    }

    /// Runs `body` (a request that must launch the service first) in a task, blocking the
    /// calling thread until it has finished or `deadline` has passed (the task is cancelled then).
    private func blocking(_ message: ServiceMessage, until deadline: ContinuousClock.Instant?,
                          _ body: @escaping @Sendable () async throws(RemoteError) -> ServiceMessage) throws(RemoteError) -> ServiceMessage {
        let result = BlockingResult<Result<ServiceMessage, RemoteError>>.make()
        let task = Task {
            do throws(RemoteError) {
                result.complete(.success(try await body()))
            } catch {
                result.complete(.failure(error))
            }
        }
        guard let outcome = result.wait(timeout: deadline.map { ContinuousClock.now.duration(to: $0) }) else {
            task.cancel()
            throw RemoteError(.timeout, "no reply to request \"\(message.type.escapedForTerminal())\" from \(identifier) within its timeout, its launch included")
        }
        return try outcome.get()
    }

    /// Sends a one-way message, launching the service if needed; returns once it is sent.
    public func send(_ message: ServiceMessage) async throws(RemoteError) {
        var retried = false
        while true {
            let channel = try await currentChannel()
            channel.instance.idleClock.touch()
            do {
                try await channel.connection.send(message)
                return
            } catch {
                let end = await processEnd(after: error, on: channel, waiting: !retried)
                if !retried, end?.kind == .idleExit {
                    retried = true
                    continue
                }
                throw explained(error, end: end)
            }
        }
    }

    /// Runs `body` on the current channel's connection (launching the service if needed), as
    /// traffic on the idle clock: how listeners send what they add to the conversation.
    package func withChannel<R>(_ body: (Connection) async throws(RemoteError) -> R) async throws(RemoteError) -> R {
        let channel = try await currentChannel()
        channel.instance.idleClock.touch()
        do {
            return try await body(channel.connection)
        } catch {
            // The process's end, when that is what failed (its handshake never came, say): how
            // it ended and what it said, waiting for it at most a grace period.
            throw explained(error, end: await processEnd(after: error, on: channel, waiting: true))
        }
    }

    /// How `channel`'s process ended, when `error` on it came from that end (waiting at most a
    /// grace period for the launcher to see it): an idle exit just then means that what was being
    /// sent was never handled (the service had nothing outstanding when it decided to exit).
    /// After the one retry, it does not wait: the process's end is given only if it is known.
    private func processEnd(after error: RemoteError, on channel: Channel, waiting: Bool) async -> TerminationReason? {
        guard error.code == .interrupted || error.code == .invalidated, machine.withLock({ $0.invalidation == nil }) else { return nil }
        guard waiting else { return channel.instance.ended }
        return await channel.instance.waitForEnd(until: .now.advanced(by: channel.instance.stopGrace))
    }

    /// `error` as the caller sees it: a channel's end is an interruption (``normalized(_:)``), and
    /// when the process ended, the reason says how (a service that broke the protocol on its main
    /// connection and exited is seen by this one only as a close, which says nothing of why).
    private func explained(_ error: RemoteError, end: TerminationReason?) -> RemoteError {
        let error = normalized(error)
        guard error.code == .interrupted, let end else { return error }
        return ended(end)
    }

    /// The interruption that `reason`, the end of this connection's process, is: how it ended
    /// and what it last wrote to stderr.
    private func ended(_ reason: TerminationReason) -> RemoteError {
        RemoteError(.interrupted, "\(identifier) ended: \(reason)", standardErrorTail: reason.standardErrorTail)
    }

    /// A channel that closed under this connection is an interruption, not an invalidation:
    /// only this object's own state says when it can never work again.
    private func normalized(_ error: RemoteError) -> RemoteError {
        guard error.code == .invalidated, machine.withLock({ $0.invalidation == nil }) else { return error }
        return RemoteError(.interrupted, error.reason)
    }

    // MARK: invalidation

    /// Ends the connection for good: it is closed in order, and the service process is stopped
    /// (goodbye → SIGTERM → SIGKILL) unless other connections share it. Idempotent.
    ///
    /// Returns once the process is stopped; a cancelled caller returns at once, and the
    /// launcher sees the stop through.
    public func invalidate() async {
        let error = RemoteError(.invalidated, "the connection to \(identifier) was invalidated by the host")
        guard case .invalidated(let channel, let announce) = machine.withLock({ $0.invalidate(error) }) else { return }
        if announce { announceInvalidation(error) }
        launcher.unregister(serial)
        guard let channel else { return }
        let stopped = Latch<Void>()
        let stop = Self.closing(channel, reason: "invalidated by the host", grace: launcher.configuration.stopGracePeriod)
        // The stop runs in the launcher's own work, so that a cancelled caller cannot cut it short.
        guard launcher.submit({ await stop(); stopped.open(()) }) else { return await stop() }
        _ = try? await stopped.wait()
    }

    /// A connection released without ``invalidate()`` is invalidated, as an XPC connection
    /// released without a cancel is: its channel is closed in order, and its process stopped
    /// unless other connections share it (in the launcher's work: nobody waits for it). A
    /// consumer of ``events`` sees ``Event/invalidated(_:)``, then the end of the stream.
    ///
    /// Nothing the launcher runs for a connection holds it (the job serving its channel refers
    /// to it weakly), so the last reference is the user's. A request or message handler that
    /// captures its own connection strongly keeps it alive, as an XPC event handler capturing
    /// its connection does: capture it weakly.
    deinit {
        let error = RemoteError(.invalidated, "the connection to \(identifier) was released without being invalidated")
        guard case .invalidated(let channel, _) = machine.withLock({ $0.invalidate(error) }) else { return }
        // Every pending report held this object, so none is under way: announce at once.
        announceInvalidation(error)
        launcher.unregister(serial)
        guard let channel else { return }
        // Refused only once the launcher has shut down, which closed every channel there was.
        _ = launcher.submit(Self.closing(channel, reason: "released by the host", grace: launcher.configuration.stopGracePeriod))
    }

    /// What ending a connection's `channel` for good takes: closing it in order, then stopping its
    /// process unless other connections share it.
    private static func closing(_ channel: Channel, reason: String, grace: Duration) -> @Sendable () async -> Void {
        // Counted before closing: the close lets the channel's job take this client off the count.
        let last = channel.instance.manifest.instances == .perConnection || channel.instance.clientCount <= 1
        return {
            await channel.connection.close(reason: reason)
            // Off the clients now, so that once invalidate() returns, status() no longer counts it
            // (its job, which sees the close later, does not count it off again).
            channel.leave()
            if last {
                await channel.instance.stop(TerminationReason(kind: .stopped, detail: reason), grace: grace)
            }
        }
    }

    /// Called by the launcher when the service can never be launched again.
    nonisolated func invalidated(by error: RemoteError) {
        guard case .invalidated(let channel, let announce) = machine.withLock({ $0.invalidate(error) }) else { return }
        if announce { announceInvalidation(error) }
        if let channel { _ = launcher.submit { await channel.connection.close(reason: error.reason) } }
    }

    /// Sends ``Event/invalidated(_:)`` and finishes ``events``.
    private func announceInvalidation(_ error: RemoteError) {
        eventSink.yield(.invalidated(error))
        eventSink.finish()
    }

    /// Whether `instance` ended (or is ending) as an idle exit, waiting as long as stopping takes.
    private func endedIdle(_ instance: ServiceInstance) async -> Bool {
        guard !instance.isUsable || instance.ended != nil else { return false }
        return await instance.waitForStop()?.kind == .idleExit
    }

    // MARK: channels

    /// The open channel, or a new one (launching the service if needed). One caller connects;
    /// concurrent callers wait for it.
    private func currentChannel() async throws(RemoteError) -> Channel {
        while true {
            switch machine.withLock({ $0.channelNeeded(isUsable: \.isUsable) }) {
            case .use(let channel):
                return channel
            case .fail(let error):
                throw error
            case .wait(let waiter):
                do {
                    try await waiter.wait(onAbandon: { [weak self] in self?.machine.withLock { $0.abandon(waiter) } })
                } catch {
                    throw RemoteError(.cancelled, "cancelled while waiting for a connection to \(identifier)")
                }
            case .refused:
                let refusal = launchRefusal.withLock { $0 }
                throw await refusal?() ?? RemoteError(.invalidated, "\(identifier) runs once for this connection, and has ended")
            case .connect:
                do {
                    let channel = try await connect()
                    connectEnded()
                    return channel
                } catch {
                    // Reported while the attempt still counts, so an invalidation that comes
                    // meanwhile is announced after this.
                    if error.code == .invalidated {
                        invalidated(by: error)
                    } else if error.code == .interrupted {
                        eventSink.yield(.interrupted(error))
                    }
                    connectEnded()
                    throw error
                }
            }
        }
    }

    /// The connect attempt ended: let its waiters go, and announce an invalidation that waited
    /// for it.
    private func connectEnded() {
        let (waiters, announce) = machine.withLock { $0.connectEnded() }
        waiters.resumeAll(returning: ())
        if let announce { announceInvalidation(announce) }
    }

    private func connect() async throws(RemoteError) -> Channel {
        var instance = try await launcher.instance(for: self)
        let connection: Connection
        do {
            connection = try await open(instance)
        } catch where error.code != .cancelled {
            // It exited idle just then, or it is the process of this connection's last channel,
            // which saw it end before the launcher did (the launcher's control connection to it
            // had not read its end yet) and reports that end: this caller comes after it. Once
            // more, on a new process.
            let servedThis = lastInstance.withLock { $0.instance } === instance
            guard servedThis ? true : await endedIdle(instance) else { throw error }
            instance = try await launcher.instance(for: self)
            connection = try await open(instance)
        }
        lastInstance.withLock { $0.instance = instance }
        let channel = Channel(instance: instance, connection: connection)
        // Under the listeners' lock, so that a listener added meanwhile hears about it either here
        // or in addListener.
        let attached = listeners.withLock { listeners in
            listeners.announced = channel
            return listeners.entries.compactMap(\.listener)
        }
        let opened = ServiceChannel(connection: connection, instance: instance)
        for listener in attached { listener.channelWillRun(opened) }
        // Current before it runs, so that however soon it ends, its job reports it.
        if case .refuse(let invalidation) = machine.withLock({ $0.connected(channel) }) {
            await discard(channel, reason: "invalidated")
            if channel.leave() == 0 || instance.manifest.instances == .perConnection {
                await instance.stop(TerminationReason(kind: .stopped, detail: "invalidated by the host"), grace: instance.stopGrace)
            }
            throw invalidation
        }
        // The job refers to this object weakly: a connection its user released is closed (see
        // deinit) while its channel still runs.
        guard launcher.submit({ [weak self] in
            let failure = await Self.run(channel)
            await self?.ended(channel, failure: failure)
        }) else {
            // Nobody will run it: its end is no news, and nothing of it may stay behind.
            if machine.withLock({ $0.channelEnded(channel) }), let announce = machine.withLock({ $0.reportEnded() }) {
                announceInvalidation(announce)
            }
            await discard(channel, reason: "the launcher shut down")
            channel.leave()
            throw RemoteError(.invalidated, "the launcher shut down")
        }
        // What a new process must know comes before any caller's message: the listeners send
        // it (a remote view's size, traits and focus) before the waiting callers go. If that
        // fails (the caller was cancelled, the process went), the channel is closed, so that the
        // next caller makes one that was told.
        do {
            for listener in attached { try await listener.channelDidOpen(opened) }
        } catch {
            await channel.connection.close(reason: "it could not be told what a new process must know: \(error.reason)")
            throw normalized(error)
        }
        return channel
    }

    /// Closes a channel that never ran, and forgets it as the one the listeners heard of.
    private func discard(_ channel: Channel, reason: String) async {
        listeners.withLock { if $0.announced === channel { $0.announced = nil } }
        await channel.connection.close(reason: reason)
    }

    /// A new connection to `instance`, not running yet.
    private func open(_ instance: ServiceInstance) async throws(RemoteError) -> Connection {
        let onMessage = self.onMessage
        let configuration = Connection.Configuration(role: .host, identifier: launcher.configuration.hostIdentifier)
        return try await instance.openChannel(
            configuration: configuration, onRequest: onRequest,
            onMessage: { [weak instance] message, context in
                instance?.idleClock.touch()
                await onMessage(message, context)
            })
    }

    /// Runs one channel until it closes; returns how its connection failed (`nil`: in order).
    private static func run(_ channel: Channel) async -> RemoteError? {
        var failure: RemoteError?
        do throws(RemoteError) {
            try await channel.connection.run()
        } catch {
            failure = error
        }
        channel.leave()
        return failure
    }

    /// `channel` closed (`failure`: how its connection failed): tells the listeners, and
    /// reports it if it matters to the user.
    private func ended(_ channel: Channel, failure: RemoteError?) async {
        let attached = listeners.withLock { listeners in
            if listeners.announced === channel { listeners.announced = nil }
            return listeners.entries.compactMap(\.listener)
        }
        let closed = ServiceChannel(connection: channel.connection, instance: channel.instance)
        guard machine.withLock({ $0.channelEnded(channel) }) else {
            let error = machine.withLock { $0.invalidation } ?? RemoteError(.invalidated, "the connection to \(identifier) was invalidated")
            for listener in attached { await listener.channelDidClose(closed, error: error) }
            return
        }
        let reported = await report(failure, of: channel)
        for listener in attached { await listener.channelDidClose(closed, error: reported) }
        if let announce = machine.withLock({ $0.reportEnded() }) { announceInvalidation(announce) }
    }

    /// Reports the end of `channel` (`failure`: how its connection failed) as an interruption,
    /// unless it was an idle exit (not news: the next message relaunches it, as if nothing
    /// happened).
    @discardableResult
    private func report(_ failure: RemoteError?, of channel: Channel) async -> RemoteError? {
        if await endedIdle(channel.instance) { return nil }
        let goodbye = channel.connection.peerGoodbyeReason
        if let failure {
            if failure.code == .protocolViolation {
                await channel.instance.stop(TerminationReason(kind: .protocolViolation, detail: failure.reason),
                                            grace: launcher.configuration.stopGracePeriod)
            }
            // Say how the process ended (it normally has already; a process the host must stop
            // takes at most the three steps of stopping).
            var error = failure
            if failure.code == .interrupted, let reason = await channel.instance.waitForStop() {
                error = ended(reason)
            }
            eventSink.yield(.interrupted(error))
            return error
        } else if let goodbye, goodbye != FrameworkMessage.idleExitReason {
            // A process the host stops says goodbye on its way out: then how it ended (the
            // host's reason) is the news, not the goodbye it was made to say.
            var error = RemoteError(.interrupted, "\(identifier) closed the connection: \(goodbye.escapedForTerminal())")
            if channel.instance.isBeingStopped, let reason = await channel.instance.waitForStop() {
                error = ended(reason)
            }
            eventSink.yield(.interrupted(error))
            return error
        }
        return nil
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
    func channelDidClose(_ channel: ServiceChannel, error: RemoteError?) async
}

extension ServiceChannelListener {
    /// Nothing to do by default.
    package func channelDidClose(_ channel: ServiceChannel, error: RemoteError?) async {}
}

/// One channel of a ``ServiceConnection``, as its listeners see it: the connection to one
/// process of the service, and what a listener may do about that process.
package struct ServiceChannel: Sendable {
    /// The connection to the process.
    package let connection: Connection
    private let instance: ServiceInstance

    init(connection: Connection, instance: ServiceInstance) {
        self.connection = connection
        self.instance = instance
    }

    /// What the process's surfaces map in the host together, against the launcher's bound.
    package var mappings: SharedBudget { instance.mappings }

    /// Routes the surface family from the service to `handler` (each message counts as activity
    /// on the process's idle clock). Only in ``ServiceChannelListener/channelWillRun(_:)``.
    package func route(surface handler: @escaping Connection.SurfaceHandler) {
        let clock = instance.idleClock
        connection.route(surface: { message, attachments, context throws(RemoteError) in
            clock.touch()
            try await handler(message, attachments, context)
        })
    }

    /// Routes the share family from the service to `handler` (each message counts as activity
    /// on the process's idle clock). Only in ``ServiceChannelListener/channelWillRun(_:)``.
    package func route(share handler: @escaping Connection.ShareHandler) {
        let clock = instance.idleClock
        connection.route(share: { message, attachments, context throws(RemoteError) in
            clock.touch()
            try await handler(message, attachments, context)
        })
    }

    /// Work in progress on the process (a share running): it does not count as idle until
    /// ``endWork()``, like an outstanding request.
    package func beginWork() {
        instance.idleClock.begin()
    }

    /// The work ``beginWork()`` began is over.
    package func endWork() {
        instance.idleClock.end()
    }

    /// Whether `other` is the same channel (the same connection to the same process).
    package func isSame(as other: ServiceChannel) -> Bool {
        connection === other.connection
    }

    /// Ends the process for breaking a rule of what the listener handles (named in `rule`): it
    /// is stopped and its end reported as a protocol violation.
    package func endService(violating rule: String) async {
        await instance.stop(TerminationReason(kind: .protocolViolation, detail: rule), grace: instance.stopGrace)
    }
}
