import Glibc
@testable import RemoteHost
import RemoteTestSupport
import Testing

/// What goes into the bubblewrap command line, and the ELF reader that decides the runtime binds.
@Suite("Sandbox command")
struct SandboxTests {
    /// This test binary: a dynamically linked Swift executable with a RUNPATH.
    static let ownExecutable = Syscall.symbolicLinkTarget("/proc/self/exe") ?? ""

    static func manifest(_ json: String = "") throws -> ServiceManifest {
        let folder = try TemporaryFolder("remoteview-sandbox")
        defer { folder.remove() }
        let file = try folder.write("m.json", """
            {"identifier": "com.example.s", "executable": "\(ownExecutable)", "arguments": ["a", "b"],
             "display": {"title": "S"}\(json)}
            """)
        return try ServiceRegistry.load(file: file)
    }

    @Test("the default sandbox: every namespace, no network, no capabilities, cleared environment, read-only minimal files")
    func defaults() throws {
        let command = try BubblewrapCommand(bubblewrap: "/usr/bin/bwrap", manifest: try Self.manifest(), environment: ["LISTEN_FDS": "1"])
        let arguments = command.arguments
        for flag in ["--unshare-all", "--die-with-parent", "--new-session", "--clearenv"] { #expect(arguments.contains(flag)) }
        #expect(!arguments.contains("--share-net"))
        #expect(arguments.joined(separator: " ").contains("--cap-drop ALL"))
        #expect(arguments.joined(separator: " ").contains("--ro-bind /usr /usr"))
        #expect(arguments.joined(separator: " ").contains("--tmpfs /tmp"))
        #expect(arguments.joined(separator: " ").contains("--setenv LISTEN_FDS 1"))
        #expect(arguments.suffix(4) == ["--", Self.ownExecutable, "a", "b"])
        // Nothing writable and nothing of the host's private places is bound.
        #expect(!arguments.contains("--bind"))
        let sources = zip(arguments, arguments.dropFirst()).filter { $0.0.hasPrefix("--ro-bind") }.map(\.1)
        #expect(sources.contains(Self.ownExecutable))
        // The executable (and libraries beside it) may live anywhere, /tmp included: it is bound
        // on purpose. Nothing else may come from the host's private places.
        let folder = String(Self.ownExecutable[..<Self.ownExecutable.lastIndex(of: "/")!])
        for path in sources where path != Self.ownExecutable && !path.hasPrefix(folder + "/") {
            #expect(!BubblewrapCommand.forbidden.contains { path == $0 || path.hasPrefix($0 + "/") } || path.hasPrefix("/etc/fonts")
                        || path == "/etc/ld.so.cache" || path == "/etc/localtime" || path == "/proc/sys", "\(path) is bound")
        }
        // The host kernel's settings, read-only over the sandbox's own procfs (bubblewrap leaves
        // /proc/sys's files writable by their owner, which a root host's sandbox was).
        let joined = arguments.joined(separator: " ")
        #expect(joined.contains("--proc /proc --ro-bind /proc/sys /proc/sys"))
        // Debian's font alternatives: links into /usr, made again inside, nothing bound.
        for alternative in BubblewrapCommand.fontAlternatives {
            #expect(alternative.target.hasPrefix("/usr/") && joined.contains("--symlink \(alternative.target) \(alternative.link)"))
        }
        #expect(!sources.contains { $0.hasPrefix("/etc/alternatives") })
    }

    @Test("the network entitlement shares the network; read-only paths are bound read-only")
    func entitlements() throws {
        let manifest = try Self.manifest(#", "sandbox": {"network": true, "readOnlyPaths": ["/usr/share", "/var/lib"]}"#)
        let arguments = try BubblewrapCommand(bubblewrap: "/usr/bin/bwrap", manifest: manifest, environment: [:]).arguments.joined(separator: " ")
        #expect(arguments.contains("--share-net"))
        #expect(arguments.contains("--ro-bind /var/lib /var/lib"))
        #expect(!arguments.contains("--ro-bind /usr/share"), "already inside /usr")
    }

    @Test("read-only paths are checked again at launch: a link turned to /proc, or a path overlapping the data root, invalidates it")
    func readOnlyPathsAtLaunch() throws {
        let folder = try TemporaryFolder("remoteview-links")
        defer { folder.remove() }
        #expect(symlink("/usr/share", folder.path + "/link") == 0)
        let linked = try Self.manifest(#", "sandbox": {"readOnlyPaths": ["/var/lib", "\#(folder.path)/link"]}"#)
        let arguments = try BubblewrapCommand(bubblewrap: "/usr/bin/bwrap", manifest: linked, environment: [:]).arguments.joined(separator: " ")
        #expect(arguments.contains("--ro-bind /usr/share \(folder.path)/link"), "the resolved path is what is bound")
        // Re-pointed after the manifest was read.
        #expect(unlink(folder.path + "/link") == 0 && symlink("/proc", folder.path + "/link") == 0)
        let refused = #expect(throws: RemoteError.self) {
            try BubblewrapCommand(bubblewrap: "/usr/bin/bwrap", manifest: linked, environment: [:])
        }
        #expect(refused?.code == .invalidated && refused?.reason.contains("sandbox.readOnlyPaths[1]: \(folder.path)/link (/proc) is refused") == true,
                "\(String(describing: refused))")
        let overlap = #expect(throws: RemoteError.self) {
            try BubblewrapCommand(bubblewrap: "/usr/bin/bwrap", manifest: try Self.manifest(#", "sandbox": {"readOnlyPaths": ["/var/lib"]}"#),
                                  environment: [:], dataRoot: "/var/lib")
        }
        #expect(overlap?.reason.contains("overlaps the services' data folders") == true, "\(String(describing: overlap))")
    }

    @Test("a file not readable by every user (a host user's private file) is refused; readable by all, it is bound")
    func readOnlyPathModes() throws {
        let folder = try TemporaryFolder("remoteview-modes", searchable: true)
        defer { folder.remove() }
        let secret = try folder.write("secret.txt", "key", mode: 0o600)
        // The folder is under /tmp, itself never bound: only the mode rule is tried here.
        guard case .failure(let refusal) = SandboxPaths.check(readOnly: secret, forbidden: []) else {
            Issue.record("a file of mode 0600 must be refused")
            return
        }
        #expect(refusal.description.contains("is refused: it is not readable by every user (mode o+r)"), "\(refusal)")
        #expect(chmod(secret, 0o644) == 0)
        #expect((try? SandboxPaths.check(readOnly: secret, forbidden: []).get()) == secret)
        // Readable, but behind a folder others cannot pass (mkdtemp's 0700): fine for the
        // host's own user, refused for a root host's service, whose uid cannot reach it.
        #expect(chmod(folder.path, 0o700) == 0)
        #expect((try? SandboxPaths.check(readOnly: secret, forbidden: []).get()) == secret)
        guard case .failure(let hidden) = SandboxPaths.check(readOnly: secret, forbidden: [], reachable: true) else {
            Issue.record("a file behind a folder of mode 0700 must be refused to a service of its own uid")
            return
        }
        #expect(hidden.description.contains("since \(folder.path) above it does not let other users through (mode o+x)"), "\(hidden)")
        #expect(mkfifo(folder.path + "/fifo", 0o644) == 0)
        guard case .failure(let fifo) = SandboxPaths.check(readOnly: folder.path + "/fifo", forbidden: []) else {
            Issue.record("a FIFO must be refused")
            return
        }
        #expect(fifo.description.contains("only regular files and folders"), "\(fifo)")
    }

    @Test("a service with a uid of its own (a root host's): bubblewrap must be runnable by it; an executable it cannot reach is copied in from a descriptor; a data folder behind a closed folder is refused")
    func ownUserBinds() throws {
        let identity = ChildProcess.Identity(user: 0x7000_0001, group: 0x7000_0001)
        // This test binary sits where every user can reach it (the build folder): bound by path.
        let reachable = try Self.manifest()
        if SandboxPaths.unreachableFolder(above: Self.ownExecutable) == nil {
            let command = try BubblewrapCommand(bubblewrap: "/usr/bin/bwrap", manifest: reachable, environment: [:], identity: identity)
            #expect(command.copies.isEmpty && command.arguments.joined(separator: " ").contains("--ro-bind \(Self.ownExecutable) \(Self.ownExecutable)"))
        }
        // One behind a folder of mode 0700: copied, read-only and executable, at the same path;
        // opened beneath its folder, and only if its own mode lets every user read and run it.
        let hidden = try TemporaryFolder("remoteview-hidden")
        defer { hidden.remove() }
        let executable = try hidden.write("service", "#!/bin/sh\n", mode: 0o755)
        var manifest = reachable
        manifest.executablePath = executable
        let command = try BubblewrapCommand(bubblewrap: "/usr/bin/bwrap", manifest: manifest, environment: [:], identity: identity)
        #expect(command.copies == [.init(path: executable, folder: hidden.path, mode: S_IROTH | S_IXOTH)])
        #expect(command.arguments.joined(separator: " ").contains("--perms 0555 --ro-bind-data 5 \(executable)"), "\(command.arguments)")
        // Its own mode keeps others out: a copy would show it anyway, so it is refused.
        #expect(chmod(executable, 0o700) == 0)
        let unreadable = #expect(throws: RemoteError.self) {
            try BubblewrapCommand(bubblewrap: "/usr/bin/bwrap", manifest: manifest, environment: [:], identity: identity)
        }
        #expect(unreadable?.reason.contains("cannot be run by the service's uid 1879048193, gid 1879048193 (the host is root): its mode 700 does not give other users o+rx") == true,
                "\(String(describing: unreadable))")
        #expect(chmod(executable, 0o755) == 0)
        // A library beside it that is a link to a secret: refused by the secret's mode; a link to
        // a file anyone may read, elsewhere: the copy's open beneath the folder refuses it.
        #expect(symlink("/etc/shadow", hidden.path + "/libsecret.so") == 0)
        defer { unlink(hidden.path + "/libsecret.so") }
        var options = ChildProcess.Options()
        options.pass(fileAt: hidden.path + "/libsecret.so", beneath: hidden.path, requiring: S_IROTH, as: 5)
        let escaped = #expect(throws: SystemCallError.self) { _ = try ChildProcess.start(executable: "/bin/true", arguments: [], options: options) }
        #expect(escaped?.errno == EXDEV, "\(String(describing: escaped))")
        var outside = ChildProcess.Options()
        #expect(symlink("/etc/hostname", hidden.path + "/libout.so") == 0)
        defer { unlink(hidden.path + "/libout.so") }
        outside.pass(fileAt: hidden.path + "/libout.so", beneath: hidden.path, requiring: S_IROTH, as: 5)
        #expect(throws: SystemCallError.self) { _ = try ChildProcess.start(executable: "/bin/true", arguments: [], options: outside) }
        // As the host's own user, nothing is copied.
        #expect(try BubblewrapCommand(bubblewrap: "/usr/bin/bwrap", manifest: manifest, environment: [:]).copies.isEmpty)
        // A data folder the uid cannot reach; a bubblewrap it cannot run.
        #expect(throws: RemoteError.self) {
            try BubblewrapCommand(bubblewrap: "/usr/bin/bwrap", manifest: reachable, environment: [:], dataFolder: hidden.path + "/data", identity: identity)
        }
        let bubblewrap = try hidden.write("bwrap", "#!/bin/sh\n", mode: 0o755)
        let refused = #expect(throws: RemoteError.self) {
            try BubblewrapCommand(bubblewrap: bubblewrap, manifest: reachable, environment: [:], identity: identity)
        }
        #expect(refused?.reason.contains("cannot be run as the service's uid 1879048193, gid 1879048193") == true, "\(String(describing: refused))")
    }

    @Test("the service user pool: one uid per identifier, the same from a new pool over the same table, two identifiers never share one, a lost table mostly gives the same uids back; a table others may write, a malformed line, a range holding 0 or a full range are refused")
    func serviceUserPool() throws {
        let folder = try TemporaryFolder("remoteview-uids")
        defer { folder.remove() }
        let pool = ServiceUserPool(ids: 0x7000_0000...0x7000_00FF, table: folder.path + "/uids")
        let a = try pool.identity(for: "com.example.a"), b = try pool.identity(for: "com.example.b")
        #expect(a.user != b.user && a.user == a.group && pool.ids.contains(a.user) && pool.ids.contains(b.user))
        #expect(try ServiceUserPool(ids: pool.ids, table: pool.table).identity(for: "com.example.a") == a)
        let table = String(decoding: Syscall.readSmallFile(pool.table) ?? [], as: UTF8.self)
        #expect(table == "\(a.user) com.example.a\n\(b.user) com.example.b\n")
        // The first choice is derived from the name: the same on every machine.
        #expect(a.user == 0x7000_0000 + UInt32(ServiceUserPool.hash("com.example.a") % 256))
        // Refusals: a table that gives one uid to two identifiers; one others may write.
        try folder.write("twice", "1879048193 com.example.a\n1879048193 com.example.b\n")
        let twice = #expect(throws: RemoteError.self) { try ServiceUserPool(ids: pool.ids, table: folder.path + "/twice").identity(for: "com.example.c") }
        #expect(twice?.reason.contains("gives uid 1879048193 to com.example.b, which com.example.a has") == true, "\(String(describing: twice))")
        unlink(folder.path + "/twice")
        // A line cut short (a full disk) is left out, and the next one starts on a line of its own.
        try folder.write("cut", "1879048193 com.example.a\n18790")
        let cut = ServiceUserPool(ids: pool.ids, table: folder.path + "/cut")
        let c = try cut.identity(for: "com.example.c")
        #expect(String(decoding: Syscall.readSmallFile(cut.table) ?? [], as: UTF8.self).hasSuffix("18790\n\(c.user) com.example.c\n"))
        unlink(folder.path + "/cut")
        #expect(chmod(pool.table, 0o666) == 0)
        #expect(throws: RemoteError.self) { try pool.identity(for: "com.example.a") }
        #expect(chmod(pool.table, 0o644) == 0)
        try folder.write("uids", "garbage\n")
        #expect(throws: RemoteError.self) { try pool.identity(for: "com.example.a") }
        #expect(throws: RemoteError.self) { try ServiceUserPool(ids: 0...10, table: folder.path + "/other").identity(for: "com.example.a") }
        let full = ServiceUserPool(ids: 0x7000_0000...0x7000_0000, table: folder.path + "/full")
        _ = try full.identity(for: "com.example.a")
        let exhausted = #expect(throws: RemoteError.self) { try full.identity(for: "com.example.b") }
        #expect(exhausted?.reason.contains("every id of") == true)
        unlink(folder.path + "/full")
        unlink(folder.path + "/other")
    }

    @Test("the data folder entitlement binds the service's folder read-write at /data, the only writable host folder")
    func dataFolder() throws {
        let manifest = try Self.manifest(#", "sandbox": {"dataFolder": true}"#)
        #expect(manifest.sandbox.dataFolder)
        let arguments = try BubblewrapCommand(bubblewrap: "/usr/bin/bwrap", manifest: manifest, environment: ["REMOTEVIEW_DATA_DIR": "/data"],
                                          dataFolder: "/home/u/.local/share/remoteview/services/com.example.s").arguments
        let binds = zip(arguments.indices, arguments).filter { $0.1 == "--bind" }.map(\.0)
        #expect(binds.count == 1, "one read-write bind: \(arguments)")
        if let bind = binds.first {
            #expect(Array(arguments[bind...(bind + 2)]) == ["--bind", "/home/u/.local/share/remoteview/services/com.example.s", "/data"])
        }
        #expect(arguments.joined(separator: " ").contains("--setenv REMOTEVIEW_DATA_DIR /data"))
        #expect(!arguments.contains { $0.hasPrefix("--bind-try") || $0.hasPrefix("--dev-bind") }, "nothing else of the host is writable")
        #expect(arguments.suffix(4) == ["--", Self.ownExecutable, "a", "b"])
    }

    @Test("the default data root: $XDG_DATA_HOME, else ~/.local/share, then remoteview/services; /var/lib/remoteview/services for a root host")
    func dataRoot() {
        #expect(XDGBaseDirectories.dataHome(xdgDataHome: "/x/data/", home: "/home/u") == "/x/data")
        #expect(XDGBaseDirectories.dataHome(xdgDataHome: "relative", home: "/home/u") == "/home/u/.local/share")
        #expect(XDGBaseDirectories.dataHome(xdgDataHome: nil, home: "/") == "/.local/share")
        #expect(XDGBaseDirectories.dataHome(xdgDataHome: nil, home: nil) == nil)
        #expect(Launcher.Configuration().dataRoot == (getuid() == 0 ? "/var/lib/remoteview/services" : XDGBaseDirectories.dataHome() + "/remoteview/services"))
        #expect(Launcher.Configuration().dataRoot.hasPrefix("/"))
    }

    @Test("the runtime folder from this executable's RUNPATH is bound, nothing wider")
    func runtimeBinds() throws {
        let entries = ELFRunPath.entries(of: Self.ownExecutable)
        #expect(!entries.isEmpty, "a dynamically linked Swift test binary has a RUNPATH")
        let runtime = entries.first { access($0 + "/libswiftCore.so", R_OK) == 0 }
        let arguments = try BubblewrapCommand(bubblewrap: "/usr/bin/bwrap", manifest: try Self.manifest(), environment: [:]).arguments
        if let runtime, !runtime.hasPrefix("/usr/") {
            #expect(arguments.joined(separator: " ").contains("--ro-bind \(runtime) \(runtime)"))
        }
        #expect(BubblewrapCommand.normalised("/opt/x/../../home/u") == "/home/u")
        #expect(BubblewrapCommand.normalised("relative") == "/")
    }

    @Test("crafted ELF files never crash the reader", arguments: 0..<6)
    func craftedELF(_ variant: Int) throws {
        var bytes = [UInt8](repeating: 0, count: 512)
        bytes[0..<4] = [0x7f, 0x45, 0x4c, 0x46]
        bytes[4] = 2
        bytes[5] = 1
        func put(_ value: UInt64, at offset: Int, size: Int) {
            for index in 0..<size { bytes[offset + index] = UInt8(truncatingIfNeeded: value >> (8 * UInt64(index))) }
        }
        // Two section headers at 128: #0 dynamic (links to #1), #1 strings.
        put(128, at: 0x28, size: 8)
        put(64, at: 0x3a, size: 2)
        put(2, at: 0x3c, size: 2)
        put(6, at: 128 + 4, size: 4)           // SHT_DYNAMIC
        put(256, at: 128 + 0x18, size: 8)      // its offset
        put(32, at: 128 + 0x20, size: 8)       // its size: two entries
        put(1, at: 128 + 0x28, size: 4)        // sh_link
        put(300, at: 192 + 0x18, size: 8)      // strings offset
        put(100, at: 192 + 0x20, size: 8)      // strings size
        put(29, at: 256, size: 8)              // DT_RUNPATH
        put(0, at: 264, size: 8)
        bytes.replaceSubrange(300..<310, with: Array("/opt/rt\0\0\0".utf8))
        switch variant {
        case 1: put(UInt64.max - 8, at: 192 + 0x18, size: 8); put(UInt64.max, at: 192 + 0x20, size: 8); put(0x100, at: 264, size: 8)
        case 2: put(UInt64.max, at: 0x28, size: 8)
        case 3: put(4096, at: 0x3c, size: 2)
        case 4: put(60_000, at: 128 + 0x28, size: 4)
        case 5: put(UInt64.max, at: 128 + 0x20, size: 8)
        default: break
        }
        let folder = try TemporaryFolder("remoteview-elf")
        defer { folder.remove() }
        let file = try folder.write("elf", "")
        let fd = open(file, O_WRONLY | O_TRUNC | O_CLOEXEC)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        let entries = ELFRunPath.entries(of: file)
        if variant == 0 { #expect(entries == ["/opt/rt"]) }
    }
}
