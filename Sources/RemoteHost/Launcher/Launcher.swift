import Logging
import RemoteCore
import struct Synchronization.Atomic

/// launchd for a host's own services: starts a service's process when a ``ServiceConnection``
/// first needs it, sandboxed, watches it, relaunches it after a crash (throttled, with
/// exponential backoff), gives up on a crash loop, and stops it when idle or asked.
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
                    minimumProtocolVersion: UInt32 = remoteViewProtocolVersion) {
            self.hostIdentifier = hostIdentifier
            self.serviceUsers = serviceUsers
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

    private nonisolated let jobs: AsyncStream<@Sendable () async -> Void>
    private nonisolated let jobSink: AsyncStream<@Sendable () async -> Void>.Continuation
    private nonisolated let subscribers = Mutex<[Int: AsyncStream<LauncherEvent>.Continuation]>([:])
    private nonisolated let nextSubscriber = Atomic<Int>(0)
    private var records: [String: ServiceRecordStateMachine<ServiceInstance>] = [:]
    /// Every connection made with ``connection(to:onRequest:onMessage:)`` (weakly), and whether
    /// the launcher has shut down; nonisolated, so a connection is known from its creation.
    private nonisolated let clients = Mutex<(shutDown: Bool, entries: [UInt64: WeakConnection])>((false, [:]))
    private var shutDown = false
    /// The control groups that enforce memory and processes limits.
    private nonisolated let resources: ResourceControl
    private static let serial = Atomic<Int>(0)
    /// Whether this launcher holds ``OrphanAdoption`` (until its work is over).
    private nonisolated let adoptingOrphans = Atomic<Bool>(false)

    private struct WeakConnection {
        weak var connection: ServiceConnection?
    }

    public init(registry: ServiceRegistry, configuration: Configuration = Configuration()) {
        precondition((remoteViewProtocolVersion...remoteViewLatestProtocolVersion).contains(configuration.minimumProtocolVersion),
                     "Launcher.Configuration.minimumProtocolVersion \(configuration.minimumProtocolVersion) is not a version this build speaks (\(remoteViewProtocolVersion)...\(remoteViewLatestProtocolVersion))")
        self.registry = registry
        self.configuration = configuration
        (jobs, jobSink) = AsyncStream.makeStream()
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
        if configuration.adoptsOrphans {
            if let error = OrphanAdoption.acquire() {
                configuration.logger.error("cannot make the host a child subreaper (\(error)): a sandbox orphaned by a killed bubblewrap would outlive its service")
            } else {
                adoptingOrphans.store(true, ordering: .relaxed)
            }
        }
    }

    /// Runs the launcher's work (service processes, their connections) until ``shutdown()``.
    /// Cancelling it shuts down too: every service is stopped in order, and `run()` returns once
    /// all is reaped.
    public nonisolated func run() async {
        // The jobs run in a task of their own, which the caller's cancellation does not reach:
        // cancelling a job would cut short what must be seen through (a running connection
        // would close with a bare goodbye, output would stop being drained, a stop's steps would
        // shorten). Shutting down stops them properly instead, and this waits for them all.
        let jobs = self.jobs
        let work = Task.detached {
            await withDiscardingTaskGroup { group in
                for await job in jobs { group.addTask { await job() } }
            }
        }
        await withTaskCancellationHandler {
            await work.value
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
    /// makes ``run()`` return once all is reaped.
    public func shutdown() async {
        guard !shutDown else { return }
        shutDown = true
        let error = RemoteError(.invalidated, "the launcher shut down")
        let entries = clients.withLock { clients in
            clients.shutDown = true
            defer { clients.entries.removeAll() }
            return Array(clients.entries.values)
        }
        for entry in entries { entry.connection?.invalidated(by: error) }
        let instances = records.values.flatMap(\.running)
        let grace = configuration.stopGracePeriod
        await withTaskGroup(of: Void.self) { group in
            for instance in instances {
                group.addTask { await instance.stop(TerminationReason(kind: .stopped, detail: "the launcher shut down"), grace: grace) }
            }
        }
        jobSink.finish()
    }

    /// A connection to the service `identifier`. Nothing starts until its first message.
    public nonisolated func connection(to identifier: String,
                                       onRequest: @escaping Connection.RequestHandler = Connection.refuseRequests,
                                       onMessage: @escaping Connection.MessageHandler = { _, _ in }) -> ServiceConnection {
        let connection = ServiceConnection(identifier: identifier, launcher: self, onRequest: onRequest, onMessage: onMessage)
        let shutDown = clients.withLock { clients in
            if clients.shutDown { return true }
            // A connection leaves the table when it is invalidated or released (its deinit).
            clients.entries[connection.serial] = WeakConnection(connection: connection)
            return false
        }
        if shutDown { connection.invalidated(by: RemoteError(.invalidated, "the launcher shut down")) }
        return connection
    }

    /// What the launcher is doing, service by service: one entry per registered service.
    public func status() -> [ServiceStatus] {
        registry.sortedServices.map { manifest in
            let record = records[manifest.identifier]
            let processes = (record?.running ?? []).map { instance -> ServiceStatus.Process in
                let now = ContinuousClock.now
                return ServiceStatus.Process(pid: instance.process.pid, servicePid: instance.sandboxed ? instance.process.processTree().dropFirst(2).first : instance.process.pid,
                                             sandboxed: instance.sandboxed, userID: instance.identity?.user, uptime: (now - instance.launchedAt).inSeconds,
                                             clients: instance.clientCount,
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
        subscribers.withLock { $0[id] = continuation }
        continuation.onTermination = { [weak self] _ in _ = self?.subscribers.withLock { $0.removeValue(forKey: id) } }
        return stream
    }

    // MARK: for ServiceConnection

    /// Runs `job` inside ``run()``; `false` once the launcher has shut down.
    nonisolated func submit(_ job: @escaping @Sendable () async -> Void) -> Bool {
        if case .enqueued = jobSink.yield(job) { return true }
        return false
    }

    /// Forgets the connection with serial `serial` (invalidated, or released).
    nonisolated func unregister(_ serial: UInt64) {
        _ = clients.withLock { $0.entries.removeValue(forKey: serial) }
    }

    /// The process `client` should talk to: the running one, or a new one (after the
    /// relaunch delay, if the last one crashed).
    ///
    /// - Throws: `RemoteError`: `invalidated` when the service can never run (or the launcher
    ///   shut down), `interrupted` when this launch failed, `cancelled` when the calling task was
    ///   cancelled while it waited (for another client's launch, or the relaunch delay).
    func instance(for client: ServiceConnection) async throws(RemoteError) -> ServiceInstance {
        let identifier = client.identifier
        let owner = client.serial
        while true {
            if shutDown { throw RemoteError(.invalidated, "the launcher shut down") }
            if records[identifier] == nil {
                switch registry.lookup(identifier) {
                case .success(let manifest):
                    records[identifier] = ServiceRecordStateMachine(identifier: identifier, instances: manifest.instances, policy: policy)
                case .failure(let problem):
                    throw RemoteError(.invalidated, "\(problem)")
                }
            }
            let waiter = Waiter<Void>()
            switch records[identifier]!.instanceNeeded(by: owner, waiter: waiter) {
            case .use(let instance):
                return instance
            case .fail(let error):
                throw error
            case .awaitEnd(let current):
                // Dying: wait until it is reaped and accounted for, then decide again.
                guard let reason = await current.waitForEnd() else {
                    throw RemoteError(.cancelled, "cancelled while \(identifier) was ending")
                }
                await Task.yield()
                book(current, owner: owner, reason: reason)
            case .awaitLaunch:
                do {
                    try await waiter.wait()
                } catch {
                    records[identifier]?.abandon(waiter)
                    throw RemoteError(.cancelled, "cancelled while another client launched \(identifier)")
                }
            case .launch(let notBefore):
                return try await launch(identifier, owner: owner, notBefore: notBefore)
            }
        }
    }

    /// Launches a process of `identifier` for `owner`, once `notBefore` has passed.
    private func launch(_ identifier: String, owner: UInt64, notBefore: ContinuousClock.Instant?) async throws(RemoteError) -> ServiceInstance {
        do {
            return try await launchProcess(identifier, owner: owner, notBefore: notBefore)
        } catch {
            // Every failure lets the waiters go: they ask again, and see an invalidation.
            records[identifier]?.launchFailed().resumeAll(returning: ())
            throw error
        }
    }

    private func launchProcess(_ identifier: String, owner: UInt64, notBefore: ContinuousClock.Instant?) async throws(RemoteError) -> ServiceInstance {
        guard let manifest = registry.services[identifier] else { preconditionFailure("a record without a manifest") }
        if let notBefore, notBefore > .now {
            configuration.logger.info("relaunching \(identifier) in \(notBefore - .now) (crash \(records[identifier]?.consecutiveCrashes ?? 0) in a row)")
            do {
                try await EventLoop.shared.sleep(until: notBefore)
            } catch {
                throw RemoteError(.cancelled, "cancelled while waiting to relaunch \(identifier)")
            }
        }
        if shutDown { throw RemoteError(.invalidated, "the launcher shut down") }
        if let invalidation = records[identifier]?.invalidation { throw invalidation }
        let (idleGrace, stopGrace) = (configuration.idleGracePeriod, configuration.stopGracePeriod)
        let instance: ServiceInstance
        do {
            instance = try await ServiceInstance.launch(manifest, sandbox: configuration.sandbox, dataRoot: configuration.dataRoot,
                                                        users: configuration.serviceUsers,
                                                        protocolVersions: configuration.protocolVersions,
                                                        hostIdentifier: configuration.hostIdentifier, stopGrace: stopGrace,
                                                        resources: resources, maxMappedBytes: configuration.maxMappedBytesPerService,
                                                        maxIncomingRequests: configuration.maxIncomingRequestsPerService,
                                                        logger: configuration.logger)
        } catch {
            // A missing executable or sandbox can never work.
            if error.code == .invalidated { invalidate(identifier, error) }
            throw error
        }
        // Its runner first: if the launcher no longer runs jobs, the launch fails as a whole (the
        // record is still launching). The runner books the end on this actor, so it cannot see
        // the process before `launched` below (same turn, no suspension in between) records it.
        let started = shutDown ? false : submit { [weak self] in
            let reason = await instance.run(idleGrace: idleGrace, stopGrace: stopGrace)
            await self?.book(instance, owner: owner, reason: reason)
        }
        guard started else {
            // Shut down while it was starting: run and stop it here.
            await Self.discard(instance, idleGrace: idleGrace, stopGrace: stopGrace)
            throw RemoteError(.invalidated, "the launcher shut down")
        }
        switch records[identifier]!.launched(instance, owner: owner, now: .now) {
        case .discard(let error):
            // Invalidated while it was starting: its runner reaps it once it is stopped.
            await instance.stop(TerminationReason(kind: .stopped, detail: error.reason), grace: stopGrace)
            throw error
        case .run(let waiters):
            waiters.resumeAll(returning: ())
        }
        configuration.logger.info("launched \(identifier) as pid \(instance.process.pid)\(instance.sandboxed ? " (sandboxed\(instance.identity.map { ", as \($0)" } ?? ""))" : " (UNSANDBOXED)")")
        if let warning = Self.abstractSocketWarning(manifest, sandboxed: instance.sandboxed) { configuration.logger.warning("\(warning)") }
        broadcast(.launched(identifier: identifier, pid: instance.process.pid))
        return instance
    }

    /// What to say when `manifest`'s service can reach the host's abstract Unix sockets: it shares
    /// the host's network namespace (`sandbox.network`), and the kernel has no Landlock scope to
    /// keep it from them. `nil` otherwise.
    static func abstractSocketWarning(_ manifest: ServiceManifest, sandboxed: Bool) -> String? {
        guard sandboxed, manifest.sandbox.network, !Landlock.scopesAbstractSockets else { return nil }
        return "\(manifest.identifier) is entitled to the network (sandbox.network) and this kernel has no Landlock abstract-socket scope (Landlock ABI \(Landlock.abi), the scope needs 6, Linux 6.12): it can connect to the host's abstract Unix sockets, such as X11's and the session bus's"
    }

    /// Books a process's end once: crash counting, crash-loop detection, events.
    private func book(_ instance: ServiceInstance, owner: UInt64, reason: TerminationReason) {
        let identifier = instance.manifest.identifier
        guard let action = records[identifier]?.ended(instance, owner: owner, reason: reason, now: .now),
              action != .alreadyBooked else { return }
        configuration.logger.info("\(identifier) (pid \(instance.process.pid)) ended: \(reason)")
        broadcast(.terminated(identifier: identifier, pid: instance.process.pid, reason: reason))
        if case .bookedInvalidating(let error) = action { invalidate(identifier, error) }
    }

    /// The relaunch and crash-loop policy of every service.
    private nonisolated var policy: ServiceRecordStateMachine<ServiceInstance>.Policy {
        .init(backoff: configuration.backoff, maximumBackoff: configuration.maximumBackoff,
              minimumRelaunchInterval: configuration.minimumRelaunchInterval,
              crashLoopLimit: configuration.crashLoopLimit, stableAfter: configuration.stableAfter)
    }

    /// Runs and stops a process nobody else will run (it is reaped before this returns).
    private static func discard(_ instance: ServiceInstance, idleGrace: Duration, stopGrace: Duration) async {
        async let ended = instance.run(idleGrace: idleGrace, stopGrace: stopGrace)
        await instance.stop(TerminationReason(kind: .stopped, detail: "the launcher shut down"), grace: stopGrace)
        _ = await ended
    }

    /// The service can never launch again: logs and broadcasts it, and passes it to every
    /// connection to the service.
    private func invalidate(_ identifier: String, _ error: RemoteError) {
        guard let waiters = records[identifier]?.invalidate(error) else { return }
        waiters.resumeAll(returning: ())
        configuration.logger.error("\(identifier) is invalidated: \(error.reason.escapedForTerminal())")
        broadcast(.invalidated(identifier: identifier, reason: error))
        for entry in clients.withLock({ Array($0.entries.values) }) {
            if let connection = entry.connection, connection.identifier == identifier { connection.invalidated(by: error) }
        }
    }

    private nonisolated func broadcast(_ event: LauncherEvent) {
        for subscriber in subscribers.withLock({ Array($0.values) }) { subscriber.yield(event) }
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
