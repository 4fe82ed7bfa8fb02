import RemoteCore

/// Whether a share sheet offers a service for the items at hand, and if not, why: like the
/// verdict of an app extension's `NSExtensionActivationRule`, but explained.
public enum ActivationVerdict: Sendable, Hashable {
    /// The service takes these items.
    case accepted
    /// It does not; `reason` says why in one line, e.g. `accepts at most 1 image/*, 3 given`
    /// (the wording is in `docs/Manifest.md`, "Activation").
    case rejected(reason: String)
}

/// One reason a service is not offered for some items, and the items it is about: a clause of
/// an ``ActivationVerdict/rejected(reason:)`` reason, from
/// ``ServiceManifest/activationProblems(for:database:)``.
public struct ActivationProblem: Sendable, Hashable {
    /// The reason, one clause: `accepts no application/pdf`, `accepts at most 1 image/*, 3 given`
    /// (the wording is in `docs/Manifest.md`, "Activation").
    public var reason: String
    /// The items that block the offer (indices into the items, ascending): for a type that is
    /// not a MIME type or that no rule takes, every item of that type; for rules over their
    /// `max`, the items that only those rules can take (the bottleneck, whichever best
    /// assignment is found). Empty for rules short of their `min` (no item given blocks them:
    /// items are missing) and for the reasons about the whole share (no rules, no items, too
    /// many items).
    public var blockingItems: [Int]

    /// A reason and the items that block the offer.
    public init(reason: String, blockingItems: [Int] = []) {
        self.reason = reason
        self.blockingItems = blockingItems
    }
}

extension ServiceManifest {
    /// Whether the service takes a share of items with these MIME types (one per item, e.g.
    /// `["image/png", "text/plain"]`), by its ``Activation`` rules. Nothing is launched.
    ///
    /// It is accepted when each item can be given to one rule its type conforms to
    /// (``MIMEDatabase/conforms(_:to:)``) so that every rule ends up with between its `min` and
    /// `max` items. When no such assignment exists, the reason names every bottleneck
    /// (`docs/Manifest.md`, "Activation"):
    ///
    /// - `"x" is not a MIME type`, for an item type that is not one;
    /// - `accepts no text/uri-list`, for an item type no rule takes;
    /// - `accepts at most 1 image/*, 3 given`, for a rule (or a group of rules sharing items)
    ///   that more items conform to than it may take, with how many items conform to it; what
    ///   counted without being of the rule's type is said before the count (`accepts at most 1
    ///   text/plain — the URL counts as text/plain here, so 2 were given`);
    /// - `needs at least 1 image/png, 0 given`, for a rule (or group) fewer items conform to than
    ///   it needs;
    ///
    /// joined with `"; "`. A manifest without rules, no items, or more than
    /// `ShareLimits.maxItems` (16) items have one reason only: `declares no activation rules (never
    /// offered in a share sheet)`, `no items to share`, `17 items, more than a share carries (16)`.
    /// ``activationProblems(for:database:)`` gives the same reasons one by one, each with the
    /// items that block it.
    public func activationVerdict(for contentTypes: [String], database: MIMEDatabase = .system) -> ActivationVerdict {
        let problems = activationProblems(for: contentTypes, database: database)
        return problems.isEmpty ? .accepted : .rejected(reason: problems.map(\.reason).joined(separator: "; "))
    }

    /// Why the service does not take a share of items with these MIME types, reason by reason,
    /// each with the items that block it (``ActivationProblem/blockingItems``, indices into
    /// `contentTypes`); empty when it takes them. The reasons are those of
    /// ``activationVerdict(for:database:)``, in its order.
    public func activationProblems(for contentTypes: [String], database: MIMEDatabase = .system) -> [ActivationProblem] {
        guard let activation else { return [ActivationProblem(reason: "declares no activation rules (never offered in a share sheet)")] }
        guard !contentTypes.isEmpty else { return [ActivationProblem(reason: "no items to share")] }
        guard contentTypes.count <= ShareLimits.maxItems else {
            return [ActivationProblem(reason: "\(contentTypes.count) items, more than a share carries (\(ShareLimits.maxItems))")]
        }
        return ActivationMatch(rules: activation.contentTypes, items: contentTypes, database: database).problems
    }
}

/// What a share sheet offers for the items at hand: ``ServiceRegistry/activities(for:database:)``.
public struct ActivityMatches: Sendable {
    /// A service the share sheet does not offer, and why.
    public struct NotOffered: Sendable, Hashable {
        /// The service.
        public var manifest: ServiceManifest
        /// Why it is not offered: the reason of its ``ActivationVerdict/rejected(reason:)``.
        public var reason: String

        /// A service not offered, and why.
        public init(manifest: ServiceManifest, reason: String) {
            self.manifest = manifest
            self.reason = reason
        }
    }

    /// The services that take the items, sorted by identifier.
    public var offered: [ServiceManifest]
    /// Every other valid service with its reason, sorted by identifier.
    public var notOffered: [NotOffered]

    /// The services offered and the others; both empty by default.
    public init(offered: [ServiceManifest] = [], notOffered: [NotOffered] = []) {
        self.offered = offered
        self.notOffered = notOffered
    }
}

extension ServiceRegistry {
    /// Which services a share sheet offers for items of these MIME types (one per item), and
    /// why each other one is not offered: ``ServiceManifest/activationVerdict(for:database:)``
    /// for every valid service, in ``sortedServices`` order. Nothing is launched.
    public func activities(for contentTypes: [String], database: MIMEDatabase = .system) -> ActivityMatches {
        var matches = ActivityMatches()
        for manifest in sortedServices {
            switch manifest.activationVerdict(for: contentTypes, database: database) {
            case .accepted: matches.offered.append(manifest)
            case .rejected(let reason): matches.notOffered.append(.init(manifest: manifest, reason: reason))
            }
        }
        return matches
    }
}

/// The matching of items to rules and, when there is none, the reasons.
///
/// An assignment of every item to a rule it conforms to, with each rule's count within
/// `min…max`, exists exactly when (1) every item conforms to some rule, (2) every item can be
/// assigned with no rule over its `max`, and (3) distinct items can be found for every rule's
/// `min`: given an assignment for (2) and one for (3), the Mendelsohn–Dulmage theorem gives one
/// that covers every item and every rule's `min` at once. (2) and (3) are bipartite matchings
/// (each rule standing for `max`, respectively `min`, slots). Where one is short, the rules
/// reachable by alternating paths from what stayed unmatched are the bottleneck (the minimum
/// cut, the same for every maximum matching); each connected group of them is one reason,
/// and every number a reason states is true of the items as given.
struct ActivationMatch {
    /// The reasons, in this order: item types that are not MIME types and item types no rule
    /// takes (in the items' order), rules over their `max`, rules under their `min` (each group
    /// in the order of its first rule); each with the items that block it.
    private(set) var problems: [ActivationProblem] = []

    init(rules: [ServiceManifest.ContentTypeRule], items: [String], database: MIMEDatabase) {
        // For each item, the rules it conforms to.
        var takers: [[Int]] = []
        var reported: Set<String> = []
        let normalized = items.map(MIMEType.normalized)
        /// Every item of `type`: what blocks an offer for a type that is not one, or that no rule takes.
        func all(_ type: String) -> [Int] { normalized.indices.filter { normalized[$0] == type } }
        for item in normalized {
            guard MIMEType.isValid(item) else {
                if reported.insert(item).inserted { problems.append(ActivationProblem(reason: "\"\(item)\" is not a MIME type", blockingItems: all(item))) }
                takers.append([])
                continue
            }
            let rulesTaking = rules.indices.filter { database.conforms(item, to: rules[$0].type) }
            if rulesTaking.isEmpty, reported.insert(item).inserted { problems.append(ActivationProblem(reason: "accepts no \(item)", blockingItems: all(item))) }
            takers.append(rulesTaking)
        }
        let takenItems = takers.indices.filter { !takers[$0].isEmpty }
        /// How many items conform to at least one of `group`.
        func given(_ group: [Int]) -> Int {
            takers.count { !Set($0).isDisjoint(with: group) }
        }

        // (2) Items → rule slots, `max` slots per rule.
        let upperSlots = rules.indices.flatMap { rule in repeatElement(rule, count: rules[rule].max) }
        let upper = BipartiteMatching(left: takenItems.count, right: upperSlots.count) { item in
            upperSlots.indices.filter { takers[takenItems[item]].contains(upperSlots[$0]) }
        }
        let (overItems, overSlots) = upper.alternatingReach()
        let bottleneck = overItems.map { takenItems[$0] }
        for group in Self.groups(rules: Set(overSlots.map { upperSlots[$0] }), items: bottleneck, takers: takers) {
            let bounds = group.map { "at most \(rules[$0].max) \(rules[$0].type)" }
            // What counted without being of the rule's own type (a URL for text/plain): said,
            // since the count would surprise otherwise. A family (image/*) needs no word.
            var counted: [String] = []
            for rule in group where !rules[rule].type.hasSuffix("/*") {
                let own = database.canonical(rules[rule].type)
                let others = takers.indices.filter { takers[$0].contains(rule) && database.canonical(normalized[$0]) != own }.map { normalized[$0] }
                guard !others.isEmpty else { continue }
                let phrases = Set(others).sorted().map { type in Self.items(others.count { $0 == type }, of: type) }
                counted.append("\(Self.list(phrases)) \(others.count == 1 ? "counts" : "count") as \(rules[rule].type) here")
            }
            // The items that only this group can take: removing enough of them is what would help.
            let blocking = bottleneck.filter { !Set(takers[$0]).isDisjoint(with: group) }.sorted()
            let accepts = "accepts \(Self.list(bounds))\(Self.total(group.map { rules[$0].max }, group))"
            problems.append(ActivationProblem(reason: counted.isEmpty ? "\(accepts), \(given(group)) given"
                                                  : "\(accepts) — \(Self.list(counted)), so \(given(group)) were given",
                                              blockingItems: blocking))
        }

        // (3) Rule slots, `min` per rule → items.
        let lowerSlots = rules.indices.flatMap { rule in repeatElement(rule, count: rules[rule].min) }
        let lower = BipartiteMatching(left: lowerSlots.count, right: takenItems.count) { slot in
            takenItems.indices.filter { takers[takenItems[$0]].contains(lowerSlots[slot]) }
        }
        let (underSlots, underItems) = lower.alternatingReach()
        for group in Self.groups(rules: Set(underSlots.map { lowerSlots[$0] }), items: underItems.map { takenItems[$0] }, takers: takers) {
            let bounds = group.map { "at least \(rules[$0].min) \(rules[$0].type)" }
            problems.append(ActivationProblem(reason: "needs \(Self.list(bounds))\(Self.total(group.map { rules[$0].min }, group)), \(given(group)) given"))
        }
    }

    /// `rules` split into groups connected through the items that conform to more than one of
    /// them; each group sorted, the groups in the order of their first rule.
    private static func groups(rules: Set<Int>, items: [Int], takers: [[Int]]) -> [[Int]] {
        var root = Dictionary(uniqueKeysWithValues: rules.map { ($0, $0) })
        func find(_ rule: Int) -> Int {
            var rule = rule
            while root[rule]! != rule { rule = root[rule]! }
            return rule
        }
        for item in items {
            let linked = takers[item].filter(rules.contains)
            for rule in linked.dropFirst() {
                let (a, b) = (find(linked[0]), find(rule))
                root[max(a, b)] = min(a, b)
            }
        }
        return Dictionary(grouping: rules.sorted(), by: find).values.sorted { $0[0] < $1[0] }
    }

    /// `count` items of `type`, as a person says it: "the URL", "2 URLs", "a text/x-csrc",
    /// "3 text/x-csrc".
    private static func items(_ count: Int, of type: String) -> String {
        if type == "text/uri-list" { return count == 1 ? "the URL" : "\(count) URLs" }
        return count == 1 ? "a \(type)" : "\(count) \(type)"
    }

    /// `a`, `a and b`, `a, b and c`.
    private static func list(_ parts: [String]) -> String {
        parts.count <= 1 ? parts.joined() : parts.dropLast().joined(separator: ", ") + " and " + parts.last!
    }

    /// ` (N items in all)` for a group of several rules.
    private static func total(_ counts: [Int], _ group: [Int]) -> String {
        group.count > 1 ? " (\(counts.reduce(0, +)) items in all)" : ""
    }
}

/// A maximum matching of a bipartite graph (Kuhn's augmenting paths; the graphs here have at
/// most 16 items and 32 × 16 rule slots).
struct BipartiteMatching {
    /// Each left node's neighbours on the right.
    private let edges: [[Int]]
    /// The right node each left node is matched to, and the reverse.
    private(set) var leftMatch: [Int?]
    private(set) var rightMatch: [Int?]

    init(left: Int, right: Int, neighbours: (Int) -> [Int]) {
        edges = (0..<left).map(neighbours)
        leftMatch = Array(repeating: nil, count: left)
        rightMatch = Array(repeating: nil, count: right)
        for node in 0..<left {
            var visited = Array(repeating: false, count: right)
            _ = augment(from: node, visited: &visited)
        }
    }

    private mutating func augment(from node: Int, visited: inout [Bool]) -> Bool {
        for neighbour in edges[node] where !visited[neighbour] {
            visited[neighbour] = true
            if let holder = rightMatch[neighbour], !augment(from: holder, visited: &visited) { continue }
            leftMatch[node] = neighbour
            rightMatch[neighbour] = node
            return true
        }
        return false
    }

    /// The nodes reachable from the unmatched left nodes by alternating paths (any edge to the
    /// right, the matched edge back to the left), unmatched left nodes included: with a
    /// maximum matching, every right node reached is matched, and these sets are the source
    /// side of the minimum cut. Both empty when every left node is matched.
    func alternatingReach() -> (left: [Int], right: [Int]) {
        var leftSeen = leftMatch.map { $0 == nil }
        var rightSeen = Array(repeating: false, count: rightMatch.count)
        var queue = leftSeen.indices.filter { leftSeen[$0] }
        var next = 0
        while next < queue.count {
            let node = queue[next]
            next += 1
            for neighbour in edges[node] where !rightSeen[neighbour] {
                rightSeen[neighbour] = true
                if let holder = rightMatch[neighbour], !leftSeen[holder] {
                    leftSeen[holder] = true
                    queue.append(holder)
                }
            }
        }
        return (leftSeen.indices.filter { leftSeen[$0] }, rightSeen.indices.filter { rightSeen[$0] })
    }
}
