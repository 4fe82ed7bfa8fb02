import Glibc

/// Why a service process ended, as the launcher reports it (``LauncherEvent/terminated(identifier:pid:reason:)``,
/// ``ServiceStatus/lastTermination``).
public struct TerminationReason: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The kind of ending. Its raw value is its one spelling, in text (``description``, logs,
    /// tables) and in JSON: `exited`, `killed`, `idle exit`, `protocol violation` (as
    /// `RemoteError`'s code), `limit`, `stopped`, `sandbox refused`.
    public enum Kind: String, Sendable, Hashable, Codable {
        /// It exited by itself with ``TerminationReason/exitCode`` (non-zero counts as a crash).
        case exited
        /// A signal killed it without the host asking (a crash).
        case killed
        /// It was idle for its idle timeout: it exited by itself, or the host stopped it.
        case idleExit = "idle exit"
        /// It broke the protocol, and the host ended it.
        case protocolViolation = "protocol violation"
        /// It exceeded a resource limit (`SIGXCPU`, `SIGXFSZ`).
        case limit
        /// The host stopped it (``ServiceConnection/invalidate()``, launcher shut down).
        case stopped
        /// bubblewrap refused to create its sandbox; it never ran.
        case sandboxRefused = "sandbox refused"
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
    /// The last lines the service wrote to standard error before it ended (before a crash
    /// report, which the log keeps as one entry), oldest first: at most ``maxStandardErrorBytes``
    /// in all, decoded as UTF-8 (a byte that is not becomes U+FFFD), as written: escape them
    /// (`escapedForTerminal()`) before printing.
    public var standardErrorTail: [String] = []
    /// The first line of Swift's runtime saying `Fatal error:` (a `fatalError`, a failed
    /// `precondition`, a force-unwrapped `nil`), when the service wrote one: the words of its
    /// crash.
    public var fatalError: String?

    /// The most bytes of ``standardErrorTail``.
    public static let maxStandardErrorBytes = 2048

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

    /// `KIND: DETAIL`, and for a crash (a failed exit included) what it last said on standard error
    /// (its fatal error, else its last line), escaped for the terminal
    /// (`String.escapedForTerminal()`): a detail may quote what the service said.
    public var description: String {
        var text = "\(kind.rawValue): \(detail)"
        if isCrash, let said = fatalError ?? standardErrorTail.last { text += "; stderr: \(said)" }
        return text.escapedForTerminal()
    }

    /// ``description``, then every line of ``standardErrorTail``, indented: for a place with
    /// room, such as the end of a conformance check.
    public var report: String {
        ([description] + standardErrorTail.map { "  " + $0.escapedForTerminal() }).joined(separator: "\n")
    }

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
