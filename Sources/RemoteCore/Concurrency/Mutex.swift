import CRemoteViewLinux
import Synchronization

/// The standard library's `Synchronization.Mutex`, made visible to ThreadSanitizer.
///
/// On Linux the standard `Mutex` waits with `futex` inside the (uninstrumented) standard library,
/// so ThreadSanitizer never sees its lock and unlock: every access under the lock from two
/// threads is reported as a race (docs/Fuzzing.md, "Sanitizers"). In a ThreadSanitizer build
/// this one tells it, with `__tsan_acquire` when the lock is taken and `__tsan_release` before
/// it is given back, on an address of its own. In any other build it is the standard `Mutex`
/// and a `nil` check. Declared in RemoteCore, it shadows `Synchronization.Mutex` in every file
/// of the package's modules, so the code reads as before.
package struct Mutex<Value: ~Copyable>: ~Copyable {
    private let base: Synchronization.Mutex<Value>
    /// ThreadSanitizer's name for this lock: a byte of memory of its own, or `nil` without it.
    private let annotation: UnsafeMutableRawPointer?

    package init(_ initialValue: consuming sending Value) {
        base = Synchronization.Mutex(initialValue)
        annotation = threadSanitizer ? UnsafeMutableRawPointer.allocate(byteCount: 1, alignment: 1) : nil
    }

    deinit { annotation?.deallocate() }

    /// `Synchronization.Mutex.withLock(_:)`.
    package borrowing func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        try base.withLock { (value: inout sending Value) throws(E) -> sending Result in
            if let annotation { rv_tsan_acquire(annotation) }
            defer { if let annotation { rv_tsan_release(annotation) } }
            return try body(&value)
        }
    }
}

// As `Synchronization.Mutex`: the lock makes its value safe to share. `annotation` is only a name
// for ThreadSanitizer; nothing reads or writes the byte it points to.
extension Mutex: @unchecked Sendable where Value: ~Copyable {}

/// Whether this build has ThreadSanitizer (compile-time, in the C shim).
private let threadSanitizer = rv_thread_sanitizer() != 0
