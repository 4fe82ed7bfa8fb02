import RemoteCore

/// The activities that accept a set of items, and why the others do not: what a share sheet
/// shows (`UIActivityViewController`, Android's chooser), decided from the manifests alone.
///
/// ```swift
/// let sheet = ShareSheet(registry: registry, items: [try .text("Hello"), try .url("https://example.com")])
/// for activity in sheet.activities { print(activity.title) }
/// for explanation in sheet.explanations { print("\(explanation.activity.title): \(explanation.reason)") }
/// let session = try await sheet.perform(sheet.activities[0], launcher: launcher)
/// ```
public struct ShareSheet: Sendable {
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
    /// never explained.
    public let explanations: [Explanation]

    /// Matches `items` against every manifest of `registry` (MIME types compared through
    /// `database`: `image/png` is an `image/*`, and everything an `application/octet-stream`).
    public init(registry: ServiceRegistry, items: [ShareItem], database: MIMEDatabase = .system) {
        self.items = items
        let matches = registry.activities(for: items.map(\.contentType), database: database)
        activities = matches.offered.map(ShareActivity.init(manifest:))
        explanations = matches.notOffered.filter { $0.manifest.activation != nil }
            .map { Explanation(activity: ShareActivity(manifest: $0.manifest), reason: $0.reason) }
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
    /// ``ShareSession/view`` to show it, and wait for ``ShareSession/outcome``.
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
        return try await ShareSession.start(activity: activity, items: items, launcher: launcher, presentation: presentation,
                                            cancelGrace: cancelGrace, retryRetention: retryRetention, restoringState: nil)
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
