import RemoteCore
import Synchronization

/// A service's view: what it draws, for every host that presents it.
///
/// Give one to ``ServiceMain/run(identifier:capabilities:view:onRequest:onMessage:)``. When a
/// host presents the view (sends a size), the SDK makes a surface for that connection and draws
/// a first frame; ``setNeedsDisplay(_:)`` draws the damaged part again on every surface. The
/// SDK owns buffers, damage and pacing: `draw` only paints, clipped to what must be redrawn.
public final class ServiceView: Sendable {
    /// Paints the view at `width` × `height` pixels. Called for every frame, clipped to what
    /// must be redrawn; it should paint everything (the clip keeps that cheap).
    public typealias Draw = @Sendable (_ context: GraphicsContext, _ width: Int, _ height: Int) -> Void

    let draw: Draw
    private let surfaces = Mutex<[ObjectIdentifier: ViewSurface]>([:])

    public init(draw: @escaping Draw) {
        self.draw = draw
    }

    /// Redraws `rect` (`nil`: everything) on every surface showing the view.
    public func setNeedsDisplay(_ rect: PixelRect? = nil) {
        for surface in surfaces.withLock({ Array($0.values) }) { surface.invalidate(rect) }
    }

    func add(_ surface: ViewSurface) { surfaces.withLock { $0[ObjectIdentifier(surface)] = surface } }
    func remove(_ surface: ViewSurface) { _ = surfaces.withLock { $0.removeValue(forKey: ObjectIdentifier(surface)) } }
}

/// One connection's surface of a ``ServiceView``: created on the host's first resize, it draws
/// frames as the view is invalidated, one at a time (the presenter paces them).
final class ViewSurface: Sendable {
    private let view: ServiceView
    private let presenter: Mutex<SurfacePresenter?> = Mutex(nil)
    private let send: SurfacePresenter.Send
    private let state = Mutex<(damage: [PixelRect]?, dirty: Bool, size: (Int, Int), waiter: CheckedContinuation<Bool, Never>?, closed: Bool)>((nil, false, (0, 0), nil, false))

    init(view: ServiceView, send: @escaping SurfacePresenter.Send) {
        self.view = view
        self.send = send
    }

    /// Applies a surface message from the host.
    func receive(_ message: SurfaceMessage) async throws(RemoteError) {
        if case .resize(let size) = message {
            let (width, height) = size.pixels
            // The first size makes the presenter; later ones resize it.
            let existing = presenter.withLock { presenter -> SurfacePresenter? in
                if let presenter { return presenter }
                presenter = SurfacePresenter(width: width, height: height, send: send)
                return nil
            }
            if let existing { try await existing.resize(to: size) }
            state.withLock { $0.size = (width, height) }
            invalidate(nil)
            return
        }
        guard let presenter = presenter.withLock({ $0 }) else {
            throw RemoteError(.protocolViolation, "\(message.name) before the host gave the view a size")
        }
        try await presenter.receive(message)
    }

    /// Marks `rect` (`nil`: all) for the next frame.
    func invalidate(_ rect: PixelRect?) {
        let waiter = state.withLock { state in
            if let rect, state.dirty ? state.damage != nil : true {
                state.damage = (state.dirty ? state.damage ?? [] : []) + [rect]
            } else {
                state.damage = nil
            }
            state.dirty = true
            return state.waiter.take()
        }
        waiter?.resume(returning: true)
    }

    /// Draws frames until ``close()``.
    func run() async {
        view.add(self)
        defer { view.remove(self) }
        while let (damage, size) = await nextFrame() {
            guard let presenter = presenter.withLock({ $0 }) else { continue }
            let draw = view.draw
            do {
                try await presenter.present(damage: damage) { context in draw(context, size.0, size.1) }
            } catch {
                return
            }
        }
    }

    /// Ends the render loop.
    func close() {
        state.withLock { state in
            state.closed = true
            return state.waiter.take()
        }?.resume(returning: false)
        presenter.withLock { $0 }?.close()
    }

    private func nextFrame() async -> ([PixelRect]?, (Int, Int))? {
        while true {
            let ready = state.withLock { state -> ([PixelRect]?, (Int, Int))?? in
                if state.closed { return .some(nil) }
                guard state.dirty else { return nil }
                state.dirty = false
                defer { state.damage = nil }
                return .some((state.damage, state.size))
            }
            if let ready { return ready }
            let proceed = await withCheckedContinuation { continuation in
                let now = state.withLock { state -> Bool? in
                    if state.closed { return false }
                    if state.dirty { return true }
                    state.waiter = continuation
                    return nil
                }
                if let now { continuation.resume(returning: now) }
            }
            if !proceed { return nil }
        }
    }
}
