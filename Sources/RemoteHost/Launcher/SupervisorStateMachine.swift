import RemoteCore

/// Work a client hands to the supervisor while it has no channel to send it on (a message, a
/// request waiting for its channel): queued in order, sent once a channel is open, and sent
/// again once, to a new process, when the process it went to exited idle just then.
package protocol SupervisedWork {
    /// Whether it was sent once already, to a process that exited idle (it is not sent again).
    var isRetry: Bool { get }
    /// The same work, to be sent again to a new process.
    func retried() -> Self
}

/// Everything the host knows of one service's processes, as a value: the process's phase, its
/// clients and their channels, the work queued while a process starts, the crash backoff, the
/// stop's steps and whether the service can ever run again; and what its ``ServiceSupervisor``
/// must do next. No process, clock, socket or lock of its own: the supervisor drives it on its
/// event loop, feeds it events with the current time, and performs the actions it returns.
///
/// The model is async-http-client's connection pool state machine: one `mutating func` per
/// event, a state enum whose cases carry what is valid in them, and `Action`s out.
///
/// ```
/// stopped ──work queued──▶ launching ──launched──▶ running ──goodbye / stop──▶ ending ──ended──▶ stopped
///    │  ▲                      │                      │  (idle timeout, last client,   │ goodbye → SIGTERM
///    │  └──── launch failed ───┘                      │   violation, shutdown)         │ → SIGKILL, each
///    └─ crashed recently ─▶ backingOff ─elapsed─▶ launching                          after a grace
/// any ──crash loop / sandbox refused / unlaunchable / shutdown──▶ invalidated (for good)
/// ```
///
/// A service whose manifest says `instances: perConnection` has one slot (one such life) per
/// client; a shared service has one slot for all.
package struct SupervisorStateMachine<Process: AnyObject, Channel: AnyObject, Work: SupervisedWork> {
    package typealias ClientID = UInt64

    /// When a crash counts, when crashes are a loop, and how long each step of a stop waits.
    package struct Policy: Sendable {
        package var backoff: Duration
        package var maximumBackoff: Duration
        package var minimumRelaunchInterval: Duration
        package var crashLoopLimit: Int
        package var stableAfter: Duration
        /// How long each step of stopping waits (goodbye → SIGTERM → SIGKILL), and how long a
        /// failure on a process that still runs waits to learn how the process ended.
        package var stopGrace: Duration

        package init(backoff: Duration, maximumBackoff: Duration, minimumRelaunchInterval: Duration,
                     crashLoopLimit: Int, stableAfter: Duration, stopGrace: Duration) {
            self.backoff = backoff
            self.maximumBackoff = maximumBackoff
            self.minimumRelaunchInterval = minimumRelaunchInterval
            self.crashLoopLimit = crashLoopLimit
            self.stableAfter = stableAfter
            self.stopGrace = stopGrace
        }
    }

    /// The steps of stopping a process, in order.
    package enum StopStep: Sendable, Equatable {
        /// Goodbye on its main connection: it closes its clients and exits.
        case goodbye
        /// `SIGTERM` to the service.
        case terminate
        /// `SIGKILL`.
        case kill
    }

    /// What the supervisor must do.
    package enum Action {
        /// Start a process for `slot`; report ``launched(slot:process:now:)`` or
        /// ``launchFailed(slot:error:now:)``.
        case launch(slot: UInt64)
        /// Call ``backoffElapsed(slot:now:)`` at `until`.
        case armBackoff(slot: UInt64, until: ContinuousClock.Instant)
        /// Open a channel to `process` for `client` (and tell the listeners: it will run, it is
        /// open); report ``channelOpened(client:process:channel:)`` or
        /// ``channelOpenFailed(client:process:error:now:)``.
        case openChannel(client: ClientID, process: Process)
        /// Send the queued `work` on `channel`, in order; then report ``queueSent(client:channel:)``.
        case sendQueue(client: ClientID, channel: Channel, work: [Work])
        /// What `client`'s fast path sends on from now on: `channel`, or nothing (the slow path,
        /// through this machine).
        case publish(client: ClientID, channel: Channel?)
        /// Fail `work` with `error`.
        case fail(work: [Work], error: RemoteError)
        /// Fail `work` of `client`, which runs one process only and has had it, with the reason
        /// its owner gives (``clientAllowsOneProcess(_:)``).
        case refuse(client: ClientID, work: [Work])
        /// Tell `client` that its work was interrupted (a launch failed): an `interrupted` event.
        case interrupt(client: ClientID, error: RemoteError)
        /// `channel` of `client` closed: report `error` as an `interrupted` event when `interrupts`,
        /// then tell the listeners (`error` `nil`: no news, an idle exit or a close in order).
        case channelClosed(client: ClientID, channel: Channel, error: RemoteError?, interrupts: Bool)
        /// Close `channel` (it will not serve).
        case close(channel: Channel, reason: String)
        /// Take the next step of stopping `process` for `reason`; call
        /// ``stopStepDue(process:now:)`` at `next` if it has not ended by then (`nil`: the last step).
        case stop(process: Process, step: StopStep, reason: TerminationReason, next: ContinuousClock.Instant?)
        /// Call ``endWatchDue(process:now:)`` at `at`: failures parked on a process that still
        /// runs wait at most until then to learn how it ended.
        case armEndWatch(process: Process, at: ContinuousClock.Instant)
        /// `process` ended (booked): log and broadcast it.
        case ended(process: Process, reason: TerminationReason)
        /// `client` can never work again: announce `error` (its last event) and stop serving it.
        case invalidateClient(client: ClientID, error: RemoteError)
        /// The service can never run again: log and broadcast `error`.
        case invalidated(error: RemoteError)
    }

    private enum Phase {
        case stopped
        case backingOff(until: ContinuousClock.Instant)
        case launching
        case running(Process, since: ContinuousClock.Instant)
        /// Going: by itself (`stop` nil: it said goodbye, or its main connection closed), or
        /// stopped by the host at `stop.step`.
        case ending(Process, since: ContinuousClock.Instant, stop: Stopping?)
    }

    private struct Stopping {
        var reason: TerminationReason
        var step: StopStep
    }

    private enum ChannelPhase {
        case none
        case opening(Process)
        /// Open; the queue is being sent on it, and new work still queues behind it.
        case sendingQueue(Process, Channel)
        case open(Process, Channel)

        var process: Process? {
            switch self {
            case .none: nil
            case .opening(let process), .sendingQueue(let process, _), .open(let process, _): process
            }
        }

        var channel: Channel? {
            switch self {
            case .none, .opening: nil
            case .sendingQueue(_, let channel), .open(_, let channel): channel
            }
        }
    }

    /// What waits for a process's end to be known.
    private enum Pending {
        case work(Work, RemoteError)
        case report(Channel, failure: RemoteError?, goodbye: String?)
    }

    private struct Client {
        let slot: UInt64
        var channel = ChannelPhase.none
        var queue: [Work] = []
        /// Failures and channel ends on a process whose end is not known yet, in order.
        var pending: [(process: Process, what: Pending, since: ContinuousClock.Instant)] = []
        /// Only one process is ever launched for it (a share's connection).
        var oneProcess = false
        /// Processes it had a channel to.
        var processesUsed = 0
        /// Channels whose process has ended, or that the host closed, and whose own end is not
        /// seen yet.
        var orphaned: [(process: Process, channel: Channel)] = []
        /// The process its queue went to (a channel to it was asked for), until it is sent there.
        var boundTo: Process?

        /// Whether it runs one process only and has had it.
        var refusesAnotherProcess: Bool { oneProcess && processesUsed > 0 }

        /// The queue, emptied.
        mutating func takeQueue() -> [Work] {
            defer { queue = [] }
            return queue
        }
    }

    /// The service's identifier (for messages).
    package let identifier: String
    /// One process for every client, or one each.
    package let perConnection: Bool
    package let policy: Policy
    private var slots: [UInt64: Phase] = [:]
    /// When each slot's process began to go by itself (its end watch counts from then).
    private var goingSince: [UInt64: ContinuousClock.Instant] = [:]
    private var clients: [ClientID: Client] = [:]
    private var invalidation: RemoteError?
    /// How the last few processes ended (a failure seen after the end is booked is explained
    /// with it), by identity only, so that a process is let go once it ended (whoever asks about
    /// it holds it, so its address is not reused meanwhile).
    private var recentEnds: [(process: ObjectIdentifier, reason: TerminationReason)] = []

    /// Processes started so far.
    package private(set) var launches = 0
    /// Processes that crashed so far.
    package private(set) var crashes = 0
    /// Crashes in a row, each soon after its launch.
    package private(set) var consecutiveCrashes = 0
    package private(set) var lastCrash: ContinuousClock.Instant?
    /// How the last process ended.
    package private(set) var lastTermination: TerminationReason?

    package init(identifier: String, perConnection: Bool, policy: Policy) {
        self.identifier = identifier
        self.perConnection = perConnection
        self.policy = policy
    }

    // MARK: events from clients

    /// A client was made (a ``ServiceConnection``).
    package mutating func clientAdded(_ client: ClientID) -> [Action] {
        precondition(clients[client] == nil, "client \(client) of \(identifier) added twice")
        if let invalidation { return [.invalidateClient(client: client, error: invalidation)] }
        clients[client] = Client(slot: perConnection ? client : 0)
        return []
    }

    /// Only one process is ever launched for `client` (a share's connection: its activity runs
    /// once, for its items). Work that would need another is refused (``Action/refuse(client:work:)``).
    package mutating func clientAllowsOneProcess(_ client: ClientID) {
        clients[client]?.oneProcess = true
    }

    /// `client` has `work` and no channel to send it on (its fast path found none).
    package mutating func workArrived(_ client: ClientID, _ work: Work, now: ContinuousClock.Instant) -> [Action] {
        guard var entry = clients[client] else {
            return [.fail(work: [work], error: removedClientError)]
        }
        if case .open(let process, let channel) = entry.channel, isRunning(process, in: entry.slot) {
            // Published a moment ago, after the caller looked.
            return [.sendQueue(client: client, channel: channel, work: [work])]
        }
        entry.queue.append(work)
        clients[client] = entry
        return advance(entry.slot, now: now)
    }

    /// `client` gave up waiting for the queued work `matches` finds (its caller was cancelled,
    /// or its deadline passed): it leaves the queue, unsent.
    package mutating func workAbandoned(_ client: ClientID, where matches: (Work) -> Bool) -> [Action] {
        guard var entry = clients[client] else { return [] }
        entry.queue.removeAll(where: matches)
        entry.pending.removeAll { if case .work(let work, _) = $0.what { matches(work) } else { false } }
        clients[client] = entry
        // A relaunch nobody waits for any more is not made.
        if case .backingOff? = slots[entry.slot], !clients.values.contains(where: { $0.slot == entry.slot && !$0.queue.isEmpty }) {
            slots[entry.slot] = .stopped
        }
        return []
    }

    /// `work`, sent on a channel of `process`, failed with `error` when that channel or process
    /// ended. It is decided once the process's end is known: sent again after an idle exit
    /// (once), failed with how the process ended otherwise.
    package mutating func workFailed(_ client: ClientID, _ work: Work, on process: Process, error: RemoteError,
                                     now: ContinuousClock.Instant) -> [Action] {
        guard var entry = clients[client] else {
            return [.fail(work: [work], error: invalidation ?? error)]
        }
        if let reason = bookedEnd(of: process, in: entry.slot) {
            var retryAt = 0
            return decide(work, error: error, end: reason, client: client, retryAt: &retryAt, now: now)
        }
        guard owns(process, slot: entry.slot) else {
            // Not this service's process: nothing more will be known of it.
            return [.fail(work: [work], error: interrupted(error))]
        }
        entry.pending.append((process, .work(work, error), now))
        clients[client] = entry
        return watchEnd(of: process, now: now)
    }

    /// `client` was invalidated (by the host, or released): it is told, its work fails, its
    /// channel closes, and its process stops unless another client uses it.
    package mutating func clientRemoved(_ client: ClientID, error: RemoteError, stopDetail: String = "invalidated by the host",
                                        now: ContinuousClock.Instant) -> [Action] {
        guard let entry = clients.removeValue(forKey: client) else { return [] }
        var actions: [Action] = [.invalidateClient(client: client, error: error)]
        let parked = entry.pending.compactMap { if case .work(let work, _) = $0.what { work } else { nil } }
        if !entry.queue.isEmpty || !parked.isEmpty { actions.append(.fail(work: entry.queue + parked, error: error)) }
        if let channel = entry.channel.channel {
            actions.append(.close(channel: channel, reason: error.reason))
            actions.append(.channelClosed(client: client, channel: channel, error: error, interrupts: false))
        }
        for case (_, .report(let channel, _, _), _) in entry.pending {
            actions.append(.channelClosed(client: client, channel: channel, error: error, interrupts: false))
        }
        for (_, channel) in entry.orphaned {
            actions.append(.close(channel: channel, reason: error.reason))
            actions.append(.channelClosed(client: client, channel: channel, error: error, interrupts: false))
        }
        // Its process stops when no other client holds a channel to it or waits for it.
        let others = clients.values.contains { $0.slot == entry.slot && ($0.channel.process != nil || !$0.queue.isEmpty || !$0.pending.isEmpty) }
        if !others, let process = currentProcess(entry.slot) {
            actions += stop(process, in: entry.slot, TerminationReason(kind: .stopped, detail: stopDetail), now: now)
        }
        if perConnection, case .stopped? = slots[entry.slot] { slots[entry.slot] = nil }
        if perConnection, case .backingOff? = slots[entry.slot] { slots[entry.slot] = nil }
        return actions
    }

    // MARK: events from the process

    /// The launch for `slot` started `process` at `now`.
    package mutating func launched(slot: UInt64, process: Process, now: ContinuousClock.Instant) -> [Action] {
        guard case .launching? = slots[slot] else {
            preconditionFailure("\(identifier): a launch ended in slot \(slot), which was \(phaseName(slot))")
        }
        launches += 1
        slots[slot] = .running(process, since: now)
        if let invalidation {
            return stop(process, in: slot, TerminationReason(kind: .stopped, detail: invalidation.reason), now: now)
        }
        let waiting = clients.filter { $0.value.slot == slot && !$0.value.queue.isEmpty }
        if waiting.isEmpty {
            // Everyone who wanted it went meanwhile.
            return stop(process, in: slot, TerminationReason(kind: .stopped, detail: "no client needs it any more"), now: now)
        }
        var actions: [Action] = []
        for (client, _) in waiting.sorted(by: { $0.key < $1.key }) {
            actions += openChannel(client, to: process)
        }
        return actions
    }

    /// The launch for `slot` failed with `error` (`invalidated`: it can never work).
    package mutating func launchFailed(slot: UInt64, error: RemoteError, now: ContinuousClock.Instant) -> [Action] {
        guard case .launching? = slots[slot] else {
            preconditionFailure("\(identifier): a launch failed in slot \(slot), which was \(phaseName(slot))")
        }
        slots[slot] = perConnection && clients[slot] == nil ? nil : .stopped
        if error.code == .invalidated { return invalidateService(error, now: now) }
        var actions: [Action] = []
        for (client, var entry) in clients.sorted(by: { $0.key < $1.key }) where entry.slot == slot && !entry.queue.isEmpty {
            actions.append(.fail(work: entry.takeQueue(), error: error))
            actions.append(.interrupt(client: client, error: error))
            clients[client] = entry
        }
        return actions
    }

    /// The channel `client` asked for is open (the listeners were told, in order).
    package mutating func channelOpened(client: ClientID, process: Process, channel: Channel) -> [Action] {
        guard var entry = clients[client] else {
            // Its client went while it opened: it closes, and its listeners, who heard it would
            // run, hear why.
            let error = removedClientError
            return [.close(channel: channel, reason: error.reason), .channelClosed(client: client, channel: channel, error: error, interrupts: false)]
        }
        guard case .opening(let opening) = entry.channel, opening === process else {
            guard bookedEnd(of: process, in: entry.slot) != nil else {
                preconditionFailure("\(identifier): a channel opened for client \(client), whose channel was \(entry.channel)")
            }
            // Its process ended while it opened (its queue was decided, and the client told,
            // then): it closes, and its listeners, who heard it would run, hear it close.
            entry.processesUsed += 1
            clients[client] = entry
            return [.close(channel: channel, reason: "its process has ended"),
                    .channelClosed(client: client, channel: channel, error: endError(of: process, in: entry.slot), interrupts: false)]
        }
        entry.processesUsed += 1
        entry.boundTo = nil
        guard isRunning(process, in: entry.slot) else {
            // Its process is going: the channel will not serve, and the queue waits for the next.
            entry.channel = .none
            clients[client] = entry
            return [.close(channel: channel, reason: "its process is ending"),
                    .channelClosed(client: client, channel: channel, error: nil, interrupts: false)]
        }
        let queue = entry.takeQueue()
        if queue.isEmpty {
            entry.channel = .open(process, channel)
            clients[client] = entry
            return [.publish(client: client, channel: channel)]
        }
        entry.channel = .sendingQueue(process, channel)
        clients[client] = entry
        return [.sendQueue(client: client, channel: channel, work: queue)]
    }

    /// The channel `client` asked for could not be opened: `process` did not take it (`error`).
    /// It is ending, or, when the offer timed out, it stopped reading its main connection and is
    /// stopped. The queue waits for its end.
    package mutating func channelOpenFailed(client: ClientID, process: Process, error: RemoteError, now: ContinuousClock.Instant) -> [Action] {
        guard var entry = clients[client] else { return [] }
        guard case .opening(let opening) = entry.channel, opening === process else {
            // Its process ended while it opened: its queue was decided then.
            guard bookedEnd(of: process, in: entry.slot) != nil else {
                preconditionFailure("\(identifier): a channel failed to open for client \(client), whose channel was \(entry.channel)")
            }
            return []
        }
        entry.channel = .none
        clients[client] = entry
        // Its opening began while it ran, and nothing but its end (which resets the opening) makes
        // it stop being the slot's: it runs, or is ending already.
        guard case .running(_, let since)? = slots[entry.slot] else { return [] }
        if error.code == .timeout {
            return stop(process, in: entry.slot, TerminationReason(kind: .stopped, detail: "it did not take a new connection: \(error.reason)"), now: now)
        }
        slots[entry.slot] = .ending(process, since: since, stop: nil)
        goingSince[entry.slot] = now
        return unpublish(slot: entry.slot) + watchEnd(of: process, now: now)
    }

    /// The channel `client` asked for opened, but a listener could not tell the new process what
    /// it must know (`error`): the host closes it, and the queued work fails with `error`. The
    /// process serves on; the next work opens another channel.
    package mutating func channelReplayFailed(client: ClientID, process: Process, channel: Channel, error: RemoteError) -> [Action] {
        guard var entry = clients[client] else {
            return [.channelClosed(client: client, channel: channel, error: removedClientError, interrupts: false)]
        }
        guard case .opening(let opening) = entry.channel, opening === process else {
            guard bookedEnd(of: process, in: entry.slot) != nil else {
                preconditionFailure("\(identifier): a channel's replay failed for client \(client), whose channel was \(entry.channel)")
            }
            // Its process ended meanwhile (the client was told then).
            return [.channelClosed(client: client, channel: channel, error: endError(of: process, in: entry.slot), interrupts: false)]
        }
        entry.channel = .none
        entry.boundTo = nil
        entry.processesUsed += 1
        entry.orphaned.append((process, channel))
        let queue = entry.takeQueue()
        clients[client] = entry
        return queue.isEmpty ? [] : [.fail(work: queue, error: error)]
    }

    /// The host could not make the channel `client` asked for (its own resources: fds, memory):
    /// the queued work fails with `error`, and the process serves on.
    package mutating func channelNotMade(client: ClientID, process: Process, error: RemoteError) -> [Action] {
        guard var entry = clients[client], case .opening(let opening) = entry.channel, opening === process else { return [] }
        entry.channel = .none
        entry.boundTo = nil
        let queue = entry.takeQueue()
        clients[client] = entry
        return queue.isEmpty ? [.interrupt(client: client, error: error)] : [.fail(work: queue, error: error), .interrupt(client: client, error: error)]
    }

    /// The queue ``Action/sendQueue(client:channel:work:)`` asked for was sent.
    package mutating func queueSent(client: ClientID, channel: Channel) -> [Action] {
        guard var entry = clients[client], case .sendingQueue(let process, let sending) = entry.channel, sending === channel else { return [] }
        if !entry.queue.isEmpty {
            let queue = entry.takeQueue()
            clients[client] = entry
            return [.sendQueue(client: client, channel: channel, work: queue)]
        }
        guard isRunning(process, in: entry.slot) else { return [] }
        entry.channel = .open(process, channel)
        clients[client] = entry
        return [.publish(client: client, channel: channel)]
    }

    /// `channel` of `client` closed: `failure` is how its connection failed (`nil`: in order),
    /// `goodbye` what the service said on it.
    package mutating func channelEnded(client: ClientID, channel: Channel, failure: RemoteError?, goodbye: String?,
                                       now: ContinuousClock.Instant) -> [Action] {
        guard var entry = clients[client] else {
            // Its client was removed, and told.
            return []
        }
        if let index = entry.orphaned.firstIndex(where: { $0.channel === channel }) {
            // Its process has ended already: how is known.
            let process = entry.orphaned.remove(at: index).process
            clients[client] = entry
            return bookedEnd(of: process, in: entry.slot).map { report(channel, failure: failure, goodbye: goodbye, end: $0, client: client) }
                ?? [.channelClosed(client: client, channel: channel, error: failure.map(interrupted), interrupts: failure != nil)]
        }
        guard let current = entry.channel.channel, current === channel, let process = entry.channel.process else {
            // It never served.
            return []
        }
        // A client's channel is always to its slot's current process: one that ended moved its
        // channel to `orphaned` (above).
        entry.channel = .none
        var actions: [Action] = [.publish(client: client, channel: nil)]
        let queue = entry.queue
        if failure == nil && (goodbye == nil || goodbye == FrameworkMessage.idleExitReason) && isRunning(process, in: entry.slot) {
            // Closed in order while its process runs: no news; the next work opens another.
            clients[client] = entry
            actions.append(.channelClosed(client: client, channel: channel, error: nil, interrupts: false))
        } else {
            entry.pending.append((process, .report(channel, failure: failure, goodbye: goodbye), now))
            clients[client] = entry
            if let failure, failure.code == .protocolViolation {
                actions += stop(process, in: entry.slot, TerminationReason(kind: .protocolViolation, detail: failure.reason), now: now)
            }
            actions += watchEnd(of: process, now: now)
        }
        if !queue.isEmpty, clients[client] != nil { actions += advance(entry.slot, now: now) }
        return actions
    }

    /// `process` is going by itself: it said goodbye on its main connection (or that closed).
    /// No new work goes to it; what is queued waits for its end. Its stop is watched: a process
    /// that said goodbye and does not exit within a grace is stopped as a protocol violation.
    package mutating func processEnding(_ process: Process, now: ContinuousClock.Instant) -> [Action] {
        guard let slot = slot(of: process) else { return [] }
        guard case .running(_, let since)? = slots[slot] else { return [] }
        slots[slot] = .ending(process, since: since, stop: nil)
        goingSince[slot] = now
        return unpublish(slot: slot) + watchEnd(of: process, now: now)
    }

    /// The host stops `process` for `reason` (its idle timeout, a violation, a client's wish).
    package mutating func stopRequested(_ process: Process, reason: TerminationReason, now: ContinuousClock.Instant) -> [Action] {
        guard let slot = slot(of: process) else { return [] }
        return stop(process, in: slot, reason, now: now)
    }

    /// The current step of stopping `process` had its grace, or a process going by itself had
    /// its grace to exit.
    package mutating func stopStepDue(process: Process, now: ContinuousClock.Instant) -> [Action] {
        guard let slot = slot(of: process), case .ending(_, let since, let stopping)? = slots[slot] else { return [] }
        guard var stopping else { return [] }
        switch stopping.step {
        case .goodbye: stopping.step = .terminate
        case .terminate: stopping.step = .kill
        case .kill: return []
        }
        slots[slot] = .ending(process, since: since, stop: stopping)
        return [.stop(process: process, step: stopping.step, reason: stopping.reason,
                      next: stopping.step == .kill ? nil : now.advanced(by: policy.stopGrace))]
    }

    /// The grace for learning how `process` ended is over: if it has not ended, what waits for
    /// its end is decided with what is known (a process that said goodbye and did not exit is
    /// stopped as a protocol violation).
    package mutating func endWatchDue(process: Process, now: ContinuousClock.Instant) -> [Action] {
        guard let slot = slot(of: process) else { return [] }
        var actions: [Action] = []
        let grace = policy.stopGrace
        switch slots[slot] {
        case .ending(_, _, nil)?:
            // It is going by itself and has not gone a grace after it began: the host stops it,
            // and what waits for its end waits for the stop (whose steps are bounded). A watch
            // armed earlier, for a failure, finds it going for less than that: nothing yet.
            guard let since = goingSince[slot], now >= since.advanced(by: grace) else { return [] }
            return stop(process, in: slot, TerminationReason(kind: .protocolViolation, detail: "it said goodbye or closed its main connection, but did not exit"), now: now)
        case .ending?:
            return []
        default:
            break
        }
        for (client, var entry) in clients.sorted(by: { $0.key < $1.key }) where entry.slot == slot {
            // Only what has waited a whole grace: later ones have watches of their own.
            let (due, rest) = split(entry.pending, process, dueBy: now.advanced(by: .zero - grace))
            guard !due.isEmpty else { continue }
            entry.pending = rest
            clients[client] = entry
            for pending in due {
                switch pending {
                case .work(let work, let error):
                    actions.append(.fail(work: [work], error: interrupted(error)))
                case .report(let channel, let failure, let goodbye):
                    let error = failure.map(interrupted) ?? goodbye.map { RemoteError(.interrupted, "\(identifier) closed the connection: \($0.escapedForTerminal())") }
                    actions.append(.channelClosed(client: client, channel: channel, error: error, interrupts: error != nil))
                }
            }
        }
        return actions
    }

    /// `process` ended for `reason` and was reaped, at `now`.
    package mutating func processEnded(_ process: Process, reason: TerminationReason, now: ContinuousClock.Instant) -> [Action] {
        guard let slot = slot(of: process) else {
            preconditionFailure("\(identifier): a process ended that is not one of its own, or ended twice")
        }
        let since: ContinuousClock.Instant
        switch slots[slot] {
        case .running(_, let start)?, .ending(_, let start, _)?: since = start
        default: preconditionFailure("\(identifier): a process ended in slot \(slot), which was \(phaseName(slot))")
        }
        slots[slot] = .stopped
        goingSince[slot] = nil
        lastTermination = reason
        if reason.isCrash {
            crashes += 1
            consecutiveCrashes = now - since < policy.stableAfter ? consecutiveCrashes + 1 : 1
            lastCrash = now
        } else {
            consecutiveCrashes = 0
        }
        recentEnds.append((ObjectIdentifier(process), reason))
        if recentEnds.count > 64 { recentEnds.removeFirst() }
        var actions: [Action] = [.ended(process: process, reason: reason)]
        for (client, var entry) in clients.sorted(by: { $0.key < $1.key }) where entry.slot == slot {
            let (due, rest) = split(entry.pending, process)
            entry.pending = rest
            if case .opening(let opening) = entry.channel, opening === process { entry.channel = .none }
            let reportsEnd = due.contains { if case .report = $0 { true } else { false } }
            if entry.boundTo === process {
                entry.boundTo = nil
                if reason.kind != .idleExit && !entry.queue.isEmpty {
                    // Its queue was on its way to this process, which ended otherwise than idle
                    // before it took the channel: the work fails, as work sent to it would
                    // (XPC does not send a message again after a crash).
                    let error = ended(reason)
                    actions.append(.fail(work: entry.takeQueue(), error: error))
                    // Once per crash: a channel's end reported below says it already.
                    if !reportsEnd { actions.append(.interrupt(client: client, error: error)) }
                }
            }
            if let channel = entry.channel.channel, entry.channel.process === process {
                // Its own end comes later, and is reported then.
                entry.orphaned.append((process, channel))
                entry.channel = .none
            }
            clients[client] = entry
            var retryAt = 0
            for pending in due {
                switch pending {
                case .work(let work, let error):
                    // Sent again in the order they were sent, before what was queued since.
                    actions += decide(work, error: error, end: reason, client: client, retryAt: &retryAt, now: now)
                case .report(let channel, let failure, let goodbye):
                    actions += report(channel, failure: failure, goodbye: goodbye, end: reason, client: client)
                }
            }
        }
        if reason.kind == .sandboxRefused {
            return actions + invalidateService(RemoteError(.invalidated, "\(identifier) cannot run: \(reason.detail)", standardErrorTail: reason.standardErrorTail), now: now)
        }
        if consecutiveCrashes >= policy.crashLoopLimit {
            return actions + invalidateService(RemoteError(.invalidated, "crash loop: \(identifier) crashed \(consecutiveCrashes) times in a row, each within \(policy.stableAfter) of its launch; last: \(reason)",
                                                           standardErrorTail: reason.standardErrorTail), now: now)
        }
        if perConnection, clients[slot] == nil {
            slots[slot] = nil
            return actions
        }
        return actions + advance(slot, now: now)
    }

    // MARK: events from timers and the launcher

    /// The relaunch delay of `slot` is over.
    package mutating func backoffElapsed(slot: UInt64, now: ContinuousClock.Instant) -> [Action] {
        guard case .backingOff? = slots[slot] else { return [] }
        slots[slot] = .stopped
        return advance(slot, now: now)
    }

    /// The service can never run again (the launcher shut down): every client is told, every
    /// process stopped.
    package mutating func invalidate(_ error: RemoteError, now: ContinuousClock.Instant) -> [Action] {
        invalidateService(error, now: now)
    }

    // MARK: queries

    /// Why the service can never run again, once it cannot.
    package var invalidationError: RemoteError? { invalidation }

    /// Whether a launch is under way (or waits for its backoff).
    package var isLaunching: Bool {
        slots.values.contains { if case .launching = $0 { true } else if case .backingOff = $0 { true } else { false } }
    }

    /// The processes that run or are ending.
    package var processes: [Process] { slots.keys.sorted().compactMap { currentProcess($0) } }

    /// Whether nothing runs and nothing will (invalidated, every process reaped).
    package var isFinished: Bool { invalidation != nil && processes.isEmpty && !isLaunching }

    /// Whether `process` is being stopped by the host.
    package func isStopping(_ process: Process) -> Bool {
        guard let slot = slot(of: process), case .ending(_, _, _?)? = slots[slot] else { return false }
        return true
    }

    /// The process serving `client`'s slot, if one runs or is ending.
    package func process(of client: ClientID) -> Process? {
        clients[client].flatMap { currentProcess($0.slot) }
    }

    /// Whether `process` still takes new work.
    package func isUsable(_ process: Process) -> Bool {
        guard let slot = slot(of: process) else { return false }
        return isRunning(process, in: slot)
    }

    /// The clients with a channel to `process`, or waiting for one.
    package func clientCount(of process: Process) -> Int {
        clients.values.filter { $0.channel.process === process }.count
    }

    /// When the next launch may happen after the last crash (exponential backoff), or `nil`
    /// when there is no crash to wait for.
    package var relaunchDue: ContinuousClock.Instant? {
        guard consecutiveCrashes > 0, let lastCrash else { return nil }
        let exponent = min(consecutiveCrashes - 1, 20)
        let delay = max(min(policy.backoff * (1 << exponent), policy.maximumBackoff), policy.minimumRelaunchInterval)
        return lastCrash.advanced(by: delay)
    }

    /// The phase of `slot`, for messages and tests: `stopped`, `backing off`, `launching`,
    /// `running`, `ending`, `stopping (goodbye|terminate|kill)`.
    package func phaseName(_ slot: UInt64) -> String {
        switch slots[slot] {
        case nil, .stopped?: "stopped"
        case .backingOff?: "backing off"
        case .launching?: "launching"
        case .running?: "running"
        case .ending(_, _, nil)?: "ending"
        case .ending(_, _, let stopping?)?: "stopping (\(stopping.step))"
        }
    }

    // MARK: helpers

    /// What a removed client's late work and channels fail with (it was told already).
    private var removedClientError: RemoteError {
        invalidation ?? RemoteError(.invalidated, "the connection to \(identifier) was invalidated")
    }

    /// Moves `slot` on for the work queued in it: launch (after the backoff), or open the
    /// channels its running process lacks.
    private mutating func advance(_ slot: UInt64, now: ContinuousClock.Instant) -> [Action] {
        if invalidation != nil { return [] }
        let waiting = clients.filter { $0.value.slot == slot && !$0.value.queue.isEmpty }.sorted { $0.key < $1.key }
        guard !waiting.isEmpty else { return [] }
        switch slots[slot] ?? .stopped {
        case .stopped:
            var actions: [Action] = []
            var anyone = false
            for (client, var entry) in waiting {
                if entry.refusesAnotherProcess {
                    actions.append(.refuse(client: client, work: entry.takeQueue()))
                    clients[client] = entry
                } else {
                    anyone = true
                }
            }
            guard anyone else { return actions }
            if let due = relaunchDue, due > now {
                slots[slot] = .backingOff(until: due)
                return actions + [.armBackoff(slot: slot, until: due)]
            }
            slots[slot] = .launching
            return actions + [.launch(slot: slot)]
        case .backingOff, .launching, .ending:
            return []
        case .running(let process, _):
            var actions: [Action] = []
            for (client, var entry) in waiting {
                switch entry.channel {
                case .none:
                    actions += openChannel(client, to: process)
                case .open(let open, let channel) where open === process:
                    // Work given back (sent again after an idle exit) to a client whose channel
                    // to the new process is open already: it goes through the queue, in order.
                    let queue = entry.takeQueue()
                    entry.channel = .sendingQueue(open, channel)
                    clients[client] = entry
                    actions += [.publish(client: client, channel: nil), .sendQueue(client: client, channel: channel, work: queue)]
                default:
                    break
                }
            }
            return actions
        }
    }

    private mutating func openChannel(_ client: ClientID, to process: Process) -> [Action] {
        guard var entry = clients[client], case .none = entry.channel else { return [] }
        if entry.refusesAnotherProcess {
            // Its one process has gone: another (a shared service's, launched for someone
            // else) is not for it.
            let queue = entry.takeQueue()
            clients[client] = entry
            return queue.isEmpty ? [] : [.refuse(client: client, work: queue)]
        }
        entry.channel = .opening(process)
        entry.boundTo = process
        clients[client] = entry
        return [.openChannel(client: client, process: process)]
    }

    /// Starts stopping `process` (the goodbye step), unless it is stopping already.
    private mutating func stop(_ process: Process, in slot: UInt64, _ reason: TerminationReason, now: ContinuousClock.Instant) -> [Action] {
        let since: ContinuousClock.Instant, wasRunning: Bool
        switch slots[slot] {
        case .running(let running, let start)? where running === process: (since, wasRunning) = (start, true)
        case .ending(let ending, let start, nil)? where ending === process: (since, wasRunning) = (start, false)
        default: return []
        }
        slots[slot] = .ending(process, since: since, stop: Stopping(reason: reason, step: .goodbye))
        return (wasRunning ? unpublish(slot: slot) : []) + [.stop(process: process, step: .goodbye, reason: reason, next: now.advanced(by: policy.stopGrace))]
    }

    /// No client's fast path sends to `slot`'s process any more.
    private func unpublish(slot: UInt64) -> [Action] {
        clients.filter { $0.value.slot == slot }.sorted { $0.key < $1.key }.compactMap { client, entry in
            if case .open = entry.channel { .publish(client: client, channel: nil) } else { nil }
        }
    }

    private func watchEnd(of process: Process, now: ContinuousClock.Instant) -> [Action] {
        [.armEndWatch(process: process, at: now.advanced(by: policy.stopGrace))]
    }

    /// Failed `work` whose process ended for `reason`: again once after an idle exit (queued at
    /// `retryAt`, which moves past it), failed with how the process ended otherwise.
    private mutating func decide(_ work: Work, error: RemoteError, end reason: TerminationReason, client: ClientID,
                                 retryAt index: inout Int, now: ContinuousClock.Instant) -> [Action] {
        guard var entry = clients[client] else { return [.fail(work: [work], error: invalidation ?? error)] }
        if reason.kind == .idleExit && !work.isRetry && invalidation == nil {
            // It exited idle just as this was sent (it had nothing outstanding when it decided
            // to): never handled, so sent again to a new process, before what was queued since.
            entry.queue.insert(work.retried(), at: min(index, entry.queue.count))
            index += 1
            clients[client] = entry
            return advance(entry.slot, now: now)
        }
        return [.fail(work: [work], error: explained(error, end: reason))]
    }

    /// The end of `channel`, once its process's end (`reason`) is known.
    /// An idle exit is no news, nor is a stop after a close in order; anything else is reported
    /// as how the process ended.
    private func report(_ channel: Channel, failure: RemoteError?, goodbye: String?, end reason: TerminationReason, client: ClientID) -> [Action] {
        let news = reason.kind != .idleExit
            && (failure != nil || (goodbye != nil && goodbye != FrameworkMessage.idleExitReason) || reason.kind != .stopped)
        return [.channelClosed(client: client, channel: channel, error: news ? ended(reason) : nil, interrupts: news)]
    }

    /// The entries of `pending` about `process` (parked no later than `dueBy`, when given), and the rest.
    private func split(_ pending: [(process: Process, what: Pending, since: ContinuousClock.Instant)], _ process: Process,
                       dueBy: ContinuousClock.Instant? = nil) -> (due: [Pending], rest: [(process: Process, what: Pending, since: ContinuousClock.Instant)]) {
        var due: [Pending] = [], rest: [(process: Process, what: Pending, since: ContinuousClock.Instant)] = []
        for entry in pending {
            if entry.process === process, dueBy.map({ entry.since <= $0 }) ?? true { due.append(entry.what) } else { rest.append(entry) }
        }
        return (due, rest)
    }

    private mutating func invalidateService(_ error: RemoteError, now: ContinuousClock.Instant) -> [Action] {
        guard invalidation == nil else { return [] }
        invalidation = error
        var actions: [Action] = [.invalidated(error: error)]
        for client in clients.keys.sorted() {
            actions += clientRemoved(client, error: error, stopDetail: error.reason, now: now)
        }
        for slot in slots.keys.sorted() {
            switch slots[slot]! {
            case .backingOff: slots[slot] = .stopped
            case .running(let process, _), .ending(let process, _, nil):
                actions += stop(process, in: slot, TerminationReason(kind: .stopped, detail: error.reason), now: now)
            case .stopped, .launching, .ending: break
            }
        }
        return actions
    }

    private func slot(of process: Process) -> UInt64? {
        slots.first { currentProcess($0.key) === process }?.key
    }

    /// How `process` ended, if it was one of `slot`'s and has ended (an event about it can still
    /// come from work that was under way). A process that runs or is ending is not one that ended
    /// (a past one at the same address has gone); otherwise its end is the last one booked at its
    /// address.
    private func bookedEnd(of process: Process, in slot: UInt64) -> TerminationReason? {
        guard !owns(process, slot: slot) else { return nil }
        return recentEnds.last { $0.process == ObjectIdentifier(process) }?.reason
    }

    /// How `process`, which ended, ended, as an error (`nil`: an idle exit, no news).
    private func endError(of process: Process, in slot: UInt64) -> RemoteError? {
        guard let reason = bookedEnd(of: process, in: slot), reason.kind != .idleExit else { return nil }
        return ended(reason)
    }

    private func owns(_ process: Process, slot: UInt64) -> Bool {
        currentProcess(slot) === process
    }

    private func currentProcess(_ slot: UInt64) -> Process? {
        switch slots[slot] {
        case .running(let process, _)?, .ending(let process, _, _)?: process
        default: nil
        }
    }

    private func isRunning(_ process: Process, in slot: UInt64) -> Bool {
        if case .running(let running, _)? = slots[slot] { running === process } else { false }
    }

    /// The interruption that `reason`, the end of the service's process, is: how it ended and
    /// what it last wrote to stderr.
    private func ended(_ reason: TerminationReason) -> RemoteError {
        RemoteError(.interrupted, "\(identifier) ended: \(reason)", standardErrorTail: reason.standardErrorTail)
    }

    private func explained(_ error: RemoteError, end reason: TerminationReason) -> RemoteError {
        let error = interrupted(error)
        return error.code == .interrupted ? ended(reason) : error
    }

    /// A channel's end is an interruption, not an invalidation: only the service's own state
    /// says when it can never work again.
    private func interrupted(_ error: RemoteError) -> RemoteError {
        guard error.code == .invalidated, invalidation == nil else { return error }
        return RemoteError(.interrupted, error.reason)
    }
}
