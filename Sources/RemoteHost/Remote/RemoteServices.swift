import Logging
import RemoteCore

/// How a launcher reaches services on other machines: the client of its gateways. `Network/`'s
/// `RemoteGateway` library gives one (`GatewayConnector`); a host that wants gateways adds
/// that library and hands its connector to ``Launcher/Configuration/remoteServices``.
///
/// RemoteHost cannot name the network transport (it lives in a package that depends on this
/// one): this protocol is the seam. What it gives back is a `Connection` like a local one,
/// whose packets travel to a process that the far machine's launcher runs, with its view's
/// streams when the transport has them (``RemoteServiceChannel``).
public protocol RemoteServiceConnector: Sendable {
    /// The names of the gateways it reaches (each `[a-z0-9-]+`, the names a host writes after
    /// `@`), in the order a bare identifier is looked for in their catalogs.
    var gateways: [String] { get }

    /// The services `gateway` offers this host, as manifests checked as a local manifest is
    /// (their strings, icons and activation rules), each marked with its gateway
    /// (``ServiceManifest/gateway``). Nothing of them runs here.
    ///
    /// - Throws: `RemoteError` naming the gateway: *interrupted* when it cannot be reached,
    ///   *protocolViolation* when what it sent is no catalog.
    func services(on gateway: String) async throws(RemoteError) -> [ServiceManifest]

    /// A connection to the service `identifier` (bare: its handshake's) on `gateway`, opened:
    /// the far launcher has a process of it, with its view's streams when the transport has
    /// them. The caller runs the connection.
    ///
    /// - Throws: `RemoteError` naming the gateway and saying why: *interrupted* when the
    ///   gateway cannot be reached or cannot reach the service now, *invalidated* when it will
    ///   never give this host the service.
    func connect(to identifier: String, on gateway: String, configuration: Connection.Configuration,
                 onRequest: @escaping Connection.RequestHandler,
                 onMessage: @escaping Connection.MessageHandler) async throws(RemoteError) -> RemoteServiceChannel
}

/// Where a remote service is: its bare identifier, and its gateway's name (`nil`: the first of
/// the connector's gateways that offers it, looked up on first use).
struct RemoteTarget: Sendable, Hashable {
    var identifier: String
    var gateway: String?

    /// `identifier@name` as a target, when `name` is one of `gateways`; `nil` otherwise.
    init?(qualified text: String, gateways: [String]) {
        guard let at = text.lastIndex(of: "@") else { return nil }
        let name = String(text[text.index(after: at)...])
        guard Self.isGatewayName(name), gateways.contains(name) else { return nil }
        identifier = String(text[..<at])
        gateway = name
    }

    init(identifier: String, gateway: String?) {
        self.identifier = identifier
        self.gateway = gateway
    }

    /// `[a-z0-9-]+`, at most 63 bytes: a gateway's name in a host's configuration.
    static func isGatewayName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 63 && name.utf8.allSatisfy { (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2D }
    }
}

/// A remote service's connection, as a value: whether it has a channel (a `Connect` stream to a
/// process on the far machine), is opening one, waits out a backoff after a failure, or can
/// never work again; and what its ``RemoteLink`` must do next. No clock, stream or lock of its
/// own: the link feeds it events with the time and performs its actions.
///
/// ```
/// idle ──work──▶ connecting ──opened──▶ connected ──channel ended──▶ idle
///  ▲                 │                                   (interrupted, unless no news)
///  │                 └──failed──▶ backingOff ──work──▶ connecting (once the backoff is over)
/// any ──invalidate / refused for good──▶ invalidated
/// ```
///
/// A lost link is *interrupted*; the next call reconnects. Consecutive failures to connect
/// double the wait before the next attempt, up to the maximum; a channel that opened starts the
/// count again.
struct RemoteLinkStateMachine<Channel: AnyObject & Sendable>: Sendable {
    enum State: Sendable {
        case idle
        case connecting(attempt: UInt64)
        case connected(Channel)
        case backingOff(until: ContinuousClock.Instant)
        case invalidated(RemoteError)
    }

    enum Action: Sendable {
        /// Open a channel (attempt `attempt`), not before `at`.
        case connect(attempt: UInt64, at: ContinuousClock.Instant?)
        /// Hand the channel to the callers waiting for one.
        case resume(Channel)
        /// Fail the callers waiting for a channel with this error.
        case fail(RemoteError)
        /// Report this on the connection's events.
        case interrupted(RemoteError)
        /// Close this channel (it opened after the connection was invalidated).
        case close(Channel)
        /// The connection can never work again: its events end with this.
        case invalidateClient(RemoteError)
    }

    private(set) var state = State.idle
    private var failures = 0
    private var attempts: UInt64 = 0
    let backoff: Duration
    let maximumBackoff: Duration

    init(backoff: Duration, maximumBackoff: Duration) {
        self.backoff = backoff
        self.maximumBackoff = maximumBackoff
    }

    /// A caller needs a channel: it has it (`resume`), waits for the attempt under way (no
    /// action), starts one (`connect`), or fails (`fail`).
    mutating func channelNeeded(now: ContinuousClock.Instant) -> Action? {
        switch state {
        case .connected(let channel):
            return .resume(channel)
        case .invalidated(let error):
            return .fail(error)
        case .connecting:
            return nil
        case .idle:
            attempts += 1
            state = .connecting(attempt: attempts)
            return .connect(attempt: attempts, at: nil)
        case .backingOff(let until):
            attempts += 1
            state = .connecting(attempt: attempts)
            return .connect(attempt: attempts, at: until > now ? until : nil)
        }
    }

    /// Attempt `attempt` opened `channel`.
    mutating func opened(_ channel: Channel, attempt: UInt64) -> [Action] {
        guard case .connecting(attempt) = state else { return [.close(channel)] }
        failures = 0
        state = .connected(channel)
        return [.resume(channel)]
    }

    /// Attempt `attempt` failed with `error`: the waiting callers fail with it. A refusal for
    /// good (*invalidated*) invalidates the connection; anything else is *interrupted*, and the
    /// next attempt waits out a backoff.
    mutating func failed(_ error: RemoteError, attempt: UInt64, now: ContinuousClock.Instant) -> [Action] {
        guard case .connecting(attempt) = state else { return [] }
        if error.code == .invalidated {
            state = .invalidated(error)
            return [.fail(error), .invalidateClient(error)]
        }
        failures += 1
        let wait = min(backoff * (1 << min(failures - 1, 20)), maximumBackoff)
        state = .backingOff(until: now.advanced(by: wait))
        return [.fail(error), .interrupted(error)]
    }

    /// `channel` ended: `error` says how (`nil`: no news, such as the far process's idle exit).
    /// The next caller opens another.
    mutating func ended(_ channel: Channel, error: RemoteError?) -> [Action] {
        guard case .connected(let current) = state, current === channel else { return [] }
        state = .idle
        return error.map { [.interrupted($0)] } ?? []
    }

    /// The connection can never work again: the channel, if any, is closed; waiting callers fail.
    mutating func invalidate(_ error: RemoteError) -> [Action] {
        let previous = state
        state = .invalidated(error)
        switch previous {
        case .connected(let channel): return [.close(channel), .fail(error)]
        case .invalidated: return []
        default: return [.fail(error)]
        }
    }
}

/// The part of a ``ServiceConnection`` to a remote service that its launcher would otherwise
/// give a supervisor: it opens the channel (through the launcher's ``RemoteServiceConnector``)
/// when a call needs one, runs it, reports its end, and opens another on the next call, after a
/// backoff when opening failed. It owns one ``RemoteLinkStateMachine`` behind a lock, and
/// performs the machine's actions outside it.
final class RemoteLink: Sendable {
    let target: RemoteTarget
    private let connector: any RemoteServiceConnector
    private let configuration: Connection.Configuration
    private let client: ServiceClient
    private let logger: Logger
    /// The machine, the callers waiting for a channel, what ``allowOneChannel(refusal:)`` gave,
    /// and how many channels opened. The listeners are the client's (held weakly there).
    private let state: Mutex<(machine: RemoteLinkStateMachine<Connection>, waiters: [CheckedContinuation<Result<Connection, RemoteError>, Never>],
                               oneChannel: (@Sendable () async -> RemoteError)?, channels: Int, view: (any RemoteViewStream)?,
                               violation: (connection: Connection, error: RemoteError)?)>
    /// What a remote service's surfaces may map here (none: its frames arrive composited, on
    /// its view stream).
    let mappings: SharedBudget

    init(target: RemoteTarget, connector: any RemoteServiceConnector, configuration: Launcher.Configuration, client: ServiceClient) {
        self.target = target
        self.connector = connector
        self.client = client
        logger = configuration.logger
        self.configuration = Connection.Configuration(role: .host, identifier: configuration.hostIdentifier,
                                                      capabilities: (configuration.takesFocusFromViews ? [FocusLeaveCapability.name] : [])
                                                          + (configuration.readsAccessibility ? [AccessibilityCapability.name] : []),
                                                      expectedPeerIdentifier: target.identifier)
        mappings = SharedBudget(limit: configuration.maxMappedBytesPerService)
        state = Mutex((RemoteLinkStateMachine(backoff: configuration.backoff, maximumBackoff: configuration.maximumBackoff), [], nil, 0, nil, nil))
    }

    /// Where the service is, in words.
    var place: String { "\(target.identifier) on gateway \(target.gateway ?? "(any)")" }

    /// The channel, opened if needed (once a backoff is over).
    func channel() async throws(RemoteError) -> Connection {
        if let refusal = state.withLock({ $0.channels > 0 && $0.oneChannel != nil && !Self.isConnected($0.machine.state) ? $0.oneChannel : nil }) {
            throw await refusal()
        }
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Connection, RemoteError>, Never>) in
            let action = state.withLock { state -> RemoteLinkStateMachine<Connection>.Action? in
                let action = state.machine.channelNeeded(now: .now)
                switch action {
                case .resume, .fail: break
                default: state.waiters.append(continuation)
                }
                return action
            }
            switch action {
            case .resume(let connection): continuation.resume(returning: .success(connection))
            case .fail(let error): continuation.resume(returning: .failure(error))
            case .connect(let attempt, let at): Task { await self.connect(attempt: attempt, at: at) }
            default: break
            }
        }
        return try result.get()
    }

    private static func isConnected(_ state: RemoteLinkStateMachine<Connection>.State) -> Bool {
        if case .connected = state { return true }
        return false
    }

    /// Feeds the machine an event under the lock, and takes the waiting callers with it when
    /// its actions resume or fail them: a caller that comes after the change waits for the next
    /// attempt, not this one's outcome.
    private func transition(_ event: (inout RemoteLinkStateMachine<Connection>) -> [RemoteLinkStateMachine<Connection>.Action])
        -> (actions: [RemoteLinkStateMachine<Connection>.Action], waiters: [CheckedContinuation<Result<Connection, RemoteError>, Never>]) {
        state.withLock { state in
            let actions = event(&state.machine)
            let settles = actions.contains { action in
                switch action {
                case .resume, .fail: true
                default: false
                }
            }
            guard settles else { return (actions, []) }
            defer { state.waiters = [] }
            return (actions, state.waiters)
        }
    }

    /// Attempt `attempt`: waits out the backoff, finds the gateway, opens and runs the channel.
    private func connect(attempt: UInt64, at: ContinuousClock.Instant?) async {
        if let at { try? await Task.sleep(until: at) }
        let opened: RemoteServiceChannel
        do throws(RemoteError) {
            let gateway = try await findGateway()
            opened = try await connector.connect(to: target.identifier, on: gateway, configuration: configuration,
                                                 onRequest: client.onRequest, onMessage: client.onMessage)
        } catch {
            logger.info("cannot reach \(place): \(error.reason.escapedForTerminal())")
            perform(transition { $0.failed(error, attempt: attempt, now: .now) })
            return
        }
        let connection = opened.connection
        state.withLock { $0.view = opened.view }
        let channel = ServiceChannel(connection: connection, remote: self, view: opened.view)
        let listeners = client.liveListeners
        for listener in listeners { listener.channelWillRun(channel) }
        // The channel's end is reported after its opening's outcome, so the machine sees them
        // in that order.
        let outcomeReported = Latch<Void>()
        await withDiscardingTaskGroup { group in
            group.addTask {
                var failure: RemoteError?
                do throws(RemoteError) { try await connection.run() } catch { failure = error }
                _ = await outcomeReported.waitUncancellably()
                self.ended(connection, error: failure)
            }
            defer { outcomeReported.open(()) }
            do throws(RemoteError) {
                for listener in listeners { try await listener.channelDidOpen(channel) }
                state.withLock { $0.channels += 1 }
                perform(transition { $0.opened(connection, attempt: attempt) })
            } catch {
                connection.startClosing(reason: "it could not be told what a new channel must know: \(error.reason)")
                // The channel failed (its process went just then): a new one may work.
                let failure = RemoteError(error.code == .invalidated ? .interrupted : error.code, error.reason)
                perform(transition { $0.failed(failure, attempt: attempt, now: .now) })
            }
        }
    }

    /// The gateway named, or the first whose catalog holds the service.
    private func findGateway() async throws(RemoteError) -> String {
        if let gateway = target.gateway { return gateway }
        var problems: [String] = []
        for gateway in connector.gateways {
            do throws(RemoteError) {
                if try await connector.services(on: gateway).contains(where: { $0.identifier == target.identifier }) { return gateway }
            } catch {
                problems.append(error.reason)
            }
        }
        guard problems.isEmpty else {
            throw RemoteError(.interrupted, "\(target.identifier) is not a local service, and no gateway could be asked for it: \(problems.joined(separator: "; "))")
        }
        throw RemoteError(.invalidated, "\(target.identifier) is not a registered service, nor offered by a gateway (\(connector.gateways.joined(separator: ", ")))")
    }

    private func ended(_ connection: Connection, error: RemoteError?) {
        // A channel this side closed for a broken rule ended for that reason, whatever its end said.
        let error = state.withLock { state -> RemoteError? in
            state.view = nil
            defer { state.violation = nil }
            return state.violation?.connection === connection ? state.violation?.error : error
        }
        perform(transition { $0.ended(connection, error: error) })
        let channel = ServiceChannel(connection: connection, remote: self, view: nil)
        for listener in client.liveListeners { listener.channelDidClose(channel, error: error) }
    }

    private func perform(_ transition: (actions: [RemoteLinkStateMachine<Connection>.Action],
                                        waiters: [CheckedContinuation<Result<Connection, RemoteError>, Never>])) {
        for action in transition.actions {
            switch action {
            case .resume(let connection):
                for waiter in transition.waiters { waiter.resume(returning: .success(connection)) }
            case .fail(let error):
                for waiter in transition.waiters { waiter.resume(returning: .failure(error)) }
            case .invalidateClient(let error):
                client.invalidate(error)
            case .interrupted(let error):
                client.eventSink.yield(.interrupted(error))
            case .close(let connection):
                connection.startClosing(reason: "the connection to \(target.identifier) was invalidated")
            case .connect(let attempt, let at):
                Task { await self.connect(attempt: attempt, at: at) }
            }
        }
    }

    /// Ends the connection for good: its channel is closed (the far launcher then stops its
    /// process in order, unless others share it), waiting callers fail, and the events end.
    func invalidate(_ error: RemoteError) {
        perform(transition { $0.invalidate(error) })
        client.invalidate(error)
    }

    /// Attaches `listener` (weakly); it hears about the channel open now, if any.
    func addListener(_ listener: any ServiceChannelListener) {
        _ = client.addListener(listener)  // nothing is announced there: the link tells of its channels
        let open = state.withLock { state -> (Connection, (any RemoteViewStream)?)? in
            if case .connected(let connection) = state.machine.state { return (connection, state.view) }
            return nil
        }
        if let (connection, view) = open { listener.channelWillRun(ServiceChannel(connection: connection, remote: self, view: view)) }
    }

    /// Only the first channel is ever opened (a share's); later uses throw what `refusal` says.
    func allowOneChannel(refusal: @escaping @Sendable () async -> RemoteError) {
        state.withLock { $0.oneChannel = refusal }
    }

    /// The service broke a rule only a listener checks: its channel is closed (the far launcher
    /// stops the process in order, unless others share it).
    func endService(violating rule: String, on connection: Connection) {
        logger.warning("\(place) broke a rule: \(rule.escapedForTerminal())")
        state.withLock { $0.violation = (connection, RemoteError(.protocolViolation, "\(place) broke a rule: \(rule)")) }
        connection.startClosing(reason: "the service broke a rule: \(rule)")
    }
}
