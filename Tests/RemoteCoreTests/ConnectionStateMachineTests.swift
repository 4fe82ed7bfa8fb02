import Testing
@testable import RemoteCore

/// Tier 1: every transition of the connection's state machine, fed events in memory (no socket,
/// thread or clock). The illegal ones trap; each is checked in a process of its own.
@Suite("Connection state machine")
struct ConnectionStateMachineTests {
    typealias Machine = ConnectionStateMachine
    static let ours = Handshake(role: .host, identifier: "com.example.host")
    static let theirs = Handshake(role: .service, identifier: "com.example.service", capabilities: ["echo"])

    /// A machine that has run, sent its handshake and read the peer's.
    static func open() -> Machine {
        var machine = Machine()
        _ = machine.run()
        _ = machine.handshakeSent()
        guard case .open = machine.handshakeReceived(theirs, ours: ours) else { preconditionFailure("not open") }
        return machine
    }

    static func envelope(_ replyTo: UInt64) -> Envelope {
        Envelope(id: 99, replyTo: replyTo, body: .reply(type: "r", payload: []))
    }

    // MARK: opening

    @Test("idle: senders and openers queue; run starts the handshake; ours sent lets the senders go; theirs opens")
    func opening() {
        var machine = Machine()
        #expect(machine.phase == "idle" && machine.isIdle && !machine.isClosed && machine.peer == nil)
        #expect(machine.canSend() == nil, "nothing may be sent before this side's handshake")
        let sender = Waiter<Result<Void, RemoteError>>(), opener = Waiter<Result<Handshake, RemoteError>>()
        guard case .wait = machine.sendability(sender), case .wait = machine.openness(opener) else {
            Issue.record("idle callers must wait")
            return
        }
        let run = machine.run()
        #expect(run == .handshake)
        #expect(machine.phase == "handshaking")
        let late = Waiter<Result<Void, RemoteError>>()
        guard case .wait = machine.sendability(late) else { Issue.record("senders wait until ours is sent"); return }
        let senders = machine.handshakeSent()
        #expect(senders.count == 2 && senders[0] === sender && senders[1] === late)
        #expect(machine.phase == "handshaking (ours sent)")
        guard case .ready = machine.sendability(Waiter()) else { Issue.record("ours is sent: ready"); return }
        if case .success = machine.canSend() {} else { Issue.record("ours is sent: canSend") }
        guard case .open(let openers) = machine.handshakeReceived(Self.theirs, ours: Self.ours) else {
            Issue.record("the peer's handshake opens")
            return
        }
        #expect(openers.count == 1 && openers[0] === opener)
        #expect(machine.phase == "open" && machine.peer == Self.theirs)
        guard case .ready(let peer) = machine.openness(Waiter()) else { Issue.record("open: openness ready"); return }
        #expect(peer == Self.theirs)
    }

    @Test("a caller that gives up while queued is forgotten")
    func abandoned() {
        var machine = Machine()
        let sender = Waiter<Result<Void, RemoteError>>(), opener = Waiter<Result<Handshake, RemoteError>>()
        _ = machine.sendability(sender)
        _ = machine.openness(opener)
        machine.abandon(sender: sender)
        machine.abandon(opener: opener)
        _ = machine.run()
        let senders = machine.handshakeSent()
        #expect(senders.isEmpty)
        guard case .open(let openers) = machine.handshakeReceived(Self.theirs, ours: Self.ours) else { Issue.record("open"); return }
        #expect(openers.isEmpty)
    }

    @Test("the peer's handshake is refused for another version (naming both) or the same role, with the code the peer is told")
    func refusals() {
        var machine = Machine()
        _ = machine.run()
        _ = machine.handshakeSent()
        var future = Self.theirs
        future.protocolVersion = 99
        guard case .refuse(let version) = machine.handshakeReceived(future, ours: Self.ours) else { Issue.record("version"); return }
        #expect(version.code == .protocolViolation && version.reason.contains("version 1") && version.reason.contains("version 99"))
        let ending = machine.readLoopEnded(version)
        #expect(ending.protocolError == .versionMismatch && ending.outcome == version)

        var twin = Machine()
        _ = twin.run()
        _ = twin.handshakeSent()
        guard case .refuse(let role) = twin.handshakeReceived(Self.ours, ours: Self.ours) else { Issue.record("role"); return }
        #expect(role.reason.contains("both peers claim to be the host"))
        let twinEnding = twin.readLoopEnded(role)
        #expect(twinEnding.protocolError == .role)
    }

    @Test("a violation found while open is told with its refusal's code, else as malformed")
    func violationCodes() {
        var refused = Self.open()
        refused.refuse(.unexpected)
        let refusal = refused.readLoopEnded(RemoteError(.protocolViolation, "a second handshake"))
        #expect(refusal.protocolError == .unexpected)
        var malformed = Self.open()
        let garbage = malformed.readLoopEnded(RemoteError(.protocolViolation, "garbage"))
        #expect(garbage.protocolError == .malformed)
        var vanished = Self.open()
        let ending = vanished.readLoopEnded(nil)
        #expect(ending.protocolError == nil)
        #expect(ending.outcome?.code == .interrupted && ending.outcome?.reason.contains("without saying goodbye") == true)
    }

    // MARK: requests

    @Test("an answer goes to its requester once; unknown answers are dropped; the wrong kind is a violation")
    func answers() {
        var machine = Self.open()
        let reply = Machine.ReplyWaiter(), ping = Machine.ReplyWaiter()
        let sent = [machine.requestSent(2, expectsPong: false, waiter: reply), machine.requestSent(3, expectsPong: true, waiter: ping)]
        #expect(sent.allSatisfy { if case .success = $0 { true } else { false } })
        #expect(machine.outstanding.outgoing == 2)
        guard case .violation(let wrong) = machine.answerReceived(to: 3, isPong: false, kind: "reply") else { Issue.record("kind"); return }
        #expect(wrong.reason.contains("expects a pong"))
        guard case .deliver(let waiter) = machine.answerReceived(to: 2, isPong: false, kind: "reply") else { Issue.record("deliver"); return }
        #expect(waiter === reply)
        guard case .drop = machine.answerReceived(to: 2, isPong: false, kind: "reply") else { Issue.record("answered once"); return }
        machine.requestEnded(3)  // the ping timed out
        guard case .drop = machine.answerReceived(to: 3, isPong: true, kind: "pong") else { Issue.record("late pong"); return }
        #expect(machine.outstanding.outgoing == 0)
    }

    @Test("requests may follow this side's handshake before the peer's; they move to open with it")
    func requestBehindHandshake() {
        var machine = Machine()
        _ = machine.run()
        _ = machine.handshakeSent()
        let waiter = Machine.ReplyWaiter()
        let sent = machine.requestSent(2, expectsPong: false, waiter: waiter)
        if case .failure(let error) = sent { Issue.record("refused: \(error)") }
        _ = machine.handshakeReceived(Self.theirs, ours: Self.ours)
        guard case .deliver(let delivered) = machine.answerReceived(to: 2, isPong: false, kind: "reply") else { Issue.record("deliver"); return }
        #expect(delivered === waiter)
    }

    @Test("the peer's requests: started once each, at most the limit, cancelled by id, and a handler that ends before it is recorded is never recorded")
    func incoming() async throws {
        var machine = Self.open()
        let five = machine.requestReceived(5, limit: 2)
        #expect(try five.get() == .start)
        guard case .failure(let duplicate) = machine.requestReceived(5, limit: 2) else { Issue.record("duplicate"); return }
        #expect(duplicate.reason.contains("request id 5 is already outstanding"))
        let six = machine.requestReceived(6, limit: 2)
        #expect(try six.get() == .start)
        guard case .failure(let flood) = machine.requestReceived(7, limit: 2) else { Issue.record("limit"); return }
        #expect(flood.reason.contains("more than 2 requests outstanding"))
        let task = Task {}
        machine.handlerStarted(5, task: task)
        #expect(machine.cancelReceived(5) == task)
        #expect(machine.cancelReceived(6) == nil, "no task yet")
        machine.handlerFinished(6)
        machine.handlerStarted(6, task: Task {})  // it finished first: not recorded
        #expect(machine.cancelReceived(6) == nil)
        #expect(machine.outstanding.incoming == 1)
        machine.handlerFinished(5)
        #expect(machine.outstanding.incoming == 0)
        await task.value
    }

    // MARK: closing

    @Test("closing before run: nothing to say, queued callers fail, and run then ends at once")
    func closeIdle() {
        var machine = Machine()
        let sender = Waiter<Result<Void, RemoteError>>()
        _ = machine.sendability(sender)
        guard case .close(let goodbye, let failures) = machine.close() else { Issue.record("close"); return }
        #expect(!goodbye && failures.senders.count == 1 && failures.senders[0] === sender)
        #expect(machine.isClosed && machine.phase == "closing")
        guard case .none = machine.close() else { Issue.record("closing twice does nothing"); return }
        let run = machine.run()
        #expect(run == .finish)
        let ending = machine.readLoopEnded(RemoteError(.invalidated, "the connection was closed"))
        #expect(ending.outcome == nil && ending.protocolError == nil, "closed in order by this side")
        #expect(machine.phase == "closed")
    }

    @Test("closing while handshaking: no goodbye (a goodbye only follows both handshakes), requests and openers fail")
    func closeHandshaking() {
        var machine = Machine()
        let opener = Waiter<Result<Handshake, RemoteError>>()
        _ = machine.openness(opener)
        _ = machine.run()
        _ = machine.handshakeSent()
        _ = machine.requestSent(2, expectsPong: false, waiter: Machine.ReplyWaiter())
        guard case .close(let goodbye, let failures) = machine.close() else { Issue.record("close"); return }
        #expect(!goodbye && failures.openers.count == 1 && failures.requests.count == 1)
        // The peer's handshake arriving now opens nothing: the peer is recorded, the loop reads on.
        guard case .ignore = machine.handshakeReceived(Self.theirs, ours: Self.ours) else { Issue.record("ignored"); return }
        #expect(machine.peer == Self.theirs)
        guard case .failed(let error) = machine.sendability(Waiter()) else { Issue.record("no sends while closing"); return }
        #expect(error.code == .invalidated && error.reason.contains("closing"))
        let ending = machine.readLoopEnded(nil)
        #expect(ending.outcome == nil)
    }

    @Test("closing while open: goodbye first, outstanding requests fail, running handlers are awaited at the end")
    func closeOpen() async throws {
        var machine = Self.open()
        _ = machine.requestSent(2, expectsPong: false, waiter: Machine.ReplyWaiter())
        _ = machine.requestReceived(9, limit: 10)
        let handler = Task {}
        machine.handlerStarted(9, task: handler)
        guard case .close(let goodbye, let failures) = machine.close() else { Issue.record("close"); return }
        #expect(goodbye && failures.requests.count == 1)
        let late = machine.requestReceived(10, limit: 10)
        #expect(try late.get() == .ignore, "no new handler while closing")
        guard case .failure = machine.requestSent(3, expectsPong: false, waiter: Machine.ReplyWaiter()) else { Issue.record("no requests"); return }
        let ending = machine.readLoopEnded(nil)
        #expect(ending.outcome == nil && ending.handlers == [handler] && ending.failures.isEmpty)
        #expect(machine.peer == Self.theirs, "the peer is still known after the end")
        guard case .failed(let error) = machine.sendability(Waiter()) else { Issue.record("closed"); return }
        #expect(error.code == .invalidated)
        await handler.value
    }

    @Test("the peer's goodbye fails outstanding requests, stops the read loop, and ends in order")
    func goodbye() {
        var machine = Self.open()
        _ = machine.requestSent(2, expectsPong: false, waiter: Machine.ReplyWaiter())
        let failures = machine.goodbyeReceived("idle exit")
        #expect(failures.requests.count == 1)
        #expect(machine.goodbyeReason == "idle exit" && machine.isClosed && machine.phase == "closing (peer said goodbye)")
        guard case .drop = machine.answerReceived(to: 2, isPong: false, kind: "reply") else { Issue.record("late answer"); return }
        guard case .none = machine.close() else { Issue.record("nothing to close after a goodbye"); return }
        let ending = machine.readLoopEnded(nil)
        #expect(ending.outcome == nil && machine.goodbyeReason == "idle exit")
    }

    @Test("a handshake that times out fails what was sent behind it as interrupted, not timed out")
    func handshakeTimeout() {
        var machine = Machine()
        _ = machine.run()
        _ = machine.handshakeSent()
        _ = machine.requestSent(2, expectsPong: false, waiter: Machine.ReplyWaiter())
        let ending = machine.readLoopEnded(RemoteError(.timeout, "the peer sent no handshake within 5 seconds"))
        #expect(ending.outcome?.code == .timeout && ending.failure.code == .interrupted && ending.failures.requests.count == 1)
        #expect(ending.protocolError == nil)
        guard case .failed(let error) = machine.sendability(Waiter()) else { Issue.record("closed"); return }
        #expect(error.code == .timeout, "later calls see how it ended")
    }

    // MARK: illegal events

    @Test("run twice traps")
    func runTwice() async {
        await #expect(processExitsWith: .failure) {
            var machine = ConnectionStateMachine()
            _ = machine.run()
            _ = machine.run()
        }
    }

    @Test("a request before this side's handshake traps (callers wait until it is sent)")
    func requestWhileIdle() async {
        await #expect(processExitsWith: .failure) {
            var machine = ConnectionStateMachine()
            _ = machine.requestSent(1, expectsPong: false, waiter: ConnectionStateMachine.ReplyWaiter())
        }
    }

    @Test("an answer before the peer's handshake traps (answers are read only once open)")
    func answerWhileHandshaking() async {
        await #expect(processExitsWith: .failure) {
            var machine = ConnectionStateMachine()
            _ = machine.run()
            _ = machine.answerReceived(to: 1, isPong: false, kind: "reply")
        }
    }

    @Test("run while running traps, even once closing")
    func runWhileClosing() async {
        await #expect(processExitsWith: .failure) {
            var machine = ConnectionStateMachine()
            _ = machine.run()
            _ = machine.close()
            _ = machine.run()
        }
    }

    @Test("the read loop ending twice traps")
    func endTwice() async {
        await #expect(processExitsWith: .failure) {
            var machine = ConnectionStateMachine()
            _ = machine.run()
            _ = machine.readLoopEnded(nil)
            _ = machine.readLoopEnded(nil)
        }
    }

    @Test("a second handshake event traps (the connection refuses it before it reaches the machine)")
    func handshakeTwice() async {
        await #expect(processExitsWith: .failure) {
            var machine = ConnectionStateMachine()
            let host = Handshake(role: .host, identifier: "com.example.host"), service = Handshake(role: .service, identifier: "com.example.service")
            _ = machine.run()
            _ = machine.handshakeSent()
            _ = machine.handshakeReceived(service, ours: host)
            _ = machine.handshakeReceived(service, ours: host)
        }
    }

    @Test("a goodbye before the peer's handshake traps (messages are read only once open)")
    func goodbyeWhileIdle() async {
        await #expect(processExitsWith: .failure) {
            var machine = ConnectionStateMachine()
            _ = machine.goodbyeReceived("early")
        }
    }
}
