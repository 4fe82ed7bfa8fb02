// What the demo's three share activities have in common.
import RemoteService

/// A demo activity's controller: its sheet on the traits' background, *ready* once the host
/// shows it, a status line, and the keyboard: Tab through the controls, Escape presses the
/// sheet's first button (Cancel) and Return its last (Save, Post, Done), when enabled.
class ActivityController: ViewController {
    let status = Label(text: "", font: .caption, numberOfLines: 2)

    /// Builds the sheet; `content` sits between the heading and `buttons`: Cancel first, which
    /// Escape presses, and the activity's own action last, which Return presses.
    func makeSheet(title: String, content: View, buttons: [Button]) -> SheetView {
        cancelActionButton = buttons.first
        defaultActionButton = buttons.count > 1 ? buttons.last : nil
        let sheet = SheetView(title: title, content: content, buttons: buttons)
        sheet.backgroundColor = traits.backgroundColor
        return sheet
    }

    /// The items, or `nil` (with the sheet saying so) when the view was shown without a share.
    var items: [ShareItem]? {
        extensionContext?.inputItems
    }

    /// Whether the share still waits for its answer.
    var isOpen: Bool {
        guard let context = extensionContext else { return false }
        return !context.isFinished
    }

    override func viewDidLoad() {
        if extensionContext == nil { status.text = "Nothing was shared: a host shows this view through a share sheet." }
    }

    override func viewDidAppear() {
        guard isOpen else { return }
        extensionContext?.setProgress(nil, state: .ready)
    }

    /// The user backed out.
    func cancel() {
        guard isOpen else { return }
        status.text = "Cancelled."
        extensionContext?.cancel()
    }

    /// The share could not be done: it ends as failed with `message`, which the sheet shows.
    func fail(_ message: String) {
        status.text = message
        guard isOpen else { return }
        extensionContext?.cancel(error: ActivityFailure(message: message))
    }

    // MARK: restorable state

    /// The text field whose text, caret and focus come back when the activity's process is
    /// relaunched after it ended (a crash, `kill -9`): the note half typed.
    var restorableField: TextField? { nil }

    /// What the state's first value says, so that a state of another layout is not misread.
    static let stateFormat = "demo-share.field.1"

    override func encodeRestorableState() -> [UInt8]? {
        guard let field = restorableField else { return nil }
        var archive = StateArchive()
        archive.append(Self.stateFormat)
        archive.append(field.text)
        archive.append(field.selection.lowerBound)
        archive.append(field.selection.upperBound)
        archive.append(field.isFirstResponder)
        return archive.bytes
    }

    override func restoreState(from state: [UInt8]) {
        guard let field = restorableField else { return }
        var reader = StateArchive.Reader(state)
        guard reader.string() == Self.stateFormat, let text = reader.string(), let lower = reader.int(), let upper = reader.int(),
              let focused = reader.bool(), reader.isAtEnd else { return }
        field.text = text
        let count = text.count
        field.selection = min(max(lower, 0), count)..<min(max(upper, lower, 0), count)
        if focused { field.becomeFirstResponder() }
        field.onChange?(field)
    }
}

/// Why an activity could not do its work (the share's *failed* message).
struct ActivityFailure: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}
