@_spi(RemoteViewTransport) import RemoteCore

/// A channel to a service's process that carries its packets as they are, for a host elsewhere
/// to speak on: what `remoteview-gateway` relays between its launcher's processes and its
/// clients (docs/Gateway.md, "Connect").
///
/// The host that speaks on it is the far one: its handshake, its requests and their deadlines
/// and cancels, its shares and their items. Without a view this side parses nothing; with one
/// (``ServiceConnection/openRelay(view:onPacket:onEnd:)``), it shows the service's view itself
/// and hands its frames to a ``RelayedViewSink``. The process is this
/// launcher's, started, sandboxed and supervised as for any ``ServiceConnection`` (the relay's
/// connection holds it; invalidating that connection stops it as usual).
///
/// While the relay is open it counts as work in progress on the process's idle clock, as an
/// outstanding request does: this side cannot see a far share in progress (a user reading its
/// view sends nothing), so it does not stop the process for idleness meanwhile. The service's
/// own idle exit still ends it, and the far host reconnects on its next call.
///
/// Made by ``ServiceConnection/openRelay(view:onPacket:onEnd:)``. Thread-safe: the channel itself is
/// confined to RemoteView's event loop, and every call posts to it, in order.
@_spi(RemoteViewTransport)
public final class ServiceRelay: Sendable {
    private let bound: LoopBound<State>
    private let instance: ServiceInstance
    /// The service's identifier.
    public let identifier: String
    /// Whether this relay shows the service's view itself
    /// (``ServiceConnection/openRelay(view:onPacket:onEnd:)``).
    public let hasView: Bool

    private final class State {
        let channel: SeqpacketChannel
        var inbound: Inbound?
        /// What the relay reads of a view's traffic, when it has one.
        var splice: RelaySplice?
        /// Callers of ``waitUntilWritable()`` waiting for the process to read.
        var waiters: [CheckedContinuation<Void, Never>] = []
        init(channel: SeqpacketChannel) { self.channel = channel }

        /// Lets every waiter go on.
        func release() {
            let waiting = waiters
            waiters = []
            for waiter in waiting { waiter.resume() }
        }
    }

    fileprivate init(channel: SeqpacketChannel, instance: ServiceInstance, inbound: Inbound, view: Bool,
                     stop: @escaping @Sendable (String) -> Void) {
        self.instance = instance
        identifier = instance.manifest.identifier
        hasView = view
        let state = State(channel: channel)
        if view { state.splice = RelaySplice(compositor: SurfaceCompositor(budget: instance.mappings, checksSize: true)) }
        bound = LoopBound(state, loop: channel.loop)
        instance.idleClock.begin()
        inbound.finished = { [weak instance] in instance?.idleClock.end() }
        bound.loop.run { [bound] in
            bound.value.inbound = inbound
            inbound.writable = { [weak state = bound.value] in state?.release() }
            if bound.value.splice != nil {
                inbound.spliced = { [weak state = bound.value] packet in
                    guard let state else { return }
                    Self.fromService(packet, state: state, stop: stop)
                }
                // The sink holds the relay: once the relay is over, it lets the sink go.
                inbound.over = { [weak state = bound.value] in state?.splice?.sink = nil }
            }
            bound.value.channel.start(inbound)
        }
    }

    /// A packet from the service, on a relay with a view: the view's surface messages stay
    /// here; the rest goes to the far host, unless it must wait behind frames.
    private static func fromService(_ packet: InboundPacket, state: State, stop: @Sendable (String) -> Void) {
        guard let splice = state.splice, let inbound = state.inbound else { return }
        do throws(RemoteError) {
            switch try splice.fromService(packet) {
            case .forward(let packet):
                if splice.machine.isHolding {
                    splice.held.append(packet)
                    if splice.held.count == RelaySplice.maxHeld { state.channel.pauseReading() }
                } else {
                    inbound.onPacket(packet)
                }
            case .taken(let actions):
                perform(actions, state: state)
            }
        } catch {
            // The service broke a surface rule: it is ended, as a local host ends it.
            stop(error.reason)
        }
    }

    /// Performs what the view's machine decided (on the loop).
    private static func perform(_ actions: [RelayedViewStateMachine.Action], state: State) {
        guard let splice = state.splice else { return }
        for action in actions {
            switch action {
            case .take(let frame, let damage):
                splice.sink?.frame(RelayedFrame(number: frame, damage: damage, image: splice.compositor.image))
            case .release:
                for message in splice.compositor.present() {
                    do throws(RemoteError) { try state.channel.write(try splice.own(.surface(message))) } catch {
                        fail(error, state: state)
                        return
                    }
                }
            case .forwardHeld:
                let held = splice.held
                splice.held = []
                if held.count >= RelaySplice.maxHeld { state.channel.resumeReading() }
                for packet in held { state.inbound?.onPacket(packet) }
            }
        }
    }

    /// Ends the relay with `error` (the far host broke a rule, or a write failed): the channel
    /// closes, and `onEnd` hears why.
    private static func fail(_ error: RemoteError, state: State) {
        guard let inbound = state.inbound else { return }
        state.inbound = nil
        state.channel.close()
        state.release()
        inbound.ended(error)
    }

    /// Sends `packet` to the process, after those sent before it. A failure (the process stopped
    /// reading, and the packets waiting for it reached their bound) ends the relay: `onEnd`
    /// hears why.
    public func send(_ packet: TransportPacket) {
        instance.idleClock.touch()
        bound.loop.run { [bound] in
            guard bound.value.inbound != nil else { return }
            do throws(RemoteError) {
                if let splice = bound.value.splice {
                    try bound.value.channel.write(try splice.fromHost(packet))
                } else {
                    try bound.value.channel.write(OutboundPacket(bytes: packet.bytes, attachments: packet.attachments))
                }
            } catch {
                Self.fail(error, state: bound.value)
            }
        }
    }


    /// A sink takes the view's frames from now (the far host's `View` stream opened): a frame
    /// the service committed meanwhile comes first.
    public func attach(_ sink: any RelayedViewSink) {
        bound.loop.run { [bound] in
            guard let splice = bound.value.splice else { return }
            splice.sink = sink
            Self.perform(splice.machine.attach(), state: bound.value)
        }
    }

    /// The sink is gone (the `View` stream ended): frames wait for the next.
    public func detachSink() {
        bound.loop.run { [bound] in
            guard let splice = bound.value.splice else { return }
            splice.sink = nil
            Self.perform(splice.machine.detach(), state: bound.value)
        }
    }

    /// The sink has taken `frame` (``RelayedViewSink/frame(_:)``): the service may draw its next.
    public func frameTaken(_ frame: UInt64) {
        bound.loop.run { [bound] in
            guard let splice = bound.value.splice else { return }
            Self.perform(splice.machine.taken(frame: frame), state: bound.value)
        }
    }

    /// The far host has shown every frame up to `frame`.
    ///
    /// - Throws: `RemoteError` `protocolViolation` (`view.presented`) when no such frame is on
    ///   its way: the caller cuts the far host off.
    public func presented(frame: UInt64) async throws(RemoteError) {
        try await onLoop { (state) throws(RemoteError) in
            guard let splice = state.splice else { return }
            Self.perform(try splice.machine.presented(frame: frame), state: state)
        }
    }

    /// The far host's input (`packet`, an envelope of the input family from its `Input`
    /// stream), written to the service after what the host sent before it on `Connect`.
    ///
    /// - Throws: `RemoteError` `protocolViolation` for anything but input, or input before the
    ///   host's handshake.
    public func send(input packet: [UInt8]) async throws(RemoteError) {
        instance.idleClock.touch()
        try await onLoop { (state) throws(RemoteError) in
            guard let splice = state.splice, state.inbound != nil else { return }
            let outbound = try splice.input(packet)
            do throws(RemoteError) { try state.channel.write(outbound) } catch { Self.fail(error, state: state) }
        }
    }

    /// Runs `body` on the loop with the state, and returns what it threw.
    private func onLoop(_ body: @escaping @Sendable (State) throws(RemoteError) -> Void) async throws(RemoteError) {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<RemoteError?, Never>) in
            bound.loop.run { [bound] in
                do throws(RemoteError) {
                    try body(bound.value)
                    continuation.resume(returning: nil)
                } catch {
                    continuation.resume(returning: error)
                }
            }
        }
        if let result { throw result }
    }

    /// Returns once the process has read enough of what was sent that more may be (the
    /// channel is writable: fewer than its high-water mark of packets wait), or the relay has
    /// ended. A sender that reads from a network calls it after each ``send(_:)``, so that a
    /// process that reads slowly slows the sender instead of piling packets up; the channel
    /// holds at most 1024 packets before a send fails.
    public func waitUntilWritable() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            bound.loop.run { [bound] in
                guard let inbound = bound.value.inbound, !inbound.done, !bound.value.channel.isWritable else { return continuation.resume() }
                bound.value.waiters.append(continuation)
            }
        }
    }

    /// Stops handing packets to `onPacket` until ``resumeReading()``: what the process sends
    /// meanwhile waits in its socket (and then the process waits), in order.
    public func pauseReading() {
        bound.loop.run { [bound] in bound.value.channel.pauseReading() }
    }

    /// Hands packets to `onPacket` again, beginning with those that waited.
    public func resumeReading() {
        bound.loop.run { [bound] in bound.value.channel.resumeReading() }
    }

    /// Closes the channel: what was sent is written first, then the process sees it end. `onEnd`
    /// is not called. Idempotent.
    public func close() {
        bound.loop.run { [bound] in
            guard let inbound = bound.value.inbound else { return }
            bound.value.inbound = nil
            bound.value.channel.close()
            bound.value.release()
            inbound.finish()
        }
    }

    /// Hands what the channel reads to the relay's user.
    fileprivate final class Inbound: PacketInbound, @unchecked Sendable {
        // @unchecked: `done` is touched on the channel's loop only.
        let onPacket: @Sendable (TransportPacket) -> Void
        let onEnd: @Sendable (RemoteError?) -> Void
        weak var instance: ServiceInstance?
        /// Called when the channel becomes writable again, or ends.
        var writable: (() -> Void)?
        /// Called once when the relay is over (ended or closed).
        var finished: (@Sendable () -> Void)?
        /// Takes every packet instead of `onPacket`, on a relay with a view.
        var spliced: ((InboundPacket) -> Void)?
        /// Called on the loop once the relay is over, after `finished`.
        var over: (() -> Void)?
        private(set) var done = false

        init(instance: ServiceInstance, onPacket: @escaping @Sendable (TransportPacket) -> Void,
             onEnd: @escaping @Sendable (RemoteError?) -> Void) {
            self.instance = instance
            self.onPacket = onPacket
            self.onEnd = onEnd
        }

        func channelRead(_ packet: InboundPacket) {
            guard !done else { return }
            instance?.idleClock.touch()
            if let spliced { return spliced(packet) }
            onPacket(TransportPacket(bytes: Array(packet.bytes), attachments: packet.attachments))
        }

        func channelClosed(_ error: RemoteError?) { ended(error) }

        func channelWritabilityChanged(_ isWritable: Bool) {
            if isWritable { writable?() }
        }

        func ended(_ error: RemoteError?) {
            guard !done else { return }
            done = true
            writable?()
            finish()
            onEnd(error)
        }

        /// The relay is over: once.
        func finish() {
            let finished = self.finished
            self.finished = nil
            finished?()
            let over = self.over
            self.over = nil
            over?()
        }
    }
}

extension ServiceConnection {
    /// Opens a relay to a process of this connection's service (launching it if needed, as any
    /// call does): a channel of its own to the process, whose packets go to `onPacket` as they
    /// are and come from ``ServiceRelay/send(_:)``, parsed by neither side here.
    ///
    /// `onPacket` and `onEnd` are called on RemoteView's event loop, in order; they must not
    /// block. `onEnd` is called once, when the process closes the channel or ends (`nil`), or
    /// the channel fails (why); not after ``ServiceRelay/close()``. How the process ended, when
    /// it did, comes as this connection's ``Event/interrupted(_:)``.
    ///
    /// - Throws: `RemoteError` as a request would: the service cannot be launched, the
    ///   connection is invalidated, the process ended before it took the channel.
    ///
    /// With `view`, the relay shows the service's view itself, as a host would (docs/Gateway.md,
    /// "Views"): it composites the service's frames with the same checks as a ``RemoteView``
    /// (a service that breaks one is ended) and hands them to a ``RelayedViewSink`` instead of
    /// relaying its buffers; the far host presents them (``ServiceRelay/presented(frame:)``)
    /// and sends input (``ServiceRelay/send(input:)``) on streams of their own. Everything
    /// else crosses as it is, with the far host's packets numbered again (the relay writes
    /// packets of its own between them).
    @_spi(RemoteViewTransport)
    public func openRelay(view: Bool = false, onPacket: @escaping @Sendable (TransportPacket) -> Void,
                          onEnd: @escaping @Sendable (RemoteError?) -> Void) async throws(RemoteError) -> ServiceRelay {
        let supervisor = self.supervisor
        return try await perform(retrying: false) { route, handedOff throws(RemoteError) in
            handedOff?()
            let instance = route.instance
            instance.idleClock.touch()
            let channel = try await instance.openRelayChannel()
            return ServiceRelay(channel: channel, instance: instance,
                                inbound: ServiceRelay.Inbound(instance: instance, onPacket: onPacket, onEnd: onEnd), view: view,
                                stop: { [weak instance] rule in
                                    guard let instance else { return }
                                    supervisor?.post(.stopRequested(instance, TerminationReason(kind: .protocolViolation, detail: rule)))
                                })
        }
    }
}

extension ServiceInstance {
    /// A new channel to the process, sent to it in a `remoteview.connect` message as a client's
    /// is, with no connection on this side: the relay's.
    func openRelayChannel() async throws(RemoteError) -> SeqpacketChannel {
        let channel: SeqpacketChannel, attachment: Attachment
        do throws(SystemCallError) {
            let pair = try SeqpacketSocket.pair()
            attachment = Attachment(pair.second)
            channel = try SeqpacketChannel(pair.first)
        } catch {
            throw RemoteError(.interrupted, "cannot open a relay to \(manifest.identifier): \(error)")
        }
        do {
            try await control.send(ServiceMessage(type: FrameworkMessage.connect, attachments: [attachment]))
        } catch {
            channel.loop.run { channel.close() }
            throw RemoteError(error.code == .timeout ? .timeout : .interrupted, "\(manifest.identifier) could not be reached: \(error.reason)")
        }
        idleClock.touch()
        return channel
    }
}
