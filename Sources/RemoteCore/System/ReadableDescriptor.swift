import CRemoteViewLinux
import Glibc
import Synchronization

/// A non-blocking descriptor whose readability is awaited on the shared ``EventLoop``: a
/// listening socket, the read end of a pipe.
///
/// One task reads at a time. ``stop()`` wakes it for good from any thread; the descriptor is
/// closed when the object goes away, so it is never closed under a reader's feet.
package final class ReadableDescriptor: Sendable {
    /// The descriptor, owned by this object (for this module's tests to borrow).
    let fd: Int32
    private let loop: EventLoop
    private let registration: EventLoop.Registration
    private let state: Box

    private final class Box: Sendable {
        let value = Mutex<(stopped: Bool, waiter: Waiter<Bool>?)>((false, nil))
    }

    /// Takes `descriptor`, makes it non-blocking and close-on-exec.
    package init(_ descriptor: consuming OwnedFD, loop: EventLoop = .shared) throws(SystemCallError) {
        let state = Box()
        try Syscall.setNonBlocking(descriptor.rawValue, true)
        try Syscall.setCloseOnExec(descriptor.rawValue, true)
        registration = try loop.register(descriptor) { _ in
            state.value.withLock { $0.waiter.take() }?.resume(returning: true)
        }
        fd = descriptor.release()
        self.loop = loop
        self.state = state
    }

    deinit {
        loop.deregister(registration)
        Syscall.close(fd)
    }

    /// Waits until the descriptor is readable (or hung up): `true`; `false` once stopped, or
    /// when the waiting task is cancelled.
    package func waitReadable() async -> Bool {
        let waiter = Waiter<Bool>()
        let proceed = state.value.withLock { state -> Bool in
            if state.stopped { return false }
            precondition(state.waiter == nil, "ReadableDescriptor: two readers at once")
            state.waiter = waiter
            return true
        }
        guard proceed else { return false }
        loop.arm(registration, events: EPOLLIN.rawValue)
        let state = self.state
        do {
            return try await waiter.wait(onAbandon: {
                state.value.withLock { if $0.waiter === waiter { $0.waiter = nil } }
            })
        } catch {
            return false
        }
    }

    /// Makes the current and every later ``waitReadable()`` return `false`.
    package func stop() {
        state.value.withLock { state in
            state.stopped = true
            return state.waiter.take()
        }?.resume(returning: false)
    }

    /// Whether ``stop()`` was called.
    package var isStopped: Bool { state.value.withLock { $0.stopped } }

    /// Reads what is there: bytes, `[]` at end of file, `nil` when it would block.
    package func read(upTo count: Int) throws(SystemCallError) -> [UInt8]? {
        switch try Syscall.read(fd, upTo: count) {
        case .wouldBlock: nil
        case .done(let bytes): bytes
        }
    }

    /// Accepts one connection from a listening socket, waiting for it; `nil` once stopped (or
    /// when the waiting task is cancelled).
    package func accept() async throws(SystemCallError) -> OwnedFD? {
        while true {
            if case .done(let connection) = try Syscall.accept(fd) { return OwnedFD(adopting: connection) }
            guard await waitReadable() else { return nil }
        }
    }
}
