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
