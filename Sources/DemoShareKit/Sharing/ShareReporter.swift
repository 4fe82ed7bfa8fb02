// What `demo-share share` prints: a progress bar driven by the activity's updates (redrawn in
// place on a terminal, one line per update otherwise), the script's steps and the outcome; or,
// with --json, one JSON object per line for each update and the outcome.
import FoundationEssentials
import Glibc
import RemoteHost

final class ShareReporter: Sendable {
    enum Mode: Sendable {
        /// A progress line redrawn with `\r` (standard output is a terminal).
        case terminal
        /// One line per update.
        case lines
        /// One JSON object per line: updates and the outcome only.
        case json
    }

    let mode: Mode
    /// The progress line on screen (terminal mode), redrawn under each note.
    private let bar = Mutex<String?>(nil)

    init(json: Bool) {
        mode = json ? .json : isatty(1) == 1 ? .terminal : .lines
    }

    /// `[#########-----------]  45% working  Posting — image 2 of 4`
    static func progressLine(_ update: ActivityUpdate, width: Int = 20) -> String {
        let gauge: String, percent: String
        if let progress = update.progress {
            let filled = Int((progress * Double(width)).rounded(.down))
            gauge = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
            percent = "\(Int((progress * 100).rounded(.down)))%"
        } else {
            gauge = String(repeating: "~", count: width)
            percent = "--%"
        }
        let padded = String(repeating: " ", count: max(0, 4 - percent.count)) + percent
        let state = update.state.description
        let text = "\(update.title)\(update.subtitle.map { " — \($0)" } ?? "")".escapedForTerminal()
        return "[\(gauge)] \(padded) \(state)\(String(repeating: " ", count: max(0, 9 - state.count))) \(text)"
    }

    func update(_ update: ActivityUpdate) {
        switch mode {
        case .json:
            emit(JSONLine.Update(update))
        case .lines:
            write(Self.progressLine(update) + "\n")
        case .terminal:
            let line = Self.progressLine(update)
            bar.withLock { $0 = line }
            write("\r\u{1B}[K" + line)
        }
    }

    /// A step or a result, on its own line (above the progress bar), escaped for the terminal
    /// (it may quote what the activity said); nothing in JSON mode.
    func note(_ text: String) {
        let text = text.escapedForTerminal()
        switch mode {
        case .json:
            return
        case .lines:
            write(text + "\n")
        case .terminal:
            let line = bar.withLock { $0 }
            write("\r\u{1B}[K" + text + "\n" + (line ?? ""))
        }
    }

    /// The progress line is finished: what follows goes below it.
    func endProgress() {
        guard mode == .terminal, bar.withLock({ line in defer { line = nil }; return line != nil }) else { return }
        write("\n")
    }

    func outcome(_ outcome: ShareOutcome, written: [String?]) {
        endProgress()
        if mode == .json { return emit(JSONLine.Outcome(outcome, written: written)) }
        write("outcome: \(outcome.result)\(outcome.message.map { ": \($0.escapedForTerminal())" } ?? "")\n")
        guard case .completed(let items) = outcome else { return }
        for (index, item) in items.enumerated() {
            let value: String = switch item.content {
            case .text(let text): "“\(text)”"
            case .url(let url): url
            case .file(let file): "\"\(file.name)\", \(file.size) bytes"
            }
            write("  item \(index + 1): \("\(item.contentType) \(value)".escapedForTerminal())\(written[index].map { " → \($0.escapedForTerminal())" } ?? "")\n")
        }
    }

    private func emit(_ value: some Encodable) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(value) else { return }
        write(String(jsonForTerminal: data) + "\n")
    }

    private func write(_ text: String) {
        print(text, terminator: "")
        fflush(nil)
    }
}

extension ShareOutcome {
    /// completed, cancelled, failed or interrupted.
    var result: String {
        switch self {
        case .completed: "completed"
        case .cancelled: "cancelled"
        case .failed: "failed"
        case .interrupted: "interrupted"
        }
    }

    /// What the activity said (or how the share broke off).
    var message: String? {
        switch self {
        case .completed: nil
        case .cancelled(let reason): reason
        case .failed(let message): message
        case .interrupted(let error): error.reason
        }
    }

    /// The returned items (none unless completed).
    var items: [ShareItem] {
        if case .completed(let items) = self { items } else { [] }
    }
}

/// The objects of `--json`, one per line.
enum JSONLine {
    struct Update: Encodable {
        var event = "update"
        var state: String
        var title: String
        var subtitle: String?
        /// `nil`: indeterminate.
        var progress: Double?

        init(_ update: ActivityUpdate) {
            state = update.state.description
            title = update.title
            subtitle = update.subtitle
            progress = update.progress
        }
    }

    struct Outcome: Encodable {
        struct Item: Encodable {
            var kind: String
            var contentType: String
            var size: Int
            var text: String?
            var name: String?
            /// Where --output wrote it.
            var path: String?
        }

        var event = "outcome"
        var result: String
        var message: String?
        var items: [Item]

        init(_ outcome: ShareOutcome, written: [String?]) {
            result = outcome.result
            message = outcome.message
            items = outcome.items.enumerated().map { index, item in
                switch item.content {
                case .text(let text): Item(kind: "text", contentType: item.contentType, size: item.size, text: text, path: written[index])
                case .url(let url): Item(kind: "url", contentType: item.contentType, size: item.size, text: url, path: written[index])
                case .file(let file): Item(kind: "file", contentType: item.contentType, size: item.size, name: file.name, path: written[index])
                }
            }
        }
    }
}
