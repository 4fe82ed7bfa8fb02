import Glibc

/// A system call failed for a reason outside the program (no memory, too many open files, a
/// refused permission). Names the call and the errno, like swift-system's `Errno`.
///
/// Programming errors (`EBADF`, `EFAULT`, `EINVAL` on a call we built) trap instead.
public struct SystemCallError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The C function that failed, e.g. `"sendmsg"`.
    public var call: String
    /// The `errno` it set.
    public var errno: Int32

    public init(call: String, errno: Int32) {
        self.call = call
        self.errno = errno
    }

    /// What `errno` means, in words (`strerror`), e.g. "No such file or directory".
    public var reason: String { String(cString: strerror(errno)) }

    public var description: String {
        "\(call) failed: \(reason) (errno \(errno))"
    }
}
