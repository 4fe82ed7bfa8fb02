import Testing
@testable import RemoteCore

/// The deadline queue on its own, with no loop: what is due comes out at its deadline and not
/// before, in the FIFO and in the wheel, and answered entries do not pile up.
@Suite("DeadlineQueue")
struct DeadlineQueueTests {
    typealias Instant = ContinuousClock.Instant
    let base = ContinuousClock.now

    func at(_ microseconds: Int64) -> Instant { base.advanced(by: .microseconds(microseconds)) }

    /// A small deterministic generator (xorshift), so a failure repeats.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return state
        }
    }

    @Test("equal timeouts stay in the FIFO: nothing goes to the wheel, and each comes out at its deadline")
    func fifo() {
        var queue = DeadlineQueue()
        for id in 0..<10 { queue.add(at(Int64(id) * 100), id: UInt64(id)) }
        #expect(queue.wheelEntries == 0)
        #expect(queue.nextDue == at(0))
        var due: [UInt64] = []
        queue.takeDue(now: at(450), into: &due)
        #expect(due == [0, 1, 2, 3, 4])
        #expect(queue.nextDue == at(500))
    }

    @Test("a shorter timeout than the last goes to the wheel and comes out first")
    func shorterGoesToTheWheel() {
        var queue = DeadlineQueue()
        queue.add(at(10_000), id: 1)
        queue.add(at(2_000), id: 2)
        #expect(queue.wheelEntries == 1)
        #expect(queue.nextDue == at(2_000))
        var due: [UInt64] = []
        queue.takeDue(now: at(1_999), into: &due)
        #expect(due.isEmpty, "not before its deadline")
        queue.takeDue(now: at(2_000), into: &due)
        #expect(due == [2])
        #expect(queue.nextDue == at(10_000))
        #expect(queue.wheelEntries == 0)
    }

    @Test("deadlines in any order, spread over several turns of the wheel, before its origin and a microsecond apart, each come out when due and never before; afterwards the next due is later than now")
    func anyOrder() {
        for seed in 1...40 {
            var random = Generator(state: UInt64(seed) &* 0x9E37_79B9_7F4A_7C15)
            var queue = DeadlineQueue()
            var pending: [UInt64: Instant] = [:]
            var now: Int64 = 0
            var nextID: UInt64 = 0
            var taken = 0
            for _ in 0..<400 {
                if Int.random(in: 0..<3, using: &random) > 0 {
                    // A deadline from a microsecond to 1.5 s after now (several turns of 256 ms).
                    let span: Int64 = [1, 700, 5_000, 300_000, 1_500_000].randomElement(using: &random)!
                    let deadline = now + Int64.random(in: 1...span, using: &random)
                    queue.add(at(deadline), id: nextID)
                    pending[nextID] = at(deadline)
                    nextID += 1
                } else {
                    now += Int64.random(in: 0...40_000, using: &random)
                    var due: [UInt64] = []
                    queue.takeDue(now: at(now), into: &due)
                    for id in due {
                        #expect(pending[id].map { $0 <= at(now) } == true, "seed \(seed): \(id) came out before its deadline")
                        pending[id] = nil
                        queue.finished()
                        taken += 1
                    }
                    #expect(!pending.values.contains { $0 <= at(now) }, "seed \(seed): something due stayed")
                    if let next = queue.nextDue { #expect(next > at(now), "seed \(seed): the timer would fire again at once") }
                    #expect(queue.nextDue == nil || !pending.isEmpty)
                    if let earliest = pending.values.min() { #expect(queue.nextDue.map { $0 <= earliest } == true, "seed \(seed): the timer would fire late") }
                }
            }
            var due: [UInt64] = []
            queue.takeDue(now: at(now + 2_000_000), into: &due)
            #expect(Set(due) == Set(pending.keys), "seed \(seed)")
            #expect(queue.count == 0 && queue.nextDue == nil)
            #expect(taken + due.count == Int(nextID))
        }
    }

    @Test("a deadline already past when it is added (a tiny timeout, a late loop), after the wheel's cursor has moved on, comes out at the next take, and the timer is not armed in the past")
    func pastDeadlines() {
        var queue = DeadlineQueue()
        queue.add(at(900_000), id: 1)  // the FIFO's last
        queue.add(at(500_000), id: 2)  // the wheel, its origin
        queue.add(at(800_000), id: 5)  // the wheel, keeps it (and its cursor) in use
        var due: [UInt64] = []
        queue.takeDue(now: at(600_000), into: &due)  // the cursor moves 100 ms on
        #expect(due == [2])
        due = []
        queue.add(at(550_000), id: 3)  // already past: clamped to the cursor's slot
        queue.add(at(100_000), id: 4)  // before the wheel's origin, long past
        #expect(queue.wheelEntries == 3)
        #expect(queue.nextDue == at(100_000))
        queue.takeDue(now: at(600_001), into: &due)
        #expect(Set(due) == [3, 4])
        #expect(queue.nextDue == at(800_000), "armed at the next deadline, not in the past")
    }

    @Test("behind a request that waits long, answered entries are swept out of the FIFO and the wheel")
    func sweep() {
        var queue = DeadlineQueue()
        queue.add(at(60_000_000), id: 0)  // waits long
        var outstanding: Set<UInt64> = [0]
        var id: UInt64 = 1
        for round in 0..<20 {
            for index in 0..<100 {
                // Half of them shorter than the one before: into the wheel.
                let deadline: Int64 = index % 2 == 0 ? 61_000_000 + Int64(round * 100 + index) : 30_000_000 + Int64(index)
                queue.add(at(deadline), id: id)
                outstanding.insert(id)
                id += 1
            }
            for answered in outstanding where answered != 0 { outstanding.remove(answered); queue.finished() }
            queue.dropFinished { outstanding.contains($0) }
            #expect(queue.count <= 1 + 64 + 100, "round \(round): \(queue.count) entries for one waiting request")
        }
        #expect(queue.wheelEntries < 100)
        var due: [UInt64] = []
        queue.takeDue(now: at(61_000_000), into: &due)
        #expect(due.contains(0))
    }
}
