import Logging
import RemoteCore
import struct Synchronization.Atomic

/// One connection to one process of a service: what a client's messages go on.
final class ServiceRoute: Sendable {
    let connection: Connection
    let instance: ServiceInstance
    /// Whose channel it is (weakly: the client holds its channels).
    weak let client: ServiceClient?

    init(connection: Connection, instance: ServiceInstance, client: ServiceClient) {
        self.connection = connection
        self.instance = instance
        self.client = client
    }
}

/// The next ``WorkTicket``'s id.
private let workTicketIDs = Atomic<UInt64>(1)

/// A result that one side hands over once and the other awaits, in a task or on a blocked
/// thread: how a client waits for the supervisor to give it a channel, or to send its message.
final class WorkTicket<Value: Sendable>: Sendable {
    private let result = Latch<Result<Value, RemoteError>>()
    private let blocked = Mutex<BlockingResult<Result<Value, RemoteError>>?>(nil)
    /// Opened once what the client does with a channel it was given is in the connection's
    /// hands: the work queued behind it waits for that, so it goes out after it.
    private let handedOff = Latch<Void>()
    let id: UInt64

    init() {
        id = workTicketIDs.wrappingAdd(1, ordering: .relaxed).oldValue
    }

    /// Hands `value` over (the first time only).
    func complete(_ value: Result<Value, RemoteError>) {
        guard result.open(value) else { return }
        blocked.withLock { $0 }?.complete(value)
    }

    /// Waits for the value; `onCancel` runs when the waiting task is cancelled first (the value
    /// is then `cancelled`).
    func value(onCancel: @escaping @Sendable () -> Void) async throws(RemoteError) -> Value {
        do {
            return try await result.wait().get()
        } catch let error as RemoteError {
            throw error
        } catch {
            onCancel()
            let cancelled = RemoteError(.cancelled, "cancelled while waiting for the service")
            complete(.failure(cancelled))
            markHandedOff()
            throw cancelled
        }
    }

    /// Blocks the calling thread until the value comes, or `deadline` (`nil` when it passes).
    func blockingValue(until deadline: ContinuousClock.Instant?) -> Result<Value, RemoteError>? {
        let waiter = BlockingResult<Result<Value, RemoteError>>.make()
        blocked.withLock { $0 = waiter }
        if let value = result.value { return value }
        return waiter.wait(timeout: deadline.map { ContinuousClock.now.duration(to: $0) })
    }

    func markHandedOff() { handedOff.open(()) }

    /// Waits until the client has handed off what it does with its channel.
    func waitUntilHandedOff() async { _ = await handedOff.waitUncancellably() }
}

/// Work a client hands to its supervisor: a message to send in order once a channel is open,
/// or a wish for a channel (a request, a listener's sending).
struct SupervisorWork: SupervisedWork, Sendable {
    enum Kind: Sendable {
        case message(ServiceMessage, WorkTicket<Void>)
        case route(WorkTicket<ServiceRoute>)
    }

    let kind: Kind
    var isRetry = false

    func retried() -> SupervisorWork { SupervisorWork(kind: kind, isRetry: true) }

    var ticketID: UInt64 {
        switch kind {
        case .message(_, let ticket): ticket.id
        case .route(let ticket): ticket.id
        }
    }

    func fail(_ error: RemoteError) {
        switch kind {
        case .message(_, let ticket): ticket.complete(.failure(error))
        case .route(let ticket):
            ticket.complete(.failure(error))
            ticket.markHandedOff()
        }
    }
}

/// The part of a ``ServiceConnection`` that its supervisor holds: its events, handlers, listeners
/// and the channel its messages take. The connection itself is the user's: when they let go of
/// it, the supervisor hears so and lets go of this.
final class ServiceClient: Sendable {
    let id: UInt64
    let eventSink: AsyncStream<ServiceConnection.Event>.Continuation
    let onRequest: Connection.RequestHandler
    let onMessage: Connection.MessageHandler
    /// The channel the connection's fast path takes, published by the supervisor once per change.
    let route = PublishedReference<ServiceRoute>()
    /// Why it can never work again, once it cannot.
    let invalidation = Mutex<RemoteError?>(nil)
    /// Who hears about new channels (weakly: they own the connection), and the last channel they
    /// were told about (a listener added later hears about it at once).
    private let listeners = Mutex<(entries: [WeakListener], announced: ServiceRoute?)>(([], nil))
    /// What ``ServiceConnection/allowOneProcess(refusal:)`` gave.
    let launchRefusal = Mutex<(@Sendable () async -> RemoteError)?>(nil)
    private static let ids = Atomic<UInt64>(1)

    private struct WeakListener {
        weak var listener: (any ServiceChannelListener)?
    }

    init(eventSink: AsyncStream<ServiceConnection.Event>.Continuation,
         onRequest: @escaping Connection.RequestHandler, onMessage: @escaping Connection.MessageHandler) {
        id = Self.ids.wrappingAdd(1, ordering: .relaxed).oldValue
        self.eventSink = eventSink
        self.onRequest = onRequest
        self.onMessage = onMessage
    }

    /// Sends the invalidated event (the last) and closes the fast path, once.
    func invalidate(_ error: RemoteError) {
        let first = invalidation.withLock { invalidation -> Bool in
            guard invalidation == nil else { return false }
            invalidation = error
            return true
        }
        guard first else { return }
        route.publish(nil)
        eventSink.yield(.invalidated(error))
        eventSink.finish()
    }

    func addListener(_ listener: any ServiceChannelListener) -> ServiceRoute? {
        listeners.withLock { listeners in
            listeners.entries.removeAll { $0.listener == nil }
            listeners.entries.append(WeakListener(listener: listener))
            return listeners.announced
        }
    }

    /// The listeners, told that `route` is the channel from now on.
    func announce(_ route: ServiceRoute) -> [any ServiceChannelListener] {
        listeners.withLock { listeners in
            listeners.announced = route
            return listeners.entries.compactMap(\.listener)
        }
    }

    /// The listeners, told that `route` is no longer the channel.
    func withdraw(_ route: ServiceRoute) -> [any ServiceChannelListener] {
        listeners.withLock { listeners in
            if listeners.announced === route { listeners.announced = nil }
            return listeners.entries.compactMap(\.listener)
        }
    }

    /// The listeners alive now: a remote service's link tells them of its channels itself.
    var liveListeners: [any ServiceChannelListener] {
        listeners.withLock { $0.entries.compactMap(\.listener) }
    }

    /// The channel the listeners heard of last, if its process still runs.
    var announced: ServiceRoute? {
        listeners.withLock { $0.announced }
    }
}

/// launchd's job for one service: starts its processes when its clients need them, opens their
/// channels, sends what was queued while a process started, watches each process, stops it in
/// steps, relaunches it after a crash (with backoff) and gives up on a crash loop.
///
/// It owns one ``SupervisorStateMachine``, confined to its ``run()`` task, which runs on
/// RemoteView's event loop: clients, processes and timers post events to its inbox; it feeds
/// them to the machine and performs the actions, starting what takes time (a launch, a
/// channel, a stop's goodbye) as child tasks of its own group. Nothing else touches the
/// machine, so it needs no lock; a connection's messages do not reach it at all while their
/// channel is published.
final class ServiceSupervisor: Sendable {
    typealias Machine = SupervisorStateMachine<ServiceInstance, ServiceRoute, SupervisorWork>

    /// What the supervisor needs of its launcher.
    struct Environment: Sendable {
        var configuration: Launcher.Configuration
        var resources: ResourceControl
        /// The user's fonts, for the sandboxes; `nil` without them.
        var userFonts: UserFontsKeeper?
        var broadcast: @Sendable (LauncherEvent) -> Void
    }

    /// Something that happened, for the machine.
    enum Event: Sendable {
        case clientAdded(ServiceClient)
        case oneProcess(UInt64)
        case work(UInt64, SupervisorWork)
        case workFailed(UInt64, SupervisorWork, ServiceInstance, RemoteError)
        case abandoned(UInt64, ticket: UInt64)
        case clientRemoved(UInt64, RemoteError, stopDetail: String, done: Latch<Void>?)
        case launched(slot: UInt64, ServiceInstance)
        case launchFailed(slot: UInt64, RemoteError)
        case channelOpened(UInt64, ServiceInstance, ServiceRoute)
        case channelOpenFailed(UInt64, ServiceInstance, RemoteError)
        case channelReplayFailed(UInt64, ServiceInstance, ServiceRoute, RemoteError)
        case channelNotMade(UInt64, ServiceInstance, RemoteError)
        case queueSent(UInt64, ServiceRoute)
        case channelEnded(UInt64, ServiceRoute, failure: RemoteError?, goodbye: String?)
        case processEnding(ServiceInstance)
        case stopRequested(ServiceInstance, TerminationReason)
        case stopStepDue(ServiceInstance)
        case endWatchDue(ServiceInstance)
        case backoffElapsed(slot: UInt64)
        case processEnded(ServiceInstance, TerminationReason)
        case shutdown(RemoteError)
        /// Hand over the state as it is once every event posted before this one is handled.
        case snapshot(Latch<Snapshot>)
    }

    /// What ``Launcher/status()`` reads.
    struct Snapshot: Sendable {
        var launches = 0
        var crashes = 0
        var lastTermination: TerminationReason?
        var invalidation: RemoteError?
        var isLaunching = false
        var processes: [(instance: ServiceInstance, clients: Int)] = []
    }

    let manifest: ServiceManifest
    private let environment: Environment
    private let inbox: AsyncStream<Event>
    private let inboxSink: AsyncStream<Event>.Continuation
    /// The state as the run left it (before it: nothing has happened), for a status asked when
    /// the supervisor does not run.
    private let published = Mutex(Snapshot())
    /// Opened when ``run()`` has returned.
    let finished = Latch<Void>()

    init(manifest: ServiceManifest, environment: Environment) {
        self.manifest = manifest
        self.environment = environment
        (inbox, inboxSink) = AsyncStream.makeStream()
    }

    var identifier: String { manifest.identifier }
    private var logger: Logger { environment.configuration.logger }
    private var stopGrace: Duration { environment.configuration.stopGracePeriod }

    /// Hands `event` to the supervisor; `false` once it has finished (the launcher shut down).
    @discardableResult
    func post(_ event: Event) -> Bool {
        if case .enqueued = inboxSink.yield(event) { return true }
        return false
    }

    // MARK: the run

    /// Runs the supervisor until the service can never run again (the launcher shut down) and
    /// every process of it is reaped.
    func run() async {
        await withTaskExecutorPreference(EventLoop.shared) {
            await withDiscardingTaskGroup { group in
                var state = RunState(machine: Machine(
                    identifier: manifest.identifier, perConnection: manifest.instances == .perConnection,
                    policy: .init(backoff: environment.configuration.backoff, maximumBackoff: environment.configuration.maximumBackoff,
                                  minimumRelaunchInterval: environment.configuration.minimumRelaunchInterval,
                                  crashLoopLimit: environment.configuration.crashLoopLimit,
                                  stableAfter: environment.configuration.stableAfter, stopGrace: stopGrace)))
                for await event in inbox {
                    let actions = handle(event, &state)
                    perform(actions, &state, &group)
                    if state.shuttingDown, state.machine.isFinished {
                        // Published before the inbox refuses a status question, so that no
                        // answer comes from before the run.
                        let last = Self.snapshot(of: state.machine)
                        published.withLock { $0 = last }
                        inboxSink.finish()
                    }
                }
                // Anything posted after the end fails as the service's invalidation says.
                let error = state.machine.invalidationError ?? .launcherShutDown
                for client in state.clients.values { client.invalidate(error) }
                let last = Self.snapshot(of: state.machine)
                published.withLock { $0 = last }
            }
        }
        finished.open(())
    }

    /// What the run keeps besides the machine.
    private struct RunState {
        var machine: Machine
        var clients: [UInt64: ServiceClient] = [:]
        /// Callers of ``ServiceConnection/invalidate()`` waiting for a process to end.
        var endWaiters: [ObjectIdentifier: [Latch<Void>]] = [:]
        /// The timers armed for each process (its stop's steps, its end watch), cancelled when it
        /// ends. Each is kept with its deadline: one whose deadline has passed has fired, and is
        /// forgotten when the next is armed, so the list holds only what may still fire.
        var timers: [ObjectIdentifier: [(id: EventLoop.TimerID, at: ContinuousClock.Instant)]] = [:]
        var shuttingDown = false

        /// Arms `action` at `deadline` for `instance`.
        mutating func arm(_ instance: ServiceInstance, at deadline: ContinuousClock.Instant, _ action: @escaping @Sendable () -> Void) {
            let now = ContinuousClock.now
            var armed = timers[ObjectIdentifier(instance), default: []].filter { $0.at > now }
            armed.append((EventLoop.shared.schedule(at: deadline, action), deadline))
            timers[ObjectIdentifier(instance)] = armed
        }
    }

    private func handle(_ event: Event, _ state: inout RunState) -> [Machine.Action] {
        let now = ContinuousClock.now
        switch event {
        case .clientAdded(let client):
            state.clients[client.id] = client
            return state.machine.clientAdded(client.id)
        case .oneProcess(let client):
            state.machine.clientAllowsOneProcess(client)
            return []
        case .work(let client, let work):
            return state.machine.workArrived(client, work, now: now)
        case .workFailed(let client, let work, let instance, let error):
            return state.machine.workFailed(client, work, on: instance, error: error, now: now)
        case .abandoned(let client, let ticket):
            return state.machine.workAbandoned(client, where: { $0.ticketID == ticket })
        case .clientRemoved(let client, let error, let stopDetail, let done):
            let serving = state.machine.process(of: client)
            let actions = state.machine.clientRemoved(client, error: error, stopDetail: stopDetail, now: now)
            if let done {
                // invalidate() returns once the process it stops (or that was stopping) has ended.
                if let serving, state.machine.isStopping(serving) {
                    state.endWaiters[ObjectIdentifier(serving), default: []].append(done)
                } else {
                    done.open(())
                }
            }
            return actions
        case .launched(let slot, let instance):
            logger.info("launched \(identifier) as pid \(instance.process.pid)\(instance.sandboxed ? " (sandboxed\(instance.identity.map { ", as \($0)" } ?? ""))" : " (UNSANDBOXED)")")
            if let warning = Launcher.abstractSocketWarning(manifest, sandboxed: instance.sandboxed) { logger.warning("\(warning)") }
            environment.broadcast(.launched(identifier: identifier, pid: instance.process.pid))
            return state.machine.launched(slot: slot, process: instance, now: now)
        case .launchFailed(let slot, let error):
            return state.machine.launchFailed(slot: slot, error: error, now: now)
        case .channelOpened(let client, let instance, let route):
            return state.machine.channelOpened(client: client, process: instance, channel: route)
        case .channelOpenFailed(let client, let instance, let error):
            return state.machine.channelOpenFailed(client: client, process: instance, error: error, now: now)
        case .channelNotMade(let client, let instance, let error):
            return state.machine.channelNotMade(client: client, process: instance, error: error)
        case .channelReplayFailed(let client, let instance, let route, let error):
            return state.machine.channelReplayFailed(client: client, process: instance, channel: route, error: error)
        case .queueSent(let client, let route):
            return state.machine.queueSent(client: client, channel: route)
        case .channelEnded(let client, let route, let failure, let goodbye):
            return state.machine.channelEnded(client: client, channel: route, failure: failure, goodbye: goodbye, now: now)
        case .processEnding(let instance):
            return state.machine.processEnding(instance, now: now)
        case .stopRequested(let instance, let reason):
            return state.machine.stopRequested(instance, reason: reason, now: now)
        case .stopStepDue(let instance):
            return state.machine.stopStepDue(process: instance, now: now)
        case .endWatchDue(let instance):
            return state.machine.endWatchDue(process: instance, now: now)
        case .backoffElapsed(let slot):
            return state.machine.backoffElapsed(slot: slot, now: now)
        case .processEnded(let instance, let reason):
            return state.machine.processEnded(instance, reason: reason, now: now)
        case .shutdown(let error):
            state.shuttingDown = true
            return state.machine.invalidate(error, now: now)
        case .snapshot(let latch):
            latch.open(Self.snapshot(of: state.machine))
            return []
        }
    }

    private func perform(_ actions: [Machine.Action], _ state: inout RunState, _ group: inout DiscardingTaskGroup) {
        var removed: [UInt64] = []
        for action in actions {
            switch action {
            case .launch(let slot):
                // Off the loop: a launch's set-up (the seccomp filter, the data folder, the
                // control groups) and a process's reaping (its groups emptied, its orphans
                // collected) make system calls that other connections should not wait behind.
                group.addTask(executorPreference: globalConcurrentExecutor) { await self.launch(slot: slot) }
            case .armBackoff(let slot, let until):
                logger.info("relaunching \(identifier) in \(until - .now) (crash \(state.machine.consecutiveCrashes) in a row)")
                _ = EventLoop.shared.schedule(at: until) { [weak self] in self?.post(.backoffElapsed(slot: slot)) }
            case .openChannel(let client, let instance):
                guard let entry = state.clients[client] else { continue }
                group.addTask { await self.openChannel(for: entry, to: instance) }
            case .sendQueue(let client, let route, let work):
                group.addTask { await self.send(work, on: route, for: client) }
            case .publish(let client, let route):
                state.clients[client]?.route.publish(route)
            case .fail(let work, let error):
                for item in work { item.fail(error) }
            case .refuse(let client, let work):
                let refusal = state.clients[client]?.launchRefusal.withLock { $0 }
                let identifier = identifier
                group.addTask {
                    let error = await refusal?() ?? RemoteError(.invalidated, "\(identifier) runs once for this connection, and has ended")
                    for item in work { item.fail(error) }
                }
            case .interrupt(let client, let error):
                state.clients[client]?.eventSink.yield(.interrupted(error))
            case .channelClosed(let client, let route, let error, let interrupts):
                // A client removed while its channel opened is reached through the channel.
                guard let entry = state.clients[client] ?? route.client else { continue }
                if interrupts, let error { entry.eventSink.yield(.interrupted(error)) }
                let closed = ServiceChannel(route: route, supervisor: self)
                for listener in entry.withdraw(route) { listener.channelDidClose(closed, error: error) }
                // The fast path's last channel, replaced when a reader was taking it, goes now.
                entry.route.reclaim()
            case .close(let route, let reason):
                route.connection.startClosing(reason: reason)
            case .stop(let instance, let step, let reason, let next):
                switch step {
                case .goodbye: instance.beginStop(reason)
                case .terminate: instance.terminate(after: stopGrace)
                case .kill: instance.kill(after: stopGrace)
                }
                if let next {
                    state.arm(instance, at: next) { [weak self, weak instance] in
                        if let instance { self?.post(.stopStepDue(instance)) }
                    }
                }
            case .armEndWatch(let instance, let at):
                state.arm(instance, at: at) { [weak self, weak instance] in
                    if let instance { self?.post(.endWatchDue(instance)) }
                }
            case .ended(let instance, let reason):
                logger.info("\(identifier) (pid \(instance.process.pid)) ended: \(reason)")
                environment.broadcast(.terminated(identifier: identifier, pid: instance.process.pid, reason: reason))
                for waiter in state.endWaiters.removeValue(forKey: ObjectIdentifier(instance)) ?? [] { waiter.open(()) }
                for timer in state.timers.removeValue(forKey: ObjectIdentifier(instance)) ?? [] { EventLoop.shared.cancel(timer.id) }
            case .invalidateClient(let client, let error):
                state.clients[client]?.invalidate(error)
                removed.append(client)
            case .invalidated(let error):
                if !state.shuttingDown {
                    logger.error("\(identifier) is invalidated: \(error.reason.escapedForTerminal())")
                    environment.broadcast(.invalidated(identifier: identifier, reason: error))
                }
            }
        }
        for client in removed { state.clients[client] = nil }
    }

    private static func snapshot(of machine: Machine) -> Snapshot {
        Snapshot(launches: machine.launches, crashes: machine.crashes, lastTermination: machine.lastTermination,
                 invalidation: machine.invalidationError, isLaunching: machine.isLaunching,
                 processes: machine.processes.map { ($0, machine.clientCount(of: $0)) })
    }

    /// The state once every event posted before this call is handled (what this caller did is
    /// in it), or as the run left it when the supervisor does not run.
    func currentSnapshot(running: Bool) async -> Snapshot {
        let latch = Latch<Snapshot>()
        if running, post(.snapshot(latch)), let answered = await latch.waitUncancellably() { return answered }
        return published.withLock { $0 }
    }

    // MARK: what takes time, in child tasks

    /// Launches a process for `slot` and runs it until it is reaped.
    private func launch(slot: UInt64) async {
        let configuration = environment.configuration
        let instance: ServiceInstance
        do {
            instance = try await ServiceInstance.launch(manifest, sandbox: configuration.sandbox, dataRoot: configuration.dataRoot,
                                                        users: configuration.serviceUsers, userFonts: environment.userFonts,
                                                        protocolVersions: configuration.protocolVersions,
                                                        hostIdentifier: configuration.hostIdentifier,
                                                        resources: environment.resources, maxMappedBytes: configuration.maxMappedBytesPerService,
                                                        maxIncomingRequests: configuration.maxIncomingRequestsPerService,
                                                        logger: configuration.logger)
        } catch {
            post(.launchFailed(slot: slot, error))
            return
        }
        post(.launched(slot: slot, instance))
        let observer = ServiceInstance.Observer(
            ending: { [weak self] in self?.post(.processEnding(instance)) },
            needsStop: { [weak self] reason in self?.post(.stopRequested(instance, reason)) })
        let reason = await instance.run(idleGrace: configuration.idleGracePeriod, stopGrace: configuration.stopGracePeriod, observer: observer)
        post(.processEnded(instance, reason))
    }

    /// What the host announces on a client's channel to a process of `manifest`: that it keeps
    /// its views' state, unless the manifest turned that off (`limits.restorableStateKiB` 0);
    /// and, when `configuration` says so, that it takes the keyboard focus when Tab leaves a view
    /// (``RemoteView/focusLeaves``); and, unless it says not to, that it reads the views' semantic
    /// trees (``RemoteView/accessibility``).
    static func hostCapabilities(for manifest: ServiceManifest, configuration: Launcher.Configuration) -> [String] {
        (manifest.limits.restorableStateKiB > 0 ? [RestorableStateCapability.name] : [])
            + (configuration.takesFocusFromViews ? [FocusLeaveCapability.name] : [])
            + (configuration.readsAccessibility ? [AccessibilityCapability.name] : [])
    }

    /// Opens a channel to `instance` for `client`, tells the listeners, and runs it until it closes.
    private func openChannel(for client: ServiceClient, to instance: ServiceInstance) async {
        let onMessage = client.onMessage
        let connection: Connection
        do throws(ServiceInstance.ChannelFailure) {
            connection = try await instance.openChannel(
                configuration: Connection.Configuration(role: .host, identifier: environment.configuration.hostIdentifier,
                                                        capabilities: Self.hostCapabilities(for: instance.manifest, configuration: environment.configuration)),
                onRequest: client.onRequest,
                onMessage: { [weak instance] message, context in
                    instance?.idleClock.touch()
                    await onMessage(message, context)
                })
        } catch {
            switch error {
            case .notMade(let error): post(.channelNotMade(client.id, instance, error))
            case .notTaken(let error): post(.channelOpenFailed(client.id, instance, error))
            }
            return
        }
        let route = ServiceRoute(connection: connection, instance: instance, client: client)
        // The channel's end is posted after its opening's outcome, so the machine sees them in
        // that order.
        let outcomePosted = Latch<Void>()
        let channel = ServiceChannel(route: route, supervisor: self)
        let listeners = client.announce(route)
        for listener in listeners { listener.channelWillRun(channel) }
        await withDiscardingTaskGroup { group in
            group.addTask {
                var failure: RemoteError?
                do throws(RemoteError) {
                    try await connection.run()
                } catch {
                    failure = error
                }
                _ = await outcomePosted.waitUncancellably()
                self.post(.channelEnded(client.id, route, failure: failure, goodbye: connection.peerGoodbyeReason))
            }
            // What a new process must know comes before any work: the listeners send it (a
            // remote view's size, traits and focus) before the queue is sent.
            do throws(RemoteError) {
                for listener in listeners { try await listener.channelDidOpen(channel) }
                post(.channelOpened(client.id, instance, route))
            } catch {
                connection.startClosing(reason: "it could not be told what a new process must know: \(error.reason)")
                post(.channelReplayFailed(client.id, instance, route, error))
            }
            outcomePosted.open(())
        }
    }

    /// Sends `work` on `route`, in order: messages here, and each channel wish handed to its
    /// client, which hands its request to the connection before the next goes.
    private func send(_ work: [SupervisorWork], on route: ServiceRoute, for client: UInt64) async {
        for item in work {
            switch item.kind {
            case .message(let message, let ticket):
                route.instance.idleClock.touch()
                do {
                    try await route.connection.send(message)
                    ticket.complete(.success(()))
                } catch where error.endsChannel {
                    // Decided by the machine; once the supervisor has finished, as it ended.
                    if !post(.workFailed(client, item, route.instance, error)) { item.fail(.launcherShutDown) }
                } catch {
                    ticket.complete(.failure(error))
                }
            case .route(let ticket):
                ticket.complete(.success(route))
                await ticket.waitUntilHandedOff()
            }
        }
        post(.queueSent(client, route))
    }
}

extension RemoteError {
    /// Whether this failure came from a channel's end (not the caller's own timeout or cancel,
    /// nor the service's answer): its supervisor decides what it means once the process's end is
    /// known.
    var endsChannel: Bool { code == .interrupted || code == .invalidated }

    /// What a launcher's connections fail with once it has shut down.
    static var launcherShutDown: RemoteError { RemoteError(.invalidated, "the launcher shut down") }
}
