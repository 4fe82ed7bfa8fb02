import CProto
import CProtobufC
import Glibc

/// Converts between ``Envelope`` values and the bytes of one packet, through protobuf-c.
///
/// The only place that touches the generated C structs (like Mojo's `StructTraits`): decoding
/// validates every field — sizes, counts, string lengths and encodings, enum ranges, the fd
/// count against the fds that actually arrived — so no handler ever sees an invalid value.
/// protobuf-c sets no limits of its own, so the packet size is capped before unpacking and
/// unpacking runs on an allocator with a fixed budget. The schema has no recursive messages,
/// so nesting depth is bounded by the schema itself (two levels).
package enum EnvelopeCodec {
    // MARK: decode

    /// Decodes one packet that arrived with `attachments`; protobuf-c unpacks it into `arena`
    /// (a connection's, reused for every packet it reads; a new one when `nil`), and only what
    /// the envelope hands on (its strings and payload) is copied into Swift values.
    ///
    /// - Throws: ``RemoteError`` with code ``RemoteError/Code/protocolViolation`` naming what was
    ///   wrong. The attachments are released (and so closed) when decoding fails.
    package static func decode(_ packet: UnsafeRawBufferPointer, attachments: [Attachment],
                               arena: UnpackArena? = nil) throws(RemoteError) -> Envelope {
        let arena = arena ?? UnpackArena()
        defer { arena.end() }
        return try decodeInPlace(packet, attachments: attachments, arena: arena).envelope
    }

    /// A decoded packet, every rule checked. A request, reply or message stays where
    /// protobuf-c unpacked it (``ServiceMessageView``), and is copied into Swift values only
    /// when it is handed on; any other body is converted.
    package enum Decoded {
        case serviceMessage(ServiceMessageView)
        case envelope(Envelope)

        /// The envelope, as Swift values (a view's type and payload copied).
        package var envelope: Envelope {
            switch self {
            case .serviceMessage(let view): view.envelope
            case .envelope(let envelope): envelope
            }
        }

        /// The envelope's id.
        package var id: UInt64 {
            switch self {
            case .serviceMessage(let view): view.id
            case .envelope(let envelope): envelope.id
            }
        }

        /// The body's name ("request", "pong", …), for messages.
        package var name: String {
            switch self {
            case .serviceMessage(let view): view.kind.rawValue
            case .envelope(let envelope): envelope.body.name
            }
        }
    }

    /// A request, reply or message decoded and checked (its type too), whose type and payload
    /// are still the bytes protobuf-c unpacked into the arena: valid until the arena's packet
    /// ends (the next decode), so the view never leaves the code that decoded it.
    package struct ServiceMessageView {
        package enum Kind: String, Sendable {
            case request, reply, message

            /// A body of this kind.
            func body(type: String, payload: [UInt8]) -> Envelope.Body {
                switch self {
                case .request: .request(type: type, payload: payload)
                case .reply: .reply(type: type, payload: payload)
                case .message: .message(type: type, payload: payload)
                }
            }
        }
        package let kind: Kind
        package let id: UInt64
        /// The request it answers (a reply's only).
        package let replyTo: UInt64?
        /// The type's UTF-8 bytes, checked as ``checkType(_:_:)`` checks a string.
        package let type: UnsafeRawBufferPointer
        package let payload: UnsafeRawBufferPointer
        package let attachments: [Attachment]

        /// The message, copied out of the arena.
        package var message: ServiceMessage {
            ServiceMessage(type: String(decoding: type, as: UTF8.self),
                           payload: payload.isEmpty ? [] : Array(payload), attachments: attachments)
        }

        /// The envelope, copied out of the arena.
        package var envelope: Envelope {
            let message = self.message
            return Envelope(id: id, replyTo: replyTo, body: kind.body(type: message.type, payload: message.payload),
                            attachments: attachments)
        }
    }

    /// Decodes one packet into `arena` (begun here; the caller ends it once it is done with
    /// the result), checking every rule; a request, reply or message is left in place.
    ///
    /// - Throws: ``RemoteError`` with code ``RemoteError/Code/protocolViolation`` naming what was
    ///   wrong. The attachments are released (and so closed) when decoding fails.
    package static func decodeInPlace(_ packet: UnsafeRawBufferPointer, attachments: [Attachment],
                                      arena: UnpackArena) throws(RemoteError) -> Decoded {
        guard packet.count <= WireLimits.maxPacketSize else {
            throw violation("packet of \(packet.count) bytes exceeds the \(WireLimits.maxPacketSize)-byte limit")
        }
        guard packet.count > 0, let base = packet.baseAddress else { throw violation("empty packet") }

        // Every allocation protobuf-c makes while unpacking comes out of this budget: 16 bytes per
        // input byte covers real envelopes; a packet of thousands of empty fields (about 24 bytes
        // of struct per input byte) is refused rather than allowed to amplify.
        arena.begin(budget: 16 * packet.count + 4_096)
        return try withExtendedLifetime(arena) { () throws(RemoteError) -> Decoded in
            var allocator = ProtobufCAllocator(alloc: arenaAlloc, free: arenaFree, allocator_data: Unmanaged.passUnretained(arena).toOpaque())
            guard let envelope = remoteview__envelope__unpack(&allocator, packet.count, base.assumingMemoryBound(to: UInt8.self)) else {
                throw violation(arena.exhausted ? "packet needs more memory to decode than its size allows"
                    : "packet of \(packet.count) bytes is not a valid Envelope")
            }
            // Nothing to free one by one: the arena lets all of it go at once (end()).
            let decoded = try convert(envelope.pointee, attachments: attachments)
            // protobuf-c hands strings over NUL-terminated, so "ok\0!!" would read as "ok" and pass
            // validation. Re-measuring catches it: only a canonically encoded packet (no embedded NUL,
            // no repeated or explicitly-default fields) packs back to its own size.
            let canonicalSize = remoteview__envelope__get_packed_size(envelope)
            guard canonicalSize == packet.count else {
                throw violation("packet of \(packet.count) bytes is not canonically encoded (\(canonicalSize) bytes when re-encoded): a string with an embedded NUL, or a repeated or default-valued field")
            }
            return decoded
        }
    }

    private static func convert(_ e: Remoteview__Envelope, attachments: [Attachment]) throws(RemoteError) -> Decoded {
        guard e.id != 0 else { throw violation("envelope id is 0") }
        let view: (ServiceMessageView.Kind, Remoteview__ServiceMessage)? = switch e.body_case {
        case REMOTEVIEW__ENVELOPE__BODY_REQUEST: (.request, e.request.pointee)
        case REMOTEVIEW__ENVELOPE__BODY_REPLY: (.reply, e.reply.pointee)
        case REMOTEVIEW__ENVELOPE__BODY_MESSAGE: (.message, e.message.pointee)
        default: nil
        }
        if let (kind, message) = view {
            // The header's rules, for a body of this kind (empty: nothing allocated).
            let shape = kind.body(type: "", payload: [])
            // The type first, as for every other body (its rules before the header's).
            let type = try typeBytes(message.type, kind.rawValue)
            try checkHeader(e, body: shape, attachments: attachments)
            let payload = UnsafeRawBufferPointer(start: message.payload.data, count: message.payload.len)
            return .serviceMessage(ServiceMessageView(kind: kind, id: e.id, replyTo: e.reply_to == 0 ? nil : e.reply_to,
                                                      type: type, payload: payload, attachments: attachments))
        }
        let body = try convertBody(e)
        try checkHeader(e, body: body, attachments: attachments)
        return .envelope(Envelope(id: e.id, replyTo: e.reply_to == 0 ? nil : e.reply_to, body: body, attachments: attachments))
    }

    /// The header's rules for `body`: its fd count, and reply_to where it answers.
    private static func checkHeader(_ e: Remoteview__Envelope, body: Envelope.Body, attachments: [Attachment]) throws(RemoteError) {
        guard Int(e.fd_count) == attachments.count else {
            throw RemoteError(.protocolViolation, "\(body.name) envelope \(e.id) declares \(e.fd_count) fd(s) but \(attachments.count) arrived")
        }
        guard body.allowedAttachments.contains(attachments.count) else {
            throw violation("\(body.name) may carry \(body.allowedAttachments) fd(s), got \(attachments.count)")
        }
        if body.isReply {
            guard e.reply_to != 0 else { throw violation("\(body.name) envelope \(e.id) has no reply_to") }
        } else {
            guard e.reply_to == 0 else { throw violation("\(body.name) envelope \(e.id) must not have reply_to (\(e.reply_to))") }
        }
    }

    /// A service message's type as bytes in place, checked as ``checkType(_:_:)`` checks a
    /// string: printable ASCII is taken as it is; anything else is validated as UTF-8 first.
    private static func typeBytes(_ pointer: UnsafeMutablePointer<CChar>?, _ what: String) throws(RemoteError) -> UnsafeRawBufferPointer {
        let max = WireLimits.maxTypeLength
        guard let pointer else { throw violation("\(what) type \"\" must be 1…\(max) bytes without control characters") }
        let length = strnlen(pointer, max + 1)
        guard length <= max else { throw violation("\(what) type is longer than \(max) bytes") }
        let bytes = UnsafeRawBufferPointer(start: pointer, count: length)
        if length > 0, bytes.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) { return bytes }
        guard let type = String(validating: bytes, as: UTF8.self) else { throw violation("\(what) type is not valid UTF-8") }
        try checkType(type, what)
        return bytes
    }

    /// The body: the core family here (fields 1–10), the others in their own files
    /// (`EnvelopeCodec+Surface.swift`, `EnvelopeCodec+Input.swift`, `EnvelopeCodec+Share.swift`).
    private static func convertBody(_ e: Remoteview__Envelope) throws(RemoteError) -> Envelope.Body {
        switch e.body_case {
        case REMOTEVIEW__ENVELOPE__BODY_HANDSHAKE:
            let h = e.handshake.pointee
            let role: PeerRole
            switch h.role {
            case REMOTEVIEW__PEER_ROLE__PEER_ROLE_HOST: role = .host
            case REMOTEVIEW__PEER_ROLE__PEER_ROLE_SERVICE: role = .service
            default: throw violation("handshake role \(h.role.rawValue) is not host (1) or service (2)")
            }
            // Reading is bounded by the packet; the count and each value are checked in validate().
            var capabilities: [String] = []
            for index in 0..<h.n_capabilities {
                capabilities.append(try string(h.capabilities[index], "handshake capability \(index)", max: WireLimits.maxCapabilityLength))
            }
            let handshake = Handshake(
                protocolVersion: h.protocol_version, role: role,
                identifier: try string(h.identifier, "handshake identifier", max: WireLimits.maxIdentifierLength),
                capabilities: capabilities, maxPacketSize: h.max_packet_size,
                maxProtocolVersion: h.max_protocol_version == 0 ? nil : h.max_protocol_version)
            try validate(handshake)
            return .handshake(handshake)
        case REMOTEVIEW__ENVELOPE__BODY_GOODBYE:
            return .goodbye(reason: try string(e.goodbye.pointee.reason, "goodbye reason", max: WireLimits.maxReasonLength))
        case REMOTEVIEW__ENVELOPE__BODY_PROTOCOL_ERROR:
            let p = e.protocol_error.pointee
            guard let code = ProtocolErrorCode(rawValue: Int32(bitPattern: p.code.rawValue)) else {
                throw violation("protocol_error code \(p.code.rawValue) is out of range 1…\(ProtocolErrorCode.allCases.count)")
            }
            return .protocolError(code, reason: try string(p.reason, "protocol_error reason", max: WireLimits.maxReasonLength))
        case REMOTEVIEW__ENVELOPE__BODY_PING:
            return .ping(nonce: e.ping.pointee.nonce)
        case REMOTEVIEW__ENVELOPE__BODY_PONG:
            return .pong(nonce: e.pong.pointee.nonce)
        case REMOTEVIEW__ENVELOPE__BODY_FAILURE:
            let f = e.failure.pointee
            return .failure(ServiceFailure(
                domain: try string(f.domain, "failure domain", max: WireLimits.maxReasonLength),
                code: f.code,
                message: try string(f.message, "failure message", max: WireLimits.maxFailureMessageLength)))
        case REMOTEVIEW__ENVELOPE__BODY_CANCEL:
            let requestID = e.cancel.pointee.request_id
            guard requestID != 0 else { throw violation("cancel request_id is 0") }
            return .cancel(requestID: requestID)
        default:
            if let body = try decodeSurface(e) { return body }
            if let body = try decodeInput(e) { return body }
            if let body = try decodeShare(e) { return body }
            let unknown = (0..<Int(e.base.n_unknown_fields)).map { e.base.unknown_fields[$0].tag }
            throw violation(unknown.isEmpty ? "envelope \(e.id) has no body"
                : "envelope \(e.id) has no known body (unknown field(s) \(unknown.map { String($0) }.joined(separator: ", ")))")
        }
    }

    /// A C string from protobuf-c as Swift: valid UTF-8, at most `max` bytes.
    static func string(_ pointer: UnsafeMutablePointer<CChar>?, _ field: String, max: Int) throws(RemoteError) -> String {
        guard let pointer else { return "" }
        let length = strnlen(pointer, max + 1)
        guard length <= max else { throw violation("\(field) is longer than \(max) bytes") }
        let bytes = UnsafeRawBufferPointer(start: pointer, count: length)
        guard let value = String(validating: bytes, as: UTF8.self) else { throw violation("\(field) is not valid UTF-8") }
        return value
    }

    // MARK: shared validation (also applied before sending)

    /// The handshake's bounds: version, identifier, capabilities, packet size.
    package static func validate(_ handshake: Handshake) throws(RemoteError) {
        guard handshake.protocolVersion != 0 else { throw violation("handshake protocol_version is 0") }
        try checkIdentifier(handshake.identifier)
        guard handshake.capabilities.count <= WireLimits.maxCapabilities else {
            throw violation("handshake lists \(handshake.capabilities.count) capabilities, more than \(WireLimits.maxCapabilities)")
        }
        for (index, capability) in handshake.capabilities.enumerated() {
            guard !capability.isEmpty, capability.utf8.count <= WireLimits.maxCapabilityLength,
                  capability.utf8.allSatisfy(isTokenByte) else {
                throw violation("handshake capability \(index) \"\(String(capability.prefix(64)).escapedForTerminal())\" must be 1…\(WireLimits.maxCapabilityLength) bytes of [A-Za-z0-9._-]")
            }
        }
        guard handshake.maxPacketSize >= 1_024 else {
            throw violation("handshake max_packet_size \(handshake.maxPacketSize) is below 1024")
        }
    }

    /// A reverse-DNS-style identifier: 1…255 bytes of `[A-Za-z0-9._-]`.
    package static func checkIdentifier(_ identifier: String) throws(RemoteError) {
        guard !identifier.isEmpty, identifier.utf8.count <= WireLimits.maxIdentifierLength,
              identifier.utf8.allSatisfy(isTokenByte) else {
            throw violation("identifier \"\(String(identifier.prefix(64)).escapedForTerminal())\" must be 1…\(WireLimits.maxIdentifierLength) bytes of [A-Za-z0-9._-]")
        }
    }

    /// A message type: 1…256 bytes, no control characters.
    package static func checkType(_ type: String, _ what: String) throws(RemoteError) {
        let utf8 = type.utf8
        // Printable ASCII (almost every type) needs no look at scalars.
        if !utf8.isEmpty, utf8.count <= WireLimits.maxTypeLength, utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) { return }
        guard !type.isEmpty, utf8.count <= WireLimits.maxTypeLength,
              type.unicodeScalars.allSatisfy({ !($0.value < 0x20 || (0x7F..<0xA0).contains($0.value)) }) else {
            throw violation("\(what) type \"\(String(type.prefix(64)).escapedForTerminal())\" must be 1…\(WireLimits.maxTypeLength) bytes without control characters")
        }
    }

    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "-"), UInt8(ascii: "_"):
            true
        default:
            false
        }
    }

    static func violation(_ reason: String) -> RemoteError {
        RemoteError(.protocolViolation, reason)
    }

    // MARK: encode

    /// An envelope encoded without its id, for a sender that numbers packets as it writes them
    /// (``SeqpacketSocket`` does, so ids increase in write order whichever task sends first).
    ///
    /// protobuf-c writes fields in field-number order, so the id (field 1, a varint) comes first:
    /// the packet is encoded with id 1 and ``bytes`` keeps everything after that field, which
    /// ``withIDField(_:_:)`` puts the real one in front of.
    package struct UnnumberedPacket: Sendable {
        fileprivate enum Storage: Sendable {
            /// Encoded: the envelope after its id field.
            case encoded(ArraySlice<UInt8>)
            /// A request, reply or message, checked and known to fit in `bound` bytes with its
            /// id: packed where it is numbered, into the connection's buffer
            /// (``EnvelopeFramer/frame(_:attachments:)``).
            case deferred(Envelope, bound: Int)
        }
        fileprivate let storage: Storage

        fileprivate init(_ storage: Storage) { self.storage = storage }

        /// The encoded envelope after its id field (packed now, when that was left for later).
        package var bytes: ArraySlice<UInt8> {
            switch storage {
            case .encoded(let bytes):
                return bytes
            case .deferred(var envelope, _):
                envelope.id = 1
                guard let packet = try? EnvelopeCodec.encode(envelope) else {
                    preconditionFailure("\(envelope.body.name) was checked before it was deferred, and cannot fail to encode")
                }
                return packet[2...]
            }
        }

        /// The envelope to pack where it is numbered, and how many bytes it needs at most.
        var deferred: (envelope: Envelope, bound: Int)? {
            if case .deferred(let envelope, let bound) = storage { (envelope, bound) } else { nil }
        }

        /// The id field for `id` (tag 0x08, then the id as a varint), valid in `body` only.
        package static func withIDField<R, E: Error>(_ id: UInt64, _ body: (UnsafeRawBufferPointer) throws(E) -> R) throws(E) -> R {
            try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: maxIDFieldSize) { (field) throws(E) -> R in
                field[0] = 0x08
                var rest = id
                var count = 1
                repeat {
                    field[count] = UInt8(truncatingIfNeeded: rest & 0x7F) | (rest > 0x7F ? 0x80 : 0)
                    rest >>= 7
                    count += 1
                } while rest != 0
                return try body(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(field)[0..<count]))
            }
        }

        /// The largest id field: a tag byte and a 10-byte varint.
        package static let maxIDFieldSize = 11
    }

    /// Encodes `envelope` without its id (ignored), for the sender to number as it writes it.
    ///
    /// - Throws: as ``encode(_:)``; the size bound leaves room for the largest id.
    package static func encodeUnnumbered(_ envelope: Envelope) throws(RemoteError) -> UnnumberedPacket {
        // A request, reply or message is only checked here (so one that can never be sent fails
        // on the sender's thread), then packed where it is numbered, straight into the
        // connection's packet buffer.
        switch envelope.body {
        case .request(let type, let payload), .reply(let type, let payload), .message(let type, let payload):
            try checkFraming(envelope)
            try checkServiceMessage(type: type, payload: payload, envelope.body.name)
            // The envelope's fields around the message's: id, reply_to and fd_count (varints of
            // at most 10 bytes, with their tags), the body's tag and length, and the message's
            // two tags and lengths.
            let bound = type.utf8.count + payload.count + 64
            if bound <= WireLimits.maxPacketSize { return UnnumberedPacket(.deferred(envelope, bound: bound)) }
        default:
            break
        }
        var numbered = envelope
        numbered.id = 1
        let packet = try encode(numbered)
        precondition(packet.count >= 2 && packet[0] == 0x08 && packet[1] == 0x01, "protobuf-c no longer writes Envelope.id first")
        let size = packet.count - 2 + UnnumberedPacket.maxIDFieldSize
        guard size <= WireLimits.maxPacketSize else {
            throw RemoteError(.invalidArgument, "\(envelope.body.name) encodes to \(size) bytes with its id, over the \(WireLimits.maxPacketSize)-byte packet limit; send large data as a memfd attachment")
        }
        return UnnumberedPacket(.encoded(packet[2...]))
    }

    /// Packs `envelope`, deferred by ``encodeUnnumbered(_:)`` and numbered now, into `buffer`
    /// (of at least its bound).
    static func pack(_ envelope: Envelope, into buffer: PacketBuffer) {
        var e = header(envelope)
        switch envelope.body {
        case .request(let type, let payload), .reply(let type, let payload), .message(let type, let payload):
            packServiceMessage(&e, envelope.body, type: type, payload: payload) { e, size in
                precondition(size <= buffer.capacity, "\(envelope.body.name) of \(size) bytes is over its bound \(buffer.capacity)")
                buffer.count = remoteview__envelope__pack(e, buffer.base.assumingMemoryBound(to: UInt8.self))
            }
        default:
            preconditionFailure("only requests, replies and messages are deferred, not \(envelope.body.name)")
        }
    }

    /// Encodes `envelope` into the bytes of one packet.
    ///
    /// - Throws: ``RemoteError`` with ``RemoteError/Code/invalidArgument`` when the envelope could
    ///   never be accepted by a peer (a field over its bound, too many fds, too large a packet).
    package static func encode(_ envelope: Envelope) throws(RemoteError) -> [UInt8] {
        guard envelope.id != 0 else { throw RemoteError(.invalidArgument, "envelope id 0") }
        try checkFraming(envelope)
        var e = header(envelope)

        // The everyday bodies are packed from structs on the stack that point into the Swift
        // values, with no copy and no allocation but the packet's bytes.
        switch envelope.body {
        case .request(let type, let payload), .reply(let type, let payload), .message(let type, let payload):
            try checkServiceMessage(type: type, payload: payload, envelope.body.name)
            return try packServiceMessage(&e, envelope.body, type: type, payload: payload) { e, size in
                bytes(of: e, size: size, envelope.body.name)
            }.get()
        case .ping(let nonce):
            var p = Remoteview__Ping()
            remoteview__ping__init(&p)
            p.nonce = nonce
            return try withUnsafeMutablePointer(to: &p) { (p) throws(RemoteError) -> [UInt8] in
                e.body_case = REMOTEVIEW__ENVELOPE__BODY_PING
                e.ping = p
                return try pack(&e, envelope.body.name)
            }
        case .pong(let nonce):
            var p = Remoteview__Pong()
            remoteview__pong__init(&p)
            p.nonce = nonce
            return try withUnsafeMutablePointer(to: &p) { (p) throws(RemoteError) -> [UInt8] in
                e.body_case = REMOTEVIEW__ENVELOPE__BODY_PONG
                e.pong = p
                return try pack(&e, envelope.body.name)
            }
        case .cancel(let requestID):
            guard requestID != 0 else { throw RemoteError(.invalidArgument, "cancel of request 0") }
            var c = Remoteview__Cancel()
            remoteview__cancel__init(&c)
            c.request_id = requestID
            return try withUnsafeMutablePointer(to: &c) { (c) throws(RemoteError) -> [UInt8] in
                e.body_case = REMOTEVIEW__ENVELOPE__BODY_CANCEL
                e.cancel = c
                return try pack(&e, envelope.body.name)
            }
        default:
            break
        }

        let arena = CArena()
        defer { arena.free() }
        switch envelope.body {
        case .handshake(let handshake):
            do { try validate(handshake) } catch { throw RemoteError(.invalidArgument, error.reason) }
            let h = arena.message(Remoteview__Handshake.self, remoteview__handshake__init)
            h.pointee.protocol_version = handshake.protocolVersion
            h.pointee.role = handshake.role == .host ? REMOTEVIEW__PEER_ROLE__PEER_ROLE_HOST : REMOTEVIEW__PEER_ROLE__PEER_ROLE_SERVICE
            h.pointee.identifier = arena.string(handshake.identifier)
            h.pointee.n_capabilities = handshake.capabilities.count
            h.pointee.capabilities = arena.strings(handshake.capabilities)
            h.pointee.max_packet_size = handshake.maxPacketSize
            h.pointee.max_protocol_version = handshake.maxProtocolVersion ?? 0
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_HANDSHAKE
            e.handshake = h
        case .goodbye(let reason):
            let g = arena.message(Remoteview__Goodbye.self, remoteview__goodbye__init)
            g.pointee.reason = arena.string(reason.truncated(toUTF8Bytes: WireLimits.maxReasonLength))
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_GOODBYE
            e.goodbye = g
        case .protocolError(let code, let reason):
            let p = arena.message(Remoteview__ProtocolError.self, remoteview__protocol_error__init)
            p.pointee.code = Remoteview__ProtocolErrorCode(rawValue: UInt32(code.rawValue))
            p.pointee.reason = arena.string(reason.truncated(toUTF8Bytes: WireLimits.maxReasonLength))
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_PROTOCOL_ERROR
            e.protocol_error = p
        case .failure(let failure):
            let f = arena.message(Remoteview__Failure.self, remoteview__failure__init)
            f.pointee.domain = arena.string(failure.domain.truncated(toUTF8Bytes: WireLimits.maxReasonLength))
            f.pointee.code = failure.code
            f.pointee.message = arena.string(failure.message.truncated(toUTF8Bytes: WireLimits.maxFailureMessageLength))
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_FAILURE
            e.failure = f
        case .ping, .pong, .request, .reply, .message, .cancel:
            preconditionFailure("packed above")
        case .surface(let message):
            if let problem = message.problem { throw RemoteError(.invalidArgument, problem) }
            arena.encode(message, into: &e)
        case .input(let event):
            if let problem = event.problem { throw RemoteError(.invalidArgument, problem) }
            arena.encode(event, into: &e)
        case .share(let message):
            if let problem = message.problem { throw RemoteError(.invalidArgument, problem) }
            arena.encode(message, into: &e)
        }

        return try pack(&e, envelope.body.name)
    }

    /// `e`'s bytes, once it is known to fit in a packet.
    private static func pack(_ e: inout Remoteview__Envelope, _ name: String) throws(RemoteError) -> [UInt8] {
        try withUnsafePointer(to: &e) { e in bytes(of: e, size: remoteview__envelope__get_packed_size(e), name) }.get()
    }

    /// `e`'s bytes (`size` of them, its packed size), unless that is over the packet limit.
    private static func bytes(of e: UnsafePointer<Remoteview__Envelope>, size: Int, _ name: String) -> Result<[UInt8], RemoteError> {
        guard size <= WireLimits.maxPacketSize else {
            return .failure(RemoteError(.invalidArgument, "\(name) encodes to \(size) bytes, over the \(WireLimits.maxPacketSize)-byte packet limit; send large data as a memfd attachment"))
        }
        return .success([UInt8](unsafeUninitializedCapacity: size) { buffer, count in
            count = remoteview__envelope__pack(e, buffer.baseAddress)
        })
    }

    /// An envelope struct with `envelope`'s id, reply_to and fd count, and no body yet.
    private static func header(_ envelope: Envelope) -> Remoteview__Envelope {
        var e = Remoteview__Envelope()
        remoteview__envelope__init(&e)
        e.id = envelope.id
        e.reply_to = envelope.replyTo ?? 0
        e.fd_count = UInt32(envelope.attachments.count)
        return e
    }

    /// The envelope's fds and reply_to agree with its body.
    private static func checkFraming(_ envelope: Envelope) throws(RemoteError) {
        guard envelope.body.allowedAttachments.contains(envelope.attachments.count) else {
            throw RemoteError(.invalidArgument, "\(envelope.body.name) may carry \(envelope.body.allowedAttachments) fd(s), not \(envelope.attachments.count)")
        }
        guard envelope.body.isReply == (envelope.replyTo != nil) else {
            throw RemoteError(.invalidArgument, "\(envelope.body.name) \(envelope.body.isReply ? "needs" : "must not have") reply_to")
        }
    }

    /// A request's, reply's or message's type and payload are within their bounds.
    private static func checkServiceMessage(type: String, payload: [UInt8], _ what: String) throws(RemoteError) {
        do { try checkType(type, what) } catch { throw RemoteError(.invalidArgument, error.reason) }
        guard payload.count <= WireLimits.maxPacketSize else {
            throw RemoteError(.invalidArgument, "\(what) payload of \(payload.count) bytes is over the \(WireLimits.maxPacketSize)-byte packet limit; send large data as a memfd attachment")
        }
    }

    /// A request, reply or message (checked), from a struct on the stack whose type and payload
    /// point into `type` and `payload` (protobuf-c only reads them): `emit` packs `e`, whose
    /// packed size it is given.
    private static func packServiceMessage<R>(_ e: inout Remoteview__Envelope, _ body: Envelope.Body, type: String, payload: [UInt8],
                                              _ emit: (UnsafePointer<Remoteview__Envelope>, Int) -> R) -> R {
        var m = Remoteview__ServiceMessage()
        remoteview__service_message__init(&m)
        return type.withCString { typeBytes in
            payload.withUnsafeBufferPointer { payloadBytes in
                m.type = UnsafeMutablePointer(mutating: typeBytes)
                if let data = payloadBytes.baseAddress, !payloadBytes.isEmpty {
                    m.payload = ProtobufCBinaryData(len: payloadBytes.count, data: UnsafeMutablePointer(mutating: data))
                }
                return withUnsafeMutablePointer(to: &m) { m in
                    switch body {
                    case .request:
                        e.body_case = REMOTEVIEW__ENVELOPE__BODY_REQUEST
                        e.request = m
                    case .reply:
                        e.body_case = REMOTEVIEW__ENVELOPE__BODY_REPLY
                        e.reply = m
                    default:
                        e.body_case = REMOTEVIEW__ENVELOPE__BODY_MESSAGE
                        e.message = m
                    }
                    return withUnsafePointer(to: &e) { e in emit(e, remoteview__envelope__get_packed_size(e)) }
                }
            }
        }
    }
}

/// Allocations that live while one envelope of the less frequent bodies is packed (C strings and
/// sub-messages); requests, replies, messages, pings and cancels need none.
final class CArena {
    private var allocations: [UnsafeMutableRawPointer] = []

    func allocate(_ size: Int) -> UnsafeMutableRawPointer {
        let pointer = malloc(max(size, 1))!
        allocations.append(pointer)
        return pointer
    }

    func message<M>(_: M.Type, _ initialize: (UnsafeMutablePointer<M>) -> Void) -> UnsafeMutablePointer<M> {
        let pointer = allocate(MemoryLayout<M>.size).bindMemory(to: M.self, capacity: 1)
        initialize(pointer)
        return pointer
    }

    func string(_ value: String) -> UnsafeMutablePointer<CChar> {
        var value = value
        return value.withUTF8 { utf8 in
            let pointer = allocate(utf8.count + 1).bindMemory(to: CChar.self, capacity: utf8.count + 1)
            UnsafeMutableRawPointer(pointer).copyMemory(from: utf8.baseAddress!, byteCount: utf8.count)
            pointer[utf8.count] = 0
            return pointer
        }
    }

    /// `bytes`, copied, as a protobuf-c `bytes` field.
    func data(_ bytes: [UInt8]) -> ProtobufCBinaryData {
        let pointer = allocate(bytes.count).bindMemory(to: UInt8.self, capacity: max(bytes.count, 1))
        bytes.withUnsafeBufferPointer { pointer.update(from: $0.baseAddress!, count: $0.count) }
        return ProtobufCBinaryData(len: bytes.count, data: pointer)
    }

    func strings(_ values: [String]) -> UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? {
        guard !values.isEmpty else { return nil }
        let array = allocate(MemoryLayout<UnsafeMutablePointer<CChar>?>.stride * values.count)
            .bindMemory(to: UnsafeMutablePointer<CChar>?.self, capacity: values.count)
        for (index, value) in values.enumerated() { array[index] = string(value) }
        return array
    }

    func free() {
        for pointer in allocations { Glibc.free(pointer) }
        allocations.removeAll()
    }
}

/// Where protobuf-c unpacks packets: a bump allocator over one block, let go of all at once
/// after each packet, so unpacking an everyday envelope calls no `malloc`. A connection's
/// framer keeps one for every packet it reads (on its loop: one decoder at a time).
///
/// Each packet has a budget (``EnvelopeCodec/decode(_:attachments:arena:)`` gives 16 bytes per
/// input byte and 4 KiB): an allocation past it fails, and protobuf-c refuses the packet. What
/// does not fit in the block is allocated on its own and freed at the packet's end; the block
/// then grows for the next packet (up to 256 KiB), so a connection that sends large envelopes
/// stops spilling.
package final class UnpackArena: @unchecked Sendable {
    // @unchecked: used by one decoder at a time (a connection's framer, confined to its loop).
    private var block: UnsafeMutableRawPointer
    private var capacity: Int
    private var used = 0
    private var budget = 0
    /// An allocation went past the budget in this packet.
    private(set) var exhausted = false
    private var spill: [UnsafeMutableRawPointer] = []
    private var spilled = 0

    private static let initialCapacity = 4_096
    private static let maxCapacity = 256 * 1_024

    package init() {
        capacity = Self.initialCapacity
        block = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
    }

    deinit {
        for pointer in spill { Glibc.free(pointer) }
        block.deallocate()
    }

    /// A packet begins, with `budget` bytes to unpack into.
    func begin(budget: Int) {
        self.budget = budget
        exhausted = false
    }

    /// The packet is done: all of it is let go (the block is kept, larger if it spilled).
    func end() {
        if !spill.isEmpty {
            for pointer in spill { Glibc.free(pointer) }
            spill.removeAll(keepingCapacity: true)
            let wanted = min(Self.maxCapacity, used + spilled)
            if wanted > capacity {
                var grown = capacity
                while grown < wanted { grown *= 2 }
                block.deallocate()
                capacity = min(grown, Self.maxCapacity)
                block = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16)
            }
        }
        used = 0
        spilled = 0
    }

    fileprivate func allocate(_ size: Int) -> UnsafeMutableRawPointer? {
        guard size <= budget else {
            exhausted = true
            return nil
        }
        budget -= size
        let rounded = (max(size, 1) + 15) & ~15
        if used + rounded <= capacity {
            defer { used += rounded }
            return block + used
        }
        guard let pointer = malloc(rounded) else { return nil }
        spill.append(pointer)
        spilled += rounded
        return pointer
    }
}

/// protobuf-c's allocator for unpacking: out of the ``UnpackArena`` in `data`.
private let arenaAlloc: @convention(c) (UnsafeMutableRawPointer?, Int) -> UnsafeMutableRawPointer? = { data, size in
    Unmanaged<UnpackArena>.fromOpaque(data!).takeUnretainedValue().allocate(size)
}

/// Nothing: the arena lets a packet's allocations go together.
private let arenaFree: @convention(c) (UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Void = { _, _ in }

extension String {
    /// The string cut to at most `max` UTF-8 bytes on a character boundary, ending in `marker`
    /// when it was cut (for text a peer will only take so much of: reasons, titles, messages).
    package func truncated(toUTF8Bytes max: Int, marker: String = "...") -> String {
        guard utf8.count > max else { return self }
        let room = max - marker.utf8.count
        var result = "", bytes = 0
        for character in self {
            let size = character.utf8.count
            if bytes + size > room { break }
            result.append(character)
            bytes += size
        }
        return result + marker
    }
}
