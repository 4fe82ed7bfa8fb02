import Crypto
import FoundationEssentials
import X509

/// The tests' certificates, made with swift-certificates in a folder of their own: a CA the
/// gateway trusts, the gateway's certificate (DNS `localhost`), and clients' —
/// valid, expired, not yet valid, from another CA, and one that names no URI or DNS name.
struct TestPKI {
    let folder: String
    let caCertificate: String
    let serverCertificate: String, serverKey: String

    struct Client {
        let certificate: String
        let key: String
    }

    init(folder: String) throws {
        self.folder = folder
        let now = Date()
        let ca = try Self.authority(name: "RemoteView test CA", now: now)
        caCertificate = try Self.write(ca.certificate, to: folder + "/ca.pem")
        let server = try Self.leaf(issuer: ca, subject: "gateway", names: [.dnsName("localhost")],
                                   serverAuth: true, notBefore: now - 3600, notAfter: now + 86400)
        serverCertificate = try Self.write(server.certificate, to: folder + "/server.pem")
        serverKey = try Self.write(server.key, to: folder + "/server-key.pem")
        self.ca = ca
        let other = try Self.authority(name: "Someone else's CA", now: now)
        self.other = other
    }

    private let ca: (certificate: Certificate, key: Certificate.PrivateKey)
    private let other: (certificate: Certificate, key: Certificate.PrivateKey)

    /// A client certificate named `names`, issued by the test CA (or, `foreign`, another one),
    /// valid from `notBefore` to `notAfter` (by default an hour ago to a day on).
    func client(_ file: String, names: [GeneralName], foreign: Bool = false, serverAuth: Bool = false, notBefore: Date = Date() - 3600,
                notAfter: Date = Date() + 86400) throws -> Client {
        let leaf = try Self.leaf(issuer: foreign ? other : ca, subject: file, names: names, serverAuth: serverAuth, notBefore: notBefore, notAfter: notAfter)
        return Client(certificate: try Self.write(leaf.certificate, to: "\(folder)/\(file).pem"),
                      key: try Self.write(leaf.key, to: "\(folder)/\(file)-key.pem"))
    }

    private static func authority(name: String, now: Date) throws -> (certificate: Certificate, key: Certificate.PrivateKey) {
        let key = Certificate.PrivateKey(P256.Signing.PrivateKey())
        let subject = try DistinguishedName { CommonName(name) }
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: key.publicKey,
            notValidBefore: now - 86400, notValidAfter: now + 86400 * 30, issuer: subject, subject: subject,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: key)
        return (certificate, key)
    }

    private static func leaf(issuer: (certificate: Certificate, key: Certificate.PrivateKey), subject: String, names: [GeneralName],
                             serverAuth: Bool, notBefore: Date, notAfter: Date) throws -> (certificate: Certificate, key: Certificate.PrivateKey) {
        let key = Certificate.PrivateKey(P256.Signing.PrivateKey())
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: key.publicKey,
            notValidBefore: notBefore, notValidAfter: notAfter, issuer: issuer.certificate.subject,
            subject: try DistinguishedName { CommonName(subject) },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([serverAuth ? .serverAuth : .clientAuth])
                if !names.isEmpty { SubjectAlternativeNames(names) }
            },
            issuerPrivateKey: issuer.key)
        return (certificate, key)
    }

    private static func write(_ certificate: Certificate, to path: String) throws -> String {
        try Data(try certificate.serializeAsPEM().pemString.utf8).write(to: URL(filePath: path))
        return path
    }

    private static func write(_ key: Certificate.PrivateKey, to path: String) throws -> String {
        try Data(try key.serializeAsPEM().pemString.utf8).write(to: URL(filePath: path))
        return path
    }
}
