// A host shares items with an activity, shows its view, follows its progress and reads how the
// share ended, whether the activity finished or died on the way. Compiled by `make test`, shown
// in RemoteHost's "Getting started" (DocC's @Snippet), so it cannot fall behind the API.
import RemoteHost

// snippet.hide
func save(_ items: [ShareItem]) {}
func showGreyedOut(_ image: RemoteImage, _ why: String) {}
let registry = ServiceRegistry(scanning: ["/usr/share/myapp/services"])
// snippet.show
try await withLauncher(registry: registry) { launcher in
    let sheet = ShareSheet(registry: registry, items: [try .text("Sunset at the pier")])
    guard let activity = sheet.activities.first else { return }
    // Throws when the activity cannot be started or reached at all (it is not installed, its
    // sandbox refused it, it died before taking the items).
    let session = try await sheet.perform(activity, launcher: launcher)
    let progress = Task { for await update in session.updates { print(update) } }
    do {
        // These throw when the activity has died meanwhile (code interrupted, with how its
        // process ended), or when the share is over and its process is gone (shareEnded).
        try await session.view.present(width: 480, height: 320)
        try await session.view.settle()
    } catch {
        print("the activity's view: \(error)")
    }
    // Never throws: how the share ended, the activity's death included.
    switch await session.outcome {
    case .completed(let returned): save(returned)
    case .cancelled, .failed: break
    case .interrupted(let error): showGreyedOut(session.view.image, error.reason)
    }
    progress.cancel()
    await session.close()
}
