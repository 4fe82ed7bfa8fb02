import CProto
import Glibc

/// Every system call RemoteCore makes, one wrapper each (like swift-system's `Syscalls.swift`).
///
/// Conventions: `EINTR` is retried; `EAGAIN` comes back as a value (``IOResult/wouldBlock``);
/// `EBADF` and `EFAULT` trap, because they mean we passed a bad descriptor or pointer; every
/// other failure is thrown as a ``SystemCallError`` naming the call.
package enum Syscall {}

/// The outcome of a non-blocking call.
package enum IOResult<Value> {
    case done(Value)
    case wouldBlock
}

extension Syscall {
    /// Runs `body` until it stops failing with `EINTR`; returns its result or throws.
    @inline(__always)
    static func retrying<R: BinaryInteger>(_ call: String, _ body: () -> R) throws(SystemCallError) -> R {
        while true {
            let result = body()
            if result != -1 { return result }
            let code = Glibc.errno
            if code == EINTR { continue }
            try fail(call, code)
        }
    }

    /// Like ``retrying(_:_:)`` but returns `EAGAIN`/`EWOULDBLOCK` as ``IOResult/wouldBlock``.
    @inline(__always)
    static func nonBlocking<R: BinaryInteger>(_ call: String, _ body: () -> R) throws(SystemCallError) -> IOResult<R> {
        while true {
            let result = body()
            if result != -1 { return .done(result) }
            let code = Glibc.errno
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK { return .wouldBlock }
            try fail(call, code)
        }
    }

    static func fail(_ call: String, _ code: Int32) throws(SystemCallError) -> Never {
        precondition(code != EBADF && code != EFAULT, "\(call): \(SystemCallError(call: call, errno: code)) — a RemoteView bug")
        throw SystemCallError(call: call, errno: code)
    }

    // MARK: descriptors

    /// `close(fd)`. Never retried on `EINTR` (on Linux the fd is gone either way).
    package static func close(_ fd: Int32) {
        let result = Glibc.close(fd)
        precondition(result == 0 || Glibc.errno != EBADF, "close(\(fd)): EBADF — double close, a RemoteView bug")
    }

    /// `fcntl(fd, F_DUPFD_CLOEXEC, minimum)`.
    package static func duplicate(_ fd: Int32, minimum: Int32 = 0) throws(SystemCallError) -> Int32 {
        try retrying("fcntl(F_DUPFD_CLOEXEC)") { rv_fcntl_int(fd, F_DUPFD_CLOEXEC, minimum) }
    }

    /// `fcntl(fd, F_GETFD)` / `F_SETFD` to set or clear `FD_CLOEXEC`.
    package static func setCloseOnExec(_ fd: Int32, _ on: Bool) throws(SystemCallError) {
        let flags = try retrying("fcntl(F_GETFD)") { rv_fcntl_int(fd, F_GETFD, 0) }
        let wanted = on ? flags | FD_CLOEXEC : flags & ~FD_CLOEXEC
        if wanted != flags { _ = try retrying("fcntl(F_SETFD)") { rv_fcntl_int(fd, F_SETFD, wanted) } }
    }

    /// `fcntl(fd, F_GETFL)` / `F_SETFL` to set or clear `O_NONBLOCK`.
    package static func setNonBlocking(_ fd: Int32, _ on: Bool) throws(SystemCallError) {
        let flags = try retrying("fcntl(F_GETFL)") { rv_fcntl_int(fd, F_GETFL, 0) }
        let wanted = on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK
        if wanted != flags { _ = try retrying("fcntl(F_SETFL)") { rv_fcntl_int(fd, F_SETFL, wanted) } }
    }

    /// `fstat(fd)`.
    package static func status(_ fd: Int32) throws(SystemCallError) -> stat {
        var result = stat()
        _ = try retrying("fstat") { fstat(fd, &result) }
        return result
    }

    // MARK: sockets

    /// `socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | extra, 0)`.
    package static func seqpacketPair(nonBlocking: Bool) throws(SystemCallError) -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        let type = Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
            | (nonBlocking ? Int32(SOCK_NONBLOCK.rawValue) : 0)
        _ = try retrying("socketpair") { socketpair(AF_UNIX, type, 0, &fds) }
        return (fds[0], fds[1])
    }

    /// `accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)`.
    package static func accept(_ fd: Int32) throws(SystemCallError) -> IOResult<Int32> {
        try nonBlocking("accept4") { rv_accept_cloexec_nonblock(fd) }
    }

    /// A `SOCK_SEQPACKET | SOCK_CLOEXEC` socket connected to the Unix socket at `path`.
    package static func connectSeqpacket(to path: String) throws(SystemCallError) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard !bytes.isEmpty, bytes.count < MemoryLayout.size(ofValue: address.sun_path), !bytes.contains(0) else {
            try fail("connect(\(path)): not a usable socket path", EINVAL)
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in raw.copyBytes(from: bytes) }
        let fd = try retrying("socket") { socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        let result = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        if result != 0 {
            let code = Glibc.errno
            close(fd)
            try fail("connect(\(path))", code)
        }
        return fd
    }

    /// `pipe2(O_CLOEXEC)`: `first` is the read end, `second` the write end.
    package static func pipe() throws(SystemCallError) -> SocketPair {
        var fds: [Int32] = [-1, -1]
        _ = try retrying("pipe2") { rv_pipe_cloexec(&fds) }
        return SocketPair(first: OwnedFD(adopting: fds[0]), second: OwnedFD(adopting: fds[1]))
    }

    /// `getsockopt(fd, SOL_SOCKET, option)` for an int option.
    package static func socketOption(_ fd: Int32, _ option: Int32) throws(SystemCallError) -> Int32 {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        _ = try retrying("getsockopt") { getsockopt(fd, SOL_SOCKET, option, &value, &length) }
        return value
    }

    /// `sendmsg(fd, message, MSG_DONTWAIT | MSG_NOSIGNAL)`.
    package static func sendMessage(_ fd: Int32, _ message: UnsafePointer<msghdr>) throws(SystemCallError) -> IOResult<Int> {
        try nonBlocking("sendmsg") { sendmsg(fd, message, Int32(MSG_DONTWAIT) | Int32(MSG_NOSIGNAL)) }
    }

    /// `recvmsg(fd, message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC)`.
    package static func receiveMessage(_ fd: Int32, _ message: UnsafeMutablePointer<msghdr>) throws(SystemCallError) -> IOResult<Int> {
        try nonBlocking("recvmsg") { recvmsg(fd, message, Int32(MSG_DONTWAIT) | rv_msg_cmsg_cloexec) }
    }

    /// `shutdown(fd, SHUT_RDWR)`. `ENOTCONN` (peer already gone) is not an error here.
    package static func shutdownBoth(_ fd: Int32) {
        if Glibc.shutdown(fd, Int32(SHUT_RDWR)) == -1 {
            let code = Glibc.errno
            precondition(code != EBADF, "shutdown: EBADF — a RemoteView bug")
        }
    }

    // MARK: epoll, eventfd

    /// `epoll_create1(EPOLL_CLOEXEC)`.
    package static func epollCreate() throws(SystemCallError) -> Int32 {
        try retrying("epoll_create1") { epoll_create1(Int32(EPOLL_CLOEXEC)) }
    }

    /// `epoll_ctl(epfd, operation, fd, event)`.
    package static func epollControl(_ epfd: Int32, _ operation: Int32, _ fd: Int32, events: UInt32, token: UInt64) throws(SystemCallError) {
        var event = epoll_event()
        event.events = events
        event.data.u64 = token
        _ = try retrying("epoll_ctl") { epoll_ctl(epfd, operation, fd, &event) }
    }

    /// `epoll_wait(epfd, events, count, timeout)`; returns how many are ready (0 on `EINTR`).
    package static func epollWait(_ epfd: Int32, _ events: UnsafeMutablePointer<epoll_event>, _ count: Int32, timeoutMilliseconds: Int32) throws(SystemCallError) -> Int {
        let result = epoll_wait(epfd, events, count, timeoutMilliseconds)
        if result >= 0 { return Int(result) }
        let code = Glibc.errno
        if code == EINTR { return 0 }
        try fail("epoll_wait", code)
    }

    /// `eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)`.
    package static func eventCounter() throws(SystemCallError) -> Int32 {
        try retrying("eventfd") { eventfd(0, Int32(EFD_CLOEXEC) | Int32(EFD_NONBLOCK)) }
    }

    /// `eventfd_write(fd, 1)`; a full counter (`EAGAIN`) already means "wake up".
    package static func signalEventCounter(_ fd: Int32) {
        var one: UInt64 = 1
        _ = try? nonBlocking("write(eventfd)") { Glibc.write(fd, &one, 8) }
    }

    /// `read(fd, 8 bytes)` on a non-blocking eventfd, to reset it.
    package static func drainEventCounter(_ fd: Int32) {
        var value: UInt64 = 0
        _ = try? nonBlocking("read(eventfd)") { Glibc.read(fd, &value, 8) }
    }

    // MARK: memfd, mmap

    /// `memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING)`.
    package static func memoryFileCreate(_ name: String) throws(SystemCallError) -> Int32 {
        try retrying("memfd_create") { rv_memfd_create(name, rv_mfd_cloexec | rv_mfd_allow_sealing) }
    }

    /// `ftruncate(fd, size)`.
    package static func truncate(_ fd: Int32, _ size: Int) throws(SystemCallError) {
        _ = try retrying("ftruncate") { ftruncate(fd, off_t(size)) }
    }

    /// `fcntl(fd, F_ADD_SEALS, seals)`.
    package static func addSeals(_ fd: Int32, _ seals: Int32) throws(SystemCallError) {
        _ = try retrying("fcntl(F_ADD_SEALS)") { rv_fcntl_int(fd, rv_f_add_seals, seals) }
    }

    /// `fcntl(fd, F_GET_SEALS)`. `EINVAL` (not a sealable file) is thrown, not trapped, so a
    /// receiver can report that a peer sent something other than a memfd.
    package static func seals(_ fd: Int32) throws(SystemCallError) -> Int32 {
        let result = rv_fcntl_int(fd, rv_f_get_seals, 0)
        if result >= 0 { return result }
        throw SystemCallError(call: "fcntl(F_GET_SEALS)", errno: Glibc.errno)
    }

    /// `pwrite(fd, bytes, offset)` until everything is written.
    package static func writeAll(_ fd: Int32, _ bytes: [UInt8], at offset: Int) throws(SystemCallError) {
        var done = 0
        while done < bytes.count {
            let count = try retrying("pwrite") {
                bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, $0.count - done, off_t(offset + done)) }
            }
            done += count
        }
    }

    /// `pread(fd, count, offset)` until `count` bytes or end of file.
    package static func readAll(_ fd: Int32, count: Int, at offset: Int) throws(SystemCallError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let read = try retrying("pread") {
                bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, $0.count - done, off_t(offset + done)) }
            }
            if read == 0 { break }
            done += read
        }
        return Array(bytes.prefix(done))
    }

    /// `mmap(NULL, length, PROT_READ[|PROT_WRITE], MAP_SHARED, fd, 0)`.
    package static func mapShared(_ fd: Int32, length: Int, writable: Bool) throws(SystemCallError) -> UnsafeMutableRawPointer {
        let protection = writable ? PROT_READ | PROT_WRITE : PROT_READ
        guard let address = mmap(nil, length, protection, MAP_SHARED, fd, 0), address != MAP_FAILED else {
            try fail("mmap", Glibc.errno)
        }
        return address
    }

    /// `munmap(address, length)`.
    package static func unmap(_ address: UnsafeMutableRawPointer, length: Int) {
        let result = munmap(address, length)
        precondition(result == 0, "munmap: \(SystemCallError(call: "munmap", errno: Glibc.errno)) — a RemoteView bug")
    }
}
