// The little language `demo-share share --script FILE` drives an activity's view with, one
// command per line. Parsed whole before anything runs, so a mistake is reported (with its line
// number) before the activity is launched.
import RemoteHost

struct ShareScript: Sendable {
    /// A point in the view's points.
    struct Position: Sendable, Hashable {
        var x: Double
        var y: Double
    }

    /// A control named in the view's semantic tree: its role and its label.
    struct Control: Sendable, Hashable, CustomStringConvertible {
        var role: AccessibilityRole
        var name: String
        var description: String { "\(role) \"\(name.escapedForTerminal())\"" }
    }

    enum Command: Sendable, Hashable {
        /// A primary-button press and release at the position.
        case click(Position)
        /// A click at the middle of the control (found in the view's tree, waited for).
        case clickControl(Control)
        /// The control's press action, through the tree (no pointer).
        case press(Control)
        /// Text, as an input method delivers it.
        case type(String)
        /// The text field named so takes the focus (through the tree), then the text is typed.
        case typeInto(field: String, text: String)
        /// A key press (down, then up) with the modifiers held.
        case key(code: UInt32, modifiers: Modifiers)
        /// Press at `from`, `steps` moves to `to`, release there.
        case drag(from: Position, to: Position, steps: Int)
        /// Wait for an activity update in this state.
        case wait(ActivityState)
        /// Wait for the share's outcome.
        case waitOutcome
        /// Let the view draw what is pending, then write NAME.png into the snapshot folder.
        case snapshot(String)
        /// Dismiss the share (share_cancel; the activity answers within the grace period).
        case cancel
        /// Show the view at another size (points).
        case resize(width: Int, height: Int)
        /// Light or dark appearance.
        case style(Traits.Style)
    }

    struct Line: Sendable {
        var number: Int
        var text: String
        var command: Command
    }

    /// A line the script cannot run, by number.
    struct Problem: Error, CustomStringConvertible {
        var source: String
        var line: Int
        var message: String
        var description: String { "\(source):\(line): \(message)" }
    }

    /// Where the script came from (a path, or "the built-in … script"), for messages.
    let source: String
    let lines: [Line]

    static let usage = """
        A script has one command per line; points are the view's, from its top left; # starts a \
        comment (except in type's text). Controls are found by role and name in the view's \
        semantic tree (a role: button, label, text field, image, progress, canvas, group).
          click X Y          press and release the primary button at X Y
          click ROLE "NAME"  click the middle of that control (click button "Save")
          press ROLE "NAME"  the control's press action, as a screen reader does it
          type TEXT          type the rest of the line (after one space)
          type into "NAME" TEXT
                             focus the text field NAME, then type TEXT
          key KEY            press a key: return, escape, backspace, tab, space,
                             delete, home, end, left, right, up, down, a…z, 0…9,
                             or a USB HID usage (2+ digits); ctrl+, shift+, alt+
                             and meta+ hold modifiers (key ctrl+a)
          drag X1 Y1 X2 Y2 [STEPS]
                             press at X1 Y1, move to X2 Y2 in STEPS (8) moves, release
          wait STATE         wait for an update in STATE: preparing, ready, working
                             or done (each wait looks on from the last one's match)
          wait outcome       wait for the share to end
          snapshot NAME      let the view draw, then write NAME.png to --snapshot
          cancel             dismiss the share (the activity has 2 s to answer)
          resize WxH         show the view at another size
          style light|dark   the host's appearance
        """

    /// Parses `text`; `source` names it in errors.
    ///
    /// - Throws: ``Problem`` for the first line that is not a command, saying what was expected.
    init(parsing text: String, source: String) throws(Problem) {
        self.source = source
        var lines: [Line] = []
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            var line = Self.trimmed(raw)
            guard !line.isEmpty, !line.hasPrefix("#") else { continue }
            // A comment may end any line but type's (whose text may hold a #), outside a quoted name.
            if !line.lowercased().hasPrefix("type"), let comment = Self.commentStart(in: line) {
                line = Self.trimmed(line[..<comment])
            }
            do throws(Problem) {
                lines.append(Line(number: index + 1, text: line, command: try Self.command(line)))
            } catch {
                throw Problem(source: source, line: index + 1, message: error.message)
            }
        }
        self.lines = lines
    }

    /// Where a comment begins in `line`: a # after a space or tab, outside double quotes.
    private static func commentStart(in line: String) -> String.Index? {
        var quoted = false, previous: Character = " "
        for index in line.indices {
            let character = line[index]
            if character == "\"", previous != "\\" { quoted.toggle() }
            if character == "#", !quoted, previous == " " || previous == "\t" { return line.index(before: index) }
            previous = character
        }
        return nil
    }

    private static func trimmed(_ text: Substring) -> String {
        String(text.drop(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed())
    }

    private static func trimmed(_ text: String) -> String { trimmed(text[...]) }

    /// Whether some line writes a snapshot.
    var takesSnapshots: Bool {
        lines.contains { if case .snapshot = $0.command { true } else { false } }
    }

    private static func command(_ line: String) throws(Problem) -> Command {
        let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        let name = words[0].lowercased(), arguments = Array(words.dropFirst())
        func fail(_ message: String) -> Problem { Problem(source: "", line: 0, message: message) }
        func numbers(_ count: ClosedRange<Int>, _ usage: String) throws(Problem) -> [Double] {
            guard count.contains(arguments.count) else { throw fail("\(name) takes \(usage), not \"\(arguments.joined(separator: " "))\"") }
            var values: [Double] = []
            for argument in arguments {
                guard let value = Double(argument), value.isFinite, abs(value) <= InputLimits.maxCoordinate else {
                    throw fail("\(name): \"\(argument)\" is not a number of points (\(usage))")
                }
                values.append(value)
            }
            return values
        }
        switch name {
        case "click" where arguments.first.map({ Double($0) == nil }) ?? false:
            return .clickControl(try control(line.dropFirst(words[0].count), usage: "click ROLE \"NAME\""))
        case "click":
            let values = try numbers(2...2, "X Y, or ROLE \"NAME\"")
            return .click(Position(x: values[0], y: values[1]))
        case "press":
            return .press(try control(line.dropFirst(words[0].count), usage: "press ROLE \"NAME\""))
        case "type" where arguments.first == "into" && line.dropFirst(words[0].count).drop(while: \.isWhitespace).dropFirst(4).first(where: { !$0.isWhitespace }) == "\"":
            let rest = line.dropFirst(words[0].count).drop(while: \.isWhitespace).dropFirst(4).drop(while: \.isWhitespace)
            let (field, after) = try quoted(rest, usage: "type into \"NAME\" TEXT")
            // The text after the one space that ends the name.
            guard after.first == " ", after.count > 1 else { throw fail("type into \"\(field)\" needs the text to type after the name") }
            return .typeInto(field: field, text: String(after.dropFirst()))
        case "type":
            // The rest of the line, as written after the one space that ends "type".
            let text = line.dropFirst(words[0].count + 1)
            guard !text.isEmpty else { throw fail("type needs the text to type") }
            return .type(String(text))
        case "key":
            guard arguments.count == 1 else { throw fail("key takes one key, e.g. key return, key ctrl+a, key 40") }
            return try key(arguments[0])
        case "drag":
            let values = try numbers(4...5, "X1 Y1 X2 Y2 [STEPS]")
            let steps = values.count == 5 ? Int(exactly: values[4]) : 8
            guard let steps, (1...1000).contains(steps) else { throw fail("drag: STEPS must be a whole number 1…1000, not \(arguments[4])") }
            return .drag(from: Position(x: values[0], y: values[1]), to: Position(x: values[2], y: values[3]), steps: steps)
        case "wait":
            guard arguments.count == 1 else { throw fail("wait takes a state (preparing, ready, working, done) or outcome") }
            if arguments[0].lowercased() == "outcome" { return .waitOutcome }
            guard let state = ActivityState.allCases.first(where: { $0.description == arguments[0].lowercased() }) else {
                throw fail("wait: \"\(arguments[0])\" is not a state (preparing, ready, working, done) or outcome")
            }
            return .wait(state)
        case "snapshot":
            guard arguments.count == 1 else { throw fail("snapshot takes one NAME (written as NAME.png)") }
            let snapshotName = arguments[0].hasSuffix(".png") ? String(arguments[0].dropLast(4)) : arguments[0]
            guard !snapshotName.isEmpty, !snapshotName.contains("/"), snapshotName != ".", snapshotName != ".." else {
                throw fail("snapshot: \"\(arguments[0])\" is not a plain file name")
            }
            return .snapshot(snapshotName)
        case "cancel":
            guard arguments.isEmpty else { throw fail("cancel takes nothing") }
            return .cancel
        case "resize":
            let parts = arguments.count == 1 ? arguments[0].lowercased().split(separator: "x").compactMap { Int($0) } : []
            guard parts.count == 2 else { throw fail("resize takes WIDTHxHEIGHT in points, e.g. resize 360x480") }
            let size = SurfaceSize(width: parts[0], height: parts[1], scalePermille: 1000)
            if let problem = size.problem { throw fail("resize: \(problem)") }
            return .resize(width: parts[0], height: parts[1])
        case "style":
            switch arguments.first?.lowercased() {
            case "light" where arguments.count == 1: return .style(.light)
            case "dark" where arguments.count == 1: return .style(.dark)
            default: throw fail("style takes light or dark")
            }
        default:
            throw fail("unknown command \"\(words[0])\" (click, press, type, key, drag, wait, snapshot, cancel, resize, style)")
        }
    }

    /// `ROLE "NAME"`: a role the tree knows, then a name in double quotes (nothing after it).
    private static func control(_ text: Substring, usage: String) throws(Problem) -> Control {
        let text = text.drop(while: \.isWhitespace)
        guard let quote = text.firstIndex(of: "\"") else { throw Problem(source: "", line: 0, message: "expected \(usage): the name in double quotes") }
        let roleName = trimmed(text[..<quote])
        guard let role = AccessibilityRole(name: roleName) else {
            throw Problem(source: "", line: 0, message: "\"\(roleName)\" is not a role (button, label, text field, image, progress, canvas, group) in \(usage)")
        }
        let (name, rest) = try quoted(text[quote...], usage: usage)
        guard rest.allSatisfy(\.isWhitespace) else { throw Problem(source: "", line: 0, message: "nothing may follow the name in \(usage)") }
        return Control(role: role, name: name)
    }

    /// A name in double quotes at the start of `text` (`\"` inside it is a quote), and what follows.
    private static func quoted(_ text: Substring, usage: String) throws(Problem) -> (String, Substring) {
        guard text.first == "\"" else { throw Problem(source: "", line: 0, message: "expected \(usage): the name in double quotes") }
        var name = "", index = text.index(after: text.startIndex)
        while index < text.endIndex {
            let character = text[index]
            if character == "\\", text.index(after: index) < text.endIndex, text[text.index(after: index)] == "\"" {
                name.append("\"")
                index = text.index(index, offsetBy: 2)
                continue
            }
            if character == "\"" {
                guard !name.isEmpty else { throw Problem(source: "", line: 0, message: "the name in \(usage) is empty") }
                return (name, text[text.index(after: index)...])
            }
            name.append(character)
            index = text.index(after: index)
        }
        throw Problem(source: "", line: 0, message: "the name in \(usage) has no closing quote")
    }

    /// The USB HID usages of the keys a script names (the codes `KeyEvent` carries).
    static let keyNames: [String: UInt32] = {
        var names: [String: UInt32] = [
            "return": KeyCode.enter, "enter": KeyCode.enter, "escape": KeyCode.escape, "esc": KeyCode.escape,
            "backspace": KeyCode.backspace, "tab": KeyCode.tab, "space": KeyCode.space, "delete": KeyCode.delete,
            "home": KeyCode.home, "end": KeyCode.end, "left": KeyCode.left, "right": KeyCode.right,
            "up": KeyCode.up, "down": KeyCode.down,
        ]
        for (offset, letter) in "abcdefghijklmnopqrstuvwxyz".enumerated() { names[String(letter)] = KeyCode.a + UInt32(offset) }
        // HID: 1…9 are 30…38, 0 is 39.
        for digit in 1...9 { names[String(digit)] = 29 + UInt32(digit) }
        names["0"] = 39
        return names
    }()

    private static func key(_ spec: String) throws(Problem) -> Command {
        var parts = spec.lowercased().split(separator: "+", omittingEmptySubsequences: false).map(String.init)
        let key = parts.removeLast()
        var modifiers: Modifiers = []
        for part in parts {
            switch part {
            case "ctrl", "control": modifiers.insert(.control)
            case "shift": modifiers.insert(.shift)
            case "alt": modifiers.insert(.alt)
            case "meta", "super": modifiers.insert(.meta)
            default: throw Problem(source: "", line: 0, message: "key: \"\(part)\" is not a modifier (ctrl, shift, alt, meta)")
            }
        }
        let code = keyNames[key] ?? (key.allSatisfy(\.isNumber) && key.count > 1 ? UInt32(key) : nil)
        guard let code, code > 0, code <= 0xFFFF else {
            throw Problem(source: "", line: 0, message: "key: \"\(key)\" is not a key name (return, escape, backspace, tab, …, a…z, 0…9) or a HID usage number")
        }
        return .key(code: code, modifiers: modifiers)
    }
}
