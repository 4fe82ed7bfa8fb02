import Glibc
import RemoteCore

/// A font folder, read through descriptors without following a link out of it: what the
/// launcher looks at of the user's fonts (``UserFontsKeeper``), and a root host's copy of them
/// (``FontMirror``).
enum FontFolder {
    /// A modification time, to the nanosecond (fontconfig checks its caches by the same).
    struct Timestamp: Hashable, Sendable {
        var seconds: Int
        var nanoseconds: Int

        init(_ time: timespec) {
            seconds = time.tv_sec
            nanoseconds = time.tv_nsec
        }
    }

    /// A font file: its size and modification time.
    struct File: Hashable, Sendable {
        var size: Int
        var modified: Timestamp
    }

    /// What a walk found, by path relative to the folder walked (`""`: that folder).
    struct Listing: Sendable {
        /// Its folders, itself included, and their modification times: a font added or removed
        /// changes its folder's.
        var folders: [String: Timestamp] = [:]
        /// Its font files (``Mode/fonts``), or every regular file (``Mode/mirror``).
        var files: [String: File] = [:]
        /// Anything else (``Mode/mirror`` only): symbolic links, sockets, FIFOs, devices.
        var others: [String] = []
        /// The files' bytes.
        var bytes = 0
        /// Names read.
        var entries = 0
    }

    /// What a walk reads.
    enum Mode {
        /// The folders only: their modification times tell whether fonts changed. Nothing is
        /// refused; beyond the bounds, the deeper or further folders are not looked at.
        case folders
        /// The font files (``isFontName(_:)``), as fontconfig reads them: names starting with a
        /// dot are skipped; a symbolic link is followed only while it stays inside the folder
        /// (to a file; a link to a folder is skipped, as loops would be). Beyond the bounds, the
        /// whole folder is refused.
        case fonts
        /// Everything, links not followed (a copy the launcher keeps, whose every other entry it
        /// removes). Beyond the bounds, the whole folder is refused.
        case mirror
    }

    /// How much a walk reads.
    struct Limits: Sendable {
        /// Folders deeper than this below the top are refused (or, in ``Mode/folders``, not looked at).
        var depth = 8
        /// The most files and folders (every name read counts).
        var entries = 10_000
        /// The most bytes of font files.
        var bytes = 1 << 30
    }

    /// Why a folder is not used.
    struct Refusal: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    /// The names of font files fontconfig reads (any case): TrueType and OpenType, their
    /// collections, the web's WOFF, X11's PCF bitmaps (gzipped too) and Type 1 with its metrics.
    static let fontSuffixes = [".ttf", ".otf", ".ttc", ".otc", ".pcf", ".pcf.gz", ".woff", ".woff2", ".pfb", ".pfa", ".afm"]

    /// Whether `name` is a font file's (``fontSuffixes``).
    static func isFontName(_ name: String) -> Bool {
        let lower = name.lowercased()
        return fontSuffixes.contains { lower.hasSuffix($0) && lower.count > $0.count }
    }

    /// Walks the folder open as `root` (opened by ``openFolder(_:)``).
    static func walk(_ root: borrowing OwnedFD, mode: Mode, limits: Limits = Limits()) throws(Refusal) -> Listing {
        var listing = Listing()
        try walk(root, path: "", depth: 0, root: root, mode: mode, limits: limits, into: &listing)
        return listing
    }

    private static func walk(_ folder: borrowing OwnedFD, path: String, depth: Int, root: borrowing OwnedFD, mode: Mode,
                             limits: Limits, into listing: inout Listing) throws(Refusal) {
        let shown = path.isEmpty ? "the folder" : path
        do {
            listing.folders[path] = Timestamp(try Syscall.status(folder).st_mtim)
        } catch {
            throw Refusal("\(shown): \(error)")
        }
        let names: [(name: String, type: UInt8)]
        do {
            // In a walk that refuses, every name read counts; one more than is left is enough
            // to know. A walk of the folders reads at most as many names again.
            let left = limits.entries - listing.entries
            names = try entries(of: folder, limit: mode == .folders ? limits.entries : left + 1)
        } catch {
            if mode == .folders { return }
            throw Refusal("\(shown): \(error)")
        }
        if mode != .folders {
            listing.entries += names.count
            guard listing.entries <= limits.entries else { throw Refusal("it holds more than \(limits.entries) files and folders") }
        }
        for (name, listedType) in names.sorted(by: { $0.name < $1.name }) {
            let relative = path.isEmpty ? name : path + "/" + name
            if mode != .mirror, name.hasPrefix(".") { continue }
            var type = listedType
            var status = stat()
            if type == UInt8(DT_UNKNOWN) || (mode != .folders && type != UInt8(DT_DIR)) {
                guard fstatat(folder.rawValue, name, &status, AT_SYMLINK_NOFOLLOW) == 0 else {
                    if mode == .mirror { throw Refusal("\(relative): \(SystemCallError(call: "fstatat", errno: errno))") }
                    continue
                }
                type = kind(of: status.st_mode)
            }
            if mode == .folders {
                guard type == UInt8(DT_DIR) else { continue }
                listing.entries += 1
                guard listing.entries <= limits.entries else { return }
            }
            switch type {
            case UInt8(DT_DIR):
                guard depth < limits.depth else {
                    if mode == .folders { continue }
                    throw Refusal("\(relative) is more than \(limits.depth) folders deep")
                }
                let child: OwnedFD
                do {
                    child = try openFolder(name, in: folder)
                } catch {
                    // A folder of the user's that cannot be read is not read by fontconfig either.
                    if mode == .mirror { throw Refusal("\(relative): \(error)") }
                    continue
                }
                try walk(child, path: relative, depth: depth + 1, root: root, mode: mode, limits: limits, into: &listing)
            case UInt8(DT_REG):
                if mode == .fonts, !isFontName(name) { continue }
                try add(relative, size: Int(status.st_size), modified: status.st_mtim, limits: limits, to: &listing)
            case UInt8(DT_LNK) where mode == .fonts:
                guard isFontName(name), let file = try? Syscall.openBeneath(root, relative),
                      let target = try? Syscall.status(file), target.isRegularFile else { continue }
                try add(relative, size: Int(target.st_size), modified: target.st_mtim, limits: limits, to: &listing)
            default:
                if mode == .mirror { listing.others.append(relative) }
            }
        }
    }

    private static func add(_ path: String, size: Int, modified: timespec, limits: Limits, to listing: inout Listing) throws(Refusal) {
        listing.files[path] = File(size: size, modified: Timestamp(modified))
        listing.bytes += size
        guard listing.bytes <= limits.bytes else {
            throw Refusal("its fonts are more than \(limits.bytes >> 20) MiB")
        }
    }

    /// `DT_*` for a file of mode `mode`.
    static func kind(of mode: mode_t) -> UInt8 {
        switch mode & S_IFMT {
        case S_IFDIR: UInt8(DT_DIR)
        case S_IFREG: UInt8(DT_REG)
        case S_IFLNK: UInt8(DT_LNK)
        default: UInt8(DT_UNKNOWN)
        }
    }

    /// Whether `folders` (a listing's, of the folder at the resolved path `root`) are all still
    /// folders with the modification times they had.
    static func isCurrent(_ folders: [String: Timestamp], under root: String) -> Bool {
        folders.allSatisfy { path, time in
            let status = try? Syscall.linkStatus(ofPath: path.isEmpty ? root : root + "/" + path)
            return status.map { $0.isDirectory && Timestamp($0.st_mtim) == time } ?? false
        }
    }

    // MARK: descriptors

    /// `open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)`: a folder, not a link to one.
    static func openFolder(_ path: String) throws(SystemCallError) -> OwnedFD {
        try Syscall.openFolder(path)
    }

    /// The folder `name` in `parent`, not a link to one.
    static func openFolder(_ name: String, in parent: borrowing OwnedFD) throws(SystemCallError) -> OwnedFD {
        let fd = openat(parent.rawValue, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw SystemCallError(call: "open(\(name))", errno: errno) }
        return OwnedFD(adopting: fd)
    }

    /// The names in the open folder `folder` (without `.` and `..`), at most `limit` of them,
    /// each with its type as `readdir` reports it (`DT_UNKNOWN` on file systems that do not
    /// say). Names that are not UTF-8 are left out: they could not be opened again by name.
    static func entries(of folder: borrowing OwnedFD, limit: Int) throws(SystemCallError) -> [(name: String, type: UInt8)] {
        let copy = try folder.duplicate().release()
        guard let directory = fdopendir(copy) else {
            let code = errno
            Syscall.close(copy)
            throw SystemCallError(call: "fdopendir", errno: code)
        }
        defer { closedir(directory) }
        var names: [(String, UInt8)] = []
        while names.count < limit, let entry = readdir(directory) {
            // Read through a pointer up to its NUL, as Syscall.directoryEntries does: a record
            // is only as long as its name.
            let pointer = UnsafeRawPointer(entry).advanced(by: MemoryLayout<dirent>.offset(of: \dirent.d_name)!)
                .assumingMemoryBound(to: UInt8.self)
            let bytes = UnsafeBufferPointer(start: pointer, count: strlen(UnsafeRawPointer(pointer).assumingMemoryBound(to: CChar.self)))
            guard let name = String(validating: bytes, as: UTF8.self), name != ".", name != ".." else { continue }
            names.append((name, entry.pointee.d_type))
        }
        return names
    }
}
