import Synchronization

/// One host connection's presentation of the service's UI: made when the connection opens,
/// it makes the view controller at the host's first size, then draws frames as the tree is
/// damaged, one at a time (the presenter paces them by the host's frame_done), and routes the
/// host's input into the tree.
@MainActor
final class ViewSurface {
    private let makeController: @MainActor () -> ViewController
    private let send: SurfacePresenter.Send
    /// The connection, once made (the surface is made before it).
    nonisolated let connection = Mutex<Connection?>(nil)
    private var presenter: SurfacePresenter?
    private(set) var root: ServiceRoot?
    private var waiter: CheckedContinuation<Void, Never>?
    private var closed = false
    private var appeared = false
    /// Requests waiting for the view to have committed everything pending.
    private var settleWaiters: [CheckedContinuation<Void, Never>] = []

    nonisolated init(makeController: @escaping @MainActor () -> ViewController, send: @escaping SurfacePresenter.Send) {
        self.makeController = makeController
        self.send = send
    }

    /// Applies a message about the view from the host: size and pacing, or input.
    func receive(_ message: SurfaceMessage) async throws(RemoteError) {
        switch message {
        case .resize(let size):
            let (width, height) = size.pixels
            let scale = Double(size.scalePermille) / 1000
            if let presenter {
                try await presenter.resize(to: size)
            } else {
                presenter = SurfacePresenter(width: width, height: height, send: send)
            }
            ensureRoot().resize(to: Size(width: Double(size.width), height: Double(size.height)), scale: scale)
            resume()  // the render loop may be waiting for its first root and size
        case .input(let event):
            // Traits may come before the first size; other input needs a view on screen.
            if case .traits = event {
                ensureRoot().deliver(event)
            } else {
                guard let root, presenter != nil else {
                    throw RemoteError(.protocolViolation, "\(message.name) before the host gave the view a size")
                }
                root.deliver(event)
            }
        default:
            guard let presenter else {
                throw RemoteError(.protocolViolation, "\(message.name) before the host gave the view a size")
            }
            try await presenter.receive(message)
        }
    }

    private func ensureRoot() -> ServiceRoot {
        if let root { return root }
        let root = ServiceRoot(controller: makeController(), connection: connection.withLock { $0 })
        root.wake = { [weak self] in self?.resume() }
        let send = self.send
        root.preferredSizeSink = { size in
            let width = min(max(Int(size.width.rounded(.up)), 1), SurfaceLimits.maxDimension)
            let height = min(max(Int(size.height.rounded(.up)), 1), SurfaceLimits.maxDimension)
            Task { try? await send(.preferredSize(width: width, height: height), []) }
        }
        _ = root.controller.view
        self.root = root
        return root
    }

    /// A one-way message for the controller; whether there was one to take it.
    func received(_ message: ServiceMessage) -> Bool {
        guard let root else { return false }
        root.controller.received(message)
        return true
    }

    /// A request for the controller; `nil` when there is none or it leaves it to the service.
    func handleRequest(_ request: ServiceMessage) async throws -> ServiceMessage? {
        guard let root else { return nil }
        return try await root.controller.handleRequest(request)
    }

    /// Draws frames until ``close()``.
    func run() async {
        while !closed {
            guard let root, let presenter, root.needsFrame else {
                // Everything pending is committed.
                for waiter in settleWaiters { waiter.resume() }
                settleWaiters.removeAll()
                await withCheckedContinuation { waiter = $0 }
                continue
            }
            // Frames follow the host's frame_done: animations step once per frame it allows.
            await presenter.waitUntilReady()
            if closed { break }
            let damage = root.prepareFrame(at: .now)
            if let damage, damage.isEmpty { continue }  // laid out, nothing visible changed
            do {
                let frame = try await presenter.beginFrame(damage: damage)
                frame.draw { context in root.draw(in: context, dirty: frame.redraw) }
                try await presenter.commit(frame)
            } catch {
                return
            }
            if !appeared {
                appeared = true
                root.controller.viewDidAppear()
            }
        }
    }

    /// Returns once the view has committed everything pending (at once when nothing is shown).
    func settle() async {
        guard !closed, let root, root.needsFrame || waiter == nil else { return }
        await withCheckedContinuation { settleWaiters.append($0) }
    }

    private func resume() {
        waiter.take()?.resume()
    }

    /// Ends the render loop; the controller's view disappears.
    func close() {
        closed = true
        for waiter in settleWaiters { waiter.resume() }
        settleWaiters.removeAll()
        resume()
        presenter?.close()
        if let root, appeared { root.controller.viewDidDisappear() }
        appeared = false
    }
}
