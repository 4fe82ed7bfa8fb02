import GRPCCore
import Logging
import RemoteHost
import Synchronization

/// A launcher's way to services on other machines (`RemoteServiceConnector`): named gateways,
/// each a ``GatewayClient``. Give it to `Launcher.Configuration.remoteServices`:
///
/// ```swift
/// var configuration = Launcher.Configuration()
/// configuration.remoteServices = try GatewayConnector(gateways: [
///     (name: "home", client: GatewayClient(address: .ipv4(host: "192.0.2.7", port: 7443), certificateChain: "laptop.pem",
///                                          privateKey: "laptop-key.pem", gatewayCA: "home-ca.pem", serverName: "home.example.org")),
/// ])
/// try await withLauncher(registry: registry, configuration: configuration) { launcher in
///     let notes = launcher.connection(to: "com.example.demo-share.notes@home")
/// }
/// ```
///
/// Each gateway's `Connect` streams share one HTTP/2 connection (``GatewayLink``). A gateway's
/// catalog is asked once and kept for ``catalogLifetime``; each service in it is
/// checked as a manifest (`ServiceManifest.remote`), and one that fails is left out, logged.
public final class GatewayConnector: RemoteServiceConnector {
    public let gateways: [String]
    private let clients: [String: GatewayClient]
    /// Each gateway's shared connection, for its `Connect` streams.
    private let links: Mutex<[String: GatewayLink]>
    private let logger: Logger
    private let catalogs = Mutex<[String: (services: [ServiceManifest], at: ContinuousClock.Instant)]>([:])
    /// How long a catalog is kept before it is asked again (60 s).
    public static let catalogLifetime: Duration = .seconds(60)

    /// A connector to `gateways`, in the order a bare identifier is looked for.
    ///
    /// - Throws: ``GatewayError`` for a name that is not `[a-z0-9-]+` (at most 63 bytes), or
    ///   given twice.
    public init(gateways: [(name: String, client: GatewayClient)], logger: Logger = Logger(label: "remoteview.gateways")) throws(GatewayError) {
        var clients: [String: GatewayClient] = [:]
        for (name, client) in gateways {
            guard Launcher.Configuration.isGatewayName(name) else {
                throw GatewayError("gateway name \"\(name.escapedForTerminal())\": not [a-z0-9-]+ (at most 63 bytes)")
            }
            guard clients[name] == nil else { throw GatewayError("gateway name \"\(name)\" is given twice") }
            clients[name] = client
        }
        self.gateways = gateways.map(\.name)
        self.clients = clients
        var links: [String: GatewayLink] = [:]
        for (name, client) in clients { links[name] = try GatewayLink(client) }
        self.links = Mutex(links)
        self.logger = logger
    }

    public func services(on gateway: String) async throws(RemoteError) -> [ServiceManifest] {
        guard let client = clients[gateway] else { throw RemoteError(.invalidated, "no gateway is named \(gateway.escapedForTerminal())") }
        if let kept = catalogs.withLock({ $0[gateway] }), kept.at.duration(to: .now) < Self.catalogLifetime { return kept.services }
        let catalog: GatewayCatalog
        do { catalog = try await client.activities() } catch {
            throw RemoteError(.interrupted, "gateway \(gateway): \(error.description)")
        }
        guard catalog.version == 1 else {
            throw RemoteError(.protocolViolation, "gateway \(gateway) sent a catalog of version \(catalog.version); this host reads version 1")
        }
        var services: [ServiceManifest] = [], warnings: [ManifestError] = []
        for entry in catalog.services {
            do throws(ManifestError) {
                services.append(try ServiceManifest.remote(identifier: entry.identifier, title: entry.title, subtitle: entry.subtitle,
                                                           iconPNG: entry.icon.map { Array($0) }, activation: entry.activation,
                                                           gateway: gateway, warnings: &warnings))
            } catch {
                logger.warning("left out of gateway \(gateway)'s catalog: \(error.description.escapedForTerminal())")
            }
        }
        for warning in warnings { logger.warning("\(warning.description.escapedForTerminal())") }
        catalogs.withLock { $0[gateway] = (services, .now) }
        return services
    }

    /// The gRPC payload bytes the streams to `gateway` carried so far (its current link's).
    public func wireBytes(on gateway: String) -> WireBytes? {
        links.withLock { $0[gateway] }?.wireBytes
    }

    public func connect(to identifier: String, on gateway: String, configuration: Connection.Configuration,
                        onRequest: @escaping Connection.RequestHandler,
                        onMessage: @escaping Connection.MessageHandler) async throws(RemoteError) -> RemoteServiceChannel {
        guard let link = links.withLock({ $0[gateway] }), let client = clients[gateway] else {
            throw RemoteError(.invalidated, "no gateway is named \(gateway.escapedForTerminal())")
        }
        do throws(RemoteError) {
            return try await link.open(identifier, configuration: configuration, onRequest: onRequest, onMessage: onMessage)
        } catch where GatewayClient.isUnreachable(error) {
            // The shared connection may be one the gateway's end left behind (it went away and
            // came back, and gRPC waits out its own reconnection backoff): once, a fresh one.
            let fresh: GatewayLink
            do { fresh = try GatewayLink(client) } catch { throw RemoteError(.invalidated, error.description) }
            links.withLock { $0[gateway] = fresh }
            return try await fresh.open(identifier, configuration: configuration, onRequest: onRequest, onMessage: onMessage)
        }
    }
}
