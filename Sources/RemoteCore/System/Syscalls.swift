import CRemoteViewLinux
import CSpawn
import Glibc

/// Every system call RemoteView makes, one wrapper each (like swift-system's `Syscalls.swift`).
///
/// The wrappers that take a raw descriptor number are internal to RemoteCore, where the owned
/// types (``OwnedFD``, ``SeqpacketSocket``, ``MemoryFile``, ``ProcessDescriptor``) use them;
/// the rest of the package sees paths, pids and owned descriptors only.
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
    ///
    /// With `onPeerDescriptor` (a call on a descriptor a peer sent, such as a memfd it attached),
    /// `EBADF` means the peer sent one opened the wrong way (write-only, say): the peer's fault,
    /// so it is thrown, not trapped.
    @inline(__always)
    static func retrying<R: BinaryInteger>(_ call: String, onPeerDescriptor: Bool = false, _ body: () -> R) throws(SystemCallError) -> R {
        while true {
            let result = body()
            if result != -1 { return result }
            let code = Glibc.errno
            if code == EINTR { continue }
            if onPeerDescriptor && code == EBADF { throw SystemCallError(call: call, errno: code) }
            try fail(call, code)
        }
    }

    /// Like ``retrying(_:onPeerDescriptor:_:)`` but returns `EAGAIN`/`EWOULDBLOCK` as ``IOResult/wouldBlock``.
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
    static func duplicate(_ fd: Int32, minimum: Int32 = 0) throws(SystemCallError) -> Int32 {
        try retrying("fcntl(F_DUPFD_CLOEXEC)") { rv_fcntl_int(fd, F_DUPFD_CLOEXEC, minimum) }
    }

    /// `fcntl(fd, F_GETFD)` / `F_SETFD` to set or clear `FD_CLOEXEC`.
    static func setCloseOnExec(_ fd: Int32, _ on: Bool) throws(SystemCallError) {
        let flags = try retrying("fcntl(F_GETFD)") { rv_fcntl_int(fd, F_GETFD, 0) }
        let wanted = on ? flags | FD_CLOEXEC : flags & ~FD_CLOEXEC
        if wanted != flags { _ = try retrying("fcntl(F_SETFD)") { rv_fcntl_int(fd, F_SETFD, wanted) } }
    }

    /// `fcntl(fd, F_GETFL)` / `F_SETFL` to set or clear `O_NONBLOCK`.
    static func setNonBlocking(_ fd: Int32, _ on: Bool) throws(SystemCallError) {
        let flags = try retrying("fcntl(F_GETFL)") { rv_fcntl_int(fd, F_GETFL, 0) }
        let wanted = on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK
        if wanted != flags { _ = try retrying("fcntl(F_SETFL)") { rv_fcntl_int(fd, F_SETFL, wanted) } }
    }

    /// `fstat(fd)`.
    static func status(_ fd: Int32) throws(SystemCallError) -> stat {
        var result = stat()
        _ = try retrying("fstat") { fstat(fd, &result) }
        return result
    }

    // MARK: files and folders

    /// `open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)`. Non-blocking, so that a FIFO where a
    /// file was expected cannot stall the caller; pair with ``status(_:)`` to check the type.
    package static func openForReading(_ path: String) throws(SystemCallError) -> OwnedFD {
        OwnedFD(adopting: try retrying("open(\(path))") { open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) })
    }

    /// `open(path, O_PATH | O_DIRECTORY | O_CLOEXEC)`: a folder to open files beneath
    /// (``openBeneath(_:_:)``), held without being read.
    package static func openDirectory(_ path: String) throws(SystemCallError) -> OwnedFD {
        OwnedFD(adopting: try retrying("open(\(path))") { open(path, rv_o_path | O_DIRECTORY | O_CLOEXEC) })
    }

    /// `openat2(directory, path, {O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY,
    /// RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS})`: the file at `path` inside `directory`, which
    /// neither `..`, an absolute path nor a symbolic link (one in `directory` included) may lead
    /// out of (`EXDEV`), nor a `/proc` magic link (`ELOOP`). Checked by the kernel on the whole
    /// walk, so a name swapped in between cannot lead out either. Non-blocking, as
    /// ``openForReading(_:)``: pair with ``status(_:)`` to check the type.
    package static func openBeneath(_ directory: borrowing OwnedFD, _ path: String) throws(SystemCallError) -> OwnedFD {
        let flags = UInt64(O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        let fd = try retrying("openat2(\(path))") { rv_openat2(directory.rawValue, path, flags, 0, rv_resolve_beneath | rv_resolve_no_magiclinks) }
        return OwnedFD(adopting: fd)
    }

    /// `fstat(file)`.
    package static func status(_ file: borrowing OwnedFD) throws(SystemCallError) -> stat {
        try status(file.rawValue)
    }

    /// `read(fd, count)`: what is there, `[]` at end of file, or would-block.
    static func read(_ fd: Int32, upTo count: Int) throws(SystemCallError) -> IOResult<[UInt8]> {
        var buffer = [UInt8](repeating: 0, count: count)
        let result = try nonBlocking("read") { buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) } }
        switch result {
        case .wouldBlock: return .wouldBlock
        case .done(let length): return .done(Array(buffer[..<length]))
        }
    }

    /// The whole file at `path`, at most `limit` bytes (more is an `EFBIG` error); `nil` when it
    /// cannot be opened or read (e.g. a `/proc` file of a process that is gone).
    package static func readSmallFile(_ path: String, limit: Int = 4096) -> [UInt8]? {
        guard let file = try? openForReading(path) else { return nil }
        return try? readToEnd(file, limit: limit, name: path)
    }

    /// Everything `fd` holds from its current offset, at most `limit` bytes.
    ///
    /// - Throws: `EFBIG` (naming `name`) past the limit; `EAGAIN` for a descriptor that would block.
    package static func readToEnd(_ file: borrowing OwnedFD, limit: Int, name: String) throws(SystemCallError) -> [UInt8] {
        var bytes: [UInt8] = []
        while true {
            switch try read(file.rawValue, upTo: min(limit + 1, 16 * 1024)) {
            case .wouldBlock:
                throw SystemCallError(call: "read(\(name))", errno: EAGAIN)
            case .done(let chunk):
                if chunk.isEmpty { return bytes }
                bytes += chunk
                if bytes.count > limit { throw SystemCallError(call: "read(\(name)): more than \(limit) bytes", errno: EFBIG) }
            }
        }
    }

    /// `pread(file, count, offset)` until `count` bytes or end of file.
    package static func read(_ file: borrowing OwnedFD, count: Int, at offset: Int) throws(SystemCallError) -> [UInt8] {
        try readAll(file.rawValue, count: count, at: offset)
    }

    /// `stat(path)`, following symbolic links.
    package static func status(ofPath path: String) throws(SystemCallError) -> stat {
        var result = stat()
        _ = try retrying("stat(\(path))") { stat(path, &result) }
        return result
    }

    /// `lstat(path)`: the file at `path`, a symbolic link itself rather than what it names.
    package static func linkStatus(ofPath path: String) throws(SystemCallError) -> stat {
        var result = stat()
        _ = try retrying("lstat(\(path))") { lstat(path, &result) }
        return result
    }

    /// Whether the open `file` is a regular file (`fstat`).
    package static func isRegularFile(_ file: borrowing OwnedFD) -> Bool {
        (try? status(file.rawValue))?.isRegularFile ?? false
    }

    /// Whether `path` is a regular file (`stat`, following links).
    package static func isRegularFile(_ path: String) -> Bool {
        (try? status(ofPath: path))?.isRegularFile ?? false
    }

    /// Whether `path` is a directory (`stat`, following links).
    package static func isDirectory(_ path: String) -> Bool {
        (try? status(ofPath: path))?.isDirectory ?? false
    }

    /// `access(path, mode)` (`R_OK`, `X_OK`, …): whether this process may use `path` that way.
    ///
    /// - Throws: the reason it may not (`ENOENT`, `EACCES`, …).
    package static func checkAccess(_ path: String, _ mode: Int32) throws(SystemCallError) {
        _ = try retrying("access(\(path))") { access(path, mode) }
    }

    /// `readlink(path)`: the target of a symbolic link, or `nil` when `path` is not one.
    package static func symbolicLinkTarget(_ path: String) -> String? {
        var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX))
        let length = buffer.withUnsafeMutableBufferPointer { raw in
            raw.withMemoryRebound(to: CChar.self) { readlink(path, $0.baseAddress!, $0.count - 1) }
        }
        return length > 0 ? String(decoding: buffer[..<length], as: UTF8.self) : nil
    }

    /// `realpath(path)`: the absolute path with every symbolic link, `.` and `..` resolved.
    ///
    /// - Throws: why it cannot be resolved (`ENOENT`, `EACCES`, `ELOOP`, …).
    package static func resolvedPath(_ path: String) throws(SystemCallError) -> String {
        guard let resolved = realpath(path, nil) else { throw SystemCallError(call: "realpath(\(path))", errno: Glibc.errno) }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// The names in the folder at `path` (`opendir`/`readdir`), without `.` and `..`, unsorted.
    package static func directoryEntries(_ path: String) throws(SystemCallError) -> [String] {
        guard let directory = opendir(path) else { throw SystemCallError(call: "opendir(\(path))", errno: Glibc.errno) }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            // The name is read through a pointer, up to its terminating NUL: a record is only as
            // long as its name (d_reclen), so copying d_name's whole 256-byte array can read past
            // the end of readdir's buffer (AddressSanitizer caught that on the last entry).
            let name = String(cString: UnsafeRawPointer(entry).advanced(by: MemoryLayout<dirent>.offset(of: \dirent.d_name)!)
                .assumingMemoryBound(to: CChar.self))
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// `mkdir(path, mode)`; a folder already there is fine. Returns whether it made one. The
    /// process's umask takes bits off `mode`: ``changeMode(_:_:name:)`` sets it exactly.
    @discardableResult
    package static func makeDirectory(_ path: String, mode: mode_t = 0o755) throws(SystemCallError) -> Bool {
        if mkdir(path, mode) == 0 { return true }
        let code = Glibc.errno
        if code == EEXIST && isDirectory(path) { return false }
        throw SystemCallError(call: "mkdir(\(path))", errno: code)
    }

    /// `rmdir(path)`.
    package static func removeDirectory(_ path: String) throws(SystemCallError) {
        _ = try retrying("rmdir(\(path))") { rmdir(path) }
    }

    /// `open(path, O_WRONLY | O_CLOEXEC)`: an existing file, for writing (a control file of
    /// the kernel's, say).
    package static func openForWriting(_ path: String) throws(SystemCallError) -> OwnedFD {
        OwnedFD(adopting: try retrying("open(\(path))") { open(path, O_WRONLY | O_CLOEXEC) })
    }

    /// Writes `text` to the existing file `path` in one `write` (a kernel control file takes
    /// each write as one value).
    package static func writeFile(_ path: String, _ text: String) throws(SystemCallError) {
        let file = try openForWriting(path)
        let bytes = Array(text.utf8)
        let written = try retrying("write(\(path))") { bytes.withUnsafeBytes { write(file.rawValue, $0.baseAddress, $0.count) } }
        if written != bytes.count { throw SystemCallError(call: "write(\(path)): short write", errno: EIO) }
    }

    /// `getcwd()`: this process's working directory.
    package static func currentDirectory() throws(SystemCallError) -> String {
        guard let path = getcwd(nil, 0) else { throw SystemCallError(call: "getcwd", errno: Glibc.errno) }
        defer { free(path) }
        return String(cString: path)
    }

    /// `write(2, text)`, for a last word on standard error before the process exits.
    package static func writeStandardError(_ text: String) {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Glibc.write(2, $0.baseAddress, $0.count) }
            if written < 0 && Glibc.errno == EINTR { continue }
            guard written > 0 else { return }
            bytes = bytes.dropFirst(written)
        }
    }

    /// Makes standard output line-buffered, so a reader on a pipe sees each line at once.
    package static func lineBufferStandardOutput() {
        rv_stdout_line_buffered()
    }

    // MARK: sockets

    /// `socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | extra, 0)`.
    static func seqpacketPair(nonBlocking: Bool) throws(SystemCallError) -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        let type = Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
            | (nonBlocking ? Int32(SOCK_NONBLOCK.rawValue) : 0)
        _ = try retrying("socketpair") { socketpair(AF_UNIX, type, 0, &fds) }
        return (fds[0], fds[1])
    }

    /// `accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)`.
    static func accept(_ fd: Int32) throws(SystemCallError) -> IOResult<Int32> {
        try nonBlocking("accept4") { rv_accept_cloexec_nonblock(fd) }
    }

    /// A `SOCK_SEQPACKET | SOCK_CLOEXEC` socket connected to the Unix socket at `path`.
    package static func connectSeqpacket(to path: String) throws(SystemCallError) -> OwnedFD {
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
        return OwnedFD(adopting: fd)
    }

    /// `pipe2(O_CLOEXEC)`: `first` is the read end, `second` the write end.
    package static func pipe() throws(SystemCallError) -> SocketPair {
        var fds: [Int32] = [-1, -1]
        _ = try retrying("pipe2") { rv_pipe_cloexec(&fds) }
        return SocketPair(first: OwnedFD(adopting: fds[0]), second: OwnedFD(adopting: fds[1]))
    }

    /// `getsockopt(fd, SOL_SOCKET, option)` for an int option.
    static func socketOption(_ fd: Int32, _ option: Int32) throws(SystemCallError) -> Int32 {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        _ = try retrying("getsockopt") { getsockopt(fd, SOL_SOCKET, option, &value, &length) }
        return value
    }

    /// `sendmsg(fd, message, MSG_DONTWAIT | MSG_NOSIGNAL)`.
    static func sendMessage(_ fd: Int32, _ message: UnsafePointer<msghdr>) throws(SystemCallError) -> IOResult<Int> {
        try nonBlocking("sendmsg") { sendmsg(fd, message, Int32(MSG_DONTWAIT) | Int32(MSG_NOSIGNAL)) }
    }

    /// `recvmmsg(fd, messages, count, MSG_DONTWAIT | MSG_CMSG_CLOEXEC, NULL)`: the packets queued
    /// now, up to `count`, one per message; fewer than `count` means the queue was empty when
    /// the call returned.
    static func receiveMessages(_ fd: Int32, _ messages: UnsafeMutablePointer<rv_mmsghdr>, count: Int) throws(SystemCallError) -> IOResult<Int> {
        try nonBlocking("recvmmsg") { Int(rv_recvmmsg(fd, messages, UInt32(count), Int32(MSG_DONTWAIT) | rv_msg_cmsg_cloexec)) }
    }

    /// `sendmmsg(fd, messages, count, MSG_DONTWAIT | MSG_NOSIGNAL)`: how many of the packets
    /// were written (fewer when the peer's queue filled), or would-block when none was.
    static func sendMessages(_ fd: Int32, _ messages: UnsafeMutablePointer<rv_mmsghdr>, count: Int) throws(SystemCallError) -> IOResult<Int> {
        try nonBlocking("sendmmsg") { Int(rv_sendmmsg(fd, messages, UInt32(count), Int32(MSG_DONTWAIT) | Int32(MSG_NOSIGNAL))) }
    }

    /// `shutdown(fd, SHUT_RDWR)`. `ENOTCONN` (peer already gone) is not an error here.
    static func shutdownBoth(_ fd: Int32) {
        if Glibc.shutdown(fd, Int32(SHUT_RDWR)) == -1 {
            let code = Glibc.errno
            precondition(code != EBADF, "shutdown: EBADF — a RemoteView bug")
        }
    }

    // MARK: epoll, eventfd

    /// `epoll_create1(EPOLL_CLOEXEC)`.
    static func epollCreate() throws(SystemCallError) -> Int32 {
        try retrying("epoll_create1") { epoll_create1(Int32(EPOLL_CLOEXEC)) }
    }

    /// `epoll_ctl(epfd, operation, fd, event)`.
    static func epollControl(_ epfd: Int32, _ operation: Int32, _ fd: Int32, events: UInt32, token: UInt64) throws(SystemCallError) {
        var event = epoll_event()
        event.events = events
        event.data.u64 = token
        _ = try retrying("epoll_ctl") { epoll_ctl(epfd, operation, fd, &event) }
    }

    /// `epoll_wait(epfd, events, count, timeout)`; returns how many are ready (0 on `EINTR`).
    static func epollWait(_ epfd: Int32, _ events: UnsafeMutablePointer<epoll_event>, _ count: Int32, timeoutMilliseconds: Int32) throws(SystemCallError) -> Int {
        let result = epoll_wait(epfd, events, count, timeoutMilliseconds)
        if result >= 0 { return Int(result) }
        let code = Glibc.errno
        if code == EINTR { return 0 }
        try fail("epoll_wait", code)
    }

    /// `eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)`.
    static func eventCounter() throws(SystemCallError) -> Int32 {
        try retrying("eventfd") { eventfd(0, Int32(EFD_CLOEXEC) | Int32(EFD_NONBLOCK)) }
    }

    /// `eventfd_write(fd, 1)`; a full counter (`EAGAIN`) already means "wake up".
    static func signalEventCounter(_ fd: Int32) {
        var one: UInt64 = 1
        _ = try? nonBlocking("write(eventfd)") { Glibc.write(fd, &one, 8) }
    }

    /// `read(fd, 8 bytes)` on a non-blocking eventfd, to reset it.
    static func drainEventCounter(_ fd: Int32) {
        var value: UInt64 = 0
        _ = try? nonBlocking("read(eventfd)") { Glibc.read(fd, &value, 8) }
    }

    // MARK: processes

    /// `getpid()`.
    package static var processID: Int32 { getpid() }

    /// Whether the caller runs on the process's main thread.
    package static var isMainThread: Bool { rv_is_main_thread() != 0 }

    /// The home folder the user database gives this process's user (`getpwuid_r(getuid())`),
    /// for when `$HOME` is not set; `nil` when it has no entry.
    package static func userHomeDirectory() -> String? {
        var entry = passwd()
        var found: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16 * 1024)
        return buffer.withUnsafeMutableBufferPointer { buffer -> String? in
            guard getpwuid_r(getuid(), &entry, buffer.baseAddress!, buffer.count, &found) == 0, found != nil,
                  let directory = entry.pw_dir else { return nil }
            return String(cString: directory)
        }
    }

    /// `exit(status)`: ends this process (after the C library's exit handlers).
    package static func exit(_ status: Int32) -> Never {
        Glibc.exit(status)
    }

    /// `kill(pid, signal)`; `pid` < 0 signals that process group. A process already gone
    /// (`ESRCH`) is not an error: the signal had nobody to reach.
    package static func kill(_ pid: Int32, _ signal: Int32) {
        precondition(pid != 0 && pid != -1, "kill(\(pid)) would signal every process of the group or system — a RemoteView bug")
        _ = Glibc.kill(pid, signal)
    }

    /// Whether a process `pid` exists (`kill(pid, 0)`).
    package static func processExists(_ pid: Int32) -> Bool {
        Glibc.kill(pid, 0) == 0 || Glibc.errno == EPERM
    }

    /// The children of process `pid` (of each of its threads), from `/proc/PID/task/*/children`;
    /// `[]` once it is gone.
    package static func childProcesses(of pid: Int32) -> [Int32] {
        var result: [Int32] = []
        for task in (try? directoryEntries("/proc/\(pid)/task")) ?? [] where Int32(task) != nil {
            guard let text = readSmallFile("/proc/\(pid)/task/\(task)/children", limit: 1 << 16) else { continue }
            result += String(decoding: text, as: UTF8.self).split(whereSeparator: \.isWhitespace).compactMap { Int32($0) }
        }
        return result
    }

    /// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`), or no longer one: an
    /// orphaned descendant is re-parented to a subreaper, not to the system's init, so it can
    /// still be signalled and reaped. Children already adopted stay.
    package static func setChildSubreaper(_ on: Bool) throws(SystemCallError) {
        _ = try retrying("prctl(PR_SET_CHILD_SUBREAPER)") { rv_set_child_subreaper(on ? 1 : 0) }
    }

    /// Whether this process is a child subreaper.
    package static var isChildSubreaper: Bool { rv_is_child_subreaper() == 1 }

    /// Whether this process is dumpable (`PR_GET_DUMPABLE`): the kernel clears it when a
    /// process changes its credentials, which makes its `/proc` files root's.
    package static var isDumpable: Bool { rv_is_dumpable() == 1 }

    /// What `/proc/PID/stat` says of a process: its name, state, process group and session.
    package struct ProcessStatus: Sendable, Hashable {
        /// The command name (`comm`, at most 15 bytes).
        package var name: String
        /// `R`, `S`, `D`, `Z` (a zombie: exited, not reaped), …
        package var state: Character
        /// Its process group.
        package var group: Int32
        /// Its session.
        package var session: Int32
        /// When it started, in clock ticks (`sysconf(_SC_CLK_TCK)`) since boot.
        package var startTicks: UInt64
    }

    /// Process `pid`'s name, state, group, session and start time (`/proc/PID/stat`), or `nil`
    /// once it is gone. Readable for a zombie too.
    package static func processStatus(of pid: Int32) -> ProcessStatus? {
        guard let stat = readSmallFile("/proc/\(pid)/stat", limit: 4096) else { return nil }
        // The command name (field 2) is in parentheses and may hold spaces or ')': up to the last ')'.
        guard let open = stat.firstIndex(of: UInt8(ascii: "(")), let close = stat.lastIndex(of: UInt8(ascii: ")")),
              open < close else { return nil }
        let fields = stat[(close + 1)...].split(separator: UInt8(ascii: " "))
        // Fields 3 (state), 5 (group), 6 (session) and 22 (start time) are 0, 2, 3 and 19 here.
        guard fields.count > 19, let state = String(decoding: fields[0], as: UTF8.self).first,
              let group = Int32(String(decoding: fields[2], as: UTF8.self)),
              let session = Int32(String(decoding: fields[3], as: UTF8.self)),
              let start = UInt64(String(decoding: fields[19], as: UTF8.self)) else { return nil }
        return ProcessStatus(name: String(decoding: stat[(open + 1)..<close], as: UTF8.self), state: state, group: group,
                             session: session, startTicks: start)
    }

    /// Process `pid`'s ids in the pid namespaces it is in, outermost (this one's) first
    /// (`NSpid` in `/proc/PID/status`): `[pid, 1]` for the first process of a pid namespace one
    /// level down. `nil` once it is gone.
    package static func namespacePIDs(of pid: Int32) -> [Int32]? {
        guard let status = readSmallFile("/proc/\(pid)/status", limit: 1 << 16) else { return nil }
        let line = String(decoding: status, as: UTF8.self).split(separator: "\n").first { $0.hasPrefix("NSpid:") }
        return line?.dropFirst("NSpid:".count).split(whereSeparator: \.isWhitespace).compactMap { Int32($0) }
    }

    /// Process `pid`'s control groups (`/proc/PID/cgroup`, `nil`: this process's), as each
    /// controller's path in its hierarchy (`"memory": "/a/b"`; control groups v2's line has the
    /// controller `""`). Empty once the process is gone.
    package static func controlGroups(of pid: Int32? = nil) -> [String: String] {
        let file = "/proc/\(pid.map(String.init) ?? "self")/cgroup"
        var paths: [String: String] = [:]
        for line in String(decoding: readSmallFile(file, limit: 1 << 16) ?? [], as: UTF8.self).split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard parts.count == 3 else { continue }
            let controllers = parts[1].split(separator: ",")
            for controller in controllers.isEmpty ? [""] : controllers { paths[String(controller)] = String(parts[2]) }
        }
        return paths
    }

    /// Process `pid`'s arguments (`/proc/PID/cmdline`); `[]` for a zombie, `nil` once gone.
    package static func commandLine(of pid: Int32) -> [String]? {
        guard let bytes = readSmallFile("/proc/\(pid)/cmdline", limit: 1 << 20) else { return nil }
        return bytes.split(separator: 0, omittingEmptySubsequences: false).dropLast().map { String(decoding: $0, as: UTF8.self) }
    }

    /// `pidfd_open(pid, 0)`, close-on-exec (as every pidfd is).
    package static func processDescriptor(_ pid: Int32) throws(SystemCallError) -> OwnedFD {
        OwnedFD(adopting: try retrying("pidfd_open(\(pid))") { rv_pidfd_open(pid, 0) })
    }

    /// `pidfd_send_signal(pidfd, signal)`: never reaches a reused pid. `false` once the process
    /// has exited (`ESRCH`).
    @discardableResult
    static func sendSignal(_ pidfd: Int32, _ signal: Int32) -> Bool {
        rv_pidfd_send_signal(pidfd, signal, 0) == 0
    }

    /// `waitid(P_PIDFD, pidfd, WEXITED [| WNOHANG])`: how the child behind `pidfd` ended, or
    /// `nil` while it runs (only without `block`).
    static func reap(_ pidfd: Int32, block: Bool) throws(SystemCallError) -> Termination? {
        var exited: Int32 = 0, code: Int32 = 0, status: Int32 = 0
        _ = try retrying("waitid(P_PIDFD)") { rv_waitid_pidfd(pidfd, block ? 1 : 0, &exited, &code, &status) }
        guard exited != 0 else { return nil }
        if code == rv_cld_exited { return .exited(status) }
        return .killed(signal: status, coreDumped: code == rv_cld_dumped)
    }

    /// `getrlimit(resource)`: the soft and hard limits.
    package static func resourceLimit(_ resource: Int32) -> (soft: UInt64, hard: UInt64) {
        var limit = rlimit()
        _ = getrlimit(__rlimit_resource_t(UInt32(resource)), &limit)
        return (UInt64(limit.rlim_cur), UInt64(limit.rlim_max))
    }

    /// `sysconf(_SC_PAGESIZE)`.
    package static var pageSize: Int { Int(sysconf(Int32(_SC_PAGESIZE))) }

    /// Starts a process with vfork + execve (the launcher's C shim, ``rv_spawn``): `request`
    /// says what to run and how; it is the caller's to fill and keep alive.
    ///
    /// - Throws: the child's own errno, naming the step that failed (e.g. `execve(/bin/x)`).
    package static func spawn(_ request: inout rv_spawn_request, executable: String) throws(SystemCallError) -> Int32 {
        var failedStep: UnsafePointer<CChar>? = nil
        let pid = rv_spawn(&request, &failedStep)
        guard pid > 0 else {
            let step = failedStep.map { String(cString: $0) } ?? "spawn"
            throw SystemCallError(call: "\(step)(\(executable))", errno: Glibc.errno)
        }
        return pid
    }

    /// `waitpid(pid)`, blocking: reaps a child that was never watched by pidfd.
    package static func reapBlocking(_ pid: Int32) {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && Glibc.errno == EINTR {}
    }

    // MARK: users and confinement

    /// `geteuid()`: 0 when this process runs as root.
    package static var effectiveUserID: UInt32 { geteuid() }

    /// Whether the user database has an entry for user `uid` (`getpwuid_r`); `nil` when it
    /// cannot say (an error other than "no such entry", an entry larger than 1 MiB).
    package static func userEntryExists(_ uid: UInt32) -> Bool? {
        var entry = passwd()
        var found: UnsafeMutablePointer<passwd>?
        return entryExists { buffer in getpwuid_r(uid, &entry, buffer.baseAddress!, buffer.count, &found) } found: { found != nil }
    }

    /// Whether the group database has an entry for group `gid` (`getgrgid_r`); `nil` when it
    /// cannot say.
    package static func groupEntryExists(_ gid: UInt32) -> Bool? {
        var entry = group()
        var found: UnsafeMutablePointer<group>?
        return entryExists { buffer in getgrgid_r(gid, &entry, buffer.baseAddress!, buffer.count, &found) } found: { found != nil }
    }

    /// Runs a `get*_r` lookup with a buffer that doubles on `ERANGE`, up to 1 MiB.
    private static func entryExists(_ lookup: (UnsafeMutableBufferPointer<CChar>) -> Int32, found: () -> Bool) -> Bool? {
        var size = 16 * 1024
        while size <= 1 << 20 {
            var buffer = [CChar](repeating: 0, count: size)
            let result = buffer.withUnsafeMutableBufferPointer { lookup($0) }
            if result == 0 { return found() }
            guard result == ERANGE else { return nil }
            size *= 2
        }
        return nil
    }

    /// The kernel's Landlock ABI version, 0 without Landlock (`landlock_create_ruleset` with
    /// `LANDLOCK_CREATE_RULESET_VERSION`).
    package static var landlockABI: Int { Int(rv_landlock_abi()) }

    /// `open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, mode)`: a file made if missing,
    /// never through a symbolic link.
    package static func openOrCreate(_ path: String, mode: mode_t) throws(SystemCallError) -> OwnedFD {
        OwnedFD(adopting: try retrying("open(\(path))") { open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, mode) })
    }

    /// `open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)`: a folder, not a symbolic
    /// link to one (`ELOOP`) nor anything else (`ENOTDIR`).
    package static func openFolder(_ path: String) throws(SystemCallError) -> OwnedFD {
        OwnedFD(adopting: try retrying("open(\(path))") { open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) })
    }

    /// `flock(file, LOCK_EX)`: waits for the file's exclusive lock, held until it is closed.
    package static func lockExclusively(_ file: borrowing OwnedFD, name: String) throws(SystemCallError) {
        _ = try retrying("flock(\(name))") { flock(file.rawValue, LOCK_EX) }
    }

    /// `pwrite` of `bytes` at `offset`, all of them.
    package static func writeAll(_ file: borrowing OwnedFD, _ bytes: [UInt8], at offset: Int) throws(SystemCallError) {
        try writeAll(file.rawValue, bytes, at: offset)
    }

    /// `fchown(file, user, group)`.
    package static func changeOwner(_ file: borrowing OwnedFD, user: UInt32, group: UInt32, name: String) throws(SystemCallError) {
        _ = try retrying("fchown(\(name))") { fchown(file.rawValue, user, group) }
    }

    /// `fchmod(file, mode)`.
    package static func changeMode(_ file: borrowing OwnedFD, _ mode: mode_t, name: String) throws(SystemCallError) {
        _ = try retrying("fchmod(\(name))") { fchmod(file.rawValue, mode) }
    }

    // MARK: memfd, mmap

    /// `memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | flags)`.
    static func memoryFileCreate(_ name: String, flags: UInt32 = 0) throws(SystemCallError) -> Int32 {
        try retrying("memfd_create") { rv_memfd_create(name, rv_mfd_cloexec | rv_mfd_allow_sealing | flags) }
    }

    /// `ftruncate(fd, size)`.
    static func truncate(_ fd: Int32, _ size: Int) throws(SystemCallError) {
        _ = try retrying("ftruncate", onPeerDescriptor: true) { ftruncate(fd, off_t(size)) }
    }

    /// `fcntl(fd, F_ADD_SEALS, seals)`.
    static func addSeals(_ fd: Int32, _ seals: Int32) throws(SystemCallError) {
        _ = try retrying("fcntl(F_ADD_SEALS)", onPeerDescriptor: true) { rv_fcntl_int(fd, rv_f_add_seals, seals) }
    }

    /// `fcntl(fd, F_GET_SEALS)`. `EINVAL` (not a sealable file) is thrown, not trapped, so a
    /// receiver can report that a peer sent something other than a memfd.
    static func seals(_ fd: Int32) throws(SystemCallError) -> Int32 {
        let result = rv_fcntl_int(fd, rv_f_get_seals, 0)
        if result >= 0 { return result }
        throw SystemCallError(call: "fcntl(F_GET_SEALS)", errno: Glibc.errno)
    }

    /// `pwrite(fd, bytes, offset)` until everything is written.
    static func writeAll(_ fd: Int32, _ bytes: [UInt8], at offset: Int) throws(SystemCallError) {
        var done = 0
        while done < bytes.count {
            let count = try retrying("pwrite", onPeerDescriptor: true) {
                bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, $0.count - done, off_t(offset + done)) }
            }
            done += count
        }
    }

    /// `pread(fd, count, offset)` until `count` bytes or end of file.
    static func readAll(_ fd: Int32, count: Int, at offset: Int) throws(SystemCallError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let read = try retrying("pread", onPeerDescriptor: true) {
                bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, $0.count - done, off_t(offset + done)) }
            }
            if read == 0 { break }
            done += read
        }
        return Array(bytes.prefix(done))
    }

    /// `mmap(NULL, length, PROT_READ[|PROT_WRITE], MAP_SHARED[|MAP_POPULATE], fd, 0)`.
    static func mapShared(_ fd: Int32, length: Int, writable: Bool, populate: Bool = false) throws(SystemCallError) -> UnsafeMutableRawPointer {
        let protection = writable ? PROT_READ | PROT_WRITE : PROT_READ
        guard let address = mmap(nil, length, protection, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0), address != MAP_FAILED else {
            try fail("mmap", Glibc.errno)
        }
        return address
    }

    /// `mmap(NULL, length, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE, -1, 0)`:
    /// zeroed memory of the process's own whose pages exist only once touched.
    static func mapAnonymous(length: Int) throws(SystemCallError) -> UnsafeMutableRawPointer {
        guard let address = mmap(nil, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0),
              address != MAP_FAILED else {
            try fail("mmap", Glibc.errno)
        }
        return address
    }

    /// `munmap(address, length)`.
    static func unmap(_ address: UnsafeMutableRawPointer, length: Int) {
        let result = munmap(address, length)
        precondition(result == 0, "munmap: \(SystemCallError(call: "munmap", errno: Glibc.errno)) — a RemoteView bug")
    }
}

extension stat {
    /// Whether the file is a regular file (`S_IFREG`).
    package var isRegularFile: Bool { st_mode & S_IFMT == S_IFREG }
    /// Whether the file is a directory (`S_IFDIR`).
    package var isDirectory: Bool { st_mode & S_IFMT == S_IFDIR }
    /// Whether the file is a symbolic link (`S_IFLNK`; only `lstat` sees one).
    package var isSymbolicLink: Bool { st_mode & S_IFMT == S_IFLNK }
}
