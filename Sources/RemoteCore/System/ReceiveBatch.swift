import CRemoteViewLinux
import Glibc
import Synchronization

/// The receive side's batch: ``capacity`` packet and control buffers, made once per socket, the
/// `recvmmsg` headers that point at them, and the packets of the last batch not yet handed out.
/// Only its socket's single reader touches it (``SeqpacketChannel`` on its loop, a
/// ``SeqpacketSocket``'s admitted receiver).
///
/// The packet buffers (512 KiB) are one anonymous mapping of their own, not `malloc`'s: their
/// pages exist only as far as packets have filled them (a connection of small messages uses a
/// page or two per buffer), and they stay out of `malloc`'s arenas. A socket that goes gives its
/// batch back for the next socket (``spares``, at most 8 kept), so a new connection maps nothing
/// and faults in no page (with a batch of its own, each socket would map, fault in and unmap
/// the pages it touched, and unmapping interrupts the process's other threads to flush their
/// TLBs).
final class ReceiveBatch: @unchecked Sendable {
    /// Batches of sockets that have gone, for the next ones.
    private static let spares = Mutex<[ReceiveBatch]>([])
    private static let maxSpares = 8

    /// A spare batch, or a new one.
    static func take() throws(SystemCallError) -> ReceiveBatch {
        if let spare = spares.withLock({ $0.popLast() }) { return spare }
        return try ReceiveBatch()
    }

    /// Gives the batch back for another socket, as new: nothing pending (fds closed), no id seen.
    func giveBack() {
        discardRest()
        count = 0
        next = 0
        drained = false
        Self.spares.withLock { spares in
            if spares.count < Self.maxSpares { spares.append(self) }
        }
    }

    /// Packets read by one `recvmmsg` at most (the kernel queues 10 on a socket by default,
    /// `net.unix.max_dgram_qlen`, before a sender waits).
    static let capacity = 8
    static let controlLength = rv_cmsg_space(WireLimits.maxAttachments * MemoryLayout<Int32>.size)
    static let packetsLength = capacity * WireLimits.maxPacketSize

    let packets: UnsafeMutableRawPointer
    let controls = UnsafeMutableRawPointer.allocate(byteCount: capacity * controlLength, alignment: MemoryLayout<cmsghdr>.alignment)
    let vectors = UnsafeMutablePointer<iovec>.allocate(capacity: capacity)
    let messages = UnsafeMutablePointer<rv_mmsghdr>.allocate(capacity: capacity)
    /// The fds each packet of the batch carried, owned (closed if never handed out).
    var attachments: [[Attachment]] = Array(repeating: [], count: capacity)
    /// How many packets the last `recvmmsg` read, and the next to hand out.
    var count = 0
    var next = 0
    /// The last `recvmmsg` read fewer than ``capacity``: the queue was empty then.
    var drained = false

    init() throws(SystemCallError) {
        packets = try Syscall.mapAnonymous(length: Self.packetsLength)
        messages.initialize(repeating: rv_mmsghdr(), count: Self.capacity)
        vectors.initialize(repeating: iovec(), count: Self.capacity)
        for index in 0..<Self.capacity {
            vectors[index] = iovec(iov_base: packets + index * WireLimits.maxPacketSize, iov_len: WireLimits.maxPacketSize)
            messages[index].msg_hdr.msg_iov = vectors + index
            messages[index].msg_hdr.msg_iovlen = 1
            messages[index].msg_hdr.msg_control = controls + index * Self.controlLength
        }
    }

    deinit {
        Syscall.unmap(packets, length: Self.packetsLength)
        controls.deallocate()
        vectors.deallocate()
        messages.deallocate()
    }

    /// Gives every header its whole control buffer again: `recvmmsg` writes back how much of
    /// it a packet used (and each packet's length and flags, which are only read), and leaves
    /// the buffers the headers point at (set once, in `init`) as they are.
    func prepare() {
        for index in 0..<Self.capacity { messages[index].msg_hdr.msg_controllen = Self.controlLength }
    }

    /// Records the `count` packets `recvmmsg` read, owning every fd they carried at once, so
    /// each error path closes them.
    func received(_ count: Int) {
        self.count = count
        next = 0
        drained = count < Self.capacity
        for index in 0..<count {
            var found: [Attachment] = []
            let message = (messages + index).pointer(to: \.msg_hdr)!
            var header = message.pointee.msg_controllen > 0 ? rv_cmsg_firsthdr(message) : nil
            while let current = header {
                if current.pointee.cmsg_level == SOL_SOCKET && current.pointee.cmsg_type == Int32(SCM_RIGHTS) {
                    let data = UnsafeRawPointer(rv_cmsg_data(current))
                    let fdCount = (Int(current.pointee.cmsg_len) - rv_cmsg_len(0)) / MemoryLayout<Int32>.size
                    for fdIndex in 0..<fdCount {
                        let fd = data.loadUnaligned(fromByteOffset: fdIndex * MemoryLayout<Int32>.size, as: Int32.self)
                        found.append(Attachment(OwnedFD(adopting: fd)))
                    }
                }
                header = rv_cmsg_nxthdr(message, current)
            }
            attachments[index] = found
        }
    }

    /// Packet `index` (its bytes valid until the next `recvmmsg`), or `nil` for end of file; its
    /// fds go with it.
    ///
    /// - Throws: `protocolViolation` for a packet whose fds or bytes were cut (more than the
    ///   schema allows), or an empty packet carrying fds.
    func packet(at index: Int) throws(RemoteError) -> InboundPacket? {
        var found: [Attachment] = []
        swap(&found, &attachments[index])
        let flags = messages[index].msg_hdr.msg_flags
        if flags & Int32(MSG_CTRUNC) != 0 {
            throw RemoteError(.protocolViolation, "packet carried more than \(WireLimits.maxAttachments) fds (control data truncated)")
        }
        if flags & Int32(MSG_TRUNC) != 0 {
            throw RemoteError(.protocolViolation, "packet exceeds the \(WireLimits.maxPacketSize)-byte limit")
        }
        let length = Int(messages[index].msg_len)
        if length == 0 {
            // End of file (a zero-length packet can never be a valid envelope either).
            if !found.isEmpty {
                throw RemoteError(.protocolViolation, "empty packet carrying \(found.count) fd(s)")
            }
            return nil
        }
        return InboundPacket(bytes: UnsafeRawBufferPointer(start: packets + index * WireLimits.maxPacketSize, count: length), attachments: found)
    }

    /// Closes the fds of the packets not handed out yet, and forgets them.
    func discardRest() {
        for index in next..<count { attachments[index] = [] }
        next = count
    }
}
