import Dispatch
import CCairo
import RemoteCore

/// A service's view embedded in the host: what the service drew as an image, a stream of
/// damage, and the size the host gives it. Nothing toolkit-specific: any toolkit can blit
/// ``image``.
///
/// ```swift
/// let view = RemoteView(connection: launcher.connection(to: "com.example.compose"))
/// try await view.present(width: 320, height: 240)
/// for await damage in view.damage { blit(view.image, damage) }
/// ```
///
/// The host copies each committed frame's damage into its own image, then hands the buffer
/// back and allows the next frame; a service that breaks the surface rules is ended with the
/// reason. When the service is relaunched, the new process gets the same size, traits and focus.
///
/// **Restorable state.** A service whose view controller encodes its state
/// (`encodeRestorableState()` in RemoteService) sends it after frames the host has shown; the
/// view keeps the latest (``restorableState``, reported on ``restorableStates``), and a new
/// process that shows the view after the last one ended (a crash, an idle exit) starts with it,
/// before its first frame: the half-typed text comes back. A host keeps it for services whose
/// manifest allows it (`limits.restorableStateKiB`, 64 KiB by default; 0 turns it off).
///
/// **Keyboard focus.** Give the view the focus with `.focus(true)`, or, when Tab (Shift-Tab)
/// brings it from the host's own controls, with `.focusEntering(.forward)` (`.backward`): its
/// first (last) control takes it. With `Launcher.Configuration.takesFocusFromViews`, when Tab
/// goes past the view's last control (Shift-Tab before its first) the service says so on
/// ``focusLeaves``: the host's next control takes the focus, and the view keeps none until it is
/// given back. A service that does not move the focus across (it did not announce
/// `focus-leave`), or a host that did not set it, gets `.focus(true)` instead, and Tab wraps
/// around inside the view. A relaunched process gets `.focus(true)` if the view had the focus:
/// it starts with the control its restored state focuses, or none.
///
/// The view attaches itself to its connection as a listener: the connection tells it when a
/// channel to a (new) process opens, and the view routes that channel's surface messages to
/// itself and replays what the process must know. The connection knows nothing of views.
public final class RemoteView: Sendable {
    /// The connection whose service this view shows.
    public let connection: ServiceConnection
    /// The rects of the image each frame changed, in order.
    public let damage: AsyncStream<[PixelRect]>
    /// Each restorable state the view stored, as the service sent it (empty: the view has
    /// nothing to keep), in order; only the newest is buffered while nobody reads. For tests
    /// and diagnostics: wait for "state stored" rather than sleep.
    public let restorableStates: AsyncStream<[UInt8]>
    /// Each time the view's Tab (`FocusDirection.forward`) or Shift-Tab
    /// (`FocusDirection.backward`) left its last (first) control while it had the focus: the
    /// host's next (previous) control should take the keyboard focus. The view keeps none until
    /// the host gives it back (``send(_:)`` with `.focusEntering` or `.focus(true)`). Only with
    /// `Launcher.Configuration.takesFocusFromViews`; only the newest is buffered while nobody
    /// reads.
    public let focusLeaves: AsyncStream<FocusDirection>
    /// The view's semantic tree: what each control is, is called and holds, where it is (in the
    /// host's pixels), what the focus is on; a stream of its changes; actions sent back to the
    /// service (docs/Protocol.md, "Accessibility"). Empty until the service sends a tree (it does
    /// to a host whose launcher reads them: `Launcher.Configuration.readsAccessibility`).
    public let accessibility: RemoteAccessibility

    private let damageSink: AsyncStream<[PixelRect]>.Continuation
    private let restorableStateSink: AsyncStream<[UInt8]>.Continuation
    private let focusLeaveSink: AsyncStream<FocusDirection>.Continuation
    private let state = Mutex(State())

    private struct State {
        /// The compositor of the channel that carries the frames now.
        var compositor = SurfaceCompositor(checksSize: true)
        /// That channel's connection: a frame's `release_buffer` and `frame_done` go to the
        /// process that drew it, never to a later one.
        var frames: Connection?
        /// That channel's view streams, when it is a remote process's whose transport carries
        /// them: its frames come from there, and input goes there.
        var stream: (any RemoteViewStream)?
        /// What a new process is told first.
        var size: SurfaceSize?
        var traits: Traits?
        var focused: Bool?
        /// The view's latest restorable state (empty: none), for the next process.
        var restorable: [UInt8] = []
        /// The state the view was made with is still to be sent (to the process that shows it
        /// first, whether its channel opens now or was open already).
        var restorePending = false
        /// The most state the current channel's service may hold (its manifest's limit).
        var stateLimit = 0
        /// The semantic tree the current channel's process sent.
        var accessibility = AccessibilityTreeState()
        /// The size given before ``size``: a tree that followed a frame of that size still fits.
        var previousSize: SurfaceSize?
        /// A size being sent (before ``size`` takes it): a tree of it may come before the send returns.
        var sizeSending: SurfaceSize?
    }

    /// When the host shows a committed frame, which hands its buffer back and allows the next.
    public enum Presentation: Sendable, Hashable {
        /// As soon as it is composited into ``image`` (headless hosts, PNG writers): the
        /// service may draw the next frame at once. Such a host cannot tell a service that
        /// floods commits from a fast one (each commit was allowed by the time it is read);
        /// a flood costs it one copy per commit, at the pace it reads them.
        case immediate
        /// When the host calls ``framePresented()`` (after it put the frame on screen, e.g.
        /// at vsync). A commit before that is a flood, and ends the service.
        case manual
    }

    /// When frames count as shown.
    public let presentation: Presentation

    /// A view of `connection`'s service.
    ///
    /// - Parameters:
    ///   - connection: The connection whose service the view shows.
    ///   - presentation: When frames count as shown.
    ///   - restoringState: A restorable state the view starts with (one ``restorableState``
    ///     kept from an earlier view of the same service): the first process that shows it gets
    ///     it before its first size. `nil` or empty: none.
    public init(connection: ServiceConnection, presentation: Presentation = .immediate, restoringState: [UInt8]? = nil) {
        self.connection = connection
        self.presentation = presentation
        (damage, damageSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(64))
        (restorableStates, restorableStateSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
        (focusLeaves, focusLeaveSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
        accessibility = RemoteAccessibility(connection: connection)
        if let restoringState, !restoringState.isEmpty {
            state.withLock {
                $0.restorable = restoringState
                $0.restorePending = true
            }
        }
        connection.addListener(self)
    }

    deinit {
        damageSink.finish()
        restorableStateSink.finish()
        focusLeaveSink.finish()
    }

    /// The latest restorable state the service sent for this view (or the one it was made
    /// with), which the next process that shows it starts with; `nil` when there is none.
    public var restorableState: [UInt8]? {
        let bytes = state.withLock { $0.restorable }
        return bytes.isEmpty ? nil : bytes
    }

    /// Shows the view at `width` × `height` points and `scalePermille` pixels per 1000 points
    /// (launching the service if needed); the service draws its first frame at that size.
    public func present(width: Int, height: Int, scalePermille: Int = 1000) async throws(RemoteError) {
        let size = SurfaceSize(width: width, height: height, scalePermille: scalePermille)
        if let problem = size.problem { throw RemoteError(.invalidArgument, problem) }
        try await connection.withChannel { connection throws(RemoteError) in
            let peer = try await Self.requireSurfaces(connection)
            // A view made with a state on a connection whose channel was open already: its
            // process gets the state now, before the first size.
            let (restore, limit) = state.withLock { state -> ([UInt8]?, Int) in
                defer { state.restorePending = false }
                return (state.restorePending ? state.restorable : nil, state.stateLimit)
            }
            if let restore { try await Self.restore(restore, to: peer, on: connection, limit: limit) }
            let compositor = state.withLock { state in
                state.sizeSending = size
                return state.compositor
            }
            compositor.sizeGiven(size)
            // The tree's frames follow the size from now: the first tree may come before the send returns.
            accessibility.resized(to: (Double(width), Double(height)), scale: Double(scalePermille) / 1000)
            try await connection.send(.resize(size))
        }
        // Kept for relaunches (after the send, so a first launch does not send it twice).
        state.withLock { state in
            if state.size != size { state.previousSize = state.size }
            state.size = size
            state.sizeSending = nil
        }
    }

    /// Throws unless the peer on `connection` has a view: it announced the `surfaces`
    /// capability, or it speaks protocol version 1, where a view needed no announcing.
    @discardableResult
    private static func requireSurfaces(_ connection: Connection) async throws(RemoteError) -> Handshake {
        let peer = try await connection.peerHandshake()
        guard hasView(peer, on: connection) else {
            throw RemoteError(.invalidArgument, "\(peer.identifier) does not announce the \"\(SurfaceCapability.name)\" capability in its handshake (it announced \(peer.capabilities)), so it has no view to present")
        }
        return peer
    }

    /// Sends `state` as `restore_state` on `connection` if `peer` announced `restorable-state`
    /// and it fits `limit`. A state that cannot be put in a memfd is left out: the view comes
    /// up without it rather than not at all.
    private static func restore(_ state: [UInt8], to peer: Handshake, on connection: Connection, limit: Int) async throws(RemoteError) {
        guard !state.isEmpty, peer.capabilities.contains(RestorableStateCapability.name), state.count <= limit else { return }
        let wire: RestorableStateWire, attachments: [Attachment]
        do { (wire, attachments) = try RestorableStateWire.encode(state) } catch { return }
        try await connection.send(.restoreState(wire), attachments: attachments)
    }

    /// Whether `peer` may have a view on `connection`: from protocol version 2 on, only when it
    /// announced `surfaces` (`docs/Protocol.md`, "Versions").
    static func hasView(_ peer: Handshake, on connection: Connection) -> Bool {
        connection.protocolVersion(with: peer) < 2 || peer.capabilities.contains(SurfaceCapability.name)
    }

    /// Sends input to the service (launching it if needed). Pointer coordinates are in the
    /// view's points.
    ///
    /// - Throws: `RemoteError` `invalidArgument` for an impossible event (named), or what
    ///   sending on the connection throws.
    public func send(_ event: InputEvent) async throws(RemoteError) {
        if let problem = event.problem { throw RemoteError(.invalidArgument, problem) }
        // The focus is the view's from now: a focus_leave that answers at once (a view with
        // nothing to focus) finds it so.
        switch event {
        case .focus(let focused): state.withLock { $0.focused = focused }
        case .focusEntering: state.withLock { $0.focused = true }
        default: break
        }
        try await connection.withChannel { connection throws(RemoteError) in
            let peer = try await Self.requireSurfaces(connection)
            // A direction only to a service that moves the focus across, on a channel whose host
            // announced it; to another, plain focus.
            var event = event
            if case .focusEntering = event, !(peer.capabilities.contains(FocusLeaveCapability.name)
                                             && connection.configuration.capabilities.contains(FocusLeaveCapability.name)) {
                event = .focus(true)
            }
            // A remote view's input goes on its own stream, never behind a reply or a frame.
            if let stream = stream(for: connection) {
                try await stream.send(input: event.relayPacket())
            } else {
                try await connection.send(event)
            }
        }
        // Kept for relaunches, like the size.
        if case .traits(let traits) = event { state.withLock { $0.traits = traits } }
    }

    /// A primary-button click at (`x`, `y`) points: down, then up.
    public func click(x: Double, y: Double) async throws(RemoteError) {
        try await send(.pointer(PointerEvent(.down, x: x, y: y, button: 1, buttons: 1)))
        try await send(.pointer(PointerEvent(.up, x: x, y: y, button: 1)))
    }

    /// Types `text` (as text input, the way an input method delivers it).
    public func type(_ text: String) async throws(RemoteError) {
        try await send(.text(text))
    }

    /// A key press: down, then up.
    public func press(keyCode: UInt32, modifiers: Modifiers = []) async throws(RemoteError) {
        try await send(.key(KeyEvent(down: true, keyCode: keyCode, modifiers: modifiers)))
        try await send(.key(KeyEvent(down: false, keyCode: keyCode, modifiers: modifiers)))
    }

    /// Gives the service the host's appearance.
    public func setTraits(_ traits: Traits) async throws(RemoteError) {
        try await send(.traits(traits))
    }

    /// Returns once the service has drawn, and the host composited, everything its view had
    /// pending when this was called: input sent before it, and animations it started, are
    /// in ``image`` after it. (The request `remoteview.settle`; the service answers once no
    /// damage and no animation is left, behind its commits.)
    ///
    /// A service that does not handle `remoteview.settle` (it answers "unknown request", as
    /// `docs/Protocol.md` allows; under protocol version 1, any failure) gets a ping instead:
    /// then what the service had committed before it read the ping is in ``image``, but an
    /// animation it has not drawn yet is not waited for.
    ///
    /// A remote view's input travels on a stream of its own (``RemoteViewStream``): settling
    /// first waits until the input sent before it has reached the service, and the far relay
    /// holds the answer until the frames the service committed before it have reached the
    /// host, so the same holds across machines.
    ///
    /// - Throws: `RemoteError`: the reason the service was ended, if it was meanwhile (a broken
    ///   surface rule, a crash), `timeout`, or what the request throws.
    public func settle(timeout: Duration = .seconds(10)) async throws(RemoteError) {
        // The request and what its failure means, on one channel: the process that answered.
        try await connection.withChannel { connection throws(RemoteError) in
            // A remote view's input travels on its own stream: it reaches the service first.
            if let stream = stream(for: connection) { try await stream.sync() }
            do throws(RemoteError) {
                _ = try await connection.request(ServiceMessage(type: FrameworkMessage.settle), timeout: timeout)
            } catch let error where error.code == .remoteError {
                // Version 1 set no domain for "unknown request": any failure may mean it.
                let peer = try await connection.peerHandshake()
                guard connection.protocolVersion(with: peer) < 2 || error.remote?.isUnknownRequest == true else { throw error }
                _ = try await connection.ping(timeout: timeout)
            }
        }
    }

    /// Writes what the service drew, as of its last frame, as a PNG to `path`.
    public func snapshot(to path: String) throws(RemoteError) {
        try image.writePNG(to: path)
    }

    /// The size the service asked for (preferred_size), if it did; the host decides.
    public var preferredSize: (width: Int, height: Int)? {
        state.withLock { $0.compositor }.preferredSize
    }

    /// The buffers the service has attached now (for tests and diagnostics).
    package var attachedBuffers: [BufferDescription] {
        state.withLock { $0.compositor }.attachedLayouts
    }

    /// What the service drew, as of its last frame.
    ///
    /// A copy-on-write snapshot: cheap to take, but one still held when the next frame is
    /// composited makes the host copy the whole image first. To read a few pixels every frame,
    /// use ``withImage(_:)``.
    public var image: RemoteImage {
        RemoteImage(state.withLock { $0.compositor }.image)
    }

    /// Runs `body` on the image as of the last frame, in place: no commit changes it meanwhile,
    /// and nothing is copied however often it is called (keep `body` short: compositing waits
    /// for it, and do not let the image escape it).
    public func withImage<R>(_ body: (RemoteImage) throws -> R) rethrows -> R {
        try state.withLock { $0.compositor }.withImage { try body(RemoteImage($0)) }
    }

    /// Applies a surface message from the service to `compositor` (its channel's); returns
    /// what to send back.
    private func receive(_ message: SurfaceMessage, attachments: [Attachment], on compositor: SurfaceCompositor) throws(RemoteError) -> [SurfaceMessage] {
        let damage = try compositor.receive(message, attachments: attachments)
        guard case .commit = message else { return [] }
        damageSink.yield(damage)
        return presentation == .immediate ? compositor.present() : []
    }

    /// With ``Presentation/manual``: the host has shown the last frame; its buffer goes back to
    /// the service and the next frame is allowed. Does nothing when no frame is waiting.
    ///
    /// The buffer and the `frame_done` go to the process that drew the frame, on the connection
    /// that carried it; once that process has ended they are dropped, and nothing is launched
    /// for them. So a window may call this at every vsync whatever became of the service.
    public func framePresented() async throws(RemoteError) {
        let (compositor, frames, stream) = state.withLock { ($0.compositor, $0.frames, $0.stream) }
        if let stream {
            // A remote view's frames were composited on the far machine: it hears on the stream.
            if let frame = compositor.presentRemote() { stream.presented(frame: frame) }
            return
        }
        guard let frames else { return }
        for message in compositor.present() {
            do {
                try await frames.send(message)
            } catch {
                return  // that process is gone, or going: the frame is no one's to release
            }
        }
    }
}

extension RemoteView: ServiceChannelListener {
    /// A new process serves the view: its buffers start afresh (the image stays until it draws),
    /// and its surface messages come here.
    package func channelWillRun(_ channel: ServiceChannel) {
        // The channel's own compositor: a message its connection still delivers after a newer
        // channel took over goes there, never into the new process's.
        let compositor = state.withLock { state in
            state.compositor = SurfaceCompositor(keeping: state.compositor.image, budget: channel.mappings, checksSize: true)
            state.frames = channel.connection
            state.stream = channel.viewStream
            state.stateLimit = channel.restorableStateLimit
            // The new process sends its whole tree; the old one's stays published until then.
            state.accessibility = AccessibilityTreeState()
            return state.compositor
        }
        accessibility.processChanged()
        if let stream = channel.viewStream { receiveFrames(from: stream, of: channel, on: compositor) }
        let limit = channel.restorableStateLimit
        channel.route(surface: { [weak self] message, attachments, context throws(RemoteError) in
            // The host let go of the view while the service still drew for it: what was in
            // flight is no fault of the service's (ending it would end a shared process
            // under every other client). Dropped: the attachments close, and without a
            // frame_done the service draws no more for this connection.
            guard let self else { return }
            guard Self.hasView(context.peer, on: context.connection) else {
                throw RemoteError(.protocolViolation, "\(message.name) from a service that did not announce the \"\(SurfaceCapability.name)\" capability (protocol version \(context.protocolVersion))")
            }
            if case .restorableState(let wire) = message {
                return try self.store(wire, attachments: attachments, from: context.peer, limit: limit, on: compositor)
            }
            if case .focusLeave(let direction) = message {
                guard context.connection.configuration.capabilities.contains(FocusLeaveCapability.name) else {
                    throw RemoteError(.protocolViolation, "focus_leave, but the host did not announce the \"\(FocusLeaveCapability.name)\" capability")
                }
                guard context.peer.capabilities.contains(FocusLeaveCapability.name) else {
                    throw RemoteError(.protocolViolation, "focus_leave from a service that did not announce the \"\(FocusLeaveCapability.name)\" capability")
                }
                // From the process the view shows now, while the view has the focus; another (a late
                // one from an older process, or one that crossed the host taking the focus back) is
                // dropped: it moves nothing of the host's.
                let current = self.state.withLock { state in
                    guard state.compositor === compositor, state.focused == true else { return false }
                    state.focused = false
                    return true
                }
                if current { self.focusLeaveSink.yield(direction) }
                return
            }
            if case .accessibilityUpdate(let part) = message {
                return try self.receiveAccessibility(part, on: compositor, context: context)
            }
            // A broken surface rule (thrown) ends the connection as a violation, before anything
            // the service sent after it is read (a settle's reply, say), and the service with it.
            let replies: [SurfaceMessage]
            if compositor.pixelsToCopy(for: message, cap: Self.offLoopCopyPixels) >= Self.offLoopCopyPixels {
                // A large copy runs on the copy thread while this connection's delivery task
                // waits for it, so the loop goes on with every other connection (a 1920×1080
                // frame is about 0.3 ms of copying: four views streaming them on the loop kept
                // a round trip elsewhere waiting about 3 ms).
                replies = try await CopyThread.run { () throws(RemoteError) -> [SurfaceMessage] in
                    try self.receive(message, attachments: attachments, on: compositor)
                }
            } else {
                replies = try self.receive(message, attachments: attachments, on: compositor)
            }
            for reply in replies {
                try? await context.connection.send(reply)
            }
        })
    }

    /// The view streams of `connection`, when it is the channel whose frames the view shows now
    /// and its transport carries them.
    private func stream(for connection: Connection) -> (any RemoteViewStream)? {
        state.withLock { $0.frames === connection ? $0.stream : nil }
    }

    /// Takes a remote view's frames from `stream` (the channel's) into `compositor`: each is
    /// checked and applied as it arrives, its damage published, and with
    /// ``Presentation/immediate`` acknowledged at once. A frame that breaks a rule ends the
    /// channel, naming it; the image keeps the last good frame.
    private func receiveFrames(from stream: any RemoteViewStream, of channel: ServiceChannel, on compositor: SurfaceCompositor) {
        let immediate = presentation == .immediate
        // The stream keeps its receiver: the receiver keeps neither the stream nor the channel.
        let endService = channel.endsService
        stream.start(RemoteFrameReceiver(handler: { [weak self, weak stream] frame, width, height, damage, write throws(RemoteError) in
            guard let self else { return }
            let applied: [PixelRect]
            do throws(RemoteError) {
                applied = try compositor.receiveRemote(frame: frame, width: width, height: height, damage: damage, write: write)
            } catch {
                endService(error.reason)
                throw error
            }
            self.damageSink.yield(applied)
            if immediate, let done = compositor.presentRemote() { stream?.presented(frame: done) }
        }, sizeCheck: { frame, width, height throws(RemoteError) in
            try compositor.checkRemoteSize(frame: frame, width: width, height: height)
        }, onEnd: { [weak connection = channel.connection] error in
            // A frame that broke a rule ends the service's channel as a violation; a stream that
            // failed (the far side cut it) ends it as interrupted: the next call reconnects.
            guard let error else { return }
            if error.code == .protocolViolation {
                endService(error.reason)
            } else {
                connection?.startClosing(reason: "the view's frames stopped: \(error.reason)")
            }
        }))
    }

    /// Keeps a restorable state the service on `compositor`'s channel sent, once it is known to
    /// keep the rules: the host announced `restorable-state` (its limit is not 0), the service
    /// did too, and the state holds at most `limit` bytes (a memfd sealed, of its declared size).
    /// A state from a process the view has left for a newer one is dropped.
    private func store(_ wire: RestorableStateWire, attachments: [Attachment], from peer: Handshake, limit: Int,
                       on compositor: SurfaceCompositor) throws(RemoteError) {
        guard limit > 0 else {
            throw RemoteError(.protocolViolation, "restorable_state, but the host did not announce the \"\(RestorableStateCapability.name)\" capability (the manifest's limits.restorableStateKiB is 0)")
        }
        guard peer.capabilities.contains(RestorableStateCapability.name) else {
            throw RemoteError(.protocolViolation, "restorable_state from a service that did not announce the \"\(RestorableStateCapability.name)\" capability")
        }
        let bytes = try wire.decode(attachments: attachments, limit: limit, in: "restorable_state")
        let current = state.withLock { state in
            guard state.compositor === compositor else { return false }
            state.restorable = bytes
            return true
        }
        if current { restorableStateSink.yield(bytes) }
    }

    /// Applies one `accessibility_update` (or part) from `compositor`'s channel to its tree, once
    /// both sides are known to have announced `accessibility`, and publishes what changed. A
    /// broken rule throws (the service ends with the rule's name); an update from a process the
    /// view has left for a newer one is dropped.
    private func receiveAccessibility(_ part: AccessibilityUpdateWire, on compositor: SurfaceCompositor, context: ConnectionContext) throws(RemoteError) {
        guard context.connection.configuration.capabilities.contains(AccessibilityCapability.name) else {
            throw AccessibilityRule.unannounced.violation("accessibility_update, but the host did not announce the \"\(AccessibilityCapability.name)\" capability")
        }
        guard context.peer.capabilities.contains(AccessibilityCapability.name) else {
            throw AccessibilityRule.unannounced.violation("accessibility_update from a service that did not announce the \"\(AccessibilityCapability.name)\" capability")
        }
        let result = try state.withLock { state throws(RemoteError) -> (AccessibilityTreeState, AccessibilityTreeState.Applied)? in
            guard state.compositor === compositor else { return nil }
            // The largest of the sizes given lately: a tree that followed a frame of the size
            // before a resize still fits (the view is judged in points).
            let sizes = [state.size, state.previousSize, state.sizeSending].compactMap { $0 }
            let viewSize = (width: Double(sizes.map(\.width).max() ?? SurfaceLimits.maxDimension),
                            height: Double(sizes.map(\.height).max() ?? SurfaceLimits.maxDimension))
            guard let applied = try state.accessibility.receive(part, viewSize: viewSize) else { return nil }
            return (state.accessibility, applied)
        }
        guard let (tree, applied) = result else { return }
        accessibility.publish(tree.nodes, root: tree.root, focus: tree.focus, whole: applied.whole, changed: applied.changed,
                              removed: applied.removed, focusChanged: applied.focusChanged)
    }

    /// The damage, in pixels, above which a commit is copied off the loop thread: below it, the
    /// two hand-offs would cost more than the copy (256 × 256 pixels is about 20 µs of copying).
    static let offLoopCopyPixels = 256 * 256

    /// A view shown at a size before: the new process gets it too, and the traits and focus it
    /// was given last, before anything else.
    package func channelDidOpen(_ channel: ServiceChannel) async throws(RemoteError) {
        let (size, traits, focused, restorable) = state.withLock { state in
            defer { state.restorePending = false }
            return (state.size, state.traits, state.focused, state.restorable)
        }
        guard size != nil || !restorable.isEmpty else { return }
        let peer = try await channel.connection.peerHandshake()
        // A process without a view (it did not announce one, under version 2) is sent nothing.
        guard Self.hasView(peer, on: channel.connection) else { return }
        // The state first, before the size that makes the view: it is applied before the first
        // layout. Only to a service that announced it, and within what the manifest allows now.
        try await Self.restore(restorable, to: peer, on: channel.connection, limit: channel.restorableStateLimit)
        guard let size else { return }
        state.withLock { $0.compositor }.sizeGiven(size)
        try await channel.connection.send(.resize(size))
        if let traits { try await channel.connection.send(.traits(traits)) }
        if let focused { try await channel.connection.send(.focus(focused)) }
    }
}

/// A read-only copy of what a service drew, as the host composited it: premultiplied ARGB32
/// words (Cairo's format).
public struct RemoteImage: Sendable, Equatable {
    public let width: Int
    public let height: Int
    private let pixels: [UInt32]

    init(_ image: CompositedImage) {
        width = image.width
        height = image.height
        pixels = image.pixels
    }

    /// Runs `body` on the pixels in place: `width` × `height` premultiplied ARGB words, row
    /// after row (stride `width`), for a toolkit to upload the damaged rects of (an SDL texture
    /// of `SDL_PIXELFORMAT_ARGB8888`, say) without a copy.
    public func withUnsafePixels<R>(_ body: (UnsafeBufferPointer<UInt32>) throws -> R) rethrows -> R {
        try pixels.withUnsafeBufferPointer(body)
    }

    /// An image of `width` × `height` whose pixel (x, y) is `pixel(x, y)`: premultiplied ARGB
    /// words (e.g. to make an item to share).
    public init(width: Int, height: Int, pixel: (_ x: Int, _ y: Int) -> UInt32) {
        var image = CompositedImage(width: max(width, 0), height: max(height, 0))
        for y in 0..<image.height { for x in 0..<image.width { image.pixels[y * image.width + x] = pixel(x, y) } }
        self.init(image)
    }

    /// The word at (`x`, `y`): alpha in the top byte, then red, green, blue (premultiplied).
    public func pixel(x: Int, y: Int) -> UInt32 {
        precondition(x >= 0 && x < width && y >= 0 && y < height, "pixel (\(x), \(y)) outside \(width)×\(height)")
        return pixels[y * width + x]
    }

    /// Straight (not premultiplied) RGBA bytes, row after row.
    public var rgba: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(pixels.count * 4)
        for word in pixels {
            let alpha = word >> 24
            func channel(_ shift: UInt32) -> UInt8 {
                let value = (word >> shift) & 0xFF
                return alpha == 0 ? 0 : UInt8(min(255, (value * 255 + alpha / 2) / alpha))
            }
            bytes += [channel(16), channel(8), channel(0), UInt8(alpha)]
        }
        return bytes
    }
}

extension RemoteImage {
    /// Writes the image as a PNG (with Cairo) to `path`.
    ///
    /// - Throws: `RemoteError` `invalidArgument` naming the path and Cairo's reason.
    public func writePNG(to path: String) throws(RemoteError) {
        guard width > 0, height > 0 else { throw RemoteError(.invalidArgument, "an empty image cannot be written to \(path)") }
        var words = pixels
        let status = words.withUnsafeMutableBytes { bytes -> cairo_status_t in
            let surface = cairo_image_surface_create_for_data(bytes.baseAddress!.assumingMemoryBound(to: UInt8.self), CAIRO_FORMAT_ARGB32,
                                                              Int32(width), Int32(height), Int32(width * 4))
            defer { cairo_surface_destroy(surface) }
            return cairo_surface_write_to_png(surface, path)
        }
        guard status == CAIRO_STATUS_SUCCESS else {
            throw RemoteError(.invalidArgument, "cannot write \(path): \(String(cString: cairo_status_to_string(status)))")
        }
    }

    /// The image encoded as PNG (with Cairo).
    ///
    /// - Throws: `RemoteError` `invalidArgument` with Cairo's reason.
    public func pngData() throws(RemoteError) -> [UInt8] {
        guard width > 0, height > 0 else { throw RemoteError(.invalidArgument, "an empty image cannot be encoded") }
        final class Sink {
            var bytes: [UInt8] = []
        }
        let sink = Sink()
        var words = pixels
        let status = words.withUnsafeMutableBytes { bytes -> cairo_status_t in
            let surface = cairo_image_surface_create_for_data(bytes.baseAddress!.assumingMemoryBound(to: UInt8.self), CAIRO_FORMAT_ARGB32,
                                                              Int32(width), Int32(height), Int32(width * 4))
            defer { cairo_surface_destroy(surface) }
            return withExtendedLifetime(sink) {
                cairo_surface_write_to_png_stream(surface, { closure, data, length in
                    let sink = Unmanaged<Sink>.fromOpaque(closure!).takeUnretainedValue()
                    sink.bytes.append(contentsOf: UnsafeBufferPointer(start: data, count: Int(length)))
                    return CAIRO_STATUS_SUCCESS
                }, Unmanaged.passUnretained(sink).toOpaque())
            }
        }
        guard status == CAIRO_STATUS_SUCCESS else {
            throw RemoteError(.invalidArgument, "cannot encode the image as PNG: \(String(cString: cairo_status_to_string(status)))")
        }
        return sink.bytes
    }

    /// Reads a PNG written by ``writePNG(to:)`` (or any PNG, as premultiplied ARGB32).
    public init(contentsOfPNG path: String) throws(RemoteError) {
        let surface = cairo_image_surface_create_from_png(path)
        defer { cairo_surface_destroy(surface) }
        let status = cairo_surface_status(surface)
        guard status == CAIRO_STATUS_SUCCESS else {
            throw RemoteError(.invalidArgument, "cannot read \(path): \(String(cString: cairo_status_to_string(status)))")
        }
        self.init(surface: surface!)
    }

    /// Decodes a PNG's bytes (with Cairo's `cairo_image_surface_create_from_png_stream`), as
    /// premultiplied ARGB32: an icon a manifest names, read and checked once
    /// (``ServiceManifest/Icon``).
    ///
    /// - Throws: `RemoteError` `invalidArgument` with Cairo's reason.
    public init(pngData: [UInt8]) throws(RemoteError) {
        let surface = try Self.decodePNG(pngData)
        defer { cairo_surface_destroy(surface) }
        self.init(surface: surface)
    }

    /// A Cairo image surface of a PNG's bytes (`cairo_image_surface_create_from_png_stream`),
    /// which the caller destroys: for a host that scales it without a copy (the demo window's
    /// thumbnails).
    ///
    /// - Throws: `RemoteError` `invalidArgument` with Cairo's reason.
    package static func decodePNG(_ bytes: [UInt8]) throws(RemoteError) -> OpaquePointer {
        final class Source {
            let bytes: [UInt8]
            var offset = 0
            init(_ bytes: [UInt8]) { self.bytes = bytes }
        }
        let source = Source(bytes)
        let surface = withExtendedLifetime(source) {
            cairo_image_surface_create_from_png_stream({ closure, data, length in
                let source = Unmanaged<Source>.fromOpaque(closure!).takeUnretainedValue()
                let count = Int(length)
                guard let data, count > 0, source.bytes.count - source.offset >= count else { return CAIRO_STATUS_READ_ERROR }
                source.bytes.withUnsafeBufferPointer { bytes in
                    data.update(from: bytes.baseAddress! + source.offset, count: count)
                }
                source.offset += count
                return CAIRO_STATUS_SUCCESS
            }, Unmanaged.passUnretained(source).toOpaque())
        }
        let status = cairo_surface_status(surface)
        guard status == CAIRO_STATUS_SUCCESS, let surface else {
            cairo_surface_destroy(surface)
            throw RemoteError(.invalidArgument, "cannot decode the PNG: \(String(cString: cairo_status_to_string(status)))")
        }
        return surface
    }

    /// The pixels of a Cairo image surface, converted to ARGB32 if need be.
    private init(surface: OpaquePointer) {
        let converted: OpaquePointer
        if cairo_image_surface_get_format(surface) == CAIRO_FORMAT_ARGB32 {
            converted = cairo_surface_reference(surface)
        } else {
            converted = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, cairo_image_surface_get_width(surface), cairo_image_surface_get_height(surface))
            let cairo = cairo_create(converted)
            cairo_set_source_surface(cairo, surface, 0, 0)
            cairo_paint(cairo)
            cairo_destroy(cairo)
        }
        defer { cairo_surface_destroy(converted) }
        cairo_surface_flush(converted)
        let width = Int(cairo_image_surface_get_width(converted)), height = Int(cairo_image_surface_get_height(converted))
        let stride = Int(cairo_image_surface_get_stride(converted))
        let data = UnsafeRawPointer(cairo_image_surface_get_data(converted)!)
        var image = CompositedImage(width: width, height: height)
        for y in 0..<height {
            for x in 0..<width { image.pixels[y * width + x] = data.loadUnaligned(fromByteOffset: y * stride + x * 4, as: UInt32.self) }
        }
        self.init(image)
    }
}

/// Where the host copies a large commit's damage: one serial queue of its own (a libdispatch
/// worker thread), off the event loop, with the completion posted back to the connection's
/// delivery task on the loop (docs/Architecture.md, "Where a large frame is copied").
///
/// The loop goes on with every other connection while the copy runs; the connection that
/// committed waits for it, so its own order is kept. Serial: copies of several views run one
/// after another, never more than one core's worth at once, and never on the loop.
enum CopyThread {
    private static let queue = DispatchQueue(label: "remoteview-copy", qos: .userInitiated)

    /// Runs `body` on the copy thread; returns its result to the caller, resumed on the
    /// caller's executor (the loop, for a delivery task).
    static func run<T: Sendable>(_ body: @escaping @Sendable () throws(RemoteError) -> T) async throws(RemoteError) -> T {
        let result = await withOrderedContinuation { (continuation: UnsafeContinuation<Result<T, RemoteError>, Never>) in
            queue.async {
                continuation.resumeInOrder(returning: Result { () throws(RemoteError) -> T in try body() })
            }
        }
        return try result.get()
    }
}
