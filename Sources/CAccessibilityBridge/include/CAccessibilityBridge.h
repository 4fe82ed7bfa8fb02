// CAccessibilityBridge: exports an accessibility tree, described by plain C structs, to the
// desktop's assistive technologies (Orca, Accerciser, anything built on AT-SPI2) as the
// accessible window of this application.
//
// The tree is kept by the caller; each rv_a11y_apply sends what changed. The bridge mirrors it
// with ATK objects that live on a thread of its own, and atk-bridge (at-spi2-core) publishes
// them on the accessibility bus. Nothing of ATK, GLib or D-Bus is linked: the libraries are
// loaded by rv_a11y_start, so a process that never starts the bridge pays nothing for it.
//
// This header needs only the C standard library.
#ifndef C_ACCESSIBILITY_BRIDGE_H
#define C_ACCESSIBILITY_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// What a node is. Reported to assistive technologies as the ATK role named in each comment.
typedef enum {
    RV_A11Y_ROLE_FRAME = 1,     ///< the window (ATK_ROLE_FRAME); its extents are the window's
    RV_A11Y_ROLE_GROUP,         ///< a container without semantics of its own (ATK_ROLE_PANEL)
    RV_A11Y_ROLE_BUTTON,        ///< ATK_ROLE_PUSH_BUTTON
    RV_A11Y_ROLE_LABEL,         ///< static text (ATK_ROLE_LABEL); its text is `value`, else `name`
    RV_A11Y_ROLE_TEXT_FIELD,    ///< ATK_ROLE_ENTRY; its text is `value`
    RV_A11Y_ROLE_IMAGE,         ///< ATK_ROLE_IMAGE
    RV_A11Y_ROLE_PROGRESS,      ///< ATK_ROLE_PROGRESS_BAR; give its range (has_range)
    RV_A11Y_ROLE_CANVAS,        ///< ATK_ROLE_CANVAS
    RV_A11Y_ROLE_LIST,          ///< ATK_ROLE_LIST
    RV_A11Y_ROLE_LIST_ITEM,     ///< ATK_ROLE_LIST_ITEM
    RV_A11Y_ROLE_EMBEDDED,      ///< the remote activity's container (ATK_ROLE_EMBEDDED)
    RV_A11Y_ROLE_CHECK_BOX,     ///< a switch, on or off (ATK_ROLE_CHECK_BOX, CHECKABLE; CHECKED with RV_A11Y_STATE_CHECKED)
} rv_a11y_role;

/// State bits of rv_a11y_node.states. Every node is reported VISIBLE and SHOWING, and ENABLED and
/// SENSITIVE unless it has RV_A11Y_STATE_DISABLED; FOCUSED follows the `focus` of rv_a11y_apply.
enum {
    RV_A11Y_STATE_FOCUSABLE = 1,
    RV_A11Y_STATE_DISABLED = 2,
    RV_A11Y_STATE_SELECTED = 4,
    RV_A11Y_STATE_EDITABLE = 8,     ///< a text field the user may change (EditableText works)
    RV_A11Y_STATE_MULTI_LINE = 16,  ///< a text field of several lines (else SINGLE_LINE)
    RV_A11Y_STATE_INACTIVE = 32,    ///< a frame that is not the active window (frames are ACTIVE otherwise)
    RV_A11Y_STATE_CHECKED = 64,     ///< a check box that is on
};

/// Action bits: in rv_a11y_node.actions, what a node supports; in rv_a11y_action_fn, what was asked.
enum {
    RV_A11Y_ACTION_PRESS = 1,            ///< Action "click"
    RV_A11Y_ACTION_FOCUS = 2,            ///< Component.GrabFocus (also allowed by RV_A11Y_STATE_FOCUSABLE)
    RV_A11Y_ACTION_SET_VALUE = 4,        ///< Value.SetCurrentValue (text fields: EDITABLE allows it too)
    RV_A11Y_ACTION_INCREMENT = 8,        ///< Action "increment"
    RV_A11Y_ACTION_DECREMENT = 16,       ///< Action "decrement"
    RV_A11Y_ACTION_SCROLL_INTO_VIEW = 32 ///< Component.ScrollTo / ScrollToPoint
};

/// One node of the tree. The bridge copies everything it is given: the pointers need only last
/// for the call of rv_a11y_apply.
typedef struct {
    uint32_t id;          ///< nonzero, unique in the window (0 is the application object)
    uint32_t parent;      ///< 0: a child of the application (a top-level: the window frame)
    int role;             ///< an rv_a11y_role
    const char *name;     ///< UTF-8 (invalid bytes are replaced by U+FFFD), may be NULL
    const char *value;    ///< text of a label or text field, a range's text ("30 %"); may be NULL
    uint32_t states;      ///< RV_A11Y_STATE_* bits
    uint32_t actions;     ///< RV_A11Y_ACTION_* bits the node supports
    int x, y, width, height;  ///< extents in screen pixels (the caller adds the window's position)
    double value_min, value_max, value_now;  ///< the range, when has_range (Value interface)
    int has_range;
    const uint32_t *children;  ///< ids of the children, in order; ids not (yet) known are skipped
    size_t child_count;
} rv_a11y_node;

/// Called on the bridge's thread when an assistive technology asks a node for an action.
/// It must return quickly and must not call rv_a11y_stop (queue the request, answer with a later
/// rv_a11y_apply). `action` is one RV_A11Y_ACTION_* bit. For RV_A11Y_ACTION_SET_VALUE, `text` is
/// the new full text of a text field (else NULL), `number` the new value of a range (else 0).
typedef void (*rv_a11y_action_fn)(void *context, uint32_t id, int action, const char *text, double number);

/// Loads ATK and atk-bridge, starts the bridge's thread and registers the application (named
/// `application_name`, as listed on the AT-SPI desktop) with the accessibility bus. The tree is
/// empty until rv_a11y_apply. Returns 0, or -1 with a message in `error` (truncated to
/// `error_size`): libraries missing, already started, NO_AT_BRIDGE=1, no accessibility bus.
/// `on_action` may be NULL. Once started and stopped, the libraries stay loaded.
int rv_a11y_start(const char *application_name, rv_a11y_action_fn on_action, void *context,
                  char *error, size_t error_size);

/// Sends a change of the tree; callable from any thread (never blocks on the bridge's thread).
/// Each node given replaces that node's whole data, creating it when new; `removed` ids are
/// destroyed (only those listed: list the descendants too). The `children` lists of the nodes
/// define the structure and its order. `focus` is the id of the focused node, 0 for none, or
/// RV_A11Y_FOCUS_UNCHANGED. Changes are announced with the usual AT-SPI events (children-changed,
/// property-change, state-changed, text-changed, focus). Does nothing when the bridge is stopped.
void rv_a11y_apply(const rv_a11y_node *nodes, size_t count, const uint32_t *removed, size_t removed_count,
                   uint32_t focus);

#define RV_A11Y_FOCUS_UNCHANGED UINT32_MAX

/// Unregisters the application, destroys the tree and joins the bridge's thread (changes sent
/// before are applied first). Not from the action callback. Nothing happens when not started.
void rv_a11y_stop(void);

#ifdef __cplusplus
}
#endif

#endif
