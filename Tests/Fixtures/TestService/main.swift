// A real service executable for the integration tests. argv[1] picks a behaviour; the hostile
// ones speak raw packets on fd 3 to exercise the host's rejection paths.
import CFontQuery
import CHostileCalls
import Glibc
import RawPacket
import RemoteService

/// The identifier this process handshakes with: its manifest's, which the test manifests pass as
/// the second argument (one executable serves them all).
let serviceIdentifier = CommandLine.arguments.count > 2 ? CommandLine.arguments[2] : "com.example.test"

/// The environment, sorted "NAME=value" lines.
func environmentLines() -> [String] {
    var lines: [String] = []
    var entry = environ
    while let pointer = entry.pointee {
        lines.append(String(cString: pointer))
        entry += 1
    }
    return lines.sorted()
}

/// The environment as the process started (top-level code runs in order, and this is first).
let startEnvironment = environmentLines()

/// Cancellations this process observed, reported by the "cancellations" request.
let cancellations = Tally()
/// Handlers of "hang" and "sleep" that have started in this process (whether or not they still
/// run), awaited by the "blocked" request: a test knows a request is outstanding in the
/// service, not merely sent, before it makes the service crash or kills it.
let blocked = Tally()

/// A count that only grows, and requests waiting until it reaches theirs.
final class Tally: Sendable {
    private let state = Mutex<(count: Int, waiters: [(Int, Waiter<Void>)])>((0, []))

    func record() {
        state.withLock { state -> [Waiter<Void>] in
            state.count += 1
            let count = state.count
            defer { state.waiters.removeAll { $0.0 <= count } }
            return state.waiters.filter { $0.0 <= count }.map(\.1)
        }.resumeAll(returning: ())
    }

    var value: Int { state.withLock { $0.count } }

    /// Returns once `count` were recorded (or the waiting request is cancelled). A cancel
    /// message and the next request are read in order, but the cancelled handler notices (and
    /// records) on its own task, which may run after the next request's handler has started;
    /// and requests on different connections are not read in the order they were sent.
    func wait(forAtLeast count: Int) async {
        let waiter = Waiter<Void>()
        let waits = state.withLock { state in
            if state.count >= count { return false }
            state.waiters.append((count, waiter))
            return true
        }
        if waits { try? await waiter.wait() }
    }
}

/// `EPERM`, `ENOSYS`, …: the symbolic name of an errno the security suite expects.
func errnoName(_ code: Int32) -> String {
    let names: [Int32: String] = [EPERM: "EPERM", ENOENT: "ENOENT", EACCES: "EACCES", EINVAL: "EINVAL", ENOSYS: "ENOSYS",
                                  EAFNOSUPPORT: "EAFNOSUPPORT", EROFS: "EROFS", ENOTTY: "ENOTTY", ENETUNREACH: "ENETUNREACH",
                                  EBADF: "EBADF", EAGAIN: "EAGAIN", ENOMEM: "ENOMEM", EFAULT: "EFAULT", EEXIST: "EEXIST",
                                  ECONNREFUSED: "ECONNREFUSED"]
    return names[code] ?? "errno \(code)"
}

/// The names of the memfds this process has open ("/memfd:NAME (deleted)" links).
func openMemoryFiles() -> [String] {
    let descriptors = (try? Syscall.directoryEntries("/proc/self/fd")) ?? []
    return descriptors.compactMap { Syscall.symbolicLinkTarget("/proc/self/fd/\($0)") }
        .filter { $0.hasPrefix("/memfd:") }
        .map { String($0.dropFirst(7).prefix { $0 != " " }) }
}

/// The texts of the one-way messages "note" this process received, in order.
let notes = Mutex<[String]>([])

func serve(_ request: ServiceMessage, _ context: ConnectionContext) async throws -> ServiceMessage {
    switch request.type {
    case "notes":
        return ServiceMessage(type: "notes", text: notes.withLock { $0.joined(separator: " ") })
    case "echo":
        return ServiceMessage(type: "echo", payload: request.payload, attachments: request.attachments)
    case "threads":
        // Where the main actor runs, and whether the event loop runs there too.
        let (main, loop) = await MainActor.run { (Syscall.isMainThread, EventLoop.shared.isLoopThread) }
        return ServiceMessage(type: "threads", text: "main actor on the main thread: \(main); event loop there: \(loop)")
    case "memfd.read":
        guard request.attachments.count == 1, let fd = request.attachments[0].take() else {
            throw ServiceFailure(domain: "test", code: 1, message: "memfd.read needs exactly one fd")
        }
        let file = MemoryFile(adopting: fd)
        let seals = try file.seals
        guard seals.contains(.shrink) else { throw ServiceFailure(domain: "test", code: 2, message: "memfd is not sealed") }
        return ServiceMessage(type: "memfd.contents", payload: try file.contents(limit: 1 << 20))
    case "memfd.make":
        let file = try MemoryFile.sealed(name: "test-reply", contents: request.payload.reversed())
        return ServiceMessage(type: "memfd", attachments: [Attachment(file.takeDescriptor())])
    case "sleep":
        blocked.record()
        do {
            try await Task.sleep(for: .seconds(60))
        } catch {
            cancellations.record()
            throw error
        }
        return ServiceMessage(type: "slept")
    case "cancellations":
        // "N": once at least N were seen (the host's request deadline bounds the wait).
        if let atLeast = request.text.flatMap({ Int($0) }) { await cancellations.wait(forAtLeast: atLeast) }
        return ServiceMessage(type: "cancellations", text: String(cancellations.value))
    case "blocked":
        // "N": once at least N "hang" or "sleep" handlers have started (bounded by the host's
        // request deadline).
        if let atLeast = request.text.flatMap({ Int($0) }) { await blocked.wait(forAtLeast: atLeast) }
        return ServiceMessage(type: "blocked", text: String(blocked.value))
    case "open-memfds":
        return ServiceMessage(type: "open-memfds", text: openMemoryFiles().sorted().joined(separator: "\n"))
    case "fail":
        throw ServiceFailure(domain: serviceIdentifier, code: 42, message: "asked to fail")
    case "crash":
        exit(3)
    case "mount-options":
        // The options of the mount at `text` as this process sees it (/proc/self/mountinfo).
        let mounts = String(decoding: Syscall.readSmallFile("/proc/self/mountinfo", limit: 1 << 20) ?? [], as: UTF8.self)
        let line = mounts.split(separator: "\n").last { $0.split(separator: " ").dropFirst(4).first.map(String.init) == request.text }
        return ServiceMessage(type: "mount-options", text: line?.split(separator: " ").dropFirst(5).first.map(String.init) ?? "not mounted")
    case "print-lines":
        // Each line of `text` on stderr, as written.
        Syscall.writeStandardError((request.text ?? "") + "\n")
        return ServiceMessage(type: "printed")
    case "fatal":
        // Swift's runtime: "Fatal error: …" on stderr, then SIGILL (ud2), as a service's bug does.
        Syscall.writeStandardError("about to fail: \(request.text ?? "")\n")
        fatalError(request.text ?? "the test service fails on purpose")
    case "stat":
        // Whether a path is visible in this process's file system.
        guard let path = request.text else { throw ServiceFailure(domain: "test", code: 1, message: "stat needs a path") }
        var info = stat()
        return ServiceMessage(type: "stat", text: stat(path, &info) == 0 ? "exists" : "absent: \(String(cString: strerror(errno)))")
    case "fonts":
        // The font files fontconfig lists under the folder `text`, one per line, each with
        // whether this process can read it; then "cache PATH", the cache fontconfig loads for
        // that folder, or "cache none" (CFontQuery).
        guard let folder = request.text, let answer = font_query(folder) else {
            throw ServiceFailure(domain: "test", code: 1, message: "fonts needs a folder, and fontconfig")
        }
        defer { free(answer) }
        let lines = String(cString: answer).split(separator: "\n").map { line in
            line.hasPrefix("cache ") ? String(line) : line + (access(String(line), R_OK) == 0 ? " readable" : " unreadable")
        }
        return ServiceMessage(type: "fonts", text: lines.joined(separator: "\n"))
    case "interfaces":
        // The network interfaces this process can see.
        var names: [String] = []
        // glibc asks netlink, which the sandbox's filter refuses without the network entitlement.
        guard let list = if_nameindex() else { return ServiceMessage(type: "interfaces", text: "error: \(String(cString: strerror(errno)))") }
        var entry = list
        while entry.pointee.if_index != 0, let name = entry.pointee.if_name {
            names.append(String(cString: name))
            entry += 1
        }
        if_freenameindex(list)
        return ServiceMessage(type: "interfaces", text: names.sorted().joined(separator: ","))
    case "pid":
        return ServiceMessage(type: "pid", text: String(getpid()))
    case "memory":
        // "HEAP RSS": this process's heap in use (mallinfo2) and resident memory, in bytes.
        let usage = MemoryUsage.current()
        return ServiceMessage(type: "memory", text: "\(usage.heapBytes ?? 0) \(usage.residentBytes)")
    case "print":
        // One line on stdout and one on stderr, for the host's log: the payload's bytes as they
        // are (not necessarily UTF-8).
        _ = (Array("out: ".utf8) + request.payload + [0x0A]).withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
        _ = (Array("err: ".utf8) + request.payload + [0x0A]).withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        return ServiceMessage(type: "printed")
    case "data.write":
        // Writes "NAME=CONTENTS" as the file NAME in ServiceMain.dataDirectory; answers its path.
        guard let folder = ServiceMain.dataDirectory else { throw ServiceFailure(domain: "test", code: 1, message: "no data directory") }
        let parts = (request.text ?? "").split(separator: "=", maxSplits: 1).map(String.init)
        guard parts.count == 2 else { throw ServiceFailure(domain: "test", code: 1, message: "data.write needs NAME=CONTENTS") }
        let (name, contents) = (parts[0], parts[1])
        let fd = open(folder + "/" + name, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ServiceFailure(domain: "test", code: 2, message: "open: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        _ = Array(contents.utf8).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        return ServiceMessage(type: "data.written", text: folder + "/" + name)
    case "write-file":
        // Creates the file at the path given: "allowed" or "denied: ERRNO".
        let fd = open(request.text ?? "", O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return ServiceMessage(type: "write-file", text: "denied: \(errnoName(errno))") }
        close(fd)
        return ServiceMessage(type: "write-file", text: "allowed")
    case "environment":
        return ServiceMessage(type: "environment", text: environmentLines().joined(separator: "\n"))
    case "start-environment":
        // As the process started, before the SDK took fd 3 and cleared LISTEN_*.
        return ServiceMessage(type: "start-environment", text: startEnvironment.joined(separator: "\n"))
    // Hostile requests (Hostile.swift), for HostileLauncherTests.
    case "hang":
        return await Hostile.hang()
    case "flood":
        return Hostile.flood(request.text ?? "")
    case "attack":
        // A system call the sandbox should refuse (CHostileCalls): "allowed" or "denied: ERRNO".
        guard let name = request.text else { throw ServiceFailure(domain: "test", code: 1, message: "attack needs a name") }
        let code = hostile_call(name)
        guard code >= 0 else { throw ServiceFailure(domain: "test", code: 404, message: "unknown attack \(name)") }
        return ServiceMessage(type: "attack", text: code == 0 ? "allowed" : "denied: \(errnoName(code))")
    case "fork-bomb":
        return ServiceMessage(type: "fork-bomb", text: Hostile.forkBomb())
    case "allocate":
        Hostile.allocateForever()
    case "spin":
        Hostile.spinForever()
    case "segv":
        Hostile.segfault()
    case "abort":
        abort()
    case "spawn-stubborn":
        return Hostile.spawnStubborn(Int(request.text ?? "") ?? 3)
    default:
        throw ServiceFailure.unknownRequest(request.type, handler: serviceIdentifier)
    }
}

/// Sends one raw packet on fd 3 (no fds), whatever it holds; a failure is the host's to notice.
func sendRaw(_ bytes: [UInt8]) {
    try? rawSend(3, bytes)
}

/// Waits until the host closes the socket (so the host sees the packet before EOF).
func waitForHangup() {
    var byte: UInt8 = 0
    while recv(3, &byte, 1, 0) > 0 {}
}

let mode = CommandLine.arguments.dropFirst().first ?? "serve"
switch mode {
case "serve":
    await ServiceMain.exit(serving: serviceIdentifier, onRequest: serve, onMessage: { message, _ in
        if message.type == "note" { notes.withLock { $0.append(message.text ?? "") } }
    })
case "view":
    // A view: a blue background and the rects "paint" requests add.
    await ServiceMain.exit(serving: serviceIdentifier, viewController: { PaintController() }, onRequest: serve)
case "tree-sloppy":
    // A view whose tree keeps the protocol's bounds but not two of remoteview-check's rules: a
    // button with no title and no label, and a label laid out past the right edge.
    await ServiceMain.exit(serving: serviceIdentifier, viewController: { SloppyTreeController() }, onRequest: serve)
case "ui", "ui-loop":
    // A toolkit screen: label, button, text field, progress, and a log of what reached it.
    // "ui-loop": the tasks serving connections prefer the event loop's executor, the frame
    // loop with them.
    ServiceMain.connectionTasksPreferEventLoop = mode == "ui-loop"
    await ServiceMain.exit(serving: serviceIdentifier, viewController: { ScreenController() }, onRequest: serve)
case "share", "share-ignore-cancel", "share-crash-on-2":
    // A share activity (Share.swift); "share-ignore-cancel" never answers share_cancel;
    // "share-crash-on-2" dies of a fatal error reading the second item.
    let ignoresCancel = mode == "share-ignore-cancel"
    let crashesOnItem = mode == "share-crash-on-2" ? 2 : nil
    await ServiceMain.exit(serving: serviceIdentifier, shareTitle: "Test share",
                           viewController: { ShareTestController(ignoresCancel: ignoresCancel, crashesOnItem: crashesOnItem) }, onRequest: serve)
case "uppercase":
    // The Swift twin of Examples/uppercase-c (Share.swift).
    await ServiceMain.exit(sharing: serviceIdentifier, title: "Uppercase") { UppercaseController() }
case "ignore-idle":
    // A service that does not exit when idle, so the host has to stop it.
    unsetenv(ServiceMain.idleTimeoutVariable)
    await ServiceMain.exit(serving: serviceIdentifier, onRequest: serve)
case "ignore-goodbye":
    // Stays alive after the host's goodbye and ignores SIGTERM, so the host has to SIGKILL it.
    signal(SIGTERM, SIG_IGN)
    _ = try? await ServiceMain.run(identifier: serviceIdentifier, onRequest: serve)
    while true { pause() }
case "garbage":
    sendRaw([0xff, 0xff, 0xff, 0xff, 0x0f, 0x08])
    waitForHangup()
case "wrong-version":
    let packet = try EnvelopeCodec.encode(Envelope(id: 1, body: .handshake(Handshake(protocolVersion: 99, role: .service, identifier: "com.example.future"))))
    sendRaw(packet)
    waitForHangup()
case "fd-mismatch":
    // Declares one fd and sends none.
    var bytes = try EnvelopeCodec.encode(Envelope(id: 1, body: .handshake(Handshake(role: .service, identifier: serviceIdentifier))))
    bytes += [0x18, 0x01]  // field 3 (fd_count), varint 1
    sendRaw(bytes)
    waitForHangup()
case "exit":
    exit(7)
case "mute":
    // Never handshakes: it just waits (SIGTERM ends it).
    while true { pause() }
case "mute-until-closed":
    // Never handshakes, ignores SIGTERM, and exits 1 by itself once the host closes fd 3, as
    // a service still starting does when its host goes: that end is the host's doing.
    signal(SIGTERM, SIG_IGN)
    waitForHangup()
    exit(1)
case "drop-control":
    // Handshakes on fd 3, reads the host's handshake, closes fd 3, and keeps running.
    sendRaw(try EnvelopeCodec.encode(Envelope(id: 1, body: .handshake(Handshake(role: .service, identifier: serviceIdentifier)))))
    var packet = [UInt8](repeating: 0, count: 65_536)
    _ = recv(3, &packet, packet.count, 0)
    close(3)
    while true { pause() }
case "talk-back":
    await TalkBack.run()
case let mode where mode.hasPrefix("surface-"):
    await HostileSurface.run(String(mode.dropFirst("surface-".count)))
default:
    print("remoteview-test-service: unknown mode \(mode)")
    exit(64)
}

