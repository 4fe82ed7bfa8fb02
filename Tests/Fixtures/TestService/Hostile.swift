// Hostile behaviour for HostileLauncherTests: requests a well-behaved service would never act
// on like this, and a mode ("talk-back") that speaks RemoteCore's Connection directly on fd 3
// so it can do what ServiceMain never would.
import Glibc
import RemoteService
import struct Synchronization.Atomic

enum Hostile {
    /// The continuations of "hang" requests, kept so that they are never dropped (or resumed).
    static let stuck = Mutex<[CheckedContinuation<Void, Never>]>([])

    /// Never replies and ignores cancellation: the handler, and so ServiceMain, never ends.
    static func hang() async -> ServiceMessage {
        await withCheckedContinuation { continuation in
            stuck.withLock { $0.append(continuation) }
            blocked.record()
        }
        return ServiceMessage(type: "unreachable")
    }

    /// Writes to stdout or stderr as fast as the pipe takes it. `spec` is space-separated
    /// `key=value`, applied in this order: `stream` (stdout, stderr), `lines` (numbered lines),
    /// `seconds` (keep writing lines for this long), `empty` (bytes of newlines only), `tail`
    /// (bytes with no newline). Replies with the number of bytes written.
    static func flood(_ spec: String) -> ServiceMessage {
        var options: [String: String] = [:]
        for word in spec.split(separator: " ") {
            let parts = word.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { options[String(parts[0])] = String(parts[1]) }
        }
        let fd: Int32 = options["stream"] == "stderr" ? 2 : 1
        var written = 0
        if let lines = options["lines"].flatMap({ Int($0) }) {
            var block: [UInt8] = []
            for index in 0..<lines {
                block += Array("flood line \(index)\n".utf8)
                if block.count >= 60_000 {
                    written += writeAll(fd, block)
                    block.removeAll(keepingCapacity: true)
                }
            }
            written += writeAll(fd, block)
        }
        if let seconds = options["seconds"].flatMap({ Double($0) }) {
            let block = Array(String(repeating: "flood flood flood flood flood flood\n", count: 1800).utf8)
            let end = ContinuousClock.now.advanced(by: .milliseconds(Int64(seconds * 1000)))
            while ContinuousClock.now < end { written += writeAll(fd, block) }
        }
        if let empty = options["empty"].flatMap({ Int($0) }) {
            let block = [UInt8](repeating: 0x0a, count: 65_536)
            var left = empty
            while left > 0 {
                written += writeAll(fd, Array(block.prefix(left)))
                left -= min(left, block.count)
            }
        }
        if let tail = options["tail"].flatMap({ Int($0) }) {
            written += writeAll(fd, [UInt8](repeating: UInt8(ascii: "x"), count: tail))
        }
        return ServiceMessage(type: "flooded", text: String(written))
    }

    /// Writes all of `bytes` to `fd` (blocking); returns how many were written.
    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Int {
        var offset = 0
        while offset < bytes.count {
            let count = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                break
            }
            offset += count
        }
        return offset
    }

    /// Dies of a real memory fault, with the default disposition (no backtracer in the way).
    /// Forks children that wait, until a fork fails; kills and reaps them all. Returns
    /// "denied: ERRNO after N processes" (N counts this process), or "allowed" past 10,000.
    static func forkBomb() -> String {
        var children: [Int32] = []
        var failure: Int32 = 0
        while children.count < 10_000 {
            let pid = fork()
            if pid == 0 {
                while true { pause() }
            }
            if pid < 0 {
                failure = errno
                break
            }
            children.append(pid)
        }
        for child in children { kill(child, SIGKILL) }
        for child in children {
            var status: Int32 = 0
            waitpid(child, &status, 0)
        }
        return failure == 0 ? "allowed" : "denied: \(errnoName(failure)) after \(children.count + 1) processes"
    }

    /// Allocates and touches memory, 16 MiB at a time, until something stops it.
    static func allocateForever() -> Never {
        var blocks: [UnsafeMutableRawPointer] = []
        while true {
            guard let block = malloc(16 << 20) else { continue }
            memset(block, 1, 16 << 20)
            blocks.append(block)
        }
    }

    /// Burns CPU until something stops it.
    static func spinForever() -> Never {
        var counter: UInt64 = 0
        while true {
            counter &+= 1
            if counter == 0 { print("wrapped") }
        }
    }

    static func segfault() -> Never {
        signal(SIGSEGV, SIG_DFL)
        let address = UnsafeMutablePointer<Int>(bitPattern: 8)!
        address.pointee = 42
        raise(SIGSEGV)
        _exit(99)
    }

    /// Forks `count` children that ignore SIGTERM and wait forever; the first one leaves the
    /// session and double-forks, so the sandbox's pid 1 (or, unsandboxed, the system) adopts it.
    /// Replies once all of them exist, with their pids as this process sees them.
    static func spawnStubborn(_ count: Int) -> ServiceMessage {
        // Ignored before fork, so no child can be signalled before it ignores SIGTERM.
        let previous = signal(SIGTERM, SIG_IGN)
        var report: [Int32] = [-1, -1]
        guard pipe(&report) == 0 else { return ServiceMessage(type: "spawned", text: "") }
        var pids: [Int32] = []
        for index in 0..<max(count, 1) {
            let pid = fork()
            if pid == 0 {
                if index == 0 {
                    setsid()
                    var escapee = fork()
                    if escapee != 0 {
                        _ = write(report[1], &escapee, 4)
                        _exit(0)
                    }
                }
                while true { pause() }
            }
            if pid > 0 { pids.append(pid) }
        }
        var escapee: Int32 = 0
        if let first = pids.first {
            var status: Int32 = 0
            waitpid(first, &status, 0)  // the double fork's middle process
            pids[0] = read(report[0], &escapee, 4) == 4 ? escapee : -1
        }
        close(report[0])
        close(report[1])
        signal(SIGTERM, previous)
        // As this process sees them; the first one is the grandchild that left the session.
        return ServiceMessage(type: "spawned", text: pids.map(String.init).joined(separator: " "))
    }
}

// MARK: talk-back: a service that talks back to the host

/// A service that uses the protocol against the host: it sends the host requests and one-way
/// messages with fds (on fd 3 and on client connections), floods it with concurrent requests,
/// says "idle exit" while a request is outstanding, or says it but keeps running.
enum TalkBack {
    static let configuration = Connection.Configuration(role: .service, identifier: serviceIdentifier)
    /// Every connection of this process: fd 3 first.
    static let connections = Mutex<[Connection]>([])
    /// What the host answered to the requests and messages sent on fd 3.
    static let controlChatter = Mutex<Task<String, Never>?>(nil)
    /// Set when the process must stay after fd 3 closed.
    static let lingering = Atomic<Bool>(false)

    static func run() async -> Never {
        let control: Connection
        do {
            control = try Connection(socket: OwnedFD(adopting: 3), configuration: configuration,
                                     onMessage: { message, _ in accept(message) })
        } catch {
            exit(70)
        }
        connections.withLock { $0.append(control) }
        controlChatter.withLock { $0 = Task { await chatter(on: control) } }
        do { try await control.run() } catch {}
        while lingering.load(ordering: .relaxed) { pause() }
        exit(0)
    }

    /// Sends the host, on fd 3 (where it expects only a handshake and goodbye), requests it must
    /// refuse and one-way messages with fds it must close, including a fake `remoteview.connect`.
    static func chatter(on control: Connection) async -> String {
        for await event in control.events {
            if case .connected = event { break }
        }
        var refused = 0, other: [String] = []
        for index in 0..<20 {
            let type = index % 2 == 0 ? FrameworkMessage.connect : "com.example.question"
            do {
                _ = try await control.request(ServiceMessage(type: type, attachments: pipeAttachments()), timeout: .seconds(5))
                other.append("answered")
            } catch where error.code == .remoteError {
                refused += 1
            } catch {
                other.append("\(error.code)")
            }
            do {
                try await control.send(ServiceMessage(type: type, text: "unasked", attachments: pipeAttachments()))
            } catch {
                other.append("send: \(error.code)")
            }
        }
        return "refused=\(refused) other=\(other.joined(separator: ","))"
    }

    /// Both ends of a fresh pipe, as attachments.
    static func pipeAttachments() -> [Attachment] {
        guard let pair = try? Syscall.pipe() else { return [] }
        return [Attachment(pair.first), Attachment(pair.second)]
    }

    static func accept(_ message: ServiceMessage) {
        guard message.type == FrameworkMessage.connect, message.attachments.count == 1,
              let socket = message.attachments[0].take() else { return }
        guard let client = try? Connection(socket: socket, configuration: configuration, onRequest: { request, context in
            try await serve(request, on: context.connection)
        }) else { return }
        connections.withLock { $0.append(client) }
        Task { try? await client.run() }
    }

    static func serve(_ request: ServiceMessage, on client: Connection) async throws -> ServiceMessage {
        switch request.type {
        case "echo":
            return ServiceMessage(type: "echo", payload: request.payload)
        case "report":
            // How the host answered what this process sent on fd 3.
            let chatter = controlChatter.withLock { $0 }
            return ServiceMessage(type: "report", text: await chatter?.value ?? "no chatter")
        case "call-host":
            // "N [nofds]": N concurrent requests, then N messages (each with both ends of a pipe
            // unless "nofds") to the host, on this client connection; the reply counts how the
            // host answered the requests.
            let words = (request.text ?? "").split(separator: " ")
            let count = words.first.flatMap { Int($0) } ?? 1
            let withFds = !words.contains("nofds")
            @Sendable func attachments() -> [Attachment] { withFds ? pipeAttachments() : [] }
            let outcomes = await withTaskGroup(of: String.self, returning: [String].self) { group in
                for index in 0..<count {
                    group.addTask {
                        do throws(RemoteError) {
                            _ = try await client.request(ServiceMessage(type: "com.example.ask", text: String(index),
                                                                        attachments: attachments()), timeout: .seconds(10))
                            return "answered"
                        } catch where error.code == .remoteError {
                            return "refused: \(error.remote?.message ?? "")"
                        } catch {
                            return "\(error.code)"
                        }
                    }
                }
                return await group.reduce(into: []) { $0.append($1) }
            }
            for index in 0..<count {
                try? await client.send(ServiceMessage(type: "com.example.note", text: String(index), attachments: attachments()))
            }
            let tally = Dictionary(grouping: outcomes, by: { $0 }).mapValues(\.count)
            return ServiceMessage(type: "called", text: tally.sorted { $0.key < $1.key }.map { "\($0.value)x \($0.key)" }.joined(separator: "; "))
        case "idle-now":
            // Claims to be idle while this very request is outstanding: goodbye on every
            // connection (fd 3 first), then exit 0.
            for connection in connections.withLock({ $0 }) { await connection.close(reason: FrameworkMessage.idleExitReason) }
            exit(0)
        case "lie-idle":
            // Says "idle exit" on fd 3 but keeps running, and never answers this request.
            lingering.store(true, ordering: .relaxed)
            if let control = connections.withLock({ $0.first }) { await control.close(reason: FrameworkMessage.idleExitReason) }
            return await Hostile.hang()
        default:
            throw ServiceFailure(domain: "com.example.test", code: 404, message: "unknown request \(request.type)")
        }
    }
}
