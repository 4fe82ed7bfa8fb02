/// The view tree described as a semantic tree (docs/Protocol.md, "Accessibility"): one node per
/// view that shows, in the order views are drawn, and the actions the host sends back.

/// A view held without keeping it alive (the tree's map from node ids to views).
struct WeakView {
    weak var view: View?
}

/// The tree at one moment, as the service describes it.
struct AccessibilitySnapshot {
    /// Every node, parents before children, in reading order.
    var nodes: [AccessibilityNodeDescription]
    var root: UInt32
    /// The first responder's node; 0: none.
    var focus: UInt32
}

extension ServiceRoot {
    /// Describes the tree now: each view that shows (not hidden, not ``View/isAccessibilityHidden``)
    /// is a node, its frame in the root's points, its children its subviews in order. Texts are
    /// cut to ``AccessibilityLimits/maxTextBytes``, frames kept within
    /// ``AccessibilityLimits/frameFactor`` times the view's size, the tree within its depth and
    /// node count: what the SDK sends never breaks a rule. Remembers the views for actions.
    func describeAccessibility() -> AccessibilitySnapshot {
        controller.view.layoutIfNeeded()
        var nodes: [AccessibilityNodeDescription] = []
        var views: [UInt32: WeakView] = [:]
        let reachX = AccessibilityLimits.frameReach(size.width), reachY = AccessibilityLimits.frameReach(size.height)
        // Not a number (a layout's division by zero) is 0; anything else within the reach.
        func clamp(_ value: Double, _ reach: Double) -> Double { value.isNaN ? 0 : min(max(value, -reach), reach) }
        /// Appends `view`'s node (and its subtree's) and returns its id; `nil` for a view that
        /// says nothing (an empty, unnamed group: an overlay, a spacer; a label with no text),
        /// left out. `origin` is the view's origin in the root's points (the walk carries it
        /// down, rather than each view finding it again through its superviews).
        func describe(_ view: View, depth: Int, origin: Point) -> UInt32? {
            var node = AccessibilityNodeDescription(id: view.accessibilityNodeID, role: .group)
            view.describeAccessibility(&node)
            // The tree's own, whatever an override wrote: the view's id, its subviews' nodes.
            node.id = view.accessibilityNodeID
            node.children = []
            if let role = view.accessibilityRole { node.role = role }
            if let label = view.accessibilityLabel { node.label = label }
            if let value = view.accessibilityValue { node.value = value }
            if view.isAccessibilitySelected { node.states.insert(.selected) }
            node.label = node.label.truncated(toUTF8Bytes: AccessibilityLimits.maxTextBytes, marker: "…")
            node.value = node.value.truncated(toUTF8Bytes: AccessibilityLimits.maxTextBytes, marker: "…")
            let rect = Rect(origin: origin, size: view.frame.size)
            let left = clamp(rect.minX, reachX), top = clamp(rect.minY, reachY)
            // A frame of negative size (a view's frame may have one) is empty.
            node.frame = AccessibilityFrame(x: left, y: top, width: max(0, clamp(rect.maxX, reachX) - left), height: max(0, clamp(rect.maxY, reachY) - top))
            if let range = node.range, range.problem != nil { node.range = nil }
            let index = nodes.count
            nodes.append(node)
            views[node.id] = WeakView(view: view)
            if depth < AccessibilityLimits.maxDepth {
                var children: [UInt32] = []
                for subview in view.subviews where !subview.isHidden && !subview.isAccessibilityHidden {
                    guard nodes.count < AccessibilityLimits.maxNodes else { break }
                    let childOrigin = Point(x: origin.x + subview.frame.minX, y: origin.y + subview.frame.minY)
                    if let child = describe(subview, depth: depth + 1, origin: childOrigin) { children.append(child) }
                }
                nodes[index].children = children
            }
            let said = nodes[index]
            if depth > 1, said.role == .group || said.role == .label, said.label.isEmpty, said.value.isEmpty, said.children.isEmpty,
               !said.states.contains(.focusable) {
                nodes.removeLast()
                views[said.id] = nil
                return nil
            }
            return node.id
        }
        let rootView = controller.view
        // The root view is the root's origin, wherever its own frame says it is.
        let root = describe(rootView, depth: 1, origin: .zero)!
        accessibilityViews = views
        let focus = focusableFirstResponder.map(\.accessibilityNodeID).flatMap { views[$0] != nil ? $0 : nil } ?? 0
        return AccessibilitySnapshot(nodes: nodes, root: root, focus: focus)
    }

    /// The first responder when it is a view of this tree.
    private var focusableFirstResponder: View? {
        guard let view = firstResponder as? View, view.serviceRoot === self else { return nil }
        return view
    }

    /// The host's action on node `id`: its view, and up the view's responder chain, takes it.
    /// Returns whether it was done; an action on a node that is gone is dropped.
    @discardableResult
    func performAccessibilityAction(_ action: AccessibilityAction, onNode id: UInt32) -> Bool {
        guard let view = accessibilityViews[id]?.view, view.serviceRoot === self else {
            unhandled.append("accessibility \(action) on a node that is gone")
            return false
        }
        return view.performAccessibilityAction(action)
    }
}
