import FoundationEssentials
import Glibc
import GRPCCore
import GRPCNIOTransportHTTP2
import Logging
import RemoteGateway
import RemoteHost
import Synchronization
import Testing
import X509

/// The gateway's perimeter over real TLS on the loopback: who gets in (a certificate from its
/// CA, valid now, naming someone), what each client is shown (its authorization), and the
/// refusals (no certificate, an expired or not-yet-valid one, another CA's, plaintext).
@Suite("Gateway: mutual TLS, identity, authorization, catalog", .serialized)
struct GatewayTests {
    static func manifest(_ identifier: String, activation: Bool = true) throws -> ServiceManifest {
        let rules = activation ? #", "activation": {"contentTypes": [{"type": "text/plain", "min": 1, "max": 1}]}"# : ""
        let json = #"{"identifier": "\#(identifier)", "executable": "/opt/secret/bin/service", "arguments": ["--token", "hunter2"], "display": {"title": "T \#(identifier)", "subtitle": "S"}\#(rules)}"#
        return try JSONDecoder().decode(ServiceManifest.self, from: Data(json.utf8))
    }

    static func registry() throws -> ServiceRegistry {
        ServiceRegistry(manifests: [try manifest("com.example.notes"), try manifest("com.example.ci.build"), try manifest("com.example.ci.test"),
                                    try manifest("com.example.private"), try manifest("com.example.echo", activation: false)])
    }

    static let authorization = try! GatewayAuthorization(entries: [
        .init(identity: "uri:spiffe://example.org/host/laptop", services: ["com.example.notes", "com.example.ci.*"]),
        .init(identity: "dns:farm.example.org", services: ["com.example.echo"]),
    ])

    /// The lines a gateway logged (warning and above).
    final class LogLines: LogHandler, @unchecked Sendable {
        // @unchecked: the lines are behind their own lock.
        private let lock = Mutex<[String]>([])
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .warning
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) { lock.withLock { $0.append("\(event.message)") } }
        var lines: [String] { lock.withLock { $0 } }
    }

    /// A gateway on 127.0.0.1 (a free port) for `body`, with the test PKI.
    static func withGateway(_ body: (Int, TestPKI) async throws -> Void) async throws {
        try await withGateway(log: LogLines()) { port, pki, _ in try await body(port, pki) }
    }

    /// A gateway on 127.0.0.1 (a free port) for `body`, with the test PKI, logging to `log`.
    static func withGateway(log: LogLines, _ body: (Int, TestPKI, LogLines) async throws -> Void) async throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "remoteview-gateway-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let pki = try TestPKI(folder: folder)
        let logger = Logger(label: "gateway-tests") { _ in log }
        let tls = GatewayTLS(certificateChain: pki.serverCertificate, privateKey: pki.serverKey, clientCA: pki.caCertificate)
        try tls.check()
        let gateway = Gateway(address: .ipv4(host: "127.0.0.1", port: 0), tls: tls,
                              service: GatewayService(registry: try registry(), authorization: authorization, logger: logger))
        try await serving(gateway) { port in try await body(port, pki, log) }
    }

    /// Runs `gateway` for `body`, given its port; then shuts it down and waits for it to end,
    /// whether `body` threw or not.
    static func serving(_ gateway: Gateway, _ body: (Int) async throws -> Void) async throws {
        let serving = Task { try await gateway.run() }
        let outcome: Result<Void, any Error>
        do {
            let port = try #require(try await gateway.transport.listeningAddress.ipv4?.port)
            outcome = .success(try await body(port))
        } catch {
            outcome = .failure(error)
        }
        gateway.shutDown()
        _ = await serving.result
        try outcome.get()
    }

    /// The catalog a client with `client`'s certificate gets (TLS as `security` says).
    static func activities(port: Int, _ security: HTTP2ClientTransport.Posix.TransportSecurity) async throws -> GatewayCatalog {
        // The loopback's address, checked as the gateway's certificate names it ("localhost").
        var config = HTTP2ClientTransport.Posix.Config.defaults
        config.http2.authority = "localhost"
        let transport = try HTTP2ClientTransport.Posix(target: .ipv4(address: "127.0.0.1", port: port), transportSecurity: security, config: config)
        return try await withGRPCClient(transport: transport) { client in
            var options = CallOptions.defaults
            options.timeout = .seconds(10)
            let bytes = try await client.unary(request: ClientRequest(message: []), descriptor: GatewayMethods.activities, serializer: RawBytes(),
                                               deserializer: RawBytes(), options: options) { try $0.message }
            return try JSONDecoder().decode(GatewayCatalog.self, from: Data(bytes))
        }
    }

    static func mTLS(_ client: TestPKI.Client, _ pki: TestPKI) -> HTTP2ClientTransport.Posix.TransportSecurity {
        .mTLS(certificateChain: [.file(path: client.certificate, format: .pem)], privateKey: .file(path: client.key, format: .pem)) { tls in
            tls.trustRoots = .certificates([.file(path: pki.caCertificate, format: .pem)])
        }
    }

    @Test("a client is shown exactly the services its identity is granted (by URI, or by DNS name without regard to case), and nothing of how they run")
    func catalogByIdentity() async throws {
        try await Self.withGateway { port, pki in
            let laptop = try pki.client("laptop", names: [.uniformResourceIdentifier("spiffe://example.org/host/laptop")])
            let catalog = try await Self.activities(port: port, Self.mTLS(laptop, pki))
            #expect(catalog.services.map(\.identifier) == ["com.example.ci.build", "com.example.ci.test", "com.example.notes"])
            #expect(catalog.services.first?.title == "T com.example.ci.build" && catalog.services.first?.activation?.contentTypes.first?.type == "text/plain")
            let json = String(decoding: try JSONEncoder().encode(catalog), as: UTF8.self)
            #expect(!json.contains("/opt/secret") && !json.contains("hunter2"), "no executable, no arguments: \(json)")

            let farm = try pki.client("farm", names: [.dnsName("FARM.example.org")])
            #expect(try await Self.activities(port: port, Self.mTLS(farm, pki)).services.map(\.identifier) == ["com.example.echo"])

            let stranger = try pki.client("stranger", names: [.uniformResourceIdentifier("spiffe://example.org/host/stranger")])
            #expect(try await Self.activities(port: port, Self.mTLS(stranger, pki)).services.isEmpty, "a client the file does not name reaches nothing")
            // A URI is never a DNS name: a URI naming the farm's DNS name, a DNS name spelled as the laptop's URI.
            let twisted = try pki.client("twisted", names: [.uniformResourceIdentifier("farm.example.org"), .dnsName("spiffe://example.org/host/laptop")])
            #expect(try await Self.activities(port: port, Self.mTLS(twisted, pki)).services.isEmpty)
            // A certificate with both names gets the union of their grants.
            let both = try pki.client("both", names: [.uniformResourceIdentifier("spiffe://example.org/host/laptop"), .dnsName("farm.example.org")])
            #expect(try await Self.activities(port: port, Self.mTLS(both, pki)).services.count == 4)
        }
    }

    @Test("refused in the handshake: an expired certificate, one not yet valid, one from another CA, none at all, and plaintext; the gateway logs why, with the peer; it serves on")
    func refusals() async throws {
        try await Self.withGateway(log: LogLines()) { port, pki, log in
            let names: [GeneralName] = [.uniformResourceIdentifier("spiffe://example.org/host/laptop")]
            let expired = try pki.client("expired", names: names, notBefore: Date() - 86400 * 2, notAfter: Date() - 86400)
            let early = try pki.client("early", names: names, notBefore: Date() + 86400, notAfter: Date() + 86400 * 2)
            let foreign = try pki.client("foreign", names: names, foreign: true)
            let cases: [(String, HTTP2ClientTransport.Posix.TransportSecurity)] = [
                ("expired", Self.mTLS(expired, pki)), ("not yet valid", Self.mTLS(early, pki)), ("another CA", Self.mTLS(foreign, pki)),
                ("no certificate", .tls { $0.trustRoots = .certificates([.file(path: pki.caCertificate, format: .pem)]) }),
                ("plaintext", .plaintext),
            ]
            for (what, security) in cases {
                do {
                    _ = try await Self.activities(port: port, security)
                    Issue.record("\(what): let in")
                } catch let error as RPCError {
                    // Refused before any call: the connection fails (the handshake, or no HTTP/2 over plaintext).
                    print("refused, \(what): \(error.code): \(error.message)")
                    #expect(error.code == .unavailable, "\(what): \(error)")
                }
            }
            let laptop = try pki.client("laptop", names: names)
            #expect(try await Self.activities(port: port, Self.mTLS(laptop, pki)).services.count == 3, "a good client still gets in")
            let refused = log.lines.filter { $0.hasPrefix("refused a TLS handshake from [IPv4]127.0.0.1") }
            #expect(refused.count == 5, "\(log.lines)")
            #expect(refused.count { $0.contains("failed verification against --client-ca (expired, not yet valid, or from another CA)") } == 3, "\(refused)")
            #expect(refused.contains { $0.contains("the client sent no certificate") }, "\(refused)")
            #expect(refused.contains { $0.contains("does not speak TLS (plaintext?)") }, "\(refused)")
        }
    }

    @Test("certificates from the CA that identify no one are refused as unauthenticated, saying why: no URI and no DNS name, only a wildcard, or made for a server")
    func anonymous() async throws {
        try await Self.withGateway { port, pki in
            for (client, why) in [(try pki.client("nobody", names: []), "names no URI and no DNS name"),
                                  (try pki.client("wildcard", names: [.dnsName("*.example.org")]), "names no URI and no DNS name (wildcards do not count)"),
                                  (try pki.client("server", names: [.dnsName("farm.example.org")], serverAuth: true), "extended key usage does not list clientAuth")] {
                do {
                    _ = try await Self.activities(port: port, Self.mTLS(client, pki))
                    Issue.record("let in: \(why)")
                } catch let error as RPCError {
                    // A server's certificate may already fail the handshake (BoringSSL's purpose check).
                    #expect((error.code == .unauthenticated && error.message.contains(why)) || error.code == .unavailable, "\(error)")
                }
            }
        }
    }

    @Test("the gateway's TLS files are checked before it serves, each mistake naming its option")
    func tlsFiles() throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "remoteview-gateway-tls-\(getpid())").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let pki = try TestPKI(folder: folder)
        let client = try pki.client("client", names: [.dnsName("a.example.org")])
        let cases: [(GatewayTLS, String)] = [
            (GatewayTLS(certificateChain: folder + "/none.pem", privateKey: pki.serverKey, clientCA: pki.caCertificate), "cannot read --certificate"),
            (GatewayTLS(certificateChain: pki.serverKey, privateKey: pki.serverKey, clientCA: pki.caCertificate), "--certificate"),
            (GatewayTLS(certificateChain: pki.serverCertificate, privateKey: client.key, clientCA: pki.caCertificate), "is not the key of --certificate"),
            (GatewayTLS(certificateChain: pki.serverCertificate, privateKey: pki.serverKey, clientCA: client.certificate), "is not a CA certificate"),
        ]
        for (tls, named) in cases {
            do throws(GatewayError) { try tls.check(); Issue.record("accepted: \(named)") } catch {
                #expect(error.description.contains(named), "\(error)")
            }
        }
        do throws(GatewayError) {
            try GatewayTLS(certificateChain: pki.serverCertificate, privateKey: pki.serverKey, clientCA: pki.caCertificate).check(now: Date() + 86400 * 400)
            Issue.record("an expired gateway certificate accepted")
        } catch {
            #expect(error.description.contains("not now"))
        }
    }

    @Test("a catalog over its bound leaves out the largest icons first, then the last services, and says which")
    func boundedCatalog() throws {
        var catalog = GatewayCatalog(registry: try Self.registry(), grant: GatewayAuthorization.Grant(patterns: ["*"]))
        catalog.services[0].icon = Data(repeating: 1, count: 30_000)
        catalog.services[1].icon = Data(repeating: 2, count: 10_000)
        catalog.services[2].icon = Data(repeating: 3, count: 20_000)
        let unbounded = try catalog.encoded().count
        let (fewerIcons, icons, services) = catalog.bounded(to: unbounded - 30_000)
        #expect(icons == [catalog.services[0].identifier] && services.isEmpty, "the largest icon goes first")
        #expect(try fewerIcons.encoded().count <= unbounded - 30_000 && fewerIcons.services.count == catalog.services.count)
        let (tiny, allIcons, left) = catalog.bounded(to: 600)
        #expect(allIcons.count == 3 && !left.isEmpty && tiny.services.count + left.count == catalog.services.count)
        #expect(try tiny.encoded().count <= 600)
        #expect(left == catalog.services.suffix(left.count).map(\.identifier), "the last services go, in order")
    }

    @Test("the authorization file: identities and patterns checked, named when wrong")
    func authorizationFile() throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "remoteview-authorization-\(getpid())").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        func load(_ json: String) throws(GatewayError) -> GatewayAuthorization {
            let path = folder + "/clients.json"
            try! Data(json.utf8).write(to: URL(filePath: path))
            return try GatewayAuthorization(contentsOf: path)
        }
        let good = try load(#"{"version": 1, "clients": [{"identity": "dns:A.example.org", "services": ["*"]}, {"identity": "dns:a.example.org", "services": ["x.y"]}]}"#)
        let grant = good.grant(for: ClientIdentity(dnsNames: ["a.example.org"]))
        #expect(grant.allows("anything.at.all") && grant.patterns == ["*", "x.y"])
        #expect(!good.grant(for: ClientIdentity(uris: ["a.example.org"])).allows("x.y"), "a URI is not a DNS name")
        let prefix = try GatewayAuthorization(entries: [.init(identity: "uri:u:x", services: ["com.example.ci.*"])]).grant(for: ClientIdentity(uris: ["u:x"]))
        #expect(prefix.allows("com.example.ci.build") && !prefix.allows("com.example.cinema") && !prefix.allows("com.example.ci"))
        for (json, named) in [(#"{"version": 2, "clients": []}"#, "version 2"),
                              (#"{"version": 1, "clients": [{"identity": "", "services": []}]}"#, "clients[0].identity"),
                              (#"{"version": 1, "clients": [{"identity": "a.example.org", "services": []}]}"#, "not uri:URI or dns:NAME"),
                              (#"{"version": 1, "clients": [{"identity": "dns:*.example.org", "services": []}]}"#, "no wildcard"),
                              (#"{"version": 1, "clients": [{"identity": "dns:a", "services": ["com..x"]}]}"#, "clients[0].services[0] \"com..x\""),
                              (#"{"version": 1, "clients": [{"identity": "dns:a", "services": ["com.*.x"]}]}"#, "clients[0].services[0]"),
                              (#"{"version": 1}"#, "not an authorization file")] {
            do throws(GatewayError) { _ = try load(json); Issue.record("accepted \(json)") } catch {
                #expect(error.description.contains(named), "\(error)")
            }
        }
        do throws(GatewayError) { _ = try GatewayAuthorization(contentsOf: folder + "/none.json"); Issue.record("no error") } catch {
            #expect(error.description.contains("cannot read the authorization file"))
        }
    }
}
