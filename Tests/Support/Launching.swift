import FoundationEssentials
import Glibc
import Logging
import RemoteHost
import Testing

// Launching the fixture service from manifests the tests write, and waiting for what the
// launcher and its connections report: shared by every suite that runs real services.

/// The fixture service (`remoteview-test-service`), built next to the test bundle.
///
/// Its first use also points `$XDG_STATE_HOME` at a fresh folder of the test process's own,
/// which every host it runs inherits: no test reads or changes the user's share sheet
/// preferences (ranking, activities turned off), nor leaves its shares counted there.
public let testServiceExecutable: String = {
    if let folder = try? TemporaryFolder("remoteview-tests-state") {
        setenv("XDG_STATE_HOME", folder.path, 1)
        atexit { getenv("XDG_STATE_HOME").map { try? FileManager.default.removeItem(atPath: String(cString: $0)) } }
    }
    let path = Syscall.symbolicLinkTarget("/proc/self/exe") ?? ""
    let directory = path.split(separator: "/").dropLast().joined(separator: "/")
    return "/" + directory + "/remoteview-test-service"
}()

/// The fixture host (`remoteview-test-host`), a host process tests kill.
public var testHostExecutable: String {
    testServiceExecutable.replacing("remoteview-test-service", with: "remoteview-test-host")
}

/// Launcher settings that keep the tests fast: short backoff and grace periods.
public func fastLauncherConfiguration(_ logger: Logger? = nil) -> Launcher.Configuration {
    var quiet = Logger(label: "tests")
    quiet.logLevel = .warning
    return Launcher.Configuration(hostIdentifier: "com.example.tests", backoff: .milliseconds(20),
                                  minimumRelaunchInterval: .milliseconds(10), crashLoopLimit: 3,
                                  stopGracePeriod: .milliseconds(500), idleGracePeriod: .milliseconds(300), logger: logger ?? quiet)
}

/// Writes `manifests` into a fresh folder, runs a launcher over it for `body`, removes the
/// folder, and checks that nothing leaked.
@discardableResult
public func withServices<R: Sendable>(_ manifests: [String: String], within deadline: Duration = .seconds(20),
                                      configuration: Launcher.Configuration = fastLauncherConfiguration(),
                                      _ body: @escaping @Sendable (Launcher, ServiceFolder) async throws -> R) async throws -> R {
    let folder = try ServiceFolder(manifests)
    defer { folder.remove() }
    return try await withoutLeaks(within: deadline) {
        try await withLauncher(registry: ServiceRegistry(scanning: [folder.path]), configuration: configuration) { launcher in
            try await body(launcher, folder)
        }
    }
}

/// The error `message` fails with; records an issue if it was answered.
public func requestError(_ connection: ServiceConnection, _ message: ServiceMessage,
                         timeout: Duration? = nil) async -> RemoteError? {
    do {
        let reply = try await connection.request(message, timeout: timeout)
        Issue.record("\"\(message.type)\" was answered: \(reply)")
        return nil
    } catch {
        return error
    }
}

/// An event stream that ended before the event a test waited for.
public struct StreamEnded: Error, CustomStringConvertible {
    public let what: String
    public init(what: String) { self.what = what }
    public var description: String { "the event stream ended before \(what)" }
}

/// The first event of `events` that `match` picks (skipping the others), within `deadline`.
public func firstEvent<T: Sendable>(_ what: String, in events: AsyncStream<LauncherEvent>, within deadline: Duration = .seconds(15),
                                    _ match: @escaping @Sendable (LauncherEvent) -> T?) async throws -> T {
    try await withDeadline(deadline, what) {
        for await event in events {
            if let value = match(event) { return value }
        }
        throw StreamEnded(what: what)
    }
}

/// The pid of the next launch of `identifier`.
public func launch(of identifier: String, in events: AsyncStream<LauncherEvent>) async throws -> Int32 {
    try await firstEvent("the launch of \(identifier)", in: events) { event in
        if case .launched(identifier, let pid) = event { pid } else { nil }
    }
}

/// The next termination of `identifier`'s processes.
public func termination(of identifier: String, in events: AsyncStream<LauncherEvent>) async throws -> (Int32, TerminationReason) {
    try await firstEvent("the end of \(identifier)", in: events) { event in
        if case .terminated(identifier, let pid, let reason) = event { (pid, reason) } else { nil }
    }
}

/// How process `pid` ended.
public func termination(of pid: Int32, in events: AsyncStream<LauncherEvent>) async throws -> TerminationReason {
    try await firstEvent("the end of pid \(pid)", in: events) { event in
        if case .terminated(_, pid, let reason) = event { reason } else { nil }
    }
}

/// The next lifecycle event of `connection`.
public func nextEvent(of connection: ServiceConnection) async throws -> ServiceConnection.Event {
    try await withDeadline(.seconds(10), "an event of \(connection.identifier)") {
        var iterator = connection.events.makeAsyncIterator()
        guard let event = await iterator.next() else { throw StreamEnded(what: "an event of \(connection.identifier)") }
        return event
    }
}

/// The next frame's damage of `view`, with a deadline.
public func nextDamage(_ view: RemoteView) async throws -> [PixelRect] {
    try await withDeadline(.seconds(10), "a frame") {
        var iterator = view.damage.makeAsyncIterator()
        guard let damage = await iterator.next() else { throw StreamEnded(what: "a frame") }
        return damage
    }
}

/// A temporary folder of manifests for the fixture service.
public struct ServiceFolder: Sendable {
    public let folder: TemporaryFolder
    /// The folder's path.
    public var path: String { folder.path }

    /// A folder holding `manifests` (file name → JSON).
    public init(_ manifests: [String: String]) throws {
        folder = try TemporaryFolder("remoteview-services")
        for (name, json) in manifests { try folder.write(name, json) }
    }

    /// Deletes the folder.
    public func remove() { folder.remove() }

    /// A manifest of the test service in `mode`; it handshakes as `identifier`, or as
    /// `handshakeIdentifier` when given (a service that lies about who it is).
    public static func manifest(identifier: String = "com.example.test", mode: String = "serve", idleTimeout: Double = 30,
                                handshakeIdentifier: String? = nil, extra: String? = nil) -> String {
        """
        {
          "identifier": "\(identifier)",
          "executable": "\(testServiceExecutable)",
          "arguments": ["\(mode)", "\(handshakeIdentifier ?? identifier)"],
          "display": { "title": "Test service" },
          "idleTimeout": \(idleTimeout)\(extra.map { ",\n  " + $0 } ?? "")
        }
        """
    }
}

/// Log lines captured by a test's logger.
public final class LogRecords: Sendable {
    public struct Line: Sendable {
        public var message: String
        public var metadata: [String: String]
    }

    private let storage = Mutex<(lines: [Line], waiters: [Int: AsyncStream<Line>.Continuation], next: Int)>(([], [:], 0))
    public init() {}

    /// Every line logged so far.
    public var lines: [Line] { storage.withLock { $0.lines } }

    /// A log handler that records here.
    public func handler() -> some LogHandler { Handler(records: self) }

    /// The first line, logged so far or from now on, that `match` picks, within `deadline`.
    public func first(_ what: String, within deadline: Duration = .seconds(15),
                      where match: @escaping @Sendable (Line) -> Bool) async throws -> Line {
        try await withDeadline(deadline, what) {
            let (stream, continuation) = AsyncStream.makeStream(of: Line.self)
            let (id, logged) = self.storage.withLock { storage in
                defer { storage.next += 1 }
                storage.waiters[storage.next] = continuation
                return (storage.next, storage.lines)
            }
            defer { _ = self.storage.withLock { $0.waiters.removeValue(forKey: id) } }
            if let line = logged.first(where: match) { return line }
            for await line in stream where match(line) { return line }
            throw StreamEnded(what: what)
        }
    }

    fileprivate func append(_ line: Line) {
        let waiters = storage.withLock { storage in
            storage.lines.append(line)
            return Array(storage.waiters.values)
        }
        for waiter in waiters { waiter.yield(line) }
    }

    private struct Handler: LogHandler {
        let records: LogRecords
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let merged = metadata.merging(event.metadata ?? [:]) { _, new in new }
            records.append(Line(message: "\(event.message)", metadata: merged.mapValues { "\($0)" }))
        }
    }
}
