import RemoteCore

/// A process the ``ServiceRecordStateMachine`` keeps track of (a ``ServiceInstance``; a stand-in
/// in tests).
package protocol LaunchedProcess: AnyObject, Sendable {
    /// When it was launched (crashes within ``ServiceRecordStateMachine/Policy/stableAfter`` of
    /// this count towards a crash loop).
    var launchedAt: ContinuousClock.Instant { get }
    /// Whether new clients may use it (not ending, not stopping).
    var isUsable: Bool { get }
}

/// What the launcher knows of one service, as a value: its running processes, whether one is
/// being launched (and who waits for it), its crash history and whether it can ever launch
/// again; and what the launcher must do next. No process, no clock of its own: the ``Launcher``
/// (an actor) holds one per service, feeds it events with the current time, and performs the
/// returned actions (launch after a delay, wait for a process to end, broadcast, invalidate).
///
/// ```
/// ready ──instance needed, none usable──▶ launching ──launched──▶ ready (process running)
///   ▲                                          │
///   └──────── launch failed or cancelled ◀─────┘
/// any ──sandbox refused / crash loop / unlaunchable──▶ invalidated (for good)
/// ```
package struct ServiceRecordStateMachine<Process: LaunchedProcess>: Sendable {
    /// When a crash counts and when crashes are a loop.
    package struct Policy: Sendable {
        /// The first relaunch delay after a crash; it doubles with each further crash in a row.
        package var backoff: Duration
        /// The longest relaunch delay.
        package var maximumBackoff: Duration
        /// The shortest time between two launches after a crash.
        package var minimumRelaunchInterval: Duration
        /// This many crashes in a row is a crash loop.
        package var crashLoopLimit: Int
        /// A process that ran this long before crashing starts a new count.
        package var stableAfter: Duration

        package init(backoff: Duration, maximumBackoff: Duration, minimumRelaunchInterval: Duration,
                     crashLoopLimit: Int, stableAfter: Duration) {
            self.backoff = backoff
            self.maximumBackoff = maximumBackoff
            self.minimumRelaunchInterval = minimumRelaunchInterval
            self.crashLoopLimit = crashLoopLimit
            self.stableAfter = stableAfter
        }
    }

    /// Whether a process may be launched now.
    private enum Gate {
        /// Nothing is being launched.
        case ready
        /// A launch is under way; these wait for it to end.
        case launching(WaiterQueue<Void>)
        /// The service can never launch again.
        case invalidated(RemoteError)
        /// Only while an event changes the state.
        case modifying
    }

    /// The service's identifier (for messages).
    package let identifier: String
    /// One process for every client, or one each.
    package let instances: ServiceManifest.InstancePolicy
    package let policy: Policy
    private var gate = Gate.ready
    private var shared: Process?
    private var perConnection: [UInt64: Process] = [:]

    /// Processes started so far.
    package private(set) var launches = 0
    /// Processes that crashed so far.
    package private(set) var crashes = 0
    /// Crashes in a row, each soon after its launch.
    package private(set) var consecutiveCrashes = 0
    package private(set) var lastCrash: ContinuousClock.Instant?
    package private(set) var lastLaunch: ContinuousClock.Instant?
    /// How the last process ended.
    package private(set) var lastTermination: TerminationReason?

    package init(identifier: String, instances: ServiceManifest.InstancePolicy, policy: Policy) {
        self.identifier = identifier
        self.instances = instances
        self.policy = policy
    }

    // MARK: actions

    /// What a client that needs a process does next.
    package enum NextStep {
        /// Use this running process.
        case use(Process)
        /// Its process is ending: wait until it has ended (then book it with
        /// ``ended(_:owner:reason:now:)``), and ask again.
        case awaitEnd(Process)
        /// Another client is launching one: the waiter passed in is queued; await it, and ask again.
        case awaitLaunch
        /// Launch one (after waiting until `notBefore`, when it crashed recently), then report
        /// with ``launched(_:owner:now:)`` or ``launchFailed()``.
        case launch(notBefore: ContinuousClock.Instant?)
        /// It can never launch.
        case fail(RemoteError)
    }

    /// What a finished launch leads to.
    package enum LaunchedAction {
        /// Run the process; let these waiters go.
        case run([Waiter<Void>])
        /// The service was invalidated while it started (its waiters were let go then): stop
        /// the process; fail with this.
        case discard(RemoteError)
    }

    /// What a process's end leads to.
    package enum EndAction: Equatable {
        /// Booked already (the end is seen twice: by its runner and by a client waiting for it).
        case alreadyBooked
        /// Booked; report it.
        case booked
        /// Booked; report it, then invalidate the service with this (crash loop, sandbox refused).
        case bookedInvalidating(RemoteError)
    }

    // MARK: events

    /// Client `owner` needs a process. `waiter` is queued when another client's launch is under
    /// way (``NextStep/awaitLaunch``).
    package mutating func instanceNeeded(by owner: UInt64, waiter: Waiter<Void>) -> NextStep {
        switch gate {
        case .invalidated(let error):
            return .fail(error)
        case .launching(var waiters):
            if let running = runningStep(for: owner) { return running }
            gate = .modifying
            waiters.append(waiter)
            gate = .launching(waiters)
            return .awaitLaunch
        case .ready:
            if let running = runningStep(for: owner) { return running }
            gate = .launching(WaiterQueue())
            return .launch(notBefore: relaunchDue)
        case .modifying:
            preconditionFailure("ServiceRecordStateMachine.instanceNeeded() while modifying")
        }
    }

    /// A client waiting for another's launch gave up.
    package mutating func abandon(_ waiter: Waiter<Void>) {
        guard case .launching(var waiters) = gate else { return }
        gate = .modifying
        waiters.remove(waiter)
        gate = .launching(waiters)
    }

    /// The launch for `owner` started `process` at `now`.
    package mutating func launched(_ process: Process, owner: UInt64, now: ContinuousClock.Instant) -> LaunchedAction {
        switch gate {
        case .launching(var waiters):
            let released = waiters.takeAll()
            gate = .ready
            launches += 1
            lastLaunch = now
            if instances == .shared { shared = process } else { perConnection[owner] = process }
            return .run(released)
        case .invalidated(let error):
            return .discard(error)
        case .ready, .modifying:
            preconditionFailure("a launch ended in state \(phase) of \(identifier)")
        }
    }

    /// The launch failed (or was cancelled, or the process could not be run after all).
    /// Returns the waiters to let go: they ask again (one of them launches next).
    package mutating func launchFailed() -> [Waiter<Void>] {
        switch gate {
        case .launching(var waiters):
            let released = waiters.takeAll()
            gate = .ready
            return released
        case .invalidated:
            return []
        case .ready, .modifying:
            preconditionFailure("a launch failed in state \(phase) of \(identifier)")
        }
    }

    /// `process` (launched for `owner`) ended at `now` for `reason`.
    package mutating func ended(_ process: Process, owner: UInt64, reason: TerminationReason, now: ContinuousClock.Instant) -> EndAction {
        if shared === process {
            shared = nil
        } else if perConnection[owner] === process {
            perConnection[owner] = nil
        } else {
            return .alreadyBooked
        }
        lastTermination = reason
        if reason.isCrash {
            crashes += 1
            consecutiveCrashes = now - process.launchedAt < policy.stableAfter ? consecutiveCrashes + 1 : 1
            lastCrash = now
        } else {
            consecutiveCrashes = 0
        }
        if reason.kind == .sandboxRefused {
            return .bookedInvalidating(RemoteError(.invalidated, "\(identifier) cannot run: \(reason.detail)", standardErrorTail: reason.standardErrorTail))
        }
        if consecutiveCrashes >= policy.crashLoopLimit {
            return .bookedInvalidating(RemoteError(.invalidated, "crash loop: \(identifier) crashed \(consecutiveCrashes) times in a row, each within \(policy.stableAfter) of its launch; last: \(reason)",
                                                   standardErrorTail: reason.standardErrorTail))
        }
        return .booked
    }

    /// The service can never launch again. Returns the waiters to let go (they will see the
    /// invalidation), or `nil` when it was invalidated already.
    package mutating func invalidate(_ error: RemoteError) -> [Waiter<Void>]? {
        switch gate {
        case .invalidated:
            return nil
        case .launching(var waiters):
            let released = waiters.takeAll()
            gate = .invalidated(error)
            return released
        case .ready:
            gate = .invalidated(error)
            return []
        case .modifying:
            preconditionFailure("ServiceRecordStateMachine.invalidate() while modifying")
        }
    }

    // MARK: queries

    /// The running processes.
    package var running: [Process] { (shared.map { [$0] } ?? []) + perConnection.values }

    /// Why it can never launch again, once invalidated.
    package var invalidation: RemoteError? {
        if case .invalidated(let error) = gate { error } else { nil }
    }

    /// Whether a launch is under way.
    package var isLaunching: Bool {
        if case .launching = gate { true } else { false }
    }

    /// `ready`, `launching`, `invalidated`, for messages and tests.
    package var phase: String {
        switch gate {
        case .ready: "ready"
        case .launching: "launching"
        case .invalidated: "invalidated"
        case .modifying: "modifying"
        }
    }

    /// When the next launch may happen after the last crash (exponential backoff), or `nil`
    /// when there is no crash to wait for.
    package var relaunchDue: ContinuousClock.Instant? {
        guard consecutiveCrashes > 0, let lastCrash else { return nil }
        let exponent = min(consecutiveCrashes - 1, 20)
        let delay = max(min(policy.backoff * (1 << exponent), policy.maximumBackoff), policy.minimumRelaunchInterval)
        return lastCrash.advanced(by: delay)
    }

    /// What `owner` does with the process it has, if it has one: use it, or wait for its end.
    private func runningStep(for owner: UInt64) -> NextStep? {
        guard let current = instances == .shared ? shared : perConnection[owner] else { return nil }
        return current.isUsable ? .use(current) : .awaitEnd(current)
    }
}
