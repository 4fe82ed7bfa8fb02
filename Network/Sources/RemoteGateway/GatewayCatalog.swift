import FoundationEssentials
import RemoteHost

/// What a gateway tells a client about the services it may reach (the `Activities` call): for
/// each, what a share sheet shows and decides by — its identifier, title, subtitle, icon and
/// activation rules — and nothing of how it runs on the gateway's machine (no executable, no
/// arguments, no paths, no sandbox). A host reads it as a hostile peer's words: every field
/// goes through the checks a local manifest goes through.
public struct GatewayCatalog: Sendable, Hashable, Codable {
    /// One service.
    public struct Service: Sendable, Hashable, Codable {
        /// The service's identifier (bare: a host adds `@gateway` where it must tell it apart).
        public var identifier: String
        /// Its manifest's `display.title`.
        public var title: String
        /// Its manifest's `display.subtitle`.
        public var subtitle: String?
        /// Its icon, a PNG as the gateway's registry read and checked it, base64 in JSON.
        public var icon: Data?
        /// Its activation rules (`nil`: a plain service, not a share activity).
        public var activation: ServiceManifest.Activation?

        /// The catalog entry of `manifest`.
        public init(_ manifest: ServiceManifest) {
            identifier = manifest.identifier
            title = manifest.display.title
            subtitle = manifest.display.subtitle
            icon = manifest.icon.map { Data($0.pngData) }
            activation = manifest.activation
        }
    }

    /// The format's version.
    public var version = 1
    /// The services, by identifier.
    public var services: [Service]

    /// The largest catalog, encoded (3 MiB): under gRPC-Swift's default 4 MiB for a response a
    /// client reads, with room for base64.
    public static let maxEncodedBytes = 3 << 20

    /// The services of `registry` that `grant` allows, by identifier.
    public init(registry: ServiceRegistry, grant: GatewayAuthorization.Grant) {
        services = registry.sortedServices.filter { grant.allows($0.identifier) }.map(Service.init)
    }

    /// This catalog within `limit` bytes encoded: the largest icons are left out first, then,
    /// if it is still too large, the last services. Returns it with what was left out, by
    /// identifier, for the gateway's log.
    public func bounded(to limit: Int = maxEncodedBytes) -> (catalog: GatewayCatalog, iconsLeftOut: [String], servicesLeftOut: [String]) {
        var catalog = self
        var iconsLeftOut: [String] = [], servicesLeftOut: [String] = []
        func size(_ catalog: GatewayCatalog) -> Int { (try? catalog.encoded().count) ?? .max }
        // An icon's base64 is 4/3 of its bytes: drop the largest until the rest fits.
        var total = size(catalog)
        let byIcon = catalog.services.indices.filter { catalog.services[$0].icon != nil }
            .sorted { catalog.services[$0].icon!.count > catalog.services[$1].icon!.count }
        for index in byIcon where total > limit {
            total -= (catalog.services[index].icon!.count + 2) / 3 * 4
            catalog.services[index].icon = nil
            iconsLeftOut.append(catalog.services[index].identifier)
        }
        while size(catalog) > limit, let last = catalog.services.popLast() {
            servicesLeftOut.append(last.identifier)
        }
        return (catalog, iconsLeftOut.sorted(), servicesLeftOut.reversed())
    }

    /// The catalog as JSON (its `icon`s base64).
    public func encoded() throws(GatewayError) -> [UInt8] {
        do { return Array(try JSONEncoder().encode(self)) } catch {
            throw GatewayError("cannot encode the catalog: \(error)")
        }
    }
}
