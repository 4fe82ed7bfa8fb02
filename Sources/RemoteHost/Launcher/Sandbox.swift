import Glibc
import RemoteCore

/// How the launcher confines services.
public enum SandboxPolicy: Sendable, Hashable {
    /// bubblewrap (the sandbox Flatpak uses) at `path` (`nil`: found on `PATH`): new user, pid,
    /// ipc, uts, net and cgroup namespaces; a read-only minimal filesystem; private `/tmp`,
    /// `/proc` and `/dev`; no capabilities; no network unless the manifest is entitled to it.
    case bubblewrap(path: String? = nil)
    /// No sandbox at all. An explicit opt-in, logged at every launch; never a fallback.
    case unsandboxed
}

/// The bubblewrap command line for one service: what the sandbox contains.
///
/// The filesystem is `/usr` (with the merged-`/usr` symlinks), the few files of `/etc` that
/// programs need and that hold no secrets (fonts, the loader cache, the time zone), the
/// executable itself, the folders its `RUNPATH` names that are outside `/usr` (a dynamically
/// linked Swift program's runtime), the manifest's read-only paths, the user's own fonts
/// read-only at ``UserFontsKeeper/fontsMountPoint`` (with their fontconfig configuration and
/// cache, ``UserFontsKeeper``), and with the `sandbox.dataFolder` entitlement the service's data
/// folder, read-write at `/data`. Nothing else of the host's home or `/etc`, nothing of its
/// `/tmp` or `/run` is there, and the data folder is the only host folder the service can write
/// to: `/tmp`, `/run`, `/dev` and the root are the sandbox's own memory (tmpfs), gone with it;
/// `/proc/sys` is read-only. docs/SECURITY.md lists every argument with its reason.
///
/// When the service runs as a uid of its own (a root host, ``ServiceUserPool``), bubblewrap runs
/// as that uid and reaches what it binds by path, so every folder above a bound path must let
/// every user through (`o+x`). The executable and the libraries beside it are the exception: one
/// that uid cannot reach (a build under `/root`, mode 0700) is copied into the sandbox
/// (`--ro-bind-data`, from a descriptor the launcher opens: ``copies``), at the same path.
/// (bubblewrap 0.8.0's `--ro-bind-fd` does not help there: it resolves the descriptor's
/// `/proc/self/fd` link back to its path with `realpath`, as that uid.) For the same reason a
/// root host's user fonts are a copy the launcher keeps where every user may read it
/// (``FontMirror``); when that uid cannot reach them all the same, they are left out (``notes``).
struct BubblewrapCommand {
    /// bubblewrap's own executable.
    let bubblewrap: String
    /// The arguments after `bwrap`, ending with `-- executable arguments...`.
    let arguments: [String]
    /// Host files copied into the sandbox, in order: the launcher opens each and passes it as
    /// the child's descriptor ``firstCopyDescriptor`` + its index, which the arguments name.
    let copies: [Copy]
    /// What the launcher logs about this sandbox: the user's fonts left out, and why.
    let notes: [String]

    /// A file to copy in: opened beneath `folder` (no `..` or symbolic link leading out of it),
    /// and only if it is a regular file whose mode gives every user `mode` (`o+r`, and `o+x`
    /// for the executable): a copy never shows the service more than its own uid could read
    /// were the folders above open to it.
    struct Copy: Equatable {
        let path: String
        let folder: String
        let mode: mode_t
    }

    /// Files outside `/usr` that are bound read-only when present.
    static let systemFiles = ["/etc/fonts", "/etc/ld.so.cache", "/etc/localtime", "/var/cache/fontconfig"]

    /// Debian's font alternatives (`/etc/alternatives/fonts-*`, e.g. `fonts-japanese-gothic.ttf`,
    /// which fontconfig lists IPAGothic under), each as the same symbolic link inside the
    /// sandbox when it points into `/usr`: without it, fontconfig's first choice for Japanese
    /// dangles there and kana draw as boxes. Only the links are made; their targets are in
    /// `/usr`, bound already.
    static let fontAlternatives: [(link: String, target: String)] = {
        let folder = "/etc/alternatives"
        let names = (try? Syscall.directoryEntries(folder)) ?? []
        return names.filter { $0.hasPrefix("fonts-") }.sorted().compactMap { name in
            let link = folder + "/" + name
            guard let target = Syscall.symbolicLinkTarget(link), target.hasPrefix("/usr/"), !target.contains("/../") else { return nil }
            return (link, target)
        }
    }()

    /// Where the service's data folder appears inside the sandbox.
    static let dataMountPoint = "/data"

    /// The child's descriptor number of the first of ``copies`` (0–2 are standard streams, 3 the
    /// service's socket, 4 the seccomp filter).
    static let firstCopyDescriptor: Int32 = 5

    /// The most files copied into one sandbox.
    static let maxCopies = 8

    /// - Parameter dataFolder: The host folder bound read-write at ``dataMountPoint``, for a
    ///   manifest with the `sandbox.dataFolder` entitlement.
    ///   - dataRoot: The launcher's data root, which `readOnlyPaths` may not overlap.
    ///   - seccompDescriptor: The child's fd number holding the ``SeccompFilter`` program.
    ///   - sanitizers: In a sanitized build only, the sanitizers' options and their suppression
    ///     files (``SanitizerEnvironment``).
    ///   - identity: The uid and gid the service (and bubblewrap) runs as, when not the host's.
    ///   - userFonts: The user's fonts (``UserFontsKeeper``), bound read-only at
    ///     ``UserFontsKeeper/fontsMountPoint`` with their fontconfig configuration and cache at
    ///     ``UserFontsKeeper/fontconfigMountPoint`` (and `FONTCONFIG_FILE` naming it); left out,
    ///     with a note, when `identity` cannot reach them.
    /// - Throws: `invalidated` when a path of the manifest's `readOnlyPaths` is refused now
    ///   (``SandboxPaths``: it may have become a link to somewhere else since the manifest was read),
    ///   or a folder the sandbox needs cannot be reached by `identity`.
    init(bubblewrap: String, manifest: ServiceManifest, environment: [String: String], dataFolder: String? = nil,
         dataRoot: String? = nil, seccompDescriptor: Int32? = nil, sanitizers: SanitizerEnvironment? = nil,
         identity: ChildProcess.Identity? = nil, userFonts: UserFontsBinding? = nil) throws(RemoteError) {
        self.bubblewrap = bubblewrap
        // bubblewrap runs as the service's uid too.
        if let identity {
            let mode = (try? Syscall.status(ofPath: bubblewrap))?.st_mode ?? 0
            if let blocked = SandboxPaths.unreachableFolder(above: bubblewrap) ?? (mode & S_IXOTH == 0 ? bubblewrap : nil) {
                throw RemoteError(.invalidated, "bubblewrap at \(bubblewrap) cannot be run as the service's \(identity) (the host is root): \(blocked) does not let other users through (mode o+x)")
            }
        }
        var arguments = ["--unshare-all"]
        if manifest.sandbox.network { arguments.append("--share-net") }
        arguments += ["--die-with-parent", "--new-session", "--clearenv", "--cap-drop", "ALL",
                      "--ro-bind", "/usr", "/usr"]
        for top in ["/bin", "/lib", "/lib64", "/sbin"] {
            if let target = Syscall.symbolicLinkTarget(top) {
                arguments += ["--symlink", target, top]
            } else if Syscall.isDirectory(top) {
                arguments += ["--ro-bind", top, top]
            }
        }
        // bubblewrap covers /proc/sys read-only only where it may write to it, and the folder
        // itself refuses even root: so its files would be writable by a sandbox whose uid the
        // kernel sees as their owner (a root host's, before services had uids of their own).
        arguments += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/run"]
        for file in Self.systemFiles { arguments += ["--ro-bind-try", file, file] }
        for alternative in Self.fontAlternatives { arguments += ["--symlink", alternative.target, alternative.link] }
        var bound: [String] = []
        var copies: [Copy] = []
        var notes: [String] = []
        var environment = environment
        /// The first folder above `path` (its links resolved) that the service's own uid cannot
        /// pass, when it has one.
        func unreachable(_ path: String) -> String? {
            guard identity != nil else { return nil }
            return SandboxPaths.unreachableFolder(above: (try? Syscall.resolvedPath(path)) ?? path)
        }
        // The user's fonts: the named exception to "nothing at or below /home" (SandboxPaths),
        // bound by the launcher itself, never through readOnlyPaths. `-try`: a folder removed
        // since it was prepared leaves the fonts out rather than failing the launch.
        if let userFonts {
            // Both folders are resolved paths; the uid must pass them too (a name inside each).
            let blocked = identity == nil ? nil
                : SandboxPaths.unreachableFolder(above: userFonts.fonts + "/-") ?? SandboxPaths.unreachableFolder(above: userFonts.fontconfig + "/-")
            if let blocked {
                notes.append("the user's fonts are left out of the sandbox of \(manifest.identifier): the service runs as \(identity.map { "\($0)" } ?? "?") (the host is root), and \(blocked.escapedForTerminal()) above \(userFonts.fonts.escapedForTerminal()) or \(userFonts.fontconfig.escapedForTerminal()) does not let other users through (mode o+x)")
            } else {
                arguments += ["--ro-bind-try", userFonts.fonts, UserFontsKeeper.fontsMountPoint,
                              "--ro-bind-try", userFonts.fontconfig, UserFontsKeeper.fontconfigMountPoint]
                environment[UserFontsKeeper.configurationVariable] = UserFontsKeeper.fontconfigMountPoint + "/" + FontconfigFiles.sandboxConfigurationName
            }
        }
        func refuse(_ what: String, _ path: String, _ folder: String) -> RemoteError {
            RemoteError(.invalidated, "\(manifest.file.escapedForTerminal()): \(what) \(path.escapedForTerminal()) cannot be bound into the sandbox: the service runs as \(identity.map { "\($0)" } ?? "?") (the host is root), and \(folder.escapedForTerminal()) above it does not let other users through (mode o+x)")
        }
        let folder = String(manifest.executablePath[..<(manifest.executablePath.lastIndex(of: "/") ?? manifest.executablePath.endIndex)])
        func bind(_ path: String, from source: String? = nil) {
            guard !path.hasPrefix("/usr/"), !bound.contains(where: { path == $0 || path.hasPrefix($0 + "/") }) else { return }
            bound.append(path)
            arguments += ["--ro-bind", source ?? path, path]
        }
        /// A file of the service's own, `beneath` a folder of it: bound, or copied in when a
        /// folder above it does not let the service's uid pass. Its own mode must let every user
        /// read it (and run it, for the executable), copied or not: checked here on the path,
        /// and on the opened file when it is copied (``Copy``).
        func bindOrCopy(_ file: String, beneath owner: String, executable: Bool = false) throws(RemoteError) {
            // A file that is not there is bound by path all the same, for bubblewrap to refuse.
            guard identity != nil, let status = try? Syscall.status(ofPath: file) else { return bind(file) }
            let everyone: mode_t = executable ? S_IROTH | S_IXOTH : S_IROTH
            guard status.st_mode & everyone == everyone else {
                throw RemoteError(.invalidated, "\(manifest.file.escapedForTerminal()): \(file.escapedForTerminal()) cannot be \(executable ? "run" : "read") by the service's \(identity!) (the host is root): its mode \(String(status.st_mode & 0o7777, radix: 8)) does not give other users o+\(executable ? "rx" : "r")")
            }
            guard unreachable(file) != nil else { return bind(file) }
            guard !bound.contains(file) else { return }
            guard copies.count < Self.maxCopies else {
                throw RemoteError(.invalidated, "\(manifest.file.escapedForTerminal()): more than \(Self.maxCopies) files would be copied into the sandbox (the service's uid cannot reach \(file.escapedForTerminal())); install the service where every user may read it")
            }
            bound.append(file)
            arguments += ["--perms", executable ? "0555" : "0444", "--ro-bind-data", String(Self.firstCopyDescriptor + Int32(copies.count)), file]
            copies.append(Copy(path: file, folder: owner, mode: everyone))
        }
        try bindOrCopy(manifest.executablePath, beneath: folder, executable: true)
        for entry in ELFRunPath.entries(of: manifest.executablePath) {
            let path = Self.normalised(entry.replacing("$ORIGIN", with: folder).replacing("${ORIGIN}", with: folder))
            // The executable's folder and below: its libraries are bound one by one. Elsewhere,
            // only a Swift runtime folder: a RUNPATH is the service's to write, and must not
            // widen the sandbox to the host's files.
            if path == folder || path.hasPrefix(folder + "/") {
                for library in Self.sharedLibraries(in: path) { try bindOrCopy(path + "/" + library, beneath: folder) }
            } else if Syscall.isDirectory(path), (try? Syscall.checkAccess(path + "/libswiftCore.so", R_OK)) != nil,
                      !Self.forbidden.contains(where: { path == $0 || path.hasPrefix($0 + "/") }) {
                if let blocked = unreachable(path + "/libswiftCore.so") { throw refuse("the Swift runtime folder", path, blocked) }
                bind(path)
            }
        }
        for (index, path) in manifest.sandbox.readOnlyPaths.enumerated() {
            switch SandboxPaths.check(readOnly: path, dataRoot: dataRoot, reachable: identity != nil) {
            case .success(let resolved):
                bind(path, from: resolved)
            case .failure(let refusal):
                throw RemoteError(.invalidated, "\(manifest.file.escapedForTerminal()): sandbox.readOnlyPaths[\(index)]: \(refusal)")
            }
        }
        if let dataFolder {
            if let blocked = unreachable(dataFolder) { throw refuse("the data folder", dataFolder, blocked) }
            arguments += ["--bind", dataFolder, Self.dataMountPoint]
        }
        for file in sanitizers?.suppressionFiles ?? [] {
            if Syscall.isRegularFile(file), unreachable(file) != nil {
                try bindOrCopy(file, beneath: String(file[..<(file.lastIndex(of: "/") ?? file.startIndex)]))
            } else {
                arguments += ["--ro-bind-try", file, file]
            }
        }
        environment.merge(sanitizers?.variables ?? [:]) { _, sanitizer in sanitizer }
        for (key, value) in environment.sorted(by: { $0.key < $1.key }) { arguments += ["--setenv", key, value] }
        if let seccompDescriptor { arguments += ["--seccomp", String(seccompDescriptor)] }
        arguments += ["--chdir", "/tmp", "--", manifest.executablePath] + manifest.arguments
        self.arguments = arguments
        self.copies = copies
        self.notes = notes
    }

    /// Host folders a RUNPATH can never bring into the sandbox.
    static let forbidden = SandboxPaths.privateFolders + ["/etc"]

    /// `path` without `.`, `..` and repeated slashes; `/` for anything not absolute.
    static func normalised(_ path: String) -> String {
        guard path.hasPrefix("/") else { return "/" }
        var parts: [Substring] = []
        for part in path.split(separator: "/") where part != "." {
            if part == ".." { _ = parts.popLast() } else { parts.append(part) }
        }
        return "/" + parts.joined(separator: "/")
    }

    /// Finds bubblewrap, or says how to get it.
    static func locate(_ path: String?) throws(RemoteError) -> String {
        if let path {
            do {
                try Syscall.checkAccess(path, X_OK)
            } catch {
                throw RemoteError(.invalidated, "bubblewrap is not executable at \(path) (\(error.reason)); install it with `apt-get install bubblewrap`, or launch unsandboxed with SandboxPolicy.unsandboxed (an explicit opt-in)")
            }
            return path
        }
        let search = getenv("PATH").map { String(cString: $0) } ?? "/usr/bin:/bin"
        for folder in search.split(separator: ":") where (try? Syscall.checkAccess("\(folder)/bwrap", X_OK)) != nil {
            return "\(folder)/bwrap"
        }
        throw RemoteError(.invalidated, "bubblewrap (bwrap) is not installed (searched PATH=\(search)); install it with `apt-get install bubblewrap`, or launch unsandboxed with SandboxPolicy.unsandboxed (an explicit opt-in)")
    }

    /// What to tell the user when bubblewrap itself refused to start the sandbox.
    static func refusal(_ message: String) -> String {
        var text = "bubblewrap refused to create the sandbox: \(message)"
        if message.contains("namespace") || message.contains("uid map") || message.contains("Operation not permitted") {
            text += " (unprivileged user namespaces may be disabled: check `sysctl kernel.unprivileged_userns_clone` and, with AppArmor, `kernel.apparmor_restrict_unprivileged_userns`)"
        }
        return text
    }

    private static func sharedLibraries(in folder: String) -> [String] {
        let names = (try? Syscall.directoryEntries(folder)) ?? []
        return names.filter { $0.hasSuffix(".so") || $0.contains(".so.") }.sorted()
    }
}

/// Reads the `DT_RUNPATH` (or `DT_RPATH`) of a 64-bit little-endian ELF file: where the dynamic
/// loader looks for the libraries the sandbox must contain. Anything unexpected yields `[]`.
enum ELFRunPath {
    static func entries(of path: String) -> [String] {
        guard let file = try? Syscall.openForReading(path), Syscall.isRegularFile(file) else { return [] }
        func bytes(at offset: UInt64, count: Int) -> [UInt8]? {
            guard count > 0, count <= 1 << 20, offset < UInt64(Int.max) else { return nil }
            guard let read = try? Syscall.read(file, count: count, at: Int(offset)), read.count == count else { return nil }
            return read
        }
        func integer(_ data: [UInt8], _ offset: Int, _ size: Int) -> UInt64 {
            var value: UInt64 = 0
            for index in (0..<size).reversed() { value = value << 8 | UInt64(data[offset + index]) }
            return value
        }
        guard let header = bytes(at: 0, count: 64), header[0..<4].elementsEqual([0x7f, 0x45, 0x4c, 0x46]),
              header[4] == 2, header[5] == 1 else { return [] }
        let sectionTable = integer(header, 0x28, 8)
        let sectionSize = Int(integer(header, 0x3a, 2)), sectionCount = Int(integer(header, 0x3c, 2))
        guard sectionSize >= 64, sectionCount > 0, sectionCount <= 4096,
              let sections = bytes(at: sectionTable, count: sectionSize * sectionCount) else { return [] }
        for index in 0..<sectionCount {
            let base = index * sectionSize
            guard integer(sections, base + 4, 4) == 6 else { continue }  // SHT_DYNAMIC
            let link = Int(integer(sections, base + 0x28, 4))
            guard link < sectionCount,
                  let dynamic = bytes(at: integer(sections, base + 0x18, 8), count: Int(min(integer(sections, base + 0x20, 8), 1 << 16))) else { return [] }
            let stringsBase = link * sectionSize
            let stringsOffset = integer(sections, stringsBase + 0x18, 8), stringsSize = integer(sections, stringsBase + 0x20, 8)
            var result: [String] = []
            for entry in stride(from: 0, to: dynamic.count - 15, by: 16) {
                let tag = integer(dynamic, entry, 8)
                if tag == 0 { break }
                guard tag == 29 || tag == 15 else { continue }  // DT_RUNPATH, DT_RPATH
                let offset = integer(dynamic, entry + 8, 8)
                let (position, overflow) = stringsOffset.addingReportingOverflow(offset)
                guard offset < stringsSize, !overflow,
                      let text = bytes(at: position, count: Int(min(stringsSize - offset, 4096))) else { continue }
                let string = String(decoding: text.prefix { $0 != 0 }, as: UTF8.self)
                result += string.split(separator: ":").map(String.init)
            }
            return result
        }
        return []
    }
}
