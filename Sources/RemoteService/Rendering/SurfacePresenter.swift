import RemoteCore

/// The service's side of its surface: buffers, damage and pacing (docs/Protocol.md, "Surfaces").
///
/// - **Double buffering**: frames go into whichever attached buffer the host has released; a new
///   one is made (and attached) only when none is free, so after two frames the service
///   alternates between two buffers. It never draws into a buffer the host has not released.
/// - **Damage**: a reused buffer is a frame or more behind, so what changed since it was last
///   drawn is redrawn into it (its own age's damage); only the new frame's damage is committed.
/// - **Pacing**: at most one frame in flight: ``present(damage:_:)`` waits for the host's
///   frame_done of the previous one.
/// - **Size**: ``resize(to:)`` (from the host's resize) makes the next frame use buffers of the
///   new size; the old ones are destroyed as they come back.
/// - **The host's pace**: ``frameInterval`` is the time between frame_dones while the service
///   kept the host busy (it waited for each one): the display's frame interval for a host that
///   presents at vsync.
package final class SurfacePresenter: Sendable {
    /// Sends one surface message (with the buffer's memfd for attach_buffer).
    package typealias Send = nonisolated(nonsending) @Sendable (SurfaceMessage, [Attachment]) async throws(RemoteError) -> Void

    private let send: Send
    /// Where its buffers' memory comes from and goes back to, if anywhere.
    private let pool: SurfaceBufferPool?
    private let state: Mutex<State>

    private struct Slot {
        let buffer: SurfaceBuffer
        var released = true
        /// The frame this buffer last showed (its content is that old).
        var frame: UInt64 = 0
    }

    private struct State {
        var width: Int
        var height: Int
        init(width: Int, height: Int) {
            self.width = width
            self.height = height
        }
        var slots: [UInt32: Slot] = [:]
        var nextID: UInt32 = 1
        var frame: UInt64 = 0
        /// Damage of each committed frame, newest last, while a buffer may still be that old.
        var history: [(frame: UInt64, damage: [PixelRect])] = []
        var inFlight = false
        /// Frames waiting for the frame_done of the one in flight.
        var frameWaiters = WaiterQueue<Void>()
        /// A frame waiting for a buffer to come back (all of ``SurfacePresenter/maxBuffers`` are out).
        var releaseWaiter: Waiter<Void>?
        var closed = false
        /// The service has a frame to draw and waits for the frame_done of the one in flight
        /// (``SurfacePresenter/waitingForFrameDone()``), without a waiter here.
        var serviceWaiting = false
        /// When the last frame_done came, if a frame was waiting for it.
        var lastBusyFrameDone: ContinuousClock.Instant?
        /// The smoothed time between frame_dones the service waited for.
        var frameInterval: Duration?
    }

    /// One frame being made: the buffer to draw into (released by the host, so nobody reads it
    /// now) and what to redraw and commit. Made by ``beginFrame(damage:)``, drawn once with
    /// ``draw(_:)`` and handed to ``commit(_:)``. Its buffer is confined to whoever holds the
    /// frame (pacing allows one at a time), hence @unchecked.
    package struct Frame: @unchecked Sendable {
        fileprivate let buffer: SurfaceBuffer
        fileprivate let isNew: Bool
        /// The frame number.
        package let number: UInt64
        /// The rects to redraw in this buffer, in pixels (this frame's and those it missed).
        package let redraw: [PixelRect]
        /// The damage to commit (empty: all of it).
        package let commit: [PixelRect]

        /// Draws into the frame's buffer, clipped to ``redraw``.
        package func draw(_ body: (GraphicsContext) -> Void) {
            buffer.draw(clippedTo: redraw, body)
        }
    }

    /// - Parameter pool: Where its buffers' memory comes from and goes back to
    ///   (``SurfaceBufferPool/shared``: every surface of the process; `nil`: none).
    package init(width: Int, height: Int, pool: SurfaceBufferPool? = .shared, send: @escaping Send) {
        self.send = send
        self.pool = pool
        state = Mutex(State(width: width, height: height))
    }

    /// Draws a frame whose changed region is `damage` (`nil`: everything) and commits it.
    ///
    /// Waits for the previous frame's frame_done first. `draw` gets a context clipped to what must
    /// be redrawn in the chosen buffer; it should draw the whole view (the clip keeps it cheap).
    nonisolated(nonsending) package func present(damage: [PixelRect]?, _ draw: (GraphicsContext) -> Void) async throws(RemoteError) {
        let frame = try await beginFrame(damage: damage)
        frame.draw(draw)
        try await commit(frame)
    }

    /// Waits for the previous frame's frame_done, then picks a released buffer (or makes one)
    /// for a frame whose changed region is `damage` (`nil`: everything).
    nonisolated(nonsending) package func beginFrame(damage: [PixelRect]?) async throws(RemoteError) -> Frame {
        try await waitForFrameDone()
        while true {
            let frame = try state.withLock { (state) throws(RemoteError) -> Frame? in
                try Self.hasBuffer(state) ? Self.plan(&state, damage: damage, pool: pool) : nil
            }
            if let frame { return frame }
            // A host that says frame_done but keeps the buffers: wait for one to come back
            // rather than make buffers without end.
            let waiter = Waiter<Void>()
            let ready = state.withLock { state in
                if state.closed || Self.hasBuffer(state) { return true }
                state.releaseWaiter = waiter
                return false
            }
            if !ready {
                do {
                    try await waiter.wait(onAbandon: { [weak self] in
                        self?.state.withLock { if $0.releaseWaiter === waiter { $0.releaseWaiter = nil } }
                    })
                } catch {
                    throw RemoteError(.cancelled, "cancelled while waiting for the host to release a buffer")
                }
            }
        }
    }

    /// The most buffers of one size a surface has (triple buffering at most).
    package static let maxBuffers = 3

    /// Whether a frame can be drawn now: a released buffer of the current size, or room for
    /// a new one (a closed presenter says yes, and fails in plan).
    private static func hasBuffer(_ state: State) -> Bool {
        if state.closed { return true }
        let current = state.slots.values.filter { $0.buffer.layout.width == state.width && $0.buffer.layout.height == state.height }
        return current.contains { $0.released } || current.count < maxBuffers
    }

    /// Sends a drawn frame to the host (attaching its buffer first if it is new).
    nonisolated(nonsending) package func commit(_ frame: Frame) async throws(RemoteError) {
        if frame.isNew { try await send(.attachBuffer(frame.buffer.layout), [try frame.buffer.attachment()]) }
        try await send(.commit(bufferID: frame.buffer.layout.id, damage: frame.commit, frame: frame.number), [])
    }

    /// The size frames are made at now, in pixels.
    package var size: (width: Int, height: Int) { state.withLock { ($0.width, $0.height) } }

    private static func plan(_ state: inout State, damage: [PixelRect]?, pool: SurfaceBufferPool?) throws(RemoteError) -> Frame {
        if state.closed { throw RemoteError(.invalidated, "the surface is gone") }
        let whole = PixelRect(x: 0, y: 0, width: state.width, height: state.height)
        // Damage is clipped to the surface (the host refuses rects outside the buffer).
        let clipped = damage?.compactMap { $0.clipped(toWidth: state.width, height: state.height) }
        var frameDamage: [PixelRect] = clipped.flatMap { $0.isEmpty ? nil : $0 } ?? [whole]
        if frameDamage.count > SurfaceLimits.maxDamageRects { frameDamage = [PixelRect.union(frameDamage)] }
        let (width, height) = (state.width, state.height)
        // A released buffer of the current size, the most recent first (least to redraw).
        var candidate: Slot?
        for slot in state.slots.values where slot.released && slot.buffer.layout.width == width && slot.buffer.layout.height == height {
            if candidate == nil || slot.frame > candidate!.frame { candidate = slot }
        }
        let isNew = candidate == nil
        let slot: Slot
        if let candidate {
            slot = candidate
        } else {
            let id = state.nextID
            state.nextID &+= 1
            slot = Slot(buffer: try SurfaceBuffer(id: id, width: width, height: height, pool: pool))
        }
        state.frame += 1
        var redraw = frameDamage
        if isNew || slot.frame == 0 {
            redraw = [whole]
        } else {
            for entry in state.history where entry.frame > slot.frame { redraw += entry.damage }
        }
        state.slots[slot.buffer.layout.id] = Slot(buffer: slot.buffer, released: false, frame: state.frame)
        state.history.append((state.frame, frameDamage))
        // Keep the damage of frames some attached buffer has not seen yet.
        var oldest = state.frame
        for other in state.slots.values where other.frame < oldest { oldest = other.frame }
        state.history.removeAll { $0.frame <= oldest }
        state.inFlight = true
        let commit: [PixelRect] = frameDamage == [whole] ? [] : frameDamage
        return Frame(buffer: slot.buffer, isNew: isNew, number: state.frame, redraw: redraw, commit: commit)
    }

    /// The buffers attached now (for tests and diagnostics).
    package var bufferCount: Int { state.withLock { $0.slots.count } }

    /// Applies one message from the host: release_buffer, frame_done or resize. `arrival` is
    /// when it came (a frame_done's time measures the host's pace).
    nonisolated(nonsending) package func receive(_ message: SurfaceMessage, arrival: ContinuousClock.Instant = .now) async throws(RemoteError) {
        switch message {
        case .releaseBuffer(let id):
            let (stale, waiter) = try state.withLock { (state) throws(RemoteError) -> (UInt32?, Waiter<Void>?) in
                guard var slot = state.slots[id] else { throw RemoteError(.protocolViolation, "release_buffer of buffer \(id), which this service never attached") }
                slot.released = true
                // A buffer of an old size is not reused: destroy it.
                if slot.buffer.layout.width != state.width || slot.buffer.layout.height != state.height {
                    state.slots[id] = nil
                    return (id, state.releaseWaiter.take())
                }
                state.slots[id] = slot
                return (nil, state.releaseWaiter.take())
            }
            waiter?.resume(returning: ())
            if let stale { try await send(.destroyBuffer(stale), []) }
        case .frameDone:
            let now = arrival
            let waiters = state.withLock { state in
                state.inFlight = false
                let waiters = state.frameWaiters.takeAll()
                let waited = !waiters.isEmpty || state.serviceWaiting
                state.serviceWaiting = false
                guard waited else {
                    state.lastBusyFrameDone = nil
                    return waiters
                }
                // The service was ready before the host: this interval is the host's pace.
                if let last = state.lastBusyFrameDone {
                    let interval = min(max(now - last, Self.frameIntervalRange.lowerBound), Self.frameIntervalRange.upperBound)
                    state.frameInterval = state.frameInterval.map { ($0 * 3 + interval) / 4 } ?? interval
                }
                state.lastBusyFrameDone = now
                return waiters
            }
            waiters.resumeAll(returning: ())
        case .resize(let size):
            try await resize(to: size)
        case .attachBuffer, .commit, .destroyBuffer, .preferredSize, .restorableState, .focusLeave, .accessibilityUpdate:
            throw RemoteError(.protocolViolation, "\(message.name) is the service's to send")
        case .accessibilityAction:
            break  // the view tree's (ViewSurface), not the presenter's
        case .restoreState:
            throw RemoteError(.protocolViolation, "restore_state after the host gave the view a size (it comes before the first resize)")
        }
    }

    /// Uses `size` (in pixels: points × scale) for the next frame; released buffers of the old
    /// size are destroyed now, the others when they come back.
    nonisolated(nonsending) package func resize(to size: SurfaceSize) async throws(RemoteError) {
        let (width, height) = size.pixels
        let stale = state.withLock { state -> [UInt32] in
            state.width = width
            state.height = height
            var stale: [UInt32] = []
            for (id, slot) in state.slots where slot.released && (slot.buffer.layout.width != width || slot.buffer.layout.height != height) {
                stale.append(id)
            }
            for id in stale { state.slots[id] = nil }
            return stale.sorted()
        }
        for id in stale { try await send(.destroyBuffer(id), []) }
    }

    /// Ends the surface: waiting presenters fail.
    package func close() {
        let (waiters, releaseWaiter) = state.withLock { state in
            state.closed = true
            state.inFlight = false
            return (state.frameWaiters.takeAll(), state.releaseWaiter.take())
        }
        waiters.resumeAll(returning: ())
        releaseWaiter?.resume(returning: ())
    }

    /// The interval between frames the host allows when the service keeps it busy (its
    /// display's pace, for a host that presents at vsync); a 60 Hz display's until measured.
    package var frameInterval: Duration {
        state.withLock { $0.frameInterval } ?? .seconds(1) / 60
    }

    /// The range ``frameInterval`` is kept in (240 Hz to 30 Hz).
    static let frameIntervalRange = (Duration.seconds(1) / 240)...(Duration.seconds(1) / 30)

    /// Says that the service has a frame to draw and waits for the frame_done of the one in
    /// flight (the frame loop sleeps rather than wait in ``beginFrame(damage:)``), so that
    /// frame_done's interval counts as the host's pace (``frameInterval``).
    package func waitingForFrameDone() {
        state.withLock { state in if state.inFlight { state.serviceWaiting = true } }
    }

    /// Whether ``beginFrame(damage:)`` would return at once: no frame is in flight and a buffer
    /// is free (or may be made), or the presenter is closed (then it fails at once).
    package var isReadyForFrame: Bool {
        state.withLock { state in state.closed || (!state.inFlight && Self.hasBuffer(state)) }
    }


    nonisolated(nonsending) private func waitForFrameDone() async throws(RemoteError) {
        let waiter = Waiter<Void>()
        let ready = state.withLock { state in
            if !state.inFlight || state.closed { return true }
            state.frameWaiters.append(waiter)
            return false
        }
        if ready { return }
        do {
            try await waiter.wait(onAbandon: { [weak self] in self?.state.withLock { $0.frameWaiters.remove(waiter) } })
        } catch {
            throw RemoteError(.cancelled, "cancelled while waiting for the host's frame_done")
        }
    }
}
