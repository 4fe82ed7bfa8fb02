// Share messages (fields 300–303): round trips, every bound checked on the way in and out, the
// file items' memfds checked (sealed, of their declared size), and the direction rule.
@testable import RemoteCore
import RemoteTestSupport
import Glibc
import Testing

/// Field numbers of the share bodies (remoteview.proto).
private enum ShareField {
    static let request: UInt32 = 300, cancel: UInt32 = 301, update: UInt32 = 302, complete: UInt32 = 303
}

/// A ShareItem submessage: kind, content_type, text, name, size.
private func item(kind: UInt64 = 1, type: String = "text/plain", text: String? = "hi", name: String? = nil, size: UInt64 = 0) -> ProtoWriter {
    var body = ProtoWriter()
    if kind != 0 { body = body.uint(1, kind) }
    body = body.string(2, type)
    if let text { body = body.string(3, text) }
    if let name { body = body.string(4, name) }
    if size != 0 { body = body.uint(5, size) }
    return body
}

private func request(_ items: [ProtoWriter]) -> ProtoWriter {
    items.reduce(ProtoWriter()) { $0.message(1, $1) }
}

@Suite("Share messages on the wire")
struct ShareCodecTests {
    static let samples: [(String, ShareMessage)] = [
        ("one text", .request(items: [WireShareItem(kind: .text, contentType: "text/plain", text: "hello")])),
        ("text, URL and a file", .request(items: [
            WireShareItem(kind: .text, contentType: "text/html", text: "<b>hi</b>"),
            WireShareItem(kind: .url, contentType: "text/uri-list", text: "https://example.com/x?y=1#z"),
            WireShareItem(kind: .file, contentType: "image/png", name: "photo.png", size: 12_345),
        ])),
        ("sixteen items", .request(items: Array(repeating: WireShareItem(kind: .url, contentType: "text/uri-list", text: "mailto:a@example.com"), count: 16))),
        ("cancel", .cancel(reason: "dismissed")),
        ("cancel without a reason", .cancel(reason: "")),
        ("update", .update(ActivityUpdate(title: "Posting", subtitle: "image 2 of 4", progress: 0.5, state: .working))),
        ("indeterminate update", .update(ActivityUpdate(title: "T", progress: nil, state: .preparing))),
        ("update at 0", .update(ActivityUpdate(title: "T", progress: 0, state: .ready))),
        ("done", .update(ActivityUpdate(title: "T", progress: 1, state: .done))),
        ("completed with nothing", .complete(.completed, items: [], message: "")),
        ("completed with a file", .complete(.completed, items: [WireShareItem(kind: .file, contentType: "application/json", name: "post.json", size: 0)], message: "")),
        ("cancelled", .complete(.cancelled, items: [], message: "")),
        ("cancelled, saying why", .complete(.cancelled, items: [], message: "the user backed out")),
        ("failed", .complete(.failed, items: [], message: "the disk is full")),
    ]

    @Test("every share message round-trips, with one fd per file item", arguments: 0..<samples.count)
    func roundTrips(_ index: Int) throws {
        let message = Self.samples[index].1
        let attachments = try makeAttachments(message.fileCount)
        let decoded = try roundTrip(Envelope(id: 3, body: .share(message), attachments: attachments))
        guard case .share(let back) = decoded.body else { Issue.record("decoded to \(decoded.body.name)"); return }
        #expect(decoded.attachments.count == message.fileCount)
        switch (back, message) {
        case (.request(let a), .request(let b)): #expect(a == b)
        case (.cancel(let a), .cancel(let b)): #expect(a == b)
        case (.update(let a), .update(let b)): #expect(a == b)
        case (.complete(let r1, let i1, let m1), .complete(let r2, let i2, let m2)): #expect(r1 == r2 && i1 == i2 && m1 == m2)
        default: Issue.record("\(back.name) != \(message.name)")
        }
    }

    /// (what, body field, body, fds, words its rejection must contain)
    static let hostile: [(String, UInt32, ProtoWriter, Int, [String])] = [
        ("no items", ShareField.request, ProtoWriter(), 0, ["share_request carries 0 items", "1…16"]),
        ("17 items", ShareField.request, request(Array(repeating: item(), count: 17)), 0, ["17 items"]),
        ("no kind", ShareField.request, request([item(kind: 0)]), 0, ["item 0 kind 0"]),
        ("unknown kind", ShareField.request, request([item(kind: 9)]), 0, ["kind 9"]),
        ("not a MIME type", ShareField.request, request([item(type: "public.plain-text")]), 0, ["\"public.plain-text\" is not a MIME type"]),
        ("upper-case type", ShareField.request, request([item(type: "Text/Plain")]), 0, ["not in lower case"]),
        ("empty text", ShareField.request, request([item(text: nil)]), 0, ["text item must be 1…32768 bytes, not 0"]),
        ("text too long", ShareField.request, request([item(text: String(repeating: "a", count: 32_769))]), 0, ["text is longer than 32768 bytes"]),
        ("inline text of an image type", ShareField.request, request([item(type: "image/png")]), 0, ["inline text must be text/…"]),
        ("a URL of the wrong type", ShareField.request, request([item(kind: 2, type: "text/plain", text: "https://x.org")]), 0, ["URLs are text/uri-list"]),
        ("a relative URL", ShareField.request, request([item(kind: 2, type: "text/uri-list", text: "/etc/passwd")]), 0, ["has no scheme"]),
        ("a URL with a space", ShareField.request, request([item(kind: 2, type: "text/uri-list", text: "https://x.org/a b")]), 0, ["whitespace"]),
        ("an http URL without a host", ShareField.request, request([item(kind: 2, type: "text/uri-list", text: "https:/x")]), 0, ["has no host"]),
        ("a file without a name", ShareField.request, request([item(kind: 3, type: "image/png", text: nil, size: 4)]), 1, ["file item name", "1…255"]),
        ("a file named with a path", ShareField.request, request([item(kind: 3, type: "image/png", text: nil, name: "../../etc/passwd", size: 4)]), 1, ["plain file name"]),
        ("a file named ..", ShareField.request, request([item(kind: 3, type: "image/png", text: nil, name: "..", size: 4)]), 1, ["plain file name"]),
        ("a file over 256 MiB", ShareField.request, request([item(kind: 3, type: "image/png", text: nil, name: "a.png", size: 268_435_457)]), 1, ["size 268435457"]),
        ("a file with text", ShareField.request, request([item(kind: 3, type: "image/png", text: "x", name: "a.png", size: 1)]), 1, ["file item \"a.png\" with inline text"]),
        ("a text with a name", ShareField.request, request([item(name: "a.txt")]), 0, ["text item with a file name"]),
        ("a file without its fd", ShareField.request, request([item(kind: 3, type: "image/png", text: nil, name: "a.png", size: 1)]), 0, ["share_request may carry 1...1 fd(s), got 0"]),
        ("an fd without a file", ShareField.request, request([item()]), 1, ["share_request may carry 0...0 fd(s), got 1"]),
        ("update without a title", ShareField.update, ProtoWriter().uint(5, 1), 0, ["title must be 1…200 bytes, not 0"]),
        ("update without a state", ShareField.update, ProtoWriter().string(1, "T"), 0, ["state 0"]),
        ("update with progress 2", ShareField.update, ProtoWriter().string(1, "T").float(4, 2).uint(5, 3), 0, ["progress 2.0 is not in 0…1"]),
        ("update with NaN progress", ShareField.update, ProtoWriter().string(1, "T").float(4, .nan).uint(5, 3), 0, ["progress nan"]),
        ("indeterminate with progress", ShareField.update, ProtoWriter().string(1, "T").uint(3, 1).float(4, 0.5).uint(5, 3), 0, ["indeterminate but has progress 0.5"]),
        ("complete without a result", ShareField.complete, ProtoWriter(), 0, ["result 0"]),
        ("failed without a message", ShareField.complete, ProtoWriter().uint(1, 3), 0, ["FAILED without a message"]),
        ("cancelled with items", ShareField.complete, ProtoWriter().uint(1, 2).message(2, item()), 0, ["CANCELLED with 1 items"]),
        ("completed with a message", ShareField.complete, ProtoWriter().uint(1, 1).string(3, "x"), 0, ["COMPLETED with a message"]),
    ]

    @Test("impossible share values are protocol violations that name them", arguments: 0..<hostile.count)
    func rejects(_ index: Int) throws {
        let (_, field, body, fds, words) = Self.hostile[index]
        expectViolation(envelopePacket(fdCount: fds == 0 ? nil : UInt32(fds), field, body), attachments: try makeAttachments(fds), mentioning: words)
    }

    @Test("the same impossible values are refused when sending")
    func encodeRejects() {
        expectEncodeRejected(Envelope(id: 1, body: .share(.request(items: []))), mentioning: "carries 0 items")
        expectEncodeRejected(Envelope(id: 1, body: .share(.update(ActivityUpdate(title: "", state: .ready)))), mentioning: "title must be")
        expectEncodeRejected(Envelope(id: 1, body: .share(.complete(.failed, items: [], message: ""))), mentioning: "FAILED without a message")
    }
}

@Suite("Share items")
struct ShareItemTests {
    @Test("items check their bounds when made, and read back as values")
    func making() throws {
        let text = try ShareItem.text("héllo")
        let textBytes = try text.data(limit: 1 << 20)
        #expect(text.contentType == "text/plain" && text.size == 6 && text.text == "héllo" && textBytes == Array("héllo".utf8))
        #expect(try ShareItem.text("x", contentType: "Text/Markdown").contentType == "text/markdown", "types are lower-cased")
        #expect(try ShareItem.url("mailto:someone@example.com").url == "mailto:someone@example.com")
        let file = try ShareItem.file(named: "a.bin", contentType: "application/octet-stream", contents: [9, 8, 7])
        let fileBytes = try file.data(limit: 1 << 20)
        #expect(file.fileName == "a.bin" && file.size == 3 && fileBytes == [9, 8, 7])
        // Every read states the most it takes; past it, an error names both sizes.
        let tooLarge = #expect(throws: RemoteError.self) { try file.data(limit: 2) }
        #expect(tooLarge?.reason == "file item \"a.bin\" holds 3 bytes, more than the 2 this reader takes", "\(String(describing: tooLarge))")
        #expect(throws: RemoteError.self) { try text.data(limit: 5) }
        #expect(throws: RemoteError.self) { try ShareItem.text("") }
        #expect(throws: RemoteError.self) { try ShareItem.text("x", contentType: "image/png") }
        for bad in ["example.com", "https://", "http:// x", "javascript", "ht tp://x"] {
            let error = #expect(throws: RemoteError.self, "\(bad)") { try ShareItem.url(bad) }
            #expect(error?.code == .invalidArgument)
        }
        #expect(throws: RemoteError.self) { try ShareItem.file(named: "a/b", contentType: "image/png", contents: [1]) }
        #expect(throws: RemoteError.self) { try ShareItem.file(named: "a.png", contentType: "image", contents: [1]) }
    }

    @Test("a received file item must be a memfd sealed against change, of its declared size")
    func receivedFiles() throws {
        let description = WireShareItem(kind: .file, contentType: "image/png", name: "a.png", size: 3)
        // Sealed, of the right size: accepted, and readable.
        let sealed = try MemoryFile.sealed(name: "ok", contents: [1, 2, 3])
        let items = try ShareItem.received([description], attachments: [Attachment(sealed.takeDescriptor())])
        #expect(try items.first?.data(limit: 1 << 20) == [1, 2, 3])
        // Writable: refused.
        let open = try MemoryFile(name: "writable")
        try open.write([1, 2, 3])
        let writable = Attachment(open.takeDescriptor())
        var error = #expect(throws: RemoteError.self) { try ShareItem.received([description], attachments: [writable]) }
        #expect(error?.reason.contains("not sealed against shrinking, growing and writing") == true, "\(String(describing: error))")
        // Another size: refused.
        let short = try MemoryFile.sealed(name: "short", contents: [1, 2])
        let shortAttachment = Attachment(short.takeDescriptor())
        error = #expect(throws: RemoteError.self) { try ShareItem.received([description], attachments: [shortAttachment]) }
        #expect(error?.reason.contains("declares 3 bytes but its memfd holds 2") == true, "\(String(describing: error))")
        // Not a memfd at all (a pipe).
        let pipe = try Syscall.pipe()
        let notMemfd = Attachment(try pipe.first.duplicate())
        error = #expect(throws: RemoteError.self) { try ShareItem.received([description], attachments: [notMemfd]) }
        #expect(error?.reason.contains("is not a sealed memfd") == true, "\(String(describing: error))")
    }
}
