import Logging
import struct Synchronization.Atomic

/// One host connection's presentation of the service's UI: made with the connection, it makes
/// the view controller at the host's first size, then draws frames as the tree is damaged, one
/// at a time (the presenter paces them by the host's frame_done), and routes the host's input
/// into the tree.
///
/// The main actor owns the view tree and the presenter. What the host sends for them (its
/// surface messages, frame_done and release_buffer included, its input, and a settle) reaches
/// the main actor through one queue, the surface's ``Inbox``: the connection's delivery task, on
/// the event loop, appends to it without waiting for the main actor, and the frame loop
/// (``run()``) takes everything queued, in order, before each frame. One wake-up of the frame
/// loop serves however many events came meanwhile (docs/Architecture.md, "The main thread of
/// a service").
///
/// The surface keeps no reference to the connection beyond the events queued for the frame
/// loop (each message brings its context; ``close()`` drops what is queued), so nothing needs
/// setting up twice.
@MainActor
final class ViewSurface {
    private let makeController: @MainActor () -> ViewController
    /// Whether a controller exists to offer requests and messages to (readable off the main
    /// actor, so a service's requests do not hop to it for nothing).
    nonisolated let hasController = Atomic<Bool>(false)
    private var presenter: SurfacePresenter?
    private(set) var root: ServiceRoot?
    private var closed = false
    private var appeared = false
    /// Requests waiting for the view to have committed everything pending.
    private var settleWaiters = WaiterQueue<Void>()

    // Restorable state (docs/Protocol.md, "Restorable state").
    /// The most bytes the view's state may hold; 0: the view sends none.
    private nonisolated let restorableStateLimit: Int
    /// Whether the host announced `restorable-state` (set from its handshake at each resize).
    nonisolated let hostKeepsState = Atomic<Bool>(false)
    /// Whether the host announced `focus-leave` (set from its handshake at each resize): Tab
    /// past the last control then hands it the focus instead of wrapping around.
    nonisolated let hostTakesFocus = Atomic<Bool>(false)
    /// Whether the host announced `accessibility` (set from its handshake at each resize): the
    /// view's semantic tree goes to it after the frames that change it.
    nonisolated let hostReadsAccessibility = Atomic<Bool>(false)
    /// The tree as last sent to the host, by node id (`nil`: none yet, so the next is whole),
    /// and the focus sent with it.
    private var sentAccessibility: [UInt32: AccessibilityNodeDescription]?
    private var sentAccessibilityFocus: UInt32 = 0
    /// A committed frame changed the tree: its update goes once the host has taken that frame
    /// (its frame_done), so that describing and sending it never delays the frame itself; or at
    /// once when a settle waits (a settle is answered after the tree).
    private var treeAfterFrame = false
    /// The focus_leave messages waiting to go, in order (ends when the surface closes).
    private var focusLeaveSink: AsyncStream<FocusDirection>.Continuation?
    /// The state the host sent, until the view it is for is made.
    private var pendingRestore: [UInt8]?
    /// Whether the host sent restore_state (at most once, before its first resize).
    private var restoreReceived = false
    /// The state last sent (or restored): an unchanged state is not sent again.
    private var lastState: [UInt8] = []
    /// When the controller was last asked for its state.
    private var lastStateAsked: ContinuousClock.Instant?
    /// When to ask the controller for its state next: set by a frame_done (a frame the host
    /// has shown), at least ``stateInterval`` after it was last asked.
    private var stateDue: ContinuousClock.Instant?
    /// The size of a state too large to send that was already logged.
    private var oversizeLogged: Int?
    /// The shortest time between two states sent.
    static let stateInterval = Duration.milliseconds(250)

    /// One thing the host sent for the main actor, in the order it came.
    enum Event: Sendable {
        /// A surface message (size, pacing), and when it came.
        case surface(SurfaceMessage, Connection, arrival: ContinuousClock.Instant)
        /// Input for the view tree.
        case input(InputEvent, Connection)
        /// A settle request, answered once everything pending is committed.
        case settle(Waiter<Void>)
        /// Resumed once everything posted before it is applied (``caughtUp()``).
        case barrier(Waiter<Void>)
        /// Main-actor work for the connection (a message for the controller, a share's
        /// beginning or cancel), run in its turn; `done` is resumed after it ran (or when it is
        /// dropped because the surface closed).
        case perform(@MainActor @Sendable () -> Void, done: Waiter<Void>)
        /// The state the view had in the process before this one (restore_state, read).
        case restore([UInt8], Connection)
        /// Send the view's state now if it changed (before an idle exit); `done` is resumed after.
        case saveState(done: Waiter<Void>)
    }

    /// The queue from the connection's delivery task to the main actor, and the frame loop's
    /// wake-up: both under one lock, so a post never misses a frame loop going to sleep.
    struct Inbox: ~Copyable {
        var events: [Event] = []
        /// The frame loop, while it sleeps.
        var sleeper: Waiter<Void>?
        /// Delivery tasks waiting for room (above ``ViewSurface/maxQueuedEvents``).
        var roomWaiters = WaiterQueue<Void>()
        /// The surface closed: what comes now is dropped (settles are answered).
        var closed = false
        /// Events posted and not yet applied (queued, or taken by the frame loop and being
        /// applied).
        var unapplied = 0
    }
    private nonisolated let inbox = Mutex(Inbox())
    /// `unapplied > 0 && !closed`, set with them under the inbox's lock: read without it on
    /// every request and message (``mayHaveController``, ``caughtUp()``).
    private nonisolated let waitingToApply = Atomic<Bool>(false)

    /// The most events queued for the main actor; the next delivery waits until the frame loop
    /// has taken them, and the connection reads no further meanwhile.
    nonisolated static let maxQueuedEvents = 256

    /// The connection's share, when the service runs shares.
    nonisolated let share: ShareEndpoint?

    nonisolated init(makeController: @escaping @MainActor () -> ViewController, share: ShareEndpoint? = nil, restorableStateLimit: Int = 0) {
        self.makeController = makeController
        self.share = share
        self.restorableStateLimit = restorableStateLimit
    }

    /// The controller, once the host has shown the view.
    var controller: ViewController? { root?.controller }

    /// Queues `event` for the main actor and wakes the frame loop if it sleeps. Waits only
    /// while the queue is full. Called by the connection's delivery task.
    nonisolated func post(_ event: Event) async {
        while true {
            let (posted, sleeper, dropped, room) = inbox.withLock { inbox -> (Bool, Waiter<Void>?, Bool, Waiter<Void>?) in
                if inbox.closed { return (true, nil, true, nil) }
                guard inbox.events.count < Self.maxQueuedEvents else {
                    let room = Waiter<Void>()
                    inbox.roomWaiters.append(room)
                    return (false, nil, false, room)
                }
                inbox.events.append(event)
                inbox.unapplied += 1
                waitingToApply.store(true, ordering: .releasing)
                return (true, inbox.sleeper.take(), false, nil)
            }
            if posted {
                if dropped { Self.answer(event) }
                sleeper?.resume(returning: ())
                return
            }
            guard let room else { return }
            do {
                try await room.wait()
            } catch {
                // A cancelled request handler (a settle, a barrier) gives up; what it waited
                // for is answered as if done.
                inbox.withLock { $0.roomWaiters.remove(room) }
                Self.answer(event)
                return
            }
        }
    }

    /// Returns once the view has committed everything the host sent before this call (at once
    /// when nothing is shown), or when the request is cancelled.
    nonisolated func settle() async {
        let waiter = Waiter<Void>()
        await post(.settle(waiter))
        _ = try? await waiter.wait()
    }

    private nonisolated static func takeEvents(_ inbox: inout Inbox) -> [Event] {
        let events = inbox.events
        inbox.events = []
        return events
    }

    /// Whether events posted for the main actor wait to be applied (the surface is open).
    private nonisolated var hasUnapplied: Bool { waitingToApply.load(ordering: .acquiring) }

    /// Whether the controller may take a message: it exists, or events that may make it (the
    /// first size) wait to be applied.
    nonisolated var mayHaveController: Bool {
        // In this order: the frame loop makes the controller before the events that made it
        // count as applied, so a reader that finds none waiting finds the controller made.
        hasUnapplied || hasController.load(ordering: .acquiring)
    }

    /// Returns once everything the host sent for the main actor before this call is applied:
    /// at once when nothing is waiting. A request or message for the controller waits for it,
    /// so the controller sees the host's size and input before what the host sent after them.
    nonisolated func caughtUp() async {
        guard hasUnapplied else { return }
        let waiter = Waiter<Void>()
        await post(.barrier(waiter))
        _ = try? await waiter.wait()
    }

    /// Runs `body` on the main actor in its turn after what the host sent before, and returns
    /// once it ran (or was dropped: the surface closed). The caller does not hop to the main
    /// actor: the frame loop runs `body` and resumes it.
    nonisolated func perform(_ body: @escaping @MainActor @Sendable () -> Void) async {
        let done = Waiter<Void>()
        await post(.perform(body, done: done))
        _ = try? await done.wait()
    }

    /// Answers what waits on `event`, which will not be applied.
    private nonisolated static func answer(_ event: Event) {
        switch event {
        case .settle(let waiter), .barrier(let waiter), .perform(_, let waiter), .saveState(let waiter): waiter.resume(returning: ())
        case .surface, .input, .restore: break
        }
    }

    /// Takes everything queued and applies it, in order.
    private func drainInbox() async {
        let (events, rooms) = inbox.withLock { inbox in
            (Self.takeEvents(&inbox), inbox.roomWaiters.takeAll())
        }
        rooms.resumeAll(returning: ())
        for event in events {
            switch event {
            case .surface(let message, let connection, let arrival):
                guard !closed else { continue }
                // A host that breaks the surface rules ends that connection, not the service.
                do throws(RemoteError) {
                    try await apply(message, on: connection, arrival: arrival)
                } catch {
                    close()
                    await connection.close(reason: "surface: \(error.reason)")
                }
            case .input(let event, let connection):
                deliver(event, on: connection)
            case .settle(let waiter):
                // Answered at once only when nothing is to be drawn and no tree is to be sent.
                let treeOwed = treeAfterFrame || (root?.accessibilityNeedsUpdate == true && hostReadsAccessibility.load(ordering: .relaxed))
                if closed || root == nil || (root?.needsFrame == false && !treeOwed) {
                    waiter.resume(returning: ())
                } else {
                    settleWaiters.append(waiter)
                }
            case .barrier(let waiter):
                waiter.resume(returning: ())
            case .perform(let body, let done):
                if !closed { body() }
                done.resume(returning: ())
            case .restore(let state, let connection):
                guard !closed else { continue }
                if restoreReceived || presenter != nil {
                    close()
                    await connection.close(reason: "surface: restore_state \(restoreReceived ? "a second time" : "after the host gave the view a size") (the host sends at most one, before its first resize)")
                    continue
                }
                restoreReceived = true
                lastState = state
                // Traits may have made the view already: it takes the state now, still before
                // its first layout (which follows the first size).
                if let root { root.controller.restoreState(from: state) } else { pendingRestore = state }
            case .saveState(let done):
                if !closed { await sendState() }
                done.resume(returning: ())
            }
        }
        if !events.isEmpty {
            inbox.withLock { inbox in
                inbox.unapplied -= events.count
                waitingToApply.store(inbox.unapplied > 0 && !inbox.closed, ordering: .releasing)
            }
        }
    }

    private func apply(_ message: SurfaceMessage, on connection: Connection, arrival: ContinuousClock.Instant) async throws(RemoteError) {
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
        case .accessibilityAction(let wire):
            // An action on a node of a tree the host was sent; one that is gone is dropped.
            guard let root, presenter != nil else {
                throw RemoteError(.protocolViolation, "accessibility_action before the host gave the view a size")
            }
            root.performAccessibilityAction(wire.action, onNode: wire.node)
        default:
            guard let presenter else {
                throw RemoteError(.protocolViolation, "\(message.name) before the host gave the view a size")
            }
            try await presenter.receive(message, arrival: arrival)
            // A frame the host has shown: time to look at the state again (at most every 250 ms).
            if case .frameDone = message, stateDue == nil, restorableStateLimit > 0, hostKeepsState.load(ordering: .relaxed) {
                stateDue = lastStateAsked.map { max(arrival, $0.advanced(by: Self.stateInterval)) } ?? arrival
            }
        }
    }

    /// Sends the host what changed in the view's semantic tree since the last update: the nodes
    /// that differ (all of them, whole, the first time on this connection) and the focus, split
    /// into packets as needed. Nothing to a host that did not announce `accessibility`.
    private func sendAccessibility(of root: ServiceRoot) async {
        root.accessibilityDescribed()
        guard hostReadsAccessibility.load(ordering: .relaxed), let connection = root.connection else { return }
        let snapshot = root.describeAccessibility()
        let whole = sentAccessibility == nil
        let changed = whole ? snapshot.nodes : snapshot.nodes.filter { sentAccessibility?[$0.id] != $0 }
        guard whole || !changed.isEmpty || snapshot.focus != sentAccessibilityFocus else { return }
        var sent: [UInt32: AccessibilityNodeDescription] = [:]
        sent.reserveCapacity(snapshot.nodes.count)
        for node in snapshot.nodes { sent[node.id] = node }
        sentAccessibility = sent
        sentAccessibilityFocus = snapshot.focus
        let parts = AccessibilityUpdateWire.split(nodes: changed, root: whole ? snapshot.root : 0, focus: snapshot.focus, whole: whole)
        for part in parts {
            do {
                try await connection.send(.accessibilityUpdate(part))
            } catch {
                // Half an update would leave the host's tree and this one apart: the connection
                // ends (it is closing already, unless a part could not be encoded).
                if error.code == .invalidArgument { await connection.close(reason: "surface: the tree's update could not be sent: \(error.reason)") }
                return
            }
        }
    }

    /// Sends the controller's state to the host if it changed since the last sent (or
    /// restored), within the limit; a state over it is logged (once per size), not sent.
    private func sendState() async {
        stateDue = nil
        guard restorableStateLimit > 0, hostKeepsState.load(ordering: .relaxed), let root, let connection = root.connection else { return }
        lastStateAsked = .now
        let state = root.controller.encodeRestorableState() ?? []
        guard state != lastState else { return }
        guard state.count <= restorableStateLimit else {
            if oversizeLogged != state.count {
                oversizeLogged = state.count
                Logger(label: "RemoteService").error("the view's restorable state (\(state.count) bytes) is over the limit of \(restorableStateLimit) bytes (the manifest's limits.restorableStateKiB): not sent")
            }
            return
        }
        do {
            let (wire, attachments) = try RestorableStateWire.encode(state)
            try await connection.send(.restorableState(wire), attachments: attachments)
            lastState = state
        } catch {
            // The connection is closing, or no memfd could be made: the host keeps the last one.
        }
    }

    /// Sends the view's state if it changed, before the service exits idle (waits at most 1 s
    /// for the frame loop to do it).
    nonisolated func saveStateBeforeExit() async {
        guard restorableStateLimit > 0, hostKeepsState.load(ordering: .relaxed) else { return }
        let waiter = Waiter<Void>()
        await post(.saveState(done: waiter))
        _ = try? await waiter.wait(until: .now.advanced(by: .seconds(1)))
    }

    /// Applies the host's input. Traits may come before the first size (they are applied when
    /// the view is made); other input before it has nothing to reach, and is dropped.
    private func deliver(_ event: InputEvent, on connection: Connection) {
        guard !closed else { return }
        if case .traits = event {
            ensureRoot(on: connection).deliver(event)
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
        // focus_leave goes out in the order the view left, one after another (two leaves in a
        // row must not cross: the host would move its focus the wrong way).
        let (leaves, leaveSink) = AsyncStream.makeStream(of: FocusDirection.self)
        focusLeaveSink = leaveSink
        Task {
            for await direction in leaves { try? await send(.focusLeave(direction), []) }
        }
        root.focusLeaveSink = { [weak self] direction in
            guard let self, hostTakesFocus.load(ordering: .relaxed) else { return false }
            leaveSink.yield(direction)
            return true
        }
        // A share that came before the view: the controller hears of it before its view loads.
        if let context = share?.context { root.controller.beginRequest(with: context) }
        _ = root.controller.view
        // The state of the process before, after the view loaded and before its first layout.
        if let state = pendingRestore.take() { root.controller.restoreState(from: state) }
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
    /// the task is cancelled. Before each frame it applies what the host sent (``drainInbox()``);
    /// it sleeps while there is nothing to draw or the host has not yet allowed the next frame
    /// (frame_done and release_buffer come through the inbox too).
    func run() async {
        while !closed && !Task.isCancelled {
            await drainInbox()
            if closed { break }
            // The tree of the frame the host has taken, unless the view changed since (then it
            // goes after the next frame, which shows the change: never before its frame).
            if treeAfterFrame, let root, let presenter, presenter.isReadyForFrame, !root.needsFrame {
                treeAfterFrame = false
                await sendAccessibility(of: root)
            }
            if let due = stateDue, due <= .now { await sendState() }
            guard let root, let presenter, root.needsFrame else {
                // Everything pending is committed. The tree goes now if it changed without a frame,
                // or if a settle waits for the tree of a frame the host has not taken yet.
                if let root, root.accessibilityNeedsUpdate, !treeAfterFrame || !settleWaiters.isEmpty {
                    treeAfterFrame = false
                    await sendAccessibility(of: root)
                }
                resumeSettled()
                await sleep(until: stateDue)
                continue
            }
            // Frames follow the host's frame_done: animations step once per frame it allows.
            guard presenter.isReadyForFrame else {
                presenter.waitingForFrameDone()
                await sleep(until: stateDue)
                continue
            }
            // A tree still owed for the last frame goes right after this one, which shows more.
            let owed = treeAfterFrame
            let size = presenter.size
            let damage = root.prepareFrame(at: .now, clippedTo: PixelRect(x: 0, y: 0, width: size.width, height: size.height))
            if let damage, damage.isEmpty {
                // Laid out or animated with nothing visible changing: no frame, so no
                // frame_done to pace the next step; the host's own frame interval does instead.
                if root.needsFrame {
                    let next = ContinuousClock.now.advanced(by: presenter.frameInterval)
                    await sleep(until: stateDue.map { min($0, next) } ?? next)
                }
                continue
            }
            do {
                let frame = try await presenter.beginFrame(damage: damage)
                frame.draw { context in root.draw(in: context, dirty: frame.redraw) }
                try await presenter.commit(frame)
            } catch {
                break
            }
            // The nodes the frame changed follow it, once the host has taken it (at once when an
            // earlier frame's were owed already: the view changes faster than the host shows).
            if owed {
                treeAfterFrame = false
                await sendAccessibility(of: root)
            } else if root.accessibilityNeedsUpdate, hostReadsAccessibility.load(ordering: .relaxed) {
                treeAfterFrame = true
            }
            if !appeared {
                appeared = true
                root.controller.viewDidAppear()
            }
        }
        close()
    }

    /// Waits until woken (an event from the host, new damage, the end), or until `deadline`;
    /// at once when events are queued.
    private func sleep(until deadline: ContinuousClock.Instant?) async {
        let waiter = Waiter<Void>()
        let queued = inbox.withLock { inbox in
            if !inbox.events.isEmpty || inbox.closed { return true }
            inbox.sleeper = waiter
            return false
        }
        if queued { return }
        _ = try? await waiter.wait(until: deadline)
        inbox.withLock { if $0.sleeper === waiter { $0.sleeper = nil } }
    }

    private func resumeSettled() {
        settleWaiters.takeAll().resumeAll(returning: ())
    }

    /// Wakes the frame loop (new damage, the end).
    private func resume() {
        inbox.withLock { $0.sleeper.take() }?.resume(returning: ())
    }

    /// Ends the render loop; the controller's view disappears; the surface lets go of its
    /// buffers and its view tree.
    func close() {
        guard !closed else { return }
        closed = true
        focusLeaveSink?.finish()
        // What is still queued is dropped (it holds its connection); settles are answered.
        let (sleeper, events, rooms) = inbox.withLock { inbox in
            inbox.closed = true
            inbox.unapplied = 0
            waitingToApply.store(false, ordering: .releasing)
            return (inbox.sleeper.take(), Self.takeEvents(&inbox), inbox.roomWaiters.takeAll())
        }
        sleeper?.resume(returning: ())
        rooms.resumeAll(returning: ())
        events.forEach(Self.answer)
        resumeSettled()
        presenter?.close()
        presenter = nil
        if let root, appeared { root.controller.viewDidDisappear() }
        appeared = false
        root = nil
        hasController.store(false, ordering: .releasing)
    }
}
