/// The deadlines of one connection's requests, watched by one loop timer
/// (docs/Architecture.md, "The life of a request", step 5).
///
/// Requests with equal timeouts are sent in deadline order, so most deadlines go to the end of
/// a FIFO in O(1). One earlier than the FIFO's last (a shorter timeout than the one before) goes
/// to a hashed timer wheel instead: 256 slots of one millisecond, a slot chosen by the
/// deadline's tick, in O(1) too. Nothing is scheduled or cancelled per request: the owner arms
/// its one timer at ``nextDue`` when that is earlier than what the timer watches, and when the
/// timer fires it takes what is due (``takeDue(now:into:)``).
///
/// An answered request's entry is not looked for: it goes when it is due (its id no longer
/// outstanding), when it is first in the FIFO, or in a sweep once finished entries outnumber
/// the live ones (``finished()`` counts them). The owner confines the queue to its loop.
struct DeadlineQueue {
    typealias Instant = ContinuousClock.Instant

    private struct WheelEntry {
        var deadline: Instant
        var id: UInt64
        /// Milliseconds from ``origin``, never before the cursor it was added under.
        var tick: Int64
    }

    /// The wheel's size: a power of two, so a tick's slot is its low bits.
    static let slotCount = 256
    /// One slot's span.
    static let tickNanoseconds: Int64 = 1_000_000

    private var fifo: [(deadline: Instant, id: UInt64)] = []
    private var head = 0

    /// The wheel's slots, made at its first entry.
    private var slots: [[WheelEntry]] = []
    private var wheelCount = 0
    /// No later than any wheel entry's deadline (exact after a sweep; an answered entry may
    /// leave it early, and the timer then finds nothing due).
    private var wheelEarliest: Instant?
    /// Tick 0: the deadline of the entry that found the wheel empty.
    private var origin: Instant?
    /// Every wheel entry's tick is at least this; a sweep moves it to the present's tick.
    private var cursor: Int64 = 0

    /// Requests added and not yet finished.
    private var live = 0

    init() {}

    /// Entries kept, answered ones included until they go.
    var count: Int { fifo.count - head + wheelCount }

    /// Entries in the wheel (for tests).
    var wheelEntries: Int { wheelCount }

    /// When the timer should fire next: the earliest deadline kept (or a little before it).
    var nextDue: Instant? {
        let first = head < fifo.count ? fifo[head].deadline : nil
        switch (first, wheelEarliest) {
        case (nil, let wheel): return wheel
        case (let first, nil): return first
        case (let first?, let wheel?): return min(first, wheel)
        }
    }

    /// Adds request `id`'s deadline.
    mutating func add(_ deadline: Instant, id: UInt64) {
        live += 1
        restartDrainedFIFO()
        guard let last = fifo.last, head < fifo.count, deadline < last.deadline else {
            fifo.append((deadline, id))
            return
        }
        addToWheel(deadline, id: id)
    }

    private mutating func addToWheel(_ deadline: Instant, id: UInt64) {
        if slots.isEmpty { slots = Array(repeating: [], count: Self.slotCount) }
        if wheelCount == 0 {
            origin = deadline
            cursor = 0
            wheelEarliest = nil
        }
        let tick = max(ticks(deadline), cursor)
        slots[slot(tick)].append(WheelEntry(deadline: deadline, id: id, tick: tick))
        wheelCount += 1
        if let earliest = wheelEarliest, earliest <= deadline { return }
        wheelEarliest = deadline
    }

    /// A request added here has finished (answered, cancelled, failed or timed out): its entry
    /// no longer counts as live.
    mutating func finished() {
        live -= 1
    }

    /// Takes the ids of every entry due at `now` (answered ones included: the owner ignores
    /// those) into `due`, in no particular order across the FIFO and the wheel. Afterwards
    /// ``nextDue`` is later than `now`.
    mutating func takeDue(now: Instant, into due: inout [UInt64]) {
        while head < fifo.count, fifo[head].deadline <= now {
            due.append(fifo[head].id)
            head += 1
        }
        guard wheelCount > 0, let earliest = wheelEarliest, earliest <= now else { return }
        // Every entry due has a tick from the cursor to the present's: those slots, at most
        // once round the wheel. The cursor's slot always (an entry before the origin is there).
        let last = max(ticks(now), cursor)
        let visits = min(last - cursor + 1, Int64(Self.slotCount))
        for step in 0..<visits {
            let index = slot(cursor + step)
            guard !slots[index].isEmpty else { continue }
            let before = slots[index].count
            slots[index].removeAll { entry in
                guard entry.deadline <= now else { return false }
                due.append(entry.id)
                return true
            }
            wheelCount -= before - slots[index].count
        }
        cursor = last
        wheelEarliest = wheelCount == 0 ? nil : earliestInWheel()
    }

    /// The earliest wheel deadline: in the first slot, from the cursor on, with an entry of
    /// this turn of the wheel; failing that (every entry a turn or more away), the least.
    private func earliestInWheel() -> Instant? {
        for step in 0..<Int64(Self.slotCount) {
            let tick = cursor + step
            var earliest: Instant?
            for entry in slots[slot(tick)] where entry.tick == tick {
                if let found = earliest, found <= entry.deadline { continue }
                earliest = entry.deadline
            }
            if let earliest { return earliest }
        }
        return slots.lazy.flatMap { $0 }.map(\.deadline).min()
    }

    /// Drops the FIFO's first entries whose requests have finished, and sweeps every finished
    /// entry out once they outnumber the live ones (and 64). Amortized, a constant per request:
    /// a sweep follows as many finishes as it keeps entries.
    mutating func dropFinished(isOutstanding: (UInt64) -> Bool) {
        while head < fifo.count, !isOutstanding(fifo[head].id) {
            head += 1
        }
        restartDrainedFIFO()
        if count - live > max(64, live) {
            fifo = fifo[head...].filter { isOutstanding($0.id) }
            head = 0
            if wheelCount > 0 {
                wheelCount = 0
                for index in slots.indices where !slots[index].isEmpty {
                    slots[index].removeAll { !isOutstanding($0.id) }
                    wheelCount += slots[index].count
                }
                if wheelCount == 0 { wheelEarliest = nil }
            }
        } else if head >= 64 && head * 2 >= fifo.count {
            fifo.removeFirst(head)
            head = 0
        }
    }

    /// A FIFO whose every entry has gone starts again from its storage's beginning.
    private mutating func restartDrainedFIFO() {
        guard head == fifo.count else { return }
        fifo.removeAll(keepingCapacity: true)
        head = 0
    }

    /// Forgets everything (the connection ended).
    mutating func removeAll() {
        self = DeadlineQueue()
    }

    private func ticks(_ instant: Instant) -> Int64 {
        guard let origin else { return 0 }
        return origin.duration(to: instant).saturatingNanoseconds / Self.tickNanoseconds
    }

    private func slot(_ tick: Int64) -> Int {
        Int(truncatingIfNeeded: tick) & (Self.slotCount - 1)
    }
}
