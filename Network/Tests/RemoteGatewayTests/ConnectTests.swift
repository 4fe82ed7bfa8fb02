import FoundationEssentials
import Glibc
import GRPCCore
import GRPCNIOTransportHTTP2
import Logging
@testable import RemoteGateway
import RemoteHost
import Testing
import X509

/// `Connect` over real TLS on the loopback: a host's ``Connection`` through the gateway to a
/// process its own launcher runs (the main package's fixture service, sandboxed), and back.
///
/// The fixture is the main package's `remoteview-test-service`, built by `swift build
/// --build-tests` at the repository's root (which `make test` runs before this package's
/// tests).
@Suite("Gateway: Connect", .serialized)
struct ConnectTests {
    /// The main package's fixture service.
    static let testService: String = {
        let root = URL(filePath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return root.appending(path: ".build/debug/remoteview-test-service").path
    }()

    static let identity = "spiffe://example.org/host/laptop"
    static let authorization = try! GatewayAuthorization(entries: [
        .init(identity: "uri:" + identity, services: ["com.example.test", "com.example.missing", "com.example.share", "com.example.ui"]),
    ])

    /// A gateway on 127.0.0.1 (a free port) with a launcher over the fixture service (as
    /// `com.example.test`, and `com.example.other`, which the client is not granted), and a
    /// client of it for `body`.
    ///
    /// With `lyingView`, the gateway's `View` stream answers with those frames instead
    /// (``RemoteViewGatewayTests/LyingView``): a hostile gateway whose `Connect` is real.
    static func withConnectGateway(log: GatewayTests.LogLines = GatewayTests.LogLines(),
                                   lyingView: (@Sendable (Int, Int) -> [[UInt8]])? = nil,
                                   _ body: @Sendable (GatewayClient, Launcher, TestPKI) async throws -> Void) async throws {
        try #require(FileManager.default.isExecutableFile(atPath: testService),
                     "the main package's fixture service is built first (swift build --build-tests at the repository's root): \(testService)")
        let folder = FileManager.default.temporaryDirectory.appending(path: "remoteview-connect-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        try FileManager.default.createDirectory(atPath: folder + "/services", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        for identifier in ["com.example.test", "com.example.other"] {
            let manifest = #"{"identifier": "\#(identifier)", "executable": "\#(testService)", "arguments": ["serve", "\#(identifier)"], "display": {"title": "Test service"}}"#
            try Data(manifest.utf8).write(to: URL(filePath: folder + "/services/\(identifier).json"))
        }
        // The fixture's toolkit screen (a view: label, button, text field, progress, canvas).
        let ui = #"{"identifier": "com.example.ui", "executable": "\#(testService)", "arguments": ["ui", "com.example.ui"], "display": {"title": "Screen"}}"#
        try Data(ui.utf8).write(to: URL(filePath: folder + "/services/com.example.ui.json"))
        // The fixture's share activity, one process per share.
        let rules = #"[{"type": "text/plain", "min": 0, "max": 2}, {"type": "text/uri-list", "min": 0, "max": 1}, {"type": "application/octet-stream", "min": 0, "max": 4}]"#
        let share = #"{"identifier": "com.example.share", "executable": "\#(testService)", "arguments": ["share", "com.example.share"], "display": {"title": "Remote share", "subtitle": "on the farm"}, "activation": {"contentTypes": \#(rules)}, "instances": "perConnection"}"#
        try Data(share.utf8).write(to: URL(filePath: folder + "/services/com.example.share.json"))
        let pki = try TestPKI(folder: folder)
        let logger = Logger(label: "gateway-tests") { _ in log }
        let tls = GatewayTLS(certificateChain: pki.serverCertificate, privateKey: pki.serverKey, clientCA: pki.caCertificate)
        let registry = ServiceRegistry(scanning: [folder + "/services"], includingInstalled: false)
        var configuration = Launcher.Configuration(hostIdentifier: "remoteview-gateway", stopGracePeriod: .milliseconds(500))
        var quiet = Logger(label: "launcher")
        quiet.logLevel = .warning
        configuration.logger = quiet
        try await withLauncher(registry: registry, configuration: configuration) { launcher in
            let service = GatewayService(registry: registry, authorization: authorization, launcher: launcher, logger: logger)
            func client(_ port: Int) throws -> GatewayClient {
                let laptop = try pki.client("laptop", names: [.uniformResourceIdentifier(identity)])
                return GatewayClient(address: .ipv4(host: "127.0.0.1", port: port), certificateChain: laptop.certificate,
                                     privateKey: laptop.key, gatewayCA: pki.caCertificate, serverName: "localhost")
            }
            if let lyingView {
                let transport = HTTP2ServerTransport.Posix(address: .ipv4(host: "127.0.0.1", port: 0), transportSecurity: tls.transportSecurity,
                                                           config: Gateway.config(logger: logger))
                let server = GRPCServer(transport: transport, services: [RemoteViewGatewayTests.LyingView(real: service, frames: lyingView)])
                let serving = Task { try await server.serve() }
                let outcome: Result<Void, any Error>
                do {
                    let port = try #require(try await transport.listeningAddress.ipv4?.port)
                    outcome = .success(try await body(client(port), launcher, pki))
                } catch {
                    outcome = .failure(error)
                }
                server.beginGracefulShutdown()
                _ = await serving.result
                return try outcome.get()
            }
            try await GatewayTests.serving(Gateway(address: .ipv4(host: "127.0.0.1", port: 0), tls: tls, service: service)) { port in
                try await body(client(port), launcher, pki)
            }
        }
    }

    static func configuration() -> Connection.Configuration {
        Connection.Configuration(role: .host, identifier: "com.example.far-host", expectedPeerIdentifier: "com.example.test")
    }

    @Test("a request, a share item's memfd (150 KB, three chunks) both ways and one-way messages in order, through the gateway to its launcher's sandboxed process; closing ends the process in order")
    func requestsMessagesAndItems() async throws {
        try await Self.withConnectGateway { client, launcher, _ in
            let events = launcher.events()
            let connection = try await client.connect(to: "com.example.test", configuration: Self.configuration())
            try await connection.withRunning { connection in
                #expect(try await connection.request(ServiceMessage(type: "echo", text: "across machines"), timeout: .seconds(10)).text == "across machines")

                let bytes = (0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
                let file = try MemoryFile.sealed(name: "item", contents: bytes)
                let echoed = try await connection.request(ServiceMessage(type: "echo", attachments: [Attachment(file.takeDescriptor())]), timeout: .seconds(10))
                guard let back = echoed.attachments.first?.take() else {
                    Issue.record("the echo came back without its memfd")
                    return
                }
                let returned = MemoryFile(adopting: back)
                #expect(try returned.contents(limit: 1 << 20) == bytes)
                #expect(try returned.seals.isSuperset(of: [.shrink, .grow, .write, .seal]), "a sealed memfd again on this side")

                for index in 0..<20 { try await connection.send(ServiceMessage(type: "note", text: "\(index)")) }
                #expect(try await connection.request(ServiceMessage(type: "notes"), timeout: .seconds(10)).text == (0..<20).map(String.init).joined(separator: " "))
                let status = try #require(await launcher.status().first { $0.identifier == "com.example.test" })
                #expect(status.processes.first?.sandboxed == true, "sandboxed by the gateway's launcher")
                await connection.close(reason: "done")
            }
            // The gateway's connection is invalidated with the call: the process is stopped in order.
            let ended = try await firstTermination(of: "com.example.test", in: events)
            #expect(ended.kind == .stopped || ended.kind == .exited, "\(ended)")
        }
    }

    @Test("kill -9 of the remote process ends the host's connection as interrupted, with the far launcher's reason")
    func killedRemotely() async throws {
        try await Self.withConnectGateway { client, launcher, _ in
            let connection = try await client.connect(to: "com.example.test", configuration: Self.configuration())
            // The request fails, or the connection's run ends with the stream: either says how.
            let failure: RemoteError?
            do { failure = try await connection.withRunning { connection -> RemoteError? in
                #expect(try await connection.request(ServiceMessage(type: "echo", text: "x"), timeout: .seconds(10)).text == "x")
                let process = try #require(await launcher.status().first { $0.identifier == "com.example.test" }?.processes.first)
                kill(process.servicePid ?? process.pid, SIGKILL)
                do {
                    _ = try await connection.request(ServiceMessage(type: "sleep", text: "10"), timeout: .seconds(10))
                    return nil
                } catch let error as RemoteError {
                    return error
                }
            } } catch let error as RemoteError {
                failure = error
            }
            #expect(failure?.code == .interrupted, "\(String(describing: failure))")
            #expect(failure?.reason.contains("killed by SIGKILL") == true, "\(String(describing: failure))")
        }
    }

    @Test("a service the client is not granted, or the gateway does not have, is refused before anything starts, saying so")
    func refusedServices() async throws {
        try await Self.withConnectGateway { client, launcher, _ in
            for (identifier, words) in [("com.example.other", "does not allow this client com.example.other"), ("com.example.missing", "has no service com.example.missing")] {
                do throws(RemoteError) {
                    _ = try await client.connect(to: identifier, configuration: Self.configuration())
                    Issue.record("\(identifier): connected")
                } catch {
                    #expect(error.code == .invalidated && error.reason.contains(words), "\(error)")
                }
            }
            #expect(await launcher.status().allSatisfy { $0.launches == 0 }, "nothing was started")
        }
    }
}

extension ConnectTests {
    /// What a raw `Connect` call ends with when its client sends `frames` and then holds its
    /// side open (a hostile client), within 20 s.
    static func rawConnect(_ client: GatewayClient, sending frames: [[UInt8]]) async throws -> RPCError? {
        let transport = try client.makeTransport()
        return try await firstTermination(within: .seconds(20)) { () -> RPCError?? in
            do {
                try await withGRPCClient(transport: transport) { grpc in
                    let request = StreamingClientRequest<[UInt8]> { writer in
                        for frame in frames { try await writer.write(frame) }
                        // Holds its side open: the hostile part (the gateway must not wait).
                        try await Task.sleep(for: .seconds(60))
                    }
                    try await grpc.bidirectionalStreaming(request: request, descriptor: GatewayMethods.connect, serializer: RawBytes(),
                                                          deserializer: RawBytes(), options: .defaults) { response in
                        for try await _ in response.messages {}
                    }
                }
                return .some(nil)
            } catch let error as RPCError {
                return .some(error)
            } catch {
                return .some(RPCError(code: .unknown, message: "\(error)"))
            }
        } ?? nil
    }

    @Test("a client that names no service within 10 s is cut off (deadlineExceeded), and one whose first frame is not open is refused at once, naming the rule")
    func silentClients() async throws {
        try await Self.withConnectGateway { client, launcher, _ in
            let start = ContinuousClock.now
            let silent = try await Self.rawConnect(client, sending: [])
            #expect(silent?.code == .deadlineExceeded, "\(String(describing: silent))")
            #expect(ContinuousClock.now - start < .seconds(15))
            let wrong = try await Self.rawConnect(client, sending: [ConnectFrame.chunk([1]).encoded()])
            #expect(wrong?.code == .invalidArgument && wrong?.message.contains("connect.open.first") == true, "\(String(describing: wrong))")
            #expect(await launcher.status().allSatisfy { $0.launches == 0 }, "nothing was started")
        }
    }

    /// A host's launcher whose remote services are the gateway's, named "farm", for `body`.
    static func withHostLauncher(_ client: GatewayClient, local: ServiceRegistry = ServiceRegistry(manifests: []),
                                 _ body: @Sendable (Launcher) async throws -> Void) async throws {
        var configuration = Launcher.Configuration(hostIdentifier: "com.example.far-host", backoff: .milliseconds(50))
        var quiet = Logger(label: "host")
        quiet.logLevel = .error
        configuration.logger = quiet
        configuration.remoteServices = try GatewayConnector(gateways: [(name: "farm", client: client)], logger: quiet)
        try await withLauncher(registry: local, configuration: configuration) { host in try await body(host) }
    }

    @Test("a host's launcher given a gateway reaches identifier@farm, and a bare identifier no local manifest declares, as a local service: requests, messages, interrupted with the far reason after kill -9, then reconnected by the next call")
    func launcherWithGateway() async throws {
        try await Self.withConnectGateway { client, farm, _ in
            try await Self.withHostLauncher(client) { host in
                let connection = host.connection(to: "com.example.test@farm")
                #expect(connection.isRemote && connection.gateway == "farm" && connection.processIdentifier == nil)
                #expect(try await connection.request(ServiceMessage(type: "echo", text: "through the launcher")).text == "through the launcher")
                try await connection.send(ServiceMessage(type: "note", text: "kept"))
                #expect(try await connection.request(ServiceMessage(type: "notes")).text == "kept")

                let process = try #require(await farm.status().first { $0.identifier == "com.example.test" }?.processes.first)
                var events = connection.events.makeAsyncIterator()
                kill(process.servicePid ?? process.pid, SIGKILL)
                guard case .interrupted(let error)? = await events.next() else {
                    Issue.record("no interrupted event")
                    return
                }
                #expect(error.reason.contains("killed by SIGKILL"), "\(error)")
                // The next call reconnects: a new process on the far side.
                #expect(try await connection.request(ServiceMessage(type: "echo", text: "again")).text == "again")
                #expect(try await connection.request(ServiceMessage(type: "notes")).text == "", "a new process")

                let bare = host.connection(to: "com.example.test")
                #expect(bare.isRemote && bare.gateway == nil)
                #expect(try await bare.request(ServiceMessage(type: "echo", text: "found")).text == "found")
                await bare.invalidate()
                await connection.invalidate()
                do throws(RemoteError) {
                    _ = try await connection.request(ServiceMessage(type: "echo"))
                    Issue.record("an invalidated connection answered")
                } catch {
                    #expect(error.code == .invalidated)
                }
            }
        }
    }

    @Test("a gateway's activities are listed next to the local ones, checked as manifests, marked with their gateway; a local service wins a shared identifier and the remote one is identifier@farm; a share through the share sheet runs on the far side with its items both ways")
    func remoteShare() async throws {
        try await Self.withConnectGateway { client, _, _ in
            let local = ServiceRegistry(manifests: [try GatewayTests.manifest("com.example.test", activation: false)])
            try await Self.withHostLauncher(client, local: local) { host in
                let (services, problems) = await host.remoteServices()
                #expect(problems.isEmpty, "\(problems)")
                #expect(services.map(\.identifier).sorted() == ["com.example.share", "com.example.test", "com.example.ui"], "the catalog of what the client is granted")
                #expect(services.allSatisfy { $0.gateway == "farm" && $0.executable.isEmpty })
                let registry = local.adding(remote: services)
                #expect(registry.services["com.example.test"]?.gateway == nil, "the local one wins")
                #expect(registry.services["com.example.test@farm"]?.gateway == "farm")
                #expect(registry.services["com.example.share"]?.display.subtitle == "on the farm")

                let items: [ShareItem] = [try .text("hello share"), try .url("https://example.com/a?b=c"),
                                          try .file(named: "bytes.bin", contentType: "application/octet-stream", contents: [1, 2, 3, 0xFE])]
                let sheet = ShareSheet(registry: registry, items: items)
                let activity = try #require(sheet.activity("com.example.share"), "offered: \(sheet.explanations)")
                let session = try await sheet.perform(activity, launcher: host)
                // Its controller comes with its view: composited on the far side, its frames
                // stream to the host.
                try await session.view.present(width: 40, height: 30)
                let damage = try await firstTermination(within: .seconds(15)) { () -> Bool? in
                    var frames = session.view.damage.makeAsyncIterator()
                    return await frames.next() != nil
                }
                #expect(damage)
                #expect(session.view.image.pixel(x: 20, y: 15) == 0xFF00_FF00, "the first frame, green")
                let report = try await session.connection.request(ServiceMessage(type: "share.items")).text ?? ""
                #expect(report == """
                    begun 1
                    text text/plain 11 hello share
                    url text/uri-list 25 https://example.com/a?b=c
                    file application/octet-stream 4 bytes.bin 1,2,3,fe
                    """, "each item as shared, across the gateway")
                _ = try await session.connection.request(ServiceMessage(type: "share.complete"))
                guard case .completed(let returned) = await session.outcome else {
                    Issue.record("outcome \(await session.outcome)")
                    return
                }
                #expect(returned.first?.text == "HELLO SHARE")
                #expect(try returned.last?.data(limit: 1 << 20) == [0xFE, 3, 2, 1], "a file item back, a sealed memfd again")
            }
        }
    }
}

/// How the next process of `identifier` that ends ended, within 15 s.
func firstTermination(of identifier: String, in events: AsyncStream<LauncherEvent>) async throws -> TerminationReason {
    try await firstTermination(within: .seconds(15)) { () -> TerminationReason? in
        for await event in events {
            if case .terminated(identifier, _, let reason) = event { return reason }
        }
        return nil
    }
}

/// What `body` gives, within `deadline` (an issue, and an error, otherwise).
func firstTermination<T: Sendable>(within deadline: Duration, _ body: @escaping @Sendable () async -> T?) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { await body() }
        group.addTask {
            try await Task.sleep(for: deadline)
            return nil
        }
        defer { group.cancelAll() }
        return try #require(try await group.next() ?? nil, "within \(deadline)")
    }
}
