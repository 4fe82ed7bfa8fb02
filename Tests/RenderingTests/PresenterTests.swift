// The service's presenter against the host's compositor over a real socket pair: double
// buffering, damage, pacing and resize, checked on the host's pixels.
@testable import RemoteCore
@testable import RemoteHost
@testable import RemoteService
import RemoteTestSupport
import Testing

@Suite("Presenter and compositor")
struct PresenterTests {
    static let blue = Color(red: 0, green: 0, blue: 1), red = Color(red: 1, green: 0, blue: 0), green = Color(red: 0, green: 1, blue: 0)
    static let blueWord: UInt32 = 0xFF00_00FF, redWord: UInt32 = 0xFFFF_0000, greenWord: UInt32 = 0xFF00_FF00

    /// Counts composited frames and lets a test wait for the n-th.
    final class Frames: Sendable {
        private let state = Mutex<(count: Int, waiters: [(Int, Waiter<Void>)])>((0, []))
        func composited() {
            state.withLock { state -> [Waiter<Void>] in
                state.count += 1
                let count = state.count
                defer { state.waiters.removeAll { $0.0 <= count } }
                return state.waiters.filter { $0.0 <= count }.map(\.1)
            }.resumeAll(returning: ())
        }
        func wait(for count: Int) async {
            let waiter = Waiter<Void>()
            let waits = state.withLock { state in
                if state.count >= count { return false }
                state.waiters.append((count, waiter))
                return true
            }
            if waits { try? await waiter.wait() }  // bounded by the test's deadline
        }
    }

    /// A service connection with a presenter and a host connection with a compositor that
    /// presents every frame at once (frame_done right after compositing).
    func withSurface(width: Int, height: Int,
                     _ body: @escaping @Sendable (SurfacePresenter, SurfaceCompositor, Frames, Connection) async throws -> Void) async throws {
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let compositor = SurfaceCompositor(), frames = Frames()
            let host = Connection(channel: try SeqpacketChannel(pair.first), configuration: .init(role: .host, identifier: "com.example.host"))
            host.route(surface: { message, attachments, context in
                do {
                    try compositor.receive(message, attachments: attachments)
                } catch {
                    Issue.record("host refused \(message.name): \(error)")
                }
                guard case .commit = message else { return }
                frames.composited()
                // The service may be closing after its last frame: a failed send is fine.
                for reply in compositor.present() { try? await context.connection.send(reply) }
            })
            let service = Connection(channel: try SeqpacketChannel(pair.second), configuration: .init(role: .service, identifier: "com.example.view"))
            let presenter = SurfacePresenter(width: width, height: height, pool: nil) { [weak service] message, attachments throws(RemoteError) in
                guard let service else { throw RemoteError(.invalidated, "the connection is gone") }
                try await service.send(message, attachments: attachments)
            }
            service.route(surface: { message, _, _ in
                do { try await presenter.receive(message) } catch {
                    Issue.record("service refused \(message.name): \(error)")
                }
            })
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await host.run() }
                group.addTask { try await service.run() }
                try await body(presenter, compositor, frames, host)
                await service.close(reason: "done")
                try await group.waitForAll()
            }
        }
    }

    /// The whole scene at `frame`: blue, then a red square from frame 2, a green one from frame 3.
    static func scene(_ frame: Int) -> @Sendable (GraphicsContext) -> Void {
        { context in
            context.fill(PixelRect(x: 0, y: 0, width: 32, height: 32), with: blue)
            if frame >= 2 { context.fill(PixelRect(x: 2, y: 2, width: 4, height: 4), with: red) }
            if frame >= 3 { context.fill(PixelRect(x: 20, y: 20, width: 2, height: 2), with: green) }
        }
    }

    @Test("frames after the first commit only their damage; a buffer the host released is reused; the host's image is exact")
    func doubleBuffered() async throws {
        try await withSurface(width: 32, height: 32) { presenter, compositor, frames, _ in
            try await presenter.present(damage: nil, Self.scene(1))
            await frames.wait(for: 1)
            #expect(compositor.image.pixels.allSatisfy { $0 == Self.blueWord })
            try await presenter.present(damage: [PixelRect(x: 2, y: 2, width: 4, height: 4)], Self.scene(2))
            await frames.wait(for: 2)
            try await presenter.present(damage: [PixelRect(x: 20, y: 20, width: 2, height: 2)], Self.scene(3))
            await frames.wait(for: 3)
            // Frames 4…8 change nothing visible but keep swapping buffers.
            for frame in 4...8 {
                try await presenter.present(damage: [PixelRect(x: 0, y: 0, width: 1, height: 1)], Self.scene(3))
                await frames.wait(for: frame)
            }
            let image = compositor.image
            #expect(image.pixel(x: 3, y: 3) == Self.redWord && image.pixel(x: 21, y: 21) == Self.greenWord)
            #expect(image.pixel(x: 0, y: 0) == Self.blueWord && image.pixel(x: 10, y: 10) == Self.blueWord && image.pixel(x: 6, y: 6) == Self.blueWord)
            // This host copies each frame and hands the buffer back with frame_done, so one buffer
            // is enough; a host that held buffers longer would make the presenter attach a second.
            #expect(presenter.bufferCount == 1)
            #expect(compositor.attachedBuffers == [1])
        }
    }

    @Test("against a host that keeps each buffer until the next commit, the presenter double-buffers, never draws into a held buffer, and redraws what a reused buffer missed")
    func holdingHost() async throws {
        try await withoutLeaks {
            let pair = try SeqpacketSocket.pair()
            let frames = Frames()
            // The host: maps each buffer, holds the committed one until the next commit (like a
            // Wayland compositor that scans out of it), checks every commit's buffer in full.
            let host = Mutex<(mapped: [UInt32: MappedBuffer], held: UInt32?, problems: [String], scenes: [String])>(([:], nil, [], []))
            let hostConnection = Connection(channel: try SeqpacketChannel(pair.first), configuration: .init(role: .host, identifier: "com.example.host"))
            hostConnection.route(surface: { message, attachments, context in
                switch message {
                case .attachBuffer(let layout):
                    guard let fd = attachments.first?.take(), let mapped = try? MappedBuffer(mapping: fd, as: layout) else { return }
                    host.withLock { $0.mapped[layout.id] = mapped }
                case .commit(let id, _, let frame):
                    let previous = host.withLock { state -> UInt32? in
                        if state.held == id { state.problems.append("frame \(frame) drawn into held buffer \(id)") }
                        guard let buffer = state.mapped[id] else { return nil }
                        let red = buffer.pixel(x: 3, y: 3) == Self.redWord, green = buffer.pixel(x: 21, y: 21) == Self.greenWord
                        let blue = buffer.pixel(x: 10, y: 10) == Self.blueWord
                        state.scenes.append("\(frame):\(blue ? "B" : "-")\(red ? "R" : "-")\(green ? "G" : "-")")
                        defer { state.held = id }
                        return state.held
                    }
                    if let previous, previous != id { try? await context.connection.send(.releaseBuffer(previous)) }
                    try? await context.connection.send(.frameDone(frame: frame))
                    frames.composited()
                default:
                    break
                }
            })
            let service = Connection(channel: try SeqpacketChannel(pair.second), configuration: .init(role: .service, identifier: "com.example.view"))
            let presenter = SurfacePresenter(width: 32, height: 32, pool: nil) { [weak service] message, attachments throws(RemoteError) in
                guard let service else { throw RemoteError(.invalidated, "the connection is gone") }
                try await service.send(message, attachments: attachments)
            }
            service.route(surface: { message, _, _ in try? await presenter.receive(message) })
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await hostConnection.run() }
                group.addTask { try await service.run() }
                try await presenter.present(damage: nil, Self.scene(1))
                await frames.wait(for: 1)
                try await presenter.present(damage: [PixelRect(x: 2, y: 2, width: 4, height: 4)], Self.scene(2))
                await frames.wait(for: 2)
                try await presenter.present(damage: [PixelRect(x: 20, y: 20, width: 2, height: 2)], Self.scene(3))
                await frames.wait(for: 3)
                try await presenter.present(damage: [PixelRect(x: 0, y: 0, width: 1, height: 1)], Self.scene(3))
                await frames.wait(for: 4)
                await service.close(reason: "done")
                try await group.waitForAll()
            }
            let (problems, scenes) = host.withLock { ($0.problems, $0.scenes) }
            #expect(problems.isEmpty, "\(problems)")
            // Every committed buffer holds the whole scene of its frame, reused ones included.
            #expect(scenes == ["1:B--", "2:BR-", "3:BRG", "4:BRG"])
            #expect(presenter.bufferCount == 2, "double buffering against a host that holds buffers")
            host.withLock { $0.mapped.removeAll() }
        }
    }

    @Test("a frame waiting for the host's frame_done, and one waiting for a buffer to come back, are cancelled")
    func cancelled() async throws {
        try await withoutLeaks {
            // A host that answers nothing unless the test says so.
            let presenter = SurfacePresenter(width: 8, height: 8, pool: nil) { _, _ throws(RemoteError) in }
            try await presenter.present(damage: nil) { _ in }
            let waitingForFrameDone = Task.immediate { try await presenter.present(damage: nil) { _ in } }
            waitingForFrameDone.cancel()
            let first = await #expect(throws: RemoteError.self) { try await waitingForFrameDone.value }
            #expect(first?.code == .cancelled && first?.reason.contains("frame_done") == true, "\(String(describing: first))")
            // Frame done for each frame, but no buffer back: after three buffers, a frame waits for one.
            for frame in 1...2 {
                try await presenter.receive(.frameDone(frame: UInt64(frame)))
                try await presenter.present(damage: nil) { _ in }
            }
            try await presenter.receive(.frameDone(frame: 3))
            #expect(presenter.bufferCount == SurfacePresenter.maxBuffers)
            let waitingForBuffer = Task.immediate { try await presenter.present(damage: nil) { _ in } }
            waitingForBuffer.cancel()
            let second = await #expect(throws: RemoteError.self) { try await waitingForBuffer.value }
            #expect(second?.code == .cancelled && second?.reason.contains("release a buffer") == true, "\(String(describing: second))")
            presenter.close()
        }
    }

    @Test("after a resize the next frame uses buffers of the new size and the old ones are destroyed")
    func resized() async throws {
        try await withSurface(width: 32, height: 32) { presenter, compositor, frames, _ in
            try await presenter.present(damage: nil, Self.scene(1))
            await frames.wait(for: 1)
            try await presenter.present(damage: nil, Self.scene(1))
            await frames.wait(for: 2)
            try await presenter.resize(to: SurfaceSize(width: 24, height: 16, scalePermille: 2_000))
            try await presenter.present(damage: nil) { $0.fill(PixelRect(x: 0, y: 0, width: 48, height: 32), with: Self.red) }
            await frames.wait(for: 3)
            let image = compositor.image
            #expect(image.width == 48 && image.height == 32 && image.pixels.allSatisfy { $0 == Self.redWord })
            // The released 32×32 buffer was destroyed at the resize; only the 48×32 one is left.
            try await presenter.present(damage: nil) { $0.fill(PixelRect(x: 0, y: 0, width: 48, height: 32), with: Self.red) }
            await frames.wait(for: 4)
            #expect(presenter.bufferCount == 1)
            #expect(compositor.attachedBuffers == [2], "\(compositor.attachedBuffers)")
        }
    }
}

@Suite("Presenter against a host that keeps its buffers")
struct PresenterBufferCapTests {
    @Test("a host that says frame_done but never releases: at most three buffers, then the next frame waits for a release")
    func capped() async throws {
        let sent = Mutex<[String]>([])
        let presenter = SurfacePresenter(width: 4, height: 4, pool: nil) { message, _ in
            sent.withLock { $0.append(message.name) }
        }
        for frame in 1...3 {
            try await presenter.present(damage: nil) { $0.fill(PixelRect(x: 0, y: 0, width: 4, height: 4), with: .black) }
            try await presenter.receive(.frameDone(frame: UInt64(frame)))
        }
        #expect(presenter.bufferCount == 3)
        // The fourth frame waits; a release lets it reuse that buffer.
        let fourth = Task { try await presenter.beginFrame(damage: nil).number }
        try await presenter.receive(.releaseBuffer(2))
        let number = try await withDeadline(.seconds(5), "the fourth frame") { try await fourth.value }
        #expect(number == 4)
        #expect(presenter.bufferCount == 3)
        #expect(sent.withLock { $0.filter { $0 == "attach_buffer" }.count } == 3)
        presenter.close()
    }

    @Test("the host's pace: frame_dones the service waited for (as the frame loop waits, without a waiter) set frameInterval from their arrival times; one it did not wait for does not")
    func frameIntervalFromFrameDonesWaitedFor() async throws {
        let presenter = SurfacePresenter(width: 8, height: 8, pool: nil) { _, _ throws(RemoteError) in }
        #expect(presenter.frameInterval == .seconds(1) / 60)  // until measured
        let start = ContinuousClock.now
        // Frame 1 in flight; the service waits for it (the frame loop's way), frame_done comes.
        try await presenter.present(damage: nil) { _ in }
        #expect(!presenter.isReadyForFrame)
        presenter.waitingForFrameDone()
        try await presenter.receive(.frameDone(frame: 1), arrival: start)
        #expect(presenter.isReadyForFrame)
        // Frame 2 the same, 10 ms later: the host's pace.
        try await presenter.present(damage: nil) { _ in }
        presenter.waitingForFrameDone()
        try await presenter.receive(.frameDone(frame: 2), arrival: start.advanced(by: .milliseconds(10)))
        #expect(presenter.frameInterval == .milliseconds(10))
        // Frame 3 the service did not wait for: its frame_done says nothing of the host's pace.
        try await presenter.present(damage: nil) { _ in }
        try await presenter.receive(.frameDone(frame: 3), arrival: start.advanced(by: .milliseconds(500)))
        #expect(presenter.frameInterval == .milliseconds(10))
        presenter.close()
    }
}
