/// A view's restorable state on the wire (`docs/Protocol.md`, "Restorable state"): the opaque
/// bytes a service's view controller encodes so that a view presented again after its process
/// ended comes back as it was (UIKit's state restoration, carried across processes).
///
/// The service sends `restorable_state` to a host that announced the capability
/// `restorable-state`; the host keeps the latest, and sends it back as
/// `restore_state` to the next process that shows the view, before its first size.
public enum RestorableStateLimits {
    /// The most bytes that travel inline; larger state goes in a sealed memfd (a packet holds at
    /// most ``WireLimits/maxPacketSize`` bytes).
    public static let maxInlineBytes = 16 * 1024
    /// The most any state may hold on the wire: 1 MiB, the manifest's highest
    /// `limits.restorableStateKiB`.
    public static let maxBytes = 1024 * 1024
    /// The manifest's default `limits.restorableStateKiB`.
    public static let defaultKiB = 64
    /// The highest `limits.restorableStateKiB`.
    public static let maxKiB = 1024
}

/// The capability both sides announce for restorable state: a host that keeps its views'
/// state, a service that sends it.
package enum RestorableStateCapability {
    package static let name = "restorable-state"
}

/// How one state travels: its bytes inline, or the size of the sealed memfd that rides with it.
package enum RestorableStateWire: Sendable, Hashable {
    /// 0…``RestorableStateLimits/maxInlineBytes`` bytes (none: the view has nothing to keep).
    case inline([UInt8])
    /// A sealed memfd of 1…``RestorableStateLimits/maxBytes`` bytes rides with the message.
    case memfd(size: Int)

    /// How many bytes the state holds.
    package var size: Int {
        switch self {
        case .inline(let bytes): bytes.count
        case .memfd(let size): size
        }
    }

    /// Why these values are impossible on the wire, or `nil` when they are fine.
    package func problem(in message: String) -> String? {
        switch self {
        case .inline(let bytes) where bytes.count > RestorableStateLimits.maxInlineBytes:
            return "\(message) holds \(bytes.count) bytes inline; at most \(RestorableStateLimits.maxInlineBytes) (larger state goes in a memfd)"
        case .memfd(let size) where !(1...RestorableStateLimits.maxBytes).contains(size):
            return "\(message) declares a memfd of \(size) bytes; 1…\(RestorableStateLimits.maxBytes)"
        default:
            return nil
        }
    }

    /// `state` as a message carries it: inline up to ``RestorableStateLimits/maxInlineBytes``,
    /// else in a new memfd sealed against any change.
    ///
    /// - Throws: `RemoteError` `invalidArgument` when it holds more than
    ///   ``RestorableStateLimits/maxBytes``, or the memfd cannot be made.
    package static func encode(_ state: [UInt8]) throws(RemoteError) -> (RestorableStateWire, [Attachment]) {
        guard state.count <= RestorableStateLimits.maxBytes else {
            throw RemoteError(.invalidArgument, "a restorable state of \(state.count) bytes is over the protocol's \(RestorableStateLimits.maxBytes)")
        }
        guard state.count > RestorableStateLimits.maxInlineBytes else { return (.inline(state), []) }
        do {
            let file = try MemoryFile.sealed(name: "remoteview-state", contents: state)
            return (.memfd(size: state.count), [Attachment(file.takeDescriptor())])
        } catch {
            throw RemoteError(.invalidArgument, "cannot put a restorable state of \(state.count) bytes in a memfd: \(error)")
        }
    }

    /// The bytes a peer sent in `message` (its schema name, for errors), at most `limit` of them:
    /// a memfd must be sealed against shrinking, growing and writing and hold exactly its
    /// declared size.
    ///
    /// - Throws: `RemoteError` `protocolViolation` naming what was wrong; the attachments close.
    package func decode(attachments: [Attachment], limit: Int, in message: String) throws(RemoteError) -> [UInt8] {
        guard size <= limit else {
            throw RemoteError(.protocolViolation, "\(message) of \(size) bytes is over the limit of \(limit) bytes")
        }
        switch self {
        case .inline(let bytes):
            return bytes
        case .memfd(let declared):
            guard attachments.count == 1, let fd = attachments[0].take() else {
                throw RemoteError(.protocolViolation, "\(message) declares a memfd but none came with it")
            }
            let memory = MemoryFile(adopting: fd)
            try memory.checkReceived(declaring: declared, as: message)
            do { return try memory.contents(limit: declared) } catch {
                throw RemoteError(.protocolViolation, "\(message): \(error.reason)")
            }
        }
    }
}
