import RemoteGateway
import RemoteHost
import Testing

/// The `Connect` stream's framing, alone (no gRPC): every frame round trips, every broken rule
/// is refused with its name, the order is kept, and attachments come back whole from chunks.
@Suite("Connect frames and their order")
struct ConnectFrameTests {
    static func rule(_ bytes: [UInt8], _ direction: ConnectFrame.Direction) -> String? {
        do throws(RemoteError) { _ = try ConnectFrame.decode(bytes, direction: direction); return nil } catch {
            #expect(error.code == .protocolViolation)
            return error.reason.split(separator: ":").first.map { String($0.dropFirst("rule ".count)) }
        }
    }

    @Test("each frame round trips through its bytes")
    func roundTrips() throws {
        let reason = TerminationReason(kind: .killed, detail: "killed by SIGKILL", signal: 9)
        let frames: [(ConnectFrame, ConnectFrame.Direction)] = [
            (.open(identifier: "com.example.demo-share.notes"), .toGateway), (.opened(), .toHost),
            (.packet(envelope: [1, 2, 3], attachmentSizes: []), .toGateway),
            (.packet(envelope: Array(repeating: 7, count: 65_536), attachmentSizes: [1, 256 << 20]), .toHost),
            // A surface's buffer (sealed against resizing only) beside a share item.
            (.packet(envelope: [4], attachmentSizes: [64, 8], seals: [[.shrink, .grow, .seal], ConnectFrame.allSeals]), .toHost),
            (.chunk(Array(repeating: 9, count: 61_440)), .toGateway),
            (.end(ConnectEnd(code: .ended, reason: reason)), .toHost), (.end(ConnectEnd(code: .closed, reason: nil)), .toHost),
        ]
        for (frame, direction) in frames {
            #expect(try ConnectFrame.decode(frame.encoded(), direction: direction) == frame)
        }
    }

    @Test("every broken rule is refused, naming it: emptiness, kind, direction, version, identifier, lengths, counts, sizes and seals, the end's code and reason")
    func rules() {
        let packet = ConnectFrame.packet(envelope: [1], attachmentSizes: [5]).encoded()
        let cases: [([UInt8], ConnectFrame.Direction, String)] = [
            ([], .toGateway, "connect.empty"),
            ([9], .toGateway, "connect.kind"),
            (ConnectFrame.opened().encoded(), .toGateway, "connect.direction"),
            (ConnectFrame.open(identifier: "a.b").encoded(), .toHost, "connect.direction"),
            ([1, 3, 3] + Array("a.b".utf8), .toGateway, "connect.open.version"),
            ([1, 1, 4] + Array("a.b".utf8), .toGateway, "connect.open.length"),
            ([1, 1, 4] + Array("a..b".utf8), .toGateway, "connect.open.identifier"),
            ([1, 1, 3, 0xFF, 0xFE, 0x41], .toGateway, "connect.open.identifier"),
            ([2, 0], .toHost, "connect.opened.length"),
            ([3], .toGateway, "connect.packet.length"),
            ([3, 17] + Array(repeating: 1, count: 100), .toGateway, "connect.packet.attachments"),
            ([3, 1, 5, 0], .toGateway, "connect.packet.length"),
            ([3, 1, 1, 0, 0, 0x10, 0x0F, 1], .toGateway, "connect.packet.attachment-size"),
            ([3, 1, 1, 0, 0, 0, 0x40, 1], .toGateway, "connect.packet.seals"),
            (Array(packet.prefix(7)), .toGateway, "connect.packet.envelope"),
            ([3, 0] + Array(repeating: 1, count: 65_537), .toGateway, "connect.packet.envelope"),
            ([4], .toGateway, "connect.chunk.length"),
            ([4] + Array(repeating: 1, count: 61_441), .toHost, "connect.chunk.length"),
            ([5], .toHost, "connect.end.code"),
            ([5, 9], .toHost, "connect.end.code"),
            ([5, 1] + Array("{\"kind\": \"exploded\"}".utf8), .toHost, "connect.end.reason"),
            ([5, 1] + Array(repeating: 0x20, count: 61_441), .toHost, "connect.end.length"),
        ]
        for (bytes, direction, expected) in cases {
            #expect(Self.rule(bytes, direction) == expected, "\(bytes.prefix(12)) \(direction)")
        }
    }

    @Test("random bytes never crash the decoder: each is a frame or a named violation")
    func randomBytes() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let count = Int.random(in: 0...48, using: &generator)
            var bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            if !bytes.isEmpty { bytes[0] = UInt8.random(in: 0...6, using: &generator) }
            for direction in [ConnectFrame.Direction.toGateway, .toHost] {
                if let rule = Self.rule(bytes, direction) { #expect(rule.hasPrefix("connect.")) }
            }
        }
    }

    @Test("the order: open first and once toward the gateway; opened (or end) first toward the host; chunks only while owed, none past their attachment; nothing after the end")
    func order() throws {
        func violation(_ reader: inout ConnectReader, _ frame: ConnectFrame) -> String? {
            do throws(RemoteError) { _ = try reader.read(frame.encoded()); return nil } catch { return error.reason }
        }
        var gateway = ConnectReader(direction: .toGateway)
        #expect(violation(&gateway, .packet(envelope: [1], attachmentSizes: []))?.hasPrefix("rule connect.open.first") == true)
        var opened = ConnectReader(direction: .toGateway)
        #expect(try opened.read(ConnectFrame.open(identifier: "com.example.a").encoded())?.contents == .open("com.example.a"))
        #expect(violation(&opened, .open(identifier: "com.example.a"))?.hasPrefix("rule connect.open.again") == true)
        var unowed = ConnectReader(direction: .toGateway)
        _ = try unowed.read(ConnectFrame.open(identifier: "a").encoded())
        #expect(violation(&unowed, .chunk([1]))?.hasPrefix("rule connect.chunk.unowed") == true)
        var missing = ConnectReader(direction: .toGateway)
        _ = try missing.read(ConnectFrame.open(identifier: "a").encoded())
        #expect(try missing.read(ConnectFrame.packet(envelope: [1], attachmentSizes: [3]).encoded()) == nil)
        #expect(violation(&missing, .packet(envelope: [2], attachmentSizes: []))?.hasPrefix("rule connect.chunk.missing") == true)
        var overrun = ConnectReader(direction: .toGateway)
        _ = try overrun.read(ConnectFrame.open(identifier: "a").encoded())
        _ = try overrun.read(ConnectFrame.packet(envelope: [1], attachmentSizes: [3, 3]).encoded())
        #expect(violation(&overrun, .chunk([1, 2, 3, 4]))?.hasPrefix("rule connect.chunk.overrun") == true, "a chunk never crosses into the next attachment")

        var host = ConnectReader(direction: .toHost)
        #expect(violation(&host, .chunk([1]))?.hasPrefix("rule connect.opened.first") == true)
        var refused = ConnectReader(direction: .toHost)
        #expect(try refused.read(ConnectFrame.end(ConnectEnd(code: .invalidated, reason: nil)).encoded())?.contents == .end(ConnectEnd(code: .invalidated, reason: nil)),
                "an end in place of opened: the service cannot be reached")
        #expect(violation(&refused, .opened())?.hasPrefix("rule connect.after-end") == true)
    }

    @Test("attachments come back whole from their chunks (60 KiB at most each), in order, with their packet")
    func attachments() throws {
        let first = (0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }, second: [UInt8] = [42]
        let frames = ConnectReader.frames(envelope: [5, 6, 7], attachments: [first, second])
        #expect(frames.count == 1 + 3 + 1, "150 000 bytes in three chunks, one byte in one")
        var reader = ConnectReader(direction: .toHost)
        _ = try reader.read(ConnectFrame.opened().encoded())
        var events: [ConnectReader.Event] = []
        for frame in frames {
            if let event = try reader.read(frame.encoded()) { events.append(event) }
        }
        // Each is a memfd sealed against any change, as a local share item.
        if case .packet(_, let attachments) = events.first {
            for attachment in attachments {
                guard let fd = attachment.take() else { continue }
                #expect(try MemoryFile(adopting: fd).seals.isSuperset(of: [.shrink, .grow, .write, .seal]))
            }
        }
        var again = ConnectReader(direction: .toHost)
        _ = try again.read(ConnectFrame.opened().encoded())
        events = []
        for frame in frames {
            if let event = try again.read(frame.encoded()) { events.append(event) }
        }
        #expect(events.map(\.contents) == [.packet([5, 6, 7], [first, second])])
        #expect(try reader.read(ConnectFrame.packet(envelope: [8], attachmentSizes: []).encoded())?.contents == .packet([8], []))
        // An empty item (an empty file) is whole at once, with the others around it.
        #expect(try reader.read(ConnectFrame.packet(envelope: [9], attachmentSizes: [0, 1, 0]).encoded()) == nil)
        #expect(try reader.read(ConnectFrame.chunk([7]).encoded())?.contents == .packet([9], [[], [7], []]))
    }

    @Test("a far side's termination reason is bounded as a local one's, when sent and when read: its detail, its fatal error and its standard error's tail")
    func boundedReason() throws {
        var reason = TerminationReason(kind: .exited, detail: String(repeating: "d", count: 5_000), exitCode: 1)
        reason.standardErrorTail = (0..<40).map { "line \($0) " + String(repeating: "x", count: 90) }
        reason.fatalError = String(repeating: "f", count: 6_000)
        let frame = ConnectFrame.end(ConnectEnd(code: .ended, reason: reason))
        guard case .end(let end) = try ConnectFrame.decode(frame.encoded(), direction: .toHost), let bounded = end.reason else {
            Issue.record("no reason")
            return
        }
        #expect(bounded.detail.utf8.count == 4096 && bounded.fatalError?.utf8.count == 4096)
        #expect(bounded.standardErrorTail.count <= 32 && bounded.standardErrorTail.reduce(0) { $0 + $1.utf8.count } <= TerminationReason.maxStandardErrorBytes)
        #expect(bounded.standardErrorTail.last == reason.standardErrorTail.last, "the newest lines are kept")
    }
}

/// A reader's event with its attachments' bytes, to compare.
enum EventContents: Equatable {
    case open(String)
    case opened
    case packet([UInt8], [[UInt8]])
    case end(ConnectEnd)
}

extension ConnectReader.Event {
    var contents: EventContents {
        switch self {
        case .open(let identifier, _): .open(identifier)
        case .opened: .opened
        case .packet(let envelope, let attachments):
            .packet(envelope, attachments.map { attachment -> [UInt8] in
                guard let fd = attachment.take() else { return [] }
                return (try? MemoryFile(adopting: fd).contents(limit: 1 << 20)) ?? []
            })
        case .end(let end): .end(end)
        }
    }
}
