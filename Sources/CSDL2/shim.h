// SDL2 through a module map, not pkg-config: pkg-config's -D_REENTRANT makes SwiftPM warn on
// every build. The demo's window is the only user (Sources/demo-share/Window).
#ifndef REMOTEVIEW_CSDL2_SHIM_H
#define REMOTEVIEW_CSDL2_SHIM_H
#define SDL_MAIN_HANDLED 1
#include <SDL2/SDL.h>

// Function-like macros do not import into Swift.
static inline int rv_sdl_windowpos_centered(void) { return SDL_WINDOWPOS_CENTERED; }
#endif
