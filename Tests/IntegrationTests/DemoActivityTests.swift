import FoundationEssentials
import Glibc
import RemoteHost
import RemoteTestSupport
import Synchronization
import Testing

/// The demo's three share activities (`demo-share activity notes|post|markup`), launched
/// sandboxed from the demo's own manifests and driven end to end through a share session:
/// items in, clicks, typing and pointer strokes on the view, the pixels it draws, its updates in
/// order, the outcome and what it returns (and, for Post, what it wrote in its data folder).
///
/// Where the buttons are follows the demo's `SheetLayout` (a row along the bottom, 16 points in,
/// 40 high, 12 apart); each test checks a button's colour before clicking it.
@Suite("The demo's share activities", .serialized)
struct DemoActivityTests {
    static let width = 480, height = 360
    static let white: UInt32 = 0xFFFF_FFFF, tint: UInt32 = 0xFF1A_73E8, grey: UInt32 = 0xFF8E_8E93, orange: UInt32 = 0xFFFF_9500
    static let red: UInt32 = 0xFFFF_0000

    /// The demo's manifests, as `swift build` copies them next to the executables.
    static let manifests: String = {
        let folder = testServiceExecutable.split(separator: "/").dropLast().joined(separator: "/")
        return "/" + folder + "/RemoteView_demo-share.resources/Services"
    }()

    /// Runs `body` with a launcher over the demo's manifests (sandbox on), its data root in a
    /// fresh folder; checks that nothing leaked.
    static func withDemo(_ body: @escaping @Sendable (Launcher, ServiceRegistry, String) async throws -> Void) async throws {
        try #require(Syscall.isDirectory(manifests), "build demo-share first (swift build --build-tests builds it)")
        let registry = ServiceRegistry(scanning: [manifests])
        #expect(registry.problems.isEmpty, "\(registry.problems)")
        let data = try TemporaryFolder("remoteview-demo-data", searchable: true)
        defer { removeTree(data.path) }
        let configuration = {
            var configuration = fastLauncherConfiguration()
            configuration.dataRoot = data.path + "/services"
            return configuration
        }()
        try await withoutLeaks(within: .seconds(30)) {
            try await withLauncher(registry: registry, configuration: configuration) { launcher in
                try await body(launcher, registry, configuration.dataRoot)
            }
        }
    }

    /// Shares `items` with `identifier`, presents the view at 480×360 and waits for *ready*.
    static func start(_ identifier: String, _ items: [ShareItem], registry: ServiceRegistry, launcher: Launcher) async throws -> (ShareSession, ShareUpdates) {
        let sheet = ShareSheet(registry: registry, items: items)
        let activity = try #require(sheet.activity(identifier), "not offered: \(sheet.explanation(for: identifier) ?? "not registered")")
        let session = try await sheet.perform(activity, launcher: launcher)
        let updates = ShareUpdates(session)
        try await session.view.present(width: width, height: height)
        try await updates.wait(for: .ready)
        try await session.view.settle()
        return (session, updates)
    }

    /// The centre of button `index` (from the left) of the `count` along the bottom.
    static func button(_ index: Int, of count: Int) -> (x: Double, y: Double) {
        let rowWidth = Double(width) - 32, buttonWidth = (rowWidth - 12 * Double(count - 1)) / Double(count)
        return (16 + (buttonWidth + 12) * Double(index) + buttonWidth / 2, Double(height) - 16 - 20)
    }

    /// Clicks the button named `name` at its middle, found in the view's semantic tree (as the
    /// demo's scripts do: `click button "Save"`), and checks that the tree puts it where the
    /// sheet's layout draws it.
    static func click(_ view: RemoteView, _ name: String, expectedAt centre: (x: Double, y: Double),
                      sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let node = try await view.accessibility.node(role: .button, label: name)
        let (x, y) = node.frameInPoints.center
        #expect(abs(x - centre.x) < 1 && abs(y - centre.y) < 1, "\(node) is where the layout draws \(name)", sourceLocation: sourceLocation)
        try await view.click(x: x, y: y)
    }

    /// The colour of a button's face, left of its title.
    static func buttonColour(_ image: RemoteImage, _ index: Int, of count: Int) -> UInt32 {
        let centre = button(index, of: count)
        let buttonWidth = (Double(width) - 32 - 12 * Double(count - 1)) / Double(count)
        return image.pixel(x: Int(centre.x - buttonWidth / 2 + 8), y: Int(centre.y))
    }

    /// Whether two ARGB words differ by at most `tolerance` in each channel.
    static func near(_ a: UInt32, _ b: UInt32, _ tolerance: UInt32 = 2) -> Bool {
        (0..<4).allSatisfy { shift in
            let x = (a >> (shift * 8)) & 0xFF, y = (b >> (shift * 8)) & 0xFF
            return (x > y ? x - y : y - x) <= tolerance
        }
    }

    /// The smallest rect holding every pixel of `image` that `match` picks, or `nil`.
    static func bounds(in image: RemoteImage, where match: (UInt32) -> Bool) -> PixelRect? {
        var minX = Int.max, minY = Int.max, maxX = -1, maxY = -1
        for y in 0..<image.height {
            for x in 0..<image.width where match(image.pixel(x: x, y: y)) {
                minX = min(minX, x); maxX = max(maxX, x); minY = min(minY, y); maxY = max(maxY, y)
            }
        }
        return maxX < 0 ? nil : PixelRect(x: minX, y: minY, width: maxX - minX + 1, height: maxY - minY + 1)
    }

    /// A solid `width` × `height` PNG of `colour`.
    static func png(_ width: Int, _ height: Int, _ colour: UInt32) throws -> [UInt8] {
        try RemoteImage(width: width, height: height) { _, _ in colour }.pngData()
    }

    /// `bytes` decoded as a PNG (through a temporary file, as RemoteImage reads PNG files).
    static func decodePNG(_ bytes: [UInt8]) throws -> RemoteImage {
        let folder = try TemporaryFolder("remoteview-demo-png")
        defer { folder.remove() }
        let path = folder.path + "/image.png"
        try Data(bytes).write(to: URL(filePath: path))
        return try RemoteImage(contentsOfPNG: path)
    }

    /// The states of `updates`, each run of one state once.
    static func stateRuns(_ updates: [ActivityUpdate]) -> [ActivityState] {
        updates.map(\.state).reduce(into: []) { runs, state in if runs.last != state { runs.append(state) } }
    }

    // MARK: The animation

    @Test("the animation's photo mode scrolls a photograph up by 4 pixels a frame (each frame's rows are the last one's, moved), its square mode changes only its 64×64 square, and a press toggles the magenta marker")
    func animationModes() async throws {
        try await Self.withDemo { launcher, _, _ in
            let view = RemoteView(connection: launcher.connection(to: "com.example.demo-share.animation"), presentation: .manual)
            var damage = view.damage.makeAsyncIterator()
            try await view.present(width: 320, height: 200)
            _ = await damage.next()
            try await view.framePresented()
            _ = try await view.connection.request(ServiceMessage(type: "animate", text: "30 photo"))
            _ = await damage.next()
            let first = view.image
            try await view.framePresented()
            #expect(await damage.next() == [PixelRect(x: 0, y: 0, width: 320, height: 200)], "full damage")
            let second = view.image
            #expect(first != second)
            var moved = 0
            for y in 0..<150 where (0..<320).allSatisfy({ second.pixel(x: $0, y: y) == first.pixel(x: $0, y: y + 4) }) { moved += 1 }
            #expect(moved == 150, "rows moved up by 4: \(moved) of 150")
            #expect(Set((0..<320).map { second.pixel(x: $0, y: 100) }).count > 50, "a photograph, not a flat colour")

            try await view.click(x: 100, y: 100)
            try await view.framePresented()
            _ = await damage.next()
            #expect(view.image.pixel(x: 10, y: 10) == 0xFFFF_00FF, "the marker")
            _ = try await view.connection.request(ServiceMessage(type: "animate", text: "30 square"))
            try await view.framePresented()
            _ = await damage.next()
            try await view.framePresented()
            #expect(await damage.next() == [PixelRect(x: 32, y: 32, width: 64, height: 64)], "only the square")
            await view.connection.invalidate()
        }
    }

    // MARK: Notes

    @Test("Notes: the shared text prefilled and the URL shown; typed text and Save return one text/plain note")
    func notes() async throws {
        try await Self.withDemo { launcher, registry, _ in
            #expect(ShareSheet(registry: registry, items: [try .file(named: "a.png", contentType: "image/png", contents: try Self.png(2, 2, Self.white))])
                .explanation(for: "com.example.demo-share.notes")?.contains("accepts no image/png: a.png") == true)
            let (session, updates) = try await Self.start("com.example.demo-share.notes", [try .text("Hello"), try .url("https://example.com/a")],
                                                          registry: registry, launcher: launcher)
            let before = session.view.image
            #expect(before.width == Self.width && before.height == Self.height)
            #expect(before.pixel(x: 4, y: 4) == Self.white, "the sheet's background")
            #expect(Self.buttonColour(before, 0, of: 2) == Self.grey, "Cancel, bottom left")
            #expect(Self.buttonColour(before, 1, of: 2) == Self.tint, "Save, bottom right")

            // The note field has the keyboard, its caret after the shared text.
            try await session.view.type(" world")
            try await session.view.settle()
            let typed = session.view.image
            let changed = try #require(Self.changedRect(before, typed), "typing changed nothing")
            #expect(changed.y > 16 + 28 && changed.y + changed.height < Self.height - 56, "only the field changed, between the heading and the buttons: \(changed)")

            try await Self.click(session.view, "Save", expectedAt: Self.button(1, of: 2))
            guard case .completed(let items) = await session.outcome else { Issue.record("outcome \(await session.outcome)"); return }
            #expect(items.count == 1)
            #expect(items.first?.contentType == "text/plain")
            #expect(items.first?.text == "Hello world\nhttps://example.com/a", "the field's text, then the URL on its own line")
            let seen = await updates.all
            #expect(Self.stateRuns(seen) == [.preparing, .ready, .working, .done], "\(seen)")
            #expect(seen.last?.progress == 1)
            await session.close()
        }
    }

    @Test("Notes: Cancel, and escape, end the share cancelled")
    func notesCancelled() async throws {
        try await Self.withDemo { launcher, registry, _ in
            let (session, _) = try await Self.start("com.example.demo-share.notes", [try .text("never mind")], registry: registry, launcher: launcher)
            try await Self.click(session.view, "Cancel", expectedAt: Self.button(0, of: 2))
            guard case .cancelled = await session.outcome else { Issue.record("outcome \(await session.outcome)"); return }
            await session.close()

            let (escaped, _) = try await Self.start("com.example.demo-share.notes", [try .url("https://example.com/b")], registry: registry, launcher: launcher)
            try await escaped.view.press(keyCode: KeyCode.escape)
            guard case .cancelled = await escaped.outcome else { Issue.record("outcome \(await escaped.outcome)"); return }
            await escaped.close()
        }
    }

    /// The smallest rect holding every pixel that differs between `a` and `b`.
    static func changedRect(_ a: RemoteImage, _ b: RemoteImage) -> PixelRect? {
        var minX = Int.max, minY = Int.max, maxX = -1, maxY = -1
        for y in 0..<a.height {
            for x in 0..<a.width where a.pixel(x: x, y: y) != b.pixel(x: x, y: y) {
                minX = min(minX, x); maxX = max(maxX, x); minY = min(minY, y); maxY = max(maxY, y)
            }
        }
        return maxX < 0 ? nil : PixelRect(x: minX, y: minY, width: maxX - minX + 1, height: maxY - minY + 1)
    }

    // MARK: Post

    struct Post: Decodable, Equatable {
        struct Image: Decodable, Equatable {
            var file: String
            var width: Int
            var height: Int
            var originalWidth: Int
            var originalHeight: Int
        }

        var text: String
        var images: [Image]
    }

    @Test("Post: image previews; Post scales each image to at most 1024 px into the data folder with progress, and returns post.json")
    func post() async throws {
        let green: UInt32 = 0xFF20_C040, purple: UInt32 = 0xFFC0_2060
        try await Self.withDemo { launcher, registry, dataRoot in
            let items = [try .text("Two pictures"),
                         try ShareItem.file(named: "wide.png", contentType: "image/png", contents: try Self.png(2000, 1000, green)),
                         try ShareItem.file(named: "small.png", contentType: "image/png", contents: try Self.png(300, 200, purple))]
            #expect(ShareSheet(registry: registry, items: [try .text("no image")]).explanation(for: "com.example.demo-share.post")?
                .contains("needs at least 1 image/*, 0 given") == true)
            let (session, updates) = try await Self.start("com.example.demo-share.post", items, registry: registry, launcher: launcher)

            // Two 80-point thumbnails, side by side under the heading, each image scaled to fit.
            let shown = session.view.image
            let wide = try #require(Self.bounds(in: shown) { Self.near($0, green) }, "the first preview")
            let small = try #require(Self.bounds(in: shown) { Self.near($0, purple) }, "the second preview")
            #expect(abs(wide.width - 80) <= 1 && abs(wide.height - 40) <= 1, "2000×1000 in 80×80: \(wide)")
            #expect(abs(small.width - 80) <= 1 && abs(small.height - 53) <= 1, "300×200 in 80×80: \(small)")
            #expect(small.x > wide.x + wide.width && abs(small.y - wide.y) <= 8, "side by side: \(wide), \(small)")
            #expect(wide.y > 16 + 28 && wide.y + wide.height < Self.height - 56)
            #expect(Self.buttonColour(shown, 1, of: 2) == Self.tint, "Post, bottom right")

            try await Self.click(session.view, "Post", expectedAt: Self.button(1, of: 2))
            guard case .completed(let returned) = await session.outcome else { Issue.record("outcome \(await session.outcome)"); return }
            let json = try #require(returned.first)
            #expect(returned.count == 1 && json.fileName == "post.json" && json.contentType == "application/json", "\(returned)")
            let post = try JSONDecoder().decode(Post.self, from: Data(try json.data(limit: 1 << 20)))
            #expect(post == Post(text: "Two pictures", images: [
                Post.Image(file: "image-1.png", width: 1024, height: 512, originalWidth: 2000, originalHeight: 1000),
                Post.Image(file: "image-2.png", width: 300, height: 200, originalWidth: 300, originalHeight: 200),
            ]))

            // What it wrote, in <dataRoot>/<identifier>/post-<timestamp>/.
            let folder = dataRoot + "/com.example.demo-share.post"
            let posts = try Syscall.directoryEntries(folder).filter { $0.hasPrefix("post-") }
            #expect(posts.count == 1, "\(posts)")
            let written = folder + "/" + (posts.first ?? "")
            #expect(Set(try Syscall.directoryEntries(written)) == ["post.json", "image-1.png", "image-2.png"])
            #expect(Syscall.readSmallFile(written + "/post.json", limit: 1 << 16) == (try json.data(limit: 1 << 20)), "the returned post.json is the one written")
            let first = try RemoteImage(contentsOfPNG: written + "/image-1.png")
            let second = try RemoteImage(contentsOfPNG: written + "/image-2.png")
            #expect(first.width == 1024 && first.height == 512 && Self.near(first.pixel(x: 512, y: 256), green))
            #expect(second.width == 300 && second.height == 200 && second.pixel(x: 150, y: 100) == purple)

            // Working, with the progress after each image, then done.
            let seen = await updates.all
            #expect(Self.stateRuns(seen) == [.preparing, .ready, .working, .done], "\(seen)")
            let progress = seen.filter { $0.state == .working }.compactMap(\.progress)
            #expect(progress == progress.sorted() && progress.contains(0.5) && progress.last == 1, "\(progress)")
            #expect(seen.contains { $0.title == "Posting" && $0.subtitle == "image 2 of 2" && $0.progress == 1 }, "\(seen)")
            await session.close()
        }
    }

    // MARK: Markup

    @Test("Markup: strokes drawn with the pointer, one undone; Done returns the image at its own size, changed exactly along the stroke kept")
    func markup() async throws {
        let blue: UInt32 = 0xFF30_60C0
        try await Self.withDemo { launcher, registry, _ in
            let image = try ShareItem.file(named: "photo.png", contentType: "image/png", contents: try Self.png(400, 300, blue))
            #expect(ShareSheet(registry: registry, items: [image, image]).explanation(for: "com.example.demo-share.markup")?
                .contains("accepts at most 1 image/*, 2 given: photo.png and photo.png") == true)
            let (session, updates) = try await Self.start("com.example.demo-share.markup", [image], registry: registry, launcher: launcher)
            let shown = session.view.image
            #expect(Self.buttonColour(shown, 0, of: 3) == Self.grey && Self.buttonColour(shown, 2, of: 3) == Self.tint, "Cancel, and Done")
            #expect(Self.buttonColour(shown, 1, of: 3) != Self.orange, "Undo, disabled with no stroke")

            // Scaled to fit the canvas (448×192 points under the heading): 256×192 at (112, 56).
            let rect = try #require(Self.bounds(in: shown) { Self.near($0, blue) }, "the image")
            #expect(abs(rect.x - 112) <= 1 && abs(rect.y - 56) <= 1 && abs(rect.width - 256) <= 2 && abs(rect.height - 192) <= 2, "\(rect)")
            let origin = (x: 112.0, y: 56.0), factor = 400.0 / 256   // image pixels per point

            // A stroke kept, and one drawn across it and undone.
            let kept = (from: (x: 140.0, y: 90.0), to: (x: 330.0, y: 200.0))
            let undone = (from: (x: 150.0, y: 220.0), to: (x: 340.0, y: 80.0))
            try await Self.drag(session.view, from: kept.from, to: kept.to)
            try await Self.drag(session.view, from: undone.from, to: undone.to)
            try await session.view.settle()
            let drawn = session.view.image
            #expect(drawn.pixel(x: 235, y: 145) == Self.red, "the first stroke, on screen")
            #expect(drawn.pixel(x: 180, y: 198) == Self.red && drawn.pixel(x: 300, y: 110) == Self.red, "the second")
            #expect(Self.buttonColour(drawn, 1, of: 3) == Self.orange, "Undo, enabled")

            try await Self.click(session.view, "Undo", expectedAt: Self.button(1, of: 3))
            try await session.view.settle()
            let afterUndo = session.view.image
            #expect(Self.near(afterUndo.pixel(x: 180, y: 198), blue) && Self.near(afterUndo.pixel(x: 300, y: 110), blue), "the second stroke is gone")
            #expect(afterUndo.pixel(x: 235, y: 145) == Self.red, "the first stays")

            try await Self.click(session.view, "Done", expectedAt: Self.button(2, of: 3))
            guard case .completed(let returned) = await session.outcome else { Issue.record("outcome \(await session.outcome)"); return }
            let item = try #require(returned.first)
            #expect(returned.count == 1 && item.fileName == "photo-markup.png" && item.contentType == "image/png", "\(returned)")
            let result = try Self.decodePNG(try item.data(limit: 1 << 24))
            #expect(result.width == 400 && result.height == 300, "the image's own pixel size")

            // The kept stroke in image pixels: 4 points wide on screen.
            let a = ((kept.from.x - origin.x) * factor, (kept.from.y - origin.y) * factor)
            let b = ((kept.to.x - origin.x) * factor, (kept.to.y - origin.y) * factor)
            let half = 4 * factor / 2
            var changed = 0, outside: [(Int, Int)] = [], unchangedOnPath: [(Int, Int)] = []
            for y in 0..<result.height {
                for x in 0..<result.width {
                    let distance = Self.distance(from: (Double(x) + 0.5, Double(y) + 0.5), toSegment: a, b)
                    let pixel = result.pixel(x: x, y: y)
                    if pixel != blue {
                        changed += 1
                        if distance > half + 1.5 { outside.append((x, y)) }
                    } else if distance < half - 1 {
                        unchangedOnPath.append((x, y))
                    }
                    if distance < 1.5, pixel != Self.red { unchangedOnPath.append((x, y)) }
                }
            }
            #expect(changed > 400, "the stroke changed \(changed) pixels")
            #expect(outside.isEmpty, "\(outside.count) pixels changed away from the stroke, e.g. \(outside.prefix(5))")
            #expect(unchangedOnPath.isEmpty, "\(unchangedOnPath.count) pixels on the stroke's path are not red, e.g. \(unchangedOnPath.prefix(5))")

            let seen = await updates.all
            #expect(Self.stateRuns(seen) == [.preparing, .ready, .working, .done], "\(seen)")
            await session.close()
        }
    }

    /// Pointer down at `from`, ten moves to `to`, up there.
    static func drag(_ view: RemoteView, from: (x: Double, y: Double), to: (x: Double, y: Double)) async throws {
        try await view.send(.pointer(PointerEvent(.down, x: from.x, y: from.y, button: 1, buttons: 1)))
        for step in 1...10 {
            let t = Double(step) / 10
            try await view.send(.pointer(PointerEvent(.moved, x: from.x + (to.x - from.x) * t, y: from.y + (to.y - from.y) * t, buttons: 1)))
        }
        try await view.send(.pointer(PointerEvent(.up, x: to.x, y: to.y, button: 1)))
    }

    /// The distance from `p` to the segment from `a` to `b`.
    static func distance(from p: (Double, Double), toSegment a: (Double, Double), _ b: (Double, Double)) -> Double {
        let (dx, dy) = (b.0 - a.0, b.1 - a.1)
        let t = max(0, min(1, ((p.0 - a.0) * dx + (p.1 - a.1) * dy) / (dx * dx + dy * dy)))
        let (x, y) = (a.0 + t * dx - p.0, a.1 + t * dy - p.1)
        return (x * x + y * y).squareRoot()
    }

    /// Deletes `path` and everything below it.
    static func removeTree(_ path: String) {
        if Syscall.isDirectory(path) {
            for name in (try? Syscall.directoryEntries(path)) ?? [] { removeTree(path + "/" + name) }
            rmdir(path)
        } else {
            unlink(path)
        }
    }
}
