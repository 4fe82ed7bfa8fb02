// What Post writes, off the main actor: each image scaled with Cairo, as PNG, and post.json.
import FoundationEssentials
import RemoteService

enum PostWriter {
    /// The longest side a posted image may have, in pixels.
    static let maxDimension = 1024
    static let postFileName = "post.json"

    /// post.json.
    struct Post: Codable, Equatable {
        struct Image: Codable, Equatable {
            /// The PNG's name in the post's folder.
            var file: String
            var width: Int
            var height: Int
            var originalWidth: Int
            var originalHeight: Int
        }

        var text: String
        var images: [Image]
    }

    /// `width` × `height` scaled down (never up) so the longer side is at most ``maxDimension``.
    static func scaledSize(width: Int, height: Int) -> (width: Int, height: Int) {
        let longer = max(width, height)
        guard longer > maxDimension else { return (width, height) }
        let factor = Double(maxDimension) / Double(longer)
        return (max(1, Int((Double(width) * factor).rounded())), max(1, Int((Double(height) * factor).rounded())))
    }

    /// Writes a new `post-<milliseconds since 1970>` folder in `dataFolder`, holding
    /// `image-N.png` for each of `images` (scaled to at most ``maxDimension`` pixels) and
    /// post.json; calls `progress` with the count written after each image. Runs on the
    /// concurrent executor, so the activity's view keeps drawing; stops at the next image when
    /// cancelled (throwing `CancellationError`). A post that does not finish leaves no folder.
    ///
    /// - Returns: post.json's bytes and the folder's name.
    @concurrent
    static func write(text: String, images: [ShareItem], into dataFolder: String,
                      progress: @Sendable (Int) async -> Void) async throws -> (json: [UInt8], folderName: String) {
        let (folder, folderName) = try makeFolder(in: dataFolder)
        do {
            return (try await write(text: text, images: images, into: folder, progress: progress), folderName)
        } catch {
            try? FileManager.default.removeItem(atPath: folder)
            throw error
        }
    }

    private static func write(text: String, images: [ShareItem], into folder: String,
                              progress: @Sendable (Int) async -> Void) async throws -> [UInt8] {
        var post = Post(text: text, images: [])
        for (index, item) in images.enumerated() {
            try Task.checkCancellation()
            let original = try item.bitmap(limit: 32 << 20)
            let size = scaledSize(width: original.width, height: original.height)
            let scaled = size == (original.width, original.height) ? original : try original.scaled(width: size.width, height: size.height)
            let file = "image-\(index + 1).png"
            try write(try scaled.pngData(), to: folder + "/" + file)
            post.images.append(Post.Image(file: file, width: size.width, height: size.height,
                                          originalWidth: original.width, originalHeight: original.height))
            await progress(index + 1)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let json = Array(try encoder.encode(post))
        try write(json, to: folder + "/" + postFileName)
        return json
    }

    /// A new, empty post folder in `dataFolder`.
    private static func makeFolder(in dataFolder: String) throws -> (path: String, name: String) {
        let stamp = Int((Date().timeIntervalSince1970 * 1000).rounded())
        for attempt in 0..<100 {
            let name = attempt == 0 ? "post-\(stamp)" : "post-\(stamp)-\(attempt)"
            let path = dataFolder + "/" + name
            guard !FileManager.default.fileExists(atPath: path) else { continue }
            do {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            } catch {
                throw ActivityFailure(message: "cannot make \(name) in the data folder: \(error)")
            }
            return (path, name)
        }
        throw ActivityFailure(message: "cannot find a free name for post-\(stamp) in the data folder")
    }

    private static func write(_ bytes: [UInt8], to path: String) throws {
        do { try Data(bytes).write(to: URL(filePath: path)) } catch {
            throw ActivityFailure(message: "cannot write \(path.split(separator: "/").suffix(2).joined(separator: "/")): \(error)")
        }
    }
}
