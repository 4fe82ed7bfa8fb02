import CProto
import Glibc
import Synchronization

/// A non-blocking descriptor whose readability is awaited on the shared ``EventLoop``: a
/// listening socket, the read end of a pipe.
///
/// One task reads at a time. ``stop()`` wakes it for good from any thread; the descriptor is
/// closed when the object goes away, so it is never closed under a reader's feet.
package final class ReadableDescriptor: Sendable {
    /// The descriptor, owned by this object.
    package let fd: Int32
    private let loop: EventLoop
    private let registration: EventLoop.Registration
    private let state: Box

    private final class Box: Sendable {
        let value = Mutex<(stopped: Bool, waiter: CheckedContinuation<Bool, Never>?)>((false, nil))
    }

    /// Takes `fd`, makes it non-blocking and close-on-exec.
    package init(_ descriptor: consuming OwnedFD, loop: EventLoop = .shared) throws(SystemCallError) {
        let fd = descriptor.release()
        let state = Box()
        do {
            try Syscall.setNonBlocking(fd, true)
            try Syscall.setCloseOnExec(fd, true)
            registration = try loop.register(fd) { _ in
                state.value.withLock { $0.waiter.take() }?.resume(returning: true)
            }
        } catch {
            Syscall.close(fd)
            throw error
        }
        self.fd = fd
        self.loop = loop
        self.state = state
    }

    deinit {
        loop.deregister(registration)
        Syscall.close(fd)
    }

    /// Waits until the descriptor is readable (or hung up): `true`; `false` once stopped.
    package func waitReadable() async -> Bool {
        await withCheckedContinuation { continuation in
            let proceed = state.value.withLock { state -> Bool in
                if state.stopped { return false }
                state.waiter = continuation
                return true
            }
            if proceed { loop.arm(registration, events: EPOLLIN.rawValue) } else { continuation.resume(returning: false) }
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
        var buffer = [UInt8](repeating: 0, count: count)
        let result = try buffer.withUnsafeMutableBytes { raw in
            Result { () throws(SystemCallError) in try Syscall.nonBlocking("read") { Glibc.read(fd, raw.baseAddress, raw.count) } }
        }.get()
        switch result {
        case .wouldBlock: return nil
        case .done(let length): return Array(buffer[..<length])
        }
    }

    /// Accepts one connection from a listening socket, waiting for it; `nil` once stopped.
    package func accept() async throws(SystemCallError) -> OwnedFD? {
        while true {
            if case .done(let connection) = try Syscall.accept(fd) { return OwnedFD(adopting: connection) }
            guard await waitReadable() else { return nil }
        }
    }
}
