import CCairo
import CPango

/// Text laid out by Pango (HarfBuzz shaping, fribidi bidi, Pango's line breaking and
/// ellipsizing, fontconfig fallback): what every label, button and field measures and draws.
///
/// One Pango context serves the toolkit: a Cairo font map at 72 dpi, so that a font's size in
/// points is its size in the view's points, with metrics not hinted, so text measures the same
/// at every scale (what a layout says is where it is drawn). Layouts are cached by what made
/// them, so a frame that draws the same text again loads no font and shapes nothing.
@MainActor
final class TextLayout {
    /// The `PangoLayout` (only ever touched on the main actor; its deinit lets it go).
    nonisolated(unsafe) let layout: OpaquePointer
    /// The text, as given.
    let text: String

    private init(layout: OpaquePointer, text: String) {
        self.layout = layout
        self.text = text
    }

    deinit {
        rv_g_object_unref(UnsafeMutableRawPointer(layout))
    }

    /// Pango units per point.
    nonisolated static let scale = Double(RV_PANGO_SCALE)

    /// The toolkit's Pango context.
    static let context: OpaquePointer = {
        let fontMap = rv_pango_cairo_font_map_new()!
        rv_pango_cairo_font_map_set_resolution(fontMap, 72)
        let context = rv_pango_font_map_create_context(fontMap)!
        rv_g_object_unref(UnsafeMutableRawPointer(fontMap))  // the context holds it
        let options = cairo_font_options_create()
        cairo_font_options_set_hint_metrics(options, CAIRO_HINT_METRICS_OFF)
        rv_pango_cairo_context_set_font_options(context, options)
        cairo_font_options_destroy(options)
        // Glyphs at their exact advances: the context does not know the view's scale, so rounded
        // positions would be whole points (2 pixels at scale 2).
        rv_pango_context_set_round_glyph_positions(context, 0)
        return context
    }()

    /// `points` in Pango units, for a width (a non-finite or huge value is clamped).
    nonisolated static func units(_ points: Double) -> Int32 {
        guard points.isFinite else { return points > 0 ? Int32.max : 0 }
        return Int32(clamping: Int(max(min(points * scale, Double(Int32.max)), Double(Int32.min)).rounded(.down)))
    }

    /// What a layout is made of: equal keys give the same layout.
    struct Key: Hashable {
        var text: String
        var font: Font
        /// The width lines wrap at, in points; `nil`: one line per paragraph, unwrapped.
        var width: Double?
        var alignment: TextAlignment
        /// One line per paragraph, ellipsized at the end to `width`, instead of wrapped.
        var ellipsized = false
    }

    private static var cache: [Key: TextLayout] = [:]
    /// The most layouts kept; past it the cache starts afresh (a frame rebuilds what it draws).
    static let cacheLimit = 512

    /// The layout of `text` in `font`, wrapped at `width` by Pango's rules (`nil`: not wrapped),
    /// each line aligned in `width` by `alignment`.
    /// With `ellipsized`, each paragraph is one line, ended by "…" where it does not fit.
    static func make(_ text: String, font: Font, width: Double? = nil, alignment: TextAlignment = .natural, ellipsized: Bool = false) -> TextLayout {
        let key = Key(text: text, font: font, width: width, alignment: alignment, ellipsized: ellipsized)
        if let cached = cache[key] { return cached }
        let made = uncached(text, font: font, width: width, alignment: alignment, ellipsized: ellipsized)
        if cache.count >= cacheLimit { cache.removeAll(keepingCapacity: true) }
        cache[key] = made
        return made
    }

    /// A layout made for one measurement, not kept.
    static func uncached(_ text: String, font: Font, width: Double? = nil, alignment: TextAlignment = .natural, ellipsized: Bool = false) -> TextLayout {
        let layout = rv_pango_layout_new(context)!
        rv_pango_layout_set_text(layout, text, -1)
        let description = font.makePangoDescription()
        rv_pango_layout_set_font_description(layout, description)
        rv_pango_font_description_free(description)
        if let language = font.language {
            let attributes = rv_pango_attr_list_new()
            rv_pango_attr_list_insert(attributes, rv_pango_attr_language_new(rv_pango_language_from_string(language)))
            rv_pango_layout_set_attributes(layout, attributes)
            rv_pango_attr_list_unref(attributes)
        }
        // Each paragraph's direction from its first strong character; with it, PANGO_ALIGN_LEFT
        // is the leading edge (right for a right-to-left paragraph).
        rv_pango_layout_set_auto_dir(layout, 1)
        if let width {
            rv_pango_layout_set_width(layout, units(max(width, 0)))
            if ellipsized {
                rv_pango_layout_set_ellipsize(layout, RV_PANGO_ELLIPSIZE_END)
            } else {
                rv_pango_layout_set_wrap(layout, RV_PANGO_WRAP_WORD_CHAR)
            }
        }
        let made = TextLayout(layout: layout, text: text)
        made.align(alignment)
        return made
    }

    /// Sets the Pango alignment for `alignment`, given the text's direction.
    ///
    /// With auto-dir, Pango flips left and right for a right-to-left paragraph: `.left` and
    /// `.right` mean the view's edges, so they are flipped back, by the first paragraph's
    /// direction (one alignment serves a layout: in text whose paragraphs go both ways, the
    /// first decides).
    private func align(_ alignment: TextAlignment) {
        let pango: Int32 = switch alignment {
        case .natural: RV_PANGO_ALIGN_LEFT
        case .center: RV_PANGO_ALIGN_CENTER
        case .left: isRightToLeft ? RV_PANGO_ALIGN_RIGHT : RV_PANGO_ALIGN_LEFT
        case .right: isRightToLeft ? RV_PANGO_ALIGN_LEFT : RV_PANGO_ALIGN_RIGHT
        }
        rv_pango_layout_set_alignment(layout, pango)
    }

    /// Whether the first paragraph's base direction is right to left: that of its first strong
    /// character (so "3 הודעות", digits first, is right to left).
    var isRightToLeft: Bool {
        guard let line = rv_pango_layout_get_line_readonly(layout, 0) else { return false }
        return rv_pango_layout_line_get_resolved_direction(line) == RV_PANGO_DIRECTION_RTL
    }

    /// The logical extents, in points: where the lines are, from the layout's top left.
    var logicalRect: Rect {
        var ink = PangoRectangle(), logical = PangoRectangle()
        rv_pango_layout_get_extents(layout, &ink, &logical)
        return Rect(x: Double(logical.x) / Self.scale, y: Double(logical.y) / Self.scale,
                    width: Double(logical.width) / Self.scale, height: Double(logical.height) / Self.scale)
    }

    /// The size the lines take, in points.
    var size: Size {
        var logical = PangoRectangle()
        rv_pango_layout_get_extents(layout, nil, &logical)
        return Size(width: Double(logical.width) / Self.scale, height: Double(logical.height) / Self.scale)
    }

    /// The first line's baseline, in points from the top.
    var baseline: Double { Double(rv_pango_layout_get_baseline(layout)) / Self.scale }

    /// How many lines the text took.
    var lineCount: Int { Int(rv_pango_layout_get_line_count(layout)) }

    /// Draws the layout with its top left at `origin`, in `color`.
    func draw(in cairo: OpaquePointer, at origin: Point, color: Color) {
        cairo_save(cairo)
        cairo_set_source_rgba(cairo, color.red, color.green, color.blue, color.alpha)
        cairo_move_to(cairo, origin.x, origin.y)
        rv_pango_cairo_show_layout(cairo, layout)
        cairo_restore(cairo)
    }

    // MARK: positions

    /// The UTF-8 offset of character (grapheme cluster) `index` of the text.
    func byteOffset(ofCharacter index: Int) -> Int {
        let position = text.index(text.startIndex, offsetBy: max(index, 0), limitedBy: text.endIndex) ?? text.endIndex
        return text.utf8.distance(from: text.startIndex, to: position)
    }

    /// The character (grapheme cluster) that UTF-8 offset `offset` starts, or falls in.
    func characterIndex(ofByte offset: Int) -> Int {
        var count = 0
        var position = text.startIndex
        while position < text.endIndex {
            let next = text.index(after: position)
            if text.utf8.distance(from: text.startIndex, to: next) > offset { break }
            position = next
            count += 1
        }
        return count
    }

    /// The character boundary a Pango position names: a UTF-8 offset, plus `trailing` grapheme
    /// positions after it (Pango's "trailing" of `xy_to_index` and cursor movement).
    func characterIndex(ofByte offset: Int, trailing: Int) -> Int {
        min(characterIndex(ofByte: offset) + max(trailing, 0), text.count)
    }

    /// The x, in points from the layout's left, of the caret before character `index` (its
    /// strong position: where text of the paragraph's direction would be inserted).
    func caretX(beforeCharacter index: Int) -> Double {
        var strong = PangoRectangle(), weak = PangoRectangle()
        rv_pango_layout_get_cursor_pos(layout, Int32(clamping: byteOffset(ofCharacter: index)), &strong, &weak)
        return Double(strong.x) / Self.scale
    }

    /// The x range, in points, that character `index` covers (`index_to_pos`); its width is
    /// negative for a character of a right-to-left run.
    func position(ofCharacter index: Int) -> (x: Double, width: Double) {
        var rect = PangoRectangle()
        rv_pango_layout_index_to_pos(layout, Int32(clamping: byteOffset(ofCharacter: index)), &rect)
        return (Double(rect.x) / Self.scale, Double(rect.width) / Self.scale)
    }

    /// The character boundary nearest the point (`x`, `y`) in points (`xy_to_index`): in mixed
    /// direction text, where a click lands.
    func characterIndex(atX x: Double, y: Double = 0) -> Int {
        var index: Int32 = 0, trailing: Int32 = 0
        rv_pango_layout_xy_to_index(layout, Int32(clamping: Int((x * Self.scale).rounded())), Int32(clamping: Int((y * Self.scale).rounded())),
                                 &index, &trailing)
        return characterIndex(ofByte: Int(index), trailing: Int(trailing))
    }

    /// The character boundary the caret goes to from character boundary `index` when moved one
    /// position left (`direction` −1) or right (+1) on screen, as Pango moves it through
    /// mixed-direction text (`move_cursor_visually`, the strong cursor). The text's ends stop it.
    func characterIndex(movingVisuallyFrom index: Int, direction: Int) -> Int {
        var newIndex: Int32 = 0, newTrailing: Int32 = 0
        rv_pango_layout_move_cursor_visually(layout, 1, Int32(clamping: byteOffset(ofCharacter: index)), 0, direction < 0 ? -1 : 1,
                                             &newIndex, &newTrailing)
        if newIndex < 0 { return 0 }
        if newIndex == RV_G_MAXINT { return text.count }
        return characterIndex(ofByte: Int(newIndex), trailing: Int(newTrailing))
    }

    /// Whether backspace at character boundary `index` deletes one Unicode character rather than
    /// the whole character before it (Pango's `backspace_deletes_character`): after an Arabic
    /// letter with a vowel mark, the mark alone; after é written as e and an accent, or 👍🏽, all
    /// of it.
    func backspaceDeletesOneScalar(beforeCharacter index: Int) -> Bool {
        let position = text.index(text.startIndex, offsetBy: max(index, 0), limitedBy: text.endIndex) ?? text.endIndex
        let scalar = text.unicodeScalars.distance(from: text.startIndex, to: position)
        var count: Int32 = 0
        guard let attributes = rv_pango_layout_get_log_attrs_readonly(layout, &count), scalar < Int(count) else { return false }
        return attributes[scalar] & UInt32(RV_PANGO_LOG_ATTR_BACKSPACE_DELETES_CHARACTER) != 0
    }

    /// Where each character of `range` is drawn, as x ranges in points (for a selection's
    /// highlight: in mixed-direction text a range of characters may be several pieces on screen).
    func xRanges(ofCharacters range: Range<Int>) -> [(minX: Double, maxX: Double)] {
        var pieces: [(minX: Double, maxX: Double)] = []
        for index in range {
            let (x, width) = position(ofCharacter: index)
            let piece = (min(x, x + width), max(x, x + width))
            if let last = pieces.last, abs(last.maxX - piece.0) < 0.01 {
                pieces[pieces.count - 1].maxX = piece.1
            } else if let last = pieces.last, abs(piece.1 - last.minX) < 0.01 {
                pieces[pieces.count - 1].minX = piece.0
            } else {
                pieces.append(piece)
            }
        }
        return pieces
    }

    /// The UTF-8 offset at which each line starts.
    var lineStarts: [Int] { lineRanges.map(\.start) }

    /// Each line's first byte and byte count, in order.
    private var lineRanges: [(start: Int, length: Int)] {
        var ranges: [(start: Int, length: Int)] = []
        let iterator = rv_pango_layout_get_iter(layout)
        defer { rv_pango_layout_iter_free(iterator) }
        repeat {
            if let line = rv_pango_layout_iter_get_line_readonly(iterator)?.pointee { ranges.append((Int(line.start_index), Int(line.length))) }
        } while rv_pango_layout_iter_next_line(iterator) != 0
        return ranges
    }

    /// The lines as laid out, each without the newline or the spaces it was broken at.
    var lines: [String] {
        let bytes = Array(text.utf8)
        return lineRanges.map { range in
            let start = min(range.start, bytes.count), end = min(start + range.length, bytes.count)
            var piece = String(decoding: bytes[start..<end], as: UTF8.self)
            while let last = piece.last, last == "\n" || last == " " { piece.removeLast() }
            return piece
        }
    }

    /// One shaped run, in visual order: its first byte in the text, its bidi level (odd: right
    /// to left), its glyphs and, for each glyph, the byte (relative to the run) of the cluster it
    /// belongs to. For tests and diagnostics of shaping.
    struct Run: Equatable {
        var byteOffset: Int
        var level: Int
        var glyphs: [UInt32]
        var clusters: [Int]
    }

    /// The runs of every line, in visual order.
    var runs: [Run] {
        glyphItems.compactMap { run in
            guard let item = run.item?.pointee, let glyphs = run.glyphs?.pointee else { return nil }
            let count = Int(glyphs.num_glyphs)
            return Run(byteOffset: Int(item.offset), level: Int(item.analysis.level),
                       glyphs: (0..<count).map { glyphs.glyphs[$0].glyph },
                       clusters: (0..<count).map { Int(glyphs.log_clusters[$0]) })
        }
    }

    /// Every line's runs, in visual order (copies of Pango's, valid while the layout is unchanged).
    private var glyphItems: [PangoGlyphItem] {
        var items: [PangoGlyphItem] = []
        let iterator = rv_pango_layout_get_iter(layout)
        defer { rv_pango_layout_iter_free(iterator) }
        repeat {
            if let run = rv_pango_layout_iter_get_run_readonly(iterator)?.pointee { items.append(run) }
        } while rv_pango_layout_iter_next_run(iterator) != 0
        return items
    }

    /// How many glyphs no font had (drawn as boxes).
    var unknownGlyphs: Int { Int(rv_pango_layout_get_unknown_glyphs_count(layout)) }

    /// The family of the font each run was drawn in, in visual order: which font fontconfig
    /// really picked (a family it lacks falls back silently).
    var runFamilies: [String] {
        glyphItems.compactMap { run in
            guard let font = run.item?.pointee.analysis.font, let description = rv_pango_font_describe(font) else { return nil }
            defer { rv_pango_font_description_free(description) }
            return rv_pango_font_description_get_family(description).map { String(cString: $0) } ?? ""
        }
    }
}
