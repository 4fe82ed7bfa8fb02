// gateway-bench's remote-view figures (docs/Benchmarks.md, "Remote views"): the demo's Notes
// and animation services on the gateway's side, a host's launcher here.
import ArgumentParser
import Foundation
import Glibc
import Logging
@_spi(RemoteViewTransport) import RemoteHost
import RemoteGateway

/// One remote-view figure: a value, its unit, and how it was made.
struct ViewFigure: Codable {
    var name: String
    var value: Double
    var unit: String
    var detail: String
}

/// The view figures, as the host measures them: through `gateway` (its `GatewayLink`'s wire
/// counters), and locally for the baselines (`local`: the same manifests, here).
struct ViewBench {
    let gateway: GatewayClient
    let local: String
    /// The link's added delay each way (ms), for the figures' names.
    let delay: Int
    let photoSeconds: Double
    let samples: Int
    /// Only the photograph's frames (a gateway forcing one codec).
    let photoOnly: Bool
    let label: String

    static let animation = "com.example.demo-share.animation"
    static let notes = "com.example.demo-share.notes"

    func configuration() -> Launcher.Configuration {
        var quiet = Logger(label: "gateway-bench")
        quiet.logLevel = .error
        var configuration = Launcher.Configuration(hostIdentifier: "com.example.gateway-bench-host")
        configuration.logger = quiet
        return configuration
    }

    func run() async throws -> [ViewFigure] {
        var configuration = configuration()
        let connector = try GatewayConnector(gateways: [(name: "bench", client: gateway)], logger: configuration.logger)
        configuration.remoteServices = connector
        var figures: [ViewFigure] = []
        let roundTrip = Double(2 * delay)
        if !photoOnly {
            let localRegistry = ServiceRegistry(scanning: [local], includingInstalled: false)
            let localStart = try await withLauncher(registry: localRegistry, configuration: self.configuration()) { launcher in
                try await coldStarts(launcher, Self.animation)
            }
            let remoteStart = try await withLauncher(registry: ServiceRegistry(manifests: []), configuration: configuration) { launcher in
                try await coldStarts(launcher, Self.animation + "@bench")
            }
            figures.append(ViewFigure(name: "cold start → first frame, local", value: localStart, unit: "ms", detail: "median of \(samples): a new process of the animation service, its view presented at 320×200"))
            figures.append(ViewFigure(name: "cold start → first frame, remote (\(label))", value: remoteStart, unit: "ms",
                                      detail: String(format: "local + %.1f ms%@", remoteStart - localStart,
                                                     roundTrip > 0 ? String(format: " = %.1f link round trips", (remoteStart - localStart) / roundTrip) : "")))
        }
        figures += try await withLauncher(registry: ServiceRegistry(manifests: []), configuration: configuration) { launcher in
            var figures: [ViewFigure] = []
            if !photoOnly {
                figures += try await typing(launcher, connector)
                figures += try await square(launcher, connector)
            }
            figures += try await photo(launcher, connector)
            return figures
        }
        return figures
    }

    func milliseconds(_ start: ContinuousClock.Instant) -> Double {
        let elapsed = ContinuousClock.now - start
        return Double(elapsed.components.seconds) * 1e3 + Double(elapsed.components.attoseconds) / 1e15
    }

    static func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
    static func percentile(_ values: [Double], _ p: Double) -> Double {
        let sorted = values.sorted()
        return sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)]
    }

    /// A new process's view, presented → its first frame, `samples` times (after one to warm up).
    func coldStarts(_ launcher: Launcher, _ service: String) async throws -> Double {
        var times: [Double] = []
        for index in 0...samples {
            let connection = launcher.connection(to: service)
            let view = RemoteView(connection: connection)
            var damage = view.damage.makeAsyncIterator()
            let start = ContinuousClock.now
            try await view.present(width: 320, height: 200)
            _ = await damage.next()
            if index > 0 { times.append(milliseconds(start)) }
            await connection.invalidate()
        }
        return Self.median(times)
    }

    /// Bytes on the wire per character typed into Notes: each character typed, then settled.
    func typing(_ launcher: Launcher, _ connector: GatewayConnector) async throws -> [ViewFigure] {
        let (services, _) = await launcher.remoteServices()
        let registry = ServiceRegistry(manifests: []).adding(remote: services)
        let sheet = ShareSheet(registry: registry, items: [try .text("Hello")])
        guard let activity = sheet.activity(Self.notes) else { throw ValidationError("Notes is not offered: \(sheet.explanations)") }
        let session = try await sheet.perform(activity, launcher: launcher)
        try await session.view.present(width: 480, height: 320)
        _ = try await session.wait(for: .ready, timeout: .seconds(30))
        try await session.view.settle()
        let text = "the quick brown fox jumps"
        let before = connector.wireBytes(on: "bench") ?? WireBytes()
        for character in text {
            try await session.view.type(String(character))
            try await session.view.settle()
        }
        let after = connector.wireBytes(on: "bench") ?? WireBytes()
        _ = await session.cancel()
        await session.close()
        let count = Double(text.count)
        let frames = Double(after.viewDown - before.viewDown) / count
        return [ViewFigure(name: "bytes on the wire per character typed into Notes (\(label))", value: Double(after.total - before.total) / count, unit: "B",
                           detail: String(format: "all streams, each character settled: frames %.0f B down, presented %.0f B up, input %.0f B up, sync %.0f B down, Connect (settle, tree) %.0f B up %.0f B down",
                                          frames, Double(after.viewUp - before.viewUp) / count, Double(after.inputUp - before.inputUp) / count,
                                          Double(after.inputDown - before.inputDown) / count,
                                          Double(after.connectUp - before.connectUp) / count, Double(after.connectDown - before.connectDown) / count))]
    }

    /// Frames and bytes while the animation runs `mode` for `seconds`, after a second's warm-up.
    func animate(_ view: RemoteView, _ connector: GatewayConnector, mode: String, seconds: Double) async throws -> (frames: Int, elapsed: Double, bytes: WireBytes) {
        _ = try await view.connection.request(ServiceMessage(type: "animate", text: "\(Int(seconds.rounded(.up)) + 2) \(mode)"), timeout: .seconds(10))
        var damage = view.damage.makeAsyncIterator()
        let warm = ContinuousClock.now
        while milliseconds(warm) < 1000 { _ = await damage.next() }
        let before = connector.wireBytes(on: "bench") ?? WireBytes()
        let start = ContinuousClock.now
        var frames = 0
        while milliseconds(start) < seconds * 1000 {
            _ = await damage.next()
            frames += 1
        }
        let elapsed = milliseconds(start)
        let after = connector.wireBytes(on: "bench") ?? WireBytes()
        var delta = WireBytes()
        delta.viewDown = after.viewDown - before.viewDown
        delta.viewUp = after.viewUp - before.viewUp
        delta.connectDown = after.connectDown - before.connectDown
        delta.connectUp = after.connectUp - before.connectUp
        return (frames, elapsed, delta)
    }

    /// The same animation's frames, one by one (`.manual`: the next is drawn once this one is
    /// presented), encoded here as the gateway would, with lz4 and with zstd, finding scrolls
    /// and not: what each way of sending would put on the wire.
    func compression(_ launcher: Launcher) async throws -> [ViewFigure] {
        let connection = launcher.connection(to: Self.animation + "@bench")
        let view = RemoteView(connection: connection, presentation: .manual)
        var damage = view.damage.makeAsyncIterator()
        try await view.present(width: 1280, height: 720)
        _ = await damage.next()
        try await view.framePresented()
        _ = try await view.connection.request(ServiceMessage(type: "animate", text: "60 photo"), timeout: .seconds(10))
        let ways: [(codec: ViewFrame.Codec, scrolls: Bool)] = [(.lz4, true), (.zstd, true), (.lz4, false), (.zstd, false)]
        var encoders = ways.map { ViewFrameEncoder(detectsScrolling: $0.scrolls) }
        var bytes = [Int](repeating: 0, count: ways.count)
        // The first frames after the request are the animation catching up (several steps
        // drawn as one): a warm-up, encoded but not counted.
        let (warmUp, frames) = (10, 60)
        for index in 0..<(warmUp + frames) {
            guard let rects = await damage.next() else { break }
            view.withImage { image in
                image.withUnsafePixels { pixels in
                    for (way, (codec, _)) in ways.enumerated() {
                        let encoded = encoders[way].encode(frame: UInt64(index), pixels: pixels, width: image.width, height: image.height, damage: rects, codec: codec)
                        if index >= warmUp { bytes[way] += encoded.wireBytes }
                    }
                }
            }
            try await view.framePresented()
        }
        await connection.invalidate()
        return ways.enumerated().map { way, choice in
            ViewFigure(name: "scrolling photo 1280×720: compression with \(choice.codec), scrolls \(choice.scrolls ? "found" : "not looked for")", value: Double(frames * 1280 * 720 * 4) / Double(bytes[way]), unit: "×",
                       detail: String(format: "%.0f B per frame on the wire, over %d frames (after %d) encoded here as the gateway would", Double(bytes[way]) / Double(frames), frames, warmUp))
        }
    }

    /// A 64×64 square changing, alone.
    func square(_ launcher: Launcher, _ connector: GatewayConnector) async throws -> [ViewFigure] {
        let connection = launcher.connection(to: Self.animation + "@bench")
        let view = RemoteView(connection: connection)
        try await view.present(width: 320, height: 200)
        try await view.settle()
        let (frames, elapsed, bytes) = try await animate(view, connector, mode: "square", seconds: 2)
        await connection.invalidate()
        return [ViewFigure(name: "a 64×64 damage frame on the wire (\(label))", value: Double(bytes.viewDown + bytes.viewUp) / Double(frames), unit: "B",
                           detail: String(format: "a flat square changing shade: %d frames in %.1f s, View %d B down, %d B up", frames, elapsed / 1000, bytes.viewDown, bytes.viewUp))]
    }

    /// The photograph scrolling at 1280×720, full damage: frames per second, bytes per frame,
    /// the ratio to raw pixels; then input → the frame that shows it, while it scrolls.
    func photo(_ launcher: Launcher, _ connector: GatewayConnector) async throws -> [ViewFigure] {
        let connection = launcher.connection(to: Self.animation + "@bench")
        let view = RemoteView(connection: connection)
        try await view.present(width: 1280, height: 720)
        try await view.settle()
        let (frames, elapsed, bytes) = try await animate(view, connector, mode: "photo", seconds: photoSeconds)
        let fps = Double(frames) / (elapsed / 1000)
        let perFrame = Double(bytes.viewDown) / Double(frames)
        var figures = [
            ViewFigure(name: "scrolling photo 1280×720, full damage: frames per second (\(label))", value: fps, unit: "fps",
                       detail: String(format: "%d frames in %.1f s; %.0f B per frame down, %.1f Mbit/s", frames, elapsed / 1000, perFrame, perFrame * fps * 8 / 1e6)),
            ViewFigure(name: "scrolling photo 1280×720: compression, raw pixels / bytes on the wire (\(label))", value: Double(1280 * 720 * 4) / perFrame, unit: "×",
                       detail: String(format: "%.0f B per frame against %d raw", perFrame, 1280 * 720 * 4)),
        ]
        guard !photoOnly else {
            await connection.invalidate()
            return figures
        }
        figures += try await compression(launcher)
        // Input → visible: a press toggles the marker at (0, 0)…(31, 31); the frame that shows
        // the new state is the one input reached. Stamps on CLOCK_MONOTONIC (ContinuousClock)
        // at both ends of this one process: the press sent, the frame composited.
        _ = try await view.connection.request(ServiceMessage(type: "animate", text: "\(samples * 2 + 30) photo"), timeout: .seconds(10))
        var damage = view.damage.makeAsyncIterator()
        var latencies: [Double] = []
        var marked = view.withImage { $0.pixel(x: 8, y: 8) } == 0xFFFF_00FF
        for _ in 0..<(samples * 2) {
            let start = ContinuousClock.now
            try await view.click(x: 200, y: 200)
            marked.toggle()
            while (view.withImage { $0.pixel(x: 8, y: 8) } == 0xFFFF_00FF) != marked { _ = await damage.next() }
            latencies.append(milliseconds(start))
        }
        await connection.invalidate()
        figures.append(ViewFigure(name: "input → visible frame while the photo scrolls, p95 (\(label))", value: Self.percentile(latencies, 0.95), unit: "ms",
                                  detail: String(format: "median %.1f ms over %d presses; the stream's frame time %.1f ms%@", Self.median(latencies), latencies.count, 1000 / fps,
                                                 delay > 0 ? String(format: ", link round trip %d ms", 2 * delay) : "")))
        return figures
    }
}
