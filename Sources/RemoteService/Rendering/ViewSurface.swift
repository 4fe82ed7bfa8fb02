import struct Synchronization.Atomic

/// One host connection's presentation of the service's UI: made with the connection, it makes
/// the view controller at the host's first size, then draws frames as the tree is damaged, one
/// at a time (the presenter paces them by the host's frame_done), and routes the host's input
/// into the tree.
///
/// The connection routes its surface and input families here; the surface keeps no reference
/// to the connection (each message brings its context), so nothing needs setting up twice.
@MainActor
final class ViewSurface {
    private let makeController: @MainActor () -> ViewController
    /// Whether a controller exists to offer requests and messages to (readable off the main
    /// actor, so a service's requests do not hop to it for nothing).
    nonisolated let hasController = Atomic<Bool>(false)
    private var presenter: SurfacePresenter? {
        didSet { sharedPresenter.withLock { $0 = presenter } }
    }
    /// The presenter, for the connection's delivery task: it is thread-safe, and release_buffer and
    /// frame_done need nothing else, so they reach it without a hop to the main actor and back.
    private nonisolated let sharedPresenter = Mutex<SurfacePresenter?>(nil)
    private(set) var root: ServiceRoot?
    /// Wakes the render loop when it waits for work.
    private var wakeUp: Waiter<Void>?
    private var closed = false
    private var appeared = false
    /// Requests waiting for the view to have committed everything pending.
    private var settleWaiters = WaiterQueue<Void>()

    /// The connection's share, when the service runs shares.
    nonisolated let share: ShareEndpoint?

    nonisolated init(makeController: @escaping @MainActor () -> ViewController, share: ShareEndpoint? = nil) {
        self.makeController = makeController
        self.share = share
    }

    /// The controller, once the host has shown the view.
    var controller: ViewController? { root?.controller }

    /// Applies a surface message from the host: size and pacing. Pacing (release_buffer,
    /// frame_done) goes straight to the presenter, on the caller's executor.
    nonisolated func receive(_ message: SurfaceMessage, _ context: ConnectionContext) async throws(RemoteError) {
        switch message {
        case .releaseBuffer, .frameDone:
            if let presenter = sharedPresenter.withLock({ $0 }) { return try await presenter.receive(message) }
        default:
            break
        }
        try await apply(message, on: context.connection)
    }

    private func apply(_ message: SurfaceMessage, on connection: Connection) async throws(RemoteError) {
        guard !closed else { return }
        switch message {
        case .resize(let size):
            let (width, height) = size.pixels
            let scale = Double(size.scalePermille) / 1000
            if let presenter {
                try await presenter.resize(to: size)
            } else {
                presenter = SurfacePresenter(width: width, height: height, send: Self.sender(on: connection))
            }
            guard !closed else { return }
            ensureRoot(on: connection).resize(to: Size(width: Double(size.width), height: Double(size.height)), scale: scale)
            resume()  // the render loop may be waiting for its first root and size
        default:
            guard let presenter else {
                throw RemoteError(.protocolViolation, "\(message.name) before the host gave the view a size")
            }
            try await presenter.receive(message)
        }
    }

    /// Applies the host's input. Traits may come before the first size (they are applied when
    /// the view is made); other input before it has nothing to reach, and is dropped.
    func deliver(_ event: InputEvent, _ context: ConnectionContext) {
        guard !closed else { return }
        if case .traits = event {
            ensureRoot(on: context.connection).deliver(event)
        } else if let root, presenter != nil {
            root.deliver(event)
        }
    }

    /// Sends surface messages on `connection` while it exists (the presenter and the root must
    /// not keep it alive: it holds them through its routes).
    private nonisolated static func sender(on connection: Connection) -> SurfacePresenter.Send {
        { [weak connection] message, attachments throws(RemoteError) in
            guard let connection else { throw RemoteError(.invalidated, "the connection is gone") }
            try await connection.send(message, attachments: attachments)
        }
    }

    private func ensureRoot(on connection: Connection) -> ServiceRoot {
        if let root { return root }
        let root = ServiceRoot(controller: makeController(), connection: connection, share: share)
        root.wake = { [weak self] in self?.resume() }
        let send = Self.sender(on: connection)
        root.preferredSizeSink = { size in
            let width = min(max(Int(size.width.isFinite ? size.width.rounded(.up) : 1), 1), SurfaceLimits.maxDimension)
            let height = min(max(Int(size.height.isFinite ? size.height.rounded(.up) : 1), 1), SurfaceLimits.maxDimension)
            Task { try? await send(.preferredSize(width: width, height: height), []) }
        }
        // A share that came before the view: the controller hears of it before its view loads.
        if let context = share?.context { root.controller.beginRequest(with: context) }
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

    /// Draws frames until ``close()``, until a frame cannot be made (then it closes), or until
    /// the task is cancelled.
    func run() async {
        while !closed && !Task.isCancelled {
            guard let root, let presenter, root.needsFrame else {
                // Everything pending is committed.
                resumeSettled()
                await sleep(until: nil)
                continue
            }
            // Frames follow the host's frame_done: animations step once per frame it allows.
            do { try await presenter.waitUntilReady() } catch { break }
            if closed { break }
            let size = presenter.size
            let damage = root.prepareFrame(at: .now, clippedTo: PixelRect(x: 0, y: 0, width: size.width, height: size.height))
            if let damage, damage.isEmpty {
                // Laid out or animated with nothing visible changing: no frame, so no
                // frame_done to pace the next step; the host's own frame interval does instead.
                if root.needsFrame { await sleep(until: .now.advanced(by: presenter.frameInterval)) }
                continue
            }
            do {
                let frame = try await presenter.beginFrame(damage: damage)
                frame.draw { context in root.draw(in: context, dirty: frame.redraw) }
                try await presenter.commit(frame)
            } catch {
                break
            }
            if !appeared {
                appeared = true
                root.controller.viewDidAppear()
            }
        }
        close()
    }

    /// Waits until woken (new damage, a size, the end), or until `deadline`.
    private func sleep(until deadline: ContinuousClock.Instant?) async {
        let waiter = Waiter<Void>()
        wakeUp = waiter
        _ = try? await waiter.wait(until: deadline)
        if wakeUp === waiter { wakeUp = nil }
    }

    /// Returns once the view has committed everything pending (at once when nothing is shown),
    /// or when the request is cancelled.
    func settle() async {
        guard !closed, let root, root.needsFrame || wakeUp == nil else { return }
        let waiter = Waiter<Void>()
        settleWaiters.append(waiter)
        do { try await waiter.wait() } catch { settleWaiters.remove(waiter) }
    }

    private func resumeSettled() {
        settleWaiters.takeAll().resumeAll(returning: ())
    }

    private func resume() {
        wakeUp.take()?.resume(returning: ())
    }

    /// Ends the render loop; the controller's view disappears; the surface lets go of its
    /// buffers and its view tree.
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
    }
}
