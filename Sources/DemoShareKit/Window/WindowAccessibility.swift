// The window as a screen reader sees it: its own chrome (the sheet's entries, the bar's title,
// progress and buttons) and the embedded activity's semantic tree, exported to AT-SPI2 through
// CAccessibilityBridge (ATK and atk-bridge, loaded only here). The activity never touches the
// accessibility bus: its tree comes over its RemoteView connection, validated, and this window
// exports it as part of itself (docs/Architecture.md, "The semantic tree").
import CAccessibilityBridge
import CSDL2
import RemoteHost

/// The window's accessible tree and the requests assistive technologies make of it. Main
/// thread; the bridge's own thread only queues requests here and wakes the window's loop.
@MainActor
final class WindowAccessibility {
    /// One node as exported: the bridge's node, in Swift.
    struct Node: Equatable {
        var id: UInt32
        var parent: UInt32
        var role: rv_a11y_role
        var name: String
        var value: String = ""
        var states: UInt32 = 0
        var actions: UInt32 = 0
        /// Extents in screen pixels.
        var x = 0, y = 0, width = 0, height = 0
        var range: AccessibilityRange?
        var children: [UInt32] = []
    }

    /// What an assistive technology asked of a node.
    struct Request: Sendable {
        var id: UInt32
        var action: AccessibilityAction
    }

    /// The requests queued by the bridge's thread, and how to wake the window.
    final class Inbox: Sendable {
        let wakeEvent: UInt32
        let requests = Mutex<[Request]>([])
        init(wakeEvent: UInt32) { self.wakeEvent = wakeEvent }
    }

    private let inbox: Inbox
    /// The bridge's context: the inbox, retained until ``stop()``.
    private let context: Unmanaged<Inbox>
    /// What the bridge has now, by id, and the focus it was given.
    private var exported: [UInt32: Node] = [:]
    private var exportedFocus: UInt32 = 0

    private init(inbox: Inbox, context: Unmanaged<Inbox>) {
        self.inbox = inbox
        self.context = context
    }

    /// Starts the bridge (registers the application `name` on the accessibility bus), or says
    /// why not and returns `nil`: the window works without it.
    static func start(name: String, wakeEvent: UInt32) -> WindowAccessibility? {
        let inbox = Inbox(wakeEvent: wakeEvent)
        var error = [CChar](repeating: 0, count: 512)
        let context = Unmanaged.passRetained(inbox)
        let status = rv_a11y_start(name, accessibilityRequest, context.toOpaque(), &error, error.count)
        guard status == 0 else {
            context.release()
            let reason = String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            print("window: accessibility off: \(reason.escapedForTerminal())")
            return nil
        }
        return WindowAccessibility(inbox: inbox, context: context)
    }

    /// Unregisters the window from the accessibility bus (the bridge calls back no more).
    func stop() {
        rv_a11y_stop()
        context.release()
    }

    /// The requests made since the last call, in order.
    func takeRequests() -> [Request] {
        inbox.requests.withLock { requests in
            defer { requests = [] }
            return requests
        }
    }

    /// Makes the exported tree `nodes` with `focus` (0: none): only the nodes that changed go
    /// to the bridge, and those gone are removed, so a keystroke sends one node.
    func publish(_ nodes: [Node], focus: UInt32) {
        var wanted: [UInt32: Node] = [:]
        for node in nodes { wanted[node.id] = node }
        let changed = nodes.filter { exported[$0.id] != $0 }
        let removed = exported.keys.filter { wanted[$0] == nil }
        guard !changed.isEmpty || !removed.isEmpty || focus != exportedFocus else { return }
        exported = wanted
        exportedFocus = focus
        Self.apply(changed, removed: removed, focus: focus)
    }

    /// Hands `nodes` to the bridge as C structs; their strings and child lists are copies that
    /// live for the call (the bridge copies what it keeps).
    private static func apply(_ nodes: [Node], removed: [UInt32], focus: UInt32) {
        var copies: [UnsafeMutableRawPointer?] = []
        defer { copies.forEach { free($0) } }
        func copy(_ text: String) -> UnsafePointer<CChar>? {
            let pointer = strdup(text)
            copies.append(pointer)
            return UnsafePointer(pointer)
        }
        let built = nodes.map { node in
            var c = rv_a11y_node()
            c.id = node.id
            c.parent = node.parent
            c.role = Int32(node.role.rawValue)
            c.name = copy(node.name)
            // A label without a value reads its name as its text.
            c.value = node.value.isEmpty ? nil : copy(node.value)
            c.states = node.states
            c.actions = node.actions
            c.x = Int32(clamping: node.x)
            c.y = Int32(clamping: node.y)
            c.width = Int32(clamping: node.width)
            c.height = Int32(clamping: node.height)
            if let range = node.range {
                c.has_range = 1
                c.value_min = range.minimum
                c.value_max = range.maximum
                c.value_now = range.value
            }
            if !node.children.isEmpty {
                let children = malloc(node.children.count * MemoryLayout<UInt32>.stride)!
                copies.append(children)
                let typed = children.bindMemory(to: UInt32.self, capacity: node.children.count)
                for (index, child) in node.children.enumerated() { typed[index] = child }
                c.children = UnsafePointer(typed)
                c.child_count = node.children.count
            }
            return c
        }
        built.withUnsafeBufferPointer { nodes in
            removed.withUnsafeBufferPointer { removed in
                rv_a11y_apply(nodes.baseAddress, nodes.count, removed.baseAddress, removed.count, focus)
            }
        }
    }
}

/// The bridge's callback, on its own thread (so not the main actor's): queues the request and
/// wakes the window's loop, which performs it.
private let accessibilityRequest: rv_a11y_action_fn = { context, id, action, text, number in
    let inbox = Unmanaged<WindowAccessibility.Inbox>.fromOpaque(context!).takeUnretainedValue()
    let request: AccessibilityAction? = switch Int(action) {
    case RV_A11Y_ACTION_PRESS: .press
    case RV_A11Y_ACTION_FOCUS: .focus
    case RV_A11Y_ACTION_SET_VALUE: text.map { .setText(String(cString: $0)) } ?? .setNumber(number)
    case RV_A11Y_ACTION_INCREMENT: .increment
    case RV_A11Y_ACTION_DECREMENT: .decrement
    case RV_A11Y_ACTION_SCROLL_INTO_VIEW: .scrollIntoView
    default: nil
    }
    guard let request else { return }
    inbox.requests.withLock { $0.append(WindowAccessibility.Request(id: id, action: request)) }
    SDLWindow.wake(inbox.wakeEvent)
}

extension WindowAccessibility.Node {
    /// The bridge's role for a role of an activity's tree.
    static func role(_ role: AccessibilityRole) -> rv_a11y_role {
        switch role {
        case .button: RV_A11Y_ROLE_BUTTON
        case .label: RV_A11Y_ROLE_LABEL
        case .textField: RV_A11Y_ROLE_TEXT_FIELD
        case .image: RV_A11Y_ROLE_IMAGE
        case .progress: RV_A11Y_ROLE_PROGRESS
        case .canvas: RV_A11Y_ROLE_CANVAS
        default: RV_A11Y_ROLE_GROUP
        }
    }

    /// The bridge's state bits for an activity node's states.
    static func states(_ states: AccessibilityStates) -> UInt32 {
        var bits: UInt32 = 0
        if states.contains(.focusable) { bits |= UInt32(RV_A11Y_STATE_FOCUSABLE) }
        if states.contains(.disabled) { bits |= UInt32(RV_A11Y_STATE_DISABLED) }
        if states.contains(.selected) { bits |= UInt32(RV_A11Y_STATE_SELECTED) }
        if states.contains(.editable) { bits |= UInt32(RV_A11Y_STATE_EDITABLE) }
        if states.contains(.multiLine) { bits |= UInt32(RV_A11Y_STATE_MULTI_LINE) }
        return bits
    }

    /// The bridge's action bits for an activity node's actions (the same bits, by design).
    static func actions(_ actions: AccessibilityActions) -> UInt32 {
        actions.rawValue & 0x3F
    }
}
