// `demo-share view`: the Notes activity presented headless and driven through a fixed
// interaction (type, resize, dark style, save), with a snapshot after each step: how the
// README's screenshot is made.
import ArgumentParser
import RemoteHost
import RemoteService

struct ViewDemo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "view",
        abstract: "Share a text and a URL with Notes headless, drive its view (type, resize, dark style, save) and write a PNG after each step.")

    @OptionGroup var options: HostOptions

    @Option(help: ArgumentHelp("The folder to write the snapshots into (made if missing).", valueName: "dir"))
    var snapshot: String

    @Option(help: ArgumentHelp("The view's size in points.", valueName: "WxH"))
    var size = "480x360"

    @Option(help: ArgumentHelp("Pixels per point, in thousandths (2000: a 2× display).", valueName: "n"))
    var scalePermille = 1000

    func validate() throws {
        _ = try parseSize(size)
    }

    /// The steps, for a `width` × `height` view that turns to `height` × `width` midway.
    static func script(width: Int, height: Int) -> ShareScript {
        let lines = [
            "wait ready", "snapshot 0-presented",
            "key backspace", "type into \"Note\"  — what a view!", "snapshot 1-typed",
            "resize \(height)x\(width)", "snapshot 2-resized",
            "style dark", "snapshot 3-dark",
            "click button \"Save\"", "wait outcome", "snapshot 4-saved",
        ]
        return try! ShareScript(parsing: lines.joined(separator: "\n"), source: "the view demo's script")
    }

    func run() async throws {
        Syscall.lineBufferStandardOutput()
        let (width, height) = try parseSize(size)
        try makeFolder(snapshot, for: "--snapshot")
        let share = HeadlessShare(activity: DemoScenario.notes.identifier, items: try DemoScenario.notes.items(),
                                  script: Self.script(width: width, height: height), width: width, height: height,
                                  scalePermille: scalePermille, snapshotFolder: snapshot, outputFolder: nil,
                                  timeout: .seconds(30), reporter: ShareReporter(json: false))
        _ = try await share.run(registry: try options.registry(), preferences: options.sharePreferences(), configuration: options.launcherConfiguration())
    }
}
