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

    @Test("a reason over a max says what counted as the rule's type without being it: the URL as text/plain (a text and a link: 2 given), subclasses by type; a family needs no word")
    func countedAs() throws {
        #expect(try Self.verdict(#"{"type": "text/plain", "min": 0, "max": 1}"#, ["text/plain", "text/uri-list"])
                    == .rejected(reason: "accepts at most 1 text/plain, 2 given (the URL counts as text/plain here)"))
        #expect(try Self.verdict(#"{"type": "text/plain", "min": 0, "max": 1}"#, ["text/uri-list", "text/uri-list", "text/x-csrc"])
                    == .rejected(reason: "accepts at most 1 text/plain, 3 given (2 URLs and a text/x-csrc count as text/plain here)"))
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
                for var clause in reason.split(separator: "; ") where !clause.hasPrefix("accepts no") {
                    // What counted as the rule's type comes last, in parentheses: not a bound.
                    if clause.hasSuffix(" here)"), let open = clause.ranges(of: " (").last { clause = clause[..<open.lowerBound] }
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
