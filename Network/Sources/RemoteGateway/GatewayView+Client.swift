import GRPCCore
import GRPCNIOTransportHTTP2
@_spi(RemoteViewTransport) import RemoteHost
import Synchronization

/// The gRPC payload bytes a host's streams to a gateway carried, each way, counted by the
/// transport as messages are written and read (HTTP/2's and TLS's framing not included).
public struct WireBytes: Sendable, Hashable, CustomStringConvertible {
    /// `Connect`: envelopes and items, both ways (a view's size, its semantic tree, replies).
    public var connectUp = 0, connectDown = 0
    /// `View`: frames down, `presented` up.
    public var viewDown = 0, viewUp = 0
    /// `Input`: input up, `synced` down.
    public var inputUp = 0, inputDown = 0

    public init() {}

    /// All of them.
    public var total: Int { connectUp + connectDown + viewDown + viewUp + inputUp + inputDown }

    public var description: String {
        "Connect \(connectUp) up \(connectDown) down, View \(viewUp) up \(viewDown) down, Input \(inputUp) up \(inputDown) down"
    }
}

/// Counts ``WireBytes`` for the streams of one link.
final class WireCounter: Sendable {
    private let bytes = Mutex(WireBytes())

    func add(_ keyPath: WritableKeyPath<WireBytes, Int> & Sendable, _ count: Int) {
        bytes.withLock { $0[keyPath: keyPath] += count }
    }

    var value: WireBytes { bytes.withLock { $0 } }
}

/// A remote view's streams on the host (framing version 2): frames from the gateway's `View`
/// stream, checked, decompressed and applied to the view's image; `presented` back on the same
/// stream; input and its syncs on `Input`. Both open when a view takes the channel, and end
/// with its `Connect` stream.
final class GatewayViewStream: RemoteViewStream {
    let gateway: String
    let identifier: String
    private let counter: WireCounter
    private let token = Mutex<[UInt8]?>(nil)
    private let receiver = Mutex<RemoteFrameReceiver?>(nil)
    private let started = Latch()
    private let presentedStream: AsyncStream<UInt64>
    private let presentedSink: AsyncStream<UInt64>.Continuation
    private let inputStream: AsyncStream<InputFrame>
    private let inputSink: AsyncStream<InputFrame>.Continuation
    private let syncs = Mutex<(next: UInt64, waiting: [UInt64: CheckedContinuation<RemoteError?, Never>], ended: RemoteError?)>((1, [:], nil))

    init(gateway: String, identifier: String, counter: WireCounter) {
        self.gateway = gateway
        self.identifier = identifier
        self.counter = counter
        (presentedStream, presentedSink) = AsyncStream.makeStream()
        (inputStream, inputSink) = AsyncStream.makeStream()
    }

    func opened(token: [UInt8]) {
        self.token.withLock { $0 = token }
    }

    func start(_ receiver: RemoteFrameReceiver) {
        self.receiver.withLock { $0 = receiver }
        started.open(nil)
    }

    func send(input packet: [UInt8]) async throws(RemoteError) {
        if let ended = syncs.withLock({ $0.ended }) { throw ended }
        guard packet.count <= InputFrame.maxInputBytes else {
            throw RemoteError(.invalidArgument, "an input event of \(packet.count) bytes, over the Input stream's \(InputFrame.maxInputBytes)")
        }
        inputSink.yield(.input(packet))
    }

    func sync() async throws(RemoteError) {
        let failure = await withCheckedContinuation { (continuation: CheckedContinuation<RemoteError?, Never>) in
            let number = syncs.withLock { syncs -> UInt64? in
                if syncs.ended != nil { return nil }
                defer { syncs.next += 1 }
                syncs.waiting[syncs.next] = continuation
                return syncs.next
            }
            guard let number else { return continuation.resume(returning: syncs.withLock { $0.ended }) }
            inputSink.yield(.sync(number))
        }
        if let failure { throw failure }
    }

    func presented(frame: UInt64) {
        presentedSink.yield(frame)
    }

    /// Runs both streams over `client` once a view has started them, until the `Connect`
    /// stream ends (this task is cancelled).
    func run(_ client: GRPCClient<HTTP2ClientTransport.Posix>) async {
        let start = await withTaskCancellationHandler {
            await started.wait()
        } onCancel: {
            started.open(RemoteError(.interrupted, "the stream ended"))
        }
        guard start == nil, let token = token.withLock({ $0 }) else { return end(nil) }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.runView(client, token: token) }
            group.addTask { await self.runInput(client, token: token) }
        }
    }

    /// The stream is over: syncs still waiting fail, input is refused, the view hears why.
    private func end(_ error: RemoteError?) {
        let failure = error ?? RemoteError(.interrupted, "\(gateway)'s streams to \(identifier) ended")
        let waiting = syncs.withLock { syncs in
            if syncs.ended == nil { syncs.ended = failure }
            defer { syncs.waiting = [:] }
            return syncs.waiting.values
        }
        for waiter in waiting { waiter.resume(returning: failure) }
        inputSink.finish()
        presentedSink.finish()
        receiver.withLock { $0 }?.end(error)
    }

    static var options: CallOptions {
        var options = CallOptions.defaults
        options.maxResponseMessageBytes = ViewFrame.maxMessageBytes
        options.maxRequestMessageBytes = ViewFrame.maxMessageBytes
        return options
    }

    private func runView(_ client: GRPCClient<HTTP2ClientTransport.Posix>, token: [UInt8]) async {
        let (presentedStream, counter) = (presentedStream, counter)
        let request = StreamingClientRequest<[UInt8]> { writer in
            try await writer.write(token)
            counter.add(\.viewUp, token.count)
            for await frame in presentedStream {
                let bytes = ViewFrame.presented(frame: frame).encoded()
                try await writer.write(bytes)
                counter.add(\.viewUp, bytes.count)
            }
        }
        do {
            try await client.bidirectionalStreaming(request: request, descriptor: GatewayMethods.view, serializer: RawBytes(),
                                                    deserializer: RawBytes(), options: Self.options) { response in
                var assembler = ViewFrameAssembler()
                for try await message in response.messages {
                    counter.add(\.viewDown, message.count)
                    let part = try ViewFrame.decode(message, toHost: true)
                    // A size the host never gave is refused before its payload is gathered.
                    if case .frame(let header, _, _) = part { try self.receiver.withLock({ $0 })?.check(frame: header.frame, width: header.width, height: header.height) }
                    guard let frame = try assembler.receive(part) else { continue }
                    let ops = try ViewFrameDecoder.decompress(frame.header, frame.payload)
                    guard let receiver = self.receiver.withLock({ $0 }) else { continue }
                    try receiver.receive(frame: frame.header.frame, width: frame.header.width, height: frame.header.height,
                                         damage: frame.header.damage) { pixels throws(RemoteError) in
                        try ViewFrameDecoder.apply(ops, of: frame.header, to: pixels)
                    }
                }
            }
            end(nil)
        } catch let error as RemoteError {
            // The gateway sent a frame that breaks a rule: the view ends the channel, naming it.
            end(RemoteError(error.code, "\(gateway), the view of \(identifier): \(error.reason)"))
        } catch {
            // Cancelled: the Connect stream ended, and the channel with it. Otherwise the gateway
            // cut this stream while the channel lives: the view closes the channel.
            end(Task.isCancelled ? nil : RemoteError(.interrupted, "\(gateway) cut the View stream of \(identifier): \(error)".escapedForTerminal()))
        }
    }

    private func runInput(_ client: GRPCClient<HTTP2ClientTransport.Posix>, token: [UInt8]) async {
        let (inputStream, counter) = (inputStream, counter)
        let request = StreamingClientRequest<[UInt8]> { writer in
            try await writer.write(token)
            counter.add(\.inputUp, token.count)
            for await frame in inputStream {
                let bytes = frame.encoded()
                try await writer.write(bytes)
                counter.add(\.inputUp, bytes.count)
            }
        }
        do {
            try await client.bidirectionalStreaming(request: request, descriptor: GatewayMethods.input, serializer: RawBytes(),
                                                    deserializer: RawBytes(), options: Self.options) { response in
                for try await message in response.messages {
                    counter.add(\.inputDown, message.count)
                    guard case .synced(let number) = try InputFrame.decode(message, toHost: true) else { continue }
                    self.syncs.withLock { $0.waiting.removeValue(forKey: number) }?.resume(returning: nil)
                }
            }
            end(nil)
        } catch let error as RemoteError {
            end(RemoteError(error.code, "\(gateway), the input of \(identifier): \(error.reason)"))
        } catch {
            // Cancelled: the Connect stream ended, and the channel with it. Otherwise the gateway
            // cut this stream while the channel lives: the view closes the channel.
            end(Task.isCancelled ? nil : RemoteError(.interrupted, "\(gateway) cut the Input stream of \(identifier): \(error)".escapedForTerminal()))
        }
    }
}
