// libFuzzer target: one packet as the host receives it from a service (docs/Fuzzing.md).
//
// Input: byte 0 says which fds "arrived" with the packet, the rest is the packet.
//   bits 0–4  how many fds (0…31; more than 16 never arrive on a real socket, but the codec must
//             refuse them with a reason all the same)
//   bits 5–6  what they are: 0 /dev/null, 1 a 12288-byte memfd sealed against shrinking and
//             growing (a 64×48 surface buffer, stride 256), 2 a 5-byte memfd sealed against any
//             change (a file item "hello"), 3 an unsealed 12288-byte memfd
//   bit 7     mixed: the n-th fd is of kind (kind + n) mod 4
//
// Each run decodes the packet with EnvelopeCodec.decode (in place, as a connection decodes, then
// copied out), into one UnpackArena reused from run to
// run (as a connection's framer reuses its own); an envelope that decodes is encoded again
// (the codec must accept on the way out what it accepted on the way in, and re-encoding must be
// stable), then goes through the checks the host runs right after decoding: a surface message
// into a fresh SurfaceCompositor holding one attached buffer (id 1, 64×48), a share's items
// through ShareItem.received (seals, sizes). Every fd handed in must be closed when the run ends.
//
// FUZZ_WRITE_SEEDS=DIR writes the seed corpus (one valid packet per message kind) and exits.
import Glibc
@testable import RemoteCore
@testable import RemoteHost

/// The per-process fixtures: one template fd per kind, duplicated for each run.
private struct Fixtures {
    let templates: [Int32]
    /// A surface buffer for the compositor's pre-attached buffer 1.
    let buffer: Int32
    /// The fds open after the first run (libFuzzer opens its own after initialising).
    var baselineFDs: [String] = []
    var runs = 0
}

nonisolated(unsafe) private var fixtures: Fixtures?
/// Where every packet is unpacked, reused from run to run as a connection's framer reuses its
/// own: what one packet left in it must not change how the next decodes.
private let arena = UnpackArena()

private let bufferLayout = BufferDescription(id: 1, width: 64, height: 48, stride: 256)

private func memfd(size: Int, contents: [UInt8] = [], seals: MemoryFile.Seals) -> Int32 {
    do {
        let file = try MemoryFile(name: "fuzz")
        try file.resize(to: size)
        if !contents.isEmpty { try file.write(contents) }
        if !seals.isEmpty { try file.addSeals(seals) }
        return file.takeDescriptor().release()
    } catch {
        fail("fixture memfd: \(error)")
    }
}

/// The open fds but pipes, each with what it is (for the report when their number changes).
private func openFDs() -> [String] {
    guard let directory = opendir("/proc/self/fd") else { fail("opendir /proc/self/fd: \(errno)") }
    defer { closedir(directory) }
    let own = dirfd(directory)
    var result: [String] = []
    while let entry = readdir(directory) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        guard name != ".", name != "..", Int32(name) != own else { continue }
        var target = [CChar](repeating: 0, count: 4096)
        let length = readlink("/proc/self/fd/" + name, &target, target.count - 1)
        let what = length > 0 ? String(decoding: target[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self) : "?"
        // libFuzzer's symbolizer (it names new functions as it finds them) runs behind two pipes;
        // nothing under test makes pipes.
        if what.hasPrefix("pipe:") { continue }
        result.append("\(name) → \(what)")
    }
    return result.sorted()
}

/// Stops the process with `message` (which a release build's precondition would not print).
private func fail(_ message: String) -> Never {
    let line = Array("fuzz-packet: \(message)\n".utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    abort()
}

private func require(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fail(message()) }
}

@_cdecl("LLVMFuzzerInitialize")
public func initialize(_ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> Int32 {
    let null = open("/dev/null", O_RDONLY | O_CLOEXEC)
    require(null >= 0, "open /dev/null: \(errno)")
    let surface = memfd(size: bufferLayout.byteCount, seals: [.shrink, .grow])
    let file = memfd(size: 5, contents: Array("hello".utf8), seals: [.shrink, .grow, .write, .seal])
    let unsealed = memfd(size: bufferLayout.byteCount, seals: [])
    let buffer = memfd(size: bufferLayout.byteCount, seals: [.shrink, .grow])
    fixtures = Fixtures(templates: [null, surface, file, unsealed], buffer: buffer)
    if let directory = getenv("FUZZ_WRITE_SEEDS") {
        writeSeeds(to: String(cString: directory))
        exit(0)
    }
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    guard size >= 1 else { return 0 }
    let selector = data[0]
    let count = Int(selector & 0x1F), kind = Int(selector >> 5) & 3, mixed = selector & 0x80 != 0
    var handedIn: [Int32] = []
    var attachments: [Attachment] = []
    for index in 0..<count {
        let template = fixtures!.templates[mixed ? (kind + index) % 4 : kind]
        let fd = fcntl(template, F_DUPFD_CLOEXEC, 0)
        require(fd >= 0, "dup: \(errno)")
        handedIn.append(fd)
        attachments.append(Attachment(OwnedFD(adopting: fd)))
    }
    run(UnsafeRawBufferPointer(start: data + 1, count: size - 1), attachments: attachments)
    attachments.removeAll()

    // Nothing handed in may outlive the run, whatever became of the packet.
    for fd in handedIn where fcntl(fd, F_GETFD) != -1 {
        fail("fd \(fd), one of the \(count) handed in with the packet, is still open after the run")
    }
    fixtures!.runs += 1
    if fixtures!.runs == 1 {
        fixtures!.baselineFDs = openFDs()
    } else if fixtures!.runs % 10_000 == 0 {
        let open = openFDs()
        if open.count > fixtures!.baselineFDs.count {
            fail("\(open.count) fds open after \(fixtures!.runs) runs, \(fixtures!.baselineFDs.count) after the first: \(open.joined(separator: ", ")); then: \(fixtures!.baselineFDs.joined(separator: ", "))")
        }
    }
    return 0
}

private func run(_ packet: UnsafeRawBufferPointer, attachments: [Attachment]) {
    let envelope: Envelope
    do {
        envelope = try EnvelopeCodec.decode(packet, attachments: attachments, arena: arena)
    } catch {
        check(error, .protocolViolation)
        return
    }
    roundTrip(envelope)
    switch envelope.body {
    case .surface(let message):
        let compositor = SurfaceCompositor()
        do {
            let fd = fcntl(fixtures!.buffer, F_DUPFD_CLOEXEC, 0)
            require(fd >= 0, "dup: \(errno)")
            try compositor.receive(.attachBuffer(bufferLayout), attachments: [Attachment(OwnedFD(adopting: fd))])
        } catch {
            fail("pre-attaching buffer 1: \(error)")
        }
        do {
            try compositor.receive(message, attachments: envelope.attachments)
            if case .commit = message {
                require(compositor.present().count == 2, "a commit that was accepted has no frame in flight")
            }
        } catch {
            check(error, .protocolViolation)
        }
    case .share(let message):
        switch message {
        case .request(let wire), .complete(_, let wire, _):
            do {
                let items = try ShareItem.received(wire, attachments: envelope.attachments)
                for item in items { _ = try item.data(limit: 1 << 20) }  // the fixtures are 5 and 12,288 bytes
            } catch {
                check(error, .protocolViolation)
            }
        case .cancel, .update:
            break
        }
    default:
        break
    }
}

/// A refusal must say what was wrong, with the expected code.
private func check(_ error: RemoteError, _ code: RemoteError.Code) {
    require(error.code == code, "expected \(code), got \(error)")
    require(!error.reason.isEmpty, "\(code) without a reason")
}

/// What the codec accepts on the way in it must accept on the way out, and the bytes it writes
/// must decode to an envelope that writes the same bytes.
private func roundTrip(_ envelope: Envelope) {
    let first: [UInt8]
    do { first = try EnvelopeCodec.encode(envelope) } catch {
        fail("decoded \(envelope.body.name) envelope \(envelope.id) does not encode again: \(error)")
    }
    let again: Envelope
    do {
        again = try first.withUnsafeBytes { (bytes) throws(RemoteError) in try EnvelopeCodec.decode(bytes, attachments: envelope.attachments, arena: arena) }
    } catch {
        fail("re-encoded \(envelope.body.name) envelope \(envelope.id) does not decode: \(error)")
    }
    let second: [UInt8]
    do { second = try EnvelopeCodec.encode(again) } catch {
        fail("re-decoded \(envelope.body.name) envelope \(envelope.id) does not encode: \(error)")
    }
    require(first == second, "\(envelope.body.name) envelope \(envelope.id) encodes differently after a round trip")
}

// MARK: seeds

private func writeSeeds(to directory: String) {
    let shareItems = [
        WireShareItem(kind: .text, contentType: "text/plain", text: "Look at this"),
        WireShareItem(kind: .url, contentType: "text/uri-list", text: "https://example.com/photo"),
        WireShareItem(kind: .file, contentType: "image/png", name: "photo.png", size: 5),
    ]
    // (name, fd selector byte, envelope)
    let seeds: [(String, UInt8, Envelope)] = [
        ("handshake-host", 0, Envelope(id: 1, body: .handshake(Handshake(role: .host, identifier: "com.example.host")))),
        ("handshake-service", 0, Envelope(id: 1, body: .handshake(Handshake(role: .service, identifier: "com.example.share.mail",
                                                                             capabilities: ["share", "surface"])))),
        ("goodbye", 0, Envelope(id: 7, body: .goodbye(reason: "idle exit"))),
        ("protocol-error", 0, Envelope(id: 3, body: .protocolError(.malformed, reason: "packet of 3 bytes is not a valid Envelope"))),
        ("ping", 0, Envelope(id: 2, body: .ping(nonce: 42))),
        ("pong", 0, Envelope(id: 2, replyTo: 5, body: .pong(nonce: 42))),
        ("request", 0, Envelope(id: 4, body: .request(type: "compose", payload: Array("hi".utf8)))),
        ("request-fds", 2, Envelope(id: 4, body: .request(type: "open", payload: []), attachments: [])),
        ("reply", 0, Envelope(id: 5, replyTo: 4, body: .reply(type: "composed", payload: [1, 2, 3]))),
        ("message", 0, Envelope(id: 6, body: .message(type: "remoteview.connect", payload: []))),
        ("message-fd", 1, Envelope(id: 6, body: .message(type: "remoteview.connect", payload: []))),
        ("failure", 0, Envelope(id: 8, replyTo: 4, body: .failure(ServiceFailure(domain: "Mail", code: 2, message: "no account")))),
        ("cancel", 0, Envelope(id: 9, body: .cancel(requestID: 4))),
        ("attach-buffer", 1 | 1 << 5, Envelope(id: 10, body: .surface(.attachBuffer(BufferDescription(id: 2, width: 64, height: 48, stride: 256))))),
        ("commit", 0, Envelope(id: 11, body: .surface(.commit(bufferID: 1, damage: [], frame: 1)))),
        ("commit-damage", 0, Envelope(id: 11, body: .surface(.commit(bufferID: 1, damage: [
            PixelRect(x: 0, y: 0, width: 64, height: 4), PixelRect(x: 10, y: 20, width: 8, height: 8)], frame: 3)))),
        ("release-buffer", 0, Envelope(id: 12, body: .surface(.releaseBuffer(1)))),
        ("frame-done", 0, Envelope(id: 13, body: .surface(.frameDone(frame: 1)))),
        ("destroy-buffer", 0, Envelope(id: 14, body: .surface(.destroyBuffer(1)))),
        ("resize", 0, Envelope(id: 15, body: .surface(.resize(SurfaceSize(width: 320, height: 240, scalePermille: 2000))))),
        ("preferred-size", 0, Envelope(id: 16, body: .surface(.preferredSize(width: 300, height: 200)))),
        ("accessibility-update", 0, Envelope(id: 17, body: .surface(.accessibilityUpdate(AccessibilityUpdateWire(nodes: [
            AccessibilityNodeDescription(id: 1, role: .group, frame: AccessibilityFrame(x: 0, y: 0, width: 320, height: 240), children: [2, 3, 4]),
            AccessibilityNodeDescription(id: 2, role: .button, label: "Save", states: [.focusable], actions: [.press, .focus],
                                         frame: AccessibilityFrame(x: 10, y: 200, width: 80, height: 30)),
            AccessibilityNodeDescription(id: 3, role: .textField, label: "Note", value: "héllo", states: [.editable], actions: [.setValue],
                                         frame: AccessibilityFrame(x: 10, y: 10, width: 300, height: 30)),
            AccessibilityNodeDescription(id: 4, role: .progress, frame: AccessibilityFrame(x: 10, y: 50, width: 300, height: 6),
                                         range: AccessibilityRange(minimum: 0, maximum: 1, value: 0.25)),
        ], root: 1, focus: 3, whole: true))))),
        ("accessibility-update-part", 0, Envelope(id: 18, body: .surface(.accessibilityUpdate(AccessibilityUpdateWire(nodes: [
            AccessibilityNodeDescription(id: 3, role: .textField, label: "Note", value: "héllo!", frame: AccessibilityFrame(x: 10, y: 10, width: 300, height: 30)),
        ], focus: 3, more: true))))),
        ("accessibility-action", 0, Envelope(id: 19, body: .surface(.accessibilityAction(AccessibilityActionWire(node: 2, action: .press))))),
        ("accessibility-action-text", 0, Envelope(id: 19, body: .surface(.accessibilityAction(AccessibilityActionWire(node: 3, action: .setText("new text")))))),
        ("pointer-down", 0, Envelope(id: 20, body: .input(.pointer(PointerEvent(.down, x: 10.5, y: 20, button: 1, buttons: 1,
                                                                                  scrollX: 0, scrollY: 0, modifiers: [.shift]))))),
        ("pointer-scroll", 0, Envelope(id: 21, body: .input(.pointer(PointerEvent(.scroll, x: 1, y: 2, button: 0, buttons: 0,
                                                                                    scrollX: 0, scrollY: -3.5, modifiers: []))))),
        ("key", 0, Envelope(id: 22, body: .input(.key(KeyEvent(down: true, keyCode: 40, text: "", modifiers: [.control], isRepeat: false))))),
        ("text-input", 0, Envelope(id: 23, body: .input(.text("héllo")))),
        ("focus", 0, Envelope(id: 24, body: .input(.focus(true)))),
        ("remote-control", 0, Envelope(id: 25, body: .input(.remoteControl(.togglePlayPause)))),
        ("traits", 0, Envelope(id: 26, body: .input(.traits(Traits(style: .dark, tint: Color(argb: 0xFF33_66CC), fontScalePermille: 1250))))),
        ("share-request", 1 | 2 << 5, Envelope(id: 30, body: .share(.request(items: shareItems)))),
        ("share-cancel", 0, Envelope(id: 31, body: .share(.cancel(reason: "dismissed")))),
        ("activity-update", 0, Envelope(id: 32, body: .share(.update(ActivityUpdate(title: "Mail", subtitle: "Sending", progress: 0.5, state: .working))))),
        ("activity-update-indeterminate", 0, Envelope(id: 33, body: .share(.update(ActivityUpdate(title: "Mail", state: .preparing))))),
        ("share-complete", 1 | 2 << 5, Envelope(id: 34, body: .share(.complete(.completed, items: [shareItems[2], shareItems[0]], message: "")))),
        ("share-complete-cancelled", 0, Envelope(id: 35, body: .share(.complete(.cancelled, items: [], message: "")))),
        ("share-complete-failed", 0, Envelope(id: 36, body: .share(.complete(.failed, items: [], message: "no network")))),
    ]
    for (name, selector, envelope) in seeds {
        var envelope = envelope
        // encode() counts attachments; any open fds stand in for those the selector hands in.
        envelope.attachments = (0..<Int(selector & 0x1F)).map { _ in Attachment(OwnedFD(adopting: open("/dev/null", O_RDONLY | O_CLOEXEC))) }
        let bytes: [UInt8]
        do { bytes = try EnvelopeCodec.encode(envelope) } catch { fail("seed \(name): \(error)") }
        let path = "\(directory)/\(name)"
        guard let file = fopen(path, "wb") else { fail("cannot write \(path): \(errno)") }
        let all = [selector] + bytes
        require(fwrite(all, 1, all.count, file) == all.count, "short write to \(path)")
        fclose(file)
        print("\(path): \(all.count) bytes")
    }
}
