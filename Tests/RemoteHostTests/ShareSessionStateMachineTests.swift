import RemoteCore
import Testing
@testable import RemoteHost

/// Every transition of a share's state machine on the host, with stand-in channels: the share's
/// rules (one request, updates only after it and on its channel, one answer, nothing after it,
/// a cancel once) without a process. The illegal event traps, in a process of its own.
@Suite("Share session state machine")
struct ShareSessionStateMachineTests {
    final class FakeChannel: Sendable {}
    typealias Machine = ShareSessionStateMachine<FakeChannel>

    static func running(on channel: FakeChannel) -> Machine {
        var machine = Machine()
        machine.requestSent(on: channel)
        return machine
    }

    static let update = ActivityUpdate(title: "T", progress: 0.5, state: .working)

    @Test("updates pass on; the answer finishes the share with its outcome")
    func happyPath() {
        let channel = FakeChannel()
        var machine = Self.running(on: channel)
        guard case .update(let update) = machine.received(.update(Self.update), on: channel) else { Issue.record("update"); return }
        #expect(update == Self.update)
        let item = try! ShareItem.text("x")
        guard case .finish(.completed(let items)) = machine.received(.complete(.completed, items: [item.wire], message: ""), items: [item], on: channel) else {
            Issue.record("finish"); return
        }
        #expect(items.count == 1 && items[0].text == "x")
        #expect(machine.channelClosed(channel, error: nil) == nil, "a channel closing after the answer changes nothing")
    }

    @Test("cancelled and failed answers carry their messages")
    func otherAnswers() {
        let channel = FakeChannel()
        var cancelled = Self.running(on: channel)
        guard case .finish(.cancelled(let reason)) = cancelled.received(.complete(.cancelled, items: [], message: ""), on: channel) else { Issue.record("cancelled"); return }
        #expect(reason == nil)
        var failed = Self.running(on: channel)
        guard case .finish(.failed(let message)) = failed.received(.complete(.failed, items: [], message: "full"), on: channel) else { Issue.record("failed"); return }
        #expect(message == "full")
    }

    @Test("share messages before the request, on another channel, or after the answer are violations that say which")
    func violations() {
        let channel = FakeChannel(), other = FakeChannel()
        var idle = Machine()
        guard case .violation(let early) = idle.received(.update(Self.update), on: channel) else { Issue.record("early"); return }
        #expect(early == "activity_update before the host's share_request")
        var running = Self.running(on: channel)
        guard case .violation(let elsewhere) = running.received(.update(Self.update), on: other) else { Issue.record("elsewhere"); return }
        #expect(elsewhere == "activity_update on a connection that carries no share")
        _ = running.received(.complete(.completed, items: [], message: ""), on: channel)
        guard case .violation(let late) = running.received(.update(Self.update), on: channel) else { Issue.record("late"); return }
        #expect(late == "activity_update after the share's share_complete")
        guard case .violation(let second) = running.received(.complete(.completed, items: [], message: ""), on: channel) else { Issue.record("second"); return }
        #expect(second == "share_complete after the share's share_complete")
    }

    @Test("a cancel is sent once, waited for after that, and answered at once when nothing runs")
    func cancel() {
        let channel = FakeChannel()
        var machine = Self.running(on: channel)
        guard case .send(let sentOn) = machine.cancelRequested() else { Issue.record("send"); return }
        #expect(sentOn === channel)
        guard case .wait = machine.cancelRequested() else { Issue.record("wait"); return }
        var idle = Machine()
        guard case .finished(.cancelled) = idle.cancelRequested() else { Issue.record("before start"); return }
        _ = machine.received(.complete(.cancelled, items: [], message: ""), on: channel)
        guard case .finished(.cancelled) = machine.cancelRequested() else { Issue.record("after the answer"); return }
    }

    @Test("the share's channel closing before the answer interrupts it with the reason; another channel's does not")
    func interrupted() {
        let channel = FakeChannel(), other = FakeChannel()
        var machine = Self.running(on: channel)
        #expect(machine.channelClosed(other, error: RemoteError(.interrupted, "other")) == nil)
        guard case .interrupted(let error) = machine.channelClosed(channel, error: RemoteError(.interrupted, "killed: SIGKILL")) else { Issue.record("interrupted"); return }
        #expect(error.reason == "killed: SIGKILL")
        var failing = Machine()
        guard case .interrupted = failing.failedToStart(RemoteError(.invalidArgument, "no capability")) else { Issue.record("failed to start"); return }
    }

    @Test("a second request traps: a share's request is sent once")
    func secondRequest() async {
        await #expect(processExitsWith: .failure) {
            var machine = Machine()
            machine.requestSent(on: FakeChannel())
            machine.requestSent(on: FakeChannel())
        }
    }
}
