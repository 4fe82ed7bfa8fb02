// Markup's drawing surface: the image scaled to fit, and red strokes drawn over it with the
// pointer; the strokes map onto the image's own pixels for the result.
import RemoteService

final class MarkupCanvas: ImageView {
    /// A stroke: its points in the canvas's points.
    typealias Stroke = [Point]

    nonisolated static let strokeColor = Color(red: 1, green: 0, blue: 0)
    /// The pen's width on screen, in points.
    nonisolated static let strokeWidth = 4.0

    /// The finished strokes, oldest first, then the one being drawn.
    private(set) var strokes: [Stroke] = []
    private var drawing = false
    /// Runs when a stroke ends or is undone.
    var onChange: (@MainActor () -> Void)?

    /// An image a screen reader names: the picture to draw on, and how many strokes it has.
    override func describeAccessibility(_ node: inout AccessibilityNodeDescription) {
        super.describeAccessibility(&node)
        node.label = image == nil ? "No picture to draw on" : "Picture to draw on"
        let finished = drawing ? strokes.count - 1 : strokes.count
        node.value = "\(finished) stroke\(finished == 1 ? "" : "s")"
    }

    override func draw(in context: GraphicsContext) {
        super.draw(in: context)
        guard let rect = imageRect else { return }
        context.withSavedState {
            context.clip(to: rect)
            for stroke in strokes { context.strokePolyline(stroke, width: Self.strokeWidth, color: Self.strokeColor) }
        }
    }

    override func pointerDown(_ event: PointerEvent) {
        guard let rect = imageRect, rect.contains(location(of: event)) else { return super.pointerDown(event) }
        drawing = true
        strokes.append([location(of: event)])
        damage(strokes[strokes.count - 1].suffix(1))
    }

    override func pointerMoved(_ event: PointerEvent) {
        guard drawing, event.buttons & 1 != 0 else { return super.pointerMoved(event) }
        strokes[strokes.count - 1].append(location(of: event))
        damage(strokes[strokes.count - 1].suffix(2))
    }

    override func pointerUp(_ event: PointerEvent) {
        guard drawing else { return super.pointerUp(event) }
        drawing = false
        let point = location(of: event)
        if point != strokes[strokes.count - 1].last {
            strokes[strokes.count - 1].append(point)
            damage(strokes[strokes.count - 1].suffix(2))
        }
        onChange?()
    }

    /// Removes the last stroke.
    func undo() {
        guard !drawing, let last = strokes.popLast() else { return }
        damage(last[...])
        onChange?()
    }

    /// Marks the rect the line through `points` covers.
    private func damage(_ points: ArraySlice<Point>) {
        guard let first = points.first else { return }
        var rect = Rect(origin: first, size: .zero)
        for point in points { rect = rect.union(Rect(x: point.x, y: point.y, width: 0.001, height: 0.001)) }
        let pad = Self.strokeWidth / 2 + 1
        setNeedsDisplay(Rect(x: rect.minX - pad, y: rect.minY - pad, width: rect.width + 2 * pad, height: rect.height + 2 * pad))
    }

    /// The image with the strokes drawn on it, at the image's own pixel size: each point maps
    /// from where the image is shown to its pixels, and the pen widens by the same factor.
    /// Returns it as PNG. Runs on the concurrent executor (a large image takes a while).
    @concurrent
    static func renderPNG(_ image: Bitmap, strokes: [Stroke], shownIn rect: Rect) async throws(RemoteError) -> [UInt8] {
        let factor = Double(image.width) / rect.width
        return try Bitmap(width: image.width, height: image.height) { context in
            context.draw(image, in: Rect(x: 0, y: 0, width: Double(image.width), height: Double(image.height)))
            for stroke in strokes {
                let pixels = stroke.map { Point(x: ($0.x - rect.minX) * factor, y: ($0.y - rect.minY) * factor) }
                context.strokePolyline(pixels, width: strokeWidth * factor, color: strokeColor)
            }
        }.pngData()
    }
}
