import struct Synchronization.Atomic

/// A strong reference that one writer replaces now and then and any thread reads, with no lock:
/// a reader makes two atomic additions and one load.
///
/// What a `ServiceConnection`'s message path reads to find its channel: the supervisor
/// publishes the channel once per change (open, closing, gone), and every message reads it.
///
/// A reader counts itself in, loads the pointer and takes its own reference, then counts itself
/// out. The writer exchanges the pointer and keeps the old object (its reference) until it sees
/// no reader counted in: any reader that could have loaded the old pointer had then taken its
/// own reference. All three operations are sequentially consistent, so a reader that counts in
/// after the writer saw none also loads after the exchange. An object replaced while a reader
/// was counted in is let go at a later ``publish(_:)`` or ``reclaim()``, or at deinit.
package final class PublishedReference<Object: AnyObject & Sendable>: Sendable {
    /// The published object's address (0: none), holding one reference to it.
    private let slot = Atomic<UInt>(0)
    private let readers = Atomic<Int>(0)
    /// Replaced objects that a reader may still be taking (writer side only; rarely contended).
    private let retired = Mutex<[UInt]>([])

    package init() {}

    deinit {
        Self.release(slot.load(ordering: .sequentiallyConsistent))
        for old in retired.withLock({ $0 }) { Self.release(old) }
    }

    /// The object published now, if any.
    package func load() -> Object? {
        readers.add(1, ordering: .sequentiallyConsistent)
        guard let raw = UnsafeRawPointer(bitPattern: slot.load(ordering: .sequentiallyConsistent)) else {
            readers.subtract(1, ordering: .sequentiallyConsistent)
            return nil
        }
        let object = Unmanaged<Object>.fromOpaque(raw).retain().takeRetainedValue()
        readers.subtract(1, ordering: .sequentiallyConsistent)
        return object
    }

    /// Publishes `object` (or nothing) in place of what was published.
    package func publish(_ object: Object?) {
        let new = object.map { UInt(bitPattern: Unmanaged.passRetained($0).toOpaque()) } ?? 0
        let old = slot.exchange(new, ordering: .sequentiallyConsistent)
        if old != 0 { retired.withLock { $0.append(old) } }
        reclaim()
    }

    /// Lets go of the replaced objects when no reader is taking one.
    package func reclaim() {
        let released = retired.withLock { retired -> [UInt] in
            guard !retired.isEmpty, readers.load(ordering: .sequentiallyConsistent) == 0 else { return [] }
            defer { retired.removeAll() }
            return retired
        }
        for old in released { Self.release(old) }
    }

    private static func release(_ address: UInt) {
        guard let raw = UnsafeRawPointer(bitPattern: address) else { return }
        Unmanaged<Object>.fromOpaque(raw).release()
    }
}
