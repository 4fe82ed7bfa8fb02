// Publishes the accessibility tree given by rv_a11y_apply to AT-SPI2, the way toolkits without
// GTK do it (Firefox, LibreOffice): the tree is mirrored with ATK objects (GObject subclasses of
// AtkObject implementing the ATK interfaces), and atk-bridge, from at-spi2-core, exports the ATK
// objects on the accessibility bus, answers the assistive technologies' D-Bus calls by calling
// them, and turns their ATK signals into AT-SPI events.
//
// Why dlopen. The process that uses this is also started as a sandboxed service, whose start
// time counts; linking ATK and atk-bridge would map GLib, GObject, GIO, libatspi, libdbus and
// libX11 before main in every process, most of which never export a tree. So nothing of them is
// linked: rv_a11y_start loads the four libraries and calls through function pointers (`real`
// below). The ATK and GLib headers are included for types, struct layouts and macros only;
// G_DISABLE_CAST_CHECKS makes the cast macros plain casts, and no macro that expands to a call
// into GLib (type checks, interface peeks) is used: `nm -u bridge.o` lists libc symbols only.
// The libraries are never unloaded (atk-bridge registers an atexit handler).
//
// Why a thread. ATK objects are not thread-safe, and atk-bridge does its D-Bus work in GLib's
// default main context: it must be iterated to answer assistive technologies at all. The
// process's own main loop is SDL's, which knows nothing of GLib. So one thread of the bridge's
// own runs a GLib main loop on the default main context; every ATK object is created, changed,
// queried and destroyed there, and atk_bridge_adaptor_init and _cleanup run there.
// rv_a11y_apply, called from any thread, only deep-copies its input into a batch and queues the
// batch to that thread (an idle source of the default context). Requests of assistive
// technologies (press, focus, set a text or a value) reach the caller's callback on that thread.
// Nothing else in the process may run GLib's default main context.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define G_DISABLE_CAST_CHECKS 1
#include "CAccessibilityBridge.h"

#include <atk/atk.h>
#include <dlfcn.h>
#include <glib-object.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(ATK_STATE_LAST_DEFINED <= 64, "the states of an object are kept in a 64-bit mask");

// MARK: - The libraries

static struct {
    // GLib
    GMainLoop *(*g_main_loop_new)(GMainContext *context, gboolean is_running);
    void (*g_main_loop_run)(GMainLoop *loop);
    void (*g_main_loop_quit)(GMainLoop *loop);
    void (*g_main_loop_unref)(GMainLoop *loop);
    guint (*g_idle_add_full)(gint priority, GSourceFunc function, gpointer data, GDestroyNotify notify);
    gpointer (*g_malloc)(gsize size);
    void (*g_free)(gpointer memory);
    GHashTable *(*g_hash_table_new_full)(GHashFunc hash, GEqualFunc equal, GDestroyNotify key_destroy,
                                         GDestroyNotify value_destroy);
    gboolean (*g_hash_table_insert)(GHashTable *table, gpointer key, gpointer value);
    gpointer (*g_hash_table_lookup)(GHashTable *table, gconstpointer key);
    gboolean (*g_hash_table_remove)(GHashTable *table, gconstpointer key);
    void (*g_hash_table_destroy)(GHashTable *table);
    // GObject
    GType (*g_type_register_static)(GType parent, const gchar *name, const GTypeInfo *info, GTypeFlags flags);
    void (*g_type_add_interface_static)(GType type, GType interface_type, const GInterfaceInfo *info);
    gpointer (*g_type_class_peek_parent)(gpointer klass);
    gpointer (*g_type_class_ref)(GType type);
    gpointer (*g_object_new)(GType type, const gchar *first_property, ...);
    gpointer (*g_object_ref)(gpointer object);
    void (*g_object_unref)(gpointer object);
    void (*g_object_notify)(GObject *object, const gchar *property);
    void (*g_signal_emit_by_name)(gpointer instance, const gchar *detailed_signal, ...);
    GValue *(*g_value_init)(GValue *value, GType type);
    void (*g_value_set_double)(GValue *value, gdouble number);
    gdouble (*g_value_get_double)(const GValue *value);
    // ATK
    GType (*atk_object_get_type)(void);
    GType (*atk_component_get_type)(void);
    GType (*atk_action_get_type)(void);
    GType (*atk_text_get_type)(void);
    GType (*atk_editable_text_get_type)(void);
    GType (*atk_value_get_type)(void);
    GType (*atk_window_get_type)(void);
    GType (*atk_util_get_type)(void);
    AtkStateSet *(*atk_state_set_new)(void);
    gboolean (*atk_state_set_add_state)(AtkStateSet *set, AtkStateType type);
    void (*atk_object_notify_state_change)(AtkObject *accessible, AtkState state, gboolean value);
    void (*atk_object_set_accessible_id)(AtkObject *accessible, const gchar *id);
    void (*atk_focus_tracker_notify)(AtkObject *object);
    AtkRange *(*atk_range_new)(gdouble lower, gdouble upper, const gchar *description);
    // atk-bridge (at-spi2-core)
    int (*atk_bridge_adaptor_init)(int *argc, char ***argv);
    void (*atk_bridge_adaptor_cleanup)(void);
} real;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_failure[512];  // empty when every library and function was found

static void *open_library(const char *name, const char *package)
{
    void *library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        const char *error = dlerror();
        snprintf(load_failure, sizeof load_failure, "cannot load %s (Debian: %s): %s", name, package,
                 error ? error : "dlopen failed");
    }
    return library;
}

static void load(void)
{
    void *glib = open_library("libglib-2.0.so.0", "libglib2.0-0");
    if (!glib) return;
    void *gobject = open_library("libgobject-2.0.so.0", "libglib2.0-0");
    if (!gobject) return;
    void *atk = open_library("libatk-1.0.so.0", "libatk1.0-0");
    if (!atk) return;
    void *bridge = open_library("libatk-bridge-2.0.so.0", "libatk-bridge2.0-0");
    if (!bridge) return;
#define RESOLVE(library, name)                                                                     \
    do {                                                                                           \
        *(void **)&real.name = dlsym(library, #name);                                              \
        if (!real.name) {                                                                          \
            snprintf(load_failure, sizeof load_failure, "a function is missing: %s", #name);       \
            return;                                                                                \
        }                                                                                          \
    } while (0)
    RESOLVE(glib, g_main_loop_new);
    RESOLVE(glib, g_main_loop_run);
    RESOLVE(glib, g_main_loop_quit);
    RESOLVE(glib, g_main_loop_unref);
    RESOLVE(glib, g_idle_add_full);
    RESOLVE(glib, g_malloc);
    RESOLVE(glib, g_free);
    RESOLVE(glib, g_hash_table_new_full);
    RESOLVE(glib, g_hash_table_insert);
    RESOLVE(glib, g_hash_table_lookup);
    RESOLVE(glib, g_hash_table_remove);
    RESOLVE(glib, g_hash_table_destroy);
    RESOLVE(gobject, g_type_register_static);
    RESOLVE(gobject, g_type_add_interface_static);
    RESOLVE(gobject, g_type_class_peek_parent);
    RESOLVE(gobject, g_type_class_ref);
    RESOLVE(gobject, g_object_new);
    RESOLVE(gobject, g_object_ref);
    RESOLVE(gobject, g_object_unref);
    RESOLVE(gobject, g_object_notify);
    RESOLVE(gobject, g_signal_emit_by_name);
    RESOLVE(gobject, g_value_init);
    RESOLVE(gobject, g_value_set_double);
    RESOLVE(gobject, g_value_get_double);
    RESOLVE(atk, atk_object_get_type);
    RESOLVE(atk, atk_component_get_type);
    RESOLVE(atk, atk_action_get_type);
    RESOLVE(atk, atk_text_get_type);
    RESOLVE(atk, atk_editable_text_get_type);
    RESOLVE(atk, atk_value_get_type);
    RESOLVE(atk, atk_window_get_type);
    RESOLVE(atk, atk_util_get_type);
    RESOLVE(atk, atk_state_set_new);
    RESOLVE(atk, atk_state_set_add_state);
    RESOLVE(atk, atk_object_notify_state_change);
    RESOLVE(atk, atk_object_set_accessible_id);
    RESOLVE(atk, atk_focus_tracker_notify);
    RESOLVE(atk, atk_range_new);
    RESOLVE(bridge, atk_bridge_adaptor_init);
    RESOLVE(bridge, atk_bridge_adaptor_cleanup);
#undef RESOLVE
}

// MARK: - UTF-8 (ATK counts text in characters; every string kept here is valid UTF-8)

// A copy of `text` (malloc) in which each byte that does not begin a valid UTF-8 sequence is
// replaced by U+FFFD: libdbus rejects invalid UTF-8, and aborts the process doing so.
static char *copy_utf8(const char *text)
{
    if (!text) return NULL;
    size_t length = strlen(text);
    char *copy = malloc(length * 3 + 1);  // at worst, each byte becomes the 3 bytes of U+FFFD
    if (!copy) abort();
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, o = 0;
    while (i < length) {
        unsigned char c = s[i];
        size_t n = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3
                 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        int valid = n > 0 && i + n <= length;
        for (size_t k = 1; valid && k < n; k++) valid = (s[i + k] & 0xC0) == 0x80;
        if (valid && n == 3) {
            if (c == 0xE0 && s[i + 1] < 0xA0) valid = 0;   // overlong
            if (c == 0xED && s[i + 1] >= 0xA0) valid = 0;  // a surrogate
        }
        if (valid && n == 4) {
            if (c == 0xF0 && s[i + 1] < 0x90) valid = 0;   // overlong
            if (c == 0xF4 && s[i + 1] >= 0x90) valid = 0;  // beyond U+10FFFF
        }
        if (valid) {
            memcpy(copy + o, s + i, n);
            o += n;
            i += n;
        } else {
            memcpy(copy + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += 1;
        }
    }
    copy[o] = '\0';
    return copy;
}

static int utf8_length(const char *text)
{
    int count = 0;
    for (const unsigned char *s = (const unsigned char *)text; *s; s++)
        if ((*s & 0xC0) != 0x80) count++;
    return count;
}

// The byte index of character `offset` (the end of the text beyond it).
static size_t utf8_index(const char *text, int offset)
{
    size_t i = 0;
    for (int n = 0; text[i] && n < offset; n++) {
        i++;
        while ((text[i] & 0xC0) == 0x80) i++;
    }
    return i;
}

static gunichar utf8_decode(const char *text)
{
    const unsigned char *s = (const unsigned char *)text;
    if (s[0] < 0x80) return s[0];
    if (s[0] < 0xE0) return ((gunichar)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    if (s[0] < 0xF0) return ((gunichar)(s[0] & 0x0F) << 12) | ((gunichar)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    return ((gunichar)(s[0] & 0x07) << 18) | ((gunichar)(s[1] & 0x3F) << 12) | ((gunichar)(s[2] & 0x3F) << 6)
         | (s[3] & 0x3F);
}

// A copy allocated by GLib (ATK's callers free it with g_free) of characters [start, end).
static gchar *g_substring(const char *text, int start, int end)
{
    size_t from = utf8_index(text, start);
    size_t to = end > start ? from + utf8_index(text + from, end - start) : from;
    gchar *copy = real.g_malloc(to - from + 1);
    memcpy(copy, text + from, to - from);
    copy[to - from] = '\0';
    return copy;
}

// MARK: - The objects

// Which ATK interfaces an object's GType implements. Each combination used is a GType of its
// own, so that an object lists (AT-SPI GetInterfaces) only the interfaces its node has.
enum {
    IFACE_COMPONENT = 1,
    IFACE_ACTION = 2,
    IFACE_TEXT = 4,
    IFACE_EDITABLE_TEXT = 8,
    IFACE_VALUE = 16,
    IFACE_WINDOW = 32,
    IFACE_COMBINATIONS = 64
};

// An accessible object: a node of the tree (id > 0) or the application (id 0).
typedef struct RvObject {
    AtkObject atk;
    uint32_t id;
    unsigned ifaces;        // IFACE_* of its GType
    int role;               // rv_a11y_role (0 for the application)
    char *name, *value;     // malloc, valid UTF-8 or NULL
    uint32_t states, actions;
    int x, y, width, height;
    double value_min, value_max, value_now;
    int has_range;
    uint32_t parent_id;
    uint32_t *child_ids;    // as given (the application's: its top-levels in order of creation)
    size_t child_id_count;
    // The children as reported: the objects of child_ids that exist (borrowed, the table owns
    // them), and the object listing this one.
    struct RvObject **children;
    size_t child_count;
    struct RvObject *container;
    uint64_t atk_states;    // bit (1 << AtkStateType) for each state last reported
    int defunct;            // removed from the tree; only its last references keep it
    int fresh;              // created by the batch being applied
    unsigned mark;          // scratch for the diff of children lists
} RvObject;

static GType object_types[IFACE_COMBINATIONS];
static AtkObjectClass *parent_class;

// The state of the bridge's thread. Everything below `thread` is touched only on that thread.
static struct {
    pthread_mutex_t lock;   // guards `running` and the start/stop handshake
    pthread_cond_t changed;
    int running, starting;
    pthread_t thread;
    int init_result;        // the thread's start: 0, or -1 with init_error
    char init_error[256];
    char *application_name;
    rv_a11y_action_fn on_action;
    void *context;

    GMainLoop *loop;
    GHashTable *objects;    // id -> RvObject (a reference)
    RvObject *application;
    RvObject *focus;
    unsigned mark;
    AtkUtilClass *util_class;
} bridge = { .lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER };

static RvObject *find(uint32_t id)
{
    if (id == 0) return bridge.application;
    return bridge.objects ? real.g_hash_table_lookup(bridge.objects, GUINT_TO_POINTER(id)) : NULL;
}

static void report(RvObject *object, int action, const char *text, double number)
{
    if (bridge.on_action && !object->defunct) bridge.on_action(bridge.context, object->id, action, text, number);
}

// The text of the Text interface: a text field's value; a label's value, else its name.
static const char *text_of(RvObject *object)
{
    if (object->value) return object->value;
    if (object->role == RV_A11Y_ROLE_LABEL && object->name) return object->name;
    return "";
}

static AtkRole atk_role(int role)
{
    switch (role) {
    case RV_A11Y_ROLE_FRAME: return ATK_ROLE_FRAME;
    case RV_A11Y_ROLE_GROUP: return ATK_ROLE_PANEL;
    case RV_A11Y_ROLE_BUTTON: return ATK_ROLE_PUSH_BUTTON;
    case RV_A11Y_ROLE_LABEL: return ATK_ROLE_LABEL;
    case RV_A11Y_ROLE_TEXT_FIELD: return ATK_ROLE_ENTRY;
    case RV_A11Y_ROLE_IMAGE: return ATK_ROLE_IMAGE;
    case RV_A11Y_ROLE_PROGRESS: return ATK_ROLE_PROGRESS_BAR;
    case RV_A11Y_ROLE_CANVAS: return ATK_ROLE_CANVAS;
    case RV_A11Y_ROLE_LIST: return ATK_ROLE_LIST;
    case RV_A11Y_ROLE_LIST_ITEM: return ATK_ROLE_LIST_ITEM;
    case RV_A11Y_ROLE_EMBEDDED: return ATK_ROLE_EMBEDDED;
    case RV_A11Y_ROLE_CHECK_BOX: return ATK_ROLE_CHECK_BOX;
    default: return ATK_ROLE_UNKNOWN;
    }
}

static unsigned ifaces_of(const rv_a11y_node *node)
{
    unsigned ifaces = IFACE_COMPONENT;
    if (node->actions & (RV_A11Y_ACTION_PRESS | RV_A11Y_ACTION_INCREMENT | RV_A11Y_ACTION_DECREMENT))
        ifaces |= IFACE_ACTION;
    if (node->role == RV_A11Y_ROLE_LABEL || node->role == RV_A11Y_ROLE_TEXT_FIELD) ifaces |= IFACE_TEXT;
    if (node->role == RV_A11Y_ROLE_TEXT_FIELD) ifaces |= IFACE_EDITABLE_TEXT;
    if (node->has_range || node->role == RV_A11Y_ROLE_PROGRESS) ifaces |= IFACE_VALUE;
    if (node->role == RV_A11Y_ROLE_FRAME) ifaces |= IFACE_WINDOW;
    return ifaces;
}

#define STATE(s) ((uint64_t)1 << (s))

static uint64_t states_of(RvObject *object)
{
    if (object->id == 0) return 0;
    uint64_t states = STATE(ATK_STATE_VISIBLE) | STATE(ATK_STATE_SHOWING);
    if (!(object->states & RV_A11Y_STATE_DISABLED)) states |= STATE(ATK_STATE_ENABLED) | STATE(ATK_STATE_SENSITIVE);
    if (object->states & RV_A11Y_STATE_FOCUSABLE) states |= STATE(ATK_STATE_FOCUSABLE);
    if (object == bridge.focus) states |= STATE(ATK_STATE_FOCUSED);
    if (object->states & RV_A11Y_STATE_SELECTED) states |= STATE(ATK_STATE_SELECTED);
    if (object->role == RV_A11Y_ROLE_LIST_ITEM) states |= STATE(ATK_STATE_SELECTABLE);
    if (object->role == RV_A11Y_ROLE_CHECK_BOX) states |= STATE(ATK_STATE_CHECKABLE);
    if (object->states & RV_A11Y_STATE_CHECKED) states |= STATE(ATK_STATE_CHECKED);
    if (object->states & RV_A11Y_STATE_EDITABLE) states |= STATE(ATK_STATE_EDITABLE);
    if (object->role == RV_A11Y_ROLE_TEXT_FIELD)
        states |= STATE((object->states & RV_A11Y_STATE_MULTI_LINE) ? ATK_STATE_MULTI_LINE : ATK_STATE_SINGLE_LINE);
    if (object->role == RV_A11Y_ROLE_FRAME && !(object->states & RV_A11Y_STATE_INACTIVE))
        states |= STATE(ATK_STATE_ACTIVE);
    return states;
}

// Recomputes the states and emits state-change for each that changed (object:state-changed:*).
static void update_states(RvObject *object)
{
    uint64_t states = states_of(object);
    uint64_t changed = states ^ object->atk_states;
    object->atk_states = states;
    for (int state = 0; changed && state < ATK_STATE_LAST_DEFINED; state++) {
        if (!(changed & STATE(state))) continue;
        changed &= ~STATE(state);
        real.atk_object_notify_state_change(&object->atk, (AtkState)state, (states & STATE(state)) != 0);
        if (state == ATK_STATE_ACTIVE && (object->ifaces & IFACE_WINDOW))
            real.g_signal_emit_by_name(object, (states & STATE(state)) ? "activate" : "deactivate");
    }
}

// MARK: AtkObject

static const gchar *object_get_name(AtkObject *accessible)
{
    return ((RvObject *)accessible)->name;
}

static AtkObject *object_get_parent(AtkObject *accessible)
{
    RvObject *object = (RvObject *)accessible;
    if (object->id == 0) return NULL;
    if (object->container) return &object->container->atk;
    RvObject *parent = object->defunct ? NULL : find(object->parent_id);
    return parent ? &parent->atk : NULL;
}

static gint object_get_n_children(AtkObject *accessible)
{
    return (gint)((RvObject *)accessible)->child_count;
}

static AtkObject *object_ref_child(AtkObject *accessible, gint index)
{
    RvObject *object = (RvObject *)accessible;
    if (index < 0 || (size_t)index >= object->child_count) return NULL;
    return (real.g_object_ref)(object->children[index]);
}

static gint object_get_index_in_parent(AtkObject *accessible)
{
    RvObject *object = (RvObject *)accessible;
    if (!object->container) return -1;
    for (size_t i = 0; i < object->container->child_count; i++)
        if (object->container->children[i] == object) return (gint)i;
    return -1;
}

static AtkStateSet *object_ref_state_set(AtkObject *accessible)
{
    RvObject *object = (RvObject *)accessible;
    AtkStateSet *set = real.atk_state_set_new();
    if (object->defunct) {
        real.atk_state_set_add_state(set, ATK_STATE_DEFUNCT);
        return set;
    }
    for (int state = 0; state < ATK_STATE_LAST_DEFINED; state++)
        if (object->atk_states & STATE(state)) real.atk_state_set_add_state(set, (AtkStateType)state);
    return set;
}

static AtkLayer object_get_layer(AtkObject *accessible)
{
    return ((RvObject *)accessible)->role == RV_A11Y_ROLE_FRAME ? ATK_LAYER_WINDOW : ATK_LAYER_WIDGET;
}

static void object_finalize(GObject *gobject)
{
    RvObject *object = (RvObject *)gobject;
    free(object->name);
    free(object->value);
    free(object->child_ids);
    free(object->children);
    G_OBJECT_CLASS(parent_class)->finalize(gobject);
}

static void object_class_init(gpointer klass, gpointer data)
{
    (void)data;
    AtkObjectClass *atk_class = klass;
    parent_class = real.g_type_class_peek_parent(klass);
    G_OBJECT_CLASS(klass)->finalize = object_finalize;
    atk_class->get_name = object_get_name;
    atk_class->get_parent = object_get_parent;
    atk_class->get_n_children = object_get_n_children;
    atk_class->ref_child = object_ref_child;
    atk_class->get_index_in_parent = object_get_index_in_parent;
    atk_class->ref_state_set = object_ref_state_set;
    atk_class->get_layer = object_get_layer;
}

// MARK: AtkComponent

// The top-level (window) an object is in: its last ancestor below the application.
static RvObject *top_level(RvObject *object)
{
    while (object->container && object->container->id != 0) object = object->container;
    return object;
}

static void position_in(RvObject *object, AtkCoordType coords, gint *x, gint *y)
{
    *x = object->x;
    *y = object->y;
    RvObject *origin = NULL;
    if (coords == ATK_XY_WINDOW) origin = top_level(object);
    else if (coords == ATK_XY_PARENT && object->container && object->container->id != 0) origin = object->container;
    if (origin) {
        *x -= origin->x;
        *y -= origin->y;
    }
}

static void component_get_extents(AtkComponent *component, gint *x, gint *y, gint *width, gint *height,
                                  AtkCoordType coords)
{
    RvObject *object = (RvObject *)component;
    gint px, py;
    position_in(object, coords, &px, &py);
    if (x) *x = px;
    if (y) *y = py;
    if (width) *width = object->width;
    if (height) *height = object->height;
}

static gboolean component_contains(AtkComponent *component, gint x, gint y, AtkCoordType coords)
{
    RvObject *object = (RvObject *)component;
    gint px, py;
    position_in(object, coords, &px, &py);
    return x >= px && y >= py && x < px + object->width && y < py + object->height;
}

// The child at a point: the last (topmost) child containing it. For ATK_XY_PARENT the point is
// taken relative to this object, the parent of the children tested.
static AtkObject *component_ref_accessible_at_point(AtkComponent *component, gint x, gint y, AtkCoordType coords)
{
    RvObject *object = (RvObject *)component;
    if (coords == ATK_XY_PARENT) {
        x += object->x;
        y += object->y;
        coords = ATK_XY_SCREEN;
    }
    for (size_t i = object->child_count; i > 0; i--) {
        RvObject *child = object->children[i - 1];
        if ((child->ifaces & IFACE_COMPONENT) && component_contains((AtkComponent *)child, x, y, coords))
            return (real.g_object_ref)(child);
    }
    return NULL;
}

static gboolean component_grab_focus(AtkComponent *component)
{
    RvObject *object = (RvObject *)component;
    if (!(object->actions & RV_A11Y_ACTION_FOCUS) && !(object->states & RV_A11Y_STATE_FOCUSABLE)) return FALSE;
    report(object, RV_A11Y_ACTION_FOCUS, NULL, 0);
    return TRUE;
}

static AtkLayer component_get_layer(AtkComponent *component)
{
    return object_get_layer((AtkObject *)component);
}

static gboolean component_scroll_to(AtkComponent *component, AtkScrollType type)
{
    (void)type;
    RvObject *object = (RvObject *)component;
    if (!(object->actions & RV_A11Y_ACTION_SCROLL_INTO_VIEW)) return FALSE;
    report(object, RV_A11Y_ACTION_SCROLL_INTO_VIEW, NULL, 0);
    return TRUE;
}

static gboolean component_scroll_to_point(AtkComponent *component, AtkCoordType coords, gint x, gint y)
{
    (void)coords, (void)x, (void)y;
    return component_scroll_to(component, ATK_SCROLL_ANYWHERE);
}

static void component_init(gpointer g_iface, gpointer data)
{
    (void)data;
    AtkComponentIface *iface = g_iface;
    iface->get_extents = component_get_extents;
    iface->contains = component_contains;
    iface->ref_accessible_at_point = component_ref_accessible_at_point;
    iface->grab_focus = component_grab_focus;
    iface->get_layer = component_get_layer;
    iface->scroll_to = component_scroll_to;
    iface->scroll_to_point = component_scroll_to_point;
}

// MARK: AtkAction

static const struct {
    uint32_t action;
    const char *name, *description;
} action_table[] = {
    { RV_A11Y_ACTION_PRESS, "click", "press" },
    { RV_A11Y_ACTION_INCREMENT, "increment", "increment the value" },
    { RV_A11Y_ACTION_DECREMENT, "decrement", "decrement the value" },
};

// The index in action_table of an object's action number `i`, or -1.
static int action_at(RvObject *object, gint i)
{
    for (int k = 0; k < (int)(sizeof action_table / sizeof *action_table); k++) {
        if (!(object->actions & action_table[k].action)) continue;
        if (i-- == 0) return k;
    }
    return -1;
}

static gint action_get_n_actions(AtkAction *action)
{
    RvObject *object = (RvObject *)action;
    gint count = 0;
    for (size_t k = 0; k < sizeof action_table / sizeof *action_table; k++)
        if (object->actions & action_table[k].action) count++;
    return count;
}

static gboolean action_do_action(AtkAction *action, gint i)
{
    RvObject *object = (RvObject *)action;
    int k = action_at(object, i);
    if (k < 0 || (object->states & RV_A11Y_STATE_DISABLED)) return FALSE;
    report(object, (int)action_table[k].action, NULL, 0);
    return TRUE;
}

static const gchar *action_get_name(AtkAction *action, gint i)
{
    int k = action_at((RvObject *)action, i);
    return k < 0 ? NULL : action_table[k].name;
}

static const gchar *action_get_description(AtkAction *action, gint i)
{
    int k = action_at((RvObject *)action, i);
    return k < 0 ? NULL : action_table[k].description;
}

static void action_init(gpointer g_iface, gpointer data)
{
    (void)data;
    AtkActionIface *iface = g_iface;
    iface->do_action = action_do_action;
    iface->get_n_actions = action_get_n_actions;
    iface->get_name = action_get_name;
    iface->get_localized_name = action_get_name;
    iface->get_description = action_get_description;
}

// MARK: AtkText

static gchar *text_get_text(AtkText *text, gint start, gint end)
{
    const char *string = text_of((RvObject *)text);
    gint length = utf8_length(string);
    if (end < 0 || end > length) end = length;
    if (start < 0) start = 0;
    if (start > end) start = end;
    return g_substring(string, start, end);
}

static gint text_get_character_count(AtkText *text)
{
    return utf8_length(text_of((RvObject *)text));
}

static gint text_get_caret_offset(AtkText *text)
{
    RvObject *object = (RvObject *)text;
    return object->role == RV_A11Y_ROLE_TEXT_FIELD ? utf8_length(text_of(object)) : -1;
}

static gunichar text_get_character_at_offset(AtkText *text, gint offset)
{
    const char *string = text_of((RvObject *)text);
    if (offset < 0 || offset >= utf8_length(string)) return 0;
    return utf8_decode(string + utf8_index(string, offset));
}

static int is_space(gunichar c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == 0xA0 || c == 0x3000
        || (c >= 0x2000 && c <= 0x200A);
}

// Whether a segment of `granularity` starts at character `i` of `chars` (`count` characters).
static int segment_starts(const gunichar *chars, int count, int i, AtkTextGranularity granularity)
{
    if (i <= 0) return 1;
    if (i >= count) return 0;
    switch (granularity) {
    case ATK_TEXT_GRANULARITY_CHAR:
        return 1;
    case ATK_TEXT_GRANULARITY_WORD:  // a word and the spaces after it
        return is_space(chars[i - 1]) && !is_space(chars[i]);
    case ATK_TEXT_GRANULARITY_SENTENCE: {  // up to . ! or ? and the spaces after it
        if (is_space(chars[i]) || !is_space(chars[i - 1])) return chars[i - 1] == '\n';
        int k = i - 1;
        while (k > 0 && is_space(chars[k])) k--;
        return chars[k] == '.' || chars[k] == '!' || chars[k] == '?' || chars[i - 1] == '\n';
    }
    case ATK_TEXT_GRANULARITY_LINE:
    case ATK_TEXT_GRANULARITY_PARAGRAPH:
    default:
        return chars[i - 1] == '\n';
    }
}

// The segment of `granularity` holding character `offset`: [*start, *end) in characters.
static gchar *text_segment(RvObject *object, gint offset, AtkTextGranularity granularity, gint *start, gint *end)
{
    const char *string = text_of(object);
    int count = utf8_length(string);
    if (offset < 0) offset = 0;
    if (offset > count) offset = count;
    gunichar *chars = malloc(sizeof(gunichar) * (size_t)(count + 1));
    if (!chars) abort();
    const char *s = string;
    for (int i = 0; i < count; i++) {
        chars[i] = utf8_decode(s);
        s += utf8_index(s, 1);
    }
    int from = offset, to = offset;
    if (offset < count) {
        while (!segment_starts(chars, count, from, granularity)) from--;
        to = offset + 1;
        while (to < count && !segment_starts(chars, count, to, granularity)) to++;
    }
    free(chars);
    if (start) *start = from;
    if (end) *end = to;
    return g_substring(string, from, to);
}

static gchar *text_get_string_at_offset(AtkText *text, gint offset, AtkTextGranularity granularity, gint *start,
                                        gint *end)
{
    return text_segment((RvObject *)text, offset, granularity, start, end);
}

static AtkTextGranularity granularity_of(AtkTextBoundary boundary)
{
    switch (boundary) {
    case ATK_TEXT_BOUNDARY_CHAR: return ATK_TEXT_GRANULARITY_CHAR;
    case ATK_TEXT_BOUNDARY_WORD_START:
    case ATK_TEXT_BOUNDARY_WORD_END: return ATK_TEXT_GRANULARITY_WORD;
    case ATK_TEXT_BOUNDARY_SENTENCE_START:
    case ATK_TEXT_BOUNDARY_SENTENCE_END: return ATK_TEXT_GRANULARITY_SENTENCE;
    default: return ATK_TEXT_GRANULARITY_LINE;
    }
}

static gchar *text_get_text_at_offset(AtkText *text, gint offset, AtkTextBoundary boundary, gint *start, gint *end)
{
    return text_segment((RvObject *)text, offset, granularity_of(boundary), start, end);
}

static gchar *text_get_text_before_offset(AtkText *text, gint offset, AtkTextBoundary boundary, gint *start,
                                          gint *end)
{
    RvObject *object = (RvObject *)text;
    gint from, to;
    real.g_free(text_segment(object, offset, granularity_of(boundary), &from, &to));
    if (from == 0) {
        if (start) *start = 0;
        if (end) *end = 0;
        return g_substring("", 0, 0);
    }
    return text_segment(object, from - 1, granularity_of(boundary), start, end);
}

static gchar *text_get_text_after_offset(AtkText *text, gint offset, AtkTextBoundary boundary, gint *start,
                                         gint *end)
{
    RvObject *object = (RvObject *)text;
    gint from, to;
    real.g_free(text_segment(object, offset, granularity_of(boundary), &from, &to));
    return text_segment(object, to, granularity_of(boundary), start, end);
}

// Characters are laid out evenly over the extents: the real glyphs are the remote side's.
static void text_get_character_extents(AtkText *text, gint offset, gint *x, gint *y, gint *width, gint *height,
                                       AtkCoordType coords)
{
    RvObject *object = (RvObject *)text;
    gint count = utf8_length(text_of(object));
    gint px, py;
    position_in(object, coords, &px, &py);
    gint advance = count > 0 ? object->width / count : 0;
    if (offset < 0) offset = 0;
    if (offset > count) offset = count;
    if (x) *x = px + (count > 0 ? (gint)((long)object->width * offset / count) : 0);
    if (y) *y = py;
    if (width) *width = advance;
    if (height) *height = object->height;
}

static gint text_get_offset_at_point(AtkText *text, gint x, gint y, AtkCoordType coords)
{
    RvObject *object = (RvObject *)text;
    if (!component_contains((AtkComponent *)object, x, y, coords)) return -1;
    gint count = utf8_length(text_of(object));
    gint px, py;
    position_in(object, coords, &px, &py);
    if (object->width <= 0 || count == 0) return 0;
    gint offset = (gint)((long)(x - px) * count / object->width);
    return offset < count ? offset : count - 1;
}

static gint text_get_n_selections(AtkText *text)
{
    (void)text;
    return 0;
}

static gchar *text_get_selection(AtkText *text, gint selection, gint *start, gint *end)
{
    (void)text, (void)selection;
    if (start) *start = 0;
    if (end) *end = 0;
    return NULL;
}

static AtkAttributeSet *text_get_run_attributes(AtkText *text, gint offset, gint *start, gint *end)
{
    (void)offset;
    if (start) *start = 0;
    if (end) *end = text_get_character_count(text);
    return NULL;
}

static void text_init(gpointer g_iface, gpointer data)
{
    (void)data;
    AtkTextIface *iface = g_iface;
    iface->get_text = text_get_text;
    iface->get_character_count = text_get_character_count;
    iface->get_caret_offset = text_get_caret_offset;
    iface->get_character_at_offset = text_get_character_at_offset;
    iface->get_string_at_offset = text_get_string_at_offset;
    iface->get_text_at_offset = text_get_text_at_offset;
    iface->get_text_before_offset = text_get_text_before_offset;
    iface->get_text_after_offset = text_get_text_after_offset;
    iface->get_character_extents = text_get_character_extents;
    iface->get_offset_at_point = text_get_offset_at_point;
    iface->get_n_selections = text_get_n_selections;
    iface->get_selection = text_get_selection;
    iface->get_run_attributes = text_get_run_attributes;
}

// MARK: AtkEditableText (each edit is asked of the caller as the new full text)

static int editable(RvObject *object)
{
    return !(object->states & RV_A11Y_STATE_DISABLED)
        && ((object->states & RV_A11Y_STATE_EDITABLE) || (object->actions & RV_A11Y_ACTION_SET_VALUE));
}

// Reports the text with characters [start, end) replaced by `insert` (of `insert_bytes` bytes).
static void report_edit(RvObject *object, gint start, gint end, const char *insert, size_t insert_bytes)
{
    const char *old = text_of(object);
    size_t from = utf8_index(old, start), to = utf8_index(old, end), length = strlen(old);
    char *text = malloc(length - (to - from) + insert_bytes + 1);
    if (!text) abort();
    memcpy(text, old, from);
    memcpy(text + from, insert, insert_bytes);
    memcpy(text + from + insert_bytes, old + to, length - to + 1);
    report(object, RV_A11Y_ACTION_SET_VALUE, text, 0);
    free(text);
}

static void editable_set_text_contents(AtkEditableText *text, const gchar *string)
{
    RvObject *object = (RvObject *)text;
    if (!editable(object)) return;
    char *copy = copy_utf8(string ? string : "");
    report(object, RV_A11Y_ACTION_SET_VALUE, copy, 0);
    free(copy);
}

// `length` is taken as a count of characters (AT-SPI's meaning; ATK says bytes, a count of
// bytes is never shorter, and the text inserted stops at its end either way).
static void editable_insert_text(AtkEditableText *text, const gchar *string, gint length, gint *position)
{
    RvObject *object = (RvObject *)text;
    if (!editable(object) || !string) return;
    char *insert = copy_utf8(string);
    size_t bytes = length < 0 ? strlen(insert) : utf8_index(insert, length);
    gint count = utf8_length(text_of(object));
    gint at = position ? *position : count;
    if (at < 0 || at > count) at = count;
    report_edit(object, at, at, insert, bytes);
    if (position) {
        insert[bytes] = '\0';
        *position = at + utf8_length(insert);
    }
    free(insert);
}

static void editable_delete_text(AtkEditableText *text, gint start, gint end)
{
    RvObject *object = (RvObject *)text;
    if (!editable(object)) return;
    gint count = utf8_length(text_of(object));
    if (end < 0 || end > count) end = count;
    if (start < 0) start = 0;
    if (start >= end) return;
    report_edit(object, start, end, "", 0);
}

static void editable_init(gpointer g_iface, gpointer data)
{
    (void)data;
    AtkEditableTextIface *iface = g_iface;
    iface->set_text_contents = editable_set_text_contents;
    iface->insert_text = editable_insert_text;
    iface->delete_text = editable_delete_text;
}

// MARK: AtkValue (both the API before ATK 2.12, with GValues, and the one after)

static void value_get_current_value(AtkValue *value, GValue *out)
{
    real.g_value_init(out, G_TYPE_DOUBLE);
    real.g_value_set_double(out, ((RvObject *)value)->value_now);
}

static void value_get_maximum_value(AtkValue *value, GValue *out)
{
    real.g_value_init(out, G_TYPE_DOUBLE);
    real.g_value_set_double(out, ((RvObject *)value)->value_max);
}

static void value_get_minimum_value(AtkValue *value, GValue *out)
{
    real.g_value_init(out, G_TYPE_DOUBLE);
    real.g_value_set_double(out, ((RvObject *)value)->value_min);
}

static void value_get_minimum_increment(AtkValue *value, GValue *out)
{
    (void)value;
    real.g_value_init(out, G_TYPE_DOUBLE);
    real.g_value_set_double(out, 0);
}

static void value_set_value(AtkValue *value, const gdouble number)
{
    RvObject *object = (RvObject *)value;
    if (!(object->actions & RV_A11Y_ACTION_SET_VALUE) || (object->states & RV_A11Y_STATE_DISABLED)) return;
    report(object, RV_A11Y_ACTION_SET_VALUE, NULL, number);
}

static gboolean value_set_current_value(AtkValue *value, const GValue *in)
{
    RvObject *object = (RvObject *)value;
    if (G_VALUE_TYPE(in) != G_TYPE_DOUBLE || !(object->actions & RV_A11Y_ACTION_SET_VALUE)) return FALSE;
    value_set_value(value, real.g_value_get_double(in));
    return TRUE;
}

static void value_get_value_and_text(AtkValue *value, gdouble *number, gchar **text)
{
    RvObject *object = (RvObject *)value;
    if (number) *number = object->value_now;
    if (text) *text = object->value ? g_substring(object->value, 0, utf8_length(object->value)) : NULL;
}

static AtkRange *value_get_range(AtkValue *value)
{
    RvObject *object = (RvObject *)value;
    return real.atk_range_new(object->value_min, object->value_max, NULL);
}

static gdouble value_get_increment(AtkValue *value)
{
    (void)value;
    return 0;  // any value of the range
}

static void value_init(gpointer g_iface, gpointer data)
{
    (void)data;
    AtkValueIface *iface = g_iface;
    iface->get_current_value = value_get_current_value;
    iface->get_maximum_value = value_get_maximum_value;
    iface->get_minimum_value = value_get_minimum_value;
    iface->get_minimum_increment = value_get_minimum_increment;
    iface->set_current_value = value_set_current_value;
    iface->get_value_and_text = value_get_value_and_text;
    iface->get_range = value_get_range;
    iface->get_increment = value_get_increment;
    iface->set_value = value_set_value;
}

// AtkWindow has signals only (create, activate, deactivate…: atk-bridge's window: events).
static void window_init(gpointer g_iface, gpointer data)
{
    (void)g_iface, (void)data;
}

// The GType of objects with `ifaces`, registered the first time (types outlive a stop).
static GType object_type(unsigned ifaces)
{
    if (object_types[ifaces]) return object_types[ifaces];
    GTypeInfo info = {
        .class_size = sizeof(AtkObjectClass),
        .class_init = object_class_init,
        .instance_size = sizeof(RvObject),
    };
    char name[32];
    snprintf(name, sizeof name, "RvA11yObject%02x", ifaces);
    GType type = real.g_type_register_static(real.atk_object_get_type(), name, &info, 0);
    static const struct {
        unsigned iface;
        GInterfaceInitFunc init;
    } interfaces[] = {
        { IFACE_COMPONENT, component_init }, { IFACE_ACTION, action_init }, { IFACE_TEXT, text_init },
        { IFACE_EDITABLE_TEXT, editable_init }, { IFACE_VALUE, value_init }, { IFACE_WINDOW, window_init },
    };
    GType (*interface_types[])(void) = {
        real.atk_component_get_type, real.atk_action_get_type, real.atk_text_get_type,
        real.atk_editable_text_get_type, real.atk_value_get_type, real.atk_window_get_type,
    };
    for (size_t i = 0; i < sizeof interfaces / sizeof *interfaces; i++) {
        if (!(ifaces & interfaces[i].iface)) continue;
        GInterfaceInfo interface_info = { .interface_init = interfaces[i].init };
        real.g_type_add_interface_static(type, interface_types[i](), &interface_info);
    }
    object_types[ifaces] = type;
    return type;
}

// MARK: - Applying a batch

typedef struct {
    rv_a11y_node *nodes;  // strings and children copied (malloc), owned until taken by an object
    size_t count;
    uint32_t *removed;
    size_t removed_count;
    uint32_t focus;
} Batch;

static void free_batch(Batch *batch)
{
    for (size_t i = 0; i < batch->count; i++) {
        free((char *)batch->nodes[i].name);
        free((char *)batch->nodes[i].value);
        free((uint32_t *)batch->nodes[i].children);
    }
    free(batch->nodes);
    free(batch->removed);
    free(batch);
}

static void emit_children_changed(RvObject *parent, int add, size_t index, RvObject *child)
{
    real.g_signal_emit_by_name(parent, add ? "children-changed::add" : "children-changed::remove", (guint)index,
                               (gpointer)child);
}

static void remove_child_at(RvObject *parent, size_t index, int notify)
{
    RvObject *child = parent->children[index];
    memmove(parent->children + index, parent->children + index + 1,
            (parent->child_count - index - 1) * sizeof *parent->children);
    parent->child_count--;
    if (child->container == parent) child->container = NULL;
    if (notify) emit_children_changed(parent, 0, index, child);
}

// Takes an object out of the children of the object listing it (children-changed::remove).
static void detach(RvObject *object)
{
    RvObject *container = object->container;
    if (!container) return;
    for (size_t i = 0; i < container->child_count; i++) {
        if (container->children[i] == object) {
            remove_child_at(container, i, 1);
            return;
        }
    }
    object->container = NULL;
}

static void remove_id(uint32_t **ids, size_t *count, uint32_t id)
{
    size_t kept = 0;
    for (size_t i = 0; i < *count; i++)
        if ((*ids)[i] != id) (*ids)[kept++] = (*ids)[i];
    *count = kept;
}

static void append_id(uint32_t **ids, size_t *count, uint32_t id)
{
    for (size_t i = 0; i < *count; i++)
        if ((*ids)[i] == id) return;
    uint32_t *grown = realloc(*ids, (*count + 1) * sizeof **ids);
    if (!grown) abort();
    grown[(*count)++] = id;
    *ids = grown;
}

// Destroys an object: removed from its parent, defunct, released by the table.
static void destroy(RvObject *object)
{
    detach(object);
    for (size_t i = 0; i < object->child_count; i++)
        if (object->children[i]->container == object) object->children[i]->container = NULL;
    object->child_count = 0;
    if (bridge.focus == object) bridge.focus = NULL;
    object->defunct = 1;
    real.atk_object_notify_state_change(&object->atk, ATK_STATE_DEFUNCT, TRUE);
    real.g_hash_table_remove(bridge.objects, GUINT_TO_POINTER(object->id));
}

// Moves a node's data into an object (the node's strings and children are taken).
static void take_node(RvObject *object, rv_a11y_node *node)
{
    free(object->name);
    free(object->value);
    free(object->child_ids);
    object->role = node->role;
    object->name = (char *)node->name;
    object->value = (char *)node->value;
    object->states = node->states;
    object->actions = node->actions;
    object->x = node->x;
    object->y = node->y;
    object->width = node->width;
    object->height = node->height;
    object->value_min = node->value_min;
    object->value_max = node->value_max;
    object->value_now = node->value_now;
    object->has_range = node->has_range;
    object->parent_id = node->parent;
    object->child_ids = (uint32_t *)node->children;
    object->child_id_count = node->child_count;
    node->name = node->value = NULL;
    node->children = NULL;
    object->atk.role = atk_role(node->role);
}

static RvObject *create(unsigned ifaces, rv_a11y_node *node)
{
    RvObject *object = real.g_object_new(object_type(ifaces), NULL);
    object->id = node->id;
    object->ifaces = ifaces;
    char id[16];
    snprintf(id, sizeof id, "%u", (unsigned)node->id);
    real.atk_object_set_accessible_id(&object->atk, id);
    take_node(object, node);
    object->atk_states = states_of(object);
    real.g_hash_table_insert(bridge.objects, GUINT_TO_POINTER(node->id), object);
    return object;
}

static int same_string(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

// Emits text-remove and text-insert (object:text-changed:delete/insert) for what changed between
// two texts: the part between their common beginning and their common end.
static void emit_text_changed(RvObject *object, const char *old, const char *new)
{
    size_t old_length = strlen(old), new_length = strlen(new), prefix = 0, suffix = 0;
    while (prefix < old_length && prefix < new_length && old[prefix] == new[prefix]) prefix++;
    while (prefix > 0 && (old[prefix] & 0xC0) == 0x80) prefix--;  // to a character's start
    while (suffix < old_length - prefix && suffix < new_length - prefix
           && old[old_length - 1 - suffix] == new[new_length - 1 - suffix])
        suffix++;
    while (suffix > 0 && (old[old_length - suffix] & 0xC0) == 0x80) suffix--;
    char *part = malloc((old_length > new_length ? old_length : new_length) + 1);
    if (!part) abort();
    char *start = malloc(prefix + 1);
    if (!start) abort();
    memcpy(start, old, prefix);
    start[prefix] = '\0';
    gint position = utf8_length(start);
    free(start);
    size_t removed = old_length - prefix - suffix, inserted = new_length - prefix - suffix;
    if (removed) {
        memcpy(part, old + prefix, removed);
        part[removed] = '\0';
        real.g_signal_emit_by_name(object, "text-remove", position, utf8_length(part), part);
    }
    if (inserted) {
        memcpy(part, new + prefix, inserted);
        part[inserted] = '\0';
        real.g_signal_emit_by_name(object, "text-insert", position, utf8_length(part), part);
    }
    free(part);
}

enum { CHANGED_CHILDREN = 1, CHANGED_PARENT = 2 };

// Replaces an existing object's data and announces what changed. Returns CHANGED_* bits: whether
// its children (as ids) or its parent changed.
static int update(RvObject *object, rv_a11y_node *node)
{
    char *old_text = (object->ifaces & IFACE_TEXT) ? copy_utf8(text_of(object)) : NULL;
    int name_changed = !same_string(object->name, node->name);
    int role_changed = object->role != node->role;
    int bounds_changed = object->x != node->x || object->y != node->y || object->width != node->width
                      || object->height != node->height;
    int value_changed = object->value_now != node->value_now || object->has_range != node->has_range
                     || !same_string(object->value, node->value);
    int changed = 0;
    if (object->child_id_count != node->child_count
        || (node->child_count && memcmp(object->child_ids, node->children, node->child_count * sizeof(uint32_t))))
        changed |= CHANGED_CHILDREN;
    if (object->parent_id != node->parent) {
        changed |= CHANGED_PARENT;  // the application lists its top-levels itself
        if (object->parent_id == 0) remove_id(&bridge.application->child_ids, &bridge.application->child_id_count, object->id);
        if (node->parent == 0) append_id(&bridge.application->child_ids, &bridge.application->child_id_count, object->id);
    }
    take_node(object, node);

    if (name_changed) real.g_object_notify(G_OBJECT(object), "accessible-name");
    if (role_changed) real.g_object_notify(G_OBJECT(object), "accessible-role");
    if (old_text) {
        emit_text_changed(object, old_text, text_of(object));
        free(old_text);
    }
    if (value_changed && (object->ifaces & IFACE_VALUE)) {
        real.g_object_notify(G_OBJECT(object), "accessible-value");
        real.g_signal_emit_by_name(object, "value-changed", object->value_now, object->value);
    }
    if (bounds_changed) {
        AtkRectangle bounds = { object->x, object->y, object->width, object->height };
        real.g_signal_emit_by_name(object, "bounds-changed", &bounds);
    }
    update_states(object);
    return changed;
}

// Whether `object` is `descendant` or one of its ancestors (as reported).
static int is_ancestor(RvObject *object, RvObject *descendant)
{
    for (RvObject *o = descendant; o; o = o->container)
        if (o == object) return 1;
    return 0;
}

// Makes an object's reported children those of its child ids that exist, and announces the
// difference with children-changed (removes from the last, adds from the first; when the
// children kept are reordered, all are removed and added again). A new object's are set silently.
// Returns whether an ancestor of the object was left out (see apply_batch).
static int resync_children(RvObject *parent, int silent)
{
    int skipped_ancestor = 0;
    size_t count = 0;
    RvObject **children = malloc((parent->child_id_count + 1) * sizeof *children);
    if (!children) abort();
    unsigned mark = ++bridge.mark;
    for (size_t i = 0; i < parent->child_id_count; i++) {
        RvObject *child = parent->child_ids[i] ? find(parent->child_ids[i]) : NULL;
        // Skipped: unknown ids, ids listed twice, and the object's ancestors (no cycle is reported).
        if (!child || child->mark == mark) continue;
        if (is_ancestor(child, parent)) {
            skipped_ancestor = 1;
            continue;
        }
        child->mark = mark;
        children[count++] = child;
    }
    // Remove those no longer listed, then check the order of those kept.
    for (size_t i = parent->child_count; i > 0; i--)
        if (parent->children[i - 1]->mark != mark) remove_child_at(parent, i - 1, !silent);
    size_t kept = 0;
    for (size_t i = 0; i < count && kept < parent->child_count; i++)
        if (children[i] == parent->children[kept]) kept++;
    if (kept != parent->child_count)
        while (parent->child_count > 0) remove_child_at(parent, parent->child_count - 1, !silent);
    // The objects added: those listed that are not among the children kept.
    unsigned kept_mark = ++bridge.mark;
    for (size_t i = 0; i < parent->child_count; i++) parent->children[i]->mark = kept_mark;
    for (size_t i = 0; i < count; i++) {
        RvObject *child = children[i];
        if (child->mark != kept_mark && child->container && child->container != parent)
            detach(child);  // moved from another parent
    }
    free(parent->children);
    parent->children = children;
    parent->child_count = count;
    for (size_t i = 0; i < count; i++) {
        RvObject *child = children[i];
        child->container = parent;
        if (child->mark != kept_mark && !silent) emit_children_changed(parent, 1, i, child);
    }
    return skipped_ancestor;
}

static void set_focus(RvObject *focus)
{
    if (focus == bridge.focus) return;
    RvObject *old = bridge.focus;
    bridge.focus = focus;
    if (old) update_states(old);
    if (focus) {
        update_states(focus);
        real.atk_focus_tracker_notify(&focus->atk);
    }
}

static int compare_ids(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static gboolean apply_batch(gpointer data)
{
    Batch *batch = data;
    // The focus to set at the end (kept when its object is replaced, lost when it is removed).
    uint32_t focus = batch->focus;
    if (focus == RV_A11Y_FOCUS_UNCHANGED) focus = bridge.focus ? bridge.focus->id : 0;
    // Removals first: a node removed and given again in one batch is created anew.
    for (size_t i = 0; i < batch->removed_count; i++) {
        uint32_t id = batch->removed[i];
        RvObject *object = id ? find(id) : NULL;
        if (!object) continue;
        if (object->parent_id == 0)
            remove_id(&bridge.application->child_ids, &bridge.application->child_id_count, id);
        destroy(object);
        if (focus == id) focus = 0;
    }
    // Then the data. `dirty` collects the objects whose children are to be resynced, by id, and
    // `created` the new objects (their own children are set without events).
    size_t dirty_count = 0, created_count = 0;
    uint32_t *dirty = malloc((batch->count * 3 + 1) * sizeof *dirty);
    RvObject **created = malloc((batch->count + 1) * sizeof *created);
    if (!dirty || !created) abort();
    for (size_t i = 0; i < batch->count; i++) {
        rv_a11y_node *node = &batch->nodes[i];
        if (node->id == 0) continue;
        unsigned ifaces = ifaces_of(node);
        RvObject *object = find(node->id);
        if (object && object->ifaces != ifaces) {  // its interfaces changed: a new object replaces it
            if (object->container) dirty[dirty_count++] = object->container->id;
            destroy(object);
            object = NULL;
        }
        if (object) {
            uint32_t old_parent = object->parent_id;
            int changed = update(object, node);
            if (changed & CHANGED_CHILDREN) dirty[dirty_count++] = object->id;
            if (changed & CHANGED_PARENT) {
                dirty[dirty_count++] = old_parent;
                dirty[dirty_count++] = object->parent_id;
            }
            continue;
        }
        object = create(ifaces, node);
        object->fresh = 1;
        created[created_count++] = object;
        dirty[dirty_count++] = object->id;
        dirty[dirty_count++] = object->parent_id;
        if (object->parent_id == 0)
            append_id(&bridge.application->child_ids, &bridge.application->child_id_count, object->id);
    }
    // Then the structure, each object once (in the order of ids).
    // An object whose new child is still its ancestor (a parent and a child swapped) is done
    // again, after the others have let go of it.
    qsort(dirty, dirty_count, sizeof *dirty, compare_ids);
    size_t again_count = 0;
    uint32_t *again = malloc((dirty_count + 1) * sizeof *again);
    if (!again) abort();
    for (size_t i = 0; i < dirty_count; i++) {
        if (i > 0 && dirty[i] == dirty[i - 1]) continue;
        RvObject *object = find(dirty[i]);
        if (object && resync_children(object, object->fresh)) again[again_count++] = dirty[i];
    }
    for (size_t i = 0; i < again_count; i++) {
        RvObject *object = find(again[i]);
        if (object) resync_children(object, object->fresh);
    }
    free(again);
    for (size_t i = 0; i < created_count; i++) created[i]->fresh = 0;
    set_focus(focus ? find(focus) : NULL);
    for (size_t i = 0; i < created_count; i++) {
        RvObject *object = created[i];
        if (!(object->ifaces & IFACE_WINDOW) || object->defunct) continue;
        real.g_signal_emit_by_name(object, "create");
        if (object->atk_states & STATE(ATK_STATE_ACTIVE)) real.g_signal_emit_by_name(object, "activate");
    }
    free(dirty);
    free(created);
    free_batch(batch);
    return G_SOURCE_REMOVE;
}

void rv_a11y_apply(const rv_a11y_node *nodes, size_t count, const uint32_t *removed, size_t removed_count,
                   uint32_t focus)
{
    Batch *batch = calloc(1, sizeof *batch);
    if (!batch) abort();
    batch->nodes = calloc(count + 1, sizeof *batch->nodes);
    batch->removed = malloc((removed_count + 1) * sizeof *batch->removed);
    if (!batch->nodes || !batch->removed) abort();
    for (size_t i = 0; i < count; i++) {
        rv_a11y_node *copy = &batch->nodes[i];
        *copy = nodes[i];
        copy->name = copy_utf8(nodes[i].name);
        copy->value = copy_utf8(nodes[i].value);
        uint32_t *children = malloc((nodes[i].child_count + 1) * sizeof *children);
        if (!children) abort();
        if (nodes[i].child_count) memcpy(children, nodes[i].children, nodes[i].child_count * sizeof *children);
        copy->children = children;
    }
    batch->count = count;
    if (removed_count) memcpy(batch->removed, removed, removed_count * sizeof *removed);
    batch->removed_count = removed_count;
    batch->focus = focus;

    pthread_mutex_lock(&bridge.lock);
    if (bridge.running) {
        // Queued on the default main context, which only the bridge's thread runs: batches are
        // applied there, in order (idle sources of one priority run in the order added).
        real.g_idle_add_full(G_PRIORITY_DEFAULT, apply_batch, batch, NULL);
        batch = NULL;
    }
    pthread_mutex_unlock(&bridge.lock);
    if (batch) free_batch(batch);
}

// MARK: - The thread

static AtkObject *util_get_root(void)
{
    return bridge.application ? &bridge.application->atk : NULL;
}

static const gchar *util_get_toolkit_name(void)
{
    return "RemoteView";
}

static const gchar *util_get_toolkit_version(void)
{
    return "1";
}

static gboolean quit_loop(gpointer data)
{
    (void)data;
    real.g_main_loop_quit(bridge.loop);
    return G_SOURCE_REMOVE;
}

static void *run(void *data)
{
    (void)data;
    bridge.loop = real.g_main_loop_new(NULL, FALSE);
    bridge.objects = real.g_hash_table_new_full(NULL, NULL, NULL, (GDestroyNotify)real.g_object_unref);

    // atk-bridge asks AtkUtil for the root (the application) and the toolkit. AtkUtil's own
    // add_global_event_listener is kept: atk-bridge listens to the objects' signals with it
    // ("Gtk:AtkObject:state-change" is an emission hook on AtkObject's state-change).
    if (!bridge.util_class) bridge.util_class = real.g_type_class_ref(real.atk_util_get_type());
    bridge.util_class->get_root = util_get_root;
    bridge.util_class->get_toolkit_name = util_get_toolkit_name;
    bridge.util_class->get_toolkit_version = util_get_toolkit_version;

    rv_a11y_node application = { .name = bridge.application_name };
    bridge.application = real.g_object_new(object_type(0), NULL);
    bridge.application->ifaces = 0;
    take_node(bridge.application, &application);
    bridge.application->atk.role = ATK_ROLE_APPLICATION;
    bridge.application_name = NULL;

    int result = real.atk_bridge_adaptor_init(NULL, NULL);
    pthread_mutex_lock(&bridge.lock);
    bridge.init_result = result == 0 ? 0 : -1;
    if (result != 0) {
        const char *no_bridge = getenv("NO_AT_BRIDGE");
        snprintf(bridge.init_error, sizeof bridge.init_error, "%s",
                 no_bridge && atoi(no_bridge) == 1
                     ? "the accessibility bridge is disabled (NO_AT_BRIDGE=1)"
                     : "atk-bridge could not start: no accessibility bus (it is found through the D-Bus session "
                       "bus, org.a11y.Bus, or AT_SPI_BUS_ADDRESS)");
    }
    bridge.starting = 0;
    pthread_cond_broadcast(&bridge.changed);
    pthread_mutex_unlock(&bridge.lock);

    if (result == 0) {
        real.g_main_loop_run(bridge.loop);
        real.atk_focus_tracker_notify(NULL);  // ATK keeps a reference to the last focus
        real.atk_bridge_adaptor_cleanup();
    }
    bridge.focus = NULL;
    real.g_hash_table_destroy(bridge.objects);
    bridge.objects = NULL;
    real.g_object_unref(bridge.application);
    bridge.application = NULL;
    real.g_main_loop_unref(bridge.loop);
    bridge.loop = NULL;
    return NULL;
}

static void set_error(char *error, size_t error_size, const char *message)
{
    if (error && error_size) snprintf(error, error_size, "%s", message);
}

int rv_a11y_start(const char *application_name, rv_a11y_action_fn on_action, void *context, char *error,
                  size_t error_size)
{
    pthread_once(&load_once, load);
    if (load_failure[0]) {
        set_error(error, error_size, load_failure);
        return -1;
    }
    pthread_mutex_lock(&bridge.lock);
    if (bridge.running || bridge.starting) {
        pthread_mutex_unlock(&bridge.lock);
        set_error(error, error_size, "the accessibility bridge is already started");
        return -1;
    }
    bridge.starting = 1;
    bridge.on_action = on_action;
    bridge.context = context;
    bridge.application_name = copy_utf8(application_name ? application_name : "");
    int failed = pthread_create(&bridge.thread, NULL, run, NULL);
    if (failed) {
        bridge.starting = 0;
        free(bridge.application_name);
        bridge.application_name = NULL;
        pthread_mutex_unlock(&bridge.lock);
        set_error(error, error_size, "cannot create the accessibility bridge's thread");
        return -1;
    }
    while (bridge.starting) pthread_cond_wait(&bridge.changed, &bridge.lock);
    int result = bridge.init_result;
    if (result == 0) bridge.running = 1;
    else set_error(error, error_size, bridge.init_error);
    pthread_mutex_unlock(&bridge.lock);
    if (result != 0) pthread_join(bridge.thread, NULL);
    return result;
}

void rv_a11y_stop(void)
{
    pthread_mutex_lock(&bridge.lock);
    if (!bridge.running || pthread_equal(pthread_self(), bridge.thread)) {
        pthread_mutex_unlock(&bridge.lock);
        return;
    }
    bridge.running = 0;
    // After the batches queued before (same priority, added later).
    real.g_idle_add_full(G_PRIORITY_DEFAULT, quit_loop, NULL, NULL);
    pthread_mutex_unlock(&bridge.lock);
    pthread_join(bridge.thread, NULL);
}
