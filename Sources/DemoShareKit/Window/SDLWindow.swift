// The demo's window: SDL2 for the window, a renderer that presents at vsync, and two streaming
// textures (the content area: the sheet or the remote view; and the bar above it). Only this
// folder knows SDL; RemoteHost stays toolkit-free (RGBA words plus damage rects).
import CSDL2
import RemoteHost

/// Something SDL refused, with its own message.
struct SDLError: Error, CustomStringConvertible {
    let description: String
    init(_ what: String) { description = "\(what): \(String(cString: SDL_GetError()))" }
}

/// An SDL window with a vsync renderer. Main thread only (SDL's rule for video).
@MainActor
final class SDLWindow {
    let window: OpaquePointer
    let renderer: OpaquePointer
    /// The event type other threads push to wake the loop (``wake()``).
    let wakeEvent: UInt32
    /// The content texture (sheet or view), its size in pixels.
    private var content: (texture: OpaquePointer, width: Int32, height: Int32)?
    /// The bar texture (title and progress), its size in pixels.
    private var bar: (texture: OpaquePointer, width: Int32, height: Int32)?

    init(title: String, width: Int32, height: Int32) throws(SDLError) {
        SDL_SetMainReady()
        // Fail loudly without a display, rather than fall back to an offscreen driver.
        if SDL_getenv("SDL_VIDEODRIVER") == nil { SDL_setenv("SDL_VIDEODRIVER", "x11", 0) }
        guard SDL_Init(UInt32(SDL_INIT_VIDEO)) == 0 else { throw SDLError("SDL_Init") }
        let flags = SDL_WINDOW_RESIZABLE.rawValue | SDL_WINDOW_ALLOW_HIGHDPI.rawValue
        guard let window = SDL_CreateWindow(title, rv_sdl_windowpos_centered(), rv_sdl_windowpos_centered(), width, height, flags) else {
            SDL_Quit()
            throw SDLError("SDL_CreateWindow")
        }
        guard let renderer = SDL_CreateRenderer(window, -1, SDL_RENDERER_PRESENTVSYNC.rawValue) else {
            SDL_DestroyWindow(window)
            SDL_Quit()
            throw SDLError("SDL_CreateRenderer")
        }
        self.window = window
        self.renderer = renderer
        wakeEvent = SDL_RegisterEvents(1)
        SDL_StartTextInput()
    }

    func close() {
        if let content { SDL_DestroyTexture(content.texture) }
        if let bar { SDL_DestroyTexture(bar.texture) }
        SDL_DestroyRenderer(renderer)
        SDL_DestroyWindow(window)
        SDL_Quit()
    }

    /// The window's size in points (what mouse events use).
    var pointSize: (width: Int32, height: Int32) {
        var width: Int32 = 0, height: Int32 = 0
        SDL_GetWindowSize(window, &width, &height)
        return (width, height)
    }

    /// The drawable's size in pixels (larger than ``pointSize`` on a HiDPI display).
    var pixelSize: (width: Int32, height: Int32) {
        var width: Int32 = 0, height: Int32 = 0
        SDL_GetRendererOutputSize(renderer, &width, &height)
        return (width, height)
    }

    /// Pixels per point, in thousandths (drawable size over window size).
    var scalePermille: Int {
        let points = pointSize, pixels = pixelSize
        guard points.width > 0 else { return 1000 }
        return max(250, min(8000, Int(pixels.width) * 1000 / Int(points.width)))
    }

    /// Wakes ``waitEvent(timeout:)`` from any thread.
    nonisolated static func wake(_ type: UInt32) {
        var event = SDL_Event()
        event.type = type
        SDL_PushEvent(&event)
    }

    /// The next event, waiting at most `timeout` milliseconds; `nil` when none came.
    func waitEvent(timeout: Int32) -> SDL_Event? {
        var event = SDL_Event()
        return SDL_WaitEventTimeout(&event, timeout) == 1 ? event : nil
    }

    /// An event already queued, if any.
    func pollEvent() -> SDL_Event? {
        var event = SDL_Event()
        return SDL_PollEvent(&event) == 1 ? event : nil
    }

    // MARK: textures

    private func texture(_ slot: (texture: OpaquePointer, width: Int32, height: Int32)?, width: Int32, height: Int32) throws(SDLError) -> (texture: OpaquePointer, width: Int32, height: Int32) {
        if let slot, slot.width == width, slot.height == height { return slot }
        if let slot { SDL_DestroyTexture(slot.texture) }
        guard let texture = SDL_CreateTexture(renderer, SDL_PIXELFORMAT_ARGB8888.rawValue, Int32(SDL_TEXTUREACCESS_STREAMING.rawValue),
                                              max(width, 1), max(height, 1)) else {
            throw SDLError("SDL_CreateTexture")
        }
        SDL_SetTextureBlendMode(texture, SDL_BLENDMODE_NONE)
        return (texture, width, height)
    }

    /// Copies `rects` of `pixels` (`width` × `height` premultiplied ARGB words) into the content
    /// texture; all of it when the size changed or `rects` is `nil`.
    func updateContent(_ pixels: UnsafeBufferPointer<UInt32>, width: Int, height: Int, rects: [PixelRect]?) throws(SDLError) {
        let sized = content?.width == Int32(width) && content?.height == Int32(height)
        content = try texture(content, width: Int32(width), height: Int32(height))
        upload(pixels, width: width, rects: sized ? rects : nil, into: content!.texture, height: height)
    }

    /// Copies `rects` of `view`'s image into the content texture, in place (no commit changes the
    /// image meanwhile); returns the image uploaded when `keep` (a copy-on-write snapshot, which
    /// costs a copy when the next frame is composited).
    func updateContent(from view: RemoteView, rects: [PixelRect], keep: Bool = false) -> RemoteImage? {
        view.withImage { image -> RemoteImage? in
            image.withUnsafePixels { pixels in try? updateContent(pixels, width: image.width, height: image.height, rects: rects) }
            return keep ? image : nil
        }
    }

    /// Copies `pixels` into the bar texture.
    func updateBar(_ pixels: UnsafeBufferPointer<UInt32>, width: Int, height: Int) throws(SDLError) {
        bar = try texture(bar, width: Int32(width), height: Int32(height))
        upload(pixels, width: width, rects: nil, into: bar!.texture, height: height)
    }

    private func upload(_ pixels: UnsafeBufferPointer<UInt32>, width: Int, rects: [PixelRect]?, into texture: OpaquePointer, height: Int) {
        guard let base = pixels.baseAddress, width > 0, height > 0 else { return }
        let pitch = Int32(width * 4)
        for rect in rects ?? [PixelRect(x: 0, y: 0, width: width, height: height)] {
            var area = SDL_Rect(x: Int32(rect.x), y: Int32(rect.y), w: Int32(rect.width), h: Int32(rect.height))
            SDL_UpdateTexture(texture, &area, UnsafeRawPointer(base + rect.y * width + rect.x), pitch)
        }
    }

    /// Draws the bar at the top (`barHeight` pixels) and the content below it, dimmed when
    /// `dimmed`, then presents (waiting for vsync).
    func render(barHeight: Int32, dimmed: Bool) {
        SDL_SetRenderDrawColor(renderer, 0x30, 0x30, 0x30, 0xFF)
        SDL_RenderClear(renderer)
        if let bar {
            var target = SDL_Rect(x: 0, y: 0, w: bar.width, h: bar.height)
            SDL_RenderCopy(renderer, bar.texture, nil, &target)
        }
        if let content {
            // The drawable below the bar: the view's image is exactly that size at the display's
            // scale; at another --scale, SDL scales it to fit.
            let drawable = pixelSize
            var target = SDL_Rect(x: 0, y: barHeight, w: drawable.width, h: max(drawable.height - barHeight, 1))
            SDL_SetTextureColorMod(content.texture, dimmed ? 0x70 : 0xFF, dimmed ? 0x70 : 0xFF, dimmed ? 0x70 : 0xFF)
            SDL_RenderCopy(renderer, content.texture, nil, &target)
        }
        SDL_RenderPresent(renderer)
    }
}
