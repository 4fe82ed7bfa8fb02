import Foundation
import Glibc

/// Samples of one measurement, in microseconds, and what they say.
struct Stats: Codable, Sendable {
    var median: Double
    var p99: Double
    var min: Double
    var max: Double
    var count: Int
    /// Operations per second over the whole measurement, where that is the figure.
    var perSecond: Double?
    /// CPU time (user + system) per operation, µs, of both processes (host and service, or the
    /// baseline's two), over the measured operations; and their context switches per operation.
    /// Unlike the wall clock, neither depends on how long an idle core takes to wake.
    var cpuPerOperation: Double? = nil
    var switchesPerOperation: Double? = nil

    init(microseconds samples: [Double], perSecond: Double? = nil) {
        let sorted = samples.sorted()
        median = sorted.isEmpty ? 0 : sorted[sorted.count / 2]
        p99 = sorted.isEmpty ? 0 : sorted[Swift.min(sorted.count - 1, sorted.count * 99 / 100)]
        min = sorted.first ?? 0
        max = sorted.last ?? 0
        count = sorted.count
        self.perSecond = perSecond
    }

    /// A C baseline's JSON line.
    init(baselineJSON line: String) throws {
        struct Raw: Decodable {
            var median_us: Double, p99_us: Double, min_us: Double, max_us: Double, count: Int, per_second: Double
            var cpu_us_per_op: Double?, switches_per_op: Double?
        }
        let raw = try JSONDecoder().decode(Raw.self, from: Data(line.utf8))
        self.init(median: raw.median_us, p99: raw.p99_us, min: raw.min_us, max: raw.max_us, count: raw.count, perSecond: raw.per_second)
        cpuPerOperation = raw.cpu_us_per_op
        switchesPerOperation = raw.switches_per_op
    }

    /// The samples of a C baseline's JSON line run with a trailing "samples" argument.
    static func samples(baselineJSON line: String) throws -> [Double] {
        struct Raw: Decodable { var samples: [Double] }
        return try JSONDecoder().decode(Raw.self, from: Data(line.utf8)).samples
    }

    init(median: Double, p99: Double, min: Double, max: Double, count: Int, perSecond: Double?) {
        self.median = median
        self.p99 = p99
        self.min = min
        self.max = max
        self.count = count
        self.perSecond = perSecond
    }
}

/// What a process (or two) has cost so far: CPU time and context switches.
struct Cost: Sendable {
    var cpuMicroseconds = 0.0
    var switches = 0.0

    static func + (a: Cost, b: Cost) -> Cost { Cost(cpuMicroseconds: a.cpuMicroseconds + b.cpuMicroseconds, switches: a.switches + b.switches) }
    static func - (a: Cost, b: Cost) -> Cost { Cost(cpuMicroseconds: a.cpuMicroseconds - b.cpuMicroseconds, switches: a.switches - b.switches) }

    /// This process so far (every thread): `getrusage(RUSAGE_SELF)`.
    static func ownProcess() -> Cost {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Cost(cpuMicroseconds: Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e6 + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec),
                    switches: Double(usage.ru_nvcsw + usage.ru_nivcsw))
    }

    /// A bench-service's reply to "usage" ("CPU_US SWITCHES", its own getrusage).
    init(usageReply text: String?) throws {
        let fields = (text ?? "").split(separator: " ").compactMap { Double($0) }
        guard fields.count == 2 else { throw BenchError("bench-service's usage reply is \(text ?? "empty")") }
        (cpuMicroseconds, switches) = (fields[0], fields[1])
    }

    init(cpuMicroseconds: Double = 0, switches: Double = 0) {
        self.cpuMicroseconds = cpuMicroseconds
        self.switches = switches
    }
}

extension Stats {
    /// These statistics with `cost`, spread over `operations`.
    func with(_ cost: Cost, over operations: Int) -> Stats {
        var stats = self
        stats.cpuPerOperation = cost.cpuMicroseconds / Double(Swift.max(operations, 1))
        stats.switchesPerOperation = cost.switches / Double(Swift.max(operations, 1))
        return stats
    }
}

/// Monotonic microseconds.
func nowMicroseconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) * 1e6 + Double(now.tv_nsec) / 1e3
}

/// Monotonic nanoseconds (the stream service's stamp clock).
func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

/// Times `body` `count` times after `warmUp` untimed runs; microseconds each.
func sample(_ count: Int, warmUp: Int, _ body: () async throws -> Void) async rethrows -> [Double] {
    for _ in 0..<warmUp { try await body() }
    var samples: [Double] = []
    samples.reserveCapacity(count)
    for _ in 0..<count {
        let start = nowMicroseconds()
        try await body()
        samples.append(nowMicroseconds() - start)
    }
    return samples
}

/// Measures RemoteView and its baseline in alternating chunks, so that both see the same machine
/// (an idle core's wake-up latency, another process's load) rather than one the quiet minute
/// and the other the busy one. `baseline(n)` runs n samples of the baseline and returns them.
func interleaved(_ total: Int, chunks: Int = 10, framework: (Int) async throws -> [Double],
                 baseline: (Int) throws -> [Double]) async throws -> (framework: Stats, baseline: Stats) {
    let perChunk = max(total / chunks, 1)
    var ours: [Double] = [], theirs: [Double] = []
    for _ in 0..<chunks {
        ours += try await framework(perChunk)
        theirs += try baseline(perChunk)
    }
    return (Stats(microseconds: ours, perSecond: Double(ours.count) / (ours.reduce(0, +) / 1e6)),
            Stats(microseconds: theirs, perSecond: Double(theirs.count) / (theirs.reduce(0, +) / 1e6)))
}

/// ``interleaved(_:chunks:framework:baseline:)`` for a baseline that is itself measured through
/// the framework (a plain view next to a share's), so it awaits.
func interleavedAsync(_ total: Int, chunks: Int = 10, framework: (Int) async throws -> [Double],
                      baseline: (Int) async throws -> [Double]) async throws -> (framework: Stats, baseline: Stats) {
    let perChunk = max(total / chunks, 1)
    var ours: [Double] = [], theirs: [Double] = []
    for _ in 0..<chunks {
        ours += try await framework(perChunk)
        theirs += try await baseline(perChunk)
    }
    return (Stats(microseconds: ours), Stats(microseconds: theirs))
}

/// Runs a command (in `environment`, if given) and returns its standard output (failing with
/// its standard error).
func run(_ arguments: [String], environment: [String: String]? = nil) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: arguments[0])
    process.arguments = Array(arguments.dropFirst())
    if let environment { process.environment = environment }
    let output = Pipe(), errors = Pipe()
    process.standardOutput = output
    process.standardError = errors
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    let problem = errors.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
        throw BenchError("\(arguments.joined(separator: " ")) failed (\(process.terminationStatus)): \(String(decoding: problem, as: UTF8.self))")
    }
    return String(decoding: data, as: UTF8.self)
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Spawns `binary` with `fd` as its fd 3 (nothing else open but stdio) and returns its pid.
func spawn(_ arguments: [String], fd3 fd: Int32) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_adddup2(&actions, fd, 3)
    // Signals as a new process expects them, not as this (worker) thread has them.
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var none = sigset_t()
    sigemptyset(&none)
    posix_spawnattr_setsigmask(&attributes, &none)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))
    var pid: pid_t = 0
    let argv = arguments.map { strdup($0) } + [nil]
    defer { for pointer in argv { free(pointer) } }
    let status = posix_spawn(&pid, arguments[0], &actions, &attributes, argv, environ)
    guard status == 0 else { throw BenchError("cannot spawn \(arguments[0]): \(String(cString: strerror(status)))") }
    return pid
}
