@_spi(RemoteViewTransport) import RemoteCore

/// A channel to a service's process that carries its packets as they are, for a host elsewhere
/// to speak on: what `remoteview-gateway` relays between its launcher's processes and its
/// clients (docs/Gateway.md, "Connect").
///
/// The host that speaks on it is the far one: its handshake, its requests and their deadlines
/// and cancels, its shares and their items. This side parses nothing. The process is this
/// launcher's, started, sandboxed and supervised as for any ``ServiceConnection`` (the relay's
/// connection holds it; invalidating that connection stops it as usual).
///
/// While the relay is open it counts as work in progress on the process's idle clock, as an
/// outstanding request does: this side cannot see a far share in progress (a user reading its
/// view sends nothing), so it does not stop the process for idleness meanwhile. The service's
/// own idle exit still ends it, and the far host reconnects on its next call.
///
/// Made by ``ServiceConnection/openRelay(onPacket:onEnd:)``. Thread-safe: the channel itself is
/// confined to RemoteView's event loop, and every call posts to it, in order.
@_spi(RemoteViewTransport)
public final class ServiceRelay: Sendable {
    private let bound: LoopBound<State>
    private let instance: ServiceInstance
    /// The service's identifier.
    public let identifier: String

    private final class State {
        let channel: SeqpacketChannel
        var inbound: Inbound?
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

    fileprivate init(channel: SeqpacketChannel, instance: ServiceInstance, inbound: Inbound) {
        self.instance = instance
        identifier = instance.manifest.identifier
        bound = LoopBound(State(channel: channel), loop: channel.loop)
        instance.idleClock.begin()
        inbound.finished = { [weak instance] in instance?.idleClock.end() }
        bound.loop.run { [bound] in
            bound.value.inbound = inbound
            inbound.writable = { [weak state = bound.value] in state?.release() }
            bound.value.channel.start(inbound)
        }
    }

    /// Sends `packet` to the process, after those sent before it. A failure (the process stopped
    /// reading, and the packets waiting for it reached their bound) ends the relay: `onEnd`
    /// hears why.
    public func send(_ packet: TransportPacket) {
        instance.idleClock.touch()
        bound.loop.run { [bound] in
            guard let inbound = bound.value.inbound else { return }
            do throws(RemoteError) {
                try bound.value.channel.write(OutboundPacket(bytes: packet.bytes, attachments: packet.attachments))
            } catch {
                bound.value.inbound = nil
                bound.value.channel.close()
                bound.value.release()
                inbound.ended(error)
            }
        }
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
    @_spi(RemoteViewTransport)
    public func openRelay(onPacket: @escaping @Sendable (TransportPacket) -> Void,
                          onEnd: @escaping @Sendable (RemoteError?) -> Void) async throws(RemoteError) -> ServiceRelay {
        try await perform(retrying: false) { route, handedOff throws(RemoteError) in
            handedOff?()
            let instance = route.instance
            instance.idleClock.touch()
            let channel = try await instance.openRelayChannel()
            return ServiceRelay(channel: channel, instance: instance,
                                inbound: ServiceRelay.Inbound(instance: instance, onPacket: onPacket, onEnd: onEnd))
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
