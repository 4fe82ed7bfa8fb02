// `demo-share view`: present the compose service's view headless, drive a scripted interaction
// through RemoteView (the way a toolkit would forward its events), and snapshot each step.
import ArgumentParser
import RemoteHost

struct ViewDemo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "view",
        abstract: "Present the compose service's view headless, drive it (share an image, click, type, a media key, post, resize, dark mode) and write a PNG after each step.")

    @OptionGroup var options: HostOptions

    @Option(help: "The folder to write the snapshots into (made if missing).")
    var snapshot: String

    @Option(help: "The view's size in points, WIDTHxHEIGHT.")
    var size = "480x360"

    @Option(help: "Pixels per point, in thousandths (2000: a 2× display).")
    var scalePermille = 1000

    func run() async throws {
        Syscall.lineBufferStandardOutput()
        let parts = size.split(separator: "x").compactMap { Int($0) }
        guard parts.count == 2 else { throw ValidationError("--size must be WIDTHxHEIGHT, e.g. 480x360; not \(size)") }
        let (width, height) = (parts[0], parts[1])
        do { try Syscall.makeDirectory(snapshot) } catch {
            throw ValidationError("cannot make \(snapshot): \(error.reason)")
        }
        let registry = ServiceRegistry(scanning: [try options.folder()])
        let identifier = "com.example.demo-share.compose"
        let (folder, scale) = (snapshot, scalePermille)
        try await withLauncher(registry: registry, configuration: options.launcherConfiguration()) { launcher in
            let posted = AsyncStream<String>.makeStream()
            let connection = launcher.connection(to: identifier, onMessage: { message, _ in
                if message.type == "compose.posted" { posted.continuation.yield(message.text ?? "") }
            })
            let view = RemoteView(connection: connection)
            var step = 0
            let clock = ContinuousClock()
            /// Waits for the service to draw what the step changed, then writes the snapshot.
            func snap(_ name: String, _ what: String) async throws {
                try await view.settle()
                let path = "\(folder)/\(step)-\(name).png"
                try view.snapshot(to: path)
                print("\(step). \(what) → \(path) (\(view.image.width)×\(view.image.height))")
                step += 1
            }

            let started = clock.now
            try await view.present(width: width, height: height, scalePermille: scale)
            try await snap("presented", "presented \(identifier) at \(width)×\(height) points; first frame after \(format(clock.now - started)) (launch included)")

            let item = try MemoryFile.sealed(name: "shared-image", contents: try Self.sunset().pngData())
            try await connection.send(ServiceMessage(type: "item.image", attachments: [Attachment(item.takeDescriptor())]))
            try await snap("shared-image", "shared an image (a PNG in a sealed memfd)")

            // The comment field sits below the 96-point header.
            try await view.click(x: Double(width) / 2, y: 16 + 96 + 12 + 15)
            try await view.send(.focus(true))
            try await view.type("Look at this sunsett")
            try await view.press(keyCode: KeyCode.backspace)
            try await view.type("!")
            try await snap("typed", "clicked the comment field and typed (with a backspace)")

            try await view.send(.remoteControl(.togglePlayPause))
            try await view.send(.remoteControl(.nextTrack))
            try await snap("media-keys", "media keys: play/pause, next track (up the responder chain to the controller)")

            try await view.press(keyCode: KeyCode.enter)
            var iterator = posted.stream.makeAsyncIterator()
            let text = await iterator.next() ?? ""
            try await snap("posted", "pressed return: the service posted “\(text)” and animated its progress bar")

            try await view.present(width: height, height: width, scalePermille: scale)
            try await snap("resized", "resized to \(height)×\(width) points: the service laid out again")

            try await view.setTraits(Traits(style: .dark, tint: Color(argb: 0xFFFF_9500), fontScalePermille: 1200))
            try await snap("dark", "dark style, orange tint, fonts at 120 %")
            await connection.invalidate()
        }
    }

    /// A 160×120 sunset to share: a sky gradient, a sun and the sea.
    static func sunset() -> RemoteImage {
        RemoteImage(width: 160, height: 120) { x, y in
            let dx = Double(x - 80), dy = Double(y - 70)
            if y >= 80 { return 0xFF1F_3A5F + UInt32((y - 80) % 8 == 0 ? 0x0010_1010 : 0) }
            if dx * dx + dy * dy < 22 * 22 { return 0xFFFF_D060 }
            let t = Double(y) / 80
            let red = UInt32(255 * (0.35 + 0.65 * t)), green = UInt32(255 * (0.25 + 0.35 * t)), blue = UInt32(255 * (0.55 - 0.35 * t))
            return 0xFF00_0000 | red << 16 | green << 8 | blue
        }
    }
}
