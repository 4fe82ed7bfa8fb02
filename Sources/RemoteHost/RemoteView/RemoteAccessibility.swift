import RemoteCore

/// One node of an embedded view's semantic tree, as the host sees it: its frame in the host's
/// pixels (the view's points times its scale, from the view's top left), clipped to the view.
public struct AccessibilityNode: Sendable, Hashable, Identifiable, CustomStringConvertible {
    /// The service's id for it, stable while the node exists.
    public let id: UInt32
    /// What it is.
    public let role: AccessibilityRole
    /// What it is called ("Save"); empty: nothing. A peer wrote it: escape it
    /// (`escapedForTerminal()`) before it reaches a terminal or a log.
    public let label: String
    /// What it holds (a text field's text); empty: nothing. Escape it as ``label``.
    public let value: String
    /// Its states; `focused` on the tree's focus.
    public let states: AccessibilityStates
    /// What ``RemoteAccessibility/perform(_:on:)`` may do to it.
    public let actions: AccessibilityActions
    /// Its frame in the host's pixels, clipped to the view (zero-sized when wholly outside it).
    public let frame: AccessibilityFrame
    /// Its frame in the view's points, clipped to the view: where ``RemoteView/click(x:y:)``
    /// reaches it.
    public let frameInPoints: AccessibilityFrame
    /// Its children, in reading order.
    public let children: [UInt32]
    /// Its parent; `nil` for the root.
    public let parent: UInt32?
    /// A progress's bounds and value.
    public let range: AccessibilityRange?

    /// One line: role, quoted label, value, states, frame (escaped for a terminal).
    public var description: String {
        var line = "\(role) \"\(label.escapedForTerminal())\""
        if !value.isEmpty { line += " value \"\(value.escapedForTerminal())\"" }
        if let range { line += " range \(range.minimum)…\(range.maximum) at \(range.value)" }
        var flags: [String] = []
        if states.contains(.focused) { flags.append("focused") }
        if states.contains(.focusable) { flags.append("focusable") }
        if states.contains(.disabled) { flags.append("disabled") }
        if states.contains(.selected) { flags.append("selected") }
        if states.contains(.editable) { flags.append("editable") }
        if !flags.isEmpty { line += " [\(flags.joined(separator: ", "))]" }
        return line + " \(frame)"
    }
}

/// An embedded view's semantic tree at one moment: a value, cheap to copy and keep.
public struct AccessibilityTree: Sendable {
    /// The nodes as the service described them (frames in points, unclipped).
    let descriptions: [UInt32: AccessibilityNodeDescription]
    let parents: [UInt32: UInt32]
    /// The root node's id; `nil` until the service sent a tree.
    public let root: UInt32?
    /// The node with the keyboard focus; `nil`: none.
    public let focus: UInt32?
    /// The view's size in points and its scale (pixels per point), for the frames.
    private(set) var viewSize: (width: Double, height: Double)
    private(set) var scale: Double

    /// An empty tree (nothing sent yet).
    public init() {
        self.init(descriptions: [:], root: nil, focus: nil, viewSize: (0, 0), scale: 1)
    }

    init(descriptions: [UInt32: AccessibilityNodeDescription], root: UInt32?, focus: UInt32?, viewSize: (width: Double, height: Double), scale: Double) {
        self.descriptions = descriptions
        self.root = root
        self.focus = focus
        self.viewSize = viewSize
        self.scale = scale
        var parents: [UInt32: UInt32] = [:]
        for (id, node) in descriptions { for child in node.children { parents[child] = id } }
        self.parents = parents
    }

    /// How many nodes the tree has.
    public var count: Int { descriptions.count }

    /// Whether the service has sent a tree.
    public var isEmpty: Bool { root == nil }

    /// The node with `id`, or `nil`.
    public subscript(id: UInt32) -> AccessibilityNode? {
        guard let description = descriptions[id] else { return nil }
        let clipped = Self.clip(description.frame, width: viewSize.width, height: viewSize.height)
        var states = description.states
        if focus == id { states.insert(.focused) }
        return AccessibilityNode(
            id: id, role: description.role, label: description.label, value: description.value, states: states,
            actions: description.actions,
            frame: AccessibilityFrame(x: clipped.x * scale, y: clipped.y * scale, width: clipped.width * scale, height: clipped.height * scale),
            frameInPoints: clipped, children: description.children, parent: parents[id], range: description.range)
    }

    /// The root node, if any.
    public var rootNode: AccessibilityNode? { root.flatMap { self[$0] } }

    /// The focused node, if any.
    public var focusedNode: AccessibilityNode? { focus.flatMap { self[$0] } }

    /// Every node, depth first in reading order from the root, with its depth (the root's is 0).
    public var nodesInOrder: [(depth: Int, node: AccessibilityNode)] {
        guard let root else { return [] }
        var result: [(Int, AccessibilityNode)] = []
        var stack: [(UInt32, Int)] = [(root, 0)]
        while let (id, depth) = stack.popLast() {
            guard let node = self[id] else { continue }
            result.append((depth, node))
            for child in node.children.reversed() { stack.append((child, depth + 1)) }
        }
        return result
    }

    /// The nodes of `role` (any role when `nil`) whose label is `label` (any when `nil`), in
    /// reading order. A label matches exactly, or, when no node's does, ignoring case and
    /// surrounding spaces.
    public func nodes(role: AccessibilityRole? = nil, label: String? = nil) -> [AccessibilityNode] {
        let candidates = nodesInOrder.map(\.node).filter { role == nil || $0.role == role }
        guard let label else { return candidates }
        let exact = candidates.filter { $0.label == label }
        if !exact.isEmpty { return exact }
        let folded = label.trimmingSpaces.lowercased()
        return candidates.filter { $0.label.trimmingSpaces.lowercased() == folded }
    }

    /// The first node of `role` named `label` in reading order (see ``nodes(role:label:)``).
    public func first(role: AccessibilityRole? = nil, label: String? = nil) -> AccessibilityNode? {
        nodes(role: role, label: label).first
    }

    /// The tree as indented lines, one node each (escaped for a terminal).
    public var dump: String {
        nodesInOrder.map { String(repeating: "  ", count: $0.depth) + $0.node.description }.joined(separator: "\n")
    }

    /// The same tree with its frames at another size and scale.
    func resized(to viewSize: (width: Double, height: Double), scale: Double) -> AccessibilityTree {
        var tree = self
        tree.viewSize = viewSize
        tree.scale = scale
        return tree
    }

    /// `frame` cut to the view's bounds (a zero rect at the nearest edge when wholly outside).
    static func clip(_ frame: AccessibilityFrame, width: Double, height: Double) -> AccessibilityFrame {
        let left = min(max(frame.x, 0), width), top = min(max(frame.y, 0), height)
        let right = min(max(frame.x + frame.width, 0), width), bottom = min(max(frame.y + frame.height, 0), height)
        return AccessibilityFrame(x: left, y: top, width: max(right - left, 0), height: max(bottom - top, 0))
    }
}

/// What one update of the tree changed, with the tree after it.
public struct AccessibilityChange: Sendable {
    /// The tree after the change.
    public let tree: AccessibilityTree
    /// Counts the changes of this view from 1; a reader that sees a gap missed some (it fell
    /// behind ``RemoteAccessibility/changeBuffer`` changes) and should read ``tree`` whole.
    public let sequence: UInt64
    /// The whole tree was replaced (the first tree, a new process's, or a new size or scale).
    public let isWhole: Bool
    /// The nodes the service described anew, in its order (every node when whole).
    public let changed: [UInt32]
    /// The nodes no longer in the tree.
    public let removed: [UInt32]
    /// The focus moved (or the tree was replaced).
    public let focusChanged: Bool

    /// The bytes this change's `accessibility_update` packets take on the wire, as the codec
    /// encodes them (each in an envelope with a one-byte id: a real one's id may take up to 9
    /// bytes more). Computed when asked (it encodes the update again), for measuring.
    public var wireBytes: Int {
        let nodes = changed.compactMap { tree.descriptions[$0] }
        let parts = AccessibilityUpdateWire.split(nodes: nodes, root: isWhole ? tree.root ?? 0 : 0, focus: tree.focus ?? 0, whole: isWhole)
        return parts.reduce(0) { total, part in
            total + ((try? EnvelopeCodec.encode(Envelope(id: 1, body: .surface(.accessibilityUpdate(part)))).count) ?? 0)
        }
    }
}

/// An embedded view's semantic tree (``RemoteView/accessibility``): the current tree, a stream
/// of its changes, waits for a node, and actions sent back to the service.
///
/// The service sends its tree after the frames that change it, only to a host that announced
/// the capability `accessibility` (the Swift launcher does unless
/// `Launcher.Configuration.readsAccessibility` is off); frames arrive here in the host's pixels.
/// Every update is validated first (docs/Protocol.md, "Accessibility"): a tree that breaks a rule
/// ends its service with the rule's name. After a relaunch, the new process's whole tree
/// replaces the old one, which stays until then.
public final class RemoteAccessibility: Sendable {
    private let connection: ServiceConnection
    private let state = Mutex(Published())

    private struct Published {
        var tree = AccessibilityTree()
        /// The view's size in points and its scale: the frames of every tree published.
        var viewSize: (width: Double, height: Double) = (0, 0)
        var scale = 1.0
        /// Whether the tree is the current process's: false from a relaunch until the new
        /// process's whole tree arrives (its node ids are its own).
        var current = true
        var sequence: UInt64 = 0
        var readers = StreamReaders<AccessibilityChange>()
        var watchers: [(match: @Sendable (AccessibilityTree) -> AccessibilityNode?, waiter: Waiter<AccessibilityNode>)] = []
    }

    /// How many changes a reader of ``changes()`` may fall behind before it loses the oldest
    /// (each holds the whole tree after it, so a reader that fell behind reads that).
    public static let changeBuffer = 32

    init(connection: ServiceConnection) {
        self.connection = connection
    }

    deinit {
        for reader in state.withLock({ $0.readers.all }) { reader.finish() }
    }

    /// The tree as of the last update (empty until the service sent one).
    public var tree: AccessibilityTree { state.withLock { $0.tree } }

    /// A new stream of the tree's changes from now on, for one reader (each call makes another).
    /// It ends when the view goes away; a reader that falls more than ``changeBuffer`` changes
    /// behind loses the oldest (``AccessibilityChange/sequence`` shows the gap).
    public func changes() -> AsyncStream<AccessibilityChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: AccessibilityChange.self, bufferingPolicy: .bufferingNewest(Self.changeBuffer))
        let id = state.withLock { $0.readers.add(continuation) }
        continuation.onTermination = { [weak self] _ in self?.state.withLock { $0.readers.remove(id) } }
        return stream
    }

    /// Waits until the tree has a node of `role` named `label` (see
    /// ``AccessibilityTree/nodes(role:label:)``) and returns it, or throws `timeout`.
    public func node(role: AccessibilityRole? = nil, label: String? = nil, timeout: Duration = .seconds(10)) async throws(RemoteError) -> AccessibilityNode {
        try await node(timeout: timeout, describedAs: "\(role.map { "\($0)" } ?? "node")\(label.map { " named \"\($0.escapedForTerminal())\"" } ?? "")") {
            $0.first(role: role, label: label)
        }
    }

    /// Waits until `match` finds a node in the tree and returns it, or throws `timeout` (whose
    /// reason names `what`). `match` is given each new tree under this object's lock: it must
    /// look only at the tree it is given (reading ``tree`` in it would wait for itself).
    public func node(timeout: Duration = .seconds(10), describedAs what: String = "a matching node",
                     _ match: @escaping @Sendable (AccessibilityTree) -> AccessibilityNode?) async throws(RemoteError) -> AccessibilityNode {
        let waiter = Waiter<AccessibilityNode>()
        let found = state.withLock { state -> AccessibilityNode? in
            if let node = match(state.tree) { return node }
            state.watchers.append((match, waiter))
            return nil
        }
        if let found { return found }
        do {
            return try await waiter.wait(until: .now.advanced(by: timeout), onAbandon: { [weak self] in
                self?.state.withLock { $0.watchers.removeAll { $0.waiter === waiter } }
            })
        } catch {
            let tree = self.tree
            throw RemoteError(.timeout, "no \(what) in the view's tree after \(timeout) (\(tree.isEmpty ? "no tree arrived" : "\(tree.count) nodes"))")
        }
    }

    /// Acts on node `id` as an assistive technology would: the service's view for it (and its
    /// responder chain) takes the action.
    ///
    /// - Throws: `invalidArgument` when the tree has no such node or the node does not take the
    ///   action, or the action is impossible (named); `unsupported`-style `invalidArgument` when
    ///   the service did not announce `accessibility`; what sending throws.
    public func perform(_ action: AccessibilityAction, on id: UInt32) async throws(RemoteError) {
        if let problem = action.problem { throw RemoteError(.invalidArgument, problem) }
        let (tree, current) = state.withLock { ($0.tree, $0.current) }
        // A relaunched process numbers its nodes anew: an id of the old tree may be another control.
        guard current else {
            throw RemoteError(.invalidArgument, "the service's process changed, and its new tree has not arrived yet: node \(id) is the old process's")
        }
        guard let node = tree[id] else { throw RemoteError(.invalidArgument, "the view's tree has no node \(id)") }
        guard node.actions.contains(action.requirement) else {
            throw RemoteError(.invalidArgument, "node \(id) (\(node.role) \"\(node.label.escapedForTerminal())\") does not take \(action)")
        }
        try await connection.withChannel { connection throws(RemoteError) in
            let peer = try await connection.peerHandshake()
            guard peer.capabilities.contains(AccessibilityCapability.name),
                  connection.configuration.capabilities.contains(AccessibilityCapability.name) else {
                throw RemoteError(.invalidArgument, "\(peer.identifier) and this host do not both announce the \"\(AccessibilityCapability.name)\" capability")
            }
            try await connection.send(.accessibilityAction(AccessibilityActionWire(node: id, action: action)))
        }
    }

    /// A new process serves the view: until its whole tree arrives, the old one stays published
    /// but takes no action.
    func processChanged() {
        state.withLock { state in if !state.tree.isEmpty { state.current = false } }
    }

    /// Publishes the current process's tree after a change (its frames at the view's size and
    /// scale now): to every reader, and to waits it satisfies.
    func publish(_ descriptions: [UInt32: AccessibilityNodeDescription], root: UInt32?, focus: UInt32?, whole: Bool,
                 changed: [UInt32], removed: [UInt32], focusChanged: Bool) {
        state.withLock { state in
            let tree = AccessibilityTree(descriptions: descriptions, root: root, focus: focus, viewSize: state.viewSize, scale: state.scale)
            if whole { state.current = true }
            return Self.publish(tree, in: &state, whole: whole, changed: changed, removed: removed, focusChanged: focusChanged)
        }.resume()
    }

    /// What publishing leaves to do outside the lock: the waits it satisfied.
    private struct Found {
        var waits: [(Waiter<AccessibilityNode>, AccessibilityNode)] = []
        func resume() { for (waiter, node) in waits { waiter.resume(returning: node) } }
    }

    private static func publish(_ tree: AccessibilityTree, in state: inout Published, whole: Bool, changed: [UInt32], removed: [UInt32],
                                focusChanged: Bool) -> Found {
        let before = state.tree
        state.tree = tree
        state.sequence += 1
        var removed = removed
        if whole { removed = before.descriptions.keys.filter { tree.descriptions[$0] == nil }.sorted() }
        let change = AccessibilityChange(tree: tree, sequence: state.sequence, isWhole: whole, changed: changed,
                                         removed: removed, focusChanged: focusChanged || before.focus != tree.focus)
        var found: [(Waiter<AccessibilityNode>, AccessibilityNode)] = []
        state.watchers.removeAll { watcher in
            guard let node = watcher.match(tree) else { return false }
            found.append((watcher.waiter, node))
            return true
        }
        // Each reader's stream buffers it (yield does not wait), under the lock, so that the
        // changes reach every reader in the order they were published.
        state.readers.yield(change)
        return Found(waits: found)
    }

    /// The view's size or scale changed: the frames of every tree from now on, and of this one
    /// (published anew, whole), follow it.
    func resized(to size: (width: Double, height: Double), scale: Double) {
        state.withLock { state -> Found in
            guard state.viewSize != size || state.scale != scale else { return Found() }
            state.viewSize = size
            state.scale = scale
            let tree = state.tree
            guard !tree.isEmpty else { return Found() }
            return Self.publish(tree.resized(to: size, scale: scale), in: &state, whole: true, changed: tree.nodesInOrder.map(\.node.id),
                                removed: [], focusChanged: false)
        }.resume()
    }
}

private extension String {
    var trimmingSpaces: Substring {
        let trimmed = drop { $0.isWhitespace }
        return trimmed.dropLast(trimmed.reversed().prefix { $0.isWhitespace }.count)
    }
}
