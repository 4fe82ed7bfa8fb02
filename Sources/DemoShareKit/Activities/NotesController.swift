// Notes (com.example.demo-share.notes): a compose screen for a shared text and/or URL. Save
// returns the note as one text/plain item: the field's text, then the URL on its own line.
import RemoteService

final class NotesController: ActivityController {
    nonisolated static let identifier = "com.example.demo-share.notes"
    nonisolated static let title = "Notes"

    let sharedText = Label(text: "", font: .caption, numberOfLines: 3)
    let sharedURL = Label(text: "", font: .caption)
    let field = TextField(placeholder: "Write a note…")
    override var restorableField: TextField? { field }
    let cancelButton = Button(title: "Cancel")
    let saveButton = Button(title: "Save")
    /// The URL shared, if one was.
    private(set) var url: String?

    override func loadView() {
        let items = self.items ?? []
        // Text may come inline or as a text/plain file.
        let text = items.first { $0.contentType != "text/uri-list" && $0.contentType.hasPrefix("text/") }.flatMap { try? $0.string(limit: 1 << 20) }
        url = items.lazy.compactMap(\.url).first
        field.text = text ?? ""
        field.selection = field.text.count..<field.text.count
        // The text alone, so that its own direction sets its alignment: Arabic at the right.
        sharedText.text = text.map { "“\($0)”" } ?? "No text shared."
        sharedURL.text = url.map { "Link: \($0)" } ?? ""
        sharedURL.isHidden = url == nil
        let content = StackView(axis: .vertical, spacing: 10, arrangedSubviews: [sharedText, sharedURL, field, status])
        view = makeSheet(title: "New Note", content: content, buttons: [cancelButton, saveButton])
    }

    override func viewDidLoad() {
        super.viewDidLoad()
        cancelButton.tintColor = Color(argb: 0xFF8E_8E93)
        cancelButton.action = { [unowned self] _ in cancel() }
        saveButton.action = { [unowned self] _ in save() }
        field.onChange = { [unowned self] _ in updateSaveButton() }
        field.accessibilityLabel = "Note"
        updateSaveButton()
    }

    override func viewDidAppear() {
        super.viewDidAppear()
        field.becomeFirstResponder()
    }

    /// Save needs something to save.
    private func updateSaveButton() {
        saveButton.isEnabled = isOpen && (!field.text.isEmpty || url != nil)
    }

    /// The note: the field's text, and the URL on its own line.
    var note: String {
        [field.text, url ?? ""].filter { !$0.isEmpty }.joined(separator: "\n")
    }

    private func save() {
        guard let context = extensionContext, isOpen else { return }
        let note = self.note
        guard !note.isEmpty else { return }
        context.update(title: Self.title, subtitle: "Saving the note", progress: nil, state: .working)
        do {
            context.complete(returning: [try .text(note)])
            status.text = "Saved."
        } catch {
            fail("The note cannot be saved: \(error.reason)")
        }
        cancelButton.isEnabled = false
        updateSaveButton()
    }

    override func cancel() {
        super.cancel()
        cancelButton.isEnabled = false
        updateSaveButton()
    }
}
