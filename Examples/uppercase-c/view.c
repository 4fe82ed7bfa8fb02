/* The view: sealed memfd buffers (Protocol.md, "Surfaces") drawn with Cairo. */
#include "rv.h"

#include <pango/pangocairo.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MARGIN 16.0
#define FONT_SIZE 16.0
#define BUTTON_X 16.0
#define BUTTON_FROM_BOTTOM 56.0
#define BUTTON_W 160.0
#define BUTTON_H 40.0
#define MAX_SIDE 16384
#define MAX_BYTES (256u * 1024u * 1024u)

void view_resize(view *vw, uint32_t w, uint32_t h, uint32_t scale_permille)
{
    double s = scale_permille / 1000.0;
    /* In integers, as Protocol.md gives it: a double product can round the other way. */
    double pw = fmax(1.0, (double)(((uint64_t)w * scale_permille + 500) / 1000)) + (rv_breaks("buffer-size") ? 1 : 0);
    double ph = fmax(1.0, (double)(((uint64_t)h * scale_permille + 500) / 1000));
    /* Protocol.md: pixels = (points x scale + 500) / 1000, and the host never sends a size whose
     * pixels exceed a buffer's bounds. The fit below only guards this process against a host
     * that does. */
    double fit = 1.0;
    if (pw > MAX_SIDE) fit = fmin(fit, MAX_SIDE / pw);
    if (ph > MAX_SIDE) fit = fmin(fit, MAX_SIDE / ph);
    if (pw * fit * ph * fit * 4.0 > MAX_BYTES) fit = fmin(fit, sqrt(MAX_BYTES / (pw * ph * 4.0)));
    if (fit < 1.0) {
        s *= fit;
        pw = fmax(1.0, floor(w * s));
        ph = fmax(1.0, floor(h * s));
    }
    int size_changed = !vw->has_size || (int)pw != vw->px_w || (int)ph != vw->px_h;
    vw->has_size = 1;
    vw->pt_w = w;
    vw->pt_h = h;
    vw->scale_permille = scale_permille;
    vw->scale = s;
    vw->px_w = (int)pw;
    vw->px_h = (int)ph;
    if (size_changed)
        for (buffer *b = vw->buffers; b; b = b->next) b->retired = 1;
    vw->dirty_full = 1;
}

int view_count_current(const view *vw)
{
    int n = 0;
    for (const buffer *b = vw->buffers; b; b = b->next)
        if (!b->retired) n++;
    return n;
}

buffer *view_free_buffer(view *vw)
{
    for (buffer *b = vw->buffers; b; b = b->next)
        if (!b->retired && !b->held) return b;
    return NULL;
}

buffer *view_find(view *vw, uint32_t id)
{
    for (buffer *b = vw->buffers; b; b = b->next)
        if (b->id == id) return b;
    return NULL;
}

buffer *view_new_buffer(view *vw, int *memfd)
{
    int stride = cairo_format_stride_for_width(CAIRO_FORMAT_ARGB32, vw->px_w);
    if (stride < 0) return NULL;
    size_t size = (size_t)stride * (size_t)vw->px_h;
    int fd = memfd_create("uppercase-buffer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return NULL;
    if (ftruncate(fd, (off_t)size) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        close(fd);
        return NULL;
    }
    void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        close(fd);
        return NULL;
    }
    buffer *b = calloc(1, sizeof *b);
    if (!b) {
        munmap(map, size);
        close(fd);
        return NULL;
    }
    if (++vw->next_buffer_id == 0) vw->next_buffer_id = 1;
    b->id = vw->next_buffer_id;
    b->width = vw->px_w;
    b->height = vw->px_h;
    b->stride = stride;
    b->map = map;
    b->size = size;
    b->next = vw->buffers;
    vw->buffers = b;
    *memfd = fd;
    return b;
}

void view_unlink_free(view *vw, buffer *b)
{
    for (buffer **p = &vw->buffers; *p; p = &(*p)->next)
        if (*p == b) {
            *p = b->next;
            break;
        }
    munmap(b->map, b->size);
    free(b);
}

void view_free_all(view *vw)
{
    while (vw->buffers) view_unlink_free(vw, vw->buffers);
}

static double text_bottom(const view *vw)
{
    return vw->pt_h - BUTTON_FROM_BOTTOM - 4.0; /* text stays above the button */
}

int button_contains(const view *vw, double x, double y)
{
    double top = vw->pt_h - BUTTON_FROM_BOTTOM;
    return x >= BUTTON_X && x < BUTTON_X + BUTTON_W && y >= top && y < top + BUTTON_H;
}

void button_rect(const view *vw, double *x, double *y, double *w, double *h)
{
    *x = BUTTON_X;
    *y = vw->pt_h - BUTTON_FROM_BOTTOM;
    *w = BUTTON_W;
    *h = BUTTON_H;
}

/* Where the text is drawn: from its origin to the edges of its clip (view_draw). */
void text_rect(const view *vw, int show_button, double *x, double *y, double *w, double *h)
{
    *x = MARGIN;
    *y = MARGIN;
    *w = vw->pt_w - MARGIN;
    *h = (show_button ? text_bottom(vw) : vw->pt_h) - MARGIN;
}

void view_damage_rect(const view *vw, Remoteview__Rect *r)
{
    r->x = 0;
    r->y = 0;
    r->width = (uint32_t)vw->px_w;
    r->height = (uint32_t)vw->px_h;
    if (!vw->dirty_full && vw->dirty_text) {
        /* Only the text changed: damage the band above the button, clipped to the buffer. */
        double bottom = ceil(text_bottom(vw) * vw->scale);
        if (bottom >= 1 && bottom < vw->px_h) r->height = (uint32_t)bottom;
    }
}

void view_draw(view *vw, buffer *b, const scene *sc)
{
    cairo_surface_t *surface = cairo_image_surface_create_for_data(b->map, CAIRO_FORMAT_ARGB32,
                                                                   b->width, b->height, b->stride);
    cairo_t *cr = cairo_create(surface);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_scale(cr, vw->scale, vw->scale);

    /* the text, clipped to the band above the button */
    cairo_save(cr);
    cairo_rectangle(cr, 0, 0, vw->pt_w, sc->show_button ? text_bottom(vw) : vw->pt_h);
    cairo_clip(cr);
    /* Text through Pango (shaping, bidi, fallback fonts), at 72 dpi: a size in points is a size
       in the view's points, as in the Swift toolkit. */
    PangoLayout *layout = pango_cairo_create_layout(cr);
    pango_cairo_context_set_resolution(pango_layout_get_context(layout), 72);
    pango_layout_context_changed(layout);
    pango_layout_set_auto_dir(layout, TRUE);
    PangoFontDescription *font = pango_font_description_from_string("DejaVu Sans");
    pango_font_description_set_size(font, FONT_SIZE * PANGO_SCALE);
    pango_layout_set_font_description(layout, font);
    cairo_set_source_rgb(cr, 0, 0, 0);
    char *shown = malloc(sc->text_len + 1);
    if (shown) {
        for (size_t i = 0; i < sc->text_len; i++)
            shown[i] = (sc->text[i] == '\t' || sc->text[i] == '\r') ? ' ' : sc->text[i];
        shown[sc->text_len] = 0;
        pango_layout_set_text(layout, shown, (int)sc->text_len);
        cairo_move_to(cr, MARGIN, MARGIN);
        pango_cairo_show_layout(cr, layout);
        free(shown);
    }
    cairo_restore(cr);

    if (sc->show_button) {
        double top = vw->pt_h - BUTTON_FROM_BOTTOM;
        cairo_rectangle(cr, BUTTON_X, top, BUTTON_W, BUTTON_H);
        cairo_set_source_rgb(cr, 0x2F / 255.0, 0x6F / 255.0, 0xED / 255.0);
        cairo_fill(cr);
        pango_font_description_set_weight(font, PANGO_WEIGHT_BOLD);
        pango_layout_set_font_description(layout, font);
        pango_layout_set_text(layout, "UPPERCASE", -1);
        PangoRectangle ink;
        pango_layout_get_extents(layout, &ink, NULL);
        cairo_set_source_rgb(cr, 1, 1, 1);
        cairo_move_to(cr, BUTTON_X + (BUTTON_W - (double)ink.width / PANGO_SCALE) / 2 - (double)ink.x / PANGO_SCALE,
                      top + (BUTTON_H - (double)ink.height / PANGO_SCALE) / 2 - (double)ink.y / PANGO_SCALE);
        pango_cairo_show_layout(cr, layout);
    }
    pango_font_description_free(font);
    g_object_unref(layout);
    cairo_destroy(cr);
    cairo_surface_flush(surface);
    cairo_surface_destroy(surface);
}
