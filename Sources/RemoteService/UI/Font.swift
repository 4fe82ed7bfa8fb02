import CCairo

/// A font: a fontconfig family, a size in points and a weight. Text is drawn with Cairo.
public struct Font: Sendable, Hashable {
    /// How heavy the strokes are.
    public enum Weight: Sendable, Hashable {
        case regular, bold
    }

    /// A fontconfig family name or pattern, e.g. "DejaVu Sans" or "sans-serif".
    public var family: String
    /// Points.
    public var size: Double
    public var weight: Weight

    public init(family: String = Font.defaultFamily, size: Double, weight: Weight = .regular) {
        self.family = family
        self.size = size
        self.weight = weight
    }

    /// The family the toolkit uses when none is named (Debian's `fonts-dejavu-core`).
    public static let defaultFamily = "DejaVu Sans"

    /// The body font.
    public static let body = Font(size: 15)
    /// Headlines.
    public static let headline = Font(size: 20, weight: .bold)
    /// Small print.
    public static let caption = Font(size: 12)

    /// This font at `factor` times its size (the host's font scale).
    public func scaled(by factor: Double) -> Font {
        Font(family: family, size: size * factor, weight: weight)
    }

    /// Sets this font on a Cairo context. Metrics are not hinted, so text measures the same at
    /// every scale (what ``TextMeasure`` says is where it is drawn).
    func apply(to cairo: OpaquePointer) {
        cairo_select_font_face(cairo, family, CAIRO_FONT_SLANT_NORMAL, weight == .bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL)
        cairo_set_font_size(cairo, size)
        let options = cairo_font_options_create()
        cairo_font_options_set_hint_metrics(options, CAIRO_HINT_METRICS_OFF)
        cairo_set_font_options(cairo, options)
        cairo_font_options_destroy(options)
    }
}

/// How text lines up in its box.
public enum TextAlignment: Sendable, Hashable {
    case left, center, right
}
