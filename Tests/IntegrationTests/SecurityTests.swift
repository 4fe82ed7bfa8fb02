import Glibc
import Logging
import RemoteHost
import RemoteTestSupport
import Testing

/// What a hostile service can do from inside its sandbox: each attack is tried by a real,
/// sandboxed service (the fixture's "attack" request, Tests/Fixtures/CHostileCalls), and must be
/// denied with the errno docs/Manifest.md states, while the service and the host stay up. Each
/// row goes to docs/SECURITY.md's table (scripts/security-table).
@Suite("Security: attacks from inside the sandbox", .serialized)
struct SecurityTests {
    /// (the fixture's attack name, what it tries, the outcome the sandbox must give)
    static let attacks: [(String, String, String)] = [
        ("keyring-read", "read the host's session keyring (`keyctl`)", "denied: EPERM"),
        ("add-key", "add a key to the session keyring (`add_key`)", "denied: EPERM"),
        ("request-key", "ask the kernel for a key (`request_key`)", "denied: EPERM"),
        ("unshare-user", "a new user namespace (`unshare(CLONE_NEWUSER)`)", "denied: EPERM"),
        ("unshare-mount", "a new mount namespace (`unshare(CLONE_NEWNS)`)", "denied: EPERM"),
        ("clone-newuser", "a child in a new user namespace (`clone(CLONE_NEWUSER)`)", "denied: EPERM"),
        ("clone-newnet", "a child in a new network namespace (`clone(CLONE_NEWNET)`)", "denied: EPERM"),
        ("clone3-newuser", "`clone3`, whose flags a filter cannot read", "denied: ENOSYS"),
        ("setns", "join a namespace (`setns`)", "denied: EPERM"),
        ("mount", "mount a tmpfs (`mount`)", "denied: EPERM"),
        ("ptrace-pid1", "`ptrace` its sandbox's pid 1", "denied: EPERM"),
        ("process-vm-readv", "read pid 1's memory (`process_vm_readv`)", "denied: EPERM"),
        ("perf-event-open", "`perf_event_open`", "denied: ENOSYS"),
        ("io-uring-setup", "`io_uring_setup`", "denied: ENOSYS"),
        ("bpf", "`bpf`", "denied: EPERM"),
        ("userfaultfd", "`userfaultfd`", "denied: EPERM"),
        ("personality", "`personality(READ_IMPLIES_EXEC)`", "denied: EPERM"),
        ("tiocsti", "type into a terminal (`ioctl(TIOCSTI)`)", "denied: EPERM"),
        ("netlink", "a netlink socket (`NETLINK_ROUTE`)", "denied: EAFNOSUPPORT"),
        ("netlink-audit", "a netlink socket (`NETLINK_AUDIT`)", "denied: EAFNOSUPPORT"),
        ("packet", "an `AF_PACKET` socket", "denied: EAFNOSUPPORT"),
        ("inet-connect", "an inet connection without `sandbox.network`", "denied: EAFNOSUPPORT"),
        ("init-module", "load a kernel module (`init_module`)", "denied: EPERM"),
        ("kexec-load", "load a new kernel (`kexec_load`)", "denied: EPERM"),
        ("write-usr", "create a file in `/usr`", "denied: EROFS"),
        ("write-data-unentitled", "create a file in `/data` without `sandbox.dataFolder`", "denied: ENOENT"),
        // The host kernel's settings. Opened for writing, never written. A uid of the service's
        // own (a root host's) or the host user's is refused by the files' modes (EACCES), and
        // /proc/sys is bound read-only over the sandbox's procfs besides (EROFS).
        ("write-core-pattern", "open `/proc/sys/kernel/core_pattern` for writing", "denied: EACCES or denied: EROFS"),
        ("write-randomize-va-space", "open `/proc/sys/kernel/randomize_va_space` for writing", "denied: EACCES or denied: EROFS"),
        ("write-perf-event-paranoid", "open `/proc/sys/kernel/perf_event_paranoid` for writing", "denied: EACCES or denied: EROFS"),
        ("write-overcommit-memory", "open `/proc/sys/vm/overcommit_memory` for writing", "denied: EACCES or denied: EROFS"),
        ("write-suid-dumpable", "open `/proc/sys/fs/suid_dumpable` for writing", "denied: EACCES or denied: EROFS"),
        ("write-irq-affinity", "open `/proc/irq/default_smp_affinity` for writing", "denied: EACCES or denied: EROFS"),
        ("write-proc-bus", "open a PCI device's configuration in `/proc/bus` for writing", "denied: EACCES or denied: EROFS or denied: ENOENT"),
        ("write-sysrq-trigger", "open `/proc/sysrq-trigger` for writing (absent from this kernel)", "denied: ENOENT or denied: EACCES or denied: EROFS"),
        ("write-cgroup-procs", "open the control groups' `cgroup.procs` for writing (`/sys` is not in the sandbox)", "denied: ENOENT"),
        ("read-sys", "see `/sys` (the host's devices and control groups)", "denied: ENOENT"),
    ]

    /// With `sandbox.network`: inet and route netlink work, the rest stays denied.
    static let networkAttacks: [(String, String, String)] = [
        ("inet-socket", "an inet socket with `sandbox.network`", "allowed"),
        ("netlink", "a netlink socket (`NETLINK_ROUTE`) with `sandbox.network`", "allowed"),
        ("netlink-audit", "a netlink socket (`NETLINK_AUDIT`) with `sandbox.network`", "denied: EAFNOSUPPORT"),
        ("packet", "an `AF_PACKET` socket with `sandbox.network`", "denied: EAFNOSUPPORT"),
        ("keyring-read", "read the host's session keyring with `sandbox.network`", "denied: EPERM"),
    ]

    @Test("every system call the filter denies answers its errno; the service keeps running and answering")
    func deniedCalls() async throws {
        try await Self.run(Self.attacks, network: false)
    }

    @Test("with the network entitlement, inet and route netlink sockets work and the rest stays denied")
    func networkEntitlement() async throws {
        try await Self.run(Self.networkAttacks, network: true)
    }

    /// A sealed, sparse memfd of 64 GiB: nothing is in it, but its size says 64 GiB.
    static func sparseMemoryFile() throws -> MemoryFile {
        let file = try MemoryFile(name: "sparse-64GiB")
        try file.resize(to: 64 << 30)
        try file.addSeals([.shrink, .grow, .write, .seal])
        return file
    }

    @Test("a 64 GiB sparse memfd sent to a request that reads files (the fixture's, the demo's count): refused by size, the service keeps answering")
    func sparseMemoryFile() async throws {
        try await withServices(["test.json": ServiceFolder.manifest()]) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            let file = try Self.sparseMemoryFile()
            let error = await requestError(connection, ServiceMessage(type: "memfd.read", attachments: [Attachment(file.takeDescriptor())]))
            #expect(error?.reason.contains("the memfd holds 68719476736 bytes, more than the 1048576 this reader takes") == true, "\(String(describing: error))")
            let alive = try await connection.request(ServiceMessage(type: "echo", text: "alive")).text == "alive"
            #expect(alive)
            SecurityTable.record("send a sealed, sparse 64 GiB memfd to a request that reads it", "refused by the SDK's bounded read: \(error?.reason ?? "answered")",
                                 contained: alive && error != nil)
        }
        try await DemoActivityTests.withDemo { launcher, _, _ in
            let echo = launcher.connection(to: "com.example.demo-share.echo")
            let error = await requestError(echo, ServiceMessage(type: "count", attachments: [Attachment(try Self.sparseMemoryFile().takeDescriptor())]))
            #expect(error?.reason.contains("more than the 1048576 this reader takes") == true, "\(String(describing: error))")
            let unsealed = try MemoryFile(name: "unsealed")
            try unsealed.write(Array("hello world".utf8))
            let refused = await requestError(echo, ServiceMessage(type: "count", attachments: [Attachment(unsealed.takeDescriptor())]))
            #expect(refused?.reason.contains("sealed against shrinking and growing") == true, "\(String(describing: refused))")
            #expect(try await echo.request(ServiceMessage(type: "echo", text: "alive")).text != nil)
        }
    }

    @Test("limits are enforced: a fork bomb stops at limits.processes, an allocation past limits.memoryMiB ends the service with reason limit: memory, a CPU spin past limits.cpuSeconds with limit (SIGXCPU)")
    func limits() async throws {
        let limits = #""limits": {"memoryMiB": 64, "processes": 8, "cpuSeconds": 1}"#
        try await withServices(["test.json": ServiceFolder.manifest(extra: limits)], within: .seconds(30)) { launcher, _ in
            let status = try #require(await launcher.status().first)
            #expect(status.limits == ServiceManifest.Limits(memoryMiB: 64, openFiles: 256, processes: 8, cpuSeconds: 1))
            let enforcement = status.limitEnforcement
            // scripts/try-cgroup-v2 says which mechanism its run must find.
            if let expected = getenv("REMOTEVIEW_EXPECT_LIMITS").map({ String(cString: $0) }) {
                #expect(enforcement.description == expected)
            }
            let events = launcher.events()
            let connection = launcher.connection(to: "com.example.test")
            // Where control groups are out of the host's reach (an ordinary user's host on a
            // machine that delegates none), the two limits are not enforced: the bomb and the
            // allocation would take the machine's, so they are not tried, and the rows say so.
            let unenforced = "not enforced, so not tried: the host (\(SecurityTable.hostUser)) cannot make control groups here"
            // Fork bomb: the kernel counts tasks (threads too), so the service's own threads
            // take some of the 8; then fork fails with EAGAIN.
            if enforcement.enforcesProcesses {
                let bomb = try await connection.request(ServiceMessage(type: "fork-bomb")).text ?? ""
                let processes = Int(bomb.split(separator: " ").dropLast().last ?? "") ?? 0
                #expect(bomb.hasPrefix("denied: EAGAIN after ") && (2...8).contains(processes), "\(bomb)")
                let alive = try await connection.request(ServiceMessage(type: "echo", text: "alive")).text == "alive"
                SecurityTable.record("a fork bomb past `limits.processes` (8)", bomb.replacing("denied: ", with: "fork denied, errno ") + "; the service keeps answering",
                                     contained: alive && bomb.hasPrefix("denied"))
                let process = try #require(await launcher.status().first?.processes.first)
                #expect((process.processCount ?? 0) >= 3, "bubblewrap's two and the service: \(process)")
            } else {
                SecurityTable.record("a fork bomb past `limits.processes` (8)", unenforced, contained: true)
            }
            if enforcement.enforcesMemory {
                _ = try await connection.request(ServiceMessage(type: "echo"))
                let process = try #require(await launcher.status().first?.processes.first)
                #expect((process.memoryInUse ?? 0) > 0, "\(process)")
                // Memory: ended by the kernel's out-of-memory killer, reported as the limit.
                let pid = try #require(connection.processIdentifier)
                _ = await requestError(connection, ServiceMessage(type: "allocate"))
                let memory = try await termination(of: pid, in: events)
                #expect(memory.kind == .limit && "\(memory)".hasPrefix("limit: memory: it reached limits.memoryMiB"), "\(memory)")
                SecurityTable.record("allocate past `limits.memoryMiB` (64 MiB)", "service ended, reason \(memory)", contained: memory.kind == .limit)
            } else {
                SecurityTable.record("allocate past `limits.memoryMiB` (64 MiB)", unenforced, contained: true)
            }
            // CPU: SIGXCPU at limits.cpuSeconds.
            _ = try await connection.request(ServiceMessage(type: "echo"))
            let spinner = try #require(connection.processIdentifier)
            _ = await requestError(connection, ServiceMessage(type: "spin"))
            let cpu = try await termination(of: spinner, in: events)
            #expect(cpu.kind == .limit && cpu.signal == SIGXCPU, "\(cpu)")
            SecurityTable.record("a CPU spin past `limits.cpuSeconds` (1 s)", "service ended, reason \(cpu)", contained: cpu.kind == .limit)
            #expect(try await connection.request(ServiceMessage(type: "echo", text: "back")).text == "back", "relaunched after each")
        }
    }

    @Test("writes outside its data folder: its executable's folder and the host's folders are read-only or absent; its data folder is writable")
    func writesOutsideDataFolder() async throws {
        let data = try TemporaryFolder("remoteview-security-data", searchable: true)
        defer { LauncherTests.removeTree(data.path) }
        var configuration = fastLauncherConfiguration()
        configuration.dataRoot = data.path
        try await withServices(["test.json": ServiceFolder.manifest(extra: #""sandbox": {"dataFolder": true}"#)], configuration: configuration) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            let folder = String(testServiceExecutable[..<testServiceExecutable.lastIndex(of: "/")!])
            let attempts = [(folder + "/written-by-service", "create a file beside its own executable"),
                            (data.path + "/escaped", "create a file at the host path of the data root, outside its own data folder"),
                            ("/data/../escaped", "climb out of `/data` with `..`")]
            for (path, words) in attempts {
                let outcome = try await connection.request(ServiceMessage(type: "write-file", text: path)).text ?? ""
                let written = Syscall.isRegularFile(path) || Syscall.isRegularFile(data.path + "/escaped")
                #expect(!written, "\(words): \(outcome)")
                let shown = outcome == "allowed" ? "written inside the sandbox's own memory (its root is a tmpfs); no host file" : outcome.replacing("denied: ", with: "denied, errno ")
                SecurityTable.record(words, shown, contained: !written)
            }
        }
    }

    @Test("the kernel never sees a sandboxed service as uid 0: a root host runs each identifier as a uid and gid of its own, the same at every launch, different between identifiers; an ordinary user's host runs them as itself; the host stays dumpable")
    func serviceUserIDs() async throws {
        let manifests = ["a.json": ServiceFolder.manifest(identifier: "com.example.uid-a"),
                         "b.json": ServiceFolder.manifest(identifier: "com.example.uid-b")]
        // Two launchers, as two runs of a host: the first starts both services, the second
        // the first one again.
        var seen: [String: [UInt32]] = [:]
        for identifiers in [["com.example.uid-a", "com.example.uid-b"], ["com.example.uid-a"]] {
            let uids = try await withServices(manifests) { launcher, _ in
                var uids: [String: UInt32] = [:]
                for identifier in identifiers {
                    // Kept while its process is looked at: a connection let go closes.
                    let connection = launcher.connection(to: identifier)
                    defer { withExtendedLifetime(connection) {} }
                    _ = try await connection.request(ServiceMessage(type: "echo"))
                    let process = try #require(await launcher.status().first { $0.identifier == identifier }?.processes.first)
                    let service = try #require(process.servicePid)
                    // How the kernel sees the service's process: real, effective, saved and file
                    // system uids and gids, and its supplementary groups.
                    let status = String(decoding: Syscall.readSmallFile("/proc/\(service)/status", limit: 1 << 16) ?? [], as: UTF8.self)
                    func field(_ name: String) -> [UInt32] {
                        status.split(separator: "\n").first { $0.hasPrefix(name + ":") }?.dropFirst(name.count + 1)
                            .split(whereSeparator: \.isWhitespace).compactMap { UInt32($0) } ?? []
                    }
                    let ids = field("Uid"), gids = field("Gid"), groups = field("Groups")
                    #expect(ids.count == 4 && Set(ids).count == 1 && gids.count == 4 && Set(gids).count == 1, "\(status)")
                    if getuid() == 0 {
                        let uid = try #require(process.userID)
                        #expect(ids.first == uid && gids.first == uid && groups.isEmpty && uid != 0, "\(identifier): \(ids) \(gids) \(groups)")
                        #expect(ServiceUserPool.defaultIDs.contains(uid))
                    } else {
                        #expect(process.userID == nil && ids.first == getuid(), "\(identifier): \(ids)")
                    }
                    uids[identifier] = ids.first ?? 0
                }
                return uids
            }
            for (identifier, uid) in uids { seen[identifier, default: []].append(uid) }
        }
        let a = seen["com.example.uid-a"] ?? [], b = seen["com.example.uid-b"] ?? []
        #expect(a.count == 2 && a.first == a.last && b.count == 1, "the same uid at every launch: \(a)")
        if getuid() == 0 { #expect(a.first != b.first, "two identifiers, two uids: \(a) \(b)") }
        SecurityTable.record("the service's uid, as the kernel sees it", getuid() == 0
            ? "\(a.first ?? 0) and \(b.first ?? 0) for two identifiers: a uid and gid of their own each, the same at every launch, no supplementary groups"
            : "the host's, \(getuid())", contained: !(a + b).contains(0))
        // The drop happened in a vfork child sharing this process's memory, which the kernel
        // made non-dumpable: the launcher puts it back.
        #expect(Syscall.isDumpable)
    }

    @Test("/proc/sys is mounted read-only in the sandbox, whatever the uid: the bind itself, not only the files' modes")
    func procSysReadOnly() async throws {
        try await withServices(["test.json": ServiceFolder.manifest()]) { launcher, _ in
            let options = try await launcher.connection(to: "com.example.test").request(ServiceMessage(type: "mount-options", text: "/proc/sys")).text ?? ""
            let readOnly = options.split(separator: ",").contains("ro")
            #expect(readOnly, "\(options)")
            SecurityTable.record("the mount of `/proc/sys` in the sandbox", "options \(options)", contained: readOnly)
        }
    }

    @Test("abstract Unix sockets: a service entitled to the network shares the host's network namespace, and Landlock's scope keeps it from the host's @sockets; without the entitlement its own namespace has none")
    func abstractSockets() async throws {
        let name = "remoteview-probe-\(getpid())"
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        try #require(listener >= 0)
        defer { close(listener) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { path in
            for (index, byte) in name.utf8.enumerated() { path[index + 1] = byte }
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + 1 + name.utf8.count)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        try #require(bound == 0 && listen(listener, 4) == 0, "the host's listener at @\(name)")
        for network in [true, false] {
            let extra = network ? #""sandbox": {"network": true}"# : nil
            try await withServices(["test.json": ServiceFolder.manifest(extra: extra)]) { launcher, _ in
                let connection = launcher.connection(to: "com.example.test")
                let outcome = try await connection.request(ServiceMessage(type: "attack", text: "connect-abstract:" + name)).text ?? ""
                let status = try #require(await launcher.status().first)
                let expected: String
                if !network {
                    expected = "denied: ECONNREFUSED"  // its own network namespace: no such socket there
                } else if Landlock.scopesAbstractSockets {
                    expected = "denied: EPERM"
                } else {
                    expected = "allowed"  // said by the launch log and the status
                }
                #expect(outcome == expected, "network \(network), Landlock ABI \(Landlock.abi)")
                #expect(status.reachesHostAbstractSockets == (network && !Landlock.scopesAbstractSockets))
                SecurityTable.record("connect to the host's abstract socket `@\(name.prefix(16))…`\(network ? " with `sandbox.network`" : "")",
                                     outcome.replacing("denied: ", with: "denied, errno ") + (network ? " (Landlock ABI \(Landlock.abi), abstract-socket scope)" : " (its own network namespace)"),
                                     contained: outcome != "allowed")
            }
        }
    }

    @Test("the accessibility bus: a socket where at-spi2-core puts it (XDG_RUNTIME_DIR/at-spi/) is out of every service's reach, with the network or without; a service's tree reaches the desktop only through its host")
    func accessibilityBus() async throws {
        // The host's runtime folder as at-spi-bus-launcher uses it (a temporary one, mode 0700,
        // when the host has none), with a listening socket where the bus's would be.
        let runtime = getenv("XDG_RUNTIME_DIR").map { String(cString: $0) }
        let scratch = runtime == nil ? try TemporaryFolder("remoteview-runtime") : nil
        defer { scratch?.remove() }
        let folder = (runtime ?? scratch!.path) + "/at-spi"
        _ = mkdir(folder, 0o700)
        let path = folder + "/bus_remoteview-probe-\(getpid())"
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        try #require(listener >= 0)
        defer { close(listener); unlink(path) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { bytes in
            for (index, byte) in path.utf8.enumerated() { bytes[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        try #require(bound == 0 && listen(listener, 4) == 0, "the host's listener at \(path)")
        for network in [true, false] {
            let extra = network ? #""sandbox": {"network": true}"# : nil
            try await withServices(["test.json": ServiceFolder.manifest(extra: extra)]) { launcher, _ in
                let outcome = try await launcher.connection(to: "com.example.test").request(ServiceMessage(type: "attack", text: "connect-path:" + path)).text ?? ""
                #expect(outcome == "denied: ENOENT", "network \(network): \(outcome)")
                SecurityTable.record("connect to the accessibility bus's socket (`$XDG_RUNTIME_DIR/at-spi/bus…`)\(network ? " with `sandbox.network`" : "")",
                                     outcome.replacing("denied: ", with: "denied, errno ") + " (the host's runtime folder is not in the sandbox)",
                                     contained: outcome != "allowed")
            }
        }
    }

    /// A user font folder for the font tests, in a fresh folder other users may pass (a root
    /// host's copy of the fonts is made beside it): a system font copied twice under names no
    /// system folder has, one in a subfolder, one of mode 0600 (a root host's services, which
    /// run as uids of their own, can read it only through the launcher's copy), in a folder
    /// whose name XML must escape.
    struct UserFontFolder {
        let root: TemporaryFolder
        /// The font folder.
        var fonts: String { root.path + "/fonts & \"quotes\" <x>'s" }
        /// Where the launcher keeps what it makes of them.
        var cache: String { root.path + "/cache" }
        var policy: UserFontsPolicy { .folder(fonts, cacheFolder: cache) }
        /// The font files, relative to the folder.
        static let files = ["remoteview-test-font.ttf", "more/remoteview-test-font-2.ttf"]
        /// The system font copied.
        static let source = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"

        init() throws {
            root = try TemporaryFolder("remoteview-fonts", searchable: true)
            #expect(mkdir(fonts, 0o755) == 0 && mkdir(fonts + "/more", 0o755) == 0)
            for file in Self.files {
                let copied = try runCommands([["cp", Self.source, fonts + "/" + file]])[0]
                try #require(copied.status == 0, "cp \(Self.source): \(copied.output)")
            }
            #expect(chmod(fonts + "/" + Self.files[0], 0o600) == 0)
        }

        func remove() { LauncherTests.removeTree(root.path) }
    }

    /// Where a sandbox sees the user's fonts, and their fontconfig configuration and cache.
    static let fontsMountPoint = "/run/remoteview/fonts", fontconfigMountPoint = "/run/remoteview/fontconfig"

    @Test("the user's fonts are bound read-only at /run/remoteview/fonts (a root host's through its copy, which its services' uids can read), with FONTCONFIG_FILE naming a configuration that adds them to the system's; the host builds their fontconfig cache, which a service's fontconfig then loads instead of scanning them")
    func userFonts() async throws {
        let folder = try UserFontFolder()
        defer { folder.remove() }
        let records = LogRecords()
        var configuration = fastLauncherConfiguration(Logger(label: "tests") { _ in records.handler() })
        configuration.userFonts = folder.policy
        let manifests = ["a.json": ServiceFolder.manifest(identifier: "com.example.fonts-a"),
                         "b.json": ServiceFolder.manifest(identifier: "com.example.fonts-b")]
        try await withServices(manifests, within: .seconds(30), configuration: configuration) { launcher, _ in
            let expected = Set(UserFontFolder.files.map { Self.fontsMountPoint + "/" + $0 + " readable" })
            // The first service starts while the host builds the cache: its fontconfig finds
            // the fonts either way (scanning them itself when the cache is not there yet).
            let first = launcher.connection(to: "com.example.fonts-a")
            let listed = try await first.request(ServiceMessage(type: "fonts", text: Self.fontsMountPoint)).text ?? ""
            #expect(Set(listed.split(separator: "\n").dropLast().map(String.init)) == expected, "\(listed)")
            let ready = try await records.first("the cache of the user's fonts") { $0.message.hasPrefix("the fontconfig cache of the user's fonts at") }
            #expect(ready.message.contains(getuid() == 0 ? folder.cache + "/fonts" : folder.fonts), "\(ready.message)")
            // A service started after it loads the host's cache, and writes none of its own
            // (its HOME is /tmp: fontconfig's own cache would be in /tmp/.cache/fontconfig).
            let second = launcher.connection(to: "com.example.fonts-b")
            let answer = try await second.request(ServiceMessage(type: "fonts", text: Self.fontsMountPoint)).text ?? ""
            let lines = answer.split(separator: "\n").map(String.init)
            #expect(Set(lines.dropLast()) == expected, "\(answer)")
            #expect(lines.last?.hasPrefix("cache \(Self.fontconfigMountPoint)/") == true && lines.last?.contains(".cache-") == true, "\(answer)")
            let ownCache = try await second.request(ServiceMessage(type: "stat", text: "/tmp/.cache/fontconfig")).text ?? ""
            #expect(ownCache.hasPrefix("absent"), "\(ownCache)")
            let environment = try await second.request(ServiceMessage(type: "environment")).text ?? ""
            #expect(environment.split(separator: "\n").contains("FONTCONFIG_FILE=\(Self.fontconfigMountPoint)/fonts.conf"), "\(environment)")
            // Read-only, both.
            for (mountPoint, words) in [(Self.fontsMountPoint, "the user's fonts"), (Self.fontconfigMountPoint, "the host's fontconfig cache of the user's fonts")] {
                let options = try await second.request(ServiceMessage(type: "mount-options", text: mountPoint)).text ?? ""
                #expect(options.split(separator: ",").contains("ro"), "\(mountPoint): \(options)")
                let path = mountPoint + "/written-by-service"
                let outcome = try await second.request(ServiceMessage(type: "write-file", text: path)).text ?? ""
                let written = Syscall.isRegularFile((mountPoint == Self.fontsMountPoint ? folder.fonts : folder.cache + "/fontconfig") + "/written-by-service")
                #expect(outcome == "denied: EROFS" && !written, "\(path): \(outcome)")
                SecurityTable.record("create a file in \(words) (`\(mountPoint)`)", outcome.replacing("denied: ", with: "denied, errno "),
                                     contained: outcome.hasPrefix("denied") && !written)
            }
            // A root host's copy: root's, folders 0755 and files 0644, the file of mode 0600 too.
            if getuid() == 0 {
                for path in ["", "/more"] + UserFontFolder.files.map({ "/" + $0 }) {
                    let status = try Syscall.status(ofPath: folder.cache + "/fonts" + path)
                    #expect(status.st_uid == 0 && status.st_mode & 0o7777 == (path.hasSuffix(".ttf") ? 0o644 : 0o755), "\(path): \(String(status.st_mode, radix: 8))")
                }
            }
        }
    }

    @Test("the user's fonts are left out, and the service launches all the same: without the folder, nothing is bound and FONTCONFIG_FILE is not set; a folder other users may write to is refused, and the log says why")
    func userFontsLeftOut() async throws {
        let folder = try UserFontFolder()
        defer { folder.remove() }
        for writable in [false, true] {
            if writable { #expect(chmod(folder.fonts, 0o777) == 0) }
            let records = LogRecords()
            var configuration = fastLauncherConfiguration(Logger(label: "tests") { _ in records.handler() })
            configuration.userFonts = writable ? folder.policy : .folder(folder.root.path + "/missing", cacheFolder: folder.cache)
            try await withServices(["test.json": ServiceFolder.manifest()], configuration: configuration) { launcher, _ in
                let connection = launcher.connection(to: "com.example.test")
                let seen = try await connection.request(ServiceMessage(type: "stat", text: "/run/remoteview")).text ?? ""
                #expect(seen.hasPrefix("absent"), "\(seen)")
                let environment = try await connection.request(ServiceMessage(type: "environment")).text ?? ""
                #expect(!environment.contains("FONTCONFIG_FILE"), "\(environment)")
                let told = records.lines.filter { $0.message.contains("are left out of the sandboxes") }.map(\.message)
                if writable {
                    #expect(told.count == 1 && told.first?.contains("other users may write to") == true, "\(told)")
                    SecurityTable.record("plant a font for the services in a user font folder other users may write to (mode 0777)",
                                         told.count == 1 ? "left out of the sandbox; the launch log says other users may write to it" : "not logged",
                                         contained: seen.hasPrefix("absent") && told.count == 1)
                } else {
                    #expect(told.isEmpty, "a missing folder is not a problem: \(told)")
                }
            }
        }
    }

    /// Where the nested run of ``ordinaryUser()`` is told it is one.
    static let ordinaryRunVariable = "REMOTEVIEW_ORDINARY_USER_RUN"

    @Test("as an ordinary user's host: this suite runs again, as the user remoteview-test (made if missing), from a copy of the test binaries that user can read, and passes",
          .enabled(if: getuid() == 0 && getenv(SecurityTests.ordinaryRunVariable) == nil, "needs root, to run the suite as another user"))
    func ordinaryUser() async throws {
        let user = "remoteview-test"
        if try runCommands([["id", "-u", user]])[0].status != 0 {
            let made = try runCommands([["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", user]])[0]
            try #require(made.status == 0, "useradd: \(made.output)")
        }
        let uid = try #require(UInt32(try runCommands([["id", "-u", user]])[0].output.split(separator: "\n").first ?? ""))
        let folder = try TemporaryFolder("remoteview-ordinary", searchable: true)
        defer { LauncherTests.removeTree(folder.path + "/home"); LauncherTests.removeTree(folder.path) }
        chmod(folder.path, 0o755)
        let binary = try #require(Syscall.symbolicLinkTarget("/proc/self/exe"))
        for file in [binary, testServiceExecutable] {
            let copied = try runCommands([["cp", file, folder.path + "/"]])[0]
            try #require(copied.status == 0, "cp \(file): \(copied.output)")
        }
        let home = folder.path + "/home", rows = folder.path + "/rows"
        #expect(mkdir(home, 0o700) == 0 && chown(home, uid, uid) == 0)
        try folder.write("rows", "", mode: 0o644)
        #expect(chown(rows, uid, uid) == 0)
        // The suite but this test and the one that needs the demo's build (the memfd row holds
        // for either user: the SDK's bounded read is the service's own).
        let run = try runCommands([["timeout", "600", "setpriv", "--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", "--inh-caps=-all",
                                    "env", "-i", "HOME=\(home)", "PATH=/usr/bin:/bin", "XDG_DATA_HOME=\(home)/.local/share",
                                    "REMOTEVIEW_SECURITY_TABLE=\(rows)", "\(Self.ordinaryRunVariable)=1",
                                    folder.path + "/" + (binary.split(separator: "/").last.map(String.init) ?? ""),
                                    "--testing-library", "swift-testing", "--filter", "SecurityTests", "--skip", "sparseMemoryFile"]])[0]
        let summary = run.output.split(separator: "\n").last { $0.contains("Test run with") } ?? "no summary"
        #expect(run.status == 0 && summary.contains("passed"), "the suite as uid \(uid): \(summary)\n\(run.output.split(separator: "\n").filter { $0.contains("✘") }.prefix(20).joined(separator: "\n"))")
        // Its rows join this run's table.
        if let table = getenv("REMOTEVIEW_SECURITY_TABLE").map({ String(cString: $0) }), let recorded = Syscall.readSmallFile(rows, limit: 1 << 20) {
            let fd = open(table, O_WRONLY | O_APPEND | O_CLOEXEC)
            if fd >= 0 {
                _ = recorded.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                close(fd)
            }
        }
    }

    static func run(_ attacks: [(String, String, String)], network: Bool) async throws {
        let extra = network ? #""sandbox": {"network": true}"# : nil
        try await withServices(["test.json": ServiceFolder.manifest(extra: extra)]) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            _ = try await connection.request(ServiceMessage(type: "echo"))
            let pid = connection.processIdentifier
            for (name, words, expected) in attacks {
                let outcome = try await connection.request(ServiceMessage(type: "attack", text: name)).text ?? ""
                let accepted = expected.split(separator: " or ").contains { $0 == outcome }
                #expect(accepted, "\(name): \(words): \(outcome)")
                // Still the same process, still answering.
                let alive = try await connection.request(ServiceMessage(type: "echo", text: "alive")).text == "alive"
                    && connection.processIdentifier == pid
                #expect(alive, "\(name)")
                SecurityTable.record(words, outcome == "allowed" ? "allowed (entitled)" : outcome.replacing("denied: ", with: "denied, errno "),
                                     contained: alive && accepted)
            }
        }
    }
}
