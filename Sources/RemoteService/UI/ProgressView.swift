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

    /// A progress from 0 to 1 at the value set (not the one drawn mid-animation), and its percent.
    open override func describeAccessibility(_ node: inout AccessibilityNodeDescription) {
        super.describeAccessibility(&node)
        node.role = .progress
        node.range = AccessibilityRange(minimum: 0, maximum: 1, value: progress)
        node.value = "\(Int((progress * 100).rounded())) %"
    }

    open override func draw(in context: GraphicsContext) {
        context.fillRoundedRect(bounds, radius: cornerRadius, with: trackTintColor ?? traits.fillColor)
        let width = (bounds.width * displayedProgress).rounded()
        if width > 0 {
            context.fillRoundedRect(Rect(x: 0, y: 0, width: width, height: bounds.height), radius: cornerRadius,
                                    with: progressTintColor ?? traits.tint)
        }
    }
}
