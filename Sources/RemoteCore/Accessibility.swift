/// The semantic tree beside a view's pixels (docs/Protocol.md, "Accessibility"): what each
/// control is, what it is called and holds, where it is and what can be done with it, so that a
/// screen reader reads an embedded view and a script finds its controls by role and name.
///
/// A service describes its view as nodes, each with an id of its own; after the frame that
/// changed some, it sends those nodes whole and the focus (AccessKit's model: an update is a list
/// of changed nodes; a node no longer reachable from the root is gone). The host validates every
/// update as hostile input, within ``AccessibilityLimits``.

/// The bounds a tree lives within. A tree that breaks one ends its service, with the rule's name
/// (``AccessibilityRule``).
public enum AccessibilityLimits {
    /// The most nodes a view's tree has (after an update: the nodes reachable from the root).
    public static let maxNodes = 4_096
    /// The deepest a node is below the root (the root is at depth 1).
    public static let maxDepth = 64
    /// The most UTF-8 bytes of a label, a value, or an action's text.
    public static let maxTextBytes = 1_024
    /// How far past the view a frame may reach: each edge lies within this many times the view's
    /// width (height) of its origin, either way. A frame partly outside the view is normal (the
    /// host clips it); one beyond this is absurd, and a violation.
    public static let frameFactor = 16.0
    /// The smallest side a view is judged by for ``frameFactor``: a control of a usual size in a
    /// view a few points wide is not absurd (so a frame may always reach 1024 points either way).
    public static let frameFloor = 64.0

    /// How far a frame may reach from the view's origin along a side of `points`.
    public static func frameReach(_ points: Double) -> Double {
        frameFactor * max(points, frameFloor)
    }
}

/// The rules a tree must keep, by name: a violation's reason begins with its rule's name, so a
/// service author (and `remoteview-check`) can tell which one was broken.
public enum AccessibilityRule: String, Sendable, CaseIterable {
    /// An update from a service whose host did not announce `accessibility`, or from a service
    /// that did not, or an action to a service that did not.
    case unannounced = "accessibility.unannounced"
    /// More than ``AccessibilityLimits/maxNodes`` nodes.
    case nodeCount = "accessibility.node-count"
    /// A node deeper than ``AccessibilityLimits/maxDepth``.
    case depth = "accessibility.depth"
    /// A label, value or action text over ``AccessibilityLimits/maxTextBytes``, or not UTF-8.
    case textLength = "accessibility.text-length"
    /// A frame that is not finite, has a negative size, or lies beyond
    /// ``AccessibilityLimits/frameFactor`` times the view's size.
    case frame = "accessibility.frame"
    /// A range that is not finite or not ordered (min ≤ value ≤ max).
    case range = "accessibility.range"
    /// The tree's shape: a node id 0, a node twice in one update, a child or root that does not
    /// exist, a node with two parents or inside its own subtree, a first update that is not whole.
    case structure = "accessibility.structure"
    /// A focus on a node that is not in the tree.
    case focus = "accessibility.focus"

    /// A violation of this rule: `RemoteError` `protocolViolation` whose reason begins with the
    /// rule's name.
    package func violation(_ detail: String) -> RemoteError {
        RemoteError(.protocolViolation, "\(rawValue): \(detail)")
    }
}

/// The capability a host announces when it reads the view's semantic tree, and a service when
/// it sends one and takes actions on it.
package enum AccessibilityCapability {
    package static let name = "accessibility"
}

/// What a node is. A value from a newer peer that this version does not know reads as
/// ``unknown``: a plain element.
public struct AccessibilityRole: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    /// The role's number on the wire (`AccessibilityRole` in remoteview.proto).
    public let rawValue: UInt32
    /// The role numbered `rawValue` (one this version does not know is not ``unknown`` by itself:
    /// the decoder maps those).
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// A role this version does not know (a newer peer's), or none given.
    public static let unknown = AccessibilityRole(rawValue: 0)
    /// A container: a stack, the root view.
    public static let group = AccessibilityRole(rawValue: 1)
    /// Something to press.
    public static let button = AccessibilityRole(rawValue: 2)
    /// Static text.
    public static let label = AccessibilityRole(rawValue: 3)
    /// Editable text.
    public static let textField = AccessibilityRole(rawValue: 4)
    /// A picture; its label says what it shows.
    public static let image = AccessibilityRole(rawValue: 5)
    /// A progress indicator: its node's range says how far.
    public static let progress = AccessibilityRole(rawValue: 6)
    /// Drawn content that describes itself no further.
    public static let canvas = AccessibilityRole(rawValue: 7)

    /// The roles this version knows.
    public static let known: [AccessibilityRole] = [.group, .button, .label, .textField, .image, .progress, .canvas]

    /// The name scripts use for it: `button`, `label`, `text field`…
    public var description: String {
        switch self {
        case .group: "group"
        case .button: "button"
        case .label: "label"
        case .textField: "text field"
        case .image: "image"
        case .progress: "progress"
        case .canvas: "canvas"
        default: "unknown"
        }
    }

    /// The role a script names (`"button"`, `"text field"`, `"textfield"`, `"field"`…), or `nil`.
    public init?(name: String) {
        let folded = name.lowercased().filter { !$0.isWhitespace && $0 != "-" && $0 != "_" }
        switch folded {
        case "group": self = .group
        case "button": self = .button
        case "label", "text", "statictext": self = .label
        case "textfield", "field", "entry": self = .textField
        case "image": self = .image
        case "progress", "progressbar": self = .progress
        case "canvas": self = .canvas
        default: return nil
        }
    }
}

/// States of a node. ``focused`` is the host's: it marks the node the update's focus names, and
/// never goes on the wire (the focus is one node, not a bit each node could claim).
public struct AccessibilityStates: OptionSet, Sendable, Hashable {
    /// The bits (the wire's below 1 << 16).
    public let rawValue: UInt32
    /// The states of `rawValue`'s bits.
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// It can take the keyboard focus.
    public static let focusable = AccessibilityStates(rawValue: 1)
    /// It is shown but takes no input.
    public static let disabled = AccessibilityStates(rawValue: 2)
    /// It is chosen (an item of a list).
    public static let selected = AccessibilityStates(rawValue: 4)
    /// Its value can be edited (a text field).
    public static let editable = AccessibilityStates(rawValue: 8)
    /// Its text runs over several lines.
    public static let multiLine = AccessibilityStates(rawValue: 16)
    /// It has the keyboard focus (the host's: set from the update's focus).
    public static let focused = AccessibilityStates(rawValue: 1 << 16)

    /// The bits that travel on the wire; others a peer sends are ignored.
    package static let wire: AccessibilityStates = [.focusable, .disabled, .selected, .editable, .multiLine]
}

/// What can be done to a node, as a user would.
public struct AccessibilityActions: OptionSet, Sendable, Hashable {
    /// The bits: action n of the wire is bit 1 << (n − 1).
    public let rawValue: UInt32
    /// The actions of `rawValue`'s bits.
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// As a click, or Space on it.
    public static let press = AccessibilityActions(rawValue: 1 << 0)
    /// Make it the keyboard focus.
    public static let focus = AccessibilityActions(rawValue: 1 << 1)
    /// Set its value: a text field's text, a range's number.
    public static let setValue = AccessibilityActions(rawValue: 1 << 2)
    /// Step its value up (a slider, a stepper).
    public static let increment = AccessibilityActions(rawValue: 1 << 3)
    /// Step its value down.
    public static let decrement = AccessibilityActions(rawValue: 1 << 4)
    /// Scroll whatever contains it until it shows.
    public static let scrollIntoView = AccessibilityActions(rawValue: 1 << 5)

    /// The bits that travel on the wire; others a peer sends are ignored.
    package static let wire: AccessibilityActions = [.press, .focus, .setValue, .increment, .decrement, .scrollIntoView]
}

/// One action on a node, with what it needs.
public enum AccessibilityAction: Sendable, Hashable, CustomStringConvertible {
    /// As a click, or Space on it.
    case press
    /// Make it the keyboard focus.
    case focus
    /// A text field's new text (at most ``AccessibilityLimits/maxTextBytes`` bytes).
    case setText(String)
    /// A range's new value (finite).
    case setNumber(Double)
    /// Step its value up.
    case increment
    /// Step its value down.
    case decrement
    /// Scroll whatever contains it until it shows.
    case scrollIntoView

    /// The capability bit a node must have for it.
    public var requirement: AccessibilityActions {
        switch self {
        case .press: .press
        case .focus: .focus
        case .setText, .setNumber: .setValue
        case .increment: .increment
        case .decrement: .decrement
        case .scrollIntoView: .scrollIntoView
        }
    }

    /// The action as a log line names it (a text set is not quoted: it is the peer's or the user's).
    public var description: String {
        switch self {
        case .press: "press"
        case .focus: "focus"
        case .setText: "set value (text)"
        case .setNumber(let number): "set value \(number)"
        case .increment: "increment"
        case .decrement: "decrement"
        case .scrollIntoView: "scroll into view"
        }
    }

    /// Why the action cannot go on the wire, or `nil`.
    public var problem: String? {
        switch self {
        case .setText(let text) where text.utf8.count > AccessibilityLimits.maxTextBytes:
            "\(AccessibilityRule.textLength.rawValue): an action's text of \(text.utf8.count) bytes; at most \(AccessibilityLimits.maxTextBytes)"
        case .setNumber(let number) where !number.isFinite:
            "\(AccessibilityRule.range.rawValue): an action's number \(number) is not finite"
        default: nil
        }
    }
}

/// A rectangle of a node, in points (on the wire and in the service) or, in a host's tree, in the
/// host's pixels.
public struct AccessibilityFrame: Sendable, Hashable, CustomStringConvertible {
    /// The left edge.
    public var x: Double
    /// The top edge.
    public var y: Double
    public var width: Double
    public var height: Double

    /// A frame at (`x`, `y`), `width` × `height`.
    public init(x: Double, y: Double, width: Double, height: Double) {
        self.x = x
        self.y = y
        self.width = width
        self.height = height
    }

    /// An empty frame at the origin.
    public static let zero = AccessibilityFrame(x: 0, y: 0, width: 0, height: 0)

    /// The middle, where a click on it lands.
    public var center: (x: Double, y: Double) { (x + width / 2, y + height / 2) }

    /// "W×H at (X, Y)".
    public var description: String { "\(Self.format(width))×\(Self.format(height)) at (\(Self.format(x)), \(Self.format(y)))" }

    private static func format(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e9 ? String(Int(value)) : String(value)
    }
}

/// A range's bounds and where its value is in them (a progress).
public struct AccessibilityRange: Sendable, Hashable {
    /// The lowest value.
    public var minimum: Double
    /// The highest value.
    public var maximum: Double
    /// Where it is: `minimum` ≤ `value` ≤ `maximum`.
    public var value: Double

    /// A range from `minimum` to `maximum`, at `value`.
    public init(minimum: Double, maximum: Double, value: Double) {
        self.minimum = minimum
        self.maximum = maximum
        self.value = value
    }

    /// Why it is impossible, or `nil`.
    package var problem: String? {
        guard minimum.isFinite, maximum.isFinite, value.isFinite else { return "is not finite (\(minimum)…\(maximum), \(value))" }
        guard minimum <= value, value <= maximum else { return "is not ordered: \(value) outside \(minimum)…\(maximum)" }
        return nil
    }
}

/// One node as a service describes it: everything about it, whole (an update replaces what the
/// host knew of it).
public struct AccessibilityNodeDescription: Sendable, Hashable {
    /// The service's id for it: non-zero, stable while the node exists.
    public var id: UInt32
    /// What it is.
    public var role: AccessibilityRole
    /// What it is called ("Save"); empty: nothing.
    public var label: String
    /// What it holds (a text field's text, a progress's "30 %"); empty: nothing.
    public var value: String
    /// Its states (``AccessibilityStates/focused`` is the host's, never sent).
    public var states: AccessibilityStates
    /// What can be done to it.
    public var actions: AccessibilityActions
    /// Its frame in the view's points, from the view's top left.
    public var frame: AccessibilityFrame
    /// Its children's ids, in reading order.
    public var children: [UInt32]
    /// A progress's bounds and value; `nil` for anything else.
    public var range: AccessibilityRange?

    /// A node `id` of `role`, with what else it says.
    public init(id: UInt32, role: AccessibilityRole, label: String = "", value: String = "", states: AccessibilityStates = [],
                actions: AccessibilityActions = [], frame: AccessibilityFrame = .zero, children: [UInt32] = [], range: AccessibilityRange? = nil) {
        self.id = id
        self.role = role
        self.label = label
        self.value = value
        self.states = states
        self.actions = actions
        self.frame = frame
        self.children = children
        self.range = range
    }

    /// Why the node breaks a rule that needs no other node or size to judge, or `nil`: its id,
    /// its texts' lengths, a finite frame of no negative size, its range.
    package var problem: RemoteError? {
        guard id != 0 else { return AccessibilityRule.structure.violation("a node has id 0") }
        for (field, text) in [("label", label), ("value", value)] where text.utf8.count > AccessibilityLimits.maxTextBytes {
            return AccessibilityRule.textLength.violation("node \(id)'s \(field) is \(text.utf8.count) bytes; at most \(AccessibilityLimits.maxTextBytes)")
        }
        let f = frame
        guard f.x.isFinite, f.y.isFinite, f.width.isFinite, f.height.isFinite, f.width >= 0, f.height >= 0 else {
            return AccessibilityRule.frame.violation("node \(id)'s frame \(f) is not finite, or has a negative size")
        }
        guard children.count <= AccessibilityLimits.maxNodes else {
            return AccessibilityRule.nodeCount.violation("node \(id) has \(children.count) children; a tree has at most \(AccessibilityLimits.maxNodes) nodes")
        }
        if let range, let problem = range.problem { return AccessibilityRule.range.violation("node \(id)'s range \(problem)") }
        return nil
    }
}

/// One update of the tree, or one part of it (``more``): what travels as `accessibility_update`.
package struct AccessibilityUpdateWire: Sendable, Hashable {
    package var nodes: [AccessibilityNodeDescription]
    /// With ``whole``: the root's id; otherwise 0.
    package var root: UInt32
    /// The focused node; 0: none.
    package var focus: UInt32
    /// The whole tree: every node known before is forgotten.
    package var whole: Bool
    /// The next `accessibility_update` continues this one.
    package var more: Bool

    package init(nodes: [AccessibilityNodeDescription], root: UInt32 = 0, focus: UInt32 = 0, whole: Bool = false, more: Bool = false) {
        self.nodes = nodes
        self.root = root
        self.focus = focus
        self.whole = whole
        self.more = more
    }

    /// Why this part breaks a rule on its own, or `nil`.
    package var problem: RemoteError? {
        guard nodes.count <= AccessibilityLimits.maxNodes else {
            return AccessibilityRule.nodeCount.violation("an update of \(nodes.count) nodes; a tree has at most \(AccessibilityLimits.maxNodes)")
        }
        guard whole || root == 0 else { return AccessibilityRule.structure.violation("root \(root) set on an update that is not whole") }
        for node in nodes { if let problem = node.problem { return problem } }
        // Each node is the child of one parent at most: a tree lists fewer children than nodes.
        let children = childCount
        guard children <= AccessibilityLimits.maxNodes else {
            return AccessibilityRule.nodeCount.violation("an update lists \(children) children; a tree has at most \(AccessibilityLimits.maxNodes) nodes, each the child of one")
        }
        return nil
    }

    /// How many children the nodes list, together.
    package var childCount: Int { nodes.reduce(0) { $0 + $1.children.count } }

    /// `nodes` (a whole tree or a change) split into updates that each fit a packet: every part
    /// but the last says `more`. Each node is costed at its encoded size, bounded above.
    package static func split(nodes: [AccessibilityNodeDescription], root: UInt32, focus: UInt32, whole: Bool,
                              packetBudget: Int = WireLimits.maxPacketSize - 1_024) -> [AccessibilityUpdateWire] {
        var parts: [AccessibilityUpdateWire] = []
        var current: [AccessibilityNodeDescription] = []
        var size = 0
        for node in nodes {
            // Tag and length, id, role, states, actions, four floats, range: at most 64 bytes;
            // each child at most 6; the two texts with their tags and lengths.
            let cost = 64 + 6 * node.children.count + node.label.utf8.count + node.value.utf8.count + 6
            if !current.isEmpty, size + cost > packetBudget {
                parts.append(AccessibilityUpdateWire(nodes: current, root: root, focus: focus, whole: whole, more: true))
                current = []
                size = 0
            }
            current.append(node)
            size += cost
        }
        parts.append(AccessibilityUpdateWire(nodes: current, root: root, focus: focus, whole: whole, more: false))
        return parts
    }
}

/// An action a host sends for a node: what travels as `accessibility_action`.
package struct AccessibilityActionWire: Sendable, Hashable {
    package var node: UInt32
    package var action: AccessibilityAction

    package init(node: UInt32, action: AccessibilityAction) {
        self.node = node
        self.action = action
    }

    package var problem: String? {
        guard node != 0 else { return "\(AccessibilityRule.structure.rawValue): an action on node 0" }
        return action.problem
    }
}
