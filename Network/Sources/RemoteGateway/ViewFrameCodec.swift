import CCompression
import Glibc
import RemoteHost

/// The gateway's side of a remote view's frames: it keeps a mirror of the image the host has,
/// and turns each commit's damage into a ``ViewFrame``'s operations, after waypipe:
///
/// 1. **Scrolling.** In a damaged rect at least ``scrollMinimumHeight`` rows high, rows of the
///    new image are matched to rows of the mirror by hash; when most rows moved by the same
///    offset, the frame says so in 11 bytes (`scroll`), and the mirror moves its rows the same
///    way. A photograph scrolled by 4 pixels is then 4 new rows, not a new image.
/// 2. **Diffing.** Every row of the rect is compared with the mirror in blocks of
///    ``blockPixels`` pixels (64 bytes), aligned in the image; a run of blocks that changed
///    goes as `run`, and the mirror takes it.
/// 3. **Compressing** the operations with lz4, or zstd (level ``zstdLevel``) when the link is
///    the bottleneck; a payload that does not shrink goes raw.
///
/// The host applies the same operations to its own image (``ViewFrameDecoder``), so both stay
/// equal: the mirror is what the host shows once it has this frame. A new size starts both
/// from a transparent image.
public struct ViewFrameEncoder: Sendable {
    /// A block: 16 pixels, 64 bytes.
    public static let blockPixels = 16
    /// The shortest rect scrolling is looked for in.
    public static let scrollMinimumHeight = 16
    /// zstd's level on a slow link.
    public static let zstdLevel: Int32 = 3

    public private(set) var width = 0
    public private(set) var height = 0
    private var mirror: [UInt32] = []
    /// Whether moved rows are found (the figures compare both).
    public var detectsScrolling: Bool

    public init(detectsScrolling: Bool = true) {
        self.detectsScrolling = detectsScrolling
    }

    /// One frame, encoded.
    public struct Encoded: Sendable {
        public var header: ViewFrame.Header
        public var payload: [UInt8]
        /// The damaged pixels' bytes (what a frame without diffing or compression would carry).
        public var damagedBytes: Int
        /// How many rects were sent as a scroll.
        public var scrolls: Int
        /// The frame's messages on the stream.
        public var messages: [ViewFrame] { ViewFrame.messages(header: header, payload: payload) }
        /// All its messages' bytes.
        public var wireBytes: Int { messages.reduce(0) { $0 + $1.encoded().count } }
    }

    /// Encodes frame `frame` of an image `width` × `height` pixels (`pixels`, rows of `width`
    /// words) whose `damage` changed since the last frame (empty: nothing visible; clipped to
    /// the image; more than 128 rects become their union). A new size sends all of it.
    public mutating func encode(frame: UInt64, pixels: UnsafeBufferPointer<UInt32>, width: Int, height: Int,
                                damage: [PixelRect], codec: ViewFrame.Codec) -> Encoded {
        precondition(pixels.count >= width * height, "an image smaller than its size")
        var rects = damage.compactMap { $0.clipped(toWidth: width, height: height) }
        if width != self.width || height != self.height {
            self.width = width
            self.height = height
            mirror = Array(repeating: 0, count: width * height)
            rects = [PixelRect(x: 0, y: 0, width: width, height: height)]
        }
        // More than 128 rects, or rects that overlap to cover more than the image (a host
        // refuses those: they would bound no payload), become their union.
        if rects.count > ViewFrame.maxDamageRects || rects.reduce(0, { $0 + $1.width * $1.height }) > width * height {
            rects = [PixelRect.union(rects)]
        }
        var ops: [UInt8] = []
        ops.reserveCapacity(min(ViewFrame.maxDecodedBytes(damage: rects), 1 << 20))
        var scrolls = 0
        let source = pixels.baseAddress!
        mirror.withUnsafeMutableBufferPointer { mirror in
            let mirror = mirror.baseAddress!
            for rect in rects {
                if detectsScrolling, rect.height >= Self.scrollMinimumHeight,
                   let dy = Self.scrollOffset(in: rect, of: source, against: mirror, width: width) {
                    ops.append(ViewFrameDecoder.Op.scroll.rawValue)
                    for value in [rect.x, rect.y, rect.width, rect.height] { ops.append(littleEndian: UInt16(value)) }
                    ops.append(littleEndian: Int16(dy))
                    ViewFrameDecoder.scroll(mirror, width: width, rect: rect, dy: dy)
                    scrolls += 1
                }
                Self.diff(rect, of: source, against: mirror, width: width, into: &ops)
            }
        }
        let damagedBytes = rects.reduce(0) { $0 + $1.width * $1.height * 4 }
        var codec = codec, payload = codec == .raw ? ops : Self.compress(ops, with: codec)
        if payload.count >= ops.count {
            codec = .raw
            payload = ops
        }
        let header = ViewFrame.Header(frame: frame, width: width, height: height, codec: codec, decodedBytes: ops.count,
                                      payloadBytes: payload.count, damage: rects)
        return Encoded(header: header, payload: payload, damagedBytes: damagedBytes, scrolls: scrolls)
    }

    /// Appends `run`s for the blocks of `rect` where `source` differs from `mirror`, and copies
    /// them into `mirror`.
    private static func diff(_ rect: PixelRect, of source: UnsafePointer<UInt32>, against mirror: UnsafeMutablePointer<UInt32>,
                             width: Int, into ops: inout [UInt8]) {
        let right = rect.x + rect.width
        func emit(_ start: Int, _ end: Int, row: Int) {
            ops.append(ViewFrameDecoder.Op.run.rawValue)
            ops.append(littleEndian: UInt16(start))
            ops.append(littleEndian: UInt16(row))
            ops.append(littleEndian: UInt16(end - start))
            let from = source + row * width + start
            ops.append(contentsOf: UnsafeRawBufferPointer(start: from, count: (end - start) * 4))
            (mirror + row * width + start).update(from: from, count: end - start)
        }
        for row in rect.y..<rect.y + rect.height {
            let new = source + row * width, old = mirror + row * width
            var x = rect.x, runStart: Int?
            while x < right {
                let end = min((x / blockPixels + 1) * blockPixels, right)
                if memcmp(new + x, old + x, (end - x) * 4) != 0 {
                    if runStart == nil { runStart = x }
                } else if let start = runStart {
                    emit(start, x, row: row)
                    runStart = nil
                }
                x = end
            }
            if let start = runStart { emit(start, right, row: row) }
        }
    }

    /// The rows' offset when most of `rect`'s rows in `source` are rows of `mirror` moved by
    /// the same offset (dy: row r now shows what row r + dy showed), or `nil`.
    static func scrollOffset(in rect: PixelRect, of source: UnsafePointer<UInt32>, against mirror: UnsafePointer<UInt32>,
                             width: Int) -> Int? {
        let new = rowHashes(rect, source, width: width), old = rowHashes(rect, mirror, width: width)
        let height = rect.height
        func matches(_ dy: Int) -> Int {
            var count = 0
            for row in max(0, -dy)..<min(height, height - dy) where new[row] == old[row + dy] { count += 1 }
            return count
        }
        let still = matches(0)
        guard still < height * 3 / 4 else { return nil }
        // Where the old rows went: rows that occur more than a few times (a plain background)
        // say nothing.
        var places: [UInt64: [Int]] = [:]
        for (row, hash) in old.enumerated() { places[hash, default: []].append(row) }
        var candidates = Set<Int>()
        for sample in [height / 2, height / 3, height * 2 / 3, height / 4, height * 3 / 4, height / 8, height * 7 / 8] {
            guard let rows = places[new[sample]], rows.count <= 4 else { continue }
            for row in rows where row != sample { candidates.insert(row - sample) }
            if candidates.count >= 8 { break }
        }
        var best: (dy: Int, count: Int)?
        for dy in candidates.sorted() {
            let count = matches(dy)
            if count > (best?.count ?? 0) { best = (dy, count) }
        }
        guard let best, best.count >= height / 4, best.count > still + max(2, height / 16) else { return nil }
        return best.dy
    }

    private static func rowHashes(_ rect: PixelRect, _ pixels: UnsafePointer<UInt32>, width: Int) -> [UInt64] {
        (rect.y..<rect.y + rect.height).map { row in
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            let start = pixels + row * width + rect.x
            for index in 0..<rect.width {
                hash = (hash ^ UInt64(start[index])) &* 0x0000_0100_0000_01B3
            }
            return hash
        }
    }

    /// `bytes` compressed with `codec` (lz4 or zstd).
    static func compress(_ bytes: [UInt8], with codec: ViewFrame.Codec) -> [UInt8] {
        let bound = ViewFrame.maxPayloadBytes(codec: codec, decodedBytes: bytes.count)
        return [UInt8](unsafeUninitializedCapacity: bound) { buffer, count in
            count = bytes.withUnsafeBytes { source -> Int in
                switch codec {
                case .raw:
                    return 0
                case .lz4:
                    return Int(LZ4_compress_default(source.baseAddress!.assumingMemoryBound(to: CChar.self),
                                                    UnsafeMutableRawPointer(buffer.baseAddress!).assumingMemoryBound(to: CChar.self),
                                                    Int32(bytes.count), Int32(bound)))
                case .zstd:
                    let written = ZSTD_compress(buffer.baseAddress!, bound, source.baseAddress!, bytes.count, zstdLevel)
                    return ZSTD_isError(written) != 0 ? 0 : written
                }
            }
        }
    }
}

/// The host's side of a remote view's frames: checks each and applies it to the image, so
/// that the image equals the gateway's mirror. Nothing a gateway sends can make it write
/// outside the frame's damage or decompress more than the damage can need.
public enum ViewFrameDecoder {
    /// An operation's first byte.
    enum Op: UInt8 {
        case scroll = 1, run
    }

    /// The payload of a frame, decompressed.
    ///
    /// - Throws: `RemoteError` `protocolViolation` (`view.frame.decoded-size`) when it does not
    ///   decompress to exactly ``ViewFrame/Header/decodedBytes`` (checked by zstd's own frame
    ///   header before anything is written; lz4 stops at the bound).
    public static func decompress(_ header: ViewFrame.Header, _ payload: [UInt8]) throws(RemoteError) -> [UInt8] {
        let expected = header.decodedBytes
        func wrong(_ what: String) -> RemoteError {
            ViewFrame.violation("frame.decoded-size", "frame \(header.frame)'s \(header.codec) payload \(what), not the \(expected) bytes it said")
        }
        switch header.codec {
        case .raw:
            guard payload.count == expected else { throw wrong("holds \(payload.count) bytes") }
            return payload
        case .lz4:
            var produced = -1
            let bytes = [UInt8](unsafeUninitializedCapacity: expected) { buffer, count in
                produced = payload.withUnsafeBytes { source in
                    Int(LZ4_decompress_safe(source.baseAddress!.assumingMemoryBound(to: CChar.self),
                                            UnsafeMutableRawPointer(buffer.baseAddress).map { $0.assumingMemoryBound(to: CChar.self) },
                                            Int32(payload.count), Int32(expected)))
                }
                count = max(0, produced)
            }
            guard produced == expected else { throw wrong(produced < 0 ? "is not lz4 that fits them" : "decompresses to \(produced) bytes") }
            return bytes
        case .zstd:
            let declared = payload.withUnsafeBytes { ZSTD_getFrameContentSize($0.baseAddress, payload.count) }
            guard declared == UInt64(expected) else {
                throw wrong(declared >= ZSTD_CONTENTSIZE_ERROR ? "is not a zstd frame with its size" : "says it holds \(declared) bytes")
            }
            var produced = 0
            let bytes = [UInt8](unsafeUninitializedCapacity: expected) { buffer, count in
                produced = payload.withUnsafeBytes { ZSTD_decompress(buffer.baseAddress, expected, $0.baseAddress, payload.count) }
                count = ZSTD_isError(produced) != 0 ? 0 : produced
            }
            guard ZSTD_isError(produced) == 0, produced == expected else { throw wrong("does not decompress to them") }
            return bytes
        }
    }

    /// Checks every operation of `ops` against `header` (each inside a damage rect, whole, in
    /// the view), then applies them to `pixels` (the host's image, `header.width` ×
    /// `header.height`). A frame that breaks a rule changes nothing.
    ///
    /// - Throws: `RemoteError` `protocolViolation`: `view.frame.op` for an unknown operation or
    ///   one cut short, `view.frame.outside-damage` for one outside every damage rect.
    public static func apply(_ ops: [UInt8], of header: ViewFrame.Header, to pixels: UnsafeMutableBufferPointer<UInt32>) throws(RemoteError) {
        precondition(pixels.count >= header.width * header.height, "an image smaller than the frame")
        let parsed = try parse(ops, of: header)
        let base = pixels.baseAddress!
        ops.withUnsafeBytes { bytes in
            for op in parsed {
                switch op {
                case .scroll(let rect, let dy):
                    scroll(base, width: header.width, rect: rect, dy: dy)
                case .run(let x, let y, let count, let offset):
                    UnsafeMutableRawPointer(base + y * header.width + x).copyMemory(from: bytes.baseAddress! + offset, byteCount: count * 4)
                }
            }
        }
    }

    private enum Parsed {
        case scroll(PixelRect, dy: Int)
        /// Pixels at (x, y) in one row, whose bytes start at `offset` in the operations.
        case run(x: Int, y: Int, count: Int, offset: Int)
    }

    private static func parse(_ ops: [UInt8], of header: ViewFrame.Header) throws(RemoteError) -> [Parsed] {
        var reader = ByteReader(ops[...]), parsed: [Parsed] = []
        func violation(_ rule: String, _ what: String) -> RemoteError {
            ViewFrame.violation("frame.\(rule)", "frame \(header.frame): operation \(parsed.count) \(what)")
        }
        func inside(_ rect: PixelRect) -> Bool {
            header.damage.contains { $0.x <= rect.x && $0.y <= rect.y && rect.x + rect.width <= $0.x + $0.width && rect.y + rect.height <= $0.y + $0.height }
        }
        while !reader.isEmpty {
            switch reader.u8().flatMap(Op.init(rawValue:)) {
            case .scroll:
                guard let x = reader.u16(), let y = reader.u16(), let w = reader.u16(), let h = reader.u16(), let dy = reader.i16() else {
                    throw violation("op", "is a scroll cut short")
                }
                let rect = PixelRect(x: Int(x), y: Int(y), width: Int(w), height: Int(h))
                guard inside(rect) else { throw violation("outside-damage", "scrolls \(rect), outside the frame's damage") }
                guard dy != 0, abs(Int(dy)) < rect.height else { throw violation("op", "scrolls \(rect) by \(dy) rows") }
                parsed.append(.scroll(rect, dy: Int(dy)))
            case .run:
                guard let x = reader.u16(), let y = reader.u16(), let count = reader.u16(), count > 0 else {
                    throw violation("op", "is a run cut short or empty")
                }
                let rect = PixelRect(x: Int(x), y: Int(y), width: Int(count), height: 1)
                guard inside(rect) else { throw violation("outside-damage", "writes \(rect), outside the frame's damage") }
                guard let bytes = reader.skip(Int(count) * 4) else { throw violation("op", "is a run of \(count) pixels cut short") }
                parsed.append(.run(x: Int(x), y: Int(y), count: Int(count), offset: bytes.lowerBound))
            case nil:
                throw violation("op", "is of an unknown kind")
            }
        }
        return parsed
    }

    /// Moves `rect`'s rows of `pixels` by `dy`: row r takes what row r + dy held (rows whose
    /// source is outside the rect keep theirs).
    static func scroll(_ pixels: UnsafeMutablePointer<UInt32>, width: Int, rect: PixelRect, dy: Int) {
        let rows = dy > 0 ? Array(0..<rect.height - dy) : Array((-dy..<rect.height).reversed())
        for row in rows {
            let target = pixels + (rect.y + row) * width + rect.x
            target.update(from: pixels + (rect.y + row + dy) * width + rect.x, count: rect.width)
        }
    }
}

/// A frame's messages put back together on the host: the parts in order, no more payload than
/// the header announced, nothing of a new frame before the last one is whole.
public struct ViewFrameAssembler: Sendable {
    private var pending: (header: ViewFrame.Header, payload: [UInt8])?

    public init() {}

    /// Takes one message; returns the frame once its last part came.
    ///
    /// - Throws: `RemoteError` `protocolViolation`: `view.order` for a part without its frame or
    ///   a frame before the last one is whole, `view.frame.payload-size` for more or fewer bytes
    ///   than announced.
    public mutating func receive(_ message: ViewFrame) throws(RemoteError) -> (header: ViewFrame.Header, payload: [UInt8])? {
        switch message {
        case .frame(let header, let last, let payload):
            if let pending { throw ViewFrame.violation("order", "frame \(header.frame) began before frame \(pending.header.frame) was whole") }
            pending = (header, payload)
            if !last { pending!.payload.reserveCapacity(header.payloadBytes) }
            return try finish(last: last)
        case .more(let last, let payload):
            guard pending != nil else { throw ViewFrame.violation("order", "a part of no frame") }
            guard pending!.payload.count + payload.count <= pending!.header.payloadBytes else {
                throw ViewFrame.violation("frame.payload-size", "frame \(pending!.header.frame)'s parts hold more than its \(pending!.header.payloadBytes) bytes")
            }
            pending!.payload += payload
            return try finish(last: last)
        case .presented:
            throw ViewFrame.violation("direction", "a presented message travels the other way")
        }
    }

    private mutating func finish(last: Bool) throws(RemoteError) -> (header: ViewFrame.Header, payload: [UInt8])? {
        guard last, let whole = pending else { return nil }
        pending = nil
        guard whole.payload.count == whole.header.payloadBytes else {
            throw ViewFrame.violation("frame.payload-size", "frame \(whole.header.frame) ended with \(whole.payload.count) of its \(whole.header.payloadBytes) bytes")
        }
        return whole
    }
}
