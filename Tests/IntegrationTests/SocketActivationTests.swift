import Glibc
import RemoteHost
import RemoteTestSupport
import Testing

/// The service SDK under systemd's own socket activation (`systemd-socket-activate`, Debian's
/// `systemd` package): per connection (`--accept`, like `Accept=yes`) and with the listening
/// socket itself (`Accept=no`).
@Suite("systemd socket activation", .serialized)
struct SocketActivationTests {
    static let tool = "/usr/bin/systemd-socket-activate"

    /// Starts `systemd-socket-activate` with `arguments` and waits until it listens at `path`.
    /// Its stderr must be read until it ends (``drain(_:)``), or it dies of SIGPIPE.
    static func activate(_ path: String, _ arguments: [String]) async throws -> (ChildProcess, ReadableDescriptor) {
        let errors = try Syscall.pipe()
        var options = ChildProcess.Options()
        options.pass(errors.second, as: 2)
        let process = try ChildProcess.start(executable: tool, arguments: ["--listen=\(path)", "--seqpacket"] + arguments, options: options)
        let reader = try ReadableDescriptor(errors.first)
        var text = ""
        while !text.contains("Listening on") {
            guard let chunk = try reader.read(upTo: 512) else {
                _ = await reader.waitReadable()
                continue
            }
            if chunk.isEmpty { throw SystemCallError(call: "systemd-socket-activate exited: \(text)", errno: EPIPE) }
            text += String(decoding: chunk, as: UTF8.self)
        }
        return (process, reader)
    }

    /// Reads `reader` to its end (everyone holding the pipe's other end exited).
    static func drain(_ reader: ReadableDescriptor) async {
        while true {
            guard let chunk = try? reader.read(upTo: 4096) else {
                if await reader.waitReadable() { continue } else { return }
            }
            if chunk.isEmpty { return }
        }
    }

    /// One host connection to the socket at `path`: a request, then an orderly close.
    static func echo(at path: String, _ text: String) async throws -> String? {
        let connection = try Connection(connectingTo: path, configuration: .init(role: .host, identifier: "com.example.tests"))
        return try await connection.withRunning { connection in
            #expect(connection.peer?.identifier == "com.example.test")
            return try await connection.request(ServiceMessage(type: "echo", text: text)).text
        }
    }

    @Test("systemd-socket-activate --accept --seqpacket starts the service per connection; a host talks to it")
    func acceptPerConnection() async throws {
        #expect(access(Self.tool, X_OK) == 0, "install Debian's systemd package (scripts/bootstrap does)")
        let folder = try TemporaryFolder("remoteview-activation")
        defer { folder.remove() }
        let path = folder.path + "/echo.sock"
        try await withoutLeaks(within: .seconds(20)) {
            let (activator, log) = try await Self.activate(path, ["--accept", testServiceExecutable, "serve"])
            async let drained: Void = Self.drain(log)
            #expect(try await Self.echo(at: path, "first") == "first")
            #expect(try await Self.echo(at: path, "second") == "second")
            activator.send(signal: SIGTERM)
            _ = try await activator.waitForExit()
            await drained
        }
    }

    @Test("with the listening socket (Accept=no) the service serves connection after connection, then exits idle")
    func listeningSocket() async throws {
        let folder = try TemporaryFolder("remoteview-activation")
        defer { folder.remove() }
        let path = folder.path + "/echo.sock"
        try await withoutLeaks(within: .seconds(20)) {
            let (service, log) = try await Self.activate(path, ["--setenv=REMOTEVIEW_IDLE_TIMEOUT=0.3", testServiceExecutable, "serve"])
            async let drained: Void = Self.drain(log)
            #expect(try await Self.echo(at: path, "one") == "one")
            #expect(try await Self.echo(at: path, "two") == "two")
            // systemd-socket-activate execs the service in place: this is the service's own exit.
            #expect(try await service.waitForExit() == .exited(0))
            await drained
        }
    }
}
