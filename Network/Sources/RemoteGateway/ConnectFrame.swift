import FoundationEssentials
import RemoteHost

/// One message of a `Connect` stream (docs/Gateway.md, "Connect"): the gateway's own
/// framing around RemoteView's packets, hand-written (no code generation), one frame per gRPC
/// message. The first byte is the frame's kind; numbers are little-endian.
///
/// | kind | direction | after the kind byte |
/// | --- | --- | --- |
/// | `0x01` open | host → gateway, first and once | `u8` version (1 or 2), `u8` n, the service's identifier (n bytes) |
/// | `0x02` opened | gateway → host, once | version 1: nothing; version 2: the call's 16-byte token |
/// | `0x03` packet | both | `u8` k, k × (`u32` attachment size, `u8` its seals: `F_SEAL_*` bits), the envelope's bytes |
/// | `0x04` chunk | both | 1…``maxChunkBytes`` bytes of the attachments owed |
/// | `0x05` end | gateway → host, last | `u8` code, then JSON of a `TerminationReason`, bounded (or nothing) |
///
public enum ConnectFrame: Sendable, Hashable {
    /// The host asks for a service by its bare identifier, speaking framing `version`.
    case open(identifier: String, version: UInt8 = ConnectFrame.version)
    /// The gateway has a channel to the service: packets may flow. Under framing version 2,
    /// with the call's token, which opens its view's `View` and `Input` streams.
    case opened(token: [UInt8]? = nil)
    /// A RemoteView packet: its envelope's bytes, and the sizes of the attachments (memfds on
    /// a local socket) whose bytes follow as chunks, in order. `seals` are each attachment's
    /// seals where it came from (empty: every one sealed against any change, as a share item
    /// is); the far side seals its copy the same way, so that the receiver's own checks (a
    /// share item sealed against any change, a surface's buffer against resizing) hold end to
    /// end.
    case packet(envelope: [UInt8], attachmentSizes: [Int], seals: [MemoryFile.Seals] = [])
    /// Bytes of the attachments the last packet announced.
    case chunk([UInt8])
    /// The far side ended: how.
    case end(ConnectEnd)

    /// Which way a frame travels: each kind has its directions.
    public enum Direction: Sendable, Hashable {
        case toGateway
        case toHost
    }

    /// The framing's version, in `open`: 2. Under version 1 the gateway relays a view's surface
    /// messages as they are (its buffer crosses once, as a copy); under version 2 it shows the
    /// view itself and sends its frames on the `View` stream (docs/Gateway.md, "Views"). A
    /// gateway serves both.
    public static let version: UInt8 = 2
    /// The versions a gateway serves.
    public static let versions: ClosedRange<UInt8> = 1...2
    /// The size of a call's token in `opened` (version 2).
    public static let tokenBytes = 16
    /// The largest envelope: a RemoteView packet's bound.
    public static let maxEnvelopeBytes = 65_536
    /// The most attachments one packet carries.
    public static let maxAttachments = 16
    /// The largest attachment: a shared file's bound (`ShareLimits.maxFileBytes`).
    public static let maxAttachmentBytes = ShareLimits.maxFileBytes
    /// The most bytes a chunk carries (60 KiB): with its framing, under a 64 KiB packet.
    public static let maxChunkBytes = 61_440
    /// The largest frame: a packet with the most attachments and the largest envelope. Each
    /// side refuses a larger gRPC message before reading it (the gateway's
    /// `maxRequestPayloadSize`, the client's `maxResponseMessageBytes`).
    public static let maxFrameBytes = 2 + 5 * maxAttachments + maxEnvelopeBytes
    /// A share item's seals: against any change.
    public static let allSeals: MemoryFile.Seals = [.seal, .shrink, .grow, .write]
    /// The seals a frame may carry (`F_SEAL_SEAL`, `SHRINK`, `GROW`, `WRITE`, `FUTURE_WRITE`).
    static let knownSeals: Int32 = 0x1F
    /// The largest `end` frame's JSON (60 KiB): a bounded reason's words, each control
    /// character escaped as six bytes at worst.
    public static let maxEndBytes = 61_440

    enum Kind: UInt8 {
        case open = 1, opened, packet, chunk, end
    }

    /// The frame's bytes.
    public func encoded() -> [UInt8] {
        switch self {
        case .open(let identifier, let version):
            let bytes = Array(identifier.utf8)
            return [Kind.open.rawValue, version, UInt8(truncatingIfNeeded: bytes.count)] + bytes
        case .opened(let token):
            return [Kind.opened.rawValue] + (token ?? [])
        case .packet(let envelope, let sizes, let seals):
            var bytes: [UInt8] = [Kind.packet.rawValue, UInt8(truncatingIfNeeded: sizes.count)]
            for (index, size) in sizes.enumerated() {
                bytes.append(littleEndian: UInt32(truncatingIfNeeded: size))
                bytes.append(UInt8(truncatingIfNeeded: (index < seals.count ? seals[index] : Self.allSeals).rawValue))
            }
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
            let version = body[body.startIndex]
            guard versions.contains(version) else {
                throw violation("open.version", "framing version \(version); this gateway speaks \(versions.lowerBound) to \(versions.upperBound)")
            }
            let length = Int(body[body.startIndex + 1]), name = body.dropFirst(2)
            guard name.count == length else { throw violation("open.length", "an identifier said to be \(length) bytes, \(name.count) given") }
            guard let identifier = String(validating: name, as: UTF8.self), isServiceIdentifier(identifier) else {
                throw violation("open.identifier", "\"\(String(decoding: name, as: UTF8.self).escapedForTerminal())\" is not a service identifier")
            }
            return .open(identifier: identifier, version: version)
        case .opened:
            guard body.isEmpty || body.count == tokenBytes else {
                throw violation("opened.length", "an opened frame with \(body.count) bytes after its kind, not 0 or a \(tokenBytes)-byte token")
            }
            return .opened(token: body.isEmpty ? nil : Array(body))
        case .packet:
            guard let count = body.first.map(Int.init) else { throw violation("packet.length", "a packet frame without its attachment count") }
            guard count <= maxAttachments else { throw violation("packet.attachments", "\(count) attachments, more than \(maxAttachments)") }
            guard body.count >= 1 + 5 * count else { throw violation("packet.length", "a packet frame too short for its \(count) attachment sizes") }
            var sizes: [Int] = [], seals: [MemoryFile.Seals] = []
            for index in 0..<count {
                let start = body.startIndex + 1 + 5 * index
                let size = body[start..<start + 4].reversed().reduce(0) { $0 << 8 | Int($1) }
                let sealBits = Int32(body[start + 4])
                guard sealBits & ~knownSeals == 0 else {
                    throw violation("packet.seals", "attachment \(index) with seals 0x\(String(sealBits, radix: 16)), not F_SEAL_* bits")
                }
                seals.append(MemoryFile.Seals(rawValue: sealBits))
                guard (0...maxAttachmentBytes).contains(size) else {
                    throw violation("packet.attachment-size", "attachment \(index) of \(size) bytes, not 0…\(maxAttachmentBytes)")
                }
                sizes.append(size)
            }
            let envelope = body.dropFirst(1 + 5 * count)
            guard (1...maxEnvelopeBytes).contains(envelope.count) else {
                throw violation("packet.envelope", "an envelope of \(envelope.count) bytes, not 1…\(maxEnvelopeBytes)")
            }
            return .packet(envelope: Array(envelope), attachmentSizes: sizes, seals: seals.allSatisfy { $0 == allSeals } ? [] : seals)
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

/// The order of a `Connect` stream's frames, as one side reads them: a state machine fed each
/// message, giving what it means once it is whole.
///
/// - Toward the gateway: `open` first and once, then packets.
/// - Toward the host: `opened` (or `end`, when the service cannot be reached) first, then
///   packets, then `end` last.
/// - A packet's attachments follow it as chunks, each filling its attachment in order, none
///   crossing into the next; nothing else comes until they are whole.
///
/// Each attachment is written into a memfd of its own as its chunks arrive, and sealed against
/// once whole with the seals its packet says it had where it came from (a share item's: against
/// any change): nothing of it is gathered in memory. Its size was announced and is
/// bounded (``ConnectFrame/maxAttachmentBytes``); the file grows only as bytes come.
public struct ConnectReader: Sendable {
    /// What a frame, or the last chunk of a packet, meant.
    public enum Event: Sendable {
        case open(identifier: String, version: UInt8)
        case opened(token: [UInt8]?)
        /// A packet, whole: its envelope and its attachments, sealed memfds.
        case packet(envelope: [UInt8], attachments: [Attachment])
        case end(ConnectEnd)
    }

    private enum State: Sendable {
        case start
        case flowing
        case owing(envelope: [UInt8], sizes: [Int], seals: [MemoryFile.Seals], whole: [Attachment], current: Item?)
        case ended
    }

    /// The attachment being filled: its memfd and how much has come.
    private final class Item: @unchecked Sendable {
        // @unchecked: owned by one reader, which one task feeds.
        let file: MemoryFile
        var written = 0

        init() throws(RemoteError) {
            do { file = try MemoryFile(name: "remoteview-item") } catch {
                throw RemoteError(.interrupted, "cannot make a memfd for an item: \(error)")
            }
        }

        /// The memfd, sealed with `seals` (those it had where it came from), for a packet of its
        /// own.
        func finished(sealing seals: MemoryFile.Seals) throws(RemoteError) -> Attachment {
            do {
                if !seals.isEmpty { try file.addSeals(seals) }
                return try Attachment(duplicating: file.fd)
            } catch {
                throw RemoteError(.interrupted, "cannot seal an item's memfd: \(error)")
            }
        }
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
    ///   violation the stream is over: read nothing more. `interrupted` when a memfd cannot be
    ///   made or written (no memory).
    public mutating func read(_ bytes: [UInt8]) throws(RemoteError) -> Event? {
        let frame = try ConnectFrame.decode(bytes, direction: direction)
        switch (state, frame) {
        case (.ended, _):
            throw ConnectFrame.violation("after-end", "a frame after the end")
        case (.start, .open(let identifier, let version)):
            state = .flowing
            return .open(identifier: identifier, version: version)
        case (.start, .opened(let token)):
            state = .flowing
            return .opened(token: token)
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
        case (.flowing, .packet(let envelope, let sizes, let seals)):
            return try owe(envelope: envelope, sizes: sizes, seals: seals, whole: [])
        case (.flowing, .chunk):
            throw ConnectFrame.violation("chunk.unowed", "a chunk when no attachment is owed")
        case (.owing, .packet):
            throw ConnectFrame.violation("chunk.missing", "a packet before the last packet's attachments were whole")
        case (.owing(let envelope, let sizes, let seals, let whole, let current), .chunk(let payload)):
            let size = sizes[whole.count]
            let item: Item
            if let current { item = current } else { item = try Item() }
            guard item.written + payload.count <= size else {
                throw ConnectFrame.violation("chunk.overrun", "a chunk of \(payload.count) bytes past attachment \(whole.count)'s \(size) (\(item.written) had come)")
            }
            do { try item.file.write(payload, at: item.written) } catch {
                throw RemoteError(.interrupted, "cannot write an item's memfd: \(error)")
            }
            item.written += payload.count
            guard item.written == size else {
                state = .owing(envelope: envelope, sizes: sizes, seals: seals, whole: whole, current: item)
                return nil
            }
            return try owe(envelope: envelope, sizes: sizes, seals: seals,
                           whole: whole + [try item.finished(sealing: Self.seals(seals, whole.count))])
        }
    }

    /// The packet once every attachment is whole (empty ones are at once: no chunk carries
    /// them), or the state that waits for the next.
    private mutating func owe(envelope: [UInt8], sizes: [Int], seals: [MemoryFile.Seals], whole: [Attachment]) throws(RemoteError) -> Event? {
        var whole = whole
        while whole.count < sizes.count, sizes[whole.count] == 0 {
            whole.append(try Item().finished(sealing: Self.seals(seals, whole.count)))
        }
        guard whole.count < sizes.count else {
            state = .flowing
            return .packet(envelope: envelope, attachments: whole)
        }
        state = .owing(envelope: envelope, sizes: sizes, seals: seals, whole: whole, current: nil)
        return nil
    }

    /// Attachment `index`'s seals in a packet's `seals` (empty: all sealed against any change).
    private static func seals(_ seals: [MemoryFile.Seals], _ index: Int) -> MemoryFile.Seals {
        index < seals.count ? seals[index] : ConnectFrame.allSeals
    }

    /// The frames that carry `envelope` and `attachments` (bytes in memory: for tests and small
    /// items; ``ConnectWriter`` streams memfds): a packet, then each attachment in chunks of at
    /// most ``ConnectFrame/maxChunkBytes``.
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

/// The sending side of a packet's attachments: each a memfd, read and sent in chunks of at
/// most ``ConnectFrame/maxChunkBytes`` as the stream takes them, never whole in memory.
public enum ConnectWriter {
    /// An attachment being sent: its memfd, and its size when checked.
    private final class Source {
        let file: MemoryFile
        let size: Int
        init(file: consuming MemoryFile, size: Int) {
            self.file = file
            self.size = size
        }
    }

    /// The frames of `envelope` and `attachments`, handed to `write` in order (which waits
    /// while the stream is full).
    ///
    /// Each attachment must be a memfd (`F_GET_SEALS` answers), of at most
    /// ``ConnectFrame/maxAttachmentBytes``. Its seals travel with it, and the far side's copy
    /// gets the same ones, so the receiver's own checks hold end to end (a share item sealed
    /// against any change, a surface's buffer against resizing). One not sealed against
    /// writing is read as it is at the time: its later writes do not cross (views do not cross
    /// yet, issue 35). The
    /// attachments are taken (closed once sent).
    ///
    /// - Throws: `RemoteError` `protocolViolation` naming the rule (`connect.item-not-memfd`,
    ///   `connect.item-size`) for an attachment that is not such a memfd, before anything is
    ///   written; `interrupted` when an unsealed one shrank while it was read; what `write`
    ///   throws.
    public static func write(envelope: [UInt8], attachments: [Attachment],
                             to write: (ConnectFrame) async throws -> Void) async throws {
        var files: [Source] = [], allSeals: [MemoryFile.Seals] = []
        for (index, attachment) in attachments.enumerated() {
            guard let fd = attachment.take() else { throw ConnectFrame.violation("item-not-memfd", "attachment \(index) was taken") }
            let file = MemoryFile(adopting: fd)
            let seals: MemoryFile.Seals, size: Int
            do throws(SystemCallError) {
                seals = try file.seals
                size = try file.size
            } catch {
                throw ConnectFrame.violation("item-not-memfd", "attachment \(index) is not a memfd, which is all that crosses a gateway (\(error))")
            }
            allSeals.append(MemoryFile.Seals(rawValue: seals.rawValue & ConnectFrame.knownSeals))
            guard size <= ConnectFrame.maxAttachmentBytes else {
                throw ConnectFrame.violation("item-size", "attachment \(index) holds \(size) bytes, over \(ConnectFrame.maxAttachmentBytes)")
            }
            files.append(Source(file: file, size: size))
        }
        let uniform = allSeals.allSatisfy { $0 == ConnectFrame.allSeals }
        try await write(.packet(envelope: envelope, attachmentSizes: files.map(\.size), seals: uniform ? [] : allSeals))
        for source in files {
            let size = source.size
            var offset = 0
            while offset < size {
                let chunk = try source.file.read(count: min(ConnectFrame.maxChunkBytes, size - offset), at: offset)
                guard !chunk.isEmpty else { throw RemoteError(.interrupted, "an item's memfd ended at \(offset) of its \(size) bytes") }
                try await write(.chunk(chunk))
                offset += chunk.count
            }
        }
    }
}
