// gateway-bench: the gateway's figures across a veth pair, each beside its baseline measured in
// the same run (docs/Benchmarks.md, "The gateway"). Root only (network namespaces).
//
//   gateway-bench [--round-trips N] [--transfers M]
//       makes two network namespaces joined by a veth pair, a PKI (openssl), starts
//       remoteview-gateway and the bare gRPC baseline server in one namespace, runs the client
//       in the other, prints the figures and removes everything.
//   gateway-bench baseline-server ...   the bare gRPC-Swift server, same mutual TLS
//   gateway-bench client ...            the measuring client (prints JSON)
import ArgumentParser
import Foundation
import Glibc
import GRPCCore
import GRPCNIOTransportHTTP2
import Logging
@_spi(RemoteViewTransport) import RemoteHost
import RemoteGateway

/// The bare gRPC-Swift peer: unary `Echo` and client-streaming `Sink` (the bytes it took).
enum Baseline {
    static let echo = MethodDescriptor(fullyQualifiedService: "bench.Baseline", method: "Echo")
    static let sink = MethodDescriptor(fullyQualifiedService: "bench.Baseline", method: "Sink")

    struct Service: RegistrableRPCService {
        func registerMethods<Transport: ServerTransport>(with router: inout RPCRouter<Transport>) {
            router.registerHandler(forMethod: Baseline.echo, deserializer: RawBytes(), serializer: RawBytes()) { request, _ in
                StreamingServerResponse(of: [UInt8].self) { writer in
                    for try await message in request.messages { try await writer.write(message) }
                    return [:]
                }
            }
            router.registerHandler(forMethod: Baseline.sink, deserializer: RawBytes(), serializer: RawBytes()) { request, _ in
                var total = 0
                for try await message in request.messages { total += message.count }
                return StreamingServerResponse(single: ServerResponse(message: Array(String(total).utf8)))
            }
        }
    }
}

func microseconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) * 1e6 + Double(now.tv_nsec) / 1e3
}

/// CPU time (user + system) of this process so far, µs.
func cpuMicroseconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double((usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1_000_000 + usage.ru_utime.tv_usec + usage.ru_stime.tv_usec)
}

/// Runs `operation` `warmUp` times untimed, then `count` times timed: the figure named `name`,
/// with this process's CPU time per operation.
func measure(_ name: String, warmUp: Int, count: Int, _ operation: () async throws -> Void) async throws -> Figure {
    for _ in 0..<warmUp { try await operation() }
    var samples: [Double] = []
    let cpu = cpuMicroseconds()
    for _ in 0..<count {
        let start = microseconds()
        try await operation()
        samples.append(microseconds() - start)
    }
    return Figure(name, samples: samples, cpu: cpuMicroseconds() - cpu)
}

struct Figure: Codable {
    var name: String
    var median: Double
    var p99: Double
    var perSecond: Double
    var clientCPUPerOperation: Double

    init(_ name: String, samples: [Double], cpu: Double) {
        let sorted = samples.sorted()
        self.name = name
        median = sorted[sorted.count / 2]
        p99 = sorted[min(sorted.count - 1, sorted.count * 99 / 100)]
        perSecond = Double(sorted.count) / (samples.reduce(0, +) / 1e6)
        clientCPUPerOperation = cpu / Double(sorted.count)
    }
}

/// A TCP relay that delays every byte by `delay` each way: a link shaped to a round trip of
/// twice `delay` (this kernel has no `netem`; `tbf` shapes rate only). Threads and blocking
/// sockets: each direction has a reader, which stamps what it reads, and a writer, which
/// writes it once its time has come.
final class DelayingRelay: @unchecked Sendable {
    // @unchecked: `listener` is set once in init; the rest lives in the threads.
    let port: Int
    private let listener: Int32

    init(to target: (host: String, port: Int), delay: Duration) throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        guard bound == 0, listen(listener, 16) == 0 else { throw ValidationError("the relay cannot listen: \(String(cString: strerror(errno)))") }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread {
            while true {
                let accepted = accept(listener, nil, nil)
                guard accepted >= 0 else { return }
                let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                var remote = sockaddr_in()
                remote.sin_family = sa_family_t(AF_INET)
                remote.sin_port = in_port_t(UInt16(target.port).bigEndian)
                remote.sin_addr.s_addr = inet_addr(target.host)
                let connected = withUnsafePointer(to: &remote) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
                guard connected == 0 else { close(accepted); close(upstream); continue }
                for socket in [accepted, upstream] {
                    var one: Int32 = 1
                    setsockopt(socket, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
                }
                Self.pump(from: accepted, to: upstream, delay: delay)
                Self.pump(from: upstream, to: accepted, delay: delay)
            }
        }
    }

    /// Copies `from` to `to`, each chunk `delay` after it was read.
    private static func pump(from: Int32, to: Int32, delay: Duration) {
        let condition = NSCondition()
        nonisolated(unsafe) var queue: [(due: ContinuousClock.Instant, bytes: [UInt8])] = []
        nonisolated(unsafe) var ended = false
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(from, $0.baseAddress, $0.count) }
                condition.lock()
                if count <= 0 { ended = true } else { queue.append((.now.advanced(by: delay), Array(buffer[..<count]))) }
                condition.signal()
                condition.unlock()
                if count <= 0 { return }
            }
        }
        Thread.detachNewThread {
            while true {
                condition.lock()
                while queue.isEmpty && !ended { condition.wait() }
                if queue.isEmpty && ended {
                    condition.unlock()
                    shutdown(to, Int32(SHUT_WR))
                    return
                }
                let next = queue.removeFirst()
                condition.unlock()
                let wait = ContinuousClock.now.duration(to: next.due)
                if wait > .zero {
                    let (seconds, attoseconds) = wait.components
                    var pause = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
                    var left = timespec()
                    while nanosleep(&pause, &left) != 0 && errno == EINTR { pause = left }
                }
                var written = 0
                while written < next.bytes.count {
                    let count = next.bytes[written...].withUnsafeBytes { write(to, $0.baseAddress, $0.count) }
                    guard count > 0 else { return }
                    written += count
                }
            }
        }
    }
}

@main
struct GatewayBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gateway-bench",
        abstract: "The gateway's figures across a veth pair, beside bare gRPC-Swift with the same mutual TLS, in one run (root).",
        subcommands: [Run.self, BaselineServer.self, Client.self], defaultSubcommand: Run.self)
}

struct TLSOptions: ParsableArguments {
    @Option var certificate: String
    @Option var key: String
    @Option var ca: String
}

struct BaselineServer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "baseline-server", abstract: "The bare gRPC-Swift server, with the gateway's TLS settings.")
    @Option var listen: String
    @Option var port: Int
    @OptionGroup var tls: TLSOptions

    func run() async throws {
        let security = GatewayTLS(certificateChain: tls.certificate, privateKey: tls.key, clientCA: tls.ca)
        let transport = HTTP2ServerTransport.Posix(address: .ipv4(host: listen, port: port), transportSecurity: security.transportSecurity)
        let server = GRPCServer(transport: transport, services: [Baseline.Service()])
        let announce = Task {
            if (try? await transport.listeningAddress) != nil {
                // At once, unbuffered: the parent waits for the line.
                let line = Array("baseline: listening\n".utf8)
                _ = line.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
            }
        }
        defer { announce.cancel() }
        try await server.serve()
    }
}

struct Client: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "client", abstract: "Measure, as the host, and print the figures as JSON.")
    @Option var gateway: String
    @Option var baseline: String
    @Option(name: .customLong("round-trips")) var roundTrips = 5000
    @Option var transfers = 20
    @Option var shares = 10
    @Option(help: "The share activity's manifest folder, for the local baseline.") var localServices: String
    @Flag(help: "Measure the remote-view figures instead (the demo's Notes and animation on the gateway's side).") var views = false
    @Option(help: "With --views: a delay added to each direction of the link, ms (a relay of this process's).") var delayMs = 0
    @Option(help: "With --views: how long the photograph scrolls, seconds.") var photoSeconds = 5.0
    @Option(help: "With --views: samples of each timed figure.") var samples = 10
    @Flag(help: "With --views: only the photograph's frames (a gateway that forces one codec).") var photoOnly = false
    @Option(help: "With --views: the link's name in the figures.") var label = "unshaped"
    @OptionGroup var tls: TLSOptions

    func run() async throws {
        if views {
            let host = String(gateway.split(separator: ":")[0]), port = Int(gateway.split(separator: ":")[1])!
            var address = GRPCNIOTransportCore.SocketAddress.ipv4(host: host, port: port)
            var relay: DelayingRelay?
            if delayMs > 0 {
                relay = try DelayingRelay(to: (host, port), delay: .milliseconds(delayMs))
                address = .ipv4(host: "127.0.0.1", port: relay!.port)
            }
            let client = GatewayClient(address: address, certificateChain: tls.certificate, privateKey: tls.key, gatewayCA: tls.ca, serverName: "localhost")
            let figures = try await ViewBench(gateway: client, local: localServices, delay: delayMs, photoSeconds: photoSeconds, samples: samples,
                                              photoOnly: photoOnly, label: label).run()
            withExtendedLifetime(relay) {}
            print(String(decoding: try JSONEncoder().encode(figures), as: UTF8.self))
            return
        }
        var figures = try await measureLinks()
        figures += try await measureShares()
        let encoder = JSONEncoder()
        print(String(decoding: try encoder.encode(figures), as: UTF8.self))
    }

    /// A share's perform → its view presented → the activity's first update (ready), as many
    /// times as `shares`: locally (a launcher here, the same service sandboxed on this side),
    /// and through the gateway over a relay that adds 5 ms each way (a 10 ms round trip).
    func measureShares() async throws -> [Figure] {
        let host = String(gateway.split(separator: ":")[0]), gatewayPort = Int(gateway.split(separator: ":")[1])!
        let relay = try DelayingRelay(to: (host, gatewayPort), delay: .milliseconds(5))
        var quiet = Logger(label: "gateway-bench")
        quiet.logLevel = .error
        var configuration = Launcher.Configuration(hostIdentifier: "com.example.gateway-bench-host")
        configuration.logger = quiet
        let shares = shares
        @Sendable func measureShare(_ launcher: Launcher, registry: ServiceRegistry, name: String) async throws -> Figure {
            let sheet = ShareSheet(registry: registry, items: [try .text("a shared text")])
            guard let activity = sheet.activity(registry.services.keys.first { $0.hasPrefix("com.example.gateway-bench.share") } ?? "") else {
                throw ValidationError("the bench share is not offered: \(sheet.explanations)")
            }
            // The first warms the caches (and, remote, opens the gateway's connection).
            return try await measure(name, warmUp: 1, count: shares) {
                let session = try await sheet.perform(activity, launcher: launcher)
                try await session.view.present(width: 40, height: 30)
                _ = try await session.wait(for: .ready, timeout: .seconds(30))
                _ = await session.cancel()
                await session.close()
            }
        }
        let local = ServiceRegistry(scanning: [localServices], includingInstalled: false)
        var figures = [try await withLauncher(registry: local, configuration: configuration) { launcher in
            try await measureShare(launcher, registry: local, name: "share perform → first update, local")
        }]
        // Framing version 2 (a view's frames on streams of their own), and version 1 (its
        // buffer relayed as it is) for comparison, on the same link.
        for version in [ConnectFrame.version, 1] {
            var shaped = GatewayClient(address: .ipv4(host: "127.0.0.1", port: relay.port), certificateChain: tls.certificate, privateKey: tls.key,
                                       gatewayCA: tls.ca, serverName: "localhost")
            shaped.framingVersion = version
            configuration.remoteServices = try GatewayConnector(gateways: [(name: "bench", client: shaped)], logger: quiet)
            figures.append(try await withLauncher(registry: ServiceRegistry(manifests: []), configuration: configuration) { launcher in
                let (services, problems) = await launcher.remoteServices()
                guard problems.isEmpty else { throw ValidationError("the gateway's catalog: \(problems)") }
                return try await measureShare(launcher, registry: ServiceRegistry(manifests: []).adding(remote: services),
                                         name: "share perform → first update, through the gateway, 10 ms round trip" + (version == 1 ? ", framing version 1" : ""))
            })
        }
        return figures
    }

    func measureLinks() async throws -> [Figure] {
        let host = String(gateway.split(separator: ":")[0])
        let gatewayPort = Int(gateway.split(separator: ":")[1])!, baselinePort = Int(baseline.split(separator: ":")[1])!
        let client = GatewayClient(address: .ipv4(host: host, port: gatewayPort), certificateChain: tls.certificate, privateKey: tls.key,
                                   gatewayCA: tls.ca, serverName: "localhost")
        var config = HTTP2ClientTransport.Posix.Config.defaults
        config.http2.authority = "localhost"
        let security = HTTP2ClientTransport.Posix.TransportSecurity.mTLS(
            certificateChain: [.file(path: tls.certificate, format: .pem)], privateKey: .file(path: tls.key, format: .pem)) { tls in
            tls.trustRoots = .certificates([.file(path: self.tls.ca, format: .pem)])
        }
        let payload = [UInt8](repeating: 0x2A, count: 64)
        let mebibyte = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        var figures: [Figure] = []

        // Bare gRPC-Swift: unary 64 B, and 1 MiB on a client stream in 60 KiB messages.
        let transport = try HTTP2ClientTransport.Posix(target: .ipv4(address: host, port: baselinePort), transportSecurity: security, config: config)
        figures += try await withGRPCClient(transport: transport) { grpc -> [Figure] in
            func call() async throws {
                let reply = try await grpc.unary(request: ClientRequest(message: payload), descriptor: Baseline.echo, serializer: RawBytes(),
                                                 deserializer: RawBytes(), options: .defaults) { try $0.message }
                guard reply.count == 64 else { throw RPCError(code: .dataLoss, message: "short reply") }
            }
            let unary = try await measure("bare gRPC unary, 64 B", warmUp: 500, count: roundTrips, call)
            func sink() async throws {
                let request = StreamingClientRequest<[UInt8]> { writer in
                    var start = 0
                    while start < mebibyte.count {
                        let end = min(start + ConnectFrame.maxChunkBytes, mebibyte.count)
                        try await writer.write(Array(mebibyte[start..<end]))
                        start = end
                    }
                }
                let reply = try await grpc.clientStreaming(request: request, descriptor: Baseline.sink, serializer: RawBytes(),
                                                           deserializer: RawBytes(), options: .defaults) { try $0.message }
                guard String(decoding: reply, as: UTF8.self) == String(1 << 20) else { throw RPCError(code: .dataLoss, message: "short sink") }
            }
            return [unary, try await measure("bare gRPC stream, 1 MiB", warmUp: 3, count: transfers, sink)]
        }

        // RemoteView through the gateway: a request/reply of 64 B, and a 1 MiB file item.
        let configuration = Connection.Configuration(role: .host, identifier: "com.example.gateway-bench-host",
                                                     expectedPeerIdentifier: "com.example.gateway-bench")
        let connection = try await client.connect(to: "com.example.gateway-bench", configuration: configuration)
        figures += try await connection.withRunning { connection -> [Figure] in
            func call() async throws {
                let reply = try await connection.request(ServiceMessage(type: "echo", payload: payload), timeout: .seconds(10))
                guard reply.payload.count == 64 else { throw RemoteError(.protocolViolation, "short reply") }
            }
            let request = try await measure("RemoteView request/reply through the gateway, 64 B", warmUp: 500, count: roundTrips, call)
            let file = try MemoryFile.sealed(name: "bench-item", contents: mebibyte)
            func send() async throws {
                let reply = try await connection.request(ServiceMessage(type: "size", attachments: [try Attachment(duplicating: file.fd)]),
                                                         timeout: .seconds(30))
                guard reply.text == String(1 << 20) else { throw RemoteError(.protocolViolation, "the item arrived as \(reply.text ?? "?") bytes") }
            }
            let item = try await measure("RemoteView 1 MiB file item through the gateway", warmUp: 3, count: transfers, send)
            await connection.close(reason: "done")
            return [request, item]
        }
        return figures
    }
}

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "run", abstract: "Set up two namespaces and a veth pair, measure, clean up (root).")
    @Option(name: .customLong("round-trips")) var roundTrips = 5000
    @Option var transfers = 20
    @Option var shares = 10
    @Flag(help: "Only the remote-view figures.") var viewsOnly = false
    @Option(help: "The demo's executable, whose Notes and animation the view figures use (default: the repository's release build).") var demo: String?
    @Option(help: "How long the photograph scrolls, seconds.") var photoSeconds = 5.0

    func run() async throws {
        guard geteuid() == 0 else { throw ValidationError("gateway-bench makes network namespaces: run it as root") }
        let own = URL(filePath: CommandLine.arguments[0]).deletingLastPathComponent().path
        let demo = demo ?? URL(filePath: own).appending(path: "../../../.build/release/demo-share").standardized.path
        guard FileManager.default.isExecutableFile(atPath: demo) else {
            throw ValidationError("the demo is not built at \(demo): swift build -c release --product demo-share at the repository's root, or --demo PATH")
        }
        let service = own + "/gateway-bench-service", gatewayExecutable = own + "/remoteview-gateway", bench = CommandLine.arguments[0]
        let tag = String(getpid() % 100_000)
        let (server, client, serverLink, clientLink) = ("rvb\(tag)s", "rvb\(tag)c", "rvbs\(tag)", "rvbc\(tag)")
        let (serverAddress, clientAddress) = ("10.213.8.1", "10.213.8.2")
        let folder = FileManager.default.temporaryDirectory.appending(path: "gateway-bench-\(getpid())").path
        try FileManager.default.createDirectory(atPath: folder + "/services", withIntermediateDirectories: true)
        var children: [Process] = []
        defer {
            for child in children where child.isRunning { child.terminate() }
            for child in children { child.waitUntilExit() }
            for namespace in [server, client] { _ = try? Self.run("/usr/sbin/ip", ["netns", "del", namespace]) }
            try? FileManager.default.removeItem(atPath: folder)
        }
        for command in [["netns", "add", server], ["netns", "add", client],
                        ["link", "add", serverLink, "type", "veth", "peer", "name", clientLink],
                        ["link", "set", serverLink, "netns", server], ["link", "set", clientLink, "netns", client],
                        ["-n", server, "addr", "add", serverAddress + "/30", "dev", serverLink],
                        ["-n", client, "addr", "add", clientAddress + "/30", "dev", clientLink],
                        ["-n", server, "link", "set", serverLink, "up"], ["-n", client, "link", "set", clientLink, "up"],
                        ["-n", server, "link", "set", "lo", "up"], ["-n", client, "link", "set", "lo", "up"]] {
            _ = try Self.run("/usr/sbin/ip", command)
        }
        // A PKI: a CA, the gateway's certificate (localhost and its address), a client's (a URI).
        func openssl(_ arguments: [String]) throws { _ = try Self.run("/usr/bin/openssl", arguments) }
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        try openssl(["req", "-x509"] + ec + ["-keyout", folder + "/ca.key", "-out", folder + "/ca.pem", "-days", "2", "-subj", "/CN=gateway-bench CA",
                     "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        for (name, extensions) in [("gateway", "subjectAltName=DNS:localhost,IP:\(serverAddress)\nextendedKeyUsage=serverAuth\n"),
                                   ("client", "subjectAltName=URI:spiffe://gateway-bench/client\nextendedKeyUsage=clientAuth\n")] {
            try openssl(["req"] + ec + ["-keyout", "\(folder)/\(name).key", "-out", "\(folder)/\(name).csr", "-subj", "/CN=\(name)"])
            try Data(extensions.utf8).write(to: URL(filePath: "\(folder)/\(name).ext"))
            try openssl(["x509", "-req", "-in", "\(folder)/\(name).csr", "-CA", folder + "/ca.pem", "-CAkey", folder + "/ca.key", "-CAcreateserial",
                         "-out", "\(folder)/\(name).pem", "-days", "2", "-extfile", "\(folder)/\(name).ext"])
        }
        try Data(#"{"version": 1, "clients": [{"identity": "uri:spiffe://gateway-bench/client", "services": ["*"]}]}"#.utf8)
            .write(to: URL(filePath: folder + "/clients.json"))
        try Data(#"{"identifier": "com.example.gateway-bench", "executable": "\#(service)", "arguments": ["com.example.gateway-bench"], "display": {"title": "Bench"}, "idleTimeout": 600}"#.utf8)
            .write(to: URL(filePath: folder + "/services/bench.json"))
        // The share activity, on the gateway's side and (for the local baseline) on the host's.
        let share = #"{"identifier": "com.example.gateway-bench.share", "executable": "\#(service)", "arguments": ["com.example.gateway-bench.share"], "display": {"title": "Bench share"}, "activation": {"contentTypes": [{"type": "text/plain", "min": 1, "max": 1}]}, "instances": "perConnection"}"#
        try Data(share.utf8).write(to: URL(filePath: folder + "/services/share.json"))
        try FileManager.default.createDirectory(atPath: folder + "/local", withIntermediateDirectories: true)
        try Data(share.utf8).write(to: URL(filePath: folder + "/local/share.json"))
        // The demo's animation and Notes, on both sides, for the view figures.
        for (name, manifest) in [("animation", #"{"identifier": "com.example.demo-share.animation", "executable": "\#(demo)", "arguments": ["animation"], "display": {"title": "Animation"}, "instances": "perConnection"}"#),
                                 ("notes", #"{"identifier": "com.example.demo-share.notes", "executable": "\#(demo)", "arguments": ["activity", "notes"], "display": {"title": "Notes"}, "activation": {"contentTypes": [{"type": "text/plain", "min": 0, "max": 1}]}, "instances": "perConnection"}"#)] {
            try Data(manifest.utf8).write(to: URL(filePath: "\(folder)/services/\(name).json"))
            try Data(manifest.utf8).write(to: URL(filePath: "\(folder)/local/\(name).json"))
        }

        let tls = ["--certificate", folder + "/gateway.pem", "--key", folder + "/gateway.key"]
        children.append(try Self.start("/usr/sbin/ip", ["netns", "exec", server, gatewayExecutable, "--listen", serverAddress + ":7443"] + tls
                                       + ["--client-ca", folder + "/ca.pem", "--authorization", folder + "/clients.json",
                                          "--services", folder + "/services", "--no-installed", "--log-level", "warning"], until: "listening on"))
        // Two more gateways whose views' frames all get one codec, for the compression figures.
        for (port, codec) in [(7445, "lz4"), (7446, "zstd")] {
            children.append(try Self.start("/usr/sbin/ip", ["netns", "exec", server, gatewayExecutable, "--listen", "\(serverAddress):\(port)"] + tls
                                           + ["--client-ca", folder + "/ca.pem", "--authorization", folder + "/clients.json", "--view-codec", codec,
                                              "--services", folder + "/services", "--no-installed", "--log-level", "warning"], until: "listening on"))
        }
        let clientTLS = ["--local-services", folder + "/local", "--certificate", folder + "/client.pem", "--key", folder + "/client.key", "--ca", folder + "/ca.pem"]
        func views(_ port: Int, _ extra: [String]) throws -> [ViewFigure] {
            let before = try Self.counters(server, serverLink)
            let output = try Self.run("/usr/sbin/ip", ["netns", "exec", client, bench, "client", "--views", "--gateway", "\(serverAddress):\(port)",
                                                       "--baseline", serverAddress + ":7444", "--photo-seconds", String(photoSeconds)] + extra + clientTLS)
            let after = try Self.counters(server, serverLink)
            let figures = try JSONDecoder().decode([ViewFigure].self, from: Data(output.split(separator: "\n").last.map(String.init)?.utf8 ?? "".utf8))
            return figures + [ViewFigure(name: "veth \(serverLink) during that run", value: Double(after.0 - before.0 + after.1 - before.1), unit: "B",
                                         detail: "\(after.0 - before.0) B received, \(after.1 - before.1) B sent: every stream's payload with HTTP/2, TLS, TCP, IP and Ethernet framing")]
        }
        if viewsOnly {
            var load = [Double](repeating: 0, count: 3)
            getloadavg(&load, 3)
            print(String(format: "load average before the run: %.2f %.2f %.2f", load[0], load[1], load[2]))
            try printViews(views, shape: { try Self.shape(server, serverLink, client, clientLink) })
            return
        }
        children.append(try Self.start("/usr/sbin/ip", ["netns", "exec", server, bench, "baseline-server", "--listen", serverAddress, "--port", "7444",
                                                         "--certificate", folder + "/gateway.pem", "--key", folder + "/gateway.key", "--ca", folder + "/ca.pem"],
                                       until: "baseline: listening"))
        var load = [Double](repeating: 0, count: 3)
        getloadavg(&load, 3)
        let before = try Self.counters(server, serverLink)
        let output = try Self.run("/usr/sbin/ip", ["netns", "exec", client, bench, "client", "--gateway", serverAddress + ":7443",
                                                   "--baseline", serverAddress + ":7444", "--round-trips", String(roundTrips),
                                                   "--transfers", String(transfers), "--shares", String(shares), "--local-services", folder + "/local",
                                                   "--certificate", folder + "/client.pem",
                                                   "--key", folder + "/client.key", "--ca", folder + "/ca.pem"])
        let after = try Self.counters(server, serverLink)
        let figures = try JSONDecoder().decode([Figure].self, from: Data(output.split(separator: "\n").last.map(String.init)?.utf8 ?? "".utf8))
        print(String(format: "load average before the run: %.2f %.2f %.2f", load[0], load[1], load[2]))
        print("| figure | median | p99 | per second | client CPU per op |")
        print("| --- | --- | --- | --- | --- |")
        for figure in figures {
            print(String(format: "| %@ | %.1f µs | %.1f µs | %.1f | %.1f µs |", figure.name, figure.median, figure.p99, figure.perSecond, figure.clientCPUPerOperation))
        }
        let named = Dictionary(uniqueKeysWithValues: figures.map { ($0.name, $0) })
        if let bare = named["bare gRPC unary, 64 B"], let remote = named["RemoteView request/reply through the gateway, 64 B"] {
            print(String(format: "request/reply 64 B, RemoteView through the gateway vs bare gRPC unary: %.2f× (median), target ≤ 1.3×", remote.median / bare.median))
        }
        if let bare = named["bare gRPC stream, 1 MiB"], let remote = named["RemoteView 1 MiB file item through the gateway"] {
            print(String(format: "1 MiB, RemoteView item throughput vs bare gRPC stream: %.2f× (%.1f vs %.1f MiB/s), target ≥ 0.8×",
                         remote.perSecond / bare.perSecond, remote.perSecond, bare.perSecond))
        }
        if let local = named["share perform → first update, local"], let remote = named["share perform → first update, through the gateway, 10 ms round trip"] {
            print(String(format: "share perform → first update through the gateway on a 10 ms round trip: local + %.1f ms (%.1f link round trips), target ≤ local + 3",
                         (remote.median - local.median) / 1000, (remote.median - local.median) / 10_000))
            if let old = named["share perform → first update, through the gateway, 10 ms round trip, framing version 1"] {
                print(String(format: "  the same with framing version 1 (no view streams): local + %.1f ms (%.1f link round trips)",
                             (old.median - local.median) / 1000, (old.median - local.median) / 10_000))
            }
        }
        print("veth \(serverLink) during the run: \(after.0 - before.0) bytes received, \(after.1 - before.1) bytes sent (both figures' traffic)")
        try printViews(views, shape: { try Self.shape(server, serverLink, client, clientLink) })
    }

    /// The view figures: unshaped, with each codec forced, then on a link shaped to 100 Mbit/s
    /// (tbf, both ways) with a 20 ms round trip (the client's relay, 10 ms each way).
    func printViews(_ views: (Int, [String]) throws -> [ViewFigure], shape: () throws -> Void) throws {
        var figures = try views(7443, ["--label", "unshaped"])
        figures += try views(7445, ["--label", "lz4 only", "--photo-only"])
        figures += try views(7446, ["--label", "zstd only", "--photo-only"])
        try shape()
        figures += try views(7443, ["--label", "100 Mbit/s, 20 ms round trip", "--delay-ms", "10"])
        print("| view figure | value | how |")
        print("| --- | --- | --- |")
        for figure in figures {
            print(String(format: "| %@ | %.1f %@ | %@ |", figure.name, figure.value, figure.unit, figure.detail))
        }
    }

    /// Limits both ends of the veth pair to 100 Mbit/s with `tbf` (this kernel has no `netem`).
    static func shape(_ server: String, _ serverLink: String, _ client: String, _ clientLink: String) throws {
        for (namespace, link) in [(server, serverLink), (client, clientLink)] {
            _ = try run("/usr/sbin/ip", ["netns", "exec", namespace, "tc", "qdisc", "add", "dev", link, "root", "tbf", "rate", "100mbit", "burst", "32kb", "latency", "400ms"])
        }
    }

    /// The veth end's byte counters in `namespace` (received, sent).
    static func counters(_ namespace: String, _ link: String) throws -> (Int, Int) {
        let read = { (what: String) in Int(try Self.run("/usr/sbin/ip", ["netns", "exec", namespace, "cat", "/sys/class/net/\(link)/statistics/\(what)"])
                                                .trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0 }
        return (try read("rx_bytes"), try read("tx_bytes"))
    }

    /// Runs `executable` to its end; its output, or an error with it.
    static func run(_ executable: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(filePath: executable)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw ValidationError("\(executable) \(arguments.joined(separator: " ")) failed: \(output)")
        }
        return output
    }

    /// Starts `executable` and waits (60 s at most) until it prints a line containing `ready`.
    static func start(_ executable: String, _ arguments: [String], until ready: String) throws -> Process {
        let process = Process()
        process.executableURL = URL(filePath: executable)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        var seen = ""
        let deadline = Date() + 60
        while !seen.contains(ready) {
            let data = pipe.fileHandleForReading.availableData
            guard !data.isEmpty, Date() < deadline else { throw ValidationError("\(executable) did not say \(ready): \(seen)") }
            seen += String(decoding: data, as: UTF8.self)
        }
        return process
    }
}
