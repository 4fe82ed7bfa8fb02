/// An application message: what a host and a service say to each other.
///
/// Like an XPC dictionary reduced to what crosses the wire: a ``type`` naming what the payload
/// is (the receiver dispatches on it), opaque ``payload`` bytes, and up to
/// ``WireLimits/maxAttachments`` file descriptors. Data larger than a packet goes in a sealed
/// memfd attachment (see ``MemoryFile``).
public struct ServiceMessage: Sendable, CustomStringConvertible {
    /// What the payload is, e.g. `"echo"` or `"com.example.clock/now"`. 1…256 bytes of UTF-8,
    /// no control characters.
    public var type: String
    /// The message's bytes, in whatever encoding ``type`` implies.
    public var payload: [UInt8]
    /// File descriptors travelling with the message.
    public var attachments: [Attachment]

    public init(type: String, payload: [UInt8] = [], attachments: [Attachment] = []) {
        self.type = type
        self.payload = payload
        self.attachments = attachments
    }

    /// A message whose payload is `text` as UTF-8.
    public init(type: String, text: String, attachments: [Attachment] = []) {
        self.init(type: type, payload: Array(text.utf8), attachments: attachments)
    }

    /// The payload decoded as UTF-8, or `nil` if it is not valid UTF-8.
    public var text: String? { String(validating: payload, as: UTF8.self) }

    public var description: String {
        let fds = attachments.isEmpty ? "" : ", \(attachments.count) fd(s)"
        return "\(type) (\(payload.count) bytes\(fds))"
    }
}

/// The bounds every peer enforces on what it receives (and checks on what it sends).
///
/// protobuf-c itself sets no limits, so these are the only ones.
public enum WireLimits {
    /// The largest packet, in bytes. Larger data goes in a memfd attachment.
    public static let maxPacketSize = 65_536
    /// The most file descriptors one message may carry.
    public static let maxAttachments = 16
    /// Identifier length bound (reverse-DNS, bytes).
    public static let maxIdentifierLength = 255
    /// How many capabilities a handshake may list, and how long each may be.
    public static let maxCapabilities = 32
    public static let maxCapabilityLength = 64
    /// ``ServiceMessage/type`` length bound (bytes).
    public static let maxTypeLength = 256
    /// Bound for reasons in goodbyes and protocol errors, and for failure domains (bytes).
    public static let maxReasonLength = 1_024
    /// Bound for a ``ServiceFailure/message`` (bytes).
    public static let maxFailureMessageLength = 4_096
}

/// Messages the framework itself sends; their types start with `remoteview.`.
package enum FrameworkMessage {
    /// Host → service, one-way, one attachment: a connected `SOCK_SEQPACKET` socket on which a
    /// new connection (handshake first) starts. The launcher keeps fd 3 as its control
    /// connection and opens one of these per client, so a shared service process serves many.
    package static let connect = "remoteview.connect"
    /// The goodbye reason a service gives when it exits because it was idle.
    package static let idleExitReason = "idle exit"
    /// The environment variable a launcher sets to the service's idle timeout, in seconds.
    package static let idleTimeoutVariable = "REMOTEVIEW_IDLE_TIMEOUT"
    /// The environment variable a launcher sets to the most a view's restorable state may hold,
    /// in KiB (the manifest's `limits.restorableStateKiB`; 0: none).
    package static let restorableStateLimitVariable = "REMOTEVIEW_RESTORABLE_STATE_KIB"
    /// The environment variable a launcher sets to the service's identifier (its manifest's).
    package static let identifierVariable = "REMOTEVIEW_IDENTIFIER"
    /// The environment variable a launcher sets to the service's title (its manifest's
    /// `display.title`).
    package static let titleVariable = "REMOTEVIEW_TITLE"
    /// The environment variable a launcher sets to the service's data folder (the manifest's
    /// `sandbox.dataFolder`): `/data` in the sandbox, the host folder without one.
    package static let dataDirectoryVariable = "REMOTEVIEW_DATA_DIR"
    /// Host → service, a request: the reply ("remoteview.settled") comes once the service's view
    /// has committed everything pending (no damage left, no animation running), so when it
    /// arrives the host has composited the view's current state.
    package static let settle = "remoteview.settle"
    package static let settled = "remoteview.settled"
}
