import RemoteCore

/// What a ``RemoteServiceConnector`` opened: the connection to a process on the far machine,
/// and, when its transport carries a view's frames and input on streams of their own, those.
public struct RemoteServiceChannel: Sendable {
    /// The connection: requests, messages, shares, the view's size, state and tree.
    public var connection: Connection
    /// The view's frames and input (`nil`: the transport carries none; a view of the service
    /// then shows nothing).
    public var view: (any RemoteViewStream)?

    public init(connection: Connection, view: (any RemoteViewStream)?) {
        self.connection = connection
        self.view = view
    }
}

/// A remote view's own streams, beside its connection (docs/Gateway.md, "Views"): frames from
/// the far machine, which composited the service's commits there, and input to it, so that a
/// keystroke never waits behind a reply or a frame. `Network/`'s gateway client gives one with
/// each channel; ``RemoteView`` uses it in place of the surface messages.
public protocol RemoteViewStream: AnyObject, Sendable {
    /// Starts handing each frame that arrives to `receiver`, in order, until the stream ends
    /// (then ``RemoteFrameReceiver/end(_:)``). Called once, when a view takes the channel.
    func start(_ receiver: RemoteFrameReceiver)

    /// Sends one input event, `packet` an encoded RemoteView envelope of the input family
    /// (its id is the far side's to give).
    func send(input packet: [UInt8]) async throws(RemoteError)

    /// Returns once every input event sent before it has reached the service's socket. Input
    /// and the connection travel apart: a request sent after input may reach the service
    /// first. ``RemoteView/settle(timeout:)`` calls this first, so that the input it covers is
    /// the service's before the request is.
    func sync() async throws(RemoteError)

    /// The host has shown every frame up to `frame` (`frame_done` across the network).
    func presented(frame: UInt64)
}

/// Where a ``RemoteViewStream`` puts what arrives: a view's compositor, made by ``RemoteView``
/// for one channel.
public final class RemoteFrameReceiver: Sendable {
    /// Applies a frame to the image: checks it, hands the pixels to `write`, publishes the damage.
    typealias Handler = @Sendable (_ frame: UInt64, _ width: Int, _ height: Int, _ damage: [PixelRect],
                                   _ write: (UnsafeMutableBufferPointer<UInt32>) throws(RemoteError) -> Void) throws(RemoteError) -> Void
    private let handler: Handler
    private let sizeCheck: @Sendable (_ frame: UInt64, _ width: Int, _ height: Int) throws(RemoteError) -> Void
    private let onEnd: @Sendable (RemoteError?) -> Void

    init(handler: @escaping Handler, sizeCheck: @escaping @Sendable (UInt64, Int, Int) throws(RemoteError) -> Void,
         onEnd: @escaping @Sendable (RemoteError?) -> Void) {
        self.handler = handler
        self.sizeCheck = sizeCheck
        self.onEnd = onEnd
    }

    /// Checks, as soon as a frame's header has arrived and before its payload is gathered or
    /// decompressed, that its size is one the host gave the view: a frame's payload is bounded
    /// by its view, so this bounds what a far side can make the host hold.
    ///
    /// - Throws: `RemoteError` `protocolViolation` naming both sizes.
    public func check(frame: UInt64, width: Int, height: Int) throws(RemoteError) {
        try sizeCheck(frame, width, height)
    }

    /// A frame arrived: `frame` (increasing), of a view `width` × `height` pixels (a size the
    /// host gave), changing `damage` (empty: nothing visible). `write` applies the frame's
    /// pixels to the image, rows of `width` words (all zero after a change of size); it must
    /// write nothing outside `damage`, and may throw to refuse the frame.
    ///
    /// - Throws: `RemoteError` `protocolViolation` naming the rule the frame broke (a size never
    ///   given, a frame number not above the last, a third frame before the host presented, or
    ///   what `write` threw). The view has then ended the channel.
    public func receive(frame: UInt64, width: Int, height: Int, damage: [PixelRect],
                        write: (UnsafeMutableBufferPointer<UInt32>) throws(RemoteError) -> Void) throws(RemoteError) {
        try handler(frame, width, height, damage, write)
    }

    /// The stream ended: in order (`nil`, the channel ends with it), because what arrived broke
    /// a rule (`protocolViolation`: the view ends the channel, naming it), or because it failed
    /// while the channel lives on (the view closes the channel, and the next call reconnects).
    public func end(_ error: RemoteError?) {
        onEnd(error)
    }
}

extension InputEvent {
    /// The event as a RemoteView envelope's bytes (numbered 1: a relay gives the real id), for a
    /// ``RemoteViewStream``.
    package func relayPacket() throws(RemoteError) -> [UInt8] {
        try EnvelopeCodec.encode(Envelope(id: 1, body: .input(self)))
    }
}
