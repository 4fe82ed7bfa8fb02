// Cairo (Debian: libcairo2-dev), for drawing into shared buffers and writing PNGs.
// A module map rather than pkgConfig keeps SwiftPM's build free of warnings.
#define _GNU_SOURCE 1
#include <cairo/cairo.h>
