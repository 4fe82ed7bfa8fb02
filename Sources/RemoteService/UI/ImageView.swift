/// Shows a ``Bitmap`` (`UIImageView`).
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

    public var image: Bitmap? { didSet { if image !== oldValue { setNeedsDisplay(); invalidateContainerLayout() } } }
    public var contentMode: ContentMode { didSet { if contentMode != oldValue { setNeedsDisplay() } } }

    public init(image: Bitmap? = nil, contentMode: ContentMode = .scaleAspectFit) {
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

    /// An image; give it an ``View/accessibilityLabel`` that says what it shows.
    open override func describeAccessibility(_ node: inout AccessibilityNodeDescription) {
        super.describeAccessibility(&node)
        node.role = .image
    }

    open override func sizeThatFits(_ size: Size) -> Size {
        guard let image else { return Size(width: size.width, height: 0) }
        guard image.width > 0 else { return .zero }
        let height = min(size.height, Double(image.height) * min(1, size.width / Double(image.width)))
        return Size(width: size.width, height: height.rounded(.up))
    }
}
