import FoundationEssentials
import Glibc
import Logging
import RemoteCore

/// What a share holds, as a share sheet ranks it: completed shares are counted separately for
/// images, text, URLs and files, so the activity someone uses for photos does not lead when
/// they share a link.
public enum ShareKind: String, Sendable, Hashable, CaseIterable, Comparable {
    /// A file whose type is an `image/*`.
    case image
    /// Inline text.
    case text
    /// A URL.
    case url
    /// Any other file.
    case file

    /// The kind of `item`: an inline text is `text`, a URL `url`, a file `image` when its type
    /// is an `image/*` and `file` otherwise.
    public init(of item: ShareItem) {
        switch item.content {
        case .text: self = .text
        case .url: self = .url
        case .file: self = item.contentType.hasPrefix("image/") ? .image : .file
        }
    }

    /// The kinds among `items`.
    public static func kinds(of items: [ShareItem]) -> Set<ShareKind> {
        Set(items.map(ShareKind.init(of:)))
    }

    public static func < (lhs: ShareKind, rhs: ShareKind) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}

/// The share sheet's memory, kept for the user: how recently and how often each activity
/// completed a share of each ``ShareKind`` (the sheet puts those first, as Android's chooser and
/// Apple's share sheet do), and the activities the user turned off (not offered at all, as with
/// `EXAppExtensionBrowserViewController` or KDE Purpose's `disabledPlugins`).
///
/// It is one small JSON file, `share-sheet.json`, in a folder of its own
/// (``user(logger:)``: `$XDG_STATE_HOME/remoteview/`, by default `~/.local/state/remoteview/`),
/// versioned (``version``). Every change takes the folder's lock (`flock`), reads the file
/// again, changes it and writes it whole under a new name renamed over the old one, so two hosts
/// sharing at once are both counted and a reader never sees half a file. A file that cannot be
/// read as one (not JSON, a wrong shape, a number out of range, over ``maxFileBytes``) is moved
/// aside to `share-sheet.json.corrupt` with a warning and begins again empty: the sheet still
/// opens. One written by a newer version is left as it is, with a warning, and not changed
/// (``recordCompletedShare(by:kinds:at:)`` and ``setEnabled(_:for:)`` throw).
///
/// The score of an activity for a share is, summed over the share's kinds, the number of its
/// completed shares of that kind, each weighing half as much every ``halfLife`` (7 days) since
/// it completed: a share today counts 1, one a week ago ½. Recency and frequency in one number.
///
/// ```swift
/// let preferences = SharePreferences.user()
/// let sheet = ShareSheet(registry: registry, items: items, preferences: preferences)  // ranked
/// try preferences.setEnabled(false, for: "org.example.post")                           // off
/// ```
public final class SharePreferences: Sendable {
    /// The version of the file's format this code writes (and the newest it reads).
    public static let version = 1
    /// How long a completed share takes to weigh half as much.
    public static let halfLife: Duration = .seconds(7 * 24 * 3600)
    /// The largest file read (1 MiB); a larger one is corrupt. A file of ``maxActivities``
    /// activities with the longest identifiers and every kind used is about 400 KiB.
    public static let maxFileBytes = 1024 * 1024
    /// The most activities the file remembers; the least used are forgotten first (one that is
    /// turned off is never forgotten).
    public static let maxActivities = 512

    /// The most a change waits for another process's lock (1 s) before it gives up, throwing
    /// `storage`: a completed share is concluded without its count rather than wait longer.
    public static let lockPatience: Duration = .seconds(1)
    /// The largest count or weight of one activity's use of one kind (10⁹): counting stops
    /// there; a file with more is corrupt.
    public static let maxCount = 1e9

    /// The folder of the file (made, mode 0700, on the first change).
    public let folder: String
    /// The file: `folder/share-sheet.json`.
    public var path: String { folder + "/share-sheet.json" }
    private let logger: Logger
    /// ``maxActivities``, lowered by tests.
    private let activityLimit: Int

    /// Preferences kept in `folder`.
    public convenience init(folder: String, logger: Logger = Logger(label: "remoteview.share-sheet")) {
        self.init(folder: folder, logger: logger, activityLimit: Self.maxActivities)
    }

    package init(folder: String, logger: Logger, activityLimit: Int) {
        self.folder = folder.count > 1 && folder.hasSuffix("/") ? String(folder.dropLast()) : folder
        self.logger = logger
        self.activityLimit = activityLimit
    }

    /// The user's: in `$XDG_STATE_HOME/remoteview` (by default `$HOME/.local/state/remoteview`).
    public static func user(logger: Logger = Logger(label: "remoteview.share-sheet")) -> SharePreferences {
        SharePreferences(folder: XDGBaseDirectories.stateHome() + "/remoteview", logger: logger)
    }

    // MARK: what it says

    /// What the file says at one moment.
    public struct Snapshot: Sendable, Hashable {
        /// How often and how recently an activity completed shares of one kind.
        public struct Use: Sendable, Hashable {
            /// Completed shares.
            public var count: Int
            /// When the last one completed, in seconds since 1970.
            public var last: Double
            /// ``count`` with each share's weight halved every ``SharePreferences/halfLife``,
            /// as of ``last``.
            public var weight: Double
        }

        /// The activities turned off, by identifier.
        public var disabled: Set<String>
        /// The use of each activity (by identifier), by kind.
        public var uses: [String: [ShareKind: Use]]

        /// Nothing used, nothing turned off.
        public init(disabled: Set<String> = [], uses: [String: [ShareKind: Use]] = [:]) {
            self.disabled = disabled
            self.uses = uses
        }

        /// Whether the user left `identifier` on.
        public func isEnabled(_ identifier: String) -> Bool { !disabled.contains(identifier) }

        /// The ranking score of `identifier` for a share of `kinds` at `now` (seconds since
        /// 1970): the sum of its uses' weights, each decayed to `now`; 0 when it was never used
        /// for those kinds.
        public func score(of identifier: String, for kinds: Set<ShareKind>, at now: Double) -> Double {
            guard let uses = uses[identifier] else { return 0 }
            return kinds.reduce(0) { score, kind in
                guard let use = uses[kind] else { return score }
                return score + SharePreferences.decayed(use.weight, from: use.last, to: now)
            }
        }
    }

    /// What the file says now. A missing file says nothing; a corrupt one is moved aside with a
    /// warning and says nothing; one of a newer version says nothing, with a warning (the file
    /// is left as it is).
    public func snapshot() -> Snapshot {
        switch load() {
        case .missing: return Snapshot()
        case .state(let file): return file.snapshot
        case .newer(let version):
            logger.warning("\(path.escapedForTerminal()) was written by a newer RemoteView (format \(version), this one reads \(Self.version)): the share sheet is not ranked and turns nothing off")
            return Snapshot()
        case .corrupt(let reason):
            // Moved aside under the lock, unless a writer has mended it meanwhile.
            do throws(RemoteError) { try update { _ in } } catch {
                logger.warning("\(path.escapedForTerminal()) is unreadable (\(reason.escapedForTerminal())) and cannot be reset: \(error.reason)")
            }
            return Snapshot()
        }
    }

    // MARK: changing it

    /// Counts a share of `kinds` that `identifier` completed at `date`. ``ShareSheet`` calls it
    /// when a share it performed completes.
    ///
    /// - Throws: `RemoteError` `invalidArgument` for an identifier that is empty or longer than
    ///   255 bytes; `storage` naming the file and what failed (the folder cannot be made, the
    ///   file cannot be written, or a newer version wrote it).
    public func recordCompletedShare(by identifier: String, kinds: Set<ShareKind>, at date: Date = Date()) throws(RemoteError) {
        try Self.check(identifier)
        let now = date.timeIntervalSince1970
        try update(keeping: identifier) { file in
            var entry = file.activities[identifier] ?? StateFile.Entry()
            var uses = entry.uses ?? [:]
            for kind in kinds {
                var use = uses[kind.rawValue] ?? StateFile.Use(count: 0, last: now, weight: 0)
                use.weight = min(Self.decayed(use.weight, from: use.last, to: now) + 1, Self.maxCount)
                use.count = min(use.count + 1, Int(Self.maxCount))
                use.last = max(use.last, now)
                uses[kind.rawValue] = use
            }
            entry.uses = uses
            file.activities[identifier] = entry
        }
    }

    /// ``recordCompletedShare(by:kinds:at:)``, its failure logged as a warning (the share
    /// completed all the same).
    func countCompletedShare(by identifier: String, kinds: Set<ShareKind>) {
        do throws(RemoteError) { try recordCompletedShare(by: identifier, kinds: kinds) } catch {
            logger.warning("the completed share with \(identifier.escapedForTerminal()) is not counted: \(error.reason)")
        }
    }

    /// Turns `identifier` on or off for every share sheet of the user's that reads this file.
    ///
    /// - Throws: `RemoteError`, as ``recordCompletedShare(by:kinds:at:)``.
    public func setEnabled(_ enabled: Bool, for identifier: String) throws(RemoteError) {
        try Self.check(identifier)
        let limit = activityLimit
        try update(keeping: identifier) { file throws(RemoteError) in
            var entry = file.activities[identifier] ?? StateFile.Entry()
            if !enabled, entry.off != true, file.activities.values.count(where: { $0.off == true }) >= limit {
                throw RemoteError(.storage, "at most \(limit) activities can be turned off; turn one on first")
            }
            entry.off = enabled ? nil : true
            file.activities[identifier] = entry.isEmpty ? nil : entry
        }
    }

    private static func check(_ identifier: String) throws(RemoteError) {
        guard !identifier.isEmpty, identifier.utf8.count <= 255 else {
            throw RemoteError(.invalidArgument, "an activity's identifier has 1…255 bytes; this one has \(identifier.utf8.count)")
        }
    }

    // MARK: the file

    /// The file as JSON: `{"version": 1, "activities": {"ID": {"off": true, "uses": {"text":
    /// {"count": 3, "last": 1795000000.5, "weight": 2.4}}}}}` (docs/Manifest.md, "Ranking and
    /// choice").
    struct StateFile: Codable {
        struct Use: Codable, Hashable {
            var count: Int
            var last: Double
            var weight: Double
        }

        struct Entry: Codable, Hashable {
            var off: Bool?
            /// By ``ShareKind`` raw value; a kind this version does not know is kept as it is.
            var uses: [String: Use]?

            var isEmpty: Bool { off != true && (uses ?? [:]).isEmpty }
        }

        var version: Int
        var activities: [String: Entry]

        /// What is wrong with the values, if anything (the shape was checked by decoding), as of
        /// `now`: more than twice ``SharePreferences/maxActivities`` activities, an identifier
        /// that is empty or over 255 bytes, a count or weight below 0 or above
        /// ``SharePreferences/maxCount``, a time that is not finite or more than a year ahead.
        func problem(at now: Double) -> String? {
            guard version == SharePreferences.version else { return "format \(version)" }
            guard activities.count <= SharePreferences.maxActivities * 2 else { return "\(activities.count) activities" }
            for (identifier, entry) in activities {
                guard !identifier.isEmpty, identifier.utf8.count <= 255 else { return "an activity's identifier is empty or longer than 255 bytes" }
                for (kind, use) in entry.uses ?? [:] {
                    guard (0...Int(SharePreferences.maxCount)).contains(use.count), use.weight.isFinite, (0...SharePreferences.maxCount).contains(use.weight),
                          use.last.isFinite, use.last <= now + 366 * 24 * 3600 else {
                        return "the use of \(kind) by \(identifier) holds a number out of range"
                    }
                }
            }
            return nil
        }

        var snapshot: Snapshot {
            var snapshot = Snapshot()
            for (identifier, entry) in activities {
                if entry.off == true { snapshot.disabled.insert(identifier) }
                for (name, use) in entry.uses ?? [:] {
                    guard let kind = ShareKind(rawValue: name) else { continue }
                    snapshot.uses[identifier, default: [:]][kind] = Snapshot.Use(count: use.count, last: use.last, weight: use.weight)
                }
            }
            return snapshot
        }

        /// Forgets the least used activities beyond `limit` (the least recently used first among
        /// equals), keeping every one turned off and `kept`, the one just changed.
        mutating func prune(to limit: Int, at now: Double, keeping kept: String?) {
            guard activities.count > limit else { return }
            func weight(_ entry: Entry) -> Double {
                (entry.uses ?? [:]).values.reduce(0) { $0 + SharePreferences.decayed($1.weight, from: $1.last, to: now) }
            }
            func last(_ entry: Entry) -> Double { (entry.uses ?? [:]).values.map(\.last).max() ?? 0 }
            let forgettable = activities.filter { $0.value.off != true && $0.key != kept }
                .sorted { (weight($0.value), last($0.value), $0.key) < (weight($1.value), last($1.value), $1.key) }
            for (identifier, _) in forgettable.prefix(activities.count - limit) {
                activities[identifier] = nil
            }
        }
    }

    private enum Loaded {
        case missing
        case state(StateFile)
        case newer(Int)
        case corrupt(String)
    }

    /// Reads the file.
    private func load() -> Loaded {
        let bytes: [UInt8]
        do {
            let file = try Syscall.openForReading(path)
            guard Syscall.isRegularFile(file) else { return .corrupt("not a regular file") }
            bytes = try Syscall.readToEnd(file, limit: Self.maxFileBytes, name: path)
        } catch let error where error.errno == ENOENT {
            return .missing
        } catch {
            return .corrupt("\(error)")
        }
        struct Header: Decodable { var version: Int }
        let decoder = JSONDecoder()
        guard let header = try? decoder.decode(Header.self, from: Data(bytes)) else {
            return .corrupt("not a JSON object with a version")
        }
        if header.version > Self.version { return .newer(header.version) }
        let file: StateFile
        do { file = try decoder.decode(StateFile.self, from: Data(bytes)) } catch {
            return .corrupt("not the share sheet's format \(Self.version): \(error)")
        }
        if let problem = file.problem(at: Date().timeIntervalSince1970) { return .corrupt(problem) }
        return .state(file)
    }

    /// Under the folder's lock: reads the file again (a corrupt one moved aside, with a warning),
    /// changes it with `change`, forgets the least used beyond the limit (never `kept`), and
    /// writes it whole, atomically.
    private func update(keeping kept: String? = nil, _ change: (inout StateFile) throws(RemoteError) -> Void) throws(RemoteError) {
        let lock = try lockFolder()
        var file = StateFile(version: Self.version, activities: [:])
        switch load() {
        case .missing: break
        case .state(let read): file = read
        case .newer(let version):
            throw RemoteError(.storage, "\(path.escapedForTerminal()) was written by a newer RemoteView (format \(version), this one writes \(Self.version)); it is left as it is")
        case .corrupt(let reason):
            let aside = path + ".corrupt"
            if rename(path, aside) != 0 {
                throw RemoteError(.storage, "\(path.escapedForTerminal()) is unreadable (\(reason.escapedForTerminal())) and cannot be moved aside: \(String(cString: strerror(errno)))")
            }
            logger.warning("\(path.escapedForTerminal()) was unreadable (\(reason.escapedForTerminal())): moved to \(aside.escapedForTerminal()); the share sheet begins again unranked")
        }
        let before = file.activities
        try change(&file)
        file.prune(to: activityLimit, at: Date().timeIntervalSince1970, keeping: kept)
        // Nothing changed, and the file is there: nothing to write. (After a reset, or with no
        // file yet, an empty one is written.)
        guard file.activities != before || !Syscall.isRegularFile(path) else { return lock.close() }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        do {
            try (encoder.encode(file) + Data([0x0A])).write(to: URL(filePath: path), options: .atomic)
        } catch {
            throw RemoteError(.storage, "cannot write \(path.escapedForTerminal()): \(error)")
        }
        lock.close()
    }

    /// The folder, made if missing (a symbolic link to one is followed), opened and locked
    /// (`flock`, exclusively), waiting at most ``lockPatience`` for another holder: the lock is
    /// held until the descriptor is closed.
    private func lockFolder() throws(RemoteError) -> OwnedFD {
        let lock: OwnedFD
        do {
            try SandboxPaths.makeFolders(folder) { _ in 0o700 }
            lock = try Syscall.openFolder(try Syscall.resolvedPath(folder))
        } catch {
            throw RemoteError(.storage, "cannot keep the share sheet's state in \(folder.escapedForTerminal()): \(error)")
        }
        let deadline = ContinuousClock.now + Self.lockPatience
        while flock(lock.rawValue, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            guard code == EWOULDBLOCK || code == EINTR else {
                throw RemoteError(.storage, "cannot lock \(folder.escapedForTerminal()): \(String(cString: strerror(code)))")
            }
            guard ContinuousClock.now < deadline else {
                throw RemoteError(.storage, "another process has held the lock of \(folder.escapedForTerminal()) for over \(Self.lockPatience); nothing was changed")
            }
            // A holder keeps it for a read, an encode and a rename: look again soon.
            usleep(5_000)
        }
        return lock
    }

    /// `weight` at `then`, at `now`: halved every ``halfLife`` (never grown by a clock set back).
    static func decayed(_ weight: Double, from then: Double, to now: Double) -> Double {
        let halfLife = Double(halfLife.components.seconds)
        return weight * pow(0.5, max(0, now - then) / halfLife)
    }
}
