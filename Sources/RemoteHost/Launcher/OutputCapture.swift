import Logging
import RemoteCore
import Synchronization

/// Reads a service's stdout or stderr from a pipe and logs it line by line with the service's
/// identifier, so a service's prints end up in the host's log (as launchd sends them to the
/// system log). Bounded: long lines are split, and after ``maxLines`` lines the rest is dropped
/// with one notice, so a service cannot flood the host's log.
final class OutputCapture: Sendable {
    static let maxLineLength = 4096
    static let maxLines = 10_000

    let stream: String
    private let source: ReadableDescriptor
    private let logger: Logger
    private let state = Mutex<(partial: [UInt8], lines: Int, recent: [String])>(([], 0, []))
    private let completion = Mutex<(done: Bool, waiters: [Int: CheckedContinuation<Void, Never>], next: Int)>((false, [:], 0))

    /// - Parameter logger: carries the service's identifier and pid as metadata.
    init(_ readEnd: consuming OwnedFD, stream: String, logger: Logger) throws(SystemCallError) {
        source = try ReadableDescriptor(readEnd)
        self.stream = stream
        self.logger = logger
    }

    /// Reads until the service closes its end (it exited) or ``stop()``.
    func run() async {
        while !source.isStopped {
            let chunk: [UInt8]?
            do { chunk = try source.read(upTo: 16 * 1024) } catch { break }
            guard let chunk else {
                if await source.waitReadable() { continue } else { break }
            }
            if chunk.isEmpty { break }
            take(chunk)
        }
        let rest = state.withLock { state in
            defer { state.partial.removeAll() }
            return state.partial
        }
        if !rest.isEmpty { emit(rest) }
        let waiters = completion.withLock { state in
            state.done = true
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Waits until everything the process wrote has been read (end of file), or `deadline`.
    func waitUntilRead(until deadline: ContinuousClock.Instant) async {
        await withCheckedContinuation { continuation in
            let id = completion.withLock { state -> Int? in
                if state.done { return nil }
                state.next += 1
                state.waiters[state.next] = continuation
                return state.next
            }
            guard let id else { return continuation.resume() }
            EventLoop.shared.schedule(at: deadline) { [weak self] in
                self?.completion.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
            }
        }
    }

    /// Stops reading (the process is gone but a grandchild may still hold the pipe).
    func stop() { source.stop() }

    /// The last lines read (at most 8), for error messages.
    var recentLines: [String] { state.withLock { $0.recent } }

    private func take(_ chunk: [UInt8]) {
        var lines: [[UInt8]] = []
        state.withLock { state in
            state.partial += chunk
            while let newline = state.partial.firstIndex(of: 0x0a) {
                lines.append(Array(state.partial[..<newline]))
                state.partial.removeSubrange(...newline)
            }
            while state.partial.count >= Self.maxLineLength {
                lines.append(Array(state.partial.prefix(Self.maxLineLength)))
                state.partial.removeFirst(Self.maxLineLength)
            }
        }
        for line in lines { emit(line) }
    }

    private func emit(_ bytes: [UInt8]) {
        let line = String(decoding: bytes, as: UTF8.self)
        let count = state.withLock { state in
            state.lines += 1
            state.recent.append(line)
            if state.recent.count > 8 { state.recent.removeFirst() }
            return state.lines
        }
        if count <= Self.maxLines {
            logger.log(level: stream == "stderr" ? .warning : .info, "\(line)", metadata: ["stream": "\(stream)"])
        } else if count == Self.maxLines + 1 {
            logger.warning("more than \(Self.maxLines) lines of output; the rest is dropped", metadata: ["stream": "\(stream)"])
        }
    }
}
