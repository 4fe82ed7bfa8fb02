import FoundationEssentials
@testable import RemoteHost
import RemoteTestSupport
import Testing

/// Activation rules against shared items: which services a share sheet offers and, for the
/// others, the exact reason. A tiny handwritten MIME database pins the semantics; the system's
/// shows them on real shared-mime-info entries.
@Suite("Activation")
struct ActivationTests {
    /// A manifest with these rules (the JSON inside `contentTypes: [...]`), or none.
    static func manifest(_ rules: String?, identifier: String = "com.example.share") throws -> ServiceManifest {
        let activation = rules.map { #", "activation": {"contentTypes": [\#($0)]}"# } ?? ""
        let json = #"{"identifier": "\#(identifier)", "executable": "service", "display": {"title": "Share"}\#(activation)}"#
        return try JSONDecoder().decode(ServiceManifest.self, from: Data(json.utf8))
    }

    /// A database of a few entries, independent of the system's.
    static func withDatabase(_ body: (MIMEDatabase) throws -> Void) throws {
        let folder = try TemporaryFolder("remoteview-mime")
        defer { folder.remove() }
        try folder.write("aliases", "image/x-png image/png\n")
        try folder.write("subclasses", "text/x-csrc text/plain\nimage/svg+xml application/xml\napplication/xml text/xml\n")
        try body(MIMEDatabase(directories: [folder.path]))
    }

    /// The verdict of `rules` on `items` with the handwritten database.
    static func verdict(_ rules: String?, _ items: [String]) throws -> ActivationVerdict {
        var verdict = ActivationVerdict.accepted
        try withDatabase { verdict = try manifest(rules).activationVerdict(for: items, database: $0) }
        return verdict
    }

    @Test("no rules: never offered; no items, or more than a share carries: nothing to offer")
    func nothingToMatch() throws {
        #expect(try Self.verdict(nil, ["text/plain"]) == .rejected(reason: "declares no activation rules (never offered in a share sheet)"))
        #expect(try Self.verdict(nil, []) == .rejected(reason: "declares no activation rules (never offered in a share sheet)"))
        #expect(try Self.verdict(#"{"type": "text/plain", "min": 0, "max": 1}"#, []) == .rejected(reason: "no items to share"))
        let seventeen = Array(repeating: "text/plain", count: 17)
        #expect(try Self.verdict(#"{"type": "text/plain", "max": 16}, {"type": "text/*", "max": 16}"#, seventeen)
                    == .rejected(reason: "17 items, more than a share carries (16)"))
        #expect(try Self.verdict(#"{"type": "text/plain", "max": 16}, {"type": "text/*", "max": 16}"#, Array(seventeen.dropFirst())) == .accepted)
    }

    @Test("within min…max: accepted; the edges of each bound")
    func bounds() throws {
        let rules = #"{"type": "image/png", "min": 1, "max": 2}, {"type": "text/plain", "min": 0, "max": 1}"#
        #expect(try Self.verdict(rules, ["image/png"]) == .accepted)
        #expect(try Self.verdict(rules, ["image/png", "image/png", "text/plain"]) == .accepted)
        #expect(try Self.verdict(rules, ["image/png", "image/png", "image/png"]) == .rejected(reason: "accepts at most 2 image/png, 3 given"))
        #expect(try Self.verdict(rules, ["text/plain"]) == .rejected(reason: "needs at least 1 image/png, 0 given"))
        #expect(try Self.verdict(rules, ["image/png", "text/plain", "text/plain"]) == .rejected(reason: "accepts at most 1 text/plain, 2 given"))
        #expect(try Self.verdict(#"{"type": "image/*", "max": 1}"#, ["image/png", "image/jpeg", "image/gif"])
                    == .rejected(reason: "accepts at most 1 image/*, 3 given"))
    }

    @Test("a reason over a max says what counted as the rule's type without being it, before the count: the URL as text/plain (a text and a link: 2 were given), subclasses by type; a family needs no word")
    func countedAs() throws {
        #expect(try Self.verdict(#"{"type": "text/plain", "min": 0, "max": 1}"#, ["text/plain", "text/uri-list"])
                    == .rejected(reason: "accepts at most 1 text/plain — the URL counts as text/plain here, so 2 were given"))
        #expect(try Self.verdict(#"{"type": "text/plain", "min": 0, "max": 1}"#, ["text/uri-list", "text/uri-list", "text/x-csrc"])
                    == .rejected(reason: "accepts at most 1 text/plain — 2 URLs and a text/x-csrc count as text/plain here, so 3 were given"))
        #expect(try Self.verdict(#"{"type": "image/*", "min": 0, "max": 1}"#, ["image/png", "image/jpeg"])
                    == .rejected(reason: "accepts at most 1 image/*, 2 given"))
    }

    @Test("a type no rule takes, a type that is not one, and several problems at once")
    func wrongTypes() throws {
        #expect(try Self.verdict(#"{"type": "image/png", "min": 0, "max": 1}"#, ["text/uri-list"]) == .rejected(reason: "accepts no text/uri-list"))
        #expect(try Self.verdict(#"{"type": "image/png"}"#, ["text/uri-list", "Text/URI-list"])
                    == .rejected(reason: "accepts no text/uri-list; needs at least 1 image/png, 0 given"))
        #expect(try Self.verdict(#"{"type": "image/png", "min": 0, "max": 1}"#, ["not a type", "image/png"]) == .rejected(reason: #""not a type" is not a MIME type"#))
        #expect(try Self.verdict(#"{"type": "image/png", "min": 0, "max": 1}"#, ["text/uri-list", "image/png", "image/png"])
                    == .rejected(reason: "accepts no text/uri-list; accepts at most 1 image/png, 2 given"))
        // Two separate bottlenecks are two reasons.
        #expect(try Self.verdict(#"{"type": "text/plain", "min": 0, "max": 1}, {"type": "image/png", "min": 0, "max": 1}"#, ["text/plain", "text/plain", "image/png", "image/png"])
                    == .rejected(reason: "accepts at most 1 text/plain, 2 given; accepts at most 1 image/png, 2 given"))
        // And an unmet min next to an exceeded max.
        #expect(try Self.verdict(#"{"type": "text/plain"}, {"type": "image/png", "min": 0, "max": 1}"#, ["image/png", "image/png"])
                    == .rejected(reason: "accepts at most 1 image/png, 2 given; needs at least 1 text/plain, 0 given"))
    }

    @Test("image/* takes every image, through aliases and subclasses too; not a text")
    func wildcard() throws {
        let rules = #"{"type": "image/*", "max": 4}"#
        #expect(try Self.verdict(rules, ["image/png", "image/jpeg", "image/svg+xml", "image/x-png"]) == .accepted)
        #expect(try Self.verdict(rules, ["text/plain"]) == .rejected(reason: "accepts no text/plain; needs at least 1 image/*, 0 given"))
        // A family reached through a superclass: image/svg+xml is an application/xml.
        #expect(try Self.verdict(#"{"type": "application/*"}"#, ["image/svg+xml"]) == .accepted)
        #expect(try Self.verdict(#"{"type": "application/*", "min": 0, "max": 1}"#, ["image/png"]) == .rejected(reason: "accepts no image/png"))
    }

    @Test("subclasses and aliases, on both sides; octet-stream takes everything")
    func conformance() throws {
        #expect(try Self.verdict(#"{"type": "text/plain", "max": 2}"#, ["text/x-csrc", "text/markdown"]) == .accepted, "subclass, implicit text/plain")
        #expect(try Self.verdict(#"{"type": "text/xml"}"#, ["image/svg+xml"]) == .accepted, "transitive subclass")
        #expect(try Self.verdict(#"{"type": "text/x-csrc", "min": 0, "max": 1}"#, ["text/plain"]) == .rejected(reason: "accepts no text/plain"), "a parent is not its child")
        #expect(try Self.verdict(#"{"type": "image/png"}"#, ["image/x-png"]) == .accepted, "alias on the item's side")
        #expect(try Self.verdict(#"{"type": "image/x-png"}"#, ["IMAGE/PNG"]) == .accepted, "alias on the rule's side")
        let everything = ["image/png", "text/plain", "application/pdf", "audio/ogg", "video/mp4", "model/gltf+json", "x-weird/thing"]
        #expect(try Self.verdict(#"{"type": "application/octet-stream", "max": 16}"#, everything) == .accepted)
        #expect(try Self.verdict(#"{"type": "application/octet-stream"}"#, ["inode/directory"])
                    == .rejected(reason: "accepts no inode/directory; needs at least 1 application/octet-stream, 0 given"))
    }

    @Test("overlapping rules: items go where they fit (image/png max 1 and image/* max 3 take 2 PNGs)")
    func overlapping() throws {
        let rules = #"{"type": "image/png", "max": 1}, {"type": "image/*", "max": 3}"#
        #expect(try Self.verdict(rules, ["image/png", "image/png"]) == .accepted)
        #expect(try Self.verdict(rules, ["image/png", "image/jpeg", "image/png", "image/gif"]) == .accepted)
        #expect(try Self.verdict(rules, Array(repeating: "image/png", count: 5))
                    == .rejected(reason: "accepts at most 1 image/png and at most 3 image/* (4 items in all), 5 given"))
        #expect(try Self.verdict(rules, ["image/png"])
                    == .rejected(reason: "needs at least 1 image/png and at least 1 image/* (2 items in all), 1 given"))
        #expect(try Self.verdict(rules, ["image/jpeg", "image/gif"]) == .rejected(reason: "needs at least 1 image/png, 0 given"))
        // The specific rule is not filled first: a PNG that only image/* could take goes there.
        #expect(try Self.verdict(#"{"type": "image/*", "max": 1}, {"type": "image/png", "min": 0, "max": 1}"#, ["image/png", "image/jpeg"]) == .accepted)
    }

    @Test("the registry: offered and not offered, each sorted by identifier, with reasons")
    func registry() throws {
        let registry = ServiceRegistry(manifests: [
            try Self.manifest(#"{"type": "image/*", "min": 1, "max": 3}"#, identifier: "com.example.photos"),
            try Self.manifest(nil, identifier: "com.example.echo"),
            try Self.manifest(#"{"type": "text/plain", "min": 0, "max": 1}, {"type": "image/*", "min": 0, "max": 1}"#, identifier: "com.example.notes"),
            try Self.manifest(#"{"type": "text/uri-list"}"#, identifier: "com.example.browser"),
        ])
        try Self.withDatabase { database in
            let matches = registry.activities(for: ["image/png", "image/jpeg"], database: database)
            #expect(matches.offered.map(\.identifier) == ["com.example.photos"])
            #expect(matches.notOffered == [
                .init(manifest: registry.services["com.example.browser"]!, reason: "accepts no image/png; accepts no image/jpeg; needs at least 1 text/uri-list, 0 given"),
                .init(manifest: registry.services["com.example.echo"]!, reason: "declares no activation rules (never offered in a share sheet)"),
                .init(manifest: registry.services["com.example.notes"]!, reason: "accepts at most 1 image/*, 2 given"),
            ])
            let one = registry.activities(for: ["image/png"], database: database)
            #expect(one.offered.map(\.identifier) == ["com.example.notes", "com.example.photos"])
            #expect(one.notOffered.map(\.manifest.identifier) == ["com.example.browser", "com.example.echo"])
        }
    }

    @Test("the system database: real subclasses and aliases from shared-mime-info")
    func systemDatabase() throws {
        let text = try Self.manifest(#"{"type": "text/plain", "max": 3}"#)
        #expect(text.activationVerdict(for: ["application/x-shellscript", "text/x-csrc", "text/x-c"]) == .accepted)
        #expect(text.activationVerdict(for: ["image/png"]) == .rejected(reason: "accepts no image/png; needs at least 1 text/plain, 0 given"))
        #expect(try Self.manifest(#"{"type": "application/xml"}"#).activationVerdict(for: ["image/svg+xml"]) == .accepted)
        #expect(try Self.manifest(#"{"type": "image/jpeg"}"#).activationVerdict(for: ["image/pjpeg"]) == .accepted)
        #expect(try Self.manifest(#"{"type": "image/*", "min": 0, "max": 1}"#).activationVerdict(for: ["image/pdf"]) == .rejected(reason: "accepts no image/pdf"),
                "image/pdf is an alias of application/pdf")
    }

    @Test("the demo's activities: Notes a text and a URL, at most one of each; Post 1…4 images and a text; Markup one image")
    func demoManifests() throws {
        let root = try #require(String(#filePath).split(separator: "/Tests/").first)
        func manifest(_ name: String) throws -> ServiceManifest {
            let data = try #require(Syscall.readSmallFile(root + "/Sources/demo-share/Services/\(name).json", limit: 65_536))
            return try JSONDecoder().decode(ServiceManifest.self, from: Data(data))
        }
        let notes = try manifest("notes"), post = try manifest("post"), markup = try manifest("markup")
        #expect(notes.activationVerdict(for: ["text/plain"]) == .accepted)
        #expect(notes.activationVerdict(for: ["text/uri-list"]) == .accepted)
        #expect(notes.activationVerdict(for: ["text/plain", "text/uri-list"]) == .accepted)
        #expect(notes.activationVerdict(for: ["image/png"]) == .rejected(reason: "accepts no image/png"))
        #expect(post.activationVerdict(for: ["text/plain", "image/png", "image/jpeg"]) == .accepted)
        #expect(post.activationVerdict(for: ["text/plain"]) == .rejected(reason: "needs at least 1 image/*, 0 given"))
        #expect(post.activationVerdict(for: Array(repeating: "image/png", count: 5)) == .rejected(reason: "accepts at most 4 image/*, 5 given"))
        #expect(markup.activationVerdict(for: ["image/png"]) == .accepted)
        #expect(markup.activationVerdict(for: ["image/png", "image/png"]) == .rejected(reason: "accepts at most 1 image/*, 2 given"))
        #expect(post.sandbox.dataFolder && !notes.sandbox.dataFolder && !markup.sandbox.dataFolder, "only Post writes")
    }

    @Test("each problem names the items that block it: every item of a type no rule takes, the items only the rules over their max can take, none for a rule short of its min")
    func blockingItems() throws {
        try Self.withDatabase { database in
            let rules = try Self.manifest(#"{"type": "text/plain", "min": 0, "max": 1}, {"type": "image/png", "min": 1, "max": 1}"#)
            #expect(rules.activationProblems(for: ["text/plain"], database: database) == [ActivationProblem(reason: "needs at least 1 image/png, 0 given")])
            #expect(rules.activationProblems(for: ["application/pdf", "text/plain", "image/png", "text/uri-list", "application/pdf"], database: database) == [
                ActivationProblem(reason: "accepts no application/pdf", blockingItems: [0, 4]),
                ActivationProblem(reason: "accepts at most 1 text/plain — the URL counts as text/plain here, so 2 were given", blockingItems: [1, 3]),
            ])
            // A PNG that image/* could also take is not in image/png's bottleneck when image/* has room.
            let overlapping = try Self.manifest(#"{"type": "image/png", "min": 0, "max": 1}, {"type": "image/*", "min": 0, "max": 1}, {"type": "text/plain", "min": 0, "max": 1}"#)
            #expect(overlapping.activationProblems(for: ["image/png", "image/png", "image/png", "text/plain"], database: database)
                        == [ActivationProblem(reason: "accepts at most 1 image/png and at most 1 image/* (2 items in all), 3 given", blockingItems: [0, 1, 2])])
            #expect(overlapping.activationProblems(for: ["image/png"], database: database).isEmpty)
            #expect(try Self.manifest(nil).activationProblems(for: ["image/png"], database: database)
                        == [ActivationProblem(reason: "declares no activation rules (never offered in a share sheet)")])
        }
    }

    @Test("the sheet's explanations name the blocking items: a file by its name, a text by its first words in quotes, a URL by its host; three at most, then how many more; escaped for a terminal; blockingItems for a host to highlight")
    func sheetNamesItems() throws {
        let registry = ServiceRegistry(manifests: [
            try Self.manifest(#"{"type": "text/plain", "min": 0, "max": 1}"#, identifier: "com.example.post"),
            try Self.manifest(#"{"type": "image/*", "min": 1, "max": 1}"#, identifier: "com.example.markup"),
            try Self.manifest(nil, identifier: "com.example.echo"),
        ])
        try Self.withDatabase { database in
            let items = [try ShareItem.text("Hello world, this is a long first line\nand a second one"),
                         try ShareItem.url("https://someone@example.com:8080/a?b#c"),
                         try ShareItem.file(named: "report.pdf", contentType: "application/pdf", contents: [1, 2, 3])]
            let sheet = ShareSheet(registry: registry, items: items, database: database)
            #expect(sheet.activities.isEmpty)
            #expect(sheet.explanations.map(\.activity.identifier) == ["com.example.markup", "com.example.post"], "echo declares no rules: never explained")
            let post = try #require(sheet.explanations.last)
            #expect(post.reason == #"accepts no application/pdf: report.pdf; accepts at most 1 text/plain — the URL counts as text/plain here, so 2 were given: "Hello world, this is a…" and example.com"#)
            #expect(post.blockingItems == [0, 1, 2])
            #expect(post.problems.map(\.blockingItems) == [[2], [0, 1]])
            #expect(sheet.explanation(for: "com.example.post") == post.reason)
            let markup = try #require(sheet.explanations.first)
            #expect(markup.reason == #"accepts no text/plain: "Hello world, this is a…"; accepts no text/uri-list: example.com; accepts no application/pdf: report.pdf; needs at least 1 image/*, 0 given"#)
            #expect(markup.blockingItems == [0, 1, 2])

            // Only missing items: nothing to name, nothing to highlight.
            let short = ShareSheet(registry: registry, items: [try .text("one"), try .text("two")], database: database)
            #expect(short.explanation(for: "com.example.markup") == #"accepts no text/plain: "one" and "two"; needs at least 1 image/*, 0 given"#)
            let text = ShareSheet(registry: registry, items: [try .text("only")], database: database)
            #expect(text.explanation(for: "com.example.markup")?.hasSuffix("needs at least 1 image/*, 0 given") == true)
            let images = try ["a.png", "b.png", "c.png", "d.png", "e.png"].map { try ShareItem.file(named: $0, contentType: "image/png", contents: [0]) }
            let five = ShareSheet(registry: registry, items: images, database: database)
            #expect(five.explanation(for: "com.example.markup") == "accepts at most 1 image/*, 5 given: a.png, b.png, c.png and 2 more")
            #expect(five.explanations.first { $0.activity.identifier == "com.example.markup" }?.blockingItems == [0, 1, 2, 3, 4])

            // The user's or a peer's data, escaped: a terminal's escape, a bidi override, a tab;
            // a long name cut in the middle, its extension kept; a URL without a host by its start.
            let hostile = [try ShareItem.text("\u{1B}[2J\tred  alert"),
                           try ShareItem.file(named: "invoice\u{202E}fdp.exe", contentType: "application/x-thing", contents: [0]),
                           try ShareItem.file(named: "a-very-long-file-name-that-goes-on-and-on.tar.gz", contentType: "application/x-thing", contents: [0]),
                           try ShareItem.url("mailto:someone@example.com")]
            let escaped = ShareSheet(registry: registry, items: hostile, database: database)
            let reason = try #require(escaped.explanation(for: "com.example.post"))
            #expect(reason == #"accepts no application/x-thing: invoice\u{202E}fdp.exe and a-very-long-file-nam…d-on.tar.gz; accepts at most 1 text/plain — the URL counts as text/plain here, so 2 were given: "\u{1B}[2J red alert" and mailto:someone@example.c…"#,
                    "\(reason)")
            #expect(!reason.unicodeScalars.contains { $0.isEscapedForTerminal }, "one line, nothing a terminal acts on")
        }
    }

    /// Every assignment of items to rules, tried one by one.
    static func bruteForce(_ rules: [ServiceManifest.ContentTypeRule], _ items: [String], _ database: MIMEDatabase) -> Bool {
        var counts = Array(repeating: 0, count: rules.count)
        func place(_ index: Int) -> Bool {
            if index == items.count { return rules.indices.allSatisfy { counts[$0] >= rules[$0].min } }
            for rule in rules.indices where counts[rule] < rules[rule].max && database.conforms(items[index], to: rules[rule].type) {
                counts[rule] += 1
                defer { counts[rule] -= 1 }
                if place(index + 1) { return true }
            }
            return false
        }
        return place(0)
    }

    @Test("against every assignment tried by hand: the same verdict, and every reason's numbers are true")
    func exhaustive() throws {
        let types = ["image/png", "image/x-png", "image/jpeg", "image/svg+xml", "text/plain", "text/x-csrc", "text/uri-list", "application/xml", "application/pdf"]
        let patterns = types + ["image/*", "text/*", "application/*", "application/octet-stream"]
        var random = SplitMix64(seed: 0x5EED)
        try Self.withDatabase { database in
            for _ in 0..<1500 {
                var rules: [String] = []
                for _ in 0..<random.next(1...4) {
                    let min = random.next(0...2)
                    rules.append(#"{"type": "\#(patterns[random.next(0...patterns.count - 1)])", "min": \#(min), "max": \#(random.next(Swift.max(min, 1)...3))}"#)
                }
                let manifest = try Self.manifest(rules.joined(separator: ", "))
                let items = (0..<random.next(1...5)).map { _ in types[random.next(0...types.count - 1)] }
                let verdict = manifest.activationVerdict(for: items, database: database)
                let possible = Self.bruteForce(manifest.activation!.contentTypes, items, database)
                #expect((verdict == .accepted) == possible, "\(rules) with \(items): \(verdict)")
                guard case .rejected(let reason) = verdict else { continue }
                // The problems one by one are the verdict's clauses, each with its blocking items.
                let problems = manifest.activationProblems(for: items, database: database)
                #expect(problems.map(\.reason).joined(separator: "; ") == reason)
                for problem in problems {
                    let blocking = problem.blockingItems
                    #expect(blocking == blocking.sorted() && Set(blocking).count == blocking.count, "\(problem)")
                    if problem.reason.hasPrefix("accepts no ") {
                        let type = String(problem.reason.dropFirst("accepts no ".count))
                        #expect(blocking == items.indices.filter { MIMEType.normalized(items[$0]) == type }, "\(problem) for \(items)")
                    } else if problem.reason.hasPrefix("needs at least") {
                        #expect(blocking.isEmpty, "\(problem)")
                    } else {
                        // Over a max: more items than the group's bounds add up to, which only the
                        // group's rules take.
                        let numbers = problem.reason.prefix { $0 != "," && $0 != "—" }.split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }
                        let total = numbers.count == 1 ? numbers[0] : numbers.last!
                        #expect(problem.reason.hasPrefix("accepts at most") && blocking.count > total, "\(problem) for \(rules) with \(items)")
                    }
                }
                // Without every item that blocks by a max, no rule is over its max.
                let over = Set(problems.filter { $0.reason.hasPrefix("accepts at most") }.flatMap(\.blockingItems))
                let rest = items.indices.filter { !over.contains($0) }.map { items[$0] }
                #expect(rest.isEmpty || !manifest.activationProblems(for: rest, database: database).contains { $0.reason.hasPrefix("accepts at most") },
                        "\(rules) with \(items), without \(over.sorted())")
                for var clause in reason.split(separator: "; ") where !clause.hasPrefix("accepts no") {
                    // What counted as the rule's type comes before the count, after a dash: not a bound.
                    if let dash = clause.firstRange(of: " — "), let so = clause.ranges(of: ", so ").last {
                        let given = clause[so.upperBound...].prefix(while: \.isNumber)
                        #expect(clause.hasSuffix(" were given"), "\(clause)")
                        clause = Substring(clause[..<dash.lowerBound] + ", \(given) given")
                    }
                    // The numbers: each rule's bound, (their total,) how many items were given.
                    let numbers = clause.split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }
                    let bounds = numbers.count == 2 ? [numbers[0]] : Array(numbers.dropLast(2))
                    let (total, given) = (numbers.count == 2 ? numbers[0] : numbers[numbers.count - 2], numbers.last!)
                    #expect(bounds.reduce(0, +) == total, "\(clause)")
                    if clause.hasPrefix("accepts at most") {
                        #expect(given > total, "\(clause) for \(rules) with \(items)")
                    } else {
                        #expect(clause.hasPrefix("needs at least") && given < total, "\(clause) for \(rules) with \(items)")
                    }
                }
            }
        }
    }
}

/// A small seeded generator, so the exhaustive test is the same on every run.
struct SplitMix64 {
    var state: UInt64
    init(seed: UInt64) { state = seed }

    mutating func next(_ range: ClosedRange<Int>) -> Int {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        return range.lowerBound + Int(z % UInt64(range.count))
    }
}
