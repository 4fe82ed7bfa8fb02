/// Input a host sends to an embedded view (docs/Protocol.md, "Input"): pointer, keys, text, focus, media
/// commands and the host's appearance. Validated on the way in, like every wire value.

/// The limits input messages live within.
public enum InputLimits {
    /// The largest coordinate or scroll distance, in points, either sign.
    public static let maxCoordinate: Double = 16_384
    /// The most bytes of text in one ``InputEvent/text(_:)``.
    public static let maxTextBytes = 4_096
    /// The most bytes of text a ``KeyEvent`` may say it types.
    public static let maxKeyTextBytes = 64
    /// The font scale range, in thousandths.
    public static let fontScalePermille: ClosedRange<Int> = 500...4_000
}

/// Modifier keys held during an event.
public struct Modifiers: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public static let shift = Modifiers(rawValue: 1)
    public static let control = Modifiers(rawValue: 2)
    public static let alt = Modifiers(rawValue: 4)
    public static let meta = Modifiers(rawValue: 8)
    public static let capsLock = Modifiers(rawValue: 16)
    /// Every defined bit.
    public static let all: Modifiers = [.shift, .control, .alt, .meta, .capsLock]
}

/// A pointer event, in the view's points.
public struct PointerEvent: Sendable, Hashable {
    /// What the pointer did.
    public enum Phase: Sendable, Hashable {
        case down, up, moved, scroll
    }

    public var phase: Phase
    public var x: Double
    public var y: Double
    /// The button that went down or up (1 primary, 2 middle, 3 secondary); 0 otherwise.
    public var button: Int
    /// The buttons held, bit (button − 1) each.
    public var buttons: UInt32
    /// Points scrolled (``Phase/scroll`` only).
    public var scrollX: Double
    public var scrollY: Double
    public var modifiers: Modifiers

    public init(_ phase: Phase, x: Double, y: Double, button: Int = 0, buttons: UInt32 = 0,
                scrollX: Double = 0, scrollY: Double = 0, modifiers: Modifiers = []) {
        self.phase = phase
        self.x = x
        self.y = y
        self.button = button
        self.buttons = buttons
        self.scrollX = scrollX
        self.scrollY = scrollY
        self.modifiers = modifiers
    }

    /// Why this event is impossible, or `nil` when it is fine.
    public var problem: String? {
        let range = -InputLimits.maxCoordinate...InputLimits.maxCoordinate
        for (name, value) in [("x", x), ("y", y), ("scroll_x", scrollX), ("scroll_y", scrollY)]
        where !value.isFinite || !range.contains(value) {
            return "pointer \(name) \(value) is not a finite number of points within ±\(Int(InputLimits.maxCoordinate))"
        }
        switch phase {
        case .down, .up:
            guard (1...8).contains(button) else { return "pointer \(phase) of button \(button); buttons are 1…8" }
        case .moved, .scroll:
            guard button == 0 else { return "pointer \(phase) names button \(button); only down and up do" }
        }
        guard buttons <= 0xFF else { return "pointer buttons mask \(buttons) has bits beyond button 8" }
        guard Modifiers.all.isSuperset(of: modifiers) else { return "modifiers \(modifiers.rawValue) has undefined bits" }
        return nil
    }
}

/// A key going down or up. Typed text arrives separately, as ``InputEvent/text(_:)``.
public struct KeyEvent: Sendable, Hashable {
    /// Whether the key went down (or repeats) rather than up.
    public var isDown: Bool
    /// The key's USB HID usage (keyboard page), as SDL scancodes: see ``KeyCode``.
    public var keyCode: UInt32
    /// What the key types, if anything (informational, e.g. for shortcuts).
    public var text: String
    public var modifiers: Modifiers
    /// An auto-repeat of a held key.
    public var isRepeat: Bool

    public init(down isDown: Bool = true, keyCode: UInt32, text: String = "", modifiers: Modifiers = [], isRepeat: Bool = false) {
        self.isDown = isDown
        self.keyCode = keyCode
        self.text = text
        self.modifiers = modifiers
        self.isRepeat = isRepeat
    }

    /// Why this event is impossible, or `nil` when it is fine.
    public var problem: String? {
        guard (1...0xFFFF).contains(keyCode) else { return "key code \(keyCode) is not a HID usage in 1…65535" }
        guard text.utf8.count <= InputLimits.maxKeyTextBytes else {
            return "key \(keyCode) text of \(text.utf8.count) bytes; at most \(InputLimits.maxKeyTextBytes)"
        }
        guard !text.utf8.contains(0) else { return "key \(keyCode) text contains NUL" }
        guard Modifiers.all.isSuperset(of: modifiers) else { return "modifiers \(modifiers.rawValue) has undefined bits" }
        return nil
    }
}

/// Key codes (USB HID usages, the same numbers as SDL scancodes) the toolkit acts on.
public enum KeyCode {
    public static let a: UInt32 = 4
    public static let enter: UInt32 = 40
    public static let escape: UInt32 = 41
    public static let backspace: UInt32 = 42
    public static let tab: UInt32 = 43
    public static let space: UInt32 = 44
    public static let home: UInt32 = 74
    public static let delete: UInt32 = 76
    public static let end: UInt32 = 77
    public static let right: UInt32 = 79
    public static let left: UInt32 = 80
    public static let down: UInt32 = 81
    public static let up: UInt32 = 82
}

/// A media command, as headphone buttons and media keys send (`UIEvent.EventSubtype`'s remote
/// control subtypes).
public enum RemoteCommand: Sendable, Hashable, CaseIterable {
    case play, pause, togglePlayPause, nextTrack, previousTrack, seekForward, seekBackward
}

/// The host's appearance, passed down to the view (as `UITraitCollection`).
public struct Traits: Sendable, Hashable {
    /// Light or dark.
    public enum Style: Sendable, Hashable {
        case light, dark
    }

    public var style: Style
    /// The host's accent colour.
    public var tint: Color
    /// Multiplies every font size, in thousandths (1000: the author's sizes).
    public var fontScalePermille: Int

    public init(style: Style = .light, tint: Color = Color(argb: 0xFF1A_73E8), fontScalePermille: Int = 1000) {
        self.style = style
        self.tint = tint
        self.fontScalePermille = fontScalePermille
    }

    /// Light, a blue tint, fonts at the author's sizes.
    public static let standard = Traits()

    /// The font scale as a factor.
    public var fontScale: Double { Double(fontScalePermille) / 1000 }

    /// Why these traits are impossible, or `nil` when they are fine.
    public var problem: String? {
        InputLimits.fontScalePermille.contains(fontScalePermille) ? nil
            : "font scale \(fontScalePermille)‰ is outside \(InputLimits.fontScalePermille)‰"
    }
}

/// Which way the keyboard focus moves through a window's controls: Tab goes forward, Shift-Tab
/// backward (docs/Protocol.md, "Focus across the boundary").
public enum FocusDirection: Sendable, Hashable, CaseIterable {
    /// Tab: to the next control in reading order.
    case forward
    /// Shift-Tab: to the previous one.
    case backward
}

/// The capability a host and a service announce when they move the keyboard focus across the
/// boundary between them: the service tells the host when Tab leaves its view
/// (`focus_leave`), and the host says which way the focus comes back in (`Focus.direction`).
package enum FocusLeaveCapability {
    package static let name = "focus-leave"
}

/// One input message, host → service.
public enum InputEvent: Sendable, Hashable {
    case pointer(PointerEvent)
    case key(KeyEvent)
    /// Typed text, after the host's input method.
    case text(String)
    /// The view gained (`true`) or lost the keyboard focus.
    case focus(Bool)
    /// The view gains the keyboard focus by Tab (``FocusDirection/forward``: its first control
    /// takes it) or Shift-Tab (``FocusDirection/backward``: its last) from the host's controls.
    /// Sent as `focus` with its direction, to a service that announced `focus-leave`; the
    /// host's `RemoteView` turns it into plain `.focus(true)` for a service that did not.
    case focusEntering(FocusDirection)
    case remoteControl(RemoteCommand)
    case traits(Traits)

    /// The schema's name, for error messages.
    public var name: String {
        switch self {
        case .pointer: "pointer"
        case .key: "key"
        case .text: "text_input"
        case .focus, .focusEntering: "focus"
        case .remoteControl: "remote_control"
        case .traits: "traits"
        }
    }

    /// Why this event is impossible, or `nil` when it is fine.
    public var problem: String? {
        switch self {
        case .pointer(let event): event.problem
        case .key(let event): event.problem
        case .text(let text):
            !(1...InputLimits.maxTextBytes).contains(text.utf8.count) ? "text_input of \(text.utf8.count) bytes; it must be 1…\(InputLimits.maxTextBytes)"
                : text.utf8.contains(0) ? "text_input contains NUL" : nil
        case .focus, .focusEntering, .remoteControl: nil
        case .traits(let traits): traits.problem
        }
    }
}
