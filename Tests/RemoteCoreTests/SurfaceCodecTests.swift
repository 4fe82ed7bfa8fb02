// Surface messages (fields 100–109, restorable state and focus_leave included): round trips, every bound checked on the way in and out,
// and the direction rule at the connection (only the side that may send one is believed).
@testable import RemoteCore
import RemoteTestSupport
import Glibc
import Testing

/// Field numbers of the surface bodies and their submessages (remoteview.proto).
private enum SurfaceField {
    static let attachBuffer: UInt32 = 100, commit: UInt32 = 101, releaseBuffer: UInt32 = 102
    static let frameDone: UInt32 = 103, destroyBuffer: UInt32 = 104, resize: UInt32 = 105, preferredSize: UInt32 = 106
    static let restorableState: UInt32 = 107, restoreState: UInt32 = 108, focusLeave: UInt32 = 109
}

private func attachBody(id: UInt64 = 1, width: UInt64 = 64, height: UInt64 = 32, stride: UInt64 = 256, format: UInt64 = 1) -> ProtoWriter {
    ProtoWriter().uint(1, id).uint(2, width).uint(3, height).uint(4, stride).uint(5, format)
}

private func rect(x: Int64 = 0, y: Int64 = 0, width: UInt64 = 8, height: UInt64 = 8) -> ProtoWriter {
    var body = ProtoWriter()
    // int32 fields: negative values are 10-byte varints of the sign-extended value.
    if x != 0 { body = body.uint(1, UInt64(bitPattern: x)) }
    if y != 0 { body = body.uint(2, UInt64(bitPattern: y)) }
    return body.uint(3, width).uint(4, height)
}

private func commitBody(id: UInt64 = 1, rects: [ProtoWriter] = [rect()], frame: UInt64 = 1) -> ProtoWriter {
    var body = ProtoWriter().uint(1, id)
    for rect in rects { body = body.message(2, rect) }
    return body.uint(3, frame)
}

@Suite("Surface messages on the wire")
struct SurfaceCodecTests {
    static let samples: [SurfaceMessage] = [
        .attachBuffer(BufferDescription(id: 1, width: 1, height: 1, stride: 4)),
        .attachBuffer(BufferDescription(id: UInt32.max, width: 1920, height: 1080, stride: 7680)),
        .attachBuffer(BufferDescription(id: 7, width: 16_384, height: 4_096, stride: 65_536)),
        .commit(bufferID: 1, damage: [], frame: 0),
        .commit(bufferID: 2, damage: [PixelRect(x: -10, y: -20, width: 30, height: 40)], frame: UInt64.max),
        .commit(bufferID: 3, damage: (0..<SurfaceLimits.maxDamageRects).map { PixelRect(x: $0, y: $0 * 2, width: 1, height: 16_384) }, frame: 9),
        .releaseBuffer(1),
        .frameDone(frame: 0),
        .frameDone(frame: 12_345),
        .destroyBuffer(99),
        .resize(SurfaceSize(width: 800, height: 600, scalePermille: 2_000)),
        .resize(SurfaceSize(width: 1, height: 16_384, scalePermille: 250)),
        .preferredSize(width: 320, height: 240),
        .restorableState(.inline([])),
        .restorableState(.inline([0, 1, 2, 0xFF])),
        .restorableState(.inline([UInt8](repeating: 9, count: RestorableStateLimits.maxInlineBytes))),
        .restorableState(.memfd(size: 20_000)),
        .restoreState(.inline(Array("half a note".utf8))),
        .restoreState(.memfd(size: RestorableStateLimits.maxBytes)),
        .focusLeave(.forward),
        .focusLeave(.backward),
    ]

    @Test("every surface message round-trips", arguments: samples)
    func roundTrips(_ message: SurfaceMessage) throws {
        try expectRoundTrip(message)
    }

    @Test("attach_buffer needs exactly its memfd; other surface messages carry none")
    func attachments() throws {
        let attach = SurfaceMessage.attachBuffer(BufferDescription(id: 1, width: 2, height: 2, stride: 8))
        expectEncodeRejected(Envelope(id: 1, body: .surface(attach)), mentioning: "may carry 1...1 fd(s), not 0")
        expectViolation(envelopePacket(SurfaceField.attachBuffer, attachBody()), mentioning: ["attach_buffer may carry 1...1 fd(s), got 0"])
        expectViolation(envelopePacket(fdCount: 1, SurfaceField.commit, commitBody()), attachments: try makeAttachments(1),
                        mentioning: ["commit may carry 0...0 fd(s), got 1"])
    }

    /// (a packet built by hand, words its rejection must contain)
    static let hostile: [(String, UInt32, ProtoWriter, [String])] = [
        ("buffer id 0", SurfaceField.attachBuffer, attachBody(id: 0), ["buffer id 0"]),
        ("zero width", SurfaceField.attachBuffer, attachBody(width: 0), ["0×32", "1…16384"]),
        ("too tall", SurfaceField.attachBuffer, attachBody(height: 16_385, stride: 256), ["64×16385"]),
        ("stride too small", SurfaceField.attachBuffer, attachBody(stride: 252), ["stride 252", "at least 256"]),
        ("stride not a multiple of 4", SurfaceField.attachBuffer, attachBody(stride: 258), ["stride 258", "multiple of 4"]),
        ("stride × height over the cap", SurfaceField.attachBuffer, attachBody(width: 16_384, height: 16_384, stride: 65_536), ["needs 1073741824 bytes"]),
        ("stride × height overflowing 32 bits", SurfaceField.attachBuffer, attachBody(width: 1, height: 16_384, stride: 4_294_967_292), ["bytes"]),
        ("unknown pixel format", SurfaceField.attachBuffer, attachBody(format: 7), ["pixel format 7"]),
        ("no pixel format", SurfaceField.attachBuffer, ProtoWriter().uint(1, 1).uint(2, 4).uint(3, 4).uint(4, 16), ["pixel format 0"]),
        ("commit of buffer 0", SurfaceField.commit, commitBody(id: 0), ["commit of buffer id 0"]),
        ("129 damage rects", SurfaceField.commit, commitBody(rects: Array(repeating: rect(), count: 129)), ["129 damage rects", "at most 128"]),
        ("empty damage rect", SurfaceField.commit, commitBody(rects: [rect(width: 0)]), ["damage rect 0"]),
        ("damage rect far outside", SurfaceField.commit, commitBody(rects: [rect(), rect(x: -20_000)]), ["damage rect 1"]),
        ("release of buffer 0", SurfaceField.releaseBuffer, ProtoWriter(), ["release_buffer of buffer id 0"]),
        ("destroy of buffer 0", SurfaceField.destroyBuffer, ProtoWriter(), ["destroy_buffer of buffer id 0"]),
        ("resize to nothing", SurfaceField.resize, ProtoWriter().uint(3, 1000), ["size 0×0"]),
        ("resize at scale 0", SurfaceField.resize, ProtoWriter().uint(1, 10).uint(2, 10), ["scale 0‰"]),
        ("resize at 9×", SurfaceField.resize, ProtoWriter().uint(1, 10).uint(2, 10).uint(3, 9_000), ["scale 9000‰"]),
        ("preferred size too wide", SurfaceField.preferredSize, ProtoWriter().uint(1, 20_000).uint(2, 10), ["20000×10"]),
        ("state inline over 16 KiB", SurfaceField.restorableState, ProtoWriter().bytes(1, [UInt8](repeating: 1, count: 16_385)),
         ["restorable_state holds 16385 bytes inline; at most 16384"]),
        ("state declaring a memfd it does not carry", SurfaceField.restoreState, ProtoWriter().uint(2, 40_000),
         ["restore_state declares a memfd of 40000 bytes but carries no fd"]),
        ("focus_leave without a direction", SurfaceField.focusLeave, ProtoWriter(), ["focus_leave direction 0", "forward (1) or backward (2)"]),
        ("focus_leave direction 3", SurfaceField.focusLeave, ProtoWriter().uint(1, 3), ["focus_leave direction 3"]),
    ]

    /// (a packet with one fd built by hand, words its rejection must contain)
    static let hostileWithFD: [(String, UInt32, ProtoWriter, [String])] = [
        ("state memfd of 0 bytes", SurfaceField.restorableState, ProtoWriter(), ["restorable_state declares a memfd of 0 bytes; 1…1048576"]),
        ("state memfd over 1 MiB", SurfaceField.restorableState, ProtoWriter().uint(2, 1_048_577), ["memfd of 1048577 bytes; 1…1048576"]),
        ("state inline and in a memfd", SurfaceField.restoreState, ProtoWriter().bytes(1, [1]).uint(2, 20_000), ["restore_state carries both inline bytes (1) and a memfd"]),
    ]

    @Test("impossible restorable states with an fd are protocol violations that name them", arguments: 0..<hostileWithFD.count)
    func rejectsWithFD(_ index: Int) throws {
        let (_, field, body, words) = Self.hostileWithFD[index]
        expectViolation(envelopePacket(fdCount: 1, field, body), attachments: try makeAttachments(1), mentioning: words)
    }

    @Test("impossible surface values are protocol violations that name them", arguments: 0..<hostile.count)
    func rejects(_ index: Int) throws {
        let (_, field, body, words) = Self.hostile[index]
        let attachments = field == SurfaceField.attachBuffer ? try makeAttachments(1) : []
        expectViolation(envelopePacket(fdCount: attachments.isEmpty ? nil : 1, field, body), attachments: attachments, mentioning: words)
    }

    @Test("the same impossible values are refused when sending")
    func encodeRejects() {
        expectEncodeRejected(Envelope(id: 1, body: .surface(.commit(bufferID: 1, damage: Array(repeating: PixelRect(x: 0, y: 0, width: 1, height: 1), count: 129), frame: 1))),
                             mentioning: "129 damage rects")
        expectEncodeRejected(Envelope(id: 1, body: .surface(.resize(SurfaceSize(width: 10, height: 10, scalePermille: 100)))), mentioning: "scale 100‰")
        expectEncodeRejected(Envelope(id: 1, body: .surface(.restorableState(.inline([UInt8](repeating: 0, count: 16_385))))), mentioning: "16385 bytes inline")
        expectEncodeRejected(Envelope(id: 1, body: .surface(.restorableState(.memfd(size: 20_000)))), mentioning: "may carry 1...1 fd(s), not 0")
    }

    @Test("a restorable state goes inline up to 16 KiB and in a sealed memfd above; the receiver checks the memfd's seals, its size and the limit")
    func restorableStateTransport() throws {
        let small = [UInt8](repeating: 3, count: RestorableStateLimits.maxInlineBytes)
        let (inline, none) = try RestorableStateWire.encode(small)
        #expect(inline == .inline(small) && none.isEmpty)
        #expect(try inline.decode(attachments: [], limit: 16_384, in: "restorable_state") == small)
        #expect(throws: RemoteError.self) { try inline.decode(attachments: [], limit: 16_383, in: "restorable_state") }

        let large = (0..<40_000).map { UInt8(truncatingIfNeeded: $0) }
        let (memfd, attachments) = try RestorableStateWire.encode(large)
        #expect(memfd == .memfd(size: 40_000) && attachments.count == 1)
        #expect(try memfd.decode(attachments: attachments, limit: 65_536, in: "restorable_state") == large)
        #expect(throws: RemoteError.self) { try RestorableStateWire.encode([UInt8](repeating: 0, count: RestorableStateLimits.maxBytes + 1)) }

        // Over the limit: refused by its declared size, before anything is read.
        let (again, more) = try RestorableStateWire.encode(large)
        do {
            _ = try again.decode(attachments: more, limit: 32_768, in: "restorable_state")
            Issue.record("a state over the limit was taken")
        } catch {
            #expect(error.reason == "restorable_state of 40000 bytes is over the limit of 32768 bytes")
        }
        // A memfd that is not sealed, or holds another size than declared.
        let unsealed = try MemoryFile(name: "state")
        try unsealed.write(large)
        do {
            _ = try RestorableStateWire.memfd(size: 40_000).decode(attachments: [Attachment(unsealed.takeDescriptor())], limit: 65_536, in: "restorable_state")
            Issue.record("an unsealed memfd was taken")
        } catch {
            #expect(error.reason.contains("not sealed against shrinking, growing and writing"), "\(error)")
        }
        let short = try MemoryFile.sealed(name: "state", contents: large.prefix(30_000))
        do {
            _ = try RestorableStateWire.memfd(size: 40_000).decode(attachments: [Attachment(short.takeDescriptor())], limit: 65_536, in: "restore_state")
            Issue.record("a memfd of another size was taken")
        } catch {
            #expect(error.reason == "restore_state declares 40000 bytes but its memfd holds 30000")
        }
    }

    @Test("rects clip to the buffer, overflow-free")
    func clipping() {
        #expect(PixelRect(x: -5, y: -5, width: 10, height: 10).clipped(toWidth: 100, height: 100) == PixelRect(x: 0, y: 0, width: 5, height: 5))
        #expect(PixelRect(x: 95, y: 90, width: 10, height: 20).clipped(toWidth: 100, height: 100) == PixelRect(x: 95, y: 90, width: 5, height: 10))
        #expect(PixelRect(x: 100, y: 0, width: 10, height: 10).clipped(toWidth: 100, height: 100) == nil)
        #expect(PixelRect(x: -16_384, y: 16_384, width: 16_384, height: 16_384).clipped(toWidth: 16_384, height: 16_384) == nil)
    }
}

@Suite("Surface messages on a connection")
struct SurfaceConnectionTests {
    @Test("surface messages reach the peer's surface handler in order, the buffer's memfd with its attach")
    func delivered() async throws {
        let received = try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let box = Received()
            let host = Connection(channel: try SeqpacketChannel(pair.first), configuration: .testHost)
            host.route(surface: { message, attachments, _ in
                box.append("\(message.name) fds=\(attachments.count)")
                if message.name == "preferred_size" { box.finish() }
            })
            let service = try Connection(socket: pair.second, configuration: .init(role: .service, identifier: "com.example.surface"))
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await host.run() }
                group.addTask { try await service.run() }
                let file = try MemoryFile.sealed(name: "buffer", contents: [UInt8](repeating: 0, count: 16))
                try await service.send(.attachBuffer(BufferDescription(id: 1, width: 2, height: 2, stride: 8)),
                                       attachments: [Attachment(file.takeDescriptor())])
                try await service.send(.commit(bufferID: 1, damage: [PixelRect(x: 0, y: 0, width: 2, height: 2)], frame: 1))
                try await service.send(.preferredSize(width: 2, height: 2))
                await box.done()
                // The host may not send what only a service sends.
                await #expect(throws: RemoteError.self) { try await host.send(.commit(bufferID: 1, damage: [], frame: 2)) }
                await service.close(reason: "done")
                try await group.waitForAll()
            }
            return box.lines
        }
        #expect(received == ["attach_buffer fds=1", "commit fds=0", "preferred_size fds=0"])
    }

    @Test("a surface message from the wrong side, or on a connection without a surface, is a protocol violation")
    func refused() async throws {
        for (role, body) in [(PeerRole.host, SurfaceMessage.commit(bufferID: 1, damage: [], frame: 1)),
                             (PeerRole.service, SurfaceMessage.frameDone(frame: 1))] {
            let error = try await withoutLeaks { () -> RemoteError? in
                let pair = try SeqpacketSocket.pair()
                // `receiver` has the other role and a surface handler; the sender breaks the rule raw.
                let receiver = Connection(channel: try SeqpacketChannel(pair.first),
                                          configuration: .init(role: role == .host ? .service : .host, identifier: "com.example.receiver"))
                receiver.route(surface: { _, _, _ in })
                let raw = try SeqpacketSocket(pair.second)
                try await raw.send(Envelope(body: .handshake(Handshake(role: role, identifier: "com.example.rude"))))
                // Built as the right side would, then sent by the wrong one.
                try await raw.send(Envelope(body: .surface(body)))
                do { try await receiver.run() } catch let error as RemoteError { return error } catch { return nil }
                return nil
            }
            #expect(error?.code == .protocolViolation)
            #expect(error?.reason.contains("may only be sent by the") == true, "\(String(describing: error))")
        }
        let error = try await withoutLeaks { () -> RemoteError? in
            let pair = try SeqpacketSocket.pair()
            let host = try Connection(channel: SeqpacketChannel(pair.first), configuration: .testHost)
            let raw = try SeqpacketSocket(pair.second)
            try await raw.send(Envelope(body: .handshake(Handshake(role: .service, identifier: "com.example.rude"))))
            try await raw.send(Envelope(body: .surface(.preferredSize(width: 1, height: 1))))
            do { try await host.run() } catch let error as RemoteError { return error } catch { return nil }
            return nil
        }
        #expect(error?.reason.contains("carries no surface") == true, "\(String(describing: error))")
    }
}

/// Lines a handler saw, and a way to wait for the last one.
private final class Received: Sendable {
    private let seen = Mutex<[String]>([])
    private let finished = Latch<Void>()
    var lines: [String] { seen.withLock { $0 } }
    func append(_ line: String) { seen.withLock { $0.append(line) } }
    func finish() { finished.open(()) }
    func done() async { _ = try? await finished.wait() }  // bounded by the test's deadline
}

/// Expects `message` (with as many fds as it must carry) to come back from the codec as it went.
func expectRoundTrip(_ message: SurfaceMessage, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let attachments = try makeAttachments(Envelope.Body.surface(message).allowedAttachments.lowerBound)
    let decoded = try roundTrip(Envelope(id: 5, body: .surface(message), attachments: attachments))
    guard case .surface(let back) = decoded.body else {
        Issue.record("decoded to \(decoded.body.name)", sourceLocation: sourceLocation)
        return
    }
    #expect(back == message, sourceLocation: sourceLocation)
    #expect(decoded.attachments.count == attachments.count, sourceLocation: sourceLocation)
}
