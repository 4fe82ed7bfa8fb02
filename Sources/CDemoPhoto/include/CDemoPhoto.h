// The demo's photograph, linked into demo-share (no file to find inside the sandbox): the
// scrolling-photo animation's content (`request animate SECONDS photo`), for realistic
// full-damage frames (docs/Benchmarks.md, "Remote views").
//
// coffee.png: "Coffee cup", a photograph by Rachel Michetti, courtesy of Pikolo Espresso Bar,
// dedicated to the public domain (CC0) by the photographer; 600 × 400, as scikit-image ships
// it in skimage/data.
#include <stddef.h>

/// The PNG's bytes; `count` gets their number.
const unsigned char *demo_photo_png(size_t *count);
