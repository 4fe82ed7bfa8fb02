// `demo-share activity <notes|post|markup>`: the demo's share activities, run by the launcher
// from their manifests (Services/notes.json, post.json, markup.json).
import ArgumentParser
import RemoteService

struct ActivityCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "activity",
        abstract: "Run as one of the demo's share activities on the socket passed at fd 3 (the launcher runs it, by its manifest).")

    enum Kind: String, CaseIterable, ExpressibleByArgument {
        case notes, post, markup

        var identifier: String {
            switch self {
            case .notes: NotesController.identifier
            case .post: PostController.identifier
            case .markup: MarkupController.identifier
            }
        }

        var title: String {
            switch self {
            case .notes: NotesController.title
            case .post: PostController.title
            case .markup: MarkupController.title
            }
        }
    }

    @Argument(help: "Which activity.")
    var kind: Kind

    func run() async throws {
        let kind = self.kind
        // The identifier and title come from the manifest, through the launcher.
        await ServiceMain.exit(sharing: {
            switch kind {
            case .notes: NotesController()
            case .post: PostController()
            case .markup: MarkupController()
            }
        })
    }
}
