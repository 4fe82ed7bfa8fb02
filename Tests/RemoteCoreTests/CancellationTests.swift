import Glibc
import RemoteTestSupport
import Synchronization
import Testing
@testable import RemoteCore

/// Tier 2: every wait a caller of a connection (or of a watched descriptor) can reach ends when
/// the caller's task is cancelled, with `cancelled`, and leaves nothing behind. A task started
/// with `Task.immediate` has reached its wait by the time the call returns (it runs until it
/// first suspends), so each test cancels a wait in progress, not one about to begin.
@Suite("Cancelling waits", .serialized)
struct CancellationTests {
    @Test("before run(): a send returns at once (it is kept for after this side's handshake); a request waits for its reply and is cancelled, and nothing of it is written")
    func waitingToSend() async throws {
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let connection = try Connection(socket: pair.first, configuration: .testHost)
            try await connection.send(ServiceMessage(type: "early"))
            let request = Task.immediate { try await connection.request(ServiceMessage(type: "early")) }
            request.cancel()
            let requestError = await #expect(throws: RemoteError.self) { try await request.value }
            #expect(requestError?.code == .cancelled, "\(String(describing: requestError))")
            await connection.close()
            // Closed before it ran: nothing was written, not even the handshake.
            let peer = try SeqpacketSocket(pair.second)
            #expect(try await peer.receive() == nil)
        }
    }

    @Test("withRunning's wait for the peer's handshake is cancelled; the connection closes")
    func waitingForHandshake() async throws {
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            var configuration = Connection.Configuration.testHost
            configuration.handshakeTimeout = .seconds(3600)
            let connection = try Connection(socket: pair.first, configuration: configuration)
            let silent = pair.second  // never handshakes
            let task = Task { try await connection.withRunning { _ in "answered" } }
            var events = connection.events.makeAsyncIterator()
            task.cancel()
            await #expect(throws: (any Error).self) { try await task.value }
            guard case .closed(let reason) = await events.next() else { Issue.record("expected closed"); return }
            #expect(reason == nil, "closed in order: \(String(describing: reason))")
            #expect(connection.isClosed)
            _ = silent
        }
    }

    @Test("cancelling the task that runs a connection closes it in order: the peer hears goodbye")
    func runCancelled() async throws {
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let host = try Connection(socket: pair.first, configuration: .testHost)
            let service = try Connection(socket: pair.second, configuration: .testService)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await service.run() }
                let running = Task { try await host.run() }
                var events = host.events.makeAsyncIterator()
                guard case .connected = await events.next() else { Issue.record("expected connected"); return }
                running.cancel()
                try await running.value  // returns: closed in order, not failed
                try await group.waitForAll()  // the service's run returns too: it heard goodbye
            }
            #expect(service.peerGoodbyeReason?.contains("cancelled") == true, "\(String(describing: service.peerGoodbyeReason))")
        }
    }

    @Test("a send waiting for a peer that stopped reading is cancelled before its send deadline")
    func waitingToWrite() async throws {
        let error = try await withoutLeaks { () -> RemoteError? in
            let pair = try SeqpacketSocket.pair()
            try rawSend(pair.second.rawValue, EnvelopeCodec.encode(Envelope(id: 1, body: .handshake(Handshake(role: .service, identifier: "com.example.stalled")))))
            let host = Connection(channel: try SeqpacketChannel(pair.first, sendTimeout: .seconds(3600)), configuration: .testHost)
            return await withTaskGroup(of: Void.self) { group -> RemoteError? in
                group.addTask { try? await host.run() }
                var events = host.events.makeAsyncIterator()
                guard case .connected = await events.next() else { Issue.record("expected connected"); return nil }
                // Sends until the peer's queue is full: there the task suspends, waiting to write.
                let payload = [UInt8](repeating: 1, count: 60_000)
                let flood = Task.immediate {
                    while true { try await host.send(ServiceMessage(type: "flood", payload: payload)) }
                }
                flood.cancel()
                let result = await flood.result
                await host.close()
                if case .failure(let error) = result { return error as? RemoteError }
                return nil
            }
        }
        #expect(error?.code == .cancelled, "\(String(describing: error))")
        #expect(error?.reason.contains("peer's queue was full") == true, "\(String(describing: error))")
    }

    @Test("cancels racing their requests (before the loop has the request, while it waits, after its answer) each end their request once and leave nothing behind on the loop")
    func cancelsRaceTheirRequests() async throws {
        try await withoutLeaks(within: .seconds(30)) {
            let pair = try SeqpacketSocket.pair()
            let host = try Connection(socket: pair.first, configuration: .testHost)
            let service = try Connection(socket: pair.second, configuration: .testService) { request, _ in
                ServiceMessage(type: "echo", payload: request.payload)
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await service.run() }
                group.addTask { try await host.run() }
                _ = try await host.ping()
                var answered = 0, cancelled = 0
                for round in 0..<40 {
                    let requests = (0..<25).map { index in
                        Task { try await host.request(ServiceMessage(type: "r", payload: [UInt8(index)])) }
                    }
                    // At once (racing the hand-over), after a turn of the scheduler (waiting or
                    // answered), or after its answer has come.
                    for (index, request) in requests.enumerated() {
                        switch (index + round) % 3 {
                        case 0: request.cancel()
                        case 1: await Task.yield(); request.cancel()
                        default: _ = await request.result; request.cancel()
                        }
                    }
                    for (index, request) in requests.enumerated() {
                        switch await request.result {
                        case .success(let reply):
                            #expect(reply.payload == [UInt8(index)])
                            answered += 1
                        case .failure(let error):
                            #expect((error as? RemoteError)?.code == .cancelled, "\(error)")
                            cancelled += 1
                        }
                    }
                }
                #expect(answered + cancelled == 1000)
                #expect(cancelled > 0 && answered > 0, "both outcomes happen: \(answered) answered, \(cancelled) cancelled")
                #expect(await host.earlyCancelCount() == 0, "no cancel is left waiting for a request that ended")
                _ = try await host.ping()
                await host.close()
                try await group.waitForAll()
            }
        }
    }

    @Test("a wait for a descriptor to become readable is cancelled (false), and the descriptor still works")
    func descriptors() async throws {
        try await withoutLeaks {
            let pipe = try Syscall.pipe()
            let reader = try ReadableDescriptor(pipe.first)
            let waiting = Task.immediate { await reader.waitReadable() }
            waiting.cancel()
            #expect(await waiting.value == false)
            // Not stopped: a later wait sees data.
            try rawWrite(pipe.second, [1])
            #expect(await reader.waitReadable())
            _ = pipe.second
        }
    }
}

/// Writes `bytes` to `fd` (tests only).
private func rawWrite(_ fd: borrowing OwnedFD, _ bytes: [UInt8]) throws {
    let written = bytes.withUnsafeBytes { Glibc.write(fd.rawValue, $0.baseAddress, $0.count) }
    if written != bytes.count { throw SystemCallError(call: "write (test)", errno: errno) }
}
