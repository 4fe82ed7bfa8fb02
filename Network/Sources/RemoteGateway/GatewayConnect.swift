import GRPCCore
import Logging
@_spi(RemoteViewTransport) import RemoteHost
import Synchronization

/// One `Connect` call on the gateway: a client's channel to one service, relayed to a process
/// that the gateway's own launcher runs (docs/Gateway.md, "Connect").
///
/// 1. The first message (within 10 s) is `open`, naming the service; the client's grant must
///    allow it and the registry must hold it, or the call fails with `permissionDenied` or
///    `notFound` (neither starts anything).
/// 2. The gateway's launcher reaches the service as for a local host (on demand, sandboxed,
///    under its instance policy), and opens a ``ServiceRelay`` to its process; the gateway
///    answers `opened`. A service that cannot be launched fails the call with `aborted` (not
///    now) or `failedPrecondition` (never: its sandbox refused, a crash loop),
///    saying why.
/// 3. Packets flow both ways as they are: the envelopes are the client's and the service's, so
///    the handshake, deadlines and cancels stay end to end. Items travel as chunks and become
///    sealed memfds again on the other side.
/// 4. It ends with an `end` frame: `ended` with the far launcher's termination reason when the
///    process ended, `closed` when the client ended its side or the service closed the channel.
///    A client that breaks the framing fails the call with `invalidArgument`, naming the rule.
///
/// The relay's connection is this call's own: when the call ends it is invalidated, and the
/// process is stopped in order (goodbye, then SIGTERM, then SIGKILL) unless another connection
/// shares it.
struct ConnectCall: Sendable {
    let launcher: Launcher
    let registry: ServiceRegistry
    let grant: GatewayAuthorization.Grant
    let client: ClientIdentity
    let sessions: ViewSessions
    /// How the view's frames are compressed (`nil`: as the link allows).
    let viewCodec: ViewFrame.Codec?
    let logger: Logger

    /// How long the process's termination reason is waited for once its channel ended.
    static let reasonPatience: Duration = .seconds(3)
    /// Above this many packets from the service not yet written to the stream, the relay stops
    /// reading the process's socket (which then waits); it reads again below ``resumeBelow``.
    static let pauseAbove = 256
    static let resumeBelow = 64

    /// What the relay and the client's side hand the call's writer.
    enum Outbound: Sendable {
        case packet(TransportPacket)
        /// The process's channel ended (`nil`: in order), or failed.
        case ended(RemoteError?)
        /// The client ended its side: the relay was closed, and the process lives on.
        case closedByClient
        /// The client broke the stream's rules (an `RPCError` to fail the call with).
        case failed(RPCError)
    }

    func run(_ messages: RPCAsyncSequence<[UInt8], any Error>, _ writer: RPCWriter<[UInt8]>) async throws {
        let (opening, openingSink) = AsyncStream<(identifier: String, version: UInt8)>.makeStream()
        let (relays, relaySink) = AsyncStream<ServiceRelay>.makeStream()
        let (outbound, outboundSink) = AsyncStream<Outbound>.makeStream()
        let backlog = Backlog()
        let (client, logger) = (client, logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            // The client's side, read here only: the open frame, then its packets to the
            // process until it ends its side (the relay is then closed, and the process sees the
            // channel end) or breaks a rule.
            group.addTask {
                // Whatever ends the reading ends the stream of what the writer sends.
                defer {
                    openingSink.finish()
                    outboundSink.finish()
                }
                var reader = ConnectReader(direction: .toGateway)
                var relay: ServiceRelay?
                do {
                    for try await message in messages {
                        guard let event = try reader.read(message) else { continue }
                        switch event {
                        case .open(let identifier, let version):
                            openingSink.yield((identifier, version))
                            openingSink.finish()
                            var opened = relays.makeAsyncIterator()
                            relay = await opened.next()
                            guard relay != nil else { return }
                        case .packet(let envelope, let attachments):
                            // The client waits while the process reads slowly (HTTP/2's flow
                            // control carries the wait to it).
                            relay?.send(TransportPacket(bytes: envelope, attachments: attachments))
                            await relay?.waitUntilWritable()
                        case .opened, .end:
                            break  // the reader refuses them toward the gateway
                        }
                    }
                    relay?.close()
                    backlog.clientEnded.open(nil)
                    outboundSink.yield(.closedByClient)
                } catch let error as RemoteError {
                    relay?.close()
                    logger.warning("\(client) broke the Connect stream's rules: \(error.reason.escapedForTerminal())")
                    outboundSink.yield(.failed(RPCError(code: .invalidArgument, message: error.reason)))
                } catch {
                    // The client's side failed (reset, cancelled): the relay goes with it.
                    relay?.close()
                    backlog.clientEnded.open(nil)
                    outboundSink.yield(.closedByClient)
                }
            }
            // A client that has not named its service within the deadline is cut off.
            group.addTask {
                try await Task.sleep(for: GatewayService.requestDeadline)
                openingSink.finish()
            }
            defer { group.cancelAll() }

            var opened = opening.makeAsyncIterator()
            guard let (identifier, version) = await opened.next() else {
                relaySink.finish()
                // The reader gave up already (a broken first frame: its failure is queued), or
                // the deadline passed while it waits: it is not waited for.
                group.cancelAll()
                var rest = outbound.makeAsyncIterator()
                if case .failed(let error)? = await rest.next() { throw error }
                throw RPCError(code: .deadlineExceeded, message: "the Connect stream named no service within \(GatewayService.requestDeadline)")
            }
            try check(identifier)
            let events = launcher.events()
            let connection = launcher.connection(to: identifier)
            let relay: ServiceRelay
            do {
                // Framing version 2: the view's frames go on the host's View stream.
                relay = try await connection.openRelay(view: version >= 2, onPacket: { packet in
                    outboundSink.yield(.packet(packet))
                    backlog.added()
                }, onEnd: { error in
                    outboundSink.yield(.ended(error))
                })
            } catch let error as RemoteError {
                relaySink.finish()
                await connection.invalidate()
                logger.info("\(client) could not reach \(identifier): \(error.reason.escapedForTerminal())")
                // Not `unavailable`, which says the gateway itself cannot be reached: `aborted`
                // (not now: interrupted) or `failedPrecondition` (never: invalidated).
                throw RPCError(code: error.code == .invalidated ? .failedPrecondition : .aborted,
                               message: "\(identifier) cannot be reached on the gateway: \(error.reason)")
            }
            backlog.relay.withLock { $0 = relay }
            relaySink.yield(relay)
            relaySink.finish()
            let pid = connection.processIdentifier
            logger.info("\(client) connected to \(identifier)\(pid.map { " (pid \($0))" } ?? "")")
            let token = relay.hasView ? sessions.add(ViewSession(client: client, identifier: identifier, relay: relay, codec: viewCodec, logger: logger)) : nil
            // The view's streams end with the call.
            defer { if let token { sessions.remove(token) } }
            do {
                try await writer.write(ConnectFrame.opened(token: token).encoded())
                try await forward(outbound, to: writer, relay: relay, backlog: backlog, identifier: identifier, pid: pid, events: events)
            } catch {
                relay.close()
                await connection.invalidate()
                logger.info("\(client)'s connection to \(identifier) ended: \(String(describing: error).escapedForTerminal())")
                throw error
            }
            relay.close()
            await connection.invalidate()
            logger.info("\(client)'s connection to \(identifier) ended")
        }
    }

    /// Checks the service a client named: its grant must allow it, and the registry hold it.
    private func check(_ identifier: String) throws {
        guard grant.allows(identifier) else {
            logger.warning("\(client) asked for \(identifier), which its grant does not allow: refused")
            throw RPCError(code: .permissionDenied, message: "\(client) may not reach \(identifier) on this gateway")
        }
        guard case .success = registry.lookup(identifier) else {
            throw RPCError(code: .notFound, message: "the gateway has no service \(identifier)")
        }
    }

    /// Writes the process's packets to the client, then the end.
    private func forward(_ outbound: AsyncStream<Outbound>, to writer: RPCWriter<[UInt8]>, relay: ServiceRelay, backlog: Backlog,
                         identifier: String, pid: Int32?, events: AsyncStream<LauncherEvent>) async throws {
        for await item in outbound {
            switch item {
            case .packet(let packet):
                do {
                    try await ConnectWriter.write(envelope: packet.bytes, attachments: packet.attachments) { frame in
                        try await writer.write(frame.encoded())
                    }
                } catch let error as RemoteError where error.code == .protocolViolation {
                    // The service sent what cannot cross (an fd that is no memfd): it is cut
                    // off, as a local host cuts off a service that breaks the protocol.
                    relay.close()
                    logger.warning("\(identifier) sent what cannot cross the gateway: \(error.reason.escapedForTerminal())")
                    let reason = TerminationReason(kind: .protocolViolation, detail: error.reason)
                    try await writer.write(ConnectFrame.end(ConnectEnd(code: .ended, reason: reason)).encoded())
                    return
                }
                backlog.written()
            case .ended(let error):
                if let error { logger.info("the relay to \(identifier) failed: \(error.reason.escapedForTerminal())") }
                let end = await Self.end(pid: pid, identifier: identifier, events: events, clientEnded: backlog.clientEnded)
                try await writer.write(ConnectFrame.end(end).encoded())
                return
            case .closedByClient:
                try await writer.write(ConnectFrame.end(ConnectEnd(code: .closed, reason: nil)).encoded())
                return
            case .failed(let error):
                throw error
            }
        }
    }

    /// The `end` frame once the relay ended: the process's termination reason when it ended
    /// (waited for at most ``reasonPatience``), `closed` when it lives on: it closed the channel
    /// (a goodbye from the client's side makes it), or the client ended its side meanwhile
    /// (`clientEnded` opens: nothing more is waited for).
    static func end(pid: Int32?, identifier: String, events: AsyncStream<LauncherEvent>, clientEnded: Latch) async -> ConnectEnd {
        guard let pid else { return ConnectEnd(code: .closed, reason: nil) }
        let reason = await withTaskGroup(of: TerminationReason?.self) { group in
            group.addTask {
                for await event in events {
                    if case .terminated(identifier, pid, let reason) = event { return reason }
                }
                return nil
            }
            group.addTask {
                _ = await clientEnded.wait()
                return nil
            }
            group.addTask {
                try? await Task.sleep(for: reasonPatience)
                return nil
            }
            defer { group.cancelAll() }
            let first = await group.next() ?? nil
            // The latch does not end by cancellation: opened, it lets its task go.
            clientEnded.open(nil)
            return first
        }
        return reason.map { ConnectEnd(code: .ended, reason: $0.bounded()) } ?? ConnectEnd(code: .closed, reason: nil)
    }
}

/// How many of the service's packets wait for the stream, pausing the relay above
/// ``ConnectCall/pauseAbove`` and resuming it below ``ConnectCall/resumeBelow``.
final class Backlog: Sendable {
    let relay = Mutex<ServiceRelay?>(nil)
    /// Opened once the client's side has ended (or the call's end no longer waits for it).
    let clientEnded = Latch()
    private let state = Mutex<(count: Int, paused: Bool)>((0, false))

    func added() {
        let pause = state.withLock { state -> Bool in
            state.count += 1
            guard !state.paused, state.count > ConnectCall.pauseAbove else { return false }
            state.paused = true
            return true
        }
        if pause { relay.withLock { $0 }?.pauseReading() }
    }

    func written() {
        let resume = state.withLock { state -> Bool in
            state.count -= 1
            guard state.paused, state.count < ConnectCall.resumeBelow else { return false }
            state.paused = false
            return true
        }
        if resume { relay.withLock { $0 }?.resumeReading() }
    }
}
