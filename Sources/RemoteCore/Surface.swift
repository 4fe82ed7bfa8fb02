/// Geometry and buffer descriptions of surfaces (docs/Protocol.md, "Surfaces"): what a service
/// says about the buffers it draws into, and what the host says back. Validated on the way in, like every
/// wire value, so a surface handler never sees an impossible size or an overflowing stride.

/// The limits surface messages live within.
public enum SurfaceLimits {
    /// The largest width or height of a buffer, a rect or a view, in pixels.
    public static let maxDimension = 16_384
    /// The largest buffer, in bytes (stride × height).
    public static let maxBufferBytes = 256 * 1024 * 1024
    /// The most damage rects in one commit.
    public static let maxDamageRects = 128
    /// The scale range, in thousandths (0.25× … 8×).
    public static let scalePermille: ClosedRange<Int> = 250...8_000
}

/// How a buffer's pixels are laid out.
public enum PixelFormat: Sendable, Hashable {
    /// 32-bit words with premultiplied alpha: bytes B, G, R, A on little-endian (Cairo's ARGB32).
    case argb8888Premultiplied

    /// Bytes per pixel.
    public var bytesPerPixel: Int { 4 }
}

/// A rectangle in pixels.
public struct PixelRect: Sendable, Hashable, CustomStringConvertible {
    public var x: Int
    public var y: Int
    public var width: Int
    public var height: Int

    public init(x: Int, y: Int, width: Int, height: Int) {
        self.x = x
        self.y = y
        self.width = width
        self.height = height
    }

    /// The part of this rect inside `bounds` (0, 0, width, height), or `nil` if none is.
    public func clipped(toWidth width: Int, height: Int) -> PixelRect? {
        let left = max(x, 0), top = max(y, 0)
        let right = min(x + self.width, width), bottom = min(y + self.height, height)
        guard right > left, bottom > top else { return nil }
        return PixelRect(x: left, y: top, width: right - left, height: bottom - top)
    }

    /// The smallest rect containing all of `rects` (a zero rect when there are none).
    public static func union(_ rects: [PixelRect]) -> PixelRect {
        guard let first = rects.first else { return PixelRect(x: 0, y: 0, width: 0, height: 0) }
        var left = first.x, top = first.y, right = first.x + first.width, bottom = first.y + first.height
        for rect in rects.dropFirst() {
            left = min(left, rect.x)
            top = min(top, rect.y)
            right = max(right, rect.x + rect.width)
            bottom = max(bottom, rect.y + rect.height)
        }
        return PixelRect(x: left, y: top, width: right - left, height: bottom - top)
    }

    /// Whether the two rects share any pixel.
    public func intersects(_ other: PixelRect) -> Bool {
        x < other.x + other.width && other.x < x + width && y < other.y + other.height && other.y < y + height
    }

    public var description: String { "\(width)×\(height) at (\(x), \(y))" }
}

/// A buffer a service attaches: its id, size, row stride and format. Its memfd travels with it.
public struct BufferDescription: Sendable, Hashable {
    /// The service's id for it; never 0.
    public var id: UInt32
    public var width: Int
    public var height: Int
    /// Bytes per row.
    public var stride: Int
    public var format: PixelFormat

    public init(id: UInt32, width: Int, height: Int, stride: Int, format: PixelFormat = .argb8888Premultiplied) {
        self.id = id
        self.width = width
        self.height = height
        self.stride = stride
        self.format = format
    }

    /// The bytes the buffer must hold: stride × height.
    public var byteCount: Int { stride * height }

    /// Why this description is impossible, or `nil` when it is fine. Overflow-safe.
    public var problem: String? {
        guard id != 0 else { return "buffer id 0" }
        let dimensions = 1...SurfaceLimits.maxDimension
        guard dimensions.contains(width), dimensions.contains(height) else {
            return "buffer \(id) is \(width)×\(height); each side must be 1…\(SurfaceLimits.maxDimension)"
        }
        let (minimum, _) = width.multipliedReportingOverflow(by: format.bytesPerPixel)
        guard stride >= minimum, stride % 4 == 0 else {
            return "buffer \(id) has stride \(stride); it must be a multiple of 4 and at least \(minimum) (width \(width) × \(format.bytesPerPixel))"
        }
        let (bytes, overflow) = stride.multipliedReportingOverflow(by: height)
        guard !overflow, bytes <= SurfaceLimits.maxBufferBytes else {
            return "buffer \(id) needs \(overflow ? "more than Int.max" : String(bytes)) bytes (stride \(stride) × height \(height)); at most \(SurfaceLimits.maxBufferBytes)"
        }
        return nil
    }
}

/// The size a host gives a view: points and pixels per point.
public struct SurfaceSize: Sendable, Hashable {
    public var width: Int
    public var height: Int
    /// Pixels per point, in thousandths (1000 = 1×).
    public var scalePermille: Int

    public init(width: Int, height: Int, scalePermille: Int = 1000) {
        self.width = width
        self.height = height
        self.scalePermille = scalePermille
    }

    /// The size in pixels: each side is points × scale ÷ 1000, rounded to the nearest
    /// integer, halves up (`(points × scalePermille + 500) / 1000` in integers), and at least 1
    /// (as Wayland's fractional scale rounds). The buffers a service commits have exactly this size.
    public var pixels: (width: Int, height: Int) {
        (Self.pixels(width, scalePermille), Self.pixels(height, scalePermille))
    }

    private static func pixels(_ points: Int, _ scalePermille: Int) -> Int {
        max(1, (points * scalePermille + 500) / 1000)
    }

    /// Why this size is impossible, or `nil` when it is fine: each side 1…16384 points, the
    /// scale 250…8000‰, and in pixels at most 16384 a side and `maxBufferBytes` as ARGB.
    public var problem: String? {
        let dimensions = 1...SurfaceLimits.maxDimension
        guard dimensions.contains(width), dimensions.contains(height) else {
            return "size \(width)×\(height); each side must be 1…\(SurfaceLimits.maxDimension)"
        }
        guard SurfaceLimits.scalePermille.contains(scalePermille) else {
            return "scale \(scalePermille)‰ is outside \(SurfaceLimits.scalePermille)‰"
        }
        let (pixelWidth, pixelHeight) = pixels
        guard pixelWidth <= SurfaceLimits.maxDimension, pixelHeight <= SurfaceLimits.maxDimension,
              pixelWidth * pixelHeight * 4 <= SurfaceLimits.maxBufferBytes else {
            return "size \(width)×\(height) at scale \(scalePermille)‰ is \(pixelWidth)×\(pixelHeight) pixels; a buffer has at most \(SurfaceLimits.maxDimension) a side and \(SurfaceLimits.maxBufferBytes) bytes"
        }
        return nil
    }
}

/// One message of the surface family, in either direction: service → host pixels, host →
/// service size and pacing. (The host's input is a family of its own, ``InputEvent``.)
package enum SurfaceMessage: Sendable, Hashable {
    /// Service → host, with the buffer's memfd.
    case attachBuffer(BufferDescription)
    /// Service → host: the buffer shows frame `frame`; `damage` (empty: all of it) is new.
    case commit(bufferID: UInt32, damage: [PixelRect], frame: UInt64)
    /// Host → service.
    case releaseBuffer(UInt32)
    /// Host → service.
    case frameDone(frame: UInt64)
    /// Service → host.
    case destroyBuffer(UInt32)
    /// Host → service.
    case resize(SurfaceSize)
    /// Service → host (a scale of 1000 is sent, and ignored).
    case preferredSize(width: Int, height: Int)
    /// Service → host, to a host that announced `restorable-state`: the view's state now.
    case restorableState(RestorableStateWire)
    /// Host → service that announced `restorable-state`, before the first resize: the state
    /// the view had when its last process ended.
    case restoreState(RestorableStateWire)
    /// Service → host that announced `focus-leave`: Tab (or Shift-Tab) went past the view's
    /// last (or first) control; the host's controls take the focus.
    case focusLeave(FocusDirection)
    /// Service → host that announced `accessibility`: nodes of the view's semantic tree that
    /// changed, and the focus (one part of an update when it says `more`).
    case accessibilityUpdate(AccessibilityUpdateWire)
    /// Host → service that announced `accessibility`: an assistive technology's action on a node.
    case accessibilityAction(AccessibilityActionWire)

    /// Which side may send it.
    package var sender: PeerRole {
        switch self {
        case .attachBuffer, .commit, .destroyBuffer, .preferredSize, .restorableState, .focusLeave, .accessibilityUpdate: .service
        case .releaseBuffer, .frameDone, .resize, .restoreState, .accessibilityAction: .host
        }
    }

    /// The schema's name, for error messages.
    package var name: String {
        switch self {
        case .attachBuffer: "attach_buffer"
        case .commit: "commit"
        case .releaseBuffer: "release_buffer"
        case .frameDone: "frame_done"
        case .destroyBuffer: "destroy_buffer"
        case .resize: "resize"
        case .preferredSize: "preferred_size"
        case .restorableState: "restorable_state"
        case .restoreState: "restore_state"
        case .focusLeave: "focus_leave"
        case .accessibilityUpdate: "accessibility_update"
        case .accessibilityAction: "accessibility_action"
        }
    }

    /// Why this message is impossible, or `nil` when it is fine.
    package var problem: String? {
        switch self {
        case .attachBuffer(let buffer):
            return buffer.problem
        case .commit(let id, let damage, _):
            guard id != 0 else { return "commit of buffer id 0" }
            guard damage.count <= SurfaceLimits.maxDamageRects else {
                return "commit of buffer \(id) has \(damage.count) damage rects; at most \(SurfaceLimits.maxDamageRects)"
            }
            let sides = 1...SurfaceLimits.maxDimension, origins = -SurfaceLimits.maxDimension...SurfaceLimits.maxDimension
            for (index, rect) in damage.enumerated()
            where !sides.contains(rect.width) || !sides.contains(rect.height) || !origins.contains(rect.x) || !origins.contains(rect.y) {
                return "commit of buffer \(id): damage rect \(index) (\(rect)) is out of bounds"
            }
            return nil
        case .releaseBuffer(let id), .destroyBuffer(let id):
            return id == 0 ? "\(name) of buffer id 0" : nil
        case .frameDone, .focusLeave:
            return nil
        case .resize(let size):
            return size.problem
        case .preferredSize(let width, let height):
            return SurfaceSize(width: width, height: height).problem
        case .restorableState(let state), .restoreState(let state):
            return state.problem(in: name)
        case .accessibilityUpdate(let update):
            return update.problem?.reason
        case .accessibilityAction(let action):
            return action.problem
        }
    }
}
