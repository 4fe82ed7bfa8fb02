import Glibc
import RemoteTestSupport
import Testing
@testable import RemoteCore

/// Tier 2: two connections over a real socketpair inside this process.
@Suite("Connection over a socketpair")
struct ConnectionTests {
    /// A host connection and a service connection on the two ends of a socketpair, both running
    /// while `body` uses the host side; checks that nothing leaked afterwards.
    func withPair<R: Sendable>(onRequest: @escaping Connection.RequestHandler = { message, _ in message },
                               onMessage: @escaping Connection.MessageHandler = { _, _ in },
                               _ body: @escaping @Sendable (Connection, Connection) async throws -> R) async throws -> R {
        let result = try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let hostEnd = pair.first
            let host = try Connection(socket: hostEnd, configuration: .testHost)
            let service = try Connection(socket: pair.second, configuration: .testService,
                                         onRequest: onRequest, onMessage: onMessage)
            return try await withThrowingTaskGroup(of: R?.self) { group in
                group.addTask { try await service.run(); return nil }
                let result = try await host.withRunning { host in try await body(host, service) }
                try await group.waitForAll()
                return result
            }
        }
        return result
    }

    @Test("handshake exchanges identity, then request/reply round-trips")
    func requestReply() async throws {
        try await withPair { host, _ in
            let peer = try #require(host.peer)
            #expect(peer.role == .service)
            #expect(peer.identifier == "com.example.service")
            #expect(peer.capabilities == ["echo"])
            #expect(peer.protocolVersion == remoteViewProtocolVersion)
            for index in 0..<50 {
                let reply = try await host.request(ServiceMessage(type: "echo", text: "hello \(index)"))
                #expect(reply.type == "echo")
                #expect(reply.text == "hello \(index)")
            }
            #expect(try await host.ping() > .zero)
        }
    }

    @Test("concurrent requests are matched to their replies by id, whatever order the replies come in")
    func concurrentRequests() async throws {
        // The handler of request n answers only once the host has received the reply to n + 1,
        // so the replies arrive in the reverse of the requests' order: no sleeping, and the
        // order certainly changes.
        let count = 20
        let received = (0..<count).map { _ in Latch<Void>() }
        final class Answers: Sendable { let order = Mutex<[Int]>([]) }
        let answered = Answers()
        try await withPair(onRequest: { message, _ in
            let index = Int(message.text ?? "0")!
            if index + 1 < count { try await received[index + 1].wait() }
            return message
        }) { host, _ in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<count {
                    group.addTask {
                        let reply = try await host.request(ServiceMessage(type: "n", text: String(index)))
                        #expect(reply.text == String(index))
                        answered.order.withLock { $0.append(index) }
                        received[index].open(())
                    }
                }
                try await group.waitForAll()
            }
        }
        let order = answered.order.withLock { $0 }
        #expect(order == Array((0..<count).reversed()), "the replies came in the reverse order: \(order)")
    }

    @Test("a memfd attached to a request arrives sealed with its contents; one comes back in the reply")
    func fdPassing() async throws {
        try await withPair(onRequest: { message, _ in
            guard let fd = message.attachments.first?.take() else { throw ServiceFailure(domain: "test", code: 1, message: "no fd") }
            let file = MemoryFile(adopting: fd)
            let seals = try file.seals
            #expect(seals.contains([.shrink, .grow, .write]))
            let contents = try file.read(count: try file.size)
            let answer = try MemoryFile.sealed(name: "answer", contents: contents.reversed())
            return ServiceMessage(type: "reversed", attachments: [Attachment(answer.takeDescriptor())])
        }) { host, _ in
            let bytes = Array("shared through a sealed memfd".utf8)
            let file = try MemoryFile.sealed(name: "item", contents: bytes)
            let reply = try await host.request(ServiceMessage(type: "reverse", attachments: [Attachment(file.takeDescriptor())]))
            #expect(reply.attachments.count == 1)
            guard let fd = reply.attachments[0].take() else { Issue.record("reply fd was already taken"); return }
            let answer = MemoryFile(adopting: fd)
            #expect(try answer.read(count: 1_000) == bytes.reversed())
        }
    }

    @Test("the peer's ServiceFailure arrives as a remote error with its domain and code")
    func remoteFailure() async throws {
        try await withPair(onRequest: { _, _ in
            throw ServiceFailure(domain: "com.example.service", code: 7, message: "nope")
        }) { host, _ in
            let error = await #expect(throws: RemoteError.self) { try await host.request(ServiceMessage(type: "x")) }
            #expect(error?.code == .remoteError)
            #expect(error?.remote == ServiceFailure(domain: "com.example.service", code: 7, message: "nope"))
        }
    }

    @Test("a request nobody handles is answered in the framework's domain, code 1 (unknown request), naming the type")
    func unknownRequest() async throws {
        try await withPair(onRequest: Connection.refuseRequests) { host, _ in
            let error = await #expect(throws: RemoteError.self) { try await host.request(ServiceMessage(type: "com.example.nothing")) }
            #expect(error?.remote?.domain == "RemoteView" && error?.remote?.code == 1, "\(String(describing: error))")
            #expect(error?.remote?.isUnknownRequest == true)
            #expect(error?.remote?.message.contains(#"no request of type "com.example.nothing""#) == true)
        }
    }

    @Test("cancelling the requesting task fails it with cancelled and cancels the peer's handler")
    func cancellation() async throws {
        let started = AsyncStream.makeStream(of: Void.self)
        let handlerCancelled = AsyncStream.makeStream(of: Bool.self)
        try await withPair(onRequest: { message, _ in
            started.continuation.yield()
            do {
                try await Task.sleep(for: .seconds(60))
            } catch {
                handlerCancelled.continuation.yield(Task.isCancelled)
                throw error
            }
            return message
        }) { host, _ in
            let request = Task { try await host.request(ServiceMessage(type: "slow"), timeout: nil) }
            var startedIterator = started.stream.makeAsyncIterator()
            _ = await startedIterator.next()
            request.cancel()
            let error = await #expect(throws: RemoteError.self) { try await request.value }
            #expect(error?.code == .cancelled)
            var cancelledIterator = handlerCancelled.stream.makeAsyncIterator()
            #expect(await cancelledIterator.next() == true)
            // The connection still works afterwards.
            let roundTrip = try await host.ping()
            #expect(roundTrip > .zero)
        }
    }

    @Test("a reply that misses its deadline fails with timeout; the peer's handler is cancelled")
    func deadline() async throws {
        let handlerCancelled = AsyncStream.makeStream(of: Void.self)
        try await withPair(onRequest: { message, _ in
            do { try await Task.sleep(for: .seconds(60)) } catch {
                handlerCancelled.continuation.yield()
                throw error
            }
            return message
        }) { host, _ in
            let error = await #expect(throws: RemoteError.self) {
                try await host.request(ServiceMessage(type: "slow"), timeout: .milliseconds(50))
            }
            #expect(error?.code == .timeout)
            #expect(error?.reason.contains("slow") == true)
            var iterator = handlerCancelled.stream.makeAsyncIterator()
            #expect(await iterator.next() != nil)
        }
    }

    @Test("one-way messages arrive in order")
    func oneWayMessages() async throws {
        let received = AsyncStream.makeStream(of: String.self)
        try await withPair(onMessage: { message, _ in received.continuation.yield(message.text ?? "") }) { host, _ in
            for index in 0..<100 { try await host.send(ServiceMessage(type: "note", text: String(index))) }
            var iterator = received.stream.makeAsyncIterator()
            for index in 0..<100 { #expect(await iterator.next() == String(index)) }
        }
    }

    /// A host whose handler of message "1" holds the delivery task until `release` opens, and a
    /// service that never answers requests. The host sends one request; the service sends
    /// `texts`, then closes (goodbye and end of file), all behind the held handler. `body` runs
    /// once the request has failed with that end (the peer's end, seen), and must open
    /// `release`. Returns what the host's message handler received by the time both
    /// connections ended; checks that nothing leaked.
    func endBehindAHeldHandler(sending texts: [String],
                               _ body: @escaping @Sendable (_ host: Connection, _ request: Result<ServiceMessage, any Error>,
                                                            _ received: @Sendable () -> [String], _ release: Latch<Void>) async throws -> Void) async throws -> [String] {
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let received = Mutex<[String]>([])
            let holding = Latch<Void>(), release = Latch<Void>(), never = Latch<Void>()
            let host = try Connection(socket: pair.first, configuration: .testHost, onMessage: { message, _ in
                received.withLock { $0.append(message.text ?? "") }
                guard message.text == "1" else { return }
                _ = holding.open(())
                try? await release.wait()
            })
            // A service that never answers requests: its handler waits until it is cancelled.
            let service = try Connection(socket: pair.second, configuration: .testService, onRequest: { _, _ in
                try await never.wait()
                return ServiceMessage(type: "never")
            })
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await host.run() }
                group.addTask { try await service.run() }
                _ = try await host.peerHandshake()
                let request = Task { try await host.request(ServiceMessage(type: "unanswered")) }
                for text in texts { try await service.send(ServiceMessage(type: "note", text: text)) }
                // The handler of "1" holds the delivery task; the rest, the goodbye and the end of
                // file arrive behind it.
                try await withDeadline(.seconds(10), "the first message") { try await holding.wait() }
                await service.close(reason: "done")
                let result = try await withDeadline(.seconds(10), "the request's failure") { await request.result }
                try await body(host, result, { received.withLock { $0 } }, release)
                _ = release.open(())  // in case `body` returned early
                try await group.waitForAll()
            }
            return received.withLock { $0 }
        }
    }

    @Test("what the peer sent before it closed is delivered in order, even while a handler holds the delivery task at its end of file; a request waiting for it fails at once (no answer can come), and run() returns after the deliveries")
    func deliveredBeforeTheEnd() async throws {
        let received = try await endBehindAHeldHandler(sending: ["1", "2", "3"]) { host, request, received, release in
            guard case .failure(let error as RemoteError) = request else { Issue.record("\(request)"); return }
            #expect(error.code == .interrupted, "\(error)")
            #expect(received() == ["1"], "the rest waits for the handler")
            // Nothing more goes to a peer that has gone: a send says so.
            let late = await #expect(throws: RemoteError.self) { try await host.send(ServiceMessage(type: "late")) }
            #expect(late?.code == .interrupted, "\(String(describing: late))")
            _ = release.open(())
        }
        #expect(received == ["1", "2", "3"])
    }

    @Test("this side's close while the peer's last messages wait behind a handler ends the connection at once: what waits is dropped, run() returns")
    func closeCutsTheEndShort() async throws {
        let received = try await endBehindAHeldHandler(sending: ["1", "2"]) { host, _, _, release in
            await host.close(reason: "the host is done")
            _ = release.open(())
        }
        #expect(received == ["1"], "what waited behind the handler was dropped by this side's close")
    }

    @Test("closing says goodbye: the peer's run() returns normally, later requests fail invalidated")
    func orderlyClose() async throws {
        try await withPair { host, service in
            // A goodbye may only follow the handshake, so wait until the service has one.
            var serviceEvents = service.events.makeAsyncIterator()
            guard case .connected = await serviceEvents.next() else { Issue.record("service never connected"); return }
            await service.close(reason: "finished")
            var events = host.events.makeAsyncIterator()
            guard case .connected = await events.next() else { Issue.record("expected connected"); return }
            guard case .closed(let reason) = await events.next() else { Issue.record("expected closed"); return }
            #expect(reason == nil)
            let error = await #expect(throws: RemoteError.self) { try await host.request(ServiceMessage(type: "late")) }
            #expect(error?.code == .invalidated || error?.code == .interrupted)
        }
    }
}

/// Tier 2, hostile: one end is a raw socket the test writes arbitrary packets to.
@Suite("Connection against a hostile peer")
struct HostileConnectionTests {
    /// Runs a host connection against a raw peer socket; `script` plays the peer; returns the
    /// error the host's run() ended with and what the peer received back.
    func hostFacing(configuration: Connection.Configuration = .testHost,
                    _ script: @escaping @Sendable (Int32) throws -> Void) async throws -> (RemoteError?, [Envelope]) {
        let outcome = try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let hostEnd = pair.first
            let peer = try SeqpacketSocket(pair.second)
            let host = try Connection(socket: hostEnd, configuration: configuration)
            var error: RemoteError?
            do {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await host.run() }
                    try script(peer.fd)
                    try await group.waitForAll()
                }
            } catch let failure as RemoteError {
                error = failure
            }
            var received: [Envelope] = []
            while let envelope = try? await peer.receive() { received.append(envelope) }
            return (error, received)
        }
        return outcome
    }

    static func handshake(version: UInt32 = remoteViewProtocolVersion, role: PeerRole = .service,
                          highest: UInt32? = remoteViewLatestProtocolVersion) throws -> [UInt8] {
        try EnvelopeCodec.encode(Envelope(id: 1, body: .handshake(Handshake(protocolVersion: version, role: role, identifier: "com.example.hostile",
                                                                            maxProtocolVersion: highest))))
    }

    @Test("protocol versions: the version in force is the lower of the two highest (a handshake without max_protocol_version speaks 1); a host that serves versions from 2 refuses a version-1 peer with VERSION_MISMATCH naming both")
    func versionAgreement() async throws {
        let host = Handshake(role: .host, identifier: "com.example.host")
        #expect(host.maxProtocolVersion == 2 && host.protocolVersion == 1, "every handshake says base 1 and offers the latest")
        #expect(host.agreedVersion(with: Handshake(role: .service, identifier: "com.example.s")) == 2)
        #expect(host.agreedVersion(with: Handshake(role: .service, identifier: "com.example.s", maxProtocolVersion: nil)) == 1)
        #expect(host.agreedVersion(with: Handshake(role: .service, identifier: "com.example.s", maxProtocolVersion: 7)) == 2)
        // On the wire: absent decodes as nil, a value as itself.
        for highest in [nil, 1, 2] as [UInt32?] {
            let bytes = try Self.handshake(highest: highest)
            guard case .handshake(let decoded) = try decode(bytes).body else { Issue.record("not a handshake"); continue }
            #expect(decoded.maxProtocolVersion == (highest == 0 ? nil : highest))
        }
        var strict = Connection.Configuration.testHost
        strict.protocolVersions = 2...2
        let (error, received) = try await hostFacing(configuration: strict) { fd in try rawSend(fd, Self.handshake(highest: nil)) }
        #expect(error?.code == .protocolViolation)
        #expect(error?.reason.contains("serves versions 2 to 2") == true && error?.reason.contains("speaks versions up to 1") == true, "\(String(describing: error))")
        #expect(received.contains { if case .protocolError(.versionMismatch, _) = $0.body { true } else { false } })
    }

    @Test("a garbage packet is a protocol violation, reported to the peer; nothing crashes")
    func garbage() async throws {
        let (error, received) = try await hostFacing { fd in
            try rawSend(fd, Self.handshake())
            try rawSend(fd, [0xff, 0xff, 0xff, 0xff, 0x0f, 0x08])
        }
        #expect(error?.code == .protocolViolation)
        #expect(error?.reason.contains("not a valid Envelope") == true)
        #expect(received.contains { if case .protocolError(.malformed, _) = $0.body { true } else { false } })
    }

    @Test("a handshake of another protocol version is refused, naming both versions")
    func versionMismatch() async throws {
        let (error, received) = try await hostFacing { fd in try rawSend(fd, Self.handshake(version: 99)) }
        #expect(error?.code == .protocolViolation)
        #expect(error?.reason.contains("version \(remoteViewProtocolVersion)") == true)
        #expect(error?.reason.contains("version 99") == true)
        #expect(received.contains { if case .protocolError(.versionMismatch, _) = $0.body { true } else { false } })
    }

    @Test("a peer claiming the host role too is refused")
    func sameRole() async throws {
        let (error, _) = try await hostFacing { fd in try rawSend(fd, Self.handshake(role: .host)) }
        #expect(error?.code == .protocolViolation)
        #expect(error?.reason.contains("both peers claim") == true)
    }

    @Test("declared and received fd counts must match; the fds that arrived are closed")
    func fdCountMismatch() async throws {
        let (error, _) = try await hostFacing { fd in
            try rawSend(fd, Self.handshake())
            // Declares two fds, sends one.
            var request = try EnvelopeCodec.encode(Envelope(id: 2, body: .message(type: "x", payload: [])))
            request += [0x18, 0x02]
            let file = try MemoryFile(name: "stray")
            try rawSend(fd, request, fds: [file.fd.rawValue])
        }
        #expect(error?.code == .protocolViolation)
        #expect(error?.reason.contains("declares 2 fd(s) but 1 arrived") == true)
    }

    @Test("more fds than a message may carry is a protocol violation, and none leak")
    func tooManyFDs() async throws {
        let (error, _) = try await hostFacing { fd in
            try rawSend(fd, Self.handshake())
            let files = try (0..<20).map { _ in try Syscall.memoryFileCreate("stray") }
            defer { files.forEach(Syscall.close) }
            var message = try EnvelopeCodec.encode(Envelope(id: 2, body: .message(type: "x", payload: [])))
            message += [0x18, 20]
            try rawSend(fd, message, fds: files)
        }
        #expect(error?.code == .protocolViolation)
        #expect(error?.reason.contains("more than \(WireLimits.maxAttachments) fds") == true)
    }

    @Test("a packet over the size limit is a protocol violation")
    func oversized() async throws {
        let (error, _) = try await hostFacing { fd in
            try rawSend(fd, Self.handshake())
            try rawSend(fd, [UInt8](repeating: 0, count: WireLimits.maxPacketSize + 100))
        }
        #expect(error?.code == .protocolViolation)
        #expect(error?.reason.contains("exceeds the \(WireLimits.maxPacketSize)-byte limit") == true)
    }

    @Test("a reply to an envelope that was never sent is a protocol violation")
    func forgedReply() async throws {
        let (error, _) = try await hostFacing { fd in
            try rawSend(fd, Self.handshake())
            try rawSend(fd, EnvelopeCodec.encode(Envelope(id: 2, replyTo: 9_999, body: .reply(type: "x", payload: []))))
        }
        #expect(error?.code == .protocolViolation)
        #expect(error?.reason.contains("never sent") == true)
    }

    @Test("ids must increase per direction: a repeated id, and a reply with a lower id after one with a higher, are violations naming both ids; the fds of the refused packet are closed")
    func idsOutOfOrder() async throws {
        let (repeated, told) = try await hostFacing { fd in
            try rawSend(fd, Self.handshake())
            try rawSend(fd, EnvelopeCodec.encode(Envelope(id: 1, body: .message(type: "again", payload: []))))
        }
        #expect(repeated?.code == .protocolViolation)
        #expect(repeated?.reason.contains("message envelope 1 follows envelope 1: ids must increase per direction") == true, "\(String(describing: repeated))")
        #expect(told.contains { if case .protocolError(.malformed, let reason) = $0.body { reason.contains("ids must increase") } else { false } })

        // The host's case from the report: answers to two requests, the second with the lower id.
        let outcome = try await withoutLeaks { () -> RemoteError? in
            let pair = try SeqpacketSocket.pair()
            let host = try Connection(socket: pair.first, configuration: .testHost)
            let peer = try SeqpacketSocket(pair.second)
            return await withTaskGroup(of: RemoteError?.self) { group in
                group.addTask { do throws(RemoteError) { try await host.run(); return nil } catch { return error } }
                group.addTask { _ = try? await host.request(ServiceMessage(type: "first")); return nil }
                group.addTask { _ = try? await host.request(ServiceMessage(type: "second")); return nil }
                do {
                    try rawSend(peer.fd, Self.handshake())
                    // The host's handshake and both requests (ids 1, 2, 3), so both answers are due.
                    for _ in 0..<3 { _ = try await peer.receive() }
                    let file = try MemoryFile(name: "stray")
                    try rawSend(peer.fd, EnvelopeCodec.encode(Envelope(id: 12, replyTo: 2, body: .reply(type: "x", payload: []))))
                    try rawSend(peer.fd, EnvelopeCodec.encode(Envelope(id: 2, replyTo: 3, body: .reply(type: "x", payload: []), attachments: [Attachment(duplicating: file.fd)])),
                                fds: [file.fd.rawValue])
                } catch {
                    Issue.record("the raw peer could not send: \(error)")
                }
                var first: RemoteError?
                for await error in group where first == nil { first = error }
                peer.close()
                return first
            }
        }
        #expect(outcome?.code == .protocolViolation)
        #expect(outcome?.reason.contains("reply envelope 2 follows envelope 12") == true, "\(String(describing: outcome))")
    }

    @Test("a peer that never handshakes times out")
    func silentPeer() async throws {
        let outcome = try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let hostEnd = pair.first
            var configuration = Connection.Configuration.testHost
            configuration.handshakeTimeout = .milliseconds(100)
            let host = try Connection(socket: hostEnd, configuration: configuration)
            let peer = pair.second
            let error = await #expect(throws: RemoteError.self) { try await host.run() }
            peer.close()
            return error
        }
        #expect(outcome?.code == .timeout)
    }

    @Test("a peer that stops reading makes sends time out instead of blocking forever")
    func stalledPeer() async throws {
        let outcome = try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let peer = pair.second
            try rawSend(peer.rawValue, Self.handshake())
            let host = Connection(channel: try SeqpacketChannel(pair.first, sendTimeout: .milliseconds(100)), configuration: Connection.Configuration.testHost)
            return try await withThrowingTaskGroup(of: Void.self) { group -> RemoteError? in
                group.addTask { try? await host.run() }
                let payload = [UInt8](repeating: 1, count: 60_000)
                do {
                    while true { try await host.send(ServiceMessage(type: "flood", payload: payload)) }
                } catch let error as RemoteError {
                    await host.close()
                    return error
                }
            }
        }
        #expect(outcome?.code == .timeout)
    }

    @Test("an empty packet reads as end of file (SOCK_SEQPACKET cannot tell them apart), as docs/Protocol.md says")
    func emptyPacketIsEndOfFile() async throws {
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let socket = try SeqpacketSocket(pair.first)
            try rawSend(pair.second.rawValue, [])
            let received = try await socket.receive()
            #expect(received == nil, "\(String(describing: received))")
            withExtendedLifetime(pair.second) {}
        }
    }

    @Test("a peer that stops reading holds at most maxWaitingSends sends waiting; one more fails at once, naming the bound")
    func tooManyWaitingSends() async throws {
        let outcome = try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let peer = pair.second
            // A send timeout far past the test's deadline: only the bound can end a send here.
            let transport = try SeqpacketSocket(pair.first, sendTimeout: .seconds(600), maxWaitingSends: 8)
            let first = try await withThrowingTaskGroup(of: RemoteError?.self) { group -> RemoteError? in
                for _ in 0..<16 {
                    group.addTask {
                        let payload = [UInt8](repeating: 1, count: 60_000)
                        do {
                            while true { try await transport.send(Envelope(body: .message(type: "flood", payload: payload))) }
                        } catch let error as RemoteError {
                            return error
                        }
                    }
                }
                let first = try await group.next() ?? nil
                // The 8 still waiting end with the socket.
                transport.close()
                return first
            }
            withExtendedLifetime(peer) {}
            return first
        }
        #expect(outcome?.code == .timeout)
        #expect(outcome?.reason.contains("8 sends already wait for room") == true, "\(String(describing: outcome))")
    }

    @Test("the peer vanishing fails outstanding requests with interrupted")
    func vanishingPeer() async throws {
        let error = try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let hostEnd = pair.first
            let peer = try SeqpacketSocket(pair.second)
            try rawSend(peer.fd, Self.handshake())
            let host = try Connection(socket: hostEnd, configuration: Connection.Configuration.testHost)
            return try await withThrowingTaskGroup(of: Void.self) { group -> RemoteError? in
                group.addTask { try? await host.run() }
                let request = Task { try await host.request(ServiceMessage(type: "never answered")) }
                // The peer sees the host's handshake, then the request, then vanishes.
                _ = try await peer.receive()
                let sent = try await peer.receive()
                guard case .request = sent?.body else { return nil }
                peer.close()
                do {
                    _ = try await request.value
                    return nil
                } catch let error as RemoteError {
                    return error
                }
            }
        }
        #expect(error?.code == .interrupted)
    }
}

/// The transport alone, against a raw peer.
@Suite("Seqpacket transport")
struct SeqpacketTransportTests {
    @Test("ids are taken as packets are written: 8 tasks sending at once, through a full queue, give ids 1, 2, 3 … in the order they arrive")
    func numberedInWriteOrder() async throws {
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let ours = try SeqpacketSocket(pair.first)
            let theirs = try SeqpacketSocket(pair.second)
            let senders = 8, each = 500
            // Large packets fill the peer's queue, so senders wait and retry, overtaking each other.
            let payload = [UInt8](repeating: 7, count: 20_000)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<senders {
                    group.addTask {
                        for _ in 0..<each { try await ours.send(Envelope(body: .message(type: "n", payload: payload))) }
                    }
                }
                // theirs.receive() itself refuses an id not above the last one; check contiguity too.
                for expected in 1...UInt64(senders * each) {
                    let envelope = try #require(try await theirs.receive())
                    #expect(envelope.id == expected)
                    if envelope.id != expected { break }
                }
                try await group.waitForAll()
            }
            #expect(ours.lastSentID == UInt64(senders * each))
            ours.close()
            theirs.close()
        }
    }

    @Test("edge-triggered reads lose nothing: packets queued before the socket is made, sent while nobody reads, one at a time and in a burst all arrive, in order (a full queue is the ids test above)")
    func edgeTriggeredReadsLoseNothing() async throws {
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let writer = pair.second.rawValue
            // Queued before the registration: reported once, at ADD.
            for id in 1...3 { try rawSend(writer, EnvelopeCodec.encode(Envelope(id: UInt64(id), body: .ping(nonce: UInt64(id))))) }
            let socket = try SeqpacketSocket(pair.first)
            var received: [UInt64] = []
            for _ in 1...3 { received.append(try #require(try await socket.receive()).id) }
            // One at a time, the receive started first: each edge comes while the reader waits
            // (or just before it does: either way the packet is read).
            for id in UInt64(4)...203 {
                let got = try await withThrowingTaskGroup(of: UInt64?.self) { group in
                    group.addTask { try await socket.receive()?.id }
                    try rawSend(writer, EnvelopeCodec.encode(Envelope(id: id, body: .ping(nonce: id))))
                    return try await group.next() ?? nil
                }
                received.append(try #require(got))
            }
            // Sent while nobody reads (the edge is kept for the next wait), then a burst.
            try rawSend(writer, EnvelopeCodec.encode(Envelope(id: 204, body: .ping(nonce: 0))))
            received.append(try #require(try await socket.receive()).id)
            for id in UInt64(205)...304 { try rawSend(writer, EnvelopeCodec.encode(Envelope(id: id, body: .ping(nonce: 0)))) }
            for _ in 205...304 { received.append(try #require(try await socket.receive()).id) }
            #expect(received == Array(1...304))
            socket.close()
            withExtendedLifetime(pair.second) {}
        }
    }

    @Test("batched reads: packets queued together arrive in order, each with its own fds; a violation closes the fds of the packets read with it but not yet handed out")
    func batchedReadsKeepEachPacketsFDs() async throws {
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let writer = pair.second.rawValue
            let socket = try SeqpacketSocket(pair.first)
            func inode(_ fd: Int32) -> UInt64 {
                var info = stat()
                return fstat(fd, &info) == 0 ? UInt64(info.st_ino) : 0
            }
            // Pipes, whose inodes tell them apart: one = 0, two = 1, three = 2, the late ones 3...5.
            var pipes: [Int32] = []
            for _ in 0..<6 {
                var ends: [Int32] = [0, 0]
                #expect(pipe(&ends) == 0)
                close(ends[1])
                pipes.append(ends[0])
            }
            defer { pipes.forEach { close($0) } }
            let (one, two, three) = (pipes[0], pipes[1], pipes[2])
            // The envelope declares as many fds as the packet carries (copies, closed at once).
            func send(_ id: UInt64, fds: [Int32] = []) throws {
                let declared = fds.map { Attachment(OwnedFD(adopting: dup($0))) }
                try rawSend(writer, EnvelopeCodec.encode(Envelope(id: id, body: .message(type: "m\(id)", payload: []), attachments: declared)), fds: fds)
            }
            try send(1, fds: [one])
            try send(2)
            try send(3, fds: [two, three])
            // Packet 4 repeats id 3 (ids must increase), and carries an fd; 5 and 6 carry fds too.
            try send(3, fds: [pipes[3]])
            try send(5, fds: [pipes[4]])
            try send(6, fds: [pipes[5]])
            let before = openDescriptors()

            let first = try #require(try await socket.receive())
            #expect(first.id == 1 && first.attachments.map { inode($0.descriptor ?? -1) } == [inode(one)])
            let second = try #require(try await socket.receive())
            #expect(second.id == 2 && second.attachments.isEmpty)
            let third = try #require(try await socket.receive())
            #expect(third.id == 3 && third.attachments.map { inode($0.descriptor ?? -1) } == [inode(two), inode(three)])
            let received = Set(([first, third]).flatMap { $0.attachments.compactMap(\.descriptor) })
            do {
                _ = try await socket.receive()
                Issue.record("a repeated id was accepted")
            } catch let error as RemoteError {
                #expect(error.code == .protocolViolation && error.reason.contains("ids must increase"), "\(error)")
            }
            // Every fd the batch brought is closed but those of the envelopes handed out.
            #expect(openDescriptors().subtracting(before) == received)
            withExtendedLifetime((first, second, third)) {}
            socket.close()
            withExtendedLifetime(pair.second) {}
        }
    }

    @Test("a peer that closes with our data unread still delivers what it sent first (its goodbye), then end of file")
    func goodbyeSurvivesReset() async throws {
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let ours = try SeqpacketSocket(pair.first)
            let theirs = pair.second
            // Left unread in the peer's queue: closing it then makes Linux report ECONNRESET
            // to us, ahead of the packets the peer queued for us before it closed.
            try await ours.send(Envelope(body: .ping(nonce: 7)))
            try rawSend(theirs.rawValue, EnvelopeCodec.encode(Envelope(id: 1, body: .goodbye(reason: "idle exit"))))
            theirs.close()
            let first = try await ours.receive()
            guard case .goodbye(let reason)? = first?.body else {
                Issue.record("expected the goodbye, got \(String(describing: first))")
                return
            }
            #expect(reason == "idle exit")
            #expect(try await ours.receive() == nil)
            ours.close()
        }
    }
}

@Suite("Connection: order across threads")
struct CrossThreadOrderTests {
    final class Seen: Sendable { let texts = Mutex<[String]>([]) }

    @Test("a message another thread sent before a reply was written goes out before it, though its hand-over to the loop had not run yet (a view's commit, then the settle that waited for it)")
    func messageBeforeReply() async throws {
        let seen = Seen()
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let hostEnd = pair.first
            let host = try Connection(socket: hostEnd, configuration: .testHost, onMessage: { message, _ in
                seen.texts.withLock { $0.append(message.text ?? "") }
            })
            let service = try Connection(socket: pair.second, configuration: .testService, onSynchronousRequest: { message, context in
                // Another thread sends, and its send returns (handed to the outbox, its drain
                // queued behind this round), before this reply is written on the loop.
                let sent = BlockingResult<Bool>.make()
                let connection = context.connection
                Task.detached {
                    try? await connection.send(ServiceMessage(type: "note", text: "sent first"))
                    sent.complete(true)
                }
                _ = sent.wait(timeout: .seconds(10))
                return ServiceMessage(type: "reply", text: "then the reply")
            })
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await service.run() }
                try await host.withRunning { host in
                    for round in 0..<20 {
                        let reply = try await host.request(ServiceMessage(type: "ordered"))
                        #expect(reply.text == "then the reply")
                        // The reply waited behind the message: its handler has run.
                        #expect(seen.texts.withLock { $0.count } == round + 1)
                    }
                }
                try await group.waitForAll()
            }
        }
    }
}
