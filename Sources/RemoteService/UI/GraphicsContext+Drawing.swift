import CCairo
import Glibc

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

    /// A line through `points` in order, with round caps and joins (a pen's stroke, as a
    /// drawing app draws it). One point draws a dot `width` across.
    public func strokePolyline(_ points: [Point], width: Double, color: Color) {
        guard let first = points.first else { return }
        cairo_save(cairo)
        cairo_move_to(cairo, first.x, first.y)
        for point in points.dropFirst() { cairo_line_to(cairo, point.x, point.y) }
        if points.count == 1 { cairo_line_to(cairo, first.x, first.y) }
        cairo_set_line_width(cairo, width)
        cairo_set_line_cap(cairo, CAIRO_LINE_CAP_ROUND)
        cairo_set_line_join(cairo, CAIRO_LINE_JOIN_ROUND)
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

    /// Draws one line of `text` with its first baseline at `point`: shaped by Pango, in the
    /// direction of its first strong character (a right-to-left text starts at `point` too, its
    /// runs in visual order), with fallback fonts for what `font` lacks. On the main actor, as
    /// all layout (Pango's context is not thread-safe).
    @MainActor
    public func draw(_ text: String, at point: Point, font: Font, color: Color) {
        guard !text.isEmpty else { return }
        let layout = TextLayout.make(text, font: font)
        layout.draw(in: cairo, at: Point(x: point.x, y: point.y - layout.baseline), color: color)
    }

    /// Draws `text` as one line with its baseline at `point`, ellipsized at its end by Pango
    /// ("…") where it is wider than `width`, as a one-line ``Label`` is: shaped, in the direction
    /// of its first strong character (a right-to-left line ends at the right of `width`). What
    /// the demo window draws a peer's or a user's text with in its chrome.
    @MainActor
    package func draw(_ text: String, at point: Point, width: Double, font: Font, color: Color) {
        guard !text.isEmpty, width > 0 else { return }
        let layout = TextLayout.make(text, font: font, width: width, ellipsized: true)
        layout.draw(in: cairo, at: Point(x: point.x, y: point.y - layout.baseline), color: color)
    }

    /// Draws a laid-out text with its top left at `origin`.
    @MainActor
    func draw(_ layout: TextLayout, at origin: Point, color: Color) {
        layout.draw(in: cairo, at: origin, color: color)
    }

    /// Draws `text` wrapped at `rect`'s width (by Pango's rules), each line aligned by
    /// `alignment` (``TextAlignment/natural``: each paragraph's leading edge), from `rect`'s top.
    @MainActor
    public func draw(_ text: String, in rect: Rect, font: Font, color: Color, alignment: TextAlignment = .natural) {
        guard !text.isEmpty else { return }
        TextLayout.make(text, font: font, width: rect.width, alignment: alignment).draw(in: cairo, at: rect.origin, color: color)
    }

    /// Draws `image` scaled to fill `rect`.
    public func draw(_ image: Bitmap, in rect: Rect) {
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
