import Synchronization

/// A value that arrives once (how a process ended, that a stream was read to its end, that a
/// handshake was sent) and the tasks waiting for it, each with its own deadline.
///
/// Built on ``Waiter``: each wait is cancellable, its timer goes when it ends, and a wait that
/// gives up leaves no entry behind.
package final class Latch<Value: Sendable>: Sendable {
    private let state = Mutex<(value: Value?, waiters: WaiterQueue<Value>)>((nil, WaiterQueue()))

    package init() {}

    /// Sets the value (the first time only) and releases every waiter; `false` if it was set already.
    @discardableResult
    package func open(_ value: Value) -> Bool {
        let waiters = state.withLock { state -> [Waiter<Value>]? in
            guard state.value == nil else { return nil }
            state.value = value
            return state.waiters.takeAll()
        }
        waiters?.resumeAll(returning: value)
        return waiters != nil
    }

    /// The value, once it has arrived.
    package var value: Value? { state.withLock { $0.value } }

    /// Waits for the value.
    ///
    /// - Throws: ``WaitError`` when `deadline` passes or the task is cancelled first.
    nonisolated(nonsending) package func wait(until deadline: ContinuousClock.Instant? = nil) async throws(WaitError) -> Value {
        let waiter = Waiter<Value>()
        if let value = valueOrEnqueue(waiter) { return value }
        return try await waiter.wait(until: deadline, onAbandon: { [weak self] in
            self?.state.withLock { $0.waiters.remove(waiter) }
        })
    }

    /// Waits for the value like ``wait(until:)``, but sees it through when the waiting task is
    /// cancelled (see ``Waiter/waitUncancellably(until:loop:)`` for when that is right).
    ///
    /// - Returns: The value, or `nil` when `deadline` passes first.
    nonisolated(nonsending) package func waitUncancellably(until deadline: ContinuousClock.Instant? = nil) async -> Value? {
        let waiter = Waiter<Value>()
        if let value = valueOrEnqueue(waiter) { return value }
        let value = await waiter.waitUncancellably(until: deadline)
        if value == nil { state.withLock { $0.waiters.remove(waiter) } }
        return value
    }

    /// The value if it has arrived; otherwise `waiter` is queued for it (under one lock, so the
    /// value cannot slip in between).
    private func valueOrEnqueue(_ waiter: Waiter<Value>) -> Value? {
        state.withLock { state -> Value? in
            if let value = state.value { return value }
            state.waiters.append(waiter)
            return nil
        }
    }

    /// The value, or `nil` when `deadline` passes (or the task is cancelled) first.
    nonisolated(nonsending) package func value(before deadline: ContinuousClock.Instant) async -> Value? {
        try? await wait(until: deadline)
    }
}
