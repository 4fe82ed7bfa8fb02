/// The protocol's base version, in every handshake's `protocol_version`: a peer that sends
/// another is refused. Versions beyond it are agreed with ``Handshake/maxProtocolVersion``
/// (`docs/Protocol.md`, "Versions").
public let remoteViewProtocolVersion: UInt32 = 1

/// The highest protocol version this build speaks: 2, which adds two rules to version 1 (a
/// view only for a service that announces `surfaces`; an unknown request answered in the
/// `RemoteView` domain, code 1). A peer of an older version is served by its version's rules.
public let remoteViewLatestProtocolVersion: UInt32 = 2

/// Which end of a connection a peer is.
public enum PeerRole: Sendable, Hashable, CustomStringConvertible {
    /// The process that launched or connected to the service; it owns policy.
    case host
    /// The service process; untrusted.
    case service

    public var description: String { self == .host ? "host" : "service" }
}

/// What a peer says about itself in the handshake.
public struct Handshake: Sendable, Hashable {
    public var protocolVersion: UInt32
    public var role: PeerRole
    /// Reverse-DNS identifier of the service, or of the host application.
    public var identifier: String
    /// Optional features the peer supports.
    public var capabilities: [String]
    /// The largest packet the peer accepts.
    public var maxPacketSize: UInt32
    /// The highest protocol version the peer speaks (`max_protocol_version`); `nil` when its
    /// handshake does not say, as a version-1 peer's does not: it speaks ``protocolVersion``.
    public var maxProtocolVersion: UInt32?

    /// What a peer says about itself: by default the base version, and every version up to
    /// ``remoteViewLatestProtocolVersion``.
    public init(protocolVersion: UInt32 = remoteViewProtocolVersion, role: PeerRole, identifier: String,
                capabilities: [String] = [], maxPacketSize: UInt32 = UInt32(WireLimits.maxPacketSize),
                maxProtocolVersion: UInt32? = remoteViewLatestProtocolVersion) {
        self.protocolVersion = protocolVersion
        self.role = role
        self.identifier = identifier
        self.capabilities = capabilities
        self.maxPacketSize = maxPacketSize
        self.maxProtocolVersion = maxProtocolVersion
    }

    /// The highest version the peer speaks: ``maxProtocolVersion``, or ``protocolVersion`` when
    /// its handshake does not say.
    public var highestVersion: UInt32 { maxProtocolVersion ?? protocolVersion }

    /// The version in force between this handshake's sender and `peer`'s: the lower of the two
    /// highest versions.
    public func agreedVersion(with peer: Handshake) -> UInt32 {
        min(highestVersion, peer.highestVersion)
    }
}

/// Why a peer reports a protocol error (the schema's `ProtocolErrorCode`).
package enum ProtocolErrorCode: Int32, Sendable, CaseIterable {
    case malformed = 1
    case versionMismatch = 2
    case unexpected = 3
    case fdMismatch = 4
    case tooLarge = 5
    case role = 6
}

/// One packet: the Swift value of the schema's `Envelope`, validated.
///
/// The wire layer: ``Connection`` builds and reads these; authors never see them.
package struct Envelope: Sendable {
    /// Sender-assigned, never 0 on the wire, increasing in the order packets are written (the
    /// sender numbers what it writes as it queues it: see ``EnvelopeFramer``).
    package var id: UInt64
    /// The request this answers, if it is a reply.
    package var replyTo: UInt64?
    package var body: Body
    /// The fds riding with the packet; `fd_count` on the wire is their count.
    package var attachments: [Attachment]

    /// An envelope to send: its id is 0 until the transport numbers it as it writes it.
    package init(replyTo: UInt64? = nil, body: Body, attachments: [Attachment] = []) {
        self.init(id: 0, replyTo: replyTo, body: body, attachments: attachments)
    }

    package init(id: UInt64, replyTo: UInt64? = nil, body: Body, attachments: [Attachment] = []) {
        self.id = id
        self.replyTo = replyTo
        self.body = body
        self.attachments = attachments
    }

    /// The schema's `oneof body`.
    package enum Body: Sendable {
        case handshake(Handshake)
        case goodbye(reason: String)
        case protocolError(ProtocolErrorCode, reason: String)
        case ping(nonce: UInt64)
        case pong(nonce: UInt64)
        case request(type: String, payload: [UInt8])
        case reply(type: String, payload: [UInt8])
        case message(type: String, payload: [UInt8])
        case failure(ServiceFailure)
        case cancel(requestID: UInt64)
        /// Fields 100–108: surfaces, and the view's restorable state.
        case surface(SurfaceMessage)
        /// Fields 200–205: input, host → service.
        case input(InputEvent)
        /// Fields 300–303: a share's items, updates and outcome.
        case share(ShareMessage)

        /// The schema's name for this body, for error messages.
        package var name: String {
            switch self {
            case .handshake: "handshake"
            case .goodbye: "goodbye"
            case .protocolError: "protocol_error"
            case .ping: "ping"
            case .pong: "pong"
            case .request: "request"
            case .reply: "reply"
            case .message: "message"
            case .failure: "failure"
            case .cancel: "cancel"
            case .surface(let message): message.name
            case .input(let event): event.name
            case .share(let message): message.name
            }
        }

        /// How many fds this body may carry (the schema's "fds:" notes).
        package var allowedAttachments: ClosedRange<Int> {
            switch self {
            case .request, .reply, .message: 0...WireLimits.maxAttachments
            case .surface(.attachBuffer): 1...1
            case .surface(.restorableState(.memfd)), .surface(.restoreState(.memfd)): 1...1
            case .share(let message): message.fileCount...message.fileCount
            default: 0...0
            }
        }

        /// Whether this body answers a request (and so must have `reply_to`).
        package var isReply: Bool {
            switch self {
            case .pong, .reply, .failure: true
            default: false
            }
        }
    }
}
