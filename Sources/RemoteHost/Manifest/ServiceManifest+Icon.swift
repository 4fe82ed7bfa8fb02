import Glibc
import RemoteCore

extension ServiceManifest {
    /// A manifest's icon (`display.icon`), read and checked once, when the manifest is loaded:
    /// hosts show these bytes and never open the file again (like a desktop entry's `Icon`, but
    /// with its file bounded and kept where the manifest's author put it).
    ///
    /// The file is opened only inside the manifest's folder or an XDG icon folder
    /// (`$XDG_DATA_HOME/icons`, each of `$XDG_DATA_DIRS` + `/icons`), with `openat2` and
    /// `RESOLVE_BENEATH` from that folder, so that no `..` and no symbolic link in it leads out
    /// of it; it must be a regular file of at most ``maxBytes`` bytes that starts with PNG's
    /// signature and declares at most ``maxSide`` × ``maxSide`` pixels in its `IHDR` chunk
    /// (read before anything decodes it). Otherwise the manifest is used without its icon, and
    /// ``ServiceRegistry/warnings`` says why.
    public struct Icon: Sendable, Hashable {
        /// The file it was read from: the folder it was opened beneath, and the path below it.
        public let path: String
        /// The file's bytes: a PNG of at most ``maxBytes``.
        public let pngData: [UInt8]
        /// The width its `IHDR` declares, 1…``maxSide``.
        public let width: Int
        /// The height its `IHDR` declares, 1…``maxSide``.
        public let height: Int

        /// The largest icon file read: 1 MiB.
        public static let maxBytes = 1 << 20
        /// The largest width and height an icon may declare: 1024.
        public static let maxSide = 1024
    }
}

extension ServiceManifest.Icon {
    /// Why an icon is left out.
    struct Refusal: Error {
        var reason: String
    }

    /// The XDG icon folders: `$XDG_DATA_HOME/icons` (default `~/.local/share/icons`), then
    /// `icons` in each of `$XDG_DATA_DIRS` (default `/usr/local/share:/usr/share`).
    static var xdgIconFolders: [String] {
        ([XDGBaseDirectories.dataHome()] + XDGBaseDirectories.dataDirectories(XDGBaseDirectories.variable("XDG_DATA_DIRS")))
            .map { ($0 == "/" ? "" : $0) + "/icons" }
    }

    /// Reads and checks the icon a manifest in `manifestFolder` (an absolute path) names as
    /// `written`: relative to that folder, or an absolute path inside it or inside one of
    /// `iconFolders`.
    static func read(_ written: String, manifestFolder: String, iconFolders: [String]) throws(Refusal) -> Self {
        let (folder, below) = try place(of: written, manifestFolder: manifestFolder, iconFolders: iconFolders)
        let path = (folder == "/" ? "" : folder) + "/" + below
        let bytes: [UInt8]
        do {
            let directory = try Syscall.openDirectory(folder)
            let file = try Syscall.openBeneath(directory, below)
            let status = try Syscall.status(file)
            guard status.isRegularFile else { throw Refusal(reason: "\(path) is not a regular file") }
            guard status.st_size <= maxBytes else { throw Refusal(reason: "\(path) is \(status.st_size) bytes, more than \(maxBytes) (1 MiB)") }
            bytes = try Syscall.readToEnd(file, limit: maxBytes, name: path)
        } catch let refusal as Refusal {
            throw refusal
        } catch let error as SystemCallError where error.errno == EXDEV {
            throw Refusal(reason: "\(written) leads out of \(folder) (by .. or a symbolic link)")
        } catch let error as SystemCallError where error.errno == ELOOP {
            throw Refusal(reason: "\(written) goes through a /proc link or too many symbolic links")
        } catch let error as SystemCallError where error.errno == EFBIG {
            throw Refusal(reason: "\(path) is more than \(maxBytes) bytes (1 MiB)")
        } catch let error as SystemCallError where error.errno == ENOSYS {
            throw Refusal(reason: "this kernel has no openat2 (Linux 5.6), so \(path) cannot be opened safely")
        } catch let error as SystemCallError {
            throw Refusal(reason: "\(path) cannot be read: \(error.reason)")
        } catch {
            throw Refusal(reason: "\(path) cannot be read: \(error)")
        }
        let (width, height) = try dimensions(of: bytes, path: path)
        return Self(path: path, pngData: bytes, width: width, height: height)
    }

    /// Checks an icon's bytes that came from elsewhere (a gateway's catalog), named `what`: at
    /// most ``maxBytes``, a PNG signature, and at most ``maxSide`` × ``maxSide`` pixels declared.
    static func checking(_ bytes: [UInt8], what: String) throws(Refusal) -> Self {
        guard bytes.count <= maxBytes else { throw Refusal(reason: "\(what) is \(bytes.count) bytes, more than \(maxBytes) (1 MiB)") }
        let (width, height) = try dimensions(of: bytes, path: what)
        return Self(path: what, pngData: bytes, width: width, height: height)
    }

    /// The folder to open `written` beneath, and the path below it.
    private static func place(of written: String, manifestFolder: String, iconFolders: [String]) throws(Refusal) -> (String, String) {
        guard written.hasPrefix("/") else { return (manifestFolder, written) }
        for folder in [manifestFolder] + iconFolders {
            let prefix = folder.hasSuffix("/") ? folder : folder + "/"
            if written.hasPrefix(prefix), written.count > prefix.count { return (folder, String(written.dropFirst(prefix.count))) }
        }
        throw Refusal(reason: "\(written) is neither in the manifest's folder nor in an icon folder (\(iconFolders.joined(separator: ", ")))")
    }

    /// PNG's signature, `\x89PNG\r\n\x1a\n`.
    private static let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

    /// The width and height the `IHDR` chunk declares (it comes first, right after the
    /// signature: 13 bytes of data, the width and height first, big-endian).
    private static func dimensions(of bytes: [UInt8], path: String) throws(Refusal) -> (Int, Int) {
        guard bytes.starts(with: signature) else { throw Refusal(reason: "\(path) is not a PNG (no PNG signature)") }
        guard bytes.count >= 24, bytes[8..<16].elementsEqual([0, 0, 0, 13] + Array("IHDR".utf8)) else {
            throw Refusal(reason: "\(path) is not a PNG (no IHDR chunk after the signature)")
        }
        func word(at offset: Int) -> Int { bytes[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) } }
        let (width, height) = (word(at: 16), word(at: 20))
        guard (1...maxSide).contains(width), (1...maxSide).contains(height) else {
            throw Refusal(reason: "\(path) declares \(width) × \(height) pixels, more than \(maxSide) × \(maxSide) (or none)")
        }
        return (width, height)
    }
}
