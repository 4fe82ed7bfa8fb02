import Dispatch
import FoundationEssentials
import Glibc
import Logging
@testable import RemoteHost
import RemoteTestSupport
import Testing

/// The share sheet's memory: ranking by recency and frequency per kind of item, the user's
/// choices, and the file that keeps them (two writers, a corrupt file, a newer one).
@Suite("Share preferences")
struct SharePreferencesTests {
    /// Share activities that all take one text or one image, and a plain service.
    static func registry() throws -> ServiceRegistry {
        let rules = #"{"type": "text/plain", "min": 0, "max": 1}, {"type": "image/*", "min": 0, "max": 1}"#
        return ServiceRegistry(manifests: try ["com.example.a", "com.example.b", "com.example.c"].map { try ActivationTests.manifest(rules, identifier: $0) }
                                              + [try ActivationTests.manifest(nil, identifier: "com.example.plain")])
    }

    static func png() throws -> ShareItem { try .file(named: "a.png", contentType: "image/png", contents: [0x89, 0x50]) }

    static func withPreferences(_ body: (SharePreferences, TemporaryFolder, LogRecords) throws -> Void) throws {
        let folder = try TemporaryFolder("remoteview-preferences")
        defer { folder.remove() }
        let records = LogRecords()
        try body(SharePreferences(folder: folder.path + "/state/remoteview", logger: Logger(label: "test") { _ in records.handler() }), folder, records)
    }

    static let day = 24.0 * 3600

    @Test("items have kinds: text, URL, an image file, another file")
    func kinds() throws {
        #expect(ShareKind.kinds(of: [try .text("a"), try .url("https://example.com")]) == [.text, .url])
        #expect(ShareKind(of: try Self.png()) == .image)
        #expect(ShareKind(of: try .file(named: "a.pdf", contentType: "application/pdf", contents: [1])) == .file)
    }

    @Test("no file: nothing ranked, nothing off, the sheet in identifier order; nothing is written by reading")
    func empty() throws {
        try Self.withPreferences { preferences, _, _ in
            #expect(preferences.snapshot() == SharePreferences.Snapshot())
            let sheet = ShareSheet(registry: try Self.registry(), items: [try .text("x")], preferences: preferences)
            #expect(sheet.activities.map(\.identifier) == ["com.example.a", "com.example.b", "com.example.c"])
            #expect(sheet.allActivities.map(\.identifier) == ["com.example.a", "com.example.b", "com.example.c"])
            #expect(!Syscall.isRegularFile(preferences.path))
        }
    }

    @Test("completed shares rank per kind: recency and frequency in one decaying weight")
    func ranking() throws {
        try Self.withPreferences { preferences, _, _ in
            let now = Date().timeIntervalSince1970
            // c: twice for text, two weeks ago (weight ½); b: once for text, today (1); a: three times for images.
            for _ in 0..<2 { try preferences.recordCompletedShare(by: "com.example.c", kinds: [.text], at: Date(timeIntervalSince1970: now - 14 * Self.day)) }
            try preferences.recordCompletedShare(by: "com.example.b", kinds: [.text], at: Date(timeIntervalSince1970: now))
            for _ in 0..<3 { try preferences.recordCompletedShare(by: "com.example.a", kinds: [.image], at: Date(timeIntervalSince1970: now)) }

            let snapshot = preferences.snapshot()
            #expect(snapshot.uses["com.example.c"]?[.text]?.count == 2)
            #expect(abs(snapshot.score(of: "com.example.c", for: [.text], at: now) - 0.5) < 0.001)
            #expect(abs(snapshot.score(of: "com.example.b", for: [.text], at: now) - 1) < 0.001)
            #expect(abs(snapshot.score(of: "com.example.a", for: [.image, .text], at: now) - 3) < 0.001)
            #expect(snapshot.score(of: "com.example.a", for: [.text], at: now) == 0)
            // A week on, each weighs half.
            #expect(abs(snapshot.score(of: "com.example.b", for: [.text], at: now + 7 * Self.day) - 0.5) < 0.001)

            let registry = try Self.registry()
            #expect(ShareSheet(registry: registry, items: [try .text("x")], preferences: preferences).activities.map(\.identifier)
                        == ["com.example.b", "com.example.c", "com.example.a"])
            #expect(ShareSheet(registry: registry, items: [try Self.png()], preferences: preferences).activities.map(\.identifier)
                        == ["com.example.a", "com.example.b", "com.example.c"])
            // The host's choice: ranking off, or its own order (the rest after it, by identifier).
            #expect(ShareSheet(registry: registry, items: [try .text("x")], preferences: preferences, order: .byIdentifier).activities.map(\.identifier)
                        == ["com.example.a", "com.example.b", "com.example.c"])
            #expect(ShareSheet(registry: registry, items: [try .text("x")], preferences: preferences, order: .custom(["com.example.c", "com.example.nope"])).activities.map(\.identifier)
                        == ["com.example.c", "com.example.a", "com.example.b"])
            // Without preferences: by identifier, as before.
            #expect(ShareSheet(registry: registry, items: [try .text("x")]).activities.map(\.identifier) == ["com.example.a", "com.example.b", "com.example.c"])
        }
    }

    @Test("the file is versioned JSON, in a folder made 0700")
    func file() throws {
        try Self.withPreferences { preferences, _, _ in
            try preferences.recordCompletedShare(by: "com.example.a", kinds: [.url], at: Date(timeIntervalSince1970: 1_800_000_000))
            try preferences.setEnabled(false, for: "com.example.b")
            let bytes = try #require(Syscall.readSmallFile(preferences.path, limit: 4096))
            // Read with a schema of the test's own: docs/Manifest.md's, "Ranking and choice".
            struct Use: Decodable { var count: Int; var last: Double; var weight: Double }
            struct Entry: Decodable { var off: Bool?; var uses: [String: Use]? }
            struct File: Decodable { var version: Int; var activities: [String: Entry] }
            let file = try JSONDecoder().decode(File.self, from: Data(bytes))
            #expect(file.version == 1)
            #expect(file.activities["com.example.b"]?.off == true)
            let url = try #require(file.activities["com.example.a"]?.uses?["url"])
            #expect(url.count == 1 && url.last == 1_800_000_000 && url.weight == 1)
            #expect(try Syscall.status(ofPath: preferences.folder).st_mode & 0o777 == 0o700)
            // Turned on again: the entry goes.
            try preferences.setEnabled(true, for: "com.example.b")
            #expect(preferences.snapshot().disabled.isEmpty)
            #expect(!String(decoding: Syscall.readSmallFile(preferences.path, limit: 4096) ?? [], as: UTF8.self).contains("com.example.b"))
        }
    }

    @Test("two writers at once are both counted: 4 threads × 25 shares, each its own read-change-write under the lock")
    func twoWriters() throws {
        try Self.withPreferences { preferences, _, _ in
            let other = SharePreferences(folder: preferences.folder)
            DispatchQueue.concurrentPerform(iterations: 4) { writer in
                for _ in 0..<25 { try? (writer.isMultiple(of: 2) ? preferences : other).recordCompletedShare(by: "com.example.a", kinds: [.text, .url]) }
            }
            let uses = try #require(preferences.snapshot().uses["com.example.a"])
            #expect(uses[.text]?.count == 100)
            #expect(uses[.url]?.count == 100)
        }
    }

    @Test("a corrupt file is moved aside with a warning; the sheet still opens, and the next share begins again")
    func corrupt() throws {
        for garbage in ["{\"version\": 1, \"activities\": {\"a\": {\"uses\": {\"text\": {\"count\": -4, \"last\": 0, \"weight\": 1}}}}}",
                        "not json at all", "{\"version\": \"one\"}", "[]", String(repeating: " ", count: 1_100_000) + "{}",
                        // A count that would overflow on the next share; a time 100 years ahead (it would never decay).
                        "{\"version\": 1, \"activities\": {\"a\": {\"uses\": {\"text\": {\"count\": 9223372036854775807, \"last\": 0, \"weight\": 1}}}}}",
                        "{\"version\": 1, \"activities\": {\"a\": {\"uses\": {\"text\": {\"count\": 1, \"last\": 4900000000, \"weight\": 1}}}}}",
                        "{\"version\": 0, \"activities\": {}}"] {
            try Self.withPreferences { preferences, _, records in
                try Self.makeFolder(preferences.folder)
                try Self.write(garbage, to: preferences.path)
                let sheet = ShareSheet(registry: try Self.registry(), items: [try .text("x")], preferences: preferences)
                #expect(sheet.activities.count == 3)
                #expect(Syscall.isRegularFile(preferences.path + ".corrupt"))
                #expect(records.lines.contains { $0.message.contains("was unreadable") && $0.message.contains("moved to") })
                try preferences.recordCompletedShare(by: "com.example.b", kinds: [.text])
                #expect(preferences.snapshot().uses["com.example.b"]?[.text]?.count == 1)
            }
        }
    }

    @Test("a file of a newer version is left as it is: read as nothing, with a warning; a change throws, naming it")
    func newer() throws {
        try Self.withPreferences { preferences, _, records in
            try Self.makeFolder(preferences.folder)
            let newer = #"{"version": 2, "activities": {}, "pinned": ["com.example.a"]}"#
            try Self.write(newer, to: preferences.path)
            #expect(preferences.snapshot() == SharePreferences.Snapshot())
            #expect(records.lines.contains { $0.message.contains("newer RemoteView (format 2") })
            #expect(throws: RemoteError.self) { try preferences.setEnabled(false, for: "com.example.a") }
            do throws(RemoteError) { try preferences.setEnabled(false, for: "com.example.a") } catch { #expect(error.code == .storage && error.reason.contains("left as it is")) }
            #expect(String(decoding: Syscall.readSmallFile(preferences.path) ?? [], as: UTF8.self) == newer)
        }
    }

    @Test("an activity turned off is not offered, and why-not says so; on again, it is; without preferences it cannot be turned off")
    func turnedOff() throws {
        try Self.withPreferences { preferences, _, _ in
            let registry = try Self.registry()
            let sheet = ShareSheet(registry: registry, items: [try .text("x")], preferences: preferences)
            let off = try sheet.settingEnabled(false, for: "com.example.b")
            #expect(off.activities.map(\.identifier) == ["com.example.a", "com.example.c"])
            #expect(off.explanation(for: "com.example.b") == "turned off by the user")
            #expect(!off.isEnabled("com.example.b") && off.isEnabled("com.example.a"))
            #expect(off.allActivities.count == 3)
            // Every sheet reading the same file.
            #expect(ShareSheet(registry: registry, items: [try Self.png(), try Self.png()], preferences: preferences).explanation(for: "com.example.b") == "turned off by the user")
            let on = try off.settingEnabled(true, for: "com.example.b")
            #expect(on.activities.map(\.identifier) == ["com.example.a", "com.example.b", "com.example.c"])
            do throws(RemoteError) { _ = try off.settingEnabled(false, for: "com.example.plain") } catch { #expect(error.reason.contains("no share activity com.example.plain")) }
            do throws(RemoteError) { _ = try ShareSheet(registry: registry, items: [try .text("x")]).settingEnabled(false, for: "com.example.a") } catch {
                #expect(error.code == .invalidArgument && error.reason.contains("keeps no preferences"))
            }
        }
    }

    @Test("an unwritable folder: a change throws storage naming it; reading still works")
    func unwritable() throws {
        let preferences = SharePreferences(folder: "/proc/remoteview-cannot-be-here")
        #expect(preferences.snapshot() == SharePreferences.Snapshot())
        do throws(RemoteError) { try preferences.setEnabled(false, for: "com.example.a"); Issue.record("no error") } catch {
            #expect(error.code == .storage && error.reason.contains("/proc/remoteview-cannot-be-here"))
        }
    }

    @Test("the least used are forgotten beyond the limit (512; 16 here); one turned off never is; an identifier is 1…255 bytes")
    func pruned() throws {
        try Self.withPreferences { full, _, _ in
            let preferences = SharePreferences(folder: full.folder, logger: Logger(label: "test"), activityLimit: 16)
            try preferences.setEnabled(false, for: "com.example.off")
            let old = Date(timeIntervalSince1970: Date().timeIntervalSince1970 - 60 * Self.day)
            try preferences.recordCompletedShare(by: "com.example.old", kinds: [.text], at: old)
            for index in 0..<16 { try preferences.recordCompletedShare(by: "com.example.n\(index)", kinds: [.text]) }
            let snapshot = preferences.snapshot()
            #expect(snapshot.uses.count + 1 == 16)
            #expect(snapshot.uses["com.example.old"] == nil)
            #expect(snapshot.disabled == ["com.example.off"])
            // A new activity is never forgotten at once, however little it weighs beside the rest.
            try preferences.recordCompletedShare(by: "com.example.new", kinds: [.text], at: old)
            #expect(preferences.snapshot().uses["com.example.new"] != nil)
            // At most the limit turned off: the file stays within what is read back.
            for index in 1..<16 { try preferences.setEnabled(false, for: "com.example.off\(index)") }
            do throws(RemoteError) { try preferences.setEnabled(false, for: "com.example.one-too-many"); Issue.record("no error") } catch {
                #expect(error.code == .storage && error.reason.contains("at most 16 activities can be turned off"))
            }
            #expect(preferences.snapshot().disabled.count == 16)
            #expect(throws: RemoteError.self) { try preferences.setEnabled(false, for: "") }
            #expect(throws: RemoteError.self) { try preferences.recordCompletedShare(by: String(repeating: "a", count: 256), kinds: [.text]) }
        }
    }

    /// Writes `text` at `path` (made or replaced).
    static func write(_ text: String, to path: String) throws {
        try Data(text.utf8).write(to: URL(filePath: path))
    }

    @Test("equal scores keep identifier order; the state folder may be a symbolic link")
    func tiesAndLinks() throws {
        try Self.withPreferences { preferences, folder, _ in
            try Self.makeFolder(folder.path + "/elsewhere")
            try Self.makeFolder(folder.path + "/state")
            #expect(symlink(folder.path + "/elsewhere", preferences.folder) == 0)
            let when = Date()
            try preferences.recordCompletedShare(by: "com.example.c", kinds: [.text], at: when)
            try preferences.recordCompletedShare(by: "com.example.b", kinds: [.text], at: when)
            #expect(Syscall.isRegularFile(folder.path + "/elsewhere/share-sheet.json"))
            #expect(ShareSheet(registry: try Self.registry(), items: [try .text("x")], preferences: preferences).activities.map(\.identifier)
                        == ["com.example.b", "com.example.c", "com.example.a"])
        }
    }

    @Test("a lock another process keeps: a change gives up after lockPatience (1 s), naming it, and changes nothing")
    func lockHeld() throws {
        try Self.withPreferences { preferences, _, _ in
            try preferences.setEnabled(false, for: "com.example.a")
            // Another open file description of the folder: flock excludes it as another process's.
            let holder = try Syscall.openFolder(preferences.folder)
            try Syscall.lockExclusively(holder, name: "the test's lock")
            do throws(RemoteError) { try preferences.recordCompletedShare(by: "com.example.b", kinds: [.text]); Issue.record("no error") } catch {
                #expect(error.code == .storage && error.reason.contains("held the lock") && error.reason.contains(preferences.folder))
            }
            holder.close()
            #expect(preferences.snapshot() == SharePreferences.Snapshot(disabled: ["com.example.a"]))
        }
    }

    /// The folder `path` and its missing parents (the launcher's own helper).
    static func makeFolder(_ path: String) throws {
        try SandboxPaths.makeFolders(path) { _ in 0o700 }
    }
}
