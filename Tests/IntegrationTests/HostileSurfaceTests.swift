import Glibc
import RemoteHost
import RemoteTestSupport
import Testing

/// Services that break the surface rules on purpose (the fixture's "surface-…" modes, see
/// Tests/Fixtures/TestService/HostileSurface.swift), sandboxed, shown in a RemoteView by a real
/// launcher. Each test checks that the host ends the hostile service as a protocol violation
/// whose reason names the broken rule, reaps it, and keeps running; that a good service and a
/// good view next to it keep answering and drawing; and (through `withServices`) that no fd or
/// child process leaked. Nothing sleeps to synchronise: every wait is for an event, under a deadline.
@Suite("Hostile surfaces across processes", .serialized)
struct HostileSurfaceTests {
    static let hostile = "com.example.hostile", good = "com.example.good", neighbour = "com.example.neighbour"
    /// The size the hostile view is shown at (scale 1: as many pixels).
    static let width = 64, height = 48
    static let whole = PixelRect(x: 0, y: 0, width: width, height: height)
    /// The fixture's colours: green for its first frame and buffer, magenta after.
    static let green: UInt32 = 0xFF00_FF00, magenta: UInt32 = 0xFFFF_00FF
    /// The neighbour view's background, and what it paints on request.
    static let blue: UInt32 = 0xFF00_00FF, red: UInt32 = 0xFFFF_0000

    /// A hostile view, and what must keep working next to it.
    struct Scene: Sendable {
        let launcher: Launcher
        let events: AsyncStream<LauncherEvent>
        /// A good service that answers requests.
        let good: ServiceConnection
        /// A good service's view, drawn once already.
        let neighbour: RemoteView
        /// The hostile service's view, shown at `width` × `height`: its first resize starts the
        /// fixture's script.
        let hostile: RemoteView
    }

    /// Runs `body` with the fixture in `surface-MODE` shown in a view next to a good service and
    /// a good view.
    func withHostileView(_ mode: String, presentation: RemoteView.Presentation = .immediate, extra: String? = nil,
                         configuration: Launcher.Configuration = fastLauncherConfiguration(),
                         _ body: @escaping @Sendable (Scene) async throws -> Void) async throws {
        let manifests = ["good.json": ServiceFolder.manifest(identifier: Self.good),
                         "neighbour.json": ServiceFolder.manifest(identifier: Self.neighbour, mode: "view"),
                         "hostile.json": ServiceFolder.manifest(identifier: Self.hostile, mode: "surface-" + mode, extra: extra)]
        try await withServices(manifests, within: .seconds(30), configuration: configuration) { launcher, _ in
            let events = launcher.events()
            let good = launcher.connection(to: Self.good)
            let neighbour = RemoteView(connection: launcher.connection(to: Self.neighbour))
            try await neighbour.present(width: 32, height: 24)
            #expect(try await nextDamage(neighbour) == [PixelRect(x: 0, y: 0, width: 32, height: 24)])
            let hostile = RemoteView(connection: launcher.connection(to: Self.hostile), presentation: presentation)
            try await hostile.present(width: Self.width, height: Self.height)
            try await body(Scene(launcher: launcher, events: events, good: good, neighbour: neighbour, hostile: hostile))
        }
    }

    // MARK: checks

    /// The hostile service ends as a protocol violation whose reason contains `words`, is reaped,
    /// and its connection reports the reason; the good service and view carry on.
    static func expectViolation(_ scene: Scene, _ words: [String],
                                sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let (pid, reason) = try await termination(of: hostile, in: scene.events)
        #expect(reason.kind == .protocolViolation, "\(reason)", sourceLocation: sourceLocation)
        for word in words { #expect(reason.detail.contains(word), "\(reason)", sourceLocation: sourceLocation) }
        #expect(!childProcesses().contains(pid), "the hostile process is reaped", sourceLocation: sourceLocation)
        let event = try await nextEvent(of: scene.hostile.connection)
        if case .interrupted(let error) = event {
            for word in words { #expect(error.reason.contains(word), "\(error)", sourceLocation: sourceLocation) }
        } else {
            Issue.record("expected interrupted, got \(event)", sourceLocation: sourceLocation)
        }
        let status = try #require(await scene.launcher.status().first { $0.identifier == hostile }, sourceLocation: sourceLocation)
        #expect(status.state == .notRunning && status.crashes == 1, "\(status)", sourceLocation: sourceLocation)
        try await expectNeighboursFine(scene, sourceLocation: sourceLocation)
    }

    /// The good service answers, and the good view draws what it is asked to, exactly.
    static func expectNeighboursFine(_ scene: Scene, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        #expect(try await scene.good.request(ServiceMessage(type: "echo", text: "fine")).text == "fine", sourceLocation: sourceLocation)
        _ = try await scene.neighbour.connection.request(ServiceMessage(type: "paint", text: "ff0000 3 4 5 6"))
        #expect(try await nextDamage(scene.neighbour) == [PixelRect(x: 3, y: 4, width: 5, height: 6)],
                sourceLocation: sourceLocation)
        let image = scene.neighbour.image
        #expect(image.pixel(x: 3, y: 4) == red && image.pixel(x: 7, y: 9) == red, sourceLocation: sourceLocation)
        #expect(image.pixel(x: 2, y: 4) == blue && image.pixel(x: 8, y: 9) == blue && image.pixel(x: 31, y: 23) == blue,
                sourceLocation: sourceLocation)
    }

    /// Whether every pixel of `image` is `colour`, at the hostile view's size.
    static func isFilled(_ view: RemoteView, with colour: UInt32) -> Bool {
        let image = view.image
        guard image.width == width && image.height == height else { return false }
        for y in 0..<height { for x in 0..<width where image.pixel(x: x, y: y) != colour { return false } }
        return true
    }

    // MARK: attach_buffer

    @Test("the surfaces of one service process map at most maxMappedBytesPerService together: an attach_buffer past it, on any view, ends the process as a protocol violation that names the total")
    func mappedBytesPerService() async throws {
        var configuration = fastLauncherConfiguration()
        configuration.maxMappedBytesPerService = 4096  // one 32 × 24 buffer (3072 bytes), not two
        try await withServices(["view.json": ServiceFolder.manifest(identifier: Self.neighbour, mode: "view")],
                               within: .seconds(20), configuration: configuration) { launcher, _ in
            let events = launcher.events()
            let first = RemoteView(connection: launcher.connection(to: Self.neighbour))
            try await first.present(width: 32, height: 24)
            #expect(try await nextDamage(first) == [PixelRect(x: 0, y: 0, width: 32, height: 24)])
            // A second view on the same (shared) process: its first buffer is one too many.
            let second = RemoteView(connection: launcher.connection(to: Self.neighbour))
            try await second.present(width: 32, height: 24)
            let (_, reason) = try await termination(of: Self.neighbour, in: events)
            #expect(reason.kind == .protocolViolation, "\(reason)")
            #expect(reason.detail.contains("(3072 bytes) would map 6144 bytes across the service's surfaces, more than the 4096 one service process may map"),
                    "\(reason)")
        }
    }

    @Test("an unsealed memfd: ended as a protocol violation that says it is not sealed; the host and its neighbours carry on")
    func unsealedMemfd() async throws {
        try await withHostileView("unsealed") { scene in
            try await Self.expectViolation(scene, ["buffer 1 is not sealed against shrinking and growing"])
            #expect(scene.hostile.image.width == 0, "nothing of it was shown")
        }
    }

    // MARK: restorable state

    /// (the fixture's mode, manifest keys, words its violation must name)
    static let hostileStates: [(String, String?, String)] = [
        ("stateUnannounced", nil, "restorable_state from a service that did not announce the \"restorable-state\" capability"),
        ("stateOverLimit", #""limits": { "restorableStateKiB": 1 }"#, "restorable_state of 2048 bytes is over the limit of 1024 bytes"),
        ("stateOverLimit", #""limits": { "restorableStateKiB": 0 }"#, "restorable_state, but the host did not announce the \"restorable-state\" capability"),
        ("stateUnsealed", nil, "restorable_state: its memfd is not sealed against shrinking, growing and writing"),
    ]

    @Test("a restorable state that breaks a rule (from a service that did not announce \"restorable-state\", over the manifest's limits.restorableStateKiB, to a host that keeps none, in a memfd that is not sealed): ended as a protocol violation that names it; nothing is stored", arguments: 0..<hostileStates.count)
    func hostileState(_ index: Int) async throws {
        let (mode, extra, words) = Self.hostileStates[index]
        try await withHostileView(mode, extra: extra) { scene in
            try await Self.expectViolation(scene, [words])
            #expect(scene.hostile.restorableState == nil)
        }
    }

    @Test("a focus_leave from a service that did not announce \"focus-leave\", or to a host that did not (Launcher.Configuration.takesFocusFromViews off): ended as a protocol violation that names the capability", arguments: [true, false])
    func focusLeaveUnannounced(_ hostTakesFocus: Bool) async throws {
        var configuration = fastLauncherConfiguration()
        configuration.takesFocusFromViews = hostTakesFocus
        try await withHostileView("focusUnannounced", configuration: configuration) { scene in
            try await Self.expectViolation(scene, [hostTakesFocus ? "focus_leave from a service that did not announce the \"focus-leave\" capability"
                                                                  : "focus_leave, but the host did not announce the \"focus-leave\" capability"])
        }
    }

    @Test("a sealed memfd smaller than stride × height: ended as a protocol violation that gives both sizes")
    func memfdSmallerThanDeclared() async throws {
        try await withHostileView("short") { scene in
            try await Self.expectViolation(scene, ["buffer 1 holds 6144 bytes, less than its stride × height (12288)"])
            #expect(scene.hostile.image.width == 0)
        }
    }

    @Test("a stride smaller than 4 × width (a raw packet the codec would not encode): refused when decoded, ended as a protocol violation that names the stride")
    func strideTooSmall() async throws {
        try await withHostileView("stride") { scene in
            try await Self.expectViolation(scene, ["buffer 1 has stride 128", "at least 256 (width 64 × 4)"])
            #expect(scene.hostile.image.width == 0)
        }
    }

    // MARK: commit

    @Test("a damage rect outside the buffer: ended as a protocol violation naming the rect and the buffer's size; the frame before it stays shown, unchanged")
    func damageOutOfBounds() async throws {
        try await withHostileView("damage") { scene in
            #expect(try await nextDamage(scene.hostile) == [Self.whole], "its good first frame")
            try await Self.expectViolation(scene, ["commit of buffer 1: damage rect 0 (10×10 at (60, 0)) is outside the buffer (64×48)"])
            #expect(Self.isFilled(scene.hostile, with: Self.green), "nothing of the refused frame was copied")
        }
    }

    @Test("a service that does not handle remoteview.settle (it answers unknown request): settle() falls back to a ping and returns, with the frame it had committed")
    func settleWithoutSupport() async throws {
        try await withHostileView("truncate") { scene in
            #expect(try await nextDamage(scene.hostile) == [Self.whole], "its first frame")
            try await scene.hostile.settle()
            #expect(Self.isFilled(scene.hostile, with: Self.green))
            _ = try await scene.hostile.connection.request(ServiceMessage(type: "next"))
        }
    }

    @Test("a bad commit while settle() waits: settle() throws the violation (the settled reply right behind the commit is never taken), and the service is ended with it")
    func settleThrowsWhenEnded() async throws {
        try await withHostileView("settleDamage") { scene in
            #expect(try await nextDamage(scene.hostile) == [Self.whole], "its good first frame")
            let error = await #expect(throws: RemoteError.self) { try await scene.hostile.settle() }
            #expect(error?.code == .protocolViolation, "\(String(describing: error))")
            #expect(error?.reason.contains("damage rect 0 (10×10 at (60, 0)) is outside the buffer (64×48)") == true, "\(String(describing: error))")
            try await Self.expectViolation(scene, ["damage rect 0 (10×10 at (60, 0)) is outside the buffer (64×48)"])
            #expect(Self.isFilled(scene.hostile, with: Self.green), "the image keeps the last good frame")
        }
    }

    @Test("a buffer of another size than the view's (points × scale, rounded): ended as a protocol violation giving both sizes")
    func wrongSize() async throws {
        try await withHostileView("wrongSize") { scene in
            try await Self.expectViolation(scene, ["commit of buffer 1 at 32×24 pixels, but the view is 64×48 pixels"])
            #expect(scene.hostile.image.width == 0, "nothing of it was shown")
        }
    }

    @Test("capabilities: a service that does not announce \"surfaces\" has no view to present (a clear error, nothing sent), and one that sends surface messages anyway is ended as a protocol violation")
    func surfacesCapability() async throws {
        let manifests = ["plain.json": ServiceFolder.manifest(identifier: Self.good),
                         "hostile.json": ServiceFolder.manifest(identifier: Self.hostile, mode: "surface-unannounced")]
        try await withServices(manifests, within: .seconds(30)) { launcher, _ in
            let plain = RemoteView(connection: launcher.connection(to: Self.good))
            let error = await #expect(throws: RemoteError.self) { try await plain.present(width: 64, height: 48) }
            #expect(error?.code == .invalidArgument)
            #expect(error?.reason.contains(#"does not announce the "surfaces" capability in its handshake"#) == true, "\(String(describing: error))")
            #expect(try await plain.connection.request(ServiceMessage(type: "echo", text: "still fine")).text == "still fine")

            let events = launcher.events()
            let hostile = RemoteView(connection: launcher.connection(to: Self.hostile))
            _ = try? await hostile.connection.request(ServiceMessage(type: "echo", text: "wake up"))
            let (_, reason) = try await termination(of: Self.hostile, in: events)
            #expect(reason.kind == .protocolViolation && reason.detail.contains(#"attach_buffer from a service that did not announce the "surfaces" capability (protocol version 2)"#), "\(reason)")
        }
    }

    @Test("protocol versions: the surfaces rule is version 2's; a service that speaks version 1 only draws its view without announcing \"surfaces\" and is served, where the same from a version-2 service is a violation (above)")
    func surfacesCapabilityVersion1() async throws {
        let identifier = "com.example.hostile-surface-v1"
        let manifests = ["v1.json": ServiceFolder.manifest(identifier: identifier, mode: "surface-unannouncedVersion1")]
        try await withServices(manifests, within: .seconds(30)) { launcher, _ in
            let view = RemoteView(connection: launcher.connection(to: identifier))
            try await view.present(width: 64, height: 48)
            _ = try await nextDamage(view)
            #expect(view.image.pixel(x: 10, y: 10) == 0xFF00_FF00, "the version-1 service's frame is shown")
            // Version 1 set no domain for an unknown request: its failure counts as "not
            // handled", and settle falls back to a ping.
            try await view.settle()
            let status = try #require(await launcher.status().first)
            #expect(status.launches == 1 && status.lastTermination == nil && status.processes.count == 1, "served, not ended: \(status)")
        }
    }

    @Test("a commit of a buffer id that was never attached: ended as a protocol violation that names the id")
    func unattachedCommit() async throws {
        try await withHostileView("unattached") { scene in
            try await Self.expectViolation(scene, ["commit of buffer 9, which is not attached"])
            #expect(scene.hostile.image.width == 0)
        }
    }

    // A host that shows frames later than it composites them (an SDL window at vsync: manual
    // presentation) holds each frame until then; a commit meanwhile did not wait. (A host that
    // shows each frame at once hands it back before it reads the next commit, so it cannot tell;
    // see RemoteView.Presentation.)

    @Test("a commit of a buffer the host has not released (twice in a row, no waiting): ended as a protocol violation that names the buffer")
    func unreleasedCommit() async throws {
        try await withHostileView("unreleased", presentation: .manual) { scene in
            try await Self.expectViolation(scene, ["commit of buffer 1 before the host released it"])
        }
    }

    @Test("a flood of commits without waiting for frame_done: ended as a protocol violation at the first one that did not wait")
    func commitFlood() async throws {
        try await withHostileView("flood", presentation: .manual) { scene in
            try await Self.expectViolation(scene, ["commit of frame 2 before frame_done of frame 1"])
        }
    }

    @Test("a host that presents manually: frame_done goes out only when it says the frame was shown, and a patient service is never refused")
    func manualPresentation() async throws {
        try await withServices(["view.json": ServiceFolder.manifest(mode: "view")]) { launcher, _ in
            let view = RemoteView(connection: launcher.connection(to: "com.example.test"), presentation: .manual)
            try await view.present(width: 16, height: 16)
            #expect(try await nextDamage(view) == [PixelRect(x: 0, y: 0, width: 16, height: 16)])
            for index in 0..<5 {
                _ = try await view.connection.request(ServiceMessage(type: "paint", text: "ff0000 \(index) 0 1 1"))
                try await view.framePresented()
                #expect(try await nextDamage(view) == [PixelRect(x: index, y: 0, width: 1, height: 1)])
            }
            #expect(view.image.pixel(x: 4, y: 0) == Self.red)
            let status = try #require(await launcher.status().first)
            #expect(status.crashes == 0 && status.state == .running, "\(status)")
        }
    }

    @Test("protocol versions: under version 2 only RemoteView code 1 means \"not handled\": a service of version 2 that answers a settle in its own domain makes settle() throw its failure (the same from a version-1 service falls back to a ping, above)")
    func settleOwnDomainVersion2() async throws {
        let identifier = "com.example.hostile-own-domain"
        try await withServices(["v2.json": ServiceFolder.manifest(identifier: identifier, mode: "surface-ownDomain")], within: .seconds(30)) { launcher, _ in
            let view = RemoteView(connection: launcher.connection(to: identifier))
            try await view.present(width: 64, height: 48)
            _ = try await nextDamage(view)
            let error = await #expect(throws: RemoteError.self) { try await view.settle() }
            #expect(error?.code == .remoteError && error?.remote?.domain == "hostile", "\(String(describing: error))")
        }
    }

    @Test("a frame's buffer and frame_done go to the process that drew it: after a crash, framePresented() drops them and launches nothing, and the relaunched process, which never attached that buffer, reports no violation")
    func framePresentedAfterCrash() async throws {
        try await withServices(["view.json": ServiceFolder.manifest(mode: "view")]) { launcher, _ in
            let events = launcher.events()
            let view = RemoteView(connection: launcher.connection(to: "com.example.test"), presentation: .manual)
            try await view.present(width: 16, height: 16)
            _ = try await nextDamage(view)  // shown, not yet presented: its buffer is still the host's
            let first = try #require(view.connection.processIdentifier)
            let servicePid = try #require(await launcher.status().first?.processes.first?.servicePid)
            kill(servicePid, SIGKILL)
            _ = try await termination(of: first, in: events)
            // A window's vsync after the crash: nothing to send to, nothing launched.
            try await view.framePresented()
            #expect(await launcher.status().first?.launches == 1, "framePresented() launched nothing")
            // The next use relaunches; the new process draws, and its frames flow.
            try await view.present(width: 16, height: 16)
            _ = try await nextDamage(view)
            try await view.framePresented()
            _ = try await view.connection.request(ServiceMessage(type: "paint", text: "ff0000 3 0 1 1"))
            #expect(try await nextDamage(view) == [PixelRect(x: 3, y: 0, width: 1, height: 1)])
            let status = try #require(await launcher.status().first)
            #expect(status.launches == 2 && status.state == .running && status.processes.count == 1, "\(status)")
        }
    }

    // MARK: truncation

    @Test("a service that tries to truncate (and grow) its sealed buffer after attaching it, and again after the host read it: every ftruncate fails with EPERM, the host shows both frames exactly (no SIGBUS), and the service carries on")
    func truncateAfterAttach() async throws {
        try await withHostileView("truncate") { scene in
            #expect(try await nextDamage(scene.hostile) == [Self.whole])
            #expect(Self.isFilled(scene.hostile, with: Self.green), "frame 1, read after the first attempts")
            // Lets the service try again and draw frame 2; the reply says what each ftruncate did.
            let report = try await scene.hostile.connection.request(ServiceMessage(type: "next")).text
            let attempts = "shrink to 0: EPERM, shrink to 6144: EPERM, grow to 24576: EPERM"
            #expect(report == "after attach: \(attempts); after frame 1: \(attempts); size 12288")
            #expect(try await nextDamage(scene.hostile) == [Self.whole])
            #expect(Self.isFilled(scene.hostile, with: Self.magenta), "frame 2, read after the second attempts")
            #expect(try await scene.hostile.connection.request(ServiceMessage(type: "echo", text: "alive")).text == "alive")
            let status = try #require(await scene.launcher.status().first { $0.identifier == Self.hostile })
            #expect(status.state == .running && status.crashes == 0 && status.lastTermination == nil, "\(status)")
            try await Self.expectNeighboursFine(scene)
        }
    }
}

/// Hostile semantic trees (the fixture's "surface-tree…" modes): each breaks one rule of
/// docs/Protocol.md, "Accessibility", and is ended with the rule's name; a child laid out past
/// a small view's edge is not one of them.
extension HostileSurfaceTests {
    @Test("a hostile tree is ended as a protocol violation that names its rule", arguments: [
        ("treeNodeCount", "accessibility.node-count"), ("treeDepth", "accessibility.depth"),
        ("treeTextLength", "accessibility.text-length"), ("treeFrame", "accessibility.frame"),
        ("treeFrameNaN", "accessibility.frame"), ("treeStructure", "accessibility.structure"),
        ("treeNotWhole", "accessibility.structure"), ("treeFocus", "accessibility.focus"),
        ("treeUnannounced", "accessibility.unannounced"),
    ])
    func hostileTree(_ mode: String, _ rule: String) async throws {
        try await withHostileView(mode) { scene in
            try await Self.expectViolation(scene, [rule])
            #expect(scene.hostile.accessibility.tree.isEmpty, "nothing of a broken tree is published")
        }
    }

    @Test("a button laid out past the view's right edge is clipped to the view, not a violation; a later update of that node alone changes only it")
    func treeClipped() async throws {
        try await withHostileView("treeClipped") { scene in
            let view = scene.hostile
            let wide = try await view.accessibility.node(role: .button, label: "Wide")
            #expect(wide.frame == AccessibilityFrame(x: Double(Self.width - 10), y: 4, width: 10, height: 20), "\(wide)")
            #expect(wide.states.contains(.focused))
            let changes = view.accessibility.changes()
            _ = try await view.connection.request(ServiceMessage(type: "next"))
            let change = try await withDeadline(.seconds(10), "the renamed button") { await changes.first { _ in true } }
            #expect(change?.changed == [wide.id] && change?.isWhole == false)
            #expect(change?.tree[wide.id]?.label == "Narrow" && change?.tree.count == 2)
            let status = try #require(await scene.launcher.status().first { $0.identifier == Self.hostile })
            #expect(status.crashes == 0, "\(status)")
        }
    }
}
