// Pango and its Cairo renderer (Debian: libpango-1.0-0, libpangocairo-1.0-0; HarfBuzz and fribidi
// underneath), for shaping, bidi, line breaking and font fallback, loaded when a process first
// lays out text (pango.c): a service that draws no text does not map Pango, GLib and HarfBuzz
// at its start.
//
// Each call is `rv_` + Pango's name, with Pango's signature. The types are declared here rather
// than by including <pango/pangocairo.h>, which needs GLib's include paths (only pkg-config
// gives them, with a `-pthread` SwiftPM warns about). They are Pango's stable C API and ABI (the
// structs' layouts were checked against Debian 12's Pango 1.50 headers); Pango 1.50 or later is
// needed (pango_layout_line_get_resolved_direction), and an older one fails at the first text.
#ifndef REMOTEVIEW_CPANGO_H
#define REMOTEVIEW_CPANGO_H
#include <stdint.h>

typedef struct _PangoContext PangoContext;
typedef struct _PangoFontMap PangoFontMap;
typedef struct _PangoLayout PangoLayout;
typedef struct _PangoLayoutIter PangoLayoutIter;
typedef struct _PangoFontDescription PangoFontDescription;
typedef struct _PangoFontMetrics PangoFontMetrics;
typedef struct _PangoLanguage PangoLanguage;
typedef struct _PangoAttrList PangoAttrList;
typedef struct _PangoAttribute PangoAttribute;
struct _cairo;
struct _cairo_font_options;

#define RV_PANGO_SCALE 1024
// PangoWrapMode, PangoAlignment, PangoDirection, PangoWeight, PangoFontMask values used.
#define RV_PANGO_WRAP_WORD_CHAR 2
#define RV_PANGO_ALIGN_LEFT 0
#define RV_PANGO_ALIGN_CENTER 1
#define RV_PANGO_ALIGN_RIGHT 2
#define RV_PANGO_DIRECTION_RTL 1
#define RV_PANGO_WEIGHT_NORMAL 400
#define RV_PANGO_WEIGHT_SEMIBOLD 600
#define RV_PANGO_WEIGHT_BOLD 700
#define RV_PANGO_FONT_MASK_SIZE 32
#define RV_PANGO_ELLIPSIZE_END 3
#define RV_G_MAXINT 2147483647
// Bits of a PangoLogAttr (a 32-bit word of bitfields, in declaration order from the low bit).
#define RV_PANGO_LOG_ATTR_IS_CURSOR_POSITION 0x10
#define RV_PANGO_LOG_ATTR_BACKSPACE_DELETES_CHARACTER 0x400

typedef struct {
    int x, y, width, height;
} PangoRectangle;

// The leading fields of PangoLayoutLine (read only through a pointer Pango owns).
typedef struct {
    PangoLayout *layout;
    int start_index;
    int length;
} PangoLayoutLine;

typedef struct {
    void *shape_engine, *lang_engine, *font;
    uint8_t level, gravity, flags, script;
    PangoLanguage *language;
    void *extra_attrs;
} PangoAnalysis;

typedef struct {
    int offset, length, num_chars;
    PangoAnalysis analysis;
} PangoItem;

typedef struct {
    uint32_t glyph;
    int width, x_offset, y_offset;
    uint32_t attr;
} PangoGlyphInfo;

typedef struct {
    int num_glyphs;
    PangoGlyphInfo *glyphs;
    int *log_clusters;
    int space;
} PangoGlyphString;

typedef struct {
    PangoItem *item;
    PangoGlyphString *glyphs;
    int y_offset, start_x_offset, end_x_offset;
} PangoGlyphItem;


void rv_g_object_unref(void *object);
PangoFontMap * rv_pango_cairo_font_map_new(void);
void rv_pango_cairo_font_map_set_resolution(PangoFontMap *fontmap, double dpi);
PangoContext * rv_pango_font_map_create_context(PangoFontMap *fontmap);
void rv_pango_cairo_context_set_font_options(PangoContext *context, const struct _cairo_font_options *options);
void rv_pango_cairo_show_layout(struct _cairo *cr, PangoLayout *layout);
PangoLayout * rv_pango_layout_new(PangoContext *context);
void rv_pango_layout_set_text(PangoLayout *layout, const char *text, int length);
void rv_pango_layout_set_font_description(PangoLayout *layout, const PangoFontDescription *desc);
void rv_pango_layout_set_attributes(PangoLayout *layout, PangoAttrList *attrs);
void rv_pango_layout_set_auto_dir(PangoLayout *layout, int auto_dir);
void rv_pango_layout_set_width(PangoLayout *layout, int width);
void rv_pango_layout_set_wrap(PangoLayout *layout, int wrap);
void rv_pango_layout_set_alignment(PangoLayout *layout, int alignment);
int rv_pango_layout_get_direction(PangoLayout *layout, int index);
void rv_pango_layout_get_extents(PangoLayout *layout, PangoRectangle *ink_rect, PangoRectangle *logical_rect);
int rv_pango_layout_get_baseline(PangoLayout *layout);
int rv_pango_layout_get_line_count(PangoLayout *layout);
void rv_pango_layout_get_cursor_pos(PangoLayout *layout, int index, PangoRectangle *strong_pos, PangoRectangle *weak_pos);
void rv_pango_layout_index_to_pos(PangoLayout *layout, int index, PangoRectangle *pos);
int rv_pango_layout_xy_to_index(PangoLayout *layout, int x, int y, int *index, int *trailing);
void rv_pango_layout_move_cursor_visually(PangoLayout *layout, int strong, int old_index, int old_trailing, int direction, int *new_index, int *new_trailing);
int rv_pango_layout_get_unknown_glyphs_count(PangoLayout *layout);
PangoLayoutIter * rv_pango_layout_get_iter(PangoLayout *layout);
void rv_pango_layout_iter_free(PangoLayoutIter *iter);
PangoLayoutLine * rv_pango_layout_iter_get_line_readonly(PangoLayoutIter *iter);
PangoGlyphItem * rv_pango_layout_iter_get_run_readonly(PangoLayoutIter *iter);
int rv_pango_layout_iter_next_line(PangoLayoutIter *iter);
int rv_pango_layout_iter_next_run(PangoLayoutIter *iter);
PangoAttrList * rv_pango_attr_list_new(void);
void rv_pango_attr_list_insert(PangoAttrList *list, PangoAttribute *attr);
void rv_pango_attr_list_unref(PangoAttrList *list);
PangoAttribute * rv_pango_attr_language_new(PangoLanguage *language);
PangoLanguage * rv_pango_language_from_string(const char *language);
PangoLanguage * rv_pango_language_get_default(void);
PangoFontDescription * rv_pango_font_description_new(void);
PangoFontDescription * rv_pango_font_description_from_string(const char *str);
void rv_pango_font_description_free(PangoFontDescription *desc);
void rv_pango_font_description_set_family(PangoFontDescription *desc, const char *family);
void rv_pango_font_description_set_size(PangoFontDescription *desc, int size);
void rv_pango_font_description_set_weight(PangoFontDescription *desc, int weight);
const char * rv_pango_font_description_get_family(const PangoFontDescription *desc);
int rv_pango_font_description_get_size(const PangoFontDescription *desc);
int rv_pango_font_description_get_weight(const PangoFontDescription *desc);
int rv_pango_font_description_get_set_fields(const PangoFontDescription *desc);
void rv_pango_context_set_round_glyph_positions(PangoContext *context, int round_positions);
int rv_pango_layout_line_get_resolved_direction(PangoLayoutLine *line);
PangoLayoutLine * rv_pango_layout_get_line_readonly(PangoLayout *layout, int line);
void rv_pango_layout_set_ellipsize(PangoLayout *layout, int ellipsize);
const uint32_t * rv_pango_layout_get_log_attrs_readonly(PangoLayout *layout, int *n_attrs);
PangoFontDescription * rv_pango_font_describe(void *font);
PangoFontMetrics * rv_pango_context_get_metrics(PangoContext *context, const PangoFontDescription *desc, PangoLanguage *language);
void rv_pango_font_metrics_unref(PangoFontMetrics *metrics);
int rv_pango_font_metrics_get_ascent(PangoFontMetrics *metrics);
int rv_pango_font_metrics_get_descent(PangoFontMetrics *metrics);
int rv_pango_font_metrics_get_height(PangoFontMetrics *metrics);

/// Whether Pango could be loaded (it is loaded on the first call of this); when not, every
/// other call aborts the process with the reason on stderr.
int rv_pango_available(void);
#endif
