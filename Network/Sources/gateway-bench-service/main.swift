// gateway-bench's service, as lean as a RemoteView service gets: "echo" (the payload back) and
// "size" (the bytes of the attachments it was sent, fstat'ed: what crossed), for the gateway's
// figures (Network/Sources/gateway-bench). As an identifier ending in ".share", a share activity
// instead, whose view reports it ready as soon as it appears.
import Glibc
import RemoteService

/// The share activity: a solid view, ready at once.
final class ReadyController: ViewController {
    override func loadView() {
        view = CanvasView { context, bounds in context.fill(bounds, with: Color(red: 0.2, green: 0.4, blue: 0.8)) }
    }

    override func viewDidAppear() {
        extensionContext?.setProgress(nil, state: .ready)
    }
}

let identifier = CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "com.example.gateway-bench"
if identifier.hasSuffix(".share") {
    await ServiceMain.exit(sharing: identifier, title: "Bench share") { ReadyController() }
}

await ServiceMain.exit(serving: CommandLine.arguments.count > 1 ? CommandLine.arguments[1] : "com.example.gateway-bench",
                       onSynchronousRequest: { request, _ in
    switch request.type {
    case "echo":
        return ServiceMessage(type: "echo", payload: request.payload)
    case "size":
        var total = 0
        for attachment in request.attachments {
            guard let fd = attachment.take() else { continue }
            total += try MemoryFile(adopting: fd).size
        }
        return ServiceMessage(type: "size", text: String(total))
    default:
        throw ServiceFailure(domain: "gateway-bench", code: 404, message: "unknown request \(request.type)")
    }
})
