// Markup (com.example.demo-share.markup): draw on one shared image. Done returns the image
// with the strokes, at its own pixel size, as "NAME-markup.png" (image/png).
import RemoteService

final class MarkupController: ActivityController {
    nonisolated static let identifier = "com.example.demo-share.markup"
    nonisolated static let title = "Markup"

    let canvas = MarkupCanvas()
    let cancelButton = Button(title: "Cancel")
    let undoButton = Button(title: "Undo")
    let doneButton = Button(title: "Done")
    private var item: ShareItem?
    private var rendering = false

    override func loadView() {
        item = (items ?? []).first { $0.fileName != nil && $0.contentType.hasPrefix("image/") }
        if let item {
            do { canvas.image = try item.bitmap(limit: 32 << 20) } catch { status.text = "Cannot read \(item.fileName ?? "the image"): \(error.reason)" }
        }
        view = makeSheet(title: item?.fileName ?? "Markup", content: MarkupContent(canvas: canvas, status: status),
                         buttons: [cancelButton, undoButton, doneButton])
    }

    override func viewDidLoad() {
        super.viewDidLoad()
        cancelButton.tintColor = Color(argb: 0xFF8E_8E93)
        undoButton.tintColor = Color(argb: 0xFFFF_9500)
        cancelButton.action = { [unowned self] _ in cancel() }
        undoButton.action = { [unowned self] _ in canvas.undo() }
        doneButton.action = { [unowned self] _ in done() }
        canvas.onChange = { [unowned self] in updateButtons() }
        if status.text.isEmpty { status.text = "Draw on the image with the pointer." }
        updateButtons()
    }

    private func updateButtons() {
        undoButton.isEnabled = isOpen && !rendering && !canvas.strokes.isEmpty
        doneButton.isEnabled = isOpen && !rendering && canvas.image != nil
        cancelButton.isEnabled = isOpen && !rendering
    }

    /// "photo.png" → "photo-markup.png" (always .png: the result is a PNG).
    static func resultName(for name: String) -> String {
        let stem = name.lastIndex(of: ".").map { $0 == name.startIndex ? name : String(name[..<$0]) } ?? name
        return String(stem.prefix(200)) + "-markup.png"
    }

    private func done() {
        guard let context = extensionContext, isOpen, !rendering, let image = canvas.image, let rect = canvas.imageRect else { return }
        rendering = true
        updateButtons()
        context.update(title: Self.title, subtitle: "Saving \(canvas.strokes.count) stroke\(canvas.strokes.count == 1 ? "" : "s")", progress: nil, state: .working)
        let (strokes, name) = (canvas.strokes, Self.resultName(for: item?.fileName ?? "image"))
        Task {
            do throws(RemoteError) {
                let png = try await MarkupCanvas.renderPNG(image, strokes: strokes, shownIn: rect)
                context.complete(returning: [try .file(named: name, contentType: "image/png", contents: png)])
                status.text = "Saved \(name)."
            } catch {
                fail("Cannot save the image: \(error.reason)")
            }
            rendering = false
            updateButtons()
        }
    }
}

/// Where Markup shows the image, from the view's size alone (for scripts that draw on it).
enum MarkupLayout {
    /// The status line under the canvas, of a fixed height (so the canvas, and where the image
    /// is shown, never move while strokes are drawn in its points).
    static let statusHeight = 36.0
    static let gap = 8.0

    /// The canvas, in the root view's points.
    static func canvas(in size: Size) -> Rect {
        let content = SheetLayout.content(in: size)
        return Rect(x: content.minX, y: content.minY, width: content.width, height: max(0, content.height - statusHeight - gap))
    }

    /// Where an image of `imageWidth` × `imageHeight` pixels is shown (scaled to fit the
    /// canvas, centred), in the root view's points.
    static func imageRect(imageWidth: Int, imageHeight: Int, in size: Size) -> Rect {
        let canvas = canvas(in: size)
        let width = Double(imageWidth), height = Double(imageHeight)
        let factor = min(canvas.width / width, canvas.height / height)
        return Rect(x: canvas.minX + (canvas.width - width * factor) / 2, y: canvas.minY + (canvas.height - height * factor) / 2,
                    width: width * factor, height: height * factor)
    }
}

/// The canvas above the status line.
private final class MarkupContent: View {

    let canvas: MarkupCanvas
    let status: Label

    init(canvas: MarkupCanvas, status: Label) {
        self.canvas = canvas
        self.status = status
        super.init()
        addSubview(canvas)
        addSubview(status)
    }

    override func layoutSubviews() {
        let statusHeight = MarkupLayout.statusHeight
        canvas.frame = Rect(x: 0, y: 0, width: bounds.width, height: max(0, bounds.height - statusHeight - MarkupLayout.gap))
        status.frame = Rect(x: 0, y: bounds.height - statusHeight, width: bounds.width, height: statusHeight)
    }
}
