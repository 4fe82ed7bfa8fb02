// The demo's compose service: a share extension's screen built with the service toolkit. The
// host shares an image (a PNG in a sealed memfd, message "item.image"); the user adds a
// comment and posts it; media keys control an audio preview.
import RemoteService

final class ComposeController: ViewController {
    let preview = ImageView()
    let heading = Label(text: "Share to Notes", font: .headline)
    let detail = Label(text: "Waiting for the host's item…", font: .caption)
    let comment = TextField(placeholder: "Add a comment…")
    let audio = Label(text: "♪ Audio preview: paused", font: .caption, numberOfLines: 2)
    let progress = ProgressView()
    let cancel = Button(title: "Cancel")
    let post = Button(title: "Post")
    let status = Label(text: "", font: .caption, numberOfLines: 2)
    var playing = false
    var track = 1

    override func loadView() {
        preview.fixedSize = Size(width: 96, height: 96)
        preview.backgroundColor = Color(argb: 0x1400_0000)
        preview.cornerRadius = 8
        let titles = StackView(axis: .vertical, spacing: 4, arrangedSubviews: [heading, detail, audio])
        let header = StackView(axis: .horizontal, spacing: 12, arrangedSubviews: [preview, titles])
        let buttons = StackView(axis: .horizontal, spacing: 12, distribution: .fillEqually, arrangedSubviews: [cancel, post])
        buttons.fixedSize = Size(width: 0, height: 40)  // only the height matters in a column
        view = StackView(axis: .vertical, spacing: 12, insets: EdgeInsets(all: 16),
                         arrangedSubviews: [header, comment, progress, buttons, status])
    }

    override func viewDidLoad() {
        view.backgroundColor = traits.backgroundColor
        cancel.tintColor = Color(argb: 0xFF8E_8E93)
        post.action = { [unowned self] _ in self.postComment() }
        cancel.action = { [unowned self] _ in
            comment.text = ""
            progress.setProgress(0, animated: true)
            status.text = "Cancelled."
            Task { try? await self.connection?.send(ServiceMessage(type: "compose.cancelled")) }
        }
        comment.onReturn = { [unowned self] _ in self.postComment() }
    }

    override func traitsDidChange(from previous: Traits) {
        view.backgroundColor = traits.backgroundColor
    }

    private func postComment() {
        let text = comment.text
        progress.setProgress(1, animated: true)
        status.text = text.isEmpty ? "Posted the image." : "Posted: “\(text)”"
        Task { try? await self.connection?.send(ServiceMessage(type: "compose.posted", text: text)) }
    }

    /// Media keys: the audio preview's transport.
    override func remoteControlReceived(_ command: RemoteCommand) {
        switch command {
        case .play: playing = true
        case .pause: playing = false
        case .togglePlayPause: playing.toggle()
        case .nextTrack: track += 1
        case .previousTrack: track = max(1, track - 1)
        case .seekForward, .seekBackward: break
        }
        audio.text = "♪ Audio preview, track \(track): \(playing ? "playing" : "paused")"
    }

    override func received(_ message: ServiceMessage) -> Bool {
        guard message.type == "item.image" else { return false }
        guard let fd = message.attachments.first?.take() else {
            detail.text = "The item came without its file."
            return true
        }
        do {
            let file = MemoryFile(adopting: fd)
            preview.image = try Bitmap(pngData: try file.read(count: try file.size))
            detail.text = "An image, \(preview.image!.width)×\(preview.image!.height) pixels"
        } catch {
            detail.text = "The item could not be read: \(error)"
        }
        return true
    }
}
