// Input messages (fields 200–205): round trips, every bound checked on the way in and out,
// and the direction rule (only a host sends input).
@testable import RemoteCore
import RemoteTestSupport
import Testing

private enum InputField {
    static let pointer: UInt32 = 200, key: UInt32 = 201, textInput: UInt32 = 202
    static let focus: UInt32 = 203, remoteControl: UInt32 = 204, traits: UInt32 = 205
}

@Suite("Input messages on the wire")
struct InputCodecTests {
    static let samples: [InputEvent] = [
        .pointer(PointerEvent(.down, x: 10.5, y: 20.25, button: 1, buttons: 1)),
        .pointer(PointerEvent(.up, x: -3, y: 16_384, button: 3, modifiers: [.shift, .meta])),
        .pointer(PointerEvent(.moved, x: 0, y: 0, buttons: 0b101)),
        .pointer(PointerEvent(.scroll, x: 5, y: 5, scrollX: -1.5, scrollY: 40)),
        .key(KeyEvent(down: true, keyCode: KeyCode.backspace)),
        .key(KeyEvent(down: false, keyCode: 0xFFFF, text: "é", modifiers: .all, isRepeat: true)),
        .text("h"),
        .text("héllo 👋 " + String(repeating: "x", count: 100)),
        .focus(true),
        .focus(false),
        .focusEntering(.forward),
        .focusEntering(.backward),
        .traits(Traits(style: .dark, tint: Color(argb: 0x80FF_9500), fontScalePermille: 4_000)),
        .traits(.standard),
    ] + RemoteCommand.allCases.map { .remoteControl($0) }

    @Test("every input message round-trips", arguments: samples)
    func roundTrips(_ event: InputEvent) throws {
        let decoded = try roundTrip(Envelope(id: 9, body: .input(event)))
        guard case .input(let back) = decoded.body else {
            Issue.record("decoded to \(decoded.body.name)")
            return
        }
        #expect(back == event)
    }

    /// (a packet built by hand, words its rejection must contain)
    static let hostile: [(String, UInt32, ProtoWriter, [String])] = [
        ("pointer without a phase", InputField.pointer, ProtoWriter().float(2, 1), ["pointer phase 0"]),
        ("pointer phase 9", InputField.pointer, ProtoWriter().uint(1, 9), ["pointer phase 9"]),
        ("pointer at NaN", InputField.pointer, ProtoWriter().uint(1, 3).float(2, .nan), ["pointer x nan"]),
        ("pointer at infinity", InputField.pointer, ProtoWriter().uint(1, 3).float(3, .infinity), ["pointer y inf"]),
        ("pointer far away", InputField.pointer, ProtoWriter().uint(1, 3).float(2, 1e9), ["pointer x"]),
        ("scroll of NaN", InputField.pointer, ProtoWriter().uint(1, 4).float(7, .nan), ["scroll_y"]),
        ("down of button 0", InputField.pointer, ProtoWriter().uint(1, 1), ["button 0", "1…8"]),
        ("down of button 9", InputField.pointer, ProtoWriter().uint(1, 1).uint(4, 9), ["button 9"]),
        ("move naming a button", InputField.pointer, ProtoWriter().uint(1, 3).uint(4, 2), ["names button 2"]),
        ("buttons beyond 8", InputField.pointer, ProtoWriter().uint(1, 3).uint(5, 0x100), ["buttons mask 256"]),
        ("undefined modifier", InputField.pointer, ProtoWriter().uint(1, 3).uint(8, 64), ["modifiers 64"]),
        ("key code 0", InputField.key, ProtoWriter().uint(1, 1), ["key code 0"]),
        ("key code 65536", InputField.key, ProtoWriter().uint(2, 65_536), ["key code 65536"]),
        ("key text too long", InputField.key, ProtoWriter().uint(2, 4).string(3, String(repeating: "a", count: 65)), ["key text"]),
        ("key text not UTF-8", InputField.key, ProtoWriter().uint(2, 4).bytes(3, [0xFF, 0xFE]), ["key text"]),
        ("empty text input", InputField.textInput, ProtoWriter(), ["text_input of 0 bytes"]),
        ("text input too long", InputField.textInput, ProtoWriter().string(1, String(repeating: "a", count: 4_097)), ["text_input text"]),
        ("unknown media command", InputField.remoteControl, ProtoWriter().uint(1, 8), ["remote_control command 8"]),
        ("no media command", InputField.remoteControl, ProtoWriter(), ["remote_control command 0"]),
        ("no style", InputField.traits, ProtoWriter().uint(3, 1000), ["traits style 0"]),
        ("focus lost with a direction", InputField.focus, ProtoWriter().uint(2, 1), ["focus lost with a direction (1)"]),
        ("focus direction 7", InputField.focus, ProtoWriter().uint(1, 1).uint(2, 7), ["focus direction 7"]),
        ("font scale 0", InputField.traits, ProtoWriter().uint(1, 1), ["font scale 0‰"]),
        ("font scale 5×", InputField.traits, ProtoWriter().uint(1, 2).uint(3, 5_000), ["font scale 5000‰"]),
    ]

    @Test("impossible input values are protocol violations that name them", arguments: 0..<hostile.count)
    func rejects(_ index: Int) {
        let (_, field, body, words) = Self.hostile[index]
        expectViolation(envelopePacket(field, body), mentioning: words)
    }

    @Test("the same impossible values are refused when sending")
    func encodeRejects() {
        expectEncodeRejected(Envelope(id: 1, body: .input(.pointer(PointerEvent(.moved, x: .nan, y: 0)))), mentioning: "pointer x nan")
        expectEncodeRejected(Envelope(id: 1, body: .input(.text(""))), mentioning: "text_input of 0 bytes")
        expectEncodeRejected(Envelope(id: 1, body: .input(.traits(Traits(fontScalePermille: 100)))), mentioning: "font scale 100‰")
        // protobuf-c strings end at NUL: text with one would arrive cut short.
        expectEncodeRejected(Envelope(id: 1, body: .input(.text("a\0b"))), mentioning: "text_input contains NUL")
        expectEncodeRejected(Envelope(id: 1, body: .input(.key(KeyEvent(keyCode: 4, text: "\0")))), mentioning: "contains NUL")
    }

    @Test("input is a family of its own, named by the schema, carrying no fds")
    func family() {
        let body = Envelope.Body.input(.text("a"))
        #expect(body.name == "text_input")
        #expect(body.allowedAttachments == 0...0)
        #expect(!body.isReply)
    }
}
