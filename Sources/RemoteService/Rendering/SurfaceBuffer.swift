import CCairo
import RemoteCore

/// One buffer a service draws into and the host reads: a memfd sized stride × height, sealed
/// against shrinking and growing (so the host can map it safely), mapped read-write here and
/// wrapped as a Cairo image surface (`CAIRO_FORMAT_ARGB32`: premultiplied, native-endian words).
///
/// Confined to the task that renders; the SDK never draws into a buffer the host has not
/// released.
package final class SurfaceBuffer {
    package let layout: BufferDescription
    private let file: MemoryFile
    private let mapping: MemoryMapping
    private let surface: OpaquePointer

    /// A new buffer `id` of `width` × `height` pixels.
    package init(id: UInt32, width: Int, height: Int) throws(RemoteError) {
        let stride = Int(cairo_format_stride_for_width(CAIRO_FORMAT_ARGB32, Int32(clamping: width)))
        let layout = BufferDescription(id: id, width: width, height: height, stride: stride)
        if let problem = layout.problem { throw RemoteError(.invalidArgument, problem) }
        do throws(SystemCallError) {
            let file = try MemoryFile(name: "remoteview-surface-\(id)")
            try file.resize(to: layout.byteCount)
            try file.addSeals([.shrink, .grow])
            // Drawn in whole before it is first shown: one populating map, not a fault a page.
            mapping = try file.map(length: layout.byteCount, writable: true, populate: true)
            self.file = file
        } catch {
            throw RemoteError(.invalidArgument, "cannot make buffer \(id) (\(width)×\(height)): \(error)")
        }
        surface = cairo_image_surface_create_for_data(mapping.base.assumingMemoryBound(to: UInt8.self), CAIRO_FORMAT_ARGB32,
                                                      Int32(width), Int32(height), Int32(stride))
        self.layout = layout
    }

    deinit {
        // Cairo lets go of the pixels before the mapping (a stored property) goes.
        cairo_surface_destroy(surface)
    }

    /// A copy of the memfd, to attach to the `attach_buffer` message.
    package func attachment() throws(RemoteError) -> Attachment {
        do { return try Attachment(duplicating: file.fd) } catch {
            throw RemoteError(.invalidArgument, "cannot share buffer \(layout.id): \(error)")
        }
    }

    /// Draws with Cairo, clipped to `clip` (the damage) when given; the pixels are in the buffer
    /// when this returns.
    package func draw(clippedTo clip: [PixelRect]? = nil, _ body: (GraphicsContext) -> Void) {
        let cairo = cairo_create(surface)!
        defer { cairo_destroy(cairo) }
        if let clip {
            for rect in clip { cairo_rectangle(cairo, Double(rect.x), Double(rect.y), Double(rect.width), Double(rect.height)) }
            cairo_clip(cairo)
        }
        body(GraphicsContext(cairo))
        cairo_surface_flush(surface)
    }

    /// The stored word at (`x`, `y`) (for tests and diagnostics).
    package func pixel(x: Int, y: Int) -> UInt32 {
        mapping.base.loadUnaligned(fromByteOffset: y * layout.stride + x * 4, as: UInt32.self)
    }
}

/// Drawing operations, backed by a Cairo context, in the coordinates of the buffer.
public struct GraphicsContext {
    let cairo: OpaquePointer

    init(_ cairo: OpaquePointer) {
        self.cairo = cairo
    }

    /// Fills `rect` with `color` (replacing what was there, alpha included).
    public func fill(_ rect: PixelRect, with color: Color) {
        clear(Rect(rect), to: color)
    }

    /// Paints `color` over `rect` (blending with what was there).
    public func paint(_ rect: PixelRect, with color: Color) {
        fill(Rect(rect), with: color)
    }
}
