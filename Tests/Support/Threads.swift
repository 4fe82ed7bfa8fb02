import Glibc
import RemoteCore

/// Runs `body` on a thread of its own (a blocking call must not run on the cooperative pool, as
/// its documentation says) and awaits what it returns.
public func onOwnThread<R: Sendable>(_ body: @escaping @Sendable () -> R) async -> R {
    await withUnsafeContinuation { (continuation: UnsafeContinuation<R, Never>) in
        let job = Unmanaged.passRetained(ThreadJob { continuation.resume(returning: body()) }).toOpaque()
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { raw in
            Unmanaged<ThreadJob>.fromOpaque(raw!).takeRetainedValue().body()
            return nil
        }, job)
        precondition(created == 0, "pthread_create failed: \(created)")
        pthread_detach(thread)
    }
}

final class ThreadJob: Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
}

/// The outcome of a blocking call, as a value a test can compare.
public enum Outcome: Sendable, Equatable {
    case reply(String)
    case error(RemoteError.Code)

    public init(_ body: () throws(RemoteError) -> ServiceMessage) {
        do {
            self = .reply(try body().text ?? "")
        } catch {
            self = .error(error.code)
        }
    }
}
