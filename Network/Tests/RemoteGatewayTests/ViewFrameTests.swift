import CCompression
@testable import RemoteGateway
import RemoteHost
import Testing

/// A remote view's frames, alone (no gRPC): the host's image equals the gateway's after every
/// frame, whatever the damage, scrolling and codec; a large frame goes as several messages; and
/// a gateway that lies about a frame's damage or sizes changes nothing and is named.
@Suite("View frames: diff, scroll, compress, check")
struct ViewFrameTests {
    /// A deterministic image: a smooth field with grain, as a photograph has (not one colour,
    /// which any compressor erases).
    static func photo(width: Int, height: Int, offset: Int = 0) -> [UInt32] {
        var pixels = [UInt32](repeating: 0, count: width * height)
        for y in 0..<height {
            let source = y + offset
            for x in 0..<width {
                var noise = UInt32(truncatingIfNeeded: (x &* 73_856_093) ^ (source &* 19_349_663))
                noise = (noise ^ (noise >> 13)) &* 0x5bd1_e995
                let grain = (noise >> 24) & 0x1F
                let r = UInt32((x * 255) / max(1, width - 1)) ^ grain
                let g = UInt32(((source * 7) % 256)) ^ grain
                let b = UInt32(((x + source) * 3) % 256)
                pixels[y * width + x] = 0xFF00_0000 | r << 16 | g << 8 | b
            }
        }
        return pixels
    }

    /// Sends `pixels` through an encoder and decoder as the stream would (every message's bytes
    /// decoded again), returning the encoded frame.
    @discardableResult
    static func send(_ pixels: [UInt32], width: Int, height: Int, damage: [PixelRect], frame: UInt64, codec: ViewFrame.Codec = .lz4,
                     encoder: inout ViewFrameEncoder, host: inout [UInt32]) throws -> ViewFrameEncoder.Encoded {
        let encoded = pixels.withUnsafeBufferPointer {
            encoder.encode(frame: frame, pixels: $0, width: width, height: height, damage: damage, codec: codec)
        }
        var assembler = ViewFrameAssembler(), whole: (header: ViewFrame.Header, payload: [UInt8])?
        for message in encoded.messages {
            let bytes = message.encoded()
            #expect(bytes.count <= ViewFrame.maxMessageBytes)
            whole = try assembler.receive(ViewFrame.decode(bytes, toHost: true))
        }
        let frame = try #require(whole)
        if host.count != frame.header.width * frame.header.height { host = Array(repeating: 0, count: frame.header.width * frame.header.height) }
        let ops = try ViewFrameDecoder.decompress(frame.header, frame.payload)
        try host.withUnsafeMutableBufferPointer { try ViewFrameDecoder.apply(ops, of: frame.header, to: $0) }
        return encoded
    }

    @Test("the host's image equals the gateway's after a whole frame, a small change, overlapping rects and a new size, with each codec")
    func roundTrips() throws {
        for codec in [ViewFrame.Codec.raw, .lz4, .zstd] {
            var encoder = ViewFrameEncoder(), host: [UInt32] = []
            var image = Self.photo(width: 320, height: 200)
            try Self.send(image, width: 320, height: 200, damage: [], frame: 1, codec: codec, encoder: &encoder, host: &host)
            #expect(host == image)
            // A 64×64 square changes: a caret, a button's highlight.
            for y in 40..<104 { for x in 100..<164 { image[y * 320 + x] = 0xFF20_4080 } }
            let small = try Self.send(image, width: 320, height: 200, damage: [PixelRect(x: 100, y: 40, width: 64, height: 64)], frame: 2,
                                      codec: codec, encoder: &encoder, host: &host)
            #expect(host == image)
            if codec != .raw { #expect(small.wireBytes <= 1024, "a 64×64 damage frame took \(small.wireBytes) bytes with \(codec)") }
            // Overlapping rects, one of them unchanged inside.
            for y in 0..<10 { for x in 0..<320 { image[y * 320 + x] = 0xFF00_00FF } }
            try Self.send(image, width: 320, height: 200, damage: [PixelRect(x: 0, y: 0, width: 320, height: 10), PixelRect(x: 0, y: 5, width: 50, height: 50)],
                          frame: 3, codec: codec, encoder: &encoder, host: &host)
            #expect(host == image)
            // A new size: all of it, from transparent.
            let resized = Self.photo(width: 200, height: 320)
            try Self.send(resized, width: 200, height: 320, damage: [PixelRect(x: 0, y: 0, width: 1, height: 1)], frame: 4, codec: codec,
                          encoder: &encoder, host: &host)
            #expect(host == resized)
        }
    }

    @Test("a photograph scrolled by 4 rows goes as one scroll and 4 new rows, and the host's image follows it")
    func scrolling() throws {
        let (width, height) = (1280, 720)
        var encoder = ViewFrameEncoder(), host: [UInt32] = []
        try Self.send(Self.photo(width: width, height: height), width: width, height: height, damage: [], frame: 1, encoder: &encoder, host: &host)
        for step in 1...3 {
            let image = Self.photo(width: width, height: height, offset: 4 * step)
            let encoded = try Self.send(image, width: width, height: height, damage: [PixelRect(x: 0, y: 0, width: width, height: height)],
                                        frame: UInt64(1 + step), encoder: &encoder, host: &host)
            #expect(host == image)
            #expect(encoded.scrolls == 1)
            #expect(encoded.header.decodedBytes < 4 * width * 4 + 64 * 7 + 64, "\(encoded.header.decodedBytes) bytes of operations for 4 new rows")
        }
        // Without looking for scrolling, the same content costs every row.
        var plain = ViewFrameEncoder(detectsScrolling: false), plainHost: [UInt32] = []
        try Self.send(Self.photo(width: width, height: height), width: width, height: height, damage: [], frame: 1, encoder: &plain, host: &plainHost)
        let image = Self.photo(width: width, height: height, offset: 4)
        let encoded = try Self.send(image, width: width, height: height, damage: [PixelRect(x: 0, y: 0, width: width, height: height)], frame: 2,
                                    encoder: &plain, host: &plainHost)
        #expect(plainHost == image)
        #expect(encoded.scrolls == 0 && encoded.header.decodedBytes > width * height * 3)
    }

    @Test("a frame larger than one message goes as several, and comes back whole")
    func manyMessages() throws {
        var noise = [UInt32](repeating: 0, count: 512 * 512), seed: UInt64 = 0x9E37_79B9_7F4A_7C15
        for index in noise.indices {
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            noise[index] = UInt32(truncatingIfNeeded: seed >> 29)
        }
        var encoder = ViewFrameEncoder(), host: [UInt32] = []
        let encoded = try Self.send(noise, width: 512, height: 512, damage: [], frame: 7, encoder: &encoder, host: &host)
        #expect(host == noise)
        #expect(encoded.messages.count > 16)
        #expect(encoded.header.codec == .raw, "noise does not compress: it goes raw")
    }

    static func rule(_ body: () throws -> Void) -> String? {
        do { try body(); return nil } catch let error as RemoteError {
            #expect(error.code == .protocolViolation)
            return error.reason.split(separator: ":").first.map { String($0.dropFirst("rule ".count)) }
        } catch { return "\(error)" }
    }

    @Test("a gateway that lies about a frame's damage, its decoded size or its parts is refused, naming the rule, and the image is unchanged")
    func lies() throws {
        let header = ViewFrame.Header(frame: 1, width: 64, height: 64, codec: .raw, decodedBytes: 0, payloadBytes: 0,
                                      damage: [PixelRect(x: 0, y: 0, width: 16, height: 16)])
        func run(x: Int, y: Int, count: Int) -> [UInt8] {
            var ops: [UInt8] = [2]
            for value in [x, y, count] { ops.append(littleEndian: UInt16(value)) }
            return ops + Array(repeating: 0xAB, count: count * 4)
        }
        let image = [UInt32](repeating: 0x1234_5678, count: 64 * 64)
        func applying(_ ops: [UInt8], damage: [PixelRect]? = nil) -> String? {
            var header = header
            header.damage = damage ?? header.damage
            header.decodedBytes = ops.count
            header.payloadBytes = ops.count
            var host = image
            defer { #expect(host == image, "a refused frame changed the image") }
            return Self.rule {
                let decoded = try ViewFrameDecoder.decompress(header, ops)
                try host.withUnsafeMutableBufferPointer { try ViewFrameDecoder.apply(decoded, of: header, to: $0) }
            }
        }
        // A run that starts inside the damage and ends outside it; one after a good one.
        #expect(applying(run(x: 10, y: 0, count: 8)) == "view.frame.outside-damage")
        #expect(applying(run(x: 0, y: 0, count: 4) + run(x: 0, y: 16, count: 4)) == "view.frame.outside-damage")
        #expect(applying([1, 0, 0, 0, 0, 32, 0, 32, 0, 1, 0]) == "view.frame.outside-damage")
        #expect(applying([1, 0, 0, 0, 0, 16, 0, 16, 0, 16, 0]) == "view.frame.op", "a scroll by the whole rect")
        #expect(applying(Array(run(x: 0, y: 0, count: 4).dropLast())) == "view.frame.op")
        #expect(applying([9]) == "view.frame.op")

        // The decoded size: over what the damage can need, refused before decompressing.
        var bomb = header
        bomb.codec = .zstd
        bomb.decodedBytes = ViewFrame.maxDecodedBytes(damage: header.damage) + 1
        bomb.payloadBytes = 100
        let bombBytes = ViewFrame.frame(bomb, last: true, payload: Array(repeating: 0, count: 100)).encoded()
        #expect(Self.rule { _ = try ViewFrame.decode(bombBytes, toHost: true) } == "view.frame.decoded-size")
        // Within the bound, but the payload decompresses to more (zstd says so in its own
        // header; lz4 stops at the bound) or less.
        let big = ViewFrameEncoder.compress(Array(repeating: 7, count: 4096), with: .zstd)
        var lying = header
        (lying.codec, lying.decodedBytes, lying.payloadBytes) = (.zstd, 512, big.count)
        #expect(Self.rule { _ = try ViewFrameDecoder.decompress(lying, big) } == "view.frame.decoded-size")
        let big4 = ViewFrameEncoder.compress(Array(repeating: 7, count: 4096), with: .lz4)
        (lying.codec, lying.decodedBytes, lying.payloadBytes) = (.lz4, 512, big4.count)
        #expect(Self.rule { _ = try ViewFrameDecoder.decompress(lying, big4) } == "view.frame.decoded-size")
        (lying.codec, lying.decodedBytes) = (.lz4, 8192)
        #expect(Self.rule { _ = try ViewFrameDecoder.decompress(lying, big4) } == "view.frame.decoded-size")
        #expect(Self.rule { _ = try ViewFrameDecoder.decompress(lying, [0xFF, 0xFF, 0xFF]) } == "view.frame.decoded-size")

        // The header's own rules.
        var outside = header
        outside.damage = [PixelRect(x: 60, y: 0, width: 16, height: 16)]
        #expect(Self.rule { _ = try ViewFrame.decode(ViewFrame.frame(outside, last: true, payload: []).encoded(), toHost: true) } == "view.frame.damage")
        #expect(Self.rule { _ = try ViewFrame.decode([1, 1, 0], toHost: true) } == "view.frame.length")
        // Rects that overlap to cover more than the view: they would bound no payload.
        var piled = header
        piled.damage = Array(repeating: PixelRect(x: 0, y: 0, width: 64, height: 64), count: 2)
        #expect(Self.rule { _ = try ViewFrame.decode(ViewFrame.frame(piled, last: true, payload: []).encoded(), toHost: true) } == "view.frame.damage")
        #expect(Self.rule { _ = try ViewFrame.decode([3, 1, 0, 0, 0, 0, 0, 0, 0], toHost: true) } == "view.direction")
        #expect(Self.rule { _ = try ViewFrame.decode([1] + Array(repeating: 0, count: ViewFrame.maxMessageBytes), toHost: true) } == "view.length")

        // The parts: more than announced, fewer, or out of order.
        var parted = header
        (parted.decodedBytes, parted.payloadBytes) = (8, 8)
        var assembler = ViewFrameAssembler()
        #expect(Self.rule { _ = try assembler.receive(.more(last: true, payload: [1])) } == "view.order")
        _ = try assembler.receive(.frame(parted, last: false, payload: [1, 2, 3]))
        #expect(Self.rule { _ = try assembler.receive(.more(last: false, payload: Array(repeating: 0, count: 6))) } == "view.frame.payload-size")
        assembler = ViewFrameAssembler()
        _ = try assembler.receive(.frame(parted, last: false, payload: [1, 2, 3]))
        #expect(Self.rule { _ = try assembler.receive(.frame(parted, last: true, payload: [])) } == "view.order")
        assembler = ViewFrameAssembler()
        _ = try assembler.receive(.frame(parted, last: false, payload: [1, 2, 3]))
        #expect(Self.rule { _ = try assembler.receive(.more(last: true, payload: [4])) } == "view.frame.payload-size")
    }
}
