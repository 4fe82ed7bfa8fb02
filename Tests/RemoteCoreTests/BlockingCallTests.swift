import Glibc
import RemoteTestSupport
import Testing
@testable import RemoteCore

/// Tier 2: ``Connection/requestSync(_:timeout:)`` between two connections over a real socketpair.
@Suite("A blocking call")
struct BlockingCallTests {
    final class Messages: Sendable {
        let texts = Mutex<[String]>([])
        /// The threads the host's request handler ran on.
        let handlerThreads = Mutex<[UInt]>([])
        /// The threads the host's synchronous message handler ran on.
        let messageThreads = Mutex<[UInt]>([])
    }

    /// The service side answers by type: "echo" at once (the synchronous form), "notify" after
    /// three one-way messages, "ask" after asking the host a request of its own, "slow" never
    /// (until cancelled).
    /// With `synchronousMessages`, the host takes one-way messages with the synchronous form.
    func withPair<R: Sendable>(hostMessages: Messages = Messages(), synchronousMessages: Bool = false,
                               slowStarted: Latch<Void> = Latch(), slowCancelled: Latch<Void> = Latch(),
                               _ body: @escaping @Sendable (Connection, Connection) async throws -> R) async throws -> R {
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let hostEnd = pair.first
            let onSynchronousMessage: @Sendable (ServiceMessage, ConnectionContext) -> Bool = { message, _ in
                hostMessages.messageThreads.withLock { $0.append(UInt(pthread_self())) }
                hostMessages.texts.withLock { $0.append("sync \(message.text ?? "")") }
                return true
            }
            let host = Connection(channel: try SeqpacketChannel(hostEnd), configuration: .testHost, responder: .asynchronous({ message, _ in
                hostMessages.handlerThreads.withLock { $0.append(UInt(pthread_self())) }
                return ServiceMessage(type: "answer", text: "host saw \(message.text ?? "")")
            }), onSynchronousMessage: synchronousMessages ? onSynchronousMessage : nil, onMessage: { message, _ in
                hostMessages.texts.withLock { $0.append(message.text ?? "") }
            })
            let service = try Connection(socket: pair.second, configuration: .testService, onSynchronousRequest: { message, _ in
                message.type == "echo" ? message : nil
            }, onRequest: { message, context in
                switch message.type {
                case "notify":
                    for index in 1...3 { try await context.connection.send(ServiceMessage(type: "note", text: "note \(index)")) }
                    return ServiceMessage(type: "done", text: "notified")
                case "ask":
                    let answer = try await context.connection.request(ServiceMessage(type: "question", text: message.text ?? ""))
                    return ServiceMessage(type: "done", text: answer.text ?? "")
                case "slow":
                    slowStarted.open(())
                    do {
                        try await Task.sleep(for: .seconds(3600))
                    } catch {
                        slowCancelled.open(())
                        throw error
                    }
                    return message
                default:
                    throw ServiceFailure.unknownRequest(message.type, handler: "test")
                }
            })
            return try await withThrowingTaskGroup(of: R?.self) { group in
                group.addTask { try await service.run(); return nil }
                let result = try await host.withRunning { host in try await body(host, service) }
                try await group.waitForAll()
                return result
            }
        }
    }

    @Test("a blocking call gets its reply, call after call, and async requests go on beside it")
    func replies() async throws {
        try await withPair { host, _ in
            let outcomes = await onOwnThread {
                (0..<200).map { index in Outcome { () throws(RemoteError) in try host.requestSync(ServiceMessage(type: "echo", text: "hello \(index)")) } }
            }
            #expect(outcomes == (0..<200).map { .reply("hello \($0)") })
            async let blocking = onOwnThread {
                (0..<100).map { index in Outcome { () throws(RemoteError) in try host.requestSync(ServiceMessage(type: "echo", text: "b\(index)")) } }
            }
            for index in 0..<100 {
                let reply = try await host.request(ServiceMessage(type: "echo", text: "a\(index)"))
                #expect(reply.text == "a\(index)")
            }
            #expect(await blocking == (0..<100).map { .reply("b\($0)") })
        }
    }

    @Test("two threads blocking on one connection at once each get their own replies")
    func twoThreads() async throws {
        try await withPair { host, _ in
            async let first = onOwnThread {
                (0..<200).map { index in Outcome { () throws(RemoteError) in try host.requestSync(ServiceMessage(type: "echo", text: "first \(index)")) } }
            }
            async let second = onOwnThread {
                (0..<200).map { index in Outcome { () throws(RemoteError) in try host.requestSync(ServiceMessage(type: "echo", text: "second \(index)")) } }
            }
            #expect(await first == (0..<200).map { .reply("first \($0)") })
            #expect(await second == (0..<200).map { .reply("second \($0)") })
        }
    }

    @Test("what the peer sends while the caller reads is handled in order: messages before the reply, and the peer's own request is answered, by a handler that does not run on the blocked thread")
    func interleaved() async throws {
        let messages = Messages()
        try await withPair(hostMessages: messages) { host, _ in
            let notified = await onOwnThread { Outcome { () throws(RemoteError) in try host.requestSync(ServiceMessage(type: "notify")) } }
            #expect(notified == .reply("notified"))
            #expect(messages.texts.withLock { $0 } == ["note 1", "note 2", "note 3"])
            let (asked, caller) = await onOwnThread {
                (Outcome { () throws(RemoteError) in try host.requestSync(ServiceMessage(type: "ask", text: "why")) }, UInt(pthread_self()))
            }
            #expect(asked == .reply("host saw why"))
            let handlerThreads = messages.handlerThreads.withLock { $0 }
            #expect(handlerThreads.count == 1 && !handlerThreads.contains(caller), "the host's handler ran on \(handlerThreads), the caller is \(caller)")
            // The read side is the loop's again: async traffic still flows.
            let after = try await host.request(ServiceMessage(type: "echo", text: "after"))
            #expect(after.text == "after")
        }
    }

    @Test("a synchronous message handler does not run on the blocked thread either: messages read by the caller reach it on the loop, in order, before the reply")
    func synchronousMessagesWhileBlocked() async throws {
        let messages = Messages()
        try await withPair(hostMessages: messages, synchronousMessages: true) { host, _ in
            for round in 0..<20 {
                let (notified, caller) = await onOwnThread {
                    (Outcome { () throws(RemoteError) in try host.requestSync(ServiceMessage(type: "notify")) }, UInt(pthread_self()))
                }
                #expect(notified == .reply("notified"))
                // Every one to the synchronous handler, none to onMessage (the first one read by
                // the borrowing caller included).
                #expect(messages.texts.withLock { $0 } == (0...round).flatMap { _ in ["sync note 1", "sync note 2", "sync note 3"] })
                #expect(!messages.messageThreads.withLock { $0 }.contains(caller), "round \(round)")
            }
            // From the loop's own reading, the synchronous handler takes them too.
            _ = try await host.request(ServiceMessage(type: "notify"))
            #expect(messages.texts.withLock { $0.suffix(3) } == ["sync note 1", "sync note 2", "sync note 3"])
        }
    }

    @Test("a blocking call times out at its deadline, the peer's handler is cancelled, and the next call works")
    func timeout() async throws {
        let slowCancelled = Latch<Void>()
        try await withPair(slowCancelled: slowCancelled) { host, _ in
            let start = ContinuousClock.now
            let late = await onOwnThread { Outcome { () throws(RemoteError) in try host.requestSync(ServiceMessage(type: "slow"), timeout: .milliseconds(200)) } }
            #expect(late == .error(.timeout))
            #expect(ContinuousClock.now - start >= .milliseconds(200))
            // The host sent a cancel: the service's handler was cancelled.
            try await slowCancelled.wait(until: .now.advanced(by: .seconds(10)))
            let next = await onOwnThread { Outcome { () throws(RemoteError) in try host.requestSync(ServiceMessage(type: "echo", text: "next"), timeout: .seconds(5)) } }
            #expect(next == .reply("next"))
            let failed = await onOwnThread { Outcome { () throws(RemoteError) in try host.requestSync(ServiceMessage(type: "unknown")) } }
            #expect(failed == .error(.remoteError))
        }
    }

    @Test("called on the event loop's thread, a blocking call fails at once with a clear error instead of waiting for itself")
    func onTheLoop() async throws {
        try await withPair { host, _ in
            let error = await onOwnThread {
                EventLoop.shared.runAndWait { () -> RemoteError? in
                    do {
                        _ = try host.requestSync(ServiceMessage(type: "echo", text: "x"))
                        return nil
                    } catch {
                        return error as? RemoteError
                    }
                }
            }
            #expect(error?.code == .invalidArgument)
            #expect(error?.reason.contains("event loop thread") == true, "\(String(describing: error))")
        }
    }

    @Test("closing the connection while a thread blocks in a call fails the call with invalidated")
    func closedWhileBlocked() async throws {
        let slowStarted = Latch<Void>()
        try await withPair(slowStarted: slowStarted) { host, _ in
            async let blocked = onOwnThread { Outcome { () throws(RemoteError) in try host.requestSync(ServiceMessage(type: "slow"), timeout: .seconds(60)) } }
            // The request has reached the service once its handler runs: then close.
            try await slowStarted.wait(until: .now.advanced(by: .seconds(10)))
            await host.close(reason: "test closes")
            #expect(await blocked == .error(.invalidated))
        }
    }

    @Test("the peer vanishing while a thread blocks in a call fails it with interrupted, and nothing leaks")
    func vanishingPeer() async throws {
        let outcome = try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let hostEnd = pair.first
            let peer = try SeqpacketSocket(pair.second)
            try rawSend(peer.fd, HostileConnectionTests.handshake())
            let host = try Connection(socket: hostEnd, configuration: Connection.Configuration.testHost)
            return try await withThrowingTaskGroup(of: Void.self) { group -> Outcome? in
                group.addTask { try? await host.run() }
                _ = try await host.peerHandshake()
                async let blocked = onOwnThread { Outcome { () throws(RemoteError) in try host.requestSync(ServiceMessage(type: "never answered")) } }
                // The peer sees the host's handshake, then the request, then vanishes.
                _ = try await peer.receive()
                let sent = try await peer.receive()
                guard case .request = sent?.body else { return nil }
                peer.close()
                return await blocked
            }
        }
        #expect(outcome == .error(.interrupted))
    }
}
