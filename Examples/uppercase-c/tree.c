/* The semantic tree (Protocol.md, "Accessibility"): what the view shows, as nodes. uppercase.c
 * sends it after each commit that changed it, whole the first time, then the changed nodes. */
#include "rv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROLE(x) REMOTEVIEW__ACCESSIBILITY_ROLE__ACCESSIBILITY_ROLE_##x
#define STATE_FOCUSABLE 1u
#define ACTION_BIT(x) (1u << (REMOTEVIEW__ACCESSIBILITY_ACTION_KIND__ACCESSIBILITY_ACTION_##x - 1))
#define BREAK_DEPTH 70              /* --break=tree-depth: the label and button at depth 70 (at most 64) */

size_t label_cut(char *out, const char *s, size_t len, size_t max)
{
    static const char ellipsis[] = "\xE2\x80\xA6"; /* U+2026 */
    if (len <= max) {
        memcpy(out, s, len);
        out[len] = 0;
        return len;
    }
    size_t n = max >= 3 ? max - 3 : 0;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--; /* s[n] begins the first character left out */
    memcpy(out, s, n);
    if (max >= 3) {
        memcpy(out + n, ellipsis, 3);
        n += 3;
    }
    out[n] = 0;
    return n;
}

/* A frame in points, clipped to the view: it always lies within the bounds, whatever the size. */
static void set_frame(tnode *n, const view *vw, double x, double y, double w, double h)
{
    double x0 = fmin(fmax(x, 0), vw->pt_w), y0 = fmin(fmax(y, 0), vw->pt_h);
    double x1 = fmax(fmin(x + w, vw->pt_w), x0), y1 = fmax(fmin(y + h, vw->pt_h), y0);
    n->x = (float)x0;
    n->y = (float)y0;
    n->width = (float)(x1 - x0);
    n->height = (float)(y1 - y0);
}

static tnode *add(tree *t, uint32_t id, int role, const char *label, size_t len)
{
    tnode *n = &t->nodes[t->n];
    memset(n, 0, sizeof *n);
    n->label = malloc(TREE_MAX_LABEL + 1);
    if (!n->label) return NULL;
    label_cut(n->label, label, len, TREE_MAX_LABEL);
    n->id = id;
    n->role = role;
    t->n++;
    return n;
}

void tree_free(tree *t)
{
    for (size_t i = 0; i < t->n; i++) free(t->nodes[i].label);
    t->n = 0;
}

int tree_build(tree *t, const view *vw, const scene *sc)
{
    double x, y, w, h;
    t->n = 0;
    tnode *root = add(t, NODE_ROOT, ROLE(GROUP), "", 0);
    if (!root) return 0;
    set_frame(root, vw, 0, 0, vw->pt_w, vw->pt_h);
    tnode *parent = root;
    if (rv_breaks("tree-depth")) {
        /* Broken on purpose: a chain of groups puts the label and the button at depth 70. */
        for (uint32_t id = 4; id < 4 + BREAK_DEPTH - 2; id++) {
            tnode *g = add(t, id, ROLE(GROUP), "", 0);
            if (!g) goto oom;
            set_frame(g, vw, 0, 0, vw->pt_w, vw->pt_h);
            parent->children[parent->n_children++] = id;
            parent = g;
        }
    }
    tnode *text = add(t, NODE_TEXT, ROLE(LABEL), sc->text, sc->text_len);
    if (!text) goto oom;
    text_rect(vw, sc->show_button, &x, &y, &w, &h);
    set_frame(text, vw, x, y, w, h);
    parent->children[parent->n_children++] = NODE_TEXT;
    if (sc->show_button) {
        tnode *button = add(t, NODE_BUTTON, ROLE(BUTTON), "UPPERCASE", 9);
        if (!button) goto oom;
        button_rect(vw, &x, &y, &w, &h);
        set_frame(button, vw, x, y, w, h);
        button->states = STATE_FOCUSABLE;
        button->actions = ACTION_BIT(PRESS) | ACTION_BIT(FOCUS);
        parent->children[parent->n_children++] = NODE_BUTTON;
    }
    return 1;
oom:
    tree_free(t);
    return 0;
}

const tnode *tree_find(const tree *t, uint32_t id)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->nodes[i].id == id) return &t->nodes[i];
    return NULL;
}

int tnode_equal(const tnode *a, const tnode *b)
{
    return a->id == b->id && a->role == b->role && strcmp(a->label, b->label) == 0 &&
           a->states == b->states && a->actions == b->actions && a->x == b->x && a->y == b->y &&
           a->width == b->width && a->height == b->height && a->n_children == b->n_children &&
           memcmp(a->children, b->children, a->n_children * sizeof a->children[0]) == 0;
}
