import ArgumentParser
import Glibc
import RemoteHost

/// `remoteview-stress soak`: connect, one request, invalidate, again and again, against one
/// service; memory on both sides must stay flat.
struct Soak: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Connect/request/invalidate cycles against one service; fails when memory grows.",
        discussion: """
            Each cycle makes a ServiceConnection, sends one request ("echo") and invalidates it. \
            Prints the host's resident memory and heap in use (mallinfo2) and the service's \
            resident memory (/proc/PID/statm) and heap (its own report) at the start, after the \
            warm-up (the baseline), every 10% and at the end, with the growth per cycle; exits \
            non-zero when a figure grew more than --limit from the baseline to the end. In shared \
            mode one more connection holds the process for the whole run; with perConnection \
            every cycle starts a process, so only the host's figures are checked.
            """)

    enum Mode: String, ExpressibleByArgument, CaseIterable, Sendable {
        case shared, perConnection
    }

    @Option(help: "Cycles after the warm-up.")
    var cycles = 100_000

    @Option(help: "The service's instance policy: shared (one process) or perConnection (a process per cycle).")
    var mode = Mode.shared

    @Option(help: "Cycles before the baseline, so that tables and caches reach their size first.")
    var warmUp = 1000

    @Option(help: "The most a figure may grow from the baseline to the end, in bytes.")
    var limit = 1 << 20

    @Flag(help: "Run the service without bubblewrap.")
    var unsandboxed = false

    func validate() throws {
        guard cycles > 0, warmUp >= 0, limit > 0 else { throw ValidationError("--cycles and --limit must be positive, --warm-up not negative") }
    }

    /// Both sides' memory at one point of the run.
    struct Sample: Sendable {
        var cycle: Int
        var seconds: Double
        var host: MemoryUsage
        var serviceResident: UInt64?
        var serviceHeap: UInt64?
    }

    func run() async throws {
        let environment = try StressEnvironment()
        defer { environment.remove() }
        let identifier = mode == .shared ? StressEnvironment.shared : StressEnvironment.perConnection
        print("remoteview-stress soak: \(cycles) cycles after \(warmUp) of warm-up, \(mode), \(unsandboxed ? "unsandboxed" : "sandboxed"), limit \(formatBytes(limit))")
        print("service: \(environment.serviceExecutable)")
        let (cycles, warmUp, mode) = (self.cycles, self.warmUp, self.mode)
        let registry = ServiceRegistry(scanning: [environment.folder])
        let samples = try await withLauncher(registry: registry, configuration: environment.configuration(sandboxed: !unsandboxed)) { launcher in
            // Shared: this connection holds the process (and reports its memory) for the whole run.
            let keeper = mode == .shared ? launcher.connection(to: identifier) : nil
            if let keeper { _ = try await keeper.request(ServiceMessage(type: "echo", text: "keeper")) }
            let start = ContinuousClock.now
            var samples: [Sample] = []
            /// One cycle; with `sample`, both sides' memory too (perConnection: of this cycle's process).
            func cycle(_ index: Int, sample: Bool) async throws {
                let connection = launcher.connection(to: identifier)
                _ = try await connection.request(ServiceMessage(type: "echo", text: "soak"))
                var taken: Sample?
                if sample {
                    let reporter = keeper ?? connection
                    let words = try await reporter.request(ServiceMessage(type: "memory")).text?.split(separator: " ") ?? []
                    let pid = await launcher.status().first { $0.identifier == identifier }?.processes.first?.servicePid
                    taken = Sample(cycle: index, seconds: (ContinuousClock.now - start).seconds, host: .current(),
                                   serviceResident: pid.flatMap { MemoryUsage.of(pid: $0)?.residentBytes },
                                   serviceHeap: words.first.flatMap { UInt64($0) })
                }
                await connection.invalidate()
                if let taken {
                    Self.printSample(taken, label: index == 0 ? "start" : index == warmUp ? "baseline" : index == warmUp + cycles ? "end" : "",
                                     previous: samples.last, header: samples.isEmpty)
                    samples.append(taken)
                }
            }
            let total = warmUp + cycles
            let step = max(cycles / 10, 1)
            for index in 0...total {
                let sample = index == 0 || index == warmUp || index == total || (index > warmUp && (index - warmUp) % step == 0)
                try await cycle(index, sample: sample)
            }
            if let keeper { await keeper.invalidate() }
            return samples
        }
        guard let baseline = samples.first(where: { $0.cycle == warmUp }), let end = samples.last else { return }
        try report(from: baseline, to: end)
    }

    static func printSample(_ sample: Sample, label: String, previous: Sample?, header: Bool) {
        if header {
            print(pad("cycle", 9) + pad("", 10) + pad("host RSS", 13) + pad("host heap", 13) + pad("service RSS", 13) + pad("service heap", 14) + pad("cycles/s", 10))
        }
        let rate = previous.map { sample.seconds > $0.seconds ? Double(sample.cycle - $0.cycle) / (sample.seconds - $0.seconds) : 0 }
        print(pad(String(sample.cycle), 9) + pad(label, 10) + pad(formatBytes(Int(sample.host.residentBytes)), 13)
              + pad(formatBytes(Int(sample.host.heapBytes ?? 0)), 13) + pad(sample.serviceResident.map { formatBytes(Int($0)) } ?? "-", 13)
              + pad(sample.serviceHeap.map { formatBytes(Int($0)) } ?? "-", 14) + pad(rate.map { String(Int($0)) } ?? "-", 10))
    }

    /// Growth from `baseline` to `end`, figure by figure; throws when one grew past the limit.
    func report(from baseline: Sample, to end: Sample) throws {
        let cycles = end.cycle - baseline.cycle
        var figures: [(String, Int)] = [
            ("host RSS", Int(end.host.residentBytes) - Int(baseline.host.residentBytes)),
            ("host heap", Int(end.host.heapBytes ?? 0) - Int(baseline.host.heapBytes ?? 0)),
        ]
        if mode == .shared {
            if let before = baseline.serviceResident, let after = end.serviceResident { figures.append(("service RSS", Int(after) - Int(before))) }
            if let before = baseline.serviceHeap, let after = end.serviceHeap { figures.append(("service heap", Int(after) - Int(before))) }
        }
        print("growth over \(cycles) cycles after the warm-up (\(String(Int(Double(end.cycle) / max(end.seconds, 0.001)))) cycles/s over the run, \(Int(end.seconds)) s):")
        var failed: [String] = []
        for (name, growth) in figures {
            let verdict = growth > limit ? "OVER THE LIMIT" : "ok"
            print("  \(pad(name, 13)) \(pad(formatBytes(growth), 11)) \(pad(String(growth / max(cycles, 1)) + " B/cycle", 14)) \(verdict)")
            if growth > limit { failed.append(name) }
        }
        if !failed.isEmpty {
            print("FAILED: \(failed.joined(separator: ", ")) grew more than \(formatBytes(limit))")
            throw ExitCode.failure
        }
        print("passed: every figure within \(formatBytes(limit))")
    }
}

/// `text` padded with spaces to `width` characters.
func pad(_ text: String, _ width: Int) -> String {
    text.count >= width ? text + " " : text + String(repeating: " ", count: width - text.count)
}

extension Duration {
    /// In seconds, as a `Double`.
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
