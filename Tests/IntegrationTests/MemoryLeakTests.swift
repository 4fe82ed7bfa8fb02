import Glibc
import Logging
import RemoteHost
import RemoteTestSupport
import Synchronization
import Testing

/// Memory over many connections, on both sides: a connection leaves nothing behind however it
/// ends. Heap (`mallinfo2`) is exact, so a few hundred cycles show a leak of a few hundred bytes
/// each; the leaks these tests guard against were 17 KB (a service's finished connection task)
/// and 64 KiB (a host's receive buffer) per connection. Heavier runs: `remoteview-stress soak`
/// (Benchmarks, docs/Benchmarks.md).
@Suite("Memory over many connections", .serialized)
struct MemoryLeakTests {
    /// The most heap a cycle may leave behind on average: well under one leaked connection,
    /// above what a growing table's amortised capacity adds.
    static let allowedGrowthPerCycle = 1024

    /// The fixture service's heap in use and resident memory, in bytes, as it reports them.
    static func serviceMemory(_ connection: ServiceConnection) async throws -> (heap: Int, resident: Int) {
        let words = try #require(try await connection.request(ServiceMessage(type: "memory")).text).split(separator: " ")
        return (Int(words[0]) ?? 0, Int(words[1]) ?? 0)
    }

    static var heap: Int { Int(MemoryUsage.current().heapBytes ?? 0) }

    @Test("a shared service and its host: 1000 connect/request/invalidate cycles leave both heaps flat")
    func sharedCycles() async throws {
        try await withServices(["test.json": ServiceFolder.manifest()], within: .seconds(60)) { launcher, _ in
            // Holds the process across the cycles (each cycle's connection shares it).
            let keeper = launcher.connection(to: "com.example.test")
            @Sendable func cycle() async throws {
                let connection = launcher.connection(to: "com.example.test")
                #expect(try await connection.request(ServiceMessage(type: "echo", text: "cycle")).text == "cycle")
                await connection.invalidate()
            }
            for _ in 0..<100 { try await cycle() }  // warm-up: tables and caches reach their size
            let (hostBefore, serviceBefore) = (Self.heap, try await Self.serviceMemory(keeper))
            let cycles = 1000
            for _ in 0..<cycles { try await cycle() }
            let (hostAfter, serviceAfter) = (Self.heap, try await Self.serviceMemory(keeper))
            let hostGrowth = (hostAfter - hostBefore) / cycles, serviceGrowth = (serviceAfter.heap - serviceBefore.heap) / cycles
            #expect(hostGrowth < Self.allowedGrowthPerCycle, "the host's heap grew \(hostGrowth) bytes per cycle")
            #expect(serviceGrowth < Self.allowedGrowthPerCycle, "the service's heap grew \(serviceGrowth) bytes per cycle")
            let status = try #require(await launcher.status().first?.processes.first)
            #expect(status.clients == 1, "only the keeper is a client now")
            await keeper.invalidate()
        }
    }

    /// How a host's connection to a service ends, as the service sees it.
    enum Ending: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// Handshake, a request, then the host's goodbye.
        case goodbye
        /// Handshake, a request, then end of file with no goodbye.
        case endOfFile
        /// Handshake, then a packet that does not decode.
        case protocolViolation
        /// The handshake, then the host's goodbye.
        case handshakeOnly
        /// End of file before any handshake.
        case noHandshake

        var testDescription: String { rawValue }
    }

    @Test("a service's heap stays flat over 500 connections, however each ends", arguments: Ending.allCases)
    func serviceConnectionEnds(_ ending: Ending) async throws {
        try await withoutLeaks(within: .seconds(60)) {
            // The service unsandboxed and without a launcher: this test is the host, on fd 3.
            let pair = try SeqpacketSocket.pair()
            var options = ChildProcess.Options()
            options.pass(pair.second, as: 3)
            options.environment = ["LISTEN_FDS": "1", "PATH": "/usr/bin:/bin"]
            options.deathSignal = SIGKILL
            let process = try await ChildProcess.launch(executable: testServiceExecutable, arguments: ["serve"], options: options)
            let control = try Connection(socket: pair.first, configuration: .init(role: .host, identifier: "com.example.tests"))
            try await control.withRunning { control in
                @Sendable func memory() async throws -> Int {
                    let words = try #require(try await control.request(ServiceMessage(type: "memory")).text).split(separator: " ")
                    return Int(words[0]) ?? 0
                }
                @Sendable func cycle() async throws {
                    let client = try SeqpacketSocket.pair()
                    try await control.send(ServiceMessage(type: FrameworkMessage.connect, attachments: [Attachment(client.second)]))
                    try await Self.end(client.first, ending)
                }
                for _ in 0..<100 { try await cycle() }
                // The service reads the control connection in order: the reply to this comes
                // after it took every connection sent before, and saw each one end.
                let before = try await memory()
                let cycles = 500
                for _ in 0..<cycles { try await cycle() }
                let growth = (try await memory() - before) / cycles
                #expect(growth < Self.allowedGrowthPerCycle, "the service's heap grew \(growth) bytes per connection ending by \(ending)")
            }
            #expect(try await process.waitForExit() == .exited(0))
        }
    }

    /// Ends one host connection to the service (on `socket`) the way `ending` says, and returns
    /// once the service has seen it end.
    static func end(_ socket: consuming OwnedFD, _ ending: Ending) async throws {
        switch ending {
        case .goodbye, .handshakeOnly:
            let connection = try Connection(socket: socket, configuration: .init(role: .host, identifier: "com.example.tests"))
            try await connection.withRunning { connection in
                if ending == .goodbye { _ = try await connection.request(ServiceMessage(type: "echo", text: "x")) }
            }
        case .endOfFile, .protocolViolation, .noHandshake:
            let fd = socket.rawValue
            if ending != .noHandshake {
                try rawSend(fd, try EnvelopeCodec.encode(Envelope(id: 1, body: .handshake(Handshake(role: .host, identifier: "com.example.tests")))))
            }
            if ending == .endOfFile {
                try rawSend(fd, try EnvelopeCodec.encode(Envelope(id: 2, body: .request(type: "echo", payload: []))))
            }
            if ending == .protocolViolation { try rawSend(fd, [0xff, 0xff, 0xff, 0xff, 0x0f, 0x08]) }
            // Shut down our sending side, and read until the service closes its end: then it
            // has seen the end (and answered or refused what came before it).
            shutdown(fd, Int32(SHUT_WR))
            let reader = try ReadableDescriptor(socket)
            try await withDeadline(.seconds(10), "the service closing a connection ending by \(ending)") {
                while true {
                    guard let chunk = try reader.read(upTo: 65_536) else {
                        _ = await reader.waitReadable()
                        continue
                    }
                    if chunk.isEmpty { return }
                }
            }
        }
    }

    @Test("a ServiceConnection released without invalidate() is closed, and its process stopped when it was the last client",
          arguments: ["shared", "perConnection"])
    func releasedConnection(_ instances: String) async throws {
        let manifest = ServiceFolder.manifest(extra: "\"instances\": \"\(instances)\"")
        try await withServices(["test.json": manifest], within: .seconds(60)) { launcher, _ in
            let events = launcher.events()
            @Sendable func cycle() async throws {
                var connection: ServiceConnection? = launcher.connection(to: "com.example.test")
                #expect(try await connection?.request(ServiceMessage(type: "echo", text: "x")).text == "x")
                let pid = try #require(connection?.processIdentifier)
                let stream = connection!.events
                connection = nil
                var iterator = stream.makeAsyncIterator()
                guard case .invalidated(let error)? = await iterator.next() else {
                    Issue.record("a released connection's events end with invalidated")
                    return
                }
                #expect(error.reason.contains("released"))
                #expect(await iterator.next() == nil)
                let reason = try await termination(of: pid, in: events)
                #expect(reason.kind == .stopped && reason.detail.contains("released by the host"), "\(reason)")
            }
            // Warm-up. Each cycle here launches and stops a process, which fills caches that
            // outlast it: Dispatch keeps the continuations the event loop's thread allocates in
            // each worker thread's cache, and the runtime's metadata tables grow. Measured with
            // heaptrack over 800 cycles, the host's heap grows about 1.5 KB per launch for the
            // first hundred, then stays flat (about 10 bytes per launch from 100 to 400).
            @Sendable func cycles(_ count: Int) async throws -> Int {
                // The least heap over the last ten: a transient allocation (a 64 KiB receive
                // buffer in flight) does not count.
                var lowest = Int.max
                for index in 0..<count {
                    try await cycle()
                    if index >= count - 10 { lowest = min(lowest, Self.heap) }
                }
                return lowest
            }
            let before = try await cycles(100)
            // And nothing of each stays behind: 100 more.
            let growth = (try await cycles(100) - before) / 100
            #expect(growth < Self.allowedGrowthPerCycle, "the host's heap grew \(growth) bytes per released connection")
        }
    }
}
