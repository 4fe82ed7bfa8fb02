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

    /// An activity the sheet does not offer, and why, naming the items that block it (e.g.
    /// `accepts no application/pdf: report.pdf`).
    public struct Explanation: Sendable, CustomStringConvertible {
        /// The activity not offered.
        public let activity: ShareActivity
        /// Why, in one line: each of ``problems``' reasons followed by the items that block it
        /// (`accepts at most 1 image/*, 3 given: a.png, b.png and c.png`), joined with `"; "`.
        /// A file is named by its name, a text by its first words in quotes, a URL by its host;
        /// at most three items per reason, then how many more. What the items hold is escaped for
        /// a terminal (`\u{1B}`), since it is the user's or a peer's data (`docs/Manifest.md`,
        /// "Activation").
        public let reason: String
        /// The reasons one by one, in the words of the verdict on the items' MIME types alone
        /// (``ServiceManifest/activationProblems(for:database:)``), each with its items
        /// (indices into ``ShareSheet/items``).
        public let problems: [ActivationProblem]
        /// The items that block the offer, for a host to highlight: indices into
        /// ``ShareSheet/items``, ascending, each once; every problem's
        /// ``ActivationProblem/blockingItems``. Empty when no item given blocks it, only missing
        /// ones (`needs at least 1 image/*, 0 given`).
        public var blockingItems: [Int] {
            Array(Set(problems.flatMap(\.blockingItems))).sorted()
        }

        /// The explanation of `problems` for `items`.
        init(activity: ShareActivity, problems: [ActivationProblem], items: [ShareItem]) {
            self.activity = activity
            self.problems = problems
            reason = problems.map { problem in
                let named = problem.blockingItems.filter(items.indices.contains)
                guard !named.isEmpty else { return problem.reason }
                var names = named.prefix(Self.namedItems).map { items[$0].nameInReason }
                if named.count > Self.namedItems { names.append("\(named.count - Self.namedItems) more") }
                return problem.reason + ": " + ShareItem.list(names)
            }.joined(separator: "; ")
        }

        /// The most items a reason names; the others are counted ("and 13 more").
        static let namedItems = 3

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
        disabled = snapshot.disabled
        let types = items.map(\.contentType)
        var all: [ShareActivity] = [], offered: [ShareActivity] = [], explanations: [Explanation] = []
        // As ServiceRegistry.activities(for:database:) decides, with each reason's items; a
        // share activity the user turned off is explained as that, whatever the items. A plain
        // service (no activation rules) is never offered nor explained: its icon is not decoded.
        for manifest in registry.sortedServices where manifest.activation != nil {
            let activity = ShareActivity(manifest: manifest)
            all.append(activity)
            guard snapshot.isEnabled(manifest.identifier) else {
                explanations.append(Explanation(activity: activity, problems: [ActivationProblem(reason: Self.turnedOffReason)], items: items))
                continue
            }
            let problems = manifest.activationProblems(for: types, database: database)
            if problems.isEmpty {
                offered.append(activity)
            } else {
                explanations.append(Explanation(activity: activity, problems: problems, items: items))
            }
        }
        activities = Self.sorted(offered, by: order, snapshot: snapshot, kinds: ShareKind.kinds(of: items))
        self.explanations = explanations
        allActivities = all
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
    /// How a reason names this item, on one line, escaped for a terminal: a file by its name (a
    /// long one cut in the middle, its extension kept: `a-very-long-na…report.pdf`), a text by
    /// its first words in quotes (`"Meeting notes for…"`), a URL by its host (`example.com`), or
    /// by its start when it has none (`mailto:someone@exa…`).
    var nameInReason: String {
        switch content {
        case .file(let file):
            let name = file.name
            guard name.count > 32 else { return name.escapedForTerminal() }
            return (String(name.prefix(20)) + "…" + String(name.suffix(11))).escapedForTerminal()
        case .text(let text):
            return "\"" + Self.firstWords(of: text) + "\""
        case .url(let url):
            return (Self.host(of: url).map { Self.cut($0, after: 40) } ?? Self.cut(url, after: 24)).escapedForTerminal()
        }
    }

    /// The first line's words (whitespace runs as one space), at most 24 characters, cut at a
    /// word's end where one is near (`…` says that more followed), escaped for a terminal.
    static func firstWords(of text: String) -> String {
        var lines = text.split(whereSeparator: \.isNewline).lazy.map { $0.split(whereSeparator: \.isWhitespace) }.filter { !$0.isEmpty }.makeIterator()
        guard let first = lines.next() else { return "" }
        let words = first.joined(separator: " ")
        let shown = cut(words, after: 24)
        return (shown == words && lines.next() != nil ? words + "…" : shown).escapedForTerminal()
    }

    /// `text` if it has at most `limit` characters, else its start (up to the last space in the
    /// second half, if any) and `…`.
    static func cut(_ text: String, after limit: Int) -> String {
        guard text.count > limit else { return text }
        var start = text.prefix(limit)
        if let space = start.lastIndex(of: " "), start.distance(from: start.startIndex, to: space) >= limit / 2 { start = start[..<space] }
        return start + "…"
    }

    /// The host of a hierarchical URL (`https://user@example.com:8080/page` → `example.com`),
    /// in lower case; `nil` for one without an authority (`mailto:…`). What a reason and the
    /// demo window's header call a URL item by.
    package static func host(of url: String) -> String? {
        guard let colon = url.firstIndex(of: ":") else { return nil }
        let rest = url[url.index(after: colon)...]
        guard rest.hasPrefix("//") else { return nil }
        var authority = rest.dropFirst(2).prefix { !"/?#".contains($0) }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        if authority.hasPrefix("[") {
            // An IPv6 address, its port after the bracket.
            if let close = authority.firstIndex(of: "]") { authority = authority[...close] }
        } else if let port = authority.lastIndex(of: ":") {
            authority = authority[..<port]
        }
        return authority.isEmpty ? nil : authority.lowercased()
    }

    /// `a`, `a and b`, `a, b and c`.
    static func list(_ parts: [String]) -> String {
        parts.count <= 1 ? parts.joined() : parts.dropLast().joined(separator: ", ") + " and " + parts.last!
    }

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
