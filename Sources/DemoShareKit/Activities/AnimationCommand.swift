// `demo-share animation`: a view that repaints all of itself on every frame it is allowed to draw,
// for `request animate SECONDS` (then it is still): what `demo-share window --bench` shows to
// measure the window's frame rate. Run by the launcher from Services/animation.json.
import ArgumentParser
import CDemoPhoto
import RemoteService

struct AnimationCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "animation",
        abstract: "Run as the demo's animation service on the socket passed at fd 3 (the launcher runs it, by its manifest).")

    static let identifier = "com.example.demo-share.animation"

    func run() async throws {
        await ServiceMain.exit(serving: Self.identifier, viewController: { AnimationController() }) { request, _ in
            throw ServiceFailure.unknownRequest(request.type, handler: Self.identifier)
        }
    }
}

/// Repaints while an `animate SECONDS [MODE]` request lasts, one step per frame the host allows:
///
/// - `fill` (the default): the whole view in a shade that changes every frame;
/// - `photo`: a photograph (CDemoPhoto's, scaled to the view's width) scrolled up by 4 points a
///   frame, wrapping around: every pixel changes, as in a scrolling list of pictures, and a
///   compressor finds no flat colour to erase;
/// - `square`: only a 64 × 64 square at (32, 32) changes shade, like a button's highlight.
///
/// Each pointer press toggles a 32 × 32 magenta marker at the view's top left corner, drawn over
/// the animation from the next frame: a host times input → visible frame by it.
final class AnimationController: ViewController {
    enum Mode: String {
        case fill, photo, square
    }
    private var frame = 0
    private var until: ContinuousClock.Instant?
    private var mode = Mode.fill
    private var marked = false
    /// The marker's colour (premultiplied ARGB 0xFFFF00FF on the host).
    static let marker = Color(red: 1, green: 0, blue: 1)
    /// The photograph, decoded once.
    private static let photo: Bitmap? = {
        var count = 0
        guard let bytes = demo_photo_png(&count) else { return nil }
        return try? Bitmap(pngData: Array(UnsafeBufferPointer(start: bytes, count: count)))
    }()

    private lazy var canvas = CanvasView { [unowned self] context, bounds in
        switch mode {
        case .fill:
            let shade = Double(frame % 200) / 255
            context.fill(bounds, with: Color(red: shade, green: 0.45, blue: 1 - shade))
        case .photo:
            // Two points wider than the view: the filter's edge falls outside it.
            guard let strip = scaledPhoto(width: Int(bounds.width) + 2) else { return context.fill(bounds, with: Color(red: 0.5, green: 0.5, blue: 0.5)) }
            // Drawn unscaled at whole points: each row is exactly a row of the frame before.
            var top = -Double((frame * 4) % strip.height)
            while top < bounds.height {
                context.draw(strip, in: Rect(x: 0, y: top, width: Double(strip.width), height: Double(strip.height)))
                top += Double(strip.height)
            }
        case .square:
            context.fill(bounds, with: Color(red: 0.95, green: 0.95, blue: 0.95))
            let shade = Double(frame % 200) / 255
            context.fill(Rect(x: 32, y: 32, width: 64, height: 64), with: Color(red: 0.2, green: 0.4 + shade / 2, blue: 0.9))
        }
        if marked { context.fill(Rect(x: 0, y: 0, width: 32, height: 32), with: Self.marker) }
    }

    private var scaled: Bitmap?

    /// The photograph scaled once to `width` (its height in proportion), then only moved.
    private func scaledPhoto(width: Int) -> Bitmap? {
        if let scaled, scaled.width == width { return scaled }
        guard let photo = Self.photo, width > 0 else { return nil }
        let height = max(1, Int((Double(width) * Double(photo.height) / Double(photo.width)).rounded()))
        scaled = try? Bitmap(width: width, height: height) { context in
            context.draw(photo, in: Rect(x: 0, y: 0, width: Double(width), height: Double(height)))
        }
        return scaled
    }

    override func loadView() {
        canvas.isOpaque = true
        view = canvas
    }

    override func pointerDown(_ event: PointerEvent) {
        marked.toggle()
        canvas.setNeedsDisplay()
    }

    override func handleRequest(_ request: ServiceMessage) async throws -> ServiceMessage? {
        guard request.type == "animate" else { return nil }
        let words = (request.text ?? "").split(separator: " ")
        guard let seconds = words.first.flatMap({ Double($0) }), seconds > 0, seconds <= 600,
              let mode = words.count > 1 ? Mode(rawValue: String(words[1])) : .fill, words.count <= 2 else {
            throw ServiceFailure(domain: AnimationCommand.identifier, code: 1, message: "animate takes seconds, 0 to 600, and a mode: fill, photo or square")
        }
        self.mode = mode
        until = .now.advanced(by: .milliseconds(Int64(seconds * 1000)))
        step()
        return ServiceMessage(type: "animating")
    }

    /// One more frame, drawn when the host allows it (the toolkit paces animations by frame_done).
    private func step() {
        guard let until, ContinuousClock.now < until else {
            self.until = nil
            return
        }
        frame += 1
        if mode == .square {
            canvas.setNeedsDisplay(Rect(x: 32, y: 32, width: 64, height: 64))
        } else {
            canvas.setNeedsDisplay()
        }
        canvas.animate(duration: .zero) { [weak self] _ in self?.step() }
    }
}
