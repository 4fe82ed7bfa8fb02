import Logging
import RemoteCore
import struct Synchronization.Atomic

/// launchd for a host's own services: starts a service's process when a ``ServiceConnection``
/// first needs it, sandboxed, watches it, relaunches it after a crash (throttled, with
/// exponential backoff), gives up on a crash loop, and stops it when idle or asked.
///
/// It is a structured group of supervisors, as swift-service-lifecycle's `ServiceGroup` is of
/// services: one for each registered service, each owning its processes' lives; ``run()`` runs
/// them all and returns when every one has finished.
///
/// Everything the launcher does runs inside ``run()``; use ``withLauncher(registry:configuration:_:)``:
///
/// ```swift
/// let registry = ServiceRegistry(scanning: ["/usr/share/myapp/services"])
/// try await withLauncher(registry: registry) { launcher in
///     let echo = launcher.connection(to: "com.example.echo")
///     let reply = try await echo.request(ServiceMessage(type: "echo", text: "hi"))
/// }
/// ```
public actor Launcher {
    /// Policy knobs; the defaults suit an interactive host.
    public struct Configuration: Sendable {
        /// What the host calls itself in handshakes.
        public var hostIdentifier: String
        /// The sandbox; bubblewrap unless explicitly turned off.
        public var sandbox: SandboxPolicy
        /// Where the services' data folders are (the manifest's `sandbox.dataFolder`): each is
        /// `<dataRoot>/<identifier>`, created (mode 0700, with any missing parent) when the
        /// service launches. Default: ``defaultDataRoot``.
        ///
        /// When the host runs as root, each data folder belongs to its service's own uid
        /// (``serviceUsers``), missing folders above it are made with mode 0711, and every
        /// folder above it must let other users through (`o+x`).
        public var dataRoot: String
        /// The uids a root host's sandboxed services run as, one per identifier (like systemd's
        /// `DynamicUser=`). Not used when the host is not root: its services run as its user.
        public var serviceUsers: ServiceUserPool
        /// The user's own fonts, which sandboxed services see read-only beside the system's.
        /// Default: ``UserFontsPolicy/standard``, fontconfig's user font folder
        /// (`$XDG_DATA_HOME/fonts`, else `~/.local/share/fonts`). Not used unsandboxed: such a
        /// service reads them as the host does.
        public var userFonts: UserFontsPolicy
        /// The lowest protocol version the host serves (`docs/Protocol.md`, "Versions"): a
        /// service whose highest version is below it is refused at its handshake
        /// (`VERSION_MISMATCH`, naming both), and ends as a protocol violation. Default 1:
        /// every version this build speaks, up to `remoteViewLatestProtocolVersion`; a version
        /// beyond that is a programming error (the launcher traps).
        public var minimumProtocolVersion: UInt32
        /// The first relaunch delay after a crash; it doubles with each further crash in a row.
        public var backoff: Duration
        /// The longest relaunch delay.
        public var maximumBackoff: Duration
        /// The shortest time between two launches after a crash.
        public var minimumRelaunchInterval: Duration
        /// This many crashes in a row (each within ``stableAfter`` of its launch) is a crash loop.
        public var crashLoopLimit: Int
        /// A process that ran this long before crashing starts a new count.
        public var stableAfter: Duration
        /// How long each step of stopping a service waits (goodbye → SIGTERM → SIGKILL).
        public var stopGracePeriod: Duration
        /// How long after its idle timeout a service that has not exited by itself is stopped.
        public var idleGracePeriod: Duration
        /// Whether the host takes the keyboard focus from its views when Tab leaves them
        /// (`docs/Protocol.md`, "Focus across the boundary"): announced to services as
        /// `focus-leave`. A host that sets it reads ``RemoteView/focusLeaves`` and moves the focus
        /// to its own next control, and gives it back with `.focusEntering`. Off by default: a
        /// host that does not read `focusLeaves` keeps Tab inside each view (it wraps around).
        public var takesFocusFromViews = false
        /// Whether the host reads its views' semantic trees (``RemoteView/accessibility``): it
        /// announces the capability `accessibility`, and services that draw views send their
        /// trees after the frames that change them. On by default; a host that never reads the
        /// tree (a headless renderer) turns it off and spares each service the work.
        public var readsAccessibility = true
        /// How this launcher reaches services on other machines: the client of its gateways
        /// (`Network/`'s `GatewayConnector`, docs/Gateway.md). `nil` (the default): local
        /// services only.
        ///
        /// With it, ``Launcher/connection(to:onRequest:onMessage:)`` reaches `identifier@name`
        /// on the gateway named `name`, and a bare identifier that no local manifest declares on
        /// the first gateway whose catalog offers it. A local service wins a shared identifier.
        public var remoteServices: (any RemoteServiceConnector)?

        /// Whether `name` can name a gateway: `[a-z0-9-]+`, at most 63 bytes.
        public static func isGatewayName(_ name: String) -> Bool { RemoteTarget.isGatewayName(name) }
        /// Where the launcher and the services' stdout/stderr are logged.
        public var logger: Logger
        /// Whether the launcher makes the host process a child subreaper
        /// (`PR_SET_CHILD_SUBREAPER`, as systemd and tini are) while it exists and runs, so that
        /// whatever a service leaves behind comes back to the host, and is killed and reaped
        /// when the service ends, rather than living on under the system's init. Default `true`.
        ///
        /// It applies to the whole process while any such launcher runs: orphans of processes
        /// the host started itself, not through a launcher, come back to it too, and reaping
        /// those is the host's own job. Once the last launcher's ``Launcher/run()`` has
        /// returned, the process is a subreaper again only if it was one before.
        public var adoptsOrphans: Bool
        /// The most bytes of shared memory one service process may have mapped in the host
        /// across all its surfaces (every ``RemoteView`` on it) at once; an `attach_buffer` past
        /// it is a protocol violation that ends the process. Each surface has its own bound too
        /// (two buffers of the largest size, 512 MiB). Default 1 GiB.
        public var maxMappedBytesPerService: Int
        /// The most requests one service process may have outstanding with the host at once,
        /// across all its connections (each connection allows
        /// `Connection.Configuration.maxIncomingRequests`, 256, on its own); one more is a
        /// protocol violation that ends the process. Default 1024.
        public var maxIncomingRequestsPerService: Int

        /// Policy knobs; each default suits an interactive host.
        public init(hostIdentifier: String = "remoteview.host", sandbox: SandboxPolicy = .bubblewrap(),
                    dataRoot: String = Configuration.defaultDataRoot, backoff: Duration = .milliseconds(250), maximumBackoff: Duration = .seconds(30),
                    minimumRelaunchInterval: Duration = .milliseconds(100), crashLoopLimit: Int = 5,
                    stableAfter: Duration = .seconds(10), stopGracePeriod: Duration = .seconds(2),
                    idleGracePeriod: Duration = .seconds(2), logger: Logger = Logger(label: "remoteview.launcher"),
                    adoptsOrphans: Bool = true, maxMappedBytesPerService: Int = 1 << 30,
                    maxIncomingRequestsPerService: Int = 1024, serviceUsers: ServiceUserPool = ServiceUserPool(),
                    minimumProtocolVersion: UInt32 = remoteViewProtocolVersion, userFonts: UserFontsPolicy = .standard) {
            self.hostIdentifier = hostIdentifier
            self.serviceUsers = serviceUsers
            self.userFonts = userFonts
            self.minimumProtocolVersion = minimumProtocolVersion
            self.sandbox = sandbox
            self.dataRoot = dataRoot
            self.backoff = backoff
            self.maximumBackoff = maximumBackoff
            self.minimumRelaunchInterval = minimumRelaunchInterval
            self.crashLoopLimit = crashLoopLimit
            self.stableAfter = stableAfter
            self.stopGracePeriod = stopGracePeriod
            self.idleGracePeriod = idleGracePeriod
            self.logger = logger
            self.adoptsOrphans = adoptsOrphans
            self.maxMappedBytesPerService = maxMappedBytesPerService
            self.maxIncomingRequestsPerService = maxIncomingRequestsPerService
        }

        /// `$XDG_DATA_HOME/remoteview/services`, or `~/.local/share/remoteview/services` (the
        /// XDG base directory specification's user data folder, as Flatpak keeps its apps' data
        /// under the home folder); for a host running as root, ``systemDataRoot``.
        public static var defaultDataRoot: String {
            Syscall.effectiveUserID == 0 ? systemDataRoot : XDGBaseDirectories.dataHome() + "/remoteview/services"
        }

        /// The protocol versions the host speaks with its services: ``minimumProtocolVersion``
        /// up to the latest this build speaks.
        var protocolVersions: ClosedRange<UInt32> {
            minimumProtocolVersion...remoteViewLatestProtocolVersion
        }

        /// A root host's default data root, `/var/lib/remoteview/services`: its services run as
        /// uids of their own, which cannot pass through root's home folder (mode 0700).
        public static let systemDataRoot = "/var/lib/remoteview/services"
    }

    /// The services this launcher can start.
    public nonisolated let registry: ServiceRegistry
    /// The policy it was made with.
    public nonisolated let configuration: Configuration

    private nonisolated let subscribers = Subscribers()
    private nonisolated let nextSubscriber = Atomic<Int>(0)
    /// One supervisor for each registered service.
    private nonisolated let supervisors: [String: ServiceSupervisor]
    /// The connections to remote services, invalidated when the launcher shuts down.
    private nonisolated let remoteConnections = RemoteConnections()
    /// Whether ``run()`` has begun, and whether the launcher has shut down.
    private nonisolated let phase = Mutex<(running: Bool, shutDown: Bool)>((false, false))
    /// The control groups that enforce memory and processes limits.
    private nonisolated let resources: ResourceControl
    private static let serial = Atomic<Int>(0)
    /// Whether this launcher holds ``OrphanAdoption`` (until its work is over).
    private nonisolated let adoptingOrphans = Atomic<Bool>(false)
    /// The user's fonts, as its sandboxes bind them; `nil` unsandboxed or without them.
    private nonisolated let userFonts: UserFontsKeeper?

    public init(registry: ServiceRegistry, configuration: Configuration = Configuration()) {
        precondition((remoteViewProtocolVersion...remoteViewLatestProtocolVersion).contains(configuration.minimumProtocolVersion),
                     "Launcher.Configuration.minimumProtocolVersion \(configuration.minimumProtocolVersion) is not a version this build speaks (\(remoteViewProtocolVersion)...\(remoteViewLatestProtocolVersion))")
        self.registry = registry
        self.configuration = configuration
        for problem in registry.problems {
            configuration.logger.error("invalid service manifest: \(problem)")
        }
        for warning in registry.warnings {
            configuration.logger.warning("service manifest: \(warning)")
        }
        resources = ResourceControl.detect(launcher: Self.serial.wrappingAdd(1, ordering: .relaxed).oldValue)
        if Syscall.effectiveUserID == 0, configuration.sandbox != .unsandboxed {
            let users = configuration.serviceUsers
            configuration.logger.info("the host runs as root: each sandboxed service runs as a uid of its own from \(users.ids.lowerBound)...\(users.ids.upperBound) (kept in \(users.table))")
            // bubblewrap runs as that uid, so it needs the user namespaces an ordinary user's
            // bubblewrap needs.
            for (setting, off) in [("/proc/sys/kernel/unprivileged_userns_clone", "0"), ("/proc/sys/user/max_user_namespaces", "0")]
            where Syscall.readSmallFile(setting).map({ String(decoding: $0, as: UTF8.self).split(whereSeparator: \.isWhitespace).first.map(String.init) }) == off {
                configuration.logger.error("\(setting) is \(off): bubblewrap, which runs as each service's own uid, cannot make its user namespace, and no sandboxed service can start")
            }
        }
        let enforcement = resources.enforcement
        switch (enforcement.enforcesMemory, enforcement.enforcesProcesses) {
        case (true, true):
            configuration.logger.info("limits.memoryMiB and limits.processes are enforced with \(enforcement): \(resources.explanation)")
        case (false, false):
            configuration.logger.warning("limits.memoryMiB and limits.processes are not enforced: \(resources.explanation)")
        case (let memory, _):
            configuration.logger.warning("only \(memory ? "limits.memoryMiB" : "limits.processes") is enforced, with \(enforcement): \(resources.explanation)")
        }
        let subscribers = self.subscribers
        let userFonts = configuration.sandbox == .unsandboxed ? nil : UserFontsKeeper(policy: configuration.userFonts, logger: configuration.logger)
        self.userFonts = userFonts
        let environment = ServiceSupervisor.Environment(configuration: configuration, resources: resources, userFonts: userFonts,
                                                        broadcast: subscribers.broadcast)
        supervisors = registry.services.mapValues { ServiceSupervisor(manifest: $0, environment: environment) }
        if configuration.adoptsOrphans {
            if let error = OrphanAdoption.acquire() {
                configuration.logger.error("cannot make the host a child subreaper (\(error)): a sandbox orphaned by a killed bubblewrap would outlive its service")
            } else {
                adoptingOrphans.store(true, ordering: .relaxed)
            }
        }
    }

    /// Runs the launcher's work (every service's supervisor, and through them the processes and
    /// their connections) until ``shutdown()``. Cancelling it shuts down too: every service is
    /// stopped in order, and `run()` returns once all is reaped.
    public nonisolated func run() async {
        phase.withLock { $0.running = true }
        // The supervisors run in one task of their own, which the caller's cancellation does not
        // reach: cancelling a supervisor would cut short what must be seen through (a running
        // connection would close with a bare goodbye, a stop's steps would be skipped).
        // Cancellation shuts down instead, and this waits for every supervisor to finish.
        let supervisors = Array(self.supervisors.values)
        let userFonts = self.userFonts
        let group = Task {
            await withDiscardingTaskGroup { group in
                for supervisor in supervisors { group.addTask { await supervisor.run() } }
            }
        }
        await withTaskCancellationHandler {
            await group.value
            // A cache of the user's fonts being built ends too (its fc-cache is reaped).
            await userFonts?.stop()
            // Every process is reaped: the launcher's control groups are empty, and nothing of
            // its services can come back to the host any more.
            resources.remove()
            releaseOrphans()
        } onCancel: {
            Task { await self.shutdown() }
        }
    }

    deinit {
        resources.remove()
        releaseOrphans()
    }

    private nonisolated func releaseOrphans() {
        if adoptingOrphans.exchange(false, ordering: .relaxed) { OrphanAdoption.release() }
    }

    /// Stops every service (goodbye → SIGTERM → SIGKILL), invalidates every connection, and
    /// makes ``run()`` return once all is reaped. Returns then too, when ``run()`` runs.
    public func shutdown() async {
        let (first, running) = phase.withLock { phase -> (Bool, Bool) in
            defer { phase.shutDown = true }
            return (!phase.shutDown, phase.running)
        }
        if first {
            let error = RemoteError.launcherShutDown
            for supervisor in supervisors.values { supervisor.post(.shutdown(error)) }
            for connection in remoteConnections.shutDown() { connection.invalidateRemote(error) }
        }
        guard running else { return }
        for supervisor in supervisors.values { _ = await supervisor.finished.waitUncancellably() }
    }

    /// A connection to the service `identifier`. Nothing starts until its first message.
    public nonisolated func connection(to identifier: String,
                                       onRequest: @escaping Connection.RequestHandler = Connection.refuseRequests,
                                       onMessage: @escaping Connection.MessageHandler = { _, _ in }) -> ServiceConnection {
        if let connector = configuration.remoteServices, let target = remoteTarget(identifier, connector) {
            let connection = ServiceConnection(identifier: identifier, target: target, connector: connector, configuration: configuration,
                                               onRequest: onRequest, onMessage: onMessage)
            if !remoteConnections.add(connection) { connection.invalidateRemote(.launcherShutDown) }
            return connection
        }
        let supervisor = phase.withLock { $0.shutDown } ? nil : supervisors[identifier]
        let connection = ServiceConnection(identifier: identifier, supervisor: supervisor, onRequest: onRequest, onMessage: onMessage)
        connection.register(orInvalidateWith: {
            if supervisor != nil || supervisors[identifier] != nil { return .launcherShutDown }
            if case .failure(let problem) = registry.lookup(identifier) { return RemoteError(.invalidated, "\(problem)") }
            return RemoteError(.invalidated, "\(identifier) is not a registered service")
        }())
        return connection
    }

    /// The services the launcher's gateways offer this host (``Configuration/remoteServices``),
    /// asked in their order, each checked as a manifest, and the gateways that could not be
    /// asked, with why. Add them to a share sheet's registry with
    /// ``ServiceRegistry/adding(remote:)``.
    public nonisolated func remoteServices() async -> (services: [ServiceManifest], problems: [RemoteError]) {
        guard let connector = configuration.remoteServices else { return ([], []) }
        var services: [ServiceManifest] = [], problems: [RemoteError] = []
        for gateway in connector.gateways {
            do throws(RemoteError) { services += try await connector.services(on: gateway) } catch { problems.append(error) }
        }
        return (services, problems)
    }

    /// Where `identifier` is reached through `connector`, if not here: `identifier@name` on a
    /// gateway of that name; a bare identifier no local manifest declares (valid or not) on the
    /// first gateway offering it.
    private nonisolated func remoteTarget(_ identifier: String, _ connector: any RemoteServiceConnector) -> RemoteTarget? {
        if let target = RemoteTarget(qualified: identifier, gateways: connector.gateways) { return target }
        guard supervisors[identifier] == nil, case .failure(.unknown) = registry.lookup(identifier), !connector.gateways.isEmpty else { return nil }
        return RemoteTarget(identifier: identifier, gateway: nil)
    }

    /// What the launcher is doing, service by service: one entry per registered service. It
    /// includes what the caller did before it (a cancelled wait, an invalidated connection).
    public func status() async -> [ServiceStatus] {
        let running = phase.withLock { $0.running }
        var records: [String: ServiceSupervisor.Snapshot] = [:]
        for (identifier, supervisor) in supervisors { records[identifier] = await supervisor.currentSnapshot(running: running) }
        return registry.sortedServices.map { manifest in
            let record = records[manifest.identifier]
            let processes = (record?.processes ?? []).map { instance, clients -> ServiceStatus.Process in
                let now = ContinuousClock.now
                return ServiceStatus.Process(pid: instance.process.pid, servicePid: instance.sandboxed ? instance.process.processTree().dropFirst(2).first : instance.process.pid,
                                             sandboxed: instance.sandboxed, userID: instance.identity?.user, uptime: (now - instance.launchedAt).inSeconds,
                                             clients: clients,
                                             idleDeadline: instance.idleDeadline.map { ($0 - now).inSeconds },
                                             residentBytes: instance.process.residentBytes(),
                                             memoryInUse: instance.group?.memoryInUse, processCount: instance.group?.processCount)
            }
            let state: ServiceStatus.State = if record?.invalidation != nil { .invalidated }
                else if record?.isLaunching == true { .launching }
                else if processes.isEmpty { .notRunning } else { .running }
            return ServiceStatus(identifier: manifest.identifier, title: manifest.display.title, state: state,
                                 instances: manifest.instances, limits: manifest.limits, limitEnforcement: resources.enforcement,
                                 reachesHostAbstractSockets: configuration.sandbox == .unsandboxed
                                    || Self.abstractSocketWarning(manifest, sandboxed: true) != nil,
                                 launches: record?.launches ?? 0, crashes: record?.crashes ?? 0,
                                 lastTermination: record?.lastTermination, invalidation: record?.invalidation?.reason,
                                 processes: processes)
        }
    }

    /// Everything the launcher does from now on: launches, terminations, invalidations.
    public nonisolated func events() -> AsyncStream<LauncherEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: LauncherEvent.self)
        let id = nextSubscriber.wrappingAdd(1, ordering: .relaxed).oldValue
        subscribers.entries.withLock { $0[id] = continuation }
        continuation.onTermination = { [weak self] _ in _ = self?.subscribers.entries.withLock { $0.removeValue(forKey: id) } }
        return stream
    }

    /// What to say when `manifest`'s service can reach the host's abstract Unix sockets: it shares
    /// the host's network namespace (`sandbox.network`), and the kernel has no Landlock scope to
    /// keep it from them. `nil` otherwise.
    static func abstractSocketWarning(_ manifest: ServiceManifest, sandboxed: Bool) -> String? {
        guard sandboxed, manifest.sandbox.network, !Landlock.scopesAbstractSockets else { return nil }
        return "\(manifest.identifier) is entitled to the network (sandbox.network) and this kernel has no Landlock abstract-socket scope (Landlock ABI \(Landlock.abi), the scope needs 6, Linux 6.12): it can connect to the host's abstract Unix sockets, such as X11's and the session bus's"
    }
}

/// Who listens to a launcher's ``Launcher/events()``.
private final class Subscribers: Sendable {
    let entries = Mutex<[Int: AsyncStream<LauncherEvent>.Continuation]>([:])

    func broadcast(_ event: LauncherEvent) {
        for subscriber in entries.withLock({ Array($0.values) }) { subscriber.yield(event) }
    }
}

/// Runs a ``Launcher`` for the duration of `body`, then shuts it down: every service it
/// started is stopped and reaped before this returns.
public func withLauncher<R: Sendable>(registry: ServiceRegistry, configuration: Launcher.Configuration = .init(),
                                      _ body: @Sendable (Launcher) async throws -> R) async throws -> R {
    let launcher = Launcher(registry: registry, configuration: configuration)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { await launcher.run() }
        do {
            let result = try await body(launcher)
            await launcher.shutdown()
            try await group.waitForAll()
            return result
        } catch {
            await launcher.shutdown()
            try? await group.waitForAll()
            throw error
        }
    }
}

/// What a ``Launcher`` did, from ``Launcher/events()``.
public enum LauncherEvent: Sendable {
    /// A service process started (`pid` is bubblewrap's when sandboxed).
    case launched(identifier: String, pid: Int32)
    /// A service process ended and was reaped.
    case terminated(identifier: String, pid: Int32, reason: TerminationReason)
    /// A service can never be launched again by this launcher (crash loop, sandbox refused, …).
    case invalidated(identifier: String, reason: RemoteError)
}

/// One registered service as the launcher sees it, like a line of `launchctl list`.
public struct ServiceStatus: Sendable, Codable, Hashable {
    /// Where a service is in its life.
    public enum State: String, Sendable, Codable, Hashable {
        case notRunning = "not running", launching, running, invalidated
    }

    /// One process of the service.
    public struct Process: Sendable, Codable, Hashable {
        /// The process the launcher started (bubblewrap when sandboxed).
        public var pid: Int32
        /// The service's own process (inside the sandbox's pid namespace it is pid 2).
        public var servicePid: Int32?
        /// Whether it runs under bubblewrap.
        public var sandboxed: Bool
        /// The uid (and gid) it runs as when that is not the host's: a root host runs each
        /// sandboxed service as a uid of its own (``Launcher/Configuration/serviceUsers``).
        public var userID: UInt32?
        /// Seconds since launch.
        public var uptime: Double
        /// Host connections open to it.
        public var clients: Int
        /// Seconds until idle exit if nothing happens; `nil` while a request is outstanding.
        public var idleDeadline: Double?
        /// Resident memory of the process tree, bytes.
        public var residentBytes: UInt64?
        /// Memory charged to its control group (what `limits.memoryMiB` bounds), bytes; `nil`
        /// when limits are not enforced.
        public var memoryInUse: UInt64?
        /// Processes in its control group (what `limits.processes` bounds, plus bubblewrap's
        /// two when sandboxed); `nil` when limits are not enforced.
        public var processCount: Int?
    }

    /// The service's identifier.
    public var identifier: String
    /// Its display title.
    public var title: String
    /// Where it is in its life.
    public var state: State
    /// Its instance policy.
    public var instances: ServiceManifest.InstancePolicy
    /// Its manifest's resource limits.
    public var limits: ServiceManifest.Limits
    /// How `limits.memoryMiB` and `limits.processes` are enforced (`openFiles` and
    /// `cpuSeconds` are rlimits, always applied).
    public var limitEnforcement: LimitEnforcement
    /// Whether it can connect to the host's abstract Unix sockets (`@name`: X11's, the session
    /// bus's): when it runs unsandboxed, or when it is entitled to the network
    /// (`sandbox.network`, which shares the host's network namespace, where those sockets live)
    /// and the kernel lacks Landlock's abstract-socket scope (``Landlock``).
    public var reachesHostAbstractSockets: Bool
    /// Processes started for it so far.
    public var launches: Int
    /// Its processes that crashed so far.
    public var crashes: Int
    /// How its last process ended.
    public var lastTermination: TerminationReason?
    /// Why it can never launch again, when invalidated.
    public var invalidation: String?
    /// Its running processes.
    public var processes: [Process]
}

/// A launcher's connections to remote services, held weakly, until it shuts down.
final class RemoteConnections: Sendable {
    private struct Weak {
        weak var connection: ServiceConnection?
    }

    private let state = Mutex<(entries: [Weak], shutDown: Bool)>(([], false))

    /// Adds `connection`; `false` once the launcher has shut down.
    func add(_ connection: ServiceConnection) -> Bool {
        state.withLock { state in
            guard !state.shutDown else { return false }
            state.entries.removeAll { $0.connection == nil }
            state.entries.append(Weak(connection: connection))
            return true
        }
    }

    /// The connections still alive; none is added after.
    func shutDown() -> [ServiceConnection] {
        state.withLock { state in
            state.shutDown = true
            defer { state.entries = [] }
            return state.entries.compactMap(\.connection)
        }
    }
}
