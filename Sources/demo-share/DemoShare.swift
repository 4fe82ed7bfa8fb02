// demo-share: a host that starts a service process on demand and talks to it over a
// SOCK_SEQPACKET socket, and the demo service itself (`demo-share service`).
import ArgumentParser
import CProto
import Glibc
import RemoteHost
import RemoteService

@main
struct DemoShare: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo-share",
        abstract: "RemoteView demo: a host and its share services.",
        subcommands: [Host.self, Service.self],
        defaultSubcommand: Host.self)
}

/// This executable's own path, to start it again as the service.
func ownExecutable() throws -> String {
    var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
    let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    guard length > 0 else { throw ValidationError("cannot read /proc/self/exe") }
    return String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

struct Host: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Start the demo service as a child process and exchange requests with it (the default).")

    @Option(help: "Round trips to time at the end (64-byte echo requests, then pings).")
    var roundTrips = 2_000

    func run() async throws {
        rv_stdout_line_buffered()
        let service = try SpawnedService(executable: try ownExecutable(), arguments: ["service"],
                                         hostIdentifier: "com.example.demo-share")
        print("host \(getpid()): started service process \(service.process.pid) with its socket at fd 3")
        let connection = service.connection
        try await connection.withRunning { connection in
            guard let peer = connection.peer else { return }
            print("handshake: \(peer.role) \"\(peer.identifier)\", protocol \(peer.protocolVersion), capabilities \(peer.capabilities)")

            let echo = try await connection.request(ServiceMessage(type: "echo", text: "hello from the host"))
            print("request echo(\"hello from the host\") -> \(echo.type)(\"\(echo.text ?? "")\")")

            let clock = try await connection.request(ServiceMessage(type: "clock"))
            print("request clock -> \"\(clock.text ?? "")\"")

            let file = try MemoryFile.sealed(name: "demo-item", contents: Array("a shared item, sent as a sealed memfd".utf8))
            let counted = try await connection.request(ServiceMessage(type: "count", attachments: [Attachment(file.takeDescriptor())]))
            print("request count(memfd) -> \(counted.text ?? "")")

            do {
                _ = try await connection.request(ServiceMessage(type: "no-such-request"))
            } catch let error as RemoteError {
                print("request no-such-request -> \(error.code): \(error.remote.map { "\($0)" } ?? error.reason)")
            }

            do {
                _ = try await connection.request(ServiceMessage(type: "slow"), timeout: .milliseconds(100))
            } catch let error as RemoteError {
                print("request slow (100 ms deadline) -> \(error.code): \(error.reason)")
            }

            let payload = [UInt8](repeating: 0x2a, count: 64)
            let stopwatch = ContinuousClock()
            var requests: [Duration] = [], pings: [Duration] = []
            for _ in 0..<roundTrips {
                requests.append(try await stopwatch.measure {
                    _ = try await connection.request(ServiceMessage(type: "echo", payload: payload))
                })
            }
            for _ in 0..<roundTrips { pings.append(try await connection.ping()) }
            print("request/reply (64-byte echo) x\(roundTrips): \(summary(requests))")
            print("ping (answered by the connection) x\(roundTrips): \(summary(pings))")
        }
        let termination = await service.process.waitForExit()
        print("connection closed; service process \(service.process.pid) \(termination)")
    }

    private func summary(_ samples: [Duration]) -> String {
        guard !samples.isEmpty else { return "no samples" }
        let sorted = samples.sorted()
        return "median \(format(sorted[sorted.count / 2])), p99 \(format(sorted[sorted.count * 99 / 100]))"
    }

    private func format(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        let tenths = Int((Double(seconds) * 1e7 + Double(attoseconds) / 1e11).rounded())
        return "\(tenths / 10).\(tenths % 10) µs"
    }
}

struct Service: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run as the demo service on the socket passed at fd 3 (LISTEN_FDS=1).")

    func run() async throws {
        await ServiceMain.exit(serving: "com.example.demo-share.echo", capabilities: ["echo"]) { request in
            switch request.type {
            case "echo":
                return ServiceMessage(type: "echo", payload: request.payload)
            case "clock":
                var now = timespec()
                clock_gettime(CLOCK_REALTIME, &now)
                return ServiceMessage(type: "clock", text: "service \(getpid()) says it is \(now.tv_sec) s since 1970")
            case "count":
                guard let fd = request.attachments.first?.take() else {
                    throw ServiceFailure(domain: "com.example.demo-share", code: 1, message: "count needs a memfd")
                }
                let file = MemoryFile(adopting: fd)
                let bytes = try file.read(count: try file.size)
                return ServiceMessage(type: "count", text: "\(bytes.count) bytes, seals \(try file.seals.rawValue), first word \"\(String(decoding: bytes.prefix { $0 != 0x20 }, as: UTF8.self))\"")
            case "slow":
                try await Task.sleep(for: .seconds(10))
                return ServiceMessage(type: "slow")
            default:
                throw ServiceFailure(domain: "com.example.demo-share", code: 404, message: "unknown request \"\(request.type)\"")
            }
        }
    }
}
