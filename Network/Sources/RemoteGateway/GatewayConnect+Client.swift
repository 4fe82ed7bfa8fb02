import GRPCCore
import GRPCNIOTransportHTTP2
@_spi(RemoteViewTransport) import RemoteHost
import Synchronization

extension GatewayClient {
    /// A connection to the service `identifier` on the gateway, over a `Connect` stream: the
    /// same ``Connection`` as to a local service's socket, run the same way (`run()` or
    /// `withRunning`), its handshake, requests, deadlines, cancels and share items end to end
    /// with the process the gateway's launcher runs.
    ///
    /// Returns once the gateway has opened a channel to a process of the service (launching it
    /// if needed); the handshake is the connection's, when it runs. A share item (a sealed memfd)
    /// crosses in chunks of at most 60 KiB and is a sealed memfd again on the other side.
    ///
    /// When the stream ends, the connection ends with it: the gateway's `end` says how (the
    /// service's process ended, with the far launcher's reason; or the channel was closed), and
    /// a lost link ends it as *interrupted* ("the gateway at … is unreachable: …"). Closing the
    /// connection ends the stream, and the gateway stops the process in order unless other
    /// connections share it.
    ///
    /// - Parameter within: how long the gateway has to open the channel (a service's launch
    ///   included).
    /// - Throws: ``RemoteError``: *interrupted* when the gateway cannot be reached or cannot
    ///   reach the service now; *invalidated* when it refuses this client the service, or has
    ///   no such service; *timeout* when it did not open in time. Each names the gateway and
    ///   says why, escaped.
    public func connect(to identifier: String, configuration: Connection.Configuration,
                        onRequest: @escaping Connection.RequestHandler = Connection.refuseRequests,
                        onMessage: @escaping Connection.MessageHandler = { _, _ in },
                        within timeout: Duration = .seconds(30)) async throws(RemoteError) -> Connection {
        let transport: HTTP2ClientTransport.Posix
        do { transport = try makeTransport() } catch {
            throw RemoteError(.invalidated, error.description)
        }
        return try await connect(to: identifier, configuration: configuration, onRequest: onRequest, onMessage: onMessage, within: timeout,
                                 counter: WireCounter()) { body in
            try await withGRPCClient(transport: transport) { client in try await body(client) }
        }.connection
    }

    /// ``connect(to:configuration:onRequest:onMessage:within:)`` over the gRPC client that
    /// `using` runs `body` with: one of its own, or a ``GatewayLink``'s, shared.
    ///
    /// With framing version 2 (a gateway that serves it says so in `opened`), the channel comes
    /// with its view's streams (``GatewayViewStream``), run over the same client once a view
    /// takes the channel, and ended with the `Connect` stream.
    func connect(to identifier: String, configuration: Connection.Configuration,
                 onRequest: @escaping Connection.RequestHandler, onMessage: @escaping Connection.MessageHandler, within timeout: Duration,
                 counter: WireCounter,
                 using: @escaping @Sendable (@Sendable (GRPCClient<HTTP2ClientTransport.Posix>) async throws -> Void) async throws -> Void) async throws(RemoteError) -> RemoteServiceChannel {
        let (outgoing, outgoingSink) = AsyncStream<TransportChannel.Output>.makeStream()
        let channel = TransportChannel { output in outgoingSink.yield(output) }
        let opened = Latch()
        let gateway = "the gateway at \(address)"
        let view = GatewayViewStream(gateway: "\(address)", identifier: identifier, counter: counter)
        let hasView = Mutex(false)
        let task = Task {
            do {
                try await using { client in
                    let request = StreamingClientRequest<[UInt8]> { writer in
                        let open = ConnectFrame.open(identifier: identifier, version: framingVersion).encoded()
                        try await writer.write(open)
                        counter.add(\.connectUp, open.count)
                        for await output in outgoing {
                            guard case .packets(let packets) = output else { break }
                            for packet in packets {
                                try await ConnectWriter.write(envelope: packet.bytes, attachments: packet.attachments) { frame in
                                    let bytes = frame.encoded()
                                    try await writer.write(bytes)
                                    counter.add(\.connectUp, bytes.count)
                                }
                                channel.didSend(bytes: packet.bytes.count)
                            }
                        }
                    }
                    // A larger message than a frame is refused before it is read.
                    var options = CallOptions.defaults
                    options.maxResponseMessageBytes = ConnectFrame.maxFrameBytes
                    // grpc-swift-nio-transport 2.9 bounds the messages a client *reads* by this
                    // one (its stream handler's deframer), not by the above.
                    options.maxRequestMessageBytes = ConnectFrame.maxFrameBytes
                    // The view's streams run beside the Connect stream, and end with it.
                    let viewTask = Task { await view.run(client) }
                    defer { viewTask.cancel() }
                    try await client.bidirectionalStreaming(request: request, descriptor: GatewayMethods.connect, serializer: RawBytes(),
                                                            deserializer: RawBytes(), options: options) { response in
                        var reader = ConnectReader(direction: .toHost)
                        for try await message in response.messages {
                            counter.add(\.connectDown, message.count)
                            guard let event = try reader.read(message) else { continue }
                            switch event {
                            case .opened(let token):
                                if let token {
                                    view.opened(token: token)
                                    hasView.withLock { $0 = true }
                                }
                                opened.open(nil)
                            case .packet(let envelope, let attachments):
                                channel.receive(TransportPacket(bytes: envelope, attachments: attachments))
                                // A gateway faster than the connection waits (HTTP/2's flow
                                // control carries the wait to it).
                                await channel.waitForRoom()
                            case .end(let end):
                                channel.receiveEnd(Self.error(of: end, gateway: gateway, identifier: identifier))
                                opened.open(RemoteError(.interrupted, "\(gateway) could not open \(identifier)"))
                                return
                            case .open:
                                break  // the reader refuses it toward the host
                            }
                        }
                        let error = RemoteError(.interrupted, "\(gateway) ended the stream to \(identifier) without saying how")
                        channel.receiveEnd(error)
                        opened.open(error)
                    }
                }
            } catch let error as RemoteError {
                // The gateway broke the stream's rules: it is cut off, naming the rule.
                let cut = RemoteError(error.code, "\(gateway): \(error.reason)")
                channel.receiveEnd(cut)
                opened.open(cut)
            } catch {
                let failure = self.error(of: error, gateway: gateway, identifier: identifier)
                channel.receiveEnd(failure)
                opened.open(failure)
            }
            outgoingSink.finish()
        }
        // The stream's task opens the latch with its outcome; the deadline, or the caller's
        // cancellation, opens it first otherwise.
        let deadline = Task {
            try await Task.sleep(for: timeout)
            opened.open(RemoteError(.timeout, "\(gateway) did not open \(identifier) within \(timeout)"))
        }
        let failure = await withTaskCancellationHandler {
            await opened.wait()
        } onCancel: {
            opened.open(RemoteError(.cancelled, "cancelled while \(gateway) opened \(identifier)"))
        }
        deadline.cancel()
        if let failure {
            task.cancel()
            throw failure
        }
        return RemoteServiceChannel(connection: Connection(transport: channel, configuration: configuration, onRequest: onRequest, onMessage: onMessage),
                                    view: hasView.withLock { $0 } ? view : nil)
    }

    /// Whether `error` (from ``connect(to:configuration:onRequest:onMessage:within:)``) says the
    /// gateway itself could not be reached, as a connection it went away from does.
    static func isUnreachable(_ error: RemoteError) -> Bool {
        error.code == .interrupted && error.reason.contains(" is unreachable")
    }

    /// The client transport to the gateway: mutual TLS, trusting ``gatewayCA`` alone, and a
    /// ping every 20 s while a stream is open (answered within 10 s), so that a link that went
    /// silent (a dropped route, a machine gone) ends its streams as *interrupted*.
    func makeTransport() throws(GatewayError) -> HTTP2ClientTransport.Posix {
        var config = HTTP2ClientTransport.Posix.Config.defaults
        config.connection.keepalive = .init(time: .seconds(20), timeout: .seconds(10), allowWithoutCalls: false)
        if let serverName { config.http2.authority = serverName }
        let security = HTTP2ClientTransport.Posix.TransportSecurity.mTLS(
            certificateChain: [.file(path: certificateChain, format: .pem)], privateKey: .file(path: privateKey, format: .pem)) { tls in
            tls.trustRoots = .certificates([.file(path: gatewayCA, format: .pem)])
        }
        let target: any ResolvableTarget
        if let ipv4 = address.ipv4 {
            target = .ipv4(address: ipv4.host, port: ipv4.port)
        } else if let ipv6 = address.ipv6 {
            target = .ipv6(address: ipv6.host, port: ipv6.port)
        } else if let unix = address.unixDomainSocket {
            target = .unixDomainSocket(path: unix.path)
        } else {
            throw GatewayError("\(address): not an address a client reaches a gateway at")
        }
        do { return try HTTP2ClientTransport.Posix(target: target, transportSecurity: security, config: config) } catch {
            throw GatewayError("cannot make a transport to the gateway at \(address): \(String(describing: error).escapedForTerminal())")
        }
    }

    /// What a `Connect` stream's end means to the host's connection.
    static func error(of end: ConnectEnd, gateway: String, identifier: String) -> RemoteError? {
        switch end.code {
        case .closed:
            return nil
        case .ended where end.reason?.kind == .idleExit:
            // No news, as a local service's idle exit: the next call reconnects.
            return nil
        case .ended:
            let how = end.reason.map { "\($0)" } ?? "its process ended"
            return RemoteError(.interrupted, "\(identifier) on \(gateway) ended: \(how.escapedForTerminal())")
        case .interrupted:
            return RemoteError(.interrupted, "\(gateway) cannot reach \(identifier) now")
        case .invalidated:
            return RemoteError(.invalidated, "\(gateway) cannot reach \(identifier)")
        }
    }

    /// What a failed `Connect` call means to the host, in words.
    func error(of failure: any Error, gateway: String, identifier: String) -> RemoteError {
        guard let error = failure as? RPCError else {
            if failure is CancellationError { return RemoteError(.cancelled, "the stream to \(identifier) on \(gateway) was cancelled") }
            return RemoteError(.interrupted, "\(gateway) is unreachable: \(String(describing: failure).escapedForTerminal())")
        }
        let message = error.message.escapedForTerminal()
        switch error.code {
        case .aborted:
            return RemoteError(.interrupted, "\(gateway) cannot reach \(identifier) now: \(message)")
        case .failedPrecondition:
            return RemoteError(.invalidated, "\(gateway) cannot reach \(identifier): \(message)")
        case .unavailable:
            return RemoteError(.interrupted, "\(gateway) is unreachable, or refused the TLS handshake \(handshakeHint): \(message)")
        case .unauthenticated:
            return RemoteError(.invalidated, "\(gateway) refused this client: \(message)")
        case .permissionDenied:
            return RemoteError(.invalidated, "\(gateway) does not allow this client \(identifier): \(message)")
        case .notFound:
            return RemoteError(.invalidated, "\(gateway) has no service \(identifier): \(message)")
        case .invalidArgument:
            return RemoteError(.protocolViolation, "\(gateway) refused the stream: \(message)")
        case .internalError where error.message.hasPrefix("Failed to decode message"):
            // What grpc-swift-nio-transport reports for a message over the bound it was given
            // (its cause, resourceExhausted, does not reach the call).
            return RemoteError(.protocolViolation, "rule connect.frame-size: \(gateway) sent a message the transport could not read (over \(ConnectFrame.maxFrameBytes) bytes, or not a gRPC message): \(message)")
        case .resourceExhausted:
            return RemoteError(.protocolViolation, "rule connect.frame-size: \(gateway) sent a message over \(ConnectFrame.maxFrameBytes) bytes: \(message)")
        case .cancelled:
            return RemoteError(.cancelled, "the stream to \(identifier) on \(gateway) was cancelled: \(message)")
        default:
            return RemoteError(.interrupted, "\(gateway): \(error.code): \(message)")
        }
    }
}

/// Opened once with the outcome of a `Connect` stream's opening: `nil` when opened, or why not.
final class Latch: Sendable {
    private let state = Mutex<(value: RemoteError??, waiters: [CheckedContinuation<RemoteError?, Never>])>((nil, []))

    func open(_ value: RemoteError?) {
        let waiters = state.withLock { state -> [CheckedContinuation<RemoteError?, Never>] in
            guard state.value == nil else { return [] }
            state.value = .some(value)
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: value) }
    }

    func wait() async -> RemoteError? {
        await withCheckedContinuation { continuation in
            let value = state.withLock { state -> RemoteError?? in
                if let value = state.value { return value }
                state.waiters.append(continuation)
                return nil
            }
            if let value { continuation.resume(returning: value) }
        }
    }
}

/// One long-lived HTTP/2 connection (TCP and TLS) to a gateway, which its `Connect` streams and
/// catalog calls share: a stream costs one round trip to open instead of a new TCP and TLS
/// handshake. gRPC-Swift reconnects it, with backoff, after the gateway went away.
public final class GatewayLink: Sendable {
    /// The gateway and the TLS material.
    public let client: GatewayClient
    private let grpc: GRPCClient<HTTP2ClientTransport.Posix>
    private let running: Task<Void, Never>
    private let counter = WireCounter()

    /// The gRPC payload bytes this link's streams carried so far, each way.
    public var wireBytes: WireBytes { counter.value }

    /// A link to `client`'s gateway (connected on first use).
    ///
    /// - Throws: ``GatewayError`` when the transport cannot be made (an address that is none).
    public init(_ client: GatewayClient) throws(GatewayError) {
        self.client = client
        let grpc = GRPCClient(transport: try client.makeTransport())
        self.grpc = grpc
        running = Task { try? await grpc.runConnections() }
    }

    deinit {
        grpc.beginGracefulShutdown()
    }

    /// A connection to `identifier` over this link, as ``GatewayClient/connect(to:configuration:onRequest:onMessage:within:)``.
    public func connect(to identifier: String, configuration: Connection.Configuration,
                        onRequest: @escaping Connection.RequestHandler = Connection.refuseRequests,
                        onMessage: @escaping Connection.MessageHandler = { _, _ in },
                        within timeout: Duration = .seconds(30)) async throws(RemoteError) -> Connection {
        try await open(identifier, configuration: configuration, onRequest: onRequest, onMessage: onMessage, within: timeout).connection
    }

    /// A connection to `identifier` over this link with its view's streams, when the gateway
    /// has them (framing version 2).
    public func open(_ identifier: String, configuration: Connection.Configuration,
                     onRequest: @escaping Connection.RequestHandler = Connection.refuseRequests,
                     onMessage: @escaping Connection.MessageHandler = { _, _ in },
                     within timeout: Duration = .seconds(30)) async throws(RemoteError) -> RemoteServiceChannel {
        let grpc = grpc
        return try await client.connect(to: identifier, configuration: configuration, onRequest: onRequest, onMessage: onMessage,
                                        within: timeout, counter: counter) { body in try await body(grpc) }
    }

    /// Ends the link once its streams have ended.
    public func close() {
        grpc.beginGracefulShutdown()
    }
}
