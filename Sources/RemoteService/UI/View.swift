/// A rectangle on screen that draws and takes input: the base of the toolkit (`UIView`).
///
/// A view has a ``frame`` in its superview's points, an optional ``backgroundColor``, and
/// ``subviews`` drawn in order on top of it. Changing what a view shows marks its rect as
/// damaged (``setNeedsDisplay()``): the next frame redraws and commits only damaged rects.
/// Changing a size asks for layout (``setNeedsLayout()``): ``layoutSubviews()`` runs before the
/// next frame. Subclass and override ``draw(in:)`` to draw, or use a ``CanvasView``.
@MainActor
open class View: Responder {
    /// Where the view is, in its superview's points.
    public var frame: Rect {
        didSet {
            guard frame != oldValue else { return }
            superview?.setNeedsDisplay(oldValue)
            superview?.setNeedsDisplay(frame)
            if frame.size != oldValue.size { setNeedsLayout() }
        }
    }

    /// The view's own coordinates: its origin at (0, 0), its frame's size.
    public var bounds: Rect { Rect(origin: .zero, size: frame.size) }

    /// Painted under the content; `nil` paints nothing.
    public var backgroundColor: Color? { didSet { if backgroundColor != oldValue { setNeedsDisplay() } } }
    /// Rounds the background's corners and clips the content to them.
    public var cornerRadius: Double = 0 { didSet { if cornerRadius != oldValue { setNeedsDisplay() } } }
    /// A hidden view draws nothing and takes no input.
    public var isHidden = false {
        didSet {
            guard isHidden != oldValue else { return }
            // A hidden control cannot keep the keyboard: it would take keys no one sees go.
            if isHidden, let first = serviceRoot?.firstResponder as? View, first === self || first.isDescendant(of: self) {
                first.resignFirstResponder()
            }
            if let superview {
                superview.setNeedsDisplay(frame)
                invalidateContainerLayout()
            } else {
                serviceRoot?.invalidateAll()  // the root view
            }
        }
    }
    /// Whether the view paints every pixel of its bounds opaquely (`UIView.isOpaque`). What is
    /// behind an opaque view is then neither cleared nor drawn where the view covers a redraw:
    /// one pass over those pixels instead of two or more. Set it only when true (a wrong `true`
    /// leaves stale pixels behind the view); a view with an opaque ``backgroundColor`` and
    /// square corners counts as opaque without it.
    public var isOpaque = false
    /// When `false`, pointer events pass through the view and its subviews to what is below.
    public var isUserInteractionEnabled = true
    /// Whether content outside the bounds is cut off.
    public var clipsToBounds = true {
        didSet {
            guard clipsToBounds != oldValue else { return }
            if let superview { superview.setNeedsDisplay(superview.bounds) } else { serviceRoot?.invalidateAll() }
        }
    }

    public private(set) var subviews: [View] = []
    public private(set) weak var superview: View?
    /// The controller whose root view this is.
    weak var owningController: ViewController?
    var needsLayout = true

    public init(frame: Rect = .zero) {
        self.frame = frame
        accessibilityNodeID = Self.nextAccessibilityNodeID()
    }

    // MARK: Accessibility

    /// The view's node in the semantic tree (docs/Protocol.md, "Accessibility"): unique in the
    /// process, never 0, the same for the view's whole life.
    public let accessibilityNodeID: UInt32
    private static var lastAccessibilityNodeID: UInt32 = 0
    private static func nextAccessibilityNodeID() -> UInt32 {
        lastAccessibilityNodeID = lastAccessibilityNodeID == .max ? 1 : lastAccessibilityNodeID + 1
        return lastAccessibilityNodeID
    }

    /// What the view is to a screen reader and a script; `nil`: what its class says (a
    /// ``Button`` is a button, a ``Label`` a label, a plain view a group).
    public var accessibilityRole: AccessibilityRole? { didSet { if accessibilityRole != oldValue { accessibilityChanged() } } }
    /// What the view is called ("Save"); `nil`: what its class says (a label's text, a button's
    /// title, a text field's placeholder). Give every button without a title one.
    public var accessibilityLabel: String? { didSet { if accessibilityLabel != oldValue { accessibilityChanged() } } }
    /// What the view holds; `nil`: what its class says (a text field's text, a progress's percent).
    public var accessibilityValue: String? { didSet { if accessibilityValue != oldValue { accessibilityChanged() } } }
    /// Leaves the view, and every view inside it, out of the tree (decoration a screen reader
    /// should skip). Hidden views are left out anyway.
    public var isAccessibilityHidden = false { didSet { if isAccessibilityHidden != oldValue { accessibilityChanged() } } }
    /// Marks the view's node selected (a chosen item).
    public var isAccessibilitySelected = false { didSet { if isAccessibilitySelected != oldValue { accessibilityChanged() } } }

    /// Describes the view's node as its class sees it: role, label, value, states and actions
    /// (the tree fills in its id, frame and children, and applies ``accessibilityRole``,
    /// ``accessibilityLabel`` and ``accessibilityValue`` over what this says). A custom view
    /// overrides it to describe itself: call `super`, then set what differs.
    open func describeAccessibility(_ node: inout AccessibilityNodeDescription) {
        node.role = .group
        if canBecomeFirstResponder {
            node.states.insert(.focusable)
            node.actions.insert(.focus)
        }
        node.actions.insert(.scrollIntoView)
    }

    /// Something the tree shows of the view changed without a redraw (a property a custom
    /// ``describeAccessibility(_:)`` reads): the tree is looked at again after the next frame.
    public func accessibilityChanged() {
        serviceRoot?.setAccessibilityNeedsUpdate()
    }

    /// Focus takes the keyboard focus when the view can; the rest goes up the chain.
    open override func performAccessibilityAction(_ action: AccessibilityAction) -> Bool {
        if case .focus = action, canBecomeFirstResponder, isVisibleInTree {
            return becomeFirstResponder()
        }
        return super.performAccessibilityAction(action)
    }

    // MARK: Hierarchy

    /// Adds `view` on top of the other subviews (taking it from its old superview).
    public func addSubview(_ view: View) {
        view.removeFromSuperview()
        subviews.append(view)
        view.superview = self
        view.setNeedsLayout()
        setNeedsLayout()
        setNeedsDisplay(view.frame)
    }

    /// Takes the view out of its superview (it stops being first responder if it was).
    public func removeFromSuperview() {
        guard let superview else { return }
        if let first = serviceRoot?.firstResponder as? View, first === self || first.isDescendant(of: self) {
            first.resignFirstResponder()
        }
        superview.setNeedsDisplay(frame)
        superview.subviews.removeAll { $0 === self }
        superview.setNeedsLayout()
        self.superview = nil
    }

    /// Whether this view and every view above it are shown and take input (`isHidden` false,
    /// `isUserInteractionEnabled` true), up to the root view.
    var isVisibleInTree: Bool {
        var view: View? = self
        while let current = view {
            if current.isHidden || !current.isUserInteractionEnabled { return false }
            view = current.superview
        }
        return true
    }

    /// Whether `ancestor` is this view or one of its superviews.
    public func isDescendant(of ancestor: View) -> Bool {
        var view: View? = self
        while let current = view {
            if current === ancestor { return true }
            view = current.superview
        }
        return false
    }

    open override var next: Responder? { superview ?? owningController }

    override var serviceRoot: ServiceRoot? { superview?.serviceRoot ?? owningController?.attachedRoot }

    /// The host's appearance (standard until the view is on screen).
    public var traits: Traits { serviceRoot?.traits ?? .standard }

    /// Which way the view's controller reads (``ViewController/layoutDirection``; left to right
    /// until the view is on screen).
    public var layoutDirection: LayoutDirection { serviceRoot?.controller.layoutDirection ?? .leftToRight }

    /// Lays this view and every view below it out again before the next frame.
    func setNeedsLayoutThroughout() {
        setNeedsLayout()
        for view in subviews { view.setNeedsLayoutThroughout() }
    }

    /// The host's appearance changed: redraws. Override to react; call `super`.
    open func traitsDidChange() {
        setNeedsDisplay()
        setNeedsLayout()
        for view in subviews { view.traitsDidChange() }
    }

    // MARK: Drawing

    /// Marks the whole view for redrawing.
    public func setNeedsDisplay() { setNeedsDisplay(bounds) }

    /// Marks `rect` (in the view's points) for redrawing.
    public func setNeedsDisplay(_ rect: Rect) {
        guard let root = serviceRoot, let visible = rect.intersection(clipsToBounds ? bounds : rect) else { return }
        root.invalidate(convert(visible, to: nil))
    }

    /// Draws the view's content in its own points (the background is already painted). The
    /// context is clipped to what must be redrawn; draw everything, the clip keeps it cheap.
    open func draw(in context: GraphicsContext) {}

    /// Draws this view and its subviews where they meet `dirty` (in this view's points).
    func render(in context: GraphicsContext, dirty: Rect) {
        // The topmost opaque subview that covers the whole redraw hides everything under it.
        let covering = subviews.lastIndex { $0.covers(dirty) }
        context.withSavedState {
            if clipsToBounds { context.clip(to: bounds, radius: cornerRadius) }
            if covering == nil {
                if let backgroundColor { context.fill(bounds, with: backgroundColor) }
                draw(in: context)
            }
            for view in subviews[(covering ?? 0)...] where !view.isHidden {
                let local = dirty.offsetBy(dx: -view.frame.minX, dy: -view.frame.minY)
                guard !view.clipsToBounds || local.intersects(view.bounds) else { continue }
                context.withSavedState {
                    context.translate(x: view.frame.minX, y: view.frame.minY)
                    view.render(in: context, dirty: local)
                }
            }
        }
    }

    /// Whether the view, or a subview of it, paints all of `rect` (in the superview's points)
    /// opaquely, hiding what is behind (see ``isOpaque``).
    func covers(_ rect: Rect) -> Bool {
        guard !isHidden, frame.contains(rect) else { return false }
        if isOpaque || (cornerRadius == 0 && (backgroundColor?.alpha ?? 0) >= 1) { return true }
        // Rounded clipping cuts the corners off whatever the subviews paint.
        if clipsToBounds && cornerRadius > 0 { return false }
        let local = rect.offsetBy(dx: -frame.minX, dy: -frame.minY)
        return subviews.contains { $0.covers(local) }
    }

    // MARK: Layout

    /// Asks for ``layoutSubviews()`` before the next frame.
    public func setNeedsLayout() {
        needsLayout = true
        serviceRoot?.setNeedsFrame()
    }

    /// The view's size it would fit changed: its superview lays out again, and so does every
    /// stack above that (each one's own size may follow from its content).
    public func invalidateContainerLayout() {
        var view = superview
        while let current = view {
            current.setNeedsLayout()
            guard current is StackView, let next = current.superview else { break }
            view = next
        }
    }

    /// Lays out the subviews now if asked to (top down).
    public func layoutIfNeeded() {
        if needsLayout {
            needsLayout = false
            layoutSubviews()
        }
        for view in subviews { view.layoutIfNeeded() }
    }

    /// Sets the subviews' frames. The default does nothing; containers override it.
    open func layoutSubviews() {}

    /// The size the view would like within `size` (for stacks). The default is its frame's.
    open func sizeThatFits(_ size: Size) -> Size { frame.size }

    /// A size that stacks give the view whatever it would fit (`nil`: ``sizeThatFits(_:)``).
    public var fixedSize: Size? { didSet { if fixedSize != oldValue { invalidateContainerLayout() } } }

    /// ``fixedSize``, or what the view fits in `size`.
    public func fittingSize(_ size: Size) -> Size { fixedSize ?? sizeThatFits(size) }

    // MARK: Input

    /// The deepest visible, interactive view containing `point` (in this view's points), or
    /// `nil` (hidden and non-interactive views, and their subviews, are skipped).
    open func hitTest(_ point: Point) -> View? {
        guard !isHidden, isUserInteractionEnabled, bounds.contains(point) || !clipsToBounds else { return nil }
        for view in subviews.reversed() {
            if let hit = view.hitTest(Point(x: point.x - view.frame.minX, y: point.y - view.frame.minY)) { return hit }
        }
        return bounds.contains(point) ? self : nil
    }

    /// Where a pointer event happened, in this view's points.
    public func location(of event: PointerEvent) -> Point {
        convert(Point(x: event.x, y: event.y), from: nil)
    }

    /// `point` (in this view's points) in `view`'s points (`nil`: the root view's).
    public func convert(_ point: Point, to view: View?) -> Point {
        let mine = originInRoot, theirs = view?.originInRoot ?? .zero
        return Point(x: point.x + mine.x - theirs.x, y: point.y + mine.y - theirs.y)
    }

    /// `point` in `view`'s points (`nil`: the root view's) in this view's points.
    public func convert(_ point: Point, from view: View?) -> Point {
        let mine = originInRoot, theirs = view?.originInRoot ?? .zero
        return Point(x: point.x - mine.x + theirs.x, y: point.y - mine.y + theirs.y)
    }

    /// `rect` (in this view's points) in `view`'s points (`nil`: the root view's).
    public func convert(_ rect: Rect, to view: View?) -> Rect {
        Rect(origin: convert(rect.origin, to: view), size: rect.size)
    }

    /// This view's origin in the root view's points.
    private var originInRoot: Point {
        var point = Point.zero
        var view: View? = self
        while let current = view, let superview = current.superview {
            point.x += current.frame.minX
            point.y += current.frame.minY
            view = superview
        }
        return point
    }

    // MARK: Animation

    /// Calls `step` with the progress (0 to 1, eased) at each frame for `duration`, ending with 1.
    /// Frames come as the host allows them (each after the previous one's frame_done), so an
    /// animation never floods the host; a slow host gets fewer, larger steps. It ends early
    /// when cancelled or when the view leaves the screen.
    @discardableResult
    public func animate(duration: Duration, curve: AnimationCurve = .easeInOut, _ step: @escaping @MainActor (Double) -> Void) -> Animation {
        let animation = Animation(owner: self, duration: duration, curve: curve, step: step)
        guard let root = serviceRoot else {
            step(1)
            animation.cancel()
            return animation
        }
        root.addAnimation(animation)
        return animation
    }
}
