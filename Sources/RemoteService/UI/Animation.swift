/// How an animation's progress follows time.
public enum AnimationCurve: Sendable, Hashable {
    case linear, easeIn, easeOut, easeInOut

    /// The eased progress at linear progress `t` (0…1).
    public func callAsFunction(_ t: Double) -> Double {
        let t = min(max(t, 0), 1)
        switch self {
        case .linear: return t
        case .easeIn: return t * t
        case .easeOut: return 1 - (1 - t) * (1 - t)
        case .easeInOut: return t < 0.5 ? 2 * t * t : 1 - 2 * (1 - t) * (1 - t)
        }
    }
}

/// One running animation (see ``View/animate(duration:curve:_:)``): a step closure and its clock.
@MainActor
public final class Animation {
    weak var owner: View?
    private var isCancelled = false
    let duration: Duration
    let curve: AnimationCurve
    let step: @MainActor (Double) -> Void
    var start: ContinuousClock.Instant?

    init(owner: View, duration: Duration, curve: AnimationCurve, step: @escaping @MainActor (Double) -> Void) {
        self.owner = owner
        self.duration = duration
        self.curve = curve
        self.step = step
    }

    /// Stops it where it is: no more steps.
    public func cancel() { isCancelled = true }

    /// Advances to `now`; returns whether it goes on.
    func advance(to now: ContinuousClock.Instant) -> Bool {
        guard owner != nil, !isCancelled else { return false }
        let start = self.start ?? now
        self.start = start
        let elapsed = now - start
        let t = duration <= .zero ? 1 : min(1, elapsed.inSeconds / duration.inSeconds)
        step(curve(t))
        return t < 1
    }
}
