/// The readers of a stream that has several: each reader an `AsyncStream` of its own, its
/// continuation registered under a number, so that a reader that goes away (its stream dropped
/// or its task cancelled) is forgotten. Kept under its owner's lock, which orders what every
/// reader gets (`ShareSession.updates`, `RemoteAccessibility.changes()`).
package struct StreamReaders<Element: Sendable>: Sendable {
    private var readers: [UInt64: AsyncStream<Element>.Continuation] = [:]
    private var next: UInt64 = 0

    package init() {}

    /// Registers `continuation`; returns the number ``remove(_:)`` takes.
    package mutating func add(_ continuation: AsyncStream<Element>.Continuation) -> UInt64 {
        defer { next += 1 }
        readers[next] = continuation
        return next
    }

    /// Forgets reader `id` (its stream ended).
    package mutating func remove(_ id: UInt64) {
        readers[id] = nil
    }

    /// Gives `element` to every reader (each stream buffers it; nothing waits).
    package func yield(_ element: Element) {
        for reader in readers.values { reader.yield(element) }
    }

    /// Every reader's continuation, to finish outside the lock.
    package var all: [AsyncStream<Element>.Continuation] { Array(readers.values) }
}
