import Glibc
import Logging
import RemoteCore

/// One running service process: the process (under bubblewrap, or not), the launcher's control
/// connection on its fd 3, its captured output, its activity and how it ended.
///
/// Clients do not talk on the control connection: each gets its own socket, sent to the
/// service in a `remoteview.connect` message (``openChannel(configuration:onRequest:onMessage:)``).
final class ServiceInstance: Sendable {
    let manifest: ServiceManifest
    let process: ChildProcess
    let control: Connection
    let sandboxed: Bool
    let launchedAt: ContinuousClock.Instant
    private let captures: [OutputCapture]
    /// The process's arguments, its executable first (bubblewrap's, when sandboxed).
    private let spawnArguments: [String]
    /// The uid and gid it runs as, when not the host's (a root host's sandboxed service).
    let identity: ChildProcess.Identity?
    /// Its control groups (memory and processes limits), when the launcher enforces them.
    let group: ControlGroup?
    /// What its surfaces (all its views) have mapped in the host, against the launcher's
    /// ``Launcher/Configuration/maxMappedBytesPerService``.
    let mappings: SharedBudget
    /// The requests it has outstanding with the host across all its connections, against the
    /// launcher's ``Launcher/Configuration/maxIncomingRequestsPerService``.
    let incomingRequests: SharedBudget
    private let logger: Logger
    private let state = Mutex(State())
    /// How the process ended, once it has been reaped and classified.
    private let ending = Latch<TerminationReason>()
    /// The host's side of idle exit: the same clock the service keeps.
    let idleClock: IdleClock

    private struct State {
        var stopping: TerminationReason?
        /// The process had exited by itself (a zombie, or reaped) when the host began to stop
        /// it: how it ended is its own doing, not the stop's.
        var endedBeforeStop = false
        /// The protocol violation its main connection ended with, if it did (see run()).
        var violation: TerminationReason?
        /// Reaped: its pid may belong to another process now.
        var reaped = false
        /// Unsandboxed: the descendants it had when it was stopped. Sandboxed: the sandbox's
        /// pid 1, seen once the service has handshaken. Either comes back to the host (a child
        /// subreaper) if it outlives the process the launcher started.
        var descendants: Set<Int32> = []
        /// Unsandboxed: its descendants when it was stopped, held by pidfd and killed once it
        /// has ended (one may have left its process group).
        var heldDescendants: [ProcessDescriptor] = []
    }

    /// What the process's watchers tell its supervisor, which decides what to do.
    struct Observer: Sendable {
        /// Its main connection ended in order (it said goodbye, or closed it): it is going.
        var ending: @Sendable () -> Void
        /// It must be stopped for this reason (a violation on its main connection, its idle
        /// timeout passed and it is still there).
        var needsStop: @Sendable (TerminationReason) -> Void
    }

    /// The process as it was started.
    private let started: Started

    private init(manifest: ServiceManifest, started: Started, control: Connection,
                 mappings: SharedBudget, incomingRequests: SharedBudget) {
        self.started = started
        let (process, sandboxed, captures, logger, spawnArguments, identity, group) =
            (started.process, started.sandboxed, started.captures, started.logger, started.spawnArguments, started.identity, started.group)
        self.spawnArguments = spawnArguments
        self.identity = identity
        self.incomingRequests = incomingRequests
        self.mappings = mappings
        self.group = group
        self.manifest = manifest
        self.process = process
        self.control = control
        self.sandboxed = sandboxed
        self.captures = captures
        self.logger = logger
        launchedAt = .now
        idleClock = IdleClock(timeout: manifest.idleTimeout, now: launchedAt)
    }

    /// Starts the service's executable, sandboxed unless `sandbox` is ``SandboxPolicy/unsandboxed``,
    /// with its data folder under `dataRoot` if the manifest is entitled to one.
    static func launch(_ manifest: ServiceManifest, sandbox: SandboxPolicy, dataRoot: String, users: ServiceUserPool,
                       userFonts: UserFontsKeeper?, protocolVersions: ClosedRange<UInt32>, hostIdentifier: String,
                       resources: ResourceControl, maxMappedBytes: Int, maxIncomingRequests: Int,
                       logger: Logger) async throws(RemoteError) -> ServiceInstance {
        let started = try await start(manifest, sandbox: sandbox, dataRoot: dataRoot, users: users, userFonts: userFonts,
                                      resources: resources, logger: logger)
        let incomingRequests = SharedBudget(limit: maxIncomingRequests)
        var configuration = Connection.Configuration(role: .host, identifier: hostIdentifier, defaultRequestTimeout: nil,
                                                     expectedPeerIdentifier: manifest.identifier)
        configuration.sharedIncomingRequests = incomingRequests
        configuration.protocolVersions = protocolVersions
        let control: Connection
        do throws(SystemCallError) {
            guard let socket = started.socket.take() else { preconditionFailure("a started process's socket is taken once") }
            control = try Connection(socket: socket, configuration: configuration)
        } catch {
            await started.abandon()
            throw RemoteError(.interrupted, "cannot talk to \(manifest.identifier) on its socket: \(error)")
        }
        return ServiceInstance(manifest: manifest, started: started, control: control,
                               mappings: SharedBudget(limit: maxMappedBytes), incomingRequests: incomingRequests)
    }

    /// A process started as the launcher starts one, before anything was said on its fd 3.
    struct Started: Sendable {
        let process: ChildProcess
        /// The host's end of the process's fd 3, for whoever speaks on it to take.
        let socket: Attachment
        let captures: [OutputCapture]
        let group: ControlGroup?
        /// The process's arguments, its executable first (bubblewrap's, when sandboxed).
        let spawnArguments: [String]
        /// The uid and gid it runs as, when not the host's (a root host's sandboxed service).
        let identity: ChildProcess.Identity?
        /// A logger naming the process.
        let logger: Logger
        /// Whether it runs under bubblewrap.
        let sandboxed: Bool

        /// Ends a process that was started but cannot be talked to: killed, reaped, its control
        /// groups emptied and removed.
        func abandon() async {
            process.send(signal: SIGKILL)
            _ = await process.waitForExitUncancellably()
            if let group {
                _ = await group.killMembers(until: .now.advanced(by: .seconds(2)))
                group.remove()
            }
        }

        /// How the service ended, as `termination` (the launched process's) says: bubblewrap
        /// reports a service killed by signal N as its own exit status 128 + N.
        func serviceTermination(_ termination: Termination) -> Termination {
            if sandboxed, case .exited(let code) = termination, code > 128, code < 128 + 65 {
                return .killed(signal: code - 128, coreDumped: false)
            }
            return termination
        }

        /// What the process last wrote to stderr, and its fatal error, once that is read: the
        /// writers are gone when it has ended, so the end of the pipe is near (waited for at
        /// most half a second).
        func evidence() async -> (tail: [String], fatalError: String?) {
            guard let errors = captures.last else { return ([], nil) }
            await errors.waitUntilRead(until: .now.advanced(by: .milliseconds(500)))
            return errors.evidence
        }
    }

    /// Starts the service's process (see ``launch(_:sandbox:dataRoot:users:userFonts:protocolVersions:hostIdentifier:resources:maxMappedBytes:maxIncomingRequests:logger:)``)
    /// and returns it with the host's end of its fd 3. Sandboxed, it sees `userFonts`, if any.
    static func start(_ manifest: ServiceManifest, sandbox: SandboxPolicy, dataRoot: String, users: ServiceUserPool,
                      userFonts: UserFontsKeeper? = nil, resources: ResourceControl, logger: Logger) async throws(RemoteError) -> Started {
        var environment = [
            "LISTEN_FDS": "1",
            "LISTEN_FDNAMES": "remoteview",
            "PATH": "/usr/bin:/bin",
            FrameworkMessage.idleTimeoutVariable: String(manifest.idleTimeout.inSeconds),
            // Who the service is, so that it need not say it again (ServiceMain.exit(sharing:)).
            FrameworkMessage.identifierVariable: manifest.identifier,
            FrameworkMessage.titleVariable: manifest.display.title,
        ]
        // The most state a view may send; 0: none (the SDK then does not announce
        // restorable-state, and the host does not either).
        environment[FrameworkMessage.restorableStateLimitVariable] = String(manifest.limits.restorableStateKiB)
        // A root host's sandboxed services run as uids of their own (an unsandboxed service is
        // an explicit opt-in to run as the host).
        let identity = sandbox != .unsandboxed && Syscall.effectiveUserID == 0 ? try users.identity(for: manifest.identifier) : nil
        let dataFolder = manifest.sandbox.dataFolder ? try prepareDataFolder(of: manifest, in: dataRoot, owner: identity) : nil
        let executable: String, arguments: [String]
        var seccomp: MemoryFile?
        var copies: [BubblewrapCommand.Copy] = []
        switch sandbox {
        case .bubblewrap(let path):
            environment["HOME"] = "/tmp"
            if dataFolder != nil { environment[FrameworkMessage.dataDirectoryVariable] = BubblewrapCommand.dataMountPoint }
            do {
                seccomp = try SeccompFilter.memoryFile(network: manifest.sandbox.network)
            } catch {
                throw RemoteError(.invalidated, "cannot build the seccomp filter for \(manifest.identifier): \(error)")
            }
            let command = try BubblewrapCommand(bubblewrap: try BubblewrapCommand.locate(path), manifest: manifest,
                                                environment: environment, dataFolder: dataFolder, dataRoot: dataRoot,
                                                seccompDescriptor: Self.seccompDescriptorNumber,
                                                sanitizers: SanitizerEnvironment.forService(sandboxed: true), identity: identity,
                                                userFonts: userFonts?.binding())
            (executable, arguments, copies) = (command.bubblewrap, command.arguments, command.copies)
            for note in command.notes { logger.warning("\(note)") }
            if !copies.isEmpty {
                logger.info("copying \(copies.map(\.path).joined(separator: ", ").escapedForTerminal()) into the sandbox of \(manifest.identifier): its \(identity.map { "\($0)" } ?? "uid") cannot reach them where they are")
            }
            environment = [:]  // bubblewrap clears the service's environment and sets the above
        case .unsandboxed:
            logger.warning("launching without a sandbox (SandboxPolicy.unsandboxed): the service can read what the host can and reach the network")
            environment[FrameworkMessage.dataDirectoryVariable] = dataFolder
            environment.merge(SanitizerEnvironment.forService(sandboxed: false)?.variables ?? [:]) { _, sanitizer in sanitizer }
            (executable, arguments) = (manifest.executablePath, manifest.arguments)
        }

        // Memory and processes: bubblewrap's two processes (outside and the sandbox's pid 1) are
        // not the service's to count.
        let group: ControlGroup?
        do {
            group = try resources.makeGroup(for: manifest.identifier, limits: manifest.limits, extraProcesses: sandbox == .unsandboxed ? 0 : 2)
        } catch {
            throw RemoteError(.interrupted, "cannot make the control groups of \(manifest.identifier) (\(resources.explanation)): \(error)")
        }
        var launched: ChildProcess?
        do throws(SystemCallError) {
            let pair = try SeqpacketSocket.pair()
            let output = try Syscall.pipe(), errors = try Syscall.pipe()
            var options = ChildProcess.Options()
            options.pass(output.second, as: 1)
            options.pass(errors.second, as: 2)
            options.pass(pair.second, as: 3)
            // A borrowing switch: `if let` would consume the memfd, closing it before the spawn.
            switch seccomp {
            case .some(let filter): options.pass(filter.fd, as: Int(Self.seccompDescriptorNumber))
            case .none: break
            }
            for (index, copy) in copies.enumerated() {
                options.pass(fileAt: copy.path, beneath: copy.folder, requiring: copy.mode, as: Int(BubblewrapCommand.firstCopyDescriptor) + index)
            }
            options.identity = identity
            // Kept from the host's abstract sockets (X11's, the session bus's), which a service
            // sharing the host's network namespace could otherwise reach; without the network,
            // its own namespace keeps them out already, and this keeps them out twice.
            options.restrictsAbstractSockets = sandbox != .unsandboxed && Landlock.scopesAbstractSockets
            options.environment = environment
            options.deathSignal = SIGKILL
            // A session of its own, whose id is its pid: unsandboxed, its process group goes with
            // it; sandboxed, the sandbox's pid 1 is known by that session if it is orphaned
            // (bubblewrap's --new-session gives the service itself another one inside).
            options.newSession = true
            // Never above the host's own hard limit (setrlimit would refuse). CPU: SIGXCPU at the
            // soft limit (reported as "limit"), SIGKILL 5 s later if it ignores that.
            let openFiles = min(UInt64(manifest.limits.openFiles), Syscall.resourceLimit(Int32(RLIMIT_NOFILE.rawValue)).hard)
            options.limits = [
                .init(resource: Int32(RLIMIT_NOFILE.rawValue), soft: openFiles),
                .init(resource: Int32(RLIMIT_CPU.rawValue), soft: UInt64(manifest.limits.cpuSeconds), hard: UInt64(manifest.limits.cpuSeconds) + 5),
                // No core dumps: a service's memory is its users' data.
                .init(resource: Int32(RLIMIT_CORE.rawValue), soft: 0),
            ]
            if let group { options.controlGroups = group.folders }
            let process = try await ChildProcess.launch(executable: executable, arguments: arguments, options: options)
            launched = process
            var processLogger = logger
            processLogger[metadataKey: "service"] = "\(manifest.identifier)"
            processLogger[metadataKey: "pid"] = "\(process.pid)"
            let captures = [try OutputCapture(output.first, stream: "stdout", logger: processLogger),
                            try OutputCapture(errors.first, stream: "stderr", logger: processLogger)]
            return Started(process: process, socket: Attachment(pair.first), captures: captures, group: group,
                           spawnArguments: [executable] + arguments, identity: identity, logger: processLogger,
                           sandboxed: sandbox != .unsandboxed)
        } catch {
            // Started, but what the host needs to talk to it could not be made: it must not run on.
            if let launched {
                launched.send(signal: SIGKILL)
                _ = await launched.waitForExitUncancellably()
                if let group { _ = await group.killMembers(until: .now.advanced(by: .seconds(2))) }
            }
            group?.remove()
            // A missing or unusable executable can never work; running out of fds or memory can pass.
            let permanent = [ENOENT, EACCES, ENOEXEC, ENOTDIR, ELOOP, EISDIR, EPERM].contains(error.errno)
            throw RemoteError(permanent ? .invalidated : .interrupted, "cannot start \(manifest.identifier) (\(executable)): \(error)")
        }
    }

    /// bubblewrap's fd that holds the seccomp filter (`--seccomp 4`); it reads and closes it
    /// before the service runs.
    static let seccompDescriptorNumber: Int32 = 4

    /// `<dataRoot>/<identifier>`, created if missing (mode 0700, and so are the missing
    /// folders above it), for a manifest with `sandbox.dataFolder`. It must be a folder, not a
    /// symbolic link: bound into the sandbox read-write, a link could hand over any host folder.
    ///
    /// With an `owner` (a root host's service, which runs as a uid of its own), the folder
    /// belongs to that uid and gid, and the missing folders above it are made 0711: the service,
    /// and bubblewrap as it, can pass through them to its own folder, and list none of them.
    ///
    /// - Throws: `invalidated` when it cannot be made or is not a folder (a full disk is
    ///   `interrupted`: the next launch may succeed).
    private static func prepareDataFolder(of manifest: ServiceManifest, in dataRoot: String,
                                          owner: ChildProcess.Identity?) throws(RemoteError) -> String {
        let folder = BubblewrapCommand.normalised(dataRoot + "/" + manifest.identifier)
        let failure = { (reason: String) in
            "cannot prepare the data folder of \(manifest.identifier) (sandbox.dataFolder) at \(folder): \(reason)"
        }
        guard dataRoot.hasPrefix("/") else { throw RemoteError(.invalidated, failure("the data root \"\(dataRoot)\" is not an absolute path")) }
        do {
            try SandboxPaths.makeFolders(folder) { path in owner == nil || path == folder ? 0o700 : 0o711 }
        } catch {
            throw RemoteError([ENOSPC, EDQUOT, ENOMEM].contains(error.errno) ? .interrupted : .invalidated, failure("\(error)"))
        }
        guard Syscall.symbolicLinkTarget(folder) == nil else {
            throw RemoteError(.invalidated, failure("it is a symbolic link; it must be a folder"))
        }
        // Opened without following a link, and owned through that descriptor: a link put in
        // its place since cannot be followed to another folder.
        let opened: OwnedFD
        do {
            opened = try Syscall.openFolder(folder)
        } catch {
            throw RemoteError(.invalidated, failure("\(error)"))
        }
        if let owner {
            do throws(SystemCallError) {
                let status = try Syscall.status(opened)
                if status.st_uid != owner.user || status.st_gid != owner.group {
                    try Syscall.changeOwner(opened, user: owner.user, group: owner.group, name: folder)
                    try Syscall.changeMode(opened, 0o700, name: folder)
                }
            } catch {
                throw RemoteError(.invalidated, failure("\(error)"))
            }
        }
        return folder
    }

    // MARK: lifecycle

    /// Serves the control connection and the captured output, enforces the idle timeout, and
    /// returns how the process ended once it has been reaped.
    func run(idleGrace: Duration, stopGrace: Duration, observer: Observer) async -> TerminationReason {
        let controlDone = Latch<Void>()
        let process = self.process
        let reason = await withTaskGroup(of: Void.self, returning: TerminationReason.self) { group in
            group.addTask {
                var failure: RemoteError?
                do throws(RemoteError) {
                    try await self.control.run()
                } catch {
                    failure = error
                }
                // Booked before anyone classifies the end: a service told of its violation may
                // exit at once, before the stop below says why it is ended.
                if let failure, failure.code == .protocolViolation || failure.code == .timeout {
                    self.state.withLock { $0.violation = TerminationReason(kind: .protocolViolation, detail: failure.reason) }
                }
                controlDone.open(())
                switch failure?.code {
                case .protocolViolation?, .timeout?:
                    // Broke the protocol, or never handshook: either way it is ended, and it counts.
                    observer.needsStop(TerminationReason(kind: .protocolViolation, detail: failure!.reason))
                default:
                    // Without its main connection a service is unreachable: it must exit now
                    // (its supervisor stops it if it has not within a grace).
                    observer.ending()
                }
            }
            if sandboxed {
                group.addTask {
                    // The sandbox's pid 1 (bubblewrap's, in a session of its own by then): the
                    // one process that can outlive the outer bubblewrap. Once the service runs,
                    // it exists; remembered so it can be reaped if it comes back to the host.
                    guard (try? await self.control.peerHandshake()) != nil,
                          let sandboxInit = process.processTree().dropFirst().first else { return }
                    self.state.withLock { state in
                        if !state.reaped { state.descendants.insert(sandboxInit) }
                    }
                }
            }
            for capture in captures { group.addTask { await capture.run() } }
            group.addTask { await self.enforceIdleTimeout(grace: idleGrace, observer: observer) }
            // Seen through even if the launcher's job is cancelled: every end must be booked.
            let termination = await process.waitForExitUncancellably()
            let uptime = ContinuousClock.now - launchedAt
            idleClock.stop()
            let held = state.withLock { state in
                state.reaped = true
                return state.heldDescendants
            }
            for descendant in held { descendant.send(signal: SIGKILL) }
            if !sandboxed {
                // It led its own process group: whatever it left there goes with it.
                Syscall.kill(-process.pid, SIGKILL)
            }
            // What it left behind that came back to the host (a child subreaper): the sandbox's
            // pid 1 orphaned by a bubblewrap killed too early to pass on its death signal, or,
            // unsandboxed, its children. Killed and reaped, so nothing outlives the service.
            // Whatever is still in its control groups is the service's too, wherever it went
            // (unsandboxed, a daemon that left its session): killed, and awaited.
            let strays = await self.group?.killMembers(until: .now.advanced(by: stopGrace)) ?? []
            let leftovers = ChildProcess.Leftovers(session: process.pid, descendants: state.withLock { $0.descendants }.union(strays.map(\.pid)),
                                                   bubblewrapArguments: sandboxed ? spawnArguments : nil)
            let orphans = await ChildProcess.collectOrphans(of: leftovers, until: .now.advanced(by: stopGrace))
            // The sandbox's own pid 1 ends with the service and may be found a moment after it,
            // still running or a zombie: that is no news. A process that still ran and is not
            // it is what the subreaper and the groups are for: the service left it behind.
            var leftBehind: [Int32: ChildProcess.Straggler] = [:]
            for straggler in strays + orphans where straggler.wasRunning && !straggler.isSandboxInit && leftBehind[straggler.pid] == nil {
                leftBehind[straggler.pid] = straggler
            }
            if !leftBehind.isEmpty {
                let named = leftBehind.values.sorted { $0.pid < $1.pid }.map { "pid \($0.pid) (\($0.name.escapedForTerminal()))" }
                logger.warning("killed what the service left behind: \(named.joined(separator: ", "))")
            } else if !strays.isEmpty || !orphans.isEmpty {
                logger.debug("reaped the sandbox's own processes after the service: pids \(Set((strays + orphans).map(\.pid)).sorted())")
            }
            // Read what the process said before it went: its goodbye on fd 3 (an idle exit?), and
            // its last words on stderr (bubblewrap's complaint if it never started, a fatal error).
            _ = await controlDone.value(before: .now.advanced(by: stopGrace))
            let evidence = await started.evidence()
            var reason = classify(termination)
            reason.uptime = uptime.inSeconds
            (reason.standardErrorTail, reason.fatalError) = (evidence.tail, evidence.fatalError)
            // Every process of it is gone or going (reaped, or its orphans collected): its groups
            // can go once the last has left them.
            if let controlGroup = self.group, !(await controlGroup.remove(until: .now.advanced(by: stopGrace))) {
                logger.warning("control groups \(controlGroup.folders.joined(separator: " and ")) still hold processes; left for the next launcher")
            }
            ending.open(reason)
            await control.close(reason: "the service process ended")
            // The pipes reach EOF when the sandbox is gone; do not wait long on a stray grandchild.
            let captures = self.captures
            let stray = EventLoop.shared.schedule(at: .now.advanced(by: .seconds(1))) {
                for capture in captures { capture.stop() }
            }
            await group.waitForAll()
            EventLoop.shared.cancel(stray)
            return reason
        }
        logger.info("service process ended: \(reason)")
        return reason
    }

    private func classify(_ termination: Termination) -> TerminationReason {
        let termination = started.serviceTermination(termination)
        // What the host did decides first; a service's word counts only for what it did alone.
        // A process that had exited by itself before the host began to stop it (invalidating a
        // crash loop, say) ended its own way: that is not the host's stop.
        let (stopping, violation, endedBeforeStop) = state.withLock { ($0.stopping, $0.violation, $0.endedBeforeStop) }
        if var requested = violation ?? stopping, violation != nil || !endedBeforeStop {
            requested.exitCode = { if case .exited(let code) = termination { code } else { nil } }()
            requested.signal = { if case .killed(let signal, _) = termination { signal } else { nil } }()
            requested.detail += " (then \(termination))"
            return requested
        }
        if control.peerGoodbyeReason == FrameworkMessage.idleExitReason, termination == .exited(0) {
            return TerminationReason(kind: .idleExit, detail: "idle for \(manifest.idleTimeout), it exited by itself (\(termination))")
        }
        if sandboxed, control.peer == nil,
           let message = captures.last?.recentLines.last(where: { $0.hasPrefix("bwrap: ") }) {
            return TerminationReason(kind: .sandboxRefused, detail: BubblewrapCommand.refusal(String(message.dropFirst(7))))
        }
        if case .killed(SIGKILL, _) = termination, let group, group.outOfMemoryKills > 0 {
            return TerminationReason(kind: .limit, detail: "memory: it reached limits.memoryMiB (\(group.limits.memoryMiB) MiB) and the kernel's out-of-memory killer ended it (\(termination))",
                                     signal: SIGKILL)
        }
        var reason = TerminationReason.ended(termination)
        if control.peer == nil {
            // Gone before it even said hello: relaunching it at once would only repeat that.
            reason.detail += " before its handshake"
            reason.isCrash = true
        }
        return reason
    }

    /// How it ended, once it has.
    var ended: TerminationReason? { ending.value }

    // MARK: stopping, step by step (its supervisor times the steps)

    /// The first step of stopping the process for `reason`: goodbye on its main connection (the
    /// service closes its clients and exits). Only the first call does anything. The next steps
    /// (``terminate(after:)``, ``kill(after:)``) come from its supervisor, each a grace later.
    func beginStop(_ reason: TerminationReason) {
        // Exited already, not yet reaped (a zombie): the stop finds it gone.
        let exited = process.termination != nil || Syscall.processStatus(of: process.pid)?.state == "Z"
        let first = state.withLock { state -> Bool in
            guard state.stopping == nil, ending.value == nil else { return false }
            state.stopping = reason
            state.endedBeforeStop = exited
            return true
        }
        guard first else { return }
        if exited {
            logger.debug("not stopping (\(reason)): the process has exited by itself already")
        } else {
            logger.info("stopping: \(reason)")
        }
        // Unsandboxed there is no pid namespace to take its children along: hold them by pidfd
        // now (one may have left the process group) and kill what is left once it has ended.
        if !sandboxed {
            let descendants = process.processTree().dropFirst().compactMap { try? ProcessDescriptor(pid: $0, isChild: false) }
            state.withLock { state in
                state.descendants.formUnion(descendants.map(\.pid))
                state.heldDescendants += descendants
            }
        }
        control.startClosing(reason: reason.detail)
    }

    /// The second step: `SIGTERM` to the service (it did not exit within a grace of goodbye).
    func terminate(after grace: Duration) {
        // Reaped, only not yet classified: no signal may go to its (reusable) pid.
        guard !state.withLock({ $0.reaped }) else { return }
        // Under bubblewrap the tree is bwrap → its pid-1 → the service: signal the service.
        // Unsandboxed, it leads its own session and process group: signal the group.
        let targets = sandboxed ? Array(process.processTree().dropFirst(2)) : [-process.pid]
        logger.warning("did not exit within \(grace) of goodbye; sending SIGTERM")
        for pid in targets where pid != 0 { Syscall.kill(pid, SIGTERM) }
    }

    /// The last step: `SIGKILL` (it did not exit within a grace of `SIGTERM`).
    func kill(after grace: Duration) {
        guard !state.withLock({ $0.reaped }) else { return }
        logger.warning("did not exit within \(grace) of SIGTERM; sending SIGKILL")
        if !sandboxed { Syscall.kill(-process.pid, SIGKILL) }
        process.send(signal: SIGKILL)
    }

    // MARK: clients and activity

    /// A new connection to the service for one client, over its own socket pair. It does not
    /// run yet: its owner routes the message families it handles, then runs it.
    ///
    /// - Throws: ``ChannelFailure``: `.notMade` when the host could not make it (its own fds or
    ///   memory: the process is not at fault), `.notTaken` when the process did not take it.
    func openChannel(configuration: Connection.Configuration, onRequest: @escaping Connection.RequestHandler,
                     onMessage: @escaping Connection.MessageHandler) async throws(ChannelFailure) -> Connection {
        let connection: Connection, attachment: Attachment
        do throws(SystemCallError) {
            let pair = try SeqpacketSocket.pair()
            attachment = Attachment(pair.second)
            var configuration = configuration
            configuration.expectedPeerIdentifier = manifest.identifier
            configuration.sharedIncomingRequests = incomingRequests
            configuration.protocolVersions = control.configuration.protocolVersions
            connection = try Connection(socket: pair.first, configuration: configuration, onRequest: onRequest, onMessage: onMessage)
        } catch {
            throw .notMade(RemoteError(.interrupted, "cannot open a connection to \(manifest.identifier): \(error)"))
        }
        do {
            try await control.send(ServiceMessage(type: FrameworkMessage.connect, attachments: [attachment]))
        } catch {
            // The process is ending (it never handshook, or its main connection closed), or it
            // stopped reading its main connection (the send timed out): either way it is of no
            // use. Its supervisor learns how it ends, and stops one that stopped reading.
            throw .notTaken(RemoteError(error.code == .timeout ? .timeout : .interrupted, "\(manifest.identifier) could not be reached: \(error.reason)"))
        }
        idleClock.touch()
        return connection
    }

    /// Why ``openChannel(configuration:onRequest:onMessage:)`` made no channel.
    enum ChannelFailure: Error {
        /// The host could not make it (fds, memory): the process serves on.
        case notMade(RemoteError)
        /// The process did not take it: it is ending, or it stopped reading its main connection.
        case notTaken(RemoteError)
    }

    /// When the service should exit if nothing happens, or `nil` while a request is outstanding.
    var idleDeadline: ContinuousClock.Instant? {
        ending.value != nil ? nil : idleClock.deadline
    }

    /// The host's side of idle exit: a service that is still there `grace` after its idle
    /// deadline is stopped. Ends by itself when the process ends first (its clock stops).
    private func enforceIdleTimeout(grace: Duration, observer: Observer) async {
        guard (try? await idleClock.waitUntilIdle(grace: grace)) == true,
              state.withLock({ $0.stopping == nil }), ending.value == nil else { return }
        observer.needsStop(TerminationReason(kind: .idleExit, detail: "idle for \(manifest.idleTimeout) and still running \(grace) later: stopped by the host"))
    }
}

