import Glibc
import RemoteHost
import RemoteService
import RemoteTestSupport
import Testing

/// The fixture's toolkit screen ("ui" mode: title, status label, button, text field, progress
/// bar, a green canvas, a clear pass-through overlay and a hidden button over everything),
/// sandboxed in its own process, driven by a host's RemoteView: input round trips, damage,
/// resize, traits and animation, asserted on the host's image and the committed damage.
@Suite("Remote view input and the toolkit across processes", .serialized)
struct RemoteViewInputTests {
    static let width = 320, height = 260
    static let green: UInt32 = 0xFF00_8000, light: UInt32 = 0xFFF0_F0F0, dark: UInt32 = 0xFF20_2020

    /// A presented "ui" screen, its first frame drawn.
    static func withScreen(width: Int = width, height: Int = height, mode: String = "ui",
                           configuration: Launcher.Configuration = fastLauncherConfiguration(),
                           _ body: @escaping @Sendable (RemoteView, Screen) async throws -> Void) async throws {
        try await withServices(["ui.json": ServiceFolder.manifest(mode: mode)], configuration: configuration) { launcher, _ in
            let view = RemoteView(connection: launcher.connection(to: "com.example.test"))
            try await view.present(width: width, height: height)
            let screen = Screen(view: view)
            try await screen.waitForImage("the first frame") { $0.width == width && $0.height == height }
            try await body(view, screen)
        }
    }

    /// Reads the fixture's state and layout, and waits for frames.
    struct Screen: Sendable {
        let view: RemoteView
        let damage = Damage()

        final class Damage: Sendable {
            let seen = Mutex<[[PixelRect]]>([])
        }

        /// Each named view's frame, in pixels (scale 1: points, rounded outwards).
        func layout() async throws -> [String: PixelRect] {
            let text = try await view.connection.request(ServiceMessage(type: "layout")).text ?? ""
            var frames: [String: PixelRect] = [:]
            for line in text.split(separator: "\n") {
                let words = line.split(separator: " ")
                guard words.count == 5, let x = Double(words[1]), let y = Double(words[2]),
                      let w = Double(words[3]), let h = Double(words[4]) else { continue }
                frames[String(words[0])] = Rect(x: x, y: y, width: w, height: h).pixels(scale: 1)
            }
            return frames
        }

        /// The fixture's "key: value" state.
        func state() async throws -> [String: String] {
            let text = try await view.connection.request(ServiceMessage(type: "state")).text ?? ""
            var state: [String: String] = [:]
            for line in text.split(separator: "\n") {
                guard let colon = line.firstIndex(of: ":") else { continue }
                state[String(line[..<colon])] = String(line[line.index(after: colon)...].dropFirst())
            }
            return state
        }

        func request(_ type: String, _ text: String) async throws {
            _ = try await view.connection.request(ServiceMessage(type: type, text: text))
        }

        /// The next frame's damage (recorded in ``damage``).
        func nextDamage() async throws -> [PixelRect] {
            let damage = try await RemoteTestSupport.nextDamage(view)
            self.damage.seen.withLock { $0.append(damage) }
            return damage
        }

        /// Waits, frame by frame, until the host's image satisfies `condition`.
        func waitForImage(_ what: String, _ condition: @escaping @Sendable (RemoteImage) -> Bool) async throws {
            try await withDeadline(.seconds(10), what) {
                while !condition(view.image) { _ = try await nextDamage() }
            }
        }

        /// Waits until a frame damages `rect`; returns the damage of every frame until then.
        /// Waits for a frame in which the text field at `field` shows `text`: its dark ink
        /// reaches as far right as the text is wide (after the field's 8-point inset).
        func waitForText(_ text: String, in field: PixelRect, _ what: String) async throws {
            let width = await MainActor.run { TextMeasure.width(of: text, font: .body) }
            let right = field.x + 8 + Int(width.rounded())
            try await waitForImage(what) { image in
                var rightmost = 0
                for y in field.y..<(field.y + field.height) {
                    for x in field.x..<(field.x + field.width) where image.pixel(x: x, y: y) & 0xFF < 0x80 { rightmost = max(rightmost, x) }
                }
                return abs(rightmost - right) <= 3
            }
        }

        func waitForDamage(of rect: PixelRect, _ what: String) async throws -> [[PixelRect]] {
            try await withDeadline(.seconds(10), what) {
                var frames: [[PixelRect]] = []
                while true {
                    let damage = try await nextDamage()
                    frames.append(damage)
                    if damage.contains(where: { $0.intersects(rect) }) { return frames }
                }
            }
        }
    }

    static func region(_ image: RemoteImage, _ rect: PixelRect) -> [UInt32] {
        var pixels: [UInt32] = []
        for y in rect.y..<(rect.y + rect.height) { for x in rect.x..<(rect.x + rect.width) { pixels.append(image.pixel(x: x, y: y)) } }
        return pixels
    }

    static func center(_ rect: PixelRect) -> (Double, Double) {
        (Double(rect.x) + Double(rect.width) / 2, Double(rect.y) + Double(rect.height) / 2)
    }

    /// Whether `rect` lies inside one of `areas`.
    static func inside(_ rect: PixelRect, _ areas: [PixelRect]) -> Bool {
        areas.contains { rect.x >= $0.x && rect.y >= $0.y && rect.x + rect.width <= $0.x + $0.width && rect.y + rect.height <= $0.y + $0.height }
    }

    @Test("solid fills arrive exactly; the stack laid the controls out; lifecycle callbacks ran in order")
    func firstFrame() async throws {
        try await Self.withScreen { view, screen in
            let layout = try await screen.layout()
            let canvas = try #require(layout["canvas"]), status = try #require(layout["status"])
            #expect(canvas.width == Self.width - 24 && canvas.height == 20, "\(canvas)")
            #expect(status.x == 12 && status.width == Self.width - 24, "\(status)")
            let image = view.image
            #expect(image.pixel(x: canvas.x + 1, y: canvas.y + 1) == Self.green)
            #expect(image.pixel(x: canvas.x + canvas.width - 1, y: canvas.y + canvas.height - 1) == Self.green)
            #expect(image.pixel(x: 2, y: Self.height - 2) == Self.light, "the stack's background, in its inset")
            #expect(image.pixel(x: canvas.x + 1, y: canvas.y + canvas.height + 1) == Self.light)
            let log = try await screen.state()["log"] ?? ""
            #expect(log.hasPrefix("loaded,resized 320x260"), "\(log)")
            #expect(log.contains("appeared"), "\(log)")
        }
    }

    @Test("a click on the button: the service counts, the next frames show it, and only the button and the label are redrawn")
    func clickRoundTrip() async throws {
        try await Self.withScreen { view, screen in
            let layout = try await screen.layout()
            let button = try #require(layout["button"]), status = try #require(layout["status"])
            let before = view.image
            let (x, y) = Self.center(button)
            try await view.click(x: x, y: y)
            let frames = try await screen.waitForDamage(of: status, "the frame showing the new count")
            let state = try await screen.state()
            #expect(state["count"] == "1" && state["status"] == "count 1", "\(state)")
            #expect(state["hidden"] == "0", "the hidden button over everything is never hit")
            for damage in frames { for rect in damage { #expect(Self.inside(rect, [button, status]), "\(rect) is outside the button and the label") } }
            let after = view.image
            #expect(Self.region(after, status) != Self.region(before, status), "the label shows the new count")
            let canvas = try #require(layout["canvas"])
            #expect(Self.region(after, canvas) == Self.region(before, canvas))
        }
    }

    @Test("changing one label commits only its rect")
    func labelDamage() async throws {
        try await Self.withScreen { view, screen in
            let status = try #require(try await screen.layout()["status"])
            try await screen.request("label", "hello there")
            #expect(try await screen.nextDamage() == [status])
            try await screen.request("label", "and again")
            #expect(try await screen.nextDamage() == [status])
        }
    }

    @Test("typing into the text field: the press makes it first responder, text and backspace edit it, the frame shows the text")
    func typing() async throws {
        try await Self.withScreen { view, screen in
            let layout = try await screen.layout()
            let field = try #require(layout["field"])
            let (x, y) = Self.center(field)
            try await view.click(x: x, y: y)
            try await view.send(.focus(true))
            try await view.type("hello")
            try await view.press(keyCode: KeyCode.backspace)
            try await view.type("p!")
            try await view.press(keyCode: KeyCode.left)
            try await view.press(keyCode: KeyCode.left, modifiers: .shift)
            var state = try await screen.state()
            #expect(state["field"] == "hellp!" && state["first"] == "true", "\(state)")
            #expect(state["selection"] == "4 5", "left moves the caret, shift-left selects: \(state)")
            #expect(state["log"]?.contains("focus true") == true)
            try await view.type("o")
            state = try await screen.state()
            #expect(state["field"] == "hello!", "typing replaces the selection: \(state)")
            // The frame shows it: ink reaches as far right as the text is wide. (The caret, 2
            // points of tint after "hell", is bluish, not dark.)
            try await screen.waitForText("hello!", in: field, "the typed text")
        }
    }

    @Test("the main actor's one queue: with every connection's task preferring the event loop's executor, the frame loop in that preference too, every change is drawn: 5 rounds of typing, each shown, then settled")
    func frameLoopInTheLoopPreference() async throws {
        // When the delivery task awaited the main actor once per input event and surface
        // message, this hung in every run with the frame loop in the preference (the first
        // frame, or a typed text, never came); the frame loop was kept out of it by a rule.
        for _ in 0..<3 {
            try await Self.withScreen(mode: "ui-loop") { view, screen in
                let field = try #require(try await screen.layout()["field"])
                let (x, y) = Self.center(field)
                try await view.click(x: x, y: y)
                var typed = ""
                for round in 0..<5 {
                    try await view.type("ab")
                    typed += "ab"
                    try await view.settle()
                    #expect(try await screen.state()["field"] == typed, "round \(round)")
                    try await screen.waitForText(typed, in: field, "round \(round)'s text")
                }
            }
        }
    }

    @Test("a remote-control event goes up the chain from the first responder to the controller")
    func remoteControl() async throws {
        try await Self.withScreen { view, screen in
            let layout = try await screen.layout()
            let field = try #require(layout["field"]), status = try #require(layout["status"])
            // No first responder: the controller gets it directly.
            try await view.send(.remoteControl(.nextTrack))
            // The text field is first responder; it does not handle media commands, so they
            // pass through the stack (its superview) to the controller.
            let (x, y) = Self.center(field)
            try await view.click(x: x, y: y)
            try await view.send(.remoteControl(.togglePlayPause))
            let state = try await screen.state()
            #expect(state["first"] == "true")
            #expect(state["remote"] == "nextTrack,togglePlayPause", "\(state)")
            #expect(state["status"] == "remote togglePlayPause")
            _ = try await screen.waitForDamage(of: status, "the label showing the command")
        }
    }

    @Test("resize: the service lays out again and draws into buffers of the new size; the old ones are destroyed")
    func resize() async throws {
        try await Self.withScreen { view, screen in
            #expect(view.attachedBuffers.allSatisfy { $0.width == Self.width && $0.height == Self.height })
            try await view.present(width: 240, height: 300)
            try await screen.waitForImage("a frame at the new size") { $0.width == 240 && $0.height == 300 }
            let layout = try await screen.layout()
            let status = try #require(layout["status"]), canvas = try #require(layout["canvas"])
            #expect(status.width == 240 - 24, "\(status)")
            #expect(view.image.pixel(x: canvas.x + canvas.width - 1, y: canvas.y + 1) == Self.green)
            #expect(view.image.pixel(x: 2, y: 298) == Self.light)
            // One more frame: by then the old buffers' destroy_buffer has arrived.
            try await screen.request("label", "resized")
            _ = try await screen.waitForDamage(of: status, "a frame after the resize")
            let buffers = view.attachedBuffers
            #expect(!buffers.isEmpty && buffers.allSatisfy { $0.width == 240 && $0.height == 300 }, "\(buffers)")
            #expect(try await screen.state()["log"]?.contains("resized 240x300") == true)
        }
    }

    @Test("traits: dark style and a larger font reach the controller, redraw everything and relayout")
    func traits() async throws {
        try await Self.withScreen { view, screen in
            let titleBefore = try #require(try await screen.layout()["title"])
            try await view.setTraits(Traits(style: .dark, fontScalePermille: 1500))
            try await screen.waitForImage("the dark frame") { $0.pixel(x: 2, y: Self.height - 2) == Self.dark }
            let state = try await screen.state()
            #expect(state["log"]?.contains("traits dark 1500") == true, "\(state)")
            let titleAfter = try #require(try await screen.layout()["title"])
            #expect(titleAfter.height > titleBefore.height, "\(titleBefore) → \(titleAfter)")
        }
    }

    @Test("a relaunched service gets the size, the traits and the focus the host gave the view")
    func relaunchKeepsTraits() async throws {
        try await withServices(["ui.json": ServiceFolder.manifest(mode: "ui")]) { launcher, _ in
            let view = RemoteView(connection: launcher.connection(to: "com.example.test"))
            try await view.present(width: Self.width, height: Self.height)
            try await view.setTraits(Traits(style: .dark))
            try await view.send(.focus(true))
            try await view.settle()
            #expect(view.image.pixel(x: 2, y: Self.height - 2) == Self.dark)
            let servicePid = try #require(await launcher.status().first?.processes.first?.servicePid)
            kill(servicePid, SIGKILL)
            var state: String?
            for _ in 0..<3 where state == nil {
                do {
                    state = try await view.connection.request(ServiceMessage(type: "state")).text
                } catch let error as RemoteError {
                    #expect(error.code == .interrupted, "\(error)")
                }
            }
            #expect(await launcher.status().first?.launches == 2)
            #expect(state?.contains("traits dark") == true && state?.contains("focus true") == true, "\(state ?? "")")
            try await view.settle()
            #expect(view.image.pixel(x: 2, y: Self.height - 2) == Self.dark, "the new process draws dark too")
        }
    }

    @Test("an animated progress change takes several frames, each paced by the host and damaging only the bar")
    func animation() async throws {
        try await Self.withScreen { view, screen in
            let bar = try #require(try await screen.layout()["progress"])
            try await screen.request("progress", "1 animated")
            let tint = Traits.standard.tint.argb
            try await screen.waitForImage("the full bar") { $0.pixel(x: bar.x + bar.width - 4, y: bar.y + bar.height / 2) == tint }
            let frames = screen.damage.seen.withLock { $0 }.filter { !$0.isEmpty }
            #expect(frames.count >= 3, "an eased change is several frames: \(frames.count)")
            for damage in frames.dropFirst() { for rect in damage { #expect(rect == bar, "\(rect)") } }
        }
    }

    @Test("ids in write order: 10,000 mixed rounds of clicks, moves, typing, settles and resizes, sent from two tasks at once while frames stream, and neither side (each enforcing increasing ids) sees a violation")
    func strictIDsThroughManyRounds() async throws {
        try await withServices(["ui.json": ServiceFolder.manifest(mode: "ui")]) { launcher, _ in
            let view = RemoteView(connection: launcher.connection(to: "com.example.test"))
            try await view.present(width: Self.width, height: Self.height)
            try await view.settle()
            let screen = Screen(view: view)
            let button = try #require(try await screen.layout()["button"])
            let (x, y) = Self.center(button)
            let rounds = 10_000
            // Settles (requests the host numbers) race input and the host's release_buffer and
            // frame_done, which its read loop sends as each frame is composited: the case where
            // a request's id was once overtaken.
            try await withDeadline(.seconds(120), "\(rounds) rounds") {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for round in 0..<rounds {
                            switch round % 4 {
                            case 0: try await view.click(x: x, y: y)
                            case 1: try await view.send(.pointer(PointerEvent(.moved, x: Double(round % 300), y: 20)))
                            case 2: try await view.type("x")
                            default:
                                if round % 1_000 == 3 { try await view.present(width: Self.width - round % 7, height: Self.height) }
                                else { try await view.send(.focus(round % 8 == 3)) }
                            }
                        }
                    }
                    group.addTask {
                        for _ in 0..<(rounds / 4) { try await view.settle() }
                    }
                    try await group.waitForAll()
                }
            }
            try await view.settle()
            let state = try await screen.state()
            #expect(state["count"] == "\(rounds / 4)", "every click arrived: \(state["count"] ?? "nil")")
            let status = try #require(await launcher.status().first)
            #expect(status.launches == 1 && status.crashes == 0, "one process served every round: \(status)")
        }
    }

    @Test("the keyboard across the boundary (the host takes the focus): Tab goes button, field, then out of the view (focusLeaves says forward); the host gives the focus back from the end (the field) and Shift-Tab leaves backward; Return presses the focused button; a leave while the view does not have the host's focus is dropped")
    func keyboardAcrossTheBoundary() async throws {
        var configuration = fastLauncherConfiguration()
        configuration.takesFocusFromViews = true
        try await Self.withScreen(configuration: configuration) { view, screen in
            // Every leave the view reports, in order, with none lost while the test is not reading.
            let (seen, seenSink) = AsyncStream.makeStream(of: FocusDirection.self)
            let collector = Task { for await direction in view.focusLeaves { seenSink.yield(direction) } }
            defer { collector.cancel() }
            func nextLeave(_ what: String) async throws -> FocusDirection? {
                try await withDeadline(.seconds(10), what) { await seen.first { _ in true } }
            }
            func focused() async throws -> String? { try await screen.state()["focused"] }
            try await view.send(.focus(true))
            try await view.press(keyCode: KeyCode.tab)
            #expect(try await focused() == "button", "the hidden button is skipped; the button is first")
            try await view.press(keyCode: KeyCode.enter)
            #expect(try await screen.state()["count"] == "1", "Return pressed the focused button")
            try await view.press(keyCode: KeyCode.tab)
            #expect(try await focused() == "field")
            try await view.press(keyCode: KeyCode.tab)
            #expect(try await nextLeave("focus leaving forward") == .forward)
            #expect(try await focused() == "none")
            #expect(try await screen.state()["log"]?.hasSuffix("focus false") == true, "leaving is losing the host's focus")
            // Keys the host still forwards: Tab goes round to the field and leaves again, but the
            // view does not have the host's focus, so that leave moves nothing (it is dropped).
            for _ in 0..<3 { try await view.press(keyCode: KeyCode.tab) }
            // The host's chrome had it; Shift-Tab there brings it back at the view's last control.
            try await view.send(.focusEntering(.backward))
            #expect(try await focused() == "field")
            try await view.press(keyCode: KeyCode.tab, modifiers: .shift)
            #expect(try await focused() == "button")
            try await view.press(keyCode: KeyCode.tab, modifiers: .shift)
            #expect(try await nextLeave("focus leaving backward") == .backward, "the leave while unfocused was dropped")
            try await view.send(.focusEntering(.forward))
            #expect(try await focused() == "button")
        }
    }

    @Test("a host that does not take the focus (the default): Tab wraps around inside the view, and .focusEntering reaches the service as plain focus")
    func keyboardWithoutTheBoundary() async throws {
        try await Self.withScreen { view, screen in
            func focused() async throws -> String? { try await screen.state()["focused"] }
            try await view.send(.focusEntering(.backward))
            #expect(try await focused() == "none", "plain focus: nothing is focused by it")
            var visited: [String] = []
            for _ in 0..<3 {
                try await view.press(keyCode: KeyCode.tab)
                visited.append(try await focused() ?? "?")
            }
            #expect(visited == ["button", "field", "button"])
        }
    }

    @Test("text in every script is drawn inside the sandbox: Arabic, Hebrew, kana (IPAGothic, listed under Debian's font alternatives) and a colour emoji all find a font")
    func scriptsInTheSandbox() async throws {
        try await Self.withScreen { view, _ in
            let text = "مرحبا بالعالم — שלום — こんにちは — 👍🏽"
            let missing = try await view.connection.request(ServiceMessage(type: "missing-glyphs", text: text)).text
            #expect(missing == "0", "glyphs without a font in the sandbox: \(missing ?? "?")")
        }
    }
}
