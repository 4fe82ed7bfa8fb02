import RemoteCore

/// The host's side of one share as a value (`docs/Protocol.md`, "Share"): which channel the
/// request went out on, whether a cancel was sent, and how it ended. Events in, actions out;
/// ``ShareSession`` does the I/O.
///
/// ```
///  idle ──requestSent──▶ running ──share_complete / channel closed──▶ finished
///    └──────────────cancelled before a request──────────────────────────▲
/// ```
///
/// Every share message is checked against the rules here: from the request's channel only,
/// after the request, and nothing after `share_complete`.
package struct ShareSessionStateMachine<Channel: AnyObject & Sendable>: Sendable {
    package enum State: Sendable {
        /// Nothing sent yet.
        case idle
        /// The request went out on `channel`; `cancelSent` once `share_cancel` did too.
        case running(channel: Channel, cancelSent: Bool)
        /// The outcome is known; `channel` is the one the share ran on (its messages are now
        /// violations), if any.
        case finished(ShareOutcome, channel: Channel?)
    }

    package private(set) var state: State = .idle

    package init() {}

    /// What to do with a share message from the service.
    package enum MessageAction: Sendable {
        /// Pass the update on.
        case update(ActivityUpdate)
        /// The share ended with `outcome` (its items still to be checked for a completion).
        case finish(ShareOutcome)
        /// The service broke a rule (named): end it.
        case violation(String)
    }

    /// The request went out on `channel`.
    package mutating func requestSent(on channel: Channel) {
        guard case .idle = state else { preconditionFailure("a share's request is sent once, and it was sent already (\(state))") }
        state = .running(channel: channel, cancelSent: false)
    }

    /// A message of the share family arrived from the service on `channel` (its items
    /// already read as `items` for a completion).
    package mutating func received(_ message: ShareMessage, items: [ShareItem] = [], on channel: Channel) -> MessageAction {
        switch state {
        case .idle:
            return .violation("\(message.name) before the host's share_request")
        case .finished(_, let finishedOn):
            guard finishedOn === channel else { return .violation("\(message.name) on a connection that carries no share") }
            return .violation("\(message.name) after the share's share_complete")
        case .running(let running, _):
            guard running === channel else { return .violation("\(message.name) on a connection that carries no share") }
            switch message {
            case .update(let update):
                return .update(update)
            case .complete(let result, _, let text):
                let outcome: ShareOutcome = switch result {
                case .completed: .completed(items)
                case .cancelled: .cancelled(reason: text.isEmpty ? nil : text)
                case .failed: .failed(text)
                }
                state = .finished(outcome, channel: channel)
                return .finish(outcome)
            case .request, .cancel:
                // The connection refuses host messages from the service before a handler sees them.
                preconditionFailure("\(message.name) reached the host's share session")
            }
        }
    }

    /// What to do when the user dismisses the share.
    package enum CancelAction: Sendable {
        /// Send `share_cancel` on `channel`, then wait the grace period for the answer.
        case send(Channel)
        /// It was sent already: wait for the answer.
        case wait
        /// Nothing is running (it never started, or it ended): `outcome` is how it ended.
        case finished(ShareOutcome)
    }

    package mutating func cancelRequested() -> CancelAction {
        switch state {
        case .idle:
            let outcome = ShareOutcome.cancelled(reason: "dismissed before the share started")
            state = .finished(outcome, channel: nil)
            return .finished(outcome)
        case .running(let channel, let cancelSent):
            if cancelSent { return .wait }
            state = .running(channel: channel, cancelSent: true)
            return .send(channel)
        case .finished(let outcome, _):
            return .finished(outcome)
        }
    }

    /// `channel` closed (`error`: how, or `nil` for no news). Returns the outcome if this ends
    /// the share.
    package mutating func channelClosed(_ channel: Channel, error: RemoteError?) -> ShareOutcome? {
        guard case .running(let running, _) = state, running === channel else { return nil }
        let outcome = ShareOutcome.interrupted(error ?? RemoteError(.interrupted, "the service closed the share's connection before share_complete"))
        state = .finished(outcome, channel: channel)
        return outcome
    }

    /// The share could not be started (the request never went out).
    package mutating func failedToStart(_ error: RemoteError) -> ShareOutcome? {
        guard case .idle = state else { return nil }
        let outcome = ShareOutcome.interrupted(error)
        state = .finished(outcome, channel: nil)
        return outcome
    }
}

/// How a share ended, as the host's app sees it (`completeRequest(returningItems:)`,
/// `cancelRequest(withError:)`, or the process going).
public enum ShareOutcome: Sendable, CustomStringConvertible {
    /// The activity finished, returning `items` (possibly none).
    case completed([ShareItem])
    /// The user (or the host) cancelled it; the service may say why.
    case cancelled(reason: String?)
    /// The activity could not do it, and says why.
    case failed(String)
    /// The service's process ended (or the connection broke) before it answered: the error
    /// says how, with the termination reason.
    case interrupted(RemoteError)

    /// What happened, in a line escaped for the terminal (`String.escapedForTerminal()`):
    /// the activity wrote the reason, the message and the items.
    public var description: String {
        let text = switch self {
        case .completed(let items): "completed, returning \(items.count) item(s)\(items.isEmpty ? "" : ": " + items.map(\.description).joined(separator: ", "))"
        case .cancelled(let reason): "cancelled\(reason.map { ": \($0)" } ?? "")"
        case .failed(let message): "failed: \(message)"
        case .interrupted(let error): "interrupted: \(error.reason)"
        }
        return text.escapedForTerminal()
    }
}
