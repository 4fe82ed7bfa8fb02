import CRemoteViewLinux
import Glibc
import RemoteCore

/// `sendmsg` of raw bytes with optional SCM_RIGHTS, bypassing the codec (tests only).
public func rawSend(_ fd: Int32, _ bytes: [UInt8], fds: [Int32] = []) throws {
    var bytes = bytes
    let result = bytes.withUnsafeMutableBytes { buffer -> Int in
        var iov = iovec(iov_base: buffer.baseAddress, iov_len: buffer.count)
        return withUnsafeMutablePointer(to: &iov) { iovPointer in
            var message = msghdr()
            message.msg_iov = iovPointer
            message.msg_iovlen = 1
            let length = fds.count * 4
            let control = UnsafeMutableRawPointer.allocate(byteCount: max(rv_cmsg_space(length), 1), alignment: 8)
            defer { control.deallocate() }
            if !fds.isEmpty {
                message.msg_control = control
                message.msg_controllen = rv_cmsg_space(length)
                let header = rv_cmsg_firsthdr(&message)!
                header.pointee.cmsg_level = SOL_SOCKET
                header.pointee.cmsg_type = Int32(SCM_RIGHTS)
                header.pointee.cmsg_len = rv_cmsg_len(length)
                let data = UnsafeMutableRawPointer(rv_cmsg_data(header))
                for (index, fd) in fds.enumerated() { data.storeBytes(of: fd, toByteOffset: index * 4, as: Int32.self) }
            }
            return sendmsg(fd, &message, Int32(MSG_NOSIGNAL))
        }
    }
    if result < 0 { throw SystemCallError(call: "sendmsg (test)", errno: errno) }
}

extension Connection.Configuration {
    /// A host side for connection tests.
    public static let testHost = Connection.Configuration(role: .host, identifier: "com.example.host")
    /// A service side for connection tests (it says it can echo).
    public static let testService = Connection.Configuration(role: .service, identifier: "com.example.service", capabilities: ["echo"])
}
