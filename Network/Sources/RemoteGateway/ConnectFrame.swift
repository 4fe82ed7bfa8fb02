import FoundationEssentials
import RemoteHost

/// One message of a `Connect` stream (docs/Gateway.md, "Not built yet"): the gateway's own
/// framing around RemoteView's packets, hand-written (no code generation), one frame per gRPC
/// message. The first byte is the frame's kind; numbers are little-endian.
///
/// | kind | direction | after the kind byte |
/// | --- | --- | --- |
/// | `0x01` open | host → gateway, first and once | `u8` version (1), `u8` n, the service's identifier (n bytes) |
/// | `0x02` opened | gateway → host, once | nothing |
/// | `0x03` packet | both | `u8` k, k × `u32` attachment sizes, the envelope's bytes |
/// | `0x04` chunk | both | 1…``maxChunkBytes`` bytes of the attachments owed |
/// | `0x05` end | gateway → host, last | `u8` code, then JSON of a `TerminationReason`, bounded (or nothing) |
///
/// This is the first piece of the `Connect` call, built and tested on its own: the gateway
/// does not serve `Connect` yet, and no host speaks it.
public enum ConnectFrame: Sendable, Hashable {
    /// The host asks for a service by its bare identifier.
    case open(identifier: String)
    /// The gateway has a channel to the service: packets may flow.
    case opened
    /// A RemoteView packet: its envelope's bytes, and the sizes of the attachments (memfds on
    /// a local socket) whose bytes follow as chunks, in order.
    case packet(envelope: [UInt8], attachmentSizes: [Int])
    /// Bytes of the attachments the last packet announced.
    case chunk([UInt8])
    /// The far side ended: how.
    case end(ConnectEnd)

    /// Which way a frame travels: each kind has its directions.
    public enum Direction: Sendable, Hashable {
        case toGateway
        case toHost
    }

    /// The framing's version, in `open`.
    public static let version: UInt8 = 1
    /// The largest envelope: a RemoteView packet's bound.
    public static let maxEnvelopeBytes = 65_536
    /// The most attachments one packet carries.
    public static let maxAttachments = 16
    /// The largest attachment: a shared file's bound (`ShareLimits.maxFileBytes`).
    public static let maxAttachmentBytes = ShareLimits.maxFileBytes
    /// The most bytes a chunk carries (60 KiB): with its framing, under a 64 KiB packet.
    public static let maxChunkBytes = 61_440
    /// The largest `end` frame's JSON (60 KiB): a bounded reason's words, each control
    /// character escaped as six bytes at worst.
    public static let maxEndBytes = 61_440

    enum Kind: UInt8 {
        case open = 1, opened, packet, chunk, end
    }

    /// The frame's bytes.
    public func encoded() -> [UInt8] {
        switch self {
        case .open(let identifier):
            let bytes = Array(identifier.utf8)
            return [Kind.open.rawValue, Self.version, UInt8(truncatingIfNeeded: bytes.count)] + bytes
        case .opened:
            return [Kind.opened.rawValue]
        case .packet(let envelope, let sizes):
            var bytes: [UInt8] = [Kind.packet.rawValue, UInt8(truncatingIfNeeded: sizes.count)]
            for size in sizes { withUnsafeBytes(of: UInt32(truncatingIfNeeded: size).littleEndian) { bytes += $0 } }
            return bytes + envelope
        case .chunk(let payload):
            return [Kind.chunk.rawValue] + payload
        case .end(let end):
            let reason = end.reason.flatMap { try? JSONEncoder().encode($0.bounded()) }.map(Array.init) ?? []
            return [Kind.end.rawValue, end.code.rawValue] + reason
        }
    }

    /// The frame in `bytes`, traveling `direction`.
    ///
    /// - Throws: `RemoteError` `protocolViolation` naming the rule (`connect.<rule>`): an empty
    ///   frame, an unknown kind, a kind that does not travel this way, a wrong version, an
    ///   identifier that is none, too many or too large attachments, an envelope empty or over
    ///   its bound, a chunk empty or over ``maxChunkBytes``, an end that is not one, and any
    ///   frame with bytes missing or left over.
    public static func decode(_ bytes: [UInt8], direction: Direction) throws(RemoteError) -> ConnectFrame {
        guard let first = bytes.first else { throw violation("empty", "an empty frame") }
        guard let kind = Kind(rawValue: first) else { throw violation("kind", "a frame of unknown kind \(first)") }
        let allowed: Bool = switch kind {
        case .open: direction == .toGateway
        case .opened, .end: direction == .toHost
        case .packet, .chunk: true
        }
        guard allowed else { throw violation("direction", "a \(kind) frame travels the other way") }
        let body = bytes.dropFirst()
        switch kind {
        case .open:
            guard body.count >= 2 else { throw violation("open.length", "an open frame of \(body.count) bytes, fewer than 2") }
            guard body[body.startIndex] == version else { throw violation("open.version", "framing version \(body[body.startIndex]); this gateway speaks \(version)") }
            let length = Int(body[body.startIndex + 1]), name = body.dropFirst(2)
            guard name.count == length else { throw violation("open.length", "an identifier said to be \(length) bytes, \(name.count) given") }
            guard let identifier = String(validating: name, as: UTF8.self), isServiceIdentifier(identifier) else {
                throw violation("open.identifier", "\"\(String(decoding: name, as: UTF8.self).escapedForTerminal())\" is not a service identifier")
            }
            return .open(identifier: identifier)
        case .opened:
            guard body.isEmpty else { throw violation("opened.length", "an opened frame with \(body.count) bytes after its kind") }
            return .opened
        case .packet:
            guard let count = body.first.map(Int.init) else { throw violation("packet.length", "a packet frame without its attachment count") }
            guard count <= maxAttachments else { throw violation("packet.attachments", "\(count) attachments, more than \(maxAttachments)") }
            guard body.count >= 1 + 4 * count else { throw violation("packet.length", "a packet frame too short for its \(count) attachment sizes") }
            var sizes: [Int] = []
            for index in 0..<count {
                let start = body.startIndex + 1 + 4 * index
                let size = body[start..<start + 4].reversed().reduce(0) { $0 << 8 | Int($1) }
                guard (1...maxAttachmentBytes).contains(size) else {
                    throw violation("packet.attachment-size", "attachment \(index) of \(size) bytes, not 1…\(maxAttachmentBytes)")
                }
                sizes.append(size)
            }
            let envelope = body.dropFirst(1 + 4 * count)
            guard (1...maxEnvelopeBytes).contains(envelope.count) else {
                throw violation("packet.envelope", "an envelope of \(envelope.count) bytes, not 1…\(maxEnvelopeBytes)")
            }
            return .packet(envelope: Array(envelope), attachmentSizes: sizes)
        case .chunk:
            guard (1...maxChunkBytes).contains(body.count) else { throw violation("chunk.length", "a chunk of \(body.count) bytes, not 1…\(maxChunkBytes)") }
            return .chunk(Array(body))
        case .end:
            guard let raw = body.first, let code = ConnectEnd.Code(rawValue: raw) else {
                throw violation("end.code", "an end frame without a known code")
            }
            let json = body.dropFirst()
            guard json.count <= maxEndBytes else { throw violation("end.length", "an end frame's reason of \(json.count) bytes, over \(maxEndBytes)") }
            guard !json.isEmpty else { return .end(ConnectEnd(code: code, reason: nil)) }
            let reason: TerminationReason
            do { reason = try JSONDecoder().decode(TerminationReason.self, from: Data(json)) } catch {
                throw violation("end.reason", "an end frame's reason is not a termination reason: \(String(describing: error).escapedForTerminal())")
            }
            return .end(ConnectEnd(code: code, reason: reason.bounded()))
        }
    }

    static func violation(_ rule: String, _ what: String) -> RemoteError {
        RemoteError(.protocolViolation, "rule connect.\(rule): \(what)")
    }
}

/// How a `Connect` stream's far side ended (an `end` frame).
public struct ConnectEnd: Sendable, Hashable {
    /// What ended.
    public enum Code: UInt8, Sendable, Hashable {
        /// The gateway closed the channel (the host asked, or the gateway shut down).
        case closed = 0
        /// The service's process ended: ``ConnectEnd/reason`` says how.
        case ended = 1
        /// The service cannot be reached now; a later connection may work (*interrupted*).
        case interrupted = 2
        /// The service can never be reached this way (*invalidated*: not granted, not there,
        /// its sandbox refused).
        case invalidated = 3
    }

    /// What ended.
    public var code: Code
    /// How the service's process ended, as the gateway's launcher reported it, bounded.
    public var reason: TerminationReason?

    /// An end with `code` and `reason`.
    public init(code: Code, reason: TerminationReason?) {
        self.code = code
        self.reason = reason
    }
}

extension TerminationReason {
    /// This reason with its words bounded as a local one's are: the detail and the fatal error
    /// at most 4096 bytes each, the standard error's tail at most 32 lines and
    /// `maxStandardErrorBytes` in all (a far side's words are a peer's).
    func bounded() -> TerminationReason {
        func cut(_ text: String, _ limit: Int) -> String {
            text.utf8.count <= limit ? text : String(decoding: text.utf8.prefix(limit), as: UTF8.self)
        }
        var bounded = self
        bounded.detail = cut(detail, 4096)
        bounded.fatalError = fatalError.map { cut($0, 4096) }
        var total = 0
        bounded.standardErrorTail = Array(standardErrorTail.suffix(32).reversed().prefix { line in
            total += line.utf8.count
            return total <= Self.maxStandardErrorBytes
        }.reversed())
        return bounded
    }
}

/// The order of a `Connect` stream's frames, as one side reads them: a value state machine fed
/// each message, giving what it means once it is whole.
///
/// - Toward the gateway: `open` first and once, then packets.
/// - Toward the host: `opened` (or `end`, when the service cannot be reached) first, then
///   packets, then `end` last.
/// - A packet's attachments follow it as chunks, each filling its attachment in order, none
///   crossing into the next; nothing else comes until they are whole.
///
/// Attachments are gathered in memory here, at most ``ConnectFrame/maxAttachments`` ×
/// ``ConnectFrame/maxAttachmentBytes``; the step that carries them writes each chunk into a
/// sealed memfd instead (docs/Gateway.md).
public struct ConnectReader: Sendable {
    /// What a frame, or the last chunk of a packet, meant.
    public enum Event: Sendable, Hashable {
        case open(identifier: String)
        case opened
        case packet(envelope: [UInt8], attachments: [[UInt8]])
        case end(ConnectEnd)
    }

    private enum State: Sendable {
        case start
        case flowing
        case owing(envelope: [UInt8], sizes: [Int], whole: [[UInt8]], current: [UInt8])
        case ended
    }

    /// Which way the frames read here travel.
    public let direction: ConnectFrame.Direction
    private var state = State.start

    /// A reader of frames traveling `direction`.
    public init(direction: ConnectFrame.Direction) {
        self.direction = direction
    }

    /// Reads one message: the event it completes, if any.
    ///
    /// - Throws: `RemoteError` `protocolViolation` naming the rule (`connect.<rule>`): the
    ///   frame's own (``ConnectFrame/decode(_:direction:)``), or its place in the stream. After a
    ///   violation the stream is over: read nothing more.
    public mutating func read(_ bytes: [UInt8]) throws(RemoteError) -> Event? {
        let frame = try ConnectFrame.decode(bytes, direction: direction)
        switch (state, frame) {
        case (.ended, _):
            throw ConnectFrame.violation("after-end", "a frame after the end")
        case (.start, .open(let identifier)):
            state = .flowing
            return .open(identifier: identifier)
        case (.start, .opened):
            state = .flowing
            return .opened
        case (_, .open):
            throw ConnectFrame.violation("open.again", "a second open")
        case (_, .opened):
            throw ConnectFrame.violation("opened.again", "a second opened")
        case (_, .end(let end)):
            // Also before `opened` (the service could not be reached) and with a packet owed
            // (the far side ended mid-transfer: the packet is dropped).
            state = .ended
            return .end(end)
        case (.start, _):
            throw ConnectFrame.violation(direction == .toGateway ? "open.first" : "opened.first",
                                         direction == .toGateway ? "a frame before open" : "a frame before opened")
        case (.flowing, .packet(let envelope, let sizes)):
            guard !sizes.isEmpty else { return .packet(envelope: envelope, attachments: []) }
            state = .owing(envelope: envelope, sizes: sizes, whole: [], current: [])
            return nil
        case (.flowing, .chunk):
            throw ConnectFrame.violation("chunk.unowed", "a chunk when no attachment is owed")
        case (.owing, .packet):
            throw ConnectFrame.violation("chunk.missing", "a packet before the last packet's attachments were whole")
        case (.owing(let envelope, let sizes, var whole, var current), .chunk(let payload)):
            let size = sizes[whole.count]
            guard current.count + payload.count <= size else {
                throw ConnectFrame.violation("chunk.overrun", "a chunk of \(payload.count) bytes past attachment \(whole.count)'s \(size) (\(current.count) had come)")
            }
            current += payload
            if current.count == size {
                whole.append(current)
                current = []
            }
            if whole.count == sizes.count {
                state = .flowing
                return .packet(envelope: envelope, attachments: whole)
            }
            state = .owing(envelope: envelope, sizes: sizes, whole: whole, current: current)
            return nil
        }
    }

    /// The frames that carry `envelope` and `attachments`: a packet, then each attachment in
    /// chunks of at most ``ConnectFrame/maxChunkBytes``.
    public static func frames(envelope: [UInt8], attachments: [[UInt8]]) -> [ConnectFrame] {
        var frames = [ConnectFrame.packet(envelope: envelope, attachmentSizes: attachments.map(\.count))]
        for attachment in attachments {
            var start = 0
            while start < attachment.count {
                let end = min(start + ConnectFrame.maxChunkBytes, attachment.count)
                frames.append(.chunk(Array(attachment[start..<end])))
                start = end
            }
        }
        return frames
    }
}
