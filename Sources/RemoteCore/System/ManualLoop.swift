import Glibc
import Synchronization

/// A ``Loop`` that runs only when told to, with a clock that moves only when told to: like
/// SwiftNIO's `EmbeddedEventLoop`. A test drives a connection's pipeline through it with no
/// socket, no thread and no clock of its own: it pushes packets into an ``InMemoryChannel``,
/// calls ``run()``, and reads what came out.
///
/// ``run()`` runs the queued jobs and the due timers, then flushes, until nothing is left; the
/// caller's thread is the loop's for that time (``inLoop``). Jobs queued from other threads wait
/// for the next ``run()``. It is a `TaskExecutor` too, as ``EventLoop`` is: a task that prefers
/// it runs only inside ``run()``.
package final class ManualLoop: Loop, TaskExecutor, @unchecked Sendable {
    // @unchecked: `jobs`, `timers` and `nextID` are under `lock`; `flushers` and `running` are
    // the loop's own, touched only while it runs (on the thread running it).
    private let lock = Mutex<(jobs: [@Sendable () -> Void], timers: [(deadline: ContinuousClock.Instant, id: UInt64, action: @Sendable () -> Void)],
                              nextID: UInt64, clock: ContinuousClock.Instant, taskJobs: [UnownedJob])>(([], [], 1, .now, []))
    private var flushers: [any RoundFlusher] = []
    private let runner = Atomic<UInt>(0)
    /// A test waiting for work to be handed to the loop (``waitForWork(within:)``).
    private let workWaiter = Mutex<UnsafeContinuation<Void, Never>?>(nil)

    /// A loop whose clock reads `start` until ``advance(by:)``.
    package init(start: ContinuousClock.Instant = .now) {
        lock.withLock { $0.clock = start }
    }

    package var inLoop: Bool { runner.load(ordering: .relaxed) == UInt(pthread_self()) }

    package var isBorrowed: Bool { false }

    package var now: ContinuousClock.Instant { lock.withLock { $0.clock } }

    package func execute(_ job: @escaping @Sendable () -> Void) {
        lock.withLock { $0.jobs.append(job) }
        workWaiter.withLock { $0.take() }?.resume()
    }

    /// A job of a task that prefers this loop: it runs in the next ``run()``.
    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        lock.withLock { $0.taskJobs.append(job) }
        workWaiter.withLock { $0.take() }?.resume()
    }

    /// Whether work is queued (handed over and not run yet).
    package var hasWork: Bool { lock.withLock { !$0.jobs.isEmpty || !$0.taskJobs.isEmpty } }

    /// Returns once work has been handed to the loop (at once if some is queued): a task of the
    /// test called into the pipeline, and ``run()`` will run it. Fails the wait after `deadline`
    /// of real time, so a test that expected work and got none ends with an error, not a hang.
    package func waitForWork(within deadline: Duration = .seconds(10)) async throws {
        try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask {
                await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
                    let resumeNow = self.hasWork
                    if resumeNow { return continuation.resume() }
                    self.workWaiter.withLock { $0 = continuation }
                    // Work that came between the check and the store.
                    if self.hasWork { self.workWaiter.withLock { $0.take() }?.resume() }
                }
                return true
            }
            group.addTask {
                try await Task.sleep(for: deadline)
                return false
            }
            let arrived = try await group.next() ?? false
            group.cancelAll()
            if !arrived {
                workWaiter.withLock { $0.take() }?.resume()
                throw RemoteError(.timeout, "no work was handed to the manual loop within \(deadline)")
            }
        }
    }

    @discardableResult
    package func schedule(at deadline: ContinuousClock.Instant, _ action: @escaping @Sendable () -> Void) -> LoopTimer {
        lock.withLock { state in
            let id = state.nextID
            state.nextID += 1
            state.timers.append((deadline, id, action))
            return LoopTimer(id)
        }
    }

    package func cancel(_ timer: LoopTimer) {
        lock.withLock { $0.timers.removeAll { $0.id == timer.value } }
    }

    package func flushAtEndOfRound(_ flusher: any RoundFlusher) {
        preconditionInLoop("ManualLoop.flushAtEndOfRound")
        flushers.append(flusher)
    }

    /// How many timers are scheduled and not yet fired or cancelled.
    package var scheduledTimers: Int { lock.withLock { $0.timers.count } }

    /// Runs what is queued and due, round after round, until nothing is left: the jobs, the
    /// timers due by the clock (in deadline order), then the flushes.
    package func run() {
        let me = UInt(pthread_self())
        let previous = runner.exchange(me, ordering: .relaxed)
        precondition(previous == 0 || previous == me, "ManualLoop.run() on two threads at once")
        defer { runner.store(previous, ordering: .relaxed) }
        let executor = asUnownedTaskExecutor()
        while true {
            let (jobs, taskJobs, due) = lock.withLock { state -> ([@Sendable () -> Void], [UnownedJob], [@Sendable () -> Void]) in
                let jobs = state.jobs, taskJobs = state.taskJobs
                state.jobs = []
                state.taskJobs = []
                let now = state.clock
                let due = state.timers.filter { $0.deadline <= now }.sorted { $0.deadline < $1.deadline }
                state.timers.removeAll { $0.deadline <= now }
                return (jobs, taskJobs, due.map(\.action))
            }
            if jobs.isEmpty && taskJobs.isEmpty && due.isEmpty && flushers.isEmpty { return }
            for job in jobs { job() }
            for job in taskJobs { job.runSynchronously(on: executor) }
            for action in due { action() }
            let flushing = flushers
            flushers = []
            for flusher in flushing { flusher.flush() }
        }
    }

    /// Moves the clock on by `duration`, then runs what became due.
    package func advance(by duration: Duration) {
        lock.withLock { $0.clock = $0.clock.advanced(by: duration) }
        run()
    }
}
