/// A tappable button with a title (`UIButton`): highlighted while pressed, its action runs when
/// the press ends inside it.
///
/// From the keyboard: Tab gives an enabled button the focus (a click presses it without giving it
/// the focus); then Return presses it, and so does Space (on its release, as GTK's and the
/// web's buttons do). A ``ViewController`` may name one its ``ViewController/defaultActionButton``
/// (Return) and one its ``ViewController/cancelActionButton`` (Escape).
@MainActor
open class Button: View {
    /// What the button looks like now.
    public enum State: Sendable, Hashable {
        case normal, highlighted, disabled
    }

    public var title: String { didSet { if title != oldValue { setNeedsDisplay(); invalidateContainerLayout() } } }
    public var font: Font { didSet { if font != oldValue { setNeedsDisplay(); invalidateContainerLayout() } } }
    /// `nil`: the traits' tint.
    public var tintColor: Color? { didSet { if tintColor != oldValue { setNeedsDisplay() } } }
    /// Runs when a press ends inside the button.
    public var action: (@MainActor (Button) -> Void)?
    /// A disabled button is drawn faded and ignores presses (they go nowhere).
    public var isEnabled = true {
        didSet {
            guard isEnabled != oldValue else { return }
            setNeedsDisplay()
            // A disabled button cannot keep the focus: it would take keys it ignores.
            if !isEnabled { resignFirstResponder() }
        }
    }
    public private(set) var isHighlighted = false { didSet { if isHighlighted != oldValue { setNeedsDisplay() } } }
    /// Whether a press began on the button and has not ended.
    private var tracking = false

    public init(title: String, font: Font = Font(size: 15, weight: .bold), action: (@MainActor (Button) -> Void)? = nil) {
        self.title = title
        self.font = font
        self.action = action
        super.init()
        cornerRadius = 8
    }

    public var state: State { !isEnabled ? .disabled : isHighlighted ? .highlighted : .normal }

    /// An enabled button takes the keyboard focus (by Tab).
    open override var canBecomeFirstResponder: Bool { isEnabled }

    /// Whether a key may press it now: enabled, in a view on screen, and neither it nor a view
    /// above it hidden or with user interaction off.
    public var isPressable: Bool {
        isEnabled && serviceRoot != nil && isVisibleInTree
    }

    /// Space pressed on the focused button (it acts on release).
    private var spaceHeld = false

    open override func keyDown(_ event: KeyEvent) {
        let plain = event.isPlain
        switch event.keyCode {
        case KeyCode.enter where plain:
            if !event.isRepeat, isPressable { sendAction() }
        case KeyCode.space where plain:
            // A repeat arms nothing: Space was held before the focus came here.
            guard isPressable, !event.isRepeat else { return }
            spaceHeld = true
            isHighlighted = true
        default:
            super.keyDown(event)
        }
    }

    open override func keyUp(_ event: KeyEvent) {
        guard event.keyCode == KeyCode.space, spaceHeld else { return super.keyUp(event) }
        spaceHeld = false
        isHighlighted = false
        if isPressable { sendAction() }
    }

    /// Space was held when the view lost the host's focus: no release will come, so no press.
    func cancelKeyPress() {
        guard spaceHeld else { return }
        spaceHeld = false
        isHighlighted = false
    }

    open override func firstResponderChanged() {
        // Focus moved away with Space held: no press.
        if !isFirstResponder, spaceHeld {
            spaceHeld = false
            isHighlighted = false
        }
    }

    open override func sizeThatFits(_ size: Size) -> Size {
        let font = self.font.scaled(by: traits.fontScale)
        let metrics = TextMeasure.lineMetrics(font)
        return Size(width: min(size.width, (TextMeasure.width(of: title, font: font) + 32).rounded(.up)),
                    height: (metrics.lineHeight + 16).rounded(.up))
    }

    open override func draw(in context: GraphicsContext) {
        let tint = tintColor ?? traits.tint
        let fill: Color = switch state {
        case .normal: tint
        case .highlighted: Color(red: tint.red * 0.7, green: tint.green * 0.7, blue: tint.blue * 0.7, alpha: tint.alpha)
        case .disabled: tint.withAlpha(0.35)
        }
        context.fillRoundedRect(bounds, radius: cornerRadius, with: fill)
        let font = self.font.scaled(by: traits.fontScale)
        let metrics = TextMeasure.lineMetrics(font)
        let width = TextMeasure.width(of: title, font: font)
        let baseline = ((bounds.height - metrics.lineHeight) / 2).rounded() + metrics.ascent
        context.draw(title, at: Point(x: ((bounds.width - width) / 2).rounded(), y: baseline), font: font, color: .white)
    }

    open override func pointerDown(_ event: PointerEvent) {
        guard isEnabled else { return }
        tracking = true
        isHighlighted = true
    }

    open override func pointerMoved(_ event: PointerEvent) {
        guard tracking else { return super.pointerMoved(event) }
        isHighlighted = isEnabled && bounds.contains(location(of: event))
    }

    open override func pointerUp(_ event: PointerEvent) {
        let wasTracking = tracking
        tracking = false
        isHighlighted = false
        if wasTracking, isEnabled, bounds.contains(location(of: event)) { action?(self) }
    }

    /// Runs the action as a press would.
    public func sendAction() { action?(self) }

    /// A button called by its title (give one without a title an ``View/accessibilityLabel``),
    /// pressable while enabled.
    open override func describeAccessibility(_ node: inout AccessibilityNodeDescription) {
        super.describeAccessibility(&node)
        node.role = .button
        node.label = title
        if isEnabled { node.actions.insert(.press) } else { node.states.insert(.disabled) }
    }

    /// Press runs the action, as a click does, while the button is enabled and shown.
    open override func performAccessibilityAction(_ action: AccessibilityAction) -> Bool {
        if case .press = action {
            guard isEnabled, isVisibleInTree else { return false }
            sendAction()
            return true
        }
        return super.performAccessibilityAction(action)
    }
}
