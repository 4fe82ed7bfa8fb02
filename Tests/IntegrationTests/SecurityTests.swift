import Glibc
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
            // Fork bomb: the kernel counts tasks (threads too), so the service's own threads
            // take some of the 8; then fork fails with EAGAIN.
            let bomb = try await connection.request(ServiceMessage(type: "fork-bomb")).text ?? ""
            if enforcement.enforcesProcesses {
                let processes = Int(bomb.split(separator: " ").dropLast().last ?? "") ?? 0
                #expect(bomb.hasPrefix("denied: EAGAIN after ") && (2...8).contains(processes), "\(bomb)")
            }
            let alive = try await connection.request(ServiceMessage(type: "echo", text: "alive")).text == "alive"
            SecurityTable.record("a fork bomb past `limits.processes` (8)", bomb.replacing("denied: ", with: "fork denied, errno ") + "; the service keeps answering",
                                 contained: alive && bomb.hasPrefix("denied"))
            let process = try #require(await launcher.status().first?.processes.first)
            if enforcement.enforcesProcesses { #expect((process.processCount ?? 0) >= 3, "bubblewrap's two and the service: \(process)") }
            if enforcement.enforcesMemory { #expect((process.memoryInUse ?? 0) > 0, "\(process)") }
            // Memory: ended by the kernel's out-of-memory killer, reported as the limit.
            let pid = try #require(connection.processIdentifier)
            _ = await requestError(connection, ServiceMessage(type: "allocate"))
            let memory = try await termination(of: pid, in: events)
            if enforcement.enforcesMemory { #expect(memory.kind == .limit && "\(memory)".hasPrefix("limit: memory: it reached limits.memoryMiB"), "\(memory)") }
            SecurityTable.record("allocate past `limits.memoryMiB` (64 MiB)", "service ended, reason \(memory)", contained: memory.kind == .limit)
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
        let data = try TemporaryFolder("remoteview-security-data")
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

    static func run(_ attacks: [(String, String, String)], network: Bool) async throws {
        let extra = network ? #""sandbox": {"network": true}"# : nil
        try await withServices(["test.json": ServiceFolder.manifest(extra: extra)]) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            _ = try await connection.request(ServiceMessage(type: "echo"))
            let pid = connection.processIdentifier
            for (name, words, expected) in attacks {
                let outcome = try await connection.request(ServiceMessage(type: "attack", text: name)).text ?? ""
                #expect(outcome == expected, "\(name): \(words)")
                // Still the same process, still answering.
                let alive = try await connection.request(ServiceMessage(type: "echo", text: "alive")).text == "alive"
                    && connection.processIdentifier == pid
                #expect(alive, "\(name)")
                SecurityTable.record(words, outcome == "allowed" ? "allowed (entitled)" : outcome.replacing("denied: ", with: "denied, errno "),
                                     contained: alive && (outcome == expected))
            }
        }
    }
}
