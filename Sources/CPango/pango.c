// Loads Pango (libpangocairo-1.0.so.0, and with it Pango, GLib, HarfBuzz and fribidi) the first
// time a process lays out text, and forwards each rv_ call to it. Linking Pango instead maps
// about twenty libraries at every start, before main: on this machine it took an unsandboxed
// service's start to its main from 1.3 ms to 5.7 ms, paid even by a service that draws no text.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  /* RTLD_DEFAULT */
#endif
#include "CPango.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
    void (*g_object_unref)(void *object);
    PangoFontMap * (*pango_cairo_font_map_new)(void);
    void (*pango_cairo_font_map_set_resolution)(PangoFontMap *fontmap, double dpi);
    PangoContext * (*pango_font_map_create_context)(PangoFontMap *fontmap);
    void (*pango_cairo_context_set_font_options)(PangoContext *context, const struct _cairo_font_options *options);
    void (*pango_cairo_show_layout)(struct _cairo *cr, PangoLayout *layout);
    PangoLayout * (*pango_layout_new)(PangoContext *context);
    void (*pango_layout_set_text)(PangoLayout *layout, const char *text, int length);
    void (*pango_layout_set_font_description)(PangoLayout *layout, const PangoFontDescription *desc);
    void (*pango_layout_set_attributes)(PangoLayout *layout, PangoAttrList *attrs);
    void (*pango_layout_set_auto_dir)(PangoLayout *layout, int auto_dir);
    void (*pango_layout_set_width)(PangoLayout *layout, int width);
    void (*pango_layout_set_wrap)(PangoLayout *layout, int wrap);
    void (*pango_layout_set_alignment)(PangoLayout *layout, int alignment);
    int (*pango_layout_get_direction)(PangoLayout *layout, int index);
    void (*pango_layout_get_extents)(PangoLayout *layout, PangoRectangle *ink_rect, PangoRectangle *logical_rect);
    int (*pango_layout_get_baseline)(PangoLayout *layout);
    int (*pango_layout_get_line_count)(PangoLayout *layout);
    void (*pango_layout_get_cursor_pos)(PangoLayout *layout, int index, PangoRectangle *strong_pos, PangoRectangle *weak_pos);
    void (*pango_layout_index_to_pos)(PangoLayout *layout, int index, PangoRectangle *pos);
    int (*pango_layout_xy_to_index)(PangoLayout *layout, int x, int y, int *index, int *trailing);
    void (*pango_layout_move_cursor_visually)(PangoLayout *layout, int strong, int old_index, int old_trailing, int direction, int *new_index, int *new_trailing);
    int (*pango_layout_get_unknown_glyphs_count)(PangoLayout *layout);
    PangoLayoutIter * (*pango_layout_get_iter)(PangoLayout *layout);
    void (*pango_layout_iter_free)(PangoLayoutIter *iter);
    PangoLayoutLine * (*pango_layout_iter_get_line_readonly)(PangoLayoutIter *iter);
    PangoGlyphItem * (*pango_layout_iter_get_run_readonly)(PangoLayoutIter *iter);
    int (*pango_layout_iter_next_line)(PangoLayoutIter *iter);
    int (*pango_layout_iter_next_run)(PangoLayoutIter *iter);
    PangoAttrList * (*pango_attr_list_new)(void);
    void (*pango_attr_list_insert)(PangoAttrList *list, PangoAttribute *attr);
    void (*pango_attr_list_unref)(PangoAttrList *list);
    PangoAttribute * (*pango_attr_language_new)(PangoLanguage *language);
    PangoLanguage * (*pango_language_from_string)(const char *language);
    PangoLanguage * (*pango_language_get_default)(void);
    PangoFontDescription * (*pango_font_description_new)(void);
    PangoFontDescription * (*pango_font_description_from_string)(const char *str);
    void (*pango_font_description_free)(PangoFontDescription *desc);
    void (*pango_font_description_set_family)(PangoFontDescription *desc, const char *family);
    void (*pango_font_description_set_size)(PangoFontDescription *desc, int size);
    void (*pango_font_description_set_weight)(PangoFontDescription *desc, int weight);
    const char * (*pango_font_description_get_family)(const PangoFontDescription *desc);
    int (*pango_font_description_get_size)(const PangoFontDescription *desc);
    int (*pango_font_description_get_weight)(const PangoFontDescription *desc);
    int (*pango_font_description_get_set_fields)(const PangoFontDescription *desc);
    void (*pango_context_set_round_glyph_positions)(PangoContext *context, int round_positions);
    int (*pango_layout_line_get_resolved_direction)(PangoLayoutLine *line);
    PangoLayoutLine * (*pango_layout_get_line_readonly)(PangoLayout *layout, int line);
    void (*pango_layout_set_ellipsize)(PangoLayout *layout, int ellipsize);
    const uint32_t * (*pango_layout_get_log_attrs_readonly)(PangoLayout *layout, int *n_attrs);
    PangoFontDescription * (*pango_font_describe)(void *font);
    PangoFontMetrics * (*pango_context_get_metrics)(PangoContext *context, const PangoFontDescription *desc, PangoLanguage *language);
    void (*pango_font_metrics_unref)(PangoFontMetrics *metrics);
    int (*pango_font_metrics_get_ascent)(PangoFontMetrics *metrics);
    int (*pango_font_metrics_get_descent)(PangoFontMetrics *metrics);
    int (*pango_font_metrics_get_height)(PangoFontMetrics *metrics);
} real;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *failure;

static void load(void)
{
    void *library = dlopen("libpangocairo-1.0.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        const char *error = dlerror();
        failure = strdup(error ? error : "dlopen failed");  /* dlerror's buffer does not last */
        return;
    }
#define RESOLVE(name)                                              \
    do {                                                           \
        *(void **)&real.name = dlsym(library, #name);              \
        if (!real.name) { failure = "a Pango function is missing: " #name; return; } \
    } while (0)
    RESOLVE(g_object_unref);
    RESOLVE(pango_cairo_font_map_new);
    RESOLVE(pango_cairo_font_map_set_resolution);
    RESOLVE(pango_font_map_create_context);
    RESOLVE(pango_cairo_context_set_font_options);
    RESOLVE(pango_cairo_show_layout);
    RESOLVE(pango_layout_new);
    RESOLVE(pango_layout_set_text);
    RESOLVE(pango_layout_set_font_description);
    RESOLVE(pango_layout_set_attributes);
    RESOLVE(pango_layout_set_auto_dir);
    RESOLVE(pango_layout_set_width);
    RESOLVE(pango_layout_set_wrap);
    RESOLVE(pango_layout_set_alignment);
    RESOLVE(pango_layout_get_direction);
    RESOLVE(pango_layout_get_extents);
    RESOLVE(pango_layout_get_baseline);
    RESOLVE(pango_layout_get_line_count);
    RESOLVE(pango_layout_get_cursor_pos);
    RESOLVE(pango_layout_index_to_pos);
    RESOLVE(pango_layout_xy_to_index);
    RESOLVE(pango_layout_move_cursor_visually);
    RESOLVE(pango_layout_get_unknown_glyphs_count);
    RESOLVE(pango_layout_get_iter);
    RESOLVE(pango_layout_iter_free);
    RESOLVE(pango_layout_iter_get_line_readonly);
    RESOLVE(pango_layout_iter_get_run_readonly);
    RESOLVE(pango_layout_iter_next_line);
    RESOLVE(pango_layout_iter_next_run);
    RESOLVE(pango_attr_list_new);
    RESOLVE(pango_attr_list_insert);
    RESOLVE(pango_attr_list_unref);
    RESOLVE(pango_attr_language_new);
    RESOLVE(pango_language_from_string);
    RESOLVE(pango_language_get_default);
    RESOLVE(pango_font_description_new);
    RESOLVE(pango_font_description_from_string);
    RESOLVE(pango_font_description_free);
    RESOLVE(pango_font_description_set_family);
    RESOLVE(pango_font_description_set_size);
    RESOLVE(pango_font_description_set_weight);
    RESOLVE(pango_font_description_get_family);
    RESOLVE(pango_font_description_get_size);
    RESOLVE(pango_font_description_get_weight);
    RESOLVE(pango_font_description_get_set_fields);
    RESOLVE(pango_context_set_round_glyph_positions);
    RESOLVE(pango_layout_line_get_resolved_direction);
    RESOLVE(pango_layout_get_line_readonly);
    RESOLVE(pango_layout_set_ellipsize);
    RESOLVE(pango_layout_get_log_attrs_readonly);
    RESOLVE(pango_font_describe);
    RESOLVE(pango_context_get_metrics);
    RESOLVE(pango_font_metrics_unref);
    RESOLVE(pango_font_metrics_get_ascent);
    RESOLVE(pango_font_metrics_get_descent);
    RESOLVE(pango_font_metrics_get_height);
#undef RESOLVE
    /* Pango draws with the shared libcairo.so.2. A process with a Cairo of its own (linked from
     * its static archive) would hand Pango a cairo_t of the other copy: it crashes at the first
     * text drawn (SIGFPE, with nothing said). Refused here instead, saying why. */
    void *shared = dlsym(library, "cairo_create");
    if (shared && dlsym(RTLD_DEFAULT, "cairo_create") != shared) {
        failure = "this process has a Cairo of its own (linked statically), and Pango draws with the shared "
                  "libcairo.so.2: a cairo_t of one cannot be drawn on by the other; link Cairo dynamically";
    }
}

int rv_pango_available(void)
{
    pthread_once(&once, load);
    return failure == NULL;
}

static void require(void)
{
    if (rv_pango_available()) return;
    fprintf(stderr, "RemoteView: cannot use Pango for text (it needs libpangocairo-1.0-0, and the shared Cairo): %s\n", failure);
    abort();
}

void rv_g_object_unref(void *object) { require(); real.g_object_unref(object); }
PangoFontMap * rv_pango_cairo_font_map_new(void) { require(); return real.pango_cairo_font_map_new(); }
void rv_pango_cairo_font_map_set_resolution(PangoFontMap *fontmap, double dpi) { require(); real.pango_cairo_font_map_set_resolution(fontmap, dpi); }
PangoContext * rv_pango_font_map_create_context(PangoFontMap *fontmap) { require(); return real.pango_font_map_create_context(fontmap); }
void rv_pango_cairo_context_set_font_options(PangoContext *context, const struct _cairo_font_options *options) { require(); real.pango_cairo_context_set_font_options(context, options); }
void rv_pango_cairo_show_layout(struct _cairo *cr, PangoLayout *layout) { require(); real.pango_cairo_show_layout(cr, layout); }
PangoLayout * rv_pango_layout_new(PangoContext *context) { require(); return real.pango_layout_new(context); }
void rv_pango_layout_set_text(PangoLayout *layout, const char *text, int length) { require(); real.pango_layout_set_text(layout, text, length); }
void rv_pango_layout_set_font_description(PangoLayout *layout, const PangoFontDescription *desc) { require(); real.pango_layout_set_font_description(layout, desc); }
void rv_pango_layout_set_attributes(PangoLayout *layout, PangoAttrList *attrs) { require(); real.pango_layout_set_attributes(layout, attrs); }
void rv_pango_layout_set_auto_dir(PangoLayout *layout, int auto_dir) { require(); real.pango_layout_set_auto_dir(layout, auto_dir); }
void rv_pango_layout_set_width(PangoLayout *layout, int width) { require(); real.pango_layout_set_width(layout, width); }
void rv_pango_layout_set_wrap(PangoLayout *layout, int wrap) { require(); real.pango_layout_set_wrap(layout, wrap); }
void rv_pango_layout_set_alignment(PangoLayout *layout, int alignment) { require(); real.pango_layout_set_alignment(layout, alignment); }
int rv_pango_layout_get_direction(PangoLayout *layout, int index) { require(); return real.pango_layout_get_direction(layout, index); }
void rv_pango_layout_get_extents(PangoLayout *layout, PangoRectangle *ink_rect, PangoRectangle *logical_rect) { require(); real.pango_layout_get_extents(layout, ink_rect, logical_rect); }
int rv_pango_layout_get_baseline(PangoLayout *layout) { require(); return real.pango_layout_get_baseline(layout); }
int rv_pango_layout_get_line_count(PangoLayout *layout) { require(); return real.pango_layout_get_line_count(layout); }
void rv_pango_layout_get_cursor_pos(PangoLayout *layout, int index, PangoRectangle *strong_pos, PangoRectangle *weak_pos) { require(); real.pango_layout_get_cursor_pos(layout, index, strong_pos, weak_pos); }
void rv_pango_layout_index_to_pos(PangoLayout *layout, int index, PangoRectangle *pos) { require(); real.pango_layout_index_to_pos(layout, index, pos); }
int rv_pango_layout_xy_to_index(PangoLayout *layout, int x, int y, int *index, int *trailing) { require(); return real.pango_layout_xy_to_index(layout, x, y, index, trailing); }
void rv_pango_layout_move_cursor_visually(PangoLayout *layout, int strong, int old_index, int old_trailing, int direction, int *new_index, int *new_trailing) { require(); real.pango_layout_move_cursor_visually(layout, strong, old_index, old_trailing, direction, new_index, new_trailing); }
int rv_pango_layout_get_unknown_glyphs_count(PangoLayout *layout) { require(); return real.pango_layout_get_unknown_glyphs_count(layout); }
PangoLayoutIter * rv_pango_layout_get_iter(PangoLayout *layout) { require(); return real.pango_layout_get_iter(layout); }
void rv_pango_layout_iter_free(PangoLayoutIter *iter) { require(); real.pango_layout_iter_free(iter); }
PangoLayoutLine * rv_pango_layout_iter_get_line_readonly(PangoLayoutIter *iter) { require(); return real.pango_layout_iter_get_line_readonly(iter); }
PangoGlyphItem * rv_pango_layout_iter_get_run_readonly(PangoLayoutIter *iter) { require(); return real.pango_layout_iter_get_run_readonly(iter); }
int rv_pango_layout_iter_next_line(PangoLayoutIter *iter) { require(); return real.pango_layout_iter_next_line(iter); }
int rv_pango_layout_iter_next_run(PangoLayoutIter *iter) { require(); return real.pango_layout_iter_next_run(iter); }
PangoAttrList * rv_pango_attr_list_new(void) { require(); return real.pango_attr_list_new(); }
void rv_pango_attr_list_insert(PangoAttrList *list, PangoAttribute *attr) { require(); real.pango_attr_list_insert(list, attr); }
void rv_pango_attr_list_unref(PangoAttrList *list) { require(); real.pango_attr_list_unref(list); }
PangoAttribute * rv_pango_attr_language_new(PangoLanguage *language) { require(); return real.pango_attr_language_new(language); }
PangoLanguage * rv_pango_language_from_string(const char *language) { require(); return real.pango_language_from_string(language); }
PangoLanguage * rv_pango_language_get_default(void) { require(); return real.pango_language_get_default(); }
PangoFontDescription * rv_pango_font_description_new(void) { require(); return real.pango_font_description_new(); }
PangoFontDescription * rv_pango_font_description_from_string(const char *str) { require(); return real.pango_font_description_from_string(str); }
void rv_pango_font_description_free(PangoFontDescription *desc) { require(); real.pango_font_description_free(desc); }
void rv_pango_font_description_set_family(PangoFontDescription *desc, const char *family) { require(); real.pango_font_description_set_family(desc, family); }
void rv_pango_font_description_set_size(PangoFontDescription *desc, int size) { require(); real.pango_font_description_set_size(desc, size); }
void rv_pango_font_description_set_weight(PangoFontDescription *desc, int weight) { require(); real.pango_font_description_set_weight(desc, weight); }
const char * rv_pango_font_description_get_family(const PangoFontDescription *desc) { require(); return real.pango_font_description_get_family(desc); }
int rv_pango_font_description_get_size(const PangoFontDescription *desc) { require(); return real.pango_font_description_get_size(desc); }
int rv_pango_font_description_get_weight(const PangoFontDescription *desc) { require(); return real.pango_font_description_get_weight(desc); }
int rv_pango_font_description_get_set_fields(const PangoFontDescription *desc) { require(); return real.pango_font_description_get_set_fields(desc); }
void rv_pango_context_set_round_glyph_positions(PangoContext *context, int round_positions) { require(); real.pango_context_set_round_glyph_positions(context, round_positions); }
int rv_pango_layout_line_get_resolved_direction(PangoLayoutLine *line) { require(); return real.pango_layout_line_get_resolved_direction(line); }
PangoLayoutLine * rv_pango_layout_get_line_readonly(PangoLayout *layout, int line) { require(); return real.pango_layout_get_line_readonly(layout, line); }
void rv_pango_layout_set_ellipsize(PangoLayout *layout, int ellipsize) { require(); real.pango_layout_set_ellipsize(layout, ellipsize); }
const uint32_t * rv_pango_layout_get_log_attrs_readonly(PangoLayout *layout, int *n_attrs) { require(); return real.pango_layout_get_log_attrs_readonly(layout, n_attrs); }
PangoFontDescription * rv_pango_font_describe(void *font) { require(); return real.pango_font_describe(font); }
PangoFontMetrics * rv_pango_context_get_metrics(PangoContext *context, const PangoFontDescription *desc, PangoLanguage *language) { require(); return real.pango_context_get_metrics(context, desc, language); }
void rv_pango_font_metrics_unref(PangoFontMetrics *metrics) { require(); real.pango_font_metrics_unref(metrics); }
int rv_pango_font_metrics_get_ascent(PangoFontMetrics *metrics) { require(); return real.pango_font_metrics_get_ascent(metrics); }
int rv_pango_font_metrics_get_descent(PangoFontMetrics *metrics) { require(); return real.pango_font_metrics_get_descent(metrics); }
int rv_pango_font_metrics_get_height(PangoFontMetrics *metrics) { require(); return real.pango_font_metrics_get_height(metrics); }
