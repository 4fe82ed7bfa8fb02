/// A view whose content is drawn by a closure (for custom drawing without subclassing).
@MainActor
open class CanvasView: View {
    /// Draws in the view's own points; the context is clipped to what must be redrawn.
    public typealias Draw = @MainActor (_ context: GraphicsContext, _ bounds: Rect) -> Void

    public var drawHandler: Draw { didSet { setNeedsDisplay() } }
    /// The height a stack gives it (`nil`: its frame's).
    public var preferredHeight: Double? { didSet { invalidateContainerLayout() } }

    public init(preferredHeight: Double? = nil, draw: @escaping Draw) {
        drawHandler = draw
        self.preferredHeight = preferredHeight
        super.init()
    }

    open override func draw(in context: GraphicsContext) { drawHandler(context, bounds) }

    /// Drawn content: a canvas, unless ``View/accessibilityRole`` says what it is (an image, say)
    /// and ``View/accessibilityLabel`` what it shows.
    open override func describeAccessibility(_ node: inout AccessibilityNodeDescription) {
        super.describeAccessibility(&node)
        node.role = .canvas
    }

    open override func sizeThatFits(_ size: Size) -> Size {
        Size(width: size.width, height: preferredHeight ?? frame.height)
    }
}
