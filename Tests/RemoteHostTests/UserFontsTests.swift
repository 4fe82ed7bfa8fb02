import Glibc
@testable import RemoteHost
import RemoteTestSupport
import Testing

/// The user's fonts for the sandbox: a root host's copy of them.
@Suite("User fonts")
struct UserFontsTests {
    /// A font the system has, to copy.
    static let font = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"

    static func copyFont(to path: String) throws {
        let copied = try runCommands([["cp", font, path]])[0]
        try #require(copied.status == 0, "cp \(font) \(path): \(copied.output)")
    }

    static func write(_ path: String, _ text: String) throws {
        let fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw SystemCallError(call: "open(\(path))", errno: errno) }
        defer { close(fd) }
        _ = Array(text.utf8).withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
    }

    static func removeTree(_ path: String) {
        for name in (try? Syscall.directoryEntries(path)) ?? [] where unlink(path + "/" + name) != 0 {
            removeTree(path + "/" + name)
        }
        rmdir(path)
    }

    @Test("a root host's copy of the fonts: only font files, read through links that stay inside the folder, none starting with a dot; folders 0755, files 0644 with their times; a second sync copies nothing, a removed font goes, a changed one is copied again; beyond a bound, refused")
    func mirror() throws {
        let folder = try TemporaryFolder("remoteview-mirror")
        defer { Self.removeTree(folder.path) }
        let source = folder.path + "/source", mirror = folder.path + "/copy/fonts"
        #expect(mkdir(source, 0o700) == 0 && mkdir(source + "/sub", 0o700) == 0 && mkdir(source + "/.hidden", 0o700) == 0)
        try Self.copyFont(to: source + "/a.ttf")
        try Self.copyFont(to: source + "/sub/B.TTF")
        try Self.copyFont(to: source + "/.dot.ttf")
        try Self.copyFont(to: source + "/.hidden/c.ttf")
        #expect(chmod(source + "/a.ttf", 0o600) == 0)
        try Self.write(source + "/notes.txt", "not a font")
        #expect(symlink("a.ttf", source + "/inside.ttf") == 0)
        #expect(symlink(Self.font, source + "/outside.ttf") == 0)
        #expect(symlink("/usr/share/fonts", source + "/folder-link") == 0)
        let first = try FontMirror.sync(from: source, to: mirror)
        #expect(first == FontMirror.Outcome(files: 3, copied: 3, removed: 0), "\(first)")
        func listing() throws -> [String: FontFolder.File] {
            try FontFolder.walk(try FontFolder.openFolder(mirror), mode: .mirror).files
        }
        #expect(Set(try listing().keys) == ["a.ttf", "inside.ttf", "sub/B.TTF"])
        let original = try Syscall.status(ofPath: source + "/a.ttf")
        for (path, mode) in [("", 0o755), ("/sub", 0o755), ("/a.ttf", 0o644), ("/inside.ttf", 0o644), ("/sub/B.TTF", 0o644)] as [(String, mode_t)] {
            let status = try Syscall.linkStatus(ofPath: mirror + path)
            #expect(status.st_mode & 0o7777 == mode && status.st_uid == getuid(), "\(path): \(String(status.st_mode, radix: 8))")
            if path.hasSuffix(".ttf") {
                #expect(status.st_size == original.st_size && status.st_mtim.tv_sec == original.st_mtim.tv_sec
                        && status.st_mtim.tv_nsec == original.st_mtim.tv_nsec, "\(path): its size and time")
            }
        }
        let missing = try Syscall.status(ofPath: folder.path + "/copy")
        #expect(missing.st_mode & 0o7777 == 0o711, "a missing parent is made 0711")
        // Nothing changed: nothing copied.
        #expect(try FontMirror.sync(from: source, to: mirror) == FontMirror.Outcome(files: 3, copied: 0, removed: 0))
        // A font removed goes; one whose time changed is copied again; a stray file in the copy goes.
        #expect(unlink(source + "/sub/B.TTF") == 0 && rmdir(source + "/sub") == 0)
        var times = [timespec(tv_sec: 1_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, source + "/a.ttf", &times, 0) == 0)
        try Self.write(mirror + "/stray.txt", "left by someone")
        let third = try FontMirror.sync(from: source, to: mirror)
        #expect(third == FontMirror.Outcome(files: 2, copied: 2, removed: 3), "a.ttf, and inside.ttf, its link; sub/B.TTF, sub, stray.txt: \(third)")
        #expect(Set(try listing().keys) == ["a.ttf", "inside.ttf"])
        #expect(try Syscall.status(ofPath: mirror + "/a.ttf").st_mtim.tv_sec == 1_000_000)
        // Bounds: files and folders, bytes, depth.
        #expect(throws: FontFolder.Refusal.self) { try FontMirror.sync(from: source, to: mirror, limits: FontFolder.Limits(entries: 3)) }
        #expect(throws: FontFolder.Refusal.self) { try FontMirror.sync(from: source, to: mirror, limits: FontFolder.Limits(bytes: Int(original.st_size) + 1)) }
        #expect(mkdir(source + "/1", 0o700) == 0 && mkdir(source + "/1/2", 0o700) == 0)
        let deep = #expect(throws: FontFolder.Refusal.self) { try FontMirror.sync(from: source, to: mirror, limits: FontFolder.Limits(depth: 1)) }
        #expect(deep?.description == "1/2 is more than 1 folders deep", "\(String(describing: deep))")
        #expect(Set(try listing().keys) == ["a.ttf", "inside.ttf"], "a refused sync changes nothing")
    }
}
