import Synchronization

/// When a service has been idle long enough to exit: no request outstanding and no traffic for
/// ``timeout``. One clock for both sides of idle exit: the service SDK exits by it, and the
/// launcher stops a service still running a grace period after it.
///
/// Work in flight is counted with ``begin()`` and ``end()`` (an outstanding request, an open
/// connection of a listening service); other traffic moves the clock with ``touch()``. These
/// take no lock (two atomics: the count, and the last activity's time) and wake nobody: a wait for idleness sleeps on one timer of the
/// ``EventLoop`` until the earliest moment the service could be idle (a timeout after the last
/// activity, or after now while work is outstanding), and looks again then. ``stop()`` ends
/// the waits when what the clock watches has ended, so nobody has to be cancelled.
package final class IdleClock: Sendable {
    /// How long the service must be idle.
    package let timeout: Duration
    private let state = Mutex(State())
    /// Work in flight.
    private let outstanding = Atomic<Int>(0)
    /// The last activity, in nanoseconds after ``epoch``.
    private let lastActivity: Atomic<Int64>
    private let epoch: ContinuousClock.Instant

    private struct State {
        var stopped = false
        /// Woken by ``IdleClock/stop()``.
        var waiters = WaiterQueue<Void>()
    }

    package init(timeout: Duration, now: ContinuousClock.Instant = .now) {
        self.timeout = timeout
        epoch = now
        lastActivity = Atomic(0)
    }

    /// Work started: the service is busy until the matching ``end()``.
    package func begin() {
        // Counted first: a wait that sees the count back at 0 sees this activity's time too.
        outstanding.add(1, ordering: .sequentiallyConsistent)
        touch()
    }

    /// Work ended; the idle period starts again from now.
    package func end() {
        // The time first, then the count (released): a wait that sees the count at 0 after this
        // sees this time.
        touch()
        let before = outstanding.subtract(1, ordering: .sequentiallyConsistent).oldValue
        precondition(before > 0, "IdleClock.end() without begin()")
    }

    /// Traffic that is not counted work (a one-way message): the idle period starts again.
    package func touch() {
        let (seconds, attoseconds) = epoch.duration(to: .now).components
        // The later of the two: a thread held up between reading the clock and storing it must
        // not move the last activity back.
        lastActivity.max(seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000, ordering: .sequentiallyConsistent)
    }

    /// The last activity.
    private var lastActive: ContinuousClock.Instant {
        epoch.advanced(by: .nanoseconds(lastActivity.load(ordering: .sequentiallyConsistent)))
    }

    /// What the clock watches has ended: every wait returns `false`, now and later.
    package func stop() {
        state.withLock { state in
            state.stopped = true
            return state.waiters.takeAll()
        }.resumeAll(returning: ())
    }

    /// When the service becomes idle if nothing happens, or `nil` while work is outstanding.
    package var deadline: ContinuousClock.Instant? {
        outstanding.load(ordering: .sequentiallyConsistent) > 0 ? nil : lastActive.advanced(by: timeout)
    }

    /// What a wait for idleness does next.
    private enum Next {
        case idle
        case stopped
        /// Sleep until the earliest moment the service could be idle (or ``IdleClock/stop()``).
        case wait(until: ContinuousClock.Instant)
    }

    /// Waits until the service has been idle for ``timeout`` plus `grace`: `true`; `false` once
    /// the clock is stopped.
    ///
    /// - Throws: ``WaitError/cancelled`` when the calling task is cancelled.
    package func waitUntilIdle(grace: Duration = .zero) async throws(WaitError) -> Bool {
        while true {
            let waiter = Waiter<Void>()
            let next = state.withLock { state -> Next in
                if state.stopped { return .stopped }
                let now = ContinuousClock.now
                // Busy: idle a timeout after the work ends at the earliest, so not before now + timeout.
                let due = (outstanding.load(ordering: .sequentiallyConsistent) > 0 ? now : lastActive).advanced(by: timeout + grace)
                if due <= now { return .idle }
                state.waiters.append(waiter)
                return .wait(until: due)
            }
            switch next {
            case .idle:
                return true
            case .stopped:
                return false
            case .wait(let due):
                do {
                    // Unowned, not weak: onAbandon runs inside this wait, while this method holds
                    // the clock; a weak reference would give the clock a side table for good,
                    // which LeakSanitizer, unable to read the refcount it hides behind, reported
                    // at a service's exit.
                    try await waiter.wait(until: due, onAbandon: { [unowned self] in
                        self.state.withLock { $0.waiters.remove(waiter) }
                    })
                } catch .deadlinePassed {
                    // Due, unless there was work or traffic meanwhile: look again.
                }
            }
        }
    }
}
