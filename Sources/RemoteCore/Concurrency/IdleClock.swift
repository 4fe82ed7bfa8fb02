import Synchronization

/// When a service has been idle long enough to exit: no request outstanding and no traffic for
/// ``timeout``. One clock for both sides of idle exit: the service SDK exits by it, and the
/// launcher stops a service still running a grace period after it.
///
/// Work in flight is counted with ``begin()`` and ``end()`` (an outstanding request, an open
/// connection of a listening service); other traffic moves the clock with ``touch()``. Waiting
/// uses timers of the ``EventLoop``: one per idle period while quiet, none while busy.
package final class IdleClock: Sendable {
    /// How long the service must be idle.
    package let timeout: Duration
    private let state: Mutex<State>

    private struct State {
        var outstanding = 0
        var lastActivity: ContinuousClock.Instant
        /// Woken when the last outstanding work ends.
        var quiet = WaiterQueue<Void>()
    }

    package init(timeout: Duration, now: ContinuousClock.Instant = .now) {
        self.timeout = timeout
        state = Mutex(State(lastActivity: now))
    }

    /// Work started: the service is busy until the matching ``end()``.
    package func begin() {
        state.withLock { state in
            state.outstanding += 1
            state.lastActivity = .now
        }
    }

    /// Work ended; the idle period starts again from now.
    package func end() {
        let waiters = state.withLock { state -> [Waiter<Void>] in
            precondition(state.outstanding > 0, "IdleClock.end() without begin()")
            state.outstanding -= 1
            state.lastActivity = .now
            return state.outstanding == 0 ? state.quiet.takeAll() : []
        }
        waiters.resumeAll(returning: ())
    }

    /// Traffic that is not counted work (a one-way message): the idle period starts again.
    package func touch() {
        state.withLock { $0.lastActivity = .now }
    }

    /// When the service becomes idle if nothing happens, or `nil` while work is outstanding.
    package var deadline: ContinuousClock.Instant? {
        state.withLock { $0.outstanding > 0 ? nil : $0.lastActivity.advanced(by: timeout) }
    }

    /// Returns once the service has been idle for ``timeout`` plus `grace`.
    ///
    /// - Throws: ``WaitError/cancelled`` when the calling task is cancelled.
    package func waitUntilIdle(grace: Duration = .zero) async throws(WaitError) {
        while true {
            let waiter = Waiter<Void>()
            let due = state.withLock { state -> ContinuousClock.Instant? in
                if state.outstanding > 0 {
                    state.quiet.append(waiter)
                    return nil
                }
                return state.lastActivity.advanced(by: timeout + grace)
            }
            guard let due else {
                try await waiter.wait(onAbandon: { [weak self] in self?.state.withLock { $0.quiet.remove(waiter) } })
                continue
            }
            if due <= .now {
                // Idle long enough, unless work started in between.
                if state.withLock({ $0.outstanding == 0 && $0.lastActivity.advanced(by: timeout + grace) <= .now }) { return }
                continue
            }
            try await EventLoop.shared.sleep(until: due)
        }
    }
}
