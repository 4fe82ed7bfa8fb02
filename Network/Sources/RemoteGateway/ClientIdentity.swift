import RemoteHost
import X509

/// Who a client of the gateway is: the subject alternative names of the certificate it
/// presented in the TLS handshake, its URIs (`spiffe://example.org/host/laptop`) and DNS names
/// (`laptop.example.org`). The certificate chained to the gateway's client CA, and was valid at
/// the time, or the handshake would have failed; its subject's common name is not an identity.
/// Only a certificate made for a client names one: its extended key usage lists `clientAuth`,
/// and it is no CA. A wildcard DNS name (`*.example.org`, a server's) names no one.
public struct ClientIdentity: Sendable, Hashable, CustomStringConvertible {
    /// The certificate's URI names, in its order.
    public let uris: [String]
    /// The certificate's DNS names, in its order.
    public let dnsNames: [String]

    /// An identity with these names (tests; a gateway reads them from the peer's certificate).
    public init(uris: [String] = [], dnsNames: [String] = []) {
        self.uris = uris
        self.dnsNames = dnsNames
    }

    /// The identity of `certificate`: its subject alternative names' URIs and DNS names.
    ///
    /// - Throws: ``GatewayError`` when the extension cannot be read, or names neither a URI nor a
    ///   DNS name (a certificate that cannot be told apart from another is no identity).
    public init(certificate: Certificate) throws(GatewayError) {
        let subject = String(describing: certificate.subject).escapedForTerminal()
        let names: SubjectAlternativeNames?, usage: ExtendedKeyUsage?, constraints: BasicConstraints?
        do {
            names = try certificate.extensions.subjectAlternativeNames
            usage = try certificate.extensions.extendedKeyUsage
            constraints = try certificate.extensions.basicConstraints
        } catch {
            throw GatewayError("the client certificate (subject \(subject)) has extensions that cannot be read: \(String(describing: error).escapedForTerminal())")
        }
        guard usage?.contains(.clientAuth) == true else {
            throw GatewayError("the client certificate (subject \(subject)) is not made for a client: its extended key usage does not list clientAuth")
        }
        if case .isCertificateAuthority = constraints {
            throw GatewayError("the client certificate (subject \(subject)) is a CA's: a CA is no client")
        }
        var uris: [String] = [], dnsNames: [String] = []
        for name in names ?? SubjectAlternativeNames() {
            switch name {
            case .uniformResourceIdentifier(let uri): uris.append(uri)
            case .dnsName(let dns) where !dns.contains("*"): dnsNames.append(dns.lowercased())
            default: continue
            }
        }
        guard !uris.isEmpty || !dnsNames.isEmpty else {
            throw GatewayError("the client certificate (subject \(subject)) names no URI and no DNS name (wildcards do not count) in its subject alternative names, so it identifies no one")
        }
        self.init(uris: uris, dnsNames: dnsNames)
    }

    /// The identity of a certificate in DER.
    ///
    /// - Throws: ``GatewayError`` when it is not a certificate, or as ``init(certificate:)``.
    public init(derEncoded bytes: [UInt8]) throws(GatewayError) {
        let certificate: Certificate
        do { certificate = try Certificate(derEncoded: bytes) } catch {
            throw GatewayError("the client certificate cannot be parsed: \(String(describing: error).escapedForTerminal())")
        }
        try self.init(certificate: certificate)
    }

    /// Every name, URIs first.
    public var names: [String] { uris + dnsNames }

    /// `uri:…` and `dns:…`, comma-separated, escaped for a terminal (a name is the peer's).
    public var description: String {
        (uris.map { "uri:" + $0 } + dnsNames.map { "dns:" + $0 }).joined(separator: ", ").escapedForTerminal()
    }
}

/// A gateway's refusal or failure, in words that name what was wrong.
public struct GatewayError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What was wrong.
    public let description: String

    /// An error saying `description`.
    public init(_ description: String) { self.description = description }
}
