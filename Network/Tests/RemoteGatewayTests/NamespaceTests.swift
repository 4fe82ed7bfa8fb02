import FoundationEssentials
import Glibc
import RemoteHost
import Testing
import X509

/// Two machines on one: the gateway in one network namespace, its client in another, joined by
/// a veth pair with addresses of their own (no traffic leaves the machine). Needs root (CI runs
/// as root); skipped otherwise, saying so.
@Suite("The gateway across network namespaces", .serialized)
struct NamespaceTests {
    /// Runs `/usr/sbin/ip ARGUMENTS` and waits for it (30 s at most).
    static func ip(_ arguments: [String]) async throws -> (Termination?, String) {
        let (process, lines) = try await GatewayProcessTests.start(executable: "/usr/sbin/ip", arguments)
        _ = lines.line(containing: "\u{0}", within: 30)
        return (await GatewayProcessTests.exit(of: process, within: 30), lines.seen.joined(separator: "\n"))
    }

    @Test("a client in another namespace, across the veth pair, gets its catalog from the gateway; an expired certificate is refused with a clear error; the root namespace cannot reach it")
    func acrossNamespaces() async throws {
        guard geteuid() == 0 else {
            print("skipped: making network namespaces needs root")
            return
        }
        let tag = String(getpid() % 100_000)
        let (server, client) = ("rvgw\(tag)s", "rvgw\(tag)c")
        let (serverLink, clientLink) = ("rvs\(tag)", "rvc\(tag)")
        let (serverAddress, clientAddress) = ("10.213.7.1", "10.213.7.2")
        do {
            try await Self.across(server: server, client: client, serverLink: serverLink, clientLink: clientLink,
                                  serverAddress: serverAddress, clientAddress: clientAddress)
        } catch {
            // The veth pair goes with its namespaces.
            for namespace in [server, client] { _ = try? await Self.ip(["netns", "del", namespace]) }
            throw error
        }
        for namespace in [server, client] {
            let (deleted, output) = try await Self.ip(["netns", "del", namespace])
            #expect(deleted == .exited(0), "\(output)")
        }
    }

    static func across(server: String, client: String, serverLink: String, clientLink: String, serverAddress: String, clientAddress: String) async throws {
        for command in [["netns", "add", server], ["netns", "add", client],
                        ["link", "add", serverLink, "type", "veth", "peer", "name", clientLink],
                        ["link", "set", serverLink, "netns", server], ["link", "set", clientLink, "netns", client],
                        ["-n", server, "addr", "add", serverAddress + "/30", "dev", serverLink],
                        ["-n", client, "addr", "add", clientAddress + "/30", "dev", clientLink],
                        ["-n", server, "link", "set", serverLink, "up"], ["-n", client, "link", "set", clientLink, "up"],
                        ["-n", server, "link", "set", "lo", "up"], ["-n", client, "link", "set", "lo", "up"]] {
            let (ended, output) = try await Self.ip(command)
            try #require(ended == .exited(0), "ip \(command.joined(separator: " ")): \(output)")
        }

        let folder = FileManager.default.temporaryDirectory.appending(path: "remoteview-gateway-netns-\(getpid())").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let pki = try TestPKI(folder: folder)
        let laptop = try pki.client("laptop", names: [.uniformResourceIdentifier("spiffe://example.org/host/laptop")])
        let expired = try pki.client("expired", names: [.uniformResourceIdentifier("spiffe://example.org/host/laptop")],
                                     notBefore: Date() - 86400 * 2, notAfter: Date() - 86400)
        try Data(#"{"version": 1, "clients": [{"identity": "uri:spiffe://example.org/host/laptop", "services": ["com.example.*"]}]}"#.utf8)
            .write(to: URL(filePath: folder + "/clients.json"))
        try Data(#"{"identifier": "com.example.notes", "executable": "/bin/true", "display": {"title": "Notes"}, "activation": {"contentTypes": [{"type": "text/plain", "max": 1}]}}"#.utf8)
            .write(to: URL(filePath: folder + "/notes.json"))

        let (gateway, gatewayLines) = try await GatewayProcessTests.start(executable: "/usr/sbin/ip", [
            "netns", "exec", server, GatewayProcessTests.executable, "--listen", serverAddress + ":0", "--certificate", pki.serverCertificate,
            "--key", pki.serverKey, "--client-ca", pki.caCertificate, "--authorization", folder + "/clients.json",
            "--services", folder, "--no-installed"])
        defer { gateway.send(signal: SIGKILL) }
        let listening = try #require(gatewayLines.line(containing: "remoteview-gateway: listening on", within: 30), "\(gatewayLines.seen)")
        let port = try #require(listening.split(separator: ":").last.map(String.init))
        let address = "\(serverAddress):\(port)"

        func ask(in namespace: String?, with certificate: TestPKI.Client) async throws -> (Termination?, String) {
            let arguments = ["activities", "--gateway", address, "--certificate", certificate.certificate, "--key", certificate.key,
                             "--ca", pki.caCertificate, "--server-name", "localhost"]
            let (process, lines) = if let namespace {
                try await GatewayProcessTests.start(executable: "/usr/sbin/ip", ["netns", "exec", namespace, GatewayProcessTests.executable] + arguments)
            } else {
                try await GatewayProcessTests.start(arguments)
            }
            _ = lines.line(containing: "\u{0}", within: 30)
            return (await GatewayProcessTests.exit(of: process, within: 30), lines.seen.joined(separator: "\n"))
        }
        let (asked, catalog) = try await ask(in: client, with: laptop)
        #expect(asked == .exited(0) && catalog.contains("com.example.notes  Notes  (activity)"), "\(catalog)")
        let (refused, why) = try await ask(in: client, with: expired)
        #expect(refused != .exited(0) && why.contains("cannot be reached, or refused the TLS handshake"), "\(why)")
        // The root namespace has no route to the pair's addresses.
        let (outside, _) = try await ask(in: nil, with: laptop)
        #expect(outside != .exited(0))

        gateway.send(signal: SIGTERM)
        #expect(gatewayLines.line(containing: "remoteview-gateway: stopped", within: 60) != nil, "\(gatewayLines.seen)")
        #expect(await GatewayProcessTests.exit(of: gateway, within: 60) == .exited(0))
    }
}
