// `demo-share share`: a whole share, headless: the sheet, the activity launched in its sandbox,
// its view presented and driven by a script, a progress bar from its updates, and its outcome.
import ArgumentParser
import RemoteHost

struct ShareCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share",
        abstract: "Share items with an activity headless: present its view, drive it with a script, show its progress and outcome (the default command).",
        discussion: """
            With no items, a demo activity gets its demo items (Notes: a text and a URL; Post: a caption \
            and two pictures; Markup: a picture) and, with no --script either, its built-in script, which \
            finishes the share: `demo-share` alone shares a text and a URL with Notes, types, and saves.

            Without a script the view is presented and the command waits --timeout seconds for the \
            outcome. Nobody can click a headless view, so an activity that waits for the user (all three \
            demo ones do) needs a script that finishes it.

            \(ShareScript.usage)
            """)

    @Option(help: ArgumentHelp("The activity: its identifier, or notes, post or markup for the demo's.", valueName: "id"))
    var activity = "notes"

    @OptionGroup var items: ShareItemOptions

    @Option(help: ArgumentHelp("A script of input and waits to run against the activity's view (see below).", valueName: "file"))
    var script: String?

    @Option(help: ArgumentHelp("The folder the script's snapshots go into (made if missing).", valueName: "dir"))
    var snapshot: String?

    @Option(help: ArgumentHelp("The folder to write the returned items into (made if missing): files by their names, text as item-N.txt.",
                               valueName: "dir"))
    var output: String?

    @Flag(help: "Print JSON lines (each activity update, then the outcome) instead of text.")
    var json = false

    @Option(help: ArgumentHelp("The view's size in points.", valueName: "WxH"))
    var size = "480x360"

    @Option(help: ArgumentHelp("Pixels per point, in thousandths (2000: a 2× display).", valueName: "n"))
    var scalePermille = 1000

    @Option(help: ArgumentHelp("How long each wait, and the wait for the outcome, may take.", valueName: "seconds"))
    var timeout = 30.0

    @OptionGroup var options: HostOptions

    /// The identifier `--activity` names.
    static func identifier(_ name: String) -> String {
        DemoScenario(rawValue: name.lowercased())?.identifier ?? name
    }

    func validate() throws {
        guard timeout > 0, timeout <= 3600 else { throw ValidationError("--timeout must be more than 0 and at most 3600 seconds, not \(timeout)") }
        _ = try parseSize(size)
    }

    func run() async throws {
        Syscall.lineBufferStandardOutput()
        let (width, height) = try parseSize(size)
        let identifier = Self.identifier(activity)
        let scenario = DemoScenario(identifier: identifier)
        var shared = try items.items()
        var script = try self.script.map { path throws -> ShareScript in
            guard let bytes = Syscall.readSmallFile(path, limit: 1 << 20), let text = String(validating: bytes, as: UTF8.self) else {
                throw DemoError("--script \(path): cannot read it as UTF-8 text (at most 1 MiB)")
            }
            do { return try ShareScript(parsing: text, source: path) } catch { throw DemoError("\(error)") }
        }
        if shared.isEmpty {
            guard let scenario else {
                throw DemoError("no items to share: give --text, --url, --image or --file (only the demo's activities have demo items)")
            }
            shared = try scenario.items()
            if script == nil { script = scenario.script(width: width, height: height, snapshots: snapshot != nil) }
        }
        if let script, script.takesSnapshots, snapshot == nil {
            throw DemoError("\(script.source) writes snapshots: give --snapshot DIR")
        }
        if let snapshot { try makeFolder(snapshot, for: "--snapshot") }
        if let output { try makeFolder(output, for: "--output") }
        let share = HeadlessShare(activity: identifier, items: shared, script: script, width: width, height: height,
                                  scalePermille: scalePermille, snapshotFolder: snapshot, outputFolder: output,
                                  timeout: .milliseconds(Int64((timeout * 1000).rounded())), reporter: ShareReporter(json: json))
        let outcome = try await share.run(registry: try options.registry(), preferences: options.sharePreferences(), configuration: options.launcherConfiguration())
        switch outcome {
        case .completed, .cancelled: break
        case .failed, .interrupted: throw ExitCode.failure
        }
    }
}
