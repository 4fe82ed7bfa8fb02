/// How envelopes travel between two peers.
///
/// ``Connection`` runs over this seam and knows nothing of sockets: today the seqpacket socket
/// (``SeqpacketSocket``) with fds as SCM_RIGHTS; later a network stream that replaces fds by
/// their contents (docs/Architecture.md, "Beyond one machine").
package protocol Transport: AnyObject, Sendable {
    /// Sends one envelope with its attachments. Waits while the peer's queue is full, up to the
    /// transport's send deadline.
    ///
    /// - Throws: ``RemoteError``: `interrupted` when the peer is gone, `timeout` when it stopped
    ///   reading, `invalidArgument` when the envelope cannot be encoded, `invalidated` after
    ///   ``close()``.
    nonisolated(nonsending) func send(_ envelope: Envelope) async throws(RemoteError)

    /// The next envelope, or `nil` once the peer has closed its end. One receiver at a time.
    ///
    /// - Throws: ``RemoteError`` `protocolViolation` for a packet that is malformed, too large,
    ///   or whose fds do not match its declaration (the fds that arrived are closed).
    nonisolated(nonsending) func receive() async throws(RemoteError) -> Envelope?

    /// Shuts both directions: the peer sees end of file, waiting calls return.
    func close()
}
