import RemoteCore
import Synchronization

/// A one-way gate: closed until ``open()``, then open for good. Tasks wait for it with a deadline.
final class Latch: Sendable {
    private let state = Mutex<(open: Bool, waiters: [Int: CheckedContinuation<Bool, Never>], next: Int)>((false, [:], 0))

    /// Opens the gate and releases every waiter.
    func open() {
        let waiters = state.withLock { state in
            state.open = true
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume(returning: true) }
    }

    var isOpen: Bool { state.withLock { $0.open } }

    /// Waits until the gate opens (`true`) or `deadline` passes (`false`).
    @discardableResult
    func wait(until deadline: ContinuousClock.Instant) async -> Bool {
        await withCheckedContinuation { continuation in
            let id = state.withLock { state -> Int? in
                if state.open { return nil }
                state.next += 1
                state.waiters[state.next] = continuation
                return state.next
            }
            guard let id else { return continuation.resume(returning: true) }
            EventLoop.shared.schedule(at: deadline) { [weak self] in
                self?.state.withLock { $0.waiters.removeValue(forKey: id) }?.resume(returning: false)
            }
        }
    }
}
