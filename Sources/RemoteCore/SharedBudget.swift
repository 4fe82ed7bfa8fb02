import struct Synchronization.Atomic

/// A count that several connections or surfaces of one service process draw on together,
/// against a limit: the bytes all its surfaces have mapped in the host
/// (`Launcher.Configuration.maxMappedBytesPerService`), or the requests it has outstanding with
/// the host across all its connections (`maxIncomingRequestsPerService`). Each connection or
/// surface has its own bound as well; this one bounds their sum, which would otherwise grow
/// with the connections the host opens.
package final class SharedBudget: Sendable {
    /// The most that may be counted at once.
    package let limit: Int
    private let counted = Atomic<Int>(0)
    /// Set once something asked for more than the limit: the process is being ended for it, so
    /// nothing more is counted, even after releases (another connection must not start work
    /// for it meanwhile).
    private let refusing = Atomic<Bool>(false)

    package init(limit: Int) {
        self.limit = limit
    }

    /// Counted now.
    package var used: Int { counted.load(ordering: .relaxed) }

    /// Counts `amount` more, unless that would pass the limit; returns whether it did (nothing
    /// is counted when it did not, and from then on nothing is).
    package func reserve(_ amount: Int) -> Bool {
        #if LockCounts
        LockCounter.count(file: #fileID, line: #line)  // a compare-and-swap loop: one acquisition
        #endif
        var current = counted.load(ordering: .relaxed)
        while current + amount <= limit, !refusing.load(ordering: .relaxed) {
            let (exchanged, original) = counted.compareExchange(expected: current, desired: current + amount, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
        refusing.store(true, ordering: .relaxed)
        return false
    }

    /// Counts `amount` fewer.
    package func release(_ amount: Int) {
        if amount != 0 { counted.subtract(amount, ordering: .relaxed) }
    }
}
