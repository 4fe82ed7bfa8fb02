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

    /// The sheet: a row per offered activity (icon, title, subtitle), and at the bottom a row
    /// that shows why the others are not offered (expanded when `explain`). Returns each
    /// activity's row and the "why not" row, in points.
    static func sheet(into canvas: inout Canvas, scale: Double, items: [ShareItem], sheet: ShareSheet,
                      explain: Bool, palette: Palette = .light) -> (rows: [PointRect], whyNot: PointRect) {
        let width = Double(canvas.width) / scale, height = Double(canvas.height) / scale
        var rows: [PointRect] = []
        var whyNot = PointRect(x: 0, y: 0, width: 0, height: 0)
        canvas.draw(scale: scale) { cr in
            fill(cr, PointRect(x: 0, y: 0, width: width, height: height), palette.background)
            text(cr, "Share \(items.count) item\(items.count == 1 ? "" : "s") with…", x: margin, y: 30, size: 18, bold: true, colour: palette.text)
            text(cr, items.map(\.contentType).joined(separator: ", "), x: margin, y: 50, size: 11, colour: palette.secondary)
            var y = 64.0
            if sheet.activities.isEmpty {
                text(cr, "No activity takes these items.", x: margin, y: y + 30, size: 14, colour: palette.secondary)
                y += rowHeight
            }
            for activity in sheet.activities {
                let row = PointRect(x: 8, y: y, width: width - 16, height: rowHeight - 4)
                fill(cr, row, palette.row)
                if let icon = activity.icon { image(cr, icon, x: margin, y: y + 8, size: 36) } else { fill(cr, PointRect(x: margin, y: y + 8, width: 36, height: 36), palette.placeholder) }
                text(cr, activity.title, x: 64, y: y + 24, size: 15, bold: true, colour: palette.text)
                text(cr, activity.subtitle ?? activity.identifier, x: 64, y: y + 42, size: 11, colour: palette.secondary)
                rows.append(row)
                y += rowHeight
            }
            whyNot = PointRect(x: 8, y: y + 4, width: width - 16, height: 28)
            let others = sheet.explanations.count
            text(cr, others == 0 ? "Every registered activity is offered." : (explain ? "▾ " : "▸ ") + "Why not the other \(others)? (W)",
                 x: margin, y: y + 22, size: 12, colour: palette.link)
            if explain {
                y += 36
                for explanation in sheet.explanations {
                    text(cr, "\(explanation.activity.title): \(explanation.reason)", x: margin + 8, y: y + 14, size: 11, colour: palette.tertiary)
                    y += 18
                }
            }
        }
        return (rows, whyNot)
    }

    /// The bar's buttons, where they are (in points), when it shows them.
    struct BarButtons {
        /// Relaunch, when the activity's process ended.
        var relaunch: PointRect?
        /// Cancel, while the share waits for its answer: the host's own control, which takes
        /// the keyboard focus when Tab leaves the activity.
        var cancel: PointRect?
    }

    /// The bar above a presented activity: its title, the latest update and a progress bar, and
    /// a Cancel button (with a focus ring when `cancelFocused`) while the share is open; or the
    /// outcome; or, when the service ended, the reason and a Relaunch button.
    /// `phase` (0…1) places the moving part of an indeterminate progress bar; `palette` is the
    /// chrome's light or dark.
    static func bar(into canvas: inout Canvas, scale: Double, activity: ShareActivity, update: ActivityUpdate?,
                    outcome: String?, ended: String?, cancelFocused: Bool, phase: Double = 0, palette: Palette = .light) -> BarButtons {
        let width = Double(canvas.width) / scale
        var buttons = BarButtons()
        canvas.draw(scale: scale) { cr in
            fill(cr, PointRect(x: 0, y: 0, width: width, height: barHeight), ended == nil ? palette.bar : 0x5C1A1A)
            if let ended {
                let button = PointRect(x: width - 96, y: 8, width: 84, height: 28)
                fill(cr, button, 0xFFFFFF)
                text(cr, "Relaunch", x: button.x + 12, y: 27, size: 13, bold: true, colour: 0x5C1A1A)
                text(cr, "\(activity.title) ended: \(ended)", x: margin, y: 27, size: 12, colour: 0xFFFFFF, maxWidth: width - 128,
                     ellipsized: true)
                buttons.relaunch = button
                return
            }
            // Cancel at the right while the share is open; the title and progress left of it.
            var textWidth = width - 2 * margin
            if outcome == nil {
                let button = PointRect(x: width - 84, y: 8, width: 72, height: 28)
                if cancelFocused {
                    colour(cr, palette.link)
                    cairo_set_line_width(cr, 2)
                    cairo_rectangle(cr, button.x - 3, button.y - 3, button.width + 6, button.height + 6)
                    cairo_stroke(cr)
                }
                fill(cr, button, palette.button)
                let label = "Cancel", size = 13.0
                text(cr, label, x: button.x + (button.width - advance(label, size: size, bold: true)) / 2, y: 27, size: size, bold: true, colour: palette.link)
                buttons.cancel = button
                textWidth -= button.width + 8
            }
            // The activity's title, and the update's when it says something else ("Notes", not "Notes — Notes").
            let title = update.map { $0.title.isEmpty || $0.title == activity.title ? activity.title : "\(activity.title) — \($0.title)" } ?? activity.title
            text(cr, title, x: margin, y: 18, size: 13, bold: true, colour: palette.text, maxWidth: textWidth)
            if let outcome {
                text(cr, outcome, x: margin, y: 36, size: 11, colour: palette.tertiary, maxWidth: width - 2 * margin)
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
                if let subtitle = update.subtitle { text(cr, subtitle, x: margin, y: 43, size: 9, colour: palette.tertiary) }
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

    /// Draws `string` with its baseline at (`x`, `y`), clipped to `maxWidth`; `ellipsized`, a
    /// string too wide ends with "…" after its last word that fits, never inside a word. Laid
    /// out by the toolkit's Pango layout, as the activities' text is: shaped, in its direction,
    /// with fallback fonts.
    static func text(_ cr: OpaquePointer, _ string: String, x: Double, y: Double, size: Double, bold: Bool = false,
                     colour rgb: UInt32, maxWidth: Double? = nil, ellipsized: Bool = false) {
        cairo_save(cr)
        var shown = string
        if let maxWidth {
            cairo_rectangle(cr, x, y - size - 4, maxWidth, size * 2)
            cairo_clip(cr)
            if ellipsized { shown = ellipsize(string, toWidth: maxWidth) { advance($0, size: size, bold: bold) } }
        }
        GraphicsContext(cr).draw(shown, at: Point(x: x, y: y), font: font(size: size, bold: bold), color: Color(argb: 0xFF00_0000 | rgb))
        cairo_restore(cr)
    }

    /// How far `string` advances the pen in the chrome's font at `size`.
    static func advance(_ string: String, size: Double, bold: Bool = false) -> Double {
        TextMeasure.width(of: string, font: font(size: size, bold: bold))
    }

    /// The chrome's font: DejaVu Sans (with fallback) at `size`.
    private static func font(size: Double, bold: Bool) -> Font {
        Font(family: "DejaVu Sans", size: size, weight: bold ? .bold : .regular)
    }

    /// `string` if it is at most `width` wide (as `measure` says), else its longest run of
    /// whole words that fits with "…" after it ("…" alone when not even the first word does).
    static func ellipsize(_ string: String, toWidth width: Double, measure: (String) -> Double) -> String {
        guard measure(string) > width else { return string }
        let words = string.split(separator: " ", omittingEmptySubsequences: false)
        var fitting = 0
        while fitting < words.count, measure(words[...fitting].joined(separator: " ") + "…") <= width { fitting += 1 }
        return words[..<fitting].joined(separator: " ") + "…"
    }

    /// Draws `icon` scaled into a `size` × `size` square at (`x`, `y`).
    static func image(_ cr: OpaquePointer, _ icon: RemoteImage, x: Double, y: Double, size: Double) {
        guard icon.width > 0, icon.height > 0 else { return }
        var copy = icon.withUnsafePixels { Array($0) }
        copy.withUnsafeMutableBytes { bytes in
            let surface = cairo_image_surface_create_for_data(bytes.baseAddress!.assumingMemoryBound(to: UInt8.self), CAIRO_FORMAT_ARGB32,
                                                              Int32(icon.width), Int32(icon.height), Int32(icon.width * 4))
            cairo_save(cr)
            cairo_translate(cr, x, y)
            cairo_scale(cr, size / Double(icon.width), size / Double(icon.height))
            cairo_set_source_surface(cr, surface, 0, 0)
            cairo_paint(cr)
            cairo_restore(cr)
            cairo_surface_destroy(surface)
        }
    }
}

