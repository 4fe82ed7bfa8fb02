// The photograph's bytes, included by the assembler from include/coffee.png (clang's integrated
// assembler finds `.incbin` files on the include path SwiftPM gives this target).
#include "CDemoPhoto.h"

__asm__(".section .rodata\n"
        ".balign 16\n"
        ".global demo_photo_start\n.hidden demo_photo_start\n"
        ".global demo_photo_end\n.hidden demo_photo_end\n"
        "demo_photo_start:\n"
        ".incbin \"coffee.png\"\n"
        "demo_photo_end:\n"
        ".previous\n");

extern const unsigned char demo_photo_start[], demo_photo_end[];

const unsigned char *demo_photo_png(size_t *count) {
    *count = (size_t)(demo_photo_end - demo_photo_start);
    return demo_photo_start;
}
