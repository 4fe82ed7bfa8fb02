import struct Synchronization.Atomic
@_exported import RemoteCore
import Glibc
import Logging

/// The service side's entry point: picks up the socket the host passed, serves every
/// connection on it, and exits when idle. Like `xpc_main()`.
///
/// ```swift
/// @main struct EchoService {
///     static func main() async {
///         await ServiceMain.exit(serving: "com.example.echo") { request, _ in
///             ServiceMessage(type: "echo", payload: request.payload)
///         }
///     }
/// }
/// ```
///
/// The socket arrives as fd 3 under the systemd socket-activation convention (`LISTEN_FDS=1`):
///
/// - a connected socket (a RemoteView launcher, or `systemd-socket-activate --accept --seqpacket`):
///   that connection is served, and the host may open more over it (one per client of a shared
///   service); the service ends when it closes;
/// - a listening socket (systemd `Accept=no`): every accepted connection is served.
///
/// **Idle exit.** With `REMOTEVIEW_IDLE_TIMEOUT` set (seconds; the launcher sets it from the
/// manifest), the service says goodbye and exits once no request has been outstanding and
/// nothing has arrived for that long (and, when listening, no connection is open). The host's
/// connection objects survive this and relaunch the service on their next message.
public enum ServiceMain {
    /// The environment variable carrying the idle timeout in seconds.
    public static let idleTimeoutVariable = FrameworkMessage.idleTimeoutVariable

    /// The service's own writable folder, which outlives its processes (`REMOTEVIEW_DATA_DIR`:
    /// `/data` in the sandbox); `nil` unless its manifest has `"sandbox": {"dataFolder": true}`.
    /// Like a Flatpak app's `~/.var/app/ID`.
    public static var dataDirectory: String? { getenv(FrameworkMessage.dataDirectoryVariable).map { String(cString: $0) } }

    /// How a ``run(identifier:capabilities:shareTitle:viewController:onRequest:onMessage:)`` ended without an error.
    public enum Ending: Sendable, Equatable {
        /// The host closed the connection in order.
        case closed
        /// Nothing happened for the idle timeout.
        case idle
    }

    /// Serves the socket the host passed until the host closes it or the service is idle.
    ///
    /// - Throws: `RemoteError` when no usable socket was passed, the host broke the protocol,
    ///   or it vanished.
    ///
    /// - Parameters:
    ///   - identifier: The service's reverse-DNS identifier (its manifest's), sent in handshakes.
    ///   - capabilities: Optional features the service announces in its handshakes.
    ///   - shareTitle: For a share activity: the title its updates start with (its manifest's
    ///     `display.title`, usually). The service then takes shares (announcing the `share`
    ///     capability), and each view controller finds its share in
    ///     ``ViewController/extensionContext``. `nil`: the service takes no shares.
    ///   - viewController: Makes the controller of what the service shows, once for each host
    ///     connection that presents it (see ``ViewController``); `nil` for a service without a UI.
    ///   - onRequest: Answers the hosts' requests the view controller leaves (with the message
    ///     and its `ConnectionContext`).
    ///   - onMessage: Receives the hosts' one-way messages the view controller leaves.
    @discardableResult
    public static func run(identifier: String, capabilities: [String] = [], shareTitle: String? = nil,
                           viewController: (@MainActor @Sendable () -> ViewController)? = nil,
                           onRequest: @escaping Connection.RequestHandler,
                           onMessage: @escaping Connection.MessageHandler = { _, _ in }) async throws(RemoteError) -> Ending {
        try await run(identifier: identifier, capabilities: capabilities, shareTitle: shareTitle, viewController: viewController,
                      answering: Answering(onRequest: onRequest, onSynchronousRequest: nil), onMessage: onMessage)
    }

    /// ``run(identifier:capabilities:shareTitle:viewController:onRequest:onMessage:)``, with the
    /// fast form of request handler first: `onSynchronousRequest` answers a request inline on
    /// the connection's event loop, as it is read, with no task and no thread hand-off, or
    /// returns `nil` to leave it to `onRequest` (`Connection.SynchronousRequestHandler`). It
    /// must not wait for anything.
    ///
    /// On a connection that shows a view, a request first waits for the view to take what the
    /// host sent before it (and `remoteview.settle` is the framework's); such a request reaches
    /// `onSynchronousRequest` from a task, after the view controller has seen it.
    ///
    /// One-way messages have a fast form too: given `onSynchronousMessage`, every message the
    /// view controller leaves goes to it, and `onMessage` is not called. It runs inline on the
    /// connection's event loop as the message is read, with no task, unless the view controller
    /// may want the message first (a connection that shows a view), a message before it is still
    /// being handled, or a thread blocked in a call has borrowed the loop: then it runs in the
    /// connection's delivery task, in order. Like `onSynchronousRequest`, it must not wait for
    /// anything.
    @discardableResult
    public static func run(identifier: String, capabilities: [String] = [], shareTitle: String? = nil,
                           viewController: (@MainActor @Sendable () -> ViewController)? = nil,
                           onSynchronousRequest: @escaping Connection.SynchronousRequestHandler,
                           onRequest: @escaping Connection.RequestHandler = Connection.refuseRequests,
                           onMessage: @escaping Connection.MessageHandler = { _, _ in },
                           onSynchronousMessage: SynchronousMessageHandler? = nil) async throws(RemoteError) -> Ending {
        try await run(identifier: identifier, capabilities: capabilities, shareTitle: shareTitle, viewController: viewController,
                      answering: Answering(onRequest: onRequest, onSynchronousRequest: onSynchronousRequest,
                                           onSynchronousMessage: onSynchronousMessage), onMessage: onMessage)
    }

    /// Receives one one-way message, on the connection's event loop thread: inline as it is
    /// read where it can, else in the connection's delivery task (see
    /// ``run(identifier:capabilities:shareTitle:viewController:onSynchronousRequest:onRequest:onMessage:onSynchronousMessage:)``).
    /// Messages arrive one at a time, in order. It must not block: the connection reads nothing
    /// more until it returns.
    public typealias SynchronousMessageHandler = @Sendable (ServiceMessage, ConnectionContext) -> Void

    /// A service's handlers: the synchronous request handler, tried first when there is one,
    /// the asynchronous one, and the synchronous message handler, which replaces `onMessage`
    /// when there is one.
    struct Answering: Sendable {
        var onRequest: Connection.RequestHandler
        var onSynchronousRequest: Connection.SynchronousRequestHandler?
        var onSynchronousMessage: SynchronousMessageHandler? = nil
    }

    private static func run(identifier: String, capabilities: [String], shareTitle: String?,
                            viewController: (@MainActor @Sendable () -> ViewController)?,
                            answering: Answering, onMessage: @escaping Connection.MessageHandler) async throws(RemoteError) -> Ending {
        let idleTimeout = try idleTimeoutFromEnvironment()
        let stateLimit = try restorableStateLimitFromEnvironment()
        if shareTitle != nil, viewController == nil {
            throw RemoteError(.invalidArgument, "a share activity needs a view controller (\(identifier) has a share title but none)")
        }
        let runtime = ServiceRuntime(identifier: identifier, capabilities: capabilities, shareTitle: shareTitle, idleTimeout: idleTimeout,
                                     restorableStateLimit: stateLimit, viewController: viewController, answering: answering, onMessage: onMessage)
        switch try SocketActivation.takeSocket() {
        case .connected(let socket):
            return try await runtime.serve(primary: try runtime.connection(on: socket))
        case .listening(let socket):
            let listener: ReadableDescriptor
            do { listener = try ReadableDescriptor(socket) } catch {
                throw RemoteError(.invalidated, "cannot use the listening socket: \(error)")
            }
            return try await runtime.serve(listener: listener)
        }
    }

    /// ``run(identifier:capabilities:shareTitle:viewController:onRequest:onMessage:)``, then exits the process: status 0
    /// after an orderly close or an idle exit, 1 (with the reason on stderr) otherwise.
    public static func exit(serving identifier: String, capabilities: [String] = [], shareTitle: String? = nil,
                            viewController: (@MainActor @Sendable () -> ViewController)? = nil,
                            onRequest: @escaping Connection.RequestHandler,
                            onMessage: @escaping Connection.MessageHandler = { _, _ in }) async -> Never {
        do {
            try await run(identifier: identifier, capabilities: capabilities, shareTitle: shareTitle, viewController: viewController,
                          onRequest: onRequest, onMessage: onMessage)
            Syscall.exit(0)
        } catch {
            Syscall.writeStandardError("\(identifier): \(error)\n")
            Syscall.exit(1)
        }
    }

    /// ``run(identifier:capabilities:shareTitle:viewController:onSynchronousRequest:onRequest:onMessage:onSynchronousMessage:)``,
    /// then exits the process as ``exit(serving:capabilities:shareTitle:viewController:onRequest:onMessage:)`` does.
    ///
    /// ```swift
    /// await ServiceMain.exit(serving: "com.example.echo", onSynchronousRequest: { request, _ in
    ///     switch request.type {
    ///     case "echo": ServiceMessage(type: "echo", payload: request.payload)
    ///     default: nil  // to onRequest, in a task
    ///     }
    /// }, onRequest: { request, _ in
    ///     try await Task.sleep(for: .seconds(1))
    ///     return ServiceMessage(type: "slow")
    /// })
    /// ```
    public static func exit(serving identifier: String, capabilities: [String] = [], shareTitle: String? = nil,
                            viewController: (@MainActor @Sendable () -> ViewController)? = nil,
                            onSynchronousRequest: @escaping Connection.SynchronousRequestHandler,
                            onRequest: @escaping Connection.RequestHandler = Connection.refuseRequests,
                            onMessage: @escaping Connection.MessageHandler = { _, _ in },
                            onSynchronousMessage: SynchronousMessageHandler? = nil) async -> Never {
        do {
            try await run(identifier: identifier, capabilities: capabilities, shareTitle: shareTitle, viewController: viewController,
                          onSynchronousRequest: onSynchronousRequest, onRequest: onRequest, onMessage: onMessage,
                          onSynchronousMessage: onSynchronousMessage)
            Syscall.exit(0)
        } catch {
            Syscall.writeStandardError("\(identifier): \(error)\n")
            Syscall.exit(1)
        }
    }

    /// Runs a share activity (an `NSExtension` share extension's principal class): every host
    /// connection that shares with it gets a `viewController`, which finds the items and
    /// finishes the share through ``ViewController/extensionContext``; then exits the process
    /// like ``exit(serving:capabilities:shareTitle:viewController:onRequest:onMessage:)``.
    ///
    /// ```swift
    /// await ServiceMain.exit(sharing: "com.example.notes", title: "Notes") { NotesController() }
    /// ```
    ///
    /// - Parameters:
    ///   - identifier: the service's reverse-DNS identifier (its manifest's).
    ///   - title: the title its activity updates start with (its manifest's `display.title`).
    ///   - onRequest: answers the hosts' own requests (by default, refuses them).
    ///   - viewController: makes the controller of each share's view.
    public static func exit(sharing identifier: String, title: String,
                            onRequest: @escaping Connection.RequestHandler = Connection.refuseRequests,
                            viewController: @escaping @MainActor @Sendable () -> ViewController) async -> Never {
        await exit(serving: identifier, shareTitle: title, viewController: viewController, onRequest: onRequest)
    }

    /// Runs a share activity as ``exit(sharing:title:onRequest:viewController:)`` does, with the
    /// identifier and title its launcher gives it (`REMOTEVIEW_IDENTIFIER` and
    /// `REMOTEVIEW_TITLE`, from its manifest), so that they are written once, in the manifest.
    ///
    /// ```swift
    /// await ServiceMain.exit(sharing: { NotesController() })
    /// ```
    ///
    /// Outside a launcher (no `REMOTEVIEW_IDENTIFIER`) it exits with status 64, saying so; pass
    /// the identifier and title there.
    public static func exit(sharing viewController: @escaping @MainActor @Sendable () -> ViewController,
                            onRequest: @escaping Connection.RequestHandler = Connection.refuseRequests) async -> Never {
        func variable(_ name: String) -> String? {
            getenv(name).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 }
        }
        guard let identifier = variable(FrameworkMessage.identifierVariable) else {
            Syscall.writeStandardError("\(FrameworkMessage.identifierVariable) is not set: this share activity runs under a RemoteView launcher, which sets it from its manifest; outside one, call ServiceMain.exit(sharing: identifier, title: title) { … }\n")
            Glibc.exit(64)
        }
        let title = variable(FrameworkMessage.titleVariable) ?? identifier
        await exit(serving: identifier, shareTitle: title, viewController: viewController, onRequest: onRequest)
    }

    static func idleTimeoutFromEnvironment() throws(RemoteError) -> Duration? {
        guard let text = getenv(idleTimeoutVariable).map({ String(cString: $0) }), !text.isEmpty else { return nil }
        guard let seconds = Double(text), seconds > 0, seconds <= 86_400 else {
            throw RemoteError(.invalidArgument, "\(idleTimeoutVariable)=\(text) is not a number of seconds in (0, 86400]")
        }
        return .milliseconds(Int64((seconds * 1000).rounded(.up)))
    }

    /// The most bytes a view's restorable state may hold: `REMOTEVIEW_RESTORABLE_STATE_KIB`
    /// (KiB, 0…1024; the launcher sets it from the manifest's `limits.restorableStateKiB`), or
    /// 64 KiB when it is not set (outside a launcher).
    static func restorableStateLimitFromEnvironment() throws(RemoteError) -> Int {
        let variable = FrameworkMessage.restorableStateLimitVariable
        guard let text = getenv(variable).map({ String(cString: $0) }), !text.isEmpty else {
            return RestorableStateLimits.defaultKiB * 1024
        }
        guard let kib = Int(text), (0...RestorableStateLimits.maxKiB).contains(kib) else {
            throw RemoteError(.invalidArgument, "\(variable)=\(text.escapedForTerminal()) is not a number of KiB in 0…\(RestorableStateLimits.maxKiB)")
        }
        return kib * 1024
    }
}

extension ServiceMain {
    /// Whether the tasks that serve the connections of a launched service (fd 3, and those
    /// opened through it; not a listening socket's) prefer the event loop's executor, request
    /// handlers included, and the frame loop of each connection's view with them. For tests
    /// only: it gains nothing measurable, and it is how the tests show that main-actor code
    /// in that preference (the frame loop) is served by the main actor's one queue
    /// (docs/Architecture.md, "The main thread of a service"). Set before `run`.
    nonisolated(unsafe) package static var connectionTasksPreferEventLoop = false
}

/// Every connection of one service process, its outstanding requests and its idle clock.
final class ServiceRuntime: Sendable {
    let identifier: String
    let capabilities: [String]
    /// When the service is idle long enough to exit (`nil`: it never exits idle).
    let idleClock: IdleClock?
    private let makeController: (@MainActor @Sendable () -> ViewController)?
    private let answering: ServiceMain.Answering
    private let onMessage: Connection.MessageHandler
    private let newConnections: AsyncStream<Connection>
    private let newConnectionSink: AsyncStream<Connection>.Continuation
    private let state = Mutex(State())

    private struct State {
        var connections: [ObjectIdentifier: Connection] = [:]
        /// The view's surface on each connection that has one.
        var surfaces: [ObjectIdentifier: ViewSurface] = [:]
        var ending: ServiceMain.Ending?
    }

    /// The title a share's updates start with; `nil` when the service takes no shares.
    let shareTitle: String?

    /// The most bytes a view's restorable state may hold (0: views send none).
    let restorableStateLimit: Int

    init(identifier: String, capabilities: [String], shareTitle: String? = nil, idleTimeout: Duration?,
         restorableStateLimit: Int = RestorableStateLimits.defaultKiB * 1024,
         viewController: (@MainActor @Sendable () -> ViewController)?,
         answering: ServiceMain.Answering, onMessage: @escaping Connection.MessageHandler) {
        makeController = viewController
        self.identifier = identifier
        self.shareTitle = shareTitle
        // What the framework's own capabilities promise, announced whenever it is true.
        var announced = capabilities
        if viewController != nil, !announced.contains(SurfaceCapability.name) { announced.append(SurfaceCapability.name) }
        if shareTitle != nil, !announced.contains(ShareCapability.name) { announced.append(ShareCapability.name) }
        // A view takes a restored state, and sends its own, unless the launcher turned it off.
        if viewController != nil, restorableStateLimit > 0, !announced.contains(RestorableStateCapability.name) {
            announced.append(RestorableStateCapability.name)
        }
        // A view's Tab hands the focus to a host that takes it, and takes it back from either end.
        if viewController != nil, !announced.contains(FocusLeaveCapability.name) { announced.append(FocusLeaveCapability.name) }
        // A view describes its semantic tree to a host that reads it, and takes its actions.
        if viewController != nil, !announced.contains(AccessibilityCapability.name) { announced.append(AccessibilityCapability.name) }
        self.restorableStateLimit = restorableStateLimit
        self.capabilities = announced
        idleClock = idleTimeout.map { IdleClock(timeout: $0) }
        self.answering = answering
        self.onMessage = onMessage
        (newConnections, newConnectionSink) = AsyncStream.makeStream()
    }

    /// A service-role connection on `socket` whose handlers keep the idle clock and accept
    /// the host's requests for more connections; with a UI, its surface and input go to a
    /// ``ViewSurface`` of its own.
    func connection(on socket: consuming OwnedFD) throws(RemoteError) -> Connection {
        let idleClock = self.idleClock
        let share = shareTitle.map { ShareEndpoint(idleClock: idleClock, title: $0, logger: Logger(label: identifier)) }
        let stateLimit = capabilities.contains(RestorableStateCapability.name) ? restorableStateLimit : 0
        let surface = makeController.map { ViewSurface(makeController: $0, share: share, restorableStateLimit: stateLimit) }
        let configuration = Connection.Configuration(role: .service, identifier: identifier, capabilities: capabilities)
        // The connection's view controller sees its requests and messages first.
        let answering = self.answering
        // In a task: the view catches up first (settle is the framework's), the controller sees
        // the request, then the service's handlers (the synchronous one unless it has seen it).
        let later: @Sendable (ServiceMessage, ConnectionContext, Bool) async throws -> ServiceMessage = { [weak self] request, context, triedSynchronously in
            guard self != nil else { throw CancellationError() }
            idleClock?.begin()
            defer { idleClock?.end() }
            if let surface {
                if request.type == FrameworkMessage.settle {
                    await surface.settle()
                    return ServiceMessage(type: FrameworkMessage.settled)
                }
                await surface.caughtUp()
                if surface.hasController.load(ordering: .acquiring), let reply = try await surface.handleRequest(request) { return reply }
            }
            if !triedSynchronously, let handler = answering.onSynchronousRequest, let reply = try handler(request, context) { return reply }
            return try await answering.onRequest(request, context)
        }
        // Inline on the loop, the synchronous handler answers unless the view must catch up
        // first or the controller may want the request (or it is the framework's settle).
        var immediate: (@Sendable (ServiceMessage, ConnectionContext) throws -> RequestResponder.Immediate)?
        if let handler = answering.onSynchronousRequest {
            immediate = { request, context in
                if let surface, request.type == FrameworkMessage.settle || surface.mayHaveController { return .notTried }
                idleClock?.touch()
                return try handler(request, context).map { .reply($0) } ?? .declined
            }
        }
        // Inline on the loop, the synchronous message handler takes a message unless the
        // controller may want it first (or it is the framework's connect).
        var onSynchronousMessage: (@Sendable (ServiceMessage, ConnectionContext) -> Bool)?
        if let handler = answering.onSynchronousMessage {
            onSynchronousMessage = { message, context in
                if message.type == FrameworkMessage.connect || surface?.mayHaveController == true { return false }
                idleClock?.touch()
                handler(message, context)
                return true
            }
        }
        let onMessage: Connection.MessageHandler = { [weak self] message, context in
            idleClock?.touch()
            if let surface, message.type != FrameworkMessage.connect, surface.mayHaveController {
                // The controller sees it first, on the main actor, in its turn after the host's
                // size and input (through the surface's queue: no hop of this task).
                let taken = Atomic<Bool>(false)
                await surface.perform { if surface.received(message) { taken.store(true, ordering: .relaxed) } }
                if taken.load(ordering: .relaxed) { return }
            }
            await self?.deliver(message, context)
        }
        let connection: Connection
        do {
            connection = Connection(channel: try SeqpacketChannel(socket), configuration: configuration,
                                    responder: RequestResponder(immediate: immediate, later: later),
                                    onSynchronousMessage: onSynchronousMessage, onMessage: onMessage)
        } catch {
            throw RemoteError(.invalidated, "cannot use the passed socket: \(error)")
        }
        if let surface {
            // The host's surface messages and input go to the main actor through the surface's
            // one queue: the delivery task does not wait for the main actor per event.
            connection.route(surface: { message, attachments, context throws(RemoteError) in
                idleClock?.touch()
                switch message {
                case .restoreState(let wire):
                    // Read here, off the main actor; a state that breaks the rules ends the connection.
                    guard stateLimit > 0 else {
                        throw RemoteError(.protocolViolation, "restore_state to a service that did not announce the \"\(RestorableStateCapability.name)\" capability")
                    }
                    let state = try wire.decode(attachments: attachments, limit: stateLimit, in: "restore_state")
                    await surface.post(.restore(state, context.connection))
                    return
                case .resize:
                    // Whether this host keeps the view's state: it announced so in its handshake.
                    surface.hostKeepsState.store(context.peer.capabilities.contains(RestorableStateCapability.name), ordering: .relaxed)
                    surface.hostTakesFocus.store(context.peer.capabilities.contains(FocusLeaveCapability.name), ordering: .relaxed)
                    surface.hostReadsAccessibility.store(context.peer.capabilities.contains(AccessibilityCapability.name), ordering: .relaxed)
                default:
                    break
                }
                await surface.post(.surface(message, context.connection, arrival: .now))
            })
            connection.route(input: { event, context in
                idleClock?.touch()
                await surface.post(.input(event, context.connection))
            })
            if let share {
                connection.route(share: { message, attachments, context in
                    idleClock?.touch()
                    await share.receive(message, attachments: attachments, context: context,
                                        controller: { surface.controller }, perform: { body in await surface.perform(body) })
                })
            }
        }
        state.withLock { state in
            state.connections[ObjectIdentifier(connection)] = connection
            state.surfaces[ObjectIdentifier(connection)] = surface
        }
        return connection
    }

    /// Serves `primary` and every connection opened through it; ends when it closes or when idle.
    func serve(primary: Connection) async throws(RemoteError) -> ServiceMain.Ending {
        // Discarding: a group that keeps each finished child until it is awaited would keep one
        // per connection the service ever served.
        let executor: any TaskExecutor = ServiceMain.connectionTasksPreferEventLoop ? EventLoop.shared : globalConcurrentExecutor
        let outcome = await withTaskExecutorPreference(executor) { await withDiscardingTaskGroup(returning: Result<ServiceMain.Ending, RemoteError>.self) { group in
            let result = Mutex<Result<ServiceMain.Ending, RemoteError>>(.success(.closed))
            group.addTask {
                do throws(RemoteError) {
                    try await self.drive(primary)
                } catch {
                    result.withLock { $0 = .failure(error) }
                }
                await self.end(.closed, reason: "the host closed the service's main connection")
            }
            addIdleWatcher(to: &group)
            for await connection in newConnections where connection !== primary {
                group.addTask { await self.serveSecondary(connection) }
            }
            // Ending: every connection is being closed and the idle clock is stopped, so the
            // tasks end by themselves (cancelling them would cut their goodbyes short); the
            // group waits for them.
            let ending = state.withLock { $0.ending } ?? .closed
            return ending == .idle ? .success(.idle) : result.withLock { $0 }
        } }
        return try outcome.get()
    }

    /// Accepts and serves connections from `listener` until idle. Each open connection counts
    /// as work in progress on the idle clock: a listening service is idle only with none open.
    func serve(listener: ReadableDescriptor) async throws(RemoteError) -> ServiceMain.Ending {
        await withDiscardingTaskGroup { group in
            group.addTask {
                while true {
                    let socket: OwnedFD?
                    do { socket = try await listener.accept() } catch {
                        await self.end(.closed, reason: "accept failed: \(error)")
                        return
                    }
                    guard let socket else { return }
                    if let connection = try? self.connection(on: socket) { self.newConnectionSink.yield(connection) }
                }
            }
            addIdleWatcher(to: &group, stopping: listener)
            for await connection in newConnections {
                idleClock?.begin()
                group.addTask {
                    await self.serveSecondary(connection)
                    self.idleClock?.end()
                }
            }
            listener.stop()
        }
        return .idle
    }

    private func serveSecondary(_ connection: Connection) async {
        try? await drive(connection)
        idleClock?.touch()
        state.withLock { _ = $0.connections.removeValue(forKey: ObjectIdentifier(connection)) }
    }

    /// Runs `connection` and, when the service has a view, its surface's frames, until the
    /// connection ends.
    private func drive(_ connection: Connection) async throws(RemoteError) {
        guard let surface = state.withLock({ $0.surfaces[ObjectIdentifier(connection)] }) else {
            return try await connection.run()
        }
        // The frame loop: main-actor code, fed by the surface's queue (ViewSurface.Inbox). It
        // prefers what this task prefers (the global executor, unless a test says the loop).
        async let frames: Void = surface.run()
        let outcome: Result<Void, RemoteError>
        do throws(RemoteError) {
            try await connection.run()
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        await surface.close()
        await frames
        surface.share?.connectionEnded()
        _ = state.withLock { $0.surfaces.removeValue(forKey: ObjectIdentifier(connection)) }
        try outcome.get()
    }

    /// Ends the service once its idle clock says so (with no idle timeout, never); returns
    /// when the clock stops (the service ends otherwise).
    private func addIdleWatcher(to group: inout DiscardingTaskGroup, stopping listener: ReadableDescriptor? = nil) {
        guard let idleClock else { return }
        group.addTask {
            guard (try? await idleClock.waitUntilIdle()) == true else { return }
            listener?.stop()
            await self.end(.idle, reason: FrameworkMessage.idleExitReason)
        }
    }

    /// Closes every connection (saying `reason`) and stops taking new ones.
    private func end(_ ending: ServiceMain.Ending, reason: String) async {
        let first = state.withLock { state -> Bool in
            guard state.ending == nil else { return false }
            state.ending = ending
            return true
        }
        guard first else { return }
        idleClock?.stop()
        if ending == .idle {
            // Each view sends its state before its goodbye, so the next process starts with it.
            let surfaces = state.withLock { Array($0.surfaces.values) }
            for surface in surfaces { await surface.saveStateBeforeExit() }
        }
        // Stop taking connections first, then close what is there: one that slips in between
        // is either in the list below or refused by the finished stream (see deliver).
        newConnectionSink.finish()
        let connections = state.withLock { Array($0.connections.values) }
        for connection in connections { await connection.close(reason: reason) }
    }

    nonisolated(nonsending) private func deliver(_ message: ServiceMessage, _ context: ConnectionContext) async {
        guard message.type == FrameworkMessage.connect else {
            if let handler = answering.onSynchronousMessage { return handler(message, context) }
            return await onMessage(message, context)
        }
        // A request from the host for one more connection, on the attached socket.
        guard message.attachments.count == 1, let socket = message.attachments[0].take(),
              state.withLock({ $0.ending == nil }) else { return }
        guard let connection = try? connection(on: socket) else { return }
        if case .terminated = newConnectionSink.yield(connection) {
            // The service is ending: nobody will run it.
            state.withLock { _ = $0.connections.removeValue(forKey: ObjectIdentifier(connection)) }
            await connection.close(reason: FrameworkMessage.idleExitReason)
        }
    }
}
