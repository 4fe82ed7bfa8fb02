import Glibc
import RemoteHost
import RemoteTestSupport
import Testing

/// Tier 3: a real service executable (`remoteview-test-service`) in a child process, passed a
/// socketpair end as fd 3. Every test checks that no fd and no child process leaked.
@Suite("Across processes")
struct CrossProcessTests {
    /// The fixture, built next to the test bundle.
    /// Waits until `connection` has ended (the hostile fixtures end it themselves).
    static func untilClosed(_ connection: Connection) async {
        for await event in connection.events {
            if case .closed = event { return }
        }
    }

    /// Starts the fixture in `mode`, runs `body` against its connection, and returns how the
    /// connection and the process ended.
    func withService<R: Sendable>(_ mode: String = "serve",
                                  _ body: @escaping @Sendable (Connection, ChildProcess) async throws -> R) async throws -> (R, RemoteError?, Termination) {
        #expect(access(testServiceExecutable, X_OK) == 0, "fixture missing at \(testServiceExecutable): build with swift build --build-tests")
        let outcome = try await withoutLeaks(within: .seconds(20)) {
            let service = try SpawnedService(executable: testServiceExecutable, arguments: [mode], hostIdentifier: "com.example.tests")
            let connection = service.connection
            let (result, error) = try await withThrowingTaskGroup(of: RemoteError?.self) { group -> (R, RemoteError?) in
                group.addTask {
                    do { try await connection.run(); return nil } catch let error as RemoteError { return error } catch { return nil }
                }
                let result = try await body(connection, service.process)
                await connection.close(reason: "test done")
                let error = try await group.next() ?? nil
                return (result, error)
            }
            return (result, error, try await service.process.waitForExit())
        }
        return outcome
    }

    @Test("request/reply and a failure cross the process boundary; the service exits 0 on goodbye")
    func requestReply() async throws {
        let (_, error, termination) = try await withService { connection, process in
            let echo = try await connection.request(ServiceMessage(type: "echo", text: "hello"))
            #expect(echo.text == "hello")
            #expect(connection.peer?.identifier == "com.example.test")
            let failure = await #expect(throws: RemoteError.self) { try await connection.request(ServiceMessage(type: "fail")) }
            #expect(failure?.remote == ServiceFailure(domain: "com.example.test", code: 42, message: "asked to fail"))
            #expect(process.termination == nil)
        }
        #expect(error == nil)
        #expect(termination == .exited(0))
    }

    @Test("a memfd written by the host is read by the service, and one made by the service is read by the host")
    func memfdBothWays() async throws {
        _ = try await withService { connection, _ in
            let bytes = Array("written by the host, read by the service".utf8)
            let file = try MemoryFile.sealed(name: "to-service", contents: bytes)
            let read = try await connection.request(ServiceMessage(type: "memfd.read", attachments: [Attachment(file.takeDescriptor())]))
            #expect(read.payload == bytes)
            // The handler took the fd and closed it before replying. (The service's copy of a memfd
            // it sends closes when its handler's task ends, which may be just after the host has
            // the reply: the socketpair tier checks that one, where the end is awaited.)
            let open = try await connection.request(ServiceMessage(type: "open-memfds")).text ?? ""
            #expect(!open.split(separator: "\n").contains("to-service"), "service still holds: \(open)")

            let made = try await connection.request(ServiceMessage(type: "memfd.make", text: "abc"))
            guard made.attachments.count == 1, let fd = made.attachments[0].take() else {
                Issue.record("expected one fd in the reply, got \(made.attachments.count)")
                return
            }
            let received = MemoryFile(adopting: fd)
            #expect(try received.seals.contains([.shrink, .grow, .write]))
            #expect(try received.read(count: 100) == Array("cba".utf8))
        }
    }

    @Test("a cancelled request crosses the boundary and cancels the service's handler")
    func cancellationCrossesProcesses() async throws {
        _ = try await withService { connection, _ in
            let request = Task { try await connection.request(ServiceMessage(type: "sleep"), timeout: .milliseconds(100)) }
            let error = await #expect(throws: RemoteError.self) { try await request.value }
            #expect(error?.code == .timeout)
            // The cancel was read before this request (one socket, in order); the service answers
            // once its cancelled handler has recorded it, or the request times out.
            let count = try await connection.request(ServiceMessage(type: "cancellations", text: "1"), timeout: .seconds(5))
            #expect(count.text == "1")
        }
    }

    @Test("a service that crashes mid-request fails it with interrupted and is reaped")
    func crash() async throws {
        let (requestError, error, termination) = try await withService { connection, _ in
            await #expect(throws: RemoteError.self) { try await connection.request(ServiceMessage(type: "crash")) }
        }
        #expect(requestError?.code == .interrupted)
        #expect(error?.code == .interrupted)
        #expect(termination == .exited(3))
    }

    @Test("kill -9 of the service fails outstanding requests with interrupted")
    func killed() async throws {
        let (requestError, _, termination) = try await withService { connection, process in
            let request = Task { try await connection.request(ServiceMessage(type: "sleep"), timeout: nil) }
            _ = try await connection.ping()
            process.send(signal: SIGKILL)
            return await #expect(throws: RemoteError.self) { try await request.value }
        }
        #expect(requestError?.code == .interrupted)
        #expect(termination == .killed(signal: SIGKILL, coreDumped: false))
    }

    @Test("hostile services: garbage, a future protocol version, a false fd count — each a named violation", arguments: [
        ("garbage", "not a valid Envelope"),
        ("wrong-version", "speaks version 99"),
        ("fd-mismatch", "declares 1 fd(s) but 0 arrived"),
    ])
    func hostile(mode: String, expected: String) async throws {
        let (_, error, termination) = try await withService(mode) { connection, _ in await Self.untilClosed(connection) }
        #expect(error?.code == .protocolViolation)
        #expect(error?.reason.contains(expected) == true, "\(String(describing: error))")
        #expect(termination == .exited(0))
    }

    @Test("a service that exits before its handshake is reported as interrupted, with its exit code")
    func exitsAtStart() async throws {
        let (_, error, termination) = try await withService("exit") { connection, _ in await Self.untilClosed(connection) }
        #expect(error?.code == .interrupted)
        #expect(termination == .exited(7))
    }
}
