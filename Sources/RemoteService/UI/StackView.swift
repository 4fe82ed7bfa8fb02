/// Lays out its arranged subviews in a row or a column (`UIStackView`): each gets the size it
/// fits along the axis, and the stack's width (or height) across it, less the insets. A row
/// runs from the leading edge: the right in a right-to-left view (``View/layoutDirection``).
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
        // A right-to-left view's rows start at the right.
        let mirrored = axis == .horizontal && layoutDirection == .rightToLeft
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
                : Rect(x: mirrored ? content.minX + content.maxX - position - max(0, length) : position, y: content.minY,
                       width: max(0, length), height: content.height)
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
