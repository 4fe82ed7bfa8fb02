import Logging

/// A share as its activity sees it (`NSExtensionContext`): the items the host shared, and how
/// the activity reports what it is doing and how it ends.
///
/// A view controller reads it as ``ViewController/extensionContext`` (already in
/// ``ViewController/loadView()``: the host sends the items before it shows the view), and
/// finishes the share exactly once, with ``complete(returning:)`` or ``cancel(error:)``.
///
/// ```swift
/// override func viewDidLoad() {
///     let text = extensionContext?.inputItems.first?.text ?? ""
///     extensionContext?.update(title: "Notes", subtitle: text)
/// }
/// func save() {
///     extensionContext?.complete(returning: [try! .text(noteText)])
/// }
/// ```
///
/// Items are read as values (`text`, `url`, `data(limit:)`, `string(limit:)`, `bitmap(limit:)`):
/// an author never touches a descriptor. Updates go to the host in order, and the final answer
/// after them; anything after the final answer is ignored (and logged).
@MainActor
public final class ExtensionContext {
    /// What the host shared (1…16 items).
    public let inputItems: [ShareItem]
    /// The title the activity shows (the manifest's until ``update(title:subtitle:)``).
    public private(set) var title: String
    /// The second line, if any.
    public private(set) var subtitle: String?
    /// How far the work is, 0…1; `nil` while unknown (an indeterminate progress bar). Setting
    /// it tells the host (values outside 0…1 are clamped).
    public var progress: Double? {
        get { current.progress }
        set { setProgress(newValue) }
    }
    /// What the activity is doing; setting it tells the host.
    public var state: ActivityState {
        get { current.state }
        set { setProgress(current.progress, state: newValue) }
    }
    /// Whether the share has been answered (completed or cancelled).
    public private(set) var isFinished = false
    /// Whether the host asked to cancel (the user dismissed the sheet).
    public private(set) var isCancelRequested = false

    private var current: ActivityUpdate
    /// Weak: the endpoint holds this context.
    private weak var endpoint: ShareEndpoint?
    private let logger: Logger

    init(items: [ShareItem], title: String, endpoint: ShareEndpoint, logger: Logger) {
        inputItems = items
        self.title = title
        self.endpoint = endpoint
        self.logger = logger
        current = ActivityUpdate(title: title, progress: nil, state: .preparing)
    }

    /// Sets the title bar the host shows (the title 1…200 bytes and the subtitle at most 400;
    /// longer ones are cut on a character boundary, an empty title keeps the old one).
    public func update(title: String, subtitle: String? = nil) {
        setTitle(title, subtitle: subtitle)
        send()
    }

    /// Sets the title bar, the progress and the state at once: one update, so a host never
    /// shows the new progress with the old subtitle.
    public func update(title: String, subtitle: String?, progress: Double?, state: ActivityState) {
        setTitle(title, subtitle: subtitle)
        setProgress(progress, state: state)
    }

    /// The title bar of the next update, within its bounds.
    private func setTitle(_ title: String, subtitle: String?) {
        if !title.isEmpty { current.title = title.truncated(toUTF8Bytes: ShareLimits.maxTitleBytes, marker: "…") }
        current.subtitle = subtitle.flatMap { $0.isEmpty ? nil : $0.truncated(toUTF8Bytes: ShareLimits.maxSubtitleBytes, marker: "…") }
        self.title = current.title
        self.subtitle = current.subtitle
    }

    /// Sets the progress (`nil`: indeterminate; else clamped to 0…1) and, if given, the state.
    public func setProgress(_ progress: Double?, state: ActivityState? = nil) {
        current.progress = progress.flatMap { $0.isNaN ? nil : min(max($0, 0), 1) }
        if let state { current.state = state }
        send()
    }

    /// Finishes the share successfully, returning `items` to the host (at most 16; e.g. the
    /// edited image, the saved note). The state becomes *done*.
    public func complete(returning items: [ShareItem] = []) {
        guard begin("complete(returning:)") else { return }
        guard items.count <= ShareLimits.maxItems else {
            return finish(.failed, items: [], message: "the activity returned \(items.count) items, more than \(ShareLimits.maxItems)")
        }
        if current.state != .done {
            current.state = .done
            current.progress = 1
            send(force: true)
        }
        finish(.completed, items: items, message: "")
    }

    /// Finishes the share without a result: cancelled when `error` is `nil` (the user backed
    /// out), failed with the error's description otherwise (`cancelRequest(withError:)`).
    public func cancel(error: (any Error)? = nil) {
        guard begin("cancel(error:)") else { return }
        if let error {
            let message = String(describing: error)
            finish(.failed, items: [], message: message.isEmpty ? "failed" : message.truncated(toUTF8Bytes: ShareLimits.maxMessageBytes, marker: "…"))
        } else {
            finish(.cancelled, items: [], message: "")
        }
    }

    /// The host asked to cancel: tell the controller (its default cancels).
    func cancelRequested(reason: String, controller: ViewController?) {
        guard !isFinished, !isCancelRequested else { return }
        isCancelRequested = true
        if let controller { controller.requestCancelled(reason: reason) } else { cancel() }
    }

    private func begin(_ call: String) -> Bool {
        guard !isFinished else {
            logger.warning("\(call) after the share was answered: ignored (a share has one answer)")
            return false
        }
        isFinished = true
        return true
    }

    private func finish(_ result: WireShareResult, items: [ShareItem], message: String) {
        endpoint?.finish(result, items: items, message: message)
    }

    private func send(force: Bool = false) {
        guard !isFinished || force else {
            logger.warning("activity update after the share was answered: ignored")
            return
        }
        endpoint?.send(.update(current))
    }
}

/// One connection's share, on the service side: it takes the host's share family, checks its
/// rules (one request, cancel only after it), keeps the idle clock busy while the share runs,
/// and sends the context's updates and answer in order.
final class ShareEndpoint: Sendable {
    private let idleClock: IdleClock?
    private let title: String
    private let logger: Logger
    private let state = Mutex<State>(State())

    private struct State {
        var requested = false
        var finished = false
        weak var connection: Connection?
    }

    init(idleClock: IdleClock?, title: String, logger: Logger) {
        self.idleClock = idleClock
        self.title = title
        self.logger = logger
    }

    /// The context, once the request arrived.
    @MainActor private(set) var context: ExtensionContext?

    /// A share message from the host. `controller` gives the view controller, once there is one;
    /// `perform` runs main-actor work in its turn after what the host sent before (the
    /// surface's queue to the main actor).
    nonisolated(nonsending) func receive(_ message: ShareMessage, attachments: [Attachment], context: ConnectionContext,
                                         controller: @escaping @MainActor @Sendable () -> ViewController?,
                                         perform: @Sendable (@escaping @MainActor @Sendable () -> Void) async -> Void) async {
        switch message {
        case .request(let wire):
            let first = state.withLock { state -> Bool in
                defer { state.requested = true }
                state.connection = context.connection
                return !state.requested
            }
            guard first else { return await context.connection.close(reason: "share: a second share_request on one connection") }
            let items: [ShareItem]
            do { items = try ShareItem.received(wire, attachments: attachments) } catch {
                return await context.connection.close(reason: "share: \(error.reason)")
            }
            idleClock?.begin()
            await perform {
                let shareContext = ExtensionContext(items: items, title: self.title, endpoint: self, logger: self.logger)
                self.context = shareContext
                self.send(.update(ActivityUpdate(title: self.title, state: .preparing)))
                controller()?.beginRequest(with: shareContext)
            }
        case .cancel(let reason):
            let (requested, finished) = state.withLock { ($0.requested, $0.finished) }
            guard requested else { return await context.connection.close(reason: "share: share_cancel before share_request") }
            guard !finished else { return }  // it crossed our answer
            await perform {
                self.context?.cancelRequested(reason: reason, controller: controller())
            }
        case .update, .complete:
            // The connection refuses the service's own messages from the host before they get here.
            break
        }
    }

    /// The last send, which the next one waits for (so they go out in order).
    @MainActor private var lastSend: Task<Void, Never>?

    /// Sends `message` after everything sent before it. On the main actor, where the context
    /// lives: the send starts there at once (an immediate task), so an update or an answer
    /// costs no hop to another thread unless the socket is full or an earlier send waits.
    @MainActor func send(_ message: ShareMessage, attachments: [Attachment] = []) {
        let previous = lastSend
        let connection = state.withLock { $0.connection }
        lastSend = Task.immediate { [logger] in
            await previous?.value
            guard let connection else { return }
            do { try await connection.send(message, attachments: attachments) } catch {
                logger.warning("cannot send \(message.name) to the host: \(error)")
            }
        }
    }

    /// Sends the one answer, and lets the idle clock count again.
    @MainActor func finish(_ result: WireShareResult, items: [ShareItem], message: String) {
        guard state.withLock({ state -> Bool in
            defer { state.finished = true }
            return !state.finished
        }) else { return }
        let wire: (items: [WireShareItem], attachments: [Attachment])
        do { wire = try ShareItem.wire(items) } catch {
            return finish(.failed, message: "the activity's items cannot be sent: \(error.reason)")
        }
        send(.complete(result, items: wire.items, message: message), attachments: wire.attachments)
        idleClock?.end()
    }

    @MainActor private func finish(_ result: WireShareResult, message: String) {
        send(.complete(result, items: [], message: message))
        idleClock?.end()
    }

    /// The connection ended: a share still running no longer holds the idle clock.
    func connectionEnded() {
        let running = state.withLock { state -> Bool in
            defer { state.finished = true }
            return state.requested && !state.finished
        }
        if running { idleClock?.end() }
    }
}

extension ShareItem {
    /// The item decoded as an image (a PNG file item), for ``ImageView`` or drawing.
    ///
    /// - Parameter limit: The most bytes of PNG the caller takes.
    /// - Throws: `RemoteError` `invalidArgument` when it is larger than `limit`, or not a PNG
    ///   Cairo can read.
    public func bitmap(limit: Int) throws(RemoteError) -> Bitmap {
        try Bitmap(pngData: try data(limit: limit))
    }
}
