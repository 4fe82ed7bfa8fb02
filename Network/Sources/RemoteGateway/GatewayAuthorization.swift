import FoundationEssentials
import RemoteHost

/// Which services each client of a gateway may reach: read from a JSON file the gateway's
/// operator writes (docs/Gateway.md, "Authorization").
///
/// ```json
/// {
///   "version": 1,
///   "clients": [
///     { "identity": "uri:spiffe://example.org/host/laptop", "services": ["com.example.demo-share.notes"] },
///     { "identity": "dns:build-farm.example.org", "services": ["com.example.ci.*"] }
///   ]
/// }
/// ```
///
/// A client is one whose certificate names `identity` among its subject alternative names:
/// `uri:` and a URI, compared exactly, or `dns:` and a DNS name, compared without regard to
/// case. A URI never matches a DNS name, nor the reverse. `services` lists identifiers, or prefixes
/// ending in `.*` (`com.example.ci.*`: every identifier below `com.example.ci`), or `*` (every
/// service). A client the file does not name reaches nothing; several entries naming the same
/// client add up.
public struct GatewayAuthorization: Sendable, Hashable {
    /// One entry: a client's identity and its grants.
    public struct Entry: Sendable, Hashable, Codable {
        /// A subject alternative name, typed: `uri:…` or `dns:…`.
        public var identity: String
        /// Identifiers, `prefix.*` or `*`.
        public var services: [String]

        /// An entry granting `services` to `identity`.
        public init(identity: String, services: [String]) {
            self.identity = identity
            self.services = services
        }
    }

    /// The file's format version this code reads.
    public static let version = 1
    /// The largest file read (1 MiB).
    public static let maxFileBytes = 1 << 20

    /// The entries, in the file's order.
    public let entries: [Entry]

    /// An authorization of these entries.
    ///
    /// - Throws: ``GatewayError`` naming the entry and what is wrong with it: an empty identity,
    ///   or a service pattern that is neither an identifier, `prefix.*` nor `*`.
    public init(entries: [Entry]) throws(GatewayError) {
        for (index, entry) in entries.enumerated() {
            let identity = entry.identity.escapedForTerminal()
            guard let name = Self.name(of: entry.identity) else {
                throw GatewayError("clients[\(index)].identity \"\(identity)\": not uri:URI or dns:NAME (1 to 1024 bytes after the prefix, no whitespace; a DNS name of letters, digits, hyphens and dots, no wildcard)")
            }
            _ = name
            for (slot, pattern) in entry.services.enumerated() where !Self.isPattern(pattern) {
                throw GatewayError("clients[\(index)].services[\(slot)] \"\(pattern.escapedForTerminal())\" (for \(identity)): not a service identifier, a prefix ending in .*, or *")
            }
        }
        self.entries = entries
    }

    /// The authorization in the JSON file at `path`.
    ///
    /// - Throws: ``GatewayError`` naming the file and what is wrong: it cannot be read, is over
    ///   ``maxFileBytes``, is not JSON of this shape, has another `version`, or an entry is wrong.
    public init(contentsOf path: String) throws(GatewayError) {
        let bytes = try readBoundedFile(path, limit: Self.maxFileBytes, what: "the authorization file")
        struct File: Decodable {
            var version: Int
            var clients: [Entry]
        }
        let file: File
        do { file = try JSONDecoder().decode(File.self, from: Data(bytes)) } catch {
            throw GatewayError("\(path.escapedForTerminal()): not an authorization file ({\"version\": 1, \"clients\": [{\"identity\": …, \"services\": […]}]}): \(String(describing: error).escapedForTerminal())")
        }
        guard file.version == Self.version else {
            throw GatewayError("\(path.escapedForTerminal()): version \(file.version); this gateway reads version \(Self.version)")
        }
        do { try self.init(entries: file.clients) } catch {
            throw GatewayError("\(path.escapedForTerminal()): \(error.description)")
        }
    }

    /// What `client` may reach: every entry naming one of its names (the union of their
    /// grants, for a certificate with several).
    public func grant(for client: ClientIdentity) -> Grant {
        let names = Set(client.uris.map { "uri:" + $0 } + client.dnsNames.map { "dns:" + $0 })
        let patterns = entries.filter { entry in Self.name(of: entry.identity).map(names.contains) ?? false }.flatMap(\.services)
        return Grant(patterns: patterns)
    }

    /// `uri:URI` as it is, `dns:NAME` in lower case; `nil` for anything else.
    static func name(of identity: String) -> String? {
        if identity.hasPrefix("uri:") {
            let uri = identity.dropFirst(4)
            guard (1...1024).contains(uri.utf8.count), !uri.contains(where: { $0.isWhitespace || !$0.isASCII }) else { return nil }
            return identity
        }
        if identity.hasPrefix("dns:") {
            let dns = identity.dropFirst(4)
            guard (1...253).contains(dns.utf8.count), dns.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == ".") }) else { return nil }
            return "dns:" + dns.lowercased()
        }
        return nil
    }

    /// What one client may reach.
    public struct Grant: Sendable, Hashable {
        /// The patterns granted: identifiers, `prefix.*` and `*`.
        public let patterns: [String]

        /// A grant of `patterns` (as an authorization file writes them).
        public init(patterns: [String]) {
            self.patterns = patterns
        }

        /// Whether the client may reach the service `identifier`.
        public func allows(_ identifier: String) -> Bool {
            patterns.contains { pattern in
                if pattern == "*" { return true }
                if pattern.hasSuffix(".*") { return identifier.hasPrefix(pattern.dropLast()) }
                return pattern == identifier
            }
        }

        /// Whether it reaches nothing at all.
        public var isEmpty: Bool { patterns.isEmpty }
    }

    /// `*`, `prefix.*` or an identifier (``isServiceIdentifier(_:)``).
    static func isPattern(_ pattern: String) -> Bool {
        if pattern == "*" { return true }
        return isServiceIdentifier(pattern.hasSuffix(".*") ? String(pattern.dropLast(2)) : pattern)
    }
}
