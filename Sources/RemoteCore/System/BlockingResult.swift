import CRemoteViewLinux

/// The word a blocked thread sleeps on and the value it waits for, in one object: another
/// thread hands the value over once (``complete(_:)``), which wakes the waiter only if it sleeps
/// (a futex: no lock, and no system call when the value comes before the wait). How a blocking
/// call (``Connection/requestSync(_:timeout:)``) waits for what the event loop does for it.
package struct BlockingResult<Value: Sendable>: @unchecked Sendable {
    // @unchecked: the value is written once, before the word is marked done (sequentially
    // consistent), and read only after the word was seen done.
    private let storage: Storage

    /// The word and the value in one allocation (a `ManagedBuffer` header has a fixed address).
    private final class Storage: ManagedBuffer<BlockingSlot<Value>, Void> {}

    /// A new, pending result.
    package static func make() -> BlockingResult<Value> {
        BlockingResult(storage: unsafeDowncast(Storage.create(minimumCapacity: 0) { _ in BlockingSlot() }, to: Storage.self))
    }

    private func withUnsafeMutablePointerToHeader<R>(_ body: (UnsafeMutablePointer<BlockingSlot<Value>>) -> R) -> R {
        storage.withUnsafeMutablePointerToHeader(body)
    }

    /// Hands the value over (once) and wakes the waiter.
    package func complete(_ value: Value) {
        withUnsafeMutablePointerToHeader { slot in
            slot.pointee.value = value
            rv_oneshot_signal(Self.word(slot))
        }
    }

    /// Whether the value has been handed over.
    package var isComplete: Bool {
        withUnsafeMutablePointerToHeader { rv_oneshot_is_done(Self.word($0)) != 0 }
    }

    /// Blocks the calling thread until the value is handed over, or `timeout` (`nil`: no limit)
    /// passes first (`nil` then).
    package func wait(timeout: Duration? = nil) -> Value? {
        let nanoseconds = timeout.map { max(0, $0.saturatingNanoseconds) } ?? -1
        return withUnsafeMutablePointerToHeader { slot in
            guard rv_oneshot_wait(Self.word(slot), nanoseconds) != 0 else { return nil }
            return slot.pointee.value
        }
    }

    /// The futex word: the slot's first field.
    private static func word(_ slot: UnsafeMutablePointer<BlockingSlot<Value>>) -> UnsafeMutablePointer<UInt32> {
        UnsafeMutableRawPointer(slot).assumingMemoryBound(to: UInt32.self)
    }
}

/// A ``BlockingResult``'s storage: the futex word first (its address is the slot's), then the value.
package struct BlockingSlot<Value> {
    var word: UInt32 = 0
    var value: Value?
}
