/// How envelopes travel between two peers.
///
/// ``Connection`` runs over this seam and knows nothing of sockets: today the seqpacket socket
/// (``SeqpacketSocket``) with fds as SCM_RIGHTS; later a network stream that replaces fds by
/// their contents (docs/Architecture.md, "Beyond one machine").
package protocol Transport: AnyObject, Sendable {
    /// Sends one envelope with its attachments, numbering it: the envelope's own `id` is
    /// ignored, and the packet gets the next id of this direction at the moment it is written,
    /// so ids increase in the order packets are written, whichever task sends first (a request
    /// that took its id before a message overtook it would break the peer's id rule). Waits
    /// while the peer's queue is full, up to the transport's send deadline.
    ///
    /// - Parameter written: Runs with the packet's id once it is written, before any later packet
    ///   is written and before ``lastSentID`` reports it; a requester records its reply waiter
    ///   here, so a reply can never arrive for a request that is not yet recorded. Keep it short:
    ///   every other sender waits for it.
    /// - Returns: The id the packet was sent with.
    /// - Throws: ``RemoteError``: `interrupted` when the peer is gone, `timeout` when it stopped
    ///   reading, `invalidArgument` when the envelope cannot be encoded, `invalidated` after
    ///   ``close()``. Nothing was written then.
    @discardableResult
    nonisolated(nonsending) func send(_ envelope: Envelope, written: (UInt64) -> Void) async throws(RemoteError) -> UInt64

    /// The id of the last packet written (0 before the first). Waits for a ``send(_:written:)``
    /// writing right now to finish its `written`, so an answer the read loop holds to any id up
    /// to this one finds its requester recorded.
    var lastSentID: UInt64 { get }

    /// The next envelope, or `nil` once the peer has closed its end. One receiver at a time.
    ///
    /// - Throws: ``RemoteError`` `protocolViolation` for a packet that is malformed, too large,
    ///   whose fds do not match its declaration (the fds that arrived are closed), or whose id is
    ///   not above the previous packet's.
    nonisolated(nonsending) func receive() async throws(RemoteError) -> Envelope?

    /// Shuts both directions: the peer sees end of file, waiting calls return.
    func close()
}

extension Transport {
    /// Sends one envelope, numbered as it is written (see ``send(_:written:)``).
    @discardableResult
    nonisolated(nonsending) package func send(_ envelope: Envelope) async throws(RemoteError) -> UInt64 {
        try await send(envelope, written: { _ in })
    }
}
