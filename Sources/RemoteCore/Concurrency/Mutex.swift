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

    #if LockCounts
    /// `Synchronization.Mutex.withLock(_:)`, counted (with where it was called, for
    /// ``LockCounter/sites``).
    package borrowing func withLock<Result: ~Copyable, E: Error>(
        file: StaticString = #fileID, line: UInt = #line,
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        LockCounter.count(file: file, line: line)
        return try locked(body)
    }
    #else
    /// `Synchronization.Mutex.withLock(_:)`.
    @inline(__always)
    package borrowing func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E) -> sending Result {
        try locked(body)
    }
    #endif

    @inline(__always)
    private borrowing func locked<Result: ~Copyable, E: Error>(
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

// MARK: continuations ThreadSanitizer can follow

/// The lock that orders a continuation's resumption for ThreadSanitizer (used only in a
/// ThreadSanitizer build).
///
/// On Linux ThreadSanitizer does not see the order the Swift concurrency runtime gives a
/// continuation's resumption (swiftlang/swift#57803): `resume` reads the awaiting task's
/// context after handing the task to its executor, and the task, already running on another
/// thread, reuses that memory, which is reported as a race. A `Waiter` resumes under its own
/// lock, which the waiting side takes again, and so never showed it; the connection core
/// resumes bare continuations from the loop. In a ThreadSanitizer build,
/// ``UnsafeContinuation/resumeInOrder(returning:)`` resumes while holding this lock and
/// ``withOrderedContinuation(isolation:_:)`` takes it once the task is back, so the resumption
/// happens before whatever the task does next, as the runtime guarantees. In any other build
/// both are `withUnsafeContinuation` and `resume` with one branch.
private let continuationOrder = Mutex(())

extension UnsafeContinuation where E == Never {
    /// `resume(returning:)`, in an order ThreadSanitizer can follow (see `continuationOrder`).
    @inline(__always)
    package func resumeInOrder(returning value: sending T) {
        if threadSanitizer {
            nonisolated(unsafe) let value = value
            continuationOrder.withLock { _ in self.resume(returning: value) }
        } else {
            resume(returning: value)
        }
    }

    /// `resume()`, in an order ThreadSanitizer can follow.
    @inline(__always)
    package func resumeInOrder() where T == Void {
        resumeInOrder(returning: ())
    }
}

/// `withUnsafeContinuation`, for a continuation resumed with
/// ``UnsafeContinuation/resumeInOrder(returning:)`` (see `continuationOrder`).
@inline(__always)
package func withOrderedContinuation<T>(isolation: isolated (any Actor)? = #isolation,
                                        _ body: (UnsafeContinuation<T, Never>) -> Void) async -> sending T {
    let value = await withUnsafeContinuation(isolation: isolation, body)
    if threadSanitizer { continuationOrder.withLock { _ in } }
    return value
}
