import RemoteCore
import Synchronization

/// A value that arrives once (how a process ended; that a stream was read to its end), and the
/// tasks waiting for it, each with an optional deadline.
final class Latch<Value: Sendable>: Sendable {
    private let state = Mutex<(value: Value?, waiters: [Int: CheckedContinuation<Value?, Never>], next: Int)>((nil, [:], 0))

    /// Sets the value (the first time only) and releases every waiter.
    func open(_ value: Value) {
        let waiters = state.withLock { state -> [CheckedContinuation<Value?, Never>] in
            guard state.value == nil else { return [] }
            state.value = value
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume(returning: value) }
    }

    /// The value, once it has arrived.
    var value: Value? { state.withLock { $0.value } }

    /// Waits for the value; `nil` if `deadline` passes first.
    @discardableResult
    func wait(until deadline: ContinuousClock.Instant? = nil) async -> Value? {
        await withCheckedContinuation { continuation in
            let (id, value) = state.withLock { state -> (Int?, Value?) in
                if let value = state.value { return (nil, value) }
                state.next += 1
                state.waiters[state.next] = continuation
                return (state.next, nil)
            }
            guard let id else { return continuation.resume(returning: value) }
            guard let deadline else { return }
            EventLoop.shared.schedule(at: deadline) { [weak self] in
                self?.state.withLock { $0.waiters.removeValue(forKey: id) }?.resume(returning: nil)
            }
        }
    }
}
