// `demo-share window`: the share sheet in a real window (SDL2), an activity's remote view
// embedded in it and driven by the mouse and keyboard, presented at the display's pace.
import ArgumentParser
import CAccessibilityBridge
import CCairo
import CSDL2
import Foundation
import RemoteHost

struct WindowCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "window",
        abstract: "Show the share sheet in a window; a click presents an activity's view, live.",
        discussion: """
            With no items, the demo's text and URL are shared (Notes takes them; the sheet says why \
            Post and Markup do not: press W). The sheet's header shows what is shared: a PNG's \
            thumbnail (when its header declares at most 64 megapixels), a file's name, size and \
            kind, a text's first line, a URL's host. Tab, Shift-Tab and the arrows move between the \
            sheet's rows; Return, Space or a click on an activity launches it, sandboxed, and \
            embeds its view below a bar with its title and progress; the mouse, the keyboard, typed \
            text, focus and media keys go to it; Tab past its last control (Shift-Tab before its \
            first) moves to the bar's Cancel, and Tab there goes back in. Escape goes where the \
            focus is: to the activity (its own Cancel), or on the bar's Cancel, the host's Cancel; \
            on the sheet it closes the window. E (or Edit at the top of the sheet) shows every share \
            activity with a switch: Return or Space turns the focused one off or on (kept in this \
            user's preferences; an activity that is off is not offered), and Escape or Done goes \
            back. When the share ends (done, cancelled or failed), \
            the bar shows the result for 1.5 s, then the sheet comes back (Escape or Return: at \
            once); with --once the window closes instead, exiting 0 when the share completed and 1 \
            otherwise (cancelled, failed, or the window closed first). A service that dies leaves \
            its last frame dimmed, the reason, a Back and a Relaunch button (Tab between them; \
            Escape: Back). F2 switches light and dark. Frames are shown at vsync (the view's \
            manual presentation). Each step is printed on standard output ("window: …"), for \
            scripts and tests. Needs a display (DISPLAY; under Xvfb, xvfb-run works).
            """)

    @OptionGroup var items: ShareItemOptions

    @Option(help: ArgumentHelp("Present this activity at once (its identifier, or notes, post or markup).", valueName: "id"))
    var activity: String?

    @Option(help: ArgumentHelp("Pixels per point, in thousandths (default: the display's, drawable over window size).", valueName: "n"))
    var scale: Int?

    @Option(help: ArgumentHelp("The window's size in points.", valueName: "WxH"))
    var size = "560x420"

    @Option(help: ArgumentHelp("The folder to write the returned items into (made if missing).", valueName: "dir"))
    var output: String?

    @Option(help: ArgumentHelp("F12 settles the view, then writes the image on screen there as view-N.png (made if missing).", valueName: "dir"))
    var snapshot: String?

    @Option(help: ArgumentHelp("Measure instead: show the demo's animation service repainting a --bench-size view for this many seconds; print frames shown per second, the time from commit to SDL_RenderPresent returning, and the host's CPU use.", valueName: "seconds"))
    var bench: Double?

    @Option(help: ArgumentHelp("The animated view's size in points, with --bench.", valueName: "WxH"))
    var benchSize = "1280x720"

    @Flag(help: "Close the window when the share ends, after showing its result, instead of going back to the sheet; exit 0 only when it completed.")
    var once = false

    @Flag(help: "With --bench: draw the same repaint in this process instead, with no service (the window's own rate: the baseline remoteview-bench compares with).")
    var benchBaseline = false

    @Option(help: ArgumentHelp("Also show the activities of the gateway at ADDRESS:PORT (docs/Gateway.md), marked as remote, and embed them; needs --certificate, --key and --ca.", valueName: "address"))
    var gateway: String?

    @Option(help: ArgumentHelp("With --gateway: this host's certificate chain (PEM), from the gateway's client CA.", valueName: "file"))
    var certificate: String?

    @Option(help: ArgumentHelp("With --gateway: this host's private key (PEM).", valueName: "file"))
    var key: String?

    @Option(help: ArgumentHelp("With --gateway: the CA the gateway's certificate must chain to (PEM).", valueName: "file"))
    var ca: String?

    @Option(name: .customLong("server-name"), help: ArgumentHelp("With --gateway: the name the gateway's certificate must carry (default: its address).", valueName: "name"))
    var serverName: String?

    @Option(name: .customLong("gateway-name"), help: ArgumentHelp("With --gateway: its name here; its activities are IDENTIFIER@NAME.", valueName: "name"))
    var gatewayName = "remote"

    @OptionGroup var options: HostOptions

    func validate() throws {
        if gateway != nil, certificate == nil || key == nil || ca == nil {
            throw ValidationError("--gateway needs --certificate, --key and --ca")
        }
        _ = try parseSize(size)
        _ = try parseSize(benchSize, option: "--bench-size")
        if once, bench != nil { throw ValidationError("--once goes with a share, not with --bench") }
        if benchBaseline, bench == nil { throw ValidationError("--bench-baseline goes with --bench SECONDS") }
        if let bench, !(bench > 0 && bench <= 600) { throw ValidationError("--bench must be more than 0 and at most 600 seconds, not \(bench)") }
        if let scale, !(250...8000).contains(scale) { throw ValidationError("--scale must be 250…8000 (thousandths), not \(scale)") }
    }

    func run() async throws {
        Syscall.lineBufferStandardOutput()
        let connector = try gatewayConnector()
        let (width, height) = try parseSize(size)
        var shared = try items.items()
        if shared.isEmpty { shared = try DemoScenario.notes.items() }
        if let output { try makeFolder(output, for: "--output") }
        if let snapshot { try makeFolder(snapshot, for: "--snapshot") }
        let local = try options.registry()
        let preferences = options.sharePreferences()
        let items = shared
        let initial = activity.map(ShareCommand.identifier)
        /// The sheet: the local activities, and the gateway's once the launcher lists them.
        @Sendable func makeSheet(_ launcher: Launcher) async throws -> ShareSheet {
            var registry = local
            if connector != nil {
                let (remote, problems) = await launcher.remoteServices()
                for problem in problems { Syscall.writeStandardError("warning: \(problem.reason.escapedForTerminal())\n") }
                registry = registry.adding(remote: remote)
                print("window: \(remote.count) remote activities".escapedForTerminal())
            }
            let sheet = ShareSheet(registry: registry, items: items, preferences: preferences)
            if let initial, sheet.activity(initial) == nil {
                throw DemoError("\(initial) is not offered for these items: \(sheet.explanation(for: initial) ?? "no such activity")")
            }
            return sheet
        }
        let registry = local
        let output = self.output, scale = self.scale, snapshot = self.snapshot, once = self.once
        if let bench {
            let (benchWidth, benchHeight) = try parseSize(benchSize, option: "--bench-size")
            var configuration = options.launcherConfiguration()
            configuration.remoteServices = connector
            try await withLauncher(registry: registry, configuration: configuration) { launcher in
                let app = try await WindowApp(sheet: try await makeSheet(launcher), launcher: launcher, width: Int32(benchWidth), height: Int32(benchHeight),
                                              scale: scale, output: nil, snapshot: nil, once: false)
                if benchBaseline {
                    try await app.runLocalBench(seconds: bench, width: benchWidth, height: benchHeight)
                } else {
                    try await app.runBench(seconds: bench, width: benchWidth, height: benchHeight)
                }
            }
            return
        }
        // The window takes the focus when Tab leaves an activity (its bar's Cancel).
        var configuration = options.launcherConfiguration()
        configuration.takesFocusFromViews = true
        configuration.remoteServices = connector
        let status = try await withLauncher(registry: registry, configuration: configuration) { launcher in
            let app = try await WindowApp(sheet: try await makeSheet(launcher), launcher: launcher, width: Int32(width), height: Int32(height),
                                          scale: scale, output: output, snapshot: snapshot, once: once)
            return try await app.run(presenting: initial)
        }
        if status != 0 { throw ExitCode(status) }
    }

    /// The launcher's connector for `--gateway`, from a build with the gateway's client. This
    /// build has none (the main package's): it runs its twin that has, with the same arguments
    /// and this build's manifests, and never returns.
    func gatewayConnector() throws -> (any RemoteServiceConnector)? {
        guard let gateway, let certificate, let key, let ca else { return nil }
        if let make = DemoGateways.make.withLock({ $0 }) {
            return try make(DemoGateways.Options(address: gateway, certificate: certificate, key: key, ca: ca, serverName: serverName, name: gatewayName))
        }
        let twin = try DemoGateways.remoteBuild()
        guard access(twin, X_OK) == 0 else {
            throw DemoError("--gateway: this demo-share has no gateway client (the gateway's package depends on this one); build its twin with `cd Network && swift build`, expected at \(twin)")
        }
        var arguments = [twin] + CommandLine.arguments.dropFirst()
        if options.serviceFolders.isEmpty { arguments += ["--services"] + (try options.folders()) }
        var pointers = arguments.map { strdup($0) } + [nil]
        execv(twin, &pointers)
        throw DemoError("--gateway: cannot run \(twin): \(String(cString: strerror(errno)))")
    }
}

/// What other threads hand the window's loop: new damage, activity updates, the outcome, the
/// service's end. Each wakes the loop.
final class WindowInbox: Sendable {
    struct Pending {
        var damage: [PixelRect]? = nil
        var fullFrame = false
        var frames = 0
        var update: ActivityUpdate?
        var outcome: ShareOutcome?
        var settled = false
        /// Tab (or Shift-Tab) left the activity's controls that way.
        var focusLeft: FocusDirection?
        /// The activity's semantic tree changed.
        var treeChanged = false
        /// Whether the items the share returned were written to --output.
        var saved = false
        /// When the oldest frame in `damage` was composited.
        var arrived: ContinuousClock.Instant?
    }

    let wakeEvent: UInt32
    private let pending = Mutex(Pending())

    init(wakeEvent: UInt32) { self.wakeEvent = wakeEvent }

    func change(_ body: (inout Pending) -> Void) {
        pending.withLock { body(&$0) }
        SDLWindow.wake(wakeEvent)
    }

    func take() -> Pending {
        pending.withLock { pending in
            defer { pending = Pending() }
            return pending
        }
    }
}

/// The window and what it shows: the sheet, or one activity's view.
@MainActor
final class WindowApp {
    private let window: SDLWindow
    /// The sheet, ranked by the user's preferences; made again when Edit turns an activity on or off.
    private var sheet: ShareSheet
    private let launcher: Launcher
    private let fixedScale: Int?
    private let output: String?
    private let snapshotFolder: String?
    private var snapshots = 0
    private var explain = false
    /// With --once: the window closes when the share ends, after its result.
    private let once: Bool
    /// Where the sheet's rows, "why not" row and header cards are, in points.
    private var sheetLayout = WindowPainter.SheetLayout()
    private var rows: [PointRect] { sheetLayout.rows }
    private var whyNot: PointRect { sheetLayout.whyNot }
    /// What the sheet's header shows of each shared item.
    private var previews: [ItemPreview]
    /// The header's PNG thumbnails, decoded off this thread.
    private let thumbnails: SheetThumbnails
    /// The sheet's row with the keyboard focus (`rows.count`: the "why not" row, when there
    /// are others; then the Edit button).
    private var sheetFocus = 0
    /// Whether the Edit view (every share activity, on or off) is shown instead of the sheet.
    private var editing = false
    /// The Edit view's row with the keyboard focus (`allActivities.count`: Done).
    private var editFocus = 0
    /// Where the Edit view's rows and Done are, in points.
    private var editLayout = WindowPainter.EditLayout()
    /// When the result of an ended share has been shown long enough: the sheet comes back then
    /// (with --once, the window closes).
    private var resultShownUntil: ContinuousClock.Instant?
    /// How long a share's result stays in the bar.
    static let resultDuration = Duration.milliseconds(1500)
    /// The status the window exits with: with --once, 0 when the share completed.
    private var exitStatus: Int32 = 0
    /// An assistive technology's request closed the window (Back, with --once).
    private var quitRequested = false
    private var presented: Presented?
    private var needsRender = true
    private var dark = false
    /// Whether a shift key is down, from the key events themselves: SDL's modifier state can
    /// lag a key sent right after the shift (xdotool's shift+Tab).
    private var shiftHeld = false
    /// Whether the window has been exposed (mapped and drawable) yet.
    private var exposed = false
    private var sheetAnnounced = false
    /// Lines that describe what the next render shows, printed once it has returned (a test
    /// that reads one may look at the screen at once).
    private var afterRender: [String] = []
    /// The window's export to AT-SPI (nil: the bridge could not start; the window works on).
    private var accessibility: WindowAccessibility?
    /// What the export shows may have changed.
    private var accessibilityDirty = true
    /// The export's ids of the presented activity's nodes (an action's node is found back in
    /// it: actions are rare).
    private var exportIDs: [UInt32: UInt32] = [:]
    private var nextExportID: UInt32 = WindowIDs.firstActivityNode

    /// One activity on screen.
    private final class Presented {
        let activity: ShareActivity
        let session: ShareSession
        /// Input and sizes, sent in order by one task.
        let commands: AsyncStream<Command>.Continuation
        let inbox: WindowInbox
        var update: ActivityUpdate?
        var outcome: String?
        var ended: String?
        var relaunch: PointRect?
        /// The bar's Back, when the service ended.
        var back: PointRect?
        /// The bar's Cancel, while the share is open.
        var cancel: PointRect?
        /// Whether the bar's Cancel has the keyboard focus (Tab left the activity), not the view.
        var cancelFocused = false
        /// Which of Back and Relaunch has the keyboard focus, when the service ended.
        var endedFocus = WindowPainter.BarFocus.relaunch
        /// Whether the share completed (what --once exits with).
        var completed = false

        /// The bar's button with the keyboard focus.
        var barFocus: WindowPainter.BarFocus {
            if ended != nil { return endedFocus }
            return cancelFocused ? .cancel : .none
        }
        /// A composited frame is held until it has been shown (manual presentation).
        var framePending = false
        /// Whether a frame was shown yet.
        var shown = false
        /// The image last uploaded (kept only with --snapshot).
        var shownImage: RemoteImage?
        var tasks: [Task<Void, Never>] = []

        init(activity: ShareActivity, session: ShareSession, commands: AsyncStream<Command>.Continuation, inbox: WindowInbox) {
            self.activity = activity
            self.session = session
            self.commands = commands
            self.inbox = inbox
        }
    }

    enum Command: Sendable {
        case input(InputEvent)
        case resize(SurfaceSize)
        /// Waits until the view has drawn everything sent before, then says so (F12).
        case settle
        /// An assistive technology's action on the activity's node (in order with the input).
        case accessibility(AccessibilityAction, node: UInt32)
    }

    init(sheet: ShareSheet, launcher: Launcher, width: Int32, height: Int32, scale: Int?, output: String?, snapshot: String?,
         once: Bool) throws {
        window = try SDLWindow(title: "demo-share", width: width, height: height)
        self.sheet = sheet
        self.launcher = launcher
        fixedScale = scale
        self.output = output
        snapshotFolder = snapshot
        self.once = once
        previews = sheet.items.map(ItemPreview.init)
        thumbnails = SheetThumbnails(wakeEvent: window.wakeEvent)
    }

    private var scalePermille: Int { fixedScale ?? window.scalePermille }
    private var scale: Double { Double(scalePermille) / 1000 }
    private var barPixels: Int32 { Int32((WindowPainter.barHeight * scale).rounded()) }

    /// The view's size in points: the window below the bar.
    private var viewSize: SurfaceSize {
        let points = window.pointSize
        return SurfaceSize(width: max(1, Int(points.width)), height: max(1, Int(points.height) - Int(WindowPainter.barHeight)),
                           scalePermille: scalePermille)
    }

    /// Runs the window until it is closed; returns the status to exit with (with --once, 0
    /// only when the share completed).
    func run(presenting initial: String?) async throws -> Int32 {
        defer { window.close() }
        accessibility = WindowAccessibility.start(name: "demo-share", wakeEvent: window.wakeEvent)
        defer { accessibility?.stop() }
        thumbnails.start(sheet.items, previews: previews)
        defer { thumbnails.stop() }
        drawSheet()
        if let initial, let activity = sheet.activity(initial) { await present(activity) }
        // With --once, a window closed before a share ended did not complete one.
        if once { exitStatus = 1 }
        var running = true
        while running {
            if let event = window.waitEvent(timeout: 8) {
                running = await handle(event)
                while running, let event = window.pollEvent() { running = await handle(event) }
            }
            applyThumbnails()
            let settled = await applyPending()
            if running, let until = resultShownUntil, ContinuousClock.now >= until { running = await endResult() }
            // An indeterminate progress sweeps: the bar is drawn again about 30 times a second.
            if let presented, presented.outcome == nil, presented.ended == nil, let update = presented.update, update.progress == nil,
               WindowPainter.isBusy(update), ContinuousClock.now - lastSweep >= .milliseconds(33) {
                lastSweep = .now
                drawBar(keepingExport: true)
            }
            await performAccessibilityRequests()
            if quitRequested { running = false }
            if accessibilityDirty, let accessibility {
                accessibilityDirty = false
                let (nodes, focus) = accessibleNodes()
                accessibility.publish(nodes, focus: focus)
            }
            if needsRender {
                needsRender = false
                window.render(barHeight: presented == nil ? 0 : barPixels, dimmed: presented?.ended != nil)
                if presented == nil, exposed, !sheetAnnounced {
                    // On screen: rendered after the window was first exposed.
                    sheetAnnounced = true
                    print("window: sheet \(sheet.activities.map(\.identifier).joined(separator: " "))")
                    print("window: header \(previews.map(\.accessibleName).joined(separator: " | ").escapedForTerminal())")
                }
                if let presented, presented.framePending {
                    presented.framePending = false
                    let image = presented.session.view.image
                    if !presented.shown, let pid = presented.session.connection.processIdentifier { print("window: pid \(pid)") }
                    presented.shown = true
                    print("window: shown \(image.width)x\(image.height)")
                    // Shown at vsync (render returned): the buffer goes back, the next frame may come.
                    try? await presented.session.view.framePresented()
                }
                for line in afterRender { print(line) }
                afterRender.removeAll()
            }
            if settled { writeSnapshot() }
            await Task.yield()
        }
        await dismiss()
        print("window: closed")
        return exitStatus
    }

    // MARK: measuring

    /// Shows the animation service's view at `width` × `height` points while it repaints all of
    /// it every frame for `seconds`, and prints what the window achieved.
    func runBench(seconds: Double, width: Int, height: Int) async throws {
        defer { window.close() }
        let connection = launcher.connection(to: AnimationCommand.identifier)
        let view = RemoteView(connection: connection, presentation: .manual)
        let inbox = WindowInbox(wakeEvent: window.wakeEvent)
        let frames = Task.detached {
            for await damage in view.damage {
                inbox.change { pending in
                    if pending.damage == nil { pending.arrived = .now }
                    pending.damage = (pending.damage ?? []) + damage
                    pending.frames += 1
                }
            }
        }
        defer { frames.cancel() }
        try await view.present(width: width, height: height, scalePermille: scalePermille)
        // The first frame shown, before the clock starts.
        var shownFirst = false
        while !shownFirst {
            if let event = window.waitEvent(timeout: 100), event.type == SDL_QUIT.rawValue { return }
            shownFirst = try await showPending(inbox, view) != nil
        }
        let before = Self.cpuTime(), start = ContinuousClock.now
        let animating = Task.detached {
            _ = try? await connection.request(ServiceMessage(type: "animate", text: String(seconds)), timeout: .seconds(Int64(seconds) + 30))
        }
        var latencies: [Duration] = []
        var composited = 0
        while ContinuousClock.now - start < .milliseconds(Int64(seconds * 1000)) {
            if let event = window.waitEvent(timeout: 1), event.type == SDL_QUIT.rawValue { break }
            while let event = window.pollEvent() { if event.type == SDL_QUIT.rawValue { break } }
            if let (latency, count) = try await showPending(inbox, view) {
                latencies.append(latency)
                composited += count
            }
        }
        let elapsed = ContinuousClock.now - start, after = Self.cpuTime()
        animating.cancel()
        await connection.invalidate()
        let pixels = view.image
        report("\(pixels.width)x\(pixels.height) pixels, full damage", latencies: latencies, composited: composited,
               elapsed: elapsed, cpu: after - before, from: "commit")
    }

    /// The baseline of `runBench`: the same window repainting the same `width` × `height` points
    /// every frame, drawn here with Cairo instead of by a service. What the window and the display
    /// achieve with no RemoteView in the way; `remoteview-bench` runs both and compares.
    func runLocalBench(seconds: Double, width: Int, height: Int) async throws {
        defer { window.close() }
        let size = SurfaceSize(width: width, height: height, scalePermille: scalePermille)
        let (pixelWidth, pixelHeight) = size.pixels
        var canvas = Canvas(width: pixelWidth, height: pixelHeight)
        var frame = 0
        func drawAndShow() -> Duration {
            frame += 1
            let drawn = ContinuousClock.now
            let shade = Double(frame % 200) / 255
            canvas.draw(scale: 1) { cr in
                cairo_set_source_rgb(cr, shade, 0.45, 1 - shade)
                cairo_rectangle(cr, 0, 0, Double(pixelWidth), Double(pixelHeight))
                cairo_fill(cr)
            }
            canvas.pixels.withUnsafeBufferPointer { try? window.updateContent($0, width: pixelWidth, height: pixelHeight, rects: nil) }
            window.render(barHeight: 0, dimmed: false)
            return ContinuousClock.now - drawn
        }
        _ = drawAndShow()
        let before = Self.cpuTime(), start = ContinuousClock.now
        var latencies: [Duration] = []
        while ContinuousClock.now - start < .milliseconds(Int64(seconds * 1000)) {
            var quit = false
            while let event = window.pollEvent() { if event.type == SDL_QUIT.rawValue { quit = true } }
            if quit { break }
            latencies.append(drawAndShow())
        }
        let elapsed = ContinuousClock.now - start, after = Self.cpuTime()
        report("\(pixelWidth)x\(pixelHeight) pixels, full damage, drawn in the window's process (no service)", latencies: latencies,
               composited: latencies.count, elapsed: elapsed, cpu: after - before, from: "drawing")
    }

    /// Prints what a measured run achieved (the lines `remoteview-bench` and the tests read).
    private func report(_ what: String, latencies: [Duration], composited: Int, elapsed: Duration, cpu: Double, from start: String) {
        let sorted = latencies.sorted()
        func milliseconds(_ duration: Duration) -> String { String(format: "%.2f ms", duration.inSeconds * 1000) }
        let median = sorted.isEmpty ? .zero : sorted[sorted.count / 2]
        let p99 = sorted.isEmpty ? .zero : sorted[min(sorted.count - 1, Int(Double(sorted.count) * 0.99))]
        var info = SDL_RendererInfo()
        SDL_GetRendererInfo(window.renderer, &info)
        let renderer = info.name.map { String(cString: $0) } ?? "unknown"
        print("window: bench \(what), renderer \(renderer)")
        print("window: \(latencies.count) frames shown in \(String(format: "%.2f", elapsed.inSeconds)) s: \(String(format: "%.1f", Double(latencies.count) / elapsed.inSeconds)) fps (\(composited) composited)")
        print("window: \(start) to SDL_RenderPresent returning: median \(milliseconds(median)), p99 \(milliseconds(p99))")
        print("window: host CPU \(String(format: "%.0f", cpu / elapsed.inSeconds * 100))% of one core (user + system)")
    }

    /// Uploads and shows a frame waiting in `inbox`, then hands it back; returns the time from
    /// its commit being composited to the present returning, and how many commits it covered.
    private func showPending(_ inbox: WindowInbox, _ view: RemoteView) async throws -> (Duration, Int)? {
        let pending = inbox.take()
        guard let damage = pending.damage, let arrived = pending.arrived else { return nil }
        _ = window.updateContent(from: view, rects: damage)
        window.render(barHeight: 0, dimmed: false)
        let latency = ContinuousClock.now - arrived
        try await view.framePresented()
        return (latency, pending.frames)
    }

    /// This process's CPU time so far (user + system), in seconds.
    private static func cpuTime() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1_000_000
    }

    // MARK: the sheet

    /// Draws the sheet again (or the Edit view, while it is shown).
    private func drawSheet() {
        let pixels = window.pixelSize
        var canvas = Canvas(width: Int(pixels.width), height: Int(pixels.height))
        if editing {
            editLayout = WindowPainter.edit(into: &canvas, scale: scale, sheet: sheet, focus: editFocus, palette: .of(dark: dark))
        } else {
            sheetLayout = WindowPainter.sheet(into: &canvas, scale: scale, previews: previews, sheet: sheet, explain: explain,
                                              focus: sheetFocus, palette: .of(dark: dark))
        }
        canvas.pixels.withUnsafeBufferPointer { try? window.updateContent($0, width: canvas.width, height: canvas.height, rects: nil) }
        needsRender = true
        accessibilityDirty = true
    }

    /// The sheet's focusable rows: the activities', then "why not" when there are others, then Edit.
    private var sheetFocusCount: Int { WindowPainter.editFocusIndex(sheet) + 1 }

    /// Whether the sheet's focus is on its "why not" row.
    private var whyNotFocused: Bool { sheetFocus == sheet.activities.count && !sheet.explanations.isEmpty }

    /// Moves the sheet's keyboard focus `by` rows (wrapping around), and says where it is.
    private func moveSheetFocus(by step: Int) {
        let count = sheetFocusCount
        guard count > 0 else { return }
        sheetFocus = ((sheetFocus + step) % count + count) % count
        drawSheet()
        afterRender.append("window: sheet focus on \(sheetFocusName)")
    }

    /// What the sheet's focused row is called.
    private var sheetFocusName: String {
        sheetFocus < sheet.activities.count ? sheet.activities[sheetFocus].title.escapedForTerminal()
            : whyNotFocused ? "Why not the other \(sheet.explanations.count)?" : "Edit"
    }

    /// Presses the sheet's focused row: presents its activity, or shows why not the others.
    private func pressSheetFocus() async {
        if sheetFocus < sheet.activities.count {
            await present(sheet.activities[sheetFocus])
        } else if whyNotFocused {
            explain.toggle()
            drawSheet()
        } else {
            openEdit()
        }
    }

    // MARK: Edit

    /// Shows the Edit view, the focus on its first row.
    private func openEdit() {
        editing = true
        editFocus = 0
        drawSheet()
        let rows = sheet.allActivities.map { "\($0.title.escapedForTerminal())=\(sheet.isEnabled($0.identifier) ? "on" : "off")" }
        afterRender.append("window: edit \(rows.joined(separator: " "))")
    }

    /// Leaves the Edit view: the sheet again, made with the choices, the focus on Edit.
    private func closeEdit() {
        editing = false
        sheetFocus = WindowPainter.editFocusIndex(sheet)
        drawSheet()
        let offered = sheet.activities.map(\.identifier)
        afterRender.append("window: sheet offers \(offered.isEmpty ? "nothing" : offered.joined(separator: " ")), focus on Edit")
    }

    /// Moves the Edit view's keyboard focus `by` rows (wrapping around, Done last).
    private func moveEditFocus(by step: Int) {
        let count = sheet.allActivities.count + 1
        editFocus = ((editFocus + step) % count + count) % count
        drawSheet()
        afterRender.append("window: edit focus on \(editFocus < sheet.allActivities.count ? sheet.allActivities[editFocus].title.escapedForTerminal() : "Done")")
    }

    /// Presses the Edit view's focused row (its switch) or Done.
    private func pressEditFocus() {
        if editFocus < sheet.allActivities.count { toggleActivity(at: editFocus) } else { closeEdit() }
    }

    /// Turns the activity of the Edit view's row `index` off when it is on, on when it is off:
    /// kept in the user's preferences, for every sheet that reads them.
    private func toggleActivity(at index: Int) {
        guard index < sheet.allActivities.count else { return }
        let activity = sheet.allActivities[index]
        let on = !sheet.isEnabled(activity.identifier)
        do throws(RemoteError) {
            sheet = try sheet.settingEnabled(on, for: activity.identifier)
        } catch {
            print("window: cannot turn \(activity.identifier.escapedForTerminal()) \(on ? "on" : "off"): \(error)")
            return
        }
        editFocus = index
        drawSheet()
        afterRender.append("window: \(activity.title.escapedForTerminal()) turned \(on ? "on" : "off")")
    }

    /// A click in the Edit view: a row's switch, or Done.
    private func clickEdit(_ x: Double, _ y: Double) {
        if editLayout.done.contains(x, y) { return closeEdit() }
        if let index = editLayout.rows.firstIndex(where: { $0.contains(x, y) }) { toggleActivity(at: index) }
    }

    /// Takes the header's thumbnails that were made since the last turn; the sheet is drawn
    /// again with them.
    private func applyThumbnails() {
        let done = thumbnails.take()
        guard !done.isEmpty else { return }
        var lines: [String] = []
        for (index, result) in done.sorted(by: { $0.key < $1.key }) where index < previews.count {
            let name = previews[index].title.escapedForTerminal()
            switch result {
            case .success(let image):
                previews[index].thumbnail = .ready(image)
                lines.append("window: thumbnail \(name) \(image.width)x\(image.height)")
            case .failure(let refusal):
                previews[index].thumbnail = .refused(refusal.description)
                lines.append("window: no thumbnail for \(name): \(refusal.description.escapedForTerminal())")
            }
        }
        if presented == nil {
            drawSheet()
            afterRender += lines
        } else {
            lines.forEach { print($0) }
        }
    }

    /// The share's result has been shown long enough: back to the sheet, or with --once, the
    /// window closes. Returns whether the window goes on.
    private func endResult() async -> Bool {
        resultShownUntil = nil
        guard let presented else { return true }
        if once {
            exitStatus = presented.completed ? 0 : 1
            print("window: closing (--once)")
            return false
        }
        await backToSheet()
        return true
    }

    /// Dismisses the presented share and shows the sheet again, the keyboard focus on the
    /// row of the activity that was presented.
    private func backToSheet() async {
        guard let presented else { return }
        resultShownUntil = nil
        await dismiss()
        if let index = sheet.activities.firstIndex(where: { $0.identifier == presented.activity.identifier }) { sheetFocus = index }
        drawSheet()
        afterRender.append("window: back to the sheet, focus on \(sheetFocusName)")
    }

    // MARK: an activity

    private func present(_ activity: ShareActivity) async {
        let session: ShareSession
        do {
            session = try await sheet.perform(activity, launcher: launcher, presentation: .manual)
        } catch {
            print("window: cannot present \(activity.identifier): \(error)")
            return
        }
        show(session)
    }

    /// Shows `session`'s view below the bar, and sends it the window's size, traits and focus.
    private func show(_ session: ShareSession) {
        let activity = session.activity
        let inbox = WindowInbox(wakeEvent: window.wakeEvent)
        let (commands, sink) = AsyncStream.makeStream(of: Command.self)
        let presented = Presented(activity: activity, session: session, commands: sink, inbox: inbox)
        self.presented = presented
        // Another activity, or another process: its nodes are numbered anew in the export.
        exportIDs = [:]
        accessibilityDirty = true
        let view = session.view
        let output = self.output
        presented.tasks = [
            Task.detached {
                for await command in commands {
                    switch command {
                    case .input(let event): try? await view.send(event)
                    case .resize(let size): try? await view.present(width: size.width, height: size.height, scalePermille: size.scalePermille)
                    case .settle:
                        // Its frames are composited by now (their damage may still be on its way
                        // through the damage task: applyPending uploads the whole image).
                        try? await view.settle()
                        inbox.change { $0.settled = true }
                    case .accessibility(let action, let node):
                        do throws(RemoteError) {
                            try await view.accessibility.perform(action, on: node)
                        } catch {
                            print("window: accessibility \(action) on the activity's node \(node): \(error.reason.escapedForTerminal())")
                        }
                    }
                }
            },
            Task.detached {
                for await damage in view.damage { inbox.change { $0.damage = ($0.damage ?? []) + damage; $0.frames += 1 } }
            },
            Task.detached {
                for await update in session.updates { inbox.change { $0.update = update } }
            },
            Task.detached {
                for await direction in view.focusLeaves { inbox.change { $0.focusLeft = direction } }
            },
            Task.detached {
                for await _ in view.accessibility.changes() { inbox.change { $0.treeChanged = true } }
            },
            Task.detached {
                // What the view would come back with after a crash (Relaunch), as it is stored.
                for await state in view.restorableStates {
                    let preview = String(decoding: state.prefix(160), as: UTF8.self).escapedForTerminal()
                    print("window: state stored \(state.count) bytes: \(preview)")
                }
            },
            Task.detached {
                let outcome = await session.outcome
                var saved = false
                if let output, case .completed(let items) = outcome, !items.isEmpty {
                    do {
                        let paths = try writeReturnedItems(items, to: output)
                        print("window: wrote \(paths.joined(separator: " "))")
                        saved = true
                    } catch {
                        print("window: \(error)")
                    }
                }
                inbox.change { $0.outcome = outcome; $0.saved = saved }
            },
        ]
        print("window: presenting \(activity.identifier)")
        sink.yield(.resize(viewSize))
        sink.yield(.input(.traits(Traits(style: dark ? .dark : .light))))
        sink.yield(.input(.focus(true)))
        drawBar()
    }

    private func dismiss() async {
        guard let presented else { return }
        self.presented = nil
        accessibilityDirty = true
        presented.commands.finish()
        if presented.session.currentOutcome == nil { _ = await presented.session.cancel(reason: "the window closed") }
        await presented.session.close()
        for task in presented.tasks { task.cancel() }
    }

    /// When the indeterminate progress was last drawn.
    private var lastSweep = ContinuousClock.now

    /// Where an indeterminate progress's sweep is now: 0…1, a cycle every 1.5 s.
    private static let sweepStart = ContinuousClock.now
    private static func sweepPhase() -> Double {
        let elapsed = ContinuousClock.now - sweepStart
        let milliseconds = elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
        return Double(milliseconds % 1500) / 1500
    }

    /// Draws the bar again; `keepingExport` when nothing the accessible tree says changed (the sweep).
    private func drawBar(keepingExport: Bool = false) {
        guard let presented else { return }
        let pixels = window.pixelSize
        var canvas = Canvas(width: Int(pixels.width), height: Int(barPixels))
        let buttons = WindowPainter.bar(into: &canvas, scale: scale, activity: presented.activity, update: presented.update,
                                        outcome: presented.outcome, ended: presented.ended, focus: presented.barFocus,
                                        phase: Self.sweepPhase(), palette: .of(dark: dark))
        presented.relaunch = buttons.relaunch
        presented.back = buttons.back
        presented.cancel = buttons.cancel
        if buttons.cancel == nil { presented.cancelFocused = false }
        canvas.pixels.withUnsafeBufferPointer { try? window.updateBar($0, width: canvas.width, height: canvas.height) }
        needsRender = true
        if !keepingExport { accessibilityDirty = true }
    }

    /// Writes the image on screen (what was last uploaded) to the snapshot folder.
    private func writeSnapshot() {
        guard let folder = snapshotFolder, let presented else { return }
        snapshots += 1
        let path = "\(folder)/view-\(snapshots).png"
        do {
            try (presented.shownImage ?? presented.session.view.image).writePNG(to: path)
            print("window: snapshot \(path)")
        } catch {
            print("window: cannot write \(path): \(error)")
        }
    }

    /// Takes what the other threads left: new frames into the texture, the bar. Returns whether
    /// a settle ended (its frames are uploaded by then).
    private func applyPending() async -> Bool {
        guard let presented else { return false }
        let pending = presented.inbox.take()
        let view = presented.session.view
        // A settle's reply and the damage of the frames before it come through two tasks (the
        // commands and the damage stream), so some of that damage may not be here yet, while
        // the image has it: then the whole image goes up, and what F12 writes is on screen.
        let rects = pending.settled ? [view.withImage { PixelRect(x: 0, y: 0, width: $0.width, height: $0.height) }] : pending.damage
        if let rects {
            // With --snapshot, what was uploaded is kept: F12 writes what the window shows, not
            // a frame composited since (a copy per frame, for tests only).
            if let uploaded = window.updateContent(from: view, rects: rects, keep: snapshotFolder != nil) {
                presented.shownImage = uploaded
            }
            if pending.damage != nil { presented.framePending = true }
            needsRender = true
        }
        var barChanged = false
        if pending.treeChanged { accessibilityDirty = true }
        if let update = pending.update {
            presented.update = update
            barChanged = true
        }
        if let direction = pending.focusLeft, presented.outcome == nil, presented.ended == nil {
            // The bar's Cancel is the window's only control: Tab from either end lands there.
            presented.cancelFocused = true
            barChanged = true
            afterRender.append("window: focus left the activity \(direction), to the bar's Cancel")
        }
        if let outcome = pending.outcome {
            switch outcome {
            case .interrupted(let error):
                presented.ended = WindowCommand.banner(for: error, identifier: presented.activity.identifier)
                afterRender.append("window: ended \(error.reason.escapedForTerminal())")
            default:
                let result = Self.result(of: outcome, saved: pending.saved)
                presented.outcome = result
                presented.completed = if case .completed = outcome { true } else { false }
                if once { exitStatus = presented.completed ? 0 : 1 }
                // Shown for a moment, then the sheet comes back (the loop's deadline; or with
                // --once, the window closes).
                resultShownUntil = .now + Self.resultDuration
                afterRender.append("window: outcome \(outcome)")
                afterRender.append("window: result \(result.escapedForTerminal())")
            }
            barChanged = true
        }
        if barChanged { drawBar() }
        return pending.settled
    }

    /// What the bar says when a share ended: "Done — saved 1 item" (written to --output, when
    /// `saved`), "Done — returned 2 items", "Done", "Cancelled: …", "Failed: …".
    static func result(of outcome: ShareOutcome, saved: Bool) -> String {
        switch outcome {
        case .completed(let items):
            guard !items.isEmpty else { return "Done" }
            return "Done — \(saved ? "saved" : "returned") \(items.count) item\(items.count == 1 ? "" : "s")"
        case .cancelled(let reason): return reason.map { "Cancelled: \($0)" } ?? "Cancelled"
        case .failed(let message): return "Failed: \(message)"
        case .interrupted(let error): return "Interrupted: \(error.reason)"
        }
    }

    // MARK: events

    /// Handles one event; `false` when the window should close.
    private func handle(_ event: SDL_Event) async -> Bool {
        switch event.type {
        case SDL_QUIT.rawValue:
            return false
        case SDL_WINDOWEVENT.rawValue:
            switch UInt32(event.window.event) {
            case SDL_WINDOWEVENT_SIZE_CHANGED.rawValue:
                if let presented { presented.commands.yield(.resize(viewSize)); drawBar() } else { drawSheet() }
            case SDL_WINDOWEVENT_FOCUS_GAINED.rawValue:
                // The view has the focus back unless the bar's Cancel holds it.
                if let presented, !presented.cancelFocused { presented.commands.yield(.input(.focus(true))) }
            case SDL_WINDOWEVENT_FOCUS_LOST.rawValue: presented?.commands.yield(.input(.focus(false)))
            case SDL_WINDOWEVENT_EXPOSED.rawValue:
                exposed = true
                needsRender = true
            case SDL_WINDOWEVENT_MOVED.rawValue:
                accessibilityDirty = true  // the extents are on the screen
            default: break
            }
        case SDL_MOUSEBUTTONDOWN.rawValue, SDL_MOUSEBUTTONUP.rawValue:
            let down = event.type == SDL_MOUSEBUTTONDOWN.rawValue
            let x = Double(event.button.x), y = Double(event.button.y)
            guard let presented else {
                if down { await click(x, y) }
                return true
            }
            if let relaunch = presented.relaunch, down, relaunch.contains(x, y) {
                await relaunchShare(presented)
                return true
            }
            if let back = presented.back, down, back.contains(x, y) {
                return await goBack(presented, by: "a click on the bar's Back")
            }
            if let cancel = presented.cancel, down, cancel.contains(x, y) {
                cancelShare(presented, by: "a click on the bar's Cancel")
                return true
            }
            // A service that ended gets nothing (input would start a new process, without the share).
            guard presented.ended == nil else { return true }
            if down, y >= WindowPainter.barHeight, presented.cancelFocused { focusView(presented, nil) }
            let button = Int(event.button.button)
            let held = SDL_GetMouseState(nil, nil) & 0xFF
            presented.commands.yield(.input(.pointer(PointerEvent(down ? .down : .up, x: x, y: y - WindowPainter.barHeight,
                                                                  button: button, buttons: held, modifiers: modifiers()))))
        case SDL_MOUSEMOTION.rawValue:
            guard let presented, presented.ended == nil else { return true }
            presented.commands.yield(.input(.pointer(PointerEvent(.moved, x: Double(event.motion.x), y: Double(event.motion.y) - WindowPainter.barHeight,
                                                                  buttons: event.motion.state & 0xFF, modifiers: modifiers()))))
        case SDL_MOUSEWHEEL.rawValue:
            guard let presented, presented.ended == nil else { return true }
            var x: Int32 = 0, y: Int32 = 0
            SDL_GetMouseState(&x, &y)
            presented.commands.yield(.input(.pointer(PointerEvent(.scroll, x: Double(x), y: Double(y) - WindowPainter.barHeight,
                                                                  scrollX: Double(event.wheel.preciseX), scrollY: Double(event.wheel.preciseY),
                                                                  modifiers: modifiers()))))
        case SDL_KEYDOWN.rawValue, SDL_KEYUP.rawValue:
            let down = event.type == SDL_KEYDOWN.rawValue
            let scancode = event.key.keysym.scancode
            if scancode == SDL_SCANCODE_LSHIFT || scancode == SDL_SCANCODE_RSHIFT { shiftHeld = down }
            if down, scancode == SDL_SCANCODE_F12, snapshotFolder != nil, let presented {
                // Once the view has drawn what was sent before, and that frame is on screen.
                presented.commands.yield(.settle)
                return true
            }
            if down, scancode == SDL_SCANCODE_F2 {
                dark.toggle()
                // The host's chrome too, not only the activity (said once it is on screen).
                if presented == nil {
                    drawSheet()
                    afterRender.append("window: sheet shown \(dark ? "dark" : "light")")
                } else {
                    drawBar()
                }
                presented?.commands.yield(.input(.traits(Traits(style: dark ? .dark : .light))))
                print("window: traits \(dark ? "dark" : "light")")
                return true
            }
            let mod = UInt32(event.key.keysym.mod)
            let shift = mod & KMOD_SHIFT.rawValue != 0 || shiftHeld, other = mod & (KMOD_CTRL.rawValue | KMOD_ALT.rawValue | KMOD_GUI.rawValue) != 0
            guard let presented else {
                // The sheet: Tab, Shift-Tab and the arrows move between its rows; Return or Space
                // presses the focused one; W explains; Escape closes the window.
                guard down else { return true }
                if editing {
                    // Edit: Tab, Shift-Tab and the arrows move; Return or Space turns the focused
                    // activity on or off (or presses Done); Escape or E is Done.
                    switch scancode {
                    case SDL_SCANCODE_ESCAPE, SDL_SCANCODE_E: closeEdit()
                    case SDL_SCANCODE_TAB where !other: moveEditFocus(by: shift ? -1 : 1)
                    case SDL_SCANCODE_DOWN: moveEditFocus(by: 1)
                    case SDL_SCANCODE_UP: moveEditFocus(by: -1)
                    case SDL_SCANCODE_RETURN, SDL_SCANCODE_KP_ENTER, SDL_SCANCODE_SPACE:
                        if event.key.repeat == 0 { pressEditFocus() }
                    default: break
                    }
                    return true
                }
                switch scancode {
                case SDL_SCANCODE_E: openEdit()
                case SDL_SCANCODE_W: explain.toggle(); drawSheet()
                case SDL_SCANCODE_ESCAPE: return false
                case SDL_SCANCODE_TAB where !other: moveSheetFocus(by: shift ? -1 : 1)
                case SDL_SCANCODE_DOWN: moveSheetFocus(by: 1)
                case SDL_SCANCODE_UP: moveSheetFocus(by: -1)
                case SDL_SCANCODE_RETURN, SDL_SCANCODE_KP_ENTER, SDL_SCANCODE_SPACE:
                    if event.key.repeat == 0 { await pressSheetFocus() }
                default: break
                }
                return true
            }
            if presented.ended != nil {
                // The service ended: Back and Relaunch, Tab (or an arrow) between them; Return or
                // Space presses the focused one; Escape goes back.
                guard down, event.key.repeat == 0 else { return true }
                switch scancode {
                case SDL_SCANCODE_TAB where !other, SDL_SCANCODE_LEFT, SDL_SCANCODE_RIGHT:
                    presented.endedFocus = presented.endedFocus == .back ? .relaunch : .back
                    drawBar()
                    print("window: focus on \(presented.endedFocus == .back ? "Back" : "Relaunch")")
                case SDL_SCANCODE_RETURN, SDL_SCANCODE_KP_ENTER, SDL_SCANCODE_SPACE:
                    if presented.endedFocus == .back { return await goBack(presented, by: "the keyboard on the bar's Back") }
                    await relaunchShare(presented)
                case SDL_SCANCODE_ESCAPE:
                    return await goBack(presented, by: "Escape")
                default: break
                }
                return true
            }
            if presented.outcome != nil {
                // The result, shown for a moment: Escape or Return ends it at once.
                guard down, event.key.repeat == 0 else { return true }
                switch scancode {
                case SDL_SCANCODE_ESCAPE, SDL_SCANCODE_RETURN, SDL_SCANCODE_KP_ENTER: return await endResult()
                default: return true
                }
            }
            if presented.cancelFocused {
                // The bar's Cancel has the focus: Tab goes back into the activity (at its first
                // control; Shift-Tab at its last); Return, Space or Escape presses Cancel.
                guard down, event.key.repeat == 0 else { return true }
                switch scancode {
                case SDL_SCANCODE_TAB where !other: focusView(presented, shift ? .backward : .forward)
                case SDL_SCANCODE_RETURN, SDL_SCANCODE_KP_ENTER, SDL_SCANCODE_SPACE, SDL_SCANCODE_ESCAPE:
                    cancelShare(presented, by: "the keyboard on the bar's Cancel")
                default: break
                }
                return true
            }
            if let command = Self.remoteCommand(scancode) {
                if down {
                    presented.commands.yield(.input(.remoteControl(command)))
                    print("window: remote \(command)")
                }
                return true
            }
            // SDL scancodes are USB HID keyboard usages already.
            let code = UInt32(scancode.rawValue)
            guard (1...65535).contains(code) else { return true }
            let held = modifiers()
            // Tab moves the focus: said, for scripts and tests that follow it.
            if down, scancode == SDL_SCANCODE_TAB { print("window: tab\(held.contains(.shift) ? " with shift" : "") to the activity") }
            presented.commands.yield(.input(.key(KeyEvent(down: down, keyCode: code, modifiers: held, isRepeat: event.key.repeat != 0))))
        case SDL_TEXTINPUT.rawValue:
            guard let presented, presented.ended == nil, presented.outcome == nil, !presented.cancelFocused else { return true }
            let text = withUnsafeBytes(of: event.text.text) { bytes in
                String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
            }
            if !text.isEmpty { presented.commands.yield(.input(.text(text))) }
        default:
            if event.type == window.wakeEvent { return true }
        }
        return true
    }

    /// The ended share's view launches nothing: Relaunch retries the share, with the same items
    /// and the state the view last stored.
    private func relaunchShare(_ presented: Presented) async {
        print("window: relaunch \(presented.activity.identifier): retrying the share\(presented.session.view.restorableState.map { " with its \($0.count)-byte state" } ?? "")")
        let session: ShareSession
        do {
            session = try await presented.session.retry()
        } catch {
            print("window: cannot relaunch \(presented.activity.identifier): \(error)")
            return
        }
        await dismiss()
        show(session)
    }

    /// The bar's Back, when the service ended: back to the sheet; with --once, the window
    /// closes (the share did not complete). Returns whether the window goes on.
    private func goBack(_ presented: Presented, by what: String) async -> Bool {
        print("window: back, by \(what)")
        if once {
            exitStatus = 1
            print("window: closing (--once)")
            return false
        }
        await backToSheet()
        return true
    }

    /// Gives the keyboard focus back to the view from the bar's Cancel: entering that way (Tab:
    /// its first control; Shift-Tab: its last), or as it was (`nil`: a click in it).
    private func focusView(_ presented: Presented, _ direction: FocusDirection?) {
        presented.cancelFocused = false
        presented.commands.yield(.input(direction.map { .focusEntering($0) } ?? .focus(true)))
        drawBar()
        accessibilityDirty = true
        print("window: focus to the activity\(direction.map { " \($0)" } ?? "")")
    }

    /// The bar's Cancel: the share is cancelled (the activity is asked to end it).
    private func cancelShare(_ presented: Presented, by what: String) {
        print("window: cancel, by \(what)")
        let session = presented.session
        Task.detached { _ = await session.cancel(reason: "the user pressed Cancel on the window's bar") }
    }

    // MARK: accessibility

    /// The window's tree: the frame; in it the sheet's entries, or the bar (title, status,
    /// progress, Cancel or Relaunch) and the embedded activity's own tree; and the focus (the
    /// activity's focused control, or the bar's Cancel when it has the keyboard). Extents are on
    /// the screen, in points (SDL's window coordinates).
    private func accessibleNodes() -> ([WindowAccessibility.Node], UInt32) {
        typealias Node = WindowAccessibility.Node
        var left: Int32 = 0, top: Int32 = 0
        SDL_GetWindowPosition(window.window, &left, &top)
        let size = window.pointSize
        let (ox, oy, width, height) = (Int(left), Int(top), Int(size.width), Int(size.height))
        func node(_ id: UInt32, _ parent: UInt32, _ role: rv_a11y_role, _ name: String, _ rect: PointRect, actions: UInt32 = 0,
                  states: UInt32 = 0, dy: Double = 0) -> Node {
            Node(id: id, parent: parent, role: role, name: name, states: states, actions: actions,
                 x: ox + Int(rect.x.rounded()), y: oy + Int((rect.y + dy).rounded()), width: Int(rect.width.rounded()), height: Int(rect.height.rounded()))
        }
        var frame = Node(id: WindowIDs.frame, parent: 0, role: RV_A11Y_ROLE_FRAME, name: "demo-share", x: ox, y: oy, width: width, height: height)
        let press = UInt32(RV_A11Y_ACTION_PRESS), focusable = UInt32(RV_A11Y_STATE_FOCUSABLE)
        guard let presented else {
            if editing {
                // Edit: a check box per share activity, checked when on, and Done.
                frame.name = "Edit activities — demo-share"
                var list = node(WindowIDs.editList, WindowIDs.frame, RV_A11Y_ROLE_LIST, "Activities", PointRect(x: 0, y: 0, width: Double(width), height: Double(height)))
                var nodes: [Node] = []
                var focus = WindowIDs.editDone
                for (index, activity) in sheet.allActivities.enumerated() where index < editLayout.rows.count && index < WindowIDs.maxRows {
                    let id = WindowIDs.firstEditRow + UInt32(index)
                    let checked = sheet.isEnabled(activity.identifier) ? UInt32(RV_A11Y_STATE_CHECKED) : 0
                    nodes.append(node(id, WindowIDs.editList, RV_A11Y_ROLE_CHECK_BOX, activity.title, editLayout.rows[index], actions: press,
                                      states: focusable | checked))
                    list.children.append(id)
                    if index == editFocus { focus = id }
                }
                nodes.append(node(WindowIDs.editDone, WindowIDs.frame, RV_A11Y_ROLE_BUTTON, "Done", editLayout.done, actions: press, states: focusable))
                frame.children = [WindowIDs.editList, WindowIDs.editDone]
                return ([frame, list] + nodes, focus)
            }
            frame.name = "Share — demo-share"
            // The header: what is shared, a label per item ("photo.png, image, 2.3 MB").
            let cards = sheetLayout.cards
            let headerRect = PointRect(x: 0, y: WindowPainter.headerTop, width: Double(width), height: WindowPainter.cardHeight)
            var header = node(WindowIDs.header, WindowIDs.frame, RV_A11Y_ROLE_GROUP,
                              "Sharing \(previews.count) item\(previews.count == 1 ? "" : "s")", headerRect)
            var nodes: [Node] = []
            for (index, preview) in previews.enumerated() {
                let id = WindowIDs.firstHeaderItem + UInt32(index)
                nodes.append(node(id, WindowIDs.header, RV_A11Y_ROLE_LABEL, preview.accessibleName, index < cards.count ? cards[index] : headerRect))
                header.children.append(id)
            }
            var list = node(WindowIDs.sheet, WindowIDs.frame, RV_A11Y_ROLE_LIST, "Share with", PointRect(x: 0, y: 0, width: Double(width), height: Double(height)))
            var focus: UInt32 = 0
            for (index, activity) in sheet.activities.enumerated() where index < rows.count && index < WindowIDs.maxRows {
                let id = WindowIDs.firstSheetRow + UInt32(index)
                nodes.append(node(id, WindowIDs.sheet, RV_A11Y_ROLE_LIST_ITEM, activity.title, rows[index], actions: press, states: focusable))
                list.children.append(id)
                if index == sheetFocus { focus = id }
            }
            frame.children = [WindowIDs.header, WindowIDs.sheet]
            let others = sheet.explanations.count
            if whyNot.width > 0, others > 0 {
                // The reasons, when shown, are the button's value: what a screen reader reads next.
                var button = node(WindowIDs.whyNot, WindowIDs.frame, RV_A11Y_ROLE_BUTTON, "Why not the other \(others)?", whyNot, actions: press,
                                  states: focusable)
                if explain { button.value = sheet.explanations.map { "\($0.activity.title): \($0.reason)" }.joined(separator: "; ") }
                nodes.append(button)
                frame.children.append(WindowIDs.whyNot)
                if sheetFocus == sheet.activities.count { focus = WindowIDs.whyNot }
            }
            nodes.append(node(WindowIDs.edit, WindowIDs.frame, RV_A11Y_ROLE_BUTTON, "Edit", sheetLayout.edit, actions: press, states: focusable))
            frame.children.append(WindowIDs.edit)
            if sheetFocus == WindowPainter.editFocusIndex(sheet) { focus = WindowIDs.edit }
            return ([frame, header, list] + nodes, focus)
        }
        frame.name = "\(presented.activity.title) — demo-share"
        let bar = PointRect(x: 0, y: 0, width: Double(width), height: WindowPainter.barHeight)
        var barGroup = node(WindowIDs.bar, WindowIDs.frame, RV_A11Y_ROLE_GROUP, "Share bar", bar)
        var nodes: [Node] = []
        // The status: how the share ended, or the activity's state and what it says it does.
        let status = presented.ended.map { "\(presented.activity.title) ended: \($0)" } ?? presented.outcome
            ?? presented.update.map { update in ([update.state.description] + (update.subtitle.map { [$0] } ?? [])).joined(separator: ": ") } ?? "starting"
        nodes.append(node(WindowIDs.barTitle, WindowIDs.bar, RV_A11Y_ROLE_LABEL, presented.update?.title ?? presented.activity.title, bar))
        nodes.append(node(WindowIDs.barStatus, WindowIDs.bar, RV_A11Y_ROLE_LABEL, status, bar))
        barGroup.children = [WindowIDs.barTitle, WindowIDs.barStatus]
        if presented.outcome == nil, presented.ended == nil, let update = presented.update, update.progress != nil || WindowPainter.isBusy(update) {
            var progress = node(WindowIDs.barProgress, WindowIDs.bar, RV_A11Y_ROLE_PROGRESS, "Progress", bar)
            // Indeterminate progress has no value to report: its text says so.
            if let done = update.progress { progress.range = AccessibilityRange(minimum: 0, maximum: 1, value: done) }
            progress.value = update.progress.map { "\(Int(($0 * 100).rounded())) %" } ?? "in progress"
            nodes.append(progress)
            barGroup.children.append(WindowIDs.barProgress)
        }
        if let cancel = presented.cancel {
            nodes.append(node(WindowIDs.cancel, WindowIDs.bar, RV_A11Y_ROLE_BUTTON, "Cancel", cancel, actions: press, states: focusable))
            barGroup.children.append(WindowIDs.cancel)
        }
        if let back = presented.back {
            nodes.append(node(WindowIDs.back, WindowIDs.bar, RV_A11Y_ROLE_BUTTON, "Back", back, actions: press, states: focusable))
            barGroup.children.append(WindowIDs.back)
        }
        if let relaunch = presented.relaunch {
            nodes.append(node(WindowIDs.relaunch, WindowIDs.bar, RV_A11Y_ROLE_BUTTON, "Relaunch", relaunch, actions: press, states: focusable))
            barGroup.children.append(WindowIDs.relaunch)
        }
        // The activity: its tree below the bar, each node's frame in the view's points.
        let tree = presented.session.view.accessibility.tree
        var embedded = node(WindowIDs.activity, WindowIDs.frame, RV_A11Y_ROLE_EMBEDDED, presented.activity.title,
                            PointRect(x: 0, y: WindowPainter.barHeight, width: Double(width), height: Double(height) - WindowPainter.barHeight))
        let activityNodes = tree.nodesInOrder.map(\.node)
        exportIDs = exportIDs.filter { tree[$0.key] != nil }
        // Numbered first, all of them: a node's children come after it.
        for activityNode in activityNodes where exportIDs[activityNode.id] == nil {
            exportIDs[activityNode.id] = nextExportID
            nextExportID = nextExportID == .max - 1 ? WindowIDs.firstActivityNode : nextExportID + 1
        }
        for activityNode in activityNodes {
            let frame = activityNode.frameInPoints
            var exported = node(exportIDs[activityNode.id]!, activityNode.parent.flatMap { exportIDs[$0] } ?? WindowIDs.activity,
                                Node.role(activityNode.role), activityNode.label,
                                PointRect(x: frame.x, y: frame.y, width: frame.width, height: frame.height),
                                actions: Node.actions(activityNode.actions), states: Node.states(activityNode.states),
                                dy: WindowPainter.barHeight)
            exported.value = activityNode.value
            exported.range = activityNode.range
            exported.children = activityNode.children.compactMap { exportIDs[$0] }
            nodes.append(exported)
        }
        embedded.children = tree.root.flatMap { exportIDs[$0] }.map { [$0] } ?? []
        frame.children = [WindowIDs.bar, WindowIDs.activity]
        let focus: UInt32 = switch presented.barFocus {
        case .cancel: WindowIDs.cancel
        case .back: WindowIDs.back
        case .relaunch: WindowIDs.relaunch
        case .none: presented.outcome == nil ? tree.focus.flatMap { exportIDs[$0] } ?? 0 : 0
        }
        return ([frame, barGroup] + nodes + [embedded], focus)
    }

    /// What assistive technologies asked since the last turn: the window's own controls act as a
    /// click on them; the activity's nodes are the activity's, sent back through its view.
    private func performAccessibilityRequests() async {
        guard let accessibility else { return }
        for request in accessibility.takeRequests() {
            print("window: accessibility \(request.action) on node \(request.id)")
            switch (request.id, request.action) {
            case (WindowIDs.edit, .press) where presented == nil && !editing:
                openEdit()
            case (WindowIDs.edit, .focus) where presented == nil && !editing:
                moveSheetFocus(by: WindowPainter.editFocusIndex(sheet) - sheetFocus)
            case (WindowIDs.editDone, .press) where editing:
                closeEdit()
            case (WindowIDs.editDone, .focus) where editing:
                moveEditFocus(by: sheet.allActivities.count - editFocus)
            case (WindowIDs.firstEditRow..<WindowIDs.firstEditRow + 256, .press) where editing:
                toggleActivity(at: Int(request.id - WindowIDs.firstEditRow))
            case (WindowIDs.firstEditRow..<WindowIDs.firstEditRow + 256, .focus) where editing:
                let index = Int(request.id - WindowIDs.firstEditRow)
                if index < sheet.allActivities.count, index != editFocus { moveEditFocus(by: index - editFocus) }
            case (WindowIDs.firstSheetRow..<WindowIDs.firstSheetRow + 256, .press) where presented == nil && !editing:
                let index = Int(request.id - WindowIDs.firstSheetRow)
                if index < sheet.activities.count {
                    sheetFocus = index
                    await present(sheet.activities[index])
                }
            case (WindowIDs.firstSheetRow..<WindowIDs.firstSheetRow + 256, .focus) where presented == nil && !editing:
                let index = Int(request.id - WindowIDs.firstSheetRow)
                if index < sheet.activities.count, index != sheetFocus { moveSheetFocus(by: index - sheetFocus) }
            case (WindowIDs.whyNot, .press) where presented == nil && !editing:
                explain.toggle()
                drawSheet()
            case (WindowIDs.whyNot, .focus) where presented == nil && !editing:
                if sheetFocus != sheet.activities.count, sheetFocusCount > sheet.activities.count {
                    moveSheetFocus(by: sheet.activities.count - sheetFocus)
                }
            case (WindowIDs.cancel, .press):
                if let presented, presented.cancel != nil { cancelShare(presented, by: "an assistive technology") }
            case (WindowIDs.cancel, .focus):
                if let presented, presented.cancel != nil, !presented.cancelFocused {
                    presented.cancelFocused = true
                    presented.commands.yield(.input(.focus(false)))
                    drawBar()
                }
            case (WindowIDs.relaunch, .press):
                if let presented, presented.relaunch != nil { await relaunchShare(presented) }
            case (WindowIDs.back, .press):
                if let presented, presented.back != nil, !(await goBack(presented, by: "an assistive technology")) { quitRequested = true }
            case (WindowIDs.relaunch, .focus), (WindowIDs.back, .focus):
                if let presented, presented.ended != nil {
                    presented.endedFocus = request.id == WindowIDs.back ? .back : .relaunch
                    drawBar()
                }
            default:
                guard let presented, presented.ended == nil, let id = exportIDs.first(where: { $0.value == request.id })?.key else { continue }
                // The activity's control takes the keyboard back from the bar's Cancel.
                if case .focus = request.action, presented.cancelFocused { focusView(presented, nil) }
                presented.commands.yield(.accessibility(request.action, node: id))
            }
        }
    }

    /// A click on the sheet: an activity's row presents it; the last row explains the others.
    private func click(_ x: Double, _ y: Double) async {
        if editing { return clickEdit(x, y) }
        if sheetLayout.edit.contains(x, y) { return openEdit() }
        if whyNot.contains(x, y) {
            explain.toggle()
            drawSheet()
            return
        }
        guard let index = rows.firstIndex(where: { $0.contains(x, y) }) else { return }
        sheetFocus = index
        await present(sheet.activities[index])
    }

    private func modifiers() -> Modifiers {
        let state = SDL_GetModState().rawValue
        var modifiers: Modifiers = []
        if state & KMOD_SHIFT.rawValue != 0 || shiftHeld { modifiers.insert(.shift) }
        if state & KMOD_CTRL.rawValue != 0 { modifiers.insert(.control) }
        if state & KMOD_ALT.rawValue != 0 { modifiers.insert(.alt) }
        if state & KMOD_GUI.rawValue != 0 { modifiers.insert(.meta) }
        if state & KMOD_CAPS.rawValue != 0 { modifiers.insert(.capsLock) }
        return modifiers
    }

    /// Media keys, as remote-control commands.
    private static func remoteCommand(_ scancode: SDL_Scancode) -> RemoteCommand? {
        switch scancode {
        case SDL_SCANCODE_AUDIOPLAY: .togglePlayPause
        case SDL_SCANCODE_AUDIOSTOP: .pause
        case SDL_SCANCODE_AUDIONEXT: .nextTrack
        case SDL_SCANCODE_AUDIOPREV: .previousTrack
        case SDL_SCANCODE_AUDIOFASTFORWARD: .seekForward
        case SDL_SCANCODE_AUDIOREWIND: .seekBackward
        default: nil
        }
    }
}

extension WindowCommand {
    /// What the bar says after "TITLE ended: " when the activity's process went: the signal (or
    /// exit) first, then its fatal error's message without the file and line, which is what a
    /// user can act on; the rest of the reason only when there is no such line. The bar
    /// ellipsizes it at its end (Pango), so the useful part comes first.
    static func banner(for error: RemoteError, identifier: String) -> String {
        // "ID ended: killed: …" says the activity's name twice in the bar.
        let prefix = "\(identifier) ended: "
        var reason = error.reason.hasPrefix(prefix) ? String(error.reason.dropFirst(prefix.count)) : error.reason
        // "killed: killed by SIGKILL": the kind says what the reason says.
        if reason.hasPrefix("killed: killed by ") { reason = String(reason.dropFirst("killed: ".count)) }
        guard let fatal = error.standardErrorTail.last(where: { $0.contains("Fatal error: ") }),
              let range = fatal.range(of: "Fatal error: ") else { return reason }
        if let stderr = reason.range(of: "; stderr: ") { reason = String(reason[..<stderr.lowerBound]) }
        if reason.hasPrefix("killed: ") { reason = String(reason.dropFirst("killed: ".count)) }
        // "killed by SIGILL (Illegal instruction)": the name is enough next to the message.
        if reason.hasPrefix("killed by SIG"), let open = reason.range(of: " ("), reason.hasSuffix(")") {
            reason = String(reason[..<open.lowerBound])
        }
        return "\(reason): \(fatal[range.upperBound...])"
    }
}


/// The ids of the window's own accessible nodes; the activity's nodes are numbered from
/// `firstActivityNode`, anew for each node the activity describes.
enum WindowIDs {
    static let frame: UInt32 = 1, sheet: UInt32 = 2, bar: UInt32 = 3, barTitle: UInt32 = 4, barStatus: UInt32 = 5
    static let barProgress: UInt32 = 6, cancel: UInt32 = 7, relaunch: UInt32 = 8, whyNot: UInt32 = 9, back: UInt32 = 10
    static let header: UInt32 = 11, edit: UInt32 = 12, editList: UInt32 = 13, editDone: UInt32 = 14, activity: UInt32 = 20
    static let firstSheetRow: UInt32 = 100, firstHeaderItem: UInt32 = 400, firstEditRow: UInt32 = 600
    /// The most rows of the sheet, or of Edit, exported (their ids stay within their range).
    static let maxRows = 256
    static let firstActivityNode: UInt32 = 1_000
}
