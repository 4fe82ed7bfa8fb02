import Glibc

/// Why a service process ended, as the launcher reports it (``LauncherEvent/terminated(identifier:pid:reason:)``,
/// ``ServiceStatus/lastTermination``).
public struct TerminationReason: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The kind of ending.
    public enum Kind: String, Sendable, Hashable, Codable {
        /// It exited by itself with ``TerminationReason/exitCode`` (non-zero counts as a crash).
        case exited
        /// A signal killed it without the host asking (a crash).
        case killed
        /// It was idle for its idle timeout: it exited by itself, or the host stopped it.
        case idleExit
        /// It broke the protocol, and the host ended it.
        case protocolViolation
        /// It exceeded a resource limit (`SIGXCPU`, `SIGXFSZ`).
        case limit
        /// The host stopped it (``ServiceConnection/invalidate()``, launcher shut down).
        case stopped
        /// bubblewrap refused to create its sandbox; it never ran.
        case sandboxRefused
    }

    /// The kind of ending.
    public var kind: Kind
    /// What happened, in words.
    public var detail: String
    /// The exit code, when it exited.
    public var exitCode: Int32?
    /// The signal, when one killed it.
    public var signal: Int32?
    /// Whether this counts towards the crash-loop limit: killed, over a limit, a protocol
    /// violation, a non-zero exit, or any exit before the handshake.
    public var isCrash: Bool
    /// How long the process ran, in seconds: from its launch until the launcher reaped it
    /// (`nil` for an ending the launcher did not time).
    public var uptime: Double?

    public init(kind: Kind, detail: String, exitCode: Int32? = nil, signal: Int32? = nil, isCrash: Bool? = nil) {
        self.kind = kind
        self.detail = detail
        self.exitCode = exitCode
        self.signal = signal
        self.isCrash = isCrash ?? {
            switch kind {
            case .killed, .limit, .protocolViolation: true
            case .exited: exitCode != 0
            case .idleExit, .stopped, .sandboxRefused: false
            }
        }()
    }

    /// `KIND: DETAIL`, escaped for the terminal (`String.escapedForTerminal()`):
    /// a detail may quote what the service said.
    public var description: String { "\(kind.rawValue): \(detail)".escapedForTerminal() }

    /// The reason for a process that ended by itself with `termination`.
    static func ended(_ termination: Termination) -> TerminationReason {
        switch termination {
        case .exited(let code):
            return TerminationReason(kind: .exited, detail: termination.description, exitCode: code)
        case .killed(let signal, _):
            let kind: Kind = signal == SIGXCPU || signal == SIGXFSZ ? .limit : .killed
            return TerminationReason(kind: kind, detail: termination.description, signal: signal)
        case .unknown:
            // Counted as a crash: nothing says it ended well.
            return TerminationReason(kind: .exited, detail: termination.description, isCrash: true)
        }
    }
}
