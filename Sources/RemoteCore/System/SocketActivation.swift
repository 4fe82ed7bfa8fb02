import Glibc

/// The systemd socket-activation convention (`sd_listen_fds(3)`): a service started with
/// `LISTEN_FDS=1` finds its socket at fd 3.
///
/// RemoteView's launcher starts services this way, and `systemd-socket-activate --accept
/// --seqpacket` does too, so one service binary runs under both. `LISTEN_PID` cannot match
/// inside a new pid namespace, so the socket is accepted when `LISTEN_PID` is absent or names
/// this process.
package enum SocketActivation {
    /// The first passed descriptor, per `SD_LISTEN_FDS_START`.
    package static let firstDescriptor: Int32 = 3

    /// What fd 3 turned out to be.
    package enum Socket: ~Copyable {
        /// One connection (a RemoteView host's socketpair end, or `systemd-socket-activate --accept`).
        case connected(OwnedFD)
        /// A listening socket to accept connections from (systemd `Accept=no`).
        case listening(OwnedFD)
    }

    /// Takes fd 3 if this process was socket-activated with a `SOCK_SEQPACKET` socket, marks
    /// it close-on-exec and clears the `LISTEN_*` variables (as `sd_listen_fds(1)` does) so
    /// children do not inherit them.
    ///
    /// - Throws: ``RemoteError`` `invalidated`, naming what is missing or wrong.
    package static func takeSocket() throws(RemoteError) -> Socket {
        guard let count = getenv("LISTEN_FDS").map({ String(cString: $0) }) else {
            throw RemoteError(.invalidated, "no socket passed: LISTEN_FDS is not set (start this service through a RemoteView host or systemd-socket-activate --accept --seqpacket)")
        }
        if let pid = getenv("LISTEN_PID").map({ String(cString: $0) }), pid != String(getpid()) {
            throw RemoteError(.invalidated, "LISTEN_PID=\(pid) names another process (this is \(getpid()))")
        }
        guard count == "1" else {
            throw RemoteError(.invalidated, "LISTEN_FDS=\(count): a RemoteView service takes exactly one socket")
        }
        let fd = firstDescriptor
        let listening: Bool
        do {
            guard try Syscall.socketOption(fd, SO_TYPE) == Int32(SOCK_SEQPACKET.rawValue) else {
                throw RemoteError(.invalidated, "fd 3 is not a SOCK_SEQPACKET socket")
            }
            listening = try Syscall.socketOption(fd, SO_ACCEPTCONN) != 0
            try Syscall.setCloseOnExec(fd, true)
        } catch let error as SystemCallError {
            throw RemoteError(.invalidated, "fd 3 is not a usable socket: \(error)")
        } catch let error as RemoteError {
            throw error
        } catch {
            preconditionFailure("unexpected \(error)")
        }
        unsetenv("LISTEN_FDS")
        unsetenv("LISTEN_PID")
        unsetenv("LISTEN_FDNAMES")
        return listening ? .listening(OwnedFD(adopting: fd)) : .connected(OwnedFD(adopting: fd))
    }
}
