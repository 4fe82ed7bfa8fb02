// The benchmarks' service: as lean as a RemoteView service gets (the SDK and the Swift runtime
// only), so that figures measure the framework, not a service's own start-up.
//   requests: "echo" (payload and attachments back), "started" (when main was reached and the
//   request handled, CLOCK_MONOTONIC ns), "count" (one-way messages since the last
//   count), "usage" (CPU time and context switches so far), "memory" (heap in use and RSS, for remoteview-stress), "delay MS" (replies after MS
//   milliseconds: a request still outstanding when remoteview-stress killstorm strikes), "stream X Y W H FRAMES" (repaint that region every frame, as fast as frame_done
//   allows), "tick FPS SECONDS" (repaint everything FPS times a second)
//   "share.complete" (finishes the view's share, replying when), and it takes shares
//   view: a solid colour, plus the stream's stamped frames; as com.example.bench.text (and .text.cold), a form of
//   text instead (labels in Latin, Arabic, Hebrew, Japanese and emoji, a text field, buttons)
import Glibc
import RemoteService
import Synchronization

let received = Atomic<Int>(0)

func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

/// When this process reached its own code (after exec, the loader and the Swift runtime).
let reachedMain = monotonicNanoseconds()

/// Repaints a region per frame and stamps it: the frame number, then CLOCK_MONOTONIC (bubblewrap
/// makes no time namespace, so it is the host's clock too), a byte per pixel in blue, written last.
final class StreamController: ViewController {
    var region = Rect.zero
    var remaining = 0
    var frame: UInt32 = 0
    var ticker: Task<Void, Never>?
    lazy var canvas = CanvasView { [unowned self] context, bounds in
        frame &+= 1
        let shade = Double(frame % 200) / 255
        // Every pixel is painted opaquely (the canvas says so), each once: the rest of the
        // bounds (clipped to the redraw, so usually nothing) and the region.
        if !region.isEmpty && region != bounds { context.fill(bounds, with: Color(argb: 0xFF20_2020)) }
        context.fill(region.isEmpty ? bounds : region, with: Color(red: shade, green: 0.5, blue: 1 - shade))
        let stamp = monotonicNanoseconds()
        for index in 0..<12 {
            let byte = index < 4 ? (frame >> (8 * UInt32(index))) & 0xFF : UInt32((stamp >> (8 * UInt64(index - 4))) & 0xFF)
            context.fill(Rect(x: region.minX + Double(index), y: region.minY, width: 1, height: 1), with: Color(argb: 0xFF00_0000 | byte))
        }
    }

    override func loadView() {
        canvas.isOpaque = true
        view = canvas
    }

    override func handleRequest(_ request: ServiceMessage) async throws -> ServiceMessage? {
        let numbers = (request.text ?? "").split(separator: " ").compactMap { Double($0) }
        switch request.type {
        case "stream":
            guard numbers.count == 5 else { throw ServiceFailure(domain: "bench", code: 1, message: "stream X Y W H FRAMES") }
            region = Rect(x: numbers[0], y: numbers[1], width: numbers[2], height: numbers[3])
            remaining = Int(numbers[4])
            canvas.animate(duration: .zero) { [weak self] _ in self?.step() }
            return ServiceMessage(type: "streaming", text: String(frame &+ UInt32(remaining)))
        case "share.complete":
            // Finishes the share this view was shown for; the reply carries when (CLOCK_MONOTONIC
            // ns, the host's clock too), so the host can time complete → its outcome.
            guard let context = extensionContext else { throw ServiceFailure(domain: "bench", code: 2, message: "no share on this connection") }
            let stamp = monotonicNanoseconds()
            context.complete()
            return ServiceMessage(type: "completing", text: String(stamp))
        case "tick":
            guard numbers.count == 2 else { throw ServiceFailure(domain: "bench", code: 1, message: "tick FPS SECONDS") }
            region = canvas.bounds
            let interval = Duration.seconds(1) / numbers[0], end = ContinuousClock.now + .seconds(numbers[1])
            ticker?.cancel()
            ticker = Task { [weak self] in
                var next = ContinuousClock.now
                while ContinuousClock.now < end, !Task.isCancelled {
                    self?.canvas.setNeedsDisplay()
                    next += interval
                    try? await Task.sleep(until: next)
                }
            }
            return ServiceMessage(type: "ticking")
        default:
            return nil
        }
    }

    private func step() {
        guard remaining > 0 else { return }
        remaining -= 1
        canvas.setNeedsDisplay(region)
        if remaining > 0 { canvas.animate(duration: .zero) { [weak self] _ in self?.step() } }
    }
}

// The identifier to handshake as: the manifest's, which every benchmark manifest passes as the
// first argument (one executable serves them all, and the host refuses another identifier).
let identifier = CommandLine.arguments.dropFirst().first ?? "com.example.bench"

// Every request but "delay" is answered inline on the connection's loop (the synchronous form);
// "delay" waits, so it goes to the async handler.
/// A view of text, as an activity's: what a present costs when the first frame lays out and draws
/// text (the same strings and views in every build, whatever draws the text).
final class TextController: ViewController {
    override func loadView() {
        let lines = ["Share 3 items with…", "Look at this sunset — what a view!", "مرحبا بالعالم", "שלום עולם",
                     "こんにちは世界", "👍🏽 🎉 Grüße, Ελλάδα, Россия"]
        let labels = lines.map { Label(text: $0) }
        let field = TextField(text: "A note with مرحبا and こんにちは")
        let buttons = StackView(axis: .horizontal, spacing: 12, distribution: .fillEqually,
                                arrangedSubviews: [Button(title: "Cancel"), Button(title: "Save")])
        let stack = StackView(axis: .vertical, spacing: 6, insets: EdgeInsets(all: 12), arrangedSubviews: labels + [field, buttons])
        stack.backgroundColor = Color(argb: 0xFFFF_FFFF)
        view = stack
    }
}

await ServiceMain.exit(serving: identifier, shareTitle: "Benchmark share",
                       viewController: { @MainActor @Sendable in identifier.contains(".text") ? TextController() : StreamController() }, onSynchronousRequest: { request, _ in
    switch request.type {
    case "echo":
        return ServiceMessage(type: "echo", payload: request.payload, attachments: request.attachments)
    case "started":
        // For the cold start's phases: when main was reached, and when this request was handled.
        return ServiceMessage(type: "started", text: "\(reachedMain) \(monotonicNanoseconds())")
    case "count":
        return ServiceMessage(type: "count", text: String(received.exchange(0, ordering: .relaxed)))
    case "delay":
        // For remoteview-stress killstorm: a request that is outstanding for a while. Cancelled
        // (the host gave up on it), it throws and no reply is sent.
        guard let milliseconds = request.text.flatMap({ Int($0) }), (0...60_000).contains(milliseconds) else {
            throw ServiceFailure(domain: "bench", code: 1, message: "delay MS (0…60000)")
        }
        return nil
    case "usage":
        // For remoteview-bench's cost per operation: "CPU_US SWITCHES", this process's CPU time
        // (user + system, every thread) and context switches so far.
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        let cpu = (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1_000_000 + usage.ru_utime.tv_usec + usage.ru_stime.tv_usec
        return ServiceMessage(type: "usage", text: "\(cpu) \(usage.ru_nvcsw + usage.ru_nivcsw)")
    case "locks":
        // For remoteview-bench --counts: this process's lock acquisitions so far (a build with
        // the LockCounts trait only).
        #if LockCounts
        // The total, then where they were made ("file:line: count", most first).
        return ServiceMessage(type: "locks", text: ([String(LockCounter.total)] + LockCounter.sites.prefix(25).map { "\($0.site): \($0.count)" }).joined(separator: "\n"))
        #else
        throw ServiceFailure(domain: "bench", code: 2, message: "locks: not a counting build (swift build --traits LockCounts)")
        #endif
    case "memory":
        // For remoteview-stress soak: "HEAP RSS", this process's heap in use (mallinfo2) and resident memory, bytes.
        let usage = MemoryUsage.current()
        return ServiceMessage(type: "memory", text: "\(usage.heapBytes ?? 0) \(usage.residentBytes)")
    default:
        throw ServiceFailure(domain: "bench", code: 404, message: "unknown request \(request.type)")
    }
}, onRequest: { request, _ in
    // Only what the synchronous handler left: "delay", whose text it has checked.
    try await Task.sleep(for: .milliseconds(request.text.flatMap { Int($0) } ?? 0))
    return ServiceMessage(type: "delay", text: request.text ?? "")
}, onSynchronousMessage: { _, _ in
    // Inline on the connection's loop, with no task (the synchronous form).
    received.add(1, ordering: .relaxed)
})
