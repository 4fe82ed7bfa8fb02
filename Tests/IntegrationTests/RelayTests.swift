import Glibc
@_spi(RemoteViewTransport) import RemoteCore
@_spi(RemoteViewTransport) import RemoteHost
import RemoteTestSupport
import Synchronization
import Testing

/// The transport seam and the gateway's relay, without a network: a host's ``Connection`` runs
/// over a ``TransportChannel`` (as it will over a gRPC stream), and its packets reach the
/// service's process through a ``ServiceRelay`` of the launcher that started it, as they are.
/// The handshake, the requests, the messages and the items' memfds are the far host's.
@Suite("Relay", .serialized)
struct RelayTests {

    /// A far host's connection whose transport is `relay`, both ways: the relay's packets are
    /// received, the connection's writes are sent, and each end ends the other.
    final class Link: @unchecked Sendable {
        // @unchecked: `channel` is set once, in init, before anything can call its sink.
        let relay = Synchronization.Mutex<ServiceRelay?>(nil)
        let sent = Atomic<Int>(0)
        private(set) var channel: TransportChannel!

        init() {
            channel = TransportChannel { [unowned self] output in
                switch output {
                case .packets(let packets):
                    for packet in packets {
                        relay.withLock { $0 }?.send(packet)
                        sent.add(1, ordering: .relaxed)
                        channel.didSend(bytes: packet.bytes.count)
                    }
                case .close:
                    relay.withLock { $0 }?.close()
                }
            }
        }

        func open(_ connection: ServiceConnection) async throws {
            let channel: TransportChannel = channel
            let opened = try await connection.openRelay(onPacket: { channel.receive($0) }, onEnd: { channel.receiveEnd($0) })
            relay.withLock { $0 = opened }
        }
    }

    static func farHost(_ link: Link) -> Connection {
        Connection(transport: link.channel,
                   configuration: Connection.Configuration(role: .host, identifier: "com.example.far-host",
                                                           expectedPeerIdentifier: "com.example.test"))
    }

    @Test("a far host's connection over a transport channel, relayed to the process: its handshake, a request with a memfd both ways, and one-way messages in order")
    func requestsAndMessages() async throws {
        try await withServices(["test.json": ServiceFolder.manifest()]) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            let link = Link()
            try await link.open(connection)
            let host = Self.farHost(link)
            try await host.withRunning { host in
                let reply = try await host.request(ServiceMessage(type: "echo", text: "across"), timeout: .seconds(10))
                #expect(reply.text == "across")

                let file = try MemoryFile.sealed(name: "item", contents: Array("the item's bytes".utf8))
                let echoed = try await host.request(ServiceMessage(type: "echo", attachments: [Attachment(file.takeDescriptor())]), timeout: .seconds(10))
                guard let back = echoed.attachments.first?.take() else {
                    Issue.record("the echo came back without its memfd")
                    return
                }
                #expect(try MemoryFile(adopting: back).contents(limit: 1024) == Array("the item's bytes".utf8))

                for index in 0..<10 { try await host.send(ServiceMessage(type: "note", text: "\(index)")) }
                let notes = try await host.request(ServiceMessage(type: "notes"), timeout: .seconds(10))
                #expect(notes.text == (0..<10).map(String.init).joined(separator: " "))
                // The relay is a channel of the same process as the launcher's own connection.
                let pid = try await host.request(ServiceMessage(type: "pid"), timeout: .seconds(10)).text
                #expect(try await connection.request(ServiceMessage(type: "pid")).text == pid)
                await host.close(reason: "done")
            }
            #expect(link.sent.load(ordering: .relaxed) > 13)
            await connection.invalidate()
        }
    }

    @Test("a process killed under a relay ends the far host's connection, and the relay's connection hears how it ended")
    func killedUnderRelay() async throws {
        try await withServices(["test.json": ServiceFolder.manifest()]) { launcher, _ in
            let connection = launcher.connection(to: "com.example.test")
            let link = Link()
            try await link.open(connection)
            let host = Self.farHost(link)
            let pid = try #require(connection.processIdentifier)
            let ended: RemoteError? = try await withDeadline(.seconds(15), "the far host's connection ends") {
                // The request fails, or the connection's run ends with the channel: either says so.
                do { return try await host.withRunning { host -> RemoteError? in
                    #expect(try await host.request(ServiceMessage(type: "echo", text: "x"), timeout: .seconds(10)).text == "x")
                    kill(pid, SIGKILL)
                    do {
                        _ = try await host.request(ServiceMessage(type: "sleep", text: "10"), timeout: .seconds(10))
                        return nil
                    } catch let error as RemoteError {
                        return error
                    }
                } } catch let error as RemoteError {
                    return error
                }
            }
            #expect(ended?.code == .interrupted || ended?.code == .invalidated, "\(String(describing: ended))")
            var events = connection.events.makeAsyncIterator()
            guard case .interrupted(let event) = await events.next() else {
                Issue.record("expected an interrupted event")
                return
            }
            #expect(event.reason.contains("killed by SIGKILL"), "\(event.reason)")
            await connection.invalidate()
        }
    }
}
