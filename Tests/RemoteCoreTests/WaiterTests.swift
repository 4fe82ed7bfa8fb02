import CRemoteViewLinux
import Glibc
import RemoteTestSupport
import Synchronization
import Testing
@testable import RemoteCore

/// Tier 1: the one waiting primitive and what is built on it. A wait begun with `Task.immediate`
/// has installed itself (and its deadline's timer) by the time the call returns, so each test
/// knows which path it exercises without waiting for anything.
@Suite("Waiting", .serialized)
struct WaiterTests {
    static let far = ContinuousClock.now.advanced(by: .seconds(3600))

    @Test("a value that came before the wait is returned at once; a later one is refused")
    func valueFirst() async throws {
        let waiter = Waiter<Int>()
        #expect(waiter.resume(returning: 1))
        #expect(!waiter.resume(returning: 2), "the first value wins")
        #expect(waiter.isSettled)
        #expect(try await waiter.wait(until: Self.far) == 1)
    }

    @Test("a value ends a wait in progress and cancels its deadline's timer")
    func valueCancelsTimer() async throws {
        let timers = EventLoop.shared.scheduledTimers
        let waiter = Waiter<Int>()
        let task = Task.immediate { try await waiter.wait(until: Self.far) }
        #expect(EventLoop.shared.scheduledTimers == timers + 1, "the wait's deadline is on the loop")
        #expect(waiter.resume(returning: 7))
        #expect(try await task.value == 7)
        #expect(EventLoop.shared.scheduledTimers == timers, "the timer went with the wait")
        #expect(!waiter.resume(returning: 8))
    }

    @Test("the deadline ends the wait with deadlinePassed, runs onAbandon, and a late value is refused")
    func deadline() async throws {
        let abandoned = Atomic<Int>(0)
        let waiter = Waiter<Int>()
        let error = await #expect(throws: WaitError.self) {
            try await waiter.wait(until: .now.advanced(by: .milliseconds(20)), onAbandon: { abandoned.add(1, ordering: .relaxed) })
        }
        #expect(error == .deadlinePassed)
        #expect(abandoned.load(ordering: .relaxed) == 1)
        #expect(!waiter.resume(returning: 1), "a value after the deadline is dropped")
    }

    @Test("cancelling the waiting task ends the wait with cancelled and cancels its timer")
    func cancelledDuring() async throws {
        let timers = EventLoop.shared.scheduledTimers
        let abandoned = Atomic<Int>(0)
        let waiter = Waiter<Int>()
        let task = Task.immediate {
            try await waiter.wait(until: Self.far, onAbandon: { abandoned.add(1, ordering: .relaxed) })
        }
        task.cancel()
        let error = await #expect(throws: WaitError.self) { try await task.value }
        #expect(error == .cancelled)
        #expect(abandoned.load(ordering: .relaxed) == 1)
        #expect(EventLoop.shared.scheduledTimers == timers)
        #expect(!waiter.resume(returning: 1))
    }

    @Test("a task cancelled before it waits does not wait at all")
    func cancelledBefore() async throws {
        let waiter = Waiter<Int>()
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await waiter.wait(until: Self.far)
        }
        let error = await #expect(throws: WaitError.self) { try await task.value }
        #expect(error == .cancelled)
    }

    @Test("the uncancellable wait sees the value through its task's cancellation, and still honours its deadline")
    func uncancellable() async throws {
        let waiter = Waiter<Int>()
        let task = Task.immediate { await waiter.waitUncancellably(until: Self.far) }
        task.cancel()
        #expect(waiter.resume(returning: 3), "the wait goes on after the cancellation")
        #expect(await task.value == 3)
        #expect(await Waiter<Int>().waitUncancellably(until: .now.advanced(by: .milliseconds(10))) == nil)
    }

    @Test("a queue hands its waiters over once, and forgets one that gave up")
    func queue() {
        var queue = WaiterQueue<Void>()
        let (a, b, c) = (Waiter<Void>(), Waiter<Void>(), Waiter<Void>())
        queue.append(a)
        queue.append(b)
        queue.append(c)
        queue.remove(b)
        let taken = queue.takeAll()
        #expect(taken.count == 2 && taken[0] === a && taken[1] === c)
        #expect(queue.isEmpty)
        taken.resumeAll(returning: ())
        #expect(a.isSettled && c.isSettled && !b.isSettled)
    }

    @Test("a latch releases every waiter once; a waiter that gives up leaves no timer behind")
    func latch() async throws {
        let timers = EventLoop.shared.scheduledTimers
        let latch = Latch<String>()
        let first = Task.immediate { try await latch.wait(until: Self.far) }
        let second = Task.immediate { try await latch.wait() }
        let quitter = Task.immediate { try await latch.wait(until: Self.far) }
        quitter.cancel()
        await #expect(throws: WaitError.cancelled) { try await quitter.value }
        #expect(latch.open("done"))
        #expect(!latch.open("again"))
        #expect(try await first.value == "done")
        #expect(try await second.value == "done")
        #expect(try await latch.wait(until: .now) == "done", "once open, a wait returns at once")
        #expect(EventLoop.shared.scheduledTimers == timers)
        #expect(await Latch<Int>().value(before: .now.advanced(by: .milliseconds(10))) == nil)
    }

    @Test("the loop's sleep returns at its deadline and throws cancelled at once when its task is cancelled")
    func sleep() async throws {
        let timers = EventLoop.shared.scheduledTimers
        let start = ContinuousClock.now
        try await EventLoop.shared.sleep(until: start.advanced(by: .milliseconds(20)))
        #expect(ContinuousClock.now >= start.advanced(by: .milliseconds(20)), "a timer never fires early")
        let sleeper = Task.immediate { try await EventLoop.shared.sleep(until: Self.far) }
        sleeper.cancel()
        await #expect(throws: WaitError.cancelled) { try await sleeper.value }
        #expect(EventLoop.shared.scheduledTimers == timers)
    }
}

@Suite("Idle clock", .serialized)
struct IdleClockTests {
    @Test("busy while work is outstanding: idle only after the last end, then the timeout")
    func busyThenIdle() async throws {
        try await withDeadline {
            let clock = IdleClock(timeout: .milliseconds(30))
            let ended = Atomic<Bool>(false)
            clock.begin()
            clock.begin()
            #expect(clock.deadline == nil, "no deadline while work is outstanding")
            let idle = Task { try await clock.waitUntilIdle() && ended.load(ordering: .acquiring) }
            clock.end()
            #expect(clock.deadline == nil)
            ended.store(true, ordering: .releasing)
            clock.end()
            #expect(clock.deadline != nil)
            let endedFirst = try await idle.value
            #expect(endedFirst, "idle only after the last work ended")
        }
    }

    @Test("touch moves the deadline; the grace adds to the timeout")
    func touchAndGrace() async throws {
        let start = ContinuousClock.now
        let clock = IdleClock(timeout: .seconds(10), now: start)
        #expect(clock.deadline == start.advanced(by: .seconds(10)))
        clock.touch()
        #expect(clock.deadline! > start.advanced(by: .seconds(10)))
        let short = IdleClock(timeout: .milliseconds(10))
        let before = ContinuousClock.now
        #expect(try await short.waitUntilIdle(grace: .milliseconds(20)))
        #expect(ContinuousClock.now >= before.advanced(by: .milliseconds(30)), "a timer never fires early")
    }

    @Test("stopping the clock ends every wait, busy or quiet, with false, and leaves no timer")
    func stopped() async throws {
        let timers = EventLoop.shared.scheduledTimers
        let quietClock = IdleClock(timeout: .seconds(3600)), busyClock = IdleClock(timeout: .seconds(3600))
        busyClock.begin()
        let quiet = Task.immediate { try await quietClock.waitUntilIdle() }
        let busy = Task.immediate { try await busyClock.waitUntilIdle() }
        quietClock.stop()
        busyClock.stop()
        #expect(try await quiet.value == false)
        #expect(try await busy.value == false)
        #expect(try await quietClock.waitUntilIdle() == false, "and every later wait")
        #expect(EventLoop.shared.scheduledTimers == timers)
    }

    @Test("a wait for idle is cancellable, while busy and while quiet, and leaves no timer")
    func cancellable() async throws {
        let timers = EventLoop.shared.scheduledTimers
        let clock = IdleClock(timeout: .seconds(3600))
        let quiet = Task.immediate { try await clock.waitUntilIdle() }
        quiet.cancel()
        await #expect(throws: WaitError.cancelled) { try await quiet.value }
        clock.begin()
        let busy = Task.immediate { try await clock.waitUntilIdle() }
        busy.cancel()
        await #expect(throws: WaitError.cancelled) { try await busy.value }
        clock.end()
        #expect(EventLoop.shared.scheduledTimers == timers)
    }
}
