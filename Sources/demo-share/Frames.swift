// `demo-share frames`: how fast a service's frames reach the host. The stream service repaints
// a region every frame (as fast as the host's frame_done allows) and stamps each frame with
// CLOCK_MONOTONIC, written into the region's first pixels just before the commit goes out;
// the host reads the stamp back from its composited image, so latency is commit → composited
// (+ the host's damage notification), measured on one clock.
import ArgumentParser
import CProto
import Glibc
import RemoteHost
import RemoteService

/// Monotonic nanoseconds (the same clock in and out of the sandbox: bubblewrap does not make
/// a time namespace).
func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

/// The service side: a canvas repainting its region every frame while streaming.
final class StreamController: ViewController {
    var region = Rect.zero
    var remaining = 0
    var frame: UInt32 = 0
    lazy var canvas = CanvasView { [unowned self] context, bounds in
        frame &+= 1
        let shade = Double(frame % 200) / 255
        context.fill(region, with: Color(red: shade, green: 0.5, blue: 1 - shade))
        // The stamp, written last: the frame number, then the time, a byte per pixel in blue.
        let stamp = monotonicNanoseconds()
        for index in 0..<12 {
            let byte = index < 4 ? (frame >> (8 * UInt32(index))) & 0xFF : UInt32((stamp >> (8 * UInt64(index - 4))) & 0xFF)
            context.fill(Rect(x: region.minX + Double(index), y: region.minY, width: 1, height: 1), with: Color(argb: 0xFF00_0000 | byte))
        }
    }

    override func loadView() { view = canvas }

    /// "stream X Y WIDTH HEIGHT FRAMES": repaint that region for that many frames; the reply
    /// is the number the last of them will carry.
    override func handleRequest(_ request: ServiceMessage) async throws -> ServiceMessage? {
        guard request.type == "stream" else { return nil }
        let numbers = (request.text ?? "").split(separator: " ").compactMap { Double($0) }
        guard numbers.count == 5 else { throw ServiceFailure(domain: "com.example.demo-share", code: 1, message: "stream X Y WIDTH HEIGHT FRAMES") }
        region = Rect(x: numbers[0], y: numbers[1], width: numbers[2], height: numbers[3])
        remaining = Int(numbers[4])
        canvas.animate(duration: .zero) { [weak self] _ in self?.step() }
        return ServiceMessage(type: "streaming", text: String(frame &+ UInt32(remaining)))
    }

    /// Called once per frame, as the frame is prepared (after the host's frame_done of the
    /// last one): damages the region for this frame and asks for the next.
    private func step() {
        guard remaining > 0 else { return }
        remaining -= 1
        canvas.setNeedsDisplay(region)
        if remaining > 0 { canvas.animate(duration: .zero) { [weak self] _ in self?.step() } }
    }
}

struct Frames: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Measure frame latency (commit → composited on the host) and frames per second, full 1920×1080 and a 64×64 region.")

    @OptionGroup var options: HostOptions

    @Option(help: "Frames per measurement (after 30 of warm-up).")
    var frames = 300

    func run() async throws {
        rv_stdout_line_buffered()
        let registry = ServiceRegistry(scanning: [try options.folder()])
        let count = frames
        try await withLauncher(registry: registry, configuration: options.launcherConfiguration()) { launcher in
            let view = RemoteView(connection: launcher.connection(to: "com.example.demo-share.stream"))
            try await view.present(width: 1920, height: 1080)
            try await view.settle()
            var damage = view.damage.makeAsyncIterator()
            for (name, region) in [("1920×1080 full damage", PixelRect(x: 0, y: 0, width: 1920, height: 1080)),
                                   ("64×64 damage", PixelRect(x: 928, y: 508, width: 64, height: 64))] {
                var latencies: [Double] = []
                var started: UInt64 = 0
                var finished: UInt64 = 0
                for (phase, frames) in [("warm-up", 30), ("measured", count)] {
                    let reply = try await view.connection.request(ServiceMessage(type: "stream", text: "\(region.x) \(region.y) \(region.width) \(region.height) \(frames)"))
                    guard let last = reply.text.flatMap({ UInt32($0) }) else { throw ValidationError("the stream service did not say its last frame") }
                    started = monotonicNanoseconds()
                    // Every frame's damage is announced; a slow reader may miss some (the stream
                    // keeps the newest), so the frame number in the pixels says when it is done.
                    var frame: UInt32 = 0
                    while frame != last, await damage.next() != nil {
                        let now = monotonicNanoseconds()
                        let image = view.image
                        var stamp: UInt64 = 0
                        frame = 0
                        for index in 0..<4 { frame |= (image.pixel(x: region.x + index, y: region.y) & 0xFF) << (8 * UInt32(index)) }
                        for index in 0..<8 { stamp |= UInt64(image.pixel(x: region.x + 4 + index, y: region.y) & 0xFF) << (8 * UInt64(index)) }
                        if phase == "measured" { latencies.append(Double(now &- stamp) / 1000) }
                    }
                    finished = monotonicNanoseconds()
                }
                let elapsed = Double(finished - started) / 1e9
                latencies.sort()
                let fps = Double(count) / elapsed
                print("\(name): \(Int(fps.rounded())) fps; commit → composited median \(Self.micros(latencies[latencies.count / 2])), p99 \(Self.micros(latencies[latencies.count * 99 / 100])) (\(count) frames, \(latencies.count) sampled)")
            }
            // The limit for the full frame: one 8 MB copy, in this process.
            let bytes = 1920 * 1080 * 4
            let source = UnsafeMutableRawPointer.allocate(byteCount: bytes, alignment: 64), target = UnsafeMutableRawPointer.allocate(byteCount: bytes, alignment: 64)
            defer { source.deallocate(); target.deallocate() }
            memset(source, 1, bytes)
            memset(target, 0, bytes)
            var copies: [Double] = []
            for _ in 0..<50 {
                let start = monotonicNanoseconds()
                memcpy(target, source, bytes)
                copies.append(Double(monotonicNanoseconds() - start) / 1000)
            }
            copies.sort()
            print("for scale: one memcpy of a 1920×1080 frame (8 MB) takes \(Self.micros(copies[copies.count / 2])) median here")
        }
    }

    static func micros(_ value: Double) -> String {
        value >= 1000 ? "\((value / 100).rounded() / 10) ms" : "\(Int(value.rounded())) µs"
    }
}
