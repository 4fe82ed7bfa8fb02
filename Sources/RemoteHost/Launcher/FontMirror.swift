import Glibc
import RemoteCore

/// A root host's copy of root's fonts, which its services can read.
///
/// A root host's services run as uids of their own (``ServiceUserPool``), and bubblewrap, run
/// as that uid, binds by path: it cannot pass `/root` (mode 0700). bubblewrap 0.8.0's
/// `--ro-bind-fd` does not help: it resolves `/proc/self/fd/N` back to the path with
/// `realpath`, as that uid, and fails with `EACCES` (docs/SECURITY.md). So the launcher copies
/// the font files into a folder of its own that every user may read (folders 0755, files 0644,
/// owned by root), and binds that.
///
/// Only font files are copied (``FontFolder/isFontName(_:)``), never through a link leading
/// out of the folder, within ``FontFolder/Limits`` (8 folders deep, 10,000 files and folders,
/// 1 GiB), or not at all. A file already copied with the same size and modification time is
/// left as it is; what the source no longer holds is removed. Each file is written under a
/// temporary name and renamed into place, so a sandbox reading the copy meanwhile sees a font
/// whole or not at all.
enum FontMirror {
    /// What a sync did.
    struct Outcome: Equatable, Sendable {
        var files: Int
        var copied: Int
        var removed: Int
    }

    /// Makes the folder `mirror` (made if missing, mode 0755, its missing parents 0711) hold
    /// the font files of the folder at the resolved path `source`, and nothing else.
    static func sync(from source: String, to mirror: String, limits: FontFolder.Limits = FontFolder.Limits()) throws(FontFolder.Refusal) -> Outcome {
        let sourceFolder: OwnedFD
        do {
            sourceFolder = try FontFolder.openFolder(source)
        } catch {
            throw FontFolder.Refusal("cannot open \(source): \(error)")
        }
        let wanted = try FontFolder.walk(sourceFolder, mode: .fonts, limits: limits)
        let mirrorFolder = try openMirror(mirror)
        // One sync at a time, should two root hosts start at once.
        do {
            try Syscall.lockExclusively(mirrorFolder, name: mirror)
        } catch {
            throw FontFolder.Refusal("cannot lock \(mirror): \(error)")
        }
        // The copy holds what the launcher put there; more than the bounds is refused too.
        let present = try FontFolder.walk(mirrorFolder, mode: .mirror,
                                          limits: FontFolder.Limits(depth: limits.depth, entries: limits.entries * 2, bytes: .max))
        var removed = 0
        func remove(_ path: String, folder: Bool) throws(FontFolder.Refusal) {
            do throws(SystemCallError) {
                try unlink(path, in: mirrorFolder, folder: folder)
            } catch {
                throw FontFolder.Refusal("cannot remove \(mirror)/\(path): \(error)")
            }
            removed += 1
        }
        for path in present.others.sorted(by: >) { try remove(path, folder: false) }
        for path in present.files.keys.sorted(by: >) where wanted.files[path] == nil { try remove(path, folder: false) }
        // Deepest first: a folder's own folders are gone before it.
        for path in present.folders.keys.sorted(by: >) where !path.isEmpty && wanted.folders[path] == nil { try remove(path, folder: true) }
        // Parents first.
        for path in wanted.folders.keys.sorted() where !path.isEmpty && present.folders[path] == nil {
            do throws(SystemCallError) {
                let parent = try parentFolder(of: path, in: mirrorFolder), name = lastComponent(of: path)
                guard mkdirat(parent.rawValue, name, 0o700) == 0 else { throw SystemCallError(call: "mkdir", errno: errno) }
                let made = try FontFolder.openFolder(name, in: parent)
                try Syscall.changeMode(made, 0o755, name: path)
            } catch {
                throw FontFolder.Refusal("cannot make \(mirror)/\(path): \(error)")
            }
        }
        var copied = 0
        for (path, file) in wanted.files.sorted(by: { $0.key < $1.key }) where present.files[path] != file {
            do {
                try copy(path, from: sourceFolder, to: mirrorFolder)
            } catch {
                throw FontFolder.Refusal("cannot copy \(path) to \(mirror): \(error)")
            }
            copied += 1
        }
        return Outcome(files: wanted.files.count, copied: copied, removed: removed)
    }

    /// Removes the folder `path` and everything in it, without following a link; `false` when
    /// there was none.
    @discardableResult
    static func remove(_ path: String) throws(FontFolder.Refusal) -> Bool {
        let folder: OwnedFD
        do {
            folder = try FontFolder.openFolder(path)
        } catch {
            if error.errno == ENOENT { return false }
            throw FontFolder.Refusal("cannot open \(path): \(error)")
        }
        let present = try FontFolder.walk(folder, mode: .mirror, limits: FontFolder.Limits(entries: 20_000, bytes: .max))
        let files = present.others + Array(present.files.keys)
        // Files first, then folders, deepest first.
        let entries = files.sorted(by: >).map { ($0, false) } + present.folders.keys.filter { !$0.isEmpty }.sorted(by: >).map { ($0, true) }
        for (entry, isFolder) in entries {
            do throws(SystemCallError) {
                try unlink(entry, in: folder, folder: isFolder)
            } catch {
                throw FontFolder.Refusal("cannot remove \(path)/\(entry): \(error)")
            }
        }
        guard rmdir(path) == 0 || errno == ENOENT else {
            throw FontFolder.Refusal("cannot remove \(path): \(SystemCallError(call: "rmdir", errno: errno))")
        }
        return true
    }

    /// Removes the entry at `path` (relative to `folder`; a folder when `folder` says so, which
    /// must be empty), reached without following a link; one already gone is no error.
    private static func unlink(_ path: String, in root: borrowing OwnedFD, folder: Bool) throws(SystemCallError) {
        let parent = try parentFolder(of: path, in: root), name = lastComponent(of: path)
        guard unlinkat(parent.rawValue, name, folder ? AT_REMOVEDIR : 0) == 0 || errno == ENOENT else {
            throw SystemCallError(call: "unlinkat", errno: errno)
        }
    }

    /// The folder `mirror`, made if missing, owned by the host's user, mode 0755.
    private static func openMirror(_ mirror: String) throws(FontFolder.Refusal) -> OwnedFD {
        do {
            try SandboxPaths.makeFolders(mirror) { $0 == mirror ? 0o755 : 0o711 }
        } catch {
            throw FontFolder.Refusal("cannot make \(mirror): \(error)")
        }
        let folder: OwnedFD
        do {
            folder = try FontFolder.openFolder(mirror)
        } catch {
            throw FontFolder.Refusal("cannot open \(mirror): \(error)")
        }
        guard let status = try? Syscall.status(folder) else { throw FontFolder.Refusal("cannot read \(mirror)'s status") }
        guard status.st_uid == Syscall.effectiveUserID else {
            throw FontFolder.Refusal("\(mirror) belongs to uid \(status.st_uid), not to the host's \(Syscall.effectiveUserID)")
        }
        if status.st_mode & 0o7777 != 0o755 {
            do {
                try Syscall.changeMode(folder, 0o755, name: mirror)
            } catch {
                throw FontFolder.Refusal("cannot make \(mirror) readable by every user: \(error)")
            }
        }
        return folder
    }

    /// Copies the file `path` of `source` (opened beneath it: no link leads out) to the same
    /// path in `mirror`, mode 0644, with its modification time: written under a temporary name,
    /// then renamed into place.
    private static func copy(_ path: String, from source: borrowing OwnedFD, to mirror: borrowing OwnedFD) throws(SystemCallError) {
        let input = try Syscall.openBeneath(source, path)
        let status = try Syscall.status(input)
        guard status.isRegularFile else { throw SystemCallError(call: "open(\(path)): not a regular file", errno: EINVAL) }
        let parent = try parentFolder(of: path, in: mirror), name = lastComponent(of: path)
        let temporary = "." + name + ".remoteview-new"
        let output = openat(parent.rawValue, temporary, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard output >= 0 else { throw SystemCallError(call: "open(\(temporary))", errno: errno) }
        do throws(SystemCallError) {
            let written = OwnedFD(adopting: output)
            // At most the size it had when opened: a file growing meanwhile is cut there, and
            // the next sync copies it again (its size or time differs then).
            var left = Int(status.st_size)
            var buffer = [UInt8](repeating: 0, count: min(max(left, 1), 1 << 20))
            while left > 0 {
                let count = buffer.withUnsafeMutableBytes { Glibc.read(input.rawValue, $0.baseAddress, min($0.count, left)) }
                if count < 0, errno == EINTR { continue }
                guard count >= 0 else { throw SystemCallError(call: "read(\(path))", errno: errno) }
                if count == 0 { break }
                var offset = 0
                while offset < count {
                    let result = buffer.withUnsafeBytes { Glibc.write(written.rawValue, $0.baseAddress! + offset, count - offset) }
                    if result < 0, errno == EINTR { continue }
                    guard result > 0 else { throw SystemCallError(call: "write(\(temporary))", errno: result < 0 ? errno : EIO) }
                    offset += result
                }
                left -= count
            }
            try Syscall.changeMode(written, 0o644, name: temporary)
            var times = [status.st_mtim, status.st_mtim]
            guard futimens(written.rawValue, &times) == 0 else { throw SystemCallError(call: "futimens(\(temporary))", errno: errno) }
            guard renameat(parent.rawValue, temporary, parent.rawValue, name) == 0 else {
                throw SystemCallError(call: "rename(\(temporary))", errno: errno)
            }
        } catch {
            unlinkat(parent.rawValue, temporary, 0)
            throw error
        }
    }

    /// The folder holding `path` (relative, in `folder`; no component of it a link).
    private static func parentFolder(of path: String, in folder: borrowing OwnedFD) throws(SystemCallError) -> OwnedFD {
        var current = try folder.duplicate()
        for component in path.split(separator: "/").dropLast() { current = try FontFolder.openFolder(String(component), in: current) }
        return current
    }

    /// The last component of the relative path `path`.
    private static func lastComponent(of path: String) -> String {
        path.split(separator: "/").last.map(String.init) ?? path
    }
}
