import RemoteHost

/// A share's updates as they come: all of them, and a wait for one in a given state.
public final class ShareUpdates: Sendable {
    private final class Seen: Sendable {
        let updates = Mutex<[ActivityUpdate]>([])
    }

    private let seen = Seen()
    private let stream: AsyncStream<ActivityUpdate>
    private let collector: Task<Void, Never>

    /// Starts collecting `session`'s updates (from its start: each reader of `session.updates` gets them all).
    public init(_ session: ShareSession) {
        let (stream, sink) = AsyncStream<ActivityUpdate>.makeStream()
        self.stream = stream
        let seen = self.seen
        collector = Task {
            for await update in session.updates {
                seen.updates.withLock { $0.append(update) }
                sink.yield(update)
            }
            sink.finish()
        }
    }

    /// Every update, once the share has ended.
    public var all: [ActivityUpdate] {
        get async {
            await collector.value
            return seen.updates.withLock { $0 }
        }
    }

    /// Waits until an update in `state` has come (one that came already counts).
    public func wait(for state: ActivityState) async throws {
        try await withDeadline(.seconds(10), "an update in state \(state)") { [stream, seen] in
            if seen.updates.withLock({ $0.contains { $0.state == state } }) { return }
            for await update in stream where update.state == state { return }
            throw StreamEnded(what: "the share's updates, before one in state \(state)")
        }
    }
}
