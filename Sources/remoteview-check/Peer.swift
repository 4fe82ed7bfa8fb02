import RemoteCore

/// The checker's side of one connection to the service: the host's end, spoken packet by
/// packet. Receiving refuses an envelope whose id is not above the last one (the transport
/// does), which is how the id rule is checked on every packet.
final class Peer: Sendable {
    /// What arrived, or did not.
    enum Received: Sendable {
        case envelope(Envelope)
        /// End of file.
        case end
        /// Nothing within the time given.
        case timeout
        /// The packet broke a rule the transport checks (named), or the socket failed.
        case failed(RemoteError)

        var summary: String {
            switch self {
            case .envelope(let envelope): "\(envelope.body.name) (envelope \(envelope.id))"
            case .end: "end of file"
            case .timeout: "nothing"
            case .failed(let error): error.reason
            }
        }
    }

    let socket: SeqpacketSocket
    /// "fd 3", "client 2": for what the report says was seen.
    let name: String
    private let report: Report
    /// What the reader has received and nobody has taken yet, and who waits for it.
    private let inbox = Inbox()

    private final class Inbox: Sendable {
        let state = Mutex<(received: [Received], waiter: Waiter<Void>?)>(([], nil))
    }

    /// A peer on `socket`; one reader receives everything from now on (so nothing read is lost
    /// when a wait ends), and an id out of order is recorded in `report`, whoever was waiting.
    init(_ socket: SeqpacketSocket, name: String, report: Report) {
        self.socket = socket
        self.name = name
        self.report = report
        let inbox = self.inbox
        Task {
            while true {
                let received: Received
                do throws(RemoteError) {
                    if let envelope = try await socket.receive() {
                        report.noteReceived()
                        received = .envelope(envelope)
                    } else {
                        received = .end
                    }
                } catch {
                    if error.reason.contains("ids must increase") { report.fail("ids.increase", "on \(name): \(error.reason)") }
                    received = .failed(error)
                }
                inbox.state.withLock { inbox in
                    inbox.received.append(received)
                    return inbox.waiter.take()
                }?.resume(returning: ())
                if case .envelope = received { continue }
                return  // end of file or a failure: nothing more comes
            }
        }
    }
    /// Sends `body` (numbered as it is written); returns its id.
    @discardableResult
    func send(_ body: Envelope.Body, replyTo: UInt64? = nil, attachments: [Attachment] = []) async throws(RemoteError) -> UInt64 {
        try await socket.send(Envelope(replyTo: replyTo, body: body, attachments: attachments))
    }

    /// Writes `packet` as it is, outside the numbering.
    func sendUnnumbered(_ packet: [UInt8]) throws(RemoteError) {
        try socket.sendUnnumbered(packet)
    }

    /// The next envelope, if one arrives within `time`. After end of file or a failure, that is
    /// what every later call gets.
    func receive(within time: Duration) async -> Received {
        let deadline = ContinuousClock.now.advanced(by: time)
        while true {
            let waiter = Waiter<Void>()
            let next = inbox.state.withLock { inbox -> Received? in
                guard let first = inbox.received.first else {
                    inbox.waiter = waiter
                    return nil
                }
                if case .envelope = first { inbox.received.removeFirst() }
                return first
            }
            if let next { return next }
            do throws(WaitError) {
                try await waiter.wait(until: deadline)
            } catch {
                inbox.state.withLock { if $0.waiter === waiter { $0.waiter = nil } }
                // A packet that came as the deadline passed is still in the inbox for the next call.
                return .timeout
            }
        }
    }

    /// Reads until `match` takes an envelope (returning what it made of it) or `time` passes;
    /// envelopes it does not take are passed to `other` (which may end the wait with a reason),
    /// and the transport's complaints and end of file end it.
    func await<T: Sendable>(within time: Duration, _ what: String,
                            other: (Envelope) async -> String? = { _ in nil },
                            _ match: (Envelope) -> T?) async -> Result<T, Failure> {
        let deadline = ContinuousClock.now.advanced(by: time)
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return .failure(Failure("no \(what) on \(name) within \(time)")) }
            switch await receive(within: left) {
            case .envelope(let envelope):
                if let value = match(envelope) { return .success(value) }
                if case .protocolError(let code, let reason) = envelope.body {
                    return .failure(Failure("protocol_error \(code) on \(name) instead of \(what): \(reason)"))
                }
                if let stop = await other(envelope) { return .failure(Failure(stop)) }
            case .end:
                return .failure(Failure("\(name) closed before \(what)"))
            case .timeout:
                return .failure(Failure("no \(what) on \(name) within \(time)"))
            case .failed(let error):
                return .failure(Failure("on \(name): \(error.reason)"))
            }
        }
    }

    /// Why a wait failed.
    struct Failure: Error, Sendable {
        let reason: String
        init(_ reason: String) { self.reason = reason }
    }

    /// Sends a ping and waits for its pong; `nil` when it came.
    func ping(within time: Duration = .seconds(5), other: (Envelope) async -> String? = { _ in nil }) async -> Failure? {
        let id: UInt64
        do { id = try await send(.ping(nonce: 7)) } catch { return Failure("cannot send a ping on \(name): \(error.reason)") }
        switch await self.await(within: time, "pong to ping \(id)", other: other, { envelope in
            if case .pong = envelope.body, envelope.replyTo == id { true } else { nil }
        }) {
        case .success: return nil
        case .failure(let failure): return failure
        }
    }

    /// Waits for the service to refuse what was just sent: a protocol_error (of `code`, when
    /// given), then end of file. `nil` when it did.
    func expectRefusal(_ code: ProtocolErrorCode?, within time: Duration = .seconds(5)) async -> String? {
        let deadline = ContinuousClock.now.advanced(by: time)
        var told: ProtocolErrorCode?
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return "\(name) still open \(time) later" + (told == nil ? ", and no protocol_error" : "") }
            switch await receive(within: left) {
            case .envelope(let envelope):
                switch envelope.body {
                case .protocolError(let got, _):
                    if let code, got != code { return "protocol_error \(got), where the rule says \(code)" }
                    told = got
                case .goodbye(let reason):
                    if told == nil { return "goodbye (\"\(reason)\") instead of protocol_error" }
                default:
                    if told == nil { return "\(envelope.body.name) instead of protocol_error" }
                }
            case .end:
                return told == nil ? "\(name) closed without a protocol_error" : nil
            case .timeout:
                return "\(name) still open \(time) later" + (told == nil ? ", and no protocol_error" : "")
            case .failed(let error):
                return told == nil ? "on \(name): \(error.reason)" : nil
            }
        }
    }

    /// Waits for end of file (whatever comes before it); `nil` when it came.
    func expectClose(within time: Duration = .seconds(5)) async -> String? {
        let deadline = ContinuousClock.now.advanced(by: time)
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return "\(name) still open \(time) later" }
            switch await receive(within: left) {
            case .envelope: continue
            case .end, .failed: return nil
            case .timeout: return "\(name) still open \(time) later"
            }
        }
    }

    /// Shuts the connection (the service sees end of file).
    func close() {
        socket.close()
    }
}
