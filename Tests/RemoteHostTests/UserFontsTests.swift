import Glibc
import Logging
@testable import RemoteHost
import RemoteTestSupport
import Testing

/// The user's fonts in the sandbox: fontconfig's configuration, the bubblewrap arguments, a root
/// host's copy, and the keeper that prepares them (SecurityTests shows a sandboxed service
/// finding them, as root and as an ordinary user).
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

    @Test("the standard folders: fontconfig's $XDG_DATA_HOME/fonts, else ~/.local/share/fonts; the cache in $XDG_CACHE_HOME/remoteview, else ~/.cache/remoteview, and /var/lib/remoteview for a root host")
    func standardFolders() throws {
        #expect(XDGBaseDirectories.cacheHome(xdgCacheHome: "/x/cache/", home: "/home/u") == "/x/cache")
        #expect(XDGBaseDirectories.cacheHome(xdgCacheHome: "relative", home: "/home/u") == "/home/u/.cache")
        #expect(XDGBaseDirectories.cacheHome(xdgCacheHome: nil, home: "/") == "/.cache")
        #expect(XDGBaseDirectories.cacheHome(xdgCacheHome: nil, home: nil) == nil)
        let locations = try #require(UserFontsPolicy.standard.locations)
        #expect(locations.folder == XDGBaseDirectories.dataHome() + "/fonts")
        #expect(locations.cacheFolder == (getuid() == 0 ? "/var/lib/remoteview" : XDGBaseDirectories.cacheHome() + "/remoteview"))
        #expect(Launcher.Configuration().userFonts == .standard)
        #expect(UserFontsPolicy.none.locations == nil)
    }

    @Test("the sandbox's fontconfig configuration: the system's, the user's fonts remapped from the host path they were scanned at (escaped), the host's cache; a path XML cannot carry is refused")
    func configuration() throws {
        let text = try #require(FontconfigFiles.sandboxConfiguration(hostFonts: "/home/a&b/<x> \"y\" 'z'/fonts"))
        #expect(text.contains("\t<include ignore_missing=\"yes\">/etc/fonts/fonts.conf</include>\n"))
        #expect(text.contains("\t<remap-dir as-path=\"/home/a&amp;b/&lt;x&gt; &quot;y&quot; &apos;z&apos;/fonts\">/run/remoteview/fonts</remap-dir>\n"), "\(text)")
        #expect(text.contains("\t<cachedir>/run/remoteview/fontconfig</cachedir>\n"))
        #expect(!text.contains("a&b"))
        let cache = try #require(FontconfigFiles.cacheConfiguration(cacheFolder: "/home/a&b/.cache/remoteview/fontconfig"))
        #expect(cache.contains("\t<cachedir>/home/a&amp;b/.cache/remoteview/fontconfig</cachedir>\n"))
        #expect(!cache.contains("<dir") && !cache.contains("<include"), "fc-cache on the host reads no other folder: \(cache)")
        for path in ["/home/a\nb", "/home/a\tb", "/home/a\u{7F}", "/home/\u{FFFD}"] {
            #expect(FontconfigFiles.sandboxConfiguration(hostFonts: path) == nil, "\(path.debugDescription)")
        }
        #expect(FontconfigFiles.escaped("/home/ünïcødé/フォント") == "/home/ünïcødé/フォント")
    }

    @Test("bubblewrap binds the user's fonts and their fontconfig folder read-only and sets FONTCONFIG_FILE; a root host's service whose uid cannot reach them gets neither, and a note says why")
    func arguments() throws {
        let folder = try TemporaryFolder("remoteview-fonts", searchable: true)
        defer { Self.removeTree(folder.path) }
        let fonts = folder.path + "/fonts", fontconfig = folder.path + "/fontconfig"
        #expect(mkdir(fonts, 0o755) == 0 && mkdir(fontconfig, 0o755) == 0)
        let manifest = try SandboxTests.manifest()
        let binding = UserFontsBinding(fonts: fonts, fontconfig: fontconfig)
        let command = try BubblewrapCommand(bubblewrap: "/usr/bin/bwrap", manifest: manifest, environment: [:], userFonts: binding)
        let joined = command.arguments.joined(separator: " ")
        #expect(joined.contains("--ro-bind-try \(fonts) /run/remoteview/fonts --ro-bind-try \(fontconfig) /run/remoteview/fontconfig"), "\(joined)")
        #expect(joined.contains("--setenv FONTCONFIG_FILE /run/remoteview/fontconfig/fonts.conf"))
        #expect(command.notes.isEmpty)
        // Without them: nothing of it.
        let without = try BubblewrapCommand(bubblewrap: "/usr/bin/bwrap", manifest: manifest, environment: [:]).arguments.joined(separator: " ")
        #expect(!without.contains("/run/remoteview") && !without.contains("FONTCONFIG_FILE"))
        // A uid of the service's own, and the folder closed to it (mode 0700).
        let identity = ChildProcess.Identity(user: 0x7000_0001, group: 0x7000_0001)
        let reachable = try BubblewrapCommand(bubblewrap: "/usr/bin/bwrap", manifest: manifest, environment: [:], identity: identity, userFonts: binding)
        #expect(reachable.arguments.contains("/run/remoteview/fonts") && reachable.notes.isEmpty)
        #expect(chmod(fonts, 0o700) == 0)
        let closed = try BubblewrapCommand(bubblewrap: "/usr/bin/bwrap", manifest: manifest, environment: [:], identity: identity, userFonts: binding)
        #expect(!closed.arguments.joined(separator: " ").contains("/run/remoteview") && !closed.arguments.joined(separator: " ").contains("FONTCONFIG_FILE"))
        #expect(closed.notes.count == 1 && closed.notes[0].contains("the user's fonts are left out of the sandbox of com.example.s") && closed.notes[0].contains(fonts),
                "\(closed.notes)")
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

    @Test("the keeper: nothing without the folder; a folder of the host's user prepared once, bound as itself (or, copied, its copy), with the configuration fontconfig reads; prepared again when a font is added; refused when others may write to it, and then a root host's copies are removed")
    func keeper() async throws {
        let folder = try TemporaryFolder("remoteview-keeper", searchable: true)
        defer { Self.removeTree(folder.path) }
        let fonts = folder.path + "/fonts", cache = folder.path + "/cache"
        var logger = Logger(label: "tests")
        logger.logLevel = .critical
        for copies in [false, true] {
            defer { Self.removeTree(fonts); Self.removeTree(cache) }
            let keeper = try #require(UserFontsKeeper(policy: .folder(fonts, cacheFolder: cache), copies: copies, logger: logger))
            #expect(keeper.binding() == nil, "no folder yet")
            #expect(mkdir(fonts, 0o755) == 0)
            try Self.copyFont(to: fonts + "/a.ttf")
            let binding = try #require(keeper.binding())
            let resolvedCache = try Syscall.resolvedPath(cache)
            #expect(binding == UserFontsBinding(fonts: copies ? resolvedCache + "/fonts" : try Syscall.resolvedPath(fonts), fontconfig: resolvedCache + "/fontconfig"))
            let configuration = String(decoding: Syscall.readSmallFile(binding.fontconfig + "/fonts.conf", limit: 4096) ?? [], as: UTF8.self)
            #expect(configuration == FontconfigFiles.sandboxConfiguration(hostFonts: binding.fonts))
            let hostConfiguration = String(decoding: Syscall.readSmallFile(cache + "/fc-cache.conf", limit: 4096) ?? [], as: UTF8.self)
            #expect(hostConfiguration == FontconfigFiles.cacheConfiguration(cacheFolder: binding.fontconfig))
            #expect(try Syscall.status(ofPath: binding.fontconfig).st_mode & 0o7777 == (copies ? 0o755 : 0o700))
            #expect(keeper.binding() == binding)
            // A font added: its folder's time changes, and the copy follows.
            try Self.copyFont(to: fonts + "/b.ttf")
            #expect(keeper.binding() == binding)
            if copies { #expect(Syscall.isRegularFile(binding.fonts + "/b.ttf")) }
            #expect(chmod(fonts, 0o775) == 0)
            await keeper.cacheBuilt()
            #expect(keeper.binding() == nil, "others may write to it")
            // Root's copies are not left readable by every user.
            #expect(Syscall.isDirectory(binding.fontconfig) == !copies && Syscall.isDirectory(resolvedCache + "/fonts") == false,
                    "copies \(copies): \((try? Syscall.directoryEntries(cache)) ?? [])")
            // The cache being built in the background ends with the keeper.
            await keeper.stop()
            #expect(keeper.binding() == nil, "nothing after stop")
        }
        #expect(UserFontsKeeper(policy: .none, logger: logger) == nil)
    }
}
