@_exported import RemoteCore

/// A service process started by the host and the `Connection` to it.
///
/// The building block the launcher (manifests, sandbox, on-demand start, relaunch) is made
/// of: a socket pair, the service spawned with its end at fd 3, and a host-role connection
/// over the other end. The connection does nothing until its `Connection.run()` is awaited.
public final class SpawnedService: Sendable {
    /// The running process.
    public let process: ChildProcess
    /// The host's end of the conversation.
    public let connection: Connection

    /// Spawns `executable` and prepares a connection to it.
    ///
    /// - Parameters:
    ///   - executable: The service's executable (an absolute path).
    ///   - arguments: `argv[1...]`.
    ///   - environment: The service's environment (`LISTEN_FDS=1` is added).
    ///   - hostIdentifier: What the host calls itself in the handshake.
    ///   - configuration: Changes the connection's configuration (timeouts, capabilities).
    ///   - onRequest: Answers requests the service sends to the host.
    ///   - onMessage: Receives the one-way messages the service sends.
    public init(executable: String, arguments: [String] = [], environment: [String: String] = [:],
                hostIdentifier: String, configuration: ((inout Connection.Configuration) -> Void)? = nil,
                onRequest: @escaping Connection.RequestHandler = Connection.refuseRequests,
                onMessage: @escaping Connection.MessageHandler = { _, _ in }) throws(SystemCallError) {
        let pair = try SeqpacketSocket.pair()
        let hostEnd = pair.first
        let serviceEnd = pair.second
        process = try ChildProcess.spawn(executable: executable, arguments: arguments, environment: environment,
                                         socket: serviceEnd)
        var settings = Connection.Configuration(role: .host, identifier: hostIdentifier)
        configuration?(&settings)
        connection = try Connection(socket: hostEnd, configuration: settings, onRequest: onRequest, onMessage: onMessage)
    }
}
