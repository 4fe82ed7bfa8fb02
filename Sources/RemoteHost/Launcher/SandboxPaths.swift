import Glibc
import RemoteCore

/// Which host paths may be bound into a sandbox: the rule behind a manifest's
/// `sandbox.readOnlyPaths` and the folders a `RUNPATH` brings in.
///
/// A service runs as the host's user, so whatever is bound, it can read. The rule keeps out the
/// host's live state and secrets, whatever a manifest asks for:
/// - nothing at or below a ``privateFolders`` entry (`/proc`, `/home`, `/run`, …);
/// - no folder that *contains* such a place (so not `/`, not `/var`), and not `/etc` as a
///   whole: name the files of `/etc` the service needs, e.g. `/etc/ssl/certs`;
/// - none of ``secrets`` (`/etc/shadow`, `/etc/ssh`, …), nor a folder containing one;
/// - only regular files and folders (no socket, FIFO or device);
/// - only what every user of the machine may read (mode `o+r`, and `o+x` for a folder), so a
///   sandbox never shows a file the host's user keeps to itself; and for a root host, whose
///   services run as uids of their own, only what they can reach (`o+x` on every folder above);
/// - never the launcher's data root, which holds every service's data folder.
///
/// The rule is checked on the path with its symbolic links resolved, when the manifest is read
/// and again at every launch (a link can change in between); the resolved path is what is bound.
///
/// One named exception is not this rule's to make: the user's font folder (fontconfig's,
/// `$XDG_DATA_HOME/fonts`, at or below `/home` or `/root`), which the launcher binds itself,
/// read-only, with checks of its own (``UserFontsKeeper``: a folder of the host's user that no
/// other user may write to; a root host binds its copy instead, ``FontMirror``). A manifest's
/// `readOnlyPaths` still may not name it: `/home` and `/root` stay refused here.
enum SandboxPaths {
    /// Host folders never bound, in whole or in part: the kernel's views of the host (`/proc`,
    /// `/sys`, `/dev`), runtime state and sockets (`/run`, `/tmp`), people's files, boot and
    /// mounted media, logs and mail.
    static let privateFolders = ["/proc", "/sys", "/dev", "/run", "/var/run", "/tmp", "/var/tmp", "/home", "/root",
                                 "/boot", "/mnt", "/media", "/lost+found", "/var/log", "/var/mail", "/var/spool", "/var/backups"]

    /// Files and folders under `/etc` that hold secrets.
    static let secrets = ["/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d",
                          "/etc/ssh", "/etc/ssl/private", "/etc/security", "/etc/krb5.keytab", "/etc/NetworkManager",
                          "/etc/wpa_supplicant", "/etc/ppp", "/etc/openvpn", "/etc/wireguard", "/etc/libvirt", "/etc/cups"]

    /// Why `path` may not be bound read-only into a sandbox, or the resolved path to bind.
    ///
    /// - Parameters:
    ///   - dataRoot: The launcher's data root, when known (at launch).
    ///   - forbidden: The places never bound (tests give their own).
    ///   - reachable: Whether every user must be able to pass the folders above it too: for a
    ///     root host's service, which runs as a uid of its own, and whose bubblewrap binds it by
    ///     path as that uid.
    static func check(readOnly path: String, dataRoot: String? = nil,
                      forbidden: [String] = privateFolders + secrets, reachable: Bool = false) -> Result<String, Refusal> {
        let resolved: String
        do {
            resolved = try Syscall.resolvedPath(path)
        } catch {
            return .failure(Refusal("\(path) cannot be bound: \(error.reason)"))
        }
        let shown = resolved == path ? path : "\(path) (\(resolved))"
        if resolved == "/etc" {
            return .failure(Refusal("\(shown) is refused: /etc as a whole holds the host's secrets; name the files the service needs (e.g. /etc/ssl/certs)"))
        }
        for place in forbidden {
            if resolved == place || resolved.hasPrefix(place + "/") {
                return .failure(Refusal("\(shown) is refused: \(place) is never bound into a sandbox (the host's live state or secrets)"))
            }
            if place.hasPrefix(resolved == "/" ? "/" : resolved + "/") {
                return .failure(Refusal("\(shown) is refused: it contains \(place), which is never bound into a sandbox"))
            }
        }
        if let dataRoot, let root = try? Syscall.resolvedPath(dataRoot),
           resolved == root || resolved.hasPrefix(root + "/") || root.hasPrefix(resolved + "/") {
            return .failure(Refusal("\(shown) is refused: it overlaps the services' data folders (\(root))"))
        }
        let status: stat
        do {
            status = try Syscall.status(ofPath: resolved)
        } catch {
            return .failure(Refusal("\(shown) cannot be bound: \(error.reason)"))
        }
        guard status.isRegularFile || status.isDirectory else {
            return .failure(Refusal("\(shown) is refused: only regular files and folders are bound (it is a socket, FIFO or device)"))
        }
        let everyone: mode_t = status.isDirectory ? S_IROTH | S_IXOTH : S_IROTH
        guard status.st_mode & everyone == everyone else {
            return .failure(Refusal("\(shown) is refused: it is not readable by every user (mode o+r\(status.isDirectory ? "x" : "")); a sandbox shows only what any user may read"))
        }
        if reachable, let folder = unreachableFolder(above: resolved) {
            return .failure(Refusal("\(shown) is refused: the service's own uid cannot reach it (the host is root), since \(folder) above it does not let other users through (mode o+x)"))
        }
        return .success(resolved)
    }

    /// The first folder on the way to the resolved path `path` that a process unrelated to
    /// the folders' owners cannot pass (no `o+x`), or `nil` when every folder above it lets
    /// anyone through. A root host's services run as uids of their own
    /// (``ServiceUserPool``), and bubblewrap, run as that uid, reaches what it binds by path.
    static func unreachableFolder(above path: String) -> String? {
        var folder = ""
        for component in path.split(separator: "/").dropLast() {
            folder += "/" + component
            guard let status = try? Syscall.status(ofPath: folder), status.st_mode & S_IXOTH != 0 else { return folder }
        }
        return nil
    }

    /// Makes the folders of the absolute path `path` that are missing, each with exactly the
    /// mode `mode` gives for it (set through a descriptor, whatever the process's umask
    /// takes off, and never through a link); the folders already there are left as they are.
    static func makeFolders(_ path: String, mode: (String) -> mode_t) throws(SystemCallError) {
        var folder = ""
        for component in path.split(separator: "/") {
            folder += "/" + component
            guard try Syscall.makeDirectory(folder, mode: 0o700) else { continue }
            try Syscall.changeMode(try Syscall.openFolder(folder), mode(folder), name: folder)
        }
    }

    /// Why a path is refused.
    struct Refusal: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }
}
