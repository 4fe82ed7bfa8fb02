#if LockCounts
import Synchronization

/// Every lock acquisition of this process: each ``Mutex`` locked and each compare-and-swap loop
/// that guards shared state (``SharedBudget``). Only in a build with the package's `LockCounts`
/// trait, which `remoteview-bench --counts` makes on its own; no other build has the counter,
/// so no release figure pays for it (docs/Benchmarks.md, "Counts per round trip").
public enum LockCounter {
    private static let acquisitions = Atomic<Int>(0)
    /// Acquisitions by where they were made (`file:line`). Its own lock is the standard
    /// library's, not counted.
    private static let bySite = Synchronization.Mutex<[String: Int]>([:])

    /// Acquisitions so far.
    public static var total: Int { acquisitions.load(ordering: .relaxed) }

    /// Acquisitions so far by where they were made, most first.
    public static var sites: [(site: String, count: Int)] {
        bySite.withLock { $0 }.map { (site: $0.key, count: $0.value) }.sorted { $0.count > $1.count }
    }

    static func count(file: StaticString, line: UInt) {
        acquisitions.add(1, ordering: .relaxed)
        bySite.withLock { $0["\(file):\(line)", default: 0] += 1 }
    }
}
#endif
