import Glibc
import Logging
import RemoteCore

/// Reads a service's stdout or stderr from a pipe and logs it line by line with the service's
/// identifier, so a service's prints end up in the host's log (as launchd sends them to the
/// system log). Bounded: long lines are split, and after ``maxLines`` lines or ``maxBytes``
/// bytes the rest is read and dropped unexamined, with one notice, so a service can neither
/// flood the host's log nor make the host spend more than a read per chunk on it.
final class OutputCapture: Sendable {
    static let maxLineLength = 4096
    static let maxLines = 10_000
    /// Bytes logged per stream before the rest is dropped.
    static let maxBytes = 4 * 1024 * 1024

    let stream: String
    private let source: ReadableDescriptor
    private let logger: Logger
    private let state = Mutex(State())
    private let finished = Latch<Void>()

    private struct State {
        /// An unfinished line.
        var partial: [UInt8] = []
        var lines = 0
        var bytes = 0
        /// The last lines, escaped (at most 8).
        var recent: [String] = []
        /// The last lines as written, before a crash report, at most 2 KB.
        var tail: [String] = []
        var tailBytes = 0
        /// The first `Fatal error:` line.
        var fatalError: String?
        /// A crash report being read (a Swift stack trace): logged as one entry when it ends.
        var crashReport: [String]?
    }

    /// The first line of a crash report whose lines go to the log as one entry: Swift's
    /// runtime's stack trace, and its backtracer's report.
    static let crashReportStarts = ["Current stack trace:", "*** Program crashed:", "💣 Program crashed:"]
    /// The most lines of a crash report logged as one entry; more make another.
    static let maxCrashReportLines = 256

    /// Whether `line` can belong to a crash report that has begun: a frame (`0    libswiftCore.so …`),
    /// an indented or empty line, or one of the backtracer's headings. Any other line ends it.
    static func continuesCrashReport(_ line: String) -> Bool {
        guard let first = line.unicodeScalars.first else { return true }
        if first.properties.numericType != nil || first == " " || first == "\t" { return true }
        return ["Thread ", "Registers", "Images", "Backtrace", "Backtrace took", "0x", "***", "💣", "Press "].contains { line.hasPrefix($0) }
    }

    /// - Parameter logger: carries the service's identifier and pid as metadata.
    init(_ readEnd: consuming OwnedFD, stream: String, logger: Logger) throws(SystemCallError) {
        source = try ReadableDescriptor(readEnd)
        self.stream = stream
        self.logger = logger
    }

    /// Reads until the service closes its end (it exited), ``stop()``, or the task is cancelled.
    ///
    /// One read per readiness: between reads the task waits on the event loop, so a service
    /// that floods its output cannot hold a thread of the host's cooperative pool.
    func run() async {
        while !source.isStopped, await source.waitReadable() {
            let chunk: [UInt8]?
            do { chunk = try source.read(upTo: 64 * 1024) } catch { break }
            guard let chunk else { continue }
            if chunk.isEmpty { break }
            if take(chunk) {
                // Past the caps: drain at most a chunk per 10 ms (a rate, not a wait for
                // something). A flooding service then waits on its full pipe instead of keeping
                // a core of the host busy reading it.
                do { try await EventLoop.shared.sleep(until: .now.advanced(by: Self.drainInterval)) } catch { break }
            }
        }
        let rest = state.withLock { state in
            defer { state.partial.removeAll() }
            return state.partial
        }
        if !rest.isEmpty { emit(rest[...]) }
        logCrashReport(state.withLock { $0.crashReport.take() })
        finished.open(())
    }

    /// Logs a crash report's lines as one entry.
    private func logCrashReport(_ report: [String]?) {
        guard let report, !report.isEmpty else { return }
        let shown = report.map { $0.escapedForTerminal() }.joined(separator: "\n")
        logger.warning("crash report (\(report.count) lines):\n\(shown)", metadata: ["stream": "\(stream)"])
    }

    /// What the process last said on this stream (before a crash report), as written, and its
    /// first `Fatal error:` line: the evidence its ``TerminationReason`` carries.
    var evidence: (tail: [String], fatalError: String?) {
        state.withLock { ($0.tail, $0.fatalError) }
    }

    /// Past the caps, at most one chunk is read per this interval.
    static let drainInterval = Duration.milliseconds(10)

    /// Waits until everything the process wrote has been read (end of file), `deadline`, or the
    /// task's cancellation.
    func waitUntilRead(until deadline: ContinuousClock.Instant) async {
        _ = await finished.value(before: deadline)
    }

    /// Stops reading (the process is gone but a grandchild may still hold the pipe); a crash
    /// report being read is logged.
    func stop() {
        source.stop()
        logCrashReport(state.withLock { $0.crashReport.take() })
    }

    /// The last lines read (at most 8), escaped for the terminal, for error messages.
    var recentLines: [String] { state.withLock { $0.recent } }

    /// Splits `chunk` (after what is left of the last one) into lines of at most
    /// ``maxLineLength`` bytes, with `memchr`, so the cost per byte stays small.
    /// Returns whether the caps are reached (the bytes were only drained).
    @discardableResult
    private func take(_ chunk: [UInt8]) -> Bool {
        let (buffer, capped) = state.withLock { state -> ([UInt8], Bool) in
            defer { state.partial.removeAll(keepingCapacity: true) }
            return (state.partial + chunk, state.lines > Self.maxLines || state.bytes > Self.maxBytes)
        }
        // Past the cap the bytes are only drained: the lines are not logged, and only the last
        // few are split, for the tail and a fatal error the process's end must still tell.
        if capped {
            let recent = chunk.suffix(TerminationReason.maxStandardErrorBytes)
            state.withLock { state in
                for line in recent.split(separator: 0x0a) { Self.keep(String(decoding: line, as: UTF8.self), in: &state) }
                if state.fatalError == nil, let line = Self.fatalErrorLine(in: chunk) { state.fatalError = line }
            }
            return true
        }
        var lines: [ArraySlice<UInt8>] = []
        var start = 0
        buffer.withUnsafeBufferPointer { bytes in
            guard let base = bytes.baseAddress else { return }
            while start < bytes.count {
                let limit = min(bytes.count - start, Self.maxLineLength)
                if let newline = memchr(base + start, 0x0a, limit) {
                    let end = base.distance(to: newline.assumingMemoryBound(to: UInt8.self))
                    lines.append(buffer[start..<end])
                    start = end + 1
                } else if limit == Self.maxLineLength {
                    lines.append(buffer[start..<(start + limit)])
                    start += limit
                } else {
                    break  // an unfinished line: wait for the rest
                }
            }
        }
        state.withLock { $0.partial = Array(buffer[start...]) }
        for line in lines { emit(line) }
        return false
    }

    /// Logs one line, escaped for the terminal: a service writes what it likes, escape
    /// sequences and bytes that are not UTF-8 included (`String(decodingForTerminal:)`).
    /// A crash report is kept to be logged as one entry when the stream ends.
    private func emit(_ bytes: ArraySlice<UInt8>) {
        let line = String(decodingForTerminal: bytes)
        let written = String(decoding: bytes, as: UTF8.self)
        let (count, reported, full) = state.withLock { state -> (Int, Bool, [String]?) in
            state.lines += 1
            state.bytes += bytes.count
            if state.bytes > Self.maxBytes { state.lines = max(state.lines, Self.maxLines + 1) }
            // A crash report's lines are kept to be logged as one entry, until a line that
            // cannot belong to it, or the most one entry takes.
            var full: [String]?
            if state.crashReport != nil, !Self.continuesCrashReport(written) || state.crashReport!.count >= Self.maxCrashReportLines {
                full = state.crashReport.take()
            }
            if state.crashReport != nil || Self.crashReportStarts.contains(where: { written.hasPrefix($0) }) {
                state.crashReport = (state.crashReport ?? []) + [written]
                return (state.lines, true, full)
            }
            if state.lines <= Self.maxLines {
                state.recent.append(line)
                if state.recent.count > 8 { state.recent.removeFirst() }
            }
            Self.keep(written, in: &state)
            return (state.lines, false, full)
        }
        logCrashReport(full)
        if reported { return }
        if count <= Self.maxLines {
            logger.log(level: stream == "stderr" ? .warning : .info, "\(line)", metadata: ["stream": "\(stream)"])
        } else if count == Self.maxLines + 1 {
            logger.warning("more than \(Self.maxLines) lines or \(Self.maxBytes) bytes of output; the rest is dropped", metadata: ["stream": "\(stream)"])
        }
    }

    /// The first line of `bytes` holding `Fatal error:`, if any.
    static func fatalErrorLine(in bytes: [UInt8]) -> String? {
        let marker = Array("Fatal error:".utf8)
        guard let at = bytes.indices.first(where: { bytes[$0...].starts(with: marker) }) else { return nil }
        let start = bytes[..<at].lastIndex(of: 0x0a).map { $0 + 1 } ?? bytes.startIndex
        let end = bytes[at...].firstIndex(of: 0x0a) ?? bytes.endIndex
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }

    /// `line` without the timestamp a log line starts with (swift-log's stream handler's
    /// `2026-11-26T14:29:33+0000 `, an ISO 8601 time with its zone): in an excerpt of a few
    /// lines it only takes room. Any other line is kept whole.
    static func withoutTimestamp(_ line: String) -> String {
        let bytes = Array(line.utf8.prefix(26))
        func digits(_ range: Range<Int>) -> Bool { range.allSatisfy { bytes.indices.contains($0) && (0x30...0x39).contains(bytes[$0]) } }
        guard bytes.count >= 21, digits(0..<4), bytes[4] == 0x2D, digits(5..<7), bytes[7] == 0x2D, digits(8..<10), bytes[10] == 0x54,
              digits(11..<13), bytes[13] == 0x3A, digits(14..<16), bytes[16] == 0x3A, digits(17..<19) else { return line }
        // The zone: Z, or +hhmm / -hhmm (+hh:mm too); then one space.
        var end = 19
        if bytes[end] == 0x5A { end += 1 } else if bytes[end] == 0x2B || bytes[end] == 0x2D {
            end += 1
            if digits(end..<end + 2) { end += 2 }
            if end < bytes.count, bytes[end] == 0x3A { end += 1 }
            if digits(end..<end + 2) { end += 2 }
        }
        guard end < bytes.count, bytes[end] == 0x20 else { return line }
        return String(line.utf8.dropFirst(end + 1)) ?? line
    }

    /// Keeps `line` in the tail (at most ``TerminationReason/maxStandardErrorBytes``, the oldest
    /// lines going first, a longer line kept by its end) and notes a first `Fatal error:`.
    private static func keep(_ line: String, in state: inout State) {
        if state.fatalError == nil, line.contains("Fatal error:") { state.fatalError = line }
        let limit = TerminationReason.maxStandardErrorBytes
        var kept = withoutTimestamp(line)
        if kept.utf8.count > limit {
            // Its end, cut at a character boundary.
            var start = kept.utf8.index(kept.utf8.endIndex, offsetBy: -limit)
            while !kept.unicodeScalars.indices.contains(start) { start = kept.utf8.index(after: start) }
            kept = String(kept[start...])
        }
        state.tail.append(kept)
        state.tailBytes += kept.utf8.count
        while state.tailBytes > limit, !state.tail.isEmpty {
            state.tailBytes -= state.tail.removeFirst().utf8.count
        }
    }
}
