// The items `demo-share list` and `demo-share share` share, from the command line.
import ArgumentParser
import RemoteHost

struct ShareItemOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Text to share (text/plain).", valueName: "text"))
    var text: String?

    @Option(help: ArgumentHelp("A URL to share (text/uri-list): absolute, e.g. https://example.com/page.", valueName: "url"))
    var url: String?

    @Option(name: .customLong("image"), help: ArgumentHelp(
        "An image file to share (its MIME type from its name, which must be image/…); repeatable.", valueName: "file"))
    var images: [String] = []

    @Option(name: .customLong("file"), help: ArgumentHelp(
        "A file to share (its MIME type from its name; application/octet-stream if unknown); repeatable.", valueName: "file"))
    var files: [String] = []

    /// Whether no item was given.
    var isEmpty: Bool { text == nil && url == nil && images.isEmpty && files.isEmpty }

    /// The items: the text, the URL, the images, then the files. Files are read now (into
    /// sealed memfds): the activity gets their bytes, names and types, never their paths.
    ///
    /// - Throws: `DemoError` naming the option and what is wrong with its value.
    func items() throws -> [ShareItem] {
        var items: [ShareItem] = []
        if let text {
            do { items.append(try .text(text)) } catch { throw DemoError("--text: \(error.reason)") }
        }
        if let url {
            do { items.append(try .url(url)) } catch { throw DemoError("--url \(url): \(error.reason)") }
        }
        for path in images {
            let item: ShareItem
            do { item = try .file(contentsOf: path) } catch { throw DemoError("--image \(path): \(error.reason)") }
            guard item.contentType.hasPrefix("image/") else {
                throw DemoError("--image \(path): its type is \(item.contentType), not an image/… type (share it with --file)")
            }
            items.append(item)
        }
        for path in files {
            do { items.append(try .file(contentsOf: path)) } catch { throw DemoError("--file \(path): \(error.reason)") }
        }
        guard items.count <= ShareLimits.maxItems else {
            throw DemoError("\(items.count) items: a share carries at most \(ShareLimits.maxItems)")
        }
        return items
    }
}
