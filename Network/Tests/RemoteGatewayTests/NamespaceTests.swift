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

    @Test("across the veth pair: a client gets its catalog; an expired certificate, another CA's and a server's are refused with a clear error, and so is a service not granted; the root namespace cannot reach the gateway; a request after one-way messages and a 1 MiB item cross; kill -9 of the remote service, and of the gateway, end the call as interrupted, saying why; a host's launcher shares through the gateway, hears it die and reconnects to it restarted")
    func acrossNamespaces() async throws {
        try await Self.withNamespaces(subnet: 7) { server, client, serverAddress in
            try await Self.across(server: server, client: client, serverAddress: serverAddress)
        }
    }

    /// Two namespaces, `rvgw<pid><kind>s` and `…c`, joined by a veth pair on 10.213.`subnet`.0/30
    /// (the server .1, the client .2), for `body`; deleted after it, the veth pair with them.
    /// Skipped, saying so, when not root.
    static func withNamespaces(subnet: Int, _ body: (_ server: String, _ client: String, _ serverAddress: String) async throws -> Void) async throws {
        guard geteuid() == 0 else {
            print("skipped: making network namespaces needs root")
            return
        }
        let tag = "\(getpid() % 100_000)\(subnet)"
        let (server, client) = ("rvgw\(tag)s", "rvgw\(tag)c")
        let (serverLink, clientLink) = ("rvs\(tag)", "rvc\(tag)")
        let (serverAddress, clientAddress) = ("10.213.\(subnet).1", "10.213.\(subnet).2")
        do {
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
            try await body(server, client, serverAddress)
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

    /// `remoteview-gateway` in `namespace`, listening on `address`, serving the manifests in
    /// `services` (by default `folder`) to the clients `folder`'s `clients.json` names;
    /// returned once it listens.
    static func startGateway(in namespace: String, listening address: String, pki: TestPKI, folder: String,
                             services: String? = nil) async throws -> (ChildProcess, GatewayProcessTests.Lines) {
        let (gateway, lines) = try await GatewayProcessTests.start(executable: "/usr/sbin/ip", [
            "netns", "exec", namespace, GatewayProcessTests.executable, "--listen", address, "--certificate", pki.serverCertificate,
            "--key", pki.serverKey, "--client-ca", pki.caCertificate, "--authorization", folder + "/clients.json",
            "--services", services ?? folder, "--no-installed"])
        try #require(lines.line(containing: "remoteview-gateway: listening on", within: 30) != nil, "\(lines.seen)")
        return (gateway, lines)
    }

    /// The demo's executable, built by `swift build` at the repository's root.
    static let demoShare: String = {
        let testService = URL(filePath: ConnectTests.testService)
        return testService.deletingLastPathComponent().appending(path: "demo-share").path
    }()

    @Test("a remote view across the veth pair: the demo's Notes, shared from a host in the client's namespace, typed into and resized, shows the pixels the same share shows locally; kill -9 of Notes keeps its last frame, and the share ends interrupted, saying so")
    func remoteNotes() async throws {
        try await Self.withNamespaces(subnet: 9) { server, client, serverAddress in
            let folder = FileManager.default.temporaryDirectory.appending(path: "remoteview-gateway-notes-\(getpid())").path
            try FileManager.default.createDirectory(atPath: folder + "/services", withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: folder) }
            let pki = try TestPKI(folder: folder)
            let laptop = try pki.client("laptop", names: [.uniformResourceIdentifier("spiffe://example.org/host/laptop")])
            try Data(#"{"version": 1, "clients": [{"identity": "uri:spiffe://example.org/host/laptop", "services": ["com.example.*"]}]}"#.utf8)
                .write(to: URL(filePath: folder + "/clients.json"))
            try #require(FileManager.default.isExecutableFile(atPath: Self.demoShare), "the demo is built first (swift build at the repository's root): \(Self.demoShare)")
            try Data(#"{"identifier": "com.example.demo-share.notes", "executable": "\#(Self.demoShare)", "arguments": ["activity", "notes"], "display": {"title": "Notes"}, "activation": {"contentTypes": [{"type": "text/plain", "min": 0, "max": 1}]}, "instances": "perConnection"}"#.utf8)
                .write(to: URL(filePath: folder + "/services/notes.json"))
            let (gateway, gatewayLines) = try await Self.startGateway(in: server, listening: serverAddress + ":7443", pki: pki, folder: folder, services: folder + "/services")
            defer { gateway.send(signal: SIGKILL) }

            let (host, lines, input) = try await GatewayProcessTests.start(executable: "/usr/sbin/ip", [
                "netns", "exec", client, GatewayProcessTests.executable, "host", "--name", "farm", "--gateway", serverAddress + ":7443",
                "--certificate", laptop.certificate, "--key", laptop.key, "--ca", pki.caCertificate, "--server-name", "localhost"], input: true)
            defer { host.send(signal: SIGKILL) }
            let hostInput = try #require(input)
            func tell(_ line: String, expect: String) -> String? {
                _ = Array((line + "\n").utf8).withUnsafeBytes { write(hostInput, $0.baseAddress, $0.count) }
                return lines.line(containing: expect, within: 30)
            }

            // The same share, here: a launcher over the same manifest, in this namespace.
            let registry = ServiceRegistry(scanning: [folder + "/services"], includingInstalled: false)
            var configuration = Launcher.Configuration(hostIdentifier: "com.example.local-host")
            configuration.logger.logLevel = .error
            let (localTyped, localResized) = try await withLauncher(registry: registry, configuration: configuration) { launcher in
                let sheet = ShareSheet(registry: registry, items: [try .text("Hello")])
                let session = try await sheet.perform(try #require(sheet.activity("com.example.demo-share.notes")), launcher: launcher)
                try await session.view.present(width: 480, height: 320)
                try await session.view.settle()
                try await session.view.type("world")
                try await session.view.settle()
                let typed = session.view.image
                try await session.view.present(width: 400, height: 300, scalePermille: 1_500)
                try await session.view.settle()
                let resized = session.view.image
                await session.close()
                return (typed, resized)
            }

            #expect(tell("share com.example.demo-share.notes Hello", expect: "share started") != nil, "\(lines.seen)")
            #expect(tell("view-present 480 320", expect: "view ok") != nil, "\(lines.seen)")
            #expect(tell("view-settle", expect: "view settled") != nil, "\(lines.seen)")
            #expect(tell("view-type world", expect: "view ok") != nil, "\(lines.seen)")
            #expect(tell("view-settle", expect: "view settled 480×320") != nil, "\(lines.seen)")
            #expect(tell("view-snapshot \(folder)/typed.png", expect: "view ok") != nil, "\(lines.seen)")
            #expect(try RemoteImage(contentsOfPNG: folder + "/typed.png") == localTyped, "the typed note, across the veth pair and locally")
            #expect(tell("view-bytes", expect: "bytes ") != nil, "\(lines.seen)")

            #expect(tell("view-present 400 300 1500", expect: "view ok") != nil, "\(lines.seen)")
            #expect(tell("view-settle", expect: "view settled 600×450") != nil, "\(lines.seen)")
            #expect(tell("view-snapshot \(folder)/resized.png", expect: "view ok") != nil, "\(lines.seen)")
            let resized = try RemoteImage(contentsOfPNG: folder + "/resized.png")
            #expect(resized == localResized, "resized, across the veth pair and locally")

            // Notes killed on the gateway's side: the share ends interrupted; its last frame stays.
            let notes = try #require(Self.process(runningArguments: [Self.demoShare, "activity", "notes"]), "the gateway's Notes process")
            kill(notes, SIGKILL)
            #expect(tell("share-outcome", expect: "outcome")?.contains("SIGKILL") == true, "\(lines.seen)")
            #expect(tell("view-snapshot \(folder)/killed.png", expect: "view ok") != nil, "\(lines.seen)")
            #expect(try RemoteImage(contentsOfPNG: folder + "/killed.png") == resized, "the last frame is kept")
            close(hostInput)
            #expect(await GatewayProcessTests.exit(of: host, within: 30) == .exited(0), "\(lines.seen)")
            gateway.send(signal: SIGTERM)
            #expect(await GatewayProcessTests.exit(of: gateway, within: 60) == .exited(0), "\(gatewayLines.seen)")
        }
    }

    /// A process whose command line is `arguments`, if one runs.
    static func process(runningArguments arguments: [String]) -> Int32? {
        let wanted = Array(arguments.joined(separator: "\u{0}").utf8) + [0]
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = Int32(entry), let line = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline") else { continue }
            if Array(line) == wanted { return pid }
        }
        return nil
    }

    /// The deepest descendant of `pid` along first children (bubblewrap, its pid 1, the
    /// service): the service itself.
    static func deepestDescendant(of pid: Int32) -> Int32 {
        var current = pid
        while let text = try? String(contentsOfFile: "/proc/\(current)/task/\(current)/children", encoding: .utf8),
              let child = text.split(separator: " ").first.flatMap({ Int32($0) }) {
            current = child
        }
        return current
    }

    static func across(server: String, client: String, serverAddress: String) async throws {
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
        try #require(FileManager.default.isExecutableFile(atPath: ConnectTests.testService), "the main package's fixture service is built first: \(ConnectTests.testService)")
        try Data(#"{"identifier": "com.example.test", "executable": "\#(ConnectTests.testService)", "arguments": ["serve", "com.example.test"], "display": {"title": "Test"}}"#.utf8)
            .write(to: URL(filePath: folder + "/test.json"))
        try Data(#"{"identifier": "org.example.private", "executable": "\#(ConnectTests.testService)", "arguments": ["serve", "org.example.private"], "display": {"title": "Private"}}"#.utf8)
            .write(to: URL(filePath: folder + "/private.json"))
        try Data(#"{"identifier": "com.example.share", "executable": "\#(ConnectTests.testService)", "arguments": ["share", "com.example.share"], "display": {"title": "Remote share"}, "activation": {"contentTypes": [{"type": "text/plain", "min": 1, "max": 1}]}, "instances": "perConnection"}"#.utf8)
            .write(to: URL(filePath: folder + "/share.json"))

        // A port of the namespace's own: the gateway restarted below listens on it again.
        func startGateway() async throws -> (ChildProcess, GatewayProcessTests.Lines) {
            try await Self.startGateway(in: server, listening: serverAddress + ":7443", pki: pki, folder: folder)
        }
        var (gateway, gatewayLines) = try await startGateway()
        defer { gateway.send(signal: SIGKILL) }
        let address = "\(serverAddress):7443"

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
        // A certificate from another CA, and one made for a server, are refused as well.
        let foreign = try pki.client("foreign", names: [.uniformResourceIdentifier("spiffe://example.org/host/laptop")], foreign: true)
        let (foreignRefused, foreignWhy) = try await ask(in: client, with: foreign)
        #expect(foreignRefused != .exited(0) && foreignWhy.contains("cannot be reached, or refused the TLS handshake"), "\(foreignWhy)")
        let madeForServer = try pki.client("made-for-server", names: [.dnsName("farm.example.org")], serverAuth: true)
        let (serverRefused, serverWhy) = try await ask(in: client, with: madeForServer)
        #expect(serverRefused != .exited(0) && (serverWhy.contains("refused this client") || serverWhy.contains("refused the TLS handshake")), "\(serverWhy)")
        // The root namespace has no route to the pair's addresses.
        let (outside, _) = try await ask(in: nil, with: laptop)
        #expect(outside != .exited(0))

        /// `remoteview-gateway call ARGUMENTS` in the client's namespace, started.
        func call(_ arguments: [String]) async throws -> (ChildProcess, GatewayProcessTests.Lines) {
            try await GatewayProcessTests.start(executable: "/usr/sbin/ip", ["netns", "exec", client, GatewayProcessTests.executable, "call",
                "--gateway", address, "--certificate", laptop.certificate, "--key", laptop.key, "--ca", pki.caCertificate,
                "--server-name", "localhost"] + arguments)
        }
        func finished(_ started: (ChildProcess, GatewayProcessTests.Lines)) async -> (Termination?, String) {
            _ = started.1.line(containing: "\u{0}", within: 60)
            return (await GatewayProcessTests.exit(of: started.0, within: 60), started.1.seen.joined(separator: "\n"))
        }
        // A request after two one-way messages, in order, on one connection.
        let (noted, notes) = await finished(try await call(["com.example.test", "notes", "--message", "note:across", "--message", "note:namespaces"]))
        #expect(noted == .exited(0) && notes.contains("reply notes: across namespaces"), "\(notes)")
        // A 1 MiB item there and back: a sealed memfd on each side, the same bytes.
        let item = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) }
        try Data(item).write(to: URL(filePath: folder + "/item"))
        try FileManager.default.createDirectory(atPath: folder + "/back", withIntermediateDirectories: true)
        let (echoed, echo) = await finished(try await call(["com.example.test", "echo", "--file", folder + "/item", "--save", folder + "/back"]))
        #expect(echoed == .exited(0) && echo.contains("attachment 0: 1048576 bytes"), "\(echo)")
        #expect(try Data(contentsOf: URL(filePath: folder + "/back/attachment-0")) == Data(item))
        for _ in 0..<2 { _ = gatewayLines.line(containing: "connection to com.example.test ended", within: 30) }
        // A service the client is not granted is refused, saying so, and nothing starts.
        let (denied, deniedWhy) = await finished(try await call(["org.example.private", "echo", "--text", "x"]))
        #expect(denied == .exited(1) && deniedWhy.contains("does not allow this client org.example.private"), "\(deniedWhy)")

        // kill -9 of the service on the gateway's side, under a call waiting for its reply.
        let sleeper = try await call(["com.example.test", "sleep", "--text", "30"])
        let connected = try #require(gatewayLines.line(containing: "connected to com.example.test (pid ", within: 30), "\(gatewayLines.seen)")
        let launched = try #require(Int32(connected.split(separator: "(pid ").last?.dropLast() ?? ""))
        kill(Self.deepestDescendant(of: launched), SIGKILL)
        let (killed, killedWhy) = await finished(sleeper)
        #expect(killed == .exited(1) && killedWhy.contains("interrupted") && killedWhy.contains("killed by SIGKILL"), "\(killedWhy)")

        // kill -9 of the gateway itself, under a call: interrupted, unreachable; restarted, it serves again.
        let waiting = try await call(["com.example.test", "sleep", "--text", "30"])
        _ = try #require(gatewayLines.line(containing: "connected to com.example.test (pid ", within: 30), "\(gatewayLines.seen)")
        gateway.send(signal: SIGKILL)
        _ = await GatewayProcessTests.exit(of: gateway, within: 30)
        let (cut, cutWhy) = await finished(waiting)
        #expect(cut == .exited(1) && cutWhy.contains("interrupted") && cutWhy.contains("unreachable"), "\(cutWhy)")
        (gateway, gatewayLines) = try await startGateway()
        let (again, answer) = await finished(try await call(["com.example.test", "echo", "--text", "again"]))
        #expect(again == .exited(0) && answer.contains("reply echo: again"), "\(answer)")

        // A host's launcher in the client's namespace (remoteview-gateway host), the gateway
        // named "farm": its activities, a message and a request, a share through the share
        // sheet; the gateway killed under it (interrupted, unreachable) and restarted (the next
        // call reconnects).
        let (host, hostLines, input) = try await GatewayProcessTests.start(executable: "/usr/sbin/ip", [
            "netns", "exec", client, GatewayProcessTests.executable, "host", "--name", "farm", "--gateway", address,
            "--certificate", laptop.certificate, "--key", laptop.key, "--ca", pki.caCertificate, "--server-name", "localhost"], input: true)
        defer { host.send(signal: SIGKILL) }
        let hostInput = try #require(input)
        func tell(_ line: String, expect: String) -> String? {
            _ = Array((line + "\n").utf8).withUnsafeBytes { write(hostInput, $0.baseAddress, $0.count) }
            return hostLines.line(containing: expect, within: 30)
        }
        #expect(tell("activities", expect: "activity com.example.share Remote share (gateway farm)") != nil, "\(hostLines.seen)")
        #expect(tell("send com.example.test@farm note across", expect: "sent com.example.test@farm note") != nil, "\(hostLines.seen)")
        #expect(tell("request com.example.test@farm notes", expect: "reply com.example.test@farm notes: across") != nil, "\(hostLines.seen)")
        #expect(tell("share com.example.share hello share", expect: "share started") != nil, "\(hostLines.seen)")
        #expect(tell("share-request share.items", expect: "reply share share.items:") != nil, "\(hostLines.seen)")
        #expect(tell("share-request share.complete", expect: "reply share") != nil, "\(hostLines.seen)")
        #expect(tell("share-outcome", expect: "outcome completed") != nil, "\(hostLines.seen)")
        gateway.send(signal: SIGKILL)
        _ = await GatewayProcessTests.exit(of: gateway, within: 30)
        #expect(hostLines.line(containing: "event com.example.test@farm interrupted", within: 30)?.contains("unreachable") == true, "\(hostLines.seen)")
        (gateway, gatewayLines) = try await startGateway()
        #expect(tell("request com.example.test@farm echo reconnected", expect: "com.example.test@farm echo") != nil, "\(hostLines.seen)")
        #expect(hostLines.seen.last?.contains("reply com.example.test@farm echo: reconnected") == true, "\(hostLines.seen)")
        close(hostInput)
        #expect(await GatewayProcessTests.exit(of: host, within: 30) == .exited(0), "\(hostLines.seen)")

        gateway.send(signal: SIGTERM)
        #expect(gatewayLines.line(containing: "remoteview-gateway: stopped", within: 60) != nil, "\(gatewayLines.seen)")
        #expect(await GatewayProcessTests.exit(of: gateway, within: 60) == .exited(0))
    }
}
