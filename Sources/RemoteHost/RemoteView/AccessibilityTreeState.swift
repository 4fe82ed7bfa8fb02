import RemoteCore

/// The semantic tree one process sent for a view, as a value: each `accessibility_update` (or
/// part of one) is an event, validated against every rule of docs/Protocol.md, "Accessibility",
/// and applied whole or not at all. No I/O, lock or clock: ``RemoteView`` holds one per channel
/// under its lock, feeds it what the channel delivers, and publishes what it returns.
package struct AccessibilityTreeState {
    /// The tree as its service described it (frames in the view's points), every node reachable
    /// from ``root``.
    package private(set) var nodes: [UInt32: AccessibilityNodeDescription] = [:]
    package private(set) var root: UInt32?
    package private(set) var focus: UInt32?

    private enum Phase {
        /// Nothing yet on this channel: the first update must be whole.
        case awaitingWhole
        /// A tree is in place; updates change it.
        case live
    }
    private var phase = Phase.awaitingWhole
    /// The parts of an update that said `more`, until its last part, and the children they list.
    private var pending: AccessibilityUpdateWire?
    private var pendingChildren = 0

    /// What one complete update changed.
    package struct Applied: Sendable, Equatable {
        /// The update was whole: every node before it is replaced.
        package var whole: Bool
        /// Nodes the update described (all of them when whole), in the update's order.
        package var changed: [UInt32]
        /// Nodes no longer in the tree.
        package var removed: [UInt32]
        package var focusChanged: Bool
    }

    package init() {}

    /// One `accessibility_update` arrived, for a view of `viewSize` points (the largest of the
    /// sizes the host gave it lately: a tree drawn at the size before a resize still fits).
    ///
    /// - Returns: What changed once an update is complete; `nil` for a part that says more
    ///   follows.
    /// - Throws: `protocolViolation` whose reason begins with the broken rule's name
    ///   (`AccessibilityRule`); the tree is left as it was.
    package mutating func receive(_ part: AccessibilityUpdateWire, viewSize: (width: Double, height: Double)) throws(RemoteError) -> Applied? {
        if let problem = part.problem { throw problem }
        // A part that says more must carry something: parts are bounded by the nodes they hold.
        guard !part.more || !part.nodes.isEmpty else {
            throw AccessibilityRule.structure.violation("a part of an update that says more follows holds no node")
        }
        var update: AccessibilityUpdateWire
        if var earlier = pending.take() {
            guard earlier.whole == part.whole, earlier.root == part.root, earlier.focus == part.focus else {
                throw AccessibilityRule.structure.violation("the parts of one update disagree on whole, root or focus (\(earlier.whole)/\(earlier.root)/\(earlier.focus), then \(part.whole)/\(part.root)/\(part.focus))")
            }
            guard earlier.nodes.count + part.nodes.count <= AccessibilityLimits.maxNodes else {
                throw AccessibilityRule.nodeCount.violation("an update of more than \(AccessibilityLimits.maxNodes) nodes across its parts")
            }
            let children = pendingChildren + part.childCount
            guard children <= AccessibilityLimits.maxNodes else {
                throw AccessibilityRule.nodeCount.violation("an update lists \(children) children across its parts; a tree has at most \(AccessibilityLimits.maxNodes) nodes, each the child of one")
            }
            // In place: the parts so far are not copied again for each one.
            earlier.nodes.append(contentsOf: part.nodes)
            earlier.more = part.more
            update = earlier
            pendingChildren = children
        } else {
            update = part
            pendingChildren = part.childCount
        }
        if update.more {
            pending = update
            return nil
        }
        return try apply(update, viewSize: viewSize)
    }

    private mutating func apply(_ update: AccessibilityUpdateWire, viewSize: (width: Double, height: Double)) throws(RemoteError) -> Applied {
        if case .awaitingWhole = phase, !update.whole {
            throw AccessibilityRule.structure.violation("the first update from a process must be whole (the whole tree, with its root)")
        }
        // Frames: finite (checked on decoding) and within frameFactor times the view's size.
        let reachX = AccessibilityLimits.frameReach(viewSize.width), reachY = AccessibilityLimits.frameReach(viewSize.height)
        for node in update.nodes {
            let f = node.frame
            guard abs(f.x) <= reachX, abs(f.x + f.width) <= reachX, abs(f.y) <= reachY, abs(f.y + f.height) <= reachY else {
                throw AccessibilityRule.frame.violation("node \(node.id)'s frame \(f) lies beyond \(Int(AccessibilityLimits.frameFactor)) times the view's size (\(Int(viewSize.width))×\(Int(viewSize.height)) points)")
            }
        }
        var next = update.whole ? [:] : nodes
        var described: [UInt32] = []
        described.reserveCapacity(update.nodes.count)
        var seen = Set<UInt32>(minimumCapacity: update.nodes.count)
        for node in update.nodes {
            guard seen.insert(node.id).inserted else {
                throw AccessibilityRule.structure.violation("node \(node.id) appears twice in one update")
            }
            next[node.id] = node
            described.append(node.id)
        }
        let rootID = update.whole ? update.root : root ?? 0
        guard rootID != 0, next[rootID] != nil else {
            throw AccessibilityRule.structure.violation(update.whole ? "the whole tree's root \(update.root) is not among its nodes" : "no root")
        }
        // Every node reachable from the root once, within the depth and the count.
        var reachable = Set<UInt32>(minimumCapacity: next.count)
        reachable.insert(rootID)
        var stack: [(id: UInt32, depth: Int)] = [(rootID, 1)]
        while let (id, depth) = stack.popLast() {
            guard depth <= AccessibilityLimits.maxDepth else {
                throw AccessibilityRule.depth.violation("node \(id) is at depth \(depth); at most \(AccessibilityLimits.maxDepth)")
            }
            for child in next[id]!.children {
                guard next[child] != nil else {
                    throw AccessibilityRule.structure.violation("node \(id)'s child \(child) does not exist")
                }
                guard reachable.insert(child).inserted else {
                    throw AccessibilityRule.structure.violation("node \(child) has two parents, or is inside its own subtree")
                }
                guard reachable.count <= AccessibilityLimits.maxNodes else {
                    throw AccessibilityRule.nodeCount.violation("the tree has more than \(AccessibilityLimits.maxNodes) nodes")
                }
                stack.append((child, depth + 1))
            }
        }
        let focusID = update.focus == 0 ? nil : update.focus
        if let focusID, !reachable.contains(focusID) {
            throw AccessibilityRule.focus.violation("the focus is on node \(focusID), which is not in the tree")
        }
        // Nodes no longer reachable are gone (and so are described nodes nothing reaches).
        var removed: [UInt32] = []
        for id in next.keys where !reachable.contains(id) { removed.append(id) }
        for id in removed { next[id] = nil }
        let previous = nodes
        let removedBefore = update.whole ? Array(previous.keys.filter { next[$0] == nil }) : removed.filter { previous[$0] != nil }
        let focusChanged = focusID != focus || update.whole
        nodes = next
        root = rootID
        focus = focusID
        phase = .live
        return Applied(whole: update.whole, changed: described.filter { reachable.contains($0) },
                       removed: removedBefore.sorted(), focusChanged: focusChanged)
    }
}
