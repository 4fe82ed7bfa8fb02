// remoteview-gateway: serves this machine's services to hosts elsewhere, over gRPC (HTTP/2) with
// mutual TLS (docs/Gateway.md): who a client is, what it may reach, the catalog of those
// services (`Activities`), and connections to them (`Connect`), relayed to processes that this
// machine's own launcher starts and sandboxes.
import ArgumentParser
import FoundationEssentials
import class Foundation.Thread
import Glibc
import GRPCNIOTransportHTTP2
import Logging
import RemoteGateway
import RemoteHost
import ServiceLifecycle

@main
struct GatewayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remoteview-gateway",
        abstract: "Serve this machine's RemoteView services to hosts elsewhere, over gRPC with mutual TLS.",
        subcommands: [Serve.self, ActivitiesCommand.self, CallCommand.self, HostCommand.self],
        defaultSubcommand: Serve.self)
}

/// `remoteview-gateway serve` (the default): the gateway itself.
struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve this machine's RemoteView services to hosts elsewhere, over gRPC with mutual TLS (the default).",
        discussion: """
            Clients must present a certificate that chains to --client-ca (and only to it: the \
            system's roots are not trusted) and names them in its subject alternative names (a \
            URI or a DNS name); --authorization maps those names to the services each may reach \
            (docs/Gateway.md). Plaintext is refused. SIGTERM or SIGINT ends it gracefully: calls \
            in progress finish.
            """)

    @Option(help: ArgumentHelp("Where to listen: HOST:PORT (an IPv4 address, or [IPv6]:PORT) or unix:PATH.", valueName: "address"))
    var listen: String

    @Option(help: ArgumentHelp("The gateway's certificate chain, leaf first (PEM).", valueName: "file"))
    var certificate: String

    @Option(help: ArgumentHelp("The gateway's private key (PEM).", valueName: "file"))
    var key: String

    @Option(name: .customLong("client-ca"), help: ArgumentHelp("The CA client certificates must chain to (PEM): the only one trusted.", valueName: "file"))
    var clientCA: String

    @Option(help: ArgumentHelp("Which services each client may reach (JSON; docs/Gateway.md, \"Authorization\").", valueName: "file"))
    var authorization: String

    @Option(name: .customLong("services"), help: ArgumentHelp("A folder of service manifests; repeat for several.", valueName: "dir"))
    var serviceFolders: [String] = []

    @Flag(inversion: .prefixedNo, help: "Also the activities installed in the XDG data folders (remoteview/manifests).")
    var installed = true

    @Option(name: .customLong("view-codec"), help: ArgumentHelp("How views' frames are compressed: auto (lz4, zstd while the link is the bottleneck), lz4, zstd or raw.", valueName: "codec"))
    var viewCodec = "auto"

    @Option(help: ArgumentHelp("The log level: trace, debug, info, notice, warning, error or critical.", valueName: "level"))
    var logLevel: Logger.Level = .info

    func validate() throws {
        _ = try Self.address(listen)
        guard viewCodec == "auto" || ViewFrame.Codec(named: viewCodec) != nil else {
            throw ValidationError("--view-codec \(viewCodec.escapedForTerminal()): not auto, lz4, zstd or raw")
        }
    }

    func run() async throws {
        var logger = Logger(label: "remoteview-gateway")
        logger.logLevel = logLevel
        let authorization: GatewayAuthorization
        do { authorization = try GatewayAuthorization(contentsOf: self.authorization) } catch {
            throw ValidationError("--authorization: \(error.description)")
        }
        let tls = GatewayTLS(certificateChain: certificate, privateKey: key, clientCA: clientCA)
        do { try tls.check() } catch { throw ValidationError(error.description) }
        let registry = ServiceRegistry(scanning: serviceFolders, includingInstalled: installed)
        for problem in registry.problems { logger.warning("invalid manifest: \(problem)") }
        for warning in registry.warnings { logger.warning("\(warning)") }
        var launcherConfiguration = Launcher.Configuration(hostIdentifier: "remoteview-gateway")
        launcherConfiguration.logger = logger
        let address = try Self.address(listen)
        // The launcher outlives the server: once the calls have ended (each stops its process
        // in order), it stops what is left the same way, every service given its goodbye.
        try await withLauncher(registry: registry, configuration: launcherConfiguration) { [logger] launcher in
            try await Self.serve(address: address, tls: tls, authorization: authorization, registry: registry, launcher: launcher,
                                 viewCodec: ViewFrame.Codec(named: viewCodec), logger: logger)
        }
        say("remoteview-gateway: stopped")
    }

    static func serve(address: GRPCNIOTransportCore.SocketAddress, tls: GatewayTLS, authorization: GatewayAuthorization,
                      registry: ServiceRegistry, launcher: Launcher, viewCodec: ViewFrame.Codec?, logger: Logger) async throws {
        let gateway = Gateway(address: address, tls: tls,
                              service: GatewayService(registry: registry, authorization: authorization, launcher: launcher, viewCodec: viewCodec, logger: logger))
        let announce = Task {
            if let address = try? await gateway.transport.listeningAddress {
                logger.info("listening on \(address) for \(authorization.entries.count) client entries, \(registry.services.count) services")
                say("remoteview-gateway: listening on \(address)")
            }
        }
        defer { announce.cancel() }
        var configuration = ServiceGroupConfiguration(services: [.init(service: gateway)], gracefulShutdownSignals: [.sigterm, .sigint],
                                                      cancellationSignals: [], logger: logger)
        // Calls in progress have this long to finish (a catalog's request is bounded to 10 s);
        // then what is left is cancelled.
        configuration.maximumGracefulShutdownDuration = .seconds(40)
        let group = ServiceGroup(configuration: configuration)
        try await group.run()
    }

    /// `HOST:PORT`, `[IPv6]:PORT` or `unix:PATH` as a socket address (`GatewayClient.address`),
    /// or a usage error naming `option`.
    static func address(_ text: String, option: String = "--listen") throws -> GRPCNIOTransportCore.SocketAddress {
        do { return try GatewayClient.address(text) } catch { throw ValidationError("\(option) \(error.description)") }
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

/// Writes `line` to standard output at once (a pipe's reader, a test or a supervisor, sees it
/// now; `print` would wait in a buffer).
func say(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    var written = 0
    while written < bytes.count {
        let count = bytes[written...].withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
        if count < 0, errno == EINTR { continue }
        guard count > 0 else { return }
        written += count
    }
}

/// How a client reaches a gateway: its address and the TLS material (`activities`, `call`).
struct ClientOptions: ParsableArguments {
    @Option(help: ArgumentHelp("The gateway's address: ADDRESS:PORT, [IPv6]:PORT or unix:PATH.", valueName: "address"))
    var gateway: String

    @Option(help: ArgumentHelp("This client's certificate chain (PEM), from the gateway's client CA.", valueName: "file"))
    var certificate: String

    @Option(help: ArgumentHelp("This client's private key (PEM).", valueName: "file"))
    var key: String

    @Option(help: ArgumentHelp("The CA the gateway's certificate must chain to (PEM): the only one trusted.", valueName: "file"))
    var ca: String

    @Option(name: .customLong("server-name"), help: ArgumentHelp("The name the gateway's certificate must carry (default: its address).", valueName: "name"))
    var serverName: String?

    func validate() throws {
        _ = try Serve.address(gateway, option: "--gateway")
    }

    var client: GatewayClient {
        get throws {
            GatewayClient(address: try Serve.address(gateway, option: "--gateway"), certificateChain: certificate, privateKey: key,
                          gatewayCA: ca, serverName: serverName)
        }
    }
}

/// `remoteview-gateway activities`: what a gateway shows this client.
struct ActivitiesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "activities",
        abstract: "Ask a gateway, as a client, for the services it lets this client reach (its catalog).")

    @OptionGroup var options: ClientOptions

    @Flag(help: "Print the catalog's JSON instead of a list.")
    var json = false

    func run() async throws {
        let catalog: GatewayCatalog
        do { catalog = try await options.client.activities() } catch let error as GatewayError { throw ValidationError(error.description) }
        if json {
            say(String(decoding: try catalog.encoded(), as: UTF8.self).escapedForTerminal())
            return
        }
        if catalog.services.isEmpty { say("no service (this client is granted none)") }
        for service in catalog.services {
            let kind = service.activation == nil ? "service" : "activity"
            say("\(service.identifier)  \(service.title)  (\(kind))".escapedForTerminal())
        }
    }
}

/// `remoteview-gateway call`: one request to a service through a gateway, as a host would make
/// it (for trying a gateway, and for scripts).
struct CallCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "call",
        abstract: "Connect to a service through a gateway, send it one-way messages, then a request, and print the reply.",
        discussion: """
            The connection is a host's, over the gateway's Connect stream: the service runs on the \
            gateway's machine, sandboxed there. Files given with --file travel as sealed memfds \
            (share items), in 60 KiB chunks. Exits 0 with the reply, 1 with why the call failed \
            (its RemoteError code and reason).
            """)

    @OptionGroup var options: ClientOptions

    @Argument(help: ArgumentHelp("The service's identifier (on the gateway).", valueName: "service"))
    var service: String

    @Argument(help: ArgumentHelp("The request's type.", valueName: "type"))
    var type: String

    @Option(help: ArgumentHelp("The request's text.", valueName: "text"))
    var text: String?

    @Option(help: ArgumentHelp("A file to attach to the request, as a sealed memfd; repeat for several.", valueName: "path"))
    var file: [String] = []

    @Option(help: ArgumentHelp("A one-way message TYPE:TEXT sent before the request; repeat for several, sent in order.", valueName: "type:text"))
    var message: [String] = []

    @Option(help: ArgumentHelp("A folder to write the reply's attachments into (attachment-0, attachment-1, …).", valueName: "dir"))
    var save: String?

    @Option(help: ArgumentHelp("How long the reply may take, in seconds (the service's launch included).", valueName: "seconds"))
    var timeout: Double = 30

    @Option(help: ArgumentHelp("The identifier this host gives in its handshake.", valueName: "identifier"))
    var hostIdentifier = "remoteview-gateway.call"

    func run() async throws {
        var attachments: [Attachment] = []
        for path in file {
            let bytes: [UInt8]
            do { bytes = try readBoundedFile(path, limit: ShareLimits.maxFileBytes, what: "--file") } catch { throw ValidationError(error.description) }
            attachments.append(Attachment(try MemoryFile.sealed(name: "item", contents: bytes).takeDescriptor()))
        }
        let request = text.map { ServiceMessage(type: type, text: $0, attachments: attachments) } ?? ServiceMessage(type: type, attachments: attachments)
        let messages = message.map { entry in
            let parts = entry.split(separator: ":", maxSplits: 1).map(String.init)
            return parts.count > 1 ? ServiceMessage(type: parts[0], text: parts[1]) : ServiceMessage(type: parts[0])
        }
        let configuration = Connection.Configuration(role: .host, identifier: hostIdentifier, expectedPeerIdentifier: service)
        let timeout = Duration.milliseconds(Int64(self.timeout * 1000))
        do {
            let connection = try await options.client.connect(to: service, configuration: configuration, within: timeout)
            let reply = try await connection.withRunning { connection in
                for message in messages { try await connection.send(message) }
                let reply = try await connection.request(request, timeout: timeout)
                await connection.close(reason: "the call is done")
                return reply
            }
            say("reply \(reply.type): \(reply.text ?? "")".escapedForTerminal())
            for (index, attachment) in reply.attachments.enumerated() {
                guard let fd = attachment.take() else { continue }
                let contents = try MemoryFile(adopting: fd).contents(limit: ShareLimits.maxFileBytes)
                say("attachment \(index): \(contents.count) bytes")
                if let save {
                    try Data(contents).write(to: URL(filePath: save + "/attachment-\(index)"))
                }
            }
        } catch let error as RemoteError {
            sayError("remoteview-gateway: \(error.code): \(error.reason)".escapedForTerminal())
            throw ExitCode(1)
        }
    }
}

/// Writes `line` to standard error at once.
func sayError(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
}

/// `remoteview-gateway host`: a host whose launcher is given one gateway, driven line by line
/// from standard input (for trying a gateway's services as a host's launcher reaches them, and
/// for tests across machines).
struct HostCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "host",
        abstract: "Be a host whose launcher reaches services through one gateway, driven by commands on standard input.",
        discussion: """
            Commands, one per line: \
            `request SERVICE TYPE [TEXT]` (SERVICE as the launcher takes it: an identifier, or \
            IDENTIFIER@NAME), printing `reply SERVICE TYPE: TEXT` or `error SERVICE CODE: REASON`; \
            `send SERVICE TYPE [TEXT]` (one-way); \
            `share SERVICE TEXT` (a share of one text item through the share sheet, its view \
            presented at 40×30), printing `share started` once its first frame is shown; \
            `share-request TYPE [TEXT]` on the share's connection; `share-outcome`, printing \
            `outcome …` once the share has ended; \
            `activities`, printing the gateway's services as the share sheet lists them. \
            The share's view: `view-present W H [SCALE]` (points, scale in thousandths), \
            `view-type TEXT`, `view-key CODE` (a USB HID usage), `view-click X Y` (points), each \
            printing `view ok`; `view-settle`, printing `view settled W×H` (its pixels); \
            `view-snapshot PATH`, writing the view's image as a PNG; `view-bytes`, printing the \
            gRPC payload bytes the gateway's streams carried so far (`bytes TOTAL: …`). \
            Each connection's events print as `event SERVICE interrupted: REASON`. Standard \
            input's end ends it.
            """)

    @OptionGroup var options: ClientOptions

    @Option(help: ArgumentHelp("The gateway's name in this host's configuration ([a-z0-9-]+).", valueName: "name"))
    var name = "remote"

    func run() async throws {
        var quiet = Logger(label: "remoteview-gateway.host")
        quiet.logLevel = .error
        var configuration = Launcher.Configuration(hostIdentifier: "remoteview-gateway.host", backoff: .milliseconds(100))
        configuration.logger = quiet
        let connector: GatewayConnector
        do {
            connector = try GatewayConnector(gateways: [(name: name, client: try options.client)], logger: quiet)
        } catch let error as GatewayError {
            throw ValidationError(error.description)
        }
        configuration.remoteServices = connector
        let name = name
        let lines = Self.standardInputLines()
        try await withLauncher(registry: ServiceRegistry(manifests: []), configuration: configuration) { launcher in
            var connections: [String: ServiceConnection] = [:]
            var watchers: [Task<Void, Never>] = []
            var session: ShareSession?
            func connection(_ service: String) -> ServiceConnection {
                if let open = connections[service] { return open }
                let made = launcher.connection(to: service)
                connections[service] = made
                watchers.append(Task {
                    for await event in made.events {
                        if case .interrupted(let error) = event { say("event \(service) interrupted: \(error.reason)".escapedForTerminal()) }
                    }
                })
                return made
            }
            for await line in lines {
                let words = line.split(separator: " ", maxSplits: 3).map(String.init)
                guard let command = words.first else { continue }
                let text = words.count > 3 ? words[3] : nil
                func message(_ type: String, _ text: String?) -> ServiceMessage {
                    text.map { ServiceMessage(type: type, text: $0) } ?? ServiceMessage(type: type)
                }
                do throws(RemoteError) {
                    switch command {
                    case "request" where words.count >= 3:
                        let reply = try await connection(words[1]).request(message(words[2], text), timeout: .seconds(30))
                        say("reply \(words[1]) \(reply.type): \(reply.text ?? "")".escapedForTerminal())
                    case "send" where words.count >= 3:
                        try await connection(words[1]).send(message(words[2], text))
                        say("sent \(words[1]) \(words[2])".escapedForTerminal())
                    case "activities":
                        let (services, problems) = await launcher.remoteServices()
                        for service in ServiceRegistry(manifests: []).adding(remote: services).sortedServices {
                            say("activity \(service.identifier) \(service.display.title) (gateway \(service.gateway ?? "?"))".escapedForTerminal())
                        }
                        for problem in problems { say("error activities \(problem.code): \(problem.reason)".escapedForTerminal()) }
                    case "share" where words.count >= 3:
                        let (services, _) = await launcher.remoteServices()
                        let item = try ShareItem.text(words.dropFirst(2).joined(separator: " "))
                        let sheet = ShareSheet(registry: ServiceRegistry(manifests: []).adding(remote: services), items: [item])
                        guard let activity = sheet.activity(words[1]) else {
                            throw RemoteError(.invalidArgument, "\(words[1]) is not offered for the text: \(sheet.explanation(for: words[1]) ?? "not listed")")
                        }
                        let started = try await sheet.perform(activity, launcher: launcher)
                        session = started
                        try await started.view.present(width: 40, height: 30)
                        var frames = started.view.damage.makeAsyncIterator()
                        _ = await frames.next()
                        say("share started")
                    case "share-request" where words.count >= 2:
                        guard let session else { throw RemoteError(.invalidArgument, "no share") }
                        let rest = line.split(separator: " ", maxSplits: 2).map(String.init)
                        let reply = try await session.connection.request(message(rest[1], rest.count > 2 ? rest[2] : nil), timeout: .seconds(30))
                        say("reply share \(reply.type): \(reply.text ?? "")".escapedForTerminal())
                    case "share-outcome":
                        guard let session else { throw RemoteError(.invalidArgument, "no share") }
                        let outcome = try await session.outcome(timeout: .seconds(30))
                        say("outcome \(outcome)".escapedForTerminal())
                    case "view-present", "view-type", "view-key", "view-click", "view-settle", "view-snapshot":
                        guard let view = session?.view else { throw RemoteError(.invalidArgument, "no share") }
                        let rest = line.split(separator: " ", maxSplits: 1).dropFirst().first.map(String.init) ?? ""
                        let numbers = rest.split(separator: " ").compactMap { Double($0) }
                        switch command {
                        case "view-present" where numbers.count >= 2:
                            try await view.present(width: Int(numbers[0]), height: Int(numbers[1]), scalePermille: numbers.count > 2 ? Int(numbers[2]) : 1000)
                        case "view-type" where !rest.isEmpty:
                            try await view.type(rest)
                        case "view-key" where numbers.count == 1:
                            try await view.press(keyCode: UInt32(numbers[0]))
                        case "view-click" where numbers.count == 2:
                            try await view.click(x: numbers[0], y: numbers[1])
                        case "view-settle":
                            try await view.settle()
                            say("view settled \(view.image.width)×\(view.image.height)")
                            continue
                        case "view-snapshot" where !rest.isEmpty:
                            try view.snapshot(to: rest)
                        default:
                            throw RemoteError(.invalidArgument, "\(command) \(rest): missing or wrong arguments")
                        }
                        say("view ok")
                    case "view-bytes":
                        let bytes = connector.wireBytes(on: name) ?? WireBytes()
                        say("bytes \(bytes.total): \(bytes)")
                    default:
                        say("error \(command) invalidArgument: not a command (request, send, activities, share, share-request, share-outcome, view-present, view-type, view-key, view-click, view-settle, view-snapshot, view-bytes)".escapedForTerminal())
                    }
                } catch {
                    say("error \(words.count > 1 ? words[1] : command) \(error.code): \(error.reason)".escapedForTerminal())
                }
            }
            for connection in connections.values { await connection.invalidate() }
            for watcher in watchers { await watcher.value }
        }
    }

    /// Standard input's lines, read on a thread of their own (a blocking read).
    static func standardInputLines() -> AsyncStream<String> {
        let (lines, sink) = AsyncStream<String>.makeStream()
        let thread = Thread {
            while let line = readLine() { sink.yield(line) }
            sink.finish()
        }
        thread.start()
        return lines
    }
}
