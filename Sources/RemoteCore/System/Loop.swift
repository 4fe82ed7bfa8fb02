import Synchronization

/// The thread a connection's pipeline is confined to: its packet channel, its framer and its
/// handler run there and nowhere else, so their state needs no lock (docs/Architecture.md, "The
/// connection core"). Like SwiftNIO's `EventLoop`.
///
/// ``EventLoop`` is the real one, a thread waiting in `epoll_wait`; ``ManualLoop`` runs only
/// when a test says so, with a clock only the test moves, as NIO's `EmbeddedEventLoop`. A loop
/// is a `TaskExecutor` too: a task that prefers it runs on the loop's thread, between rounds'
/// descriptors and timers (a connection's delivery task does).
package protocol Loop: TaskExecutor {
    /// Whether the caller runs on the loop (its thread, or the thread running a ``ManualLoop``,
    /// or a thread that borrowed an ``EventLoop`` for a blocking call).
    var inLoop: Bool { get }

    /// Whether the caller is a thread that borrowed the loop for a blocking call
    /// (``EventLoop/borrow(_:)``): it runs the loop's code for the moment, but no handler
    /// written by a user runs on it.
    var isBorrowed: Bool { get }

    /// The loop's clock: what deadlines given to ``schedule(at:_:)`` are measured against.
    var now: ContinuousClock.Instant { get }

    /// Runs `job` on the loop, after what is queued already; never at once, even from the loop.
    func execute(_ job: @escaping @Sendable () -> Void)

    /// Calls `action` on the loop at `deadline` unless ``cancel(_:)`` comes first.
    @discardableResult
    func schedule(at deadline: ContinuousClock.Instant, _ action: @escaping @Sendable () -> Void) -> LoopTimer

    /// Cancels a timer; does nothing if it fired already. Called on the loop (or, for a timer
    /// scheduled off it, anywhere), the timer does not fire after this returns; a timer
    /// scheduled on the loop's thread and cancelled from another thread is cancelled when the
    /// loop takes the cancel, so one already due may still fire once (a waiter must check its
    /// state when it fires, as `Waiter` does).
    func cancel(_ timer: LoopTimer)

    /// Calls `flusher`'s ``RoundFlusher/flush()`` once, on the loop, at the end of this round:
    /// after the ready descriptors, the due timers and the queued jobs. For the loop only.
    func flushAtEndOfRound(_ flusher: any RoundFlusher)
}

/// What the loop calls at the end of a round (a channel writing what was queued in it).
package protocol RoundFlusher: AnyObject {
    func flush()
}

/// A timer of a ``Loop``, to cancel.
package struct LoopTimer: Sendable, Hashable {
    package let value: UInt64
    package init(_ value: UInt64) { self.value = value }
}

extension Loop {
    /// Runs `job` on the loop: at once when the caller is on it, queued otherwise. The bridge's
    /// one way in (docs/Architecture.md, "The connection core").
    @inline(__always)
    package func run(_ job: @escaping @Sendable () -> Void) {
        if inLoop { job() } else { execute(job) }
    }

    /// Traps in a debug build when the caller is not on the loop: loop-confined state is touched
    /// from elsewhere, a bug. Like NIO's `preconditionInEventLoop`.
    @inline(__always)
    package func preconditionInLoop(_ what: @autoclosure () -> String = "", file: StaticString = #fileID, line: UInt = #line) {
        assert(inLoop, "\(what()) touched off its loop", file: file, line: line)
    }
}

/// A value only its loop may touch, carried across a `Sendable` boundary: like NIO's
/// `NIOLoopBound`. Made and read on the loop (checked in debug builds).
package struct LoopBound<Value>: @unchecked Sendable {
    private let box: Box
    package let loop: any Loop

    private final class Box {
        var value: Value
        init(_ value: Value) { self.value = value }
    }

    /// Binds `value` to `loop`: made on the loop, or before anything on the loop can reach it
    /// (a connection's pipeline, made with the connection and handed to the loop afterwards).
    package init(_ value: Value, loop: any Loop) {
        self.box = Box(value)
        self.loop = loop
    }

    /// The value; on the loop only.
    package var value: Value {
        get {
            loop.preconditionInLoop("LoopBound.value")
            return box.value
        }
        nonmutating set {
            loop.preconditionInLoop("LoopBound.value")
            box.value = newValue
        }
    }
}
