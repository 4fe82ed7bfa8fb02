import CRemoteViewLinux
import Glibc
import RemoteCore

/// Sends `bytes` as one packet on the socket `fd` (`sendmsg`), with `fds` as `SCM_RIGHTS`,
/// bypassing the codec and its checks: how the tests and the hostile fixture service put
/// malformed or rule-breaking packets on the wire.
///
/// - Throws: `SystemCallError` when `sendmsg` fails, or sends less than the whole packet.
public func rawSend(_ fd: Int32, _ bytes: [UInt8], fds: [Int32] = []) throws(SystemCallError) {
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
                control.initializeMemory(as: UInt8.self, repeating: 0, count: rv_cmsg_space(length))
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
    if result < 0 { throw SystemCallError(call: "sendmsg (raw packet)", errno: errno) }
    if result != bytes.count { throw SystemCallError(call: "sendmsg (raw packet): \(result) of \(bytes.count) bytes", errno: EMSGSIZE) }
}
