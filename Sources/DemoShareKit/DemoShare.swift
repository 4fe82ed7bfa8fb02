// demo-share: a host that shares items with the demo's activities (`share`, `list`, `view`),
// launching them on demand, sandboxed, by manifest; `host` talks to a plain service, watches it
// exit idle and relaunches it; `services` lists them like `launchctl list`; `service` and
// `activity` are the demo's services themselves.
import ArgumentParser
import FoundationEssentials
import Glibc
import Logging
import RemoteHost
import RemoteService
import Synchronization

/// The demo's command line (`demo-share`): its executable's `main` runs it.
public struct DemoShare: AsyncParsableCommand {
    public init() {}

    public static let configuration = CommandConfiguration(
        commandName: "demo-share",
        abstract: "RemoteView demo: a host and its share services.",
        subcommands: [ShareCommand.self, ListCommand.self, WindowCommand.self, AnimationCommand.self, ViewDemo.self, Host.self, Services.self,
                      Activities.self, Install.self, Uninstall.self, Paths.self, Service.self, ActivityCommand.self],
        defaultSubcommand: ShareCommand.self)
}

/// How the demo reaches gateways (`demo-share window --gateway`): a build that links the
/// gateway's client (`Network/`'s `demo-share-remote`) sets ``make``; the main package's build
/// cannot (the gateway's package depends on it), and hands such a window to that build.
public enum DemoGateways {
    /// Where a gateway is, and the TLS material to reach it with, as the window was given them.
    public struct Options: Sendable {
        public var address: String
        public var certificate: String
        public var key: String
        public var ca: String
        public var serverName: String?
        /// The gateway's name in the host (`[a-z0-9-]+`): activities are `identifier@name`.
        public var name: String
    }

    /// Makes the launcher's connector for a gateway (`nil`: this build has no gateway client).
    public static let make = Synchronization.Mutex<(@Sendable (Options) throws -> any RemoteServiceConnector)?>(nil)

    /// This build's twin with a gateway client, built by `cd Network && swift build` next to this
    /// executable's build: `<repository>/Network/.build/<triple>/<configuration>/demo-share-remote`.
    static func remoteBuild() throws -> String {
        let executable = try ownExecutable()
        let folder = String(executable[..<(executable.lastIndex(of: "/") ?? executable.endIndex)])
        guard let range = folder.range(of: "/.build/", options: .backwards) else {
            throw DemoError("--gateway: this demo-share was not built by SwiftPM (\(executable)), so its twin with the gateway's client cannot be found")
        }
        return folder.replacingCharacters(in: range, with: "/Network/.build/") + "/demo-share-remote"
    }
}

/// Options every host command takes.
struct HostOptions: ParsableArguments {
    @Option(name: .customLong("services"), help: ArgumentHelp(
        "A folder of service manifests; repeat for several (default: the demo's own, built next to this executable).",
        valueName: "dir"))
    var serviceFolders: [String] = []

    @Flag(help: "Run services without the bubblewrap sandbox (an explicit opt-in; logged).")
    var unsandboxed = false

    @Option(help: ArgumentHelp("Where services entitled to a data folder keep it, one folder each (default: \(Launcher.Configuration.defaultDataRoot)).",
                               valueName: "dir"))
    var dataRoot: String?

    @Flag(help: "Log the launcher's work and the services' stdout/stderr.")
    var verbose = false

    @Flag(inversion: .prefixedNo, help: "Rank the share sheet by this user's completed shares, and leave out the activities they turned off (kept in $XDG_STATE_HOME/remoteview/share-sheet.json; see demo-share activities).")
    var preferences = true

    @Flag(inversion: .prefixedNo, help: "Also the activities installed in the XDG data folders (remoteview/manifests: the user's, then the system's; demo-share paths lists them).")
    var installed = true

    /// The manifest folders: each `--services`, or the `Services` resources SwiftPM copies next
    /// to this executable (`RemoteView_demo-share.resources/Services`).
    func folders() throws -> [String] {
        for folder in serviceFolders where !Syscall.isDirectory(folder) {
            throw DemoError("--services \(folder): no such folder")
        }
        if !serviceFolders.isEmpty { return serviceFolders }
        let executable = try ownExecutable()
        let folder = String(executable[..<(executable.lastIndex(of: "/") ?? executable.endIndex)]) + "/RemoteView_demo-share.resources/Services"
        guard (try? Syscall.checkAccess(folder, R_OK)) != nil else {
            throw DemoError("the demo's manifests are not at \(folder); build with `swift build` or pass --services DIR")
        }
        return [folder]
    }

    /// The registry of every manifest in ``folders()``; invalid manifests are reported on
    /// standard error (the valid ones still work).
    func registry() throws -> ServiceRegistry {
        let registry = ServiceRegistry(scanning: try folders(), includingInstalled: installed)
        for problem in registry.problems { Syscall.writeStandardError("warning: invalid manifest: \(problem)\n") }
        for warning in registry.warnings { Syscall.writeStandardError("warning: \(warning)\n") }
        return registry
    }

    /// The user's share sheet preferences, unless `--no-preferences`; their warnings (a corrupt
    /// file reset) go to standard error.
    func sharePreferences() -> SharePreferences? {
        guard preferences else { return nil }
        var logger = Logger(label: "demo-share")
        logger.logLevel = .warning
        return .user(logger: logger)
    }

    func launcherConfiguration() -> Launcher.Configuration {
        var logger = Logger(label: "demo-share")
        logger.logLevel = verbose ? .info : .warning
        return Launcher.Configuration(hostIdentifier: "com.example.demo-share", sandbox: unsandboxed ? .unsandboxed : .bubblewrap(),
                                      dataRoot: dataRoot ?? Launcher.Configuration.defaultDataRoot, logger: logger)
    }
}

/// Why a command could not do its work (printed as "Error: …", with exit status 1; a bad
/// argument's syntax is a `ValidationError`, which also prints the usage).
struct DemoError: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}

/// This executable's own path.
func ownExecutable() throws -> String {
    guard let path = Syscall.symbolicLinkTarget("/proc/self/exe") else { throw DemoError("cannot read /proc/self/exe") }
    return path
}

func format(_ duration: Duration) -> String {
    let micros = duration.inSeconds * 1e6
    return micros >= 10_000 ? "\(Int((micros / 1000).rounded())) ms" : micros >= 1000 ? "\((micros / 100).rounded() / 10) ms" : "\((micros * 10).rounded() / 10) µs"
}

struct Host: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Launch the echo service on demand, talk to it, watch it exit idle and relaunch it.")

    @OptionGroup var options: HostOptions

    @Option(help: "Round trips to time (64-byte echo requests).")
    var roundTrips = 2_000

    @Option(help: "Cold starts to time at the end: a new connection's first request to a stopped service.")
    var coldStarts = 0

    @Option(help: "The service whose cold starts are timed (it must answer \"echo\"; see --services).")
    var coldStartService = "com.example.demo-share.echo"

    func run() async throws {
        Syscall.lineBufferStandardOutput()
        let registry = ServiceRegistry(scanning: try options.folders())
        print("registry: \(registry.sortedServices.map(\.identifier).joined(separator: ", "))")
        for problem in registry.problems { print("  invalid manifest: \(problem)") }
        for warning in registry.warnings { print("  manifest warning: \(warning)") }
        let identifier = "com.example.demo-share.echo"
        let (roundTrips, coldStarts, coldStartService) = (self.roundTrips, self.coldStarts, self.coldStartService)
        try await withLauncher(registry: registry, configuration: options.launcherConfiguration()) { launcher in
            let events = launcher.events()
            let echo = launcher.connection(to: identifier)
            print("connection to \(identifier) made; running: \(await launcher.status().first { $0.identifier == identifier }?.state.rawValue ?? "?")")

            let clock = ContinuousClock()
            var reply: ServiceMessage?
            let cold = try await clock.measure { reply = try await echo.request(ServiceMessage(type: "echo", text: "hello from the host")) }
            let pid = echo.processIdentifier ?? 0
            print("first request launched pid \(pid) \(options.unsandboxed ? "UNSANDBOXED" : "in a bubblewrap sandbox"): echo -> \"\(reply?.text?.escapedForTerminal() ?? "")\" (cold start \(format(cold)))")

            let time = try await echo.request(ServiceMessage(type: "clock"))
            print("request clock -> \"\(time.text?.escapedForTerminal() ?? "")\"")
            let file = try MemoryFile.sealed(name: "demo-item", contents: Array("a shared item, sent as a sealed memfd".utf8))
            let counted = try await echo.request(ServiceMessage(type: "count", attachments: [Attachment(file.takeDescriptor())]))
            print("request count(memfd) -> \(counted.text?.escapedForTerminal() ?? "")")
            do {
                _ = try await echo.request(ServiceMessage(type: "no-such-request"))
            } catch let error as RemoteError {
                print("request no-such-request -> \(error.code): \(error.remote.map { "\($0)" } ?? error.reason.escapedForTerminal())")
            }
            do {
                _ = try await echo.request(ServiceMessage(type: "slow"), timeout: .milliseconds(100))
            } catch let error as RemoteError {
                print("request slow (100 ms deadline) -> \(error.code): \(error.reason.escapedForTerminal())")
            }

            let payload = [UInt8](repeating: 0x2a, count: 64)
            var samples: [Duration] = []
            for _ in 0..<roundTrips {
                samples.append(try await clock.measure { _ = try await echo.request(ServiceMessage(type: "echo", payload: payload)) })
            }
            samples.sort()
            if !samples.isEmpty {
                print("warm request/reply (64-byte echo) x\(roundTrips): median \(format(samples[samples.count / 2])), p99 \(format(samples[samples.count * 99 / 100]))")
            }

            let idle = registry.services[identifier]?.idleTimeout ?? .zero
            print("waiting for the idle exit (idle timeout \(idle)) ...")
            for await event in events {
                if case .terminated(identifier, pid, let reason) = event {
                    print("pid \(pid) ended: \(reason); reaped: \(Syscall.processExists(pid) ? "no" : "yes")")
                    break
                }
            }
            let relaunch = try await clock.measure { reply = try await echo.request(ServiceMessage(type: "echo", text: "are you back?")) }
            print("next request relaunched it as pid \(echo.processIdentifier ?? 0): echo -> \"\(reply?.text?.escapedForTerminal() ?? "")\" (\(format(relaunch)))")
            print("")
            print(ServicesTable.render(await launcher.status()))
            await echo.invalidate()

            if coldStarts > 0 {
                var starts: [Duration] = []
                for _ in 0..<coldStarts {
                    let connection = launcher.connection(to: coldStartService)
                    starts.append(try await clock.measure { _ = try await connection.request(ServiceMessage(type: "echo")) })
                    await connection.invalidate()  // stops the process: the next one starts cold
                }
                starts.sort()
                print("cold start of \(coldStartService) (first request → reply, launch included) x\(coldStarts): median \(format(starts[starts.count / 2])), min \(format(starts[0])), p90 \(format(starts[starts.count * 9 / 10]))")
            }
        }
        print("launcher shut down; every service it started is stopped and reaped")
    }
}

struct Services: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the registered services and their state, like `launchctl list`.")

    @OptionGroup var options: HostOptions

    @Flag(help: "Print JSON instead of a table.")
    var json = false

    @Flag(help: "Ping every valid service first, so the list shows them running (pid, memory, idle deadline).")
    var launch = false

    func run() async throws {
        Syscall.lineBufferStandardOutput()
        let registry = ServiceRegistry(scanning: try options.folders())
        let (json, launch) = (self.json, self.launch)
        let status = try await withLauncher(registry: registry, configuration: options.launcherConfiguration()) { launcher in
            var connections: [ServiceConnection] = []
            if launch {
                for manifest in registry.sortedServices {
                    let connection = launcher.connection(to: manifest.identifier)
                    connections.append(connection)
                    _ = try? await connection.request(ServiceMessage(type: "echo"))
                }
            }
            let status = await launcher.status()
            for connection in connections { await connection.invalidate() }
            return status
        }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            let report = ServicesReport(services: status, invalidManifests: registry.problems.map(\.description))
            print(String(jsonForTerminal: try encoder.encode(report)))
        } else {
            print(ServicesTable.render(status))
            for problem in registry.problems { print("invalid manifest: \(problem)") }
            for warning in registry.warnings { print("manifest warning: \(warning)") }
        }
    }
}

/// `demo-share services --json`.
struct ServicesReport: Encodable {
    var services: [ServiceStatus]
    var invalidManifests: [String]
}

/// The `launchctl list`-style table.
enum ServicesTable {
    static func render(_ services: [ServiceStatus]) -> String {
        var rows = [["IDENTIFIER", "STATE", "INSTANCES", "PID", "SERVICE PID", "UPTIME", "RSS", "IDLE IN", "LAUNCHES", "CRASHES", "LAST EXIT"]]
        for service in services {
            let last = service.invalidation ?? service.lastTermination.map { "\($0)" } ?? "-"
            let processes = service.processes.isEmpty ? [nil] : service.processes.map(Optional.some)
            for process in processes {
                rows.append([
                    service.identifier, service.state.rawValue, service.instances.rawValue,
                    process.map { String($0.pid) } ?? "-",
                    process?.servicePid.map(String.init) ?? "-",
                    process.map { String(format: $0.uptime) } ?? "-",
                    process?.residentBytes.map { "\($0 / 1024) KiB" } ?? "-",
                    process.map { $0.idleDeadline.map { String(format: $0) } ?? "busy" } ?? "-",
                    String(service.launches), String(service.crashes), last,
                ])
            }
        }
        return Table.render(rows)
    }
}

extension String {
    /// Seconds with one decimal.
    init(format seconds: Double) {
        self = "\((seconds * 10).rounded() / 10) s"
    }
}

struct Service: AsyncParsableCommand {
    /// The most bytes the "count" request reads.
    static let countLimit = 1 << 20

    static let configuration = CommandConfiguration(
        abstract: "Run as the demo's echo service on the socket passed at fd 3 (LISTEN_FDS=1; the launcher runs it, by its manifest).")

    @Option(help: "The identifier to serve as (its manifest's).")
    var identifier = "com.example.demo-share.echo"

    func run() async throws {
        // Every request but "slow" is answered at once, inline on the connection's loop (the
        // synchronous form: no task per request); "slow" waits, so it goes to the async handler.
        await ServiceMain.exit(serving: identifier, capabilities: ["echo"], onSynchronousRequest: { request, _ in
            switch request.type {
            case "echo":
                return ServiceMessage(type: "echo", payload: request.payload)
            case "clock":
                let now = Int(Date().timeIntervalSince1970)
                return ServiceMessage(type: "clock", text: "service pid \(Syscall.processID) (in its sandbox) says it is \(now) s since 1970")
            case "count":
                guard let fd = request.attachments.first?.take() else {
                    throw ServiceFailure(domain: "com.example.demo-share", code: 1, message: "count needs a memfd")
                }
                let file = MemoryFile(adopting: fd)
                // As docs/Protocol.md tells every receiver: sealed, then a read bounded by what
                // this request takes (the sender picks the size; a sparse memfd can claim 64 GiB).
                guard try file.seals.isSuperset(of: [.shrink, .grow]) else {
                    throw ServiceFailure(domain: "com.example.demo-share", code: 2, message: "count needs a memfd sealed against shrinking and growing")
                }
                let bytes = try file.contents(limit: Self.countLimit)
                return ServiceMessage(type: "count", text: "\(bytes.count) bytes, seals \(try file.seals.rawValue), first word \"\(String(decoding: bytes.prefix { $0 != 0x20 }, as: UTF8.self))\"")
            case "slow":
                return nil
            default:
                throw ServiceFailure.unknownRequest(request.type, handler: "com.example.demo-share")
            }
        }, onRequest: { request, _ in
            // Only what the synchronous handler left: "slow".
            try await Task.sleep(for: .seconds(10))
            return ServiceMessage(type: "slow")
        })
    }
}
