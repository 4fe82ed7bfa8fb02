// lz4 (Debian: liblz4-dev) and zstd (libzstd-dev), for a remote view's frames on the gateway's
// View stream. A module map rather than pkgConfig keeps SwiftPM's build free of warnings.
#include <lz4.h>
#include <zstd.h>
