import RemoteCore
import Testing
@testable import RemoteHost

/// Tier 1: every transition of the launcher's per-service record, with stand-in processes and a
/// clock the test sets (no process is started). The illegal ones trap, each in its own process.
@Suite("Launcher record state machine")
struct ServiceRecordStateMachineTests {
    final class FakeProcess: LaunchedProcess {
        let launchedAt: ContinuousClock.Instant
        let isUsable: Bool
        init(at launchedAt: ContinuousClock.Instant, usable: Bool = true) {
            self.launchedAt = launchedAt
            self.isUsable = usable
        }
    }
    typealias Machine = ServiceRecordStateMachine<FakeProcess>

    static let policy = Machine.Policy(backoff: .milliseconds(100), maximumBackoff: .seconds(1), minimumRelaunchInterval: .milliseconds(150),
                                       crashLoopLimit: 3, stableAfter: .seconds(10))
    static let t0 = ContinuousClock.now
    static let crash = TerminationReason(kind: .killed, detail: "killed by SIGKILL (Killed)", signal: 9)
    static let idle = TerminationReason(kind: .idleExit, detail: "idle")

    static func machine(_ instances: ServiceManifest.InstancePolicy = .shared) -> Machine {
        Machine(identifier: "com.example.test", instances: instances, policy: policy)
    }

    /// Launches a process for `owner` at `now`.
    static func launch(_ machine: inout Machine, owner: UInt64 = 1, at now: ContinuousClock.Instant, usable: Bool = true) -> FakeProcess {
        guard case .launch = machine.instanceNeeded(by: owner, waiter: Waiter()) else { preconditionFailure("expected a launch") }
        let process = FakeProcess(at: now, usable: usable)
        guard case .run = machine.launched(process, owner: owner, now: now) else { preconditionFailure("expected to run") }
        return process
    }

    @Test("a shared service: launched once on demand, then used by every client; the others wait for the launch")
    func shared() {
        var machine = Self.machine()
        guard case .launch(nil) = machine.instanceNeeded(by: 1, waiter: Waiter()) else { Issue.record("launch at once"); return }
        #expect(machine.isLaunching && machine.phase == "launching")
        let waiter = Waiter<Void>()
        guard case .awaitLaunch = machine.instanceNeeded(by: 2, waiter: waiter) else { Issue.record("wait"); return }
        let process = FakeProcess(at: Self.t0)
        guard case .run(let released) = machine.launched(process, owner: 1, now: Self.t0) else { Issue.record("run"); return }
        #expect(released.count == 1 && released[0] === waiter)
        guard case .use(let used) = machine.instanceNeeded(by: 2, waiter: Waiter()) else { Issue.record("use"); return }
        #expect(used === process && machine.launches == 1 && machine.running.count == 1 && machine.lastLaunch == Self.t0)
    }

    @Test("perConnection: each client its own process")
    func perConnection() {
        var machine = Self.machine(.perConnection)
        let a = Self.launch(&machine, owner: 1, at: Self.t0)
        let b = Self.launch(&machine, owner: 2, at: Self.t0)
        #expect(a !== b && machine.running.count == 2 && machine.launches == 2)
        guard case .use(let used) = machine.instanceNeeded(by: 2, waiter: Waiter()) else { Issue.record("use"); return }
        #expect(used === b)
    }

    @Test("a process that is ending is waited for, then booked once, and a new one is launched")
    func ending() {
        var machine = Self.machine()
        let dying = Self.launch(&machine, at: Self.t0, usable: false)
        guard case .awaitEnd(let process) = machine.instanceNeeded(by: 1, waiter: Waiter()) else { Issue.record("await end"); return }
        #expect(process === dying)
        let step1 = machine.ended(dying, owner: 1, reason: Self.idle, now: Self.t0)
        #expect(step1 == .booked)
        let step2 = machine.ended(dying, owner: 1, reason: Self.idle, now: Self.t0)
        #expect(step2 == .alreadyBooked, "its runner sees it too")
        #expect(machine.lastTermination == Self.idle && machine.consecutiveCrashes == 0 && machine.crashes == 0)
        guard case .launch(nil) = machine.instanceNeeded(by: 1, waiter: Waiter()) else { Issue.record("relaunch at once after an idle exit"); return }
    }

    @Test("crashes back off exponentially (at least the minimum interval), and the limit in a row is a crash loop")
    func crashLoop() {
        var machine = Self.machine()
        var now = Self.t0
        let first = Self.launch(&machine, at: now)
        now += .seconds(1)
        let step3 = machine.ended(first, owner: 1, reason: Self.crash, now: now)
        #expect(step3 == .booked)
        guard case .launch(let due) = machine.instanceNeeded(by: 1, waiter: Waiter()) else { Issue.record("relaunch"); return }
        #expect(due == now.advanced(by: .milliseconds(150)), "100 ms backoff, raised to the 150 ms minimum")
        let second = FakeProcess(at: now)
        _ = machine.launched(second, owner: 1, now: now)
        now += .seconds(1)
        let step4 = machine.ended(second, owner: 1, reason: Self.crash, now: now)
        #expect(step4 == .booked)
        #expect(machine.relaunchDue == now.advanced(by: .milliseconds(200)), "doubled")
        let third = Self.launch(&machine, at: now)
        now += .seconds(1)
        guard case .bookedInvalidating(let loop) = machine.ended(third, owner: 1, reason: Self.crash, now: now) else {
            Issue.record("a crash loop")
            return
        }
        #expect(loop.code == .invalidated && loop.reason.contains("crashed 3 times in a row"))
        #expect(machine.crashes == 3 && machine.consecutiveCrashes == 3)
        let step5 = machine.invalidate(loop)
        #expect(step5 != nil)
        guard case .fail(let error) = machine.instanceNeeded(by: 1, waiter: Waiter()) else { Issue.record("fail for good"); return }
        #expect(error == loop && machine.invalidation == loop && machine.phase == "invalidated")
        let step6 = machine.invalidate(loop)
        #expect(step6 == nil, "once")
    }

    @Test("a crash long after its launch starts a new count; the backoff is capped")
    func stableAndCap() {
        var machine = Self.machine()
        var now = Self.t0
        for _ in 0..<2 {
            let process = Self.launch(&machine, at: now)
            now += .seconds(1)
            _ = machine.ended(process, owner: 1, reason: Self.crash, now: now)
        }
        let stable = Self.launch(&machine, at: now)
        now += .seconds(60)
        let step7 = machine.ended(stable, owner: 1, reason: Self.crash, now: now)
        #expect(step7 == .booked)
        #expect(machine.consecutiveCrashes == 1, "ran longer than stableAfter")
        var capped = Machine(identifier: "com.example.test", instances: .shared,
                             policy: .init(backoff: .seconds(1), maximumBackoff: .seconds(2), minimumRelaunchInterval: .zero, crashLoopLimit: 100, stableAfter: .seconds(10)))
        for _ in 0..<5 {
            let process = Self.launch(&capped, at: now)
            _ = capped.ended(process, owner: 1, reason: Self.crash, now: now)
        }
        #expect(capped.relaunchDue == now.advanced(by: .seconds(2)))
    }

    @Test("a refused sandbox invalidates at once; a non-zero exit counts as a crash, a zero one does not")
    func kinds() {
        var machine = Self.machine()
        let refused = Self.launch(&machine, at: Self.t0)
        guard case .bookedInvalidating(let error) = machine.ended(refused, owner: 1, reason: TerminationReason(kind: .sandboxRefused, detail: "no uid map"), now: Self.t0) else {
            Issue.record("sandbox refused")
            return
        }
        #expect(error.reason.contains("cannot run: no uid map"))
        var exits = Self.machine()
        let clean = Self.launch(&exits, at: Self.t0)
        _ = exits.ended(clean, owner: 1, reason: .ended(.exited(0)), now: Self.t0)
        #expect(exits.crashes == 0)
        let failing = Self.launch(&exits, at: Self.t0)
        _ = exits.ended(failing, owner: 1, reason: .ended(.exited(3)), now: Self.t0)
        #expect(exits.crashes == 1)
    }

    @Test("a failed launch lets its waiters go and another client launches; one that gave up is forgotten")
    func launchFails() {
        var machine = Self.machine()
        _ = machine.instanceNeeded(by: 1, waiter: Waiter())
        let waiter = Waiter<Void>(), quitter = Waiter<Void>()
        _ = machine.instanceNeeded(by: 2, waiter: waiter)
        _ = machine.instanceNeeded(by: 3, waiter: quitter)
        machine.abandon(quitter)
        let released = machine.launchFailed()
        #expect(released.count == 1 && released[0] === waiter && machine.phase == "ready")
        guard case .launch = machine.instanceNeeded(by: 2, waiter: Waiter()) else { Issue.record("another launches"); return }
    }

    @Test("invalidated while a process starts: it is discarded; its waiters went with the invalidation")
    func invalidatedWhileStarting() {
        var machine = Self.machine()
        _ = machine.instanceNeeded(by: 1, waiter: Waiter())
        let waiter = Waiter<Void>()
        _ = machine.instanceNeeded(by: 2, waiter: waiter)
        let error = RemoteError(.invalidated, "bubblewrap is not installed")
        let released = machine.invalidate(error)
        #expect(released?.count == 1 && released?[0] === waiter)
        guard case .discard(let discarded) = machine.launched(FakeProcess(at: Self.t0), owner: 1, now: Self.t0) else { Issue.record("discard"); return }
        #expect(discarded == error && machine.launches == 0)
        let step8 = machine.launchFailed()
        #expect(step8.isEmpty)
    }

    @Test("a launch that ends when none began traps")
    func launchedUnasked() async {
        await #expect(processExitsWith: .failure) {
            var machine = ServiceRecordStateMachine<FakeProcess>(identifier: "com.example.test", instances: .shared, policy: ServiceRecordStateMachineTests.policy)
            _ = machine.launched(FakeProcess(at: .now), owner: 1, now: .now)
        }
    }

    @Test("a launch that fails when none began traps")
    func failedUnasked() async {
        await #expect(processExitsWith: .failure) {
            var machine = ServiceRecordStateMachine<FakeProcess>(identifier: "com.example.test", instances: .shared, policy: ServiceRecordStateMachineTests.policy)
            _ = machine.launchFailed()
        }
    }
}
