// The sheet's header: what is shared, item by item, as a share sheet shows it before anything is
// launched. A file's name, size and a glyph for its kind; a PNG's thumbnail, decoded off the
// window's thread once its header says it is small enough; a text's first line; a URL's host.
import CCairo
import Foundation
import RemoteHost

/// What the sheet's header shows of one shared item.
struct ItemPreview: Sendable {
    /// The glyph drawn for the item: its MIME type's top-level kind, or a link.
    enum Kind: String, Sendable {
        case image, text, audio, video, link, other
    }

    /// A PNG's thumbnail, as far as it got.
    enum Thumbnail: Sendable {
        /// Not a PNG file: the kind's glyph.
        case none
        /// Being decoded: a placeholder glyph until it is ready.
        case pending
        /// Decoded and scaled down.
        case ready(RemoteImage)
        /// Not decoded, and why (too large by its header, or not a PNG Cairo can read): the
        /// generic image glyph.
        case refused(String)
    }

    var kind: Kind
    /// The line in bold: a file's name, a text's first line, a URL's host.
    var title: String
    /// The line below it: a file's kind and size ("image, 2.3 MB"), "Text", a URL in full.
    var detail: String
    /// What a screen reader reads: "photo.png, image, 2.3 MB", "Text: …", "Link: example.com".
    var accessibleName: String
    var thumbnail: Thumbnail = .none

    /// The most characters of a text's first line kept (the header ellipsizes it far sooner;
    /// this bounds what is laid out for a megabyte-long line).
    static let maxTitleCharacters = 256

    init(kind: Kind, title: String, detail: String, accessibleName: String, thumbnail: Thumbnail = .none) {
        self.kind = kind
        self.title = title
        self.detail = detail
        self.accessibleName = accessibleName
        self.thumbnail = thumbnail
    }

    /// The preview of `item`; a PNG file's thumbnail is `.pending` (``SheetThumbnails`` makes it).
    init(_ item: ShareItem) {
        switch item.content {
        case .text(let text):
            let line = Self.firstLine(of: text)
            self.init(kind: .text, title: line, detail: "Text", accessibleName: "Text: \(line)")
        case .url(let url):
            let host = ShareItem.host(of: url) ?? url
            self.init(kind: .link, title: host, detail: url, accessibleName: "Link: \(host)")
        case .file(let file):
            let topLevel = String(item.contentType.prefix { $0 != "/" })
            let kind = Kind(rawValue: topLevel).flatMap { $0 == .link ? nil : $0 } ?? .other
            let detail = "\(topLevel), \(Self.size(file.size))"
            self.init(kind: kind, title: file.name, detail: detail, accessibleName: "\(file.name), \(detail)",
                      thumbnail: item.contentType == "image/png" ? .pending : .none)
        }
    }

    /// The text's first line with something in it, trimmed, at most ``maxTitleCharacters``
    /// (more ends with "…"; the header ellipsizes it to its width anyway).
    static func firstLine(of text: String) -> String {
        let line = text.split(whereSeparator: \.isNewline).lazy
            .map { $0.trimmingCharacters(in: .whitespaces) }.first { !$0.isEmpty } ?? ""
        return line.count > maxTitleCharacters ? String(line.prefix(maxTitleCharacters)) + "…" : line
    }

    /// A size as people read it, in SI units as GNOME's file manager shows them: "1 byte",
    /// "512 bytes", "2.3 MB".
    static func size(_ bytes: Int) -> String {
        if bytes < 1000 { return bytes == 1 ? "1 byte" : "\(bytes) bytes" }
        let units = ["kB", "MB", "GB", "TB"]
        var value = Double(bytes) / 1000, unit = 0
        while value >= 999.95, unit < units.count - 1 {
            value /= 1000
            unit += 1
        }
        return String(format: "%.1f", value) + " " + units[unit]
    }
}

/// PNG files as the header reads them: the size the `IHDR` declares, checked before anything
/// decodes the file, then a thumbnail decoded and scaled down with Cairo.
enum PNGThumbnail {
    /// The most pixels a PNG may declare to be decoded for a thumbnail: 64 megapixels (64
    /// million; 256 MB as ARGB). A larger one gets the generic image glyph.
    static let maxPixels = 64_000_000

    /// The bytes of a PNG read before the rest: the signature and the `IHDR` chunk's length,
    /// type, width and height.
    static let headerBytes = 24

    /// PNG's signature, `\x89PNG\r\n\x1a\n`.
    private static let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

    /// The width and height the `IHDR` chunk declares (it comes first, right after the
    /// signature: 13 bytes of data, the width and height first, big-endian), or why `bytes`
    /// do not start a PNG.
    static func declaredSize(_ bytes: [UInt8]) -> Result<(width: Int, height: Int), Refusal> {
        guard bytes.starts(with: signature) else { return .failure(Refusal("it is not a PNG (no PNG signature)")) }
        guard bytes.count >= headerBytes, bytes[8..<16].elementsEqual([0, 0, 0, 13] + Array("IHDR".utf8)) else {
            return .failure(Refusal("it is not a PNG (no IHDR chunk after the signature)"))
        }
        func word(at offset: Int) -> Int { bytes[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) } }
        return .success((word(at: 16), word(at: 20)))
    }

    /// The largest file a thumbnail is made of (64 MiB): a 64-megapixel PNG that compresses
    /// worse than that is a picture nobody shares, or a bomb.
    static let maxFileBytes = 64 << 20

    /// Why a file gets no thumbnail.
    struct Refusal: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// The thumbnail of the PNG file `item`, at most `side` pixels wide and high (its aspect
    /// kept): its header read first, and the file decoded only when it declares at most
    /// ``maxPixels`` (width × height, each at least 1). Slow for a large file: call it off the
    /// window's thread.
    static func make(_ item: ShareItem, side: Int) -> Result<RemoteImage, Refusal> {
        guard case .file(let file) = item.content else { return .failure(Refusal("it is not a file")) }
        let header: [UInt8]
        do { header = try file.read(prefix: headerBytes) } catch { return .failure(Refusal(error.reason)) }
        let width: Int, height: Int
        switch declaredSize(header) {
        case .failure(let refusal): return .failure(refusal)
        case .success(let size): (width, height) = size
        }
        guard width >= 1, height >= 1, width.multipliedReportingOverflow(by: height).partialValue <= maxPixels,
              width <= maxPixels, height <= maxPixels else {
            return .failure(Refusal("its header declares \(width) × \(height) pixels, more than 64 megapixels (or none)"))
        }
        guard file.size <= maxFileBytes else {
            return .failure(Refusal("it has \(file.size) bytes, more than a thumbnail reads (\(maxFileBytes))"))
        }
        let bytes: [UInt8]
        do { bytes = try file.read(limit: maxFileBytes) } catch { return .failure(Refusal(error.reason)) }
        return decode(bytes, side: side)
    }

    /// Decodes `bytes` with Cairo and scales the image down to fit `side` × `side` pixels.
    static func decode(_ bytes: [UInt8], side: Int) -> Result<RemoteImage, Refusal> {
        let decoded: OpaquePointer
        do { decoded = try RemoteImage.decodePNG(bytes) } catch {
            return .failure(Refusal(error.reason))
        }
        defer { cairo_surface_destroy(decoded) }
        let width = Int(cairo_image_surface_get_width(decoded)), height = Int(cairo_image_surface_get_height(decoded))
        guard width > 0, height > 0 else { return .failure(Refusal("it has no pixels")) }
        let factor = min(1, Double(side) / Double(max(width, height)))
        let (thumbWidth, thumbHeight) = (max(1, Int((Double(width) * factor).rounded())), max(1, Int((Double(height) * factor).rounded())))
        var canvas = Canvas(width: thumbWidth, height: thumbHeight)
        canvas.pixels = [UInt32](repeating: 0, count: thumbWidth * thumbHeight)
        canvas.draw(scale: 1) { cr in
            cairo_scale(cr, Double(thumbWidth) / Double(width), Double(thumbHeight) / Double(height))
            cairo_set_source_surface(cr, decoded, 0, 0)
            cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_GOOD)
            cairo_paint(cr)
        }
        let pixels = canvas.pixels
        return .success(RemoteImage(width: thumbWidth, height: thumbHeight) { x, y in pixels[y * thumbWidth + x] })
    }
}

/// The thumbnails of a sheet's PNG items, made one after the other by one detached task (off
/// the window's thread; one decoded image in memory at a time, at most 64 megapixels) and taken
/// by the window's loop, which each one wakes when it is done. ``stop()`` before the window
/// closes: no wake-up reaches SDL after it.
final class SheetThumbnails: Sendable {
    /// The thumbnails' largest side, in pixels: the header's 36-point square at up to 2.67
    /// pixels a point, and drawn smaller by Cairo at a lower scale.
    static let side = 96

    private let wakeEvent: UInt32
    /// The thumbnails finished and not yet taken, and whether the window has stopped taking them.
    private let state = Mutex<(done: [Int: Result<RemoteImage, PNGThumbnail.Refusal>], stopped: Bool)>(([:], false))
    private let worker = Mutex<Task<Void, Never>?>(nil)

    init(wakeEvent: UInt32) { self.wakeEvent = wakeEvent }

    /// Starts making the thumbnail of each of `items` whose preview is pending, in order.
    func start(_ items: [ShareItem], previews: [ItemPreview]) {
        let pending = items.indices.filter { index in
            guard index < previews.count, case .pending = previews[index].thumbnail else { return false }
            return true
        }
        guard !pending.isEmpty else { return }
        let task = Task.detached(priority: .utility) { [self] in
            for index in pending {
                guard !Task.isCancelled else { return }
                let result = PNGThumbnail.make(items[index], side: Self.side)
                // Under the lock: stop() cannot slip in between the check and the wake-up.
                state.withLock { state in
                    guard !state.stopped else { return }
                    state.done[index] = result
                    SDLWindow.wake(wakeEvent)
                }
            }
        }
        worker.withLock { $0 = task }
    }

    /// Stops making thumbnails: the one being decoded is finished and dropped, and nothing
    /// wakes the window any more. Call it before the window closes (SDL quits).
    func stop() {
        state.withLock { $0.stopped = true }
        worker.withLock { $0?.cancel() }
    }

    /// The thumbnails finished since the last call, by item index.
    func take() -> [Int: Result<RemoteImage, PNGThumbnail.Refusal>] {
        state.withLock { state in
            defer { state.done = [:] }
            return state.done
        }
    }
}
