import struct Synchronization.Atomic
import Testing
import RemoteTestSupport
@testable import RemoteCore

/// The embedded tier: a connection's whole pipeline (framer, handler, state machine) driven on a
/// ``ManualLoop`` over an ``InMemoryChannel``, with no socket, no thread of its own and no clock
/// (the loop's clock moves only when a test moves it). A test pushes the peer's packets in, runs
/// the loop, and reads the packets that came out. Like SwiftNIO's `EmbeddedChannel`.
@Suite("Embedded: the connection pipeline on a manual loop")
struct EmbeddedConnectionTests {
    static let service = Handshake(role: .service, identifier: "com.example.service", capabilities: ["echo"])

    /// A host connection whose channel has no peer: what it writes collects in the channel.
    final class Rig: Sendable {
        let loop = ManualLoop()
        let channel: InMemoryChannel
        let connection: Connection
        /// The id of the next envelope the test pushes as the peer.
        private let nextID = Atomic<UInt64>(1)

        convenience init(configuration: Connection.Configuration = .testHost,
                         onRequest: @escaping Connection.RequestHandler = Connection.refuseRequests,
                         onMessage: @escaping Connection.MessageHandler = { _, _ in }) {
            self.init(configuration: configuration, responder: .asynchronous(onRequest), onMessage: onMessage)
        }

        /// A rig whose connection has the package-level handlers: a responder (a synchronous
        /// request handler first, when it has one) and a synchronous message handler.
        init(configuration: Connection.Configuration, responder: RequestResponder,
             onSynchronousMessage: (@Sendable (ServiceMessage, ConnectionContext) -> Bool)? = nil,
             onMessage: @escaping Connection.MessageHandler = { _, _ in }) {
            channel = InMemoryChannel(loop: loop)
            connection = Connection(channel: channel, configuration: configuration, responder: responder,
                                    onSynchronousMessage: onSynchronousMessage, onMessage: onMessage)
        }

        /// Waits until a task of the test hands work to the loop, then runs the loop until idle.
        func turn() async throws {
            try await loop.waitForWork()
            loop.run()
        }

        /// The peer writes `body` (numbered in order, unless `id` is given).
        func push(_ body: Envelope.Body, id: UInt64? = nil, replyTo: UInt64? = nil) throws {
            let id = id ?? nextID.add(1, ordering: .relaxed).oldValue
            try pushBytes(EnvelopeCodec.encode(Envelope(id: id, replyTo: replyTo, body: body)))
        }

        /// The peer writes `bytes`, whatever they are.
        func pushBytes(_ bytes: [UInt8]) {
            let channel = self.channel
            loop.execute { channel.push(bytes) }
            loop.run()
        }

        /// The peer closes its end.
        func pushEndOfFile() {
            let channel = self.channel
            loop.execute { channel.pushEndOfFile() }
            loop.run()
        }

        /// What the connection wrote since the last call, decoded.
        func written() throws -> [Envelope] {
            let channel = self.channel
            let packets = Mutex<[OutboundPacket]>([])
            loop.execute { packets.withLock { $0 = channel.takeWritten() } }
            loop.run()
            return try packets.withLock { $0 }.map { packet in
                try packet.bytes.withUnsafeBytes { bytes throws(RemoteError) in try EnvelopeCodec.decode(bytes, attachments: []) }
            }
        }

        /// Starts the connection and answers its handshake; returns the task running it.
        func open() async throws -> Task<RemoteError?, Never> {
            let connection = self.connection
            let running = Task { () -> RemoteError? in
                do throws(RemoteError) { try await connection.run(); return nil } catch { return error }
            }
            try await turn()
            try push(.handshake(EmbeddedConnectionTests.service))
            return running
        }
    }

    @Test("the handshake goes first, what was sent before run() follows it, ids increase from 1 in write order, and the peer's handshake opens the connection")
    func handshakeFirst() async throws {
        let rig = Rig()
        let connection = rig.connection
        // Sent before run(): kept until this side's handshake is written.
        try await connection.send(ServiceMessage(type: "early"))
        rig.loop.run()
        #expect(try rig.written().isEmpty, "nothing is written before run()")
        let running = Task { try await connection.run() }
        try await rig.turn()
        let first = try rig.written()
        #expect(first.map(\.body.name) == ["handshake", "message"])
        #expect(first.map(\.id) == [1, 2])
        guard case .handshake(let ours) = first.first?.body else { Issue.record("no handshake"); return }
        #expect(ours.role == .host && ours.maxProtocolVersion == remoteViewLatestProtocolVersion)
        let events = Task { () -> [String] in
            var names: [String] = []
            for await event in connection.events {
                switch event {
                case .connected: names.append("connected")
                case .closed(let error): names.append("closed \(error.map { "\($0.code)" } ?? "in order")")
                }
            }
            return names
        }
        try rig.push(.handshake(Self.service))
        #expect(connection.peer == Self.service)
        #expect(try await connection.peerHandshake() == Self.service, "open: no hop onto the loop")
        let closing = Task { await connection.close(reason: "done") }
        try await rig.turn()
        await closing.value
        guard case .goodbye(let reason) = try rig.written().last?.body else { Issue.record("no goodbye"); return }
        #expect(reason == "done")
        try await running.value
        #expect(await events.value == ["connected", "closed in order"])
    }

    @Test("a request asked before run() is kept for after the handshake; cancelled meanwhile, it fails at once and is never written")
    func earlyRequestCancelled() async throws {
        let rig = Rig()
        let connection = rig.connection
        let request = Task { try await connection.request(ServiceMessage(type: "early")) }
        try await rig.turn()
        request.cancel()
        try await rig.turn()
        let error = await #expect(throws: RemoteError.self) { try await request.value }
        #expect(error?.code == .cancelled && error?.reason.contains("before it was sent") == true, "\(String(describing: error))")
        let running = Task { try await connection.run() }
        try await rig.turn()
        #expect(try rig.written().map(\.body.name) == ["handshake"])
        running.cancel()
        try await rig.turn()
        try await running.value
    }

    @Test("a request's reply resumes its caller; the peer's ping is answered on the loop with no task; a reply to an id never sent ends the connection as a violation, told to the peer")
    func requestsAndPings() async throws {
        let rig = Rig()
        let running = try await rig.open()
        let connection = rig.connection
        let request = Task { try await connection.request(ServiceMessage(type: "echo", text: "hi")) }
        try await rig.turn()
        let sent = try rig.written()
        #expect(sent.map(\.body.name) == ["handshake", "request"])
        let id = try #require(sent.last?.id)
        try rig.push(.reply(type: "echo", payload: Array("hi".utf8)), replyTo: id)
        #expect(try await request.value.text == "hi")

        try rig.push(.ping(nonce: 7))
        let pong = try rig.written()
        #expect(pong.map(\.body.name) == ["pong"] && pong.first?.replyTo != nil)

        try rig.push(.reply(type: "echo", payload: []), replyTo: 99)
        let told = try rig.written()
        guard case .protocolError(let code, let reason) = told.last?.body else { Issue.record("no protocol error: \(told)"); return }
        #expect(code == .malformed && reason.contains("never sent"))
        let outcome = await running.value
        #expect(outcome?.code == .protocolViolation && outcome?.reason.contains("reply to envelope 99, which was never sent") == true)
        let after = await #expect(throws: RemoteError.self) { try await connection.send(ServiceMessage(type: "late")) }
        #expect(after?.code == .protocolViolation, "later calls see how it ended")
    }

    @Test("deadlines follow the loop's clock: a request times out when the clock passes its deadline (the peer is sent a cancel, a late reply is dropped), and a peer that never handshakes times out the connection")
    func deadlines() async throws {
        let rig = Rig()
        let running = try await rig.open()
        let connection = rig.connection
        let request = Task { try await connection.request(ServiceMessage(type: "slow"), timeout: .seconds(5)) }
        try await rig.turn()
        let id = try #require(try rig.written().last?.id)
        rig.loop.advance(by: .seconds(4))
        #expect(try rig.written().isEmpty, "not yet")
        rig.loop.advance(by: .seconds(1))
        let error = await #expect(throws: RemoteError.self) { try await request.value }
        #expect(error?.code == .timeout && error?.reason.contains("no reply to request \"slow\" within 5") == true)
        let cancel = try rig.written()
        guard case .cancel(let cancelled) = cancel.last?.body else { Issue.record("no cancel: \(cancel)"); return }
        #expect(cancelled == id)
        try rig.push(.reply(type: "slow", payload: []), replyTo: id)
        #expect(!connection.isClosed, "a late reply is dropped")
        #expect(rig.loop.scheduledTimers == 0, "no deadline left behind")
        running.cancel()
        try await rig.turn()
        #expect(await running.value == nil, "cancelling run() closes in order")

        let silent = Rig()
        let waiting = Task { () -> RemoteError? in
            do throws(RemoteError) { try await silent.connection.run(); return nil } catch { return error }
        }
        try await silent.turn()
        silent.loop.advance(by: .seconds(5))
        let outcome = await waiting.value
        #expect(outcome?.code == .timeout && outcome?.reason.contains("no handshake within 5") == true)
    }

    @Test("request deadlines share one loop timer: ten requests with equal timeouts schedule one, none per request; answered, nothing is left; a later request with a shorter timeout still times out first")
    func deadlinesShareOneTimer() async throws {
        let rig = Rig()
        let running = try await rig.open()
        let connection = rig.connection
        let timersBefore = rig.loop.scheduledTimers
        let requests = (0..<10).map { index in
            Task { try await connection.request(ServiceMessage(type: "r\(index)"), timeout: .seconds(5)) }
        }
        try await rig.turn()
        let ids = try rig.written().compactMap { envelope -> UInt64? in
            if case .request = envelope.body { envelope.id } else { nil }
        }
        #expect(ids.count == 10)
        #expect(rig.loop.scheduledTimers == timersBefore + 1, "one timer for ten deadlines")
        for id in ids { try rig.push(.reply(type: "ok", payload: []), replyTo: id) }
        for request in requests { #expect(try await request.value.type == "ok") }
        rig.loop.advance(by: .seconds(5))
        #expect(rig.loop.scheduledTimers == timersBefore, "the timer came due with nothing to time out, and is not armed again")

        let long = Task { try await connection.request(ServiceMessage(type: "long"), timeout: .seconds(10)) }
        try await rig.turn()
        let short = Task { try await connection.request(ServiceMessage(type: "short"), timeout: .seconds(2)) }
        try await rig.turn()
        _ = try rig.written()
        rig.loop.advance(by: .seconds(2))
        let shortError = await #expect(throws: RemoteError.self) { try await short.value }
        #expect(shortError?.code == .timeout)
        rig.loop.advance(by: .seconds(7))
        #expect(rig.loop.scheduledTimers == timersBefore + 1, "the long one still waits")
        rig.loop.advance(by: .seconds(1))
        let longError = await #expect(throws: RemoteError.self) { try await long.value }
        #expect(longError?.code == .timeout)
        #expect(rig.loop.scheduledTimers == timersBefore)
        // Behind a request that waits long, answered ones do not pile up without bound.
        let slow = Task { try await connection.request(ServiceMessage(type: "slow"), timeout: .seconds(60)) }
        try await rig.turn()
        _ = try rig.written()
        for round in 0..<5 {
            let quick = (0..<100).map { index in
                Task { try await connection.request(ServiceMessage(type: "q\(round).\(index)"), timeout: .seconds(60)) }
            }
            try await rig.turn()
            for envelope in try rig.written() { try rig.push(.reply(type: "ok", payload: []), replyTo: envelope.id) }
            for request in quick { _ = try await request.value }
        }
        let length = Task { await connection.deadlineQueueLength() }
        try await rig.turn()
        let entries = await length.value.all
        #expect(entries <= 1 + 64 + 100, "swept: \(entries) entries for 1 waiting request after 500 answered")
        slow.cancel()
        try await rig.turn()
        _ = try? await slow.value
        running.cancel()
        try await rig.turn()
        _ = await running.value
    }

    @Test("deadlines out of order share the one timer too: twenty requests with shuffled timeouts go to the timer wheel, and each times out at its own deadline, not before")
    func deadlinesOutOfOrder() async throws {
        let rig = Rig()
        let running = try await rig.open()
        let connection = rig.connection
        let timersBefore = rig.loop.scheduledTimers
        let seconds = [7, 3, 12, 1, 9, 4, 15, 2, 11, 6, 14, 5, 8, 13, 10, 20, 16, 19, 17, 18]
        var requests: [(seconds: Int, task: Task<ServiceMessage, any Error>)] = []
        for timeout in seconds {
            requests.append((timeout, Task { try await connection.request(ServiceMessage(type: "t\(timeout)"), timeout: .seconds(timeout)) }))
            try await rig.turn()  // sent in this order
        }
        _ = try rig.written()
        #expect(rig.loop.scheduledTimers == timersBefore + 1, "one timer for twenty deadlines")
        let queued = Task { await connection.deadlineQueueLength() }
        try await rig.turn()
        let length = await queued.value
        #expect(length.all == 20 && length.inWheel > 0, "\(length)")
        for second in 1...20 {
            rig.loop.advance(by: .milliseconds(999))
            let early = requests.filter { $0.seconds == second }
            #expect(try rig.written().isEmpty, "nothing is cancelled before \(second) s")
            rig.loop.advance(by: .milliseconds(1))
            for request in early {
                let error = await #expect(throws: RemoteError.self) { try await request.task.value }
                #expect(error?.code == .timeout && error?.reason.contains("within \(second)") == true)
            }
            let cancels = try rig.written()
            #expect(cancels.count == 1, "one cancel at \(second) s")
        }
        #expect(rig.loop.scheduledTimers == timersBefore, "nothing left behind")
        running.cancel()
        try await rig.turn()
        _ = await running.value
    }

    @Test("garbage, an id that does not increase and a second handshake each end the connection with the code the peer is told")
    func violations() async throws {
        for (name, bad, code) in [("garbage", [UInt8]([0xFF, 0xFF, 0xFF]), ProtocolErrorCode.malformed),
                                  ("old id", try EnvelopeCodec.encode(Envelope(id: 1, body: .ping(nonce: 0))), .malformed),
                                  ("handshake", try EnvelopeCodec.encode(Envelope(id: 9, body: .handshake(Self.service))), .unexpected)] {
            let rig = Rig()
            let running = try await rig.open()
            _ = try rig.written()
            rig.pushBytes(bad)
            guard case .protocolError(let told, _) = try rig.written().last?.body else { Issue.record("\(name): not told"); continue }
            #expect(told == code, "\(name)")
            #expect(await running.value?.code == .protocolViolation, "\(name)")
            #expect(rig.connection.isClosed)
        }
    }

    @Test("a message handler that suspends holds back what came after it: the next is delivered once it returns, in order")
    func orderWhileSuspended() async throws {
        let gate = Gate()
        let seen = Mutex<[String]>([])
        let rig = Rig(onMessage: { message, _ in
            seen.withLock { $0.append(message.type) }
            if message.type == "first" { await gate.wait() }
        })
        let running = try await rig.open()
        try rig.push(.message(type: "first", payload: []))
        try rig.push(.message(type: "second", payload: []))
        #expect(seen.withLock { $0 } == ["first"], "the second waits behind the first")
        gate.open()
        try await rig.turn()
        #expect(seen.withLock { $0 } == ["first", "second"])
        try rig.push(.goodbye(reason: "bye"))
        #expect(await running.value == nil, "a goodbye ends in order")
        #expect(rig.connection.peerGoodbyeReason == "bye")
    }

    @Test("a request that came behind messages waiting for a slow handler is handled after all of them, not before the ones that came with it")
    func requestBehindMessages() async throws {
        let gate = Gate()
        let seen = Mutex<[String]>([])
        let rig = Rig(configuration: .testService, onRequest: { message, _ in
            seen.withLock { $0.append("request \(message.type)") }
            return ServiceMessage(type: message.type)
        }, onMessage: { message, _ in
            seen.withLock { $0.append(message.type) }
            if message.type == "slow" { await gate.wait() }
        })
        let running = Task { () -> RemoteError? in
            do throws(RemoteError) { try await rig.connection.run(); return nil } catch { return error }
        }
        try await rig.turn()
        try rig.push(.handshake(Handshake(role: .host, identifier: "com.example.host")))
        try rig.push(.message(type: "slow", payload: []))
        for type in ["a", "b", "c"] { try rig.push(.message(type: type, payload: [])) }
        try rig.push(.request(type: "state", payload: []))
        #expect(seen.withLock { $0 } == ["slow"])
        gate.open()
        try await rig.turn()
        #expect(seen.withLock { $0 } == ["slow", "a", "b", "c", "request state"])
        #expect(try rig.written().map(\.body.name) == ["handshake", "reply"])
        rig.pushEndOfFile()
        #expect(await running.value?.code == .interrupted)
    }

    @Test("the peer's requests: a handler that answers at once replies in the same round; one cancelled by the peer is cancelled; the end of the connection waits for running handlers")
    func incoming() async throws {
        let rig = Rig(configuration: .testService, onRequest: { message, _ in
            if message.type == "wait" {
                try await Task.sleep(for: .seconds(3600))
            }
            return ServiceMessage(type: message.type, text: "done")
        })
        let running = Task { () -> RemoteError? in
            do throws(RemoteError) { try await rig.connection.run(); return nil } catch { return error }
        }
        try await rig.turn()
        try rig.push(.handshake(Handshake(role: .host, identifier: "com.example.host")))
        _ = try rig.written()
        try rig.push(.request(type: "now", payload: []))
        let reply = try rig.written()
        #expect(reply.map(\.body.name) == ["reply"], "answered in the round that read it")
        try rig.push(.request(type: "wait", payload: []), id: 10)
        try rig.push(.cancel(requestID: 10), id: 11)
        try await rig.turn()
        let afterCancel = try rig.written()
        #expect(afterCancel.isEmpty, "a cancelled handler sends nothing: \(afterCancel)")
        rig.pushEndOfFile()
        #expect(await running.value?.code == .interrupted)
    }

    @Test("a synchronous handler answers inline, in the round that read the request: replies and failures for a batch are written together; what it leaves (nil) goes to the async handler, and it is not asked again")
    func synchronousHandler() async throws {
        let asked = Mutex<[String]>([])
        let rig = Rig(configuration: .testService, responder: .synchronous({ message, _ in
            asked.withLock { $0.append(message.type) }
            switch message.type {
            case "fail": throw ServiceFailure(domain: "test", code: 7, message: "no")
            case "later": return nil
            default: return ServiceMessage(type: message.type, payload: message.payload)
            }
        }, then: { message, _ in
            asked.withLock { $0.append("async \(message.type)") }
            return ServiceMessage(type: "later-done")
        }))
        let running = Task { () -> RemoteError? in
            do throws(RemoteError) { try await rig.connection.run(); return nil } catch { return error }
        }
        try await rig.turn()
        let loop = rig.loop, channel = rig.channel
        /// Queued, not run: what is pushed before the next `loop.run()` is read in one round.
        func push(_ body: Envelope.Body, id: UInt64) throws {
            let bytes = try EnvelopeCodec.encode(Envelope(id: id, body: body))
            loop.execute { channel.push(bytes) }
        }
        try push(.handshake(Handshake(role: .host, identifier: "com.example.host")), id: 1)
        loop.run()
        _ = try rig.written()
        // Three requests read in one round: both answers are written in that round, in order.
        try push(.request(type: "a", payload: [1]), id: 2)
        try push(.request(type: "fail", payload: []), id: 3)
        try push(.request(type: "b", payload: [2]), id: 4)
        loop.run()
        let answers = try rig.written()
        #expect(answers.map(\.body.name) == ["reply", "failure", "reply"])
        #expect(answers.map(\.replyTo) == [2, 3, 4])
        if case .failure(let failure) = answers[1].body { #expect(failure.code == 7) } else { Issue.record("expected a failure") }
        // A cancel of a request answered inline finds nothing: no second answer.
        try push(.request(type: "c", payload: []), id: 5)
        try push(.cancel(requestID: 5), id: 6)
        loop.run()
        #expect(try rig.written().map(\.replyTo) == [5])
        // Left to the async handler: answered from its task (which starts at once and does not
        // suspend here), and asked of the synchronous one once.
        try push(.request(type: "later", payload: []), id: 7)
        loop.run()
        let later = try rig.written()
        #expect(later.map(\.body.name) == ["reply"] && later.first?.replyTo == 7)
        #expect(asked.withLock { $0 } == ["a", "fail", "b", "c", "later", "async later"])
        rig.pushEndOfFile()
        #expect(await running.value?.code == .interrupted)
    }

    @Test("a synchronous message handler takes messages inline, in order; one it leaves (false) goes to the async handler, and those after it wait behind it, then come to the synchronous one again")
    func synchronousMessages() async throws {
        let seen = Mutex<[String]>([])
        let gate = Gate()
        let rig = Rig(configuration: .testService, responder: .asynchronous(Connection.refuseRequests), onSynchronousMessage: { message, _ in
            seen.withLock { $0.append("sync \(message.type)") }
            return message.type != "later"
        }, onMessage: { message, _ in
            seen.withLock { $0.append("async \(message.type)") }
            await gate.wait()
        })
        let running = Task { () -> RemoteError? in
            do throws(RemoteError) { try await rig.connection.run(); return nil } catch { return error }
        }
        try await rig.turn()
        try rig.push(.handshake(Handshake(role: .host, identifier: "com.example.host")))
        try rig.push(.message(type: "a", payload: []))
        #expect(seen.withLock { $0 } == ["sync a"], "taken as it was read")
        for type in ["later", "b", "c"] { try rig.push(.message(type: type, payload: [])) }
        #expect(seen.withLock { $0 } == ["sync a", "sync later", "async later"], "b and c wait behind the handler that suspended")
        gate.open()
        for _ in 0..<50 where seen.withLock({ $0.count }) < 5 { try await rig.turn() }
        #expect(seen.withLock { $0 } == ["sync a", "sync later", "async later", "sync b", "sync c"])
        // The delivery task idle again: the next one is taken inline as it is read.
        try rig.push(.message(type: "d", payload: []))
        #expect(seen.withLock { $0.last } == "sync d")
        rig.pushEndOfFile()
        #expect(await running.value?.code == .interrupted)
    }

    @Test("two connections over an in-memory pair talk on one manual loop: a request and its reply, a message, a goodbye")
    func pair() async throws {
        let loop = ManualLoop()
        let (hostSide, serviceSide) = InMemoryChannel.pair(loop: loop)
        let received = Mutex<[String]>([])
        let host = Connection(channel: hostSide, configuration: .testHost)
        let service = Connection(channel: serviceSide, configuration: .testService,
                                 onRequest: { message, _ in ServiceMessage(type: message.type, text: "echo: \(message.text ?? "")") },
                                 onMessage: { message, _ in received.withLock { $0.append(message.type) } })
        // One step at a time: each hands the loop one piece of work, which one run carries through.
        let serving = Task { try await service.run() }
        try await loop.waitForWork()
        loop.run()
        let hosting = Task { try await host.run() }
        try await loop.waitForWork()
        loop.run()
        #expect(host.peer?.identifier == "com.example.service" && service.peer?.identifier == "com.example.host")
        let reply = Task { try await host.request(ServiceMessage(type: "echo", text: "hello")) }
        try await loop.waitForWork()
        loop.run()
        #expect(try await reply.value.text == "echo: hello")
        try await host.send(ServiceMessage(type: "note"))
        loop.run()
        #expect(received.withLock { $0 } == ["note"])
        let closing = Task { await host.close(reason: "done") }
        try await loop.waitForWork()
        loop.run()
        await closing.value
        try await hosting.value
        try await serving.value
        #expect(service.peerGoodbyeReason == "done")
    }
}

/// Lets a test hold a handler until it opens.
final class Gate: Sendable {
    private let state = Mutex<(open: Bool, waiting: [UnsafeContinuation<Void, Never>])>((false, []))

    func wait() async {
        await withUnsafeContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.open { return true }
                state.waiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    func open() {
        let waiting = state.withLock { state in
            state.open = true
            defer { state.waiting = [] }
            return state.waiting
        }
        for continuation in waiting { continuation.resume() }
    }
}
