import CCairo

/// A decoded picture a service draws (premultiplied ARGB32, from a PNG), shown by ``ImageView``
/// and ``GraphicsContext/draw(_:in:)``. Immutable. (Not to be confused with the host's
/// `RemoteImage`, which is what a service drew, as the host sees it.)
public final class Bitmap: @unchecked Sendable {
    // @unchecked: the Cairo surface is never drawn into after it is decoded, only read.
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

    deinit { cairo_surface_destroy(surface) }
}
