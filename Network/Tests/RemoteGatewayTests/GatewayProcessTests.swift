import FoundationEssentials
import Glibc
import RemoteHost
import Testing

/// `remoteview-gateway` itself: its command line, its refusals of bad settings, and SIGTERM.
@Suite("remoteview-gateway, the process", .serialized)
struct GatewayProcessTests {
    /// The executable, built next to the test bundle.
    static let executable: String = {
        let path = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? ""
        return String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)]) + "/remoteview-gateway"
    }()

    /// Output lines of a child, each awaited with a deadline (`poll` on the pipe).
    final class Lines {
        let fd: Int32
        private var buffer: [UInt8] = []
        private(set) var seen: [String] = []

        init(fd: Int32) { self.fd = fd }
        deinit { close(fd) }

        /// The next line containing `text`, within `seconds`; `nil` at end of output or the deadline.
        func line(containing text: String, within seconds: Double) -> String? {
            let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
            while true {
                if let end = buffer.firstIndex(of: 0x0A) {
                    let line = String(decoding: buffer[..<end], as: UTF8.self)
                    buffer.removeSubrange(...end)
                    seen.append(line)
                    if line.contains(text) { return line }
                    continue
                }
                let left = ContinuousClock.now.duration(to: deadline)
                guard left > .zero else { return nil }
                var pollfd = Glibc.pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let milliseconds = Int32(left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000) + 1
                guard poll(&pollfd, 1, milliseconds) > 0 else { continue }
                var chunk = [UInt8](repeating: 0, count: 4096)
                let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                guard count > 0 else { return nil }
                buffer += chunk[..<count]
            }
        }
    }

    /// Starts the gateway with `arguments`, its stdout and stderr into one pipe.
    static func start(_ arguments: [String]) async throws -> (ChildProcess, Lines) {
        try await start(executable: executable, arguments)
    }

    /// Starts `executable` with `arguments`, its stdout and stderr into one pipe.
    static func start(executable: String, _ arguments: [String]) async throws -> (ChildProcess, Lines) {
        let (process, lines, _) = try await start(executable: executable, arguments, input: false)
        return (process, lines)
    }

    /// Starts `executable` with `arguments`, its stdout and stderr into one pipe, and, with
    /// `input`, its stdin from a pipe whose write end is returned (the caller closes it).
    static func start(executable: String, _ arguments: [String], input: Bool) async throws -> (ChildProcess, Lines, Int32?) {
        // Both ends close-on-exec from the start (a socket pair made with SOCK_CLOEXEC; Glibc's
        // pipe2 is not visible to Swift): a process another thread starts meanwhile inherits
        // neither, and cannot hold the output open.
        var ends: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0)
        let writeEnd = OwnedFD(adopting: ends[1])
        var options = ChildProcess.Options()
        options.pass(writeEnd, as: 1)
        options.pass(writeEnd, as: 2)
        options.environment = ["PATH": "/usr/bin:/bin"]
        let lines = Lines(fd: ends[0])
        guard input else {
            let process = try await ChildProcess.launch(executable: executable, arguments: arguments, options: options)
            _ = consume writeEnd
            return (process, lines, nil)
        }
        var inputEnds: [Int32] = [-1, -1]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &inputEnds) == 0)
        let readEnd = OwnedFD(adopting: inputEnds[0])
        options.pass(readEnd, as: 0)
        let process = try await ChildProcess.launch(executable: executable, arguments: arguments, options: options)
        _ = consume writeEnd
        _ = consume readEnd
        return (process, lines, inputEnds[1])
    }

    /// How `process` ended, within `seconds`; killed (SIGKILL) and `nil` when it had not by then.
    static func exit(of process: ChildProcess, within seconds: Int) async -> Termination? {
        await withTaskGroup(of: Termination?.self) { group in
            group.addTask { try? await process.waitForExit() }
            group.addTask {
                try? await Task.sleep(for: .seconds(seconds))
                return nil
            }
            let first = await group.next() ?? nil
            if first == nil { process.send(signal: SIGKILL) }
            group.cancelAll()
            _ = await group.next()
            return first
        }
    }

    @Test("it listens with its TLS material, says where, and SIGTERM ends it gracefully (exit 0)")
    func listensAndStops() async throws {
        let folder = FileManager.default.temporaryDirectory.appending(path: "remoteview-gateway-process-\(getpid())").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let pki = try TestPKI(folder: folder)
        try Data(#"{"version": 1, "clients": [{"identity": "dns:a.example.org", "services": ["*"]}]}"#.utf8).write(to: URL(filePath: folder + "/clients.json"))
        let (process, lines) = try await Self.start(["--listen", "127.0.0.1:0", "--certificate", pki.serverCertificate, "--key", pki.serverKey,
                                                     "--client-ca", pki.caCertificate, "--authorization", folder + "/clients.json",
                                                     "--services", folder, "--no-installed"])
        let listening = lines.line(containing: "remoteview-gateway: listening on", within: 30)
        #expect(listening?.contains("127.0.0.1") == true, "\(lines.seen)")
        process.send(signal: SIGTERM)
        #expect(lines.line(containing: "remoteview-gateway: stopped", within: 30) != nil, "\(lines.seen)")
        #expect(await Self.exit(of: process, within: 60) == .exited(0))
    }

    @Test("bad settings are refused at once, naming what is wrong: an unreadable authorization file, an address that is none")
    func badSettings() async throws {
        let (first, firstLines) = try await Self.start(["--listen", "127.0.0.1:0", "--certificate", "/nonexistent/c.pem", "--key", "/nonexistent/k.pem",
                                                        "--client-ca", "/nonexistent/ca.pem", "--authorization", "/nonexistent/clients.json"])
        #expect(firstLines.line(containing: "cannot read the authorization file /nonexistent/clients.json", within: 30) != nil, "\(firstLines.seen)")
        _ = firstLines.line(containing: "\u{0}", within: 30)
        #expect(await Self.exit(of: first, within: 30).map { $0 != .exited(0) } == true)
        let (second, secondLines) = try await Self.start(["--listen", "localhost:7443", "--certificate", "c", "--key", "k", "--client-ca", "ca", "--authorization", "a"])
        #expect(secondLines.line(containing: "--listen localhost:7443: localhost is not an IPv4 address", within: 30) != nil, "\(secondLines.seen)")
        // Read to its end: ArgumentParser writes the usage after it a byte at a time, unbuffered,
        // and a socket's buffer fills with one-byte writes long before its bytes do.
        _ = secondLines.line(containing: "\u{0}", within: 30)
        #expect(await Self.exit(of: second, within: 30).map { $0 != .exited(0) } == true)
    }
}
