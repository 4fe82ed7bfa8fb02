// `demo-share animation`: a view that repaints all of itself on every frame it is allowed to draw,
// for `request animate SECONDS` (then it is still): what `demo-share window --bench` shows to
// measure the window's frame rate. Run by the launcher from Services/animation.json.
import ArgumentParser
import RemoteService

struct AnimationCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "animation",
        abstract: "Run as the demo's animation service on the socket passed at fd 3 (the launcher runs it, by its manifest).")

    static let identifier = "com.example.demo-share.animation"

    func run() async throws {
        await ServiceMain.exit(serving: Self.identifier, viewController: { AnimationController() }) { request, _ in
            throw ServiceFailure.unknownRequest(request.type, handler: Self.identifier)
        }
    }
}

/// Fills its whole view with a shade that changes every frame, while an `animate` request lasts.
final class AnimationController: ViewController {
    private var frame = 0
    private var until: ContinuousClock.Instant?
    private lazy var canvas = CanvasView { [unowned self] context, bounds in
        let shade = Double(frame % 200) / 255
        context.fill(bounds, with: Color(red: shade, green: 0.45, blue: 1 - shade))
    }

    override func loadView() {
        canvas.isOpaque = true
        view = canvas
    }

    override func handleRequest(_ request: ServiceMessage) async throws -> ServiceMessage? {
        guard request.type == "animate" else { return nil }
        guard let seconds = Double(request.text ?? ""), seconds > 0, seconds <= 600 else {
            throw ServiceFailure(domain: AnimationCommand.identifier, code: 1, message: "animate takes seconds, 0 to 600")
        }
        until = .now.advanced(by: .milliseconds(Int64(seconds * 1000)))
        step()
        return ServiceMessage(type: "animating")
    }

    /// One more frame, drawn when the host allows it (the toolkit paces animations by frame_done).
    private func step() {
        guard let until, ContinuousClock.now < until else {
            self.until = nil
            return
        }
        frame += 1
        canvas.setNeedsDisplay()
        canvas.animate(duration: .zero) { [weak self] _ in self?.step() }
    }
}
