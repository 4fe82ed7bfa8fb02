// Post (com.example.demo-share.post): a compose sheet for 1…4 images and an optional text.
// Post scales each image to at most 1024 px on its longer side and writes them, with
// post.json, into a new post-<timestamp> folder of the service's data folder, reporting its
// progress after each image; it returns post.json.
import RemoteService

final class PostController: ActivityController {
    nonisolated static let identifier = "com.example.demo-share.post"
    nonisolated static let title = "Post"
    /// A thumbnail's side, in points.
    static let thumbnailSide = 80.0

    let field = TextField(placeholder: "Say something about it…")
    override var restorableField: TextField? { field }
    let progress = ProgressView()
    let cancelButton = Button(title: "Cancel")
    let postButton = Button(title: "Post")
    /// The shared images (file items), in order.
    private var images: [ShareItem] = []
    /// The running post, cancelled when the user or the host cancels.
    private var posting: Task<Void, Never>?

    override func loadView() {
        let items = self.items ?? []
        images = items.filter { $0.fileName != nil && $0.contentType.hasPrefix("image/") }
        field.text = items.first { $0.contentType.hasPrefix("text/") && $0.url == nil }.flatMap { try? $0.string(limit: 1 << 20) } ?? ""
        field.selection = field.text.count..<field.text.count
        var problems: [String] = []
        let previews = images.map { item -> View in
            let preview = ImageView()
            preview.fixedSize = Size(width: Self.thumbnailSide, height: Self.thumbnailSide)
            preview.backgroundColor = Color(argb: 0x1400_0000)
            preview.cornerRadius = 6
            do throws(RemoteError) { preview.image = try item.bitmap(limit: 32 << 20) } catch { problems.append("\(item.fileName ?? "an image"): \(error.reason)") }
            return preview
        }
        let thumbnails = StackView(axis: .horizontal, spacing: 8, arrangedSubviews: previews)
        status.text = problems.isEmpty ? "\(images.count) image\(images.count == 1 ? "" : "s") to post." : "Cannot read " + problems.joined(separator: "; ")
        let content = StackView(axis: .vertical, spacing: 12, arrangedSubviews: [thumbnails, field, progress, status])
        view = makeSheet(title: "New Post", content: content, buttons: [cancelButton, postButton])
        postButton.isEnabled = problems.isEmpty && !images.isEmpty
    }

    override func viewDidLoad() {
        super.viewDidLoad()
        cancelButton.tintColor = Color(argb: 0xFF8E_8E93)
        cancelButton.action = { [unowned self] _ in cancel() }
        postButton.action = { [unowned self] _ in post() }
        field.accessibilityLabel = "Caption"
        if isOpen { extensionContext?.update(title: Self.title, subtitle: "\(images.count) image\(images.count == 1 ? "" : "s")") }
    }

    override func viewDidAppear() {
        super.viewDidAppear()
        field.becomeFirstResponder()
    }

    private func post() {
        guard let context = extensionContext, isOpen, posting == nil, postButton.isEnabled else { return }
        guard let dataFolder = ServiceMain.dataDirectory else {
            return fail("Post has no data folder to write to: its manifest needs \"sandbox\": {\"dataFolder\": true}")
        }
        postButton.isEnabled = false
        field.resignFirstResponder()
        let (text, images) = (field.text, self.images)
        context.update(title: "Posting", subtitle: "\(images.count) image\(images.count == 1 ? "" : "s")", progress: 0, state: .working)
        status.text = "Posting…"
        posting = Task {
            do {
                let post = try await PostWriter.write(text: text, images: images, into: dataFolder) { done in
                    await self.imagePosted(done, of: images.count)
                }
                guard isOpen else { return }
                context.complete(returning: [try .file(named: PostWriter.postFileName, contentType: "application/json", contents: post.json)])
                progress.setProgress(1, animated: true)
                status.text = "Posted \(images.count) image\(images.count == 1 ? "" : "s") to \(post.folderName)."
                cancelButton.isEnabled = false
            } catch is CancellationError {
                posting = nil
                cancel()
            } catch let error as RemoteError {
                fail("Cannot post: \(error.reason)")
            } catch {
                fail("Cannot post: \(error)")
            }
        }
    }

    /// `done` of `count` images are scaled and written.
    private func imagePosted(_ done: Int, of count: Int) {
        guard isOpen, let context = extensionContext else { return }
        context.update(title: "Posting", subtitle: "image \(done) of \(count)", progress: Double(done) / Double(count), state: .working)
        progress.setProgress(Double(done) / Double(count), animated: true)
    }

    override func cancel() {
        if let posting {
            // The post ends at its next image, and cancels the share then.
            posting.cancel()
            status.text = "Cancelling…"
            return
        }
        super.cancel()
        postButton.isEnabled = false
        cancelButton.isEnabled = false
    }

    override func requestCancelled(reason: String) {
        cancel()
    }
}
