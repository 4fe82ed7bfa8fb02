import RemoteCore
import Synchronization

/// A service's view embedded in the host: what the service drew as an image, a stream of
/// damage, and the size the host gives it. Nothing toolkit-specific: any toolkit can blit
/// ``image``.
///
/// ```swift
/// let view = RemoteView(connection: launcher.connection(to: "com.example.compose"))
/// try await view.present(width: 320, height: 240)
/// for await damage in view.damage { blit(view.image, damage) }
/// ```
///
/// The host copies each committed frame's damage into its own image, then hands the buffer
/// back and allows the next frame; a service that breaks the surface rules is ended with the
/// reason. When the service is relaunched, the new process gets the same size.
public final class RemoteView: Sendable {
    /// The connection whose service this view shows.
    public let connection: ServiceConnection
    /// The rects of the image each frame changed, in order.
    public let damage: AsyncStream<[PixelRect]>

    private let damageSink: AsyncStream<[PixelRect]>.Continuation
    private let state = Mutex<(compositor: SurfaceCompositor, size: SurfaceSize?)>((SurfaceCompositor(), nil))

    public init(connection: ServiceConnection) {
        self.connection = connection
        (damage, damageSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(64))
        connection.attach(self)
    }

    deinit {
        damageSink.finish()
    }

    /// Shows the view at `width` × `height` points and `scalePermille` pixels per 1000 points
    /// (launching the service if needed); the service draws its first frame at that size.
    public func present(width: Int, height: Int, scalePermille: Int = 1000) async throws(RemoteError) {
        let size = SurfaceSize(width: width, height: height, scalePermille: scalePermille)
        if let problem = size.problem { throw RemoteError(.invalidArgument, problem) }
        try await connection.sendSurface(.resize(size))
        // Kept for relaunches (after the send, so a first launch does not send it twice).
        state.withLock { $0.size = size }
    }

    /// What the service drew, as of its last frame.
    public var image: RemoteImage {
        RemoteImage(state.withLock { $0.compositor }.image)
    }

    /// The size given with ``present(width:height:scalePermille:)``.
    var size: SurfaceSize? { state.withLock { $0.size } }

    /// A new process serves the view: its buffers start afresh (the image stays until it draws).
    func serviceChanged() {
        state.withLock { state in
            let image = state.compositor.image
            state.compositor = SurfaceCompositor(keeping: image)
        }
    }

    /// Applies a surface message from the service; returns what to send back.
    func receive(_ message: SurfaceMessage, attachments: [Attachment]) throws(RemoteError) -> [SurfaceMessage] {
        let compositor = state.withLock { $0.compositor }
        let damage = try compositor.receive(message, attachments: attachments)
        guard case .commit = message else { return [] }
        damageSink.yield(damage)
        // Headless: the frame is shown as soon as it is composited.
        return compositor.present()
    }
}

/// A read-only copy of what a service drew: premultiplied ARGB32 words (Cairo's format).
public struct RemoteImage: Sendable, Equatable {
    public let width: Int
    public let height: Int
    private let pixels: [UInt32]

    init(_ image: SurfaceCompositor.Image) {
        width = image.width
        height = image.height
        pixels = image.pixels
    }

    /// The word at (`x`, `y`): alpha in the top byte, then red, green, blue (premultiplied).
    public func pixel(x: Int, y: Int) -> UInt32 {
        precondition(x >= 0 && x < width && y >= 0 && y < height, "pixel (\(x), \(y)) outside \(width)×\(height)")
        return pixels[y * width + x]
    }

    /// Straight (not premultiplied) RGBA bytes, row after row.
    public var rgba: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(pixels.count * 4)
        for word in pixels {
            let alpha = word >> 24
            func channel(_ shift: UInt32) -> UInt8 {
                let value = (word >> shift) & 0xFF
                return alpha == 0 ? 0 : UInt8(min(255, (value * 255 + alpha / 2) / alpha))
            }
            bytes += [channel(16), channel(8), channel(0), UInt8(alpha)]
        }
        return bytes
    }
}
