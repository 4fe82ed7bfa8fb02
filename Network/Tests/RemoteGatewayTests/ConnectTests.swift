import FoundationEssentials
import Glibc
import Logging
import RemoteGateway
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
        .init(identity: "uri:" + identity, services: ["com.example.test", "com.example.missing"]),
    ])

    /// A gateway on 127.0.0.1 (a free port) with a launcher over the fixture service (as
    /// `com.example.test`, and `com.example.other`, which the client is not granted), and a
    /// client of it for `body`.
    static func withConnectGateway(log: GatewayTests.LogLines = GatewayTests.LogLines(),
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
        let pki = try TestPKI(folder: folder)
        let logger = Logger(label: "gateway-tests") { _ in log }
        let tls = GatewayTLS(certificateChain: pki.serverCertificate, privateKey: pki.serverKey, clientCA: pki.caCertificate)
        let registry = ServiceRegistry(scanning: [folder + "/services"], includingInstalled: false)
        var configuration = Launcher.Configuration(hostIdentifier: "remoteview-gateway", stopGracePeriod: .milliseconds(500))
        var quiet = Logger(label: "launcher")
        quiet.logLevel = .warning
        configuration.logger = quiet
        try await withLauncher(registry: registry, configuration: configuration) { launcher in
            let gateway = Gateway(address: .ipv4(host: "127.0.0.1", port: 0), tls: tls,
                                  service: GatewayService(registry: registry, authorization: authorization, launcher: launcher, logger: logger))
            let serving = Task { try await gateway.run() }
            defer { gateway.shutDown() }
            let port = try #require(try await gateway.transport.listeningAddress.ipv4?.port)
            let laptop = try pki.client("laptop", names: [.uniformResourceIdentifier(identity)])
            let client = GatewayClient(address: .ipv4(host: "127.0.0.1", port: port), certificateChain: laptop.certificate,
                                       privateKey: laptop.key, gatewayCA: pki.caCertificate, serverName: "localhost")
            do {
                try await body(client, launcher, pki)
            } catch {
                gateway.shutDown()
                _ = await serving.result
                throw error
            }
            gateway.shutDown()
            _ = await serving.result
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

/// How the next process of `identifier` that ends ended, within 15 s.
func firstTermination(of identifier: String, in events: AsyncStream<LauncherEvent>) async throws -> TerminationReason {
    try await withThrowingTaskGroup(of: TerminationReason?.self) { group in
        group.addTask {
            for await event in events {
                if case .terminated(identifier, _, let reason) = event { return reason }
            }
            return nil
        }
        group.addTask {
            try await Task.sleep(for: .seconds(15))
            return nil
        }
        defer { group.cancelAll() }
        return try #require(try await group.next() ?? nil, "\(identifier) ended within 15 s")
    }
}
