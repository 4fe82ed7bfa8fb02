import Glibc
import Logging
import RemoteCore

/// Which of the user's own fonts sandboxed services see, beside the system's
/// (``Launcher/Configuration/userFonts``).
///
/// A sandbox has the system's fonts (`/usr`, `/etc/fonts`, `/var/cache/fontconfig`), but not
/// the home folder, and bubblewrap's `--clearenv` takes `HOME` away: a font the user installed
/// for themselves would be missing there. So the launcher binds the user's font folder
/// read-only at `/run/remoteview/fonts`, and beside it, at `/run/remoteview/fontconfig`, a
/// fontconfig configuration that adds it to the system's (`FONTCONFIG_FILE`) and the
/// fontconfig cache of those fonts, which the host builds with `fc-cache`, so that services do
/// not scan them at each start. It is the one place at or below `/home` or `/root` a sandbox
/// shows, and the launcher binds it itself: a manifest's `sandbox.readOnlyPaths` still may not
/// name it (docs/Manifest.md, "The sandbox a manifest gets").
///
/// The folder is used only when it is a folder (its links resolved) that belongs to the host's
/// user and that no other user may write to; otherwise it is left out, and the log says why.
/// A launch never fails because of fonts.
///
/// A root host's services run as uids of their own, which cannot pass through `/root` (mode
/// 0700): the launcher copies root's font files to `cacheFolder/fonts` (`/var/lib/remoteview/fonts`),
/// which every user of the machine may read, and binds that copy.
public enum UserFontsPolicy: Sendable, Hashable {
    /// fontconfig's own user font folder: `$XDG_DATA_HOME/fonts`, else `~/.local/share/fonts`
    /// (the deprecated `~/.fonts` is not included). What the launcher makes of it is kept in
    /// `$XDG_CACHE_HOME/remoteview` (else `~/.cache/remoteview`), and for a root host in
    /// `/var/lib/remoteview`. The default.
    case standard
    /// The fonts in `folder`, with what the launcher makes of them kept in `cacheFolder`: in
    /// `cacheFolder/fontconfig`, the configuration and cache the sandboxes bind, and for a root
    /// host, in `cacheFolder/fonts`, the copy of the fonts they bind (every folder above
    /// `cacheFolder` must then let other users through, `o+x`).
    case folder(String, cacheFolder: String)
    /// None: services see the system's fonts only.
    case none

    /// The font folder and the cache folder, `nil` for ``none``.
    var locations: (folder: String, cacheFolder: String)? {
        switch self {
        case .standard:
            (XDGBaseDirectories.dataHome() + "/fonts",
             Syscall.effectiveUserID == 0 ? "/var/lib/remoteview" : XDGBaseDirectories.cacheHome() + "/remoteview")
        case .folder(let folder, let cacheFolder):
            (folder, cacheFolder)
        case .none:
            nil
        }
    }
}

/// What a sandbox binds of the user's fonts: two host folders, read-only.
struct UserFontsBinding: Sendable, Hashable {
    /// The user's font folder (its links resolved), or a root host's copy of it: bound at
    /// ``UserFontsKeeper/fontsMountPoint``.
    var fonts: String
    /// The folder holding `fonts.conf` and the fontconfig cache of `fonts`: bound at
    /// ``UserFontsKeeper/fontconfigMountPoint``.
    var fontconfig: String
}

/// The fontconfig files the launcher writes.
enum FontconfigFiles {
    /// The name of the configuration a sandbox reads, in ``UserFontsBinding/fontconfig``.
    static let sandboxConfigurationName = "fonts.conf"
    /// The name of the configuration `fc-cache` runs with on the host, in the cache folder
    /// (outside what is bound).
    static let cacheConfigurationName = "fc-cache.conf"

    /// The configuration a sandbox's fontconfig reads (`FONTCONFIG_FILE`): the system's
    /// (`/etc/fonts/fonts.conf`, so its folders and rules stay); the user's fonts at their mount
    /// point, named as the host path they were scanned at (`remap-dir`: fontconfig derives a
    /// cache file's name from the folder's path, so the sandbox looks up the cache the host
    /// built); and the host's cache of them. `nil` when `hostFonts` cannot be written in XML.
    static func sandboxConfiguration(hostFonts: String) -> String? {
        guard let path = escaped(hostFonts) else { return nil }
        return """
            <?xml version="1.0"?>
            <!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
            <!-- Written by RemoteView's launcher for its sandboxed services: the system's fonts, and the user's at \(UserFontsKeeper.fontsMountPoint) with the host's cache of them. -->
            <fontconfig>
            \t<include ignore_missing="yes">/etc/fonts/fonts.conf</include>
            \t<remap-dir as-path="\(path)">\(UserFontsKeeper.fontsMountPoint)</remap-dir>
            \t<cachedir>\(UserFontsKeeper.fontconfigMountPoint)</cachedir>
            </fontconfig>

            """
    }

    /// The configuration `fc-cache` runs with on the host: no font folder and no cache folder
    /// but `cacheFolder`, so the cache of the folder it is given is written there and nowhere
    /// else. `nil` when `cacheFolder` cannot be written in XML.
    static func cacheConfiguration(cacheFolder: String) -> String? {
        guard let path = escaped(cacheFolder) else { return nil }
        return """
            <?xml version="1.0"?>
            <!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
            <!-- Written by RemoteView's launcher for fc-cache: the cache of the user's fonts goes here, and nowhere else. -->
            <fontconfig>
            \t<cachedir>\(path)</cachedir>
            </fontconfig>

            """
    }

    /// `text` with `&`, `<`, `>`, `"` and `'` escaped, for an XML element or attribute; `nil`
    /// when it holds what XML 1.0 cannot carry or would change (a control character: a tab or
    /// newline in an attribute becomes a space) or a replaced byte that was not UTF-8 (U+FFFD).
    static func escaped(_ text: String) -> String? {
        var result = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": result += "&amp;"
            case "<": result += "&lt;"
            case ">": result += "&gt;"
            case "\"": result += "&quot;"
            case "'": result += "&apos;"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F || scalar == "\u{FFFD}" || scalar == "\u{FFFE}" || scalar == "\u{FFFF}":
                return nil
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }
}

/// Keeps the user's fonts ready for one launcher's sandboxes (``UserFontsPolicy``): checks the
/// folder, copies it for a root host (``FontMirror``), writes the sandbox's fontconfig
/// configuration, and builds the fontconfig cache of the fonts with `fc-cache`, in the
/// background.
///
/// All of it is done at the first sandboxed launch, and again at a launch when the folder's or
/// a subfolder's modification time changed since (a font added or removed); otherwise a launch
/// costs a `stat` per folder. The cache is built in the background: `fc-cache` sleeps 2 s
/// after writing a cache (for file systems with coarse times), which no launch should wait
/// for. A service launched before it is ready finds no valid cache of the user's fonts, and
/// its fontconfig scans them itself, as it would without the cache. A failure only logs.
final class UserFontsKeeper: Sendable {
    /// Where the user's fonts appear inside a sandbox.
    static let fontsMountPoint = "/run/remoteview/fonts"
    /// Where the configuration and cache appear inside a sandbox.
    static let fontconfigMountPoint = "/run/remoteview/fontconfig"
    /// The variable that points a sandbox's fontconfig at its configuration.
    static let configurationVariable = "FONTCONFIG_FILE"
    /// The folder in the cache folder that holds the sandboxes' fontconfig configuration and
    /// the cache of the fonts.
    static let fontconfigFolderName = "fontconfig"
    /// The folder in the cache folder that holds a root host's copy of the fonts.
    static let copyFolderName = "fonts"
    /// How long `fc-cache` may run before it is killed (a first scan of thousands of fonts
    /// takes seconds).
    static let cacheDeadline: Duration = .seconds(60)

    /// The user's font folder, as configured.
    let folder: String
    /// Where the launcher keeps what it makes of the fonts.
    let cacheFolder: String
    /// Whether the fonts are copied (a root host's services cannot reach root's).
    let copies: Bool
    private let logger: Logger
    private let state = Mutex(State())

    private struct State {
        /// The resolved font folder and the modification times of its folders when the fonts
        /// were last prepared.
        var prepared: (source: String, folders: [String: FontFolder.Timestamp])?
        /// Whether a root host's copies were removed since the fonts were last prepared (there
        /// were none to prepare): root's fonts are not left readable by every user.
        var copiesRemoved = false
        /// What the sandboxes bind, as last prepared.
        var binding: UserFontsBinding?
        /// The last reason the fonts were left out, logged once.
        var lastProblem: String?
        /// Whether a missing fc-cache was logged.
        var toldNoCacheBuilder = false
        /// The cache being built, and whether it must be built again after (the fonts changed).
        var build: Task<Void, Never>?
        var buildAgain = false
        /// `fc-cache`, while it runs.
        var builder: ChildProcess?
        var stopped = false
    }

    /// `nil` for ``UserFontsPolicy/none``.
    init?(policy: UserFontsPolicy, copies: Bool = Syscall.effectiveUserID == 0, logger: Logger) {
        guard let (folder, cacheFolder) = policy.locations else { return nil }
        self.folder = folder
        self.cacheFolder = cacheFolder
        self.copies = copies
        self.logger = logger
    }

    /// What to bind of the user's fonts into a sandbox starting now; `nil` when there is
    /// nothing to bind (no folder, or one left out, which is logged once).
    func binding() -> UserFontsBinding? {
        state.withLock { state -> UserFontsBinding? in
            guard !state.stopped else { return nil }
            let source: String
            switch check() {
            case .success(let resolved?):
                source = resolved
            case .success(nil):
                forget(&state)
                state.lastProblem = nil
                return nil
            case .failure(let problem):
                forget(&state)
                report(problem, &state)
                return nil
            }
            if let prepared = state.prepared, prepared.source == source, FontFolder.isCurrent(prepared.folders, under: source),
               let binding = state.binding, Syscall.isDirectory(binding.fonts), Syscall.isRegularFile(binding.fontconfig + "/" + FontconfigFiles.sandboxConfigurationName) {
                return binding
            }
            switch prepare(source) {
            case .success(let (binding, folders)):
                state.prepared = (source, folders)
                state.binding = binding
                state.lastProblem = nil
                state.copiesRemoved = false
                if state.build == nil {
                    state.build = Task { await self.buildCaches() }
                } else {
                    state.buildAgain = true
                }
                return binding
            case .failure(let problem):
                forget(&state)
                report(problem, &state)
                return nil
            }
        }
    }

    /// No fonts to bind: for a root host, its copies of them are removed, once.
    private func forget(_ state: inout State) {
        state.prepared = nil
        state.binding = nil
        guard copies, !state.copiesRemoved else { return }
        state.copiesRemoved = true
        for folder in [cacheFolder + "/" + Self.copyFolderName, cacheFolder + "/" + Self.fontconfigFolderName] {
            do throws(FontFolder.Refusal) {
                if try FontMirror.remove(folder) {
                    logger.info("removed \(folder.escapedForTerminal()): root's fonts are no longer there to copy")
                }
            } catch {
                logger.warning("cannot remove the copy of root's fonts in \(folder.escapedForTerminal()): \(error.description.escapedForTerminal())")
            }
        }
    }

    /// Ends a cache build that runs (`fc-cache` is killed: it has written its caches within
    /// milliseconds and sleeps after) and waits for it; nothing is prepared after.
    func stop() async {
        let (build, builder) = state.withLock { state in
            state.stopped = true
            return (state.build, state.builder)
        }
        builder?.send(signal: SIGKILL)
        await build?.value
    }

    /// Returns once the cache being built, if any, is (for tests).
    func cacheBuilt() async {
        await state.withLock { $0.build }?.value
    }

    private func report(_ problem: FontFolder.Refusal, _ state: inout State) {
        guard state.lastProblem != problem.description else { return }
        state.lastProblem = problem.description
        logger.warning("the user's fonts at \(folder.escapedForTerminal()) are left out of the sandboxes: \(problem.description.escapedForTerminal())")
    }

    /// The font folder with its links resolved; `nil` when there is none; a refusal when it is
    /// not a folder of the host's user's that only that user may write to.
    private func check() -> Result<String?, FontFolder.Refusal> {
        let resolved: String
        do {
            resolved = try Syscall.resolvedPath(folder)
        } catch {
            return error.errno == ENOENT ? .success(nil) : .failure(FontFolder.Refusal("\(error)"))
        }
        guard let status = try? Syscall.status(ofPath: resolved), status.isDirectory else {
            return .failure(FontFolder.Refusal("\(resolved) is not a folder"))
        }
        guard status.st_uid == Syscall.effectiveUserID else {
            return .failure(FontFolder.Refusal("\(resolved) belongs to uid \(status.st_uid), not to the host's \(Syscall.effectiveUserID)"))
        }
        guard status.st_mode & (S_IWGRP | S_IWOTH) == 0 else {
            return .failure(FontFolder.Refusal("other users may write to \(resolved) (mode \(String(status.st_mode & 0o7777, radix: 8)))"))
        }
        guard FontconfigFiles.escaped(resolved) != nil else {
            return .failure(FontFolder.Refusal("\(resolved) cannot be named in fontconfig's configuration (it holds a control character or bytes that are not UTF-8)"))
        }
        return .success(resolved)
    }

    /// Copies the fonts (a root host), writes the configuration files, and says what to bind.
    private func prepare(_ source: String) -> Result<(UserFontsBinding, [String: FontFolder.Timestamp]), FontFolder.Refusal> {
        do throws(FontFolder.Refusal) {
            let sourceFolder: OwnedFD
            do {
                sourceFolder = try FontFolder.openFolder(source)
            } catch {
                throw FontFolder.Refusal("\(error)")
            }
            let folders = try FontFolder.walk(sourceFolder, mode: .folders).folders
            // Folders every service can pass when they run as uids of their own.
            let shared: mode_t = copies ? 0o755 : 0o700
            do {
                try SandboxPaths.makeFolders(cacheFolder) { _ in copies ? 0o711 : 0o700 }
            } catch {
                throw FontFolder.Refusal("cannot make \(cacheFolder): \(error)")
            }
            let cache: String
            do {
                cache = try Syscall.resolvedPath(cacheFolder)
            } catch {
                throw FontFolder.Refusal("\(error)")
            }
            var fonts = source
            if copies {
                fonts = cache + "/" + Self.copyFolderName
                let outcome = try FontMirror.sync(from: source, to: fonts)
                if outcome.copied > 0 || outcome.removed > 0 {
                    logger.info("copied \(outcome.copied) and removed \(outcome.removed) of the user's font files in \(fonts.escapedForTerminal()) (the copy of \(source.escapedForTerminal()) the services, which run as uids of their own, can read): \(outcome.files) in all")
                }
            }
            let fontconfig = cache + "/" + Self.fontconfigFolderName
            guard let sandboxConfiguration = FontconfigFiles.sandboxConfiguration(hostFonts: fonts),
                  let cacheConfiguration = FontconfigFiles.cacheConfiguration(cacheFolder: fontconfig) else {
                throw FontFolder.Refusal("\(fonts) or \(fontconfig) cannot be named in fontconfig's configuration (a control character or bytes that are not UTF-8)")
            }
            do throws(SystemCallError) {
                try SandboxPaths.makeFolders(fontconfig) { _ in shared }
                let folder = try FontFolder.openFolder(fontconfig)
                let status = try Syscall.status(folder)
                guard status.st_uid == Syscall.effectiveUserID else {
                    throw SystemCallError(call: "\(fontconfig) belongs to uid \(status.st_uid)", errno: EPERM)
                }
                if status.st_mode & 0o7777 != shared { try Syscall.changeMode(folder, shared, name: fontconfig) }
                try Self.write(sandboxConfiguration, named: FontconfigFiles.sandboxConfigurationName, in: folder)
                let cacheRoot = try FontFolder.openFolder(cache)
                try Self.write(cacheConfiguration, named: FontconfigFiles.cacheConfigurationName, in: cacheRoot)
            } catch {
                throw FontFolder.Refusal("cannot write the fontconfig configuration in \(fontconfig): \(error)")
            }
            return .success((UserFontsBinding(fonts: fonts, fontconfig: fontconfig), folders))
        } catch {
            return .failure(error)
        }
    }

    /// Writes `text` as the file `name` in `folder` (mode 0644) unless it holds that already:
    /// under a temporary name, renamed into place.
    private static func write(_ text: String, named name: String, in folder: borrowing OwnedFD) throws(SystemCallError) {
        let bytes = Array(text.utf8)
        let existing = openat(folder.rawValue, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        if existing >= 0 {
            let file = OwnedFD(adopting: existing)
            if Syscall.isRegularFile(file), (try? Syscall.readToEnd(file, limit: bytes.count, name: name)) == bytes,
               ((try? Syscall.status(file))?.st_mode ?? 0) & 0o7777 == 0o644 {
                return
            }
        }
        let temporary = "." + name + ".remoteview-new"
        let fd = openat(folder.rawValue, temporary, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw SystemCallError(call: "open(\(temporary))", errno: errno) }
        do throws(SystemCallError) {
            let file = OwnedFD(adopting: fd)
            try Syscall.writeAll(file, bytes, at: 0)
            try Syscall.changeMode(file, 0o644, name: temporary)
            guard renameat(folder.rawValue, temporary, folder.rawValue, name) == 0 else {
                throw SystemCallError(call: "rename(\(temporary))", errno: errno)
            }
        } catch {
            unlinkat(folder.rawValue, temporary, 0)
            throw error
        }
    }

    // MARK: the cache, in the background

    /// Builds the cache of the fonts as last prepared, and again while they changed meanwhile.
    private func buildCaches() async {
        while true {
            let binding = state.withLock { $0.stopped ? nil : $0.binding }
            if let binding { await buildCache(binding) }
            let again = state.withLock { state -> Bool in
                if state.buildAgain, !state.stopped {
                    state.buildAgain = false
                    return true
                }
                state.build = nil
                return false
            }
            if !again { return }
        }
    }

    /// Runs `fc-cache` on `binding.fonts`, with a configuration whose only cache folder is
    /// `binding.fontconfig`; for a root host, then makes the cache files readable by every user
    /// (fc-cache's modes follow the host's umask).
    private func buildCache(_ binding: UserFontsBinding) async {
        guard let builder = Self.locateCacheBuilder() else {
            let tell = state.withLock { state in
                defer { state.toldNoCacheBuilder = true }
                return !state.toldNoCacheBuilder
            }
            if tell {
                logger.notice("fc-cache is not installed (Debian: apt-get install fontconfig): sandboxed services find no cache of the user's fonts and scan them at each start")
            }
            return
        }
        let started = ContinuousClock.now
        var options = ChildProcess.Options()
        // The cache folder, resolved, holds binding.fontconfig and the configuration for fc-cache.
        let cache = String(binding.fontconfig.dropLast(Self.fontconfigFolderName.count + 1))
        options.environment = [Self.configurationVariable: cache + "/" + FontconfigFiles.cacheConfigurationName, "PATH": "/usr/bin:/bin"]
        options.deathSignal = SIGKILL
        var builderLogger = logger
        builderLogger[metadataKey: "process"] = "fc-cache"
        let process: ChildProcess
        let capture: OutputCapture
        do throws(SystemCallError) {
            let errors = try Syscall.pipe()
            options.pass(errors.second, as: 2)
            process = try await ChildProcess.launch(executable: builder, arguments: [binding.fonts], options: options)
            capture = try OutputCapture(errors.first, stream: "stderr", logger: builderLogger)
        } catch {
            logger.warning("cannot run \(builder) to build the fontconfig cache of the user's fonts: \(error)")
            return
        }
        let stopped = state.withLock { state in
            state.builder = process
            return state.stopped
        }
        if stopped { process.send(signal: SIGKILL) }
        let deadline = EventLoop.shared.schedule(at: started.advanced(by: Self.cacheDeadline)) { process.send(signal: SIGKILL) }
        async let read: Void = capture.run()
        let termination = await process.waitForExitUncancellably()
        EventLoop.shared.cancel(deadline)
        await read
        let wasStopped = state.withLock { state in
            state.builder = nil
            return state.stopped
        }
        let took = Int((ContinuousClock.now - started) / .milliseconds(1))
        guard termination == .exited(0) else {
            if !wasStopped {
                logger.warning("fc-cache could not build the fontconfig cache of the user's fonts at \(binding.fonts.escapedForTerminal()) (\(termination) after \(took) ms): services scan them at their start")
            }
            return
        }
        if copies { Self.makeReadable(binding.fontconfig) }
        logger.info("the fontconfig cache of the user's fonts at \(binding.fonts.escapedForTerminal()) is ready in \(binding.fontconfig.escapedForTerminal()) (fc-cache took \(took) ms)")
    }

    /// Makes the regular files in `folder` mode 0644 (not through a link).
    private static func makeReadable(_ folder: String) {
        guard let opened = try? FontFolder.openFolder(folder), let names = try? FontFolder.entries(of: opened, limit: 100_000) else { return }
        for (name, _) in names {
            let fd = openat(opened.rawValue, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else { continue }
            let file = OwnedFD(adopting: fd)
            if let status = try? Syscall.status(file), status.isRegularFile, status.st_mode & 0o7777 != 0o644 {
                try? Syscall.changeMode(file, 0o644, name: name)
            }
        }
    }

    /// fontconfig's `fc-cache` on the host's `PATH`, else in `/usr/bin`.
    static func locateCacheBuilder() -> String? {
        let search = (XDGBaseDirectories.variable("PATH") ?? "") + ":/usr/bin:/bin"
        for folder in search.split(separator: ":") where folder.hasPrefix("/") {
            let path = String(folder) + "/fc-cache"
            if Syscall.isRegularFile(path), (try? Syscall.checkAccess(path, X_OK)) != nil { return path }
        }
        return nil
    }
}
