import GRPCCore
import GRPCNIOTransportHTTP2
import Logging
import RemoteHost
import ServiceLifecycle
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

    /// The server transport's security: mutual TLS only, client certificates verified against
    /// ``clientCA`` alone (chain, validity dates, key usage; not a hostname: a client is named
    /// by its subject alternative names instead), and ALPN required (HTTP/2).
    var transportSecurity: HTTP2ServerTransport.Posix.TransportSecurity {
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
    let logger: Logger

    /// The service over `registry`'s services, as `authorization` grants them.
    public init(registry: ServiceRegistry, authorization: GatewayAuthorization, logger: Logger) {
        self.registry = registry
        self.authorization = authorization
        self.logger = logger
    }

    public func registerMethods<Transport: ServerTransport>(with router: inout RPCRouter<Transport>) {
        let (registry, authorization, logger) = (registry, authorization, logger)
        router.registerHandler(forMethod: GatewayMethods.activities, deserializer: RawBytes(), serializer: RawBytes()) { request, context in
            let client = try Self.identify(context, logger: logger)
            // The request holds nothing; it is read to its end, and bounded.
            var messages = 0
            for try await _ in request.messages {
                messages += 1
                guard messages <= 1 else { throw RPCError(code: .invalidArgument, message: "Activities takes one request message") }
            }
            let grant = authorization.grant(for: client)
            let catalog = GatewayCatalog(registry: registry, grant: grant)
            logger.info("activities for \(client): \(catalog.services.count) of \(registry.services.count) services")
            let bytes: [UInt8]
            do throws(GatewayError) { bytes = try catalog.encoded() } catch { throw RPCError(code: .internalError, message: error.description) }
            return StreamingServerResponse(single: ServerResponse(message: bytes))
        }
    }

    /// The client of a call: its certificate's identity.
    ///
    /// - Throws: `RPCError` `unauthenticated` when the call came without a client certificate
    ///   (the transport refuses that already: this is a second lock), or one that names no one.
    static func identify(_ context: ServerContext, logger: Logger) throws -> ClientIdentity {
        guard let posix = context.transportSpecific as? HTTP2ServerTransport.Posix.Context, let certificate = posix.peerCertificate else {
            logger.warning("a call from \(context.remotePeer.escapedForTerminal()) came without a client certificate: refused")
            throw RPCError(code: .unauthenticated, message: "the gateway takes only clients with a certificate from its CA")
        }
        do { return try ClientIdentity(certificate: certificate) } catch {
            logger.warning("a call from \(context.remotePeer.escapedForTerminal()): \(error.description)")
            throw RPCError(code: .unauthenticated, message: error.description)
        }
    }
}

/// A gateway: the gRPC server over HTTP/2 with mutual TLS, serving ``GatewayService``, run as a
/// swift-service-lifecycle `Service` (SIGTERM: a graceful shutdown, calls in progress finish).
public final class Gateway: Service, Sendable {
    /// The server's transport, for its address once bound.
    public let transport: HTTP2ServerTransport.Posix
    private let server: GRPCServer<HTTP2ServerTransport.Posix>

    /// A gateway listening on `address` with `tls`, serving `service`.
    public init(address: GRPCNIOTransportCore.SocketAddress, tls: GatewayTLS, service: GatewayService) {
        var config = HTTP2ServerTransport.Posix.Config.defaults
        // A request or reply larger than a packet of RemoteView's (64 KiB) plus the catalog's
        // icons is no gateway message: 4 MiB, gRPC's default, bounds them.
        config.rpc.maxRequestPayloadSize = 4 << 20
        transport = HTTP2ServerTransport.Posix(address: address, transportSecurity: tls.transportSecurity, config: config)
        server = GRPCServer(transport: transport, services: [service])
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
