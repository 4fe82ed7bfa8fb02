// Tier 1: EnvelopeCodec in memory, no sockets. Round trips, fd-count rules, every validation
// rule of decode and encode (with hostile packets built by hand), and robustness against
// truncated, random and mutated packets.
@testable import RemoteCore
import Glibc
import RemoteTestSupport
import Testing

// Swift Testing has an `Attachment` type of its own; in this file the word means a file descriptor.
private typealias Attachment = RemoteCore.Attachment

// MARK: - Helpers

/// A minimal protobuf writer, to build packets `EnvelopeCodec.encode` would never produce.
struct ProtoWriter {
    private(set) var bytes: [UInt8] = []

    /// A varint field (wire type 0).
    func uint(_ field: UInt32, _ value: UInt64) -> ProtoWriter {
        var copy = self
        copy.appendTag(field, wireType: 0)
        copy.appendVarint(value)
        return copy
    }

    /// A length-delimited field (wire type 2) holding raw bytes.
    func bytes(_ field: UInt32, _ value: [UInt8]) -> ProtoWriter {
        var copy = self
        copy.appendTag(field, wireType: 2)
        copy.appendVarint(UInt64(value.count))
        copy.bytes += value
        return copy
    }

    func string(_ field: UInt32, _ value: String) -> ProtoWriter {
        bytes(field, Array(value.utf8))
    }

    /// A float field (wire type 5, little-endian).
    func float(_ field: UInt32, _ value: Float) -> ProtoWriter {
        var copy = self
        copy.appendTag(field, wireType: 5)
        withUnsafeBytes(of: value.bitPattern.littleEndian) { copy.bytes += $0 }
        return copy
    }

    func double(_ field: UInt32, _ value: Double) -> ProtoWriter {
        var copy = self
        copy.appendTag(field, wireType: 1)
        withUnsafeBytes(of: value.bitPattern.littleEndian) { copy.bytes += $0 }
        return copy
    }

    func message(_ field: UInt32, _ value: ProtoWriter = ProtoWriter()) -> ProtoWriter {
        bytes(field, value.bytes)
    }

    private mutating func appendTag(_ field: UInt32, wireType: UInt8) {
        appendVarint(UInt64(field) << 3 | UInt64(wireType))
    }

    private mutating func appendVarint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }
}

/// The schema's field numbers (remoteview.proto).
enum Field {
    static let id: UInt32 = 1, replyTo: UInt32 = 2, fdCount: UInt32 = 3
    static let handshake: UInt32 = 10, goodbye: UInt32 = 11, protocolError: UInt32 = 12
    static let ping: UInt32 = 13, pong: UInt32 = 14, request: UInt32 = 15, reply: UInt32 = 16
    static let message: UInt32 = 17, failure: UInt32 = 18, cancel: UInt32 = 19
}

/// A valid `Handshake` submessage with one field replaced as needed.
func handshakeBody(version: UInt64 = 1, role: UInt64 = 1, identifier: [UInt8] = Array("com.example.test".utf8),
                   capabilities: [String] = [], maxPacketSize: UInt64 = 65_536) -> ProtoWriter {
    var body = ProtoWriter().uint(1, version).uint(2, role).bytes(3, identifier)
    for capability in capabilities { body = body.string(4, capability) }
    return body.uint(5, maxPacketSize)
}

/// A `ServiceMessage` submessage.
func serviceMessageBody(type: [UInt8], payload: [UInt8] = []) -> ProtoWriter {
    // Canonical proto3: an empty payload is not written at all.
    let body = ProtoWriter().bytes(1, type)
    return payload.isEmpty ? body : body.bytes(2, payload)
}

/// An envelope with id 1 (unless given) around `body` in field `bodyField`.
func envelopePacket(id: UInt64 = 1, replyTo: UInt64? = nil, fdCount: UInt32? = nil,
                    _ bodyField: UInt32, _ body: ProtoWriter = ProtoWriter()) -> [UInt8] {
    var envelope = ProtoWriter().uint(Field.id, id)
    if let replyTo { envelope = envelope.uint(Field.replyTo, replyTo) }
    if let fdCount { envelope = envelope.uint(Field.fdCount, UInt64(fdCount)) }
    return envelope.message(bodyField, body).bytes
}

func decode(_ packet: [UInt8], attachments: [RemoteCore.Attachment] = []) throws(RemoteError) -> Envelope {
    // `withUnsafeBytes` rethrows untyped errors, so carry the typed one out in a Result.
    try packet.withUnsafeBytes { buffer in
        Result { () throws(RemoteError) in try EnvelopeCodec.decode(buffer, attachments: attachments) }
    }.get()
}

func roundTrip(_ envelope: Envelope) throws(RemoteError) -> Envelope {
    try decode(EnvelopeCodec.encode(envelope), attachments: envelope.attachments)
}

/// Whether two bodies are the same case with the same values (`Envelope.Body` is not Equatable).
func sameBody(_ a: Envelope.Body, _ b: Envelope.Body) -> Bool {
    switch (a, b) {
    case let (.handshake(x), .handshake(y)): x == y
    case let (.goodbye(x), .goodbye(y)): x == y
    case let (.protocolError(c1, r1), .protocolError(c2, r2)): c1 == c2 && r1 == r2
    case let (.ping(x), .ping(y)), let (.pong(x), .pong(y)), let (.cancel(x), .cancel(y)): x == y
    case let (.request(t1, p1), .request(t2, p2)), let (.reply(t1, p1), .reply(t2, p2)),
         let (.message(t1, p1), .message(t2, p2)):
        t1 == t2 && p1 == p2
    case let (.failure(x), .failure(y)): x == y
    default: false
    }
}

/// `body` for a failure message, short enough to read even for 64 KiB payloads.
func summary(_ body: Envelope.Body) -> String {
    switch body {
    case let .request(type, payload), let .reply(type, payload), let .message(type, payload):
        "\(body.name)(type: \"\(type.prefix(40))\", payload: \(payload.count) bytes)"
    default:
        String(String(describing: body).prefix(200))
    }
}

/// Expects decoding `packet` to throw a protocol violation whose reason contains every fragment.
func expectViolation(_ packet: [UInt8], attachments: [RemoteCore.Attachment] = [], mentioning fragments: [String],
                     sourceLocation: SourceLocation = #_sourceLocation) {
    let error = #expect(throws: RemoteError.self, sourceLocation: sourceLocation) {
        try decode(packet, attachments: attachments)
    }
    guard let error else { return }
    #expect(error.code == .protocolViolation, "\(error)", sourceLocation: sourceLocation)
    for fragment in fragments {
        #expect(error.reason.contains(fragment), "reason \"\(error.reason)\" does not mention \"\(fragment)\"",
                sourceLocation: sourceLocation)
    }
}

/// Expects encoding `envelope` to throw an invalid-argument error whose reason contains `fragment`.
func expectEncodeRejected(_ envelope: Envelope, mentioning fragment: String, unnumberedToo: Bool = true,
                          sourceLocation: SourceLocation = #_sourceLocation) {
    let error = #expect(throws: RemoteError.self, sourceLocation: sourceLocation) {
        try EnvelopeCodec.encode(envelope)
    }
    guard let error else { return }
    #expect(error.code == .invalidArgument, "\(error)", sourceLocation: sourceLocation)
    #expect(error.reason.contains(fragment), "reason \"\(error.reason)\" does not mention \"\(fragment)\"",
            sourceLocation: sourceLocation)
    // The sender's own path (a request, reply or message is only checked there and packed on
    // the loop) refuses it just the same (but for the id, which it leaves to the framer).
    guard unnumberedToo else { return }
    let unnumbered = #expect(throws: RemoteError.self, sourceLocation: sourceLocation) {
        try EnvelopeCodec.encodeUnnumbered(envelope)
    }
    #expect(unnumbered?.code == .invalidArgument && unnumbered?.reason.contains(fragment) == true,
            "encodeUnnumbered: \(String(describing: unnumbered))", sourceLocation: sourceLocation)
}

/// `count` attachments, each a fresh memfd.
func makeAttachments(_ count: Int) throws -> [RemoteCore.Attachment] {
    try (0..<count).map { index in Attachment(try MemoryFile(name: "codec-test-\(index)").takeDescriptor()) }
}

/// SplitMix64: a tiny deterministic PRNG, so every fuzz run sees the same inputs.
private struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A named envelope, as a test argument.
private struct Sample: Sendable, CustomTestStringConvertible {
    let name: String
    let envelope: Envelope
    init(_ name: String, _ envelope: Envelope) {
        self.name = name
        self.envelope = envelope
    }
    var testDescription: String { name }
}

/// The three bodies that carry a `ServiceMessage` (and may carry fds).
private enum ServiceBody: CaseIterable, Sendable {
    case request, reply, message

    func envelope(type: String = "echo", payload: [UInt8] = [], attachments: [Attachment] = []) -> Envelope {
        switch self {
        case .request: Envelope(id: 3, body: .request(type: type, payload: payload), attachments: attachments)
        case .reply: Envelope(id: 3, replyTo: 2, body: .reply(type: type, payload: payload), attachments: attachments)
        case .message: Envelope(id: 3, body: .message(type: type, payload: payload), attachments: attachments)
        }
    }

    var field: UInt32 {
        switch self {
        case .request: Field.request
        case .reply: Field.reply
        case .message: Field.message
        }
    }

    /// The largest payload that still fits in one packet, found by shrinking from the limit.
    var largestPayloadSize: Int {
        var size = WireLimits.maxPacketSize
        while (try? EnvelopeCodec.encode(envelope(payload: [UInt8](repeating: 0, count: size)))) == nil { size -= 1 }
        return size
    }
}

/// Valid envelopes of every body, used for round trips and as seeds for truncation and mutation.
private let samples: [Sample] = [
    Sample("handshake from host with capabilities",
           Envelope(id: 1, body: .handshake(Handshake(role: .host, identifier: "com.example.test",
                                                      capabilities: ["surfaces", "share"])))),
    Sample("handshake from service, other version, smallest max packet",
           Envelope(id: UInt64.max, body: .handshake(Handshake(protocolVersion: 7, role: .service,
                                                               identifier: "a", maxPacketSize: 1_024)))),
    Sample("handshake at every bound",
           Envelope(id: 2, body: .handshake(Handshake(
               role: .service, identifier: String(repeating: "x", count: WireLimits.maxIdentifierLength),
               capabilities: (0..<WireLimits.maxCapabilities).map { index in
                   let name = "c\(index)-"
                   return name + String(repeating: "_", count: WireLimits.maxCapabilityLength - name.utf8.count)
               },
               maxPacketSize: UInt32.max)))),
    Sample("goodbye, empty reason", Envelope(id: 4, body: .goodbye(reason: ""))),
    Sample("goodbye, Unicode reason", Envelope(id: 5, body: .goodbye(reason: "done — 完了 👋"))),
] + ProtocolErrorCode.allCases.map { code in
    Sample("protocol_error \(code)", Envelope(id: 6, body: .protocolError(code, reason: "because \(code)")))
} + [
    Sample("ping, nonce 0", Envelope(id: 7, body: .ping(nonce: 0))),
    Sample("ping, nonce max", Envelope(id: 8, body: .ping(nonce: UInt64.max))),
    Sample("pong", Envelope(id: 9, replyTo: 8, body: .pong(nonce: UInt64.max))),
    Sample("request, empty payload", Envelope(id: 10, body: .request(type: "echo", payload: []))),
    Sample("request, text payload", Envelope(id: 11, body: .request(type: "com.example.clock/now", payload: Array("hello".utf8)))),
    Sample("request, every byte value, longest type",
           Envelope(id: 12, body: .request(type: String(repeating: "t", count: WireLimits.maxTypeLength),
                                           payload: (0...255).map { UInt8($0) }))),
    Sample("reply, empty payload", Envelope(id: 13, replyTo: UInt64.max, body: .reply(type: "echo", payload: []))),
    Sample("reply, payload", Envelope(id: 14, replyTo: 11, body: .reply(type: "日本語", payload: [0, 1, 0xFF]))),
    Sample("message, empty payload", Envelope(id: 15, body: .message(type: "tick", payload: []))),
    Sample("message, payload", Envelope(id: 16, body: .message(type: "a b c", payload: Array(repeating: 0xAB, count: 1_000)))),
    Sample("failure", Envelope(id: 17, replyTo: 10, body: .failure(ServiceFailure(domain: "com.example.echo", code: -42,
                                                                                  message: "it broke")))),
    Sample("failure, extreme code and empty strings",
           Envelope(id: 18, replyTo: 1, body: .failure(ServiceFailure(domain: "", code: Int64.min, message: "")))),
    Sample("cancel", Envelope(id: 19, body: .cancel(requestID: 10))),
    Sample("cancel, max request id", Envelope(id: 20, body: .cancel(requestID: UInt64.max))),
]

// MARK: - Round trips

@Suite("EnvelopeCodec round trips")
private struct EnvelopeCodecRoundTripTests {
    @Test("encode then decode gives back the same envelope", arguments: samples)
    func roundTrips(_ sample: Sample) throws {
        let decoded = try roundTrip(sample.envelope)
        #expect(decoded.id == sample.envelope.id)
        #expect(decoded.replyTo == sample.envelope.replyTo)
        #expect(decoded.attachments.isEmpty)
        #expect(sameBody(decoded.body, sample.envelope.body),
                "\(summary(decoded.body)) != \(summary(sample.envelope.body))")
    }

    @Test("the largest payload fills the packet exactly, round-trips, and one byte more is rejected",
          arguments: ServiceBody.allCases)
    func largestPayload(_ kind: ServiceBody) throws {
        let size = kind.largestPayloadSize
        let payload = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        let envelope = kind.envelope(type: "bulk", payload: payload)
        let packet = try EnvelopeCodec.encode(envelope)
        #expect(packet.count == WireLimits.maxPacketSize)
        let decoded = try decode(packet)
        #expect(sameBody(decoded.body, envelope.body), "\(summary(decoded.body))")

        expectEncodeRejected(kind.envelope(type: "bulk", payload: payload + [0]), mentioning: "packet limit")
    }

    @Test("envelope ids and reply_to values survive at their extremes")
    func extremeIDs() throws {
        let decoded = try roundTrip(Envelope(id: UInt64.max, replyTo: UInt64.max, body: .pong(nonce: 1)))
        #expect(decoded.id == UInt64.max)
        #expect(decoded.replyTo == UInt64.max)
    }

    @Test("a packet encoded without its id, with the id field put in front as it is sent, is the packet encoded with that id", arguments: samples)
    func numberedAsSent(_ sample: Sample) throws {
        let unnumbered = try EnvelopeCodec.encodeUnnumbered(sample.envelope)
        for id: UInt64 in [1, 127, 128, 16_383, 16_384, 1 << 32, UInt64.max - 1, UInt64.max] {
            var numbered = sample.envelope
            numbered.id = id
            let sent = EnvelopeCodec.UnnumberedPacket.withIDField(id) { field in Array(field) } + unnumbered.bytes
            #expect(sent == (try EnvelopeCodec.encode(numbered)), "id \(id)")
        }
    }

    @Test("the framer packs what the sender only checked into a buffer of its pool, byte for byte the envelope encoded with its id, and reuses the buffer once the packet is let go", arguments: samples)
    func framedIntoPool(_ sample: Sample) throws {
        var framer = EnvelopeFramer()
        let unnumbered = try EnvelopeCodec.encodeUnnumbered(sample.envelope)
        var bases: [UnsafeRawPointer?] = []
        do {
            let first = framer.frame(unnumbered, attachments: [])
            var numbered = sample.envelope
            numbered.id = first.id
            #expect(first.packet.bytes == (try EnvelopeCodec.encode(numbered)))
            // A second packet while the first is held (queued in a channel) gets a buffer of its own.
            let second = framer.frame(unnumbered, attachments: [])
            numbered.id = second.id
            #expect(second.packet.bytes == (try EnvelopeCodec.encode(numbered)))
            bases = [first.packet.body.withUnsafeBytes { $0.baseAddress }, second.packet.body.withUnsafeBytes { $0.baseAddress }]
            if unnumbered.deferred != nil { #expect(bases[0] != bases[1], "the held buffer is not reused") }
        }
        // Both let go (written): the next packet goes into one of their buffers.
        let third = framer.frame(unnumbered, attachments: [])
        if unnumbered.deferred != nil {
            #expect(bases.contains(third.packet.body.withUnsafeBytes { $0.baseAddress }), "a let-go buffer is reused")
        }
    }

    @Test("a packet larger than the unpack arena's block decodes (the rest spills), and so does every packet after it")
    func arenaSpills() throws {
        let arena = UnpackArena()
        let small = try EnvelopeCodec.encode(Envelope(id: 1, body: .request(type: "small", payload: [1, 2, 3])))
        let large = try EnvelopeCodec.encode(Envelope(id: 2, body: .request(type: "large", payload: [UInt8](repeating: 7, count: 20_000))))
        for packet in [small, large, small, large, large, small] {
            let decoded = try packet.withUnsafeBytes { (bytes) throws(RemoteError) in try EnvelopeCodec.decode(bytes, attachments: [], arena: arena) }
            #expect(try EnvelopeCodec.encode(decoded) == packet)
        }
    }

    @Test("a request, reply or message is decoded in place: checked as decode checks it, its type and payload left in the arena until it is handed on, the same envelope once copied; other bodies are converted")
    func decodedInPlace() throws {
        let arena = UnpackArena()
        let envelopes = [Envelope(id: 1, body: .request(type: "com.example.echo", payload: [1, 2, 3])),
                         Envelope(id: 2, replyTo: 1, body: .reply(type: "größe", payload: [])),
                         Envelope(id: 3, body: .message(type: "m", payload: [UInt8](repeating: 9, count: 300)))]
        for envelope in envelopes {
            let packet = try EnvelopeCodec.encode(envelope)
            defer { arena.end() }
            let (decoded, packetRange) = try inPlace(packet, arena)
            guard case .serviceMessage(let view) = decoded else {
                Issue.record("\(envelope.body.name) was converted")
                continue
            }
            #expect(view.kind.rawValue == envelope.body.name && view.id == envelope.id && view.replyTo == envelope.replyTo)
            if let base = view.payload.baseAddress {
                #expect(!packetRange.contains(UInt(bitPattern: base)), "in the arena, not the packet")
            }
            #expect(try EnvelopeCodec.encode(view.envelope) == packet, "copied, it is the same envelope")
        }
        let (ping, _) = try inPlace(try EnvelopeCodec.encode(Envelope(id: 4, body: .ping(nonce: 7))), arena)
        defer { arena.end() }
        guard case .envelope(let envelope) = ping, case .ping(7) = envelope.body else {
            Issue.record("a ping is converted")
            return
        }
    }

    /// `packet` decoded in place into `arena`, and where the packet's bytes were.
    private func inPlace(_ packet: [UInt8], _ arena: UnpackArena) throws -> (EnvelopeCodec.Decoded, Range<UInt>) {
        try packet.withUnsafeBytes { bytes in
            let start = UInt(bitPattern: bytes.baseAddress!)
            return (try EnvelopeCodec.decodeInPlace(bytes, attachments: [], arena: arena), start ..< start + UInt(bytes.count))
        }
    }

    @Test("a decoded envelope re-encodes to the same bytes", arguments: samples)
    func encodingIsStable(_ sample: Sample) throws {
        let packet = try EnvelopeCodec.encode(sample.envelope)
        #expect(try EnvelopeCodec.encode(decode(packet)) == packet)
    }
}

// MARK: - Attachments

@Suite("EnvelopeCodec attachments")
private struct EnvelopeCodecAttachmentTests {
    @Test("service messages carry 1 and 16 fds when fd_count matches",
          arguments: ServiceBody.allCases, [1, WireLimits.maxAttachments])
    func matchingCount(_ kind: ServiceBody, count: Int) throws {
        let attachments = try makeAttachments(count)
        let envelope = kind.envelope(payload: [1, 2, 3], attachments: attachments)
        let decoded = try roundTrip(envelope)
        #expect(decoded.attachments.count == count)
        #expect(zip(decoded.attachments, attachments).allSatisfy { $0 === $1 })
        #expect(decoded.attachments.allSatisfy { $0.descriptor != nil })
        #expect(sameBody(decoded.body, envelope.body))
    }

    @Test("declared fd_count differing from the fds that arrived is a violation naming both counts",
          arguments: [(declared: 2, arrived: 1), (declared: 0, arrived: 1), (declared: 3, arrived: 0)])
    func countMismatch(declared: Int, arrived: Int) throws {
        let packet = envelopePacket(fdCount: UInt32(declared), Field.request, serviceMessageBody(type: Array("echo".utf8)))
        expectViolation(packet, attachments: try makeAttachments(arrived),
                        mentioning: ["declares \(declared) fd(s)", "\(arrived) arrived"])
    }

    @Test("bodies without fds reject an attachment even when fd_count declares it",
          arguments: [(Field.handshake, handshakeBody()), (Field.ping, ProtoWriter()),
                      (Field.cancel, ProtoWriter().uint(1, 1)), (Field.goodbye, ProtoWriter())])
    func fdlessBodies(field: UInt32, body: ProtoWriter) throws {
        let packet = envelopePacket(fdCount: 1, field, body)
        expectViolation(packet, attachments: try makeAttachments(1), mentioning: ["fd(s), got 1"])
    }

    @Test("a handshake with one attachment but fd_count 0 is a count mismatch")
    func handshakeUndeclaredAttachment() throws {
        expectViolation(envelopePacket(Field.handshake, handshakeBody()), attachments: try makeAttachments(1),
                        mentioning: ["handshake", "declares 0 fd(s)", "1 arrived"])
    }

    @Test("17 attachments on a request are rejected even when declared")
    func tooManyAttachments() throws {
        let count = WireLimits.maxAttachments + 1
        let packet = envelopePacket(fdCount: UInt32(count), Field.request, serviceMessageBody(type: Array("echo".utf8)))
        expectViolation(packet, attachments: try makeAttachments(count), mentioning: ["request", "got \(count)"])
    }
}

// MARK: - Decode rejections

/// A packet decode must reject, and what its reason must mention.
private struct Hostile: Sendable, CustomTestStringConvertible {
    let name: String
    let packet: [UInt8]
    let mentions: [String]
    init(_ name: String, _ packet: [UInt8], _ mentions: String...) {
        self.name = name
        self.packet = packet
        self.mentions = mentions
    }
    var testDescription: String { name }
}

private let echo = Array("echo".utf8)
private let tooLongReason = String(repeating: "r", count: WireLimits.maxReasonLength + 1)

private let hostilePackets: [Hostile] = [
    // Framing
    Hostile("empty packet", [], "empty packet"),
    Hostile("packet one byte over the limit", [UInt8](repeating: 0, count: WireLimits.maxPacketSize + 1),
            "\(WireLimits.maxPacketSize + 1) bytes", "\(WireLimits.maxPacketSize)-byte limit"),
    Hostile("not protobuf", [0xFF, 0xFF, 0xFF], "not a valid Envelope"),
    Hostile("truncated varint", [0x08, 0x80], "not a valid Envelope"),
    Hostile("known field with the wrong wire type", ProtoWriter().bytes(Field.id, [1]).bytes, "not a valid Envelope"),
    Hostile("submessage length past the end", [0x08, 0x01, 0x6A, 0x05, 0x08], "not a valid Envelope"),
    // Envelope
    Hostile("id 0", envelopePacket(id: 0, Field.ping), "id is 0"),
    Hostile("id absent", ProtoWriter().message(Field.ping).bytes, "id is 0"),
    Hostile("no body", ProtoWriter().uint(Field.id, 1).bytes, "no body"),
    Hostile("only an unknown body field 150", envelopePacket(150), "150"),
    Hostile("unknown fields 150 and 4, no body", ProtoWriter().uint(Field.id, 1).message(150).uint(4, 9).bytes,
            "150", "4"),
    // reply_to
    Hostile("reply without reply_to", envelopePacket(Field.reply, serviceMessageBody(type: echo)), "reply", "no reply_to"),
    Hostile("pong without reply_to", envelopePacket(Field.pong), "pong", "no reply_to"),
    Hostile("failure without reply_to", envelopePacket(Field.failure), "failure", "no reply_to"),
    Hostile("request with reply_to", envelopePacket(replyTo: 5, Field.request, serviceMessageBody(type: echo)),
            "request", "must not have reply_to"),
    Hostile("ping with reply_to", envelopePacket(replyTo: 5, Field.ping), "ping", "must not have reply_to"),
    Hostile("cancel with reply_to", envelopePacket(replyTo: 5, Field.cancel, ProtoWriter().uint(1, 1)),
            "must not have reply_to"),
    // Handshake
    Hostile("handshake role 0", envelopePacket(Field.handshake, handshakeBody(role: 0)), "role 0"),
    Hostile("handshake role 7", envelopePacket(Field.handshake, handshakeBody(role: 7)), "role 7"),
    Hostile("handshake protocol_version 0", envelopePacket(Field.handshake, handshakeBody(version: 0)),
            "protocol_version is 0"),
    Hostile("identifier empty", envelopePacket(Field.handshake, handshakeBody(identifier: [])), "identifier"),
    Hostile("identifier with a space", envelopePacket(Field.handshake, handshakeBody(identifier: Array("com.example test".utf8))),
            "identifier", "com.example test"),
    Hostile("identifier with a slash", envelopePacket(Field.handshake, handshakeBody(identifier: Array("com/example".utf8))),
            "identifier", "com/example"),
    Hostile("identifier of 256 bytes",
            envelopePacket(Field.handshake, handshakeBody(identifier: [UInt8](repeating: UInt8(ascii: "a"), count: 256))),
            "identifier", "longer than 255"),
    Hostile("identifier with invalid UTF-8", envelopePacket(Field.handshake, handshakeBody(identifier: [0x61, 0xC3, 0x28])),
            "identifier", "UTF-8"),
    Hostile("33 capabilities",
            envelopePacket(Field.handshake, handshakeBody(capabilities: (0..<33).map { "cap\($0)" })), "33 capabilities"),
    Hostile("empty capability", envelopePacket(Field.handshake, handshakeBody(capabilities: ["ok", ""])), "capability 1"),
    Hostile("capability with a space", envelopePacket(Field.handshake, handshakeBody(capabilities: ["a b"])), "capability 0"),
    Hostile("capability of 65 bytes",
            envelopePacket(Field.handshake, handshakeBody(capabilities: [String(repeating: "c", count: 65)])),
            "capability 0", "longer than 64"),
    Hostile("max_packet_size 1023", envelopePacket(Field.handshake, handshakeBody(maxPacketSize: 1_023)),
            "max_packet_size 1023"),
    Hostile("max_packet_size absent", envelopePacket(Field.handshake, ProtoWriter().uint(1, 1).uint(2, 1).string(3, "a")),
            "max_packet_size 0"),
    // Goodbye, protocol error, failure, cancel
    Hostile("goodbye reason over the limit", envelopePacket(Field.goodbye, ProtoWriter().string(1, tooLongReason)),
            "goodbye reason", "longer than \(WireLimits.maxReasonLength)"),
    Hostile("goodbye reason with invalid UTF-8", envelopePacket(Field.goodbye, ProtoWriter().bytes(1, [0xFF])),
            "goodbye reason", "UTF-8"),
    Hostile("protocol_error code 0", envelopePacket(Field.protocolError, ProtoWriter().uint(1, 0)), "code 0"),
    Hostile("protocol_error code 99", envelopePacket(Field.protocolError, ProtoWriter().uint(1, 99)), "code 99"),
    Hostile("protocol_error reason over the limit",
            envelopePacket(Field.protocolError, ProtoWriter().uint(1, 1).string(2, tooLongReason)), "protocol_error reason"),
    Hostile("failure message over the limit",
            envelopePacket(replyTo: 1, Field.failure,
                           ProtoWriter().string(3, String(repeating: "m", count: WireLimits.maxFailureMessageLength + 1))),
            "failure message", "longer than \(WireLimits.maxFailureMessageLength)"),
    Hostile("cancel request_id 0", envelopePacket(Field.cancel, ProtoWriter().uint(1, 0)), "request_id is 0"),
    Hostile("cancel without request_id", envelopePacket(Field.cancel), "request_id is 0"),
] + ServiceBody.allCases.flatMap { kind -> [Hostile] in
    let replyTo: UInt64? = kind == .reply ? 1 : nil
    let name = "\(kind)"
    return [
        Hostile("\(name) with empty type", envelopePacket(replyTo: replyTo, kind.field, serviceMessageBody(type: [])),
                "\(name) type"),
        Hostile("\(name) without a type", envelopePacket(replyTo: replyTo, kind.field), "\(name) type"),
        Hostile("\(name) type with U+0001", envelopePacket(replyTo: replyTo, kind.field, serviceMessageBody(type: Array("ec\u{1}ho".utf8))),
                "\(name) type", "control characters"),
        Hostile("\(name) type with DEL", envelopePacket(replyTo: replyTo, kind.field, serviceMessageBody(type: Array("ec\u{7F}ho".utf8))),
                "\(name) type", "control characters"),
        Hostile("\(name) type with U+0085", envelopePacket(replyTo: replyTo, kind.field, serviceMessageBody(type: Array("ec\u{85}ho".utf8))),
                "\(name) type", "control characters"),
        Hostile("\(name) type of 257 bytes",
                envelopePacket(replyTo: replyTo, kind.field, serviceMessageBody(type: [UInt8](repeating: 0x74, count: 257))),
                "\(name) type", "longer than \(WireLimits.maxTypeLength)"),
        Hostile("\(name) type with invalid UTF-8",
                envelopePacket(replyTo: replyTo, kind.field, serviceMessageBody(type: [0x65, 0xED, 0xA0, 0x80])),
                "\(name) type", "UTF-8"),
    ]
}

@Suite("EnvelopeCodec decode rejections")
private struct EnvelopeCodecRejectionTests {
    @Test("hostile packets are protocol violations that name the problem", arguments: hostilePackets)
    func rejects(_ hostile: Hostile) {
        expectViolation(hostile.packet, mentioning: hostile.mentions)
    }

    @Test("the hand-built packets differ from valid ones only in the broken field")
    func baselinesDecode() throws {
        // Guards the table above: each builder's unmodified output is accepted.
        _ = try decode(envelopePacket(Field.handshake, handshakeBody(capabilities: ["surfaces"])))
        _ = try decode(envelopePacket(Field.request, serviceMessageBody(type: echo, payload: [1])))
        _ = try decode(envelopePacket(replyTo: 1, Field.reply, serviceMessageBody(type: echo)))
        _ = try decode(envelopePacket(replyTo: 1, Field.pong))
        _ = try decode(envelopePacket(replyTo: 1, Field.failure))
        _ = try decode(envelopePacket(Field.cancel, ProtoWriter().uint(1, 1)))
        _ = try decode(envelopePacket(Field.protocolError, ProtoWriter().uint(1, 6)))
        _ = try decode(envelopePacket(Field.handshake, handshakeBody(maxPacketSize: 1_024)))
    }

    @Test("the hand-encoded tag of field 150 is the two bytes 0xB2 0x09")
    func field150Tag() {
        #expect(envelopePacket(150) == [0x08, 0x01, 0xB2, 0x09, 0x00])
    }

    @Test("unknown fields next to a known body are ignored, as proto3 requires")
    func unknownFieldsBesideABody() throws {
        let packet = ProtoWriter().uint(Field.id, 1).message(150).uint(4, 9).message(Field.ping, ProtoWriter().uint(1, 3)).bytes
        let decoded = try decode(packet)
        #expect(sameBody(decoded.body, .ping(nonce: 3)))
    }

    @Test("a packet carrying two bodies is refused as not canonically encoded")
    func twoBodies() throws {
        let packet = ProtoWriter().uint(Field.id, 1)
            .message(Field.request, serviceMessageBody(type: echo, payload: [1]))
            .message(Field.ping, ProtoWriter().uint(1, 3)).bytes
        expectViolation(packet, mentioning: ["not canonically encoded"])
    }
}

// MARK: - Robustness

@Suite("EnvelopeCodec robustness")
private struct EnvelopeCodecRobustnessTests {
    /// Decodes `packet` and checks the only outcomes allowed: a valid envelope that re-encodes
    /// and decodes to the same thing, or a protocol violation. A crash fails the whole run.
    private func decodeOrReject(_ packet: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        let decoded: Envelope
        do {
            decoded = try decode(packet)
        } catch {
            #expect(error.code == .protocolViolation, "\(error) for \(packet)", sourceLocation: sourceLocation)
            return false
        }
        // Whatever decode accepts must be acceptable to send back.
        do {
            let again = try decode(EnvelopeCodec.encode(decoded))
            #expect(again.id == decoded.id && again.replyTo == decoded.replyTo && sameBody(again.body, decoded.body),
                    "\(packet)", sourceLocation: sourceLocation)
        } catch {
            Issue.record("decoded \(summary(decoded.body)) from \(packet) but could not re-encode it: \(error)",
                         sourceLocation: sourceLocation)
        }
        return true
    }

    @Test("every prefix of a valid packet decodes or throws", arguments: samples)
    func truncations(_ sample: Sample) throws {
        let packet = try EnvelopeCodec.encode(sample.envelope)
        // Long packets: every prefix near the start and end, and a sample in between.
        let cuts = packet.count <= 2_048 ? Array(0...packet.count)
            : Array(0...512) + Array(stride(from: 513, to: packet.count - 512, by: 97)) + Array((packet.count - 512)...packet.count)
        for cut in cuts {
            let accepted = decodeOrReject(Array(packet.prefix(cut)))
            // The whole packet is valid; a strict prefix may be valid only where a field ended.
            if cut == packet.count { #expect(accepted) }
        }
    }

    @Test("5,000 random byte strings of 0…300 bytes never crash decode")
    func randomBytes() {
        var random = SplitMix64(seed: 0x5EED_0001)
        var accepted = 0
        for _ in 0..<5_000 {
            let length = Int.random(in: 0...300, using: &random)
            let packet = (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
            if decodeOrReject(packet) { accepted += 1 }
        }
        // Random bytes almost never form a valid envelope; the point is that none crashed.
        #expect(accepted < 5_000)
    }

    @Test("random byte flips, insertions and deletions of valid packets never crash decode", arguments: samples)
    func mutations(_ sample: Sample) throws {
        let original = try EnvelopeCodec.encode(sample.envelope)
        var random = SplitMix64(seed: 0xF11B ^ UInt64(original.count))
        for _ in 0..<400 {
            var packet = original
            for _ in 0...Int.random(in: 0...3, using: &random) {
                mutate(&packet, using: &random)
            }
            _ = decodeOrReject(packet)
        }
    }

    @Test("random sequences of well-formed fields never crash decode")
    func randomFields() {
        var random = SplitMix64(seed: 0xF1E1D5)
        var accepted = 0
        for _ in 0..<3_000 {
            if decodeOrReject(randomMessage(depth: 0, using: &random).bytes) { accepted += 1 }
        }
        // The generator is worth its keep only if it gets past protobuf-c into the validation.
        #expect(accepted > 30)
    }

    @Test("packets of thousands of tiny fields hit the decode memory budget, not the allocator",
          arguments: [Field.ping, Field.request, 4, 150])
    func manyTinyFields(field: UInt32) {
        // Each repetition is a valid protobuf field (a repeated oneof member or an unknown field)
        // that costs protobuf-c far more memory than its 2-3 bytes of wire.
        var packet = ProtoWriter().uint(Field.id, 1)
        while packet.bytes.count < WireLimits.maxPacketSize - 8 {
            packet = field == 4 ? packet.uint(field, 0) : packet.message(field)
        }
        expectViolation(packet.message(Field.ping).bytes, mentioning: ["memory"])
    }

    private func mutate(_ packet: inout [UInt8], using random: inout SplitMix64) {
        switch Int.random(in: 0..<4, using: &random) {
        case 0 where !packet.isEmpty:
            packet[Int.random(in: packet.indices, using: &random)] ^= 1 << UInt8.random(in: 0..<8, using: &random)
        case 1 where !packet.isEmpty:
            packet[Int.random(in: packet.indices, using: &random)] = UInt8.random(in: 0...255, using: &random)
        case 2:
            packet.insert(UInt8.random(in: 0...255, using: &random), at: Int.random(in: 0...packet.count, using: &random))
        default:
            if !packet.isEmpty { packet.remove(at: Int.random(in: packet.indices, using: &random)) }
        }
    }

    /// A message of random fields shaped like the schema: at the top, an id and the envelope's
    /// field numbers (now and then 150); inside, fields 1…5. Values are plausible: small and
    /// extreme varints, short strings that pass or fail validation, nested messages.
    private func randomMessage(depth: Int, using random: inout SplitMix64) -> ProtoWriter {
        var message = ProtoWriter()
        let fields: [UInt32] = depth == 0 ? [Field.replyTo, Field.fdCount, 150] + Array(Field.handshake...Field.cancel) : Array(1...5)
        if depth == 0, Int.random(in: 0..<8, using: &random) != 0 {
            message = message.uint(Field.id, UInt64.random(in: 0...3, using: &random))
        }
        for _ in 0..<Int.random(in: depth == 0 ? 1...2 : 0...5, using: &random) {
            let field = fields.randomElement(using: &random)!
            switch Int.random(in: 0..<4, using: &random) {
            case 0:
                message = message.uint(field, [0, 1, 2, 7, 1_024, 65_536, UInt64.max].randomElement(using: &random)!)
            case 1:
                let token = ["", "echo", "a b", "\u{1}", "com.example.test", "é", "\u{0}x"].randomElement(using: &random)!
                message = message.string(field, token)
            case 2:
                message = message.bytes(field, (0..<Int.random(in: 0...4, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) })
            default:
                message = message.message(field, depth < 2 ? randomMessage(depth: depth + 1, using: &random) : ProtoWriter())
            }
        }
        return message
    }
}

// MARK: - Encode rejections and truncation

@Suite("EnvelopeCodec encode")
private struct EnvelopeCodecEncodeTests {
    @Test("a payload larger than a packet is rejected", arguments: ServiceBody.allCases)
    func payloadTooLarge(_ kind: ServiceBody) {
        expectEncodeRejected(kind.envelope(payload: [UInt8](repeating: 1, count: WireLimits.maxPacketSize + 1)),
                             mentioning: "payload of \(WireLimits.maxPacketSize + 1) bytes")
    }

    @Test("an empty, too long, or control-character type is rejected", arguments: ServiceBody.allCases)
    func badType(_ kind: ServiceBody) {
        expectEncodeRejected(kind.envelope(type: ""), mentioning: "type")
        expectEncodeRejected(kind.envelope(type: String(repeating: "t", count: WireLimits.maxTypeLength + 1)),
                             mentioning: "type")
        expectEncodeRejected(kind.envelope(type: "ec\u{1}ho"), mentioning: "control characters")
    }

    @Test("17 attachments are rejected", arguments: ServiceBody.allCases)
    func tooManyAttachments(_ kind: ServiceBody) throws {
        let attachments = try makeAttachments(WireLimits.maxAttachments + 1)
        expectEncodeRejected(kind.envelope(attachments: attachments), mentioning: "not \(WireLimits.maxAttachments + 1)")
    }

    @Test("an attachment on a body that carries no fds is rejected")
    func attachmentOnPing() throws {
        expectEncodeRejected(Envelope(id: 1, body: .ping(nonce: 1), attachments: try makeAttachments(1)),
                             mentioning: "ping may carry")
    }

    @Test("reply_to must be present exactly on replies")
    func replyToRules() {
        expectEncodeRejected(Envelope(id: 1, body: .reply(type: "echo", payload: [])), mentioning: "reply needs reply_to")
        expectEncodeRejected(Envelope(id: 1, body: .pong(nonce: 1)), mentioning: "pong needs reply_to")
        expectEncodeRejected(Envelope(id: 1, body: .failure(ServiceFailure(domain: "d", code: 1, message: "m"))),
                             mentioning: "failure needs reply_to")
        expectEncodeRejected(Envelope(id: 1, replyTo: 3, body: .request(type: "echo", payload: [])),
                             mentioning: "request must not have reply_to")
    }

    @Test("id 0 is rejected")
    func idZero() {
        expectEncodeRejected(Envelope(id: 0, body: .ping(nonce: 1)), mentioning: "id 0", unnumberedToo: false)
    }

    @Test("over-long reasons, domains and failure messages are truncated on encode and decode fine",
          arguments: ["r", "é", "👨‍👩‍👧"])
    func truncation(_ unit: String) throws {
        let long = String(repeating: unit, count: 5_000)
        for (envelope, limit) in textBodies(long) {
            let decoded = try roundTrip(envelope)
            let received = try #require(text(of: decoded.body), "\(summary(decoded.body))")
            #expect(received.utf8.count <= limit)
            #expect(received.utf8.count > limit - 3 - unit.utf8.count, "truncated more than needed")
            #expect(received.hasSuffix("..."))
            #expect(long.hasPrefix(received.dropLast(3)), "not cut on a character boundary of the original")
        }
    }

    @Test("texts exactly at their limit are sent unchanged")
    func textAtLimit() throws {
        for limit in [WireLimits.maxReasonLength, WireLimits.maxFailureMessageLength] {
            let exact = String(repeating: "r", count: limit)
            for (envelope, bodyLimit) in textBodies(exact) where bodyLimit == limit {
                #expect(text(of: try roundTrip(envelope).body) == exact)
            }
        }
    }

    /// Envelopes that carry `text` in a field the encoder truncates, with that field's limit.
    private func textBodies(_ text: String) -> [(Envelope, limit: Int)] {
        [
            (Envelope(id: 1, body: .goodbye(reason: text)), WireLimits.maxReasonLength),
            (Envelope(id: 1, body: .protocolError(.malformed, reason: text)), WireLimits.maxReasonLength),
            (Envelope(id: 1, replyTo: 1, body: .failure(ServiceFailure(domain: text, code: 1, message: ""))),
             WireLimits.maxReasonLength),
            (Envelope(id: 1, replyTo: 1, body: .failure(ServiceFailure(domain: "", code: 1, message: text))),
             WireLimits.maxFailureMessageLength),
        ]
    }

    /// The (one non-empty) text field of a goodbye, protocol error or failure.
    private func text(of body: Envelope.Body) -> String? {
        switch body {
        case .goodbye(let reason), .protocolError(_, let reason): reason
        case .failure(let failure): failure.domain.isEmpty ? failure.message : failure.domain
        default: nil
        }
    }
}

// MARK: - Attachment lifetime

@Suite("EnvelopeCodec attachment lifetime")
private struct EnvelopeCodecAttachmentLifetimeTests {
    @Test("the attachments of a rejected packet are closed once nobody else holds them")
    func rejectedAttachmentsClose() throws {
        // Counted by memfd name, not fd number: tests running in parallel reuse numbers.
        let name = "codec-reject-\(UInt64.random(in: 1...UInt64.max))"
        #expect(memoryFiles(named: name) == 0)
        try rejectWithFreshAttachments(envelopePacket(fdCount: 2, Field.ping), count: 2, named: name)
        #expect(memoryFiles(named: name) == 0)
    }

    /// Decodes `packet` (expecting a rejection) with `count` new memfds called `name`; once this
    /// returns, nothing but the codec ever held them.
    private func rejectWithFreshAttachments(_ packet: [UInt8], count: Int, named name: String) throws {
        let attachments = try (0..<count).map { _ in Attachment(try MemoryFile(name: name).takeDescriptor()) }
        #expect(memoryFiles(named: name) == count)
        #expect(throws: RemoteError.self) { try decode(packet, attachments: attachments) }
    }

    /// How many of this process's fds are memfds called `name`.
    private func memoryFiles(named name: String) -> Int {
        openDescriptorTargets().values.filter { $0.contains("memfd:\(name) ") }.count
    }
}

// MARK: - Regressions

/// Bugs found by these tests, now fixed.
@Suite("EnvelopeCodec regressions")
private struct EnvelopeCodecRegressionTests {
    @Test("a NUL byte inside a validated string is rejected, not silently cut off",
          arguments: [
              Hostile("request type \"echo\\0\\u{1}\" plus 300 bytes",
                      envelopePacket(Field.request, serviceMessageBody(type: echo + [0, 1] + [UInt8](repeating: 0x20, count: 300))),
                      "embedded NUL"),
              Hostile("identifier \"com.example\\0 bad/\"",
                      envelopePacket(Field.handshake, handshakeBody(identifier: Array("com.example\u{0} bad/".utf8))),
                      "embedded NUL"),
              Hostile("capability \"ok\\0!!\"", envelopePacket(Field.handshake, handshakeBody(capabilities: ["ok\u{0}!!"])),
                      "embedded NUL"),
          ])
    func embeddedNUL(_ hostile: Hostile) {
        expectViolation(hostile.packet, mentioning: hostile.mentions)
    }

    @Test("encode rejects what every peer's decode would reject",
          arguments: [
              Sample("identifier with a space", Envelope(id: 1, body: .handshake(Handshake(role: .host, identifier: "my app")))),
              Sample("empty identifier", Envelope(id: 1, body: .handshake(Handshake(role: .host, identifier: "")))),
              Sample("33 capabilities", Envelope(id: 1, body: .handshake(Handshake(
                  role: .host, identifier: "a", capabilities: (0..<33).map { "c\($0)" })))),
              Sample("capability with a space", Envelope(id: 1, body: .handshake(Handshake(
                  role: .host, identifier: "a", capabilities: ["a b"])))),
              Sample("protocol version 0", Envelope(id: 1, body: .handshake(Handshake(protocolVersion: 0, role: .host, identifier: "a")))),
              Sample("max packet size 1023", Envelope(id: 1, body: .handshake(Handshake(role: .host, identifier: "a", maxPacketSize: 1_023)))),
              Sample("cancel of request 0", Envelope(id: 1, body: .cancel(requestID: 0))),
          ])
    func encodeValidatesLikeDecode(_ sample: Sample) throws {
        let error = #expect(throws: RemoteError.self) { try EnvelopeCodec.encode(sample.envelope) }
        #expect(error?.code == .invalidArgument)
    }
}
