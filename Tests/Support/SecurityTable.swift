import Glibc

/// The rows of docs/SECURITY.md's table: each attack the security suite tried and what
/// happened. With `REMOTEVIEW_SECURITY_TABLE=FILE` in the environment (scripts/security-table
/// sets it), every row is appended to FILE as a tab-separated line; otherwise nothing is written.
public enum SecurityTable {
    /// Records that `attack` (what the service tried, in words) ended in `outcome` (denied with
    /// which errno, or ended with which reason), and whether it was contained: the host stayed
    /// up and nothing reached outside the sandbox.
    ///
    /// Each row says which user the host ran as (the suite runs as root, and again as an
    /// ordinary user: `SecurityTests.ordinaryUser`).
    public static func record(_ attack: String, _ outcome: String, contained: Bool) {
        guard let path = getenv("REMOTEVIEW_SECURITY_TABLE").map({ String(cString: $0) }) else { return }
        let line = [attack, hostUser, outcome, contained ? "yes" : "NO"].map { $0.replacing("\t", with: " ").replacing("\n", with: " ") }
            .joined(separator: "\t") + "\n"
        let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let bytes = Array(line.utf8)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }

    /// The user the host runs as, for the table: `root` (its sandboxed services run as uids of
    /// their own) or the ordinary user's uid.
    public static var hostUser: String {
        getuid() == 0 ? "root" : "uid \(getuid())"
    }
}
