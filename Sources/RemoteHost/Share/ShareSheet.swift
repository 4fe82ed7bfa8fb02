import FoundationEssentials
import RemoteCore

/// The activities that accept a set of items, and why the others do not: what a share sheet
/// shows (`UIActivityViewController`, Android's chooser), decided from the manifests alone.
///
/// ```swift
/// let sheet = ShareSheet(registry: registry, items: [try .text("Hello"), try .url("https://example.com")],
///                        preferences: .user())
/// for activity in sheet.activities { print(activity.title) }
/// for explanation in sheet.explanations { print("\(explanation.activity.title): \(explanation.reason)") }
/// let session = try await sheet.perform(sheet.activities[0], launcher: launcher)
/// ```
///
/// With ``SharePreferences`` (the user's: ``SharePreferences/user(logger:)``) the sheet is
/// ranked and the user chooses: the activities used most, and most recently, for the kinds of
/// items at hand come first (``Order/byUse``), an activity the user turned off is not offered
/// (its explanation says so), and every share it performs that completes is counted. Without
/// them it is in identifier order, offers every activity that takes the items, and remembers
/// nothing.
public struct ShareSheet: Sendable {
    /// The order of ``activities``.
    public enum Order: Sendable, Hashable {
        /// The most used first, by ``SharePreferences`` (recency and frequency of completed
        /// shares of the items' ``ShareKind``s), the rest by identifier. By identifier when the
        /// sheet has no preferences.
        case byUse
        /// By identifier: ranking off.
        case byIdentifier
        /// The host's own: the activities with these identifiers first, in this order, then
        /// the rest by identifier.
        case custom([String])
    }

    /// An activity the sheet does not offer, and why (e.g. "accepts at most 1 image/*, 3 given").
    public struct Explanation: Sendable, CustomStringConvertible {
        public let activity: ShareActivity
        public let reason: String

        public var description: String { "\(activity.identifier): \(reason)".escapedForTerminal() }
    }

    /// The items to share.
    public let items: [ShareItem]
    /// The activities whose activation rules accept ``items``, by identifier.
    public let activities: [ShareActivity]
    /// Every other registered activity, by identifier, with the reason: only share activities
    /// (services whose manifest declares activation rules); a plain service is not one, and is
    /// never explained. One the user turned off says `turned off by the user`.
    public let explanations: [Explanation]
    /// Every share activity registered, whether it takes the items or not, on or off, by
    /// identifier: what an Edit view lists (``isEnabled(_:)``, ``settingEnabled(_:for:)``).
    public let allActivities: [ShareActivity]
    /// Where the ranking and the user's choices are kept; `nil`: nowhere.
    public let preferences: SharePreferences?
    /// The order of ``activities``.
    public let order: Order
    /// The activities the user turned off, by identifier (from ``preferences``).
    public let disabled: Set<String>
    private let registry: ServiceRegistry
    private let database: MIMEDatabase

    /// The explanation of an activity the user turned off.
    public static let turnedOffReason = "turned off by the user"

    /// Matches `items` against every manifest of `registry` (MIME types compared through
    /// `database`: `image/png` is an `image/*`, and everything an `application/octet-stream`).
    ///
    /// - Parameters:
    ///   - registry: the manifests to match.
    ///   - items: the items to share.
    ///   - database: the MIME database that decides conformance.
    ///   - preferences: the ranking and the user's choices (``SharePreferences/user(logger:)``),
    ///     read once, now; `nil` for none.
    ///   - order: the order of ``activities``.
    public init(registry: ServiceRegistry, items: [ShareItem], database: MIMEDatabase = .system,
                preferences: SharePreferences? = nil, order: Order = .byUse) {
        self.items = items
        self.registry = registry
        self.database = database
        self.preferences = preferences
        self.order = order
        let snapshot = preferences?.snapshot() ?? SharePreferences.Snapshot()
        let matches = registry.activities(for: items.map(\.contentType), database: database)
        let offered = matches.offered.filter { snapshot.isEnabled($0.identifier) }
        disabled = snapshot.disabled
        activities = Self.sorted(offered.map(ShareActivity.init(manifest:)), by: order, snapshot: snapshot, kinds: ShareKind.kinds(of: items))
        let turnedOff = matches.offered.filter { !snapshot.isEnabled($0.identifier) }.map { ActivityMatches.NotOffered(manifest: $0, reason: Self.turnedOffReason) }
        let notOffered = matches.notOffered.filter { $0.manifest.activation != nil }.map { match in
            snapshot.isEnabled(match.manifest.identifier) ? match : ActivityMatches.NotOffered(manifest: match.manifest, reason: Self.turnedOffReason)
        }
        explanations = (turnedOff + notOffered).sorted { $0.manifest.identifier < $1.manifest.identifier }
            .map { Explanation(activity: ShareActivity(manifest: $0.manifest), reason: $0.reason) }
        allActivities = registry.sortedServices.filter { $0.activation != nil }.map(ShareActivity.init(manifest:))
    }

    /// `activities` (by identifier) in `order`.
    private static func sorted(_ activities: [ShareActivity], by order: Order, snapshot: SharePreferences.Snapshot, kinds: Set<ShareKind>) -> [ShareActivity] {
        switch order {
        case .byIdentifier:
            return activities
        case .custom(let identifiers):
            let rank = Dictionary(identifiers.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
            return activities.enumerated().sorted { a, b in
                (rank[a.element.identifier] ?? Int.max, a.offset) < (rank[b.element.identifier] ?? Int.max, b.offset)
            }.map(\.element)
        case .byUse:
            let now = Date().timeIntervalSince1970
            let scores = activities.map { snapshot.score(of: $0.identifier, for: kinds, at: now) }
            return activities.indices.sorted { (-scores[$0], $0) < (-scores[$1], $1) }.map { activities[$0] }
        }
    }

    /// Whether the user left the activity `identifier` on (``preferences`` as read when the
    /// sheet was made; always on without them).
    public func isEnabled(_ identifier: String) -> Bool { !disabled.contains(identifier) }

    /// Turns the activity `identifier` on or off in ``preferences`` (for every sheet that reads
    /// them), and returns this sheet made again with the change.
    ///
    /// - Throws: `RemoteError` `invalidArgument` when the sheet has no preferences, or
    ///   `identifier` is not one of ``allActivities``; `storage` when the preferences cannot be
    ///   written.
    public func settingEnabled(_ enabled: Bool, for identifier: String) throws(RemoteError) -> ShareSheet {
        guard let preferences else {
            throw RemoteError(.invalidArgument, "this share sheet keeps no preferences (made without SharePreferences), so it cannot turn \(identifier.escapedForTerminal()) \(enabled ? "on" : "off")")
        }
        guard allActivities.contains(where: { $0.identifier == identifier }) else {
            throw RemoteError(.invalidArgument, "no share activity \(identifier.escapedForTerminal()) is registered")
        }
        try preferences.setEnabled(enabled, for: identifier)
        return ShareSheet(registry: registry, items: items, database: database, preferences: preferences, order: order)
    }

    /// The activity with `identifier` if the sheet offers it.
    public func activity(_ identifier: String) -> ShareActivity? {
        activities.first { $0.identifier == identifier }
    }

    /// Why the sheet does not offer `identifier`, if it does not (`nil` when it does, or no
    /// such service is registered).
    public func explanation(for identifier: String) -> String? {
        explanations.first { $0.activity.identifier == identifier }?.reason
    }

    /// Runs `activity` with the items: its process is launched on demand (sandboxed, by its
    /// manifest) on a connection of its own, and gets the items. Present
    /// ``ShareSession/view`` to show it, and wait for ``ShareSession/outcome``. With
    /// ``preferences``, a share that completes is counted there before its outcome is known.
    ///
    /// - Parameters:
    ///   - activity: one of ``activities``.
    ///   - launcher: the launcher that runs it.
    ///   - presentation: when frames of the view count as shown (see ``RemoteView/Presentation``).
    ///   - cancelGrace: how long the activity has to answer a cancel.
    /// - Throws: `RemoteError` `invalidArgument` when the sheet does not offer `activity`
    ///   (with the reason), or what starting the share failed with.
    public func perform(_ activity: ShareActivity, launcher: Launcher, presentation: RemoteView.Presentation = .immediate,
                        cancelGrace: Duration = ShareSession.defaultCancelGrace) async throws(RemoteError) -> ShareSession {
        try await perform(activity, launcher: launcher, presentation: presentation, cancelGrace: cancelGrace, retryRetention: ShareLimits.retryRetention)
    }

    /// ``perform(_:launcher:presentation:cancelGrace:)``, keeping the items for a retry for
    /// `retryRetention` after the share ends (tests shorten it).
    package func perform(_ activity: ShareActivity, launcher: Launcher, presentation: RemoteView.Presentation = .immediate,
                         cancelGrace: Duration = ShareSession.defaultCancelGrace, retryRetention: Duration) async throws(RemoteError) -> ShareSession {
        guard activities.contains(where: { $0.identifier == activity.identifier }) else {
            throw RemoteError(.invalidArgument, "\(activity.identifier) does not take these items: \(explanation(for: activity.identifier) ?? "it is not registered")")
        }
        var counting: (@Sendable () -> Void)?
        if let preferences {
            let (identifier, kinds) = (activity.identifier, ShareKind.kinds(of: items))
            counting = { preferences.countCompletedShare(by: identifier, kinds: kinds) }
        }
        return try await ShareSession.start(activity: activity, items: items, launcher: launcher, presentation: presentation,
                                            cancelGrace: cancelGrace, retryRetention: retryRetention, restoringState: nil,
                                            onCompletion: counting)
    }
}

extension ShareItem {
    /// A file item with the contents of the host file at `path`, copied into a sealed memfd:
    /// the activity gets the bytes, the file's name and its type, never the path.
    ///
    /// - Parameters:
    ///   - path: the host file; only its contents and its last path component go to the activity.
    ///   - contentType: its MIME type; by default from its name (shared-mime-info's globs,
    ///     `application/octet-stream` when none matches).
    ///   - database: the MIME database that names the type.
    /// - Throws: `RemoteError` `invalidArgument` naming the path when it cannot be read, is not
    ///   a regular file, or is over `ShareLimits.maxFileBytes` (256 MiB).
    public static func file(contentsOf path: String, contentType: String? = nil, database: MIMEDatabase = .system) throws(RemoteError) -> ShareItem {
        let name = String(path.split(separator: "/").last ?? Substring(path))
        let bytes: [UInt8]
        do {
            let file = try Syscall.openForReading(path)
            guard Syscall.isRegularFile(file) else { throw RemoteError(.invalidArgument, "\(path) is not a regular file") }
            bytes = try Syscall.readToEnd(file, limit: ShareLimits.maxFileBytes, name: path)
        } catch let error as RemoteError {
            throw error
        } catch {
            throw RemoteError(.invalidArgument, "cannot share \(path): \(error)")
        }
        return try .file(named: name, contentType: contentType ?? database.type(forFileName: name), contents: bytes)
    }
}
