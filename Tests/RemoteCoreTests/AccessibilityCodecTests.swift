// The semantic tree on the wire (fields 110–111): round trips, the per-packet bounds checked on
// the way in and out, each refusal naming its rule, and an update split into packets that fit.
@testable import RemoteCore
import RemoteTestSupport
import Testing

private enum TreeField {
    static let update: UInt32 = 110, action: UInt32 = 111
}

/// A node's body: id 1, a group, 10 × 10 points unless told.
private func nodeBody(id: UInt64 = 1, role: UInt64 = 1, label: [UInt8]? = nil, width: Float = 10, height: Float = 10,
                      states: UInt64 = 0, actions: UInt64 = 0) -> ProtoWriter {
    var body = ProtoWriter().uint(1, id).uint(2, role)
    if let label { body = body.bytes(3, label) }
    if states != 0 { body = body.uint(5, states) }
    if actions != 0 { body = body.uint(6, actions) }
    if width != 0 { body = body.float(9, width) }
    if height != 0 { body = body.float(10, height) }
    return body
}

/// A whole update of `nodes`, rooted at 1.
private func wholeUpdate(_ nodes: [ProtoWriter]) -> ProtoWriter {
    var body = ProtoWriter()
    for node in nodes { body = body.message(1, node) }
    return body.uint(2, 1).uint(4, 1)
}

@Suite("The semantic tree on the wire")
struct AccessibilityCodecTests {
    static let samples: [SurfaceMessage] = [
        .accessibilityUpdate(AccessibilityUpdateWire(nodes: [
            AccessibilityNodeDescription(id: 1, role: .group, frame: AccessibilityFrame(x: 0, y: 0, width: 320, height: 240), children: [2, 3, 4]),
            AccessibilityNodeDescription(id: 2, role: .button, label: "Save", states: [.focusable], actions: [.press, .focus, .scrollIntoView],
                                         frame: AccessibilityFrame(x: 12.5, y: -4, width: 80, height: 32)),
            AccessibilityNodeDescription(id: 3, role: .textField, label: "Note", value: "مرحبا 👋", states: [.focusable, .editable, .multiLine],
                                         actions: [.setValue, .focus], frame: AccessibilityFrame(x: 0, y: 40, width: 320, height: 100)),
            AccessibilityNodeDescription(id: 4, role: .progress, value: "30 %", frame: AccessibilityFrame(x: 0, y: 200, width: 320, height: 6),
                                         range: AccessibilityRange(minimum: 0, maximum: 1, value: 0.3)),
        ], root: 1, focus: 3, whole: true)),
        .accessibilityUpdate(AccessibilityUpdateWire(nodes: [AccessibilityNodeDescription(id: UInt32.max, role: .label, label: String(repeating: "é", count: 512))], focus: 0)),
        .accessibilityUpdate(AccessibilityUpdateWire(nodes: [], focus: 7)),
        .accessibilityUpdate(AccessibilityUpdateWire(nodes: [AccessibilityNodeDescription(id: 9, role: .canvas)], root: 9, whole: true, more: true)),
        .accessibilityAction(AccessibilityActionWire(node: 3, action: .press)),
        .accessibilityAction(AccessibilityActionWire(node: 3, action: .focus)),
        .accessibilityAction(AccessibilityActionWire(node: 3, action: .setText("hello"))),
        .accessibilityAction(AccessibilityActionWire(node: 3, action: .setText(""))),
        .accessibilityAction(AccessibilityActionWire(node: 4, action: .setNumber(0.75))),
        .accessibilityAction(AccessibilityActionWire(node: 4, action: .setNumber(0))),
        .accessibilityAction(AccessibilityActionWire(node: 4, action: .increment)),
        .accessibilityAction(AccessibilityActionWire(node: 4, action: .decrement)),
        .accessibilityAction(AccessibilityActionWire(node: 4, action: .scrollIntoView)),
    ]

    @Test("every tree message round-trips", arguments: samples)
    func roundTrips(_ message: SurfaceMessage) throws {
        try expectRoundTrip(message)
    }

    /// (what, field, body, words its refusal must contain)
    static let hostile: [(String, UInt32, ProtoWriter, [String])] = [
        ("a label of 1025 bytes", TreeField.update, wholeUpdate([nodeBody(label: [UInt8](repeating: 0x61, count: 1_025))]),
         ["accessibility.text-length", "node 1's label is longer than 1024 bytes"]),
        ("a label that is not UTF-8", TreeField.update, wholeUpdate([nodeBody(label: [0xFF, 0xFE])]), ["accessibility.text-length", "not valid UTF-8"]),
        ("a NaN width", TreeField.update, wholeUpdate([nodeBody(width: .nan)]), ["accessibility.frame", "node 1's frame"]),
        ("an infinite height", TreeField.update, wholeUpdate([nodeBody(height: .infinity)]), ["accessibility.frame"]),
        ("a negative width", TreeField.update, wholeUpdate([nodeBody(width: -5)]), ["accessibility.frame", "negative size"]),
        ("a node id 0", TreeField.update, wholeUpdate([nodeBody(id: 0)]), ["accessibility.structure", "id 0"]),
        ("a root on an update that is not whole", TreeField.update, ProtoWriter().message(1, nodeBody()).uint(2, 1), ["accessibility.structure", "not whole"]),
        // Nodes of 12 bytes (an id, a role, a width): 4097 of them fit a packet, and decode within
        // its memory budget (16 bytes per byte; a node takes about 136).
        ("4097 nodes in one packet", TreeField.update,
         (0..<4_097).reduce(ProtoWriter()) { body, index in body.message(1, ProtoWriter().uint(1, UInt64(index + 1)).uint(2, 3).float(9, 10)) }
            .uint(2, 1).uint(4, 1),
         ["accessibility.node-count", "4097 nodes"]),
        ("a range out of order", TreeField.update,
         wholeUpdate([nodeBody().uint(12, 1).double(13, 0).double(14, 1).double(15, 2)]), ["accessibility.range", "not ordered"]),
        ("an action 0", TreeField.action, ProtoWriter().uint(1, 3), ["accessibility_action 0 is not an action"]),
        ("an action 7", TreeField.action, ProtoWriter().uint(1, 3).uint(2, 7), ["accessibility_action 7 is not an action"]),
        ("an action on node 0", TreeField.action, ProtoWriter().uint(2, 1), ["accessibility.structure", "node 0"]),
        ("an action's text of 1025 bytes", TreeField.action, ProtoWriter().uint(1, 3).uint(2, 3).bytes(3, [UInt8](repeating: 0x61, count: 1_025)),
         ["accessibility.text-length"]),
        ("an action that sets a text and a number", TreeField.action, ProtoWriter().uint(1, 3).uint(2, 3).bytes(3, Array("a".utf8)).double(4, 1).uint(5, 1),
         ["both a text and a number"]),
        ("an action's number without has_number", TreeField.action, ProtoWriter().uint(1, 3).uint(2, 3).double(4, 1), ["a number without has_number"]),
        ("an action's infinite number", TreeField.action, ProtoWriter().uint(1, 3).uint(2, 3).double(4, .infinity).uint(5, 1), ["accessibility.range", "not finite"]),
    ]

    @Test("impossible trees and actions are protocol violations that name their rule", arguments: 0..<hostile.count)
    func rejects(_ index: Int) {
        let (_, field, body, words) = Self.hostile[index]
        expectViolation(envelopePacket(field, body), mentioning: words)
    }

    @Test("the same impossible values are refused when sending")
    func encodeRejects() {
        let long = AccessibilityNodeDescription(id: 1, role: .label, label: String(repeating: "a", count: 1_025))
        expectEncodeRejected(Envelope(id: 1, body: .surface(.accessibilityUpdate(AccessibilityUpdateWire(nodes: [long], root: 1, whole: true)))),
                             mentioning: "accessibility.text-length")
        let nan = AccessibilityNodeDescription(id: 1, role: .group, frame: AccessibilityFrame(x: .nan, y: 0, width: 1, height: 1))
        expectEncodeRejected(Envelope(id: 1, body: .surface(.accessibilityUpdate(AccessibilityUpdateWire(nodes: [nan], root: 1, whole: true)))),
                             mentioning: "accessibility.frame")
        expectEncodeRejected(Envelope(id: 1, body: .surface(.accessibilityAction(AccessibilityActionWire(node: 0, action: .press)))),
                             mentioning: "node 0")
    }

    @Test("a role this version does not know reads as unknown, and unknown state and action bits are dropped: a newer peer's tree is not a violation")
    func newerPeer() throws {
        let body = wholeUpdate([nodeBody(role: 42, states: 1 | 4 | 1 << 20, actions: 1 | 1 << 10)])
        let decoded = try decode(envelopePacket(TreeField.update, body))
        guard case .surface(.accessibilityUpdate(let update)) = decoded.body, let node = update.nodes.first else {
            Issue.record("decoded to \(decoded.body.name)")
            return
        }
        #expect(node.role == .unknown)
        #expect(node.states == [.focusable, .selected])
        #expect(node.actions == [.press])
    }

    @Test("a whole tree of 4096 nodes with long labels splits into packets that each fit 64 KiB and decode (every part but the last says more)")
    func splitFits() throws {
        let nodes = (1...4_096).map { id in
            AccessibilityNodeDescription(id: UInt32(id), role: .label, label: String(repeating: "x", count: id % 7 == 0 ? 1_024 : 20),
                                         frame: AccessibilityFrame(x: 1.5, y: 2.5, width: 100, height: 20),
                                         children: id == 1 ? (2...4_096).map { UInt32($0) } : [])
        }
        let parts = AccessibilityUpdateWire.split(nodes: nodes, root: 1, focus: 0, whole: true)
        #expect(parts.count > 1)
        #expect(parts.dropLast().allSatisfy(\.more) && parts.last?.more == false)
        var back: [AccessibilityNodeDescription] = []
        for part in parts {
            let packet = try EnvelopeCodec.encode(Envelope(id: 1, body: .surface(.accessibilityUpdate(part))))
            #expect(packet.count <= WireLimits.maxPacketSize)
            guard case .surface(.accessibilityUpdate(let decoded)) = try decode(packet).body else { return }
            back += decoded.nodes
        }
        #expect(back == nodes)
    }
}
