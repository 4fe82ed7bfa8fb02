import Synchronization

/// Why a wait ended without its value.
package enum WaitError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The deadline passed first.
    case deadlinePassed
    /// The waiting task was cancelled first.
    case cancelled

    package var description: String {
        switch self {
        case .deadlinePassed: "the deadline passed"
        case .cancelled: "the waiting task was cancelled"
        }
    }
}

/// One task's wait for one value: it ends exactly once, with the value, when its deadline
/// passes, or when the waiting task is cancelled, whichever comes first.
///
/// RemoteView's one waiting primitive, like a NIO `EventLoopPromise` awaited once whose
/// `Scheduled` deadline is cancelled when it completes. Every way the wait ends undoes what it
/// set up: the deadline's timer on the ``EventLoop`` is cancelled when the value or the
/// cancellation comes first, and `onAbandon` lets the owner remove its entry for a wait that
/// ended without the value (an owner keeps its waiters in a ``WaiterQueue`` under its own lock).
///
/// The value may come before anyone waits: it is kept, and ``wait(until:loop:onAbandon:)``
/// returns it at once. A value offered after the wait ended is refused (``resume(returning:)``
/// returns `false`), so a late reply or a second wake-up is harmless.
///
/// ```swift
/// let waiter = Waiter<Handshake>()
/// let ready = state.withLock { state in state.peer ?? { state.waiters.append(waiter); return nil }() }
/// let peer = try await ready ?? waiter.wait(until: deadline, onAbandon: { [weak self] in self?.forget(waiter) })
/// ```
package final class Waiter<Value: Sendable>: Sendable {
    private enum State {
        /// Nobody waits yet and nothing came.
        case pending
        /// The outcome came before the wait began (the value, or the task's cancellation).
        case early(Result<Value, WaitError>)
        /// A task waits; its deadline's timer, once scheduled.
        case waiting(UnsafeContinuation<Result<Value, WaitError>, Never>, EventLoop.TimerID?, EventLoop)
        /// The wait ended.
        case ended
    }

    private let state = Mutex(State.pending)

    /// What ending the wait takes, decided under the lock.
    private enum FinishStep {
        case kept
        case resume(UnsafeContinuation<Result<Value, WaitError>, Never>, EventLoop.TimerID?, EventLoop)
        case refused
    }

    package init() {}

    /// Ends the wait with `value` (or keeps it for a wait that has not begun).
    ///
    /// - Returns: `false` when the wait had ended already (deadline, cancellation, or an
    ///   earlier value): the value was dropped.
    @discardableResult
    package func resume(returning value: Value) -> Bool {
        finish(.success(value))
    }

    /// Whether the wait is over or its outcome is known (nothing more can change it).
    package var isSettled: Bool {
        state.withLock { state in
            switch state {
            case .pending, .waiting: false
            case .early, .ended: true
            }
        }
    }

    /// Waits for the value.
    ///
    /// Call once. Returns the value as soon as it comes (at once if it came already).
    ///
    /// - Parameters:
    ///   - deadline: When to give up (`nil`: never); a timer on `loop` that is cancelled as soon
    ///     as the wait ends otherwise.
    ///   - onAbandon: Runs when the wait ends without the value (deadline or cancellation), so
    ///     the owner can drop its reference to this waiter.
    /// - Throws: ``WaitError/deadlinePassed`` or ``WaitError/cancelled``.
    nonisolated(nonsending) package func wait(until deadline: ContinuousClock.Instant? = nil, loop: EventLoop = .shared,
                                              onAbandon: (@Sendable () -> Void)? = nil) async throws(WaitError) -> Value {
        let result = await withTaskCancellationHandler {
            await suspend(until: deadline, loop: loop)
        } onCancel: {
            finish(.failure(.cancelled))
        }
        switch result {
        case .success(let value):
            return value
        case .failure(let error):
            onAbandon?()
            throw error
        }
    }

    /// Waits for the value like ``wait(until:loop:onAbandon:)``, but sees it through when the
    /// waiting task is cancelled.
    ///
    /// Only for the few waits that must see their event whatever happens to the task that
    /// waits: a process's end, which someone must book before the launcher can report it, and
    /// the steps of stopping a process, which cancellation must not shorten into a `SIGKILL`.
    /// Each caller says why.
    ///
    /// - Returns: The value, or `nil` when `deadline` passed first.
    nonisolated(nonsending) package func waitUncancellably(until deadline: ContinuousClock.Instant? = nil,
                                                           loop: EventLoop = .shared) async -> Value? {
        try? await suspend(until: deadline, loop: loop).get()
    }

    nonisolated(nonsending) private func suspend(until deadline: ContinuousClock.Instant?, loop: EventLoop) async -> Result<Value, WaitError> {
        await withOrderedContinuation { (continuation: UnsafeContinuation<Result<Value, WaitError>, Never>) in
            let early = state.withLock { state -> Result<Value, WaitError>? in
                switch state {
                case .pending:
                    state = .waiting(continuation, nil, loop)
                    return nil
                case .early(let result):
                    state = .ended
                    return result
                case .waiting, .ended:
                    preconditionFailure("Waiter.wait() called twice")
                }
            }
            if let early { return continuation.resumeInOrder(returning: early) }
            guard let deadline else { return }
            let timer = loop.schedule(at: deadline) { [self] in finish(.failure(.deadlinePassed)) }
            // Keep the timer to cancel, unless the wait ended meanwhile (then it is stale).
            let kept = state.withLock { state -> Bool in
                guard case .waiting(let continuation, nil, let loop) = state else { return false }
                state = .waiting(continuation, timer, loop)
                return true
            }
            if !kept { loop.cancel(timer) }
        }
    }

    /// Ends the wait with `result` unless it ended already; `true` when this call ended it.
    @discardableResult
    private func finish(_ result: Result<Value, WaitError>) -> Bool {
        let step = state.withLock { state -> FinishStep in
            switch state {
            case .pending:
                state = .early(result)
                return .kept
            case .waiting(let continuation, let timer, let loop):
                state = .ended
                return .resume(continuation, timer, loop)
            case .early, .ended:
                return .refused
            }
        }
        switch step {
        case .kept:
            return true
        case .resume(let continuation, let timer, let loop):
            if let timer { loop.cancel(timer) }
            continuation.resumeInOrder(returning: result)
            return true
        case .refused:
            return false
        }
    }
}

/// The tasks waiting for one thing, kept inside their owner's locked state (like the waiter
/// list of a condition variable, without its lost wake-ups: the owner checks and enqueues under
/// one lock, and takes the waiters to wake under the same lock).
///
/// Wake them outside the lock: `for waiter in state.withLock({ $0.waiters.takeAll() }) { waiter.resume(returning: ()) }`.
package struct WaiterQueue<Value: Sendable>: Sendable {
    private var waiters: [Waiter<Value>] = []

    package init() {}

    /// Whether no task waits.
    package var isEmpty: Bool { waiters.isEmpty }

    /// How many tasks wait.
    package var count: Int { waiters.count }

    /// Adds `waiter` (it waits once the owner releases its lock).
    package mutating func append(_ waiter: Waiter<Value>) {
        waiters.append(waiter)
    }

    /// Drops `waiter` (its wait was abandoned).
    package mutating func remove(_ waiter: Waiter<Value>) {
        waiters.removeAll { $0 === waiter }
    }

    /// Takes every waiter, to resume outside the owner's lock.
    package mutating func takeAll() -> [Waiter<Value>] {
        defer { waiters.removeAll() }
        return waiters
    }
}

extension Array {
    /// Resumes every waiter with `value`.
    package func resumeAll<Value>(returning value: Value) where Element == Waiter<Value> {
        for waiter in self { waiter.resume(returning: value) }
    }
}

extension EventLoop {
    /// Returns at `deadline`, on a timer of this loop; throws ``WaitError/cancelled`` as soon as
    /// the calling task is cancelled (and the timer is cancelled with it).
    nonisolated(nonsending) package func sleep(until deadline: ContinuousClock.Instant) async throws(WaitError) {
        do {
            try await Waiter<Void>().wait(until: deadline, loop: self)
        } catch .deadlinePassed {
            return
        }
    }
}
