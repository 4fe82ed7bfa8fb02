import Foundation
import Glibc

/// `remoteview-bench --counts`: what one round trip costs, host and service together, in
/// system calls, context switches, `malloc` calls and lock acquisitions, counted over two
/// `--probe` runs of this same binary (20,000 and 60,000 round trips) and divided by the
/// difference, so that start-up and warm-up cancel out (docs/Benchmarks.md, "Counts per round
/// trip").
///
/// System calls and context switches are counted by `perf stat`; `malloc` with a uprobe on
/// libc's (both processes call it: bench-service links the Swift runtime statically, libc
/// dynamically), which needs root. The uprobe slows every `malloc`, so these runs give counts,
/// not times. Lock acquisitions are counted by RemoteView itself in a build with the
/// `LockCounts` trait (`make bench` makes one in Benchmarks/.build-counts and runs --counts from
/// it): each `--probe` run prints both processes' totals.
enum Counts {
    static let runs = (20_000, 60_000)
    static let events = ["raw_syscalls:sys_enter", "context-switches", "probe_libc:malloc"]

    static func measure() throws {
        guard geteuid() == 0 else {
            throw BenchError("--counts needs root: it puts a uprobe on libc's malloc (perf probe)")
        }
        guard let perf = ["/usr/bin/perf", "/usr/local/bin/perf"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw BenchError("--counts needs perf (scripts/bootstrap --bench installs linux-perf)")
        }
        let me = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let libc = try libcPath()
        let addedProbe = !(try run([perf, "probe", "-l"])).contains("probe_libc:malloc")
        if addedProbe { _ = try run([perf, "probe", "-q", "-x", libc, "--add", "malloc"]) }
        defer { if addedProbe { _ = try? run([perf, "probe", "-q", "--del", "probe_libc:malloc"]) } }

        print("counts per round trip, host + service (perf stat over --probe \(runs.0) and --probe \(runs.1), the difference divided by \(runs.1 - runs.0)):")
        print("| caller | system calls | context switches | malloc calls | lock acquisitions (host + service) |")
        print("|---|---|---|---|---|")
        var locksCounted = true
        for (caller, flags) in [("on the global executor", [String]()), ("preferring readerExecutor", ["--prefer-reader"]),
                                ("blocking call (requestSync, a thread of its own)", ["--blocking"])] {
            let first = try counted(perf: perf, me: me, roundTrips: runs.0, flags: flags)
            let second = try counted(perf: perf, me: me, roundTrips: runs.1, flags: flags)
            let per = (events + [lockKeys.host, lockKeys.service]).map { event -> Double? in
                guard let after = second[event], let before = first[event] else { return nil }
                let per = (after - before) / Double(runs.1 - runs.0)
                return abs(per) < 0.005 ? 0 : per  // no "-0.00" from a count that did not change
            }
            let locks: String
            if let host = per[3], let service = per[4] {
                locks = String(format: "%.2f (%.2f + %.2f)", host + service, host, service)
            } else {
                locks = "–"
                locksCounted = false
            }
            print(String(format: "| %@ | %.2f | %.2f | %.1f | %@ |", caller, per[0] ?? 0, per[1] ?? 0, per[2] ?? 0, locks))
        }
        if !locksCounted {
            print("lock acquisitions: not counted: this binary was built without the LockCounts trait (make bench builds one with it)")
        }
    }

    /// The keys the lock totals printed by a counting build's `--probe` are filed under.
    static let lockKeys = (host: "locks:host", service: "locks:service")

    /// One `--probe` run under `perf stat`: each event's count.
    private static func counted(perf: String, me: String, roundTrips: Int, flags: [String]) throws -> [String: Double] {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("remoteview-counts-\(getpid())-\(roundTrips).csv").path
        defer { try? FileManager.default.removeItem(atPath: output) }
        let printed = try run([perf, "stat", "-x,", "-e", events.joined(separator: ","), "-o", output, "--", me, "--probe", String(roundTrips)] + flags)
        var counts: [String: Double] = [:]
        // "lock acquisitions: host H service S", from a counting build.
        for line in printed.split(separator: "\n") where line.hasPrefix("lock acquisitions: ") {
            let words = line.split(separator: " ")
            if words.count == 6, let host = Double(words[3]), let service = Double(words[5]) {
                counts[lockKeys.host] = host
                counts[lockKeys.service] = service
            }
        }
        for line in try String(contentsOfFile: output, encoding: .utf8).split(separator: "\n") where !line.hasPrefix("#") {
            let fields = line.split(separator: ",", omittingEmptySubsequences: false)
            guard fields.count > 2, let value = Double(fields[0]) else { continue }
            counts[String(fields[2])] = value
        }
        for event in events where counts[event] == nil {
            throw BenchError("perf stat counted no \(event) (is tracefs mounted, and the uprobe in place?)")
        }
        return counts
    }

    /// The libc this process maps (the one the service maps too: /usr is the same inside the sandbox).
    private static func libcPath() throws -> String {
        let maps = try String(contentsOfFile: "/proc/self/maps", encoding: .utf8)
        for line in maps.split(separator: "\n") {
            if let path = line.split(separator: " ", omittingEmptySubsequences: true).last, path.hasSuffix("/libc.so.6") {
                return String(path)
            }
        }
        throw BenchError("--counts: no libc.so.6 in /proc/self/maps")
    }
}
