/// The life of one ``Connection`` as a value: its phase, who waits for what, and what the
/// connection must do next. No socket, no thread, no clock.
///
/// Like async-http-client's `HTTP1ConnectionStateMachine`, owned by its handler: the
/// connection's ``ConnectionHandler`` holds the machine on its loop, with no lock, feeds it one
/// event at a time (`mutating func`), and performs the returned action: write, resume or fail
/// these callers, cancel those handlers. Each state carries exactly the data valid in it. An
/// event that cannot happen in a state is a `preconditionFailure` naming the state: it is a bug
/// in the handler, never something a peer can cause.
///
/// Generic over what a caller waiting for an answer (`Requester`) and for the peer's handshake
/// (`Opener`) is: the handler's continuations; plain values in the machine's tests.
///
/// ```
/// idle ──run (ours written)──▶ handshaking ──peer's handshake──▶ open
///   │                              │                              │
///   └──close──▶ closing ◀──────────┴──close / peer's goodbye / peer's end with deliveries waiting
///                  │                                     (peerEnded: the end takes its turn)
///                  │
///   the channel ended (any state but idle) ──▶ closed
/// ```
package struct ConnectionStateMachine<Requester, Opener> {
    /// A task running a handler for one of the peer's requests.
    package typealias Handler = Task<Void, Never>

    /// A request this side sent and awaits an answer to.
    package struct Outgoing {
        /// Whether the answer must be a pong (the request was a ping).
        package var expectsPong: Bool
        package var requester: Requester
    }

    /// Callers waiting for the peer's handshake before the connection is open, with the token
    /// each can be forgotten by.
    private struct Queued {
        var openers: [(token: UInt64, opener: Opener)] = []

        mutating func takeAll() -> Failures {
            defer { openers = [] }
            return Failures(openers: openers.map(\.opener))
        }
    }

    private struct Handshaking {
        var queued: Queued
        var outgoing: [UInt64: Outgoing] = [:]
        var refusal: ProtocolErrorCode?
    }

    private struct Open {
        var peer: Handshake
        var outgoing: [UInt64: Outgoing]
        /// The peer's requests being handled; `nil` until the handler's task is known.
        var incoming: [UInt64: Handler?] = [:]
        var refusal: ProtocolErrorCode?
    }

    private struct Closing {
        /// This side asked to close (``Connection/close(reason:)``).
        var local: Bool
        /// Whether ``Connection/run()`` began (else it ends at once when it does).
        var ran: Bool
        var peer: Handshake?
        /// The peer's goodbye, if it said one.
        var goodbye: String?
        /// Handlers still running; ``channelEnded(_:)`` cancels them, and the handler awaits them.
        var incoming: [UInt64: Handler?]
        var refusal: ProtocolErrorCode?
        /// The channel ended under the peer (end of file without a goodbye, or a failure) while
        /// what it sent before still waited to be delivered: the outcome to report then.
        var peerEnd: RemoteError? = nil
        /// Requests whose answer had arrived, waiting to be delivered, when the peer's channel
        /// ended: answered in their turn (the others failed at once).
        var answering: [UInt64: Outgoing] = [:]
        /// The peer's channel ended and that end waits behind deliveries.
        var endQueued = false

        /// Why nothing more can be sent.
        var unusable: RemoteError {
            RemoteError(.invalidated, local ? "the connection is closing" : "the connection is closed")
        }
    }

    private struct Closed {
        var outcome: RemoteError?
        var peer: Handshake?
        var goodbye: String?

        var unusable: RemoteError {
            outcome ?? RemoteError(.invalidated, "the connection is closed")
        }
    }

    private enum State {
        case idle(Queued)
        case handshaking(Handshaking)
        case open(Open)
        case closing(Closing)
        case closed(Closed)
        /// Only while an event changes the state (no copy-on-write of the associated data).
        case modifying
    }

    private var state: State = .idle(Queued())

    package init() {}

    // MARK: actions

    /// Callers to fail because the connection can no longer carry what they wait for.
    package struct Failures {
        package var openers: [Opener] = []
        package var requests: [Requester] = []

        package var isEmpty: Bool { openers.isEmpty && requests.isEmpty }
    }

    /// What ``run()`` leads to.
    package enum RunAction: Equatable, Sendable {
        /// Write this side's handshake (what callers asked to send before it follows), then read.
        case handshake
        /// The connection was closed before it ran: nothing to send; end at once.
        case finish
    }

    /// What the peer's handshake leads to.
    package enum HandshakeAction {
        /// Open: resume these callers with the peer's handshake.
        case open([Opener])
        /// Refuse the peer: the connection ends with this violation.
        case refuse(RemoteError)
        /// This side is closing already: the peer is recorded; read on until the end.
        case ignore
    }

    /// Whether a caller's wait for the peer's handshake is over.
    package enum Readiness<Value> {
        case ready(Value)
        case failed(RemoteError)
        /// The opener is queued; it is resumed or failed later.
        case wait
    }

    /// What an answer (reply, failure or pong) to request `id` leads to.
    package enum AnswerAction {
        /// Resume the requester.
        case deliver(Requester)
        /// An answer to a request that timed out or was cancelled: dropped.
        case drop
        /// The answer is of the wrong kind: the connection ends with this violation.
        case violation(RemoteError)
    }

    /// What a request from the peer leads to.
    package enum IncomingAction: Equatable, Sendable {
        /// Start its handler.
        case start
        /// This side is closing: do not start it.
        case ignore
    }

    /// What ``close()`` leads to.
    package enum CloseAction {
        /// Already closing or closed.
        case none
        /// Say goodbye first when `sayGoodbye` (only after both handshakes), fail `failures`,
        /// and close the channel.
        case close(sayGoodbye: Bool, failures: Failures)
    }

    /// How the connection ends, once its channel has.
    package struct Ending {
        /// `nil`: closed in order (by either side).
        package var outcome: RemoteError?
        /// Tell the peer it broke the protocol, with this code, before closing.
        package var protocolError: ProtocolErrorCode?
        /// Fail these callers (with ``failure``).
        package var failures: Failures
        /// The error the remaining callers fail with.
        package var failure: RemoteError
        /// Cancel these handlers and wait for them.
        package var handlers: [Handler]
    }

    // MARK: events

    /// ``Connection/run()`` began.
    package mutating func run() -> RunAction {
        switch state {
        case .idle(let queued):
            state = .handshaking(Handshaking(queued: queued))
            return .handshake
        case .closing(var closing) where !closing.ran:
            state = .modifying
            closing.ran = true
            state = .closing(closing)
            return .finish
        case .closing, .handshaking, .open, .closed:
            preconditionFailure("Connection.run() called twice (state: \(phase))")
        case .modifying:
            preconditionFailure("ConnectionStateMachine.run() while modifying")
        }
    }

    /// The peer's handshake arrived; `ours` is this side's; `expected` is the identifier the
    /// peer must have, if any; `lowestVersion` the lowest protocol version this side serves.
    package mutating func handshakeReceived(_ theirs: Handshake, ours: Handshake, expecting expected: String? = nil,
                                            lowestVersion: UInt32 = remoteViewProtocolVersion) -> HandshakeAction {
        switch state {
        case .handshaking(var handshaking):
            if theirs.protocolVersion != ours.protocolVersion {
                handshaking.refusal = .versionMismatch
                state = .handshaking(handshaking)
                return .refuse(RemoteError(.protocolViolation, "protocol version mismatch: this \(ours.role) speaks version \(ours.protocolVersion), the \(theirs.role) \"\(theirs.identifier)\" speaks version \(theirs.protocolVersion)"))
            }
            if ours.agreedVersion(with: theirs) < lowestVersion {
                handshaking.refusal = .versionMismatch
                state = .handshaking(handshaking)
                return .refuse(RemoteError(.protocolViolation, "protocol version mismatch: this \(ours.role) serves versions \(lowestVersion) to \(ours.highestVersion), the \(theirs.role) \"\(theirs.identifier)\" speaks versions up to \(theirs.highestVersion)"))
            }
            if theirs.role == ours.role {
                handshaking.refusal = .role
                state = .handshaking(handshaking)
                return .refuse(RemoteError(.protocolViolation, "both peers claim to be the \(ours.role)"))
            }
            if let expected, theirs.identifier != expected {
                handshaking.refusal = .unexpected
                state = .handshaking(handshaking)
                return .refuse(RemoteError(.protocolViolation, "the \(theirs.role) says it is \"\(theirs.identifier)\" in its handshake, but it was launched as \"\(expected)\""))
            }
            state = .modifying
            let openers = handshaking.queued.openers.map(\.opener)
            state = .open(Open(peer: theirs, outgoing: handshaking.outgoing, refusal: handshaking.refusal))
            return .open(openers)
        case .closing(var closing):
            // Closing already (its callers failed then): the peer is known, nothing opens.
            state = .modifying
            closing.peer = closing.peer ?? theirs
            state = .closing(closing)
            return .ignore
        case .idle, .open, .closed:
            preconditionFailure("the peer's handshake in state \(phase)")
        case .modifying:
            preconditionFailure("ConnectionStateMachine.handshakeReceived() while modifying")
        }
    }

    /// This side refuses the peer (it is told with `code` when the connection ends).
    package mutating func refuse(_ code: ProtocolErrorCode) {
        switch state {
        case .handshaking(var handshaking):
            handshaking.refusal = code
            state = .handshaking(handshaking)
        case .open(var open):
            state = .modifying
            open.refusal = code
            state = .open(open)
        case .closing(var closing):
            state = .modifying
            closing.refusal = code
            state = .closing(closing)
        case .idle, .closed:
            preconditionFailure("a refusal in state \(phase)")
        case .modifying:
            preconditionFailure("ConnectionStateMachine.refuse() while modifying")
        }
    }

    /// Whether a packet may be written now: `nil` before ``run()`` (it is written after this
    /// side's handshake, which ``run()`` writes first).
    package func canSend() -> Result<Void, RemoteError>? {
        switch state {
        case .idle: nil
        case .handshaking: .success(())
        case .open: .success(())
        case .closing(let closing): .failure(closing.unusable)
        case .closed(let closed): .failure(closed.unusable)
        case .modifying: preconditionFailure("ConnectionStateMachine.canSend() while modifying")
        }
    }

    /// The peer's handshake while the connection is open (`nil` before, and once closing).
    package var openPeer: Handshake? {
        if case .open(let open) = state { open.peer } else { nil }
    }

    /// A caller waits for the peer's handshake; `opener` is queued, under `token`, unless it is known.
    package mutating func openness(_ opener: Opener, token: UInt64) -> Readiness<Handshake> {
        switch state {
        case .idle, .handshaking:
            updateQueued { $0.openers.append((token, opener)) }
            return .wait
        case .open(let open):
            return .ready(open.peer)
        case .closing(let closing):
            return .failed(closing.unusable)
        case .closed(let closed):
            return .failed(closed.unusable)
        case .modifying:
            preconditionFailure("ConnectionStateMachine.openness() while modifying")
        }
    }

    /// The caller that queued an opener under `token` gave up (cancelled): returns its opener,
    /// to fail, unless it was resumed or failed already (once open, closing or closed).
    package mutating func abandon(opener token: UInt64) -> Opener? {
        var found: Opener?
        updateQueued { queued in
            guard let index = queued.openers.firstIndex(where: { $0.token == token }) else { return }
            found = queued.openers.remove(at: index).opener
        }
        return found
    }

    /// Changes the callers queued until the connection opens (in `idle` and `handshaking`);
    /// in any other state nobody is queued, and it does nothing.
    private mutating func updateQueued(_ change: (inout Queued) -> Void) {
        switch state {
        case .idle(var queued):
            state = .modifying
            change(&queued)
            state = .idle(queued)
        case .handshaking(var handshaking):
            state = .modifying
            change(&handshaking.queued)
            state = .handshaking(handshaking)
        case .open, .closing, .closed:
            break
        case .modifying:
            preconditionFailure("ConnectionStateMachine: the queued callers changed while modifying")
        }
    }

    /// This side sends request `id` (a ping when `expectsPong`); its answer goes to `requester`.
    /// Fails when the connection is closing or closed.
    package mutating func requestSent(_ id: UInt64, expectsPong: Bool, requester: Requester) -> Result<Void, RemoteError> {
        switch state {
        case .handshaking(var handshaking):
            state = .modifying
            handshaking.outgoing[id] = Outgoing(expectsPong: expectsPong, requester: requester)
            state = .handshaking(handshaking)
            return .success(())
        case .open(var open):
            state = .modifying
            open.outgoing[id] = Outgoing(expectsPong: expectsPong, requester: requester)
            state = .open(open)
            return .success(())
        case .closing(let closing):
            return .failure(closing.unusable)
        case .closed(let closed):
            return .failure(closed.unusable)
        case .idle:
            preconditionFailure("a request in state idle: what is sent before run() is written after this side's handshake")
        case .modifying:
            preconditionFailure("ConnectionStateMachine.requestSent() while modifying")
        }
    }

    /// Request `id` needs no answer any more (it timed out or was cancelled): returns its
    /// requester, to fail, unless it was answered or failed already.
    package mutating func requestEnded(_ id: UInt64) -> Requester? {
        switch state {
        case .handshaking(var handshaking):
            state = .modifying
            let outgoing = handshaking.outgoing.removeValue(forKey: id)
            state = .handshaking(handshaking)
            return outgoing?.requester
        case .open(var open):
            state = .modifying
            let outgoing = open.outgoing.removeValue(forKey: id)
            state = .open(open)
            return outgoing?.requester
        case .idle, .closing, .closed:
            return nil  // failed with the rest already
        case .modifying:
            preconditionFailure("ConnectionStateMachine.requestEnded() while modifying")
        }
    }

    /// Whether request `id` still waits for its answer.
    package func isOutstanding(_ id: UInt64) -> Bool {
        switch state {
        case .handshaking(let handshaking): handshaking.outgoing[id] != nil
        case .open(let open): open.outgoing[id] != nil
        case .idle, .closing, .closed: false
        case .modifying: preconditionFailure("ConnectionStateMachine.isOutstanding() while modifying")
        }
    }

    /// The id of the outstanding request whose requester `matches` (a linear search: for a
    /// caller's cancellation, which names its request by the caller's token, not by its id).
    package func outstandingID(where matches: (Requester) -> Bool) -> UInt64? {
        switch state {
        case .handshaking(let handshaking): handshaking.outgoing.first { matches($0.value.requester) }?.key
        case .open(let open): open.outgoing.first { matches($0.value.requester) }?.key
        case .idle, .closing, .closed: nil
        case .modifying: preconditionFailure("ConnectionStateMachine.outstandingID() while modifying")
        }
    }

    /// An answer to request `replyTo` arrived: a pong when `isPong`, else a reply or failure.
    package mutating func answerReceived(to replyTo: UInt64, isPong: Bool, kind: String) -> AnswerAction {
        switch state {
        case .open(var open):
            state = .modifying
            let action = Self.answer(replyTo, isPong: isPong, kind: kind, among: &open.outgoing)
            state = .open(open)
            return action
        case .closing(var closing):
            // Every request was failed when closing began, but those whose answers had come
            // before the peer's end.
            state = .modifying
            let action = Self.answer(replyTo, isPong: isPong, kind: kind, among: &closing.answering)
            state = .closing(closing)
            return action
        case .idle, .handshaking, .closed:
            preconditionFailure("an answer in state \(phase): answers are read only once open")
        case .modifying:
            preconditionFailure("ConnectionStateMachine.answerReceived() while modifying")
        }
    }

    /// The answer to `replyTo` taken from `outstanding`: delivered (and forgotten), dropped when
    /// nobody waits for it, or a violation when it is of the other kind (a pong for a request).
    private static func answer(_ replyTo: UInt64, isPong: Bool, kind: String, among outstanding: inout [UInt64: Outgoing]) -> AnswerAction {
        guard let outgoing = outstanding[replyTo] else { return .drop }
        guard outgoing.expectsPong == isPong else {
            return .violation(RemoteError(.protocolViolation, "\(kind) answers envelope \(replyTo), which expects \(outgoing.expectsPong ? "a pong" : "a reply or failure")"))
        }
        outstanding[replyTo] = nil
        return .deliver(outgoing.requester)
    }

    /// The peer sent request `id`; at most `limit` may be outstanding.
    package mutating func requestReceived(_ id: UInt64, limit: Int) -> Result<IncomingAction, RemoteError> {
        switch state {
        case .open(var open):
            guard open.incoming[id] == nil else {
                return .failure(RemoteError(.protocolViolation, "request id \(id) is already outstanding"))
            }
            guard open.incoming.count < limit else {
                return .failure(RemoteError(.protocolViolation, "more than \(limit) requests outstanding at once"))
            }
            state = .modifying
            open.incoming[id] = .some(nil)
            state = .open(open)
            return .success(.start)
        case .closing:
            return .success(.ignore)
        case .idle, .handshaking, .closed:
            preconditionFailure("a request from the peer in state \(phase): requests are read only once open")
        case .modifying:
            preconditionFailure("ConnectionStateMachine.requestReceived() while modifying")
        }
    }

    /// The handler of request `id` runs as `task` (unless it has finished already).
    package mutating func handlerStarted(_ id: UInt64, task: Handler) {
        switch state {
        case .open(var open):
            guard open.incoming[id] != nil else { return }  // finished before this
            state = .modifying
            open.incoming[id] = task
            state = .open(open)
        case .closing(var closing):
            guard closing.incoming[id] != nil else { return }
            state = .modifying
            closing.incoming[id] = task
            state = .closing(closing)
        case .closed:
            break  // ended, and every handler known then was awaited; this one ends by itself
        case .idle, .handshaking:
            preconditionFailure("a handler started in state \(phase)")
        case .modifying:
            preconditionFailure("ConnectionStateMachine.handlerStarted() while modifying")
        }
    }

    /// The handler of request `id` is done.
    package mutating func handlerFinished(_ id: UInt64) {
        switch state {
        case .open(var open):
            state = .modifying
            open.incoming[id] = nil
            state = .open(open)
        case .closing(var closing):
            state = .modifying
            closing.incoming[id] = nil
            state = .closing(closing)
        case .closed, .idle, .handshaking:
            break
        case .modifying:
            preconditionFailure("ConnectionStateMachine.handlerFinished() while modifying")
        }
    }

    /// The peer cancelled its request `id`; returns the handler to cancel, if it runs.
    package func cancelReceived(_ id: UInt64) -> Handler? {
        switch state {
        case .open(let open): open.incoming[id] ?? nil
        case .closing(let closing): closing.incoming[id] ?? nil
        case .idle, .handshaking, .closed: nil
        case .modifying: preconditionFailure("ConnectionStateMachine.cancelReceived() while modifying")
        }
    }

    /// The peer said goodbye: returns what to fail (with *interrupted*); reading stops.
    package mutating func goodbyeReceived(_ reason: String) -> Failures {
        switch state {
        case .open(let open):
            state = .closing(Closing(local: false, ran: true, peer: open.peer, goodbye: reason, incoming: open.incoming, refusal: open.refusal))
            return Failures(requests: open.outgoing.values.map(\.requester))
        case .closing(var closing):
            state = .modifying
            closing.goodbye = reason
            // A goodbye delivered in its turn after the end of file: the peer closed in order.
            closing.peerEnd = nil
            state = .closing(closing)
            return Failures()
        case .idle, .handshaking, .closed:
            preconditionFailure("a goodbye in state \(phase): messages are read only once open")
        case .modifying:
            preconditionFailure("ConnectionStateMachine.goodbyeReceived() while modifying")
        }
    }

    /// The channel ended under an open connection (`error`, or `nil`: the peer's end of file)
    /// while what the peer sent before it waits to be delivered: nothing more is sent or
    /// answered, outstanding requests fail now with the returned error (no answer can come),
    /// and ``channelEnded(_:)``, in its turn after those deliveries, reports the end. `nil` when
    /// the connection is not open (it ends at once, as before).
    ///
    /// - Parameters:
    ///   - answered: the requests whose answers arrived before the end and wait to be
    ///     delivered: they are answered in their turn, not failed.
    ///   - goodbye: the reason of a goodbye that waits among the deliveries: the peer closed in
    ///     order, and the failures say so.
    package mutating func peerEnded(_ error: RemoteError?, answered: Set<UInt64> = [], goodbye: String? = nil) -> (failures: Failures, failure: RemoteError)? {
        guard case .open(let open) = state else { return nil }
        let outcome = error ?? Self.endedWithoutGoodbye
        let answering = open.outgoing.filter { answered.contains($0.key) }
        // A goodbye among what waits: the peer closed in order, whether or not it is delivered.
        state = .closing(Closing(local: false, ran: true, peer: open.peer, goodbye: nil, incoming: open.incoming, refusal: open.refusal,
                                 peerEnd: goodbye == nil ? outcome : nil, answering: answering, endQueued: true))
        let failure = goodbye.map { RemoteError(.interrupted, "the peer closed the connection: \($0.escapedForTerminal())") } ?? Self.failure(for: outcome)
        return (Failures(requests: open.outgoing.filter { !answered.contains($0.key) }.map(\.value.requester)), failure)
    }

    /// Whether the peer's channel ended and the end waits behind deliveries (``peerEnded(_:answered:goodbye:)``).
    package var peerEndPending: Bool {
        if case .closing(let closing) = state { closing.endQueued } else { false }
    }

    /// How an open connection ends at the peer's end of file without a goodbye.
    private static var endedWithoutGoodbye: RemoteError { RemoteError(.interrupted, "the peer closed the connection without saying goodbye (it may have crashed)") }

    /// This side closes (``Connection/close(reason:)``).
    package mutating func close() -> CloseAction {
        switch state {
        case .idle(var queued):
            state = .closing(Closing(local: true, ran: false, peer: nil, goodbye: nil, incoming: [:], refusal: nil))
            return .close(sayGoodbye: false, failures: queued.takeAll())
        case .handshaking(var handshaking):
            var failures = handshaking.queued.takeAll()
            failures.requests = handshaking.outgoing.values.map(\.requester)
            state = .closing(Closing(local: true, ran: true, peer: nil, goodbye: nil, incoming: [:], refusal: handshaking.refusal))
            return .close(sayGoodbye: false, failures: failures)
        case .open(let open):
            state = .closing(Closing(local: true, ran: true, peer: open.peer, goodbye: nil, incoming: open.incoming, refusal: open.refusal))
            return .close(sayGoodbye: true, failures: Failures(requests: open.outgoing.values.map(\.requester)))
        case .closing(var closing):
            guard !closing.local else { return .none }
            // The peer said goodbye and the connection is ending: this side's close makes no difference.
            state = .modifying
            closing.local = true
            state = .closing(closing)
            return .none
        case .closed:
            return .none
        case .modifying:
            preconditionFailure("ConnectionStateMachine.close() while modifying")
        }
    }

    /// The channel ended: with `error`, or `nil` at the peer's end of file (or after a goodbye,
    /// or this side's close).
    package mutating func channelEnded(_ error: RemoteError?) -> Ending {
        switch state {
        case .handshaking(var handshaking):
            let outcome = error ?? RemoteError(.interrupted, "the peer closed the connection before its handshake (it may have crashed at start-up)")
            var failures = handshaking.queued.takeAll()
            failures.requests = handshaking.outgoing.values.map(\.requester)
            state = .closed(Closed(outcome: outcome, peer: nil, goodbye: nil))
            return Ending(outcome: outcome, protocolError: Self.complaint(outcome, handshaking.refusal), failures: failures,
                          failure: Self.failure(for: outcome), handlers: [])
        case .open(let open):
            let outcome = error ?? Self.endedWithoutGoodbye
            state = .closed(Closed(outcome: outcome, peer: open.peer, goodbye: nil))
            return Ending(outcome: outcome, protocolError: Self.complaint(outcome, open.refusal),
                          failures: Failures(requests: open.outgoing.values.map(\.requester)),
                          failure: Self.failure(for: outcome), handlers: open.incoming.values.compactMap { $0 })
        case .closing(let closing):
            // Closed in order, by this side or by the peer's goodbye: whatever the channel saw
            // last. Or the peer's channel ended before its deliveries: that end, now (unless
            // this side's own error came first).
            let outcome = closing.peerEnd.map { error ?? $0 }
            state = .closed(Closed(outcome: outcome, peer: closing.peer, goodbye: closing.goodbye))
            return Ending(outcome: outcome, protocolError: outcome.flatMap { Self.complaint($0, closing.refusal) },
                          failures: Failures(requests: closing.answering.values.map(\.requester)),
                          failure: Self.failure(for: outcome), handlers: closing.incoming.values.compactMap { $0 })
        case .idle, .closed:
            preconditionFailure("the channel ended in state \(phase)")
        case .modifying:
            preconditionFailure("ConnectionStateMachine.channelEnded() while modifying")
        }
    }

    /// What the peer is told when the connection ends with `outcome`: the refusal's code for a
    /// violation this side found (malformed unless a code was given).
    private static func complaint(_ outcome: RemoteError, _ refusal: ProtocolErrorCode?) -> ProtocolErrorCode? {
        outcome.code == .protocolViolation ? refusal ?? .malformed : nil
    }

    /// What callers left at the end fail with. A request sent behind this side's handshake to a
    /// peer that never answered it did not time out itself: the connection failed under it
    /// (XPC's "interrupted").
    private static func failure(for outcome: RemoteError?) -> RemoteError {
        guard let outcome else { return RemoteError(.invalidated, "the connection is closed") }
        return outcome.code == .timeout ? RemoteError(.interrupted, outcome.reason) : outcome
    }

    // MARK: queries

    /// The peer's handshake, once it has arrived (and still after the connection closed).
    package var peer: Handshake? {
        switch state {
        case .open(let open): open.peer
        case .closing(let closing): closing.peer
        case .closed(let closed): closed.peer
        case .idle, .handshaking: nil
        case .modifying: preconditionFailure("ConnectionStateMachine.peer while modifying")
        }
    }

    /// The reason the peer gave in its goodbye, once it gave one.
    package var goodbyeReason: String? {
        switch state {
        case .closing(let closing): closing.goodbye
        case .closed(let closed): closed.goodbye
        case .idle, .handshaking, .open: nil
        case .modifying: preconditionFailure("ConnectionStateMachine.goodbyeReason while modifying")
        }
    }

    /// Whether the connection is closing or closed.
    package var isClosed: Bool {
        switch state {
        case .closing, .closed: true
        case .idle, .handshaking, .open: false
        case .modifying: preconditionFailure("ConnectionStateMachine.isClosed while modifying")
        }
    }

    /// Whether the connection has not started running (handlers may still be routed).
    package var isIdle: Bool {
        if case .idle = state { true } else { false }
    }

    /// The phase, for messages and tests: `idle`, `handshaking`, `open`, `closing`, `closed`.
    package var phase: String {
        switch state {
        case .idle: "idle"
        case .handshaking: "handshaking"
        case .open: "open"
        case .closing(let closing): closing.local ? "closing" : closing.endQueued ? "closing (the peer's channel ended)" : "closing (peer said goodbye)"
        case .closed: "closed"
        case .modifying: "modifying"
        }
    }

    /// How many of this side's requests await an answer, and how many of the peer's are handled.
    package var outstanding: (outgoing: Int, incoming: Int) {
        switch state {
        case .handshaking(let handshaking): (handshaking.outgoing.count, 0)
        case .open(let open): (open.outgoing.count, open.incoming.count)
        case .closing(let closing): (0, closing.incoming.count)
        case .idle, .closed: (0, 0)
        case .modifying: preconditionFailure("ConnectionStateMachine.outstanding while modifying")
        }
    }
}
