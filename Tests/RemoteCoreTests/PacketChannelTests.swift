import CRemoteViewLinux
import Glibc
import RemoteTestSupport
import Testing
@testable import RemoteCore

/// The packet channel over a real socket pair, on the process's event loop: what it writes in a
/// round, what it reads, how it holds packets for a peer that does not read, and pausing.
@Suite("Seqpacket channel", .serialized)
struct PacketChannelTests {
    /// Runs `body` on the event loop's thread and returns its result. (Resumed in order, as
    /// the connection core resumes its callers, so that ThreadSanitizer sees the resumption
    /// happen before the caller goes on: docs/Fuzzing.md, "Sanitizers".)
    func onLoop<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withOrderedContinuation { (continuation: UnsafeContinuation<Result<T, any Error>, Never>) in
            EventLoop.shared.execute {
                continuation.resumeInOrder(returning: Result { try body() })
            }
        }.get()
    }

    /// Runs `start` on the event loop's thread, handing it what resumes the caller (on the loop).
    func untilLoop(_ start: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void) async {
        await withOrderedContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            EventLoop.shared.execute {
                start { continuation.resumeInOrder() }
            }
        }
    }

    /// What an inbound stage saw, in order.
    final class Recorder: PacketInbound, @unchecked Sendable {
        // @unchecked: called on the loop only; read by the test after an `onLoop` hop.
        var packets: [[UInt8]] = []
        var fds: [Int] = []
        var closed: [RemoteError?] = []
        var writability: [Bool] = []
        var afterEach: ((Recorder) -> Void)?
        var arrived: (() -> Void)?

        func channelRead(_ packet: InboundPacket) {
            packets.append(Array(packet.bytes))
            fds.append(packet.attachments.count)
            afterEach?(self)
            arrived?()
        }

        func channelClosed(_ error: RemoteError?) {
            closed.append(error)
            arrived?()
        }

        func channelWritabilityChanged(_ isWritable: Bool) {
            writability.append(isWritable)
        }
    }

    @Test("packets written in one round go out at its end, in order, prefix and body as one packet, each with its fds")
    func writesInOrder() async throws {
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let channel = try SeqpacketChannel(pair.first)
            let peer = pair.second
            try RawSocket.setReceiveTimeout(peer.rawValue)
            let memfd = try MemoryFile.sealed(name: "channel-test", contents: [1, 2, 3])
            let attachment = Attachment(try memfd.fd.duplicate())
            try await onLoop {
                for index in 0..<5 {
                    let prefix = [UInt8(0xA0 + index)].withUnsafeBytes { OutboundPacket.Prefix($0) }
                    try channel.write(OutboundPacket(prefix: prefix, body: [UInt8(index), 9][...], attachments: index == 2 ? [attachment] : []))
                }
            }
            var received: [[UInt8]] = []
            for _ in 0..<5 {
                let packet = try #require(try RawSocket.receive(peer.rawValue))
                received.append(packet.bytes)
                #expect(packet.fds == (packet.bytes.first == 0xA2 ? 1 : 0), "the fd went with its packet, and only with it")
            }
            let expected: [[UInt8]] = (0..<5).map { (index: Int) -> [UInt8] in [UInt8(0xA0 + index), UInt8(index), 9] }
            #expect(received == expected)
            try await onLoop { channel.close() }
            #expect(try RawSocket.receive(peer.rawValue) == nil, "closed: end of file")
        }
    }

    @Test("a peer that does not read: packets wait in the channel, which turns unwritable at its high-water mark and writable again once the peer has read them down to the low one; past maxQueuedPackets a write fails, naming the bound")
    func heldForASlowPeer() async throws {
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let channel = try SeqpacketChannel(pair.first, sendTimeout: .seconds(600), maxQueuedPackets: SeqpacketChannel.highWaterMark + 8)
            let recorder = Recorder()
            try await onLoop { channel.start(recorder) }
            let payload = [UInt8](repeating: 7, count: 60_000)
            // Writes until the bound refuses one: the socket's queue fills first, then the channel's.
            let refusal = try await onLoop { () -> RemoteError? in
                for _ in 0..<10_000 {
                    do throws(RemoteError) {
                        try channel.write(OutboundPacket(bytes: payload))
                        channel.flush()
                    } catch {
                        return error
                    }
                }
                return nil
            }
            #expect(refusal?.code == .timeout && refusal?.reason.contains("\(SeqpacketChannel.highWaterMark + 8) packets already wait") == true,
                    "\(String(describing: refusal))")
            let (changes, writable) = try await onLoop { (recorder.writability, channel.isWritable) }
            #expect(changes == [false] && !writable)
            // The peer reads everything; the channel writes the rest as room comes.
            let peer = pair.second
            var read = 0
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while try await onLoop({ channel.isWritable }) == false || read < SeqpacketChannel.highWaterMark {
                let count = buffer.withUnsafeMutableBytes { recv(peer.rawValue, $0.baseAddress, $0.count, 0) }
                guard count > 0 else { break }
                read += 1
            }
            #expect(try await onLoop { recorder.writability } == [false, true])
            try await onLoop { channel.close() }
        }
    }

    @Test("reading: packets come in order; paused, nothing more is delivered until resumed, then what waited comes first; end of file closes with no error")
    func pauseAndResume() async throws {
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let writer = pair.second
            for index in 0..<20 { try RawSocket.send(writer.rawValue, [UInt8(index)]) }
            let channel = try SeqpacketChannel(pair.first)
            let recorder = Recorder()
            // The third packet pauses reading, as a route that must wait would.
            recorder.afterEach = { recorder in if recorder.packets.count == 3 { channel.pauseReading() } }
            try await onLoop { channel.start(recorder) }
            #expect(try await onLoop { recorder.packets.count } == 3)
            await untilLoop { resume in
                recorder.arrived = { if recorder.packets.count == 20 { recorder.arrived = nil; resume() } }
                channel.resumeReading()
            }
            let all20: [[UInt8]] = (0..<20).map { (index: Int) -> [UInt8] in [UInt8(index)] }
            #expect(try await onLoop { recorder.packets } == all20)
            await untilLoop { resume in
                recorder.arrived = { resume() }
                Syscall.shutdownBoth(writer.rawValue)
            }
            let ending = try await onLoop { recorder.closed }
            #expect(ending.count == 1)
            #expect(ending.first.map { $0 == nil } == true)
        }
    }

    @Test("a peer that wrote, then closed: the write that meets its closed end is dropped, and what it wrote is still read, then end of file, with no error")
    func peerClosedAfterWriting() async throws {
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            try RawSocket.send(pair.second.rawValue, [42])
            Syscall.shutdownBoth(pair.second.rawValue)
            let channel = try SeqpacketChannel(pair.first)
            let recorder = Recorder()
            try await onLoop {
                try channel.write(OutboundPacket(bytes: [1, 2, 3]))
                channel.flush()
            }
            await untilLoop { resume in
                recorder.arrived = { [unowned recorder] in if !recorder.closed.isEmpty { resume() } }
                channel.start(recorder)
            }
            let (packets, closed) = try await onLoop { (recorder.packets, recorder.closed) }
            #expect(packets == [[42]])
            #expect(closed.count == 1)
            #expect(closed.first.map { $0 == nil } == true, "\(closed)")
            _ = pair.second
        }
    }

    @Test("a packet over the size limit ends the channel as a violation, naming the limit; its fds are closed")
    func tooLarge() async throws {
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let writer = pair.second
            try RawSocket.send(writer.rawValue, [UInt8](repeating: 1, count: WireLimits.maxPacketSize + 1))
            let channel = try SeqpacketChannel(pair.first)
            let recorder = Recorder()
            await untilLoop { resume in
                recorder.arrived = { resume() }
                channel.start(recorder)
            }
            let ending = try await onLoop { recorder.closed }
            let error = ending.first ?? nil
            #expect(error?.code == .protocolViolation)
            #expect(error?.reason.contains("\(WireLimits.maxPacketSize)-byte limit") == true, "\(String(describing: error))")
            _ = writer
        }
    }
}

/// A blocking socket end, read and written directly (tests only).
enum RawSocket {
    /// Gives reads a 10 s deadline, so a test that expected a packet fails instead of hanging.
    static func setReceiveTimeout(_ fd: Int32) throws {
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        guard setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size)) == 0 else {
            throw SystemCallError(call: "setsockopt(SO_RCVTIMEO)", errno: errno)
        }
    }

    static func send(_ fd: Int32, _ bytes: [UInt8]) throws {
        let sent = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, 0) }
        guard sent == bytes.count else { throw SystemCallError(call: "send (test)", errno: errno) }
    }

    /// One packet and how many fds came with it (closed here), or `nil` at end of file.
    static func receive(_ fd: Int32) throws -> (bytes: [UInt8], fds: Int)? {
        var buffer = [UInt8](repeating: 0, count: WireLimits.maxPacketSize)
        let controlLength = 256
        let control = UnsafeMutableRawPointer.allocate(byteCount: controlLength, alignment: 8)
        defer { control.deallocate() }
        return try buffer.withUnsafeMutableBytes { bytes -> (bytes: [UInt8], fds: Int)? in
            var vector = iovec(iov_base: bytes.baseAddress, iov_len: bytes.count)
            return try withUnsafeMutablePointer(to: &vector) { vector -> (bytes: [UInt8], fds: Int)? in
                var message = msghdr()
                message.msg_iov = vector
                message.msg_iovlen = 1
                message.msg_control = control
                message.msg_controllen = controlLength
                let count = recvmsg(fd, &message, 0)
                guard count >= 0 else { throw SystemCallError(call: "recvmsg (test)", errno: errno) }
                guard count > 0 else { return nil }
                var fds = 0
                var header = message.msg_controllen > 0 ? rv_cmsg_firsthdr(&message) : nil
                while let current = header {
                    let data = UnsafeRawPointer(rv_cmsg_data(current))
                    let found = (Int(current.pointee.cmsg_len) - rv_cmsg_len(0)) / MemoryLayout<Int32>.size
                    for index in 0..<found { Glibc.close(data.loadUnaligned(fromByteOffset: index * 4, as: Int32.self)) }
                    fds += found
                    header = rv_cmsg_nxthdr(&message, current)
                }
                return (Array(bytes[0..<count]), fds)
            }
        }
    }
}
