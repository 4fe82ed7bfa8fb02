import Testing
@testable import RemoteCore

/// Tier 1: every transition of the connection's state machine, fed events in memory (no socket,
/// thread or clock). The illegal ones trap; each is checked in a process of its own.
@Suite("Connection state machine")
struct ConnectionStateMachineTests {
    /// Requesters and openers are plain numbers here; the handler's are its pending calls.
    typealias Machine = ConnectionStateMachine<Int, Int>
    static let ours = Handshake(role: .host, identifier: "com.example.host")
    static let theirs = Handshake(role: .service, identifier: "com.example.service", capabilities: ["echo"])

    /// A machine that has run, sent its handshake and read the peer's.
    static func open() -> Machine {
        var machine = Machine()
        _ = machine.run()
        guard case .open = machine.handshakeReceived(theirs, ours: ours) else { preconditionFailure("not open") }
        return machine
    }

    static func envelope(_ replyTo: UInt64) -> Envelope {
        Envelope(id: 99, replyTo: replyTo, body: .reply(type: "r", payload: []))
    }

    // MARK: opening

    @Test("idle: nothing may be written yet and openers queue; run writes the handshake (writes may follow it); theirs opens")
    func opening() {
        var machine = Machine()
        #expect(machine.phase == "idle" && machine.isIdle && !machine.isClosed && machine.peer == nil)
        #expect(machine.canSend() == nil, "nothing may be written before this side's handshake")
        guard case .wait = machine.openness(1, token: 10) else { Issue.record("idle openers must wait"); return }
        let run = machine.run()
        #expect(run == .handshake)
        #expect(machine.phase == "handshaking")
        if case .success = machine.canSend() {} else { Issue.record("ours is written with run: canSend") }
        guard case .wait = machine.openness(2, token: 11) else { Issue.record("openers wait for theirs"); return }
        guard case .open(let openers) = machine.handshakeReceived(Self.theirs, ours: Self.ours) else {
            Issue.record("the peer's handshake opens")
            return
        }
        #expect(openers == [1, 2])
        #expect(machine.phase == "open" && machine.peer == Self.theirs)
        guard case .ready(let peer) = machine.openness(3, token: 12) else { Issue.record("open: openness ready"); return }
        #expect(peer == Self.theirs)
    }

    @Test("an opener that gives up while queued is handed back once, and forgotten")
    func abandoned() {
        var machine = Machine()
        _ = machine.openness(1, token: 10)
        _ = machine.openness(2, token: 11)
        #expect(machine.abandon(opener: 10) == 1)
        #expect(machine.abandon(opener: 10) == nil, "once")
        _ = machine.run()
        guard case .open(let openers) = machine.handshakeReceived(Self.theirs, ours: Self.ours) else { Issue.record("open"); return }
        #expect(openers == [2])
        #expect(machine.abandon(opener: 11) == nil, "resumed already")
    }

    @Test("the peer's handshake is refused for another version (naming both) or the same role, with the code the peer is told")
    func refusals() {
        var machine = Machine()
        _ = machine.run()
        var future = Self.theirs
        future.protocolVersion = 99
        guard case .refuse(let version) = machine.handshakeReceived(future, ours: Self.ours) else { Issue.record("version"); return }
        #expect(version.code == .protocolViolation && version.reason.contains("version 1") && version.reason.contains("version 99"))
        let ending = machine.channelEnded(version)
        #expect(ending.protocolError == .versionMismatch && ending.outcome == version)

        var twin = Machine()
        _ = twin.run()
        guard case .refuse(let role) = twin.handshakeReceived(Self.ours, ours: Self.ours) else { Issue.record("role"); return }
        #expect(role.reason.contains("both peers claim to be the host"))
        let twinEnding = twin.channelEnded(role)
        #expect(twinEnding.protocolError == .role)
    }

    @Test("a violation found while open is told with its refusal's code, else as malformed")
    func violationCodes() {
        var refused = Self.open()
        refused.refuse(.unexpected)
        let refusal = refused.channelEnded(RemoteError(.protocolViolation, "a second handshake"))
        #expect(refusal.protocolError == .unexpected)
        var malformed = Self.open()
        let garbage = malformed.channelEnded(RemoteError(.protocolViolation, "garbage"))
        #expect(garbage.protocolError == .malformed)
        var vanished = Self.open()
        let ending = vanished.channelEnded(nil)
        #expect(ending.protocolError == nil)
        #expect(ending.outcome?.code == .interrupted && ending.outcome?.reason.contains("without saying goodbye") == true)
    }

    // MARK: requests

    @Test("an answer goes to its requester once; unknown answers are dropped; the wrong kind is a violation")
    func answers() {
        var machine = Self.open()
        let sent = [machine.requestSent(2, expectsPong: false, requester: 20), machine.requestSent(3, expectsPong: true, requester: 30)]
        #expect(sent.allSatisfy { if case .success = $0 { true } else { false } })
        #expect(machine.outstanding.outgoing == 2)
        guard case .violation(let wrong) = machine.answerReceived(to: 3, isPong: false, kind: "reply") else { Issue.record("kind"); return }
        #expect(wrong.reason.contains("expects a pong"))
        guard case .deliver(let requester) = machine.answerReceived(to: 2, isPong: false, kind: "reply") else { Issue.record("deliver"); return }
        #expect(requester == 20)
        guard case .drop = machine.answerReceived(to: 2, isPong: false, kind: "reply") else { Issue.record("answered once"); return }
        #expect(machine.requestEnded(3) == 30, "the ping timed out: its requester is handed back to fail")
        #expect(machine.requestEnded(3) == nil, "once")
        guard case .drop = machine.answerReceived(to: 3, isPong: true, kind: "pong") else { Issue.record("late pong"); return }
        #expect(machine.outstanding.outgoing == 0)
    }

    @Test("requests may follow this side's handshake before the peer's; they move to open with it")
    func requestBehindHandshake() {
        var machine = Machine()
        _ = machine.run()
        let sent = machine.requestSent(2, expectsPong: false, requester: 20)
        if case .failure(let error) = sent { Issue.record("refused: \(error)") }
        _ = machine.handshakeReceived(Self.theirs, ours: Self.ours)
        guard case .deliver(let delivered) = machine.answerReceived(to: 2, isPong: false, kind: "reply") else { Issue.record("deliver"); return }
        #expect(delivered == 20)
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

    @Test("closing before run: nothing to say, queued openers fail, and run then ends at once")
    func closeIdle() {
        var machine = Machine()
        _ = machine.openness(1, token: 10)
        guard case .close(let goodbye, let failures) = machine.close() else { Issue.record("close"); return }
        #expect(!goodbye && failures.openers == [1])
        #expect(machine.isClosed && machine.phase == "closing")
        guard case .none = machine.close() else { Issue.record("closing twice does nothing"); return }
        let run = machine.run()
        #expect(run == .finish)
        let ending = machine.channelEnded(RemoteError(.invalidated, "the connection was closed"))
        #expect(ending.outcome == nil && ending.protocolError == nil, "closed in order by this side")
        #expect(machine.phase == "closed")
    }

    @Test("closing while handshaking: no goodbye (a goodbye only follows both handshakes), requests and openers fail")
    func closeHandshaking() {
        var machine = Machine()
        _ = machine.openness(1, token: 10)
        _ = machine.run()
        _ = machine.requestSent(2, expectsPong: false, requester: 20)
        guard case .close(let goodbye, let failures) = machine.close() else { Issue.record("close"); return }
        #expect(!goodbye && failures.openers.count == 1 && failures.requests.count == 1)
        // The peer's handshake arriving now opens nothing: the peer is recorded, the loop reads on.
        guard case .ignore = machine.handshakeReceived(Self.theirs, ours: Self.ours) else { Issue.record("ignored"); return }
        #expect(machine.peer == Self.theirs)
        guard case .failure(let error) = machine.canSend() else { Issue.record("no writes while closing"); return }
        #expect(error.code == .invalidated && error.reason.contains("closing"))
        let ending = machine.channelEnded(nil)
        #expect(ending.outcome == nil)
    }

    @Test("closing while open: goodbye first, outstanding requests fail, running handlers are awaited at the end")
    func closeOpen() async throws {
        var machine = Self.open()
        _ = machine.requestSent(2, expectsPong: false, requester: 20)
        _ = machine.requestReceived(9, limit: 10)
        let handler = Task {}
        machine.handlerStarted(9, task: handler)
        guard case .close(let goodbye, let failures) = machine.close() else { Issue.record("close"); return }
        #expect(goodbye && failures.requests.count == 1)
        let late = machine.requestReceived(10, limit: 10)
        #expect(try late.get() == .ignore, "no new handler while closing")
        guard case .failure = machine.requestSent(3, expectsPong: false, requester: 30) else { Issue.record("no requests"); return }
        let ending = machine.channelEnded(nil)
        #expect(ending.outcome == nil && ending.handlers == [handler] && ending.failures.isEmpty)
        #expect(machine.peer == Self.theirs, "the peer is still known after the end")
        guard case .failure(let error) = machine.canSend() else { Issue.record("closed"); return }
        #expect(error.code == .invalidated)
        await handler.value
    }

    @Test("the peer's end of file with deliveries still waiting: outstanding requests fail at once, nothing more is sent or started, and the end reported after them is the crash (or an orderly close when its goodbye was among them)")
    func peerEndedBehindDeliveries() throws {
        for goodbyeAmongThem in [false, true] {
            var machine = Self.open()
            _ = machine.requestSent(2, expectsPong: false, requester: 20)
            guard let (failures, failure) = machine.peerEnded(nil) else { Issue.record("open: the end waits its turn"); return }
            #expect(failures.requests == [20] && failure.code == .interrupted, "\(failure)")
            guard case .failure = machine.canSend() else { Issue.record("nothing more is sent"); return }
            #expect(try machine.requestReceived(9, limit: 10).get() == .ignore, "no handler starts")
            guard case .drop = machine.answerReceived(to: 2, isPong: false, kind: "reply") else { Issue.record("a queued answer is dropped"); return }
            if goodbyeAmongThem { #expect(machine.goodbyeReceived("idle exit").requests.isEmpty) }
            let ending = machine.channelEnded(nil)
            if goodbyeAmongThem {
                #expect(ending.outcome == nil && machine.goodbyeReason == "idle exit")
            } else {
                #expect(ending.outcome?.code == .interrupted && ending.outcome?.reason.contains("without saying goodbye") == true, "\(String(describing: ending.outcome))")
                #expect(ending.protocolError == nil)
            }
        }
        var closed = Self.open()
        _ = closed.close()
        #expect(closed.peerEnded(nil).map { _ in true } == nil, "not open: the end is taken at once")

        // An answer that came before the end, still waiting, goes to its caller in its turn; a
        // goodbye waiting with it names the failures of the others.
        var machine = Self.open()
        _ = machine.requestSent(2, expectsPong: false, requester: 20)
        _ = machine.requestSent(3, expectsPong: false, requester: 30)
        let ended = machine.peerEnded(nil, answered: [3], goodbye: "idle exit")
        let (failures, failure) = try #require(ended)
        #expect(failures.requests == [20] && failure.reason == "the peer closed the connection: idle exit", "\(failure)")
        #expect(machine.peerEndPending && machine.phase == "closing (the peer's channel ended)")
        guard case .deliver(let requester) = machine.answerReceived(to: 3, isPong: false, kind: "reply"), requester == 30 else {
            Issue.record("the answer that came first is delivered")
            return
        }
        _ = machine.goodbyeReceived("idle exit")
        #expect(machine.channelEnded(nil).outcome == nil)
    }

    @Test("the peer's goodbye fails outstanding requests, stops reading, and ends in order")
    func goodbye() {
        var machine = Self.open()
        _ = machine.requestSent(2, expectsPong: false, requester: 20)
        let failures = machine.goodbyeReceived("idle exit")
        #expect(failures.requests.count == 1)
        #expect(machine.goodbyeReason == "idle exit" && machine.isClosed && machine.phase == "closing (peer said goodbye)")
        guard case .drop = machine.answerReceived(to: 2, isPong: false, kind: "reply") else { Issue.record("late answer"); return }
        guard case .none = machine.close() else { Issue.record("nothing to close after a goodbye"); return }
        let ending = machine.channelEnded(nil)
        #expect(ending.outcome == nil && machine.goodbyeReason == "idle exit")
    }

    @Test("a handshake that times out fails what was sent behind it as interrupted, not timed out")
    func handshakeTimeout() {
        var machine = Machine()
        _ = machine.run()
        _ = machine.requestSent(2, expectsPong: false, requester: 20)
        let ending = machine.channelEnded(RemoteError(.timeout, "the peer sent no handshake within 5 seconds"))
        #expect(ending.outcome?.code == .timeout && ending.failure.code == .interrupted && ending.failures.requests.count == 1)
        #expect(ending.protocolError == nil)
        guard case .failure(let error) = machine.canSend() else { Issue.record("closed"); return }
        #expect(error.code == .timeout, "later calls see how it ended")
    }

    // MARK: illegal events

    @Test("run twice traps")
    func runTwice() async {
        await #expect(processExitsWith: .failure) {
            var machine = ConnectionStateMachine<Int, Int>()
            _ = machine.run()
            _ = machine.run()
        }
    }

    @Test("a request before this side's handshake traps (the handler keeps what is asked before run until its handshake is written)")
    func requestWhileIdle() async {
        await #expect(processExitsWith: .failure) {
            var machine = ConnectionStateMachine<Int, Int>()
            _ = machine.requestSent(1, expectsPong: false, requester: 1)
        }
    }

    @Test("an answer before the peer's handshake traps (answers are read only once open)")
    func answerWhileHandshaking() async {
        await #expect(processExitsWith: .failure) {
            var machine = ConnectionStateMachine<Int, Int>()
            _ = machine.run()
            _ = machine.answerReceived(to: 1, isPong: false, kind: "reply")
        }
    }

    @Test("run while running traps, even once closing")
    func runWhileClosing() async {
        await #expect(processExitsWith: .failure) {
            var machine = ConnectionStateMachine<Int, Int>()
            _ = machine.run()
            _ = machine.close()
            _ = machine.run()
        }
    }

    @Test("the channel ending twice traps")
    func endTwice() async {
        await #expect(processExitsWith: .failure) {
            var machine = ConnectionStateMachine<Int, Int>()
            _ = machine.run()
            _ = machine.channelEnded(nil)
            _ = machine.channelEnded(nil)
        }
    }

    @Test("a second handshake event traps (the connection refuses it before it reaches the machine)")
    func handshakeTwice() async {
        await #expect(processExitsWith: .failure) {
            var machine = ConnectionStateMachine<Int, Int>()
            let host = Handshake(role: .host, identifier: "com.example.host"), service = Handshake(role: .service, identifier: "com.example.service")
            _ = machine.run()
            _ = machine.handshakeReceived(service, ours: host)
            _ = machine.handshakeReceived(service, ours: host)
        }
    }

    @Test("a goodbye before the peer's handshake traps (messages are read only once open)")
    func goodbyeWhileIdle() async {
        await #expect(processExitsWith: .failure) {
            var machine = ConnectionStateMachine<Int, Int>()
            _ = machine.goodbyeReceived("early")
        }
    }
}
