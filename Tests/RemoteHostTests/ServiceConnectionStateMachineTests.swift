import RemoteCore
import Testing
@testable import RemoteHost

/// Tier 1: every transition of a service connection's state machine, with stand-in channels (no
/// process, no socket). The illegal ones trap; each is checked in a process of its own.
@Suite("Service connection state machine")
struct ServiceConnectionStateMachineTests {
    final class FakeChannel: Sendable {
        let usable: Bool
        init(usable: Bool = true) { self.usable = usable }
    }
    typealias Machine = ServiceConnectionStateMachine<FakeChannel>

    static func usable(_ channel: FakeChannel) -> Bool { channel.usable }

    /// A machine whose current channel is `channel`.
    static func current(_ channel: FakeChannel) -> Machine {
        var machine = Machine()
        _ = machine.channelNeeded(isUsable: usable)
        _ = machine.connected(channel)
        _ = machine.connectEnded()
        return machine
    }

    @Test("a connection allowed one channel (a share's) makes the first, uses it while it is usable, and refuses to make another once it has gone")
    func oneChannel() {
        var machine = Machine()
        machine.allowOneChannel()
        guard case .connect = machine.channelNeeded(isUsable: Self.usable) else { Issue.record("the first connects"); return }
        guard case .run = machine.connected(FakeChannel(usable: false)) else { Issue.record("run"); return }
        _ = machine.connectEnded()
        guard case .refused = machine.channelNeeded(isUsable: Self.usable) else { Issue.record("refused"); return }
        #expect(machine.phase == "current")
        var usable = Machine()
        usable.allowOneChannel()
        _ = usable.channelNeeded(isUsable: Self.usable)
        _ = usable.connected(FakeChannel())
        _ = usable.connectEnded()
        guard case .use = usable.channelNeeded(isUsable: Self.usable) else { Issue.record("use"); return }
        // A first attempt that made no channel may be tried again.
        var failed = Machine()
        failed.allowOneChannel()
        _ = failed.channelNeeded(isUsable: Self.usable)
        _ = failed.connectEnded()
        guard case .connect = failed.channelNeeded(isUsable: Self.usable) else { Issue.record("connect again"); return }
    }

    @Test("the first caller connects, later ones wait; the made channel serves them once the attempt ends")
    func connect() {
        var machine = Machine()
        #expect(machine.phase == "idle" && machine.channel == nil)
        guard case .connect = machine.channelNeeded(isUsable: Self.usable) else { Issue.record("connect"); return }
        #expect(machine.phase == "connecting")
        guard case .wait(let waiter) = machine.channelNeeded(isUsable: Self.usable) else { Issue.record("wait"); return }
        let channel = FakeChannel()
        guard case .run = machine.connected(channel) else { Issue.record("run"); return }
        // Made but not yet told what a new process must know: callers still wait.
        guard case .wait = machine.channelNeeded(isUsable: Self.usable) else { Issue.record("still connecting"); return }
        #expect(machine.channel === channel)
        let (waiters, announce) = machine.connectEnded()
        #expect(waiters.count == 2 && waiters[0] === waiter && announce == nil)
        guard case .use(let used) = machine.channelNeeded(isUsable: Self.usable) else { Issue.record("use"); return }
        #expect(used === channel && machine.phase == "current")
    }

    @Test("a caller that gives up waiting is forgotten")
    func abandoned() {
        var machine = Machine()
        _ = machine.channelNeeded(isUsable: Self.usable)
        guard case .wait(let waiter) = machine.channelNeeded(isUsable: Self.usable) else { Issue.record("wait"); return }
        machine.abandon(waiter)
        let step1 = machine.connectEnded()
        #expect(step1.waiters.isEmpty)
    }

    @Test("a failed attempt lets the waiters go and leaves the connection as it was")
    func connectFails() {
        var machine = Machine()
        _ = machine.channelNeeded(isUsable: Self.usable)
        _ = machine.channelNeeded(isUsable: Self.usable)
        let (waiters, _) = machine.connectEnded()
        #expect(waiters.count == 1 && machine.phase == "idle")
        let dead = FakeChannel(usable: false)
        var replacing = Self.current(dead)
        guard case .connect = replacing.channelNeeded(isUsable: Self.usable) else { Issue.record("replace"); return }
        _ = replacing.connectEnded()
        #expect(replacing.channel === dead, "the unusable channel is still the one whose end gets reported")
    }

    @Test("an unusable channel is replaced; the end of the channel in use is news, of another is not")
    func channelEnds() {
        let dead = FakeChannel(usable: false)
        var machine = Self.current(dead)
        guard case .connect = machine.channelNeeded(isUsable: Self.usable) else { Issue.record("replace"); return }
        let step2 = machine.channelEnded(dead)
        #expect(step2, "the replaced channel's end is reported")
        let step3 = machine.channelEnded(dead)
        #expect(!step3, "once")
        let fresh = FakeChannel()
        _ = machine.connected(fresh)
        _ = machine.connectEnded()
        let step4 = machine.channelEnded(FakeChannel())
        #expect(!step4, "a stranger's end is not news")
        let step5 = machine.channelEnded(fresh)
        #expect(step5 && machine.phase == "idle")
        let step6 = machine.reportEnded()
        #expect(step6 == nil)
        let step7 = machine.reportEnded()
        #expect(step7 == nil)
    }

    @Test("invalidation takes the channel, fails every later caller, and is announced at once when nothing is being reported")
    func invalidateQuiet() {
        let channel = FakeChannel()
        var machine = Self.current(channel)
        let error = RemoteError(.invalidated, "gone")
        guard case .invalidated(let taken, let announce) = machine.invalidate(error) else { Issue.record("invalidate"); return }
        #expect(taken === channel && announce)
        guard case .none = machine.invalidate(error) else { Issue.record("idempotent"); return }
        guard case .fail(let failure) = machine.channelNeeded(isUsable: Self.usable) else { Issue.record("fail"); return }
        #expect(failure == error && machine.invalidation == error && machine.phase == "invalidated (announced)")
        let step8 = machine.channelEnded(channel)
        #expect(!step8, "its end is not news after the invalidation")
    }

    @Test("an invalidation waits for the failures being reported: the crash is reported before the crash loop")
    func invalidateWhileReporting() {
        let channel = FakeChannel()
        var machine = Self.current(channel)
        let step9 = machine.channelEnded(channel)
        #expect(step9)  // a crash, being reported
        let loop = RemoteError(.invalidated, "crash loop")
        guard case .invalidated(_, let announce) = machine.invalidate(loop) else { Issue.record("invalidate"); return }
        #expect(!announce && machine.phase == "invalidated")
        let step10 = machine.reportEnded()
        #expect(step10 == loop, "announced once the crash was reported")
        #expect(machine.phase == "invalidated (announced)")
    }

    @Test("invalidated while connecting: the made channel is refused, the waiters go when the attempt ends, then it is announced")
    func invalidateWhileConnecting() {
        var machine = Machine()
        _ = machine.channelNeeded(isUsable: Self.usable)
        guard case .wait(let waiter) = machine.channelNeeded(isUsable: Self.usable) else { Issue.record("wait"); return }
        let error = RemoteError(.invalidated, "invalidated by the host")
        guard case .invalidated(nil, false) = machine.invalidate(error) else { Issue.record("invalidate"); return }
        guard case .refuse(let refusal) = machine.connected(FakeChannel()) else { Issue.record("refuse"); return }
        #expect(refusal == error)
        let (waiters, announce) = machine.connectEnded()
        #expect(waiters.count == 1 && waiters[0] === waiter && announce == error)
    }

    @Test("a channel made when none is being connected traps")
    func connectedUnasked() async {
        await #expect(processExitsWith: .failure) {
            var machine = ServiceConnectionStateMachine<FakeChannel>()
            _ = machine.connected(FakeChannel())
        }
    }

    @Test("an attempt that ends without starting traps")
    func endedUnasked() async {
        await #expect(processExitsWith: .failure) {
            var machine = ServiceConnectionStateMachine<FakeChannel>()
            _ = machine.connectEnded()
        }
    }

    @Test("a report that ends without starting traps")
    func reportUnasked() async {
        await #expect(processExitsWith: .failure) {
            var machine = ServiceConnectionStateMachine<FakeChannel>()
            _ = machine.reportEnded()
        }
    }
}
