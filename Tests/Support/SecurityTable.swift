import Glibc

/// The rows of docs/SECURITY.md's table: each attack the security suite tried and what
/// happened. With `REMOTEVIEW_SECURITY_TABLE=FILE` in the environment (scripts/security-table
/// sets it), every row is appended to FILE as a tab-separated line; otherwise nothing is written.
public enum SecurityTable {
    /// Records that `attack` (what the service tried, in words) ended in `outcome` (denied with
    /// which errno, or ended with which reason), and whether it was contained: the host stayed
    /// up and nothing reached outside the sandbox.
    public static func record(_ attack: String, _ outcome: String, contained: Bool) {
        guard let path = getenv("REMOTEVIEW_SECURITY_TABLE").map({ String(cString: $0) }) else { return }
        let line = [attack, outcome, contained ? "yes" : "NO"].map { $0.replacing("\t", with: " ").replacing("\n", with: " ") }
            .joined(separator: "\t") + "\n"
        let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let bytes = Array(line.utf8)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }
}
