import Glibc
import RemoteCore
@testable import RemoteHost
import RemoteTestSupport
import Testing


/// The host's side of a surface, fed directly: what it composites, and every rule it enforces.
@Suite("Surface compositor")
struct SurfaceCompositorTests {
    /// A service-side buffer: a sealed memfd of `width`×`height` ARGB32 pixels, filled with `colour`.
    final class ServiceBuffer {
        let layout: BufferDescription
        let file: MemoryFile

        init(id: UInt32, width: Int, height: Int, colour: UInt32, seal: Bool = true, fill: Bool = true) throws {
            layout = BufferDescription(id: id, width: width, height: height, stride: width * 4)
            let file = try MemoryFile(name: "buffer-\(id)")
            try file.resize(to: layout.byteCount)
            if seal { try file.addSeals([.shrink, .grow]) }
            self.file = file
            if fill { try self.fill(PixelRect(x: 0, y: 0, width: width, height: height), colour) }
        }

        func fill(_ rect: PixelRect, _ colour: UInt32) throws {
            let row = [UInt8](withUnsafeBytes(of: colour.littleEndian, Array.init)).repeated(rect.width)
            for y in rect.y..<(rect.y + rect.height) { try file.write(row, at: y * layout.stride + rect.x * 4) }
        }

        func attach() throws -> (SurfaceMessage, [RemoteCore.Attachment]) {
            (.attachBuffer(layout), [try RemoteCore.Attachment(duplicating: file.fd)])
        }
    }

    static let red: UInt32 = 0xFFFF_0000, blue: UInt32 = 0xFF00_00FF, clear: UInt32 = 0

    @Test("a commit copies the buffer into the host's image, exactly; present hands the buffer back and allows the next frame")
    func composites() async throws {
        try await withoutLeaks {
            let compositor = SurfaceCompositor()
            let buffer = try ServiceBuffer(id: 1, width: 8, height: 4, colour: Self.red)
            let (attach, fds) = try buffer.attach()
            try compositor.receive(attach, attachments: fds)
            let damage = try compositor.receive(.commit(bufferID: 1, damage: [], frame: 1), attachments: [])
            #expect(damage == [PixelRect(x: 0, y: 0, width: 8, height: 4)], "a first frame damages everything")
            let image = compositor.image
            #expect(image.width == 8 && image.height == 4)
            #expect(image.pixels.allSatisfy { $0 == Self.red })
            #expect(compositor.present() == [.releaseBuffer(1), .frameDone(frame: 1)])
            #expect(compositor.present().isEmpty, "nothing in flight any more")
        }
    }

    @Test("points to pixels: each side rounded to the nearest pixel, halves up, at least 1; a size whose pixels exceed a buffer's bounds is refused, naming them")
    func pointsToPixels() {
        #expect(SurfaceSize(width: 33, height: 21, scalePermille: 1500).pixels == (50, 32))   // 49.5, 31.5
        #expect(SurfaceSize(width: 100, height: 81, scalePermille: 1500).pixels == (150, 122)) // 121.5
        #expect(SurfaceSize(width: 7, height: 5, scalePermille: 1250).pixels == (9, 6))        // 8.75, 6.25
        #expect(SurfaceSize(width: 1, height: 1, scalePermille: 250).pixels == (1, 1))         // 0.25
        #expect(SurfaceSize(width: 3, height: 3, scalePermille: 333).pixels == (1, 1))         // 0.999
        #expect(SurfaceSize(width: 16_384, height: 1, scalePermille: 1000).problem == nil)
        let tooWide = SurfaceSize(width: 4_096, height: 10, scalePermille: 8_000).problem
        #expect(tooWide?.contains("is 32768×80 pixels; a buffer has at most 16384 a side") == true, "\(tooWide ?? "nil")")
        let tooLarge = SurfaceSize(width: 16_384, height: 16_384, scalePermille: 1000).problem
        #expect(tooLarge?.contains("268435456 bytes") == true, "\(tooLarge ?? "nil")")
    }

    @Test("a commit must be of one of the last 64 distinct sizes the host gave: none given, or another size, is a violation naming the latest")
    func committedSize() async throws {
        try await withoutLeaks {
            let compositor = SurfaceCompositor(checksSize: true)
            let small = try ServiceBuffer(id: 1, width: 8, height: 4, colour: Self.red)
            let large = try ServiceBuffer(id: 2, width: 12, height: 6, colour: Self.blue)
            for buffer in [small, large] {
                let (attach, fds) = try buffer.attach()
                try compositor.receive(attach, attachments: fds)
            }
            #expect(throws: RemoteError(.protocolViolation, "commit of buffer 1 before the host gave the view a size")) {
                try compositor.receive(.commit(bufferID: 1, damage: [], frame: 1), attachments: [])
            }
            compositor.sizeGiven(SurfaceSize(width: 4, height: 2, scalePermille: 2000))  // 8×4
            compositor.sizeGiven(SurfaceSize(width: 8, height: 4, scalePermille: 1500))  // 12×6
            // The older size still answers (the newer resize may not have reached the service),
            // and so it does after the newer one was committed (two resizes sent from two tasks
            // may be written in the other order).
            for (buffer, frame) in [(UInt32(1), UInt64(1)), (2, 2), (1, 3)] {
                try compositor.receive(.commit(bufferID: buffer, damage: [], frame: frame), attachments: [])
                _ = compositor.present()
            }
            #expect(compositor.image.width == 8 && compositor.image.height == 4)
            // 64 other sizes later, 8×4 and 12×6 are gone.
            for width in 100..<(100 + SurfaceCompositor.sizesKept) { compositor.sizeGiven(SurfaceSize(width: width, height: 10)) }
            #expect(throws: RemoteError(.protocolViolation, "commit of buffer 1 at 8×4 pixels, but the view is 163×10 pixels (points × scale, rounded), and none of the 63 other sizes given before")) {
                try compositor.receive(.commit(bufferID: 1, damage: [], frame: 4), attachments: [])
            }
        }
    }

    @Test("the first frame number may be 0; the next must be larger")
    func firstFrameZero() async throws {
        try await withoutLeaks {
            let compositor = SurfaceCompositor()
            let buffer = try ServiceBuffer(id: 1, width: 4, height: 4, colour: Self.red)
            let (attach, fds) = try buffer.attach()
            try compositor.receive(attach, attachments: fds)
            try compositor.receive(.commit(bufferID: 1, damage: [], frame: 0), attachments: [])
            #expect(compositor.present() == [.releaseBuffer(1), .frameDone(frame: 0)])
            #expect(throws: RemoteError(.protocolViolation, "commit of frame 0 after frame 0: frame numbers must increase")) {
                try compositor.receive(.commit(bufferID: 1, damage: [], frame: 0), attachments: [])
            }
        }
    }

    @Test("only the damaged rects are copied")
    func damageOnly() async throws {
        try await withoutLeaks {
            let compositor = SurfaceCompositor()
            let buffer = try ServiceBuffer(id: 1, width: 8, height: 8, colour: Self.red)
            let (attach, fds) = try buffer.attach()
            try compositor.receive(attach, attachments: fds)
            try compositor.receive(.commit(bufferID: 1, damage: [], frame: 1), attachments: [])
            _ = compositor.present()
            // The service paints everything blue but declares only a 2×3 rect and the corner pixel.
            try buffer.fill(PixelRect(x: 0, y: 0, width: 8, height: 8), Self.blue)
            let declared = [PixelRect(x: 2, y: 1, width: 2, height: 3), PixelRect(x: 7, y: 7, width: 1, height: 1)]
            let damage = try compositor.receive(.commit(bufferID: 1, damage: declared, frame: 2), attachments: [])
            #expect(damage == declared)
            let image = compositor.image
            for y in 0..<8 {
                for x in 0..<8 {
                    let inside = (2..<4).contains(x) && (1..<4).contains(y) || (x == 7 && y == 7)
                    #expect(image.pixel(x: x, y: y) == (inside ? Self.blue : Self.red), "(\(x), \(y))")
                }
            }
        }
    }

    @Test("a buffer of a new size replaces the image (all damaged); the old buffer can be destroyed")
    func resize() async throws {
        try await withoutLeaks {
            let compositor = SurfaceCompositor()
            let small = try ServiceBuffer(id: 1, width: 4, height: 4, colour: Self.red)
            let large = try ServiceBuffer(id: 2, width: 16, height: 8, colour: Self.blue)
            for buffer in [small, large] {
                let (attach, fds) = try buffer.attach()
                try compositor.receive(attach, attachments: fds)
            }
            try compositor.receive(.commit(bufferID: 1, damage: [], frame: 1), attachments: [])
            _ = compositor.present()
            let damage = try compositor.receive(.commit(bufferID: 2, damage: [PixelRect(x: 0, y: 0, width: 1, height: 1)], frame: 2), attachments: [])
            #expect(damage == [PixelRect(x: 0, y: 0, width: 16, height: 8)])
            #expect(compositor.image.width == 16 && compositor.image.pixels.allSatisfy { $0 == Self.blue })
            try compositor.receive(.destroyBuffer(1), attachments: [])
            #expect(compositor.attachedBuffers == [2])
        }
    }

    /// (what the service does, words the violation must contain)
    static let violations: [(String, [String])] = [
        ("commit of a buffer never attached", ["buffer 9", "not attached"]),
        ("a second commit before frame_done (flood)", ["before frame_done of frame 1"]),
        ("the same buffer again before its release", ["before the host released it"]),
        ("frame numbers going back", ["frame 1 after frame 2"]),
        ("attaching one id twice", ["attached twice"]),
        ("destroying a buffer never attached", ["destroy_buffer of buffer 9"]),
        ("destroying the buffer the host holds", ["while the host holds it"]),
        ("an unsealed buffer", ["not sealed"]),
        ("attach without its memfd", ["without its memfd"]),
        ("sending what only the host sends", ["the host's to send"]),
        ("a damage rect past the right edge", ["commit of buffer 1: damage rect 0 (3×1 at (2, 0)) is outside the buffer (4×4)"]),
        ("a damage rect past the bottom edge, after a good one", ["damage rect 1 (4×2 at (0, 3)) is outside the buffer (4×4)"]),
        ("a damage rect left of the buffer", ["damage rect 0 (2×2 at (-1, 0)) is outside the buffer (4×4)"]),
        ("a damage rect above the buffer", ["damage rect 0 (1×1 at (0, -1)) is outside the buffer (4×4)"]),
        ("a damage rect of the same size as the buffer, shifted", ["damage rect 0 (4×4 at (1, 1)) is outside the buffer (4×4)"]),
        ("a damage rect no codec would pass (called directly)", ["damage rect 0 (0×-3 at (0, 0)) is out of bounds"]),
    ]

    @Test("one surface maps at most two buffers of the largest size: a third is a violation that names the bytes, and nothing more is mapped")
    func mappedBytesBound() async throws {
        try await withoutLeaks {
            let compositor = SurfaceCompositor()
            // 16384 × 4096 × 4 bytes = 256 MiB each, sparse: nothing is written, only mapped.
            let buffers = try (1...3).map { id in try ServiceBuffer(id: UInt32(id), width: 16_384, height: 4_096, colour: 0, fill: false) }
            for buffer in buffers.prefix(2) {
                let (message, fds) = try buffer.attach()
                try compositor.receive(message, attachments: fds)
            }
            let (message, fds) = try buffers[2].attach()
            let error = #expect(throws: RemoteError.self) { try compositor.receive(message, attachments: fds) }
            #expect(error?.code == .protocolViolation)
            #expect(error?.reason.contains("attach_buffer of buffer 3 (268435456 bytes) would map 805306368 bytes, more than the 536870912 one surface may map") == true,
                    "\(String(describing: error))")
        }
    }

    @Test("the surfaces of one process share a budget: an attach past it on any of them is a violation naming the total; a destroyed buffer, or a surface that goes, gives its bytes back; after a refusal nothing more is counted")
    func sharedMappingBudget() async throws {
        try await withoutLeaks {
            // 512 × 512 × 4 bytes = 1 MiB a buffer; three fit.
            let budget = SharedBudget(limit: 3 << 20)
            var first: SurfaceCompositor? = SurfaceCompositor(budget: budget)
            let second = SurfaceCompositor(budget: budget)
            let buffers = try (1...4).map { id in try ServiceBuffer(id: UInt32(id), width: 512, height: 512, colour: 0, fill: false) }
            func attach(_ buffer: ServiceBuffer, to compositor: SurfaceCompositor?) throws {
                let (message, fds) = try buffer.attach()
                try compositor?.receive(message, attachments: fds)
            }
            try attach(buffers[0], to: first)
            try attach(buffers[1], to: first)
            try attach(buffers[2], to: second)
            #expect(budget.used == 3 << 20)
            let error = #expect(throws: RemoteError.self) { try attach(buffers[3], to: second) }
            #expect(error?.code == .protocolViolation)
            #expect(error?.reason.contains("attach_buffer of buffer 4 (1048576 bytes) would map 4194304 bytes across the service's surfaces, more than the 3145728 one service process may map") == true,
                    "\(String(describing: error))")
            #expect(budget.used == 3 << 20, "a refused buffer counts for nothing")
            try first?.receive(.destroyBuffer(1), attachments: [])
            #expect(budget.used == 2 << 20)
            first = nil
            #expect(budget.used == 1 << 20, "the surface's last buffer went with it")
            #expect(!budget.reserve(1), "after a refusal nothing more is counted: the process is being ended for it")
        }
    }

    @Test("every broken rule is a protocol violation that names it", arguments: 0..<violations.count)
    func rejected(_ index: Int) async throws {
        let (_, words) = Self.violations[index]
        try await withoutLeaks {
            let compositor = SurfaceCompositor()
            let one = try ServiceBuffer(id: 1, width: 4, height: 4, colour: Self.red)
            let two = try ServiceBuffer(id: 2, width: 4, height: 4, colour: Self.blue)
            func attach(_ buffer: ServiceBuffer) throws {
                let (message, fds) = try buffer.attach()
                try compositor.receive(message, attachments: fds)
            }
            func commit(_ id: UInt32, _ frame: UInt64, _ damage: [PixelRect] = []) throws {
                try compositor.receive(.commit(bufferID: id, damage: damage, frame: frame), attachments: [])
            }
            func rect(_ x: Int, _ y: Int, _ width: Int, _ height: Int) -> PixelRect { PixelRect(x: x, y: y, width: width, height: height) }
            let error = #expect(throws: RemoteError.self) {
                switch index {
                case 0: try attach(one); try commit(9, 1)
                case 1: try attach(one); try attach(two); try commit(1, 1); try commit(2, 2)
                case 2: try attach(one); try commit(1, 1); try commit(1, 2)
                case 3: try attach(one); try commit(1, 2); _ = compositor.present(); try commit(1, 1)
                case 4: try attach(one); try attach(one)
                case 5: try compositor.receive(.destroyBuffer(9), attachments: [])
                case 6: try attach(one); try commit(1, 1); try compositor.receive(.destroyBuffer(1), attachments: [])
                case 7:
                    let unsealed = try ServiceBuffer(id: 3, width: 4, height: 4, colour: Self.red, seal: false)
                    try attach(unsealed)
                case 8: try compositor.receive(.attachBuffer(one.layout), attachments: [])
                case 9: try compositor.receive(.frameDone(frame: 1), attachments: [])
                // Damage outside the buffer; all but the first after a frame that set the image's size.
                case 10: try attach(one); try commit(1, 1, [rect(2, 0, 3, 1)])
                case 11: try attach(one); try commit(1, 1); _ = compositor.present(); try commit(1, 2, [rect(0, 0, 4, 3), rect(0, 3, 4, 2)])
                case 12: try attach(one); try commit(1, 1); _ = compositor.present(); try commit(1, 2, [rect(-1, 0, 2, 2)])
                case 13: try attach(one); try commit(1, 1); _ = compositor.present(); try commit(1, 2, [rect(0, -1, 1, 1)])
                case 14: try attach(one); try commit(1, 1); _ = compositor.present(); try commit(1, 2, [rect(1, 1, 4, 4)])
                default: try attach(one); try commit(1, 1, [rect(0, 0, 0, -3)])
                }
            }
            #expect(error?.code == .protocolViolation)
            for word in words { #expect(error?.reason.contains(word) == true, "\(String(describing: error))") }
            if (10...).contains(index) {
                // A refused commit changes nothing: the image is as before and nothing is in flight.
                #expect(compositor.present().isEmpty)
                let before = index == 10 || index == 15 ? [] : [UInt32](repeating: Self.red, count: 16)
                #expect(compositor.image.pixels == before)
            }
        }
    }
}

extension Array {
    /// The array repeated `count` times.
    func repeated(_ count: Int) -> [Element] { (0..<count).flatMap { _ in self } }
}
