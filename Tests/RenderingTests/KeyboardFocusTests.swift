// The keyboard in-process: Tab order in reading order (mirrored right to left), focus leaving
// the view for the host's controls and coming back from either end, Return and Space on a
// focused button, a controller's default and cancel buttons, and the focus ring's pixels.
@testable import RemoteService
import RemoteHost
import Testing

@MainActor
@Suite("Keyboard focus")
struct KeyboardFocusTests {
    /// A form: a text field across the top, a row of three buttons under it, and a label (which
    /// Tab skips).
    final class Form: ViewController {
        let field = TextField(text: "note")
        let cancel = Button(title: "Cancel")
        let middle = Button(title: "Undo")
        let save = Button(title: "Save")
        let label = Label(text: "not focusable")
        var pressed: [String] = []

        override func viewDidLoad() {
            let row = StackView(axis: .horizontal, spacing: 10, distribution: .fillEqually, arrangedSubviews: [cancel, middle, save])
            view.addSubview(StackView(axis: .vertical, spacing: 10, insets: EdgeInsets(all: 10), arrangedSubviews: [label, field, row]))
            view.subviews[0].frame = Rect(x: 0, y: 0, width: 300, height: 200)
            for button in [cancel, middle, save] { button.action = { [unowned self] button in pressed.append(button.title) } }
        }
    }

    /// A root showing `controller` at 300 × 200 points; `leaves` gets each focus_leave the view
    /// would send (the host announced `focus-leave`), or Tab wraps (`nil`: it did not).
    func present(_ controller: ViewController, leaves: FocusLog? = nil) -> ServiceRoot {
        let root = ServiceRoot(controller: controller, connection: nil)
        if let leaves { root.focusLeaveSink = { direction in leaves.directions.append(direction); return true } }
        root.resize(to: Size(width: 300, height: 200), scale: 1)
        root.deliver(.focus(true))
        _ = root.prepareFrame(at: .now)
        return root
    }

    final class FocusLog {
        var directions: [FocusDirection] = []
    }

    static func key(_ code: UInt32, _ modifiers: Modifiers = [], down: Bool = true) -> InputEvent {
        .key(KeyEvent(down: down, keyCode: code, modifiers: modifiers))
    }
    static let tab = key(KeyCode.tab), shiftTab = key(KeyCode.tab, [.shift])

    /// Who has the focus, by name.
    static func focused(_ root: ServiceRoot, _ form: Form) -> String {
        switch root.firstResponder {
        case nil: "nothing"
        case let view where view === form.field: "field"
        case let view where view === form.cancel: "Cancel"
        case let view where view === form.middle: "Undo"
        case let view where view === form.save: "Save"
        default: "something else"
        }
    }

    @Test("Tab visits the text field, then the buttons left to right; Shift-Tab goes back; labels, disabled and hidden buttons are skipped; without a host that takes the focus, Tab wraps around")
    func tabOrder() {
        let form = Form()
        let root = present(form)
        #expect(root.tabOrder().map { ($0 as? Button)?.title ?? "field" } == ["field", "Cancel", "Undo", "Save"])
        var visited: [String] = []
        for _ in 0..<5 {
            root.deliver(Self.tab)
            visited.append(Self.focused(root, form))
        }
        #expect(visited == ["field", "Cancel", "Undo", "Save", "field"], "wraps around: no host takes the focus")
        root.deliver(Self.shiftTab)
        #expect(Self.focused(root, form) == "Save")
        form.middle.isEnabled = false
        form.cancel.isHidden = true
        _ = root.prepareFrame(at: .now)
        #expect(root.tabOrder().map { ($0 as? Button)?.title ?? "field" } == ["field", "Save"])
        root.deliver(Self.shiftTab)
        #expect(Self.focused(root, form) == "field")
        // A button that becomes disabled while focused lets the focus go.
        root.deliver(Self.tab)
        form.save.isEnabled = false
        #expect(Self.focused(root, form) == "nothing")
    }

    @Test("right to left: a row of buttons is laid out from the right, and Tab visits it from the right")
    func rightToLeft() {
        let form = Form()
        form.layoutDirection = .rightToLeft
        let root = present(form)
        #expect(form.save.frame.minX < form.cancel.frame.minX, "the first arranged button is at the right")
        #expect(root.tabOrder().map { ($0 as? Button)?.title ?? "field" } == ["field", "Cancel", "Undo", "Save"])
        #expect(form.cancel.convert(form.cancel.bounds, to: nil).maxX > form.middle.convert(form.middle.bounds, to: nil).maxX)
        // Switched back: the row is laid out from the left again.
        form.layoutDirection = .leftToRight
        _ = root.prepareFrame(at: .now)
        #expect(form.cancel.frame.minX < form.save.frame.minX)
    }

    @Test("leaving and coming back: Tab past the last control tells the host (forward) and keeps no focus; the host gives it back forward (the first control) or backward (the last); Shift-Tab before the first leaves backward; a view with nothing to focus hands the focus straight on")
    func leavingAndReturning() {
        let form = Form()
        let leaves = FocusLog()
        let root = present(form, leaves: leaves)
        for _ in 0..<4 { root.deliver(Self.tab) }
        #expect(Self.focused(root, form) == "Save")
        root.deliver(Self.tab)
        #expect(leaves.directions == [.forward])
        #expect(Self.focused(root, form) == "nothing")
        // The host's chrome had it; Tab brings it back in at the first control.
        root.deliver(.focusEntering(.forward))
        #expect(Self.focused(root, form) == "field")
        root.deliver(Self.shiftTab)
        #expect(leaves.directions == [.forward, .backward])
        #expect(Self.focused(root, form) == "nothing")
        // Shift-Tab from the host's chrome: the last control.
        root.deliver(.focusEntering(.backward))
        #expect(Self.focused(root, form) == "Save")
        // Entering forward while something has the focus still starts at the first control.
        root.deliver(.focusEntering(.forward))
        #expect(Self.focused(root, form) == "field")

        let empty = ViewController()
        let emptyLeaves = FocusLog()
        let emptyRoot = present(empty, leaves: emptyLeaves)
        emptyRoot.deliver(.focusEntering(.backward))
        #expect(emptyLeaves.directions == [.backward], "nothing to focus: the focus goes straight back the way it came")
        #expect(emptyRoot.firstResponder == nil)
    }

    @Test("a focused button: Return presses it, Space presses it on release; a disabled one takes neither; control-Tab is not Tab")
    func pressingTheFocusedButton() {
        let form = Form()
        let root = present(form)
        form.middle.becomeFirstResponder()
        root.deliver(Self.key(KeyCode.enter))
        #expect(form.pressed == ["Undo"])
        root.deliver(Self.key(KeyCode.space))
        #expect(form.pressed == ["Undo"], "Space acts on release")
        #expect(form.middle.isHighlighted)
        root.deliver(Self.key(KeyCode.space, down: false))
        #expect(form.pressed == ["Undo", "Undo"])
        #expect(!form.middle.isHighlighted)
        root.deliver(Self.key(KeyCode.tab, [.control]))
        #expect(Self.focused(root, form) == "Undo")
    }

    @Test("the controller's default button takes Return from a text field without onReturn, its cancel button Escape; a disabled or hidden one is not pressed; onReturn takes Return first")
    func defaultAndCancelButtons() {
        let form = Form()
        form.defaultActionButton = form.save
        form.cancelActionButton = form.cancel
        let root = present(form)
        form.field.becomeFirstResponder()
        root.deliver(Self.key(KeyCode.enter))
        #expect(form.pressed == ["Save"])
        root.deliver(Self.key(KeyCode.escape))
        #expect(form.pressed == ["Save", "Cancel"])
        form.save.isEnabled = false
        form.cancel.isHidden = true
        root.deliver(Self.key(KeyCode.enter))
        root.deliver(Self.key(KeyCode.escape))
        #expect(form.pressed == ["Save", "Cancel"])
        form.save.isEnabled = true
        var returned = 0
        form.field.onReturn = { _ in returned += 1 }
        root.deliver(Self.key(KeyCode.enter))
        #expect(returned == 1 && form.pressed == ["Save", "Cancel"])
    }

    @Test("the focus ring: drawn around the focused control while the view has the host's focus, damaged where it was and is, and gone without the host's focus")
    func focusRing() throws {
        let form = Form()
        let root = present(form)
        form.middle.becomeFirstResponder()
        let damage = try #require(root.prepareFrame(at: .now))
        let frame = form.middle.convert(form.middle.bounds, to: nil)
        #expect(damage.contains { rect in
            rect.x <= Int(frame.minX) - 4 && rect.x + rect.width >= Int(frame.maxX) + 4 && rect.y <= Int(frame.minY) - 4
        }, "the ring's rect is damaged: \(damage)")
        func drawn() throws -> SurfaceBuffer {
            let buffer = try SurfaceBuffer(id: 1, width: 300, height: 200)
            let all = [PixelRect(x: 0, y: 0, width: 300, height: 200)]
            buffer.draw(clippedTo: all) { root.draw(in: $0, dirty: all) }
            return buffer
        }
        // Two points outside the button's middle of its top edge: the ring's stroke.
        let x = Int(frame.midX), y = Int(frame.minY) - 3
        let ring = root.traits.focusRingColor
        let focused = try drawn().pixel(x: x, y: y)
        #expect(focused != 0 && (focused & 0xFF) > ((focused >> 16) & 0xFF), "the ring (the tint, blue) is there: \(String(focused, radix: 16)), ring \(ring)")
        // The host takes its focus: the ring's rect is damaged (it reaches past the control's
        // own), and the redraw has no ring.
        root.deliver(.focus(false))
        let lost = try #require(root.prepareFrame(at: .now))
        #expect(lost.contains { $0.y <= Int(frame.minY) - 4 && $0.x <= Int(frame.minX) - 4 }, "the old ring's rect is damaged: \(lost)")
        #expect(try drawn().pixel(x: x, y: y) != focused, "no ring without the host's focus")
    }

    /// The frame's damage covers the ring (root points, scale 1) around `rect`.
    static func covers(_ damage: [PixelRect]?, ringAround rect: Rect) -> Bool {
        guard let damage else { return true }
        let ring = PixelRect(x: Int(rect.minX) - 4, y: Int(rect.minY) - 4, width: Int(rect.width) + 8, height: Int(rect.height) + 8)
        return damage.contains { $0.x <= ring.x && $0.y <= ring.y && $0.x + $0.width >= ring.x + ring.width && $0.y + $0.height >= ring.y + ring.height }
    }

    @Test("the ring follows the control: a container that moves, a control hidden (it also gives up the focus), a hidden container; each redraws where the ring was")
    func ringFollows() throws {
        let form = Form()
        let root = present(form)
        form.save.becomeFirstResponder()
        _ = root.prepareFrame(at: .now)
        // The row moves down (its stack laid out again with a taller label).
        let before = form.save.convert(form.save.bounds, to: nil)
        form.label.numberOfLines = 2
        form.label.text = "a longer label\nthat takes two lines"
        let moved = root.prepareFrame(at: .now)
        let after = form.save.convert(form.save.bounds, to: nil)
        #expect(after.minY > before.minY, "the row moved down")
        #expect(Self.covers(moved, ringAround: before) && Self.covers(moved, ringAround: after), "\(String(describing: moved))")
        // A hidden container: no ring, and where it was is redrawn.
        let row = try #require(form.save.superview)
        row.isHidden = true
        let hidden = root.prepareFrame(at: .now)
        #expect(Self.covers(hidden, ringAround: after))
        #expect(root.focusRingView == nil)
        #expect(root.firstResponder == nil, "a control hidden (with its row) gives up the focus")
        row.isHidden = false
        form.middle.becomeFirstResponder()
        _ = root.prepareFrame(at: .now)
        let middle = form.middle.convert(form.middle.bounds, to: nil)
        form.middle.isHidden = true
        #expect(root.firstResponder == nil)
        #expect(Self.covers(root.prepareFrame(at: .now), ringAround: middle))
    }

    @Test("Space held when the host takes the focus presses nothing; a repeated Space arms nothing; a focused button inside a container with interaction off takes no Return")
    func spaceAndPressability() {
        let form = Form()
        let root = present(form)
        form.save.becomeFirstResponder()
        root.deliver(Self.key(KeyCode.space))
        #expect(form.save.isHighlighted)
        root.deliver(.focus(false))
        #expect(!form.save.isHighlighted)
        root.deliver(Self.key(KeyCode.space, down: false))
        #expect(form.pressed.isEmpty, "no press: the release came after the focus went")
        root.deliver(.focus(true))
        root.deliver(.key(KeyEvent(down: true, keyCode: KeyCode.space, isRepeat: true)))
        root.deliver(Self.key(KeyCode.space, down: false))
        #expect(form.pressed.isEmpty, "a repeat of a Space held from elsewhere arms nothing")
        form.save.superview?.isUserInteractionEnabled = false
        root.deliver(Self.key(KeyCode.enter))
        #expect(form.pressed.isEmpty)
    }

    @Test("leaving is losing the host's focus: no ring, focusChanged(false); keys the host still sends move the view's own focus, wrapping, and send no second focus_leave")
    func afterLeaving() {
        let form = Form()
        let leaves = FocusLog()
        let root = present(form, leaves: leaves)
        root.deliver(Self.shiftTab)
        root.deliver(Self.shiftTab)
        root.deliver(Self.shiftTab)
        root.deliver(Self.shiftTab)
        #expect(Self.focused(root, form) == "field")
        root.deliver(Self.shiftTab)
        #expect(leaves.directions == [.backward])
        #expect(!root.isFocused && root.focusRingView == nil)
        for _ in 0..<5 { root.deliver(Self.tab) }
        #expect(leaves.directions == [.backward], "no host focus, nothing to give away: Tab wraps")
        #expect(Self.focused(root, form) == "field", "five Tabs from nothing: field, Cancel, Undo, Save, field")
        #expect(root.focusRingView == nil)
    }
}
