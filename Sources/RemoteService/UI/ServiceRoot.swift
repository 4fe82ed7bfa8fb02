
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
    /// Tells the host that Tab left the view that way (focus_leave), and returns `true`; or
    /// returns `false` when the host did not announce `focus-leave` (Tab then wraps around).
    var focusLeaveSink: @MainActor (FocusDirection) -> Bool = { _ in false }
    /// Unhandled events that reached the root, by kind (for diagnostics and tests): the last 64.
    var unhandled: [String] = [] { didSet { if unhandled.count > 64 { unhandled.removeFirst(unhandled.count - 64) } } }
    /// Something the semantic tree shows may have changed since it was last described.
    private(set) var accessibilityNeedsUpdate = true
    /// The views of the tree last described, by node id, for the host's actions.
    var accessibilityViews: [UInt32: WeakView] = [:]

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
            setHostFocus(focused)
        case .focusEntering(let direction):
            // By Tab from the host's controls: the first (or last) control takes the focus, and
            // a view with none hands it straight on.
            setHostFocus(true)
            setFirstResponder(nil)
            moveFocus(direction)
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
    /// Scroll into view is done: the view shows all of itself. Any other action is dropped.
    override func performAccessibilityAction(_ action: AccessibilityAction) -> Bool {
        if case .scrollIntoView = action { return true }
        unhandled.append("accessibility \(action)")
        return false
    }

    /// The tree is to be described again after the next frame (or now, when no frame comes).
    func setAccessibilityNeedsUpdate() {
        guard !accessibilityNeedsUpdate else { return }
        accessibilityNeedsUpdate = true
        wake()
    }

    /// The tree was described: nothing is pending until the next change.
    func accessibilityDescribed() { accessibilityNeedsUpdate = false }

    func setFirstResponder(_ responder: Responder?) {
        let previous = firstResponder
        guard previous !== responder else { return }
        firstResponder = responder
        accessibilityNeedsUpdate = true
        // The ring moves: the next frame compares where it was drawn with where it is now.
        setNeedsFrame()
        previous?.firstResponderChanged()
        responder?.firstResponderChanged()
    }

    // MARK: Keyboard focus

    /// The host gave the view the keyboard focus, or took it.
    private func setHostFocus(_ focused: Bool) {
        guard focused != isFocused else { return }
        isFocused = focused
        (firstResponder as? View)?.setNeedsDisplay()
        setNeedsFrame()
        // A key held when the focus went has no release coming.
        if !focused { (firstResponder as? Button)?.cancelKeyPress() }
        controller.focusChanged(focused)
    }

    /// The views Tab visits, in order: every visible, interactive view that can become first
    /// responder (an enabled button, a text field), in reading order. Rows from the top; within
    /// a row (views whose middle is level with the row's first), from the leading edge: the
    /// left, or the right in a right-to-left view (``ViewController/layoutDirection``).
    func tabOrder() -> [View] {
        controller.view.layoutIfNeeded()
        var found: [(view: View, rect: Rect)] = []
        func walk(_ view: View) {
            guard !view.isHidden, view.isUserInteractionEnabled else { return }
            if view.canBecomeFirstResponder {
                let rect = view.convert(view.bounds, to: nil)
                if !rect.isEmpty { found.append((view, rect)) }
            }
            for subview in view.subviews { walk(subview) }
        }
        walk(controller.view)
        // Tree order breaks ties: the sort is stable.
        let byTop = found.enumerated().sorted { ($0.element.rect.minY, $0.offset) < ($1.element.rect.minY, $1.offset) }.map(\.element)
        var rows: [[(view: View, rect: Rect)]] = []
        for item in byTop {
            if let first = rows.last?.first, item.rect.midY < first.rect.maxY { rows[rows.count - 1].append(item) } else { rows.append([item]) }
        }
        let rightToLeft = controller.layoutDirection == .rightToLeft
        return rows.flatMap { row in
            row.enumerated().sorted { a, b in
                let (x, y) = rightToLeft ? (-a.element.rect.maxX, -b.element.rect.maxX) : (a.element.rect.minX, b.element.rect.minX)
                return (x, a.offset) < (y, b.offset)
            }.map(\.element.view)
        }
    }

    /// Moves the keyboard focus to the next (or previous) view in ``tabOrder()``. Past the last
    /// (or before the first), the focus leaves the view for the host's controls when the host
    /// announced `focus-leave` and the view has the host's focus (it gives away only what it
    /// has): the view then keeps no first responder and no host focus until the host gives it
    /// back. Otherwise it wraps around.
    func moveFocus(_ direction: FocusDirection) {
        let order = tabOrder()
        let current = (firstResponder as? View).flatMap { first in order.firstIndex { $0 === first } }
        let next: Int?
        switch (direction, current) {
        case (.forward, nil): next = order.isEmpty ? nil : 0
        case (.backward, nil): next = order.isEmpty ? nil : order.count - 1
        case (.forward, let index?): next = index + 1 < order.count ? index + 1 : nil
        case (.backward, let index?): next = index > 0 ? index - 1 : nil
        }
        if let next {
            order[next].becomeFirstResponder()
        } else if isFocused, focusLeaveSink(direction) {
            // The host's control has the keyboard now: the view is as after focus(false), with
            // nothing focused, until the host gives the focus back.
            setFirstResponder(nil)
            setHostFocus(false)
        } else if let wrapped = direction == .forward ? order.first : order.last {
            wrapped.becomeFirstResponder()
        }
    }

    /// Where the focus ring of `view` is drawn, in root points: around its bounds.
    static func focusRing(of view: View) -> Rect {
        let rect = view.convert(view.bounds, to: nil)
        return Rect(x: rect.minX - focusRingOutset, y: rect.minY - focusRingOutset,
                    width: rect.width + 2 * focusRingOutset, height: rect.height + 2 * focusRingOutset)
    }

    /// How far the ring's outer edge is from the control's (points): a 2-point ring after a
    /// 2-point gap.
    static let focusRingOutset = 4.0

    /// The view that shows a focus ring now: the first responder, while the view has the host's
    /// focus, when it and every view above it are visible.
    var focusRingView: View? {
        guard isFocused, let view = firstResponder as? View, view.serviceRoot === self, view.isVisibleInTree else { return nil }
        return view
    }

    /// Where the ring is now (root points) and its corners' radius; `nil`: no ring.
    private var currentRing: FocusRing? {
        focusRingView.map { FocusRing(rect: Self.focusRing(of: $0), radius: $0.cornerRadius + Self.focusRingOutset) }
    }

    struct FocusRing: Equatable {
        var rect: Rect
        var radius: Double
    }

    /// The ring as the last frame drew it: each frame compares it with where the ring is now,
    /// and redraws both when they differ, however the ring moved (focus, host focus, the control
    /// or a container moved, hidden, or rounded differently).
    private var drawnRing: FocusRing?

    // MARK: Frames

    /// Marks `rect` (root points) for the next frame.
    func invalidate(_ rect: Rect) {
        guard !rect.isEmpty else { return }
        accessibilityNeedsUpdate = true
        if damage != nil { damage!.append(rect) }
        setNeedsFrame()
    }

    func invalidateAll() {
        accessibilityNeedsUpdate = true
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
        let ring = currentRing
        if ring != drawnRing {
            if let drawnRing { invalidate(drawnRing.rect) }
            if let ring { invalidate(ring.rect) }
            drawnRing = ring
        }
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
        // The focus ring, over the tree and clipped by no container: a control flush with its
        // stack's edge still shows all of it.
        if let ring = drawnRing, ring.rect.intersects(points) {
            // The stroke lies inside the rect: a 2-point ring, then a 2-point gap to the control.
            context.strokeRoundedRect(ring.rect, radius: ring.radius, width: 2, color: traits.focusRingColor)
        }
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
