import CPango

/// Measures text the way ``GraphicsContext/draw(_:at:font:color:)`` draws it: both lay it out
/// with Pango (``Font``).
@MainActor
public enum TextMeasure {
    /// The advance width of `text` on one line, in points.
    public static func width(of text: String, font: Font) -> Double {
        guard !text.isEmpty else { return 0 }
        return TextLayout.make(text, font: font).size.width
    }

    /// How many glyphs of `text` no installed font has (drawn as boxes): 0 when every
    /// character is covered, by `font` or by a fallback font. For checking a machine's, or a
    /// sandbox's, fonts.
    public static func missingGlyphs(in text: String, font: Font) -> Int {
        TextLayout.make(text, font: font).unknownGlyphs
    }

    private static var metricsCache: [Font: (ascent: Double, descent: Double, lineHeight: Double)] = [:]

    /// Ascent (above the baseline), descent (below it) and line height, in points, of the font
    /// Pango picks for `font` (for its language).
    public static func lineMetrics(_ font: Font) -> (ascent: Double, descent: Double, lineHeight: Double) {
        if let cached = metricsCache[font] { return cached }
        let description = font.makePangoDescription()
        defer { rv_pango_font_description_free(description) }
        let language = font.language.map { rv_pango_language_from_string($0) } ?? rv_pango_language_get_default()
        let metrics = rv_pango_context_get_metrics(TextLayout.context, description, language)
        defer { rv_pango_font_metrics_unref(metrics) }
        let ascent = Double(rv_pango_font_metrics_get_ascent(metrics)) / TextLayout.scale
        let descent = Double(rv_pango_font_metrics_get_descent(metrics)) / TextLayout.scale
        let height = Double(rv_pango_font_metrics_get_height(metrics)) / TextLayout.scale
        let result = (ascent, descent, max(height, ascent + descent))
        if metricsCache.count >= TextLayout.cacheLimit { metricsCache.removeAll() }
        metricsCache[font] = result
        return result
    }

    /// `text` broken into lines no wider than `width` by Pango's rules (UAX #14: at spaces and
    /// where a script allows, a word longer than a line between characters), at most
    /// `maxLines` of them (0: no limit; the last one ends in "…" when text was cut). Explicit
    /// newlines always break.
    public static func lines(of text: String, font: Font, width: Double, maxLines: Int = 0) -> [String] {
        var lines = TextLayout.make(text, font: font, width: width).lines
        // A text that ends in a newline has no line after it to show.
        if text.hasSuffix("\n"), lines.count > 1, lines.last == "" { lines.removeLast() }
        guard maxLines > 0, lines.count > maxLines else { return lines }
        lines.removeLast(lines.count - maxLines)
        return lines.dropLast() + [ellipsized(lines.last ?? "", font: font, width: width)]
    }

    /// `line` cut short to end in "…" within `width`: the most characters that fit (a binary
    /// search, measured without filling the layout cache).
    static func ellipsized(_ line: String, font: Font, width: Double) -> String {
        let characters = Array(line)
        var low = 0, high = characters.count  // low fits (with "…"), above high does not
        while low < high {
            let middle = (low + high + 1) / 2
            if TextLayout.uncached(String(characters[..<middle]) + "…", font: font).size.width <= width { low = middle } else { high = middle - 1 }
        }
        return String(characters[..<low]) + "…"
    }
}
