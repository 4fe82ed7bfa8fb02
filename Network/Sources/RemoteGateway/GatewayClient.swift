import FoundationEssentials
import GRPCCore
import GRPCNIOTransportHTTP2

/// A client of a gateway: the catalog of what it may reach (`Activities`), and connections to
/// those services (`Connect`, ``connect(to:configuration:onRequest:onMessage:within:)``). With a
/// certificate from the gateway's client CA, trusting the gateway's CA alone.
public struct GatewayClient: Sendable {
    /// Where the gateway listens.
    public var address: GRPCNIOTransportCore.SocketAddress
    /// The client's certificate chain and key (PEM).
    public var certificateChain: String, privateKey: String
    /// The CA the gateway's certificate must chain to (PEM): the only trust root.
    public var gatewayCA: String
    /// The name the gateway's certificate must carry (and the TLS server name sent); `nil`:
    /// the address itself (an IP address the certificate names).
    public var serverName: String?
    /// The `Connect` framing version the client speaks (the latest; tests set 1 to be a client
    /// from before views had streams of their own).
    package var framingVersion = ConnectFrame.version

    /// A client of the gateway at `address` with this TLS material.
    public init(address: GRPCNIOTransportCore.SocketAddress, certificateChain: String, privateKey: String, gatewayCA: String, serverName: String? = nil) {
        self.address = address
        self.certificateChain = certificateChain
        self.privateKey = privateKey
        self.gatewayCA = gatewayCA
        self.serverName = serverName
    }

    /// What to check when the gateway cannot be reached or refused the TLS handshake, in words.
    var handshakeHint: String {
        "(is this certificate from its client CA, valid now and made for a client; is its certificate from the gateway CA given (--ca) and named \(serverName ?? "by its address")?)"
    }

    /// The catalog of the services this client may reach, within `timeout`.
    ///
    /// - Throws: ``GatewayError`` saying what failed, in words: the gateway cannot be reached or
    ///   refused the TLS handshake (with what to check), it refused the client, or its answer is
    ///   not a catalog.
    public func activities(timeout: Duration = .seconds(10)) async throws(GatewayError) -> GatewayCatalog {
        let transport = try makeTransport()
        let bytes: [UInt8]
        do {
            bytes = try await withGRPCClient(transport: transport) { client in
                var options = CallOptions.defaults
                options.timeout = timeout
                return try await client.unary(request: ClientRequest(message: []), descriptor: GatewayMethods.activities, serializer: RawBytes(),
                                              deserializer: RawBytes(), options: options) { try $0.message }
            }
        } catch let error as RPCError {
            switch error.code {
            case .unavailable:
                throw GatewayError("the gateway at \(address) cannot be reached, or refused the TLS handshake \(handshakeHint): \(error.message.escapedForTerminal())")
            case .unauthenticated, .permissionDenied:
                throw GatewayError("the gateway at \(address) refused this client: \(error.message.escapedForTerminal())")
            default:
                throw GatewayError("the gateway at \(address): \(error.code): \(error.message.escapedForTerminal())")
            }
        } catch {
            throw GatewayError("cannot call the gateway at \(address): \(String(describing: error).escapedForTerminal())")
        }
        do { return try JSONDecoder().decode(GatewayCatalog.self, from: Data(bytes)) } catch {
            throw GatewayError("the gateway at \(address) answered with no catalog: \(String(describing: error).escapedForTerminal())")
        }
    }
}
