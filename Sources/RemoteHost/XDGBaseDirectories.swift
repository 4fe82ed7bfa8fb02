import Glibc
import RemoteCore

/// The folders of the XDG base directory specification that the host reads or writes: the
/// user's data folder (the services' data folders, the user's MIME database, the user's fonts),
/// the user's cache folder (the fontconfig cache of those fonts), the user's state folder (the
/// share sheet's ranking and choices, ``SharePreferences``) and the system's data folders
/// (the system's MIME databases). Relative paths in the variables are ignored, as
/// the specification asks.
enum XDGBaseDirectories {
    /// `xdgDataHome` when it is an absolute path, else `home/.local/share`; `nil` without either.
    static func dataHome(xdgDataHome: String?, home: String?) -> String? {
        baseFolder(xdgDataHome, home: home, default: ".local/share")
    }

    /// This process's data home: `$XDG_DATA_HOME`, else `$HOME/.local/share`, with the user
    /// database's home folder when `$HOME` is not set (and `/` when there is none).
    static func dataHome() -> String {
        dataHome(xdgDataHome: variable("XDG_DATA_HOME"), home: variable("HOME") ?? Syscall.userHomeDirectory())
            ?? "/.local/share"
    }

    /// `xdgCacheHome` when it is an absolute path, else `home/.cache`; `nil` without either.
    static func cacheHome(xdgCacheHome: String?, home: String?) -> String? {
        baseFolder(xdgCacheHome, home: home, default: ".cache")
    }

    /// `xdgStateHome` when it is an absolute path, else `home/.local/state`; `nil` without either.
    static func stateHome(xdgStateHome: String?, home: String?) -> String? {
        baseFolder(xdgStateHome, home: home, default: ".local/state")
    }

    /// This process's state home: `$XDG_STATE_HOME`, else `$HOME/.local/state`, with the user
    /// database's home folder when `$HOME` is not set (and `/` when there is none).
    static func stateHome() -> String {
        stateHome(xdgStateHome: variable("XDG_STATE_HOME"), home: variable("HOME") ?? Syscall.userHomeDirectory())
            ?? "/.local/state"
    }

    /// `variable` when it is an absolute path, else `home/folder`; `nil` without either.
    private static func baseFolder(_ variable: String?, home: String?, default folder: String) -> String? {
        if let variable, variable.hasPrefix("/") { return withoutTrailingSlash(variable) }
        if let home, home.hasPrefix("/") { return (home == "/" ? "" : withoutTrailingSlash(home)) + "/" + folder }
        return nil
    }

    /// This process's cache home: `$XDG_CACHE_HOME`, else `$HOME/.cache`, with the user
    /// database's home folder when `$HOME` is not set (and `/` when there is none).
    static func cacheHome() -> String {
        cacheHome(xdgCacheHome: variable("XDG_CACHE_HOME"), home: variable("HOME") ?? Syscall.userHomeDirectory())
            ?? "/.cache"
    }

    /// The folders of `xdgDataDirectories` (`:`-separated), or `/usr/local/share:/usr/share`
    /// when it is unset or empty.
    static func dataDirectories(_ xdgDataDirectories: String?) -> [String] {
        let value = xdgDataDirectories.flatMap { $0.isEmpty ? nil : $0 } ?? "/usr/local/share:/usr/share"
        return value.split(separator: ":").map(String.init).filter { $0.hasPrefix("/") }.map(withoutTrailingSlash)
    }

    /// The environment variable `name`, if set.
    static func variable(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }

    private static func withoutTrailingSlash(_ path: String) -> String {
        path.count > 1 && path.hasSuffix("/") ? String(path.dropLast()) : path
    }
}
