import RemoteCore
import struct Synchronization.Atomic

/// The host's copy of what a service drew, composited from its commits: premultiplied ARGB32
/// words, row after row. ``RemoteImage`` is the public, read-only face of it.
package struct CompositedImage: Sendable, Equatable {
    package var width: Int
    package var height: Int
    package var pixels: [UInt32]

    package init(width: Int, height: Int) {
        self.width = width
        self.height = height
        pixels = [UInt32](repeating: 0, count: width * height)
    }

    /// The word at (`x`, `y`).
    package func pixel(x: Int, y: Int) -> UInt32 { pixels[y * width + x] }
}

/// The host's side of one service surface: the buffers the service attached, the image the host
/// shows, and the rules a service must follow (docs/Protocol.md, "Surfaces").
///
/// A commit's damage is copied from the service's buffer into the host's own image at once, so
/// the image never changes behind a reader's back. The buffer is released, and the next frame
/// allowed, only when the host ``present()``s the frame: a service may have one frame in flight,
/// and a commit before its frame_done is a flood. Every broken rule is a `RemoteError`
/// `protocolViolation` naming it; the caller ends the service.
package final class SurfaceCompositor: Sendable {
    private struct State {
        var buffers: [UInt32: MappedBuffer] = [:]
        /// The committed frame and buffer the host holds until it presents them.
        var inFlight: (frame: UInt64, buffer: UInt32)?
        var lastFrame: UInt64?
        var image = CompositedImage(width: 0, height: 0)
        var preferredSize: (width: Int, height: Int)?
        /// The distinct sizes in pixels the host gave the view, the latest last: a commit
        /// answers one of them (a service may still draw for an older one while newer ones are
        /// on their way, as during a window drag).
        var sizes: [(width: Int, height: Int)] = []
        /// Frames of a remote view's stream the host has not presented yet (at most
        /// ``maxRemoteFramesInFlight``), oldest first.
        var remoteInFlight: [UInt64] = []
    }

    /// The most frames of a remote view in flight across the network: a frame's
    /// `presented` need not come back before the next is sent, so a link's round trip does not
    /// cost each frame (docs/Gateway.md, "Views").
    package static let maxRemoteFramesInFlight = 2

    /// How many distinct sizes a commit may answer: the last ones the host gave. Not cut when a
    /// newer size is committed: two resizes recorded in one order may be written in the other.
    package static let sizesKept = 64

    /// The most buffers one surface may have attached at once.
    package static let maxBuffers = 8

    /// The most bytes one surface may have mapped at once: two buffers of the largest size
    /// (`SurfaceLimits.maxBufferBytes`, 256 MiB), enough for double buffering at 16384 × 4096.
    package static let maxMappedBytes = 2 * SurfaceLimits.maxBufferBytes

    private let state = Mutex(State())
    /// What every surface of the same service process maps together, when it is counted.
    private let budget: SharedBudget?
    /// Whether a commit must be of a size the host gave (``sizeGiven(_:)``).
    private let checksSize: Bool

    /// A compositor whose buffers count against `budget` (the service process's, shared by all
    /// its surfaces), if given; with `checksSize`, a committed buffer must have a size the host
    /// gave with ``sizeGiven(_:)``.
    package init(budget: SharedBudget? = nil, checksSize: Bool = false) {
        self.budget = budget
        self.checksSize = checksSize
    }

    /// A compositor for a new process of the same view: no buffers, the image kept until it draws.
    package init(keeping image: CompositedImage, budget: SharedBudget? = nil, checksSize: Bool = false) {
        self.budget = budget
        self.checksSize = checksSize
        state.withLock { $0.image = image }
    }

    /// The host is sending `size` to the service: a commit of a buffer of its pixel size is
    /// allowed from now on, as long as it is one of the last ``sizesKept`` distinct sizes given.
    package func sizeGiven(_ size: SurfaceSize) {
        let pixels = size.pixels
        state.withLock { state in
            state.sizes.removeAll { $0 == pixels }
            state.sizes.append(pixels)
            if state.sizes.count > Self.sizesKept { state.sizes.removeFirst(state.sizes.count - Self.sizesKept) }
        }
    }

    deinit {
        // Its buffers are unmapped with it.
        budget?.release(state.withLock { $0.buffers.values.reduce(0) { $0 + $1.layout.byteCount } })
    }

    /// The image as of the last commit.
    package var image: CompositedImage { state.withLock { $0.image } }

    /// Runs `body` on the image while no commit can change it, without keeping a copy.
    package func withImage<R>(_ body: (CompositedImage) throws -> R) rethrows -> R {
        try state.withLock { try body($0.image) }
    }

    /// The size the service asked for, if it did.
    package var preferredSize: (width: Int, height: Int)? { state.withLock { $0.preferredSize } }

    /// Applies one message from the service. Returns the damage a commit copied into the image
    /// (the whole image when the size changed or the commit named no rects).
    @discardableResult
    package func receive(_ message: SurfaceMessage, attachments: [Attachment]) throws(RemoteError) -> [PixelRect] {
        // The codec checked this already; checked again so that every value below is bounded
        // (±16384, sides 1…16384) whoever the caller is, and the arithmetic cannot overflow.
        if let problem = message.problem { throw violation(problem) }
        switch message {
        case .attachBuffer(let layout):
            guard attachments.count == 1, let fd = attachments[0].take() else {
                throw violation("attach_buffer of buffer \(layout.id) without its memfd")
            }
            // Counted before anything is mapped.
            let mappedBefore = state.withLock { $0.buffers.values.reduce(0) { $0 + $1.layout.byteCount } }
            guard mappedBefore + layout.byteCount <= Self.maxMappedBytes else {
                throw violation("attach_buffer of buffer \(layout.id) (\(layout.byteCount) bytes) would map \(mappedBefore + layout.byteCount) bytes, more than the \(Self.maxMappedBytes) one surface may map")
            }
            // And against what the process's surfaces map together.
            if let budget, !budget.reserve(layout.byteCount) {
                throw violation("attach_buffer of buffer \(layout.id) (\(layout.byteCount) bytes) would map \(budget.used + layout.byteCount) bytes across the service's surfaces, more than the \(budget.limit) one service process may map")
            }
            let mapped: MappedBuffer
            do throws(RemoteError) {
                mapped = try MappedBuffer(mapping: fd, as: layout)  // fd closes here; the mapping stays
            } catch {
                budget?.release(layout.byteCount)
                throw error
            }
            try state.withLock { (state) throws(RemoteError) in
                // Not kept: what it reserved goes back (the mapping goes with `mapped`).
                var kept = false
                defer { if !kept { budget?.release(layout.byteCount) } }
                guard state.buffers[layout.id] == nil else { throw violation("buffer \(layout.id) is attached twice") }
                guard state.buffers.count < Self.maxBuffers else {
                    throw violation("more than \(Self.maxBuffers) buffers attached at once")
                }
                let total = state.buffers.values.reduce(0) { $0 + $1.layout.byteCount } + layout.byteCount
                guard total <= Self.maxMappedBytes else {
                    throw violation("attach_buffer of buffer \(layout.id) (\(layout.byteCount) bytes) would map \(total) bytes, more than the \(Self.maxMappedBytes) one surface may map")
                }
                state.buffers[layout.id] = mapped
                kept = true
            }
            return []
        case .commit(let id, let damage, let frame):
            return try state.withLock { (state) throws(RemoteError) -> [PixelRect] in
                guard let buffer = state.buffers[id] else { throw violation("commit of buffer \(id), which is not attached") }
                if let inFlight = state.inFlight {
                    throw violation(inFlight.buffer == id
                        ? "commit of buffer \(id) before the host released it (frame \(inFlight.frame) is still in flight)"
                        : "commit of frame \(frame) before frame_done of frame \(inFlight.frame): at most one frame may be in flight")
                }
                if let last = state.lastFrame, frame <= last {
                    throw violation("commit of frame \(frame) after frame \(last): frame numbers must increase")
                }
                let layout = buffer.layout
                if checksSize, !state.sizes.contains(where: { $0 == (layout.width, layout.height) }) {
                    guard let latest = state.sizes.last else {
                        throw violation("commit of buffer \(id) before the host gave the view a size")
                    }
                    throw violation("commit of buffer \(id) at \(layout.width)×\(layout.height) pixels, but the view is \(latest.width)×\(latest.height) pixels (points × scale, rounded)\(state.sizes.count > 1 ? ", and none of the \(state.sizes.count - 1) other sizes given before" : "")")
                }
                // Damage names what changed in the buffer: a rect reaching outside it is a lie.
                for (index, rect) in damage.enumerated()
                where rect.x < 0 || rect.y < 0 || rect.x + rect.width > layout.width || rect.y + rect.height > layout.height {
                    throw violation("commit of buffer \(id): damage rect \(index) (\(rect)) is outside the buffer (\(layout.width)×\(layout.height))")
                }
                let applied = Self.composite(buffer, damage: damage, into: &state.image)
                state.inFlight = (frame, id)
                state.lastFrame = frame
                return applied
            }
        case .destroyBuffer(let id):
            try state.withLock { (state) throws(RemoteError) in
                guard state.buffers[id] != nil else { throw violation("destroy_buffer of buffer \(id), which is not attached") }
                guard state.inFlight?.buffer != id else { throw violation("destroy_buffer of buffer \(id) while the host holds it") }
                if let removed = state.buffers.removeValue(forKey: id) { budget?.release(removed.layout.byteCount) }
            }
            return []
        case .preferredSize(let width, let height):
            state.withLock { $0.preferredSize = (width, height) }
            return []
        case .restorableState, .focusLeave, .accessibilityUpdate:
            // The view's state, focus and tree are the view's to keep (RemoteView), not the image's.
            return []
        case .releaseBuffer, .frameDone, .resize, .restoreState, .accessibilityAction:
            throw violation("\(message.name) is the host's to send")
        }
    }

    /// The host has shown the frame in flight: the messages that hand its buffer back and allow
    /// the next frame (release_buffer, frame_done), or none when no frame is in flight.
    package func present() -> [SurfaceMessage] {
        state.withLock { state in
            guard let inFlight = state.inFlight else { return [] }
            state.inFlight = nil
            return [.releaseBuffer(inFlight.buffer), .frameDone(frame: inFlight.frame)]
        }
    }

    /// Applies frame `frame` of a remote view's stream (composited on the far machine): it must
    /// have a size the host gave, a number above the last, and at most
    /// ``maxRemoteFramesInFlight`` frames may wait to be presented; `write` then changes the
    /// image (all zero first when the size changed). Returns the damage (all of the image when
    /// the size changed).
    package func receiveRemote(frame: UInt64, width: Int, height: Int, damage: [PixelRect],
                               write: (UnsafeMutableBufferPointer<UInt32>) throws(RemoteError) -> Void) throws(RemoteError) -> [PixelRect] {
        try state.withLock { (state) throws(RemoteError) -> [PixelRect] in
            guard state.remoteInFlight.count < Self.maxRemoteFramesInFlight else {
                throw violation("frame \(frame) arrived while frames \(state.remoteInFlight.map(String.init).joined(separator: " and ")) wait to be presented: at most \(Self.maxRemoteFramesInFlight) may be in flight")
            }
            if let last = state.lastFrame, frame <= last {
                throw violation("frame \(frame) after frame \(last): frame numbers must increase")
            }
            try Self.check(frame: frame, width: width, height: height, sizes: checksSize ? state.sizes : nil)
            // `write` checks the whole frame before it writes, so a frame that breaks a rule
            // changes nothing; a new size is written into a new image, kept once it is whole.
            let resized = state.image.width != width || state.image.height != height
            if resized {
                var image = CompositedImage(width: width, height: height)
                try image.pixels.withUnsafeMutableBufferPointer { (pixels) throws(RemoteError) in try write(pixels) }
                state.image = image
            } else {
                try state.image.pixels.withUnsafeMutableBufferPointer { (pixels) throws(RemoteError) in try write(pixels) }
            }
            state.remoteInFlight.append(frame)
            state.lastFrame = frame
            return resized ? [PixelRect(x: 0, y: 0, width: width, height: height)] : damage
        }
    }

    /// Checks that a remote frame of `width` × `height` pixels answers a size the host gave,
    /// before anything of it is read further (its payload is bounded by that size).
    package func checkRemoteSize(frame: UInt64, width: Int, height: Int) throws(RemoteError) {
        let sizes = state.withLock { $0.sizes }
        try Self.check(frame: frame, width: width, height: height, sizes: checksSize ? sizes : nil)
    }

    private static func check(frame: UInt64, width: Int, height: Int, sizes: [(width: Int, height: Int)]?) throws(RemoteError) {
        guard let sizes, !sizes.contains(where: { $0 == (width, height) }) else { return }
        guard let latest = sizes.last else { throw RemoteError(.protocolViolation, "frame \(frame) before the host gave the view a size") }
        throw RemoteError(.protocolViolation, "frame \(frame) at \(width)×\(height) pixels, but the view is \(latest.width)×\(latest.height) pixels\(sizes.count > 1 ? ", and none of the \(sizes.count - 1) other sizes given before" : "")")
    }

    /// The host has shown the remote frames in flight: the newest of them, to acknowledge with
    /// every one before it (`nil`: none waits).
    package func presentRemote() -> UInt64? {
        state.withLock { state in
            defer { state.remoteInFlight = [] }
            return state.remoteInFlight.last
        }
    }

    /// The attached buffers, by id.
    package var attachedLayouts: [BufferDescription] {
        state.withLock { $0.buffers.values.map(\.layout).sorted { $0.id < $1.id } }
    }

    /// The ids of the attached buffers.
    package var attachedBuffers: Set<UInt32> { state.withLock { Set($0.buffers.keys) } }

    /// How many pixels committing `message` would copy, at most `cap` (0 for anything but a
    /// commit of an attached buffer): the whole buffer when the damage is empty or the size
    /// changes, else the damaged rects' areas (each side clamped to the buffer's bounds).
    package func pixelsToCopy(for message: SurfaceMessage, cap: Int) -> Int {
        guard case .commit(let id, let damage, _) = message else { return 0 }
        return state.withLock { state -> Int in
            guard let layout = state.buffers[id]?.layout else { return 0 }
            if damage.isEmpty || state.image.width != layout.width || state.image.height != layout.height {
                return min(layout.width * layout.height, cap)
            }
            var pixels = 0
            for rect in damage {
                pixels += min(max(rect.width, 0), layout.width) * min(max(rect.height, 0), layout.height)
                if pixels >= cap { return cap }
            }
            return pixels
        }
    }

    /// Copies the damaged rows of `buffer` into `image` (resizing it, and damaging all of it,
    /// when the sizes differ). Every rect of `damage` is inside the buffer. Returns the rects copied.
    private static func composite(_ buffer: MappedBuffer, damage: [PixelRect], into image: inout CompositedImage) -> [PixelRect] {
        let layout = buffer.layout
        let whole = PixelRect(x: 0, y: 0, width: layout.width, height: layout.height)
        var rects: [PixelRect]
        if image.width != layout.width || image.height != layout.height {
            image = CompositedImage(width: layout.width, height: layout.height)
            rects = [whole]
        } else {
            rects = damage.isEmpty ? [whole] : damage
        }
        let width = image.width
        image.pixels.withUnsafeMutableBytes { target in
            for rect in rects {
                // Whole rows of a buffer without padding are one block: one copy.
                if rect.x == 0 && rect.width == width && layout.stride == width * 4 {
                    (target.baseAddress! + rect.y * width * 4).copyMemory(from: buffer.base + rect.y * layout.stride,
                                                                         byteCount: rect.height * width * 4)
                    continue
                }
                for row in rect.y..<(rect.y + rect.height) {
                    let source = buffer.base + row * layout.stride + rect.x * 4
                    let destination = target.baseAddress! + (row * width + rect.x) * 4
                    destination.copyMemory(from: source, byteCount: rect.width * 4)
                }
            }
        }
        return rects
    }

    private func violation(_ reason: String) -> RemoteError {
        RemoteError(.protocolViolation, reason)
    }
}
