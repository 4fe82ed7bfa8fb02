// `demo-share list`: what a share sheet would offer for some items, and, with --explain, why
// it would not offer the others. Decided from the manifests alone: nothing is launched.
import ArgumentParser
import FoundationEssentials
import RemoteHost

struct ListCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List the share activities that take the given items (with no items: the Notes demo's text and URL).",
        discussion: """
            Each activity is a service whose manifest's activation rules accept the items' MIME types \
            (docs/Manifest.md, "Activation"); nothing is launched to decide.
            """)

    @OptionGroup var items: ShareItemOptions

    @Flag(help: "Also list the activities not offered, each with the reason.")
    var explain = false

    @Flag(help: "Print JSON instead of a table.")
    var json = false

    @OptionGroup var options: HostOptions

    func run() throws {
        let shared = items.isEmpty ? try DemoScenario.notes.items() : try items.items()
        let sheet = ShareSheet(registry: try options.registry(), items: shared, preferences: options.sharePreferences())
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            print(String(jsonForTerminal: try encoder.encode(ListReport(sheet, explain: explain))))
            return
        }
        print("items: " + shared.map(\.description).joined(separator: ", "))
        if sheet.activities.isEmpty {
            print("no activity takes these items\(explain ? "" : " (--explain says why)")")
        } else {
            var rows = [["IDENTIFIER", "TITLE", "SUBTITLE", "ICON"]]
            for activity in sheet.activities {
                rows.append([activity.identifier, activity.title, activity.subtitle ?? "-", activity.icon == nil ? "no" : "yes"])
            }
            print(Table.render(rows))
        }
        if explain, !sheet.explanations.isEmpty {
            print("\nnot offered:")
            print(Table.render([["IDENTIFIER", "TITLE", "REASON"]]
                + sheet.explanations.map { [$0.activity.identifier, $0.activity.title, $0.reason] }))
        }
    }
}

/// `demo-share list --json`.
struct ListReport: Encodable {
    struct Activity: Encodable {
        var identifier: String
        var title: String
        var subtitle: String?
        var hasIcon: Bool
    }

    struct NotOffered: Encodable {
        var identifier: String
        var title: String
        var reason: String
        /// Indices into `items` of the items that block the offer.
        var blockingItems: [Int]
    }

    var items: [String]
    var offered: [Activity]
    /// Only with --explain.
    var notOffered: [NotOffered]?

    init(_ sheet: ShareSheet, explain: Bool) {
        items = sheet.items.map(\.description)
        offered = sheet.activities.map { Activity(identifier: $0.identifier, title: $0.title, subtitle: $0.subtitle, hasIcon: $0.icon != nil) }
        notOffered = explain ? sheet.explanations.map { NotOffered(identifier: $0.activity.identifier, title: $0.activity.title, reason: $0.reason, blockingItems: $0.blockingItems) } : nil
    }
}

/// Columns padded to their widest cell; the last column is not padded. Every cell is escaped for
/// the terminal: titles, reasons and termination details are what manifests and services wrote.
enum Table {
    static func render(_ rows: [[String]]) -> String {
        let rows = rows.map { $0.map { $0.escapedForTerminal() } }
        guard let header = rows.first else { return "" }
        let widths = header.indices.map { column in rows.map { $0[column].count }.max() ?? 0 }
        return rows.map { row in
            row.enumerated().map { column, cell in
                column == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[column] - cell.count)
            }.joined(separator: "  ")
        }.joined(separator: "\n")
    }
}
