/// Text, one line or wrapped (`UILabel`).
@MainActor
open class Label: View {
    public var text: String { didSet { if text != oldValue { contentChanged() } } }
    /// The font at the author's size; the host's font scale applies on top.
    public var font: Font { didSet { if font != oldValue { contentChanged() } } }
    /// `nil`: the traits' text colour (dark on light, light on dark).
    public var textColor: Color? { didSet { if textColor != oldValue { setNeedsDisplay() } } }
    public var alignment: TextAlignment { didSet { if alignment != oldValue { setNeedsDisplay() } } }
    /// The most lines (0: as many as the text needs). One line is the first paragraph,
    /// ellipsized where it does not fit; more wrap by Pango's rules, the last ellipsized.
    public var numberOfLines: Int { didSet { if numberOfLines != oldValue { contentChanged() } } }

    public init(text: String = "", font: Font = .body, textColor: Color? = nil, alignment: TextAlignment = .natural, numberOfLines: Int = 1) {
        self.text = text
        self.font = font
        self.textColor = textColor
        self.alignment = alignment
        self.numberOfLines = numberOfLines
        super.init()
    }

    /// A label, called by its text.
    open override func describeAccessibility(_ node: inout AccessibilityNodeDescription) {
        super.describeAccessibility(&node)
        node.role = .label
        node.label = text
        if numberOfLines != 1 { node.states.insert(.multiLine) }
    }

    /// The font as drawn: the author's, times the host's font scale.
    public var scaledFont: Font { font.scaled(by: traits.fontScale) }

    /// The colour text is drawn in.
    public var resolvedTextColor: Color { textColor ?? traits.textColor }

    private func contentChanged() {
        setNeedsDisplay()
        invalidateContainerLayout()
    }

    /// The lines drawn within `width`: broken by Pango's rules, at most ``numberOfLines`` of
    /// them (0: all), the last ending in "…" when the text was cut.
    func lines(within width: Double) -> [String] {
        TextMeasure.lines(of: text, font: scaledFont, width: max(width, 1), maxLines: numberOfLines)
    }

    /// The layout drawn within `width`. One line: the first paragraph, ellipsized by Pango where
    /// it does not fit. Several: the text wrapped, and when it needs more than
    /// ``numberOfLines``, the text up to the last line shown (so every line keeps its
    /// paragraph's direction), that line cut short, and "…".
    private func layout(within width: Double) -> TextLayout {
        let font = scaledFont, width = max(width, 1)
        if numberOfLines == 1 {
            let first = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
            let line = first.count > 1 && !first[1].isEmpty ? String(first[0]) + "…" : String(first[0])
            return TextLayout.make(line, font: font, width: width, alignment: alignment, ellipsized: true)
        }
        let whole = TextLayout.make(text, font: font, width: width, alignment: alignment)
        guard numberOfLines > 0, whole.lineCount > numberOfLines else { return whole }
        let lastStart = whole.lineStarts[numberOfLines - 1]
        let head = String(decoding: Array(text.utf8)[..<lastStart], as: UTF8.self)
        let last = lines(within: width).last ?? "…"
        return TextLayout.make(head + last, font: font, width: width, alignment: alignment)
    }

    open override func sizeThatFits(_ size: Size) -> Size {
        guard !text.isEmpty else { return Size(width: 0, height: TextMeasure.lineMetrics(scaledFont).lineHeight.rounded(.up)) }
        let laid = layout(within: size.width).size
        return Size(width: min(size.width, laid.width.rounded(.up)), height: laid.height.rounded(.up))
    }

    open override func draw(in context: GraphicsContext) {
        guard !text.isEmpty else { return }
        let layout = layout(within: bounds.width)
        // Vertically centred as a block; each line aligned in the width by Pango.
        let top = ((bounds.height - layout.size.height) / 2).rounded()
        context.draw(layout, at: Point(x: 0, y: top), color: resolvedTextColor)
    }
}

extension Traits {
    /// Text on the view's background: near black in light style, near white in dark.
    public var textColor: Color { style == .dark ? Color(argb: 0xFFF2_F2F7) : Color(argb: 0xFF1C_1C1E) }
    /// The background of a screen.
    public var backgroundColor: Color { style == .dark ? Color(argb: 0xFF1C_1C1E) : Color(argb: 0xFFFF_FFFF) }
    /// Secondary text and outlines.
    public var secondaryColor: Color { style == .dark ? Color(argb: 0xFF8E_8E93) : Color(argb: 0xFF6C_6C70) }
    /// Tracks and field backgrounds.
    public var fillColor: Color { style == .dark ? Color(argb: 0xFF3A_3A3C) : Color(argb: 0xFFE5_E5EA) }
    /// The ring around the control that has the keyboard focus: the tint, a little lighter.
    public var focusRingColor: Color { tint.withAlpha(0.7) }
}
