import GRPCCore
import Logging
@_spi(RemoteViewTransport) import RemoteHost
import Synchronization

/// The messages of the `Input` stream (docs/Gateway.md, "Views"), after its first message (the
/// call's 16-byte token, as on `View`).
///
/// | kind | direction | after the kind byte |
/// | --- | --- | --- |
/// | `0x01` input | host → gateway | a RemoteView envelope of the input family (at most ``maxInputBytes``) |
/// | `0x02` sync | host → gateway | `u64` n: answer once the input before it is the service's |
/// | `0x03` synced | gateway → host | `u64` n |
public enum InputFrame: Sendable, Hashable {
    case input([UInt8])
    case sync(UInt64)
    case synced(UInt64)

    /// The largest input envelope: `text_input`'s 4096 bytes and the envelope around them.
    public static let maxInputBytes = 8192

    public func encoded() -> [UInt8] {
        var bytes: [UInt8]
        switch self {
        case .input(let envelope): return [1] + envelope
        case .sync(let number): bytes = [2]; bytes.append(littleEndian: number)
        case .synced(let number): bytes = [3]; bytes.append(littleEndian: number)
        }
        return bytes
    }

    /// - Throws: `RemoteError` `protocolViolation` (`input.<rule>`) for an empty message, an
    ///   unknown kind or one traveling the wrong way, an envelope empty or over its bound, and
    ///   a number cut short.
    public static func decode(_ bytes: [UInt8], toHost: Bool) throws(RemoteError) -> InputFrame {
        func violation(_ rule: String, _ what: String) -> RemoteError { RemoteError(.protocolViolation, "rule input.\(rule): \(what)") }
        guard let kind = bytes.first else { throw violation("empty", "an empty message") }
        guard (kind == 3) == toHost, (1...3).contains(kind) else {
            throw violation("kind", (1...3).contains(kind) ? "a message of kind \(kind) travels the other way" : "a message of unknown kind \(kind)")
        }
        var reader = ByteReader(bytes.dropFirst())
        switch kind {
        case 1:
            guard (1...maxInputBytes).contains(reader.count) else { throw violation("length", "an input of \(reader.count) bytes, not 1…\(maxInputBytes)") }
            return .input(reader.rest())
        default:
            guard let number = reader.u64(), reader.isEmpty else { throw violation("length", "a \(kind == 2 ? "sync" : "synced") message of \(bytes.count) bytes, not 9") }
            return kind == 2 ? .sync(number) : .synced(number)
        }
    }
}

/// The gateway's `Connect` calls whose host takes a view's frames on streams of their own
/// (framing version 2), by their token: a `View` or `Input` call names its `Connect` call so,
/// and must come from the same client.
final class ViewSessions: Sendable {
    private let sessions = Mutex<[[UInt8]: ViewSession]>([:])

    /// Registers `session`; returns its token (16 random bytes).
    func add(_ session: ViewSession) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        let token = (0..<ConnectFrame.tokenBytes).map { _ in UInt8.random(in: 0...255, using: &generator) }
        sessions.withLock { $0[token] = session }
        return token
    }

    func remove(_ token: [UInt8]) {
        sessions.withLock { $0.removeValue(forKey: token) }?.end()
    }

    /// The session `token` names, for `client`.
    ///
    /// - Throws: `RPCError` `notFound` for a token of no call (ended, or never given),
    ///   `permissionDenied` for another client's.
    func session(_ token: [UInt8], for client: ClientIdentity) throws -> ViewSession {
        guard let session = sessions.withLock({ $0[token] }) else {
            throw RPCError(code: .notFound, message: "the token names no Connect call of this gateway (it ended, or never was)")
        }
        guard session.client == client else {
            throw RPCError(code: .permissionDenied, message: "the token names another client's Connect call")
        }
        return session
    }
}

/// One `Connect` call's view: its relay, and what its `View` and `Input` streams share.
final class ViewSession: Sendable {
    let client: ClientIdentity
    let identifier: String
    let relay: ServiceRelay
    let logger: Logger
    /// The view's encoder: it takes the frames from the call's start (the first frame does not
    /// wait for the `View` stream to open), and the `View` stream sends what it encoded.
    let sink: GatewayViewSink
    /// Opened when the `Connect` call ends: its streams end with it.
    let ended = Latch()
    private let claims = Mutex<(view: Bool, input: Bool)>((false, false))

    init(client: ClientIdentity, identifier: String, relay: ServiceRelay, codec: ViewFrame.Codec?, logger: Logger) {
        self.client = client
        self.identifier = identifier
        self.relay = relay
        self.logger = logger
        sink = GatewayViewSink(relay: relay, codec: codec)
        relay.attach(sink)
    }

    func end() {
        sink.finish()
        ended.open(nil)
    }

    /// Claims the call's one `View` (or `Input`) stream; `false` when it has one.
    func claim(view: Bool) -> Bool {
        claims.withLock { claims in
            if view ? claims.view : claims.input { return false }
            if view { claims.view = true } else { claims.input = true }
            return true
        }
    }

    func release(view: Bool) {
        claims.withLock { if view { $0.view = false } else { $0.input = false } }
    }
}

/// How much the link carries, as the `View` stream measures it: each frame's bytes from when it
/// was encoded until the host presented it. The gateway compresses with zstd while the bytes
/// not yet presented exceed what the link carries in one frame interval (lz4 otherwise).
struct LinkEstimate: Sendable {
    private var waiting: [(frame: UInt64, bytes: Int, at: ContinuousClock.Instant)] = []
    /// Delivery rates of the last frames (bytes per second); the link's is their largest.
    private var rates: [Double] = []
    private var lastFrame: ContinuousClock.Instant?
    /// The interval between frames, smoothed (seconds).
    private(set) var interval: Double?

    static let ratesKept = 16

    /// The bytes sent and not yet presented.
    var waitingBytes: Int { waiting.reduce(0) { $0 + $1.bytes } }
    /// What the link carries per second, as measured (`nil`: nothing measured yet).
    var rate: Double? { rates.max() }

    /// The codec for the next frame.
    var codec: ViewFrame.Codec {
        guard let rate, let interval else { return .lz4 }
        return Double(waitingBytes) > rate * interval ? .zstd : .lz4
    }

    mutating func encoded(frame: UInt64, bytes: Int, at now: ContinuousClock.Instant) {
        if let lastFrame {
            let seconds = Self.seconds(now - lastFrame)
            interval = interval.map { $0 * 0.8 + seconds * 0.2 } ?? seconds
        }
        lastFrame = now
        waiting.append((frame, bytes, now))
    }

    mutating func presented(frame: UInt64, at now: ContinuousClock.Instant) {
        while let first = waiting.first, first.frame <= frame {
            waiting.removeFirst()
            let seconds = max(Self.seconds(now - first.at), 0.000_1)
            rates.append(Double(first.bytes) / seconds)
            if rates.count > Self.ratesKept { rates.removeFirst() }
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}

/// The gateway's encoder for one view: a ``RelayedViewSink`` whose frames become ``ViewFrame``
/// messages for the `View` stream's writer. One frame is encoded at a time (the relay hands
/// over the next only once this one is taken).
final class GatewayViewSink: RelayedViewSink {
    private let relay: ServiceRelay
    /// The codec every frame gets (`nil`: as the link allows).
    private let codec: ViewFrame.Codec?
    private let encoder = Mutex(ViewFrameEncoder())
    let link = Mutex(LinkEstimate())
    /// Each frame's messages, encoded, for the writer.
    let outbound: AsyncStream<[[UInt8]]>
    private let outboundSink: AsyncStream<[[UInt8]]>.Continuation

    init(relay: ServiceRelay, codec: ViewFrame.Codec? = nil) {
        self.relay = relay
        self.codec = codec
        (outbound, outboundSink) = AsyncStream.makeStream()
    }

    func frame(_ frame: RelayedFrame) {
        Task {
            let codec = codec ?? link.withLock { $0.codec }
            frame.withPixels { pixels in
                encoder.withLock { encoder in
                    let encoded = encoder.encode(frame: frame.number, pixels: pixels, width: frame.width, height: frame.height,
                                                 damage: frame.damage, codec: codec)
                    let messages = encoded.messages.map { $0.encoded() }
                    link.withLock { $0.encoded(frame: frame.number, bytes: messages.reduce(0) { $0 + $1.count }, at: .now) }
                    // Taken before it can be sent, so that its `presented` never reaches the
                    // relay first; under the encoder's lock, so that frames go out in order.
                    relay.frameTaken(frame.number)
                    outboundSink.yield(messages)
                }
            }
        }
    }

    func finish() { outboundSink.finish() }
}

/// A value that closures running at once share.
final class Shared<Value: Sendable>: Sendable {
    let value: Mutex<Value>
    init(_ value: Value) { self.value = Mutex(value) }
}

/// The end of a `View` or `Input` call because its `Connect` call ended: not a failure.
private struct StreamEnded: Error {}

extension GatewayService {
    /// The call's `Connect` session, named by the first message (its token): checked, claimed
    /// (one `View` and one `Input` stream per call).
    static func claim(_ token: [UInt8], view: Bool, client: ClientIdentity, sessions: ViewSessions) throws -> ViewSession {
        guard token.count == ConnectFrame.tokenBytes else {
            throw RPCError(code: .invalidArgument, message: "the stream's first message must be its Connect call's \(ConnectFrame.tokenBytes)-byte token, not \(token.count) bytes")
        }
        let session = try sessions.session(token, for: client)
        guard session.claim(view: view) else {
            throw RPCError(code: .alreadyExists, message: "the Connect call to \(session.identifier) has a \(view ? "View" : "Input") stream already")
        }
        return session
    }

    /// Runs a `View` or `Input` call: `reader` reads the messages after the token (with the
    /// session), `writer` writes until its session ends; the token must come within the
    /// request deadline. Ends, in order, when the `Connect` call ends.
    static func serveStream(view: Bool, _ messages: RPCAsyncSequence<[UInt8], any Error>, client: ClientIdentity, sessions: ViewSessions,
                            reader: @escaping @Sendable (ViewSession, [UInt8]) async throws -> Void,
                            writer: @escaping @Sendable (ViewSession) async throws -> Void) async throws {
        let (named, namedSink) = AsyncStream<ViewSession>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let claimed = Shared<ViewSession?>(nil)
        defer { claimed.value.withLock { $0 }?.release(view: view) }
        do {
            try await withThrowingDiscardingTaskGroup { group in
                group.addTask {
                    defer { namedSink.finish() }
                    var session: ViewSession?
                    for try await message in messages {
                        guard let session else {
                            let claimed = try claim(message, view: view, client: client, sessions: sessions)
                            session = claimed
                            namedSink.yield(claimed)
                            continue
                        }
                        try await reader(session, message)
                    }
                    // The host ended its side: the stream is over.
                    throw StreamEnded()
                }
                group.addTask {
                    try await Task.sleep(for: requestDeadline)
                    if claimed.value.withLock({ $0 }) == nil {
                        throw RPCError(code: .deadlineExceeded, message: "the stream named no Connect call within \(requestDeadline)")
                    }
                }
                group.addTask {
                    var iterator = named.makeAsyncIterator()
                    guard let session = await iterator.next() else { return }
                    claimed.value.withLock { $0 = session }
                    try await withThrowingTaskGroup(of: Void.self) { inner in
                        inner.addTask { try await writer(session) }
                        inner.addTask {
                            _ = await session.ended.wait()
                            throw StreamEnded()
                        }
                        defer { inner.cancelAll() }
                        try await inner.next()
                    }
                    throw StreamEnded()
                }
            }
        } catch is StreamEnded {
            return
        }
    }

    /// A `View` call: the view's frames to the host, its `presented` back.
    static func serveView(_ messages: RPCAsyncSequence<[UInt8], any Error>, _ writer: RPCWriter<[UInt8]>, client: ClientIdentity,
                          sessions: ViewSessions, logger: Logger) async throws {
        try await serveStream(view: true, messages, client: client, sessions: sessions, reader: { session, message in
            let frame: ViewFrame
            do throws(RemoteError) { frame = try ViewFrame.decode(message, toHost: false) } catch {
                logger.warning("\(client) broke the View stream's rules: \(error.reason.escapedForTerminal())")
                throw RPCError(code: .invalidArgument, message: error.reason)
            }
            guard case .presented(let number) = frame else { return }
            session.sink.link.withLock { $0.presented(frame: number, at: .now) }
            do throws(RemoteError) { try await session.relay.presented(frame: number) } catch {
                logger.warning("\(client) broke the View stream's rules: \(error.reason.escapedForTerminal())")
                throw RPCError(code: .invalidArgument, message: error.reason)
            }
        }, writer: { session in
            // The View stream's end ends the view's frames: nothing would present them.
            defer {
                session.relay.detachSink()
                session.sink.finish()
            }
            for await messages in session.sink.outbound {
                for message in messages { try await writer.write(message) }
            }
        })
    }

    /// An `Input` call: the host's input to the service, in order, and `synced` for each `sync`.
    static func serveInput(_ messages: RPCAsyncSequence<[UInt8], any Error>, _ writer: RPCWriter<[UInt8]>, client: ClientIdentity,
                           sessions: ViewSessions, logger: Logger) async throws {
        let (synced, syncedSink) = AsyncStream<UInt64>.makeStream()
        try await serveStream(view: false, messages, client: client, sessions: sessions, reader: { session, message in
            do throws(RemoteError) {
                switch try InputFrame.decode(message, toHost: false) {
                case .input(let envelope): try await session.relay.send(input: envelope)
                case .sync(let number): syncedSink.yield(number)
                case .synced: break  // refused by the decoder
                }
            } catch {
                logger.warning("\(client) broke the Input stream's rules: \(error.reason.escapedForTerminal())")
                throw RPCError(code: .invalidArgument, message: error.reason)
            }
        }, writer: { _ in
            for await number in synced { try await writer.write(InputFrame.synced(number).encoded()) }
        })
    }
}
