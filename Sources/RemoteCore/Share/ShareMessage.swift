/// What an activity is doing, as it tells its host (the schema's `ActivityState`).
public enum ActivityState: Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Reading the items, loading.
    case preparing
    /// Waiting for the user.
    case ready
    /// Doing the work (posting, saving).
    case working
    /// The work is done; the final answer follows.
    case done

    public var description: String {
        switch self {
        case .preparing: "preparing"
        case .ready: "ready"
        case .working: "working"
        case .done: "done"
        }
    }
}

/// How a running activity presents itself: a title bar and a progress bar a host can draw.
/// Each update replaces the previous one whole.
public struct ActivityUpdate: Sendable, Hashable, CustomStringConvertible {
    /// 1…``ShareLimits/maxTitleBytes`` bytes.
    public var title: String
    /// At most ``ShareLimits/maxSubtitleBytes`` bytes; `nil` for none.
    public var subtitle: String?
    /// 0…1; `nil` when the progress is unknown (indeterminate).
    public var progress: Double?
    public var state: ActivityState

    public init(title: String, subtitle: String? = nil, progress: Double? = nil, state: ActivityState) {
        self.title = title
        self.subtitle = subtitle
        self.progress = progress
        self.state = state
    }

    /// Why a peer could never accept this update, or `nil`.
    package var problem: String? {
        guard !title.isEmpty, title.utf8.count <= ShareLimits.maxTitleBytes else {
            return "activity_update title must be 1…\(ShareLimits.maxTitleBytes) bytes, not \(title.utf8.count)"
        }
        if let subtitle, subtitle.utf8.count > ShareLimits.maxSubtitleBytes || subtitle.isEmpty {
            return "activity_update subtitle must be 1…\(ShareLimits.maxSubtitleBytes) bytes (or none), not \(subtitle.utf8.count)"
        }
        if let progress, !(progress.isFinite && progress >= 0 && progress <= 1) {
            return "activity_update progress \(progress) is not in 0…1"
        }
        return nil
    }

    /// `STATE: TITLE — SUBTITLE (PROGRESS)`, escaped for the terminal
    /// (``Swift/String/escapedForTerminal(asciiOnly:)``): the activity wrote the title.
    public var description: String {
        let progress = self.progress.map { "\(Int(($0 * 100).rounded()))%" } ?? "indeterminate"
        return "\(state): \(title)\(subtitle.map { " — \($0)" } ?? "") (\(progress))".escapedForTerminal()
    }
}

/// How a share ended, as the service says it (the schema's `ShareResult`).
package enum WireShareResult: Sendable, Hashable {
    case completed, cancelled, failed
}

/// The share family (fields 300–303): one share per connection, items in, updates and one
/// final answer out. See `docs/Protocol.md`, "Share".
package enum ShareMessage: Sendable {
    /// Host → service: the items (memfds ride with the envelope, one per file item, in order).
    case request(items: [WireShareItem])
    /// Host → service: the user dismissed the share.
    case cancel(reason: String)
    /// Service → host: the activity's title, progress and state.
    case update(ActivityUpdate)
    /// Service → host: the one final answer (memfds ride with it, one per returned file item).
    case complete(WireShareResult, items: [WireShareItem], message: String)

    /// The schema's name for the body.
    package var name: String {
        switch self {
        case .request: "share_request"
        case .cancel: "share_cancel"
        case .update: "activity_update"
        case .complete: "share_complete"
        }
    }

    /// The only side that may send this message.
    package var sender: PeerRole {
        switch self {
        case .request, .cancel: .host
        case .update, .complete: .service
        }
    }

    /// How many fds ride with it: one per file item.
    package var fileCount: Int {
        switch self {
        case .request(let items), .complete(_, let items, _): items.count { $0.kind == .file }
        case .cancel, .update: 0
        }
    }

    /// Why a peer could never accept this message, or `nil`.
    package var problem: String? {
        switch self {
        case .request(let items):
            guard (1...ShareLimits.maxItems).contains(items.count) else {
                return "share_request carries \(items.count) items; it must carry 1…\(ShareLimits.maxItems)"
            }
            return Self.itemsProblem(items, "share_request")
        case .cancel(let reason):
            return reason.utf8.count > WireLimits.maxReasonLength ? "share_cancel reason over \(WireLimits.maxReasonLength) bytes" : nil
        case .update(let update):
            return update.problem
        case .complete(let result, let items, let message):
            guard message.utf8.count <= ShareLimits.maxMessageBytes else {
                return "share_complete message over \(ShareLimits.maxMessageBytes) bytes"
            }
            switch result {
            case .completed:
                guard message.isEmpty else { return "share_complete COMPLETED with a message (only FAILED and CANCELLED carry one)" }
                guard items.count <= ShareLimits.maxItems else {
                    return "share_complete returns \(items.count) items; at most \(ShareLimits.maxItems)"
                }
                return Self.itemsProblem(items, "share_complete")
            case .cancelled:
                return items.isEmpty ? nil : "share_complete CANCELLED with \(items.count) items (only COMPLETED returns items)"
            case .failed:
                guard items.isEmpty else { return "share_complete FAILED with \(items.count) items (only COMPLETED returns items)" }
                return message.isEmpty ? "share_complete FAILED without a message saying why" : nil
            }
        }
    }

    private static func itemsProblem(_ items: [WireShareItem], _ what: String) -> String? {
        for (index, item) in items.enumerated() {
            if let problem = item.problem { return "\(what) item \(index): \(problem)" }
        }
        return nil
    }
}

/// The handshake capability of a service that runs shares (`docs/Protocol.md`, "Share").
package enum ShareCapability {
    package static let name = "share"
}

/// The handshake capability of a service that has a view: it answers `resize` with frames and
/// takes input (`docs/Protocol.md`, "Capabilities").
package enum SurfaceCapability {
    package static let name = "surfaces"
}
