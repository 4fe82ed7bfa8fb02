import FoundationEssentials
import Glibc
import RemoteHost
import RemoteTestSupport
import Testing

/// `remoteview-check`, the conformance checker, run as a service author runs it: on manifests,
/// each service started sandboxed. Good services keep every rule they are tried on; services
/// broken on purpose (the C activity with `--break=RULE`) fail on that rule and no other.
@Suite("remoteview-check, the conformance checker", .serialized)
struct ConformanceTests {
    struct Row: Decodable {
        var rule: String
        var result: String
        var seen: String
    }

    static let buildFolder: String = {
        let parts = testServiceExecutable.split(separator: "/").dropLast()
        return "/" + parts.joined(separator: "/")
    }()

    static let cActivity = UppercaseShareTests.repository + "/Examples/uppercase-c/uppercase-share"

    /// Runs the checker with `arguments`; returns its exit status and output.
    static func check(_ arguments: [String]) throws -> (Int32, String) {
        try checkAll([arguments])[0]
    }

    /// Runs one checker for each of `runs` at once (each is slow mostly because it waits: for an
    /// idle timeout, for a frame that must not come); returns each one's exit status and output.
    static func checkAll(_ runs: [[String]]) throws -> [(Int32, String)] {
        try runCommands(runs.map { [buildFolder + "/remoteview-check"] + $0 }).map { ($0.status, $0.output) }
    }

    /// The checker's JSON table for each of `manifests`, and its exit status.
    static func rows(_ manifests: [String]) throws -> [(Int32, [Row])] {
        try checkAll(manifests.map { [$0, "--json"] }).map { status, output in
            (status, try JSONDecoder().decode([Row].self, from: Data(output.utf8)))
        }
    }

    /// A manifest of the fixture service in `mode`, in a folder of its own.
    static func fixture(_ mode: String) throws -> TemporaryFolder {
        let folder = try TemporaryFolder("remoteview-check")
        _ = try folder.write("service.json", ServiceFolder.manifest(mode: mode))
        return folder
    }

    enum Good: String, CaseIterable, CustomTestStringConvertible {
        case plain = "serve", view = "ui", share, c, echo, clock, notes, post, markup, animation
        var testDescription: String {
            switch self {
            case .plain, .view, .share: "the Swift fixture (\(rawValue))"
            case .c: "the C activity"
            default: "the demo's \(rawValue)"
            }
        }
    }

    @Test("good services keep every rule: the Swift fixture (plain, with a view, a share activity), every demo service, and the C activity")
    func goodServices() async throws {
        try #require(Syscall.isRegularFile(Self.cActivity), "build the C activity first: make -C Examples/uppercase-c (make test does)")
        let folders = try [Good.plain, .view, .share].map { try Self.fixture($0.rawValue) }
        defer { folders.forEach { $0.remove() } }
        let manifests = Good.allCases.map { service in
            switch service {
            case .plain: folders[0].path + "/service.json"
            case .view: folders[1].path + "/service.json"
            case .share: folders[2].path + "/service.json"
            case .c: UppercaseShareTests.repository + "/Examples/uppercase-c/uppercase.json"
            default: Self.buildFolder + "/RemoteView_demo-share.resources/Services/\(service.rawValue).json"
            }
        }
        let checkFolders = { ((try? Syscall.directoryEntries("/tmp")) ?? []).filter { $0.hasPrefix("remoteview-check-") }.count }
        let foldersBefore = checkFolders()
        defer { #expect(checkFolders() <= foldersBefore, "a check leaves no data folder behind (Post asks for one)") }
        for (service, (status, rows)) in zip(Good.allCases, try Self.rows(manifests)) {
            let failed = rows.filter { $0.result == "failed" }
            #expect(status == 0 && failed.isEmpty, "\(service.testDescription): \(failed.map { "\($0.rule): \($0.seen)" })")
            let skipped = Set(rows.filter { $0.result == "skipped" }.map(\.rule))
            let viewRules = Set(rows.map(\.rule).filter { $0.hasPrefix("view.") || $0 == "input.before-size" })
            let shareRules: Set = ["share.cancel", "share.one-complete"]
            // Restorable state: tried on a view that announces "restorable-state" (every Swift
            // one; not the C activity); "only if announced" on every view.
            let stateRules: Set = ["state.restore", "state.bounds"]
            // The semantic tree: tried on every view that announces "accessibility".
            let treeRules = Set(rows.map(\.rule).filter { $0.hasPrefix("tree.") })
            switch service {
            case .share, .notes, .post, .markup: #expect(skipped.isEmpty, "\(service.testDescription): \(skipped)")
            case .c: #expect(skipped == stateRules, "\(service.testDescription): \(skipped)")
            case .view, .animation: #expect(skipped == shareRules, "\(service.testDescription): \(skipped)")
            case .plain, .echo, .clock:
                #expect(skipped == viewRules.union(shareRules).union(stateRules).union(treeRules)
                    .union(["state.only-if-announced", "focus.only-if-announced"]), "\(service.testDescription): \(skipped)")
            }
        }
        #expect(childProcesses().isEmpty, "the checkers and their services are gone")
    }

    @Test("protocol versions: the C activity speaks version 2 and keeps every rule checked under either version (--protocol 1 and the default 2), with no warning")
    func versions() async throws {
        try #require(Syscall.isRegularFile(Self.cActivity), "build the C activity first: make -C Examples/uppercase-c (make test does)")
        let manifest = UppercaseShareTests.repository + "/Examples/uppercase-c/uppercase.json"
        let runs = try Self.checkAll([[manifest, "--json"], [manifest, "--json", "--protocol", "1"]])
        for ((status, output), version) in zip(runs, [2, 1]) {
            let rows = try JSONDecoder().decode([Row].self, from: Data(output.utf8))
            #expect(status == 0 && !rows.contains { $0.result == "failed" || $0.result == "warning" }, "protocol \(version): \(rows.filter { $0.result != "passed" })")
            let handshake = rows.first { $0.rule == "handshake.first" }
            #expect(handshake?.seen == "protocol 1, speaks up to 2; checked under protocol \(version)", "\(String(describing: handshake))")
        }
        let (status, output) = try Self.check([manifest, "--protocol", "3"])
        #expect(status != 0 && output.contains("--protocol must be 1 to 2, not 3"), "\(output)")
    }

    @Test("the frozen version-1 peer is checked under protocol 1 and keeps every rule of it, with a warning for each version-2 rule it would fail: its own domain for an unknown request, a view without announcing \"surfaces\"")
    func frozenVersion1() async throws {
        let manifest = UppercaseShareTests.repository + "/Tests/FrozenPeers/v1/frozen-v1.json"
        try #require(Syscall.isRegularFile(UppercaseShareTests.repository + "/Tests/FrozenPeers/v1/frozen-v1-service"),
                     "build the frozen peer first: make -C Tests/FrozenPeers/v1 (make test does)")
        let runs = try Self.checkAll([[manifest, "--json"], [manifest]])
        let (status, output) = runs[0]
        let rows = try JSONDecoder().decode([Row].self, from: Data(output.utf8))
        #expect(status == 0 && !rows.contains { $0.result == "failed" }, "\(rows.filter { $0.result == "failed" })")
        #expect(rows.first { $0.rule == "handshake.first" }?.seen == "protocol 1, speaks up to 1 (no max_protocol_version); checked under protocol 1")
        let warnings = rows.filter { $0.result == "warning" }
        #expect(warnings.map(\.rule).sorted() == ["request.unknown", "view.announced"], "\(warnings)")
        #expect(warnings.allSatisfy { $0.seen.hasPrefix("would fail under protocol 2: ") }, "\(warnings)")
        #expect(rows.filter { $0.rule.hasPrefix("view.") && $0.result == "passed" }.count >= 8, "its view was checked under version 1")
        // The table as a person reads it.
        let table = runs[1].1.split(separator: "\n").map(String.init)
        #expect(table.dropFirst().first == "protocol: the service speaks up to version 1, the checker offered up to 2: checked under protocol 1", "\(runs[1].1)")
        #expect(table.contains("30 passed, 2 warnings, 0 failed, 9 skipped"), "\(runs[1].1)")
    }

    @Test("the checker judges only what it saw: a service that exits 1 before any packet fails the handshake and nothing passes (not even the id rule, with no packet to check); an activity that crashes on its second share item fails the share rule naming SIGILL and its fatal error; each table ends with how the process ended and what it wrote to stderr")
    func judgesWhatItSaw() async throws {
        let folder = try TemporaryFolder("remoteview-check", searchable: true)
        defer { folder.remove() }
        let none = try folder.write("false.json", #"{"identifier": "com.example.false", "executable": "/bin/false", "display": {"title": "False"}}"#)
        let crash = try folder.write("crash.json", ServiceFolder.manifest(mode: "share-crash-on-2"))
        let results = try Self.rows([none, crash])
        let (status, rows) = results[0]
        #expect(status == 1 && rows.filter { $0.result == "passed" }.isEmpty, "\(rows.filter { $0.result == "passed" })")
        #expect(rows.filter { $0.result == "failed" }.map(\.rule) == ["handshake.first"], "\(rows.filter { $0.result == "failed" })")
        #expect(rows.first { $0.rule == "handshake.first" }?.seen.contains("the service's process had ended: exited: exited with code 1") == true)
        #expect(rows.first { $0.rule == "ids.increase" }.map { $0.result == "skipped" && $0.seen.hasPrefix("not reached") } == true)
        #expect(rows.filter { $0.result == "ended" }.map(\.seen) == ["exited: exited with code 1", "exited: exited with code 1"], "\(rows.filter { $0.result == "ended" })")

        let (crashStatus, crashRows) = results[1]
        #expect(crashStatus == 1)
        let share = crashRows.first { $0.rule == "share.cancel" }
        #expect(share?.result == "failed" && share?.seen.contains("killed by SIGILL") == true
                && share?.seen.contains("Fatal error: the test share crashes on purpose on item 2") == true, "\(String(describing: share))")
        let ending = crashRows.first { $0.rule == "process.conversation" }
        #expect(ending?.seen.contains("reading item 2: text/uri-list") == true && ending?.seen.contains("killed by SIGILL") == true, "\(String(describing: ending))")
        #expect(crashRows.first { $0.rule == "exit.fd3" }?.seen == "not reached: the process had ended before fd 3 closed")
        #expect(childProcesses().isEmpty, "the checkers and their services are gone")
    }

    @Test("deliberately broken services (the C activity with --break=RULE) fail on the right rule, and only on it")
    func brokenServices() async throws {
        try #require(Syscall.isRegularFile(Self.cActivity), "build the C activity first: make -C Examples/uppercase-c (make test does)")
        let broken = [("ids", "ids.increase"), ("idle-goodbye", "idle.goodbye"), ("commit-early", "view.one-frame-in-flight"),
                      ("buffer-size", "view.buffer-size"), ("fd3-exit", "exit.fd3"), ("identifier", "handshake.identifier"),
                      ("tree-depth", "tree.bounds")]
        let folder = try TemporaryFolder("remoteview-check")
        defer { folder.remove() }
        let manifests = try broken.map { breaking, _ in
            try folder.write("\(breaking).json", """
                {"identifier": "com.example.uppercase-c", "executable": "\(Self.cActivity)", "arguments": ["--break=\(breaking)"],
                 "display": {"title": "Broken"}, "idleTimeout": 10}
                """)
        }
        for ((breaking, rule), (status, rows)) in zip(broken, try Self.rows(manifests)) {
            #expect(status == 1, "--break=\(breaking)")
            let failed = rows.filter { $0.result == "failed" }
            #expect(failed.map(\.rule) == [rule], "--break=\(breaking): \(failed.map { "\($0.rule): \($0.seen)" })")
        }
        #expect(childProcesses().isEmpty, "the checkers and their services are gone")
    }

    @Test("a view whose tree keeps the protocol's bounds but names no button and lays a label out of sight fails tree.buttons-labelled and tree.frames-inside, and only them")
    func sloppyTree() async throws {
        let folder = try Self.fixture("tree-sloppy")
        defer { folder.remove() }
        let (status, rows) = try Self.rows([folder.path + "/service.json"])[0]
        #expect(status == 1)
        let failed = rows.filter { $0.result == "failed" }
        #expect(failed.map(\.rule) == ["tree.buttons-labelled", "tree.frames-inside"], "\(failed.map { "\($0.rule): \($0.seen)" })")
        #expect(failed.first?.seen.contains("button without a label: node") == true, "\(failed)")
        #expect(failed.last?.seen.contains("(label \"Out of sight\") at 100×20 at (600, 10)") == true, "\(failed)")
        #expect(rows.first { $0.rule == "tree.arrives" }?.result == "passed")
    }

    @Test("the table names the service, each rule with its result and what was seen, and the counts; a bad manifest exits 2 naming the problem")
    func table() async throws {
        let folder = try Self.fixture("serve")
        defer { folder.remove() }
        let (status, output) = try Self.check([folder.path + "/service.json"])
        #expect(status == 0)
        let lines = output.split(separator: "\n").map(String.init)
        #expect(lines.first == "com.example.test (\(folder.path)/service.json)", "\(output)")
        #expect(lines.contains { $0.hasPrefix("request.unknown") && $0.contains("passed") && $0.contains("handles no request of type") }, "\(output)")
        #expect(lines.dropFirst().first == "protocol: the service speaks up to version 2, the checker offered up to 2: checked under protocol 2", "\(output)")
        #expect(lines.contains("18 passed, 0 warnings, 0 failed, 23 skipped"), "\(output)")
        // It ends with how each run's process ended.
        // (The SDK exits 1 when its host vanishes without a goodbye, as fd 3 closing is here.)
        #expect(lines.contains { $0.hasPrefix("process (conversation run): exited: exited with code 1; stderr: ") }
                && lines.last == "process (idle exit run): exited: exited with code 0", "\(output)")

        _ = try folder.write("bad.json", #"{"identifier": "com.example.bad", "executable": "x", "display": {"title": "Bad"}, "colour": 1}"#)
        let (badStatus, badOutput) = try Self.check([folder.path + "/bad.json"])
        #expect(badStatus == 2)
        #expect(badOutput.contains("colour: unknown key"), "\(badOutput)")
    }
}
