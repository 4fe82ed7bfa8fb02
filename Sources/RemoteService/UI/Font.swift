import CPango

/// A font: a family (or a list of them), a size in points, a weight, and optionally the language
/// of the text, as Pango matches it through fontconfig. A character the family lacks is drawn in
/// another font that has it (fallback), never as a box when any installed font has it.
///
/// ```swift
/// Font(size: 15)                                   // the toolkit's family
/// Font(family: "Noto Sans CJK JP, sans-serif", size: 14)
/// Font(family: "sans-serif:lang=ja", size: 14)     // a fontconfig-style language: Japanese glyph forms
/// Font(description: "Noto Sans CJK JP Bold 14")    // a Pango font description
/// ```
public struct Font: Sendable, Hashable {
    /// How heavy the strokes are.
    public enum Weight: Sendable, Hashable {
        case regular, bold
    }

    /// A family name, or a comma-separated list tried in order ("DejaVu Sans", "sans-serif",
    /// "Noto Sans CJK JP, sans-serif").
    public var family: String
    /// Points.
    public var size: Double
    public var weight: Weight
    /// The language of the text, as an RFC 3066 tag ("ja", "ar", "zh-TW"), when the family
    /// should be matched for it (Han characters differ between Japanese and Chinese fonts);
    /// `nil`: Pango's default language, the process's locale's (a sandboxed service runs with a
    /// cleared environment, so that is C, and fontconfig's own order applies).
    public var language: String?

    /// A font of `family`. A fontconfig-style `:lang=` suffix ("sans-serif:lang=ja") sets
    /// ``language``; other fontconfig properties in a pattern are ignored (use ``weight``).
    public init(family: String = Font.defaultFamily, size: Double, weight: Weight = .regular, language: String? = nil) {
        var family = family, language = language
        if let colon = family.firstIndex(of: ":") {
            let properties = family[family.index(after: colon)...].split(separator: ":")
            for property in properties where property.hasPrefix("lang=") {
                language = language ?? String(property.dropFirst("lang=".count))
            }
            family = String(family[..<colon])
        }
        self.family = family.isEmpty ? Font.defaultFamily : family
        self.size = size
        self.weight = weight
        self.language = language
    }

    /// A font from a Pango font description: families, then style words, then a size in points
    /// ("Noto Sans CJK JP Bold 14", "DejaVu Sans 12"). Weights from semi-bold up are bold; a
    /// description without a size gets `defaultSize`.
    @MainActor
    public init(description: String, defaultSize: Double = 15) {
        let parsed = rv_pango_font_description_from_string(description)
        defer { rv_pango_font_description_free(parsed) }
        let family = rv_pango_font_description_get_family(parsed).map { String(cString: $0) } ?? Font.defaultFamily
        let set = rv_pango_font_description_get_set_fields(parsed)
        let size = set & RV_PANGO_FONT_MASK_SIZE != 0 ? Double(rv_pango_font_description_get_size(parsed)) / TextLayout.scale : defaultSize
        let weight: Weight = rv_pango_font_description_get_weight(parsed) >= RV_PANGO_WEIGHT_SEMIBOLD ? .bold : .regular
        self.init(family: family, size: size, weight: weight)
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
        var scaled = self
        scaled.size = size * factor
        return scaled
    }

    /// A new `PangoFontDescription` of this font; the caller frees it.
    func makePangoDescription() -> OpaquePointer {
        let description = rv_pango_font_description_new()!
        rv_pango_font_description_set_family(description, family)
        rv_pango_font_description_set_size(description, TextLayout.units(size.isFinite ? max(size, 0) : 0))
        rv_pango_font_description_set_weight(description, weight == .bold ? RV_PANGO_WEIGHT_BOLD : RV_PANGO_WEIGHT_NORMAL)
        return description
    }
}

/// How text lines up in its box.
public enum TextAlignment: Sendable, Hashable {
    /// The leading edge of each paragraph's direction: left for left-to-right text, right for
    /// right-to-left (Arabic, Hebrew). The default.
    case natural
    /// The view's left edge, whatever the direction.
    case left
    case center
    /// The view's right edge, whatever the direction.
    case right
}
