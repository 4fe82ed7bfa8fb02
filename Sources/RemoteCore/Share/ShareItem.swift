import Synchronization

/// One item of a share, in either direction: what a host shares with an activity, and what the
/// activity returns (an edited image, a saved note). Like an `NSExtensionItem` attachment, typed
/// by MIME type.
///
/// Text and URLs travel inline. Files travel as sealed read-only memfds with their name and
/// size: a service never gets a path, so it cannot see the host's files.
///
/// ```swift
/// let items = [try ShareItem.text("Look at this"),
///              try ShareItem.url("https://example.com/photo"),
///              try ShareItem.file(named: "photo.png", contentType: "image/png", contents: pngBytes)]
/// ```
public struct ShareItem: Sendable, CustomStringConvertible {
    /// What the item holds.
    public enum Content: Sendable {
        /// Text, inline (1…``ShareLimits/maxTextBytes`` bytes of UTF-8).
        case text(String)
        /// One absolute URL, inline (1…``ShareLimits/maxURLBytes`` bytes).
        case url(String)
        /// A file's contents, in a sealed read-only memfd.
        case file(SharedFile)
    }

    /// The item's MIME type, lower case (`text/plain`, `text/uri-list`, `image/png`).
    public let contentType: String
    /// The value.
    public let content: Content

    private init(contentType: String, content: Content) {
        self.contentType = contentType
        self.content = content
    }

    /// A text item.
    ///
    /// - Parameters:
    ///   - text: the text, 1…``ShareLimits/maxTextBytes`` bytes of UTF-8.
    ///   - contentType: a `text/…` MIME type (default `text/plain`).
    /// - Throws: `RemoteError` `invalidArgument` naming what is out of bounds.
    public static func text(_ text: String, contentType: String = "text/plain") throws(RemoteError) -> ShareItem {
        try checked(ShareItem(contentType: MIMEType.normalized(contentType), content: .text(text)))
    }

    /// A URL item (`text/uri-list`). The URL must be absolute (`scheme:…`; `http`, `https` and
    /// `ftp` also need a host) and hold no whitespace or control characters.
    ///
    /// - Throws: `RemoteError` `invalidArgument` saying what is wrong with it.
    public static func url(_ url: String) throws(RemoteError) -> ShareItem {
        try checked(ShareItem(contentType: "text/uri-list", content: .url(url)))
    }

    /// A file item holding `contents`, copied into a new sealed memfd.
    ///
    /// - Parameters:
    ///   - name: the file name the receiver sees (1…255 bytes, no `/`); never a path.
    ///   - contentType: its MIME type, e.g. `image/png`.
    ///   - contents: the bytes, at most ``ShareLimits/maxFileBytes``.
    /// - Throws: `RemoteError` `invalidArgument` for a bad name, type or size, or what creating
    ///   the memfd failed with.
    public static func file(named name: String, contentType: String, contents: some Collection<UInt8>) throws(RemoteError) -> ShareItem {
        guard contents.count <= ShareLimits.maxFileBytes else {
            throw RemoteError(.invalidArgument, "file item \"\(String(name.prefix(64)).escapedForTerminal())\" has \(contents.count) bytes, more than \(ShareLimits.maxFileBytes)")
        }
        if let problem = SharedFile.nameProblem(name) { throw RemoteError(.invalidArgument, problem) }
        let memory: MemoryFile
        do { memory = try MemoryFile.sealed(name: "share:\(name)", contents: contents) } catch {
            throw RemoteError(.invalidArgument, "cannot put file item \"\(String(name.prefix(64)).escapedForTerminal())\" in a memfd: \(error)")
        }
        let file = SharedFile(name: name, size: contents.count, descriptor: memory.takeDescriptor())
        return try checked(ShareItem(contentType: MIMEType.normalized(contentType), content: .file(file)))
    }

    private static func checked(_ item: ShareItem) throws(RemoteError) -> ShareItem {
        if let problem = item.wire.problem { throw RemoteError(.invalidArgument, problem) }
        return item
    }

    // MARK: reading

    /// The text of a text item; `nil` for other items.
    public var text: String? {
        if case .text(let text) = content { return text }
        return nil
    }

    /// The URL of a URL item; `nil` for other items.
    public var url: String? {
        if case .url(let url) = content { return url }
        return nil
    }

    /// The file name of a file item; `nil` for other items.
    public var fileName: String? {
        if case .file(let file) = content { return file.name }
        return nil
    }

    /// The item's size in bytes: the file's, or the text's or URL's UTF-8.
    public var size: Int {
        switch content {
        case .text(let text), .url(let text): text.utf8.count
        case .file(let file): file.size
        }
    }

    /// The item's bytes: a file's contents, or a text's or URL's UTF-8.
    ///
    /// - Parameter limit: The most bytes the caller takes (a file may be up to
    ///   `ShareLimits.maxFileBytes`, 256 MiB).
    /// - Throws: `RemoteError` `invalidArgument` when the item is larger than `limit`, or the
    ///   memfd cannot be read.
    public func data(limit: Int) throws(RemoteError) -> [UInt8] {
        switch content {
        case .text(let text), .url(let text):
            guard text.utf8.count <= limit else {
                throw RemoteError(.invalidArgument, "\(self) holds \(text.utf8.count) bytes, more than the \(limit) this reader takes")
            }
            return Array(text.utf8)
        case .file(let file): return try file.read(limit: limit)
        }
    }

    /// The item as a string: a text's or URL's value, or a file's contents as UTF-8.
    ///
    /// - Parameter limit: The most bytes of a file the caller takes.
    /// - Throws: `RemoteError` `invalidArgument` when a file is larger than `limit` or its
    ///   contents are not UTF-8.
    public func string(limit: Int) throws(RemoteError) -> String {
        switch content {
        case .text(let text), .url(let text): return text
        case .file(let file):
            guard let text = String(validating: try file.read(limit: limit), as: UTF8.self) else {
                throw RemoteError(.invalidArgument, "file item \"\(file.name.escapedForTerminal())\" (\(contentType.escapedForTerminal())) is not UTF-8 text")
            }
            return text
        }
    }

    public var description: String {
        switch content {
        case .text(let text): "text (\(contentType.escapedForTerminal()), \(text.utf8.count) bytes)"
        case .url(let url): "URL \(String(url.prefix(80)).escapedForTerminal())"
        case .file(let file): "file \"\(file.name.escapedForTerminal())\" (\(contentType.escapedForTerminal()), \(file.size) bytes)"
        }
    }

    // MARK: the wire

    /// What the envelope says about the item (the memfd rides separately).
    package var wire: WireShareItem {
        switch content {
        case .text(let text): WireShareItem(kind: .text, contentType: contentType, text: text)
        case .url(let url): WireShareItem(kind: .url, contentType: contentType, text: url)
        case .file(let file): WireShareItem(kind: .file, contentType: contentType, name: file.name, size: file.size)
        }
    }

    /// `items` as the envelope carries them: their descriptions, and the file items' memfds
    /// (duplicates: the items keep their own), in item order.
    package static func wire(_ items: [ShareItem]) throws(RemoteError) -> (items: [WireShareItem], attachments: [Attachment]) {
        var attachments: [Attachment] = []
        for item in items {
            guard case .file(let file) = item.content else { continue }
            attachments.append(try file.attachment())
        }
        return (items.map(\.wire), attachments)
    }

    /// The items a peer sent: `wire` (validated by the codec) with its memfds, each checked to
    /// be sealed against any change and to have its declared size.
    ///
    /// - Throws: `RemoteError` `protocolViolation` naming the item and what was wrong; every
    ///   attachment is closed then.
    package static func received(_ wire: [WireShareItem], attachments: [Attachment]) throws(RemoteError) -> [ShareItem] {
        var items: [ShareItem] = []
        var next = 0
        for (index, description) in wire.enumerated() {
            switch description.kind {
            case .text: items.append(ShareItem(contentType: description.contentType, content: .text(description.text)))
            case .url: items.append(ShareItem(contentType: description.contentType, content: .url(description.text)))
            case .file:
                guard next < attachments.count, let fd = attachments[next].take() else {
                    throw RemoteError(.protocolViolation, "item \(index) is a file but no memfd came with it")
                }
                next += 1
                let memory = MemoryFile(adopting: fd)
                try memory.checkReceived(declaring: description.size, as: "item \(index) (\"\(description.name.escapedForTerminal())\")")
                let file = SharedFile(name: description.name, size: description.size, descriptor: memory.takeDescriptor())
                items.append(ShareItem(contentType: description.contentType, content: .file(file)))
            }
        }
        return items
    }
}

/// The contents of a file item: a sealed, read-only memfd, its file name and size. The
/// descriptor stays inside; read it with ``read(limit:)`` (or the item's `data(limit:)`).
public final class SharedFile: Sendable {
    /// The file name (never a path).
    public let name: String
    /// Its size in bytes.
    public let size: Int
    private let descriptor: OwnedFD

    init(name: String, size: Int, descriptor: consuming OwnedFD) {
        self.name = name
        self.size = size
        self.descriptor = descriptor
    }

    /// The contents, when the file holds at most `limit` bytes.
    ///
    /// - Parameter limit: The most bytes the caller takes (a file may be up to
    ///   `ShareLimits.maxFileBytes`, 256 MiB).
    /// - Throws: `RemoteError` `invalidArgument` naming the size and the limit when the file is
    ///   larger (nothing is read then), or when reading the memfd fails.
    public func read(limit: Int) throws(RemoteError) -> [UInt8] {
        guard size <= limit else {
            throw RemoteError(.invalidArgument, "file item \"\(name.escapedForTerminal())\" holds \(size) bytes, more than the \(limit) this reader takes")
        }
        do { return try Syscall.read(descriptor, count: size, at: 0) } catch {
            throw RemoteError(.invalidArgument, "cannot read file item \"\(name.escapedForTerminal())\": \(error)")
        }
    }

    /// The first `count` bytes of the contents (all of them when the file is shorter): to look
    /// at a header (a PNG's declared size, say) before reading, or refusing, the rest.
    ///
    /// - Parameter count: How many bytes to read at most.
    /// - Throws: `RemoteError` `invalidArgument` when reading the memfd fails.
    public func read(prefix count: Int) throws(RemoteError) -> [UInt8] {
        do { return try Syscall.read(descriptor, count: max(0, min(count, size)), at: 0) } catch {
            throw RemoteError(.invalidArgument, "cannot read file item \"\(name.escapedForTerminal())\": \(error)")
        }
    }

    /// A duplicate of the memfd to send.
    func attachment() throws(RemoteError) -> Attachment {
        do { return try Attachment(duplicating: descriptor) } catch {
            throw RemoteError(.invalidArgument, "cannot duplicate the memfd of file item \"\(name.escapedForTerminal())\": \(error)")
        }
    }

    /// Why `name` cannot be a file item's name, or `nil`.
    static func nameProblem(_ name: String) -> String? {
        guard !name.isEmpty, name.utf8.count <= ShareLimits.maxFileNameBytes else {
            return "file item name \"\(String(name.prefix(64)).escapedForTerminal())\" must be 1…\(ShareLimits.maxFileNameBytes) bytes"
        }
        guard !name.contains("/"), !name.contains("\0"), name != ".", name != ".." else {
            return "file item name \"\(String(name.prefix(64)).escapedForTerminal())\" must be a plain file name (no '/' or NUL, not \".\" or \"..\")"
        }
        return nil
    }
}

/// What kind of item an envelope describes (the schema's `ItemKind`).
package enum WireItemKind: Sendable, Hashable {
    case text, url, file
}

/// An item as the envelope describes it (the schema's `ShareItem`).
package struct WireShareItem: Sendable, Hashable {
    package var kind: WireItemKind
    package var contentType: String
    package var text: String = ""
    package var name: String = ""
    package var size: Int = 0

    package init(kind: WireItemKind, contentType: String, text: String = "", name: String = "", size: Int = 0) {
        self.kind = kind
        self.contentType = contentType
        self.text = text
        self.name = name
        self.size = size
    }

    /// Why a peer could never accept this item, or `nil`.
    package var problem: String? {
        guard MIMEType.isValid(contentType) else {
            return "item content type \"\(String(contentType.prefix(64)).escapedForTerminal())\" is not a MIME type (type/subtype, at most \(ShareLimits.maxContentTypeLength) bytes)"
        }
        switch kind {
        case .text:
            guard !text.isEmpty, text.utf8.count <= ShareLimits.maxTextBytes else {
                return "text item must be 1…\(ShareLimits.maxTextBytes) bytes, not \(text.utf8.count)"
            }
            guard contentType.hasPrefix("text/") else { return "text item of type \(contentType.escapedForTerminal()): inline text must be text/…" }
        case .url:
            guard contentType == "text/uri-list" else { return "URL item of type \(contentType.escapedForTerminal()): URLs are text/uri-list" }
            if let problem = Self.urlProblem(text) { return problem }
        case .file:
            if let problem = SharedFile.nameProblem(name) { return problem }
            guard size >= 0, size <= ShareLimits.maxFileBytes else {
                return "file item \"\(name.escapedForTerminal())\" of \(size) bytes is over \(ShareLimits.maxFileBytes)"
            }
        }
        if kind != .file, !name.isEmpty || size != 0 { return "\(kind) item with a file name or size" }
        if kind == .file, !text.isEmpty { return "file item \"\(name.escapedForTerminal())\" with inline text" }
        return nil
    }

    /// Why `url` is not an absolute URL a share may carry, or `nil`.
    static func urlProblem(_ url: String) -> String? {
        guard !url.isEmpty, url.utf8.count <= ShareLimits.maxURLBytes else {
            return "URL must be 1…\(ShareLimits.maxURLBytes) bytes, not \(url.utf8.count)"
        }
        guard !url.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.value < 0x20 || (0x7F..<0xA0).contains($0.value) }) else {
            return "URL \"\(String(url.prefix(64)).escapedForTerminal())\" contains whitespace or a control character"
        }
        guard let colon = url.firstIndex(of: ":") else { return "URL \"\(String(url.prefix(64)).escapedForTerminal())\" has no scheme (it must be absolute, e.g. https://…)" }
        let scheme = url[..<colon]
        guard let first = scheme.unicodeScalars.first, first.isASCII, first.properties.isAlphabetic,
              scheme.unicodeScalars.allSatisfy({ $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "+.-".unicodeScalars.contains($0)) }) else {
            return "URL \"\(String(url.prefix(64)).escapedForTerminal())\" has no valid scheme (letters, digits, '+', '.', '-', starting with a letter)"
        }
        let rest = url[url.index(after: colon)...]
        guard !rest.isEmpty else { return "URL \"\(String(url.prefix(64)).escapedForTerminal())\" is only a scheme" }
        if ["http", "https", "ftp"].contains(scheme.lowercased()) {
            guard rest.hasPrefix("//"), let host = rest.dropFirst(2).split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false).first,
                  !host.isEmpty else {
                return "URL \"\(String(url.prefix(64)).escapedForTerminal())\" has no host (\(scheme): URLs are \(scheme)://host/…)"
            }
        }
        return nil
    }
}
