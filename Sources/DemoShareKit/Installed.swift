// `demo-share install`, `uninstall` and `paths`: activities installed in the XDG data folders
// (docs/Manifest.md, "Installed activities"), which every host command finds after its own.
import ArgumentParser
import FoundationEssentials
import Glibc
import RemoteHost

/// Checks a manifest, then copies it (its executable made absolute) and its icon into the
/// user's folder of installed activities.
struct Install: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Install an activity for this user: check its manifest, then copy it and its icon into $XDG_DATA_HOME/remoteview/manifests.",
        discussion: "A relative executable is resolved against the manifest's folder and written as an absolute path. The copy is named IDENTIFIER.json (its icon IDENTIFIER.png); installing again replaces it.")

    @Argument(help: ArgumentHelp("The manifest to install.", valueName: "manifest"))
    var manifest: String

    func run() throws {
        var warnings: [ManifestError] = []
        let loaded: ServiceManifest
        do { loaded = try ServiceRegistry.load(file: manifest, warnings: &warnings) } catch {
            throw DemoError("not installed: \(error)")
        }
        for warning in warnings { Syscall.writeStandardError("warning: \(warning)\n") }
        // Root's hosts run their services as uids of their own, and refuse an executable whose
        // mode keeps other users out (docs/Manifest.md, "Installed activities"): said now, not
        // only at the first launch.
        if Syscall.effectiveUserID == 0, let mode = (try? Syscall.status(ofPath: loaded.executablePath))?.st_mode, mode & (S_IROTH | S_IXOTH) != S_IROTH | S_IXOTH {
            Syscall.writeStandardError("warning: \(loaded.executablePath.escapedForTerminal()): its mode \(String(mode & 0o7777, radix: 8)) does not give other users o+rx, so a host run by root, whose services run as uids of their own, refuses to launch it (chmod o+rx it)\n")
        }
        let folder = ServiceRegistry.installedFolders[0]
        try makeFolder(folder, for: "the user's installed activities")
        var installed = loaded
        installed.executable = loaded.executablePath
        if let icon = loaded.icon {
            let name = loaded.identifier + ".png"
            try write(icon.pngData, to: folder + "/" + name)
            installed.display.icon = name
        } else {
            installed.display.icon = nil
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let path = folder + "/" + loaded.identifier + ".json"
        try write(Array(try encoder.encode(installed)) + [0x0A], to: path)
        print("installed \(loaded.identifier.escapedForTerminal()) at \(path.escapedForTerminal())")
    }

    /// Writes `bytes` to `path` whole (Foundation's atomic write: a temporary file renamed over it).
    private func write(_ bytes: [UInt8], to path: String) throws {
        do {
            try Data(bytes).write(to: URL(filePath: path), options: .atomic)
        } catch {
            throw DemoError("cannot write \(path.escapedForTerminal()): \(error)")
        }
    }
}

/// Removes an activity the user installed.
struct Uninstall: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Remove an activity installed for this user (its manifest and icon in $XDG_DATA_HOME/remoteview/manifests).")

    @Argument(help: ArgumentHelp("The activity's identifier.", valueName: "identifier"))
    var identifier: String

    func run() throws {
        let folder = ServiceRegistry.installedFolders[0]
        let path = folder + "/" + identifier + ".json"
        guard !identifier.contains("/"), unlink(path) == 0 else {
            throw DemoError("\(identifier.escapedForTerminal()) is not installed for this user (no \(path.escapedForTerminal()))")
        }
        unlink(folder + "/" + identifier + ".png")
        print("uninstalled \(identifier.escapedForTerminal())")
    }
}

/// Every folder a host command scans for manifests, in order.
struct Paths: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print every folder scanned for manifests, in order: the demo's own (or --services), the user's installed activities, the system's.")

    @OptionGroup var options: HostOptions

    func run() throws {
        let named = try options.folders(), installed = options.installed ? ServiceRegistry.installedFolders : []
        for folder in named { print("\(options.serviceFolders.isEmpty ? "demo" : "--services"): \(folder.escapedForTerminal())") }
        for (index, folder) in installed.enumerated() {
            let exists = Syscall.isDirectory(folder) ? "" : " (none yet)"
            print("\(index == 0 ? "user" : "system"): \(folder.escapedForTerminal())\(exists)")
        }
    }
}
