import GRPCCore
import Synchronization
import GRPCNIOTransportHTTP2
import NIOCore
import NIOSSL
import Logging
import RemoteHost
import ServiceLifecycle
import FoundationEssentials
import SwiftASN1
import X509

/// The bytes of a message, unchanged, both ways: the gateway's messages are RemoteView's own
/// encodings (the catalog's JSON; the envelopes' protobuf-c bytes), not swift-protobuf's.
public struct RawBytes: MessageSerializer, MessageDeserializer {
    public typealias Message = [UInt8]

    public init() {}

    public func serialize<Output: GRPCContiguousBytes>(_ message: [UInt8]) throws -> Output { Output(message) }

    public func deserialize<Input: GRPCContiguousBytes>(_ serializedMessageBytes: Input) throws -> [UInt8] {
        serializedMessageBytes.withUnsafeBytes { Array($0) }
    }
}

/// The gateway's gRPC methods (service `remoteview.gateway.v1.Gateway`).
public enum GatewayMethods {
    /// `Activities`: one request (empty), one response, the ``GatewayCatalog`` of the services
    /// the calling client may reach, as JSON.
    public static let activities = MethodDescriptor(fullyQualifiedService: "remoteview.gateway.v1.Gateway", method: "Activities")
    /// `Connect`: one bidirectional stream per connection to a service, its messages
    /// ``ConnectFrame``s (docs/Gateway.md, "Connect").
    public static let connect = MethodDescriptor(fullyQualifiedService: "remoteview.gateway.v1.Gateway", method: "Connect")
    /// `View`: a `Connect` call's view (framing version 2): its ``ViewFrame``s to the host, the
    /// host's `presented` back. The first message is the call's token.
    public static let view = MethodDescriptor(fullyQualifiedService: "remoteview.gateway.v1.Gateway", method: "View")
    /// `Input`: a `Connect` call's view's input (``InputFrame``s), apart from its frames and
    /// replies. The first message is the call's token.
    public static let input = MethodDescriptor(fullyQualifiedService: "remoteview.gateway.v1.Gateway", method: "Input")
}

/// Where a gateway's TLS material is: its certificate chain and key (PEM), and the one CA that
/// every client certificate must chain to (PEM). Nothing else is trusted: not the system's
/// roots, which grpc-swift-nio-transport's `.mTLS` would trust by default.
public struct GatewayTLS: Sendable, Hashable {
    /// The gateway's certificate chain, leaf first (PEM).
    public var certificateChain: String
    /// The gateway's private key (PEM).
    public var privateKey: String
    /// The CA that client certificates must chain to (PEM): the only trust root.
    public var clientCA: String

    /// The gateway's TLS material at these paths.
    public init(certificateChain: String, privateKey: String, clientCA: String) {
        self.certificateChain = certificateChain
        self.privateKey = privateKey
        self.clientCA = clientCA
    }

    /// Reads and checks the three files before the server starts, so that a mistake names its
    /// option: each is a readable PEM file of at most 1 MiB; the chain holds certificates, the
    /// first valid now; the key is the first certificate's; the client CA file holds CA
    /// certificates only.
    ///
    /// - Throws: ``GatewayError`` naming the option (`--certificate`, `--key`, `--client-ca`), the
    ///   file and what is wrong.
    public func check(now: Date = Date()) throws(GatewayError) {
        func pem(_ path: String, _ option: String) throws(GatewayError) -> String {
            let bytes = try readBoundedFile(path, limit: 1 << 20, what: option)
            return String(decoding: bytes, as: UTF8.self)
        }
        func certificates(_ path: String, _ option: String) throws(GatewayError) -> [Certificate] {
            let text = try pem(path, option)
            do {
                let certificates = try PEMDocument.parseMultiple(pemString: text).map { try Certificate(pemDocument: $0) }
                guard !certificates.isEmpty else { throw GatewayError("no certificate") }
                return certificates
            } catch {
                throw GatewayError("\(option) \(path.escapedForTerminal()): not PEM certificates: \(String(describing: error).escapedForTerminal())")
            }
        }
        let chain = try certificates(certificateChain, "--certificate")
        guard chain[0].notValidBefore <= now, now <= chain[0].notValidAfter else {
            throw GatewayError("--certificate \(certificateChain.escapedForTerminal()): the gateway's certificate is valid from \(chain[0].notValidBefore) to \(chain[0].notValidAfter), not now")
        }
        let key: Certificate.PrivateKey
        do { key = try Certificate.PrivateKey(pemEncoded: try pem(privateKey, "--key")) } catch let error as GatewayError {
            throw error
        } catch {
            throw GatewayError("--key \(privateKey.escapedForTerminal()): not a PEM private key: \(String(describing: error).escapedForTerminal())")
        }
        guard key.publicKey == chain[0].publicKey else {
            throw GatewayError("--key \(privateKey.escapedForTerminal()) is not the key of --certificate \(certificateChain.escapedForTerminal())")
        }
        for certificate in try certificates(clientCA, "--client-ca") {
            guard case .isCertificateAuthority = try? certificate.extensions.basicConstraints else {
                throw GatewayError("--client-ca \(clientCA.escapedForTerminal()): \(String(describing: certificate.subject).escapedForTerminal()) is not a CA certificate")
            }
        }
    }

    /// The server transport's security: mutual TLS only, client certificates verified against
    /// ``clientCA`` alone (chain, validity dates, key usage; not a hostname: a client is named
    /// by its subject alternative names instead), and ALPN required (HTTP/2).
    public var transportSecurity: HTTP2ServerTransport.Posix.TransportSecurity {
        .mTLS(certificateChain: [.file(path: certificateChain, format: .pem)], privateKey: .file(path: privateKey, format: .pem)) { tls in
            tls.trustRoots = .certificates([.file(path: clientCA, format: .pem)])
            tls.clientCertificateVerification = .noHostnameVerification
            tls.requireALPN = true
        }
    }
}

/// The gateway's gRPC service: each call's client is identified by its certificate's subject
/// alternative names (``ClientIdentity``), and reaches only what ``GatewayAuthorization``
/// grants it.
public struct GatewayService: RegistrableRPCService {
    let registry: ServiceRegistry
    let authorization: GatewayAuthorization
    let launcher: Launcher?
    let logger: Logger
    /// The `Connect` calls whose views stream, by token.
    let sessions = ViewSessions()
    /// How views' frames are compressed (`nil`: lz4, or zstd while the link is the bottleneck).
    let viewCodec: ViewFrame.Codec?

    /// The service over `registry`'s services, as `authorization` grants them, reached through
    /// `launcher` (a launcher over the same registry, running). Without one, the gateway shows
    /// its catalog but `Connect` fails with `unavailable`.
    ///
    /// `viewCodec` compresses every view's frames with one codec (for measuring them); `nil`
    /// chooses as docs/Gateway.md, "Views", says.
    public init(registry: ServiceRegistry, authorization: GatewayAuthorization, launcher: Launcher? = nil, viewCodec: ViewFrame.Codec? = nil,
                logger: Logger) {
        self.registry = registry
        self.authorization = authorization
        self.launcher = launcher
        self.viewCodec = viewCodec
        self.logger = logger
    }

    public func registerMethods<Transport: ServerTransport>(with router: inout RPCRouter<Transport>) {
        let (authorization, logger) = (authorization, logger)
        let catalogs = Catalogs(registry: registry, logger: logger)
        router.registerHandler(forMethod: GatewayMethods.activities, deserializer: RawBytes(), serializer: RawBytes()) { request, context in
            let client = try Self.identify(context, logger: logger)
            // The request is one empty message, read to its end within a deadline: a client
            // that never ends its request holds nothing up (a graceful shutdown waits for calls).
            try await Self.readEmptyRequest(request.messages, within: Self.requestDeadline)
            let bytes = try catalogs.encoded(for: authorization.grant(for: client), client: client)
            return StreamingServerResponse(single: ServerResponse(message: bytes))
        }
        let (launcher, registry, sessions, viewCodec) = (launcher, registry, sessions, viewCodec)
        router.registerHandler(forMethod: GatewayMethods.connect, deserializer: RawBytes(), serializer: RawBytes()) { request, context in
            let client = try Self.identify(context, logger: logger)
            guard let launcher else {
                throw RPCError(code: .unavailable, message: "this gateway serves its catalog only: it runs no launcher")
            }
            let call = ConnectCall(launcher: launcher, registry: registry, grant: authorization.grant(for: client), client: client,
                                   sessions: sessions, viewCodec: viewCodec, logger: logger)
            return StreamingServerResponse { writer in
                try await call.run(request.messages, writer)
                return [:]
            }
        }
        router.registerHandler(forMethod: GatewayMethods.view, deserializer: RawBytes(), serializer: RawBytes()) { request, context in
            let client = try Self.identify(context, logger: logger)
            return StreamingServerResponse { writer in
                try await Self.serveView(request.messages, writer, client: client, sessions: sessions, logger: logger)
                return [:]
            }
        }
        router.registerHandler(forMethod: GatewayMethods.input, deserializer: RawBytes(), serializer: RawBytes()) { request, context in
            let client = try Self.identify(context, logger: logger)
            return StreamingServerResponse { writer in
                try await Self.serveInput(request.messages, writer, client: client, sessions: sessions, logger: logger)
                return [:]
            }
        }
    }

    /// Each grant's catalog, encoded and bounded once: the registry and the authorization do
    /// not change while the gateway runs, so a call costs a lookup, not an encoding of every
    /// icon.
    final class Catalogs: Sendable {
        private let registry: ServiceRegistry
        private let logger: Logger
        private let encoded = Mutex<[GatewayAuthorization.Grant: [UInt8]]>([:])

        init(registry: ServiceRegistry, logger: Logger) {
            self.registry = registry
            self.logger = logger
        }

        /// The encoded catalog for `grant` (at most `GatewayCatalog.maxEncodedBytes`).
        func encoded(for grant: GatewayAuthorization.Grant, client: ClientIdentity) throws -> [UInt8] {
            if let bytes = encoded.withLock({ $0[grant] }) { return bytes }
            let (catalog, iconsLeftOut, servicesLeftOut) = GatewayCatalog(registry: registry, grant: grant).bounded()
            if !iconsLeftOut.isEmpty || !servicesLeftOut.isEmpty {
                logger.warning("the catalog for \(client) is over \(GatewayCatalog.maxEncodedBytes) bytes: icons left out: \(iconsLeftOut.joined(separator: ", ").escapedForTerminal()); services left out: \(servicesLeftOut.joined(separator: ", ").escapedForTerminal())")
            }
            logger.debug("activities for \(client): \(catalog.services.count) of \(registry.services.count) services")
            let bytes: [UInt8]
            do throws(GatewayError) { bytes = try catalog.encoded() } catch { throw RPCError(code: .internalError, message: error.description) }
            encoded.withLock { $0[grant] = bytes }
            return bytes
        }
    }

    /// How long a client has to send a call's request and end it (10 s).
    static let requestDeadline: Duration = .seconds(10)

    /// Reads `messages` to their end: at most one message, empty, within `deadline`.
    static func readEmptyRequest(_ messages: RPCAsyncSequence<[UInt8], any Error>, within deadline: Duration) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                var count = 0
                for try await message in messages {
                    count += 1
                    guard count == 1, message.isEmpty else {
                        throw RPCError(code: .invalidArgument, message: "Activities takes one empty request message")
                    }
                }
            }
            group.addTask {
                try await Task.sleep(for: deadline)
                throw RPCError(code: .deadlineExceeded, message: "the request did not end within \(deadline)")
            }
            defer { group.cancelAll() }
            try await group.next()
        }
    }

    /// The client of a call: its certificate's identity.
    ///
    /// - Throws: `RPCError` `unauthenticated` when the call came without a client certificate
    ///   (the transport refuses that already: this is a second lock), or one that names no one.
    static func identify(_ context: ServerContext, logger: Logger) throws -> ClientIdentity {
        guard let posix = context.transportSpecific as? HTTP2ServerTransport.Posix.Context, let certificate = posix.peerCertificate else {
            logger.warning("a call from \(context.remotePeer.escapedForTerminal()) came without a client certificate the gateway could read: refused")
            throw RPCError(code: .unauthenticated, message: "the gateway takes only clients with a certificate from its CA")
        }
        do { return try ClientIdentity(certificate: certificate) } catch {
            logger.warning("a call from \(context.remotePeer.escapedForTerminal()): \(error.description)")
            throw RPCError(code: .unauthenticated, message: error.description)
        }
    }
}

/// Logs why a connection's TLS handshake failed (an expired certificate, an unknown CA, none at
/// all), with the peer's address: what the refused client is only told as "unavailable".
final class HandshakeRefusalLogger: ChannelInboundHandler, Sendable {
    typealias InboundIn = NIOAny
    let logger: Logger

    init(logger: Logger) { self.logger = logger }

    /// BoringSSL's reason, in words where it has a usual cause (BoringSSL says only that
    /// verification failed, not whether the certificate expired or came from another CA).
    static func explain(_ reason: String) -> String {
        let words: [(String, String)] = [
            ("CERTIFICATE_VERIFY_FAILED", "the client's certificate failed verification against --client-ca (expired, not yet valid, or from another CA)"),
            ("PEER_DID_NOT_RETURN_A_CERTIFICATE", "the client sent no certificate"),
            ("WRONG_VERSION_NUMBER", "the client does not speak TLS (plaintext?)"),
            ("NO_SHARED_CIPHER", "the client shares no cipher with the gateway"),
            ("UNSUPPORTED_PROTOCOL", "the client's TLS version is too old"),
        ]
        let code = words.first { reason.contains($0.0) }
        return code.map { "\($0.1) [\($0.0)]" } ?? reason
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if case NIOSSLError.handshakeFailed(let reason) = error {
            let peer = context.channel.remoteAddress.map { "\($0)" } ?? "an unknown peer"
            logger.warning("refused a TLS handshake from \(peer.escapedForTerminal()): \(Self.explain(String(describing: reason)).escapedForTerminal())")
        }
        context.fireErrorCaught(error)
    }
}

/// A gateway: the gRPC server over HTTP/2 with mutual TLS, serving ``GatewayService``, run as a
/// swift-service-lifecycle `Service` (SIGTERM: a graceful shutdown, calls in progress finish).
public final class Gateway: Service, Sendable {
    /// The server's transport, for its address once bound.
    public let transport: HTTP2ServerTransport.Posix
    private let server: GRPCServer<HTTP2ServerTransport.Posix>

    /// A gateway listening on `address` with `tls`, serving `service`; a refused TLS handshake
    /// is logged to `service`'s logger with its peer and BoringSSL's reason.
    public init(address: GRPCNIOTransportCore.SocketAddress, tls: GatewayTLS, service: GatewayService) {
        transport = HTTP2ServerTransport.Posix(address: address, transportSecurity: tls.transportSecurity, config: Self.config(logger: service.logger))
        server = GRPCServer(transport: transport, services: [service])
    }

    /// The transport's bounds (docs/Gateway.md, "Bounds"), and a logger of refused handshakes.
    static func config(logger: Logger) -> HTTP2ServerTransport.Posix.Config {
        var config = HTTP2ServerTransport.Posix.Config.defaults
        config.channelDebuggingCallbacks.onAcceptTCPConnection = { channel in
            channel.eventLoop.makeCompletedFuture {
                let tls = try channel.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self)
                try channel.pipeline.syncOperations.addHandler(HandshakeRefusalLogger(logger: logger), position: .after(tls))
            }
        }
        // A message is at most a Connect frame (a RemoteView packet of 64 KiB, and its
        // header); the catalog's request is empty.
        config.rpc.maxRequestPayloadSize = ConnectFrame.maxFrameBytes
        // A connection with no call open for 60 s is closed; none lives over an hour, so a
        // certificate that expired is not used for long; after that, calls have 30 s to end.
        config.connection.maxIdleTime = .seconds(60)
        config.connection.maxAge = .seconds(3600)
        config.connection.maxGraceTime = .seconds(30)
        // At most 64 calls at once on one connection.
        config.http2.maxConcurrentStreams = 64
        // A ping every 30 s (answered within 10 s): a client gone silent ends its streams,
        // and their processes are let go. Clients ping while a stream is open.
        config.connection.keepalive = .init(time: .seconds(30), timeout: .seconds(10), clientBehavior: .defaults)
        return config
    }

    /// Serves until a graceful shutdown (SIGTERM under a `ServiceGroup`) or cancellation.
    public func run() async throws {
        try await withGracefulShutdownHandler {
            try await server.serve()
        } onGracefulShutdown: { [server] in
            server.beginGracefulShutdown()
        }
    }

    /// Stops accepting calls; those in progress finish.
    public func shutDown() { server.beginGracefulShutdown() }
}
