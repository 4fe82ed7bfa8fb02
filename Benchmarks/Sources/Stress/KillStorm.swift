import ArgumentParser
import CStress
import Glibc
import Logging
import RemoteHost
import Synchronization

/// `remoteview-stress killstorm`: many clients of many services send requests and stream frames
/// while the services' processes are killed, stopped and continued, and connections
/// invalidated, at random; then every request must have ended (answered, or failed with a typed
/// `RemoteError`), none may hang, and nothing may be left behind after the launcher shut down.
struct KillStorm: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "killstorm",
        abstract: "Random SIGKILL, SIGSTOP/SIGCONT and invalidation under load; fails on a lost or hung request, or a leak.",
        discussion: """
            Writes --services manifests of bench-service (alternately shared and perConnection) \
            and runs --clients client tasks: each connects to a service, sends echo requests (some \
            with a memfd attached), delayed requests and one-way messages, and every fourth shows \
            the service's view and streams frames from it; now and then a client moves to another \
            service. Meanwhile the storm disrupts, at a random pause (mean --pace ms): SIGKILL of \
            the process the launcher started (bubblewrap when sandboxed), SIGKILL of a process \
            inside the sandbox (its pid 1 or the service), SIGSTOP then SIGCONT (1-300 ms later) of \
            any of them, or ServiceConnection.invalidate() of a random client's connection. \
            Processes are signalled through pidfds, checked to be this run's.

            Every request and message is awaited under --deadline; one that is neither answered \
            nor failed by then counts as hung. After --kills disruptions (or --duration seconds), \
            every service must answer once more, and after the launcher has shut down the host \
            must hold no more fds, memfds, memfd mappings or child processes than before, and no \
            process of bench-service started during the run may be left anywhere on the machine. \
            Exits non-zero on a hung, lost or wrong request, an unexpected failure, or a leak.
            """)

    @Option(help: "Services (alternately shared and perConnection).")
    var services = 16

    @Option(help: "Concurrent client tasks.")
    var clients = 32

    @Option(help: "Disruptions (kills, stops, invalidations) before the storm ends; 0: until --duration.")
    var kills = 2000

    @Option(help: "Seconds after which the storm ends, even before --kills disruptions.")
    var duration: Double?

    @Option(help: "The random seed (default: from the clock; printed, to repeat a run's choices).")
    var seed: UInt64?

    @Option(help: "Mean pause between two disruptions, milliseconds.")
    var pace = 5.0

    @Option(help: "Seconds a request or message may take before it counts as hung.")
    var deadline = 30.0

    @Option(help: "The disruptions to choose from, comma-separated: \(Disruption.allCases.map(\.rawValue).joined(separator: ",")).")
    var only: String?

    @Flag(help: "Run the services without bubblewrap.")
    var unsandboxed = false

    @Flag(help: "Log the launcher's errors (every crash is one).")
    var verbose = false

    func validate() throws {
        guard services >= 2, clients >= 1 else { throw ValidationError("--services must be at least 2, --clients at least 1") }
        guard kills >= 0, kills > 0 || duration != nil else { throw ValidationError("--kills 0 needs --duration") }
        if let only {
            for name in only.split(separator: ",") where Disruption(rawValue: String(name)) == nil {
                throw ValidationError("--only: \(name) is none of \(Disruption.allCases.map(\.rawValue).joined(separator: ", "))")
            }
        }
        guard pace >= 0, deadline > 1, (duration ?? 1) > 0 else { throw ValidationError("--pace, --deadline and --duration must be positive") }
    }

    func run() async throws {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let seed = self.seed ?? UInt64(now.tv_sec) &* 1_000_000_007 &+ UInt64(now.tv_nsec)
        let identifiers = (0..<services).map { "com.example.storm." + ($0 < 10 ? "0" : "") + String($0) }
        let policies: [ServiceManifest.InstancePolicy] = (0..<services).map { $0 % 2 == 0 ? .shared : .perConnection }
        let environment = try StressEnvironment(services: Array(zip(identifiers, policies)).map { (identifier: $0.0, policy: $0.1) })
        defer { environment.remove() }
        print("remoteview-stress killstorm: \(services) services (\(policies.filter { $0 == .shared }.count) shared, "
              + "\(policies.filter { $0 == .perConnection }.count) perConnection), \(clients) clients, "
              + (kills > 0 ? "\(kills) disruptions" : "no disruption limit") + (duration.map { ", at most \(String(format: "%.0f", $0)) s" } ?? "")
              + ", pace \(String(format: "%.1f", pace)) ms, \(unsandboxed ? "unsandboxed" : "sandboxed"), seed \(seed)")
        print("service: \(environment.serviceExecutable)")

        var logger = Logger(label: "remoteview-stress")
        logger.logLevel = verbose ? .error : .critical
        // Relaunch at once after a kill, and never give up on a service: the storm kills each
        // one hundreds of times, each soon after its launch (a crash loop by the default policy).
        let configuration = Launcher.Configuration(
            hostIdentifier: "com.example.stress-host", sandbox: unsandboxed ? .unsandboxed : .bubblewrap(),
            backoff: .milliseconds(5), maximumBackoff: .milliseconds(100), minimumRelaunchInterval: .milliseconds(5),
            crashLoopLimit: .max, logger: logger)
        let registry = ServiceRegistry(scanning: [environment.folder])
        guard registry.problems.isEmpty else { throw StressError("invalid manifests: \(registry.problems)") }

        let watch = Task { await DeadlineWatch.shared.run() }
        defer { watch.cancel() }
        let runStart = ProcFS.bootTicks()
        // Warm-up: what a process makes once (the event loop, Dispatch's timers, the seccomp
        // program, Cairo) is made before the baseline.
        let deadlineSeconds = self.deadline
        let deadline = Duration.seconds(deadlineSeconds)
        let warmUp = try await withLauncher(registry: registry, configuration: configuration) { launcher in
            var failures: [String] = []
            for identifier in identifiers.prefix(2) {
                let connection = launcher.connection(to: identifier)
                let view = RemoteView(connection: connection)
                let outcomes = [
                    await guarded(deadline) { () throws(RemoteError) in try await view.present(width: 64, height: 48); return true },
                    await guarded(deadline) { () throws(RemoteError) in try await view.settle(); return true },
                    await guarded(deadline) { () throws(RemoteError) in try await connection.request(ServiceMessage(type: "echo", text: "warm")).text == "warm" },
                ]
                failures += outcomes.compactMap { $0.isOK ? nil : "\(identifier): \($0)" }
                await connection.invalidate()
            }
            return failures
        }
        guard warmUp.isEmpty else { throw StressError("the warm-up failed: \(warmUp)") }
        let before = HostSnapshot.take()
        let started = ContinuousClock.now

        let storm = Storm(identifiers: identifiers, clients: clients, kills: kills, duration: duration.map { .seconds($0) },
                          pace: pace, deadline: deadline, sandboxed: !unsandboxed,
                          only: only.map { Set($0.split(separator: ",").compactMap { Disruption(rawValue: String($0)) }) }, seed: seed, marker: environment.serviceExecutable)
        let stormSeconds = Mutex<Double>(0)
        let (statuses, aliveFailures) = try await withLauncher(registry: registry, configuration: configuration) { launcher in
            await storm.run(launcher: launcher)
            stormSeconds.withLock { $0 = (ContinuousClock.now - started).seconds }
            // The launcher must be alive and well: every service answers once more.
            var failures: [String] = []
            for identifier in identifiers {
                let connection = launcher.connection(to: identifier)
                let outcome = await guarded(deadline) { () throws(RemoteError) in
                    try await connection.request(ServiceMessage(type: "echo", text: "alive")).text == "alive"
                }
                if !outcome.isOK { failures.append("\(identifier): \(outcome)") }
                await connection.invalidate()
            }
            // Shutting down has as long as the requests had, and as long again; then the run is a hang.
            alarm(UInt32(deadlineSeconds * 2) + 30)
            return (await launcher.status(), failures)
        }
        alarm(0)
        let shutDown = (ContinuousClock.now - started).seconds
        let after = HostSnapshot.take()
        let orphans = ProcFS.processes(containing: environment.serviceExecutable, startedSince: runStart)

        // The report.
        let tally = storm.tally.withLock { $0 }
        var failed: [String] = []
        print("")
        print("storm: \(String(format: "%.1f", stormSeconds.withLock { $0 })) s; launcher shut down \(String(format: "%.2f", shutDown - stormSeconds.withLock { $0 })) s later")
        print("disruptions: \(tally.disruptionTotal) (" + Disruption.allCases.map { "\($0.label) \(tally.disruptions[$0, default: 0])" }.joined(separator: ", ")
              + "); \(tally.missed) aimed at a process that was gone or not yet there")
        print("launches: \(statuses.map(\.launches).reduce(0, +)), crashes booked: \(statuses.map(\.crashes).reduce(0, +)), "
              + "services invalidated: \(statuses.filter { $0.state == .invalidated }.count)")
        print("terminations: " + tally.terminations.sorted { $0.value > $1.value }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        print("frames composited: \(tally.frames)")
        print("operations: \(tally.started) started, \(tally.ended) ended")
        for operation in Operation.allCases {
            guard let outcomes = tally.outcomes[operation] else { continue }
            let total = outcomes.values.reduce(0, +)
            print("  \(pad(operation.rawValue, 9)) \(pad(String(total), 8)) " + outcomes.sorted { $0.value > $1.value }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
        }
        let lost = tally.started - tally.ended
        if lost != 0 { failed.append("\(lost) operations lost (started, never ended)") }
        if tally.hung > 0 { failed.append("\(tally.hung) operations hung (no answer or failure within \(self.deadline) s)") }
        if tally.wrong > 0 { failed.append("\(tally.wrong) wrong answers") }
        if tally.unexpected > 0 { failed.append("\(tally.unexpected) unexpected failures") }
        for note in tally.notes { print("  ! \(note)") }
        if !aliveFailures.isEmpty { failed.append("services not answering after the storm: \(aliveFailures)") }
        print("host: alive (pid \(getpid())); every service answered after the storm: \(aliveFailures.isEmpty ? "yes" : "NO")")

        // Leaks, after withLauncher returned. Dispatch makes a timerfd per clock and quality of
        // service on first use (behind Task.sleep): not RemoteView's, so not counted.
        let newDescriptors = after.descriptors.filter { fd, target in before.descriptors[fd] != target && target != "anon_inode:[timerfd]" }
        let children = Set(after.children).subtracting(before.children)
        print("after shutdown, against before the storm:")
        print("  fds:            \(before.descriptors.count) → \(after.descriptors.count)" + (newDescriptors.isEmpty ? "" : "  new: \(newDescriptors.sorted { $0.key < $1.key }.map { "\($0.key) → \($0.value)" })"))
        print("  memfds:         \(before.memfds) → \(after.memfds)")
        print("  mappings:       \(before.mappings) → \(after.mappings) (memfd mappings \(before.memfdMappings) → \(after.memfdMappings))")
        print("  children:       \(before.children.count) → \(after.children.count)" + (children.isEmpty ? "" : " \(children.sorted())"))
        print("  orphans:        \(orphans.count) process(es) of bench-service started during the run" + (orphans.isEmpty ? "" : ":"))
        for orphan in orphans.prefix(10) { print("    \(orphan.pid) [\(orphan.state)] \(orphan.commandLine.prefix(160))") }
        print("  RSS:            \(formatBytes(Int(before.memory.residentBytes))) → \(formatBytes(Int(after.memory.residentBytes)))")
        print("  heap in use:    \(formatBytes(Int(before.memory.heapBytes ?? 0))) → \(formatBytes(Int(after.memory.heapBytes ?? 0)))")
        if !newDescriptors.isEmpty { failed.append("\(newDescriptors.count) fds leaked") }
        if after.memfds > before.memfds { failed.append("\(after.memfds - before.memfds) memfds leaked") }
        if after.memfdMappings > before.memfdMappings { failed.append("\(after.memfdMappings - before.memfdMappings) memfd mappings leaked") }
        if !children.isEmpty { failed.append("\(children.count) child processes left") }
        if !orphans.isEmpty { failed.append("\(orphans.count) orphaned processes of bench-service") }
        if failed.isEmpty {
            print("passed: every operation ended, none hung, nothing leaked (seed \(seed))")
        } else {
            print("FAILED (seed \(seed)):")
            for failure in failed { print("  \(failure)") }
            throw ExitCode.failure
        }
    }
}

/// A kind of disruption.
enum Disruption: String, CaseIterable, Hashable, Sendable {
    /// SIGKILL of the process the launcher started (bubblewrap when sandboxed).
    case killLaunched = "launched"
    /// SIGKILL of the sandbox's pid 1 (the inner bubblewrap).
    case killSandboxInit = "sandbox-init"
    /// SIGKILL of the service inside the sandbox.
    case killService = "service"
    /// SIGSTOP, then SIGCONT 1-300 ms later, of any process of a service.
    case stopContinue = "stop"
    /// `ServiceConnection.invalidate()` of a random client's connection.
    case invalidate = "invalidate"

    var label: String {
        switch self {
        case .killLaunched: "SIGKILL launched"
        case .killSandboxInit: "SIGKILL sandbox pid 1"
        case .killService: "SIGKILL service in sandbox"
        case .stopContinue: "SIGSTOP+SIGCONT"
        case .invalidate: "invalidate"
        }
    }
}

/// What a client does.
enum Operation: String, CaseIterable, Hashable, Sendable {
    case echo, echoFD = "echo+fd", delay, send, present, stream, settle
}

/// An operation's end.
enum Outcome: Sendable, CustomStringConvertible {
    case ok
    case wrong
    case failed(RemoteError)
    case hung

    var isOK: Bool {
        if case .ok = self { true } else { false }
    }

    var description: String {
        switch self {
        case .ok: "answered"
        case .wrong: "wrong answer"
        case .failed(let error): error.code.rawValue
        case .hung: "HUNG"
        }
    }
}

/// Runs `body` in a task of its own and returns its outcome, or `.hung` if it has not ended
/// within `deadline` (the task is then cancelled and left to itself: it is what a hung request
/// is). `body` returns whether the answer was right.
///
/// One watch checks every deadline (``DeadlineWatch``): a `Task.sleep` per operation would keep
/// each cancelled sleep's timer and task in memory until its deadline, tens of MiB in a storm,
/// which would hide a leak of the framework's own.
func guarded(_ deadline: Duration, _ body: @escaping @Sendable () async throws(RemoteError) -> Bool) async -> Outcome {
    let race = Race()
    return await withCheckedContinuation { continuation in
        race.state.withLock { $0.continuation = continuation }
        let entry = DeadlineWatch.shared.add(race, deadline: .now + deadline)
        let worker = Task {
            let outcome: Outcome
            do throws(RemoteError) {
                outcome = try await body() ? .ok : .wrong
            } catch {
                outcome = .failed(error)
            }
            DeadlineWatch.shared.remove(entry)
            _ = race.end(outcome)
        }
        race.state.withLock { $0.worker = worker }
    }
}

/// Whichever of an operation and its deadline ends first.
final class Race: Sendable {
    let state = Mutex<(continuation: CheckedContinuation<Outcome, Never>?, worker: Task<Void, Never>?)>((nil, nil))

    /// Resumes the waiter with `outcome` if nothing did before.
    func end(_ outcome: Outcome) -> Bool {
        guard let continuation = state.withLock({ state in
            defer { state.continuation = nil; state.worker = nil }
            return state.continuation
        }) else { return false }
        continuation.resume(returning: outcome)
        return true
    }

    /// Ends the wait as hung and cancels the operation.
    func expire() {
        let worker = state.withLock { $0.worker }
        if end(.hung) { worker?.cancel() }
    }
}

/// The deadlines of every operation under way, checked four times a second by ``run()``.
final class DeadlineWatch: Sendable {
    static let shared = DeadlineWatch()
    private let entries = Mutex<(next: Int, races: [Int: (deadline: ContinuousClock.Instant, race: Race)])>((0, [:]))

    func add(_ race: Race, deadline: ContinuousClock.Instant) -> Int {
        entries.withLock { entries in
            entries.next += 1
            entries.races[entries.next] = (deadline, race)
            return entries.next
        }
    }

    func remove(_ entry: Int) {
        _ = entries.withLock { $0.races.removeValue(forKey: entry) }
    }

    /// Expires what is past its deadline, until cancelled.
    func run() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(250))
            let now = ContinuousClock.now
            let expired = entries.withLock { entries in
                let due = entries.races.filter { $0.value.deadline <= now }
                for key in due.keys { entries.races.removeValue(forKey: key) }
                return due.values.map(\.race)
            }
            for race in expired { race.expire() }
        }
    }
}

/// What happened in a storm.
struct Tally: Sendable {
    var started = 0
    var ended = 0
    var hung = 0
    var wrong = 0
    var unexpected = 0
    var frames = 0
    var outcomes: [Operation: [String: Int]] = [:]
    var disruptions: [Disruption: Int] = [:]
    var missed = 0
    /// How the service processes ended, by kind (and signal).
    var terminations: [String: Int] = [:]
    /// The first unexpected things, to print.
    var notes: [String] = []

    var disruptionTotal: Int { disruptions.values.reduce(0, +) }

    mutating func note(_ text: String) {
        if notes.count < 20 { notes.append(text) }
    }
}

/// The storm: the clients, the disruptions, and what they counted.
final class Storm: Sendable {
    let identifiers: [String]
    let clients: Int
    let kills: Int
    let duration: Duration?
    let pace: Double
    let deadline: Duration
    let sandboxed: Bool
    /// The disruptions to choose from (all when `nil`).
    let only: Set<Disruption>?
    let seed: UInt64
    /// The service executable's path: on the command line of each process of a service.
    let marker: String

    let tally = Mutex(Tally())
    private let stopped = Atomic<Bool>(false)
    /// Each client's connection now, and whether the storm invalidated it.
    private let slots: Mutex<[(connection: ServiceConnection, invalidatedByStorm: Bool)?]>
    /// The processes the launcher started and has not yet reaped: pid → service.
    private let live = Mutex<[Int32: String]>([:])

    init(identifiers: [String], clients: Int, kills: Int, duration: Duration?, pace: Double, deadline: Duration,
         sandboxed: Bool, only: Set<Disruption>?, seed: UInt64, marker: String) {
        self.identifiers = identifiers
        self.clients = clients
        self.kills = kills
        self.duration = duration
        self.pace = pace
        self.deadline = deadline
        self.sandboxed = sandboxed
        self.only = only
        self.seed = seed
        self.marker = marker
        slots = Mutex(Array(repeating: nil, count: clients))
    }

    /// Runs the clients and the disruptions until the storm ends, then waits for the clients.
    func run(launcher: Launcher) async {
        let events = launcher.events()
        let watcher = Task {
            for await event in events {
                switch event {
                case .launched(let identifier, let pid): live.withLock { $0[pid] = identifier }
                case .terminated(let identifier, let pid, let reason):
                    _ = live.withLock { $0.removeValue(forKey: pid) }
                    tally.withLock { tally in
                        tally.terminations[reason.kind.rawValue + (reason.signal.map { " (signal \($0))" } ?? ""), default: 0] += 1
                        // A kill is a kill, a stop a stop; anything else deserves a look.
                        if reason.kind != .killed, reason.kind != .stopped { tally.note("\(identifier) \(pid) ended: \(reason)") }
                    }
                case .invalidated(let identifier, let reason): tally.withLock { $0.note("\(identifier) invalidated by the launcher: \(reason)") }
                }
            }
        }
        await withTaskGroup(of: Void.self) { group in
            for client in 0..<clients {
                group.addTask { await self.client(client, launcher: launcher) }
            }
            await disrupt()
            stopped.store(true, ordering: .relaxed)
            await group.waitForAll()
        }
        watcher.cancel()
    }

    // MARK: clients

    private func client(_ index: Int, launcher: Launcher) async {
        var random = SplitMix64(seed: seed &+ UInt64(index + 1) &* 0xD1B5_4A32_D192_ED03)
        var service = index % identifiers.count
        let showsView = index % 4 == 0
        while !stopped.load(ordering: .relaxed) {
            let connection = launcher.connection(to: identifiers[service])
            slots.withLock { $0[index] = (connection, false) }
            var view: RemoteView?
            var frames: Task<Void, Never>?
            if showsView {
                let shown = RemoteView(connection: connection)
                let damage = shown.damage
                frames = Task { for await _ in damage { self.tally.withLock { $0.frames += 1 } } }
                view = shown
            }
            // A view is shown once a present went through (a present that failed, the process
            // killed under it, is not kept for the next process): until then, present again.
            var presented = false
            let rounds = Int.random(in: 10...100, using: &random)
            for _ in 0..<rounds {
                if stopped.load(ordering: .relaxed) || slots.withLock({ $0[index]?.invalidatedByStorm ?? true }) { break }
                if let view, !presented {
                    presented = await perform(.present, client: index, service: service) { () throws(RemoteError) in
                        try await view.present(width: 64, height: 48)
                        return true
                    }.isOK
                    if !presented { continue }
                }
                let count = Int.random(in: 1...3, using: &random)
                let choices = (0..<count).map { _ in (Int.random(in: 0..<100, using: &random), Int.random(in: 0...2048, using: &random)) }
                let (shown, current) = (view, service)
                await withTaskGroup(of: Void.self) { group in
                    for (choice, size) in choices {
                        group.addTask { await self.operation(choice, size: size, view: shown, connection: connection, client: index, service: current) }
                    }
                }
            }
            slots.withLock { $0[index] = nil }
            frames?.cancel()
            view = nil
            // Moving to another service: this connection is done with.
            let invalidation = await guarded(deadline) { () throws(RemoteError) in
                await connection.invalidate()
                return true
            }
            if case .hung = invalidation {
                tally.withLock {
                    $0.hung += 1
                    $0.note("client \(index): invalidate() of its connection to \(identifiers[service]) hung")
                }
            }
            service = Int.random(in: 0..<identifiers.count, using: &random)
        }
    }

    /// One operation, chosen by `choice` (0..<100).
    private func operation(_ choice: Int, size: Int, view: RemoteView?, connection: ServiceConnection, client: Int, service: Int) async {
        let timeout = Duration.seconds(10)
        switch choice {
        case 0..<10 where view != nil:
            await perform(.stream, client: client, service: service) { () throws(RemoteError) in
                try await connection.request(ServiceMessage(type: "stream", text: "0 0 32 32 10"), timeout: timeout).type == "streaming"
            }
        case 10..<20 where view != nil:
            await perform(.settle, client: client, service: service) { () throws(RemoteError) in
                try await view?.settle(timeout: timeout)
                return true
            }
        case 0..<40:
            let payload = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ size) }
            await perform(.echo, client: client, service: service) { () throws(RemoteError) in
                try await connection.request(ServiceMessage(type: "echo", payload: payload), timeout: timeout).payload == payload
            }
        case 40..<55:
            let fd = cstress_memfd("storm", size)
            guard fd >= 0 else {
                tally.withLock { $0.note("memfd_create failed: errno \(errno)") }
                return
            }
            let attachment = Attachment(OwnedFD(adopting: fd))
            await perform(.echoFD, client: client, service: service) { () throws(RemoteError) in
                let reply = try await connection.request(ServiceMessage(type: "echo", payload: [1, 2, 3], attachments: [attachment]), timeout: timeout)
                return reply.payload == [1, 2, 3] && reply.attachments.count == 1
            }
        case 55..<80:
            let milliseconds = size % 50 + 1
            await perform(.delay, client: client, service: service) { () throws(RemoteError) in
                try await connection.request(ServiceMessage(type: "delay", text: String(milliseconds)), timeout: timeout).text == String(milliseconds)
            }
        default:
            await perform(.send, client: client, service: service) { () throws(RemoteError) in
                try await connection.send(ServiceMessage(type: "storm", text: "one way"))
                return true
            }
        }
    }

    /// Runs one operation under the deadline and counts how it ended.
    @discardableResult
    private func perform(_ operation: Operation, client: Int, service: Int, _ body: @escaping @Sendable () async throws(RemoteError) -> Bool) async -> Outcome {
        tally.withLock { $0.started += 1 }
        let outcome = await guarded(deadline, body)
        let stormInvalidated = slots.withLock { $0[client]?.invalidatedByStorm ?? false }
        tally.withLock { tally in
            tally.ended += 1
            tally.outcomes[operation, default: [:]][outcome.description, default: 0] += 1
            switch outcome {
            case .ok:
                break
            case .wrong:
                tally.wrong += 1
                tally.note("client \(client), \(identifiers[service]): \(operation.rawValue) got a wrong answer")
            case .hung:
                tally.hung += 1
                tally.note("client \(client), \(identifiers[service]): \(operation.rawValue) hung")
            case .failed(let error):
                switch error.code {
                case .interrupted, .timeout:
                    break
                case .invalidated where stormInvalidated:
                    break
                default:
                    tally.unexpected += 1
                    tally.note("client \(client), \(identifiers[service]): \(operation.rawValue) failed unexpectedly: \(error)")
                }
            }
        }
        return outcome
    }

    // MARK: disruptions

    /// Disrupts until `kills` disruptions were made or `duration` passed, then waits for the
    /// SIGCONTs and invalidations still to come.
    private func disrupt() async {
        var random = SplitMix64(seed: seed)
        var pending: [Task<Void, Never>] = []
        let start = ContinuousClock.now
        let kinds = (sandboxed ? Disruption.allCases : Disruption.allCases.filter { $0 != .killSandboxInit && $0 != .killService })
            .filter { only?.contains($0) ?? true }
        var reported = 0
        while true {
            let made = tally.withLock { $0.disruptionTotal }
            let elapsed = ContinuousClock.now - start
            if kills > 0, made >= kills { break }
            if let duration, elapsed >= duration { break }
            let progress = kills > 0 ? made * 10 / kills : Int(elapsed.seconds * 10 / (duration?.seconds ?? 1))
            if progress > reported {
                reported = progress
                let figures = tally.withLock { $0 }
                print("  \(pad(String(format: "%.1f s", elapsed.seconds), 8)) \(pad(String(made), 6)) disruptions, \(figures.ended) operations ended, "
                      + "\(figures.frames) frames, \(live.withLock { $0.count }) processes")
            }
            if pace > 0 {
                var pause = Duration.microseconds(Int.random(in: 0...Int(pace * 2000), using: &random))
                if let duration { pause = min(pause, duration - elapsed) }
                try? await Task.sleep(for: pause)
                if let duration, ContinuousClock.now - start >= duration { break }
            }
            let kind = kinds.randomElement(using: &random)!
            if kind == .invalidate {
                let client = Int.random(in: 0..<clients, using: &random)
                let connection = slots.withLock { slots -> ServiceConnection? in
                    guard let slot = slots[client], !slot.invalidatedByStorm else { return nil }
                    slots[client]?.invalidatedByStorm = true
                    return slot.connection
                }
                guard let connection else {
                    tally.withLock { $0.missed += 1 }
                    continue
                }
                tally.withLock { $0.disruptions[kind, default: 0] += 1 }
                let deadline = self.deadline
                pending.append(Task {
                    if case .hung = await guarded(deadline, { () throws(RemoteError) in await connection.invalidate(); return true }) {
                        self.tally.withLock {
                            $0.hung += 1
                            $0.note("invalidate() of a connection to \(connection.identifier) by the storm hung")
                        }
                    }
                })
                continue
            }
            // A random service with a process, then a random process of it.
            let processes = live.withLock { $0 }
            let services = Set(processes.values).sorted()
            guard let service = services.randomElement(using: &random),
                  let launched = processes.filter({ $0.value == service }).keys.sorted().randomElement(using: &random) else {
                tally.withLock { $0.missed += 1 }
                continue
            }
            let inside = ProcFS.descendants(of: launched)
            let target: Int32?
            switch kind {
            case .killLaunched: target = launched
            case .killSandboxInit: target = inside.filter { $0.depth == 1 }.randomElement(using: &random)?.pid
            case .killService: target = inside.filter { $0.depth >= 2 }.randomElement(using: &random)?.pid
            default: target = ([launched] + inside.map(\.pid)).randomElement(using: &random)
            }
            guard let target, let process = ProcessHandle(pid: target, marker: marker),
                  process.send(kind == .stopContinue ? SIGSTOP : SIGKILL) else {
                tally.withLock { $0.missed += 1 }
                continue
            }
            tally.withLock { $0.disruptions[kind, default: 0] += 1 }
            if kind == .stopContinue {
                let pause = Duration.milliseconds(Int.random(in: 1...300, using: &random))
                pending.append(Task {
                    try? await Task.sleep(for: pause)
                    _ = process.send(SIGCONT)
                })
            }
        }
        for task in pending { await task.value }
    }
}

/// A small, fast, seedable generator (SplitMix64), so a seed repeats a run's choices.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
