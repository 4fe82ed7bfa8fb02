import RemoteCore
import Testing
@testable import RemoteHost

/// Tier 1: the supervisor's one state machine, with stand-in processes and channels and a clock
/// the test sets: no process, socket or thread. Each test feeds events and reads the actions as
/// short lines ("launch 0", "open 1", "send 1 [a b]", "fail [a]: interrupted …"). The impossible
/// events trap, each in its own process.
@Suite("Supervisor state machine")
struct SupervisorStateMachineTests {
    final class FakeProcess: CustomStringConvertible {
        let name: String
        init(_ name: String) { self.name = name }
        var description: String { name }
    }
    final class FakeChannel: CustomStringConvertible {
        let name: String
        init(_ name: String) { self.name = name }
        var description: String { name }
    }
    struct Work: SupervisedWork, Equatable {
        var name: String
        var isRetry = false
        func retried() -> Work { Work(name: name, isRetry: true) }
    }
    typealias Machine = SupervisorStateMachine<FakeProcess, FakeChannel, Work>

    static let policy = Machine.Policy(backoff: .milliseconds(100), maximumBackoff: .seconds(1), minimumRelaunchInterval: .milliseconds(150),
                                       crashLoopLimit: 3, stableAfter: .seconds(10), stopGrace: .seconds(2))
    static let t0 = ContinuousClock.now
    static let crash = TerminationReason(kind: .killed, detail: "killed by SIGKILL (Killed)", signal: 9)
    static let idle = TerminationReason(kind: .idleExit, detail: "idle")

    static func machine(perConnection: Bool = false) -> Machine {
        Machine(identifier: "com.example.test", perConnection: perConnection, policy: policy)
    }

    /// The actions as short lines.
    static func lines(_ actions: [Machine.Action]) -> [String] {
        actions.map { action in
            switch action {
            case .launch(let slot): "launch \(slot)"
            case .armBackoff(let slot, let until): "backoff \(slot) \(Int(((until - t0) / .milliseconds(1)).rounded())) ms"
            case .openChannel(let client, let process): "open \(client) \(process)"
            case .sendQueue(let client, let channel, let work): "send \(client) \(channel) [\(work.map { $0.name + ($0.isRetry ? "'" : "") }.joined(separator: " "))]"
            case .publish(let client, let channel): "publish \(client) \(channel.map(\.name) ?? "nil")"
            case .fail(let work, let error): "fail [\(work.map(\.name).joined(separator: " "))]: \(error.code)"
            case .refuse(let client, let work): "refuse \(client) [\(work.map(\.name).joined(separator: " "))]"
            case .interrupt(let client, let error): "interrupt \(client): \(error.code)"
            case .channelClosed(let client, let channel, let error, let interrupts):
                "closed \(client) \(channel)\(error.map { ": \($0.code)" } ?? "")\(interrupts ? " (event)" : "")"
            case .close(let channel, _): "close \(channel)"
            case .stop(let process, let step, let reason, let next): "stop \(process) \(step) \(reason.kind)\(next == nil ? " last" : "")"
            case .armEndWatch(let process, _): "watch \(process)"
            case .ended(let process, let reason): "ended \(process) \(reason.kind)"
            case .invalidateClient(let client, let error): "invalidate \(client): \(error.code)"
            case .invalidated: "invalidated"
            }
        }
    }

    /// Runs `event` on `machine` and returns its actions as lines.
    static func run(_ machine: inout Machine, _ event: (inout Machine) -> [Machine.Action]) -> [String] {
        lines(event(&machine))
    }

    /// A client whose first work launched a process that now serves it on channel `c<client>`.
    static func running(_ machine: inout Machine, client: UInt64 = 1, process: FakeProcess = FakeProcess("p"),
                        at now: ContinuousClock.Instant = t0) -> FakeChannel {
        _ = machine.clientAdded(client)
        _ = machine.workArrived(client, Work(name: "w"), now: now)
        _ = machine.launched(slot: machine.perConnection ? client : 0, process: process, now: now)
        let channel = FakeChannel("c\(client)")
        _ = machine.channelOpened(client: client, process: process, channel: channel)
        _ = machine.queueSent(client: client, channel: channel)
        return channel
    }

    @Test("work queues while the process starts, and is sent in order on its channel before the fast path is published")
    func queueInOrder() {
        var machine = Self.machine()
        #expect(Self.run(&machine) { $0.clientAdded(1) } == [])
        #expect(Self.run(&machine) { $0.workArrived(1, Work(name: "a"), now: Self.t0) } == ["launch 0"])
        #expect(machine.isLaunching && machine.phaseName(0) == "launching")
        #expect(Self.run(&machine) { $0.workArrived(1, Work(name: "b"), now: Self.t0) } == [])
        let p = FakeProcess("p"), c = FakeChannel("c")
        #expect(Self.run(&machine) { $0.launched(slot: 0, process: p, now: Self.t0) } == ["open 1 p"])
        #expect(Self.run(&machine) { $0.workArrived(1, Work(name: "c"), now: Self.t0) } == [])
        #expect(Self.run(&machine) { $0.channelOpened(client: 1, process: p, channel: c) } == ["send 1 c [a b c]"])
        // Sent while the queue was being sent: it goes after it, still not on the fast path.
        #expect(Self.run(&machine) { $0.workArrived(1, Work(name: "d"), now: Self.t0) } == [])
        #expect(Self.run(&machine) { $0.queueSent(client: 1, channel: c) } == ["send 1 c [d]"])
        #expect(Self.run(&machine) { $0.queueSent(client: 1, channel: c) } == ["publish 1 c"])
        #expect(machine.launches == 1 && machine.isUsable(p) && machine.clientCount(of: p) == 1)
    }

    @Test("a shared process: the second client's work opens its own channel to the running process, with no launch")
    func shared() {
        var machine = Self.machine()
        let p = FakeProcess("p")
        _ = Self.running(&machine, process: p)
        _ = machine.clientAdded(2)
        #expect(Self.run(&machine) { $0.workArrived(2, Work(name: "x"), now: Self.t0) } == ["open 2 p"])
        #expect(machine.launches == 1)
    }

    @Test("perConnection: each client launches a process of its own")
    func perConnection() {
        var machine = Self.machine(perConnection: true)
        _ = Self.running(&machine, client: 1, process: FakeProcess("p1"))
        _ = machine.clientAdded(2)
        #expect(Self.run(&machine) { $0.workArrived(2, Work(name: "x"), now: Self.t0) } == ["launch 2"])
        #expect(Self.run(&machine) { $0.launched(slot: 2, process: FakeProcess("p2"), now: Self.t0) } == ["open 2 p2"])
        #expect(machine.processes.map(\.name) == ["p1", "p2"])
    }

    @Test("an idle exit: a request that failed as the process went is decided at its end, and sent again once to a new process")
    func idleExitRetry() {
        var machine = Self.machine()
        let p = FakeProcess("p")
        let c = Self.running(&machine, process: p)
        let lost = RemoteError(.interrupted, "the connection closed")
        // The failure comes first: nothing is decided until the end is known.
        #expect(Self.run(&machine) { $0.workFailed(1, Work(name: "r"), on: p, error: lost, now: Self.t0) } == ["watch p"])
        #expect(Self.run(&machine) { $0.processEnding(p, now: Self.t0) } == ["publish 1 nil", "watch p"])
        #expect(!machine.isUsable(p))
        #expect(Self.run(&machine) { $0.channelEnded(client: 1, channel: c, failure: nil, goodbye: FrameworkMessage.idleExitReason, now: Self.t0) }
                == ["publish 1 nil", "watch p"])
        #expect(Self.run(&machine) { $0.processEnded(p, reason: Self.idle, now: Self.t0) }
                == ["ended p idleExit", "launch 0", "closed 1 c1"])
        let q = FakeProcess("q"), d = FakeChannel("d")
        #expect(Self.run(&machine) { $0.launched(slot: 0, process: q, now: Self.t0) } == ["open 1 q"])
        #expect(Self.run(&machine) { $0.channelOpened(client: 1, process: q, channel: d) } == ["send 1 d [r']"])
        // Its queue was not sent yet: nothing was published to take back.
        #expect(Self.run(&machine) { $0.processEnding(q, now: Self.t0) } == ["watch q"])
        _ = machine.processEnded(q, reason: Self.idle, now: Self.t0)
        // Failed again the same way: not sent a third time.
        #expect(Self.run(&machine) { $0.workFailed(1, Work(name: "r", isRetry: true), on: q, error: lost, now: Self.t0) } == ["fail [r]: interrupted"])
        #expect(machine.crashes == 0 && machine.consecutiveCrashes == 0)
    }

    @Test("a crash: the failure and the channel's end are reported with how the process ended, and the next work relaunches it after the backoff")
    func crashReported() {
        var machine = Self.machine()
        let p = FakeProcess("p")
        let c = Self.running(&machine, process: p)
        let lost = RemoteError(.interrupted, "the connection closed")
        _ = machine.workFailed(1, Work(name: "r"), on: p, error: lost, now: Self.t0)
        _ = machine.channelEnded(client: 1, channel: c, failure: lost, goodbye: nil, now: Self.t0)
        let actions = machine.processEnded(p, reason: Self.crash, now: Self.t0.advanced(by: .seconds(1)))
        #expect(Self.lines(actions) == ["ended p killed", "fail [r]: interrupted", "closed 1 c1: interrupted (event)"])
        if case .fail(_, let error) = actions[1] { #expect(error.reason.contains("com.example.test ended: killed")) }
        #expect(machine.crashes == 1 && machine.consecutiveCrashes == 1)
        // Relaunched no sooner than the backoff allows (at least the minimum interval).
        #expect(Self.run(&machine) { $0.workArrived(1, Work(name: "n"), now: Self.t0.advanced(by: .seconds(1))) } == ["backoff 0 1150 ms"])
        #expect(machine.phaseName(0) == "backing off" && machine.isLaunching)
        #expect(Self.run(&machine) { $0.backoffElapsed(slot: 0, now: Self.t0.advanced(by: .milliseconds(1150))) } == ["launch 0"])
    }

    @Test("crashes in a row soon after their launches are a crash loop: every client is invalidated, after the crash is reported")
    func crashLoop() {
        var machine = Self.machine()
        var now = Self.t0
        var last: [String] = []
        for attempt in 1...3 {
            let p = FakeProcess("p\(attempt)")
            var c = FakeChannel("c")
            if attempt == 1 { c = Self.running(&machine, process: p, at: now) } else {
                _ = machine.backoffElapsed(slot: 0, now: now)
                _ = machine.launched(slot: 0, process: p, now: now)
                _ = machine.channelOpened(client: 1, process: p, channel: c)
            }
            _ = machine.workFailed(1, Work(name: "r\(attempt)"), on: p, error: RemoteError(.interrupted, "gone"), now: now)
            _ = machine.channelEnded(client: 1, channel: c, failure: RemoteError(.interrupted, "gone"), goodbye: nil, now: now)
            now = now.advanced(by: .milliseconds(10))
            last = Self.run(&machine) { $0.processEnded(p, reason: Self.crash, now: now) }
            now = now.advanced(by: .seconds(2))
            if attempt < 3 { _ = machine.workArrived(1, Work(name: "again"), now: now) }
        }
        #expect(last == ["ended p3 killed", "fail [r3]: interrupted", "closed 1 c: interrupted (event)", "invalidated", "invalidate 1: invalidated"])
        #expect(machine.invalidationError?.reason.contains("crashed 3 times in a row") == true && machine.isFinished)
        // Later work and later clients fail at once.
        #expect(Self.run(&machine) { $0.workArrived(1, Work(name: "z"), now: now) } == ["fail [z]: invalidated"])
        #expect(Self.run(&machine) { $0.clientAdded(9) } == ["invalidate 9: invalidated"])
    }

    @Test("a failure on a process that still runs waits at most a grace to learn how it ended, then fails as it is")
    func endWatch() {
        var machine = Self.machine()
        let p = FakeProcess("p")
        _ = Self.running(&machine, process: p)
        let lost = RemoteError(.invalidated, "the peer hung up")
        _ = machine.workFailed(1, Work(name: "r"), on: p, error: lost, now: Self.t0)
        #expect(Self.run(&machine) { $0.endWatchDue(process: p, now: Self.t0.advanced(by: .seconds(2))) } == ["fail [r]: interrupted"])
        #expect(machine.isUsable(p))
    }

    @Test("stopping: goodbye, then SIGTERM, then SIGKILL, each after a grace; an end stops the steps")
    func stopSteps() {
        var machine = Self.machine()
        let p = FakeProcess("p")
        _ = Self.running(&machine, process: p)
        let reason = TerminationReason(kind: .idleExit, detail: "idle and still running: stopped by the host")
        #expect(Self.run(&machine) { $0.stopRequested(p, reason: reason, now: Self.t0) } == ["publish 1 nil", "stop p goodbye idleExit"])
        #expect(machine.phaseName(0) == "stopping (goodbye)")
        // Asked again while stopping: nothing more.
        #expect(Self.run(&machine) { $0.stopRequested(p, reason: reason, now: Self.t0) } == [])
        #expect(Self.run(&machine) { $0.stopStepDue(process: p, now: Self.t0) } == ["stop p terminate idleExit"])
        #expect(Self.run(&machine) { $0.stopStepDue(process: p, now: Self.t0) } == ["stop p kill idleExit last"])
        #expect(Self.run(&machine) { $0.stopStepDue(process: p, now: Self.t0) } == [])
        _ = machine.processEnded(p, reason: reason, now: Self.t0)
        // A timer of the process that has gone finds nothing.
        #expect(Self.run(&machine) { $0.stopStepDue(process: p, now: Self.t0) } == [])
        #expect(Self.run(&machine) { $0.endWatchDue(process: p, now: Self.t0) } == [])
    }

    @Test("a process that said goodbye and did not exit within a grace is stopped as a protocol violation")
    func goodbyeWithoutExit() {
        var machine = Self.machine()
        let p = FakeProcess("p")
        _ = Self.running(&machine, process: p)
        _ = machine.workFailed(1, Work(name: "r"), on: p, error: RemoteError(.interrupted, "gone"), now: Self.t0.advanced(by: .seconds(-1)))
        _ = machine.processEnding(p, now: Self.t0)
        // The watch armed for the failure a second earlier: it has not been going a grace yet.
        #expect(Self.run(&machine) { $0.endWatchDue(process: p, now: Self.t0.advanced(by: .seconds(1))) } == [])
        #expect(Self.run(&machine) { $0.endWatchDue(process: p, now: Self.t0.advanced(by: .seconds(2))) } == ["stop p goodbye protocolViolation"])
    }

    @Test("a protocol violation on a channel stops its process, and is reported with how it ended")
    func violation() {
        var machine = Self.machine()
        let p = FakeProcess("p")
        let c = Self.running(&machine, process: p)
        let violation = RemoteError(.protocolViolation, "a bad packet")
        #expect(Self.run(&machine) { $0.channelEnded(client: 1, channel: c, failure: violation, goodbye: nil, now: Self.t0) }
                == ["publish 1 nil", "stop p goodbye protocolViolation", "watch p"])
        let ended = TerminationReason(kind: .protocolViolation, detail: "a bad packet (then exited with status 0)")
        #expect(Self.run(&machine) { $0.processEnded(p, reason: ended, now: Self.t0) } == ["ended p protocolViolation", "closed 1 c1: interrupted (event)"])
    }

    @Test("the last client's invalidation stops the shared process; another client's keeps it running")
    func lastClient() {
        var machine = Self.machine()
        let p = FakeProcess("p")
        _ = Self.running(&machine, client: 1, process: p)
        _ = machine.clientAdded(2)
        _ = machine.workArrived(2, Work(name: "x"), now: Self.t0)
        let c2 = FakeChannel("c2")
        _ = machine.channelOpened(client: 2, process: p, channel: c2)
        let error = RemoteError(.invalidated, "invalidated by the host")
        #expect(Self.run(&machine) { $0.clientRemoved(1, error: error, now: Self.t0) } == ["invalidate 1: invalidated", "close c1", "closed 1 c1: invalidated"])
        #expect(machine.isUsable(p))
        #expect(Self.run(&machine) { $0.clientRemoved(2, error: error, now: Self.t0) }
                == ["invalidate 2: invalidated", "close c2", "closed 2 c2: invalidated", "stop p goodbye stopped"])
        // Removed twice (released after invalidate()): nothing more.
        #expect(Self.run(&machine) { $0.clientRemoved(2, error: error, now: Self.t0) } == [])
        // Its channel's end, seen later, is no news to a removed client.
        #expect(Self.run(&machine) { $0.channelEnded(client: 2, channel: c2, failure: nil, goodbye: nil, now: Self.t0) } == [])
    }

    @Test("a launch nobody waits for any more is stopped; a failed launch fails the queue and interrupts its clients")
    func launchOutcomes() {
        var machine = Self.machine()
        _ = machine.clientAdded(1)
        _ = machine.workArrived(1, Work(name: "a"), now: Self.t0)
        #expect(Self.run(&machine) { $0.launchFailed(slot: 0, error: RemoteError(.interrupted, "no fds"), now: Self.t0) }
                == ["fail [a]: interrupted", "interrupt 1: interrupted"])
        #expect(machine.phaseName(0) == "stopped")
        _ = machine.workArrived(1, Work(name: "b"), now: Self.t0)
        _ = machine.clientRemoved(1, error: RemoteError(.invalidated, "gone"), now: Self.t0)
        #expect(Self.run(&machine) { $0.launched(slot: 0, process: FakeProcess("p"), now: Self.t0) } == ["stop p goodbye stopped"])
    }

    @Test("an unlaunchable service is invalidated for every client")
    func unlaunchable() {
        var machine = Self.machine()
        _ = machine.clientAdded(1)
        _ = machine.clientAdded(2)
        _ = machine.workArrived(1, Work(name: "a"), now: Self.t0)
        #expect(Self.run(&machine) { $0.launchFailed(slot: 0, error: RemoteError(.invalidated, "no such executable"), now: Self.t0) }
                == ["invalidated", "invalidate 1: invalidated", "fail [a]: invalidated", "invalidate 2: invalidated"])
        #expect(machine.isFinished)
    }

    @Test("a share's connection runs one process: work after it ended is refused, not relaunched")
    func oneProcess() {
        var machine = Self.machine(perConnection: true)
        _ = machine.clientAdded(1)
        machine.clientAllowsOneProcess(1)
        _ = machine.workArrived(1, Work(name: "a"), now: Self.t0)
        let p = FakeProcess("p")
        _ = machine.launched(slot: 1, process: p, now: Self.t0)
        _ = machine.channelOpened(client: 1, process: p, channel: FakeChannel("c"))
        _ = machine.processEnded(p, reason: TerminationReason(kind: .exited, detail: "exited with status 0", exitCode: 0), now: Self.t0)
        #expect(Self.run(&machine) { $0.workArrived(1, Work(name: "b"), now: Self.t0) }
                == ["refuse 1 [b]"])
    }

    @Test("the launcher's shutdown stops every process and invalidates every client; finished once all are reaped")
    func shutdown() {
        var machine = Self.machine(perConnection: true)
        let p1 = FakeProcess("p1")
        _ = Self.running(&machine, client: 1, process: p1)
        _ = machine.clientAdded(2)
        _ = machine.workArrived(2, Work(name: "x"), now: Self.t0)
        let error = RemoteError(.invalidated, "the launcher shut down")
        #expect(Self.run(&machine) { $0.invalidate(error, now: Self.t0) }
                == ["invalidated", "invalidate 1: invalidated", "close c1", "closed 1 c1: invalidated", "stop p1 goodbye stopped",
                    "invalidate 2: invalidated", "fail [x]: invalidated"])
        #expect(!machine.isFinished)
        // The launch under way ends: its process is stopped at once.
        #expect(Self.run(&machine) { $0.launched(slot: 2, process: FakeProcess("p2"), now: Self.t0) } == ["stop p2 goodbye stopped"])
        _ = machine.processEnded(p1, reason: TerminationReason(kind: .stopped, detail: "shut down"), now: Self.t0)
        #expect(!machine.isFinished)
        _ = machine.processEnded(machine.processes[0], reason: TerminationReason(kind: .stopped, detail: "shut down"), now: Self.t0)
        #expect(machine.isFinished)
    }

    @Test("a process that ends otherwise than idle before it took the channel its queue waited for fails the queue with how it ended")
    func endedBeforeChannel() {
        var machine = Self.machine()
        _ = machine.clientAdded(1)
        _ = machine.workArrived(1, Work(name: "a"), now: Self.t0)
        let p = FakeProcess("p")
        _ = machine.launched(slot: 0, process: p, now: Self.t0)
        // It did not take the channel: the queue waits for its end, which says what to do.
        #expect(Self.run(&machine) { $0.channelOpenFailed(client: 1, process: p, error: RemoteError(.interrupted, "gone"), now: Self.t0) } == ["watch p"])
        #expect(machine.phaseName(0) == "ending" && !machine.isUsable(p))
        let exited = TerminationReason(kind: .exited, detail: "exited with code 7 before its handshake", exitCode: 7)
        #expect(Self.run(&machine) { $0.processEnded(p, reason: exited, now: Self.t0) }
                == ["ended p exited", "fail [a]: interrupted", "interrupt 1: interrupted"])
        // After an idle exit the same queue goes to a new process instead.
        _ = machine.workArrived(1, Work(name: "b"), now: Self.t0.advanced(by: .seconds(5)))
        let q = FakeProcess("q")
        _ = machine.launched(slot: 0, process: q, now: Self.t0)
        _ = machine.channelOpenFailed(client: 1, process: q, error: RemoteError(.interrupted, "gone"), now: Self.t0)
        #expect(Self.run(&machine) { $0.processEnded(q, reason: Self.idle, now: Self.t0.advanced(by: .seconds(5))) } == ["ended q idleExit", "launch 0"])
    }

    @Test("a process that did not take a channel because it stopped reading its main connection (the offer timed out) is stopped")
    func channelOfferTimedOut() {
        var machine = Self.machine()
        _ = machine.clientAdded(1)
        _ = machine.workArrived(1, Work(name: "a"), now: Self.t0)
        let p = FakeProcess("p")
        _ = machine.launched(slot: 0, process: p, now: Self.t0)
        #expect(Self.run(&machine) { $0.channelOpenFailed(client: 1, process: p, error: RemoteError(.timeout, "no room"), now: Self.t0) }
                == ["stop p goodbye stopped"])
        #expect(machine.phaseName(0) == "stopping (goodbye)")
    }

    @Test("a listener that cannot tell the new process what it must know: the queue fails with its error, the channel is closed, the process serves on")
    func replayFailed() {
        var machine = Self.machine()
        _ = machine.clientAdded(1)
        _ = machine.workArrived(1, Work(name: "a"), now: Self.t0)
        let p = FakeProcess("p"), c = FakeChannel("c")
        _ = machine.launched(slot: 0, process: p, now: Self.t0)
        #expect(Self.run(&machine) { $0.channelReplayFailed(client: 1, process: p, channel: c, error: RemoteError(.cancelled, "cut short")) } == ["fail [a]: cancelled"])
        #expect(machine.isUsable(p))
        // Its end, when it comes, is no news; the next work opens another channel to the same process.
        #expect(Self.run(&machine) { $0.channelEnded(client: 1, channel: c, failure: nil, goodbye: nil, now: Self.t0) } == ["closed 1 c"])
        #expect(Self.run(&machine) { $0.workArrived(1, Work(name: "b"), now: Self.t0) } == ["open 1 p"])
        #expect(machine.launches == 1)
    }

    @Test("work abandoned while the relaunch backs off: nothing waits, so nothing is launched")
    func abandonedBackoff() {
        var machine = Self.machine()
        let p = FakeProcess("p")
        _ = Self.running(&machine, process: p)
        _ = machine.processEnded(p, reason: Self.crash, now: Self.t0)
        #expect(Self.run(&machine) { $0.workArrived(1, Work(name: "x"), now: Self.t0) } == ["backoff 0 150 ms"])
        _ = machine.workAbandoned(1) { $0.name == "x" }
        #expect(machine.phaseName(0) == "stopped" && !machine.isLaunching)
        #expect(Self.run(&machine) { $0.backoffElapsed(slot: 0, now: Self.t0.advanced(by: .seconds(1))) } == [])
    }

    @Test("a channel's opening that ends after its process ended (found by the kill storm) is not an impossible event: the channel closes and is reported with the end")
    func openedAfterEnd() {
        var machine = Self.machine()
        _ = machine.clientAdded(1)
        _ = machine.clientAdded(2)
        _ = machine.workArrived(1, Work(name: "a"), now: Self.t0)
        _ = machine.workArrived(2, Work(name: "b"), now: Self.t0)
        let p = FakeProcess("p")
        #expect(Self.run(&machine) { $0.launched(slot: 0, process: p, now: Self.t0) } == ["open 1 p", "open 2 p"])
        #expect(Self.run(&machine) { $0.processEnded(p, reason: Self.crash, now: Self.t0) }
                == ["ended p killed", "fail [a]: interrupted", "interrupt 1: interrupted", "fail [b]: interrupted", "interrupt 2: interrupted"])
        let c = FakeChannel("c")
        // Closed, its listeners told how the process ended, with no second event for the client.
        #expect(Self.run(&machine) { $0.channelOpened(client: 1, process: p, channel: c) } == ["close c", "closed 1 c: interrupted"])
        #expect(Self.run(&machine) { $0.channelEnded(client: 1, channel: c, failure: nil, goodbye: nil, now: Self.t0) } == [])
        #expect(Self.run(&machine) { $0.channelOpenFailed(client: 2, process: p, error: RemoteError(.interrupted, "gone"), now: Self.t0) } == [])
    }

    @Test("work that failed as the process exited idle is sent again in the order it was sent, also to a client whose new channel is open already")
    func retriesInOrder() {
        var machine = Self.machine()
        let p = FakeProcess("p")
        _ = Self.running(&machine, process: p)
        for name in ["a", "b", "c"] { _ = machine.workFailed(1, Work(name: name), on: p, error: RemoteError(.interrupted, "gone"), now: Self.t0) }
        _ = machine.processEnding(p, now: Self.t0)
        // Sent while it was going: queued, behind what is sent again.
        _ = machine.workArrived(1, Work(name: "d"), now: Self.t0)
        #expect(Self.run(&machine) { $0.processEnded(p, reason: Self.idle, now: Self.t0) }.prefix(2) == ["ended p idleExit", "launch 0"])
        let q = FakeProcess("q"), d = FakeChannel("d")
        _ = machine.launched(slot: 0, process: q, now: Self.t0)
        #expect(Self.run(&machine) { $0.channelOpened(client: 1, process: q, channel: d) } == ["send 1 d [a' b' c' d]"])
        _ = machine.queueSent(client: 1, channel: d)
        // A failure on the old process decided late, while the new channel is open: through the queue.
        #expect(Self.run(&machine) { $0.workFailed(1, Work(name: "e"), on: p, error: RemoteError(.interrupted, "gone"), now: Self.t0) }
                == ["publish 1 nil", "send 1 d [e']"])
    }

    @Test("a share's connection is not given another client's new process of a shared service; a channel the host could not make fails only its client")
    func oneProcessShared() {
        var machine = Self.machine()
        let p = FakeProcess("p")
        _ = Self.running(&machine, client: 1, process: p)
        machine.clientAllowsOneProcess(1)
        _ = machine.processEnded(p, reason: Self.crash, now: Self.t0)
        _ = machine.clientAdded(2)
        _ = machine.workArrived(2, Work(name: "x"), now: Self.t0.advanced(by: .seconds(1)))
        let q = FakeProcess("q")
        _ = machine.launched(slot: 0, process: q, now: Self.t0.advanced(by: .seconds(1)))
        #expect(Self.run(&machine) { $0.workArrived(1, Work(name: "y"), now: Self.t0) } == ["refuse 1 [y]"])
        #expect(Self.run(&machine) { $0.channelNotMade(client: 2, process: q, error: RemoteError(.interrupted, "no fds")) }
                == ["fail [x]: interrupted", "interrupt 2: interrupted"])
        #expect(machine.isUsable(q))
    }

    // MARK: impossible events

    @Test("a launch that ends when none began traps")
    func launchedUnasked() async {
        await #expect(processExitsWith: .failure) {
            var machine = SupervisorStateMachineTests.machine()
            _ = machine.launched(slot: 0, process: FakeProcess("p"), now: .now)
        }
    }

    @Test("a launch that fails when none began traps")
    func failedUnasked() async {
        await #expect(processExitsWith: .failure) {
            var machine = SupervisorStateMachineTests.machine()
            _ = machine.launchFailed(slot: 0, error: RemoteError(.interrupted, "x"), now: .now)
        }
    }

    @Test("a process that is not the service's, or ends twice, traps")
    func strangerEnded() async {
        await #expect(processExitsWith: .failure) {
            var machine = SupervisorStateMachineTests.machine()
            _ = machine.processEnded(FakeProcess("p"), reason: SupervisorStateMachineTests.idle, now: .now)
        }
    }

    @Test("a channel opened that nobody asked for traps")
    func channelUnasked() async {
        await #expect(processExitsWith: .failure) {
            var machine = SupervisorStateMachineTests.machine()
            _ = machine.clientAdded(1)
            _ = machine.channelOpened(client: 1, process: FakeProcess("p"), channel: FakeChannel("c"))
        }
    }

    @Test("a client added twice traps")
    func clientTwice() async {
        await #expect(processExitsWith: .failure) {
            var machine = SupervisorStateMachineTests.machine()
            _ = machine.clientAdded(1)
            _ = machine.clientAdded(1)
        }
    }
}
