import FoundationEssentials
import Glibc
import GRPCCore
import GRPCNIOTransportHTTP2
@testable import RemoteGateway
import RemoteHost
import Testing
import X509

/// A hostile gateway is a hostile peer: a server with the gateway's TLS material that answers
/// `Connect` with what a gateway must not send. The host's connection is cut off, naming the
/// rule, within a deadline; the host neither crashes nor hangs.
@Suite("Gateway: a hostile gateway", .serialized)
struct HostileGatewayTests {
    /// Answers `Connect` with `script` (after reading the open frame), then waits for the
    /// client's end.
    struct ScriptedConnect: RegistrableRPCService {
        let script: [[UInt8]]

        func registerMethods<Transport: ServerTransport>(with router: inout RPCRouter<Transport>) {
            let script = script
            router.registerHandler(forMethod: GatewayMethods.connect, deserializer: RawBytes(), serializer: RawBytes()) { request, _ in
                StreamingServerResponse { writer in
                    var messages = request.messages.makeAsyncIterator()
                    _ = try await messages.next()
                    for frame in script { try await writer.write(frame) }
                    while try await messages.next() != nil {}
                    return [:]
                }
            }
        }
    }

    /// A server answering with `script` on 127.0.0.1, and a client of it, for `body`.
    static func withHostileGateway(_ script: [[UInt8]], _ body: (GatewayClient) async throws -> Void) async throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "remoteview-hostile-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let pki = try TestPKI(folder: folder)
        let tls = GatewayTLS(certificateChain: pki.serverCertificate, privateKey: pki.serverKey, clientCA: pki.caCertificate)
        let transport = HTTP2ServerTransport.Posix(address: .ipv4(host: "127.0.0.1", port: 0), transportSecurity: tls.transportSecurity)
        let server = GRPCServer(transport: transport, services: [ScriptedConnect(script: script)])
        let serving = Task { try await server.serve() }
        defer { server.beginGracefulShutdown() }
        let port = try #require(try await transport.listeningAddress.ipv4?.port)
        let laptop = try pki.client("laptop", names: [.uniformResourceIdentifier("spiffe://example.org/host/laptop")])
        let client = GatewayClient(address: .ipv4(host: "127.0.0.1", port: port), certificateChain: laptop.certificate,
                                   privateKey: laptop.key, gatewayCA: pki.caCertificate, serverName: "localhost")
        do { try await body(client) } catch {
            server.beginGracefulShutdown()
            _ = await serving.result
            throw error
        }
        server.beginGracefulShutdown()
        _ = await serving.result
    }

    /// How a connection through `script` fails: at `connect`, or on its first request.
    static func failure(of script: [[UInt8]], within timeout: Duration = .seconds(10)) async throws -> RemoteError? {
        var failure: RemoteError?
        try await withHostileGateway(script) { client in
            let configuration = Connection.Configuration(role: .host, identifier: "com.example.far-host", expectedPeerIdentifier: "com.example.test")
            let connection: Connection
            do throws(RemoteError) {
                connection = try await client.connect(to: "com.example.test", configuration: configuration, within: timeout)
            } catch {
                failure = error
                return
            }
            do {
                _ = try await connection.withRunning { connection in
                    try await connection.request(ServiceMessage(type: "echo"), timeout: timeout)
                }
            } catch let error as RemoteError {
                failure = error
            }
        }
        return failure
    }

    @Test("garbage, oversized frames, items larger than announced, broken order and malformed envelopes: each cuts the connection off, naming its rule",
          arguments: [
            ("a frame of no kind", [ConnectFrame.opened().encoded(), [9, 1, 2]], "connect.kind"),
            ("an item larger than announced", [ConnectFrame.opened().encoded(), ConnectFrame.packet(envelope: [1], attachmentSizes: [4]).encoded(),
                                               ConnectFrame.chunk([1, 2, 3, 4, 5, 6]).encoded()], "connect.chunk.overrun"),
            ("17 attachments", [ConnectFrame.opened().encoded(), [3, 17] + Array(repeating: 0, count: 4 * 17) + [1]], "connect.packet.attachments"),
            ("a chunk before opened", [ConnectFrame.chunk([1]).encoded()], "connect.opened.first"),
            ("a second opened", [ConnectFrame.opened().encoded(), ConnectFrame.opened().encoded()], "connect.opened.again"),
            ("an end whose reason is not one", [ConnectFrame.opened().encoded(), [5, 1] + Array("{\"kind\": \"exploded\"}".utf8)], "connect.end.reason"),
          ] as [(String, [[UInt8]], String)])
    func brokenFrames(what: String, script: [[UInt8]], rule: String) async throws {
        let failure = try await Self.failure(of: script)
        #expect(failure?.code == .protocolViolation, "\(what): \(String(describing: failure))")
        #expect(failure?.reason.contains(rule) == true, "\(what): \(String(describing: failure))")
    }

    @Test("a message over a frame's bound is refused before it is read")
    func oversized() async throws {
        let failure = try await Self.failure(of: [ConnectFrame.opened().encoded(), [3, 0] + Array(repeating: 7, count: 100_000)])
        #expect(failure?.code == .protocolViolation && failure?.reason.contains("connect.frame-size") == true, "\(String(describing: failure?.reason.prefix(300)))")
    }

    @Test("an envelope that is not one, inside a well-formed packet, is refused by the host's connection as a local service's would be")
    func garbageEnvelope() async throws {
        let failure = try await Self.failure(of: [ConnectFrame.opened().encoded(), ConnectFrame.packet(envelope: [0xFF, 0xFF, 0xFF, 0x0F], attachmentSizes: []).encoded()])
        #expect(failure?.code == .protocolViolation, "\(String(describing: failure))")
    }

    @Test("a gateway that never opens is given up on when the host's time is up, as timeout")
    func neverOpens() async throws {
        let failure = try await Self.failure(of: [], within: .milliseconds(500))
        #expect(failure?.code == .timeout && failure?.reason.contains("did not open com.example.test") == true, "\(String(describing: failure))")
    }

    @Test("a gateway's words are escaped: an end reason with terminal escapes reaches the host escaped")
    func escapedReason() async throws {
        var reason = TerminationReason(kind: .exited, detail: "\u{1B}]0;owned\u{07}gone", exitCode: 1)
        reason.standardErrorTail = ["\u{1B}[2J"]
        let failure = try await Self.failure(of: [ConnectFrame.opened().encoded(), ConnectFrame.end(ConnectEnd(code: .ended, reason: reason)).encoded()])
        #expect(failure?.code == .interrupted, "\(String(describing: failure))")
        #expect(failure?.reason.contains("\u{1B}") == false, "\(String(describing: failure))")
    }
}
