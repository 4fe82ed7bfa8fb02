/// Text, one line or wrapped (`UILabel`).
@MainActor
open class Label: View {
    public var text: String { didSet { if text != oldValue { contentChanged() } } }
    /// The font at the author's size; the host's font scale applies on top.
    public var font: Font { didSet { if font != oldValue { contentChanged() } } }
    /// `nil`: the traits' text colour (dark on light, light on dark).
    public var textColor: Color? { didSet { if textColor != oldValue { setNeedsDisplay() } } }
    public var alignment: TextAlignment { didSet { if alignment != oldValue { setNeedsDisplay() } } }
    /// The most lines (0: as many as the text needs); text wraps at spaces when it is not 1.
    public var numberOfLines: Int { didSet { if numberOfLines != oldValue { contentChanged() } } }

    public init(text: String = "", font: Font = .body, textColor: Color? = nil, alignment: TextAlignment = .left, numberOfLines: Int = 1) {
        self.text = text
        self.font = font
        self.textColor = textColor
        self.alignment = alignment
        self.numberOfLines = numberOfLines
        super.init()
    }

    /// The font as drawn: the author's, times the host's font scale.
    public var scaledFont: Font { font.scaled(by: traits.fontScale) }

    /// The colour text is drawn in.
    public var resolvedTextColor: Color { textColor ?? traits.textColor }

    private func contentChanged() {
        setNeedsDisplay()
        invalidateContainerLayout()
    }

    /// The lines drawn within `width`.
    func lines(within width: Double) -> [String] {
        numberOfLines == 1 ? [text] : TextMeasure.lines(of: text, font: scaledFont, width: width, maxLines: numberOfLines)
    }

    open override func sizeThatFits(_ size: Size) -> Size {
        let font = scaledFont
        let lines = lines(within: size.width)
        let widest = lines.map { TextMeasure.width(of: $0, font: font) }.max() ?? 0
        let metrics = TextMeasure.lineMetrics(font)
        return Size(width: min(size.width, widest.rounded(.up)), height: (metrics.lineHeight * Double(max(lines.count, 1))).rounded(.up))
    }

    open override func draw(in context: GraphicsContext) {
        let font = scaledFont, color = resolvedTextColor
        let metrics = TextMeasure.lineMetrics(font)
        let lines = lines(within: bounds.width)
        // Vertically centred as a block.
        var baseline = ((bounds.height - metrics.lineHeight * Double(lines.count)) / 2).rounded() + metrics.ascent
        for line in lines {
            let width = TextMeasure.width(of: line, font: font)
            let x: Double = switch alignment {
            case .left: 0
            case .center: ((bounds.width - width) / 2).rounded()
            case .right: bounds.width - width
            }
            context.draw(line, at: Point(x: x, y: baseline), font: font, color: color)
            baseline += metrics.lineHeight
        }
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
}
