import Synchronization

/// A file descriptor with exactly one owner, closed when the owner is done with it.
///
/// Non-copyable, like swift-subprocess's `IODescriptor`: passing it on moves it, so two owners
/// can never close the same number. ``close()`` or ``release()`` consume it; dropping it closes
/// it. Every descriptor RemoteView creates is close-on-exec.
public struct OwnedFD: ~Copyable, Sendable {
    /// The descriptor number, to borrow for a call. Do not close it.
    public let rawValue: Int32

    /// Takes ownership of `rawValue`, which nobody else may close.
    public init(adopting rawValue: Int32) {
        precondition(rawValue >= 0, "OwnedFD(adopting: \(rawValue))")
        self.rawValue = rawValue
    }

    /// Closes the descriptor now.
    public consuming func close() {
        Syscall.close(rawValue)
        discard self
    }

    /// Gives up ownership without closing; the caller now owns the number.
    public consuming func release() -> Int32 {
        let value = rawValue
        discard self
        return value
    }

    /// A new, independently owned descriptor for the same open file (`F_DUPFD_CLOEXEC`).
    public func duplicate() throws(SystemCallError) -> OwnedFD {
        OwnedFD(adopting: try Syscall.duplicate(rawValue))
    }

    deinit { Syscall.close(rawValue) }
}

/// A file descriptor travelling with a message (SCM_RIGHTS), like an `xpc_fd` object.
///
/// A reference type so that messages holding attachments stay copyable values. An attachment
/// owns its descriptor: a received one is closed when the last reference goes away unless
/// somebody ``take()``s it, so an fd that no handler claimed is never leaked. Sending a message
/// sends a duplicate to the peer; the attachment still owns (and later closes) its own.
public final class Attachment: Sendable, CustomStringConvertible {
    private let storage: Mutex<Int32>

    /// Wraps `fd`, taking ownership.
    public init(_ fd: consuming OwnedFD) {
        storage = Mutex(fd.release())
    }

    /// Wraps a duplicate of `fd`; the caller keeps its own.
    public convenience init(duplicating fd: borrowing OwnedFD) throws(SystemCallError) {
        self.init(try fd.duplicate())
    }

    /// Moves the descriptor out; `nil` if it was taken already.
    public func take() -> OwnedFD? {
        storage.withLock { fd in
            guard fd >= 0 else { return nil }
            defer { fd = -1 }
            return OwnedFD(adopting: fd)
        }
    }

    /// The descriptor number while the attachment still owns it, to borrow for a call (the
    /// transport's `sendmsg`). Valid only while this attachment is alive and nobody takes it.
    var descriptor: Int32? {
        storage.withLock { $0 >= 0 ? $0 : nil }
    }

    public var description: String {
        descriptor.map { "Attachment(fd \($0))" } ?? "Attachment(taken)"
    }

    deinit {
        let fd = storage.withLock { $0 }
        if fd >= 0 { Syscall.close(fd) }
    }
}
