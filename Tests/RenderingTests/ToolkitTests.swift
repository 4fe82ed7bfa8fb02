// The service toolkit in-process: hit testing, the responder chain, text editing, layout,
// damage and animation, on a ServiceRoot like the one a host connection gets.
@testable import RemoteService
import RemoteHost
import Testing

@MainActor
@Suite("View toolkit")
struct ToolkitTests {
    /// A controller that records what reaches it.
    final class Recorder: ViewController {
        var events: [String] = []
        override func keyDown(_ event: KeyEvent) { events.append("controller key \(event.keyCode)") }
        override func remoteControlReceived(_ command: RemoteCommand) { events.append("controller \(command)") }
        override func pointerDown(_ event: PointerEvent) { events.append("controller pointer") }
    }

    /// A view that takes pointer presses.
    final class Target: View {
        var presses = 0
        override func pointerDown(_ event: PointerEvent) { presses += 1 }
    }

    /// A root showing `controller` at `size` points and `scale`, its first frame taken.
    func present(_ controller: ViewController, width: Double = 200, height: Double = 100, scale: Double = 1) -> ServiceRoot {
        let root = ServiceRoot(controller: controller, connection: nil)
        root.resize(to: Size(width: width, height: height), scale: scale)
        _ = root.prepareFrame(at: .now)
        return root
    }

    static func down(_ x: Double, _ y: Double) -> InputEvent { .pointer(PointerEvent(.down, x: x, y: y, button: 1, buttons: 1)) }
    static func up(_ x: Double, _ y: Double) -> InputEvent { .pointer(PointerEvent(.up, x: x, y: y, button: 1)) }

    @Test("hit testing finds the topmost visible, interactive view; hidden and pass-through views are skipped")
    func hitTesting() {
        let controller = Recorder()
        let root = present(controller)
        let below = Target(frame: Rect(x: 10, y: 10, width: 50, height: 50))
        let hidden = Target(frame: Rect(x: 0, y: 0, width: 200, height: 100))
        hidden.isHidden = true
        let passThrough = Target(frame: Rect(x: 0, y: 0, width: 200, height: 100))
        passThrough.isUserInteractionEnabled = false
        for view in [below, hidden, passThrough] { controller.view.addSubview(view) }
        root.deliver(Self.down(20, 20))
        #expect(below.presses == 1 && hidden.presses == 0 && passThrough.presses == 0)
        #expect(controller.view.hitTest(Point(x: 20, y: 20)) === below)
        #expect(controller.view.hitTest(Point(x: 100, y: 80)) === controller.view)
        #expect(controller.view.hitTest(Point(x: 300, y: 80)) == nil)
        // Nothing takes a press on the bare root view: it goes up to the controller.
        root.deliver(Self.down(100, 80))
        #expect(controller.events == ["controller pointer"])
    }

    @Test("an event the first responder does not handle goes up the chain to the controller, then the root")
    func responderChain() {
        let controller = Recorder()
        let root = present(controller)
        let stack = StackView(arrangedSubviews: [TextField(text: "abc")])
        stack.frame = Rect(x: 0, y: 0, width: 200, height: 100)
        controller.view.addSubview(stack)
        let field = stack.arrangedSubviews[0] as! TextField
        #expect(field.next === stack && stack.next === controller.view && controller.view.next === controller && controller.next === root)
        #expect(field.becomeFirstResponder() && field.isFirstResponder)
        root.deliver(.remoteControl(.play))
        root.deliver(.key(KeyEvent(keyCode: KeyCode.escape)))
        #expect(controller.events == ["controller play", "controller key \(KeyCode.escape)"])
        // A plain controller handles nothing: the root is the end of the chain.
        let plain = ViewController()
        let other = present(plain)
        other.deliver(.remoteControl(.seekForward))
        #expect(other.unhandled == ["remote control seekForward"])
    }

    @Test("a text field edits: typing, backspace, delete, arrows with shift, select-all, selection by dragging")
    func textEditing() {
        let controller = Recorder()
        let root = present(controller, width: 300)
        let field = TextField()
        field.frame = Rect(x: 0, y: 0, width: 300, height: 30)
        controller.view.addSubview(field)
        root.deliver(Self.down(5, 15))
        root.deliver(Self.up(5, 15))
        #expect(field.isFirstResponder)
        root.deliver(.text("hello world"))
        #expect(field.text == "hello world" && field.selection == 11..<11)
        root.deliver(.key(KeyEvent(keyCode: KeyCode.backspace)))
        root.deliver(.key(KeyEvent(keyCode: KeyCode.home)))
        root.deliver(.key(KeyEvent(keyCode: KeyCode.delete)))
        #expect(field.text == "ello worl" && field.selection == 0..<0)
        root.deliver(.key(KeyEvent(keyCode: KeyCode.right, modifiers: .shift)))
        root.deliver(.key(KeyEvent(keyCode: KeyCode.right, modifiers: .shift)))
        #expect(field.selection == 0..<2)
        root.deliver(.text("J"))
        #expect(field.text == "Jlo worl")
        root.deliver(.key(KeyEvent(keyCode: KeyCode.a, modifiers: .control)))
        #expect(field.selection == 0..<8)
        // Dragging from the start to past the end selects everything; typing replaces it.
        let end = field.offset(ofCharacter: 8) + 20
        root.deliver(Self.down(field.offset(ofCharacter: 0), 15))
        root.deliver(.pointer(PointerEvent(.moved, x: end, y: 15, buttons: 1)))
        root.deliver(Self.up(end, 15))
        #expect(field.selection == 0..<8)
        root.deliver(.text("é👋"))
        #expect(field.text == "é👋" && field.selection == 2..<2)
        // A press elsewhere takes the first responder away.
        root.deliver(Self.down(100, 80))
        #expect(!field.isFirstResponder)
    }

    @Test("a button runs its action only when the press ends inside it, and not when disabled")
    func button() {
        let controller = Recorder()
        let root = present(controller)
        var taps = 0
        let button = Button(title: "Go") { _ in taps += 1 }
        button.frame = Rect(x: 10, y: 10, width: 80, height: 30)
        controller.view.addSubview(button)
        root.deliver(Self.down(20, 20))
        #expect(button.state == .highlighted)
        root.deliver(.pointer(PointerEvent(.moved, x: 150, y: 80, buttons: 1)))
        #expect(button.state == .normal)
        root.deliver(Self.up(150, 80))
        #expect(taps == 0)
        root.deliver(Self.down(20, 20))
        root.deliver(Self.up(25, 25))
        #expect(taps == 1)
        button.isEnabled = false
        root.deliver(Self.down(20, 20))
        root.deliver(Self.up(20, 20))
        #expect(taps == 1 && button.state == .disabled)
    }

    @Test("damage: a nested view's change is its rect in root points, in pixels at the scale, merged when overlapping")
    func damage() {
        let controller = Recorder()
        let root = present(controller, scale: 2)
        let box = View(frame: Rect(x: 10, y: 20, width: 100, height: 50))
        let label = Label(text: "a")
        label.frame = Rect(x: 5, y: 5, width: 30.5, height: 10)
        box.addSubview(label)
        controller.view.addSubview(box)
        _ = root.prepareFrame(at: .now)
        #expect(root.needsFrame == false)
        label.text = "b"
        #expect(root.needsFrame)
        #expect(root.prepareFrame(at: .now) == [PixelRect(x: 30, y: 50, width: 61, height: 20)])
        label.textColor = .black
        box.backgroundColor = .white
        #expect(root.prepareFrame(at: .now) == [PixelRect(x: 20, y: 40, width: 200, height: 100)], "the label's rect is inside the box's")
        label.text = "b"  // no change: no damage
        #expect(root.needsFrame == false)
        #expect(ServiceRoot.merge([PixelRect(x: 0, y: 0, width: 10, height: 10), PixelRect(x: 50, y: 50, width: 5, height: 5),
                                   PixelRect(x: 5, y: 5, width: 10, height: 10)])
                == [PixelRect(x: 50, y: 50, width: 5, height: 5), PixelRect(x: 0, y: 0, width: 15, height: 15)])
    }

    @Test("stacks lay out along their axis with spacing and insets; hidden views take no space")
    func stackLayout() {
        let controller = Recorder()
        let root = present(controller, width: 200, height: 300)
        let a = CanvasView(preferredHeight: 40) { _, _ in }, b = CanvasView(preferredHeight: 60) { _, _ in }, c = CanvasView(preferredHeight: 10) { _, _ in }
        let stack = StackView(axis: .vertical, spacing: 5, insets: EdgeInsets(all: 10), arrangedSubviews: [a, b, c])
        stack.frame = Rect(x: 0, y: 0, width: 200, height: 300)
        controller.view.addSubview(stack)
        _ = root.prepareFrame(at: .now)
        #expect(a.frame == Rect(x: 10, y: 10, width: 180, height: 40))
        #expect(b.frame == Rect(x: 10, y: 55, width: 180, height: 60))
        #expect(c.frame == Rect(x: 10, y: 120, width: 180, height: 10))
        b.isHidden = true
        _ = root.prepareFrame(at: .now)
        #expect(c.frame == Rect(x: 10, y: 55, width: 180, height: 10))
        let row = StackView(axis: .horizontal, spacing: 10, distribution: .fillEqually, arrangedSubviews: [View(), View()])
        row.frame = Rect(x: 0, y: 0, width: 210, height: 30)
        controller.view.addSubview(row)
        _ = root.prepareFrame(at: .now)
        #expect(row.arrangedSubviews.map(\.frame) == [Rect(x: 0, y: 0, width: 100, height: 30), Rect(x: 110, y: 0, width: 100, height: 30)])
    }

    @Test("labels wrap at spaces within their width, break long words, and end cut text with an ellipsis")
    func wrapping() {
        let font = Font.body
        let width = TextMeasure.width(of: "hello world", font: font) + 1
        #expect(TextMeasure.lines(of: "hello world hello world", font: font, width: width) == ["hello world", "hello world"])
        #expect(TextMeasure.lines(of: "a\nb", font: font, width: 500) == ["a", "b"])
        let long = TextMeasure.lines(of: String(repeating: "x", count: 40), font: font, width: width)
        #expect(long.count > 1 && long.allSatisfy { TextMeasure.width(of: $0, font: font) <= width })
        let cut = TextMeasure.lines(of: "hello world hello world hello world", font: font, width: width, maxLines: 2)
        #expect(cut.count == 2 && cut[1].hasSuffix("…"))
    }

    @Test("an animated progress change steps once per frame, eased, and ends exactly at the value")
    func progressAnimation() {
        let controller = Recorder()
        let root = present(controller)
        let bar = ProgressView()
        bar.frame = Rect(x: 0, y: 0, width: 100, height: 6)
        controller.view.addSubview(bar)
        _ = root.prepareFrame(at: .now)
        bar.setProgress(1, animated: true)
        let start = ContinuousClock.now
        var shown: [Double] = []
        for step in 0...4 {
            _ = root.prepareFrame(at: start + .milliseconds(100 * step))
            shown.append(bar.displayedProgress)
        }
        #expect(shown.first == 0 && shown.last == 1, "\(shown)")
        #expect(zip(shown, shown.dropFirst()).allSatisfy { $0 <= $1 } && Set(shown).count >= 4, "eased steps up: \(shown)")
        #expect(root.needsFrame == false, "the animation ended")
        bar.setProgress(0.25, animated: false)
        #expect(bar.displayedProgress == 0.25 && bar.progress == 0.25)
    }
}

/// Edge cases a reviewer found, kept fixed.
@MainActor
@Suite("View toolkit edge cases")
struct ToolkitEdgeCaseTests {
    func present(_ controller: ViewController) -> ServiceRoot {
        let root = ServiceRoot(controller: controller, connection: nil)
        root.resize(to: Size(width: 200, height: 100), scale: 1)
        _ = root.prepareFrame(at: .now)
        return root
    }

    @Test("wrapped text that fits its line limit gets no ellipsis")
    func noSpuriousEllipsis() {
        #expect(TextMeasure.lines(of: "hello\nworld", font: .body, width: 500, maxLines: 2) == ["hello", "world"])
        #expect(TextMeasure.lines(of: "hello\nworld\nagain", font: .body, width: 500, maxLines: 2) == ["hello", "world…"])
    }

    @Test("a combining mark joins the character before it: the caret stays at the end and backspace deletes the whole character")
    func combiningMarks() {
        let controller = ViewController()
        let root = present(controller)
        let field = TextField()
        field.frame = Rect(x: 0, y: 0, width: 200, height: 30)
        controller.view.addSubview(field)
        #expect(field.becomeFirstResponder())
        root.deliver(.text("e"))
        root.deliver(.text("\u{301}"))
        #expect(field.text == "e\u{301}" && field.text.count == 1 && field.selection == 1..<1)
        root.deliver(.key(KeyEvent(keyCode: KeyCode.backspace)))
        #expect(field.text.isEmpty)
        root.deliver(.text("abc"))
        root.deliver(.key(KeyEvent(keyCode: KeyCode.left, modifiers: .shift)))
        field.text = "x"  // from code: the selection and its anchor stay inside the text
        root.deliver(.key(KeyEvent(keyCode: KeyCode.left, modifiers: .shift)))
        #expect(field.selection == 0..<1, "\(field.selection)")
    }

    @Test("a button disabled during a press is not left highlighted; a drag that began elsewhere does not highlight it")
    func buttonHighlight() {
        let controller = ViewController()
        let root = present(controller)
        let button = Button(title: "Go")
        button.frame = Rect(x: 0, y: 0, width: 80, height: 30)
        controller.view.addSubview(button)
        root.deliver(.pointer(PointerEvent(.down, x: 10, y: 10, button: 1, buttons: 1)))
        button.isEnabled = false
        root.deliver(.pointer(PointerEvent(.up, x: 10, y: 10, button: 1)))
        button.isEnabled = true
        #expect(button.state == .normal)
        root.deliver(.pointer(PointerEvent(.moved, x: 10, y: 10, buttons: 1)))
        #expect(button.state == .normal)
    }

    @Test("a superseded animation stops: no frames are asked for once the value is set without animation")
    func supersededAnimation() {
        let controller = ViewController()
        let root = present(controller)
        let bar = ProgressView()
        bar.frame = Rect(x: 0, y: 0, width: 100, height: 6)
        controller.view.addSubview(bar)
        _ = root.prepareFrame(at: .now)
        bar.setProgress(0.5, animated: true)
        bar.setProgress(0.8, animated: false)
        _ = root.prepareFrame(at: .now)
        #expect(!root.needsFrame && bar.displayedProgress == 0.8)
        // A view that leaves the screen ends its animation too.
        bar.setProgress(0.1, animated: true)
        bar.removeFromSuperview()
        _ = root.prepareFrame(at: .now)
        #expect(!root.needsFrame)
    }

    @Test("damage is clipped to the surface, and damage wholly outside it is no frame at all")
    func damageOutside() {
        let controller = ViewController()
        let root = present(controller)
        let view = View(frame: Rect(x: 180, y: 90, width: 50, height: 50))
        view.clipsToBounds = false
        controller.view.clipsToBounds = false
        controller.view.addSubview(view)
        let surface = PixelRect(x: 0, y: 0, width: 200, height: 100)
        _ = root.prepareFrame(at: .now, clippedTo: surface)
        view.backgroundColor = .black
        #expect(root.prepareFrame(at: .now, clippedTo: surface) == [PixelRect(x: 180, y: 90, width: 20, height: 10)])
        view.frame = Rect(x: 300, y: 300, width: 10, height: 10)
        _ = root.prepareFrame(at: .now, clippedTo: surface)
        view.backgroundColor = .white
        #expect(root.prepareFrame(at: .now, clippedTo: surface) == [])
    }
}

/// Images: PNG bytes in (as a shared item arrives), drawn by an ImageView, pixels out.
@MainActor
@Suite("Image view")
struct ImageViewTests {
    @Test("a PNG decodes and an image view at one pixel per image pixel draws it exactly; bad PNGs are errors that say so")
    func drawsPNG() throws {
        // A 4×2 image: the left half red, the right half green (made and encoded by the host's API).
        let png = try RemoteImage(width: 4, height: 2) { x, _ in x < 2 ? 0xFFFF_0000 : 0xFF00_FF00 }.pngData()
        let image = try Bitmap(pngData: png)
        #expect(image.width == 4 && image.height == 2)
        let view = ImageView(image: image, contentMode: .center)
        view.frame = Rect(x: 0, y: 0, width: 8, height: 4)
        #expect(view.imageRect == Rect(x: 2, y: 1, width: 4, height: 2))
        let buffer = try SurfaceBuffer(id: 1, width: 8, height: 4)
        buffer.draw { context in
            context.fill(Rect(x: 0, y: 0, width: 8, height: 4), with: .white)
            view.draw(in: context)
        }
        #expect(buffer.pixel(x: 2, y: 1) == 0xFFFF_0000 && buffer.pixel(x: 3, y: 2) == 0xFFFF_0000)
        #expect(buffer.pixel(x: 4, y: 1) == 0xFF00_FF00 && buffer.pixel(x: 5, y: 2) == 0xFF00_FF00)
        #expect(buffer.pixel(x: 1, y: 1) == 0xFFFF_FFFF && buffer.pixel(x: 6, y: 2) == 0xFFFF_FFFF)

        let garbage = #expect(throws: RemoteError.self) { try Bitmap(pngData: [0x89, 0x50, 0x4E, 0x47, 1, 2, 3]) }
        #expect(garbage?.reason.contains("7 bytes") == true, "\(String(describing: garbage))")
        let missing = #expect(throws: RemoteError.self) { try Bitmap(contentsOfPNG: "/nonexistent/icon.png") }
        #expect(missing?.reason.contains("/nonexistent/icon.png") == true)
    }

    @Test("a bitmap drawn with a context keeps its pixels through PNG and scaling; a stroke has round ends, one point a dot")
    func drawnBitmap() throws {
        let red: UInt32 = 0xFFFF_0000, green: UInt32 = 0xFF00_FF00, blue: UInt32 = 0xFF00_00FF, white: UInt32 = 0xFFFF_FFFF
        let halves = try Bitmap(width: 8, height: 4) { context in
            context.fill(Rect(x: 0, y: 0, width: 4, height: 4), with: Color(argb: red))
            context.fill(Rect(x: 4, y: 0, width: 4, height: 4), with: Color(argb: green))
        }
        #expect(halves.width == 8 && halves.height == 4)
        let decoded = try Bitmap(pngData: try halves.pngData())
        let scaled = try decoded.scaled(width: 4, height: 2)
        #expect(scaled.width == 4 && scaled.height == 2)
        let buffer = try SurfaceBuffer(id: 1, width: 8, height: 4)
        buffer.draw { context in
            context.fill(Rect(x: 0, y: 0, width: 8, height: 4), with: .white)
            context.draw(decoded, in: Rect(x: 0, y: 0, width: 8, height: 4))
        }
        #expect(buffer.pixel(x: 0, y: 0) == red && buffer.pixel(x: 3, y: 3) == red && buffer.pixel(x: 4, y: 0) == green && buffer.pixel(x: 7, y: 3) == green)
        buffer.draw { context in
            context.fill(Rect(x: 0, y: 0, width: 8, height: 4), with: .white)
            context.draw(scaled, in: Rect(x: 0, y: 0, width: 4, height: 2))
        }
        #expect(buffer.pixel(x: 0, y: 0) == red && buffer.pixel(x: 3, y: 1) == green && buffer.pixel(x: 5, y: 3) == white)
        #expect(throws: RemoteError.self) { try Bitmap(width: 0, height: 4) { _ in } }
        #expect(throws: RemoteError.self) { try halves.scaled(width: 4, height: SurfaceLimits.maxDimension + 1) }

        let strokes = try Bitmap(width: 24, height: 10) { context in
            context.fill(Rect(x: 0, y: 0, width: 24, height: 10), with: .white)
            context.strokePolyline([Point(x: 5, y: 5)], width: 4, color: Color(argb: red))
            context.strokePolyline([Point(x: 10, y: 5), Point(x: 14, y: 5), Point(x: 18, y: 5)], width: 2, color: Color(argb: blue))
        }
        let canvas = try SurfaceBuffer(id: 2, width: 24, height: 10)
        canvas.draw { context in context.draw(strokes, in: Rect(x: 0, y: 0, width: 24, height: 10)) }
        #expect(canvas.pixel(x: 4, y: 4) == red && canvas.pixel(x: 5, y: 5) == red, "a dot 4 across around (5, 5)")
        #expect(canvas.pixel(x: 7, y: 5) == white && canvas.pixel(x: 5, y: 7) == white && canvas.pixel(x: 2, y: 2) == white)
        #expect(canvas.pixel(x: 12, y: 4) == blue && canvas.pixel(x: 16, y: 5) == blue, "a line 2 wide along y = 5")
        #expect(canvas.pixel(x: 12, y: 3) == white && canvas.pixel(x: 12, y: 6) == white)
        #expect(canvas.pixel(x: 9, y: 4) != white && canvas.pixel(x: 9, y: 4) != blue, "its round end reaches past the first point, partly")
    }
}

/// Occlusion: what an opaque view covers is not drawn, and the pixels are the same.
@MainActor
@Suite("Opaque views")
struct OpaqueViewTests {
    /// A view that counts its draws.
    final class Counting: View {
        var draws = 0
        override func draw(in context: GraphicsContext) { draws += 1 }
    }

    @Test("a redraw inside an opaque view skips the views under it and the clear; one that reaches past it draws them")
    func occlusion() throws {
        let controller = ViewController()
        let root = ServiceRoot(controller: controller, connection: nil)
        root.resize(to: Size(width: 8, height: 4), scale: 1)
        _ = root.prepareFrame(at: .now)
        let below = Counting(frame: Rect(x: 0, y: 0, width: 8, height: 4))
        below.backgroundColor = Color(argb: 0xFF00_00FF)
        let cover = View(frame: Rect(x: 0, y: 0, width: 4, height: 4))
        cover.backgroundColor = Color(argb: 0x80FF_0000)  // translucent: not a cover
        controller.view.addSubview(below)
        controller.view.addSubview(cover)
        let buffer = try SurfaceBuffer(id: 1, width: 8, height: 4)
        let left = [PixelRect(x: 0, y: 0, width: 4, height: 4)]
        buffer.draw(clippedTo: left) { root.draw(in: $0, dirty: left) }
        #expect(below.draws == 1)

        cover.backgroundColor = Color(argb: 0xFFFF_0000)
        buffer.draw(clippedTo: left) { root.draw(in: $0, dirty: left) }
        #expect(below.draws == 1, "the opaque cover hides the whole redraw")
        #expect(buffer.pixel(x: 0, y: 0) == 0xFFFF_0000 && buffer.pixel(x: 3, y: 3) == 0xFFFF_0000)

        cover.cornerRadius = 1  // rounded corners show what is under them
        buffer.draw(clippedTo: left) { root.draw(in: $0, dirty: left) }
        #expect(below.draws == 2)
        cover.cornerRadius = 0

        let all = [PixelRect(x: 0, y: 0, width: 8, height: 4)]
        buffer.draw(clippedTo: all) { root.draw(in: $0, dirty: all) }
        #expect(below.draws == 3, "a redraw reaching past the cover draws what is under it")
        #expect(buffer.pixel(x: 1, y: 1) == 0xFFFF_0000 && buffer.pixel(x: 6, y: 1) == 0xFF00_00FF)

        // A canvas that says it is opaque covers the root: no clear, its own fill only.
        let canvas = CanvasView { context, bounds in context.fill(bounds, with: Color(argb: 0xFF00_FF00)) }
        canvas.isOpaque = true
        canvas.frame = Rect(x: 0, y: 0, width: 8, height: 4)
        controller.view.addSubview(canvas)
        buffer.draw(clippedTo: all) { root.draw(in: $0, dirty: all) }
        #expect(below.draws == 3)
        #expect(buffer.pixel(x: 0, y: 0) == 0xFF00_FF00 && buffer.pixel(x: 7, y: 3) == 0xFF00_FF00)
    }
}
