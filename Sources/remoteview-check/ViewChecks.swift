import RemoteCore
import RemoteHost

/// The host's side of the view under test: every surface message goes through the host's own
/// compositor, which checks each rule a host checks (sizes, seals, one frame in flight, damage,
/// frame numbers), so the checker and the Swift host cannot disagree.
final class SurfaceUnderTest: Sendable {
    let compositor = SurfaceCompositor(checksSize: true)
    let peer: Peer
    let report: Report
    private let commits = Mutex(0)
    /// The most a restorable state may hold when this client announced `restorable-state`
    /// (the manifest's limit); `nil`: it did not, and a state is a violation.
    let stateLimit: Int?
    /// Whether the service announced `restorable-state`.
    let serviceKeepsState: Bool
    /// The sizes of the restorable states it sent, in order.
    private let states = Mutex<[Int]>([])
    /// Whether this client announced `accessibility`: only then may a tree come.
    let readsAccessibility: Bool
    /// The view's tree as its updates built it (through the host's own state machine), and the
    /// size last given in points (what frames are judged against).
    private let tree = Mutex(AccessibilityTreeState())
    private let pointsSize = Mutex<(width: Double, height: Double)>((64, 48))

    init(peer: Peer, report: Report, stateLimit: Int? = nil, serviceKeepsState: Bool = false, readsAccessibility: Bool = false) {
        self.peer = peer
        self.report = report
        self.stateLimit = stateLimit
        self.serviceKeepsState = serviceKeepsState
        self.readsAccessibility = readsAccessibility
    }

    /// The tree as of the last complete update.
    var accessibility: AccessibilityTreeState { tree.withLock { $0 } }

    /// Checks a tree update as the Swift host does; returns the rule it broke, if any.
    private func received(_ part: AccessibilityUpdateWire) -> String? {
        guard readsAccessibility else {
            report.fail("tree.only-if-announced", "accessibility_update on \(peer.name), whose host did not announce \"accessibility\"")
            return "tree.only-if-announced"
        }
        let size = pointsSize.withLock { $0 }
        do throws(RemoteError) {
            _ = try tree.withLock { tree throws(RemoteError) in try tree.receive(part, viewSize: size) }
            return nil
        } catch {
            let rule = error.reason.hasPrefix(AccessibilityRule.focus.rawValue) ? "tree.focus-exists" : "tree.bounds"
            report.fail(rule, error.reason)
            return rule
        }
    }

    /// The sizes of the restorable states the view sent.
    var stateSizes: [Int] { states.withLock { $0 } }

    /// Checks a restorable state as the Swift host does; returns the rule it broke, if any.
    private func received(_ wire: RestorableStateWire, attachments: [Attachment]) -> String? {
        guard let limit = stateLimit, serviceKeepsState else {
            report.fail("state.only-if-announced", stateLimit == nil
                ? "restorable_state on \(peer.name), whose host did not announce \"restorable-state\""
                : "restorable_state from a service that did not announce \"restorable-state\"")
            return "state.only-if-announced"
        }
        do throws(RemoteError) {
            let bytes = try wire.decode(attachments: attachments, limit: limit, in: "restorable_state")
            states.withLock { $0.append(bytes.count) }
            return nil
        } catch {
            report.fail("state.bounds", error.reason)
            return "state.bounds"
        }
    }

    /// How many commits the view has made.
    var commitCount: Int { commits.withLock { $0 } }

    /// The size of the image the last commit showed.
    var size: (width: Int, height: Int) {
        let image = compositor.image
        return (image.width, image.height)
    }

    /// Gives the view a size (the compositor takes commits of it from now on).
    func resize(_ size: SurfaceSize) async throws(RemoteError) {
        compositor.sizeGiven(size)
        pointsSize.withLock { $0 = (Double(size.width), Double(size.height)) }
        try await peer.send(.surface(.resize(size)))
    }

    /// Shows the frame in flight, if any: release_buffer and frame_done.
    func present() async throws(RemoteError) {
        for message in compositor.present() { try await peer.send(.surface(message)) }
    }

    /// What a pump ended with.
    enum Pumped: Sendable {
        case done(Envelope)
        case timeout
        case failed(String)
        /// A surface rule was broken (recorded under `rule`).
        case violation(rule: String)
    }

    /// Reads for at most `time`: surface messages go through the compositor (and frames are
    /// presented at once when `present`), until `done` takes an envelope. A broken rule ends
    /// it, recorded under its rule.
    func pump(within time: Duration, present: Bool, until done: (Envelope) -> Bool) async -> Pumped {
        let deadline = ContinuousClock.now.advanced(by: time)
        while true {
            let left = ContinuousClock.now.duration(to: deadline)
            guard left > .zero else { return .timeout }
            switch await peer.receive(within: left) {
            case .envelope(let envelope):
                if case .surface(.restorableState(let wire)) = envelope.body {
                    if let rule = received(wire, attachments: envelope.attachments) { return .violation(rule: rule) }
                } else if case .surface(.accessibilityUpdate(let part)) = envelope.body {
                    if let rule = received(part) { return .violation(rule: rule) }
                } else if case .surface(.focusLeave(let direction)) = envelope.body {
                    // The checker's clients never announce "focus-leave".
                    report.fail("focus.only-if-announced", "focus_leave \(direction) on \(peer.name), whose host did not announce \"focus-leave\"")
                    return .violation(rule: "focus.only-if-announced")
                } else if case .surface(let message) = envelope.body {
                    do throws(RemoteError) {
                        try compositor.receive(message, attachments: envelope.attachments)
                        if case .commit = message {
                            commits.withLock { $0 += 1 }
                            if present { try await self.present() }
                        }
                    } catch {
                        let rule = Self.rule(for: error.reason)
                        report.fail(rule, error.reason)
                        return .violation(rule: rule)
                    }
                }
                if done(envelope) { return .done(envelope) }
                switch envelope.body {
                case .protocolError(let code, let reason): return .failed("protocol_error \(code) on \(peer.name): \(reason)")
                case .goodbye(let reason): return .failed("goodbye on \(peer.name): \(reason)")
                default: continue
                }
            case .end:
                return .failed("\(peer.name) closed")
            case .timeout:
                return .timeout
            case .failed(let error):
                return .failed("on \(peer.name): \(error.reason)")
            }
        }
    }

    /// The rule a compositor's complaint is about.
    static func rule(for reason: String) -> String {
        if reason.contains("before frame_done") || reason.contains("before the host released") { return "view.one-frame-in-flight" }
        if reason.contains("pixels, but the view is") || reason.contains("before the host gave the view a size") { return "view.buffer-size" }
        if reason.contains("damage rect") { return "view.damage" }
        if reason.contains("frame numbers must increase") { return "view.frames-increase" }
        if reason.contains("attach_buffer") && !reason.contains("attached twice") && !reason.contains("would map") { return "view.buffer" }
        return "view.surface-rules"
    }
}

extension Checker {
    /// How many Tabs (then Shift-Tabs) the view client sends: more than a view has controls.
    static let tabPresses = 24

    /// A view: input before a size, the first frame, one frame in flight while a resize waits,
    /// pacing, and settle. A service that did not announce "surfaces" (`announced` false: tried
    /// under protocol 1 only) that answers no resize has no view: the view rules are skipped.
    func checkView(_ control: Peer, share: Bool, announced: Bool = true) async {
        guard let (client, _) = await connect(control, name: "view client") else { return }
        defer { client.close() }
        let surface = SurfaceUnderTest(peer: client, report: report)
        // Checked on every surface message: held unless one broke them (or the view never drew),
        // however far the steps below got.
        defer {
            if surface.commitCount > 0 {
                for rule in ["view.buffer", "view.buffer-size", "view.one-frame-in-flight", "view.frames-increase", "view.damage", "view.surface-rules",
                             "state.only-if-announced", "focus.only-if-announced", "tree.only-if-announced"] {
                    report.passUnlessRecorded(rule)
                }
            }
        }
        do throws(RemoteError) {
            // A share activity's view is a share's: a host sends the items first.
            if share {
                let (items, attachments) = try Self.shareItems()
                try await client.send(.share(.request(items: items)), attachments: attachments)
            }
            // Input before the first size has no view to reach: taken, and dropped.
            try await client.send(.input(.focus(true)))
            try await client.send(.input(.pointer(PointerEvent(.moved, x: 5, y: 5))))
            try await client.send(.input(.key(KeyEvent(down: true, keyCode: 4))))
            try await client.send(.input(.key(KeyEvent(down: false, keyCode: 4))))
            report.record("input.before-size", await client.ping()?.reason)

            // The first frame.
            try await surface.resize(SurfaceSize(width: 64, height: 48))
            switch await surface.pump(within: Self.wait, present: false, until: { Self.isCommit($0) }) {
            case .done:
                report.pass("view.first-frame", "\(surface.size.width)×\(surface.size.height)")
                if !announced {
                    report.warn("view.announced", wouldFailUnder: 2, "it draws a view without announcing \"surfaces\" (a version-2 host shows it no view)")
                }
            case .timeout where !announced:
                for rule in Rule.all where rule.id.hasPrefix("view.") || ["input.before-size", "state.only-if-announced", "focus.only-if-announced", "tree.only-if-announced"].contains(rule.id) {
                    report.skip(rule.id, "no view: no frame answered a resize, and the service does not announce \"surfaces\"")
                }
                return
            case .timeout: return report.fail("view.first-frame", "no commit within \(Self.wait) of resize 64×48")
            case .failed(let reason): return report.fail("view.first-frame", reason)
            case .violation(let rule): return report.stopped("view.first-frame", by: rule)
            }

            // A resize and input while that frame is in flight: nothing may be committed until
            // its frame_done (watched for half a second), then the new size comes.
            // 50×30 points at 1.15: 57.5 × 34.5, so 58×35 pixels (halves up, in integers; a
            // floating-point 50 × 1.15 is 57.4999…).
            try await surface.resize(SurfaceSize(width: 50, height: 30, scalePermille: 1150))
            try await client.send(.input(.pointer(PointerEvent(.moved, x: 10, y: 10))))
            switch await surface.pump(within: .milliseconds(500), present: false, until: { Self.isCommit($0) }) {
            case .done: report.fail("view.one-frame-in-flight", "a commit before frame_done")
            case .timeout: report.pass("view.one-frame-in-flight")
            case .failed(let reason): return report.fail("view.resize-in-flight", reason)
            case .violation(let rule): return report.stopped("view.resize-in-flight", by: rule)
            }
            try await surface.present()
            switch await surface.pump(within: Self.wait, present: true, until: { Self.isCommit($0) && surface.size == (58, 35) }) {
            case .done: report.pass("view.resize-in-flight")
            case .timeout: report.fail("view.resize-in-flight", "no frame at 58×35 pixels (50×30 points at scale 1150) within \(Self.wait) of frame_done; the last was \(surface.size.width)×\(surface.size.height)")
            case .failed(let reason): return report.fail("view.resize-in-flight", reason)
            case .violation(let rule): return report.stopped("view.resize-in-flight", by: rule)
            }

            // Settle: answered behind the commits (presented as they come).
            try await client.send(.input(.pointer(PointerEvent(.moved, x: 12, y: 12))))
            let settle = try await client.send(.request(type: "remoteview.settle", payload: []))
            switch await surface.pump(within: Self.wait, present: true, until: { $0.replyTo == settle }) {
            case .done(let answer):
                switch answer.body {
                case .reply(let type, _) where type == "remoteview.settled": report.pass("view.settle")
                case .failure(let failure) where failure.isUnknownRequest: report.pass("view.settle", "not handled (optional): \(failure.message)")
                case .failure(let failure) where version < 2:
                    // Version 1 set no domain for "not handled".
                    report.warn("view.settle", wouldFailUnder: 2, "failure \(failure.domain) \(failure.code): \(failure.message) (version 2 takes only RemoteView code 1 as not handled)")
                default: report.fail("view.settle", "\(answer.body.name) instead of remoteview.settled")
                }
            case .timeout: report.fail("view.settle", "no answer to remoteview.settle within \(Self.wait)")
            case .failed(let reason): report.fail("view.settle", reason)
            case .violation(let rule): return report.stopped("view.settle", by: rule)
            }

            // Tab and Shift-Tab past any number of controls: this client did not announce
            // "focus-leave", so the focus must wrap around inside the view, never leave it.
            try await client.send(.input(.focus(true)))
            for shift in [false, true] {
                for _ in 0..<Self.tabPresses {
                    try await client.send(.input(.key(KeyEvent(down: true, keyCode: KeyCode.tab, modifiers: shift ? .shift : []))))
                    try await client.send(.input(.key(KeyEvent(down: false, keyCode: KeyCode.tab, modifiers: shift ? .shift : []))))
                }
            }
            let settled = try await client.send(.request(type: "remoteview.settle", payload: []))
            switch await surface.pump(within: Self.wait, present: true, until: { $0.replyTo == settled }) {
            case .done, .timeout, .failed: break  // judged by view.settle; only a focus_leave matters here
            case .violation(let rule): return report.stopped("view.settle", by: rule)
            }
        } catch {
            report.fail("view.surface-rules", "cannot send on the view client: \(error.reason)")
        }
    }

    /// The semantic tree, on a client that announces `accessibility` to a service that does too,
    /// at 480 × 360 points (a size a layout fits): a whole tree after the first frame, within its
    /// bounds (the host's own checks), every button labelled, every frame inside the view; then
    /// the focus and Tab, and the focus each update names must be a node of the tree.
    func checkAccessibility(_ control: Peer, share: Bool) async {
        let (width, height) = (480.0, 360.0)
        guard let (client, _) = await connect(control, name: "tree client", capabilities: [AccessibilityCapability.name]) else {
            return report.fail("tree.arrives", "no client: remoteview.connect failed (see connect)")
        }
        defer { client.close() }
        let surface = SurfaceUnderTest(peer: client, report: report, readsAccessibility: true)
        func isTree(_ envelope: Envelope) -> Bool {
            if case .surface(.accessibilityUpdate(let part)) = envelope.body { !part.more } else { false }
        }
        do throws(RemoteError) {
            if share {
                let (items, attachments) = try Self.shareItems()
                try await client.send(.share(.request(items: items)), attachments: attachments)
            }
            try await surface.resize(SurfaceSize(width: Int(width), height: Int(height)))
            switch await surface.pump(within: Self.wait, present: true, until: isTree) {
            case .done:
                let tree = surface.accessibility
                report.pass("tree.arrives", "\(tree.nodes.count) node\(tree.nodes.count == 1 ? "" : "s")")
            case .timeout: return report.fail("tree.arrives", "no accessibility_update within \(Self.wait) of a resize to 480×360")
            case .failed(let reason): return report.fail("tree.arrives", reason)
            case .violation(let rule): return report.stopped("tree.arrives", by: rule)
            }
            let nodes = surface.accessibility.nodes.values.sorted { $0.id < $1.id }
            let unlabelled = nodes.filter { $0.role == .button && $0.label.allSatisfy(\.isWhitespace) }
            report.record("tree.buttons-labelled", unlabelled.isEmpty ? nil
                          : "button\(unlabelled.count == 1 ? "" : "s") without a label: node\(unlabelled.count == 1 ? "" : "s") \(unlabelled.prefix(5).map { "\($0.id) (\($0.frame))" }.joined(separator: ", "))")
            let outside = nodes.filter { node in
                let f = node.frame
                return f.x < -0.5 || f.y < -0.5 || f.x + f.width > width + 0.5 || f.y + f.height > height + 0.5
            }
            report.record("tree.frames-inside", outside.isEmpty ? nil
                          : "outside the 480×360 view: \(outside.prefix(5).map { "node \($0.id) (\($0.role) \"\($0.label.escapedForTerminal())\") at \($0.frame)" }.joined(separator: ", "))")
            // The focus, then Tab: whatever the updates name must be in the tree (checked on each).
            try await client.send(.input(.focus(true)))
            try await client.send(.input(.key(KeyEvent(down: true, keyCode: KeyCode.tab))))
            try await client.send(.input(.key(KeyEvent(down: false, keyCode: KeyCode.tab))))
            let settled = try await client.send(.request(type: "remoteview.settle", payload: []))
            switch await surface.pump(within: Self.wait, present: true, until: { $0.replyTo == settled }) {
            case .done, .timeout, .failed:
                let tree = surface.accessibility
                if let focus = tree.focus, let node = tree.nodes[focus] {
                    report.pass("tree.focus-exists", "after Tab: node \(focus) (\(node.role) \"\(node.label.escapedForTerminal())\")")
                } else {
                    report.pass("tree.focus-exists", "after Tab the tree names no focus")
                }
            case .violation(let rule): return report.stopped("tree.focus-exists", by: rule)
            }
            report.passUnlessRecorded("tree.bounds")
        } catch {
            report.fail("tree.arrives", "cannot send on the tree client: \(error.reason)")
        }
    }

    /// Restorable state, on a client that announces `restorable-state` to a service that does
    /// too: a restore_state of bytes the service never wrote comes before the first size (a
    /// view must ignore a state it cannot read), then frames are shown and text typed; a state
    /// the view sends must keep the manifest's limit and, in a memfd, its seals and size.
    func checkState(_ control: Peer, share: Bool) async {
        let limit = manifest.limits.restorableStateBytes
        guard limit > 0 else {
            for rule in ["state.restore", "state.bounds"] { report.skip(rule, "the manifest's limits.restorableStateKiB is 0: a host keeps no state") }
            return
        }
        guard let (client, _) = await connect(control, name: "state client", capabilities: ["restorable-state"]) else {
            return report.fail("state.restore", "no client: remoteview.connect failed (see connect)")
        }
        defer { client.close() }
        let surface = SurfaceUnderTest(peer: client, report: report, stateLimit: limit, serviceKeepsState: true)
        do throws(RemoteError) {
            if share {
                let (items, attachments) = try Self.shareItems()
                try await client.send(.share(.request(items: items)), attachments: attachments)
            }
            try await client.send(.surface(.restoreState(.inline(Array("remoteview-check: a state this service never wrote".utf8)))))
            try await surface.resize(SurfaceSize(width: 64, height: 48))
            switch await surface.pump(within: Self.wait, present: true, until: { Self.isCommit($0) }) {
            case .done: report.pass("state.restore")
            case .timeout: return report.fail("state.restore", "no commit within \(Self.wait) of a resize after restore_state")
            case .failed(let reason): return report.fail("state.restore", reason)
            case .violation(let rule): return report.stopped("state.restore", by: rule)
            }
            // Something to keep: text typed, and the frames it draws shown.
            try await client.send(.input(.focus(true)))
            try await client.send(.input(.pointer(PointerEvent(.down, x: 32, y: 24, button: 1, buttons: 1))))
            try await client.send(.input(.pointer(PointerEvent(.up, x: 32, y: 24, button: 1))))
            try await client.send(.input(.text("remoteview-check")))
            switch await surface.pump(within: .seconds(1), present: true, until: { if case .surface(.restorableState) = $0.body { true } else { false } }) {
            case .done:
                let size = surface.stateSizes.last ?? 0
                report.pass("state.bounds", "a state of \(size) bytes (\(size > RestorableStateLimits.maxInlineBytes ? "in a memfd" : "inline")), within \(limit)")
            case .timeout: report.skip("state.bounds", "not reached: the view sent no state within 1 s of typed text and shown frames")
            case .failed(let reason): report.fail("state.bounds", reason)
            case .violation(let rule): report.stopped("state.bounds", by: rule)
            }
            if surface.commitCount > 0 { report.passUnlessRecorded("state.only-if-announced") }
        } catch {
            report.fail("state.restore", "cannot send on the state client: \(error.reason)")
        }
    }

    /// A share: the request, a view if the service has one, a cancel, and its one answer.
    func checkShare(_ control: Peer, view: Bool) async {
        guard let (client, _) = await connect(control, name: "share client") else {
            return report.fail("share.cancel", "no client to share with: remoteview.connect failed (see connect)")
        }
        defer { client.close() }
        let surface = SurfaceUnderTest(peer: client, report: report)
        do throws(RemoteError) {
            let (items, attachments) = try Self.shareItems()
            try await client.send(.share(.request(items: items)), attachments: attachments)
            if view { try await surface.resize(SurfaceSize(width: 64, height: 48)) }
            // Whatever the service does first (a frame, an update), then the user dismisses it.
            var answered = false
            switch await surface.pump(within: .milliseconds(300), present: true, until: { Self.isShareComplete($0) }) {
            case .done: answered = true
            case .timeout: break
            case .failed(let reason): return report.fail("share.cancel", reason)
            case .violation(let rule): return report.stopped("share.cancel", by: rule)
            }
            if !answered {
                try await client.send(.share(.cancel(reason: "remoteview-check dismissed the share")))
                switch await surface.pump(within: .seconds(2), present: true, until: { Self.isShareComplete($0) }) {
                case .done: report.pass("share.cancel")
                case .timeout: return report.fail("share.cancel", "no share_complete within 2 s of share_cancel")
                case .failed(let reason): return report.fail("share.cancel", reason)
                case .violation(let rule): return report.stopped("share.cancel", by: rule)
                }
            } else {
                report.pass("share.cancel", "answered before the cancel")
            }
            switch await surface.pump(within: .milliseconds(300), present: true, until: { if case .share = $0.body { true } else { false } }) {
            case .done(let late): report.fail("share.one-complete", "\(late.body.name) after share_complete")
            case .timeout: report.pass("share.one-complete")
            case .failed(let reason): report.fail("share.one-complete", reason)
            case .violation(let rule): report.stopped("share.one-complete", by: rule)
            }
        } catch {
            report.fail("share.cancel", "cannot send on the share client: \(error.reason)")
        }
    }

    /// What the checker shares (`docs/Protocol.md`, "Checking a service"): three items, so that
    /// an activity that fails on a later one is caught: a text, a URL, and a file (a sealed
    /// memfd of 63 bytes of text), all of them `text/…`.
    static func shareItems() throws(RemoteError) -> ([WireShareItem], [Attachment]) {
        let items: [ShareItem]
        do {
            items = [try .text("remoteview-check: the first item"), try .url("https://example.com/remoteview-check/the-second-item"),
                     try .file(named: "remoteview-check.txt", contentType: "text/plain",
                               contents: Array("remoteview-check: the third item, a file of sixty-three bytes.\n".utf8))]
        } catch {
            throw RemoteError(.invalidArgument, "the checker's share items: \(error)")
        }
        return try ShareItem.wire(items)
    }

    private static func isCommit(_ envelope: Envelope) -> Bool {
        if case .surface(.commit) = envelope.body { true } else { false }
    }

    private static func isShareComplete(_ envelope: Envelope) -> Bool {
        if case .share(.complete) = envelope.body { true } else { false }
    }
}
