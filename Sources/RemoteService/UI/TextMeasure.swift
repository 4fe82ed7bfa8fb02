import CCairo
import Glibc

/// Measures text the way ``GraphicsContext/draw(_:at:font:color:)`` draws it.
@MainActor
public enum TextMeasure {
    /// A context on a 1×1 surface, only ever asked for metrics.
    private static let scratch: OpaquePointer = {
        let surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, 1)
        defer { cairo_surface_destroy(surface) }
        return cairo_create(surface)!
    }()

    /// The advance width of `text`, in points.
    public static func width(of text: String, font: Font) -> Double {
        guard !text.isEmpty else { return 0 }
        font.apply(to: scratch)
        var extents = cairo_text_extents_t()
        cairo_text_extents(scratch, text, &extents)
        return extents.x_advance
    }

    /// Ascent (above the baseline), descent (below it) and line height, in points.
    public static func lineMetrics(_ font: Font) -> (ascent: Double, descent: Double, lineHeight: Double) {
        font.apply(to: scratch)
        var extents = cairo_font_extents_t()
        cairo_font_extents(scratch, &extents)
        return (extents.ascent, extents.descent, max(extents.height, extents.ascent + extents.descent))
    }

    /// `text` broken into lines no wider than `width` (at spaces; a word longer than a line is
    /// broken between characters), at most `maxLines` of them (0: no limit; the last one ends
    /// in "…" when text was cut). Explicit newlines always break.
    public static func lines(of text: String, font: Font, width: Double, maxLines: Int = 0) -> [String] {
        var lines: [String] = []
        for paragraph in text.split(separator: "\n", omittingEmptySubsequences: false) {
            var line = ""
            for word in paragraph.split(separator: " ", omittingEmptySubsequences: false) {
                let candidate = line.isEmpty ? String(word) : line + " " + word
                if Self.width(of: candidate, font: font) <= width || line.isEmpty && word.isEmpty {
                    line = candidate
                    continue
                }
                if !line.isEmpty { lines.append(line) }
                // The word alone: broken between characters if it is wider than a line.
                line = ""
                for character in word {
                    if !line.isEmpty && Self.width(of: line + String(character), font: font) > width {
                        lines.append(line)
                        line = ""
                    }
                    line.append(character)
                }
            }
            lines.append(line)
            if maxLines > 0 && lines.count > maxLines { break }  // enough to know it is cut
        }
        guard maxLines > 0, lines.count > maxLines else { return lines }
        lines.removeLast(lines.count - maxLines)
        var cut = lines.removeLast()
        while !cut.isEmpty && Self.width(of: cut + "…", font: font) > width { cut.removeLast() }
        return lines + [cut + "…"]
    }
}
