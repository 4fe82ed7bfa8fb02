import CRemoteViewLinux
import Glibc
import Synchronization

/// One thread waiting in `epoll_wait` for every descriptor and deadline RemoteView watches.
///
/// Sockets, pidfds and timers of all connections share it (like a NIO event loop), so a host
/// with 64 services runs one waiting thread, not 64. Interest is one-shot by default: a waiter
/// ``arm(_:events:)``s its registration, the loop calls its handler once when the descriptor is
/// ready, and the waiter arms again if it still needs to wait. A descriptor waited on once per
/// message (a socket) is registered edge-triggered instead, for good
/// (``register(_:edgeTriggered:handler:)``), so no wait costs an `epoll_ctl`. Handlers run on
/// the loop thread and must only hand work off (resume a continuation), never block.
///
/// Each round: the handlers of the ready descriptors (a socket's channel reads and dispatches
/// there), the due timers, the work handed over with ``execute(_:)`` and the jobs of tasks that
/// prefer the loop as their `TaskExecutor`, with what those queue, up to 64 a round (the rest
/// wait for the next); then every channel that queued packets in the round writes them
/// (``flushAtEndOfRound(_:)``). It is the ``Loop`` of every connection's pipeline
/// (docs/Architecture.md, "The connection core").
package final class EventLoop: TaskExecutor, Loop, Sendable {
    /// The process-wide loop, started on first use.
    package static let shared: EventLoop = {
        do { return try EventLoop() } catch {
            fatalError("RemoteView cannot start its event loop: \(error)")
        }
    }()

    /// What a registered descriptor is ready for: `EPOLLIN`, `EPOLLOUT`, `EPOLLHUP`, `EPOLLERR` bits.
    package typealias Handler = @Sendable (_ events: UInt32) -> Void

    /// A descriptor's place in the loop.
    package struct Registration: Sendable, Hashable {
        fileprivate let token: UInt64
        fileprivate let fd: Int32
    }

    /// A scheduled deadline, to cancel.
    package typealias TimerID = LoopTimer

    private struct Timer {
        var deadline: ContinuousClock.Instant
        var id: UInt64
    }

    private struct State {
        var handlers: [UInt64: Handler] = [:]
        var nextToken: UInt64 = 1
        /// Min-heap of deadlines; cancelled ones stay until they surface and are skipped.
        var timers: [Timer] = []
        var timerActions: [UInt64: @Sendable () -> Void] = [:]
        /// The deadline the loop thread is sleeping towards, if any.
        var sleepingUntil: ContinuousClock.Instant?
        var sleeping = false
        /// Jobs of tasks that prefer this loop as their executor, in order.
        var jobs: [UnownedJob] = []
        /// The array the last round's jobs were in, emptied: the next round's queue, so queueing
        /// a job does not allocate.
        var spareJobs: [UnownedJob] = []
        /// Work handed to the loop (``execute(_:)``), in order, and the last round's array.
        var work: [@Sendable () -> Void] = []
        var spareWork: [@Sendable () -> Void] = []
    }

    private let epoll: Int32
    private let wakeup: Int32
    private let state = Mutex(State())
    /// Who asked to be flushed at the end of this round: the loop's own, touched on its thread
    /// only (``flushAtEndOfRound(_:)``).
    nonisolated(unsafe) private var flushers: [any RoundFlusher] = []
    nonisolated(unsafe) private var spareFlushers: [any RoundFlusher] = []
    private let thread = Atomic<UInt>(0)
    private static let wakeToken: UInt64 = 0

    private init() throws(SystemCallError) {
        epoll = try Syscall.epollCreate()
        wakeup = try Syscall.eventCounter()
        try Syscall.epollControl(epoll, EPOLL_CTL_ADD, wakeup, events: EPOLLIN.rawValue, token: Self.wakeToken)
        startThread()
    }

    // MARK: descriptors

    /// Adds `descriptor` with no interest yet; `handler` runs on the loop thread when an armed
    /// interest fires. The caller keeps owning the descriptor and must ``deregister(_:)`` before
    /// closing it.
    package func register(_ descriptor: borrowing OwnedFD, handler: @escaping Handler) throws(SystemCallError) -> Registration {
        try register(descriptor, events: EPOLLONESHOT.rawValue, handler: handler)
    }

    /// Adds `descriptor` with `events` armed for good and edge-triggered (`EPOLLET`): `handler`
    /// runs on the loop thread in each round in which the descriptor became ready again (a new
    /// packet came, say), whether or not anyone waits, so the owner must remember readiness
    /// that came while nobody waited. No `epoll_ctl` per wait, which one-shot interest needs.
    /// ``watch(_:edgeTriggered:)`` changes the events.
    package func register(_ descriptor: borrowing OwnedFD, edgeTriggered events: UInt32, handler: @escaping Handler) throws(SystemCallError) -> Registration {
        try register(descriptor, events: events | EPOLLET.rawValue, handler: handler)
    }

    private func register(_ descriptor: borrowing OwnedFD, events: UInt32, handler: @escaping Handler) throws(SystemCallError) -> Registration {
        let fd = descriptor.rawValue
        let token = state.withLock { state in
            let token = state.nextToken
            state.nextToken += 1
            state.handlers[token] = handler
            return token
        }
        do {
            try Syscall.epollControl(epoll, EPOLL_CTL_ADD, fd, events: events, token: token)
        } catch {
            _ = state.withLock { $0.handlers.removeValue(forKey: token) }
            throw error
        }
        return Registration(token: token, fd: fd)
    }

    /// Asks for one call of the handler when `events` (`EPOLLIN`/`EPOLLOUT`) become ready.
    /// Hang-up and error always count as ready.
    package func arm(_ registration: Registration, events: UInt32) {
        do {
            try Syscall.epollControl(epoll, EPOLL_CTL_MOD, registration.fd, events: events | EPOLLONESHOT.rawValue,
                                     token: registration.token)
        } catch {
            preconditionFailure("epoll_ctl(MOD) on a registered descriptor failed: \(error)")
        }
    }

    /// Changes the events of an edge-triggered registration (``register(_:edgeTriggered:handler:)``).
    /// Readiness is checked again at once: events that are ready already are reported.
    package func watch(_ registration: Registration, edgeTriggered events: UInt32) {
        do {
            try Syscall.epollControl(epoll, EPOLL_CTL_MOD, registration.fd, events: events | EPOLLET.rawValue, token: registration.token)
        } catch {
            preconditionFailure("epoll_ctl(MOD) on a registered descriptor failed: \(error)")
        }
    }

    /// Removes the descriptor; its handler is not called again.
    package func deregister(_ registration: Registration) {
        _ = state.withLock { $0.handlers.removeValue(forKey: registration.token) }
        try? Syscall.epollControl(epoll, EPOLL_CTL_DEL, registration.fd, events: 0, token: 0)
    }

    // MARK: timers

    /// Calls `action` on the loop thread at `deadline` unless cancelled first.
    @discardableResult
    package func schedule(at deadline: ContinuousClock.Instant, _ action: @escaping @Sendable () -> Void) -> TimerID {
        let (id, wake) = state.withLock { state in
            let id = state.nextToken
            state.nextToken += 1
            state.timerActions[id] = action
            state.timers.append(Timer(deadline: deadline, id: id))
            Self.siftUp(&state.timers, from: state.timers.count - 1)
            let wake = state.sleeping && (state.sleepingUntil.map { deadline < $0 } ?? true)
            // One wake-up per sleep: whoever comes next finds the loop on its way.
            if wake { state.sleeping = false }
            return (id, wake)
        }
        if wake { Syscall.signalEventCounter(wakeup) }
        return TimerID(id)
    }

    /// Runs `action` on the loop thread as soon as it is free, after what was handed over
    /// before it: in this round when queued from the loop thread, else in the round the
    /// `eventfd` write wakes (only when the loop sleeps). The loop thread lives as long as the
    /// process, which is what `PR_SET_PDEATHSIG` (tied to the spawning thread) needs.
    package func execute(_ action: @escaping @Sendable () -> Void) {
        let wake = state.withLock { state in
            state.work.append(action)
            return Self.wakeOnce(&state)
        }
        if wake && !isLoopThread { Syscall.signalEventCounter(wakeup) }
    }

    /// How many timers are scheduled and not yet fired or cancelled (for tests and diagnostics:
    /// a wait that ended must leave none behind).
    package var scheduledTimers: Int {
        state.withLock { $0.timerActions.count }
    }

    /// Cancels a timer; does nothing if it already fired.
    package func cancel(_ timer: TimerID) {
        state.withLock { state in
            guard state.timerActions.removeValue(forKey: timer.value) != nil else { return }
            // Cancelled entries stay in the heap until they surface; timers cancelled long
            // before they are due (a `Waiter`'s deadline, say) are dropped once they outnumber live ones
            // (amortised O(log n) per cancel). A sorted array is a valid min-heap.
            if state.timers.count > 64 && state.timers.count > 2 * state.timerActions.count {
                state.timers = state.timers.filter { state.timerActions[$0.id] != nil }.sorted { $0.deadline < $1.deadline }
            }
        }
    }

    // MARK: executing jobs

    /// Queues a job of a task that prefers this loop; it runs on the loop thread. Queued from
    /// the loop thread itself (a handler resuming its reader), it needs no wake-up.
    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let wake = state.withLock { state in
            state.jobs.append(job)
            return Self.wakeOnce(&state)
        }
        if wake && !isLoopThread { Syscall.signalEventCounter(wakeup) }
    }

    /// Whether the loop must be woken for what was just queued: only once per sleep (the first
    /// producer writes the `eventfd`; the ones after it find the loop on its way), so a burst
    /// of work handed over from another thread costs one wake-up, not one each.
    private static func wakeOnce(_ state: inout State) -> Bool {
        guard state.sleeping else { return false }
        state.sleeping = false
        return true
    }

    /// Whether the caller runs on the loop thread.
    package var isLoopThread: Bool {
        thread.load(ordering: .relaxed) == UInt(pthread_self())
    }

    // MARK: Loop

    package var inLoop: Bool { isLoopThread }

    package var now: ContinuousClock.Instant { .now }

    package func flushAtEndOfRound(_ flusher: any RoundFlusher) {
        preconditionInLoop("EventLoop.flushAtEndOfRound")
        flushers.append(flusher)
    }

    /// Flushes what asked to be flushed in this round (and what those flushes ask for).
    private func flushRound() {
        while !flushers.isEmpty {
            swap(&flushers, &spareFlushers)
            for flusher in spareFlushers { flusher.flush() }
            spareFlushers.removeAll(keepingCapacity: true)
        }
    }

    // MARK: the loop thread

    /// Starts the loop's own thread (`remoteview-loop`), which runs it for the life of the
    /// process.
    private func startThread() {
        var thread = pthread_t()
        let context = Unmanaged.passRetained(self).toOpaque()
        let result = pthread_create(&thread, nil, { context in
            let loop = Unmanaged<EventLoop>.fromOpaque(context!).takeRetainedValue()
            loop.thread.store(UInt(pthread_self()), ordering: .relaxed)
            _ = rv_name_this_thread("remoteview-loop")
            loop.run()
        }, context)
        precondition(result == 0, "pthread_create for the event loop failed: errno \(result)")
        pthread_detach(thread)
    }

    private func run() -> Never {
        let capacity: Int32 = 64
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: Int(capacity))
        while true {
            let timeout = state.withLock { state -> Int32 in
                // The earliest deadline, even a cancelled one (popped when it comes due, at most
                // one extra round), so that a later deadline scheduled from another thread needs
                // no wake-up (an eventfd write and read, and one more round). A connection's
                // requests share one deadline timer that is not cancelled per reply
                // (docs/Architecture.md, "The connection core").
                // Jobs queued while the last round ran: only poll, then run them.
                if !state.jobs.isEmpty || !state.work.isEmpty { return 0 }
                state.sleeping = true
                state.sleepingUntil = state.timers.first?.deadline
                guard let deadline = state.sleepingUntil else { return -1 }
                let remaining = ContinuousClock.now.duration(to: deadline)
                if remaining <= .zero { return 0 }
                let (seconds, attoseconds) = remaining.components
                // Round up so a timer never fires early.
                return Int32(clamping: seconds * 1_000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000)
            }
            let count: Int
            do {
                count = try Syscall.epollWait(epoll, events, capacity, timeoutMilliseconds: timeout)
            } catch {
                fatalError("RemoteView event loop: \(error)")
            }
            state.withLock { $0.sleeping = false }
            for index in 0..<count {
                let token = events[index].data.u64
                if token == Self.wakeToken {
                    Syscall.drainEventCounter(wakeup)
                    continue
                }
                let handler = state.withLock { $0.handlers[token] }
                handler?(events[index].events)
            }
            fireDueTimers()
            runJobs()
            flushRound()
        }
    }

    /// The most jobs one round runs before the loop looks at its descriptors and timers again.
    private static let jobsPerRound = 64

    /// Runs the jobs queued so far, then those they queued, until none is left or
    /// ``jobsPerRound`` have run; the rest wait for the next round. A reply read here resumes its
    /// caller (a task preferring the loop) in the same round, and the caller's next request is
    /// sent in it too, with no `epoll_wait` in between; the bound keeps one busy conversation
    /// from holding off the others' descriptors.
    private func runJobs() {
        let executor = asUnownedTaskExecutor()
        var ran = 0
        while ran < Self.jobsPerRound {
            var (work, jobs) = state.withLock { state in
                let work = state.work, jobs = state.jobs
                state.work = state.spareWork
                state.spareWork = []
                state.jobs = state.spareJobs
                state.spareJobs = []
                return (work, jobs)
            }
            if work.isEmpty && jobs.isEmpty { return }
            // Work handed over first: a task that handed work over and then resumed here finds
            // it done.
            for action in work { action() }
            for job in jobs { job.runSynchronously(on: executor) }
            ran += work.count + jobs.count
            work.removeAll(keepingCapacity: true)
            jobs.removeAll(keepingCapacity: true)
            state.withLock { state in
                state.spareWork = work
                state.spareJobs = jobs
            }
        }
    }

    private func fireDueTimers() {
        let now = ContinuousClock.now
        let due = state.withLock { state -> [@Sendable () -> Void] in
            var due: [@Sendable () -> Void] = []
            while let first = state.timers.first, first.deadline <= now {
                Self.popFirst(&state.timers)
                if let action = state.timerActions.removeValue(forKey: first.id) { due.append(action) }
            }
            return due
        }
        for action in due { action() }
    }

    // Binary min-heap on `deadline`.
    private static func siftUp(_ heap: inout [Timer], from index: Int) {
        var child = index
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].deadline < heap[parent].deadline else { return }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private static func popFirst(_ heap: inout [Timer]) {
        let last = heap.removeLast()
        guard !heap.isEmpty else { return }
        heap[0] = last
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var smallest = parent
            if left < heap.count, heap[left].deadline < heap[smallest].deadline { smallest = left }
            if right < heap.count, heap[right].deadline < heap[smallest].deadline { smallest = right }
            if smallest == parent { return }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
    }
}
