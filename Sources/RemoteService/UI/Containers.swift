/// Lays out its arranged subviews in a row or a column (`UIStackView`): each gets the size it
/// fits along the axis, and the stack's width (or height) across it, less the insets.
@MainActor
open class StackView: View {
    /// The direction the views follow each other in.
    public enum Axis: Sendable, Hashable {
        case vertical, horizontal
    }

    /// How the views share the length along the axis.
    public enum Distribution: Sendable, Hashable {
        /// Each its own size (cut to what is left); what is left stays empty at the end.
        case natural
        /// All the same length, filling the stack.
        case fillEqually
    }

    public var axis: Axis { didSet { setNeedsLayout() } }
    public var spacing: Double { didSet { setNeedsLayout() } }
    public var insets: EdgeInsets { didSet { setNeedsLayout() } }
    public var distribution: Distribution { didSet { setNeedsLayout() } }
    public private(set) var arrangedSubviews: [View] = []

    public init(axis: Axis = .vertical, spacing: Double = 8, insets: EdgeInsets = .zero, distribution: Distribution = .natural,
                arrangedSubviews: [View] = []) {
        self.axis = axis
        self.spacing = spacing
        self.insets = insets
        self.distribution = distribution
        super.init()
        for view in arrangedSubviews { addArrangedSubview(view) }
    }

    /// Adds `view` at the end.
    public func addArrangedSubview(_ view: View) {
        arrangedSubviews.append(view)
        addSubview(view)
    }

    /// Takes `view` out of the stack and its superview.
    public func removeArrangedSubview(_ view: View) {
        arrangedSubviews.removeAll { $0 === view }
        view.removeFromSuperview()
    }

    open override func layoutSubviews() {
        arrangedSubviews.removeAll { $0.superview !== self }
        let content = bounds.inset(by: insets)
        let visible = arrangedSubviews.filter { !$0.isHidden }
        guard !visible.isEmpty else { return }
        let gaps = spacing * Double(visible.count - 1)
        var position = axis == .vertical ? content.minY : content.minX
        let end = axis == .vertical ? content.maxY : content.maxX
        for view in visible {
            var length: Double
            switch (axis, distribution) {
            case (_, .fillEqually):
                length = ((axis == .vertical ? content.height : content.width) - gaps) / Double(visible.count)
            case (.vertical, .natural):
                length = view.fittingSize(content.size).height
            case (.horizontal, .natural):
                length = view.fittingSize(content.size).width
            }
            // A view never reaches past the end: the last ones get what is left.
            length = min(length, max(0, end - position))
            view.frame = axis == .vertical
                ? Rect(x: content.minX, y: position, width: content.width, height: max(0, length))
                : Rect(x: position, y: content.minY, width: max(0, length), height: content.height)
            position += length + spacing
        }
    }

    open override func sizeThatFits(_ size: Size) -> Size {
        let visible = arrangedSubviews.filter { !$0.isHidden }
        let inner = Size(width: size.width - insets.left - insets.right, height: size.height - insets.top - insets.bottom)
        let sizes = visible.map { $0.fittingSize(inner) }
        let gaps = spacing * Double(max(visible.count - 1, 0))
        return axis == .vertical
            ? Size(width: size.width, height: sizes.reduce(0) { $0 + $1.height } + gaps + insets.top + insets.bottom)
            : Size(width: sizes.reduce(0) { $0 + $1.width } + gaps + insets.left + insets.right,
                   height: (sizes.map(\.height).max() ?? 0) + insets.top + insets.bottom)
    }
}

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

    open override func sizeThatFits(_ size: Size) -> Size {
        Size(width: size.width, height: preferredHeight ?? frame.height)
    }
}

/// Shows an ``Image`` (`UIImageView`).
@MainActor
open class ImageView: View {
    /// How the image fills the view.
    public enum ContentMode: Sendable, Hashable {
        /// Scaled to fit inside, keeping its aspect ratio, centred.
        case scaleAspectFit
        /// Stretched to the view's bounds.
        case scaleToFill
        /// At its own size (one image pixel per point), centred.
        case center
    }

    public var image: Image? { didSet { if image !== oldValue { setNeedsDisplay(); invalidateContainerLayout() } } }
    public var contentMode: ContentMode { didSet { if contentMode != oldValue { setNeedsDisplay() } } }

    public init(image: Image? = nil, contentMode: ContentMode = .scaleAspectFit) {
        self.image = image
        self.contentMode = contentMode
        super.init()
    }

    /// Where the image is drawn, in the view's points.
    public var imageRect: Rect? {
        guard let image, image.width > 0, image.height > 0 else { return nil }
        let width = Double(image.width), height = Double(image.height)
        switch contentMode {
        case .scaleToFill:
            return bounds
        case .center:
            return Rect(x: ((bounds.width - width) / 2).rounded(), y: ((bounds.height - height) / 2).rounded(), width: width, height: height)
        case .scaleAspectFit:
            let factor = min(bounds.width / width, bounds.height / height)
            return Rect(x: (bounds.width - width * factor) / 2, y: (bounds.height - height * factor) / 2,
                        width: width * factor, height: height * factor)
        }
    }

    open override func draw(in context: GraphicsContext) {
        if let image, let rect = imageRect { context.draw(image, in: rect) }
    }

    open override func sizeThatFits(_ size: Size) -> Size {
        guard let image else { return Size(width: size.width, height: 0) }
        guard image.width > 0 else { return .zero }
        let height = min(size.height, Double(image.height) * min(1, size.width / Double(image.width)))
        return Size(width: size.width, height: height.rounded(.up))
    }
}

/// A bar filling from the left as progress goes from 0 to 1 (`UIProgressView`). Animated
/// changes ease from the shown value to the new one, a step per frame the host allows.
@MainActor
open class ProgressView: View {
    /// The value set, 0…1.
    public private(set) var progress: Double = 0
    /// The value drawn now (differs from ``progress`` while animating).
    public private(set) var displayedProgress: Double = 0 { didSet { if displayedProgress != oldValue { setNeedsDisplay() } } }
    /// `nil`: the traits' tint.
    public var progressTintColor: Color? { didSet { setNeedsDisplay() } }
    /// `nil`: the traits' fill colour.
    public var trackTintColor: Color? { didSet { setNeedsDisplay() } }
    /// How long an animated change takes.
    public var animationDuration: Duration = .milliseconds(300)
    /// The running animated change, stopped when another change comes.
    private var animation: Animation?

    public init(progress: Double = 0) {
        super.init()
        setProgress(progress, animated: false)
        cornerRadius = 3
    }

    /// Sets the value (clamped to 0…1); `animated` eases the bar there over ``animationDuration``.
    public func setProgress(_ value: Double, animated: Bool) {
        let target = value.isFinite ? min(max(value, 0), 1) : 0
        progress = target
        animation?.cancel()
        animation = nil
        guard animated, serviceRoot != nil, target != displayedProgress else {
            displayedProgress = target
            return
        }
        let start = displayedProgress
        animation = animate(duration: animationDuration, curve: .easeOut) { [weak self] t in
            self?.displayedProgress = start + (target - start) * t
        }
    }

    open override func sizeThatFits(_ size: Size) -> Size { Size(width: size.width, height: 6) }

    open override func draw(in context: GraphicsContext) {
        context.fillRoundedRect(bounds, radius: cornerRadius, with: trackTintColor ?? traits.fillColor)
        let width = (bounds.width * displayedProgress).rounded()
        if width > 0 {
            context.fillRoundedRect(Rect(x: 0, y: 0, width: width, height: bounds.height), radius: cornerRadius,
                                    with: progressTintColor ?? traits.tint)
        }
    }
}
