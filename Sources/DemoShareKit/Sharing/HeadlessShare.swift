// One share run start to end without a screen: the share sheet, perform, the view presented
// headless, the updates reported, the script run, the outcome awaited and its items written.
// What `demo-share share` and `demo-share view` do.
import ArgumentParser
import FoundationEssentials
import RemoteHost

struct HeadlessShare {
    var activity: String
    var items: [ShareItem]
    var script: ShareScript?
    var width: Int
    var height: Int
    var scalePermille: Int
    var snapshotFolder: String?
    var outputFolder: String?
    var timeout: Duration
    var reporter: ShareReporter

    /// Runs the share and returns its outcome (after writing its items to ``outputFolder``).
    ///
    /// - Throws: `DemoError` when the sheet does not offer the activity (with the
    ///   reason), ``ShareDriver/StepFailed`` for a script line that failed, or what launching,
    ///   presenting or writing failed with; the share is cancelled and its process stopped first.
    func run(registry: ServiceRegistry, preferences: SharePreferences?, configuration: Launcher.Configuration) async throws -> ShareOutcome {
        let sheet = ShareSheet(registry: registry, items: items, preferences: preferences)
        guard let activity = sheet.activity(activity) else {
            if let reason = sheet.explanation(for: activity) {
                throw DemoError("\(activity) does not take these items: \(reason)")
            }
            let offered = sheet.activities.map(\.identifier)
            throw DemoError("no activity \(activity) is registered (these items can go to: \(offered.isEmpty ? "none" : offered.joined(separator: ", ")))")
        }
        return try await withLauncher(registry: registry, configuration: configuration) { launcher in
            let session = try await sheet.perform(activity, launcher: launcher)
            reporter.note("sharing \(items.count) item\(items.count == 1 ? "" : "s") with \(activity.title) (\(activity.identifier))")
            let log = UpdateLog()
            let driver = ShareDriver(session: session, log: log, reporter: reporter, snapshotFolder: snapshotFolder,
                                     timeout: timeout, scalePermille: scalePermille)
            async let reported: Void = {
                for await update in session.updates {
                    reporter.update(update)
                    log.append(update)
                }
                log.end()
            }()
            do {
                try await driver.present(width: width, height: height)
                if let script { try await driver.run(script) }
                do { _ = try await driver.first(nil, from: 0) } catch {
                    throw ShareDriver.StepFailed(description: script == nil
                        ? "no outcome within \(timeout): \(activity.title) waits for the user, so a headless run needs a --script that finishes it"
                        : "no outcome within \(timeout) after the script (\(script!.source)) ended")
                }
            } catch {
                reporter.endProgress()
                let outcome = await session.cancel(reason: "the headless host stopped: \(error)")
                reporter.note("cancelled the share: \(outcome)")
                await session.close()
                await reported
                throw error
            }
            await reported
            let outcome = await session.outcome
            let written = try write(outcome.items)
            reporter.outcome(outcome, written: written)
            await session.close()
            return outcome
        }
    }

    /// Writes `items` into ``outputFolder``; returns each one's path, `nil` without a folder.
    private func write(_ items: [ShareItem]) throws -> [String?] {
        guard let outputFolder else { return items.map { _ in nil } }
        return try writeReturnedItems(items, to: outputFolder)
    }
}

/// Writes a share's returned `items` into `folder` (files by their names, text and URLs as
/// item-N.txt); returns each one's path.
func writeReturnedItems(_ items: [ShareItem], to folder: String) throws -> [String] {
    var used: Set<String> = []
    return try items.enumerated().map { index, item in
        var name = item.fileName ?? "item-\(index + 1).txt"
        if used.contains(name) { name = "\(index + 1)-\(name)" }
        used.insert(name)
        let path = folder + "/" + name
        do { try Data(try item.data(limit: ShareLimits.maxFileBytes)).write(to: URL(filePath: path)) } catch {
            throw DemoError("cannot write returned item \(index + 1) to \(path): \(error)")
        }
        return path
    }
}

/// `--size WIDTHxHEIGHT`.
func parseSize(_ text: String, option: String = "--size") throws -> (width: Int, height: Int) {
    let parts = text.lowercased().split(separator: "x").compactMap { Int($0) }
    guard parts.count == 2 else { throw ValidationError("\(option) must be WIDTHxHEIGHT in points, e.g. 480x360; not \(text)") }
    if let problem = SurfaceSize(width: parts[0], height: parts[1]).problem { throw ValidationError("\(option) \(text): \(problem)") }
    return (parts[0], parts[1])
}

/// Makes `folder` (and its parents) if missing.
func makeFolder(_ folder: String, for option: String) throws {
    do { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) } catch {
        throw DemoError("\(option) \(folder): cannot make the folder: \(error)")
    }
}
