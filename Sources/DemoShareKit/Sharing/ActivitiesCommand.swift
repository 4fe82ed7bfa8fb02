// `demo-share activities`: every share activity, on or off, and how it ranks; --disable and
// --enable turn one off and on for this user (the share sheet's preferences, docs/Manifest.md
// "Ranking and choice").
import ArgumentParser
import FoundationEssentials
import RemoteHost

struct Activities: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List every share activity, on or off, with its completed shares; turn one off or on for this user.",
        discussion: """
            The choice and the counts are kept in $XDG_STATE_HOME/remoteview/share-sheet.json \
            (by default ~/.local/state/remoteview), which every host that ranks its share sheet \
            reads. An activity turned off is not offered; the share sheet's "why not" says it \
            was turned off.
            """)

    @Option(help: ArgumentHelp("Turn this activity off (its identifier, or notes, post or markup).", valueName: "id"))
    var disable: [String] = []

    @Option(help: ArgumentHelp("Turn this activity on again.", valueName: "id"))
    var enable: [String] = []

    @Flag(help: "Print JSON instead of a table.")
    var json = false

    @OptionGroup var options: HostOptions

    func validate() throws {
        if !options.preferences { throw ValidationError("--no-preferences keeps no choice: drop it") }
    }

    func run() throws {
        let registry = try options.registry()
        guard let preferences = options.sharePreferences() else { return }
        var sheet = ShareSheet(registry: registry, items: [], preferences: preferences)
        for (identifiers, enabled) in [(disable, false), (enable, true)] {
            for identifier in identifiers.map(ShareCommand.identifier) {
                guard sheet.allActivities.contains(where: { $0.identifier == identifier }) else {
                    let known = sheet.allActivities.map(\.identifier).joined(separator: ", ")
                    throw DemoError("no share activity \(identifier.escapedForTerminal()) is registered (the share activities: \(known.isEmpty ? "none" : known.escapedForTerminal()))")
                }
                sheet = try sheet.settingEnabled(enabled, for: identifier)
                print("\(identifier.escapedForTerminal()) turned \(enabled ? "on" : "off")")
            }
        }
        if !disable.isEmpty || !enable.isEmpty { return }
        let uses = preferences.snapshot().uses
        let activities = sheet.allActivities.map { activity in
            ActivitiesReport.Activity(identifier: activity.identifier, title: activity.title, enabled: sheet.isEnabled(activity.identifier),
                                      completedShares: Dictionary(uniqueKeysWithValues: (uses[activity.identifier] ?? [:]).map { ($0.key.rawValue, $0.value.count) }))
        }
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            print(String(jsonForTerminal: try encoder.encode(ActivitiesReport(state: preferences.path, activities: activities))))
            return
        }
        var rows = [["", "IDENTIFIER", "TITLE", "COMPLETED SHARES"]]
        for activity in activities {
            let counts = ShareKind.allCases.compactMap { kind in activity.completedShares[kind.rawValue].map { "\(kind.rawValue) \($0)" } }
            rows.append([activity.enabled ? "on" : "off", activity.identifier, activity.title, counts.isEmpty ? "-" : counts.joined(separator: ", ")])
        }
        print(Table.render(rows))
        print("kept in \(preferences.path.escapedForTerminal())")
    }
}

/// `demo-share activities --json`.
struct ActivitiesReport: Encodable {
    struct Activity: Encodable {
        var identifier: String
        var title: String
        var enabled: Bool
        /// By kind (image, text, url, file).
        var completedShares: [String: Int]
    }

    /// The preferences file.
    var state: String
    var activities: [Activity]
}
