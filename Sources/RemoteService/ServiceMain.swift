@_exported import RemoteCore
import Glibc

/// The service side's entry point: picks up the socket the host passed, handshakes, and
/// serves requests until the host goes away. Like `xpc_main()`.
///
/// ```swift
/// @main struct EchoService {
///     static func main() async {
///         await ServiceMain.exit(serving: "com.example.echo") { request in
///             ServiceMessage(type: "echo", payload: request.payload)
///         }
///     }
/// }
/// ```
///
/// The socket arrives as fd 3 under the systemd socket-activation convention (`LISTEN_FDS=1`),
/// so the same binary runs under a RemoteView host and under `systemd-socket-activate
/// --accept --seqpacket`. Idle exit and the view-controller API come with later parts.
public enum ServiceMain {
    /// Serves the connection the host passed until it closes.
    ///
    /// - Returns: normally when the host said goodbye.
    /// - Throws: ``RemoteError`` when no socket was passed, the host broke the protocol, or it
    ///   vanished.
    public static func run(identifier: String, capabilities: [String] = [],
                           onRequest: @escaping Connection.RequestHandler,
                           onMessage: @escaping Connection.MessageHandler = { _ in }) async throws(RemoteError) {
        let socket = try SocketActivation.takeSocket()
        let connection: Connection
        do {
            connection = try Connection(socket: socket,
                                        configuration: .init(role: .service, identifier: identifier, capabilities: capabilities),
                                        onRequest: onRequest, onMessage: onMessage)
        } catch {
            throw RemoteError(.invalidated, "cannot use the passed socket: \(error)")
        }
        try await connection.run()
    }

    /// ``run(identifier:capabilities:onRequest:onMessage:)``, then exits the process: status 0
    /// after an orderly close, 1 (with the reason on stderr) otherwise.
    public static func exit(serving identifier: String, capabilities: [String] = [],
                            onRequest: @escaping Connection.RequestHandler,
                            onMessage: @escaping Connection.MessageHandler = { _ in }) async -> Never {
        do {
            try await run(identifier: identifier, capabilities: capabilities, onRequest: onRequest, onMessage: onMessage)
            Glibc.exit(0)
        } catch {
            let line = Array("\(identifier): \(error)\n".utf8)
            _ = line.withUnsafeBytes { Glibc.write(2, $0.baseAddress, $0.count) }
            Glibc.exit(1)
        }
    }
}
