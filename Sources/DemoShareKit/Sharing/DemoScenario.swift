// The built-in demos of `demo-share share` (and `demo-share view`): for each of the demo's
// activities, items to share and a script that finishes the share, placed by the activity's
// own layout (SheetLayout) at the view's size.
import RemoteHost
import RemoteService

enum DemoScenario: String, CaseIterable, Sendable {
    case notes, post, markup

    /// The demo's activity `identifier` names, if any.
    init?(identifier: String) {
        guard let scenario = Self.allCases.first(where: { $0.identifier == identifier }) else { return nil }
        self = scenario
    }

    var identifier: String {
        switch self {
        case .notes: NotesController.identifier
        case .post: PostController.identifier
        case .markup: MarkupController.identifier
        }
    }

    static let text = "Look at this sunset!"
    static let url = "https://example.com/sunset"

    /// The demo items: Notes a text and a URL; Post a caption and two pictures, one larger than
    /// it posts (1600×1200: it is scaled to 1024×768); Markup one picture.
    func items() throws -> [ShareItem] {
        switch self {
        case .notes:
            return [try .text(Self.text), try .url(Self.url)]
        case .post:
            return [try .text("Two views of the bay"),
                    try .file(named: "sunset.png", contentType: "image/png", contents: try Self.sunset(width: 1600, height: 1200).pngData()),
                    try .file(named: "night.png", contentType: "image/png", contents: try Self.night(width: 640, height: 480).pngData())]
        case .markup:
            return [try .file(named: "sunset.png", contentType: "image/png", contents: try Self.sunset(width: 320, height: 240).pngData())]
        }
    }

    /// The script for a `width` × `height` view; with `snapshots`, a PNG after each step.
    func script(width: Int, height: Int, snapshots: Bool) -> ShareScript {
        let size = Size(width: Double(width), height: Double(height))
        func at(_ point: Point) -> String { "\(Int(point.x.rounded())) \(Int(point.y.rounded()))" }
        func button(_ index: Int, of count: Int) -> String { at(SheetLayout.buttonCenter(index, of: count, in: size)) }
        var lines = ["# The built-in \(rawValue) demo for a \(width)x\(height) view (buttons along the bottom: SheetLayout).", "wait ready"]
        func snapshot(_ name: String) { if snapshots { lines.append("snapshot \(name)") } }
        snapshot("1-presented")
        switch self {
        case .notes:
            lines += ["# The note field has the keyboard and holds the shared text.", "key backspace", "type into \"Note\"  — what a view!"]
            snapshot("2-typed")
            lines += ["click button \"Save\"", "wait outcome"]
            snapshot("3-saved")
        case .post:
            lines += ["click button \"Post\"", "wait working", "wait done"]
            snapshot("2-posted")
            lines.append("wait outcome")
        case .markup:
            // Two strokes across the picture (320×240, shown to fit the canvas), one undone.
            let image = MarkupLayout.imageRect(imageWidth: 320, imageHeight: 240, in: size)
            func on(_ x: Double, _ y: Double) -> String { at(Point(x: image.minX + image.width * x, y: image.minY + image.height * y)) }
            lines += ["drag \(on(0.2, 0.25)) \(on(0.8, 0.75)) 12", "drag \(on(0.2, 0.75)) \(on(0.8, 0.25)) 12"]
            snapshot("2-drawn")
            lines += ["click button \"Undo\""]
            snapshot("3-undone")
            lines += ["click button \"Done\"", "wait outcome"]
            snapshot("4-done")
        }
        // Built from the lines above, which are valid by construction.
        return try! ShareScript(parsing: lines.joined(separator: "\n"), source: "the built-in \(rawValue) script")
    }

    /// A sunset: a sky gradient, a sun and the sea.
    static func sunset(width: Int, height: Int) -> RemoteImage {
        let horizon = height * 2 / 3
        return RemoteImage(width: width, height: height) { x, y in
            let dx = Double(x - width / 2), dy = Double(y - horizon + height / 12)
            if y >= horizon { return 0xFF1F_3A5F + UInt32((y - horizon) % 8 == 0 ? 0x0010_1010 : 0) }
            if dx * dx + dy * dy < Double(height * height) / 36 { return 0xFFFF_D060 }
            let t = Double(y) / Double(horizon)
            let red = UInt32(255 * (0.35 + 0.65 * t)), green = UInt32(255 * (0.25 + 0.35 * t)), blue = UInt32(255 * (0.55 - 0.35 * t))
            return 0xFF00_0000 | red << 16 | green << 8 | blue
        }
    }

    /// The bay at night: a dark sky with a moon over dark water.
    static func night(width: Int, height: Int) -> RemoteImage {
        RemoteImage(width: width, height: height) { x, y in
            let dx = Double(x - width * 3 / 4), dy = Double(y - height / 4)
            if y >= height * 3 / 5 { return 0xFF0B_1A2E }
            if dx * dx + dy * dy < Double(height * height) / 100 { return 0xFFF0_F0E0 }
            return (x * 7 + y * 13) % 211 == 0 ? 0xFFFF_FFFF : 0xFF10_1830
        }
    }
}
