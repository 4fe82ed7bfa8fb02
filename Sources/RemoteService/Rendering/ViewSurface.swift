import Synchronization

/// One host connection's presentation of the service's UI: made when the connection opens,
/// it makes the view controller at the host's first size, then draws frames as the tree is
/// damaged, one at a time (the presenter paces them by the host's frame_done), and routes the
/// host's input into the tree.
@MainActor
final class ViewSurface {
    private let makeController: @MainActor () -> ViewController
    /// The connection, once made (the surface is made before it); cleared at ``close()`` so
    /// that the connection's handlers, which hold this surface, do not keep it alive.
    nonisolated let connection = Mutex<Connection?>(nil)
    /// Whether a controller exists to offer requests and messages to (readable off the main
    /// actor, so a service's requests do not hop to it for nothing).
    nonisolated let hasController = Atomic<Bool>(false)
    private var presenter: SurfacePresenter? {
        didSet { sharedPresenter.withLock { $0 = presenter } }
    }
    /// The presenter, for the connection's read loop: it is thread-safe, and release_buffer and
    /// frame_done need nothing else, so they reach it without a hop to the main actor and back.
    private nonisolated let sharedPresenter = Mutex<SurfacePresenter?>(nil)
    private(set) var root: ServiceRoot?
    private var waiter: CheckedContinuation<Void, Never>?
    private var closed = false
    private var appeared = false
    /// Requests waiting for the view to have committed everything pending, by ticket.
    private var settleWaiters: [Int: CheckedContinuation<Void, Never>] = [:]
    private var nextTicket = 0

    nonisolated init(makeController: @escaping @MainActor () -> ViewController) {
        self.makeController = makeController
    }

    /// Sends a surface message on the connection, while there is one.
    private nonisolated var send: SurfacePresenter.Send {
        { [weak self] message, attachments throws(RemoteError) in
            guard let current = self?.connection.withLock({ $0 }) else { throw RemoteError(.invalidated, "the connection is gone") }
            try await current.send(message, attachments: attachments)
        }
    }

    /// Applies a message about the view from the host: size and pacing, or input. Pacing
    /// (release_buffer, frame_done) goes straight to the presenter, on the caller's executor.
    nonisolated func receiveOnAnyThread(_ message: SurfaceMessage) async throws(RemoteError) {
        switch message {
        case .releaseBuffer, .frameDone:
            if let presenter = sharedPresenter.withLock({ $0 }) { return try await presenter.receive(message) }
        default:
            break
        }
        try await receive(message)
    }

    /// Applies a message about the view from the host: size and pacing, or input.
    func receive(_ message: SurfaceMessage) async throws(RemoteError) {
        guard !closed else { return }
        switch message {
        case .resize(let size):
            let (width, height) = size.pixels
            let scale = Double(size.scalePermille) / 1000
            if let presenter {
                try await presenter.resize(to: size)
            } else {
                presenter = SurfacePresenter(width: width, height: height, send: send)
            }
            guard !closed else { return }
            ensureRoot().resize(to: Size(width: Double(size.width), height: Double(size.height)), scale: scale)
            resume()  // the render loop may be waiting for its first root and size
        case .input(let event):
            // Traits may come before the first size (they are applied when the view is made);
            // other input before it has nothing to reach, and is dropped.
            if case .traits = event {
                ensureRoot().deliver(event)
            } else if let root, presenter != nil {
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
            let width = min(max(Int(size.width.isFinite ? size.width.rounded(.up) : 1), 1), SurfaceLimits.maxDimension)
            let height = min(max(Int(size.height.isFinite ? size.height.rounded(.up) : 1), 1), SurfaceLimits.maxDimension)
            Task { try? await send(.preferredSize(width: width, height: height), []) }
        }
        _ = root.controller.view
        self.root = root
        hasController.store(true, ordering: .releasing)
        return root
    }

    /// A one-way message for the controller; whether it took it.
    func received(_ message: ServiceMessage) -> Bool {
        guard let root, !closed else { return false }
        return root.controller.received(message)
    }

    /// A request for the controller; `nil` when there is none or it leaves it to the service.
    func handleRequest(_ request: ServiceMessage) async throws -> ServiceMessage? {
        guard let root, !closed else { return nil }
        return try await root.controller.handleRequest(request)
    }

    /// Draws frames until ``close()`` (or until a frame cannot be made: then it closes).
    func run() async {
        while !closed {
            guard let root, let presenter, root.needsFrame else {
                // Everything pending is committed.
                resumeSettled()
                await withCheckedContinuation { waiter = $0 }
                continue
            }
            // Frames follow the host's frame_done: animations step once per frame it allows.
            await presenter.waitUntilReady()
            if closed { break }
            let size = presenter.size
            let damage = root.prepareFrame(at: .now, clippedTo: PixelRect(x: 0, y: 0, width: size.width, height: size.height))
            if let damage, damage.isEmpty {
                // Laid out or animated with nothing visible changing: no frame, so no
                // frame_done to pace the next step; a display's frame interval does instead.
                if root.needsFrame { try? await Task.sleep(for: .milliseconds(16)) }
                continue
            }
            do {
                let frame = try await presenter.beginFrame(damage: damage)
                frame.draw { context in root.draw(in: context, dirty: frame.redraw) }
                try await presenter.commit(frame)
            } catch {
                close()
                return
            }
            if !appeared {
                appeared = true
                root.controller.viewDidAppear()
            }
        }
    }

    /// Returns once the view has committed everything pending (at once when nothing is shown),
    /// or when the request is cancelled.
    func settle() async {
        guard !closed, let root, root.needsFrame || waiter == nil else { return }
        let ticket = nextTicket
        nextTicket += 1
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                if Task.isCancelled || closed { return continuation.resume() }
                settleWaiters[ticket] = continuation
            }
        } onCancel: {
            Task { @MainActor [weak self] in self?.settleWaiters.removeValue(forKey: ticket)?.resume() }
        }
    }

    private func resumeSettled() {
        let waiters = settleWaiters.values
        settleWaiters.removeAll()
        for waiter in waiters { waiter.resume() }
    }

    private func resume() {
        waiter.take()?.resume()
    }

    /// Ends the render loop; the controller's view disappears; the surface lets go of the
    /// connection, its buffers and its view tree.
    func close() {
        guard !closed else { return }
        closed = true
        resume()
        resumeSettled()
        presenter?.close()
        presenter = nil
        if let root, appeared { root.controller.viewDidDisappear() }
        appeared = false
        root = nil
        hasController.store(false, ordering: .releasing)
        connection.withLock { $0 = nil }
    }
}
