// The fixture's UIs, built with the service toolkit: what the remote view tests drive.
import RemoteService

/// The "view" mode: a blue background and the rects "paint RRGGBB x y width height" requests
/// add (in pixels at scale 1), each damaging only its rect.
final class PaintController: ViewController {
    private var rects: [(Rect, Color)] = []
    private lazy var canvas = CanvasView { [unowned self] context, bounds in
        context.fill(bounds, with: Color(red: 0, green: 0, blue: 1))
        for (rect, colour) in rects { context.fill(rect, with: colour) }
    }

    override func loadView() { view = canvas }

    override func handleRequest(_ request: ServiceMessage) async throws -> ServiceMessage? {
        guard request.type == "paint" else { return nil }
        let words = (request.text ?? "").split(separator: " ")
        guard words.count == 5, let rgb = UInt32(words[0], radix: 16),
              let x = Double(words[1]), let y = Double(words[2]), let width = Double(words[3]), let height = Double(words[4]) else {
            throw ServiceFailure(domain: "test", code: 1, message: "paint RRGGBB x y width height")
        }
        let rect = Rect(x: x, y: y, width: width, height: height)
        rects.append((rect, Color(argb: 0xFF00_0000 | rgb)))
        canvas.setNeedsDisplay(rect)
        return ServiceMessage(type: "painted")
    }
}

/// The "ui" mode: a screen of the toolkit's controls in a stack, and requests that report and
/// change it:
/// - "layout": each named view's frame in root points, "name x y width height" per line;
/// - "state": what happened, "key: value" per line (count, field, remote, log, unhandled);
/// - "label TEXT": sets the status label's text; "progress VALUE [animated]": sets the bar;
/// - "preferred W H": asks the host for a size;
/// - "pad N": makes its restorable state N bytes longer (its status label says so: a frame).
///
/// Its restorable state is the field's text, selection and focus, the count, and the padding;
/// "state" says how many bytes were restored ("restored"), if any.
final class ScreenController: ViewController {
    let title = Label(text: "Counter", font: .headline)
    let status = Label(text: "count 0")
    let button = Button(title: "Add")
    let field = TextField(placeholder: "Type here")
    let progress = ProgressView()
    let canvas = CanvasView(preferredHeight: 20) { context, bounds in
        context.fill(bounds, with: Color(argb: 0xFF00_8000))
    }
    var count = 0
    /// Bytes added to the restorable state.
    var padding = 0
    /// The size of the state it was restored from.
    var restored: Int?
    var remote: [RemoteCommand] = []
    var log: [String] = []
    /// A clear view over everything that lets pointer events through to what is below it.
    let overlay = View()
    /// A hidden button over everything: hit testing must skip it.
    let hidden = Button(title: "Hidden")
    var hiddenPresses = 0

    override func loadView() {
        let stack = StackView(axis: .vertical, spacing: 10, insets: EdgeInsets(all: 12),
                              arrangedSubviews: [title, status, button, field, progress, canvas])
        stack.backgroundColor = Color(argb: 0xFFF0_F0F0)
        view = stack
    }

    override func viewDidLoad() {
        button.action = { [unowned self] _ in
            count += 1
            status.text = "count \(count)"
        }
        field.onChange = { [unowned self] field in log.append("changed \(field.text)") }
        hidden.isHidden = true
        hidden.action = { [unowned self] _ in hiddenPresses += 1 }
        view.addSubview(hidden)
        overlay.isUserInteractionEnabled = false
        view.addSubview(overlay)
        log.append("loaded")
    }

    override func viewDidResize(to size: Size) {
        overlay.frame = Rect(origin: .zero, size: size)
        hidden.frame = Rect(origin: .zero, size: size)
        log.append("resized \(Int(size.width))x\(Int(size.height))")
    }

    override func viewDidAppear() { log.append("appeared") }

    override func encodeRestorableState() -> [UInt8]? {
        guard !field.text.isEmpty || count > 0 || padding > 0 else { return nil }
        var archive = StateArchive()
        archive.append(field.text)
        archive.append(field.selection.lowerBound)
        archive.append(field.selection.upperBound)
        archive.append(field.isFirstResponder)
        archive.append(count)
        archive.append(bytes: [UInt8](repeating: 0x2E, count: padding))
        return archive.bytes
    }

    override func restoreState(from state: [UInt8]) {
        var reader = StateArchive.Reader(state)
        guard let text = reader.string(), let lower = reader.int(), let upper = reader.int(), let first = reader.bool(),
              let count = reader.int(), let padding = reader.bytes(), reader.isAtEnd, 0 <= lower, lower <= upper, upper <= text.count else {
            log.append("unreadable state")
            return
        }
        field.text = text
        field.selection = lower..<upper
        if first { field.becomeFirstResponder() }
        self.count = count
        status.text = "count \(count)"
        self.padding = padding.count
        restored = state.count
        log.append("restored")
    }
    override func traitsDidChange(from previous: Traits) {
        view.backgroundColor = traits.style == .dark ? Color(argb: 0xFF20_2020) : Color(argb: 0xFFF0_F0F0)
        log.append("traits \(traits.style) \(traits.fontScalePermille)")
    }
    override func focusChanged(_ focused: Bool) { log.append("focus \(focused)") }

    /// Remote-control commands end here, having passed up from whatever had them first.
    override func remoteControlReceived(_ command: RemoteCommand) {
        remote.append(command)
        status.text = "remote \(command)"
    }

    override func handleRequest(_ request: ServiceMessage) async throws -> ServiceMessage? {
        let words = (request.text ?? "").split(separator: " ").map(String.init)
        switch request.type {
        case "layout":
            let named: [(String, View)] = [("title", title), ("status", status), ("button", button), ("field", field),
                                           ("progress", progress), ("canvas", canvas), ("overlay", overlay)]
            let lines = named.map { name, view in
                let frame = view.convert(view.bounds, to: nil)
                return "\(name) \(frame.minX) \(frame.minY) \(frame.width) \(frame.height)"
            }
            return ServiceMessage(type: "layout", text: lines.joined(separator: "\n"))
        case "state":
            return ServiceMessage(type: "state", text: """
                count: \(count)
                hidden: \(hiddenPresses)
                status: \(status.text)
                field: \(field.text)
                selection: \(field.selection.lowerBound) \(field.selection.upperBound)
                first: \(field.isFirstResponder)
                focused: \(field.isFirstResponder ? "field" : button.isFirstResponder ? "button" : "none")
                restored: \(restored.map(String.init) ?? "none")
                remote: \(remote.map { "\($0)" }.joined(separator: ","))
                log: \(log.joined(separator: ","))
                """)
        case "label":
            status.text = words.joined(separator: " ")
            return ServiceMessage(type: "ok")
        case "progress":
            guard let value = words.first.flatMap(Double.init) else { throw ServiceFailure(domain: "test", code: 1, message: "progress VALUE") }
            progress.setProgress(value, animated: words.contains("animated"))
            return ServiceMessage(type: "ok")
        case "missing-glyphs":
            // How many glyphs of the text no font in the sandbox has.
            return ServiceMessage(type: "missing-glyphs", text: String(TextMeasure.missingGlyphs(in: request.text ?? "", font: .body)))
        case "pad":
            padding = Int(words.first ?? "") ?? 0
            status.text = "padded \(padding)"
            return ServiceMessage(type: "ok")
        case "preferred":
            guard words.count == 2, let width = Double(words[0]), let height = Double(words[1]) else {
                throw ServiceFailure(domain: "test", code: 1, message: "preferred W H")
            }
            preferredContentSize = Size(width: width, height: height)
            return ServiceMessage(type: "ok")
        default:
            return nil
        }
    }
}

/// A screen a screen reader reads badly (remoteview-check's tree rules): an unnamed button and a
/// label out of sight past the right edge.
final class SloppyTreeController: ViewController {
    override func loadView() {
        let root = View()
        root.backgroundColor = Color(argb: 0xFFFF_FFFF)
        let unnamed = Button(title: "")
        unnamed.frame = Rect(x: 10, y: 10, width: 40, height: 30)
        let far = Label(text: "Out of sight")
        far.frame = Rect(x: 600, y: 10, width: 100, height: 20)
        root.clipsToBounds = true
        root.addSubview(unnamed)
        root.addSubview(far)
        view = root
    }
}
