import FoundationEssentials
import Glibc
import RemoteHost
import RemoteTestSupport
import Testing

/// `demo-share list`: what the share sheet offers for some items, from the demo's manifests,
/// with `--explain` why the others are not offered; nothing is launched.
@Suite("demo-share list", .serialized)
struct DemoListTests {
    struct Report: Decodable {
        struct Activity: Decodable { var identifier: String; var title: String; var hasIcon: Bool }
        struct NotOffered: Decodable { var identifier: String; var reason: String; var blockingItems: [Int] }
        var offered: [Activity]
        var notOffered: [NotOffered]?
    }

    /// Runs `demo-share ARGUMENTS` and returns its exit status and standard output.
    static func demoShare(_ arguments: [String]) throws -> (Int32, String) {
        let executable = testServiceExecutable.replacing("remoteview-test-service", with: "demo-share")
        return try runCommands([[executable] + arguments])[0]
    }

    static func report(_ arguments: [String]) throws -> Report {
        let (status, output) = try demoShare(["list", "--json", "--explain"] + arguments)
        try #require(status == 0, "\(output)")
        return try JSONDecoder().decode(Report.self, from: Data(output.utf8))
    }

    @Test("a text and a URL: Notes, with its icon; Post and Markup say why not, naming the items that block them")
    func textAndURL() throws {
        let report = try Self.report(["--text", "hello", "--url", "https://example.com/a"])
        #expect(report.offered.map(\.identifier) == ["com.example.demo-share.notes"])
        #expect(report.offered.first?.hasIcon == true, "the icon is read from the manifest, before anything runs")
        let reasons = Dictionary(uniqueKeysWithValues: (report.notOffered ?? []).map { ($0.identifier, $0.reason) })
        #expect(reasons["com.example.demo-share.markup"] == #"accepts no text/plain: "hello"; accepts no text/uri-list: example.com; needs at least 1 image/*, 0 given"#, "\(reasons)")
        #expect(reasons["com.example.demo-share.post"] == #"accepts at most 1 text/plain — the URL counts as text/plain here, so 2 were given: "hello" and example.com; needs at least 1 image/*, 0 given"#,
                "\(reasons)")
        #expect(report.notOffered?.map(\.blockingItems) == [[0, 1], [0, 1]], "\(String(describing: report.notOffered))")
        #expect(reasons.keys.sorted() == ["com.example.demo-share.markup", "com.example.demo-share.post"],
                "only share activities are explained (Animation, Clock and Echo declare no activation rules): \(reasons.keys.sorted())")
    }

    @Test("two images: Post takes them, Markup takes only one, the image/* wildcard through shared-mime-info")
    func images() throws {
        let folder = try TemporaryFolder("remoteview-list")
        defer { folder.remove() }
        let image = RemoteImage(width: 4, height: 4) { _, _ in 0xFF00_80FF }
        try image.writePNG(to: folder.path + "/a.png")
        try image.writePNG(to: folder.path + "/b.png")
        let report = try Self.report(["--image", folder.path + "/a.png", "--image", folder.path + "/b.png"])
        #expect(report.offered.map(\.identifier) == ["com.example.demo-share.post"])
        let reasons = Dictionary(uniqueKeysWithValues: (report.notOffered ?? []).map { ($0.identifier, $0.reason) })
        #expect(reasons["com.example.demo-share.markup"] == "accepts at most 1 image/*, 2 given: a.png and b.png", "\(reasons)")
        #expect(reasons["com.example.demo-share.notes"]?.contains("accepts no image/png: a.png and b.png") == true, "\(reasons)")
    }

    @Test("no items and a bad URL: clear errors, nothing offered")
    func badInput() throws {
        let (status, output) = try Self.demoShare(["list", "--url", "not a url"])
        #expect(status != 0)
        #expect(output.contains("URL \"not a url\""), "\(output)")
    }
}

extension DemoListTests {
    @Test("a share activity written as ServiceMain.exit(sharing:) takes its identifier and title from the launcher; started by hand, without them, it exits 64 saying so")
    func activityOutsideALauncher() throws {
        let (status, output) = try Self.demoShare(["activity", "notes"])
        #expect(status == 64 && output.contains("REMOTEVIEW_IDENTIFIER is not set"), "\(status): \(output)")
    }
}

extension DemoListTests {
    @Test("install, shadow, uninstall and paths: an installed activity is offered after the demo's own; the user's shadows the system's (with a warning naming both); uninstalled, the system's comes back; paths lists every folder in order")
    func installedActivities() throws {
        let folder = try TemporaryFolder("remoteview-installed")
        defer { folder.remove() }
        let system = folder.path + "/system/remoteview/manifests"
        _ = try runCommands([["/bin/mkdir", "-p", system]])
        let demo = testServiceExecutable.replacing("remoteview-test-service", with: "demo-share")
        func run(_ arguments: [String]) throws -> (Int32, String) {
            try runCommands([["/usr/bin/env", "XDG_DATA_HOME=\(folder.path)/home", "XDG_DATA_DIRS=\(folder.path)/system:/usr/share", demo] + arguments])[0]
        }
        let manifest = UppercaseShareTests.repository + "/Examples/uppercase-c/uppercase.json"
        let (installed, said) = try run(["install", manifest])
        let user = "\(folder.path)/home/remoteview/manifests/com.example.uppercase-c.json"
        #expect(installed == 0 && said.contains("installed com.example.uppercase-c at \(user)"), "\(said)")
        let copy = try String(decoding: Data(contentsOf: URL(filePath: user)), as: UTF8.self)
        #expect(copy.contains("\"executable\" : \"\(UppercaseShareTests.repository)/Examples/uppercase-c/uppercase-share\""), "the executable is made absolute: \(copy)")
        // A system copy of the same identifier, under another title.
        _ = try runCommands([["/bin/sh", "-c", "sed 's/UPPERCASE (C)/System copy/' '\(user)' > '\(system)/com.example.uppercase-c.json'"]])
        let (listed, list) = try run(["list", "--text", "hi"])
        #expect(listed == 0 && list.contains("UPPERCASE (C)") && !list.contains("System copy"), "\(list)")
        #expect(list.contains("the user's \"com.example.uppercase-c\" shadows the one installed at \(system)/com.example.uppercase-c.json"), "\(list)")
        let (paths, lines) = try run(["paths"])
        #expect(paths == 0 && lines.split(separator: "\n").map { $0.split(separator: ":").first.map(String.init) ?? "" } == ["demo", "user", "system", "system"], "\(lines)")
        #expect(try run(["uninstall", "com.example.uppercase-c"]).1.contains("uninstalled com.example.uppercase-c"))
        let (_, after) = try run(["list", "--text", "hi"])
        #expect(after.contains("System copy"), "the system's comes back: \(after)")
        let (missing, why) = try run(["uninstall", "com.example.uppercase-c"])
        #expect(missing != 0 && why.contains("is not installed for this user"), "\(why)")
        let (bad, refused) = try run(["install", folder.path + "/nothing.json"])
        #expect(bad != 0 && refused.contains("not installed:"), "\(refused)")
    }
}

extension DemoListTests {
    struct ActivitiesReport: Decodable {
        struct Activity: Decodable { var identifier: String; var enabled: Bool; var completedShares: [String: Int] }
        var state: String
        var activities: [Activity]
    }

    @Test("two hosts sharing at once are both counted in one preferences file; an activity turned off is not offered (why-not says so), cannot be shared with, and comes back when turned on")
    func rankingAndChoice() throws {
        let folder = try TemporaryFolder("remoteview-preferences")
        defer { folder.remove() }
        let demo = testServiceExecutable.replacing("remoteview-test-service", with: "demo-share")
        let script = folder.path + "/save.txt"
        try Data("wait ready\nclick button \"Save\"\nwait outcome\n".utf8).write(to: URL(filePath: script))
        func command(_ arguments: [String]) -> [String] {
            ["/usr/bin/env", "XDG_STATE_HOME=\(folder.path)/state", demo] + arguments
        }
        func share(_ text: String) -> [String] {
            command(["share", "--activity", "notes", "--text", text, "--script", script, "--timeout", "20"])
        }
        // Two hosts at once, each a process of its own completing a share.
        let shares = try runCommands([share("one"), share("two")])
        for (status, output) in shares { #expect(status == 0 && output.contains("outcome: completed"), "\(output)") }
        let (listed, json) = try runCommands([command(["activities", "--json"])])[0]
        try #require(listed == 0, "\(json)")
        let report = try JSONDecoder().decode(ActivitiesReport.self, from: Data(json.utf8))
        #expect(report.state == "\(folder.path)/state/remoteview/share-sheet.json")
        let notes = try #require(report.activities.first { $0.identifier == "com.example.demo-share.notes" })
        #expect(notes.enabled && notes.completedShares == ["text": 2], "both shares counted: \(json)")

        // Off: not offered, and why-not says so; a share with it is refused, naming why.
        let (disabled, said) = try runCommands([command(["activities", "--disable", "notes"])])[0]
        #expect(disabled == 0 && said.contains("com.example.demo-share.notes turned off"), "\(said)")
        let (_, list) = try runCommands([command(["list", "--json", "--explain", "--text", "hi"])])[0]
        let off = try JSONDecoder().decode(Report.self, from: Data(list.utf8))
        #expect(off.offered.isEmpty)
        #expect(off.notOffered?.first { $0.identifier == "com.example.demo-share.notes" }?.reason == "turned off by the user", "\(list)")
        let (refused, why) = try runCommands([share("three")])[0]
        #expect(refused != 0 && why.contains("does not take these items: turned off by the user"), "\(why)")
        let (_, table) = try runCommands([command(["activities"])])[0]
        #expect(table.contains("off  com.example.demo-share.notes"), "\(table)")
        // --no-preferences: the host's own choice, everything offered.
        let (_, ignoring) = try runCommands([command(["list", "--json", "--no-preferences", "--text", "hi"])])[0]
        #expect(try JSONDecoder().decode(Report.self, from: Data(ignoring.utf8)).offered.map(\.identifier) == ["com.example.demo-share.notes"])

        // On again; an unknown identifier is named.
        #expect(try runCommands([command(["activities", "--enable", "notes"])])[0].output.contains("turned on"))
        let (_, back) = try runCommands([command(["list", "--json", "--text", "hi"])])[0]
        #expect(try JSONDecoder().decode(Report.self, from: Data(back.utf8)).offered.map(\.identifier) == ["com.example.demo-share.notes"])
        let (unknown, named) = try runCommands([command(["activities", "--disable", "com.example.nope"])])[0]
        #expect(unknown != 0 && named.contains("no share activity com.example.nope is registered (the share activities: "), "\(named)")
    }

    @Test("a corrupt preferences file: the sheet opens all the same, with a warning on standard error, and the file is moved aside")
    func corruptPreferences() throws {
        let folder = try TemporaryFolder("remoteview-preferences")
        defer { folder.remove() }
        _ = try runCommands([["/bin/mkdir", "-p", folder.path + "/remoteview"]])
        try Data("{\"version\": 1, \"activities\": 7}".utf8).write(to: URL(filePath: folder.path + "/remoteview/share-sheet.json"))
        let demo = testServiceExecutable.replacing("remoteview-test-service", with: "demo-share")
        let (status, output) = try runCommands([["/usr/bin/env", "XDG_STATE_HOME=\(folder.path)", demo, "list", "--text", "hi"]])[0]
        #expect(status == 0 && output.contains("com.example.demo-share.notes"), "\(output)")
        #expect(output.contains("was unreadable") && output.contains("share-sheet.json.corrupt"), "\(output)")
        #expect(Syscall.isRegularFile(folder.path + "/remoteview/share-sheet.json.corrupt"))
    }
}
