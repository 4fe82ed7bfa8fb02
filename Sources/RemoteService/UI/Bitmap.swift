import CCairo

/// A decoded picture a service draws (premultiplied ARGB32, from a PNG or drawn with
/// ``init(width:height:draw:)``), shown by ``ImageView`` and ``GraphicsContext/draw(_:in:)``,
/// scaled with ``scaled(width:height:)`` and encoded with ``pngData()``. Immutable. (Not to be confused with the host's
/// `RemoteImage`, which is what a service drew, as the host sees it.)
public final class Bitmap: @unchecked Sendable {
    // @unchecked: the Cairo surface is never drawn into after it is decoded (or drawn), only read.
    let surface: OpaquePointer
    /// Pixels.
    public let width: Int
    public let height: Int

    private init(checking surface: OpaquePointer, _ what: String) throws(RemoteError) {
        let status = cairo_surface_status(surface)
        guard status == CAIRO_STATUS_SUCCESS else {
            cairo_surface_destroy(surface)
            throw RemoteError(.invalidArgument, "cannot read \(what) as a PNG: \(String(cString: cairo_status_to_string(status)))")
        }
        self.surface = surface
        width = Int(cairo_image_surface_get_width(surface))
        height = Int(cairo_image_surface_get_height(surface))
    }

    /// Reads the PNG at `path`.
    ///
    /// - Throws: `RemoteError` `invalidArgument` naming the path and what was wrong.
    public convenience init(contentsOfPNG path: String) throws(RemoteError) {
        try self.init(checking: cairo_image_surface_create_from_png(path), path)
    }

    /// Decodes PNG bytes (e.g. a shared item's contents).
    ///
    /// - Throws: `RemoteError` `invalidArgument` when the bytes are not a PNG Cairo can read.
    public convenience init(pngData: [UInt8]) throws(RemoteError) {
        final class Reader {
            let bytes: [UInt8]
            var offset = 0
            init(_ bytes: [UInt8]) { self.bytes = bytes }
        }
        let reader = Reader(pngData)
        let surface = withExtendedLifetime(reader) {
            cairo_image_surface_create_from_png_stream({ closure, data, length in
                let reader = Unmanaged<Reader>.fromOpaque(closure!).takeUnretainedValue()
                let count = Int(length)
                guard reader.bytes.count - reader.offset >= count else { return CAIRO_STATUS_READ_ERROR }
                reader.bytes.withUnsafeBytes { source in
                    UnsafeMutableRawPointer(data!).copyMemory(from: source.baseAddress! + reader.offset, byteCount: count)
                }
                reader.offset += count
                return CAIRO_STATUS_SUCCESS
            }, Unmanaged.passUnretained(reader).toOpaque())!
        }
        try self.init(checking: surface, "\(pngData.count) bytes")
    }

    /// A new `width` × `height` pixel bitmap (transparent to start with) holding what `draw`
    /// draws, in pixels (one unit is one pixel). Like `UIGraphicsImageRenderer`: for images a
    /// service makes to return, such as an edited picture. Safe off the main actor.
    ///
    /// - Throws: `RemoteError` `invalidArgument` when the size is not 1…`SurfaceLimits.maxDimension`
    ///   on each side, or Cairo cannot make the image.
    public convenience init(width: Int, height: Int, draw: (GraphicsContext) -> Void) throws(RemoteError) {
        guard (1...SurfaceLimits.maxDimension).contains(width), (1...SurfaceLimits.maxDimension).contains(height) else {
            throw RemoteError(.invalidArgument, "a bitmap of \(width)×\(height) pixels: each side must be 1…\(SurfaceLimits.maxDimension)")
        }
        let surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, Int32(width), Int32(height))!
        if cairo_surface_status(surface) == CAIRO_STATUS_SUCCESS {
            let cairo = cairo_create(surface)!
            draw(GraphicsContext(cairo))
            cairo_destroy(cairo)
            cairo_surface_flush(surface)
        }
        try self.init(checking: surface, "a new \(width)×\(height) bitmap")
    }

    /// This bitmap scaled to `width` × `height` pixels (Cairo's good filter, which averages
    /// the pixels it drops when shrinking). Safe off the main actor: e.g. shrinking a shared
    /// photo before uploading it.
    ///
    /// - Throws: `RemoteError` `invalidArgument` for a size out of 1…`SurfaceLimits.maxDimension`.
    public func scaled(width: Int, height: Int) throws(RemoteError) -> Bitmap {
        try Bitmap(width: width, height: height) { context in
            context.draw(self, in: Rect(x: 0, y: 0, width: Double(width), height: Double(height)))
        }
    }

    /// The bitmap encoded as PNG (with Cairo), e.g. to return as a share's `image/png` item.
    ///
    /// - Throws: `RemoteError` `invalidArgument` with Cairo's reason.
    public func pngData() throws(RemoteError) -> [UInt8] {
        final class Sink {
            var bytes: [UInt8] = []
        }
        let sink = Sink()
        let status = withExtendedLifetime(sink) {
            cairo_surface_write_to_png_stream(surface, { closure, data, length in
                let sink = Unmanaged<Sink>.fromOpaque(closure!).takeUnretainedValue()
                sink.bytes.append(contentsOf: UnsafeBufferPointer(start: data, count: Int(length)))
                return CAIRO_STATUS_SUCCESS
            }, Unmanaged.passUnretained(sink).toOpaque())
        }
        guard status == CAIRO_STATUS_SUCCESS else {
            throw RemoteError(.invalidArgument, "cannot encode a \(width)×\(height) bitmap as PNG: \(String(cString: cairo_status_to_string(status)))")
        }
        return sink.bytes
    }

    deinit { cairo_surface_destroy(surface) }
}
