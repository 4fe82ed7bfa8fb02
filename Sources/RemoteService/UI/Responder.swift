/// Something that can handle input, linked into a chain (`UIResponder`).
///
/// Each event goes first to one responder, and every handler's default passes it on to
/// ``next``: a view's next responder is its superview, a controller's root view's is the
/// controller, the controller's is the service root, where unhandled events end. Override a
/// handler to take the event; call `super` to pass it on.
///
/// - Pointer events go to the view under the pointer (see ``View/hitTest(_:)``); after a press,
///   the view that took it gets the moves and the release, wherever they happen.
/// - Keys, text and remote-control commands go to the first responder (or, when there is none,
///   the view controller).
@MainActor
open class Responder {
    public init() {}

    /// The responder an unhandled event goes to next.
    open var next: Responder? { nil }

    /// Whether this responder can take keys and text (a text field can).
    open var canBecomeFirstResponder: Bool { false }

    /// A pointer button went down on this responder's view. `event.x`/`y` are in the root
    /// view's points: use ``View/location(of:)`` for the view's own.
    open func pointerDown(_ event: PointerEvent) { next?.pointerDown(event) }
    /// The pointer moved (after a press on this responder, or over it).
    open func pointerMoved(_ event: PointerEvent) { next?.pointerMoved(event) }
    /// A pointer button went up (after a press on this responder).
    open func pointerUp(_ event: PointerEvent) { next?.pointerUp(event) }
    /// The pointer scrolled over this responder's view.
    open func scrolled(_ event: PointerEvent) { next?.scrolled(event) }
    /// A key went down (or repeats).
    open func keyDown(_ event: KeyEvent) { next?.keyDown(event) }
    /// A key went up.
    open func keyUp(_ event: KeyEvent) { next?.keyUp(event) }
    /// Text was typed.
    open func insertText(_ text: String) { next?.insertText(text) }
    /// A media command (play, pause, next, …) arrived.
    open func remoteControlReceived(_ command: RemoteCommand) { next?.remoteControlReceived(command) }

    /// An assistive technology (a screen reader, a test script) acts on this responder's node
    /// of the semantic tree, as a user would: press it, focus it, set its value… Returns whether
    /// it was done. The default passes it up the chain (``next``), so a container can act for
    /// the views inside it; what reaches the end of the chain is dropped.
    open func performAccessibilityAction(_ action: AccessibilityAction) -> Bool {
        next?.performAccessibilityAction(action) ?? false
    }

    /// The service root this responder belongs to, if it is on screen.
    var serviceRoot: ServiceRoot? { next?.serviceRoot }

    /// Whether this responder takes keys and text now.
    public var isFirstResponder: Bool { serviceRoot?.firstResponder === self }

    /// Makes this responder the one keys and text go to. Returns whether it did.
    @discardableResult
    public func becomeFirstResponder() -> Bool {
        guard canBecomeFirstResponder, let root = serviceRoot else { return false }
        root.setFirstResponder(self)
        return true
    }

    /// Stops taking keys and text.
    public func resignFirstResponder() {
        if isFirstResponder { serviceRoot?.setFirstResponder(nil) }
    }

    /// This responder became, or stopped being, the first responder.
    open func firstResponderChanged() {}
}

extension KeyEvent {
    /// Whether no command modifier (control, alt, meta) is held: Tab, Return and Space with one
    /// are shortcuts, not the keys themselves.
    var isPlain: Bool { modifiers.isDisjoint(with: [.control, .alt, .meta]) }
}
