import Glibc
import RemoteCore
import Testing

/// RemoteCore's `Mutex`: the standard one, annotated for ThreadSanitizer. Under
/// `scripts/sanitize thread` the second test is the regression test for the annotation: without
/// it, ThreadSanitizer reports the counter's increments as a race (the standard `Mutex` waits
/// with futex inside the uninstrumented standard library).
@Suite("Mutex")
struct MutexTests {
    struct Refused: Error {}

    @Test("withLock returns the body's value and rethrows its typed error, unlocking either way")
    func values() throws {
        let mutex = Mutex(1)
        #expect(mutex.withLock { value -> Int in value += 1; return value } == 2)
        #expect(throws: Refused.self) { try mutex.withLock { (_: inout Int) throws(Refused) in throw Refused() } }
        #expect(mutex.withLock { $0 } == 2)
    }

    /// What the two threads share: the lock and the counter in it.
    final class Shared: Sendable {
        let lock = Mutex(0)
        let rounds = 20_000
    }

    @Test("increments under the lock from two threads add up, and ThreadSanitizer sees the lock")
    func twoThreads() {
        let shared = Shared()
        let context = Unmanaged.passRetained(shared).toOpaque()
        var threads: [pthread_t] = []
        for _ in 0..<2 {
            var thread = pthread_t()
            #expect(pthread_create(&thread, nil, { raw in
                let shared = Unmanaged<Shared>.fromOpaque(raw!).takeUnretainedValue()
                for _ in 0..<shared.rounds { shared.lock.withLock { $0 += 1 } }
                return nil
            }, context) == 0)
            threads.append(thread)
        }
        for thread in threads { pthread_join(thread, nil) }
        Unmanaged<Shared>.fromOpaque(context).release()
        #expect(shared.lock.withLock { $0 } == 2 * shared.rounds)
    }
}
