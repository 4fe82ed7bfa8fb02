import CCairo
import Glibc

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

/// A decoded image (premultiplied ARGB32), drawn by ``ImageView`` and
/// ``GraphicsContext/draw(_:in:)``. Immutable.
public final class Image: @unchecked Sendable {
    // @unchecked: the Cairo surface is never drawn into after it is decoded, only read.
    let surface: OpaquePointer
    /// Pixels.
    public let width: Int
    public let height: Int

    private init(checking surface: OpaquePointer, _ what: String) throws(RemoteError) {
        let status = cairo_surface_status(surface)
        guard status == CAIRO_STATUS_SUCCESS else {
            cairo_surface_destroy(surface)
            throw RemoteError(.invalidArgument, "cannot read \(what) as a PNG: \(String(cString: cairo_status_to_string(status)))")
        }
        self.surface = surface
        width = Int(cairo_image_surface_get_width(surface))
        height = Int(cairo_image_surface_get_height(surface))
    }

    /// Reads the PNG at `path`.
    ///
    /// - Throws: ``RemoteError`` `invalidArgument` naming the path and what was wrong.
    public convenience init(contentsOfPNG path: String) throws(RemoteError) {
        try self.init(checking: cairo_image_surface_create_from_png(path), path)
    }

    /// Decodes PNG bytes (e.g. a shared item's contents).
    ///
    /// - Throws: ``RemoteError`` `invalidArgument` when the bytes are not a PNG Cairo can read.
    public convenience init(pngData: [UInt8]) throws(RemoteError) {
        final class Reader {
            let bytes: [UInt8]
            var offset = 0
            init(_ bytes: [UInt8]) { self.bytes = bytes }
        }
        let reader = Reader(pngData)
        let surface = withExtendedLifetime(reader) {
            cairo_image_surface_create_from_png_stream({ closure, data, length in
                let reader = Unmanaged<Reader>.fromOpaque(closure!).takeUnretainedValue()
                let count = Int(length)
                guard reader.bytes.count - reader.offset >= count else { return CAIRO_STATUS_READ_ERROR }
                reader.bytes.withUnsafeBytes { source in
                    UnsafeMutableRawPointer(data!).copyMemory(from: source.baseAddress! + reader.offset, byteCount: count)
                }
                reader.offset += count
                return CAIRO_STATUS_SUCCESS
            }, Unmanaged.passUnretained(reader).toOpaque())!
        }
        try self.init(checking: surface, "\(pngData.count) bytes")
    }

    deinit { cairo_surface_destroy(surface) }
}

/// How text lines up in its box.
public enum TextAlignment: Sendable, Hashable {
    case left, center, right
}

extension GraphicsContext {
    /// Paints `color` over `rect` (blending with what is there).
    public func fill(_ rect: Rect, with color: Color) {
        cairo_save(cairo)
        cairo_set_source_rgba(cairo, color.red, color.green, color.blue, color.alpha)
        cairo_rectangle(cairo, rect.minX, rect.minY, rect.width, rect.height)
        cairo_fill(cairo)
        cairo_restore(cairo)
    }

    /// Paints `color` over `rect` with corners of `radius`.
    public func fillRoundedRect(_ rect: Rect, radius: Double, with color: Color) {
        cairo_save(cairo)
        roundedRectPath(rect, radius: radius)
        cairo_set_source_rgba(cairo, color.red, color.green, color.blue, color.alpha)
        cairo_fill(cairo)
        cairo_restore(cairo)
    }

    /// Outlines `rect` (with corners of `radius`) with a line `width` points wide, inside it.
    public func strokeRoundedRect(_ rect: Rect, radius: Double = 0, width: Double = 1, color: Color) {
        cairo_save(cairo)
        roundedRectPath(rect.inset(by: EdgeInsets(all: width / 2)), radius: max(0, radius - width / 2))
        cairo_set_line_width(cairo, width)
        cairo_set_source_rgba(cairo, color.red, color.green, color.blue, color.alpha)
        cairo_stroke(cairo)
        cairo_restore(cairo)
    }

    /// A straight line.
    public func strokeLine(from start: Point, to end: Point, width: Double = 1, color: Color) {
        cairo_save(cairo)
        cairo_move_to(cairo, start.x, start.y)
        cairo_line_to(cairo, end.x, end.y)
        cairo_set_line_width(cairo, width)
        cairo_set_source_rgba(cairo, color.red, color.green, color.blue, color.alpha)
        cairo_stroke(cairo)
        cairo_restore(cairo)
    }

    /// Paints an ellipse filling `rect`.
    public func fillEllipse(in rect: Rect, with color: Color) {
        guard !rect.isEmpty else { return }
        cairo_save(cairo)
        cairo_translate(cairo, rect.midX, rect.midY)
        cairo_scale(cairo, rect.width / 2, rect.height / 2)
        cairo_arc(cairo, 0, 0, 1, 0, 2 * Double.pi)
        cairo_restore(cairo)
        cairo_save(cairo)
        cairo_set_source_rgba(cairo, color.red, color.green, color.blue, color.alpha)
        cairo_fill(cairo)
        cairo_restore(cairo)
    }

    /// Draws one line of `text` with its baseline starting at `point`.
    public func draw(_ text: String, at point: Point, font: Font, color: Color) {
        guard !text.isEmpty else { return }
        cairo_save(cairo)
        font.apply(to: cairo)
        cairo_set_source_rgba(cairo, color.red, color.green, color.blue, color.alpha)
        cairo_move_to(cairo, point.x, point.y)
        cairo_show_text(cairo, text)
        cairo_restore(cairo)
    }

    /// Draws `image` scaled to fill `rect`.
    public func draw(_ image: Image, in rect: Rect) {
        guard !rect.isEmpty, image.width > 0, image.height > 0 else { return }
        cairo_save(cairo)
        cairo_translate(cairo, rect.minX, rect.minY)
        cairo_scale(cairo, rect.width / Double(image.width), rect.height / Double(image.height))
        cairo_set_source_surface(cairo, image.surface, 0, 0)
        cairo_pattern_set_filter(cairo_get_source(cairo), CAIRO_FILTER_GOOD)
        cairo_rectangle(cairo, 0, 0, Double(image.width), Double(image.height))
        cairo_fill(cairo)
        cairo_restore(cairo)
    }

    /// Runs `body` and then puts back the transform and clip as they were.
    public func withSavedState(_ body: () -> Void) {
        cairo_save(cairo)
        body()
        cairo_restore(cairo)
    }

    /// Moves the origin by (`x`, `y`) points.
    public func translate(x: Double, y: Double) { cairo_translate(cairo, x, y) }

    /// Scales what follows by `factor` (points to pixels, for the toolkit).
    func scale(by factor: Double) { cairo_scale(cairo, factor, factor) }

    /// Limits what follows to `rect` (with corners of `radius`).
    public func clip(to rect: Rect, radius: Double = 0) {
        roundedRectPath(rect, radius: radius)
        cairo_clip(cairo)
    }

    /// Replaces everything in `rect` (alpha included) with `color`.
    func clear(_ rect: Rect, to color: Color) {
        cairo_save(cairo)
        cairo_set_operator(cairo, CAIRO_OPERATOR_SOURCE)
        cairo_set_source_rgba(cairo, color.red, color.green, color.blue, color.alpha)
        cairo_rectangle(cairo, rect.minX, rect.minY, rect.width, rect.height)
        cairo_fill(cairo)
        cairo_restore(cairo)
    }

    private func roundedRectPath(_ rect: Rect, radius: Double) {
        let r = min(max(radius, 0), rect.width / 2, rect.height / 2)
        guard r > 0 else {
            cairo_rectangle(cairo, rect.minX, rect.minY, rect.width, rect.height)
            return
        }
        cairo_new_sub_path(cairo)
        cairo_arc(cairo, rect.maxX - r, rect.minY + r, r, -Double.pi / 2, 0)
        cairo_arc(cairo, rect.maxX - r, rect.maxY - r, r, 0, Double.pi / 2)
        cairo_arc(cairo, rect.minX + r, rect.maxY - r, r, Double.pi / 2, Double.pi)
        cairo_arc(cairo, rect.minX + r, rect.minY + r, r, Double.pi, 3 * Double.pi / 2)
        cairo_close_path(cairo)
    }
}
