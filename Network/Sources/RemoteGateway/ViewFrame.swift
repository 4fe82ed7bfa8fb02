import CCompression
import RemoteHost

/// A remote view's frames on the gateway's `View` stream (docs/Gateway.md, "Views"): what
/// changed in the view's pixels since the frame before, found by diffing against a mirror of
/// what the host has, compressed with lz4 (or zstd on a slow link), in messages of at most
/// ``maxMessageBytes``. Hand-written, as the `Connect` stream's framing is; numbers are
/// little-endian.
///
/// | kind | direction | after the kind byte |
/// | --- | --- | --- |
/// | `0x01` frame | gateway → host | `u8` last (1: the frame is whole), the ``Header`` (below), payload bytes |
/// | `0x02` more | gateway → host | `u8` last, payload bytes: the frame's next part |
/// | `0x03` presented | host → gateway | `u64` frame: the host has shown it (`frame_done`) |
///
/// The header: `u64` frame, `u32` width, `u32` height (the view's size in pixels), `u8` codec
/// (0 raw, 1 lz4, 2 zstd), `u32` decoded bytes, `u32` payload bytes (all parts together), `u8`
/// n damage rects (0…128; none: a frame that changed nothing visible), n × (`u16` x, y, width, height).
///
/// The payload, decoded, is a list of operations on the host's image, each inside one of the
/// frame's damage rects:
///
/// - `0x01` scroll: `u16` x, y, width, height, `i16` dy: each row r of the rect takes the
///   pixels row r + dy had (rows whose source is outside the rect keep theirs);
/// - `0x02` run: `u16` x, y, n, then n pixels (`u32` premultiplied ARGB): pixels of one row.
public enum ViewFrame: Sendable, Hashable {
    case frame(Header, last: Bool, payload: [UInt8])
    case more(last: Bool, payload: [UInt8])
    case presented(frame: UInt64)

    /// How a frame's payload is compressed.
    public enum Codec: UInt8, Sendable, Hashable, CustomStringConvertible {
        case raw = 0, lz4, zstd
        public var description: String { switch self { case .raw: "raw"; case .lz4: "lz4"; case .zstd: "zstd" } }

        /// The codec named `name` ("raw", "lz4", "zstd").
        public init?(named name: String) {
            guard let codec = [Codec.raw, .lz4, .zstd].first(where: { $0.description == name }) else { return nil }
            self = codec
        }
    }

    /// What the first message of a frame says of it.
    public struct Header: Sendable, Hashable {
        public var frame: UInt64
        public var width: Int
        public var height: Int
        public var codec: Codec
        /// The payload's size once decompressed: checked against ``ViewFrame/maxDecodedBytes(damage:)``
        /// before anything is decompressed.
        public var decodedBytes: Int
        /// The payload's size on the wire, all parts together.
        public var payloadBytes: Int
        /// The rects the frame changes (inside the view, at most ``ViewFrame/maxDamageRects``).
        public var damage: [PixelRect]

        public init(frame: UInt64, width: Int, height: Int, codec: Codec, decodedBytes: Int, payloadBytes: Int, damage: [PixelRect]) {
            self.frame = frame
            self.width = width
            self.height = height
            self.codec = codec
            self.decodedBytes = decodedBytes
            self.payloadBytes = payloadBytes
            self.damage = damage
        }

        /// The header's size on the wire.
        var byteCount: Int { 8 + 4 + 4 + 1 + 4 + 4 + 1 + 8 * damage.count }
    }

    /// The largest message on the stream: as `Connect`'s frames, so that one bound on the
    /// client's connection holds for both (a frame larger than this goes as several messages).
    public static let maxMessageBytes = ConnectFrame.maxFrameBytes
    /// The most damage rects a frame names (a commit's bound).
    public static let maxDamageRects = 128
    /// The largest view side, in pixels.
    public static let maxDimension = SurfaceLimits.maxDimension

    enum Kind: UInt8 {
        case frame = 1, more, presented
    }

    /// The frame's bytes.
    public func encoded() -> [UInt8] {
        switch self {
        case .frame(let header, let last, let payload):
            var bytes: [UInt8] = [Kind.frame.rawValue, last ? 1 : 0]
            bytes.reserveCapacity(2 + header.byteCount + payload.count)
            bytes.append(littleEndian: header.frame)
            bytes.append(littleEndian: UInt32(header.width))
            bytes.append(littleEndian: UInt32(header.height))
            bytes.append(header.codec.rawValue)
            bytes.append(littleEndian: UInt32(header.decodedBytes))
            bytes.append(littleEndian: UInt32(header.payloadBytes))
            bytes.append(UInt8(header.damage.count))
            for rect in header.damage {
                for value in [rect.x, rect.y, rect.width, rect.height] { bytes.append(littleEndian: UInt16(value)) }
            }
            return bytes + payload
        case .more(let last, let payload):
            return [Kind.more.rawValue, last ? 1 : 0] + payload
        case .presented(let frame):
            var bytes: [UInt8] = [Kind.presented.rawValue]
            bytes.append(littleEndian: frame)
            return bytes
        }
    }

    /// The message in `bytes`, traveling to the host (`toHost`) or to the gateway.
    ///
    /// - Throws: `RemoteError` `protocolViolation` naming the rule (`view.<rule>`): an empty or
    ///   oversized message, an unknown kind or one traveling the wrong way, a size outside
    ///   1…16384, an unknown codec, more than 128 damage rects, a rect outside the view, rects
    ///   that together cover more pixels than the view,
    ///   a decoded size over what the damage can need, a payload size a codec could not
    ///   produce from it, and bytes missing or left over.
    public static func decode(_ bytes: [UInt8], toHost: Bool) throws(RemoteError) -> ViewFrame {
        guard let first = bytes.first else { throw violation("empty", "an empty message") }
        guard bytes.count <= maxMessageBytes else { throw violation("length", "a message of \(bytes.count) bytes, over \(maxMessageBytes)") }
        guard let kind = Kind(rawValue: first) else { throw violation("kind", "a message of unknown kind \(first)") }
        guard toHost == (kind != .presented) else { throw violation("direction", "a \(kind) message travels the other way") }
        var reader = ByteReader(bytes.dropFirst())
        switch kind {
        case .presented:
            guard let frame = reader.u64(), reader.isEmpty else { throw violation("presented.length", "a presented message of \(bytes.count) bytes, not 9") }
            return .presented(frame: frame)
        case .more:
            guard let last = reader.u8(), last <= 1 else { throw violation("more.length", "a more message without its last flag") }
            let payload = reader.rest()
            guard !payload.isEmpty else { throw violation("more.length", "a more message without payload") }
            return .more(last: last == 1, payload: payload)
        case .frame:
            guard let last = reader.u8(), last <= 1, let frame = reader.u64(), let width = reader.u32(), let height = reader.u32(),
                  let codecByte = reader.u8(), let decoded = reader.u32(), let payloadBytes = reader.u32(), let count = reader.u8() else {
                throw violation("frame.length", "a frame message too short for its header")
            }
            let size = 1...maxDimension
            guard size.contains(Int(width)), size.contains(Int(height)) else {
                throw violation("frame.size", "a view of \(width)×\(height) pixels, not 1…\(maxDimension) a side")
            }
            guard let codec = Codec(rawValue: codecByte) else { throw violation("frame.codec", "codec \(codecByte), not 0 (raw), 1 (lz4) or 2 (zstd)") }
            guard Int(count) <= maxDamageRects else { throw violation("frame.damage", "\(count) damage rects, more than \(maxDamageRects)") }
            var damage: [PixelRect] = []
            for index in 0..<Int(count) {
                guard let x = reader.u16(), let y = reader.u16(), let w = reader.u16(), let h = reader.u16() else {
                    throw violation("frame.length", "a frame message too short for its \(count) damage rects")
                }
                let rect = PixelRect(x: Int(x), y: Int(y), width: Int(w), height: Int(h))
                guard w > 0, h > 0, rect.x + rect.width <= Int(width), rect.y + rect.height <= Int(height) else {
                    throw violation("frame.damage", "damage rect \(index) (\(rect)) is not inside the view (\(width)×\(height))")
                }
                damage.append(rect)
            }
            let covered = damage.reduce(0) { $0 + $1.width * $1.height }
            guard covered <= Int(width) * Int(height) else {
                throw violation("frame.damage", "frame \(frame)'s \(count) damage rects cover \(covered) pixels, more than its view's \(Int(width) * Int(height))")
            }
            let bound = maxDecodedBytes(damage: damage)
            guard Int(decoded) <= bound else {
                throw violation("frame.decoded-size", "frame \(frame) says it decodes to \(decoded) bytes; its damage can need at most \(bound)")
            }
            guard Int(payloadBytes) <= maxPayloadBytes(codec: codec, decodedBytes: Int(decoded)) else {
                throw violation("frame.payload-size", "frame \(frame) has \(payloadBytes) bytes of \(codec) payload for \(decoded) decoded bytes, more than \(codec) makes")
            }
            let payload = reader.rest()
            guard payload.count <= Int(payloadBytes) else {
                throw violation("frame.payload-size", "frame \(frame)'s first part holds \(payload.count) bytes, more than its \(payloadBytes)")
            }
            let header = Header(frame: frame, width: Int(width), height: Int(height), codec: codec, decodedBytes: Int(decoded),
                                payloadBytes: Int(payloadBytes), damage: damage)
            return .frame(header, last: last == 1, payload: payload)
        }
    }

    /// The most bytes a frame's operations can take for `damage`: every pixel of every rect in
    /// runs of one block each (a run's 7 header bytes per 16 pixels, two more per row for its
    /// ragged ends), and one scroll per rect.
    public static func maxDecodedBytes(damage: [PixelRect]) -> Int {
        damage.reduce(0) { total, rect in
            total + 11 + rect.height * (rect.width * 4 + 7 * (rect.width / ViewFrameEncoder.blockPixels + 2))
        }
    }

    /// The most payload bytes `codec` makes of `decodedBytes`.
    static func maxPayloadBytes(codec: Codec, decodedBytes: Int) -> Int {
        switch codec {
        case .raw: decodedBytes
        case .lz4: Int(LZ4_compressBound(Int32(clamping: decodedBytes)))
        case .zstd: ZSTD_compressBound(decodedBytes)
        }
    }

    static func violation(_ rule: String, _ what: String) -> RemoteError {
        RemoteError(.protocolViolation, "rule view.\(rule): \(what)")
    }

    /// A frame's messages: its header and payload, cut into parts that each fit ``maxMessageBytes``.
    public static func messages(header: Header, payload: [UInt8]) -> [ViewFrame] {
        let firstRoom = maxMessageBytes - 2 - header.byteCount, room = maxMessageBytes - 2
        var parts = [ViewFrame.frame(header, last: payload.count <= firstRoom, payload: Array(payload.prefix(firstRoom)))]
        var offset = min(firstRoom, payload.count)
        while offset < payload.count {
            let end = min(offset + room, payload.count)
            parts.append(.more(last: end == payload.count, payload: Array(payload[offset..<end])))
            offset = end
        }
        return parts
    }
}

extension Array where Element == UInt8 {
    mutating func append<T: FixedWidthInteger>(littleEndian value: T) {
        Swift.withUnsafeBytes(of: value.littleEndian) { append(contentsOf: $0) }
    }
}

/// Reads little-endian numbers off the front of some bytes.
struct ByteReader {
    private var bytes: ArraySlice<UInt8>
    init(_ bytes: ArraySlice<UInt8>) { self.bytes = bytes }
    var isEmpty: Bool { bytes.isEmpty }
    var count: Int { bytes.count }

    private mutating func take<T: FixedWidthInteger>(_: T.Type) -> T? {
        let size = MemoryLayout<T>.size
        guard bytes.count >= size else { return nil }
        var value: T = 0
        for (index, byte) in bytes.prefix(size).enumerated() { value |= T(byte) << (8 * index) }
        bytes = bytes.dropFirst(size)
        return value
    }
    mutating func u8() -> UInt8? { take(UInt8.self) }
    mutating func u16() -> UInt16? { take(UInt16.self) }
    mutating func i16() -> Int16? { take(Int16.self) }
    mutating func u32() -> UInt32? { take(UInt32.self) }
    mutating func u64() -> UInt64? { take(UInt64.self) }
    mutating func rest() -> [UInt8] {
        defer { bytes = [] }
        return Array(bytes)
    }
    /// The next `count` bytes, left where they are (`nil`: fewer remain).
    mutating func skip(_ count: Int) -> Range<Int>? {
        guard count >= 0, bytes.count >= count else { return nil }
        let range = bytes.startIndex..<bytes.startIndex + count
        bytes = bytes.dropFirst(count)
        return range
    }
}
