import RemoteCore
import Testing
@testable import RemoteHost

/// The host's tree as a value: updates fed as events, what each changed, and every rule's
/// refusal (named), with no process, socket or clock.
@Suite("The semantic tree's state machine")
struct AccessibilityTreeStateTests {
    typealias Node = AccessibilityNodeDescription
    static let view = (width: 100.0, height: 50.0)
    static let full = AccessibilityFrame(x: 0, y: 0, width: 100, height: 50)

    static func node(_ id: UInt32, _ children: [UInt32] = [], label: String = "", frame: AccessibilityFrame = full) -> Node {
        Node(id: id, role: children.isEmpty ? .label : .group, label: label, frame: frame, children: children)
    }

    static func whole(_ nodes: [Node], focus: UInt32 = 0, more: Bool = false) -> AccessibilityUpdateWire {
        AccessibilityUpdateWire(nodes: nodes, root: nodes.first?.id ?? 0, focus: focus, whole: true, more: more)
    }

    static func change(_ nodes: [Node], focus: UInt32 = 0) -> AccessibilityUpdateWire {
        AccessibilityUpdateWire(nodes: nodes, focus: focus)
    }

    /// Expects `update` to be refused by `state` under `rule`, leaving it as it was.
    static func expectRefused(_ state: inout AccessibilityTreeState, _ update: AccessibilityUpdateWire, _ rule: AccessibilityRule,
                              _ words: String = "", sourceLocation: SourceLocation = #_sourceLocation) {
        let before = (state.nodes, state.root, state.focus)
        do {
            _ = try state.receive(update, viewSize: view)
            Issue.record("accepted; expected \(rule.rawValue)", sourceLocation: sourceLocation)
        } catch {
            #expect(error.code == .protocolViolation && error.reason.hasPrefix(rule.rawValue + ": "), "\(error)", sourceLocation: sourceLocation)
            #expect(error.reason.contains(words), "\(error)", sourceLocation: sourceLocation)
        }
        #expect(state.nodes == before.0 && state.root == before.1 && state.focus == before.2, "the tree is as it was", sourceLocation: sourceLocation)
    }

    @Test("a whole tree, then a change of one node: the change names it alone; a node its parent no longer lists is removed with its subtree")
    func updates() throws {
        var state = AccessibilityTreeState()
        let first = try #require(try state.receive(Self.whole([Self.node(1, [2, 3]), Self.node(2), Self.node(3, [4]), Self.node(4)], focus: 2), viewSize: Self.view))
        #expect(first.whole && first.changed == [1, 2, 3, 4] && first.removed.isEmpty && first.focusChanged)
        let typed = try #require(try state.receive(Self.change([Self.node(2, label: "hi")], focus: 2), viewSize: Self.view))
        #expect(typed.changed == [2] && typed.removed.isEmpty && !typed.focusChanged && !typed.whole)
        #expect(state.nodes[2]?.label == "hi")
        let pruned = try #require(try state.receive(Self.change([Self.node(1, [2])], focus: 0), viewSize: Self.view))
        #expect(pruned.changed == [1] && pruned.removed == [3, 4] && pruned.focusChanged)
        #expect(state.nodes.count == 2 && state.focus == nil)
    }

    @Test("an update in parts is applied after its last part, whole or not at all")
    func parts() throws {
        var state = AccessibilityTreeState()
        #expect(try state.receive(Self.whole([Self.node(1, [2, 3]), Self.node(2)], more: true), viewSize: Self.view) == nil)
        #expect(state.nodes.isEmpty, "nothing applies before the last part")
        let applied = try #require(try state.receive(AccessibilityUpdateWire(nodes: [Self.node(3)], root: 1, whole: true), viewSize: Self.view))
        #expect(applied.changed == [1, 2, 3] && state.nodes.count == 3)
        _ = try state.receive(Self.change([Self.node(2, label: "a")], focus: 0).with(more: true), viewSize: Self.view)
        Self.expectRefused(&state, Self.change([Self.node(3)], focus: 2), .structure, "disagree")
    }

    @Test("each rule refused by name: first not whole, node count across parts, depth, a missing child, two parents, a cycle, a missing root, a focus outside, a node twice, an absurd frame")
    func rules() throws {
        var state = AccessibilityTreeState()
        Self.expectRefused(&state, Self.change([Self.node(1)]), .structure, "must be whole")
        // 4101 nodes in two parts (each under the bound; the nodes the root does not reach count
        // too while the update is read).
        let nodes = [Self.node(1)] + (UInt32(2)...4_101).map { Self.node($0) }
        _ = try state.receive(AccessibilityUpdateWire(nodes: Array(nodes[..<3_000]), root: 1, whole: true, more: true), viewSize: Self.view)
        Self.expectRefused(&state, AccessibilityUpdateWire(nodes: Array(nodes[3_000...]), root: 1, whole: true), .nodeCount, "across its parts")
        state = AccessibilityTreeState()
        let chain = (1...65).map { Self.node(UInt32($0), $0 < 65 ? [UInt32($0 + 1)] : []) }
        Self.expectRefused(&state, Self.whole(chain), .depth, "depth 65")
        _ = try state.receive(Self.whole(Array(chain[..<63]) + [Self.node(64)]), viewSize: Self.view)
        #expect(state.nodes.count == 64, "64 deep is allowed")
        state = AccessibilityTreeState()
        Self.expectRefused(&state, Self.whole([Self.node(1, [2])]), .structure, "child 2 does not exist")
        Self.expectRefused(&state, Self.whole([Self.node(1, [2, 3]), Self.node(2, [3]), Self.node(3)]), .structure, "two parents")
        Self.expectRefused(&state, Self.whole([Self.node(1, [2]), Self.node(2, [1])]), .structure, "two parents, or is inside its own subtree")
        Self.expectRefused(&state, AccessibilityUpdateWire(nodes: [Self.node(1)], root: 5, whole: true), .structure, "root 5")
        Self.expectRefused(&state, Self.whole([Self.node(1)], focus: 9), .focus, "node 9")
        Self.expectRefused(&state, Self.whole([Self.node(1, [2]), Self.node(2), Self.node(2)]), .structure, "twice")
        Self.expectRefused(&state, Self.whole([Self.node(1, [2]), Self.node(2, frame: AccessibilityFrame(x: 1_700, y: 0, width: 10, height: 10))]),
                           .frame, "beyond 16 times")
        // A 50-point side is judged as 64: 1024 points either way.
        Self.expectRefused(&state, Self.whole([Self.node(1, [2]), Self.node(2, frame: AccessibilityFrame(x: 0, y: -1_030, width: 10, height: 10))]),
                           .frame, "100×50 points")
        _ = try state.receive(Self.whole([Self.node(1, [2]), Self.node(2, frame: AccessibilityFrame(x: 0, y: -1_000, width: 10, height: 10))]), viewSize: Self.view)
        #expect(state.nodes.count == 2, "within 16 × 64 points of a small view's origin: not absurd")
    }

    @Test("parts are bounded by what they hold: an empty part that says more is refused, and so are more than 4096 children listed across the parts")
    func partsBounded() throws {
        var state = AccessibilityTreeState()
        Self.expectRefused(&state, AccessibilityUpdateWire(nodes: [], root: 1, whole: true, more: true), .structure, "holds no node")
        // Three parts of 1400 children each (no single part over the bound).
        let groups: [Node] = (UInt32(1)...3).map { group in
            let children: [UInt32] = (0..<UInt32(1_400)).map { group * 10_000 + $0 }
            return Self.node(group, children)
        }
        _ = try state.receive(AccessibilityUpdateWire(nodes: [groups[0]], root: 1, whole: true, more: true), viewSize: Self.view)
        _ = try state.receive(AccessibilityUpdateWire(nodes: [groups[1]], root: 1, whole: true, more: true), viewSize: Self.view)
        Self.expectRefused(&state, AccessibilityUpdateWire(nodes: [groups[2]], root: 1, whole: true, more: true), .nodeCount, "4200 children across its parts")
    }

    @Test("a frame partly or wholly outside the view, within 16 times its size, is kept and clipped when published")
    func clipping() throws {
        var state = AccessibilityTreeState()
        let outside = AccessibilityFrame(x: 90, y: -20, width: 40, height: 30)
        _ = try state.receive(Self.whole([Self.node(1, [2, 3]), Self.node(2, frame: outside), Self.node(3, frame: AccessibilityFrame(x: 500, y: 10, width: 5, height: 5))]),
                              viewSize: Self.view)
        let tree = AccessibilityTree(descriptions: state.nodes, root: state.root, focus: state.focus, viewSize: Self.view, scale: 2)
        #expect(tree[2]?.frameInPoints == AccessibilityFrame(x: 90, y: 0, width: 10, height: 10))
        #expect(tree[2]?.frame == AccessibilityFrame(x: 180, y: 0, width: 20, height: 20), "in the host's pixels at scale 2")
        #expect(tree[3]?.frame.width == 0, "wholly outside: nothing of it shows")
        #expect(tree[2]?.parent == 1 && tree[1]?.parent == nil)
        #expect(tree.nodes(role: .label).map(\.id) == [2, 3])
    }
}

private extension AccessibilityUpdateWire {
    func with(more: Bool) -> AccessibilityUpdateWire {
        var copy = self
        copy.more = more
        return copy
    }
}
