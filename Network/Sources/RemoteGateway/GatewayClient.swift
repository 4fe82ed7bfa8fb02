import Glibc
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

extension GatewayClient {
    /// `HOST:PORT`, `[IPv6]:PORT` or `unix:PATH` as a socket address: a gateway listens on an
    /// address, not a name.
    ///
    /// - Throws: ``GatewayError`` saying what `text` is not (escaped).
    public static func address(_ text: String) throws(GatewayError) -> GRPCNIOTransportCore.SocketAddress {
        if text.hasPrefix("unix:") {
            let path = String(text.dropFirst(5))
            guard !path.isEmpty else { throw GatewayError("\(text.escapedForTerminal()): unix: needs a path") }
            return .unixDomainSocket(path: path)
        }
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else {
            throw GatewayError("\(text.escapedForTerminal()): not HOST:PORT, [IPv6]:PORT or unix:PATH")
        }
        let host = String(text[..<colon])
        var address = in6_addr()
        if host.hasPrefix("["), host.hasSuffix("]") {
            let inner = String(host.dropFirst().dropLast())
            guard inet_pton(AF_INET6, inner, &address) == 1 else { throw GatewayError("\(text.escapedForTerminal()): \(inner.escapedForTerminal()) is not an IPv6 address") }
            return .ipv6(host: inner, port: port)
        }
        guard !host.contains(":") else { throw GatewayError("\(text.escapedForTerminal()): an IPv6 address goes in brackets") }
        guard inet_pton(AF_INET, host, &address) == 1 else {
            throw GatewayError("\(text.escapedForTerminal()): \(host.isEmpty ? "no host" : "\(host.escapedForTerminal()) is not an IPv4 address") (the gateway listens on an address, not a name)")
        }
        return .ipv4(host: host, port: port)
    }
}
