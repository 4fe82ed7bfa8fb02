/// One line of editable text (`UITextField`): a press makes it the first responder and places
/// the caret; dragging selects; typed text replaces the selection; backspace, delete, the
/// arrows (with shift to select), home and end edit and move; return runs ``onReturn``.
///
/// Positions are in characters (grapheme clusters). The caret does not blink (a blink would
/// cost the host a frame twice a second for nothing).
@MainActor
open class TextField: View {
    public var text: String {
        didSet {
            guard text != oldValue else { return }
            let count = text.count
            selection = min(selection.lowerBound, count)..<min(selection.upperBound, count)
            anchor = min(anchor, count)
            setNeedsDisplay()
        }
    }
    public var placeholder: String { didSet { if placeholder != oldValue { setNeedsDisplay() } } }
    public var font: Font { didSet { if font != oldValue { setNeedsDisplay(); invalidateContainerLayout() } } }
    /// The selected characters; empty: the caret is at its bound.
    public var selection: Range<Int> = 0..<0 { didSet { if selection != oldValue { setNeedsDisplay() } } }
    /// Runs after each edit, with the new text.
    public var onChange: (@MainActor (TextField) -> Void)?
    /// Runs when return is pressed.
    public var onReturn: (@MainActor (TextField) -> Void)?
    /// Where a drag started (the selection's fixed end).
    private var anchor = 0
    private let padding = 8.0

    public init(text: String = "", placeholder: String = "", font: Font = .body) {
        self.text = text
        self.placeholder = placeholder
        self.font = font
        super.init()
        cornerRadius = 6
        selection = text.count..<text.count
    }

    open override var canBecomeFirstResponder: Bool { true }

    /// A text field, called by its placeholder (give it an ``View/accessibilityLabel`` when it has
    /// none), holding its text; its value can be set.
    open override func describeAccessibility(_ node: inout AccessibilityNodeDescription) {
        super.describeAccessibility(&node)
        node.role = .textField
        node.label = placeholder
        node.value = text
        node.states.insert(.editable)
        node.actions.insert(.setValue)
    }

    /// Set value replaces the text (the caret goes to its end), as typing it would: ``onChange``
    /// hears of it. Press focuses the field.
    open override func performAccessibilityAction(_ action: AccessibilityAction) -> Bool {
        switch action {
        case .setText(let newText):
            guard isVisibleInTree else { return false }
            text = newText
            anchor = text.count
            selection = text.count..<text.count
            onChange?(self)
            return true
        case .press:
            return isVisibleInTree && becomeFirstResponder()
        default:
            return super.performAccessibilityAction(action)
        }
    }

    open override func firstResponderChanged() { setNeedsDisplay() }

    private var scaledFont: Font { font.scaled(by: traits.fontScale) }

    open override func sizeThatFits(_ size: Size) -> Size {
        Size(width: size.width, height: (TextMeasure.lineMetrics(scaledFont).lineHeight + 2 * padding).rounded(.up))
    }

    /// The text as Pango lays it out (shaped, in visual order).
    private var textLayout: TextLayout { TextLayout.make(text, font: scaledFont) }

    /// Where the text starts, in the field's points: at its leading edge, the left for
    /// left-to-right text and the right for right-to-left (an Arabic note starts at the right).
    private var textOrigin: Double {
        let layout = text.isEmpty ? TextLayout.make(placeholder, font: scaledFont) : textLayout
        guard layout.isRightToLeft else { return padding }
        return max(padding, bounds.width - padding - layout.size.width)
    }

    /// The x (in the field's points) of the caret before character `index` (Pango's strong
    /// cursor: in right-to-left text it stands right of the character).
    func offset(ofCharacter index: Int) -> Double {
        textOrigin + textLayout.caretX(beforeCharacter: index)
    }

    /// The character boundary nearest `x`, where a click at `x` lands (Pango's `xy_to_index`,
    /// so mixed-direction text is right).
    func characterIndex(at x: Double) -> Int {
        textLayout.characterIndex(atX: x - textOrigin)
    }

    open override func draw(in context: GraphicsContext) {
        let traits = self.traits, font = scaledFont
        context.fillRoundedRect(bounds, radius: cornerRadius, with: traits.fillColor)
        let metrics = TextMeasure.lineMetrics(font)
        let top = ((bounds.height - metrics.lineHeight) / 2).rounded()
        let baseline = top + metrics.ascent
        if text.isEmpty {
            context.draw(placeholder, at: Point(x: textOrigin, y: baseline), font: font, color: traits.secondaryColor)
        }
        let focused = isFirstResponder && (serviceRoot?.isFocused ?? false)
        if isFirstResponder, !selection.isEmpty {
            // The selected characters where they are drawn: in mixed-direction text, pieces.
            for piece in textLayout.xRanges(ofCharacters: selection) {
                context.fill(Rect(x: textOrigin + piece.minX, y: top, width: piece.maxX - piece.minX, height: metrics.lineHeight),
                             with: traits.tint.withAlpha(focused ? 0.35 : 0.15))
            }
        }
        context.draw(text, at: Point(x: textOrigin, y: baseline), font: font, color: traits.textColor)
        if focused, selection.isEmpty {
            let x = offset(ofCharacter: selection.lowerBound).rounded()
            context.fill(Rect(x: x, y: top, width: 2, height: metrics.lineHeight), with: traits.tint)
        }
    }

    open override func pointerDown(_ event: PointerEvent) {
        becomeFirstResponder()
        anchor = characterIndex(at: location(of: event).x)
        selection = anchor..<anchor
    }

    open override func pointerMoved(_ event: PointerEvent) {
        guard event.buttons != 0, isFirstResponder else { return super.pointerMoved(event) }
        let index = characterIndex(at: location(of: event).x)
        selection = min(anchor, index)..<max(anchor, index)
    }

    open override func pointerUp(_ event: PointerEvent) {}

    open override func insertText(_ text: String) {
        replaceSelection(with: text)
    }

    open override func keyDown(_ event: KeyEvent) {
        let count = text.count
        let extend = event.modifiers.contains(.shift)
        switch event.keyCode {
        case KeyCode.backspace:
            if selection.isEmpty, selection.lowerBound > 0 {
                let index = selection.lowerBound
                if textLayout.backspaceDeletesOneScalar(beforeCharacter: index) {
                    // Pango's rule: the last Unicode character alone (an Arabic vowel mark).
                    deleteLastScalar(ofCharacter: index - 1)
                    return
                }
                selection = (index - 1)..<index
            }
            replaceSelection(with: "")
        case KeyCode.delete:
            if selection.isEmpty, selection.upperBound < count { selection = selection.lowerBound..<(selection.upperBound + 1) }
            replaceSelection(with: "")
        case KeyCode.left, KeyCode.right:
            // On screen, as Pango moves a caret through mixed-direction text: in Hebrew, left
            // goes on to the next letter. A selection collapses to its logical end that way.
            let direction = event.keyCode == KeyCode.left ? -1 : 1
            let target: Int
            if selection.isEmpty || extend {
                target = textLayout.characterIndex(movingVisuallyFrom: caret, direction: direction)
            } else {
                let ends = [selection.lowerBound, selection.upperBound].sorted { offset(ofCharacter: $0) < offset(ofCharacter: $1) }
                target = direction < 0 ? ends[0] : ends[1]
            }
            move(to: target, extending: extend)
        case KeyCode.home, KeyCode.end:
            move(to: event.keyCode == KeyCode.home ? 0 : count, extending: extend)
        case KeyCode.a where event.modifiers.contains(.control):
            anchor = 0
            selection = 0..<count
        case KeyCode.enter:
            if let onReturn { onReturn(self) } else { super.keyDown(event) }
        default:
            super.keyDown(event)
        }
    }

    /// The moving end of the selection.
    private var caret: Int { selection.lowerBound == anchor ? selection.upperBound : selection.lowerBound }

    private func move(to index: Int, extending: Bool) {
        if extending {
            selection = min(anchor, index)..<max(anchor, index)
        } else {
            anchor = index
            selection = index..<index
        }
    }

    /// Deletes the last Unicode scalar of character `index` (the whole character when it has
    /// one), and puts the caret after what is left of it.
    private func deleteLastScalar(ofCharacter index: Int) {
        var characters = Array(text)
        guard characters.indices.contains(index) else { return }
        var scalars = Array(characters[index].unicodeScalars)
        scalars.removeLast()
        let rest = String(String.UnicodeScalarView(scalars))
        characters.replaceSubrange(index...index, with: Array(rest))
        let before = String(characters[..<index]) + rest
        text = String(characters)
        let caret = min(before.count, text.count)
        anchor = caret
        selection = caret..<caret
        onChange?(self)
    }

    /// Replaces the selection with `replacement` and puts the caret after it.
    public func replaceSelection(with replacement: String) {
        var characters = Array(text)
        let range = min(selection.lowerBound, characters.count)..<min(selection.upperBound, characters.count)
        let before = String(characters[..<range.lowerBound]) + replacement
        characters.replaceSubrange(range, with: Array(replacement))
        text = String(characters)
        // Counted again: a combining mark, or half a flag, joins the character before it.
        let caret = min(before.count, text.count)
        anchor = caret
        selection = caret..<caret
        onChange?(self)
    }
}
