import Glibc
import RemoteHost
import RemoteTestSupport
import Testing

/// One share test, two activities: `Examples/uppercase-c`, written in C from the documents
/// alone, and its Swift twin in the fixture service. Both are launched sandboxed from their
/// manifests, get a text, show it, take typed text and a click, stream their updates, and
/// return the text upper-cased: the protocol does not care what language a service is in.
@Suite("The same share test for an activity in C and in Swift", .serialized)
struct UppercaseShareTests {
    /// The repository, from this file's path.
    static let repository: String = {
        let parts = #filePath.split(separator: "/")
        return "/" + parts.dropLast(3).joined(separator: "/")
    }()

    enum Activity: String, CaseIterable, CustomTestStringConvertible {
        case c, swift
        var testDescription: String { self == .c ? "the C activity" : "its Swift twin" }
    }

    static let blue: UInt32 = 0xFF2F_6FED, white: UInt32 = 0xFFFF_FFFF

    /// Runs `body` with a launcher over the activity's manifest folder.
    static func withActivity(_ activity: Activity, _ body: @escaping @Sendable (Launcher, ServiceRegistry, String) async throws -> Void) async throws {
        switch activity {
        case .c:
            let folder = repository + "/Examples/uppercase-c"
            try #require(Syscall.isRegularFile(folder + "/uppercase-share"), "build the C activity first: make -C Examples/uppercase-c (make test does)")
            let registry = ServiceRegistry(scanning: [folder])
            #expect(registry.problems.isEmpty, "\(registry.problems)")
            try await withoutLeaks(within: .seconds(20)) {
                try await withLauncher(registry: registry, configuration: fastLauncherConfiguration()) { launcher in
                    try await body(launcher, registry, "com.example.uppercase-c")
                }
            }
        case .swift:
            let manifest = ServiceFolder.manifest(mode: "uppercase", extra: #""activation": { "contentTypes": [{ "type": "text/plain", "min": 1, "max": 1 }] }, "instances": "perConnection""#)
            try await withServices(["uppercase.json": manifest]) { launcher, folder in
                try await body(launcher, ServiceRegistry(scanning: [folder.path]), "com.example.test")
            }
        }
    }

    /// Whether any pixel of `image` in `rect` is dark (text).
    static func hasDarkPixel(_ image: RemoteImage, in rect: PixelRect) -> Bool {
        for y in rect.y..<rect.y + rect.height { for x in rect.x..<rect.x + rect.width where image.pixel(x: x, y: y) & 0xFF < 0x60 { return true } }
        return false
    }

    @Test("text in, a view with it, typed text and a click, updates in order, the text upper-cased back", arguments: Activity.allCases)
    func uppercase(_ activity: Activity) async throws {
        try await Self.withActivity(activity) { launcher, registry, identifier in
            // Offered for one text, not for two.
            let two = ShareSheet(registry: registry, items: [try .text("a"), try .text("b")])
            #expect(two.activity(identifier) == nil)
            #expect(two.explanation(for: identifier)?.contains(#"accepts at most 1 text/plain, 2 given: "a" and "b""#) == true, "\(two.explanations)")

            let sheet = ShareSheet(registry: registry, items: [try .text("hello")])
            let session = try await sheet.perform(try #require(sheet.activity(identifier)), launcher: launcher)
            let updates = ShareUpdates(session)
            try await session.view.present(width: 320, height: 200)
            try await session.view.settle()
            let before = session.view.image
            #expect(before.width == 320 && before.height == 200)
            #expect(before.pixel(x: 4, y: 4) == Self.white && before.pixel(x: 310, y: 100) == Self.white, "a white background")
            #expect(before.pixel(x: 20, y: 148) == Self.blue && before.pixel(x: 170, y: 180) == Self.blue, "the button, 16 points from the bottom-left corner")
            #expect(before.pixel(x: 12, y: 148) == Self.white && before.pixel(x: 180, y: 180) == Self.white, "and nothing blue beside it")
            #expect(Self.hasDarkPixel(before, in: PixelRect(x: 16, y: 14, width: 60, height: 24)), "the text at the top left")

            try await session.view.type(" world")
            try await session.view.settle()
            let after = session.view.image
            #expect(Self.hasDarkPixel(after, in: PixelRect(x: 76, y: 14, width: 60, height: 24)), "the typed text follows the shared one")
            #expect(!Self.hasDarkPixel(before, in: PixelRect(x: 100, y: 14, width: 36, height: 24)))

            try await session.view.click(x: 96, y: 164)
            guard case .completed(let items) = await session.outcome else { Issue.record("outcome \(await session.outcome)"); return }
            #expect(items.count == 1 && items.first?.text == "HELLO WORLD" && items.first?.contentType == "text/plain", "\(items)")
            let seen = await updates.all
            let states = seen.map(\.state)
            #expect(states.first == .preparing && states.contains(.ready), "\(seen)")
            #expect(Array(states.suffix(2)) == [.working, .done] && seen.suffix(2).map(\.progress) == [0.5, 1], "\(seen)")
            #expect(seen.allSatisfy { !$0.title.isEmpty })
            await session.close()
        }
    }

    @Test("dismissed, it answers cancelled", arguments: Activity.allCases)
    func dismissed(_ activity: Activity) async throws {
        try await Self.withActivity(activity) { launcher, registry, identifier in
            let sheet = ShareSheet(registry: registry, items: [try .text("never mind")])
            let session = try await sheet.perform(try #require(sheet.activity(identifier)), launcher: launcher)
            try await session.view.present(width: 200, height: 120)
            try await session.view.settle()
            guard case .cancelled = await session.cancel() else { Issue.record("outcome \(await session.outcome)"); return }
            await session.close()
        }
    }
}
