// A whole host, about 40 lines: shares a file with the first activity that takes it, follows its
// progress, and prints how the share ended, giving up after a minute. Compiled by `make test`,
// shown in RemoteHost's "Getting started" (DocC's @Snippet).
import RemoteHost

// snippet.hide
let arguments = ["share-a-file", "/usr/share/myapp/services", "/tmp/photo.png"]
// snippet.show
// share-a-file SERVICES-FOLDER FILE
guard arguments.count == 3 else { fatalError("usage: share-a-file SERVICES-FOLDER FILE") }
let registry = ServiceRegistry(scanning: [arguments[1]])
var configuration = Launcher.Configuration()
configuration.logger.logLevel = .warning            // the launcher's info lines off
try await withLauncher(registry: registry, configuration: configuration) { launcher in
    // A sealed memfd of the file's bytes: the activity never sees the path.
    let item = try ShareItem.file(contentsOf: arguments[2])
    let sheet = ShareSheet(registry: registry, items: [item])
    guard let activity = sheet.activities.first else {
        for explanation in sheet.explanations { print("not offered: \(explanation)") }
        return
    }
    let session = try await sheet.perform(activity, launcher: launcher)
    try await session.view.present(width: 480, height: 360)   // it draws; a window would show it
    let progress = Task {
        for await update in session.updates { print("\(activity.title): \(update)") }
    }
    do {
        switch try await session.outcome(timeout: .seconds(60)) {
        case .completed(let items): print("done: \(items.count) item(s) back")
        case .cancelled: print("cancelled")
        case .failed(let message): print("failed: \(message)")
        case .interrupted(let error): print("the activity died: \(error.reason)")
        }
    } catch {
        print("no answer after a minute: \(await session.cancel(reason: "timed out"))")
    }
    progress.cancel()
    await session.close()
}
