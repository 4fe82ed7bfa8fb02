/// An error from a RemoteView connection.
///
/// An open struct with a ``Code`` rather than a closed enum, so later codes do not break
/// anyone's `switch` (like swift-system's `Errno`). Compare with ``code``:
///
/// ```swift
/// do { try await connection.request(message) }
/// catch let error as RemoteError where error.code == .interrupted { /* retry */ }
/// ```
public struct RemoteError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of failure this is.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The peer went away (it exited, crashed, or closed the connection). A later message
        /// may work again. Like `XPC_ERROR_CONNECTION_INTERRUPTED`.
        public static let interrupted = Code(rawValue: "interrupted")
        /// The connection can never work: no such service, sandbox refused, crash loop, or it was
        /// closed on purpose. Like `XPC_ERROR_CONNECTION_INVALID`.
        public static let invalidated = Code(rawValue: "invalidated")
        /// The peer broke the protocol; ``RemoteError/reason`` says how.
        public static let protocolViolation = Code(rawValue: "protocol violation")
        /// A reply did not arrive before its deadline.
        public static let timeout = Code(rawValue: "timeout")
        /// The caller's task was cancelled; the peer was told.
        public static let cancelled = Code(rawValue: "cancelled")
        /// The peer's own error: see ``RemoteError/remote``.
        public static let remoteError = Code(rawValue: "remote error")
        /// A message the caller built cannot be sent as it is (too large, bad type name).
        public static let invalidArgument = Code(rawValue: "invalid argument")
        /// The share a view or connection belongs to has ended (completed, cancelled, failed
        /// or interrupted) and its activity's process is gone: nothing launches it again for
        /// that share, which would start the activity without its items. Perform the share
        /// again to run the activity again.
        public static let shareEnded = Code(rawValue: "share ended")
        /// A file the host keeps for itself (the share sheet's ranking and choices) cannot be
        /// read or written; ``RemoteError/reason`` names it and why.
        public static let storage = Code(rawValue: "storage")
    }

    /// What kind of failure this is.
    public var code: Code
    /// A sentence for people: what happened, naming the values involved.
    public var reason: String
    /// The peer's own error, when ``code`` is ``Code/remoteError``.
    public var remote: ServiceFailure?
    /// When the error is the end of the peer's process: the last lines it wrote to standard
    /// error, oldest first, as written (escape them before printing). ``reason`` has its fatal
    /// error or last line already.
    public var standardErrorTail: [String]

    public init(_ code: Code, _ reason: String, remote: ServiceFailure? = nil, standardErrorTail: [String] = []) {
        self.code = code
        self.reason = reason
        self.remote = remote
        self.standardErrorTail = standardErrorTail
    }

    /// `CODE: REASON`, escaped for the terminal (``Swift/String/escapedForTerminal(asciiOnly:)``):
    /// a reason may quote what a peer sent.
    public var description: String { "\(code): \(reason)".escapedForTerminal() }
}

/// An error a service (or host) sends as the answer to a request, like an `NSError` with a
/// domain and code crossing an XPC reply.
///
/// Throw it from a request handler to send exactly this to the requester; any other error a
/// handler throws is sent with domain `"RemoteView.HandlerError"` and its description.
public struct ServiceFailure: Error, Sendable, Hashable, CustomStringConvertible {
    /// Who defines ``code``, e.g. `"com.example.echo"`.
    public var domain: String
    /// The domain's code for this failure.
    public var code: Int64
    /// A sentence for people.
    public var message: String

    public init(domain: String, code: Int64, message: String) {
        self.domain = domain
        self.code = code
        self.message = message
    }

    /// `DOMAIN CODE: MESSAGE`, escaped for the terminal (``Swift/String/escapedForTerminal(asciiOnly:)``):
    /// a peer wrote all of it.
    public var description: String { "\(domain) \(code): \(message)".escapedForTerminal() }
}

extension ServiceFailure {
    /// The domain of the failures the framework itself answers with (`Protocol.md`, "Requests").
    public static let frameworkDomain = "RemoteView"

    /// The framework's failure codes, in ``frameworkDomain``.
    public enum FrameworkCode {
        /// The receiver handles no request of this type.
        public static let unknownRequest: Int64 = 1
        /// The handler's reply could not be sent (too large, say); the message says why.
        public static let replyNotSent: Int64 = 2
    }

    /// The answer to a request of a type the receiver does not handle: domain `RemoteView`,
    /// code 1. Throw it from a request handler's `default:` case, so a host can tell "not
    /// supported" from a failure of the work.
    public static func unknownRequest(_ type: String, handler: String? = nil) -> ServiceFailure {
        ServiceFailure(domain: frameworkDomain, code: FrameworkCode.unknownRequest,
                       message: "\(handler.map { "\($0) handles" } ?? "there is") no request of type \"\(type.escapedForTerminal())\"")
    }

    /// Whether this is ``unknownRequest(_:handler:)``'s failure (from any peer that follows the protocol).
    public var isUnknownRequest: Bool {
        domain == Self.frameworkDomain && code == FrameworkCode.unknownRequest
    }
}
