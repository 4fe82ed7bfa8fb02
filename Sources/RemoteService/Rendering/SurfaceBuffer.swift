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
    private let storage: Storage
    private let surface: OpaquePointer
    /// Where the memory goes when the buffer does, if anywhere.
    private let pool: SurfaceBufferPool?

    /// A buffer's memory: the memfd and its mapping, which can outlive one buffer in a pool.
    package final class Storage: Sendable {
        let file: MemoryFile
        let mapping: MemoryMapping
        let width: Int
        let height: Int

        init(file: consuming MemoryFile, mapping: MemoryMapping, width: Int, height: Int) {
            self.file = file
            self.mapping = mapping
            (self.width, self.height) = (width, height)
        }

        var byteCount: Int { mapping.length }
    }

    /// A new buffer `id` of `width` × `height` pixels, zeroed.
    package convenience init(id: UInt32, width: Int, height: Int) throws(RemoteError) {
        try self.init(id: id, width: width, height: height, pool: nil)
    }

    /// A buffer `id` of `width` × `height` pixels, zeroed, with memory `pool` kept, if it kept
    /// some of that size, or new memory; the memory goes back to `pool` when the buffer goes.
    package init(id: UInt32, width: Int, height: Int, pool: SurfaceBufferPool?) throws(RemoteError) {
        let stride = Int(cairo_format_stride_for_width(CAIRO_FORMAT_ARGB32, Int32(clamping: width)))
        let layout = BufferDescription(id: id, width: width, height: height, stride: stride)
        if let problem = layout.problem { throw RemoteError(.invalidArgument, problem) }
        if let kept = pool?.take(width: width, height: height) {
            // Zeroed, as new memory is: what another view drew never shows through.
            kept.mapping.base.initializeMemory(as: UInt8.self, repeating: 0, count: kept.byteCount)
            storage = kept
        } else {
            do throws(SystemCallError) {
                let file = try MemoryFile(name: "remoteview-surface-\(id)")
                try file.resize(to: layout.byteCount)
                try file.addSeals([.shrink, .grow])
                // Drawn in whole before it is first shown: one populating map, not a fault a page.
                let mapping = try file.map(length: layout.byteCount, writable: true, populate: true)
                storage = Storage(file: file, mapping: mapping, width: width, height: height)
            } catch {
                throw RemoteError(.invalidArgument, "cannot make buffer \(id) (\(width)×\(height)): \(error)")
            }
        }
        surface = cairo_image_surface_create_for_data(storage.mapping.base.assumingMemoryBound(to: UInt8.self), CAIRO_FORMAT_ARGB32,
                                                      Int32(width), Int32(height), Int32(stride))
        self.layout = layout
        self.pool = pool
    }

    deinit {
        // Cairo lets go of the pixels before the mapping goes (or goes back to the pool).
        cairo_surface_destroy(surface)
        pool?.keep(storage)
    }

    /// A copy of the memfd, to attach to the `attach_buffer` message.
    package func attachment() throws(RemoteError) -> Attachment {
        do { return try Attachment(duplicating: storage.file.fd) } catch {
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
        storage.mapping.base.loadUnaligned(fromByteOffset: y * layout.stride + x * 4, as: UInt32.self)
    }
}

/// The memory of buffers whose surfaces are gone, kept for the next surface of the same size in
/// this process, as a Wayland client keeps a buffer pool. A new view's first frame then needs no
/// memfd to be made, no pages allocated and zeroed, and the closed view's buffers no pages
/// freed (the allocation, the page faults and the freeing were about half of a service's CPU
/// time per warm present, by `perf`; zeroing 300 KB costs a fraction of that).
///
/// Bounded: at most ``maxBuffers`` buffers and ``maxBytes`` bytes, the oldest let go first. The
/// memory is the service's (its `limits.memoryMiB`). A buffer made from kept memory is zeroed
/// first, like new memory, so nothing another view drew shows through.
package final class SurfaceBufferPool: Sendable {
    /// The pool a service's surfaces share.
    package static let shared = SurfaceBufferPool(maxBuffers: 4, maxBytes: 32 << 20)

    package let maxBuffers: Int
    package let maxBytes: Int
    private let kept = Mutex<[SurfaceBuffer.Storage]>([])

    package init(maxBuffers: Int, maxBytes: Int) {
        (self.maxBuffers, self.maxBytes) = (maxBuffers, maxBytes)
    }

    /// The memory kept now, buffers and bytes (for tests and diagnostics).
    package var contents: (buffers: Int, bytes: Int) {
        kept.withLock { ($0.count, $0.reduce(0) { $0 + $1.byteCount }) }
    }

    /// Takes kept memory of `width` × `height` pixels, the most recently kept first.
    func take(width: Int, height: Int) -> SurfaceBuffer.Storage? {
        kept.withLock { kept in
            guard let index = kept.lastIndex(where: { $0.width == width && $0.height == height }) else { return nil }
            return kept.remove(at: index)
        }
    }

    /// Keeps `storage`, letting the oldest go past the bounds.
    func keep(_ storage: SurfaceBuffer.Storage) {
        guard storage.byteCount <= maxBytes else { return }
        let dropped = kept.withLock { kept -> [SurfaceBuffer.Storage] in
            kept.append(storage)
            var dropped: [SurfaceBuffer.Storage] = []
            while kept.count > maxBuffers || kept.reduce(0, { $0 + $1.byteCount }) > maxBytes {
                dropped.append(kept.removeFirst())
            }
            return dropped
        }
        _ = consume dropped  // unmapped and closed here, outside the lock
    }
}

/// Drawing operations, backed by a Cairo context, in the coordinates of the buffer.
public struct GraphicsContext {
    let cairo: OpaquePointer

    /// A context drawing with `cairo` (the demo window's own canvas draws its chrome with it).
    package init(_ cairo: OpaquePointer) {
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
