// The activity updates a headless share has seen, for the script's waits.
import RemoteHost

/// Every update of one share, in order, and whether the share has ended; a script's `wait`
/// looks from where the previous one matched, and waits (event-driven, with a deadline) for
/// the update it wants when it has not come yet.
final class UpdateLog: Sendable {
    private let state = Mutex<(updates: [ActivityUpdate], ended: Bool, waiter: Waiter<Void>?)>(([], false, nil))

    /// What a wait found.
    enum Found: Equatable {
        /// The update at this index.
        case update(Int)
        /// The share ended first.
        case ended
    }

    func append(_ update: ActivityUpdate) {
        wake { $0.updates.append(update) }
    }

    /// The share has its outcome: no update comes after.
    func end() {
        wake { $0.ended = true }
    }

    /// The updates so far.
    var updates: [ActivityUpdate] { state.withLock { $0.updates } }

    /// The first update in `wanted` at or after index `cursor` (`nil` wanted: only the end),
    /// waiting for it until `deadline`.
    ///
    /// - Throws: `WaitError` when the deadline passes or the task is cancelled first.
    func first(_ wanted: ActivityState?, from cursor: Int, until deadline: ContinuousClock.Instant) async throws(WaitError) -> Found {
        while true {
            let waiter = Waiter<Void>()
            let found = state.withLock { state -> Found? in
                if let wanted, cursor < state.updates.count,
                   let index = state.updates[cursor...].firstIndex(where: { $0.state == wanted }) { return .update(index) }
                if state.ended { return .ended }
                state.waiter = waiter
                return nil
            }
            if let found { return found }
            try await waiter.wait(until: deadline, onAbandon: { [weak self] in
                self?.state.withLock { state in if state.waiter === waiter { state.waiter = nil } }
            })
        }
    }

    private func wake(_ change: (inout (updates: [ActivityUpdate], ended: Bool, waiter: Waiter<Void>?)) -> Void) {
        let waiter = state.withLock { state -> Waiter<Void>? in
            change(&state)
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: ())
    }
}
