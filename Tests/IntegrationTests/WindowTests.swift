import Glibc
import RemoteHost
import RemoteTestSupport
import Testing

/// `demo-share window` on a real X server (Xvfb), driven as a person would with `xdotool`, and
/// looked at with screenshots (`import -window root`). Every wait is for a line the window
/// prints ("window: …") or for a process, with a deadline.
@Suite("demo-share window under Xvfb", .serialized)
struct WindowTests {
    /// An X server, `demo-share window` on it, and the window's lines as they come.
    final class Screen: Sendable {
        let display: String
        let server: ChildProcess
        let demo: ChildProcess
        let lines: LineReader
        let folder: TemporaryFolder

        /// Starts an X server (Xvfb) on a free display; returns it and its display (":N").
        static func startServer() async throws -> (ChildProcess, String) {
            // Xvfb picks a free display and writes its number on the fd -displayfd names.
            let number = try Syscall.pipe()
            var serverOptions = ChildProcess.Options()
            serverOptions.pass(number.second, as: 3)
            let server = try await ChildProcess.launch(executable: "/usr/bin/Xvfb",
                                                       arguments: ["-displayfd", "3", "-screen", "0", "1400x900x24", "-nolisten", "tcp"],
                                                       options: serverOptions)
            let numberReader = LineReader(try ReadableDescriptor(number.first))
            return (server, ":" + (try await numberReader.line(within: .seconds(10), "Xvfb's display number")).filter(\.isNumber))
        }

        init(arguments: [String], snapshots: Bool = true, environment: [String: String] = [:]) async throws {
            folder = try TemporaryFolder("remoteview-window")
            (server, display) = try await Self.startServer()
            let output = try Syscall.pipe()
            let writeEnd = output.second
            var options = ChildProcess.Options()
            options.pass(writeEnd, as: 1)
            options.environment = ["DISPLAY": display, "PATH": "/usr/bin:/bin", "HOME": folder.path, "SDL_RENDER_DRIVER": "software"]
                .merging(environment) { _, given in given }
            // Under scripts/sanitize address: the window's leak check is off. SDL leaves a few
            // allocations of libdbus and of the libraries it loads and unloads itself, which
            // LeakSanitizer reports at exit without a name to suppress them by.
            if let asan = getenv("ASAN_OPTIONS").map({ String(cString: $0) }) {
                options.environment["ASAN_OPTIONS"] = asan + ":detect_leaks=0"
            }
            let executable = testServiceExecutable.replacing("remoteview-test-service", with: "demo-share")
            demo = try await ChildProcess.launch(executable: executable, arguments: ["window"] + (snapshots ? ["--snapshot", folder.path] : []) + arguments, options: options)
            _ = consume writeEnd  // the child's copy only: its exit is end of file
            lines = LineReader(try ReadableDescriptor(output.first))
        }

        /// Waits for the next line starting with `prefix` (earlier lines are passed over).
        @discardableResult
        func await(_ prefix: String, within time: Duration = .seconds(20)) async throws -> String {
            try await lines.line(startingWith: prefix, within: time)
        }

        /// Runs a command on this display and waits for it; returns its output.
        @discardableResult
        func run(_ executable: String, _ arguments: [String]) async throws -> String {
            let output = try Syscall.pipe()
            let writeEnd = output.second
            var options = ChildProcess.Options()
            options.pass(writeEnd, as: 1)
            options.environment = ["DISPLAY": display, "PATH": "/usr/bin:/bin", "HOME": folder.path]
            let process = try await ChildProcess.launch(executable: executable, arguments: arguments, options: options)
            _ = consume writeEnd
            let reader = LineReader(try ReadableDescriptor(output.first))
            let text = try await reader.all(within: .seconds(20), "\(executable) \(arguments.joined(separator: " "))")
            let termination = try await process.waitForExit()
            try #require(termination == .exited(0), "\(executable) \(arguments): \(termination)")
            return text
        }

        /// The whole screen.
        func screenshot() async throws -> RemoteImage {
            let path = folder.path + "/screen.png"
            try await run("/usr/bin/import", ["-window", "root", path])
            return try RemoteImage(contentsOfPNG: path)
        }

        /// Writes the window, as the screen shows it now, to `name`.png in the build folder's
        /// `screenshots` (`.build/screenshots`): the test run's pictures of what it checked.
        func keepScreenshot(of window: String, as name: String) async throws {
            let executable = Syscall.symbolicLinkTarget("/proc/self/exe") ?? ""
            let parts = executable.split(separator: "/", omittingEmptySubsequences: false)
            guard let build = parts.firstIndex(of: ".build") else { return }
            let folder = parts[...build].joined(separator: "/") + "/screenshots"
            _ = mkdir(folder, 0o755)
            try await run("/usr/bin/import", ["-window", window, "\(folder)/\(name).png"])
        }

        /// Ends the window (SIGTERM: SDL turns it into a quit), then the server.
        func close() async throws {
            demo.send(signal: SIGTERM)
            #expect(try await demo.waitForExit() == .exited(0), "demo-share window exits 0 when asked to quit")
            try await lines.all(within: .seconds(10), "the rest of the window's output")
            server.send(signal: SIGTERM)
            _ = try await server.waitForExit()
            folder.remove()
        }
    }

    /// Lines from a pipe, each awaited with a deadline.
    final class LineReader: Sendable {
        let reader: ReadableDescriptor
        private let buffer = Mutex<[UInt8]>([])
        /// Every line read so far, for a wait that may find its line among them.
        private let history = Mutex<[String]>([])

        init(_ reader: ReadableDescriptor) { self.reader = reader }

        /// Every line read so far (for a failure's message).
        var seen: [String] { history.withLock { $0 } }

        /// The next line, waiting at most `time`.
        func line(within time: Duration, _ what: String) async throws -> String {
            try await withDeadline(time, what) { [self] in
                while true {
                    if let line = buffer.withLock({ buffer -> String? in
                        guard let end = buffer.firstIndex(of: 0x0A) else { return nil }
                        defer { buffer.removeSubrange(...end) }
                        return String(decoding: buffer[..<end], as: UTF8.self)
                    }) {
                        history.withLock { $0.append(line) }
                        return line
                    }
                    guard let chunk = try reader.read(upTo: 4096) else {
                        // false: cancelled (the deadline passed) or stopped.
                        guard await reader.waitReadable() else { throw RemoteError(.cancelled, "stopped waiting for \(what)") }
                        continue
                    }
                    if chunk.isEmpty { throw RemoteError(.interrupted, "end of output before \(what)") }
                    buffer.withLock { $0 += chunk }
                }
            }
        }

        /// The first line, read already or to come, that starts with `prefix` and contains `text`.
        func line(startingWith prefix: String, containing text: String, within time: Duration) async throws -> String {
            if let seen = history.withLock({ $0.first { $0.hasPrefix(prefix) && $0.contains(text) } }) { return seen }
            let deadline = ContinuousClock.now.advanced(by: time)
            while true {
                let line = try await self.line(startingWith: prefix, within: ContinuousClock.now.duration(to: deadline))
                if line.contains(text) { return line }
            }
        }

        func line(startingWith prefix: String, within time: Duration) async throws -> String {
            let deadline = ContinuousClock.now.advanced(by: time)
            while true {
                let line = try await self.line(within: ContinuousClock.now.duration(to: deadline), "a line starting with \"\(prefix)\"")
                if line.hasPrefix(prefix) { return line }
            }
        }

        /// Everything up to end of file.
        @discardableResult
        func all(within time: Duration, _ what: String) async throws -> String {
            try await withDeadline(time, what) { [self] in
                var all = buffer.withLock { $0 }
                while true {
                    guard let chunk = try reader.read(upTo: 4096) else {
                        guard await reader.waitReadable() else { throw RemoteError(.cancelled, "stopped waiting for \(what)") }
                        continue
                    }
                    if chunk.isEmpty { break }
                    all += chunk
                }
                reader.stop()
                return String(decoding: all, as: UTF8.self)
            }
        }
    }

    /// The window's position on the screen.
    static func geometry(_ screen: Screen) async throws -> (id: String, x: Int, y: Int) {
        let id = try await screen.run("/usr/bin/xdotool", ["search", "--sync", "--name", "^demo-share$"])
            .split(separator: "\n").first.map(String.init) ?? ""
        let shell = try await screen.run("/usr/bin/xdotool", ["getwindowgeometry", "--shell", id])
        var values: [String: Int] = [:]
        for line in shell.split(separator: "\n") {
            let parts = line.split(separator: "=")
            if parts.count == 2 { values[String(parts[0])] = Int(parts[1]) }
        }
        return (id, values["X"] ?? 0, values["Y"] ?? 0)
    }

    static func rgb(_ word: UInt32) -> UInt32 { word & 0x00FF_FFFF }

    /// Whether the screenshot shows `image` at (`x`, `y`), pixel for pixel (colour only).
    static func shows(_ screen: RemoteImage, _ image: RemoteImage, atX x: Int, y: Int) -> (Bool, String) {
        for row in 0..<image.height {
            for column in 0..<image.width where rgb(screen.pixel(x: x + column, y: y + row)) != rgb(image.pixel(x: column, y: row)) {
                return (false, "pixel (\(column), \(row)) of the view is \(String(rgb(image.pixel(x: column, y: row)), radix: 16)) in its image, \(String(rgb(screen.pixel(x: x + column, y: y + row)), radix: 16)) on screen")
            }
        }
        return (true, "")
    }

    /// Presses F12 (the window settles the view, then writes the image on screen) and checks
    /// that the screen shows that image, pixel for pixel, below the bar; returns the image.
    static func settledAndShown(_ screen: Screen, _ window: (id: String, x: Int, y: Int)) async throws -> RemoteImage {
        try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "F12"])
        let image = try RemoteImage(contentsOfPNG: String(try await screen.await("window: snapshot").dropFirst("window: snapshot ".count)))
        let (same, difference) = shows(try await screen.screenshot(), image, atX: window.x, y: window.y + 44)
        #expect(same, "\(difference)")
        return image
    }

    @Test("the sheet is shown, its header saying what is shared (the text's first line, the URL's host), light and dark; a click presents Notes; the screen shows the service's pixels where the view is; typed text shows; a resize relays the view out; a killed service leaves its frame dimmed with the reason")
    func window() async throws {
        #expect(access("/usr/bin/Xvfb", X_OK) == 0 && access("/usr/bin/xdotool", X_OK) == 0, "scripts/bootstrap installs xvfb, xdotool and imagemagick")
        try await withoutLeaks(within: .seconds(90)) {
            let screen = try await Screen(arguments: ["--size", "560x420"])
            do {
                let sheet = try await screen.await("window: sheet")
                #expect(sheet == "window: sheet com.example.demo-share.notes")
                #expect(try await screen.await("window: header") == "window: header Text: Look at this sunset! | Link: example.com")
                let window = try await Self.geometry(screen)
                // The sheet: its background, the header's first card and Notes's row (white).
                let shot = try await screen.screenshot()
                #expect(Self.rgb(shot.pixel(x: window.x + 4, y: window.y + 4)) == 0xF2F2F7, "the sheet's background")
                #expect(Self.rgb(shot.pixel(x: window.x + 20, y: window.y + 44)) == 0xFFFFFF, "the header's card of the text")
                #expect(Self.rgb(shot.pixel(x: window.x + 400, y: window.y + 120)) == 0xFFFFFF, "Notes's row")
                // F2 darkens the sheet and its header as well, and again brings them back.
                try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "F2"])
                try await screen.await("window: traits dark")
                try await screen.await("window: sheet shown dark")
                let darkSheet = try await screen.screenshot()
                #expect(Self.rgb(darkSheet.pixel(x: window.x + 4, y: window.y + 4)) == 0x1C1C1E, "the sheet, dark")
                #expect(Self.rgb(darkSheet.pixel(x: window.x + 20, y: window.y + 44)) == 0x2C2C2E, "the header's card, dark")
                try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "F2"])
                try await screen.await("window: traits light")
                try await screen.await("window: sheet shown light")
                try await screen.keepScreenshot(of: window.id, as: "window-sheet")

                // A click on the row presents Notes: the view below the bar, its pixels exactly.
                try await screen.run("/usr/bin/xdotool", ["mousemove", "--window", window.id, "100", "125", "click", "1"])
                try await screen.await("window: presenting com.example.demo-share.notes")
                let pid = try #require(Int32(try await screen.await("window: pid").split(separator: " ").last ?? ""))
                try await screen.await("window: shown 560x376")
                let first = try await Self.settledAndShown(screen, window)

                // Typing into the text field (a click gives it the focus): the next frame shows it.
                try await screen.run("/usr/bin/xdotool", ["mousemove", "--window", window.id, "300", "150", "click", "1"])
                try await screen.run("/usr/bin/xdotool", ["type", "--window", window.id, "hello"])
                let typed = try await Self.settledAndShown(screen, window)
                let field = (0..<typed.width).contains { x in typed.pixel(x: x, y: 120) != first.pixel(x: x, y: 120) }
                #expect(field, "the text field's row changed")
                try await screen.keepScreenshot(of: window.id, as: "window-notes")
                // The view's state, with what was typed, reaches the host (after a frame it showed).
                let stored = try await screen.lines.line(startingWith: "window: state stored", containing: "hello", within: .seconds(20))
                #expect(stored.contains("demo-share.field.1"), "\(stored)")

                // Dark traits (F2): the service draws itself dark, and the screen shows it.
                try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "F2"])
                try await screen.await("window: traits dark")
                let darkImage = try await Self.settledAndShown(screen, window)
                let lightBackground = typed.pixel(x: 4, y: 300), darkBackground = darkImage.pixel(x: 4, y: 300)
                #expect((darkBackground & 0xFF) + 64 < (lightBackground & 0xFF), "dark: \(String(darkBackground, radix: 16)) from \(String(lightBackground, radix: 16))")
                // The host's own chrome too: the bar is dark.
                let darkShot = try await screen.screenshot()
                #expect(Self.rgb(darkShot.pixel(x: window.x + 4, y: window.y + 4)) == 0x2C2C2E, "the bar, dark")
                try await screen.keepScreenshot(of: window.id, as: "window-dark")
                try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "F2"])
                try await screen.await("window: traits light")

                // A smaller window: the view is laid out again at the new size.
                try await screen.run("/usr/bin/xdotool", ["windowsize", window.id, "480", "400"])
                try await screen.await("window: shown 480x356")
                let beforeKill = try await Self.settledAndShown(screen, window)
                try await screen.keepScreenshot(of: window.id, as: "window-before-kill")

                // The service killed: its last frame stays, dimmed, under the reason.
                kill(pid, SIGKILL)
                let ended = try await screen.await("window: ended")
                #expect(ended.contains("killed") || ended.contains("SIGKILL"), "\(ended)")
                let dead = try await screen.screenshot()
                let live = typed.pixel(x: 4, y: 300)
                let dimmed = dead.pixel(x: window.x + 4, y: window.y + 44 + 300)
                #expect(Self.rgb(dimmed) != Self.rgb(live) && (dimmed & 0xFF) < (live & 0xFF), "dimmed: \(String(dimmed, radix: 16)) from \(String(live, radix: 16))")
                #expect(Self.rgb(dead.pixel(x: window.x + 4, y: window.y + 4)) == 0x5C1A1A, "the bar says it ended")
                // It stays so (no return to the sheet by itself), with Back and Relaunch.
                try await screen.keepScreenshot(of: window.id, as: "window-ended")

                // Relaunch (the button at the bar's right end): the share retried, a new process,
                // shown with the state the view had: the typed text, its caret and its focus.
                try await screen.run("/usr/bin/xdotool", ["mousemove", "--window", window.id, String(480 - 50), "20", "click", "1"])
                let relaunch = try await screen.await("window: relaunch com.example.demo-share.notes")
                #expect(relaunch.contains("with its"), "\(relaunch)")
                try await screen.await("window: presenting com.example.demo-share.notes")
                let newPid = try #require(Int32(try await screen.await("window: pid").split(separator: " ").last ?? ""))
                #expect(newPid != pid)
                try await screen.await("window: shown 480x356")
                let relaunched = try await Self.settledAndShown(screen, window)
                try await screen.keepScreenshot(of: window.id, as: "window-relaunched")
                // The text field (its rows: the band around y = 120 that typing changed) as before the kill.
                let fieldRows = (0..<relaunched.height).filter { y in (0..<typed.width).contains { x in typed.pixel(x: x, y: y) != first.pixel(x: x, y: y) } }
                #expect(!fieldRows.isEmpty)
                for y in fieldRows where y < beforeKill.height {
                    let column = (0..<beforeKill.width).first { x in relaunched.pixel(x: x, y: y) != beforeKill.pixel(x: x, y: y) }
                    #expect(column == nil, "row \(y) of the text field differs at x = \(column ?? -1) after the relaunch")
                    if column != nil { break }
                }
                #expect(relaunched == beforeKill, "the whole view comes back as it was before the kill")
                // A media key goes as a remote-control command.
                try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "XF86AudioPlay"])
                #expect(try await screen.await("window: remote") == "window: remote togglePlayPause")
            } catch {
                try? await screen.close()
                throw error
            }
            try await screen.close()
        }
    }

    /// Runs `demo-share window` with `arguments` (a --bench run), checks the figures it prints
    /// (`described` after "window: bench ", the latency measured from `start`), and that it
    /// exits 0 by itself.
    static func checkBench(_ arguments: [String], described: String, from start: String) async throws {
        try await withoutLeaks(within: .seconds(60)) {
            let screen = try await Screen(arguments: arguments, snapshots: false)
            do {
                #expect(try await screen.await("window: bench") == "window: bench \(described), renderer software")
                let shown = try await screen.await("window: ")
                let frames = Int(shown.split(separator: " ")[1]) ?? 0
                #expect(frames > 0 && shown.contains("frames shown in") && shown.contains("fps"), "\(shown)")
                #expect(try await screen.await("window: \(start) to SDL_RenderPresent returning: median").contains("p99"))
                #expect(try await screen.await("window: host CPU").hasSuffix("of one core (user + system)"))
                #expect(try await screen.demo.waitForExit() == .exited(0))
                try await screen.lines.all(within: .seconds(10), "the rest of the output")
                screen.server.send(signal: SIGTERM)
                _ = try await screen.server.waitForExit()
                screen.folder.remove()
            } catch {
                try? await screen.close()
                throw error
            }
        }
    }

    @Test("--bench: the animation service repaints a 1280×720 view for a second; the window shows its frames and prints the figures")
    func bench() async throws {
        try await Self.checkBench(["--bench", "1"], described: "1280x720 pixels, full damage", from: "commit")
    }

    @Test("--bench --bench-baseline: the same repaint drawn by the window itself (remoteview-bench's baseline) prints the same figures")
    func benchBaseline() async throws {
        try await Self.checkBench(["--bench", "0.5", "--bench-baseline"],
                                  described: "1280x720 pixels, full damage, drawn in the window's process (no service)", from: "drawing")
    }

    @Test("--scale 2000: the view is drawn at twice the pixels of its points (a HiDPI display's scale), and shown in the window")
    func scale() async throws {
        try await withoutLeaks(within: .seconds(60)) {
            let screen = try await Screen(arguments: ["--size", "320x244", "--scale", "2000", "--activity", "notes"])
            do {
                try await screen.await("window: presenting com.example.demo-share.notes")
                try await screen.await("window: shown 640x400")
            } catch {
                try? await screen.close()
                throw error
            }
            try await screen.close()
        }
    }

    /// `demo-share window --activity notes --output FOLDER`: Notes presented at once; `save`
    /// gets to its Save and presses it, its own way. Then the note must be written, the share
    /// completed, its result shown in the bar, and the sheet back, its keyboard focus on Notes's
    /// row (Return presents Notes again). A failure records the window's last lines, to tell a
    /// key that went astray from one that never came.
    static func saveNote(in folder: String, _ save: @escaping @Sendable (Screen, (id: String, x: Int, y: Int)) async throws -> Void) async throws {
        try await withoutLeaks(within: .seconds(60)) {
            let output = try TemporaryFolder(folder)
            defer { output.remove() }
            let screen = try await Screen(arguments: ["--size", "560x420", "--activity", "notes", "--output", output.path])
            do {
                try await screen.await("window: presenting com.example.demo-share.notes")
                try await screen.await("window: shown 560x376")
                let window = try await Self.geometry(screen)
                try await save(screen, window)
                // The items are written before the outcome is shown.
                let wrote = try await screen.await("window: wrote")
                let outcome = try await screen.await("window: outcome")
                #expect(outcome.hasPrefix("window: outcome completed, returning 1 item(s)"), "\(outcome)")
                let path = String(wrote.dropFirst("window: wrote ".count))
                #expect(path.hasPrefix(output.path + "/"))
                let contents = Syscall.readSmallFile(path, limit: 1 << 16).map { String(decoding: $0, as: UTF8.self) } ?? ""
                #expect(contents.contains("Look at this sunset!"), "\(contents)")
                // The result, for a moment, then the sheet again (the window's own deadline).
                #expect(try await screen.await("window: result") == "window: result Done — saved 1 item")
                #expect(try await screen.await("window: back to the sheet") == "window: back to the sheet, focus on Notes")
                #expect(!screen.lines.seen.contains { $0.hasPrefix("window: closing") }, "the window stays without --once")
                let sheet = try await screen.screenshot()
                #expect(Self.rgb(sheet.pixel(x: window.x + 4, y: window.y + 4)) == 0xF2F2F7, "the sheet is back")
                // The keyboard focus is on Notes's row: Return presents it again.
                try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "Return"])
                try await screen.await("window: presenting com.example.demo-share.notes")
            } catch {
                Issue.record("the window's last lines: \(screen.lines.seen.suffix(20).joined(separator: " | "))")
                try? await screen.close()
                throw error
            }
            try await screen.close()
        }
    }

    @Test("--activity and --output: Notes presented at once; a click on Save completes the share, the returned note is written to the folder, the bar says 'Done — saved 1 item', and the sheet comes back with Notes focused")
    func savedItems() async throws {
        try await Self.saveNote(in: "remoteview-window-output") { screen, window in
            // Save, at the bottom right of the view (below the 44-point bar).
            try await screen.run("/usr/bin/xdotool", ["mousemove", "--window", window.id, "415", String(44 + 339), "click", "1"])
        }
    }

    @Test("the keyboard alone: Tab goes through Notes (the field, Cancel, Save) and out to the bar's Cancel, back in at the field; Shift-Tab leaves backward and comes back at Save, which shows a focus ring; Space presses Save and the note is written")
    func keyboardOnly() async throws {
        try await Self.saveNote(in: "remoteview-window-keyboard") { screen, window in
            func keys(_ names: String...) async throws {
                try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id] + names)
            }
            // The field has the focus: past it, Cancel and Save, Tab leaves the activity.
            try await keys("Tab", "Tab", "Tab")
            try await screen.await("window: focus left the activity forward")
            try await keys("Tab")
            try await screen.await("window: focus to the activity forward")
            // Back at the field, its first control: Shift-Tab leaves at once. (Shift down,
            // then Tab, then up, each its own xdotool run: the window has the shift before
            // the Tab.)
            func shiftTab() async throws {
                try await screen.run("/usr/bin/xdotool", ["keydown", "--window", window.id, "shift"])
                try await keys("Tab")
                try await screen.run("/usr/bin/xdotool", ["keyup", "--window", window.id, "shift"])
            }
            try await shiftTab()
            try await screen.await("window: focus left the activity backward")
            try await shiftTab()
            try await screen.await("window: focus to the activity backward")
            // Save, the last control, has the focus: its ring is on screen.
            let shot = try await Self.settledAndShown(screen, window)
            // Save's top edge is at y = 320 (SheetLayout): the ring is the two rows 4 and 3 above it.
            let ring = shot.pixel(x: 415, y: 320 - 3)
            let (red, blue) = ((ring >> 16) & 0xFF, ring & 0xFF)
            #expect(blue > red + 100, "a blue focus ring above Save: \(String(ring, radix: 16))")
            try await screen.keepScreenshot(of: window.id, as: "window-keyboard-focus")
            try await keys("space")
        }
    }

    // MARK: the header, the result and the way back

    /// Writes `bytes` to `name` in `folder`; returns its path.
    static func write(_ bytes: [UInt8], _ name: String, in folder: TemporaryFolder) throws -> String {
        let path = folder.path + "/" + name
        let fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0o644)
        try #require(fd >= 0, "open \(path)")
        defer { close(fd) }
        try #require(bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) } == bytes.count, "write \(path)")
        return path
    }

    /// A PNG's signature and its IHDR chunk declaring `width` × `height` (8-bit RGB), and nothing
    /// else: a header that says what it likes, with no pixels behind it.
    static func pngHeader(width: UInt32, height: UInt32) -> [UInt8] {
        func word(_ value: UInt32) -> [UInt8] { [24, 16, 8, 0].map { UInt8((value >> $0) & 0xFF) } }
        return [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + word(13) + Array("IHDR".utf8) + word(width) + word(height)
            + [8, 2, 0, 0, 0] + [0, 0, 0, 0]
    }

    /// Waits for the window to exit by itself; returns how, after its output and the server.
    static func exited(_ screen: Screen) async throws -> Termination {
        let termination = try await screen.demo.waitForExit()
        try await screen.lines.all(within: .seconds(10), "the rest of the window's output")
        screen.server.send(signal: SIGTERM)
        _ = try await screen.server.waitForExit()
        screen.folder.remove()
        return termination
    }

    @Test("the header shows a PNG's thumbnail (decoded off the window's thread, then drawn); a PNG whose header declares over 64 megapixels gets the image glyph without being decoded, as does one Cairo cannot decode; each item's name, kind and size")
    func thumbnails() async throws {
        try await withoutLeaks(within: .seconds(60)) {
            let images = try TemporaryFolder("remoteview-window-images")
            defer { images.remove() }
            let red = images.path + "/red.png"
            try RemoteImage(width: 200, height: 100) { _, _ in 0xFFFF_0000 }.writePNG(to: red)
            let huge = try Self.write(Self.pngHeader(width: 10_000, height: 10_000), "huge.png", in: images)
            // A header that is small enough, and no image data after it.
            let broken = try Self.write(Self.pngHeader(width: 10, height: 10), "broken.png", in: images)
            let screen = try await Screen(arguments: ["--size", "560x420", "--image", red, "--image", huge, "--image", broken])
            do {
                try await screen.await("window: sheet")
                let header = try await screen.await("window: header")
                #expect(header.hasPrefix("window: header red.png, image, ") && header.contains(" | huge.png, image, 33 bytes | broken.png, image, 33 bytes"),
                        "\(header)")
                // The lines come once each result is drawn (before or after the sheet's first).
                let thumbnail = try await screen.lines.line(startingWith: "window: thumbnail", containing: "red.png", within: .seconds(20))
                #expect(thumbnail == "window: thumbnail red.png 96x48", "scaled down to 96 pixels at most, its aspect kept")
                let refused = try await screen.lines.line(startingWith: "window: no thumbnail for huge.png", containing: "", within: .seconds(20))
                #expect(refused == "window: no thumbnail for huge.png: its header declares 10000 × 10000 pixels, more than 64 megapixels (or none)",
                        "refused by its header, before any decoding")
                let undecodable = try await screen.lines.line(startingWith: "window: no thumbnail for broken.png", containing: "", within: .seconds(20))
                #expect(undecodable.contains("cannot decode the PNG: "), "\(undecodable)")
                #expect(!screen.lines.seen.contains { $0.hasPrefix("window: thumbnail huge.png") })
                let window = try await Self.geometry(screen)
                let shot = try await screen.screenshot()
                // The first card's 36-point square at (22, 48): the 2:1 thumbnail fills its middle rows.
                #expect(Self.rgb(shot.pixel(x: window.x + 40, y: window.y + 66)) == 0xFF0000, "the thumbnail, red")
                // The second card's square at (200.7, 48): the image glyph's hills, filled in the secondary grey.
                #expect(Self.rgb(shot.pixel(x: window.x + 216, y: window.y + 72)) == 0x6E6E73, "the image glyph for huge.png")
                try await screen.keepScreenshot(of: window.id, as: "window-header")
            } catch {
                Issue.record("the window's last lines: \(screen.lines.seen.suffix(20).joined(separator: " | "))")
                try? await screen.close()
                throw error
            }
            try await screen.close()
        }
    }

    @Test("Escape goes where the focus is: on the bar's Cancel (Tab out of Notes) it is the host's Cancel, the share ends cancelled and the sheet comes back; on the sheet it closes the window")
    func escapeOnCancel() async throws {
        try await withoutLeaks(within: .seconds(60)) {
            let screen = try await Screen(arguments: ["--size", "560x420", "--activity", "notes"])
            do {
                try await screen.await("window: shown 560x376")
                let window = try await Self.geometry(screen)
                try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "Tab", "Tab", "Tab"])
                try await screen.await("window: focus left the activity forward")
                try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "Escape"])
                #expect(try await screen.await("window: cancel") == "window: cancel, by the keyboard on the bar's Cancel")
                #expect(try await screen.await("window: outcome").hasPrefix("window: outcome cancelled"))
                #expect(try await screen.await("window: result").hasPrefix("window: result Cancelled"))
                #expect(try await screen.await("window: back to the sheet") == "window: back to the sheet, focus on Notes")
                try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "Escape"])
                try await screen.await("window: closed")
                #expect(try await Self.exited(screen) == .exited(0), "Escape on the sheet closes the window")
            } catch {
                Issue.record("the window's last lines: \(screen.lines.seen.suffix(20).joined(separator: " | "))")
                try? await screen.close()
                throw error
            }
        }
    }

    @Test("the sheet is ranked by the user's preferences: Post, which completed a share of an image, comes before Markup for an image; with --no-preferences, identifier order")
    func ranked() async throws {
        let images = try TemporaryFolder("remoteview-window-ranked")
        defer { images.remove() }
        let red = images.path + "/red.png"
        try RemoteImage(width: 20, height: 10) { _, _ in 0xFFFF_0000 }.writePNG(to: red)
        let preferences = SharePreferences(folder: images.path + "/state/remoteview")
        try preferences.recordCompletedShare(by: "com.example.demo-share.post", kinds: [.image])
        for (arguments, expected) in [([String](), "window: sheet com.example.demo-share.post com.example.demo-share.markup"),
                                      (["--no-preferences"], "window: sheet com.example.demo-share.markup com.example.demo-share.post")] {
            try await withoutLeaks(within: .seconds(60)) {
                let screen = try await Screen(arguments: ["--size", "560x420", "--image", red] + arguments, snapshots: false,
                                              environment: ["XDG_STATE_HOME": images.path + "/state"])
                do {
                    #expect(try await screen.await("window: sheet ") == expected)
                    try await screen.close()
                } catch {
                    Issue.record("the window's last lines: \(screen.lines.seen.suffix(20).joined(separator: " | "))")
                    try? await screen.close()
                    throw error
                }
            }
        }
    }

    @Test("Edit: every share activity with a switch; Notes turned off from the keyboard is no longer offered (the user's preferences keep it, and why-not says so), and turned on again it is; a click on Edit and on a switch works the same")
    func editActivities() async throws {
        try await withoutLeaks(within: .seconds(60)) {
            let screen = try await Screen(arguments: ["--size", "560x420", "--text", "Hello"])
            do {
                #expect(try await screen.await("window: sheet ") == "window: sheet com.example.demo-share.notes")
                let window = try await Self.geometry(screen)
                try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "e"])
                #expect(try await screen.await("window: edit ") == "window: edit Markup=on Notes=on Post=on")
                try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "Down"])
                #expect(try await screen.await("window: edit focus") == "window: edit focus on Notes")
                try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "space"])
                #expect(try await screen.await("window: Notes turned") == "window: Notes turned off")
                try await screen.keepScreenshot(of: window.id, as: "window-edit")
                let state = screen.folder.path + "/.local/state/remoteview/share-sheet.json"
                let kept = String(decoding: Syscall.readSmallFile(state, limit: 65536) ?? [], as: UTF8.self)
                #expect(kept.contains("\"com.example.demo-share.notes\" : {\n      \"off\" : true"), "\(kept)")
                try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "Escape"])
                #expect(try await screen.await("window: sheet offers") == "window: sheet offers nothing, focus on Edit")
                // Why not: the sheet says Notes was turned off.
                try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "w"])
                try await screen.keepScreenshot(of: window.id, as: "window-edit-why-not")

                // With the pointer: Edit at the top right, then Notes' row (the second), then Done.
                try await screen.run("/usr/bin/xdotool", ["mousemove", "--window", window.id, "520", "24", "click", "1"])
                #expect(try await screen.await("window: edit ") == "window: edit Markup=on Notes=off Post=on")
                try await screen.run("/usr/bin/xdotool", ["mousemove", "--window", window.id, "200", "\(76 + 56 + 20)", "click", "1"])
                #expect(try await screen.await("window: Notes turned") == "window: Notes turned on")
                try await screen.run("/usr/bin/xdotool", ["mousemove", "--window", window.id, "520", "24", "click", "1"])
                #expect(try await screen.await("window: sheet offers") == "window: sheet offers com.example.demo-share.notes, focus on Edit")
                try await screen.close()
            } catch {
                Issue.record("the window's last lines: \(screen.lines.seen.suffix(20).joined(separator: " | "))")
                try? await screen.close()
                throw error
            }
        }
    }

    @Test("--once: Escape with the focus in Notes goes to Notes (its own Cancel takes it, not the host's); the result is shown, then the window closes, exiting 1 (not completed)")
    func escapeInActivityOnce() async throws {
        try await withoutLeaks(within: .seconds(60)) {
            let screen = try await Screen(arguments: ["--size", "560x420", "--activity", "notes", "--once"])
            do {
                try await screen.await("window: shown 560x376")
                let window = try await Self.geometry(screen)
                try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "Escape"])
                #expect(try await screen.await("window: outcome").hasPrefix("window: outcome cancelled"))
                #expect(try await screen.await("window: result").hasPrefix("window: result Cancelled"))
                try await screen.await("window: closing (--once)")
                #expect(!screen.lines.seen.contains { $0.hasPrefix("window: cancel") }, "the host's Cancel was not pressed: \(screen.lines.seen)")
                #expect(!screen.lines.seen.contains { $0.hasPrefix("window: back to the sheet") })
                #expect(try await Self.exited(screen) == .exited(1))
            } catch {
                Issue.record("the window's last lines: \(screen.lines.seen.suffix(20).joined(separator: " | "))")
                try? await screen.close()
                throw error
            }
        }
    }

    @Test("--once: a completed share (Save) shows its result, then the window closes by itself and exits 0")
    func onceCompletes() async throws {
        try await withoutLeaks(within: .seconds(60)) {
            let output = try TemporaryFolder("remoteview-window-once")
            defer { output.remove() }
            let screen = try await Screen(arguments: ["--size", "560x420", "--activity", "notes", "--once", "--output", output.path])
            do {
                try await screen.await("window: shown 560x376")
                let window = try await Self.geometry(screen)
                try await screen.run("/usr/bin/xdotool", ["mousemove", "--window", window.id, "415", String(44 + 339), "click", "1"])
                #expect(try await screen.await("window: result") == "window: result Done — saved 1 item")
                try await screen.await("window: closing (--once)")
                try await screen.await("window: closed")
                #expect(try await Self.exited(screen) == .exited(0))
            } catch {
                Issue.record("the window's last lines: \(screen.lines.seen.suffix(20).joined(separator: " | "))")
                try? await screen.close()
                throw error
            }
        }
    }

    @Test("a killed service's share does not go back by itself: the bar's Back is reached with Tab and pressed with Return, back to the sheet (Notes focused, Return presents it again); killed again, Escape is Back")
    func backAfterCrash() async throws {
        try await withoutLeaks(within: .seconds(90)) {
            let screen = try await Screen(arguments: ["--size", "560x420", "--activity", "notes"])
            do {
                let window = try await Self.geometry(screen)
                for round in 0..<2 {
                    try await screen.await("window: presenting com.example.demo-share.notes")
                    let pid = try #require(Int32(try await screen.await("window: pid").split(separator: " ").last ?? ""))
                    try await screen.await("window: shown 560x376")
                    kill(pid, SIGKILL)
                    try await screen.await("window: ended")
                    if round == 0 {
                        try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "Tab"])
                        #expect(try await screen.await("window: focus on") == "window: focus on Back")
                        try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "Return"])
                        #expect(try await screen.await("window: back,") == "window: back, by the keyboard on the bar's Back")
                    } else {
                        try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "Escape"])
                        #expect(try await screen.await("window: back,") == "window: back, by Escape")
                    }
                    #expect(try await screen.await("window: back to the sheet") == "window: back to the sheet, focus on Notes")
                    #expect(!screen.lines.seen.contains { $0.hasPrefix("window: result") }, "an interrupted share shows no result to go back after")
                    if round == 0 { try await screen.run("/usr/bin/xdotool", ["key", "--window", window.id, "Return"]) }
                }
            } catch {
                Issue.record("the window's last lines: \(screen.lines.seen.suffix(20).joined(separator: " | "))")
                try? await screen.close()
                throw error
            }
            try await screen.close()
        }
    }
}

/// The window as a screen reader uses it: `Tests/Accessibility/atspi-share.py`, a pyatspi client
/// (Debian's `python3-pyatspi`, so Debian's `/usr/bin/python3`), in a private session bus
/// (`dbus-run-session`, which starts at-spi2-core's accessibility bus and registry on demand) on
/// its own Xvfb, shares with Notes through AT-SPI alone.
extension WindowTests {
    @Test("a screen reader's share through AT-SPI: the sheet's entries and header by name, Notes pressed (Action), the activity's field read (Text) and set (EditableText), a focus event when Tab moves between its controls, Save found by role and name and pressed: the share completes, the note holds the text, and the sheet comes back with Notes focused; in Edit, Notes is a checked check box, pressed it turns off (a checked event), and Done shows the sheet without it")
    func screenReader() async throws {
        #expect(access("/usr/bin/python3", X_OK) == 0 && access("/usr/bin/dbus-run-session", X_OK) == 0
                && access("/usr/libexec/at-spi-bus-launcher", X_OK) == 0,
                "scripts/bootstrap installs at-spi2-core, python3-pyatspi, gir1.2-atspi-2.0 and dbus")
        let folder = try TemporaryFolder("remoteview-atspi")
        defer { folder.remove() }
        // The accessibility bus's socket goes under XDG_RUNTIME_DIR: a folder of this run's own.
        let runtime = folder.path + "/runtime", output = folder.path + "/output"
        #expect(mkdir(runtime, 0o700) == 0 && mkdir(output, 0o755) == 0)
        let (server, display) = try await Screen.startServer()
        let pipe = try Syscall.pipe()
        let writeEnd = pipe.second
        var options = ChildProcess.Options()
        options.pass(writeEnd, as: 1)
        options.pass(try writeEnd.duplicate(), as: 2)
        options.environment = ["DISPLAY": display, "PATH": "/usr/bin:/bin", "HOME": folder.path, "XDG_RUNTIME_DIR": runtime,
                               "SDL_RENDER_DRIVER": "software"]
        let demo = testServiceExecutable.replacing("remoteview-test-service", with: "demo-share")
        let script = UppercaseShareTests.repository + "/Tests/Accessibility/atspi-share.py"
        let client = try await ChildProcess.launch(executable: "/usr/bin/dbus-run-session",
                                                   arguments: ["--", "/usr/bin/python3", script, demo, output], options: options)
        _ = consume writeEnd
        let lines = LineReader(try ReadableDescriptor(pipe.first))
        let text = try await lines.all(within: .seconds(120), "the pyatspi client's output")
        let termination = try await client.waitForExit()
        server.send(signal: SIGTERM)
        _ = try await server.waitForExit()
        let failed = text.split(separator: "\n").filter { $0.hasPrefix("FAIL ") }
        #expect(termination == .exited(0) && failed.isEmpty, "\(termination): \(failed)\n\(text)")
        for check in ["PASS the sheet's entry \"Notes\" (a list item)",
                      "PASS the header's labels \"Text: Look at this sunset!\" and \"Link: example.com\"",
                      "PASS Notes's row has the keyboard focus", "PASS pressing Notes presents it",
                      "PASS setTextContents reaches the activity and comes back in its tree",
                      "PASS Tab: the field loses the focus and the next control gains it (object:state-changed:focused)",
                      "PASS pressing Save completes the share",
                      "PASS the note holds the text set through AT-SPI: 'Written through AT-SPI\\nhttps://example.com/sunset'",
                      "PASS the sheet's Notes is back in the tree, with the focus",
                      "PASS Notes's check box is checked (on)", "PASS an object:state-changed:checked event says so",
                      "PASS Notes is no longer in the sheet's list"] {
            #expect(text.contains(check), "\(check)\n\(text)")
        }
        // The session's daemons (the bus, at-spi-bus-launcher, the registry) are gone with it.
        #expect(childProcesses().isEmpty, "\(childProcesses())")
    }
}
