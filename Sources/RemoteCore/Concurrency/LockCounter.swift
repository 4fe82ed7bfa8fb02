#if LockCounts
import Synchronization

/// Every lock acquisition of this process: each `Mutex` locked and each compare-and-swap loop
/// that guards shared state (`SharedBudget`). Only in a build with the package's `LockCounts`
/// trait, which `remoteview-bench --counts` makes on its own; no other build has the counter,
/// so no release figure pays for it (docs/Benchmarks.md, "Counts per round trip").
public enum LockCounter {
    private static let acquisitions = Atomic<Int>(0)
    /// Acquisitions by where they were made (the file name's address and the line: no string
    /// is made per acquisition, so counting allocates nothing once a site is known). Its own
    /// lock is the standard library's, not counted.
    private static let bySite = Synchronization.Mutex<[Site: Int]>([:])

    private struct Site: Hashable {
        let file: UInt
        let line: UInt
    }
    /// The files' names by their addresses.
    private static let files = Synchronization.Mutex<[UInt: String]>([:])

    /// Acquisitions so far.
    public static var total: Int { acquisitions.load(ordering: .relaxed) }

    /// Acquisitions so far by where they were made (`file:line`), most first.
    public static var sites: [(site: String, count: Int)] {
        let counts = bySite.withLock { $0 }
        let names = files.withLock { $0 }
        return counts.map { (site: "\(names[$0.key.file] ?? "?"):\($0.key.line)", count: $0.value) }.sorted { $0.count > $1.count }
    }

    static func count(file: StaticString, line: UInt) {
        acquisitions.add(1, ordering: .relaxed)
        let site = Site(file: UInt(bitPattern: file.utf8Start), line: line)
        let known = bySite.withLock { counts -> Bool in
            guard let count = counts[site] else { counts[site] = 1; return false }
            counts[site] = count + 1
            return true
        }
        if !known { files.withLock { $0[site.file] = "\(file)" } }
    }
}
#endif
