// The fixture's share activity ("share" and "share-ignore-cancel" modes): a green view, and
// requests on the share's own connection that make it report, progress, finish, or break the
// share's rules, for ShareSessionTests.
import RemoteService

final class ShareTestController: ViewController {
    /// Whether it ignores the host's share_cancel (so the host must stop it).
    let ignoresCancel: Bool
    /// The item whose reading crashes it (1-based), as a word counter with a bug would.
    let crashesOnItem: Int?
    private(set) var begun = 0
    /// What "share.note" wrote: the view's restorable state.
    private var note = ""
    /// The note it was restored with, if any.
    private var restoredNote: String?

    override func encodeRestorableState() -> [UInt8]? { note.isEmpty ? nil : Array(note.utf8) }

    /// Typed text goes into the note (a frame shows that something changed).
    override func insertText(_ text: String) {
        note += text
        view.setNeedsDisplay()
    }

    override func restoreState(from state: [UInt8]) {
        note = String(decoding: state, as: UTF8.self)
        restoredNote = note
    }

    init(ignoresCancel: Bool, crashesOnItem: Int? = nil) {
        self.ignoresCancel = ignoresCancel
        self.crashesOnItem = crashesOnItem
    }

    override func loadView() {
        view = CanvasView { context, bounds in context.fill(bounds, with: Color(red: 0, green: 1, blue: 0)) }
    }

    override func beginRequest(with context: ExtensionContext) {
        begun += 1
    }

    override func viewDidAppear() {
        for (index, item) in (extensionContext?.inputItems ?? []).enumerated() {
            Syscall.writeStandardError("reading item \(index + 1): \(item.contentType)\n")
            if index + 1 == crashesOnItem { fatalError("the test share crashes on purpose on item \(index + 1)") }
        }
        extensionContext?.update(title: "Test share", subtitle: "\(extensionContext?.inputItems.count ?? 0) items")
        extensionContext?.setProgress(nil, state: .ready)
    }

    override func requestCancelled(reason: String) {
        if !ignoresCancel { extensionContext?.cancel() }
    }

    override func handleRequest(_ request: ServiceMessage) async throws -> ServiceMessage? {
        guard let context = extensionContext else { return nil }
        let words = (request.text ?? "").split(separator: " ", maxSplits: 1).map(String.init)
        switch request.type {
        case "share.items":
            // One line per item: kind, type, size, name or text, and (files) the bytes as hex.
            let lines = try context.inputItems.map { item -> String in
                switch item.content {
                case .text(let text): return "text \(item.contentType) \(item.size) \(text)"
                case .url(let url): return "url \(item.contentType) \(item.size) \(url)"
                case .file(let file): return "file \(item.contentType) \(item.size) \(file.name) \(try item.data(limit: 1 << 20).map { String($0, radix: 16) }.joined(separator: ","))"
                }
            }
            return ServiceMessage(type: "share.items", text: "begun \(begun)\n" + lines.joined(separator: "\n"))
        case "share.note":
            // Kept in the state, which goes with the next frame the host shows: one is drawn.
            note = request.text ?? ""
            view.setNeedsDisplay()
            return ServiceMessage(type: "ok")
        case "share.restored":
            return ServiceMessage(type: "share.restored", text: restoredNote ?? "none")
        case "share.progress":
            context.setProgress(Double(words.first ?? "") ?? 0, state: .working)
            return ServiceMessage(type: "ok")
        case "share.complete":
            // The first text upper-cased, and every file's bytes reversed, as "NAME.reversed".
            var items: [ShareItem] = []
            if let text = context.inputItems.compactMap(\.text).first { items.append(try .text(text.uppercased())) }
            for item in context.inputItems {
                guard let name = item.fileName else { continue }
                items.append(try .file(named: name + ".reversed", contentType: item.contentType, contents: try item.data(limit: 1 << 20).reversed()))
            }
            context.complete(returning: items)
            return ServiceMessage(type: "ok")
        case "share.fail":
            context.cancel(error: ServiceFailure(domain: "test", code: 1, message: request.text ?? "failed"))
            return ServiceMessage(type: "ok")
        case "share.complete-twice":
            // Past the SDK (which ignores a second answer): the raw rule breaking of a hostile service.
            context.complete()
            try await connection?.send(ShareMessage.complete(.completed, items: [], message: ""))
            return ServiceMessage(type: "ok")
        default:
            return nil
        }
    }
}

/// The "uppercase" mode: the Swift twin of `Examples/uppercase-c`, drawn the same way (white,
/// the text at (16, 16) in 16-point DejaVu Sans, a #2F6FED button of 160×40 points 16 points from
/// the bottom-left corner), so that one share test runs both. A click on the button, or Return,
/// completes with the text upper-cased; typed text is added to it first.
final class UppercaseController: ViewController {
    private var text = ""
    private var finished = false
    private static let blue = Color(argb: 0xFF2F_6FED)

    private func button(in bounds: Rect) -> Rect {
        Rect(x: 16, y: bounds.height - 56, width: 160, height: 40)
    }

    private lazy var canvas = CanvasView { [unowned self] context, bounds in
        context.fill(bounds, with: .white)
        context.draw(text, at: Point(x: 16, y: 32), font: Font(family: "DejaVu Sans", size: 16), color: .black)
        let button = button(in: bounds)
        context.fill(button, with: Self.blue)
        context.draw("UPPERCASE", at: Point(x: button.minX + 12, y: button.minY + 26), font: Font(family: "DejaVu Sans", size: 16), color: .white)
    }

    override func loadView() {
        text = extensionContext?.inputItems.first?.text ?? ""
        view = canvas
    }

    override func viewDidAppear() {
        extensionContext?.setProgress(nil, state: .ready)
    }

    override func insertText(_ typed: String) {
        guard !finished else { return }
        text += typed
        canvas.setNeedsDisplay()
    }

    override func keyDown(_ event: KeyEvent) {
        if event.keyCode == KeyCode.enter { finish() }
    }

    override func pointerUp(_ event: PointerEvent) {
        if button(in: canvas.bounds).contains(Point(x: event.x, y: event.y)) { finish() }
    }

    private func finish() {
        guard !finished, let context = extensionContext else { return }
        finished = true
        context.setProgress(0.5, state: .working)
        context.setProgress(1, state: .done)
        let upper = String(text.map { $0.isASCII ? Character($0.uppercased()) : $0 })  // ASCII only, as the C twin
        do { context.complete(returning: [try .text(upper)]) } catch { context.cancel(error: error) }
        text = upper
        canvas.setNeedsDisplay()
    }
}
