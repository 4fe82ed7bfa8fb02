import Glibc
import RemoteHost

// Checks the gateway's types share: what a service identifier is to the gateway, and how it
// reads the files its operator gives it.

/// Whether `text` is a service identifier as the gateway takes one (in an authorization's
/// pattern, in a `Connect` stream's `open`): 1…255 bytes of dot-separated, non-empty labels
/// of ASCII letters, digits, `-` and `_`.
func isServiceIdentifier(_ text: String) -> Bool {
    guard (1...255).contains(text.utf8.count) else { return false }
    return text.split(separator: ".", omittingEmptySubsequences: false).allSatisfy { label in
        !label.isEmpty && label.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }
    }
}

/// The regular file at `path`, at most `limit` bytes.
///
/// - Throws: ``GatewayError`` naming `what` and `path`: it cannot be opened, is not a
///   regular file, is larger, or a read fails.
public func readBoundedFile(_ path: String, limit: Int, what: String) throws(GatewayError) -> [UInt8] {
    let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
    guard fd >= 0 else { throw GatewayError("cannot read \(what) \(path.escapedForTerminal()): \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var status = stat()
    guard fstat(fd, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
        throw GatewayError("\(what) \(path.escapedForTerminal()) is not a regular file")
    }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        if count < 0, errno == EINTR { continue }
        guard count >= 0 else { throw GatewayError("cannot read \(what) \(path.escapedForTerminal()): \(String(cString: strerror(errno)))") }
        if count == 0 { return bytes }
        bytes += chunk[..<count]
        guard bytes.count <= limit else { throw GatewayError("\(what) \(path.escapedForTerminal()) is over \(limit) bytes") }
    }
}
