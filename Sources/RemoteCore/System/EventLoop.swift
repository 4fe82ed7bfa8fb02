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
///
/// The loop's state is its thread's own, with no lock. Other threads hand things over under one
/// lock, which the loop takes only when a flag says something waits: a round of a conversation
/// that stays on the loop thread (a reply resuming a caller that prefers the loop, which sends
/// its next request) takes no lock at all.
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

    /// The loop thread's own state, touched on that thread only, with no lock: the handlers, the
    /// timers, the queued work and jobs. What other threads hand over waits in ``Posted`` until
    /// the loop takes it (once a round, and before it queues anything itself, so what was handed
    /// over first runs first).
    private struct Local {
        var handlers: [UInt64: Handler] = [:]
        /// Min-heap of deadlines; cancelled ones stay until they surface and are skipped.
        var timers: [Timer] = []
        /// The actions of timers scheduled on the loop thread (the others' are in ``Posted``).
        var actions: [UInt64: @Sendable () -> Void] = [:]
        /// Work handed to the loop (``execute(_:)``) and jobs of tasks that prefer it, in order,
        /// and the last round's arrays, emptied: the next round's queues, so queueing does not
        /// allocate.
        var work: [@Sendable () -> Void] = []
        var spareWork: [@Sendable () -> Void] = []
        var jobs: [UnownedJob] = []
        var spareJobs: [UnownedJob] = []
        /// What ``takePosted()`` took from ``Posted``, to apply after the lock (emptied after).
        var takenHandlers: [(token: UInt64, handler: Handler?)] = []
        var takenTimers: [Timer] = []
        var takenCancels: [UInt64] = []
    }

    /// What other threads hand the loop, under its one lock: taken by them as they hand over,
    /// and by the loop only when ``hasPosted`` says something waits.
    private struct Posted {
        var work: [@Sendable () -> Void] = []
        var jobs: [UnownedJob] = []
        var handlers: [(token: UInt64, handler: Handler?)] = []
        var timers: [Timer] = []
        /// Timers of the loop thread cancelled from elsewhere.
        var cancels: [UInt64] = []
        /// The actions of timers scheduled off the loop thread (``sharedTimer`` in their id):
        /// whoever cancels one removes it here, under the lock, wherever it runs.
        var actions: [UInt64: @Sendable () -> Void] = [:]
        /// Such timers cancelled since the loop last dropped cancelled entries from its heap.
        var cancelled = 0
    }

    private let epoll: Int32
    private let wakeup: Int32
    // Touched on the loop thread only, so no access of it can overlap another: not checked.
    @exclusivity(unchecked) nonisolated(unsafe) private var local = Local()
    private let posted = Mutex(Posted())
    /// Something waits in ``posted``.
    private let hasPosted = Atomic<Bool>(false)
    /// The loop is about to sleep or sleeping in `epoll_wait`, until ``sleepingUntil``
    /// (nanoseconds after ``epoch``; `Int64.max`: no deadline). The first thread that hands
    /// something over clears it and writes the `eventfd`; the ones after find the loop on its way.
    private let sleeping = Atomic<Bool>(false)
    private let sleepingUntil = Atomic<Int64>(.max)
    private let epoch = ContinuousClock.now
    private let nextToken = Atomic<UInt64>(1)
    /// Timers scheduled on the loop thread and not yet fired or cancelled.
    private let localTimers = Atomic<Int>(0)
    /// Set in the id of a timer scheduled off the loop thread.
    private static let sharedTimer: UInt64 = 1 << 63
    /// Who asked to be flushed at the end of this round: the loop's own, touched on its thread
    /// only (``flushAtEndOfRound(_:)``).
    nonisolated(unsafe) private var flushers: [any RoundFlusher] = []
    nonisolated(unsafe) private var spareFlushers: [any RoundFlusher] = []
    /// The thread that acts as the loop: the loop's own, or a thread that borrowed it
    /// (``borrow(_:)``) while it sleeps.
    private let thread = Atomic<UInt>(0)
    /// The loop's own thread.
    private let ownThread = Atomic<UInt>(0)
    /// How the loop's thread and a borrower take turns (never freed: the loop lives as long as
    /// the process).
    nonisolated(unsafe) private let gate: UnsafeMutablePointer<rv_loop_gate> = {
        let gate = UnsafeMutablePointer<rv_loop_gate>.allocate(capacity: 1)
        gate.initialize(to: rv_loop_gate())
        rv_gate_init(gate)
        return gate
    }()
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
        let token = nextToken.add(1, ordering: .relaxed).oldValue
        // In place before the descriptor is added: the loop takes what was handed over before it
        // dispatches a round's events.
        setHandler(handler, for: token)
        do {
            try Syscall.epollControl(epoll, EPOLL_CTL_ADD, fd, events: events, token: token)
        } catch {
            setHandler(nil, for: token)
            throw error
        }
        return Registration(token: token, fd: fd)
    }

    /// Puts (or, with `nil`, removes) a handler: at once on the loop thread, else handed over.
    private func setHandler(_ handler: Handler?, for token: UInt64) {
        if isLoopThread {
            // After what was handed over before (a registration from another thread must not
            // come back after this removes it).
            takePosted()
            local.handlers[token] = handler
        } else {
            post { $0.handlers.append((token, handler)) }
        }
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

    /// Removes the descriptor; its handler is not called again from a round that begins after
    /// this returns. (Removed from another thread while a round runs, it may still be called
    /// in that round, as a handler already looked up would be.)
    package func deregister(_ registration: Registration) {
        setHandler(nil, for: registration.token)
        try? Syscall.epollControl(epoll, EPOLL_CTL_DEL, registration.fd, events: 0, token: 0)
    }

    // MARK: handing over

    /// Hands something to the loop from another thread: under the lock, then the first
    /// hand-over since the loop went to sleep wakes it. `wakeFor` narrows that to a timer due
    /// before the loop would wake anyway.
    private func post(wakeFor deadline: ContinuousClock.Instant? = nil, _ change: (inout Posted) -> Void) {
        posted.withLock { posted in
            change(&posted)
            hasPosted.store(true, ordering: .sequentiallyConsistent)
        }
        guard sleeping.load(ordering: .sequentiallyConsistent) else { return }
        if let deadline, nanoseconds(deadline) >= sleepingUntil.load(ordering: .relaxed) { return }
        if sleeping.exchange(false, ordering: .sequentiallyConsistent) { Syscall.signalEventCounter(wakeup) }
    }

    /// Takes what other threads handed over (on the loop thread), behind what it queued itself.
    /// Under the lock only the arrays change hands; what they hold is applied (and what it
    /// replaces let go) after it, so no deinit runs under the loop's lock.
    private func takePosted() {
        guard hasPosted.load(ordering: .sequentiallyConsistent) else { return }
        let compact = posted.withLock { posted -> Bool in
            hasPosted.store(false, ordering: .relaxed)
            swap(&posted.handlers, &local.takenHandlers)
            swap(&posted.timers, &local.takenTimers)
            swap(&posted.cancels, &local.takenCancels)
            local.work.append(contentsOf: posted.work)
            posted.work.removeAll(keepingCapacity: true)
            local.jobs.append(contentsOf: posted.jobs)
            posted.jobs.removeAll(keepingCapacity: true)
            guard posted.cancelled >= 64 else { return false }
            posted.cancelled = 0
            return true
        }
        for (token, handler) in local.takenHandlers { local.handlers[token] = handler }
        local.takenHandlers.removeAll(keepingCapacity: true)
        for timer in local.takenTimers {
            local.timers.append(timer)
            Self.siftUp(&local.timers, from: local.timers.count - 1)
        }
        local.takenTimers.removeAll(keepingCapacity: true)
        var cancelledHere = false
        for id in local.takenCancels where local.actions.removeValue(forKey: id) != nil {
            localTimers.subtract(1, ordering: .relaxed)
            cancelledHere = true
        }
        local.takenCancels.removeAll(keepingCapacity: true)
        if compact || cancelledHere { compactTimers(afterManySharedCancels: compact) }
    }

    private func nanoseconds(_ instant: ContinuousClock.Instant) -> Int64 {
        let (seconds, attoseconds) = epoch.duration(to: instant).components
        return seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000
    }

    // MARK: timers

    /// Calls `action` on the loop thread at `deadline` unless cancelled first.
    @discardableResult
    package func schedule(at deadline: ContinuousClock.Instant, _ action: @escaping @Sendable () -> Void) -> TimerID {
        let token = nextToken.add(1, ordering: .relaxed).oldValue
        if isLoopThread {
            // The loop looks at its first deadline before it sleeps again: no wake-up.
            local.actions[token] = action
            local.timers.append(Timer(deadline: deadline, id: token))
            Self.siftUp(&local.timers, from: local.timers.count - 1)
            localTimers.add(1, ordering: .relaxed)
            return TimerID(token)
        }
        let id = token | Self.sharedTimer
        post(wakeFor: deadline) { posted in
            posted.actions[id] = action
            posted.timers.append(Timer(deadline: deadline, id: id))
        }
        return TimerID(id)
    }

    /// Runs `action` on the loop thread as soon as it is free, after what was handed over
    /// before it: in this round when queued from the loop thread, else in the round the
    /// `eventfd` write wakes (only when the loop sleeps). The loop thread lives as long as the
    /// process, which is what `PR_SET_PDEATHSIG` (tied to the spawning thread) needs.
    package func execute(_ action: @escaping @Sendable () -> Void) {
        if isLoopThread {
            takePosted()
            local.work.append(action)
        } else {
            post { $0.work.append(action) }
        }
    }

    /// How many timers are scheduled and not yet fired or cancelled (for tests and diagnostics:
    /// a wait that ended must leave none behind). A timer of the loop thread cancelled from
    /// another thread counts until the loop has taken the cancel.
    package var scheduledTimers: Int {
        localTimers.load(ordering: .relaxed) + posted.withLock { $0.actions.count }
    }

    /// Cancels a timer; does nothing if it already fired.
    package func cancel(_ timer: TimerID) {
        if timer.value & Self.sharedTimer != 0 {
            // Its heap entry stays until it surfaces, and is skipped then; once many have been
            // cancelled, the loop is asked to drop them (no wake-up: at its next round).
            posted.withLock { posted in
                guard posted.actions.removeValue(forKey: timer.value) != nil else { return }
                posted.cancelled += 1
                if posted.cancelled >= 64 { hasPosted.store(true, ordering: .sequentiallyConsistent) }
            }
        } else if isLoopThread {
            guard local.actions.removeValue(forKey: timer.value) != nil else { return }
            localTimers.subtract(1, ordering: .relaxed)
            compactTimers()
        } else {
            post { $0.cancels.append(timer.value) }
        }
    }

    /// Cancelled entries stay in the heap until they surface; timers cancelled long before they
    /// are due (a `Waiter`'s deadline, say) are dropped once they outnumber live ones (amortised
    /// O(log n) per cancel). A sorted array is a valid min-heap. Unless many timers scheduled
    /// off the loop thread were cancelled, the loop's own count decides first, so a cancel on
    /// the loop takes the lock (for the others' live actions) only when a drop may be due.
    private func compactTimers(afterManySharedCancels: Bool = false) {
        guard afterManySharedCancels || local.timers.count > 64 + 2 * localTimers.load(ordering: .relaxed) else { return }
        let shared = posted.withLock { $0.actions }
        let live = localTimers.load(ordering: .relaxed) + shared.count
        guard local.timers.count > 64 && local.timers.count > 2 * live else { return }
        local.timers = local.timers.filter { local.actions[$0.id] != nil || shared[$0.id] != nil }.sorted { $0.deadline < $1.deadline }
    }

    // MARK: borrowing the loop (a blocking call)

    /// Runs `body` on the calling thread as the loop, if the loop sleeps with nothing queued:
    /// the thread borrows it for that long (the loop, if it wakes meanwhile, waits until it is
    /// given back). `nil` when the loop is awake, borrowed by another thread, or has work
    /// waiting (which must run first): then ``runAndWait(_:)`` hands `body` to it.
    ///
    /// While `body` runs, the calling thread counts as the loop's (``isLoopThread``): what it
    /// queues, schedules or registers goes into the loop's own state with no lock. What the
    /// channels queued in it is written before the loop is given back, and the loop is woken
    /// if `body` left it work or a timer due before it would wake. A blocking call
    /// (``Connection/requestSync(_:timeout:)``) borrows the loop to send its request and to hand
    /// what it read to the connection, so a call made while the loop sleeps never wakes it
    /// (docs/Architecture.md, "The blocking call").
    package func borrow<R>(_ body: () -> R) -> R? {
        precondition(!isLoopThread, "EventLoop.borrow on the loop's own thread")
        guard rv_gate_borrow(gate) != 0 else { return nil }
        #if LockCounts
        // The gate's compare-and-swap guards the loop's state like a lock: counted as one.
        LockCounter.count(file: #fileID, line: #line)
        #endif
        // Borrowed while the loop sleeps: what it queued itself is in `local`, and what others
        // handed it is posted. Either must run before anything the borrower does.
        guard !hasPosted.load(ordering: .sequentiallyConsistent), local.work.isEmpty, local.jobs.isEmpty else {
            rv_gate_return(gate)
            return nil
        }
        let own = ownThread.load(ordering: .relaxed)
        thread.store(UInt(pthread_self()), ordering: .relaxed)
        let result = body()
        flushRound()
        var wake = !local.work.isEmpty || !local.jobs.isEmpty
        if !wake, let first = local.timers.first, nanoseconds(first.deadline) < sleepingUntil.load(ordering: .relaxed) { wake = true }
        thread.store(own, ordering: .relaxed)
        rv_gate_return(gate)
        if wake, sleeping.exchange(false, ordering: .sequentiallyConsistent) { Syscall.signalEventCounter(wakeup) }
        return result
    }

    /// Runs `job` on the loop, after what is queued, and blocks the calling thread until it has
    /// run: how a blocking call reaches the loop when it cannot ``borrow(_:)`` it.
    package func runAndWait<R: Sendable>(_ job: @escaping @Sendable () -> R) -> R {
        precondition(!isLoopThread, "EventLoop.runAndWait on the loop's own thread would wait for itself")
        let result = BlockingResult<R>.make()
        execute { result.complete(job()) }
        return result.wait()!
    }

    // MARK: executing jobs

    /// Queues a job of a task that prefers this loop; it runs on the loop thread. Queued from
    /// the loop thread itself (a handler resuming its reader), it needs no lock and no wake-up.
    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        if isLoopThread {
            takePosted()
            local.jobs.append(job)
        } else {
            post { $0.jobs.append(job) }
        }
    }

    /// Whether the caller runs on the loop thread.
    package var isLoopThread: Bool {
        thread.load(ordering: .relaxed) == UInt(pthread_self())
    }

    // MARK: Loop

    package var inLoop: Bool { isLoopThread }

    package var isBorrowed: Bool {
        thread.load(ordering: .relaxed) != ownThread.load(ordering: .relaxed)
    }

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
            loop.ownThread.store(UInt(pthread_self()), ordering: .relaxed)
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
            takePosted()
            let timeout: Int32
            if !local.jobs.isEmpty || !local.work.isEmpty {
                // Jobs queued while the last round ran: only poll, then run them.
                timeout = 0
            } else {
                // The earliest deadline, even a cancelled one (popped when it comes due, at most
                // one extra round), so that a later deadline scheduled from another thread needs
                // no wake-up (an eventfd write and read, and one more round). A connection's
                // requests share one deadline timer that is not cancelled per reply
                // (docs/Architecture.md, "The connection core").
                let deadline = local.timers.first?.deadline
                sleepingUntil.store(deadline.map(nanoseconds) ?? .max, ordering: .relaxed)
                sleeping.store(true, ordering: .sequentiallyConsistent)
                if hasPosted.load(ordering: .sequentiallyConsistent) {
                    // Handed over as the loop went to sleep: poll instead.
                    sleeping.store(false, ordering: .relaxed)
                    timeout = 0
                } else if let deadline {
                    let remaining = ContinuousClock.now.duration(to: deadline)
                    if remaining <= .zero {
                        timeout = 0
                    } else {
                        let (seconds, attoseconds) = remaining.components
                        // Round up so a timer never fires early.
                        timeout = Int32(clamping: seconds * 1_000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000)
                    }
                } else {
                    timeout = -1
                }
            }
            let count: Int
            // From here until it wakes, the loop touches none of its state: a blocking caller
            // may borrow it (``borrow(_:)``), and the loop waits for it to be given back.
            rv_gate_loop_sleeps(gate)
            do {
                count = try Syscall.epollWait(epoll, events, capacity, timeoutMilliseconds: timeout)
            } catch {
                fatalError("RemoteView event loop: \(error)")
            }
            rv_gate_loop_wakes(gate)
            sleeping.store(false, ordering: .relaxed)
            // Handlers registered from other threads are in place before their events go out.
            takePosted()
            for index in 0..<count {
                let token = events[index].data.u64
                if token == Self.wakeToken {
                    Syscall.drainEventCounter(wakeup)
                    continue
                }
                let handler = local.handlers[token]
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
            takePosted()
            if local.work.isEmpty && local.jobs.isEmpty { return }
            var work = local.work, jobs = local.jobs
            local.work = local.spareWork
            local.spareWork = []
            local.jobs = local.spareJobs
            local.spareJobs = []
            // Work handed over first: a task that handed work over and then resumed here finds
            // it done.
            for action in work { action() }
            for job in jobs { job.runSynchronously(on: executor) }
            ran += work.count + jobs.count
            work.removeAll(keepingCapacity: true)
            jobs.removeAll(keepingCapacity: true)
            local.spareWork = work
            local.spareJobs = jobs
        }
    }

    private func fireDueTimers() {
        guard let first = local.timers.first, first.deadline <= ContinuousClock.now else { return }
        let now = ContinuousClock.now
        var due: [@Sendable () -> Void] = []
        while let first = local.timers.first, first.deadline <= now {
            Self.popFirst(&local.timers)
            if first.id & Self.sharedTimer != 0 {
                if let action = posted.withLock({ $0.actions.removeValue(forKey: first.id) }) { due.append(action) }
            } else if let action = local.actions.removeValue(forKey: first.id) {
                localTimers.subtract(1, ordering: .relaxed)
                due.append(action)
            }
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
