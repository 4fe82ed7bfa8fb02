
/// The top of one presented view tree (one per host connection that shows the service): it
/// owns the controller, the size and traits the host gave, the damage waiting for the next
/// frame, the first responder and the running animations, and routes the host's input. It is
/// the last responder in the chain; what reaches it was not handled and is dropped.
@MainActor
final class ServiceRoot: Responder {
    let controller: ViewController
    /// The connection to the host (for the controller's own messages); weak, as the
    /// connection's handlers hold the surface that holds this root.
    private(set) weak var connection: Connection?
    /// The host's size for the view, in points, and pixels per point.
    private(set) var size = Size.zero
    private(set) var scale = 1.0
    private(set) var traits = Traits.standard
    private(set) var isFocused = false
    private(set) var firstResponder: Responder?
    /// The responder that took the last pointer press, until its release.
    private var pointerCapture: Responder?
    /// Damage since the last frame, in root points; `nil` with ``needsFrame``: everything.
    private var damage: [Rect]? = []
    private var animations: [Animation] = []
    private(set) var needsFrame = true
    /// Called when a frame becomes needed (wakes the render loop).
    var wake: @MainActor () -> Void = {}
    /// Sends preferred_size to the host.
    var preferredSizeSink: @MainActor (Size) -> Void = { _ in }
    /// Unhandled events that reached the root, by kind (for diagnostics and tests).
    private(set) var unhandled: [String] = []

    /// The connection's share, when the service runs shares.
    let share: ShareEndpoint?

    init(controller: ViewController, connection: Connection?, share: ShareEndpoint? = nil) {
        self.controller = controller
        self.connection = connection
        self.share = share
        super.init()
        controller.attachedRoot = self
    }

    override var serviceRoot: ServiceRoot? { self }

    // MARK: Host messages

    /// The host gave the view `size` points at `scale`.
    func resize(to size: Size, scale: Double) {
        let changed = size != self.size || scale != self.scale
        self.size = size
        self.scale = scale
        let view = controller.view
        view.frame = Rect(origin: .zero, size: size)
        guard changed else { return }
        invalidateAll()
        view.setNeedsLayout()
        controller.viewDidResize(to: size)
    }

    /// The host's appearance changed.
    func setTraits(_ traits: Traits) {
        guard traits != self.traits else { return }
        let previous = self.traits
        self.traits = traits
        controller.view.traitsDidChange()
        invalidateAll()
        controller.traitsDidChange(from: previous)
    }

    /// Routes one input event from the host.
    func deliver(_ event: InputEvent) {
        switch event {
        case .pointer(let pointer):
            let point = Point(x: pointer.x, y: pointer.y)
            let hit: Responder = controller.view.hitTest(point) ?? controller
            switch pointer.phase {
            case .down:
                if let first = firstResponder as? View, !(hit === first), !(hit is View && (hit as! View).isDescendant(of: first)) {
                    first.resignFirstResponder()
                }
                pointerCapture = hit
                hit.pointerDown(pointer)
            case .moved:
                (pointerCapture ?? hit).pointerMoved(pointer)
            case .up:
                let target = pointerCapture ?? hit
                pointerCapture = nil
                target.pointerUp(pointer)
            case .scroll:
                hit.scrolled(pointer)
            }
        case .key(let key):
            let target = firstResponder ?? controller
            if key.isDown { target.keyDown(key) } else { target.keyUp(key) }
        case .text(let text):
            (firstResponder ?? controller).insertText(text)
        case .remoteControl(let command):
            (firstResponder ?? controller).remoteControlReceived(command)
        case .focus(let focused):
            guard focused != isFocused else { return }
            isFocused = focused
            (firstResponder as? View)?.setNeedsDisplay()
            controller.focusChanged(focused)
        case .traits(let traits):
            setTraits(traits)
        }
    }

    // MARK: The end of the responder chain

    override func pointerDown(_ event: PointerEvent) { unhandled.append("pointer down") }
    override func pointerMoved(_ event: PointerEvent) {}
    override func pointerUp(_ event: PointerEvent) { unhandled.append("pointer up") }
    override func scrolled(_ event: PointerEvent) { unhandled.append("scroll") }
    override func keyDown(_ event: KeyEvent) { unhandled.append("key \(event.keyCode)") }
    override func keyUp(_ event: KeyEvent) {}
    override func insertText(_ text: String) { unhandled.append("text") }
    override func remoteControlReceived(_ command: RemoteCommand) { unhandled.append("remote control \(command)") }

    func setFirstResponder(_ responder: Responder?) {
        let previous = firstResponder
        guard previous !== responder else { return }
        firstResponder = responder
        previous?.firstResponderChanged()
        responder?.firstResponderChanged()
    }

    // MARK: Frames

    /// Marks `rect` (root points) for the next frame.
    func invalidate(_ rect: Rect) {
        guard !rect.isEmpty else { return }
        if damage != nil { damage!.append(rect) }
        setNeedsFrame()
    }

    func invalidateAll() {
        damage = nil
        setNeedsFrame()
    }

    func setNeedsFrame() {
        if !needsFrame {
            needsFrame = true
            wake()
        }
    }

    func addAnimation(_ animation: Animation) {
        animations.append(animation)
        setNeedsFrame()
    }

    func sendPreferredSize(_ size: Size) { preferredSizeSink(size) }

    /// Gets the next frame ready: advances animations, lays out, and returns the damage in
    /// pixels (`nil`: everything), clipped to `surface` when given, or, when nothing visible
    /// changed, an empty list.
    func prepareFrame(at now: ContinuousClock.Instant, clippedTo surface: PixelRect? = nil) -> [PixelRect]? {
        needsFrame = false
        let running = animations
        animations = []
        // An animation of a view no longer on screen (or cancelled) ends.
        for animation in running where animation.owner?.serviceRoot === self && animation.advance(to: now) {
            animations.append(animation)
        }
        controller.view.layoutIfNeeded()
        // Layout may have damaged more; it is part of this frame.
        needsFrame = !animations.isEmpty
        defer { damage = [] }
        guard let damage else { return nil }
        let pixels = damage.map { $0.pixels(scale: scale) }
        guard let surface else { return Self.merge(pixels) }
        return Self.merge(pixels.compactMap { $0.clipped(toWidth: surface.width, height: surface.height) })
    }

    /// Draws the tree into `context` (in pixels) where `dirty` (pixels) says.
    func draw(in context: GraphicsContext, dirty: [PixelRect]) {
        let bounds = PixelRect.union(dirty)
        let points = Rect(x: Double(bounds.x) / scale, y: Double(bounds.y) / scale,
                          width: Double(bounds.width) / scale, height: Double(bounds.height) / scale)
        let view = controller.view
        // What is under the root view is transparent (unless the root view covers it all).
        if !view.covers(points) { context.fill(bounds, with: .clear) }
        context.scale(by: scale)
        guard !view.isHidden else { return }
        view.render(in: context, dirty: points)
    }

    /// Overlapping rects merged into their union, until none overlap.
    static func merge(_ rects: [PixelRect]) -> [PixelRect] {
        var merged: [PixelRect] = []
        for rect in rects where rect.width > 0 && rect.height > 0 {
            var current = rect
            var changed = true
            while changed {
                changed = false
                for (index, other) in merged.enumerated() where other.intersects(current) {
                    current = PixelRect.union([current, other])
                    merged.remove(at: index)
                    changed = true
                    break
                }
            }
            merged.append(current)
        }
        return merged
    }
}
