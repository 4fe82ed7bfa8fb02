import CProto

/// The input family (fields 200–205): pointer, keys, text, focus, media commands and the host's
/// appearance, host → service. See `docs/Protocol.md`, "Input".
extension EnvelopeCodec {
    /// The input body of `e`, validated; `nil` when `e` carries another family.
    static func decodeInput(_ e: Remoteview__Envelope) throws(RemoteError) -> Envelope.Body? {
        switch e.body_case {
        case REMOTEVIEW__ENVELOPE__BODY_POINTER:
            let p = e.pointer.pointee
            let phase: PointerEvent.Phase
            switch p.phase {
            case REMOTEVIEW__POINTER_PHASE__POINTER_PHASE_DOWN: phase = .down
            case REMOTEVIEW__POINTER_PHASE__POINTER_PHASE_UP: phase = .up
            case REMOTEVIEW__POINTER_PHASE__POINTER_PHASE_MOVE: phase = .moved
            case REMOTEVIEW__POINTER_PHASE__POINTER_PHASE_SCROLL: phase = .scroll
            default: throw violation("pointer phase \(p.phase.rawValue) is not down, up, move or scroll")
            }
            guard p.button <= 8 else { throw violation("pointer \(phase) of button \(p.button); buttons are 1…8") }
            return try input(.pointer(PointerEvent(phase, x: Double(p.x), y: Double(p.y), button: Int(p.button), buttons: p.buttons,
                                                   scrollX: Double(p.scroll_x), scrollY: Double(p.scroll_y),
                                                   modifiers: Modifiers(rawValue: p.modifiers))))
        case REMOTEVIEW__ENVELOPE__BODY_KEY:
            let k = e.key.pointee
            return try input(.key(KeyEvent(down: k.down != 0, keyCode: k.key_code,
                                           text: try string(k.text, "key text", max: InputLimits.maxKeyTextBytes),
                                           modifiers: Modifiers(rawValue: k.modifiers), isRepeat: k.repeat != 0)))
        case REMOTEVIEW__ENVELOPE__BODY_TEXT_INPUT:
            return try input(.text(try string(e.text_input.pointee.text, "text_input text", max: InputLimits.maxTextBytes)))
        case REMOTEVIEW__ENVELOPE__BODY_FOCUS:
            let f = e.focus.pointee
            switch (f.focused != 0, f.direction) {
            case (_, REMOTEVIEW__FOCUS_DIRECTION__FOCUS_DIRECTION_UNSPECIFIED): return try input(.focus(f.focused != 0))
            case (true, REMOTEVIEW__FOCUS_DIRECTION__FOCUS_DIRECTION_FORWARD): return try input(.focusEntering(.forward))
            case (true, REMOTEVIEW__FOCUS_DIRECTION__FOCUS_DIRECTION_BACKWARD): return try input(.focusEntering(.backward))
            case (false, REMOTEVIEW__FOCUS_DIRECTION__FOCUS_DIRECTION_FORWARD), (false, REMOTEVIEW__FOCUS_DIRECTION__FOCUS_DIRECTION_BACKWARD):
                throw violation("focus lost with a direction (\(f.direction.rawValue)); a direction goes only with focused")
            default: throw violation("focus direction \(f.direction.rawValue) is not unspecified, forward or backward")
            }
        case REMOTEVIEW__ENVELOPE__BODY_REMOTE_CONTROL:
            let command: RemoteCommand
            switch e.remote_control.pointee.command {
            case REMOTEVIEW__REMOTE_COMMAND__REMOTE_COMMAND_PLAY: command = .play
            case REMOTEVIEW__REMOTE_COMMAND__REMOTE_COMMAND_PAUSE: command = .pause
            case REMOTEVIEW__REMOTE_COMMAND__REMOTE_COMMAND_TOGGLE_PLAY_PAUSE: command = .togglePlayPause
            case REMOTEVIEW__REMOTE_COMMAND__REMOTE_COMMAND_NEXT_TRACK: command = .nextTrack
            case REMOTEVIEW__REMOTE_COMMAND__REMOTE_COMMAND_PREVIOUS_TRACK: command = .previousTrack
            case REMOTEVIEW__REMOTE_COMMAND__REMOTE_COMMAND_SEEK_FORWARD: command = .seekForward
            case REMOTEVIEW__REMOTE_COMMAND__REMOTE_COMMAND_SEEK_BACKWARD: command = .seekBackward
            default: throw violation("remote_control command \(e.remote_control.pointee.command.rawValue) is not a known command")
            }
            return try input(.remoteControl(command))
        case REMOTEVIEW__ENVELOPE__BODY_TRAITS:
            let t = e.traits.pointee
            let style: Traits.Style
            switch t.style {
            case REMOTEVIEW__INTERFACE_STYLE__INTERFACE_STYLE_LIGHT: style = .light
            case REMOTEVIEW__INTERFACE_STYLE__INTERFACE_STYLE_DARK: style = .dark
            default: throw violation("traits style \(t.style.rawValue) is not light or dark")
            }
            return try input(.traits(Traits(style: style, tint: Color(argb: t.tint_argb), fontScalePermille: Int(t.font_scale_permille))))
        default:
            return nil
        }
    }

    /// An input body, once its values are known to be possible.
    private static func input(_ event: InputEvent) throws(RemoteError) -> Envelope.Body {
        if let problem = event.problem { throw violation(problem) }
        return .input(event)
    }
}

extension CArena {
    /// Fills `e`'s body with an input message (already validated).
    func encode(_ event: InputEvent, into e: inout Remoteview__Envelope) {
        switch event {
        case .pointer(let pointer):
            let p = message(Remoteview__PointerEvent.self, remoteview__pointer_event__init)
            p.pointee.phase = switch pointer.phase {
            case .down: REMOTEVIEW__POINTER_PHASE__POINTER_PHASE_DOWN
            case .up: REMOTEVIEW__POINTER_PHASE__POINTER_PHASE_UP
            case .moved: REMOTEVIEW__POINTER_PHASE__POINTER_PHASE_MOVE
            case .scroll: REMOTEVIEW__POINTER_PHASE__POINTER_PHASE_SCROLL
            }
            p.pointee.x = Float(pointer.x)
            p.pointee.y = Float(pointer.y)
            p.pointee.button = UInt32(pointer.button)
            p.pointee.buttons = pointer.buttons
            p.pointee.scroll_x = Float(pointer.scrollX)
            p.pointee.scroll_y = Float(pointer.scrollY)
            p.pointee.modifiers = pointer.modifiers.rawValue
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_POINTER
            e.pointer = p
        case .key(let key):
            let k = message(Remoteview__KeyEvent.self, remoteview__key_event__init)
            k.pointee.down = key.isDown ? 1 : 0
            k.pointee.key_code = key.keyCode
            k.pointee.text = string(key.text)
            k.pointee.modifiers = key.modifiers.rawValue
            k.pointee.repeat = key.isRepeat ? 1 : 0
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_KEY
            e.key = k
        case .text(let text):
            let t = message(Remoteview__TextInput.self, remoteview__text_input__init)
            t.pointee.text = string(text)
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_TEXT_INPUT
            e.text_input = t
        case .focus(let focused):
            let f = message(Remoteview__Focus.self, remoteview__focus__init)
            f.pointee.focused = focused ? 1 : 0
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_FOCUS
            e.focus = f
        case .focusEntering(let direction):
            let f = message(Remoteview__Focus.self, remoteview__focus__init)
            f.pointee.focused = 1
            f.pointee.direction = direction.wire
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_FOCUS
            e.focus = f
        case .remoteControl(let command):
            let r = message(Remoteview__RemoteControl.self, remoteview__remote_control__init)
            r.pointee.command = switch command {
            case .play: REMOTEVIEW__REMOTE_COMMAND__REMOTE_COMMAND_PLAY
            case .pause: REMOTEVIEW__REMOTE_COMMAND__REMOTE_COMMAND_PAUSE
            case .togglePlayPause: REMOTEVIEW__REMOTE_COMMAND__REMOTE_COMMAND_TOGGLE_PLAY_PAUSE
            case .nextTrack: REMOTEVIEW__REMOTE_COMMAND__REMOTE_COMMAND_NEXT_TRACK
            case .previousTrack: REMOTEVIEW__REMOTE_COMMAND__REMOTE_COMMAND_PREVIOUS_TRACK
            case .seekForward: REMOTEVIEW__REMOTE_COMMAND__REMOTE_COMMAND_SEEK_FORWARD
            case .seekBackward: REMOTEVIEW__REMOTE_COMMAND__REMOTE_COMMAND_SEEK_BACKWARD
            }
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_REMOTE_CONTROL
            e.remote_control = r
        case .traits(let traits):
            let t = message(Remoteview__Traits.self, remoteview__traits__init)
            t.pointee.style = traits.style == .dark ? REMOTEVIEW__INTERFACE_STYLE__INTERFACE_STYLE_DARK : REMOTEVIEW__INTERFACE_STYLE__INTERFACE_STYLE_LIGHT
            t.pointee.tint_argb = traits.tint.argb
            t.pointee.font_scale_permille = UInt32(traits.fontScalePermille)
            e.body_case = REMOTEVIEW__ENVELOPE__BODY_TRAITS
            e.traits = t
        }
    }
}

extension FocusDirection {
    /// The schema's value.
    var wire: Remoteview__FocusDirection {
        switch self {
        case .forward: REMOTEVIEW__FOCUS_DIRECTION__FOCUS_DIRECTION_FORWARD
        case .backward: REMOTEVIEW__FOCUS_DIRECTION__FOCUS_DIRECTION_BACKWARD
        }
    }
}
