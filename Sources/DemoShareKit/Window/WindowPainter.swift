// What the host draws itself, with Cairo: the share sheet (before anything is launched) and the
// bar above a presented activity (its title and progress, its outcome, or why it ended).
import CCairo
import RemoteHost
import RemoteService

/// Premultiplied ARGB words that Cairo draws into (Cairo's ARGB32 is exactly that).
struct Canvas {
    let width: Int
    let height: Int
    var pixels: [UInt32]

    init(width: Int, height: Int) {
        self.width = max(width, 1)
        self.height = max(height, 1)
        pixels = [UInt32](repeating: 0xFF00_0000, count: self.width * self.height)
    }

    /// Runs `body` with a Cairo context on the pixels, scaled by `scale` (pixels per point).
    mutating func draw(scale: Double, _ body: (OpaquePointer) -> Void) {
        let (width, height) = (self.width, self.height)
        pixels.withUnsafeMutableBytes { bytes in
            let surface = cairo_image_surface_create_for_data(bytes.baseAddress!.assumingMemoryBound(to: UInt8.self),
                                                              CAIRO_FORMAT_ARGB32, Int32(width), Int32(height), Int32(width * 4))
            let context = cairo_create(surface)!
            cairo_scale(context, scale, scale)
            body(context)
            cairo_destroy(context)
            cairo_surface_flush(surface)
            cairo_surface_destroy(surface)
        }
    }
}

/// A rectangle in points, for hit tests.
struct PointRect: Equatable {
    var x, y, width, height: Double
    func contains(_ px: Double, _ py: Double) -> Bool { px >= x && py >= y && px < x + width && py < y + height }
}

/// The chrome's colours (0xRRGGBB), light or dark: F2 switches the sheet and the bar with the
/// activity's traits.
struct Palette {
    var background: UInt32, row: UInt32, text: UInt32, secondary: UInt32, tertiary: UInt32
    var placeholder: UInt32, link: UInt32, bar: UInt32, track: UInt32, button: UInt32

    static let light = Palette(background: 0xF2F2F7, row: 0xFFFFFF, text: 0x1C1C1E, secondary: 0x6E6E73, tertiary: 0x3A3A3C,
                               placeholder: 0xC7C7CC, link: 0x0A60FF, bar: 0xE5E5EA, track: 0xC7C7CC, button: 0xFFFFFF)
    static let dark = Palette(background: 0x1C1C1E, row: 0x2C2C2E, text: 0xF2F2F7, secondary: 0x8E8E93, tertiary: 0xC7C7CC,
                              placeholder: 0x48484A, link: 0x409CFF, bar: 0x2C2C2E, track: 0x48484A, button: 0x3A3A3C)

    static func of(dark: Bool) -> Palette { dark ? .dark : .light }
}

@MainActor
enum WindowPainter {
    static let rowHeight = 56.0, barHeight = 44.0, margin = 16.0
    /// The header's cards (what is shared): their top, their height, and where the rows start.
    static let headerTop = 42.0, cardHeight = 48.0, rowsTop = 100.0
    /// The most cards the header shows side by side: more items show the first ones and a
    /// card that counts the rest.
    static let maxCards = 3

    /// Where the sheet's parts are, in points.
    struct SheetLayout {
        /// Each offered activity's row.
        var rows: [PointRect] = []
        /// The row that explains why the others are not offered.
        var whyNot = PointRect(x: 0, y: 0, width: 0, height: 0)
        /// Each shared item's card in the header (the items past the last card are in it).
        var cards: [PointRect] = []
        /// "Edit": the activities, on and off.
        var edit = PointRect(x: 0, y: 0, width: 0, height: 0)
    }

    /// Where the Edit view's parts are, in points.
    struct EditLayout {
        /// Each share activity's row (its switch is the whole row).
        var rows: [PointRect] = []
        /// "Done": back to the sheet.
        var done = PointRect(x: 0, y: 0, width: 0, height: 0)
    }

    /// The Edit view: every share activity (``ShareSheet/allActivities``) in a row with its icon,
    /// title and a switch, on or off; "Done" at the top. `focus` is the row with the keyboard
    /// focus (`rows.count`: Done), drawn with a ring.
    static func edit(into canvas: inout Canvas, scale: Double, sheet: ShareSheet, focus: Int, palette: Palette = .light) -> EditLayout {
        let width = Double(canvas.width) / scale, height = Double(canvas.height) / scale
        var layout = EditLayout()
        canvas.draw(scale: scale) { cr in
            fill(cr, PointRect(x: 0, y: 0, width: width, height: height), palette.background)
            let doneWidth = advance("Done", size: 14, bold: true) + 24
            layout.done = PointRect(x: width - margin - doneWidth, y: 10, width: doneWidth, height: 28)
            text(cr, "Activities", x: margin, y: 30, size: 18, bold: true, colour: palette.text, maxWidth: layout.done.x - 2 * margin)
            if focus == sheet.allActivities.count { ring(cr, layout.done, palette.link) }
            text(cr, "Done", x: layout.done.x + 12, y: 30, size: 14, bold: true, colour: palette.link)
            text(cr, "An activity that is off is not offered in the share sheet.", x: margin, y: 62, size: 12, colour: palette.secondary,
                 maxWidth: width - 2 * margin)
            var y = 76.0
            for (index, activity) in sheet.allActivities.enumerated() {
                let row = PointRect(x: 8, y: y, width: width - 16, height: rowHeight - 4)
                let on = sheet.isEnabled(activity.identifier)
                if focus == index { ring(cr, row, palette.link) }
                fill(cr, row, palette.row)
                if let icon = activity.icon { image(cr, icon, x: margin, y: y + 8, size: 36) } else { fill(cr, PointRect(x: margin, y: y + 8, width: 36, height: 36), palette.placeholder) }
                let switchRect = PointRect(x: row.x + row.width - 60, y: y + 14, width: 44, height: 24)
                text(cr, activity.title, x: 64, y: y + 24, size: 15, bold: true, colour: on ? palette.text : palette.secondary,
                     maxWidth: switchRect.x - 72)
                text(cr, on ? subtitle(activity) : "Off: not offered", x: 64, y: y + 42, size: 11,
                     colour: palette.secondary, maxWidth: switchRect.x - 72)
                toggle(cr, switchRect, on: on, palette: palette)
                layout.rows.append(row)
                y += rowHeight
            }
        }
        return layout
    }

    /// A switch: a rounded track (the link colour when on) with a knob at its end.
    private static func toggle(_ cr: OpaquePointer, _ rect: PointRect, on: Bool, palette: Palette) {
        let radius = rect.height / 2
        cairo_new_sub_path(cr)
        cairo_arc(cr, rect.x + radius, rect.y + radius, radius, .pi / 2, 3 * .pi / 2)
        cairo_arc(cr, rect.x + rect.width - radius, rect.y + radius, radius, 3 * .pi / 2, .pi / 2)
        cairo_close_path(cr)
        colour(cr, on ? palette.link : palette.track)
        cairo_fill(cr)
        cairo_arc(cr, on ? rect.x + rect.width - radius : rect.x + radius, rect.y + radius, radius - 3, 0, 2 * .pi)
        colour(cr, 0xFFFFFF)
        cairo_fill(cr)
    }

    /// The sheet's focus index of its Edit button: after the rows and "why not".
    static func editFocusIndex(_ sheet: ShareSheet) -> Int {
        sheet.activities.count + (sheet.explanations.isEmpty ? 0 : 1)
    }

    /// The sheet: a header that shows what is shared (a card per item: thumbnail or glyph,
    /// name, detail), a row per offered activity (icon, title, subtitle), and at the bottom a
    /// row that shows why the others are not offered (expanded when `explain`); "Edit" at the
    /// top. `focus` is the index of the row with the keyboard focus (`rows.count`: the "why not"
    /// row, when there are others; then ``editFocusIndex(_:)``: Edit; `nil`: none), drawn with a
    /// ring. Returns where each part is.
    static func sheet(into canvas: inout Canvas, scale: Double, previews: [ItemPreview], sheet: ShareSheet,
                      explain: Bool, focus: Int?, palette: Palette = .light) -> SheetLayout {
        let width = Double(canvas.width) / scale, height = Double(canvas.height) / scale
        var layout = SheetLayout()
        canvas.draw(scale: scale) { cr in
            fill(cr, PointRect(x: 0, y: 0, width: width, height: height), palette.background)
            let editWidth = advance("Edit", size: 14) + 24
            layout.edit = PointRect(x: width - margin - editWidth, y: 10, width: editWidth, height: 28)
            text(cr, "Share \(previews.count) item\(previews.count == 1 ? "" : "s") with…", x: margin, y: 30, size: 18, bold: true,
                 colour: palette.text, maxWidth: layout.edit.x - 2 * margin)
            if focus == editFocusIndex(sheet) { ring(cr, layout.edit, palette.link) }
            text(cr, "Edit", x: layout.edit.x + 12, y: 30, size: 14, colour: palette.link)
            layout.cards = header(cr, previews, width: width, palette: palette)
            var y = rowsTop
            if sheet.activities.isEmpty {
                text(cr, "No activity takes these items.", x: margin, y: y + 30, size: 14, colour: palette.secondary)
                y += rowHeight
            }
            for (index, activity) in sheet.activities.enumerated() {
                let row = PointRect(x: 8, y: y, width: width - 16, height: rowHeight - 4)
                if focus == index { ring(cr, row, palette.link) }
                fill(cr, row, palette.row)
                if let icon = activity.icon { image(cr, icon, x: margin, y: y + 8, size: 36) } else { fill(cr, PointRect(x: margin, y: y + 8, width: 36, height: 36), palette.placeholder) }
                text(cr, activity.title, x: 64, y: y + 24, size: 15, bold: true, colour: palette.text, maxWidth: width - 80)
                text(cr, subtitle(activity), x: 64, y: y + 42, size: 11, colour: palette.secondary, maxWidth: width - 80)
                layout.rows.append(row)
                y += rowHeight
            }
            layout.whyNot = PointRect(x: 8, y: y + 4, width: width - 16, height: 28)
            let others = sheet.explanations.count
            if focus == sheet.activities.count, others > 0 { ring(cr, layout.whyNot, palette.link) }
            text(cr, others == 0 ? "Every registered activity is offered." : (explain ? "▾ " : "▸ ") + "Why not the other \(others)? (W)",
                 x: margin, y: y + 22, size: 12, colour: palette.link)
            if explain {
                y += 36
                for explanation in sheet.explanations {
                    text(cr, "\(explanation.activity.title): \(explanation.reason)", x: margin + 8, y: y + 14, size: 11, colour: palette.tertiary,
                         maxWidth: width - 2 * margin - 8)
                    y += 18
                }
            }
        }
        return layout
    }

    /// The header's cards, side by side below the title: at most ``maxCards``, the last one
    /// counting the items it stands for when there are more. Returns each item's card.
    private static func header(_ cr: OpaquePointer, _ previews: [ItemPreview], width: Double, palette: Palette) -> [PointRect] {
        guard !previews.isEmpty else { return [] }
        var shown = previews
        if previews.count > maxCards {
            shown = Array(previews.prefix(maxCards - 1))
            let rest = previews.count - shown.count
            shown.append(ItemPreview(kind: .other, title: "\(rest) more", detail: "items", accessibleName: "and \(rest) more items"))
        }
        let gap = 8.0, count = Double(shown.count)
        let cardWidth = (width - 2 * margin - gap * (count - 1)) / count
        var cards: [PointRect] = []
        for (index, preview) in shown.enumerated() {
            let card = PointRect(x: margin + Double(index) * (cardWidth + gap), y: headerTop, width: cardWidth, height: cardHeight)
            fill(cr, card, palette.row)
            let box = PointRect(x: card.x + 6, y: card.y + 6, width: 36, height: 36)
            switch preview.thumbnail {
            case .ready(let thumbnail): image(cr, thumbnail, fittedIn: box)
            case .pending: glyph(cr, .image, in: box, colour: palette.placeholder)
            case .refused: glyph(cr, .image, in: box, colour: palette.secondary)
            case .none: glyph(cr, preview.kind, in: box, colour: palette.secondary)
            }
            let textWidth = max(card.width - 56, 1)
            text(cr, preview.title, x: card.x + 50, y: card.y + 21, size: 12, bold: true, colour: palette.text, maxWidth: textWidth)
            text(cr, preview.detail, x: card.x + 50, y: card.y + 38, size: 11, colour: palette.secondary, maxWidth: textWidth)
            cards.append(card)
        }
        // The items past the last card are in it.
        while cards.count < previews.count { cards.append(cards[cards.count - 1]) }
        return cards
    }

    /// The bar's buttons, where they are (in points), when it shows them.
    struct BarButtons {
        /// Relaunch, when the activity's process ended.
        var relaunch: PointRect?
        /// Back to the sheet, when the activity's process ended (an ended share does not go back
        /// by itself).
        var back: PointRect?
        /// Cancel, while the share waits for its answer: the host's own control, which takes
        /// the keyboard focus when Tab leaves the activity.
        var cancel: PointRect?
    }

    /// Which of the bar's buttons has the keyboard focus (drawn with a ring).
    enum BarFocus {
        case none, cancel, relaunch, back
    }

    /// A sheet row's second line: the activity's subtitle (or identifier), after "remote: NAME ·"
    /// for an activity a gateway offers.
    static func subtitle(_ activity: ShareActivity) -> String {
        let subtitle = activity.subtitle ?? activity.identifier
        return activity.manifest.gateway.map { "remote: \($0) · \(subtitle)" } ?? subtitle
    }

    /// The bar above a presented activity: its title, the latest update and a progress bar, and
    /// a Cancel button while the share is open; or the share's result (`outcome`), shown for a
    /// moment before the sheet comes back; or, when the service ended, the reason, a Back and
    /// a Relaunch button. `focus` is the button with the keyboard focus (drawn with a ring);
    /// `phase` (0…1) places the moving part of an indeterminate progress bar; `palette` is the
    /// chrome's light or dark.
    static func bar(into canvas: inout Canvas, scale: Double, activity: ShareActivity, update: ActivityUpdate?,
                    outcome: String?, ended: String?, focus: BarFocus, phase: Double = 0, palette: Palette = .light) -> BarButtons {
        let width = Double(canvas.width) / scale
        var buttons = BarButtons()
        canvas.draw(scale: scale) { cr in
            fill(cr, PointRect(x: 0, y: 0, width: width, height: barHeight), ended == nil ? palette.bar : 0x5C1A1A)
            if let ended {
                let relaunch = PointRect(x: width - 96, y: 8, width: 84, height: 28)
                let back = PointRect(x: relaunch.x - 72, y: 8, width: 64, height: 28)
                for (button, label, focused) in [(back, "Back", focus == .back), (relaunch, "Relaunch", focus == .relaunch)] {
                    if focused { ring(cr, button, 0xFFFFFF) }
                    fill(cr, button, 0xFFFFFF)
                    text(cr, label, x: button.x + (button.width - advance(label, size: 13, bold: true)) / 2, y: 27, size: 13, bold: true,
                         colour: 0x5C1A1A)
                }
                text(cr, "\(activity.title) ended: \(ended)", x: margin, y: 27, size: 12, colour: 0xFFFFFF, maxWidth: back.x - margin - 8)
                buttons.relaunch = relaunch
                buttons.back = back
                return
            }
            // Cancel at the right while the share is open; the title and progress left of it.
            var textWidth = width - 2 * margin
            if outcome == nil {
                let button = PointRect(x: width - 84, y: 8, width: 72, height: 28)
                if focus == .cancel { ring(cr, button, palette.link) }
                fill(cr, button, palette.button)
                let label = "Cancel", size = 13.0
                text(cr, label, x: button.x + (button.width - advance(label, size: size, bold: true)) / 2, y: 27, size: size, bold: true, colour: palette.link)
                buttons.cancel = button
                textWidth -= button.width + 8
            }
            // The activity's title, and the update's when it says something else ("Notes", not "Notes — Notes").
            var title = update.map { $0.title.isEmpty || $0.title == activity.title ? activity.title : "\(activity.title) — \($0.title)" } ?? activity.title
            // An activity on another machine says so, and where.
            if let gateway = activity.manifest.gateway { title = "remote: \(gateway) — \(title)" }
            text(cr, title, x: margin, y: 18, size: 13, bold: true, colour: palette.text, maxWidth: textWidth)
            if let outcome {
                text(cr, outcome, x: margin, y: 36, size: 12, colour: palette.tertiary, maxWidth: textWidth)
            } else if let update, update.progress != nil || Self.isBusy(update) {
                let track = PointRect(x: margin, y: 28, width: textWidth, height: 6)
                fill(cr, track, palette.track)
                if let done = update.progress {
                    fill(cr, PointRect(x: track.x, y: track.y, width: track.width * done, height: track.height), palette.link)
                } else {
                    // Indeterminate: a third of the track sweeps to and fro (phase 0…1 and back).
                    let part = track.width / 3, sweep = phase <= 0.5 ? phase * 2 : 2 - phase * 2
                    fill(cr, PointRect(x: track.x + (track.width - part) * sweep, y: track.y, width: part, height: track.height), palette.link)
                }
                if let subtitle = update.subtitle { text(cr, subtitle, x: margin, y: 43, size: 9, colour: palette.tertiary, maxWidth: textWidth) }
            } else if let subtitle = update?.subtitle {
                // Ready, waiting for the user: no progress to show, the subtitle in its place.
                text(cr, subtitle, x: margin, y: 36, size: 11, colour: palette.tertiary, maxWidth: textWidth)
            }
        }
        return buttons
    }

    /// Whether an update says the activity is at work (preparing or working): only then does a
    /// progress bar show, and an indeterminate one sweep.
    static func isBusy(_ update: ActivityUpdate) -> Bool {
        update.state == .preparing || update.state == .working
    }

    // MARK: drawing

    static func fill(_ cr: OpaquePointer, _ rect: PointRect, _ rgb: UInt32) {
        colour(cr, rgb)
        cairo_rectangle(cr, rect.x, rect.y, rect.width, rect.height)
        cairo_fill(cr)
    }

    static func colour(_ cr: OpaquePointer, _ rgb: UInt32) {
        cairo_set_source_rgb(cr, Double((rgb >> 16) & 0xFF) / 255, Double((rgb >> 8) & 0xFF) / 255, Double(rgb & 0xFF) / 255)
    }

    /// A focus ring: a 2-point line 3 points outside `rect`.
    static func ring(_ cr: OpaquePointer, _ rect: PointRect, _ rgb: UInt32) {
        colour(cr, rgb)
        cairo_set_line_width(cr, 2)
        cairo_rectangle(cr, rect.x - 3, rect.y - 3, rect.width + 6, rect.height + 6)
        cairo_stroke(cr)
    }

    /// A shared item's glyph, drawn with lines in `rgb` in the 36-point square `box`: a picture
    /// (image), a page of lines (text), two notes (audio), a frame with a play mark (video), a
    /// globe (link), a page with a folded corner (anything else).
    static func glyph(_ cr: OpaquePointer, _ kind: ItemPreview.Kind, in box: PointRect, colour rgb: UInt32) {
        cairo_save(cr)
        cairo_translate(cr, box.x, box.y)
        cairo_scale(cr, box.width / 36, box.height / 36)
        colour(cr, rgb)
        cairo_set_line_width(cr, 2)
        cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND)
        cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND)
        func polygon(_ points: [(Double, Double)]) {
            cairo_move_to(cr, points[0].0, points[0].1)
            for point in points.dropFirst() { cairo_line_to(cr, point.0, point.1) }
            cairo_close_path(cr)
        }
        switch kind {
        case .image:
            cairo_rectangle(cr, 4, 7, 28, 22)
            cairo_stroke(cr)
            polygon([(7, 26), (15, 16), (20, 22), (24, 18), (29, 26)])
            cairo_fill(cr)
            cairo_arc(cr, 24, 13, 2.5, 0, 2 * .pi)
            cairo_fill(cr)
        case .text:
            cairo_rectangle(cr, 8, 4, 20, 28)
            cairo_stroke(cr)
            for (y, end) in [(11.0, 24.0), (16, 24), (21, 24), (26, 19)] {
                cairo_move_to(cr, 12, y)
                cairo_line_to(cr, end, y)
            }
            cairo_stroke(cr)
        case .audio:
            for (x, y) in [(11.0, 27.0), (25, 24)] {
                cairo_arc(cr, x, y, 3.5, 0, 2 * .pi)
                cairo_fill(cr)
            }
            cairo_move_to(cr, 14.5, 27)
            cairo_line_to(cr, 14.5, 9)
            cairo_move_to(cr, 28.5, 24)
            cairo_line_to(cr, 28.5, 6)
            cairo_stroke(cr)
            cairo_set_line_width(cr, 3)
            cairo_move_to(cr, 14.5, 9)
            cairo_line_to(cr, 28.5, 6)
            cairo_stroke(cr)
        case .video:
            cairo_rectangle(cr, 4, 8, 28, 20)
            cairo_stroke(cr)
            polygon([(15, 13), (15, 23), (23, 18)])
            cairo_fill(cr)
        case .link:
            cairo_arc(cr, 18, 18, 13, 0, 2 * .pi)
            cairo_stroke(cr)
            cairo_save(cr)
            cairo_translate(cr, 18, 18)
            cairo_scale(cr, 0.45, 1)
            cairo_arc(cr, 0, 0, 13, 0, 2 * .pi)
            cairo_restore(cr)
            cairo_stroke(cr)
            for y in [13.0, 23] {
                cairo_move_to(cr, 6.5, y)
                cairo_line_to(cr, 29.5, y)
            }
            cairo_stroke(cr)
        case .other:
            polygon([(9, 4), (22, 4), (28, 10), (28, 32), (9, 32)])
            cairo_stroke(cr)
            cairo_move_to(cr, 22, 4)
            cairo_line_to(cr, 22, 10)
            cairo_line_to(cr, 28, 10)
            cairo_stroke(cr)
        }
        cairo_restore(cr)
    }

    /// Draws `image` as large as fits in `box`, its aspect kept, centred.
    static func image(_ cr: OpaquePointer, _ image: RemoteImage, fittedIn box: PointRect) {
        guard image.width > 0, image.height > 0 else { return }
        let factor = min(box.width / Double(image.width), box.height / Double(image.height))
        let (width, height) = (Double(image.width) * factor, Double(image.height) * factor)
        Self.image(cr, image, rect: PointRect(x: box.x + (box.width - width) / 2, y: box.y + (box.height - height) / 2, width: width, height: height))
    }

    /// Draws `string` with its baseline at (`x`, `y`); within `maxWidth`, a string too wide is
    /// ellipsized at its end ("…") by Pango, never cut. Laid out by the toolkit's Pango layout,
    /// as the activities' text is: shaped, in its direction (a right-to-left line given a
    /// `maxWidth` ends at its right), with fallback fonts. One line: line breaks show as spaces.
    static func text(_ cr: OpaquePointer, _ string: String, x: Double, y: Double, size: Double, bold: Bool = false,
                     colour rgb: UInt32, maxWidth: Double? = nil) {
        let line = string.contains(where: \.isNewline) ? String(string.map { $0.isNewline ? " " : $0 }) : string
        let context = GraphicsContext(cr), colour = Color(argb: 0xFF00_0000 | rgb), font = font(size: size, bold: bold)
        if let maxWidth {
            context.draw(line, at: Point(x: x, y: y), width: maxWidth, font: font, color: colour)
        } else {
            context.draw(line, at: Point(x: x, y: y), font: font, color: colour)
        }
    }

    /// How far `string` advances the pen in the chrome's font at `size`.
    static func advance(_ string: String, size: Double, bold: Bool = false) -> Double {
        TextMeasure.width(of: string, font: font(size: size, bold: bold))
    }

    /// The chrome's font: DejaVu Sans (with fallback) at `size`.
    private static func font(size: Double, bold: Bool) -> Font {
        Font(family: "DejaVu Sans", size: size, weight: bold ? .bold : .regular)
    }

    /// Draws `icon` scaled into a `size` × `size` square at (`x`, `y`).
    static func image(_ cr: OpaquePointer, _ icon: RemoteImage, x: Double, y: Double, size: Double) {
        image(cr, icon, rect: PointRect(x: x, y: y, width: size, height: size))
    }

    /// Draws `icon` scaled to fill `rect`.
    static func image(_ cr: OpaquePointer, _ icon: RemoteImage, rect: PointRect) {
        guard icon.width > 0, icon.height > 0 else { return }
        var copy = icon.withUnsafePixels { Array($0) }
        copy.withUnsafeMutableBytes { bytes in
            let surface = cairo_image_surface_create_for_data(bytes.baseAddress!.assumingMemoryBound(to: UInt8.self), CAIRO_FORMAT_ARGB32,
                                                              Int32(icon.width), Int32(icon.height), Int32(icon.width * 4))
            cairo_save(cr)
            cairo_translate(cr, rect.x, rect.y)
            cairo_scale(cr, rect.width / Double(icon.width), rect.height / Double(icon.height))
            cairo_set_source_surface(cr, surface, 0, 0)
            cairo_paint(cr)
            cairo_restore(cr)
            cairo_surface_destroy(surface)
        }
    }
}
