/// What a service author subclasses to show a UI (`UIViewController`, as a remote view
/// controller's service side).
///
/// Build the view tree in ``loadView()`` (or keep the plain root ``View`` and add to it in
/// ``viewDidLoad()``); react to input by overriding ``Responder`` methods here or in views,
/// and to lifecycle in the callbacks. Every host connection that presents the service gets its
/// own controller, made by the factory given to ``ServiceMain``.
///
/// ```swift
/// final class CounterController: ViewController {
///     let label = Label(text: "0")
///     override func viewDidLoad() {
///         let button = Button(title: "Add") { [unowned self] _ in label.text = String(Int(label.text)! + 1) }
///         view.addSubview(StackView(axis: .vertical, arrangedSubviews: [label, button]))
///     }
/// }
/// ```
@MainActor
open class ViewController: Responder {
    private var loadedView: View?
    weak var attachedRoot: ServiceRoot?

    public override init() {}

    /// Which way the view's controls read: left to right (the default), or right to left, as
    /// the interface's language does (Arabic, Hebrew). Tab follows it along a row, and
    /// horizontal ``StackView``s lay out from the right. Text is not affected: each paragraph
    /// takes its direction from its own letters (``TextAlignment/natural``).
    public var layoutDirection: LayoutDirection = .leftToRight {
        didSet {
            guard layoutDirection != oldValue, isViewLoaded else { return }
            view.setNeedsLayoutThroughout()
            attachedRoot?.invalidateAll()
        }
    }

    /// The button Return presses when the focused control does not take the key (a dialog's
    /// default button, `NSWindow.defaultButtonCell`): a text field without an `onReturn`, a
    /// view with no focus. Pressed only while enabled and on screen. (Named so, not
    /// `defaultButton`, to leave that name to subclasses, which often have one.)
    public weak var defaultActionButton: Button?

    /// The button Escape presses (a dialog's Cancel): whatever has the focus, unless a responder
    /// before the controller takes the key. Pressed only while enabled and on screen.
    public weak var cancelActionButton: Button?

    /// The root view, made by ``loadView()`` on first use; it always fills the host's size.
    public var view: View {
        get {
            if let loadedView { return loadedView }
            loadView()
            let view = loadedView ?? View()
            loadedView = view
            view.owningController = self
            viewDidLoad()
            return view
        }
        set {
            loadedView?.owningController = nil
            loadedView = newValue
            newValue.owningController = self
        }
    }

    /// Whether ``view`` has been made.
    public var isViewLoaded: Bool { loadedView != nil }

    /// Makes the root view: assign ``view`` here. The default makes a plain ``View``.
    open func loadView() { view = View() }

    /// The root view was made.
    open func viewDidLoad() {}

    /// The first frame reached the host.
    open func viewDidAppear() {}

    /// The host gave the view a new size (the root view has it already; layout follows).
    open func viewDidResize(to size: Size) {}

    /// The host's appearance changed (``traits`` is the new one).
    open func traitsDidChange(from previous: Traits) {}

    /// The view gained or lost the host's keyboard focus.
    open func focusChanged(_ focused: Bool) {}

    /// The host stopped showing the view (its connection closed).
    open func viewDidDisappear() {}

    /// The view's state, as bytes only this controller reads, for a process that shows the view
    /// again after this one ended (a crash, a `kill -9`, an idle exit): what the user typed,
    /// where the caret is, what has the focus. UIKit's `encodeRestorableState(with:)`, across
    /// processes. Return `nil` (the default) when there is nothing to keep.
    ///
    /// Called on the main actor after frames the host has shown, at most every 250 ms, and
    /// before the service exits idle; the host is sent the bytes when they differ from the last
    /// sent, and only if it announced that it keeps state. Keep it quick, and within the
    /// manifest's `limits.restorableStateKiB` (64 KiB by default): a larger state is logged and
    /// not sent. ``StateArchive`` writes one without Foundation.
    open func encodeRestorableState() -> [UInt8]? { nil }

    /// Brings the view back to a state ``encodeRestorableState()`` made in an earlier process.
    /// Called at most once, after ``viewDidLoad()`` (and after ``beginRequest(with:)`` for a
    /// share) and before the first layout and frame. The bytes may come from an older version
    /// of the service: check them, and ignore what you cannot read.
    open func restoreState(from state: [UInt8]) {}

    /// The host's appearance.
    public var traits: Traits { attachedRoot?.traits ?? .standard }

    /// The connection to the host showing this controller: send it your own messages.
    public var connection: Connection? { attachedRoot?.connection }

    /// A one-way message from the host on this controller's connection. Return whether it was
    /// for the controller; the others go to the service's message handler.
    open func received(_ message: ServiceMessage) -> Bool { false }

    /// A request from the host on this controller's connection. Return `nil` to leave it to the
    /// service's request handler.
    open func handleRequest(_ request: ServiceMessage) async throws -> ServiceMessage? { nil }

    /// The share this controller's view was presented for, if the host started one (an
    /// `NSExtensionContext`): its items, and how to report progress and finish. Available from
    /// ``loadView()`` on, as the host sends the items before it shows the view.
    public var extensionContext: ExtensionContext? { attachedRoot?.share?.context }

    /// The host started a share with this controller's service: `context` has the items. Called
    /// once, before the view loads when the items came first (as hosts send them). The default
    /// does nothing; read ``extensionContext`` where convenient.
    open func beginRequest(with context: ExtensionContext) {}

    /// The host asked to cancel the share (the user dismissed it): finish it soon, with
    /// ``ExtensionContext/cancel(error:)`` or the result you already have; the host stops a
    /// service that does not answer within its grace period. The default cancels at once.
    open func requestCancelled(reason: String) {
        extensionContext?.cancel()
    }

    /// The size the view would like, in points: the host is told, and decides.
    public var preferredContentSize: Size? {
        didSet { if let preferredContentSize, preferredContentSize != oldValue { attachedRoot?.sendPreferredSize(preferredContentSize) } }
    }

    /// The keyboard's part of the controller: Tab and Shift-Tab move the focus between the
    /// view's controls (``Responder/canBecomeFirstResponder``, in reading order, and out to the
    /// host's controls past the last one when the host takes the focus); Return presses the
    /// ``defaultActionButton``; Escape the ``cancelActionButton``. Anything else goes on up the chain.
    /// Override to take keys first; call `super` for the rest.
    open override func keyDown(_ event: KeyEvent) {
        let plain = event.isPlain
        switch event.keyCode {
        case KeyCode.tab where plain:
            attachedRoot?.moveFocus(event.modifiers.contains(.shift) ? .backward : .forward)
        case KeyCode.enter where plain && !event.isRepeat && (defaultActionButton?.isPressable ?? false):
            defaultActionButton?.sendAction()
        case KeyCode.escape where plain && !event.isRepeat && (cancelActionButton?.isPressable ?? false):
            cancelActionButton?.sendAction()
        default:
            super.keyDown(event)
        }
    }

    open override var next: Responder? { attachedRoot }

    override var serviceRoot: ServiceRoot? { attachedRoot }
}

/// Which way a view's controls read (``ViewController/layoutDirection``).
public enum LayoutDirection: Sendable, Hashable {
    case leftToRight, rightToLeft
}
