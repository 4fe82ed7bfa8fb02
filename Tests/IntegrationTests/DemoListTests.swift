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
        struct NotOffered: Decodable { var identifier: String; var reason: String }
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

    @Test("a text and a URL: Notes, with its icon; Post and Markup say why not")
    func textAndURL() throws {
        let report = try Self.report(["--text", "hello", "--url", "https://example.com/a"])
        #expect(report.offered.map(\.identifier) == ["com.example.demo-share.notes"])
        #expect(report.offered.first?.hasIcon == true, "the icon is read from the manifest, before anything runs")
        let reasons = Dictionary(uniqueKeysWithValues: (report.notOffered ?? []).map { ($0.identifier, $0.reason) })
        #expect(reasons["com.example.demo-share.markup"] == "accepts no text/plain; accepts no text/uri-list; needs at least 1 image/*, 0 given", "\(reasons)")
        #expect(reasons["com.example.demo-share.post"]?.contains("needs at least 1 image/*, 0 given") == true, "\(reasons)")
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
        #expect(reasons["com.example.demo-share.markup"] == "accepts at most 1 image/*, 2 given", "\(reasons)")
        #expect(reasons["com.example.demo-share.notes"]?.contains("accepts no image/png") == true, "\(reasons)")
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
