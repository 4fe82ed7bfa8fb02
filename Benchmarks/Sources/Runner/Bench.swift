import ArgumentParser
import Foundation
import Glibc
import Logging
import RemoteHost
import Synchronization

/// One line of the table: a RemoteView figure next to the baseline measured in the same run.
struct Row: Codable, Sendable {
    var figure: String
    var value: Stats
    /// For figures that are not latencies (the scale run): what to show instead of `value`.
    var summary: String? = nil
    var baseline: String
    var baselineValue: Stats
    /// What to show instead of `baselineValue`, likewise.
    var baselineSummary: String? = nil
    /// How the two compare, and the target (docs/Benchmarks.md).
    var ratio: Double
    var ratioMeaning: String
    var target: String
    var met: Bool?
}

@main
struct RemoteViewBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remoteview-bench",
        abstract: "Every RemoteView figure next to its baseline, measured in one run (release build).")

    @Flag(help: "Print the results as JSON instead of a table.")
    var json = false

    @Option(help: "Request/reply round trips per figure.")
    var roundTrips = 20_000

    @Option(help: "One-way messages, sent in rounds of 1000 (the raw baseline sends as many).")
    var messages = 100_000

    @Option(help: "Frames per frame figure.")
    var frames = 600

    @Option(help: "Cold starts per figure.")
    var coldStarts = 30

    @Option(help: "Only these figure groups, comma-separated (the round trip always runs): \(Bench.groups.joined(separator: ", ")).")
    var only: String?

    @Option(help: ArgumentHelp("Only make this many round trips to a sandboxed bench-service (after 1000 untimed), print their cost and exit: for counting what one round trip costs with strace -f -c, valgrind --tool=callgrind or perf (run it twice with different counts and take the difference).", valueName: "n"))
    var probe: Int?

    @Flag(help: "With --probe: the caller prefers ServiceConnection.readerExecutor (the low-latency path).")
    var preferReader = false

    @Flag(help: "With --probe: the caller is a thread of its own making blocking calls (ServiceConnection.requestSync).")
    var blocking = false

    @Flag(help: "Only count what one round trip costs, host and service together: system calls, context switches, malloc calls and lock acquisitions, by perf stat over two --probe runs (needs root and perf; locks need a build with --traits LockCounts), and exit.")
    var counts = false

    @Flag(help: "Only measure the pinned figures (round trips and their CPU cost, one-way, D-Bus), as if every process were on one core, and print them as JSON rows: the full run measures them in a child run this way under `taskset -c 0`.")
    var pinned = false

    func run() async throws {
        if counts {
            try Counts.measure()
            return
        }
        if let probe {
            try await Bench.probe(roundTrips: probe, caller: blocking ? .blocking : preferReader ? .loop : .global)
            return
        }
        if pinned {
            let bench = try Bench(roundTrips: roundTrips, messages: messages, frames: 0, coldStarts: 0, log: { _ in })
            let encoder = JSONEncoder()
            print(String(decoding: try encoder.encode(try await bench.pinnedFigures()), as: UTF8.self))
            return
        }
        let quiet = json
        let log: @Sendable (String) -> Void = { line in if !quiet { print(line) } }
        var bench = try Bench(roundTrips: roundTrips, messages: messages, frames: frames, coldStarts: coldStarts, log: log)
        if let only {
            bench.only = Set(only.split(separator: ",").map(String.init))
            for group in bench.only where !Bench.groups.contains(group) {
                throw ValidationError("--only: no figure group \(group); the groups are \(Bench.groups.joined(separator: ", "))")
            }
        }
        let loadBefore = Self.loadAverage()
        let rows = try await bench.all()
        let loadAfter = Self.loadAverage()
        // The machine's state, beside the figures (on standard error with --json, whose output
        // stays the rows). A busy machine makes the wall-clock figures incomparable with a
        // quiet run's; the CPU time per operation much less so.
        let busy = (loadBefore.first ?? 0) >= Self.busyLoad
        let state = ["load average before the run: \(loadBefore.map { String(format: "%.2f", $0) }.joined(separator: " ")), after: \(loadAfter.map { String(format: "%.2f", $0) }.joined(separator: " "))",
                     busy ? "BUSY: the 1-minute load was \(String(format: "%.2f", loadBefore.first ?? 0)) (≥ \(Self.busyLoad)) before the run; compare its ratios, not its times, with a quiet run's"
                          : "quiet: the 1-minute load was below \(Self.busyLoad) before the run"]
        if json { for line in state { FileHandle.standardError.write(Data((line + "\n").utf8)) } } else { for line in state { print(line) } }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try encoder.encode(rows), as: UTF8.self))
        } else {
            print(Self.table(rows))
        }
    }

    /// A 1-minute load average at or above this before the run marks it busy.
    static let busyLoad = 0.5

    /// The 1-, 5- and 15-minute load averages.
    static func loadAverage() -> [Double] {
        var loads = [Double](repeating: 0, count: 3)
        return getloadavg(&loads, 3) == 3 ? loads : []
    }

    static func table(_ rows: [Row]) -> String {
        func micros(_ value: Double) -> String {
            value >= 1000 ? String(format: "%.2f ms", value / 1000) : String(format: "%.1f µs", value)
        }
        func describe(_ stats: Stats) -> String {
            if let rate = stats.perSecond, stats.count > 0, rate > 0, stats.median == 0 { return String(format: "%.0f/s", rate) }
            var text = "\(micros(stats.median)) (p99 \(micros(stats.p99)), \(micros(stats.min))–\(micros(stats.max)))"
            if let rate = stats.perSecond { text += String(format: ", %.0f/s", rate) }
            return text
        }
        var lines = ["| figure | RemoteView | baseline | baseline value | ratio | target | met |", "|---|---|---|---|---|---|---|"]
        for row in rows {
            let met = row.met.map { $0 ? "yes" : "no" } ?? "–"
            let ratio = row.ratioMeaning.isEmpty ? "–" : "\(String(format: "%.2f", row.ratio))× \(row.ratioMeaning)"
            lines.append("| \(row.figure) | \(row.summary ?? describe(row.value)) | \(row.baseline) | \(row.baselineSummary ?? describe(row.baselineValue)) | \(ratio) | \(row.target) | \(met) |")
        }
        return lines.joined(separator: "\n")
    }
}

/// The measurements: the framework's figures and their baselines.
struct Bench: Sendable {
    let roundTrips: Int
    let messages: Int
    let frames: Int
    let coldStarts: Int
    /// The figures to run (empty: all); the round trip always runs (others compare with it).
    var only: Set<String> = []
    /// How many services the scale run streams from, for how long.
    var scaleServices = 64
    var scaleSeconds = 10.0
    let log: @Sendable (String) -> Void
    /// Where the C baselines are built.
    let rawFolder: String
    /// Manifests for the bench service (sandboxed and not share them).
    let services: String
    let benchService: String

    init(roundTrips: Int, messages: Int, frames: Int, coldStarts: Int, log: @escaping @Sendable (String) -> Void) throws {
        self.roundTrips = roundTrips
        self.messages = messages
        self.frames = frames
        self.coldStarts = coldStarts
        self.log = log
        var path = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink("/proc/self/exe", &path, path.count - 1)
        guard length > 0 else { throw BenchError("cannot read /proc/self/exe") }
        let executable = String(decoding: path[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let folder = String(executable[..<(executable.lastIndex(of: "/") ?? executable.endIndex)])
        benchService = folder + "/bench-service"
        guard access(benchService, X_OK) == 0 else { throw BenchError("bench-service is not at \(benchService): build the package first") }
        rawFolder = folder + "/raw"
        services = folder + "/bench-services"
        try Self.buildBaselines(into: rawFolder, sources: Self.sourceFolder(from: folder))
        try Self.writeManifests(into: services, executable: benchService)
    }

    /// Benchmarks/raw, found from the build folder (Benchmarks/.build/<triple>/release).
    static func sourceFolder(from build: String) throws -> String {
        var folder = build
        while folder.count > 1 {
            folder = String(folder[..<(folder.lastIndex(of: "/") ?? folder.startIndex)])
            if access(folder + "/raw/baselines.c", R_OK) == 0 { return folder + "/raw" }
        }
        throw BenchError("cannot find Benchmarks/raw/baselines.c above \(build)")
    }

    static func buildBaselines(into folder: String, sources: String) throws {
        mkdir(folder, 0o755)
        _ = try run(["/usr/bin/cc", "-O2", "-Wall", "-o", folder + "/baselines", sources + "/baselines.c"])
        _ = try run(["/usr/bin/cc", "-O2", "-static", "-o", folder + "/hello-fd3", sources + "/hello-fd3.c"])
        let systemd = try run(["/usr/bin/pkg-config", "--cflags", "--libs", "libsystemd"]).split(separator: " ").map {
            $0.trimmingCharacters(in: .whitespacesAndNewlines)
        }.filter { !$0.isEmpty }
        _ = try run(["/usr/bin/cc", "-O2", "-Wall", "-o", folder + "/dbus-peer", sources + "/dbus-peer.c"] + systemd)
    }

    static func writeManifests(into folder: String, executable: String) throws {
        mkdir(folder, 0o755)
        // "shared": one warm process for round trips and frames; "cold": a process per connection.
        // "share": the same service offered for text, shared by every share; "share.cold": one process per share.
        for (name, instances) in [("bench", "shared"), ("bench.text", "shared"), ("bench.text.cold", "perConnection"), ("bench.cold", "perConnection"), ("bench.scale", "perConnection"),
                                  ("bench.share", "shared"), ("bench.share.cold", "perConnection")] {
            let activation = name.hasPrefix("bench.share") ? #", "activation": { "contentTypes": [{ "type": "text/plain" }] }"# : ""
            let manifest = """
                { "identifier": "com.example.\(name)", "executable": "\(executable)", "arguments": ["com.example.\(name)"], "display": { "title": "Benchmark service" }, "idleTimeout": 600, "instances": "\(instances)"\(activation) }
                """
            try manifest.write(toFile: "\(folder)/\(name).json", atomically: true, encoding: .utf8)
        }
    }

    func baselineSamples(_ arguments: String...) throws -> [Double] {
        try Stats.samples(baselineJSON: run([rawFolder + "/baselines"] + arguments + ["samples"]).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// `count` operations of a C baseline: their samples, and what both its processes spent on them.
    func baselineChunk(_ mode: String, _ count: Int) throws -> ([Double], Cost) {
        let line = try run([rawFolder + "/baselines", mode, String(count), "samples"]).trimmingCharacters(in: .whitespacesAndNewlines)
        let stats = try Stats(baselineJSON: line)
        guard let cpu = stats.cpuPerOperation, let switches = stats.switchesPerOperation else {
            throw BenchError("the \(mode) baseline printed no cost: \(line.prefix(200))")
        }
        return (try Stats.samples(baselineJSON: line), Cost(cpuMicroseconds: cpu * Double(count), switches: switches * Double(count)))
    }

    /// What the host and `service` (bench-service, its "usage" request) have cost so far.
    func cost(of service: ServiceConnection) async throws -> Cost {
        let own = Cost.ownProcess()
        return own + (try await usage(of: service))
    }

    /// What `service` (bench-service) has cost so far, by its own account (its "usage" request).
    func usage(of service: ServiceConnection) async throws -> Cost {
        try Cost(usageReply: try await service.request(ServiceMessage(type: "usage")).text)
    }

    /// `count` timed runs of `body` after `warmUp` untimed ones, and what the host and the
    /// service spent on the timed ones.
    func costed(_ count: Int, warmUp: Int, on service: ServiceConnection, _ body: () async throws -> Void) async throws -> ([Double], Cost) {
        for _ in 0..<warmUp { try await body() }
        let before = try await cost(of: service)
        let samples = try await sample(count, warmUp: 0, body)
        let after = try await cost(of: service)
        return (samples, after - before)
    }

    /// Who makes the round trips.
    enum Caller {
        /// A task on the global concurrent executor (what an app's task gets).
        case global
        /// A task preferring ``ServiceConnection/readerExecutor``, the event loop's thread.
        case loop
        /// A thread of its own, in blocking calls (``ServiceConnection/requestSync(_:timeout:)``).
        case blocking

        var description: String {
            switch self {
            case .global: "caller on the global executor"
            case .loop: "caller preferring the reader's executor"
            case .blocking: "blocking calls on a thread of their own"
            }
        }
    }

    /// `count` timed round trips of `message` to `service` by `caller`, after `warmUp` untimed
    /// ones, and what the host and the service spent on the timed ones.
    func costedRoundTrips(_ count: Int, warmUp: Int, _ service: ServiceConnection, _ message: ServiceMessage,
                          caller: Caller) async throws -> ([Double], Cost) {
        switch caller {
        case .global:
            return try await costed(count, warmUp: warmUp, on: service) { _ = try await service.request(message) }
        case .loop:
            return try await withTaskExecutorPreference(ServiceConnection.readerExecutor) {
                try await costed(count, warmUp: warmUp, on: service) { _ = try await service.request(message) }
            }
        case .blocking:
            let timed = { (count: Int) async throws -> [Double] in
                try await onThreadOfItsOwn { () throws(RemoteError) -> [Double] in
                    var samples: [Double] = []
                    samples.reserveCapacity(count)
                    for _ in 0..<count {
                        let start = nowMicroseconds()
                        _ = try service.requestSync(message)
                        samples.append(nowMicroseconds() - start)
                    }
                    return samples
                }
            }
            _ = try await timed(warmUp)
            let before = try await cost(of: service)
            let samples = try await timed(count)
            return (samples, try await cost(of: service) - before)
        }
    }

    /// `message` round trips to `service` by `caller`, interleaved with the C ping-pong; both
    /// with their cost per operation.
    func costedRoundTrips(_ service: ServiceConnection, _ message: ServiceMessage, caller: Caller) async throws -> (framework: Stats, baseline: Stats) {
        var spent = Cost(), rawSpent = Cost()
        let (ours, theirs) = try await interleaved(roundTrips, framework: { count in
            let (samples, cost) = try await costedRoundTrips(count, warmUp: 100, service, message, caller: caller)
            spent = spent + cost
            return samples
        }, baseline: { count in
            let (samples, cost) = try baselineChunk("pingpong", count)
            rawSpent = rawSpent + cost
            return samples
        })
        return (ours.with(spent, over: ours.count), theirs.with(rawSpent, over: theirs.count))
    }

    /// One-way 64-byte messages, pipelined in rounds of 1000 (each closed by a `count` request),
    /// against the raw socket's; with their cost per message.
    func oneWayRows(_ service: ServiceConnection, payload: [UInt8], figure: String = "one-way messages, 64 B, pipelined") async throws -> [Row] {
        var oneWay: [Double] = []
        var total = 0.0
        var before = Cost()
        for round in -2..<max(messages / 1000, 1) {
            if round == 0 { before = try await cost(of: service) }
            let start = nowMicroseconds()
            for _ in 0..<1000 { try await service.send(ServiceMessage(type: "m", payload: payload)) }
            let counted = try await service.request(ServiceMessage(type: "count"))
            let elapsed = nowMicroseconds() - start
            guard counted.text == "1000" else { throw BenchError("the service counted \(counted.text ?? "?") of 1000 one-way messages") }
            if round >= 0 {
                oneWay.append(elapsed / 1000)
                total += elapsed
            }
        }
        let spent = try await cost(of: service) - before
        let oneWayStats = Stats(microseconds: oneWay, perSecond: Double(oneWay.count * 1000) / (total / 1e6)).with(spent, over: oneWay.count * 1000)
        let rawOneWay = try baseline("oneway", String(messages))
        return [Row(figure: figure, value: oneWayStats, baseline: "raw seqpacket, pipelined", baselineValue: rawOneWay,
                    ratio: (oneWayStats.perSecond ?? 0) / (rawOneWay.perSecond ?? 1), ratioMeaning: "of raw msgs/s", target: "≥ 0.7×",
                    met: (oneWayStats.perSecond ?? 0) >= 0.7 * (rawOneWay.perSecond ?? 0)),
                costRow(oneWayStats, rawOneWay)]
    }

    /// The small round trip against a D-Bus method call through a private `dbus-daemon`,
    /// interleaved.
    func dbusRow(echo: (Int) async throws -> [Double], figure: String? = nil) async throws -> Row {
        let bus = try PrivateBus(folder: rawFolder + "/dbus", peer: rawFolder + "/dbus-peer")
        defer { bus.stop() }
        let server = try bus.startServer()
        defer {
            kill(server.processIdentifier, SIGKILL)
            server.waitUntilExit()
        }
        let (ours, dbus) = try await interleaved(roundTrips, framework: echo, baseline: { count in
            try Stats.samples(baselineJSON: bus.peer("call", String(count), "samples").trimmingCharacters(in: .whitespacesAndNewlines))
        })
        var row = versus("D-Bus", "D-Bus method call (private dbus-daemon, sd-bus, C)", ours: ours, theirs: dbus, target: 3)
        if let figure { row.figure = figure }
        return row
    }

    /// The pinned figures (`--pinned`, run in a child under `taskset -c 0`, so this process,
    /// the service, the baselines and D-Bus share one core): with no idle core to wake, the
    /// ratios hold within about ±0.3× from run to run (docs/Benchmarks.md, "Pinned figures").
    func pinnedFigures() async throws -> [Row] {
        var logger = Logger(label: "bench")
        logger.logLevel = .error
        let registry = ServiceRegistry(scanning: [services])
        return try await withLauncher(registry: registry, configuration: Launcher.Configuration(hostIdentifier: "com.example.bench-host", logger: logger)) { launcher in
            var rows: [Row] = []
            let service = launcher.connection(to: "com.example.bench")
            let payload = [UInt8](repeating: 0x2A, count: 64)
            let echoMessage = ServiceMessage(type: "echo", payload: payload)
            _ = try await service.request(echoMessage)
            let (blocking, rawBlocking) = try await costedRoundTrips(service, echoMessage, caller: .blocking)
            rows.append(againstRaw("pinned: request/reply, 64 B (blocking call: requestSync on a thread of its own)", blocking, rawBlocking,
                                   baseline: "raw C seqpacket ping-pong, pinned", target: 1.3))
            rows.append(costRow(blocking, rawBlocking, target: 1.3))
            let (global, rawGlobal) = try await costedRoundTrips(service, echoMessage, caller: .global)
            rows.append(againstRaw("pinned: request/reply, 64 B (caller on the global executor)", global, rawGlobal,
                                   baseline: "raw C seqpacket ping-pong, pinned", target: 2))
            rows.append(costRow(global, rawGlobal))
            let (loop, rawLoop) = try await costedRoundTrips(service, echoMessage, caller: .loop)
            rows.append(againstRaw("pinned: request/reply, 64 B (caller on the loop: preferring readerExecutor)", loop, rawLoop,
                                   baseline: "raw C seqpacket ping-pong, pinned", target: 1.5))
            rows.append(costRow(loop, rawLoop, target: 1.5))
            rows += try await oneWayRows(service, payload: payload, figure: "pinned: one-way messages, 64 B, pipelined")
            rows.append(try await dbusRow(echo: { count in
                try await sample(count, warmUp: 20) { _ = try await service.request(echoMessage) }
            }, figure: "pinned: request/reply, 64 B, against D-Bus (interleaved, caller on the global executor)"))
            await service.invalidate()
            return rows
        }
    }

    /// The pinned figures, measured by a child run of this binary under `taskset -c 0`; none,
    /// with a line saying so, where `taskset` is missing.
    func pinnedRows() throws -> [Row] {
        guard let taskset = ["/usr/bin/taskset", "/bin/taskset"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            log("pinned figures: skipped (no taskset; Debian's util-linux has it)")
            return []
        }
        let me = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let output = try run([taskset, "-c", "0", me, "--pinned", "--round-trips", String(roundTrips), "--messages", String(messages)])
        guard let line = output.split(separator: "\n").last(where: { $0.hasPrefix("[") }) else {
            throw BenchError("the pinned run printed no rows: \(output.escapedForTerminal())")
        }
        return try JSONDecoder().decode([Row].self, from: Data(line.utf8))
    }

    /// A round trip against the raw ping-pong's, measured alongside: its median within `target`
    /// times the raw one's (and its p99 within `p99Target` times, when given).
    func againstRaw(_ figure: String, _ ours: Stats, _ raw: Stats, baseline: String, target: Double, p99Target: Double? = nil) -> Row {
        let text = "≤ \(String(format: "%g", target))×" + (p99Target.map { " (p99 ≤ \(String(format: "%g", $0))×)" } ?? "")
        let met = ours.median <= target * raw.median && (p99Target.map { ours.p99 <= $0 * raw.p99 } ?? true)
        return Row(figure: figure, value: ours, baseline: baseline, baselineValue: raw, ratio: ours.median / raw.median,
                   ratioMeaning: "of raw (median)", target: text, met: met)
    }

    /// The line under a figure that gives its cost per operation next to its baseline's: CPU
    /// time of both processes, and context switches.
    func costRow(_ ours: Stats, _ theirs: Stats, target: Double = 2) -> Row {
        func text(_ stats: Stats) -> String {
            String(format: "%.1f µs CPU/op, %.2f switches/op", stats.cpuPerOperation ?? 0, stats.switchesPerOperation ?? 0)
        }
        let ratio = (ours.cpuPerOperation ?? 0) / max(theirs.cpuPerOperation ?? 1, 0.001)
        return Row(figure: "↳ CPU time per op, host + service", value: ours, summary: text(ours), baseline: "both processes of the baseline",
                   baselineValue: theirs, baselineSummary: text(theirs), ratio: ratio, ratioMeaning: "of raw CPU",
                   target: "≤ \(String(format: "%g", target))×", met: ratio <= target)
    }

    func baseline(_ arguments: String...) throws -> Stats {
        try Stats(baselineJSON: run([rawFolder + "/baselines"] + arguments).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// `--probe`: round trips and nothing else, with what the host and service spent on them.
    static func probe(roundTrips: Int, caller: Caller) async throws {
        let bench = try Bench(roundTrips: roundTrips, messages: 0, frames: 0, coldStarts: 0, log: { _ in })
        var logger = Logger(label: "bench")
        logger.logLevel = .error
        let registry = ServiceRegistry(scanning: [bench.services])
        try await withLauncher(registry: registry, configuration: Launcher.Configuration(hostIdentifier: "com.example.bench-host", logger: logger)) { launcher in
            let service = launcher.connection(to: "com.example.bench")
            let message = ServiceMessage(type: "echo", payload: [UInt8](repeating: 0x2A, count: 64))
            let (samples, cost) = try await bench.costedRoundTrips(roundTrips, warmUp: 1000, service, message, caller: caller)
            let stats = Stats(microseconds: samples).with(cost, over: samples.count)
            print(String(format: "%d round trips (%@): median %.1f µs, %.1f µs CPU and %.2f context switches per round trip, host + service",
                         samples.count, caller.description,
                         stats.median, stats.cpuPerOperation ?? 0, stats.switchesPerOperation ?? 0))
            #if LockCounts
            // For --counts: both processes' lock acquisitions so far (the counting build only).
            let serviceLocks = try await service.request(ServiceMessage(type: "locks")).text ?? "?"
            print("lock acquisitions: host \(LockCounter.total) service \(serviceLocks.prefix { $0 != "\n" })")
            // Where they were made, with REMOTEVIEW_LOCK_SITES set (for finding them).
            if getenv("REMOTEVIEW_LOCK_SITES") != nil {
                for (site, count) in LockCounter.sites.prefix(25) { print("host lock site \(site): \(count)") }
                for line in serviceLocks.split(separator: "\n").dropFirst() { print("service lock site \(line)") }
            }
            #endif
            await service.invalidate()
        }
    }

    /// The figure groups `--only` takes.
    static let groups = ["oneway", "fd", "frames", "present", "typing", "cold", "scale", "grpc", "dbus", "pinned", "share", "window"]

    func wants(_ group: String) -> Bool { only.isEmpty || only.contains(group) }

    func all() async throws -> [Row] {
        var logger = Logger(label: "bench")
        logger.logLevel = .error
        let registry = ServiceRegistry(scanning: [services])
        var rows = try await withLauncher(registry: registry, configuration: Launcher.Configuration(hostIdentifier: "com.example.bench-host", logger: logger)) { launcher in
            var rows: [Row] = []
            let service = launcher.connection(to: "com.example.bench")
            _ = try await service.request(ServiceMessage(type: "echo"))

            log("round trip …")
            let payload = [UInt8](repeating: 0x2A, count: 64)
            let echoMessage = ServiceMessage(type: "echo", payload: payload)
            // The default path: the caller on the global concurrent executor, as an app's task is.
            let (roundTrip, rawRoundTrip) = try await costedRoundTrips(service, echoMessage, caller: .global)
            rows.append(againstRaw("request/reply, 64 B (caller on the global executor)", roundTrip, rawRoundTrip,
                                   baseline: "raw C seqpacket ping-pong", target: 2, p99Target: 3))
            rows.append(costRow(roundTrip, rawRoundTrip))

            // The low-latency path: the caller prefers the executor of the thread that reads the
            // connection, so a reply resumes it on that thread, with no hand-off.
            let (preferring, rawPreferring) = try await costedRoundTrips(service, echoMessage, caller: .loop)
            rows.append(againstRaw("request/reply, 64 B (caller preferring ServiceConnection.readerExecutor)", preferring, rawPreferring,
                                   baseline: "raw C seqpacket ping-pong", target: 1.3))
            rows.append(costRow(preferring, rawPreferring))

            if wants("oneway") {
                log("one-way …")
                rows += try await oneWayRows(service, payload: payload)
            }

            if wants("fd") {
                log("round trip with an fd …")
                let file = try MemoryFile.sealed(name: "bench-item", contents: payload)
                let (withFD, rawWithFD) = try await interleaved(roundTrips / 2, framework: { count in
                    try await sample(count, warmUp: 50) {
                        let reply = try await service.request(ServiceMessage(type: "echo", payload: payload,
                                                                              attachments: [try Attachment(duplicating: file.fd)]))
                        _ = reply.attachments.first?.take()
                    }
                }, baseline: { count in try baselineSamples("fdpingpong", String(count)) })
                rows.append(Row(figure: "request/reply, 64 B + one fd", value: withFD, baseline: "raw seqpacket + SCM_RIGHTS", baselineValue: rawWithFD,
                                ratio: withFD.median / rawWithFD.median, ratioMeaning: "of raw (median)", target: "(as the round trip)", met: nil))
            }

            // The peers a user would pick instead, each interleaved with the same RemoteView round
            // trip (alternating chunks), so both sides of each ratio see the same machine.
            func echo(_ count: Int) async throws -> [Double] {
                try await sample(count, warmUp: 20) { _ = try await service.request(ServiceMessage(type: "echo", payload: payload)) }
            }
            if wants("grpc") {
                log("gRPC …")
                // Fewer calls (each is ~1 ms; the peer warms its client up in every chunk).
                let compared = try await withGRPCServer { peer, socket in
                    try await interleaved(max(roundTrips / 4, 10), chunks: 5, framework: echo, baseline: { count in
                        try Stats.samples(baselineJSON: run([peer, "call", socket, String(count), "200", "samples"])
                            .trimmingCharacters(in: .whitespacesAndNewlines))
                    })
                }
                if let (ours, grpc) = compared {
                    rows.append(versus("gRPC", "gRPC-Swift 2 unary over a Unix socket (NIO, HTTP/2)", ours: ours, theirs: grpc, target: 40))
                }
            }
            if wants("dbus") {
                log("D-Bus …")
                rows.append(try await dbusRow(echo: echo))
            }
            if wants("pinned") {
                log("pinned (a child run under taskset -c 0) …")
                rows += try pinnedRows()
            }

            if wants("frames") {
                log("frames …")
                let view = RemoteView(connection: service)
                try await view.present(width: 1920, height: 1080)
                try await view.settle()
                let full = try await stream(view, region: PixelRect(x: 0, y: 0, width: 1920, height: 1080), frames: frames)
                let rawFull = try baseline("frame", "1920", "1080", String(frames))
                rows.append(Row(figure: "1920×1080 full damage: commit → composited", value: full, baseline: "C memfd producer/consumer, one memcpy",
                                baselineValue: rawFull, ratio: (full.perSecond ?? 0) / (rawFull.perSecond ?? 1), ratioMeaning: "of the limit's fps",
                                target: "fps ≥ 0.85×, latency ≤ limit + 0.1 ms",
                                met: (full.perSecond ?? 0) >= 0.85 * (rawFull.perSecond ?? 0) && full.median <= rawFull.median + 100))
                let small = try await stream(view, region: PixelRect(x: 928, y: 508, width: 64, height: 64), frames: frames * 4)
                rows.append(Row(figure: "64×64 damage: commit → composited", value: small, baseline: "RemoteView request/reply (above)",
                                baselineValue: roundTrip, ratio: small.median / roundTrip.median, ratioMeaning: "of the round trip",
                                target: "≤ 2×", met: small.median <= 2 * roundTrip.median))
                log("round trip while 4 views stream 1920×1080 …")
                rows += try await streamingRoundTripRows(launcher: launcher, payload: payload, fps: 60)
                rows += try await streamingRoundTripRows(launcher: launcher, payload: payload)
                await service.invalidate()
            }

            if wants("present") {
                let presents = max(coldStarts * 3, 30)
                /// `presents` warm presents of `identifier`'s view (its process kept running by a
                /// connection of its own), with what host and service spent on them; and the
                /// cost per present as text (CPU and thread hand-offs, each a context switch,
                /// host and service; the service's alone).
                func warmPresents(of identifier: String) async throws -> (Stats, String) {
                    let warm = launcher.connection(to: identifier)
                    _ = try await warm.request(ServiceMessage(type: "echo"))  // keeps the shared process running
                    _ = try await startTimes(5, warmUp: 0, of: identifier, on: launcher, until: presentedFirstFrame)
                    let host = Cost.ownProcess(), service = try await usage(of: warm)
                    var present = try await startSamples(presents, warmUp: 0, of: identifier, on: launcher, until: presentedFirstFrame)
                    let serviceSpent = try await usage(of: warm) - service
                    present = present.with(Cost.ownProcess() - host + serviceSpent, over: presents)
                    await warm.invalidate()
                    let cost = String(format: "%.0f µs CPU, %.1f switches (the service: %.0f µs CPU, %.1f switches)",
                                      present.cpuPerOperation ?? 0, present.switchesPerOperation ?? 0,
                                      serviceSpent.cpuMicroseconds / Double(presents), serviceSpent.switches / Double(presents))
                    return (present, cost)
                }
                log("warm present …")
                let (present, perPresent) = try await warmPresents(of: "com.example.bench")
                rows.append(Row(figure: "warm present (new connection, running service) → first frame", value: present,
                                baseline: "RemoteView request/reply (above)", baselineValue: roundTrip, ratio: present.median / roundTrip.median,
                                ratioMeaning: "of the round trip", target: "≤ 5×", met: present.median <= 5 * roundTrip.median))
                // Where a present's time goes that the clock does not show.
                rows.append(Row(figure: "↳ cost per warm present, host + service", value: present, summary: perPresent,
                                baseline: "one round trip's (above)", baselineValue: roundTrip,
                                baselineSummary: String(format: "%.1f µs CPU, %.2f switches", roundTrip.cpuPerOperation ?? 0, roundTrip.switchesPerOperation ?? 0),
                                ratio: (present.cpuPerOperation ?? 0) / max(roundTrip.cpuPerOperation ?? 1, 0.001),
                                ratioMeaning: "of a round trip's CPU", target: "–", met: nil))

                // The same, of a view that lays out and draws text (six labels in five scripts, a
                // field, two buttons): what text costs a present once the process has its fonts.
                log("warm present of a view of text …")
                let (textPresent, perTextPresent) = try await warmPresents(of: "com.example.bench.text")
                rows.append(Row(figure: "warm present of a view of text → first frame", value: textPresent,
                                baseline: "warm present of the solid view (above)", baselineValue: present, ratio: textPresent.median / present.median,
                                ratioMeaning: "of the solid view's", target: "–", met: nil))
                rows.append(Row(figure: "↳ cost per warm present of text, host + service", value: textPresent, summary: perTextPresent,
                                baseline: "the solid view's (above)", baselineValue: present, baselineSummary: perPresent,
                                ratio: (textPresent.cpuPerOperation ?? 0) / max(present.cpuPerOperation ?? 1, 0.001),
                                ratioMeaning: "of the solid view's CPU", target: "–", met: nil))
            }
            return rows
        }

        if wants("typing") {
            log("typing: keystrokes into a view of text, the host reading its tree and not …")
            rows += try await typingRows(registry: registry, logger: logger)
        }

        if wants("cold") {
            log("cold starts …")
            rows += try await coldStartRows(registry: registry, logger: logger)
        }

        if wants("share") {
            rows += try await shareRows(registry: registry, logger: logger)
        }

        if wants("scale") {
            log("scale: \(scaleServices) sandboxed services streaming …")
            rows.append(try await scaleRow(registry: registry, logger: logger))
        }

        if wants("window") {
            log("window: the animation service at 1280×720 under Xvfb, and the window alone …")
            rows += try windowRows()
        }

        return rows
    }

    /// What `demo-share window --bench` printed: frames shown per second, the time from a frame
    /// being ready to `SDL_RenderPresent` returning, and the host's CPU use.
    struct WindowFigures {
        var fps: Double, median: Double, p99: Double, cpuPercent: Double, frames: Int, renderer: String

        init(output: String) throws {
            func number(after marker: String, in line: Substring) -> Double? {
                guard let range = line.range(of: marker) else { return nil }
                return Double(line[range.upperBound...].prefix { $0.isNumber || $0 == "." })
            }
            var fps: Double?, median: Double?, p99: Double?, cpu: Double?, frames: Int?, renderer: String?
            for line in output.split(separator: "\n") {
                if line.hasPrefix("window: bench ") { renderer = line.components(separatedBy: "renderer ").last }
                if line.contains(" frames shown in ") {
                    frames = Int(line.dropFirst("window: ".count).prefix { $0.isNumber })
                    fps = number(after: "s: ", in: line)
                }
                if line.contains("SDL_RenderPresent returning") {
                    median = number(after: "median ", in: line).map { $0 * 1000 }
                    p99 = number(after: "p99 ", in: line).map { $0 * 1000 }
                }
                if line.hasPrefix("window: host CPU ") { cpu = number(after: "CPU ", in: line) }
            }
            guard let fps, let median, let p99, let cpu, let frames, let renderer else {
                throw BenchError("demo-share window --bench printed no figures: \(output)")
            }
            (self.fps, self.median, self.p99, self.cpuPercent, self.frames, self.renderer) = (fps, median, p99, cpu, frames, renderer)
        }
    }

    /// The window figure (the window issue): the demo's animation service repainting a
    /// 1280×720 view, shown by `demo-share window` at the display's pace under Xvfb, against the
    /// same window repainting the same pixels drawn in its own process (no service, no RemoteView).
    /// Interleaved, three runs of each; the medians of the runs. Xvfb gives SDL its software
    /// renderer, so these are a software renderer's figures.
    func windowRows() throws -> [Row] {
        guard access("/usr/bin/xvfb-run", X_OK) == 0 else {
            log("window: skipped, xvfb-run is missing (scripts/bootstrap installs xvfb)")
            return []
        }
        // demo-share as the main package builds it (release), not linked here: this package
        // links Cairo statically, with an X11 of its own beside the one SDL loads, and SDL's
        // software renderer then presents without waiting for the display.
        let root = String(try Self.sourceFolder(from: benchService).dropLast("/Benchmarks/raw".count))
        let demo = root + "/.build/release/demo-share"
        log("window: building demo-share (swift build -c release --product demo-share) …")
        _ = try run(["/usr/bin/env", "swift", "build", "-c", "release", "--product", "demo-share", "--package-path", root])
        guard access(demo, X_OK) == 0 else { throw BenchError("demo-share is not at \(demo) after building it") }
        let seconds = max(2.0, Double(frames) / 200)
        func once(_ baseline: Bool) throws -> WindowFigures {
            let output = try run(["/usr/bin/xvfb-run", "-a", "-s", "-screen 0 1400x900x24", "/usr/bin/env", "SDL_RENDER_DRIVER=software",
                                  demo, "window", "--bench", String(seconds)] + (baseline ? ["--bench-baseline"] : []))
            return try WindowFigures(output: output)
        }
        var ours: [WindowFigures] = [], theirs: [WindowFigures] = []
        for _ in 0..<3 {
            theirs.append(try once(true))
            ours.append(try once(false))
        }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        func stats(_ runs: [WindowFigures]) -> Stats {
            Stats(median: median(runs.map(\.median)), p99: median(runs.map(\.p99)), min: runs.map(\.median).min() ?? 0,
                  max: runs.map(\.median).max() ?? 0, count: runs.reduce(0) { $0 + $1.frames }, perSecond: median(runs.map(\.fps)))
        }
        let remote = stats(ours), local = stats(theirs)
        func summary(_ runs: [WindowFigures], _ stats: Stats, from: String) -> String {
            String(format: "%.1f fps; %@ to present %.1f ms (p99 %.1f ms); host CPU %.0f%%", stats.perSecond ?? 0, from,
                   stats.median / 1000, stats.p99 / 1000, median(runs.map(\.cpuPercent)))
        }
        let renderer = ours.first?.renderer ?? "?"
        let fpsRatio = (remote.perSecond ?? 0) / (local.perSecond ?? 1)
        return [Row(figure: "window, 1280×720 repainted every frame, shown at vsync (Xvfb, \(renderer) renderer)", value: remote,
                    summary: summary(ours, remote, from: "commit"),
                    baseline: "the same window drawing the same frames itself (no service)", baselineValue: local,
                    baselineSummary: summary(theirs, local, from: "drawing"),
                    ratio: fpsRatio, ratioMeaning: "of the window's own fps", target: "≥ 0.95× (the display's rate)",
                    met: fpsRatio >= 0.95)]
    }

    /// 64 sandboxed services, each shown at 320×240 and repainting all of it 30 times a second
    /// for 10 s: the host's CPU and RSS while it composites them all, and each service's RSS idle
    /// and streaming. The baseline is the same host idle (no baseline can stream like this).
    func scaleRow(registry: ServiceRegistry, logger: Logger) async throws -> Row {
        let configuration = Launcher.Configuration(hostIdentifier: "com.example.bench-host", logger: logger)
        let count = scaleServices, seconds = scaleSeconds
        return try await withLauncher(registry: registry, configuration: configuration) { launcher in
            var views: [RemoteView] = []
            for _ in 0..<count {
                let view = RemoteView(connection: launcher.connection(to: "com.example.bench.scale"))
                try await view.present(width: 320, height: 240)
                views.append(view)
            }
            for view in views { try await view.settle() }
            func serviceRSS() async -> [Double] {
                await launcher.status().flatMap(\.processes).compactMap { $0.residentBytes.map { Double($0) / 1_048_576 } }
            }
            let idleRSS = Stats(microseconds: await serviceRSS())
            let idleHost = Self.hostUsage()
            // Every view's damage is drained as a toolkit would; frames are counted. The run is a
            // window of time, so this waits for time (it is a measurement, not a test).
            let frames = try await withThrowingTaskGroup(of: Int.self) { group in
                for view in views {
                    group.addTask {
                        var seen = 0
                        for await _ in view.damage { seen += 1 }
                        return seen
                    }
                }
                let start = Self.hostUsage()
                for view in views { _ = try await view.connection.request(ServiceMessage(type: "tick", text: "30 \(seconds)")) }
                try await Task.sleep(for: .seconds(seconds / 2))
                let streamingRSS = await serviceRSS()
                try await Task.sleep(for: .seconds(seconds / 2))
                let end = Self.hostUsage()
                group.cancelAll()
                var total = 0
                for try await seen in group { total += seen }
                return (total, start, end, streamingRSS)
            }
            let (total, start, end, streamingRSS) = frames
            let cpu = (end.cpu - start.cpu) / (end.wall - start.wall) * 100
            let streaming = Stats(microseconds: streamingRSS)
            for view in views { await view.connection.invalidate() }
            let summary = String(format: "host CPU %.0f %% of one core, host RSS %.0f MiB; %.1f fps per service; service RSS idle %.1f MiB, streaming %.1f MiB (median)",
                                 cpu, end.rss, Double(total) / Double(count) / seconds, idleRSS.median, streaming.median)
            return Row(figure: "scale: \(count) sandboxed services × 320×240 @ 30 fps, \(Int(seconds)) s", value: streaming, summary: summary,
                       baseline: "the same host, idle", baselineValue: Stats(microseconds: [idleHost.rss]),
                       baselineSummary: String(format: "host RSS %.0f MiB with the %d services idle", idleHost.rss, count),
                       ratio: cpu / 100, ratioMeaning: "cores of host CPU", target: "< 1 core", met: cpu < 100)
        }
    }

    /// This process's CPU seconds, wall seconds and RSS in MiB.
    static func hostUsage() -> (cpu: Double, wall: Double, rss: Double) {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        let cpu = Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
        var rss = 0.0
        if let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
           let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) {
            rss = (Double(line.split(separator: " ").dropFirst().first ?? "0") ?? 0) / 1024
        }
        return (cpu, nowMicroseconds() / 1e6, rss)
    }

    /// gRPC-Swift's unary round trip, server and client in their own processes; `nil` (with a
    /// note) when the peer is not built.
    /// Runs `body` with a gRPC-Swift Echo server listening on a Unix socket, and the peer binary
    /// that calls it; `nil` when the peer is not built.
    func withGRPCServer<R>(_ body: (_ peer: String, _ socket: String) async throws -> R) async throws -> R? {
        let peer = benchService.replacingOccurrences(of: "/bench-service", with: "/grpc-peer")
        guard access(peer, X_OK) == 0 else {
            log("  grpc-peer is not built (swift build -c release --product grpc-peer): skipped")
            return nil
        }
        let socket = rawFolder + "/grpc.sock"
        var fds: [Int32] = [-1, -1]
        _ = pipe(&fds)
        close(fds[0])
        let server = try spawn([peer, "serve", socket], fd3: fds[1])
        close(fds[1])
        defer {
            kill(server, SIGKILL)
            var status: Int32 = 0
            waitpid(server, &status, 0)
        }
        // The server is up once its socket accepts.
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: socket.utf8.prefix($0.count - 1)) }
        for attempt in 0... {
            let probe = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(probe, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            } == 0
            close(probe)
            if connected { break }
            guard attempt < 5000 else { throw BenchError("the gRPC server never listened on \(socket)") }
            usleep(1000)
        }
        return try await body(peer, socket)
    }

    /// Streams `frames` frames of `region` and reads each one's stamp from the host's image.
    func stream(_ view: RemoteView, region: PixelRect, frames: Int) async throws -> Stats {
        var damage = view.damage.makeAsyncIterator()
        var latencies: [Double] = []
        var started: UInt64 = 0, finished: UInt64 = 0
        for (phase, count) in [("warm-up", 30), ("measured", frames)] {
            let reply = try await view.connection.request(ServiceMessage(type: "stream", text: "\(region.x) \(region.y) \(region.width) \(region.height) \(count)"))
            guard let last = reply.text.flatMap({ UInt32($0) }) else { throw BenchError("the stream did not say its last frame") }
            started = monotonicNanoseconds()
            var frame: UInt32 = 0
            while frame != last, await damage.next() != nil {
                let now = monotonicNanoseconds()
                // Read in place (a snapshot held across the next composite would cost the host a copy).
                let (number, stamp) = view.withImage { image -> (UInt32, UInt64) in
                    var number: UInt32 = 0, stamp: UInt64 = 0
                    for index in 0..<4 { number |= (image.pixel(x: region.x + index, y: region.y) & 0xFF) << (8 * UInt32(index)) }
                    for index in 0..<8 { stamp |= UInt64(image.pixel(x: region.x + 4 + index, y: region.y) & 0xFF) << (8 * UInt64(index)) }
                    return (number, stamp)
                }
                frame = number
                if phase == "measured" { latencies.append(Double(now &- stamp) / 1000) }
            }
            finished = monotonicNanoseconds()
        }
        return Stats(microseconds: latencies, perSecond: Double(frames) / (Double(finished - started) / 1e9))
    }

    /// Whether compositing stalls other connections: a request/reply on one connection while 4
    /// other views of the same (shared) service stream 1920×1080 at full damage as fast as
    /// frame_done allows, against the same round trip just before they start; and the frames
    /// per second each view reached meanwhile.
    func streamingRoundTripRows(launcher: Launcher, payload: [UInt8], fps: Int? = nil) async throws -> [Row] {
        let probe = launcher.connection(to: "com.example.bench")
        let message = ServiceMessage(type: "echo", payload: payload)
        let count = max(roundTrips / 4, 1000)
        let idle = Stats(microseconds: try await sample(count, warmUp: 100) { _ = try await probe.request(message) })
        var views: [RemoteView] = []
        for _ in 0..<4 {
            let view = RemoteView(connection: launcher.connection(to: "com.example.bench"))
            try await view.present(width: 1920, height: 1080)
            try await view.settle()
            views.append(view)
        }
        final class Counters: Sendable {
            let frames: Mutex<[Int]>
            init(_ count: Int) { frames = Mutex([Int](repeating: 0, count: count)) }
        }
        let counters = Counters(views.count)
        let consumers = views.enumerated().map { index, view in
            Task { for await _ in view.damage { counters.frames.withLock { $0[index] += 1 } } }
        }
        for view in views {
            // As fast as frame_done allows, or `fps` times a second (a display's pace).
            let request = fps.map { ServiceMessage(type: "tick", text: "\($0) 600") } ?? ServiceMessage(type: "stream", text: "0 0 1920 1080 100000000")
            _ = try await view.connection.request(request)
        }
        for _ in 0..<100 { _ = try await probe.request(message) }
        let before = counters.frames.withLock { $0 }, start = nowMicroseconds()
        let loaded = Stats(microseconds: try await sample(count, warmUp: 0) { _ = try await probe.request(message) })
        let seconds = (nowMicroseconds() - start) / 1e6
        let after = counters.frames.withLock { $0 }
        for view in views { await view.connection.invalidate() }
        for consumer in consumers { consumer.cancel() }
        await probe.invalidate()
        let rates = zip(after, before).map { Double($0 - $1) / seconds }
        let ratio = loaded.median / idle.median
        return [
            Row(figure: "request/reply, 64 B, while 4 views of the service stream 1920×1080, full damage, \(fps.map { "\($0) fps each" } ?? "as fast as frame_done allows")", value: loaded,
                baseline: "the same round trip just before, nothing streaming", baselineValue: idle, ratio: ratio,
                ratioMeaning: "of idle (median)", target: "≤ 2×", met: ratio <= 2),
            Row(figure: "↳ the 4 views meanwhile", value: loaded,
                summary: String(format: "%@ fps (%.0f frames/s in all)", rates.map { String(format: "%.0f", $0) }.joined(separator: ", "), rates.reduce(0, +)),
                baseline: "–", baselineValue: idle, baselineSummary: "–", ratio: 0, ratioMeaning: "",
                target: "(reported)", met: nil),
        ]
    }

    /// Times `count` new connections to `identifier`, each from its making until `first` is done
    /// with it (after `warmUp` untimed ones). Invalidating the connection afterwards (which stops
    /// a per-connection process, so the next one starts cold) is not timed.
    func startSamples(_ count: Int, warmUp: Int, of identifier: String, on launcher: Launcher,
                      until first: (ServiceConnection) async throws -> Void) async throws -> Stats {
        Stats(microseconds: try await startTimes(count, warmUp: warmUp, of: identifier, on: launcher, until: first))
    }

    /// The samples of ``startSamples(_:warmUp:of:on:until:)``, in microseconds.
    func startTimes(_ count: Int, warmUp: Int, of identifier: String, on launcher: Launcher,
                    until first: (ServiceConnection) async throws -> Void) async throws -> [Double] {
        var samples: [Double] = []
        for index in -warmUp..<count {
            let connection = launcher.connection(to: identifier)
            let start = nowMicroseconds()
            try await first(connection)
            if index >= 0 { samples.append(nowMicroseconds() - start) }
            await connection.invalidate()
        }
        return samples
    }

    /// A view of text (`com.example.bench.text`) with its field focused, for typing into, and
    /// when each of its frames and tree updates reached the host (monotonic µs, in order).
    /// Each keystroke's cost counts one settle round trip too (before it, so that nothing of
    /// the keystroke before is still coming), with the tree and without.
    final class TypingView: Sendable {
        let view: RemoteView
        let service: ServiceConnection
        let frames = Arrivals(), trees = Arrivals()
        let readers: [Task<Void, Never>]
        /// Whether its host reads the tree.
        let readsTree: Bool

        init(view: RemoteView, service: ServiceConnection, tree: Bool) {
            self.view = view
            self.service = service
            readsTree = tree
            let frames = self.frames, trees = self.trees
            readers = [Task { for await _ in view.damage { frames.arrived() } }]
                + (tree ? [Task { for await change in view.accessibility.changes() { trees.arrived(change) } }] : [])
        }

        deinit { readers.forEach { $0.cancel() } }
    }

    /// Arrivals of one kind: their times and sizes, and a wait for one by its number.
    final class Arrivals: Sendable {
        private struct State {
            var times: [Double] = []
            /// The changes (the tree's), whose bytes are counted after the timing.
            var changes: [AccessibilityChange?] = []
            /// Who waits, for which arrival.
            var waiter: (index: Int, continuation: CheckedContinuation<Void, Never>)?
        }
        private let state = Mutex(State())

        func arrived(_ change: AccessibilityChange? = nil) {
            let now = nowMicroseconds()
            let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                state.times.append(now)
                state.changes.append(change)
                guard let waiter = state.waiter, state.times.count > waiter.index else { return nil }
                state.waiter = nil
                return waiter.continuation
            }
            waiter?.resume()
        }

        var count: Int { state.withLock { $0.times.count } }

        /// The time of arrival number `index` (from 0) and what came, once it has come.
        func arrival(_ index: Int) async -> (Double, AccessibilityChange?) {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = state.withLock { state in
                    if state.times.count > index { return true }
                    state.waiter = (index, continuation)
                    return false
                }
                if ready { continuation.resume() }
            }
            return state.withLock { ($0.times[index], $0.changes[index]) }
        }
    }

    /// What each keystroke costs, the host reading the view's semantic tree (its launcher
    /// announces `accessibility`, so the service describes the tree after each frame and sends
    /// the changed node) and not (the same view, a launcher with `readsAccessibility` off): a
    /// typed "x" and a Backspace, alternately, each timed from the send to its frame composited
    /// on the host and, when read, to the tree update that follows it; the update's bytes; both
    /// processes' CPU time and context switches per keystroke. The two alternate in chunks, so
    /// both see the same machine.
    func typingRows(registry: ServiceRegistry, logger: Logger) async throws -> [Row] {
        let reading = Launcher.Configuration(hostIdentifier: "com.example.bench-host", logger: logger)  // reads trees (the default)
        var blindConfiguration = reading
        blindConfiguration.readsAccessibility = false
        let blind = blindConfiguration
        let keystrokes = max(roundTrips / 10, 100), chunks = 5
        return try await withLauncher(registry: registry, configuration: reading) { readingLauncher in
            try await withLauncher(registry: registry, configuration: blind) { blindLauncher in
                func open(_ launcher: Launcher, tree: Bool) async throws -> TypingView {
                    let service = launcher.connection(to: "com.example.bench.text")
                    let typing = TypingView(view: RemoteView(connection: service), service: service, tree: tree)
                    try await typing.view.present(width: 320, height: 240)
                    // The field is the first control Tab reaches (the labels take no focus).
                    try await typing.view.send(.focus(true))
                    try await typing.view.press(keyCode: KeyCode.tab)
                    try await typing.view.settle()
                    if tree {
                        _ = try await typing.view.accessibility.node(timeout: .seconds(10), describedAs: "the focused field") {
                            $0.focusedNode?.role == .textField ? $0.focusedNode : nil
                        }
                    }
                    return typing
                }
                /// `count` keystrokes: frame latencies, tree-after-frame latencies, bytes, cost.
                func type(_ typing: TypingView, _ count: Int) async throws -> ([Double], [Double], [Double], Cost) {
                    var frames: [Double] = [], trees: [Double] = [], changes: [AccessibilityChange] = []
                    let host = Cost.ownProcess(), service = try await usage(of: typing.service)
                    for index in 0..<count {
                        // Settled: no frame or update of an earlier keystroke is still coming.
                        try await typing.view.settle()
                        let frame = typing.frames.count, tree = typing.trees.count
                        let start = nowMicroseconds()
                        if index % 2 == 0 { try await typing.view.type("x") } else { try await typing.view.press(keyCode: KeyCode.backspace) }
                        let (framed, _) = await typing.frames.arrival(frame)
                        frames.append(framed - start)
                        if typing.readsTree {
                            let (published, change) = await typing.trees.arrival(tree)
                            trees.append(published - framed)
                            if let change { changes.append(change) }
                        }
                    }
                    let spent = Cost.ownProcess() - host + (try await usage(of: typing.service) - service)
                    // Counted now, outside what was measured (it encodes each update again).
                    return (frames, trees, changes.map { Double($0.wireBytes) }, spent)
                }
                let withTree = try await open(readingLauncher, tree: true)
                let without = try await open(blindLauncher, tree: false)
                var framesWith: [Double] = [], treesWith: [Double] = [], bytesWith: [Double] = [], costWith = Cost()
                var framesWithout: [Double] = [], costWithout = Cost()
                _ = try await type(withTree, 20)
                _ = try await type(without, 20)
                for _ in 0..<chunks {
                    let a = try await type(withTree, keystrokes / chunks)
                    framesWith += a.0; treesWith += a.1; bytesWith += a.2; costWith = costWith + a.3
                    let b = try await type(without, keystrokes / chunks)
                    framesWithout += b.0; costWithout = costWithout + b.3
                }
                await withTree.service.invalidate()
                await without.service.invalidate()
                let total = keystrokes / chunks * chunks
                let frameWith = Stats(microseconds: framesWith).with(costWith, over: total)
                let frameWithout = Stats(microseconds: framesWithout).with(costWithout, over: total)
                let tree = Stats(microseconds: treesWith)
                let sizes = Stats(microseconds: bytesWith)
                func cost(_ stats: Stats) -> String {
                    String(format: "%.0f µs CPU, %.1f switches", stats.cpuPerOperation ?? 0, stats.switchesPerOperation ?? 0)
                }
                return [
                    Row(figure: "keystroke → its frame composited, the host reading the tree", value: frameWith,
                        baseline: "the same, the host not reading it", baselineValue: frameWithout, ratio: frameWith.median / frameWithout.median,
                        ratioMeaning: "of not reading (median)", target: "–", met: nil),
                    Row(figure: "↳ the tree update after its frame (frame composited → tree published)", value: tree,
                        baseline: "the keystroke's frame (above)", baselineValue: frameWith, ratio: tree.median / frameWith.median,
                        ratioMeaning: "of the frame's latency", target: "–", met: nil),
                    Row(figure: "↳ bytes of the tree update per keystroke", value: sizes,
                        summary: String(format: "%.0f B (%.0f–%.0f)", sizes.median, sizes.min, sizes.max),
                        baseline: "–", baselineValue: sizes, ratio: 1, ratioMeaning: "", target: "–", met: nil),
                    Row(figure: "↳ cost per keystroke, host + service, reading the tree", value: frameWith, summary: cost(frameWith),
                        baseline: "not reading it", baselineValue: frameWithout, baselineSummary: cost(frameWithout),
                        ratio: (frameWith.cpuPerOperation ?? 0) / max(frameWithout.cpuPerOperation ?? 1, 0.001),
                        ratioMeaning: "of not reading's CPU", target: "–", met: nil),
                ]
            }
        }
    }

    /// Presents a 320×240 view of the connection's service and waits for its first frame.
    func presentedFirstFrame(_ connection: ServiceConnection) async throws {
        let view = RemoteView(connection: connection)
        try await view.present(width: 320, height: 240)
        var damage = view.damage.makeAsyncIterator()
        guard await damage.next() != nil else { throw BenchError("the view ended before its first frame") }
    }

    /// A never-started service → its first frame on the host, sandboxed and not, next to a
    /// trivial static binary that sends one message over fd 3, spawned with bubblewrap and plainly.
    func coldStartRows(registry: ServiceRegistry, logger: Logger) async throws -> [Row] {
        var rows: [Row] = []
        var activationRows: [Row] = []
        let floors = try spawnFloors()
        for sandboxed in [true, false] {
            let configuration = Launcher.Configuration(hostIdentifier: "com.example.bench-host", sandbox: sandboxed ? .bubblewrap() : .unsandboxed,
                                                       logger: logger)
            let (cold, reply, phases, versus, textCold) = try await withLauncher(registry: registry, configuration: configuration) { launcher -> (Stats, Stats, [Row], Row?, Stats) in
                let frame = try await startSamples(coldStarts, warmUp: 2, of: "com.example.bench.cold", on: launcher, until: presentedFirstFrame)
                // A view of text, cold: what its first layout costs a fresh process (fontconfig
                // finding the fonts, Pango's first layout) on top of the solid view's start.
                let textFrame = try await startSamples(coldStarts, warmUp: 2, of: "com.example.bench.text.cold", on: launcher, until: presentedFirstFrame)
                // The same start to a first reply instead: what the frame adds is the difference.
                func replies(_ count: Int) async throws -> [Double] {
                    try await startTimes(count, warmUp: 1, of: "com.example.bench.cold", on: launcher) { connection in
                        _ = try await connection.request(ServiceMessage(type: "echo"))
                    }
                }
                let phases = try await startPhases(coldStarts, on: launcher, sandboxed: sandboxed, floor: sandboxed ? floors.bubblewrap : floors.plain)
                // Unsandboxed, Linux's own on-demand peer: D-Bus activating a C service, interleaved.
                guard !sandboxed, wants("dbus") else { return (frame, Stats(microseconds: try await replies(coldStarts)), phases, nil, textFrame) }
                log("D-Bus activation …")
                let bus = try PrivateBus(folder: rawFolder + "/dbus", peer: rawFolder + "/dbus-peer")
                defer { bus.stop() }
                let (reply, activation) = try await interleaved(coldStarts, chunks: 5, framework: replies, baseline: { count in
                    try Stats.samples(baselineJSON: bus.peer("activate", String(count), "samples").trimmingCharacters(in: .whitespacesAndNewlines))
                })
                let versus = Row(figure: "cold start → first reply, unsandboxed, against D-Bus (interleaved)", value: reply,
                                 baseline: "D-Bus activation of a C service → first reply", baselineValue: activation,
                                 ratio: reply.median / activation.median, ratioMeaning: "of D-Bus activation", target: "≤ 1×",
                                 met: reply.median <= activation.median)
                return (frame, reply, phases, versus, textFrame)
            }
            let floor = sandboxed ? floors.bubblewrap : floors.plain
            let mode = sandboxed ? "sandboxed" : "unsandboxed"
            rows.append(Row(figure: "cold start → first frame, \(mode)", value: cold,
                            baseline: sandboxed ? "bubblewrap + static binary, one message on fd 3" : "plain spawn of the same",
                            baselineValue: floor, ratio: cold.median / floor.median, ratioMeaning: "of the floor",
                            target: sandboxed ? "≤ 1.3× the bubblewrap floor" : "(against D-Bus below)",
                            met: sandboxed ? cold.median <= 1.3 * floor.median : nil))
            rows.append(Row(figure: "cold start of a view of text → first frame, \(mode)", value: textCold,
                            baseline: "cold start → first frame of the solid view (above)", baselineValue: cold,
                            ratio: textCold.median / cold.median, ratioMeaning: "of the solid view's",
                            target: "(diagnostic: the difference is the first text layout in a fresh process)", met: nil))
            rows.append(Row(figure: "cold start → first reply, \(mode)", value: reply,
                            baseline: sandboxed ? "bubblewrap + static binary, one message on fd 3" : "plain spawn of the same",
                            baselineValue: floor, ratio: reply.median / floor.median, ratioMeaning: "of the floor",
                            target: "(diagnostic: the frame's share is the row above minus this)", met: nil))
            rows += phases
            if let versus { activationRows.append(versus) }
        }
        return rows + activationRows
    }

    /// A share from `perform` to the activity's first frame on the host, cold (a process per
    /// share) and warm (the process runs already), each next to the same start without a share
    /// (a connection presenting the same view), interleaved; and from the activity's
    /// `complete()` to the host's outcome, next to the request/reply round trip.
    func shareRows(registry: ServiceRegistry, logger: Logger) async throws -> [Row] {
        let configuration = Launcher.Configuration(hostIdentifier: "com.example.bench-host", logger: logger)
        return try await withLauncher(registry: registry, configuration: configuration) { launcher in
            let sheet = ShareSheet(registry: registry, items: [try .text("a benchmark share")])
            func firstFrames(_ identifier: String, _ count: Int, warmUp: Int) async throws -> [Double] {
                guard let activity = sheet.activity(identifier) else { throw BenchError("\(identifier) is not offered: \(sheet.explanation(for: identifier) ?? "?")") }
                var samples: [Double] = []
                for index in -warmUp..<count {
                    let start = nowMicroseconds()
                    let session = try await sheet.perform(activity, launcher: launcher)
                    try await session.view.present(width: 320, height: 240)
                    var damage = session.view.damage.makeAsyncIterator()
                    guard await damage.next() != nil else { throw BenchError("the share's view ended before its first frame") }
                    if index >= 0 { samples.append(nowMicroseconds() - start) }
                    await session.close()
                }
                return samples
            }
            func plainFirstFrames(_ identifier: String, _ count: Int, warmUp: Int) async throws -> [Double] {
                try await startTimes(count, warmUp: warmUp, of: identifier, on: launcher, until: presentedFirstFrame)
            }
            let keepWarm = launcher.connection(to: "com.example.bench.share")
            _ = try await keepWarm.request(ServiceMessage(type: "echo"))
            log("share: perform → first frame, cold …")
            let (cold, coldPlain) = try await interleavedAsync(coldStarts, chunks: 5, framework: { try await firstFrames("com.example.bench.share.cold", $0, warmUp: 1) },
                                                          baseline: { try await plainFirstFrames("com.example.bench.cold", $0, warmUp: 1) })
            log("share: perform → first frame, warm …")
            let warmCount = max(coldStarts * 4, 40)
            let (warm, warmPlain) = try await interleavedAsync(warmCount, chunks: 5, framework: { try await firstFrames("com.example.bench.share", $0, warmUp: 2) },
                                                          baseline: { try await plainFirstFrames("com.example.bench.share", $0, warmUp: 2) })
            log("share: complete → outcome …")
            var completions: [Double] = []
            for index in -2..<warmCount {
                guard let activity = sheet.activity("com.example.bench.share") else { throw BenchError("com.example.bench.share is not offered") }
                let session = try await sheet.perform(activity, launcher: launcher)
                try await session.view.present(width: 64, height: 48)
                let reply = try await session.connection.request(ServiceMessage(type: "share.complete"))
                guard case .completed = await session.outcome else { throw BenchError("the share ended \(await session.outcome)") }
                let outcomeAt = Double(monotonicNanoseconds()) / 1000
                guard let stamp = reply.text.flatMap(Double.init) else { throw BenchError("share.complete replied \(reply)") }
                if index >= 0 { completions.append(outcomeAt - stamp / 1000) }
                await session.close()
            }
            let service = launcher.connection(to: "com.example.bench.share")
            let roundTrip = Stats(microseconds: try await sample(warmCount * 10, warmUp: 20) { _ = try await service.request(ServiceMessage(type: "echo")) })
            await service.invalidate()
            await keepWarm.invalidate()
            let complete = Stats(microseconds: completions)
            return [
                Row(figure: "share: perform → first frame, cold (sandboxed, interleaved)", value: cold,
                    baseline: "cold start → first frame of a plain view", baselineValue: coldPlain,
                    ratio: cold.median / coldPlain.median, ratioMeaning: "of the plain start", target: "(what the share adds: the capability check and the items)", met: nil),
                Row(figure: "share: perform → first frame, warm (process running, interleaved)", value: warm,
                    baseline: "new connection → first frame of a plain view", baselineValue: warmPlain,
                    ratio: warm.median / warmPlain.median, ratioMeaning: "of the plain start", target: "(diagnostic)", met: nil),
                Row(figure: "share: the activity's complete() → the host's outcome", value: complete,
                    baseline: "request/reply on the same service", baselineValue: roundTrip,
                    ratio: complete.median / roundTrip.median, ratioMeaning: "of a round trip",
                    target: "(diagnostic: two packets, the done update then the answer, each from the main actor)", met: nil),
            ]
        }
    }

    /// The small round trip against a peer's, measured interleaved: how many times faster it is.
    func versus(_ peer: String, _ baseline: String, ours: Stats, theirs: Stats, target: Double) -> Row {
        Row(figure: "request/reply, 64 B, against \(peer) (interleaved)", value: ours, baseline: baseline, baselineValue: theirs,
            ratio: theirs.median / ours.median, ratioMeaning: "RemoteView faster (median)",
            target: "≥ \(String(format: "%g", target))× faster", met: theirs.median >= target * ours.median)
    }

    /// Where a cold start's time goes: from making the connection to the service's own code
    /// (spawn, exec, the loader, the Swift runtime; the sandbox's set-up when sandboxed), from
    /// there to its first request handled (the SDK's start and the handshake), and from there
    /// to the reply at the host. Medians of each, over `count` starts.
    func startPhases(_ count: Int, on launcher: Launcher, sandboxed: Bool, floor: Stats) async throws -> [Row] {
        var toMain: [Double] = [], toHandled: [Double] = [], toHost: [Double] = [], total: [Double] = []
        for index in -1..<count {
            let connection = launcher.connection(to: "com.example.bench.cold")
            let start = monotonicNanoseconds()
            let reply = try await connection.request(ServiceMessage(type: "started"))
            let end = monotonicNanoseconds()
            await connection.invalidate()
            let stamps = (reply.text ?? "").split(separator: " ").compactMap { UInt64($0) }
            guard stamps.count == 2 else { throw BenchError("the service did not say when it started: \(reply.text ?? "")") }
            guard index >= 0 else { continue }
            toMain.append(Double(stamps[0] &- start) / 1000)
            toHandled.append(Double(stamps[1] &- stamps[0]) / 1000)
            toHost.append(Double(end &- stamps[1]) / 1000)
            total.append(Double(end &- start) / 1000)
        }
        func ms(_ samples: [Double]) -> String { String(format: "%.2f ms", Stats(microseconds: samples).median / 1000) }
        let mode = sandboxed ? "sandboxed" : "unsandboxed"
        let phases = Row(figure: "cold start phases, \(mode) (medians)", value: Stats(microseconds: total),
                         summary: "to the service's main \(ms(toMain)); main → first request handled \(ms(toHandled)); → reply at the host \(ms(toHost)); total \(ms(total))",
                         baseline: sandboxed ? "bubblewrap + static binary, one message on fd 3" : "plain spawn of the same", baselineValue: floor,
                         ratio: Stats(microseconds: toMain).median / floor.median, ratioMeaning: "to-main of the floor",
                         target: "(diagnostic)", met: nil)
        // The SDK's own start: from the service's main to its first request handled (the
        // runtime's first use of its types, the event loop, the handshake), against a fixed 0.5 ms.
        let sdk = Stats(microseconds: toHandled)
        let start = Row(figure: "SDK start, \(mode): service main → first request handled", value: sdk, baseline: "a fixed budget",
                        baselineValue: Stats(microseconds: [500]), ratio: sdk.median / 500, ratioMeaning: "of 0.5 ms",
                        target: "≤ 0.5 ms", met: sdk.median <= 500)
        return [phases, start]
    }

    /// The static binary started with its end of a socketpair at fd 3, until its message arrives
    /// and it is reaped: plainly, and in bubblewrap as the launcher would (namespaces, no network,
    /// cleared environment, no capabilities, only the binary bound).
    func spawnFloors() throws -> (plain: Stats, bubblewrap: Stats) {
        let hello = rawFolder + "/hello-fd3"
        let bubblewrap = ["/usr/bin/bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv", "--cap-drop", "ALL",
                          "--ro-bind", hello, "/hello", "--proc", "/proc", "--dev", "/dev", "/hello"]
        func once(_ arguments: [String]) throws -> Double {
            var fds: [Int32] = [0, 0]
            guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0, &fds) == 0 else { throw BenchError("socketpair failed") }
            defer { close(fds[0]) }
            let start = nowMicroseconds()
            let pid = try spawn(arguments, fd3: fds[1])
            close(fds[1])
            var buffer = [UInt8](repeating: 0, count: 64)
            guard recv(fds[0], &buffer, buffer.count, 0) == 64 else { throw BenchError("\(arguments[0]) sent nothing") }
            let elapsed = nowMicroseconds() - start
            var status: Int32 = 0
            waitpid(pid, &status, 0)
            return elapsed
        }
        func samples(_ arguments: [String]) throws -> Stats {
            for _ in 0..<3 { _ = try once(arguments) }
            return Stats(microseconds: try (0..<coldStarts).map { _ in try once(arguments) })
        }
        return (try samples([hello]), try samples(bubblewrap))
    }
}

/// A dbus-daemon of the benchmark's own (a session bus on a socket in `folder`) that activates
/// the C echo peer on demand.
final class PrivateBus {
    let daemon: pid_t
    let address: String
    let peerPath: String

    init(folder: String, peer: String) throws {
        mkdir(folder, 0o755)
        mkdir(folder + "/services", 0o755)
        unlink(folder + "/bus")
        try """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
              "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>unix:path=\(folder)/bus</listen>
              <servicedir>\(folder)/services</servicedir>
              <policy context="default"><allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/></policy>
            </busconfig>
            """.write(toFile: folder + "/bus.conf", atomically: true, encoding: .utf8)
        try "[D-BUS Service]\nName=com.example.BenchEcho\nExec=\(peer) server --exit-after-one\n"
            .write(toFile: folder + "/services/bench.service", atomically: true, encoding: .utf8)
        // Started with a clean signal mask (its children's exits reach it; Process would pass on
        // this worker thread's blocked signals); it prints its address on fd 3.
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw BenchError("pipe failed") }
        daemon = try spawn(["/usr/bin/dbus-daemon", "--config-file=\(folder)/bus.conf", "--nofork", "--print-address=3"], fd3: fds[1])
        close(fds[1])
        defer { close(fds[0]) }
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while read(fds[0], &byte, 1) == 1, byte != UInt8(ascii: "\n") { line.append(byte) }
        guard !line.isEmpty else { throw BenchError("dbus-daemon exited before printing its address") }
        address = String(decoding: line, as: UTF8.self)
        peerPath = peer
    }

    /// Runs the peer as a client of this bus; its JSON line.
    func peer(_ arguments: String...) throws -> String {
        try run([peerPath] + arguments, environment: ["BENCH_BUS_ADDRESS": address]).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A long-running echo server on the bus (for warm calls), once it owns its name.
    func startServer() throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: peerPath)
        process.arguments = ["server"]
        process.environment = ["BENCH_BUS_ADDRESS": address]
        try process.run()
        // One activation-free call proves it is there (the name is requested before serving).
        _ = try peer("call", "1")
        return process
    }

    func stop() {
        kill(daemon, SIGTERM)
        var status: Int32 = 0
        waitpid(daemon, &status, 0)
    }
}

/// Runs `body` on a thread of its own (blocking calls must not block a thread of Swift's
/// cooperative pool) and awaits what it returns or throws.
func onThreadOfItsOwn<R: Sendable>(_ body: @escaping @Sendable () throws(RemoteError) -> R) async throws(RemoteError) -> R {
    let result = await withUnsafeContinuation { (continuation: UnsafeContinuation<Result<R, RemoteError>, Never>) in
        let job = Unmanaged.passRetained(ThreadJob { continuation.resume(returning: Result { () throws(RemoteError) -> R in try body() }) }).toOpaque()
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { raw in
            Unmanaged<ThreadJob>.fromOpaque(raw!).takeRetainedValue().run()
            return nil
        }, job)
        precondition(created == 0, "pthread_create failed: \(created)")
        pthread_detach(thread)
    }
    return try result.get()
}

/// What ``onThreadOfItsOwn(_:)`` hands its thread.
final class ThreadJob: @unchecked Sendable {
    let run: () -> Void
    init(_ run: @escaping () -> Void) { self.run = run }
}
