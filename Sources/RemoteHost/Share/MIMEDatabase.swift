import RemoteCore

/// The freedesktop.org shared MIME-info database (Debian: `shared-mime-info`): which MIME types
/// are aliases of which, which are subclasses of which, and which file names have which type.
/// Like `g_content_type_is_a()` and `g_content_type_guess()` in GIO, or xdgmime, which read the
/// same files; the counterpart of Apple's Uniform Type Identifiers and `UTType.conforms(to:)`.
///
/// It reads three files of each `mime` folder: `aliases` (`alias canonical` per line),
/// `subclasses` (`type parent` per line) and `globs2` (`weight:type:pattern[:flags]` per
/// line). Folders come most important first, as the XDG base directory specification orders
/// `$XDG_DATA_HOME` before `$XDG_DATA_DIRS`; a less important folder never overrides a more
/// important one's entry: the first alias of a name wins, parents from every folder add up, and
/// a `__NOGLOBS__` pattern drops the type's patterns from the folders after it.
///
/// Beyond the files, the specification's implicit rules hold: every `text/*` type is a
/// subclass of `text/plain`, and every type except the `inode/*` ones is a subclass of
/// `application/octet-stream`. MIME types compare without regard to case.
///
/// ```swift
/// let database = MIMEDatabase.system
/// database.conforms("image/png", to: "image/*")                  // true
/// database.conforms("text/x-csrc", to: "text/plain")              // true (subclasses)
/// database.conforms("image/pjpeg", to: "image/jpeg")              // true (aliases)
/// database.type(forFileName: "notes.tar.gz")                      // "application/x-compressed-tar"
/// ```
public struct MIMEDatabase: Sendable {
    /// The database the system's `mime` folders hold: `$XDG_DATA_HOME/mime` (default
    /// `~/.local/share/mime`), then `mime` in each folder of `$XDG_DATA_DIRS` (default
    /// `/usr/local/share:/usr/share`). Read once, on first use. Without any database it is
    /// empty, and matching still works for identical types, `major/*` patterns and
    /// `application/octet-stream`.
    public static let system = MIMEDatabase(directories: searchPath(dataHome: XDGBaseDirectories.variable("XDG_DATA_HOME"),
                                                                     dataDirectories: XDGBaseDirectories.variable("XDG_DATA_DIRS"),
                                                                     home: XDGBaseDirectories.variable("HOME") ?? Syscall.userHomeDirectory()))

    /// The type every type except `inode/*` is a subclass of, and that unknown file names get.
    public static let octetStream = "application/octet-stream"

    /// The `mime` folders read, most important first.
    public let directories: [String]
    /// Alias → canonical type, lower case.
    private var aliases: [String: String] = [:]
    /// Type → its parents as `subclasses` lists them, lower case, in folder order.
    private var parents: [String: [String]] = [:]
    /// Every file-name pattern, in folder and then file order.
    private var globs: [Glob] = []
    /// Every type the database names (its `types` file, and the types of the other three).
    private var known: Set<String> = []

    /// The largest file of the database read, in bytes (Debian's `globs2` is about 40 KiB).
    static let maxFileSize = 4 * 1024 * 1024

    /// Reads the database in `directories`, each a `mime` folder (such as `/usr/share/mime`),
    /// most important first. A folder or file that is missing or unreadable adds nothing.
    public init(directories: [String]) {
        self.directories = directories
        var seenGlobs: Set<GlobKey> = []
        var withoutGlobs: Set<String> = []  // types a more important folder said __NOGLOBS__ for
        for directory in directories {
            for line in Self.lines(of: directory + "/types") where !line.isEmpty { known.insert(MIMEType.normalized(String(line))) }
            for line in Self.lines(of: directory + "/aliases") {
                let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                guard fields.count == 2 else { continue }
                let alias = MIMEType.normalized(String(fields[0]))
                if aliases[alias] == nil { aliases[alias] = MIMEType.normalized(String(fields[1])) }
            }
            for line in Self.lines(of: directory + "/subclasses") {
                let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                guard fields.count == 2 else { continue }
                let type = MIMEType.normalized(String(fields[0])), parent = MIMEType.normalized(String(fields[1]))
                if !(parents[type] ?? []).contains(parent) { parents[type, default: []].append(parent) }
            }
            var noGlobsHere: Set<String> = []
            for line in Self.lines(of: directory + "/globs2") {
                // weight:type:pattern[:flags[:…]]
                let fields = line.split(separator: ":", maxSplits: 3, omittingEmptySubsequences: false)
                guard fields.count >= 3, let weight = Int(fields[0]), !fields[2].isEmpty else { continue }
                let type = MIMEType.normalized(String(fields[1])), pattern = String(fields[2])
                if pattern == "__NOGLOBS__" {
                    noGlobsHere.insert(type)
                    continue
                }
                guard !withoutGlobs.contains(type), seenGlobs.insert(GlobKey(pattern: pattern, type: type)).inserted else { continue }
                let flags = fields.count > 3 ? fields[3].split(separator: ":").first?.split(separator: ",") ?? [] : []
                globs.append(Glob(weight: weight, type: type, pattern: pattern, caseSensitive: flags.contains("cs")))
            }
            withoutGlobs.formUnion(noGlobsHere)
        }
    }

    /// Whether the database lists its types at all (a `types` file was read): without one, no
    /// type can be called unknown.
    public var listsTypes: Bool { !known.isEmpty }

    /// Whether the database names `type` (as a type or an alias). A `major/*` pattern is known
    /// when some type has that major part.
    public func isKnown(_ type: String) -> Bool {
        let type = MIMEType.normalized(type)
        if type.hasSuffix("/*") {
            let major = type.dropLast(1)
            return known.contains { $0.hasPrefix(major) } || type == "*/*"
        }
        return known.contains(type) || aliases[type] != nil || parents[type] != nil || Self.itemTypes.contains(type)
    }

    /// Types RemoteView's own items have that the database does not list: a URL is
    /// `text/uri-list` (RFC 2483), which shared-mime-info leaves out.
    public static let itemTypes: Set<String> = ["text/uri-list"]

    /// The known type nearest to `type` within two edits (insertions, deletions, substitutions
    /// or swaps of neighbours), for a warning about a misspelling (`text/plian` → `text/plain`);
    /// `nil` when there is none, or when `type` is known. The nearest wins; then the first in
    /// alphabetical order.
    public func suggestion(for type: String) -> String? {
        let type = MIMEType.normalized(type)
        guard !isKnown(type) else { return nil }
        let target = Array(type.utf8)
        var best: (distance: Int, type: String)?
        for candidate in known where abs(candidate.utf8.count - target.count) <= 2 {
            let distance = Self.editDistance(target, Array(candidate.utf8), limit: 2)
            guard distance <= 2 else { continue }
            if best == nil || (distance, candidate) < (best!.distance, best!.type) { best = (distance, candidate) }
        }
        return best?.type
    }

    /// The optimal string alignment distance of `a` and `b` (Levenshtein with swaps of
    /// neighbours), or `limit + 1` once it is known to exceed `limit`.
    static func editDistance(_ a: [UInt8], _ b: [UInt8], limit: Int) -> Int {
        if a == b { return 0 }
        if a.isEmpty || b.isEmpty { return min(max(a.count, b.count), limit + 1) }
        // Three rows: the one before the previous (for swaps), the previous, the current.
        var before = [Int](repeating: 0, count: b.count + 1), previous = Array(0...b.count), current = previous
        for i in 1...a.count {
            current[0] = i
            var rowBest = i
            for j in 1...b.count {
                var cost = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] { cost = min(cost, before[j - 2] + 1) }
                current[j] = cost
                rowBest = min(rowBest, cost)
            }
            if rowBest > limit { return limit + 1 }
            (before, previous, current) = (previous, current, before)
        }
        return previous[b.count]
    }

    /// `type` in lower case with its alias resolved: `image/pjpeg` → `image/jpeg`.
    public func canonical(_ type: String) -> String {
        var current = MIMEType.normalized(type)
        var seen: Set<String> = [current]
        // Aliases name canonical types; following a chain (with a cycle guard) only forgives a
        // database that does not.
        while let next = aliases[current], seen.insert(next).inserted { current = next }
        return current
    }

    /// The types `type` is a subclass of, nearest first, without `type` itself: its parents from
    /// `subclasses` (breadth first), `text/plain` for a `text/*` type, and
    /// `application/octet-stream` last (except for `inode/*` types). For explanations.
    public func supertypes(of type: String) -> [String] {
        let start = canonical(type)
        var result: [String] = []
        var seen: Set<String> = [start]
        var queue = [start]
        var next = 0
        while next < queue.count {
            let current = queue[next]
            next += 1
            var direct = (parents[current] ?? []).map(canonical)
            if Self.major(of: current) == "text" { direct.append("text/plain") }
            for parent in direct where parent != Self.octetStream && seen.insert(parent).inserted {
                result.append(parent)
                queue.append(parent)
            }
        }
        if start != Self.octetStream, ([start] + result).contains(where: { Self.major(of: $0) != "inode" }) {
            result.append(Self.octetStream)
        }
        return result
    }

    /// Whether an item of `type` is acceptable where `pattern` is asked for: `pattern` is a MIME
    /// type or `major/*`. Aliases are resolved on both sides.
    ///
    /// - `major/subtype`: `type` is that type or a subclass of it (through `subclasses`
    ///   transitively, or the implicit rules: every `text/*` is `text/plain`, every type but
    ///   `inode/*` is `application/octet-stream`).
    /// - `major/*`: `type`'s major type is `major`, or that of one of its supertypes, not counting
    ///   the implicit `application/octet-stream` (else everything would be `application/*`):
    ///   `image/png` and `image/svg+xml` conform to `image/*`, and `image/svg+xml` (an
    ///   `application/xml`) to `application/*` too, but `image/png` does not.
    public func conforms(_ type: String, to pattern: String) -> Bool {
        let type = canonical(type)
        let pattern = MIMEType.normalized(pattern)
        if pattern.hasSuffix("/*") {
            let major = Self.major(of: pattern)
            return Self.major(of: type) == major
                || supertypes(of: type).contains { $0 != Self.octetStream && Self.major(of: $0) == major }
        }
        let wanted = canonical(pattern)
        return type == wanted || supertypes(of: type).contains(wanted)
    }

    /// The type of a file called `name` (the part after its last `/`), from the `globs2`
    /// patterns: the matching pattern of the highest weight wins, then the longest one, then
    /// the first in the database. A pattern marked `cs` matches the name as it is; the others
    /// match without regard to ASCII case. Patterns are shell globs (`*`, `?`, `[…]`), as
    /// `fnmatch(3)` without flags reads them. `application/octet-stream` when none matches.
    public func type(forFileName name: String) -> String {
        let base = name.split(separator: "/", omittingEmptySubsequences: false).last.map(String.init) ?? name
        guard !base.isEmpty else { return Self.octetStream }
        let exact = Array(base.unicodeScalars), folded = exact.map(Glob.lowercased)
        var best: Glob?
        for glob in globs where glob.matches(exact: exact, folded: folded) {
            if let current = best, glob.weight < current.weight
                || (glob.weight == current.weight && glob.length <= current.length) { continue }
            best = glob
        }
        return best.map { canonical($0.type) } ?? Self.octetStream
    }

    // MARK: private

    /// The `mime` folders of the XDG base directory specification, most important first:
    /// `dataHome` (else `home/.local/share`), then `dataDirectories` (else
    /// `/usr/local/share:/usr/share`), each with `/mime` appended. Relative paths are ignored, as
    /// the specification asks.
    static func searchPath(dataHome: String?, dataDirectories: String?, home: String?) -> [String] {
        let roots = [XDGBaseDirectories.dataHome(xdgDataHome: dataHome, home: home)].compactMap { $0 }
            + XDGBaseDirectories.dataDirectories(dataDirectories)
        var result: [String] = []
        for root in roots where !result.contains(root + "/mime") { result.append(root + "/mime") }
        return result
    }

    /// `type`'s part before the `/`.
    private static func major(of type: String) -> Substring {
        type.split(separator: "/", maxSplits: 1).first ?? ""
    }

    /// The lines of `file` that are neither empty nor comments; none when it cannot be read.
    /// Opened without blocking and checked to be a regular file, like a manifest.
    private static func lines(of file: String) -> [Substring] {
        guard let descriptor = try? Syscall.openForReading(file), Syscall.isRegularFile(descriptor),
              let bytes = try? Syscall.readToEnd(descriptor, limit: maxFileSize, name: file) else { return [] }
        return String(decoding: bytes, as: UTF8.self)
            .split(whereSeparator: { $0 == "\n" || $0 == "\r\n" })
            .filter { !$0.hasPrefix("#") }
    }

    private struct GlobKey: Hashable {
        var pattern: String
        var type: String
    }
}

/// One `globs2` pattern.
private struct Glob: Sendable {
    var weight: Int
    var type: String
    /// The pattern as written, and in ASCII lower case for matching without regard to case.
    var exact: [Unicode.Scalar]
    var folded: [Unicode.Scalar]
    var caseSensitive: Bool
    /// The pattern's length, for "the longest pattern wins".
    var length: Int { exact.count }

    init(weight: Int, type: String, pattern: String, caseSensitive: Bool) {
        self.weight = weight
        self.type = type
        exact = Array(pattern.unicodeScalars)
        folded = exact.map(Self.lowercased)
        self.caseSensitive = caseSensitive
    }

    func matches(exact name: [Unicode.Scalar], folded foldedName: [Unicode.Scalar]) -> Bool {
        caseSensitive ? Self.match(exact[...], name[...]) : Self.match(folded[...], foldedName[...])
    }

    static func lowercased(_ scalar: Unicode.Scalar) -> Unicode.Scalar {
        ("A"..."Z").contains(scalar) ? Unicode.Scalar(scalar.value + 32)! : scalar
    }

    /// `fnmatch(pattern, name, 0)`: `*` any run, `?` any one character, `[…]` a set (with
    /// ranges, `!` or `^` negating it), `\` quoting the next character.
    static func match(_ pattern: ArraySlice<Unicode.Scalar>, _ name: ArraySlice<Unicode.Scalar>) -> Bool {
        var p = pattern.startIndex, n = name.startIndex
        // The last `*` seen and where in the name its run would end next: backtracking to it
        // alone suffices, as for any glob without nested groups.
        var star: (pattern: Int, name: Int)?
        while n < name.endIndex {
            if p < pattern.endIndex {
                switch pattern[p] {
                case "*":
                    star = (p, n)
                    p += 1
                    continue
                case "?":
                    p += 1
                    n += 1
                    continue
                case "[":
                    if let (matched, end) = set(pattern, at: p, contains: name[n]) {
                        if matched {
                            p = end
                            n += 1
                            continue
                        }
                    } else if name[n] == "[" {  // no closing `]`: a literal `[`
                        p += 1
                        n += 1
                        continue
                    }
                case "\\" where p + 1 < pattern.endIndex:
                    if pattern[p + 1] == name[n] {
                        p += 2
                        n += 1
                        continue
                    }
                default:
                    if pattern[p] == name[n] {
                        p += 1
                        n += 1
                        continue
                    }
                }
            }
            guard let last = star else { return false }
            star = (last.pattern, last.name + 1)
            p = last.pattern + 1
            n = last.name + 1
        }
        while p < pattern.endIndex, pattern[p] == "*" { p += 1 }
        return p == pattern.endIndex
    }

    /// Whether the set starting at `pattern[start]` (a `[`) holds `scalar`, and the index after
    /// its `]`; `nil` when the set is not closed.
    private static func set(_ pattern: ArraySlice<Unicode.Scalar>, at start: Int, contains scalar: Unicode.Scalar) -> (Bool, Int)? {
        var index = start + 1
        let negated = index < pattern.endIndex && (pattern[index] == "!" || pattern[index] == "^")
        if negated { index += 1 }
        var found = false
        var first = true
        while index < pattern.endIndex {
            let low = pattern[index]
            if low == "]" && !first { return (found != negated, index + 1) }
            first = false
            if index + 2 < pattern.endIndex, pattern[index + 1] == "-", pattern[index + 2] != "]" {
                let high = pattern[index + 2]
                if low <= high && (low...high).contains(scalar) { found = true }
                index += 3
            } else {
                if low == scalar { found = true }
                index += 1
            }
        }
        return nil
    }
}
