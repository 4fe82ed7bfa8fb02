/* uppercase-share: a RemoteView share activity written in C from docs/Protocol.md and
 * Sources/CProto/remoteview.proto alone. Shared declarations. */
#ifndef UPPERCASE_RV_H
#define UPPERCASE_RV_H

#define _GNU_SOURCE 1
#include <stddef.h>
#include <stdint.h>
#include <cairo.h>
#include "remoteview.pb-c.h"

#define SERVICE_IDENTIFIER "com.example.uppercase-c"
#define ERROR_DOMAIN SERVICE_IDENTIFIER
#define MAX_PACKET 65536            /* Protocol.md, Transport */
#define MAX_FDS_PER_BODY 16
#define HANDSHAKE_TIMEOUT_MS 5000   /* Protocol.md, Conversation 1 */
#define MAX_OUTSTANDING_REQUESTS 256
#define MAX_SHARE_TEXT 32768        /* a TEXT item's text: 1..32768 bytes */
#define BUFFERS_PER_SIZE 2

/* Deliberately broken builds, for the conformance checker's own tests: `--break=RULE` as the
 * first argument breaks exactly one rule (ids, idle-goodbye, commit-early, buffer-size,
 * fd3-exit, identifier, tree-depth); without it, nothing is broken. */
int rv_breaks(const char *rule);

/* ---------- wire.c: transport, validation ---------- */

typedef struct outpkt {
    struct outpkt *next;
    uint8_t *buf;
    size_t len;
    int fd;                         /* -1, or one fd to pass (closed once sent) */
} outpkt;

/* A violation found while validating what the peer sent. */
typedef struct violation {
    int code;                       /* Remoteview__ProtocolErrorCode */
    char reason[512];
} violation;

int utf8_valid(const char *s, size_t len);
size_t utf8_prefix(const char *s, size_t len, size_t max_chars); /* bytes of the first max_chars */
int identifier_valid(const char *s, size_t min, size_t max);
int mime_valid(const char *s);
int url_valid(const char *s);
int file_name_valid(const char *s);

/* Receive one packet: returns 1 with a packet, 0 at end of file, -1 with errno (EAGAIN: none).
 * *empty is set for a zero-length packet (a violation). fds[] gets every fd that arrived
 * (up to 256; the kernel would drop more), *truncated when the packet was over MAX_PACKET. */
int recv_packet(int sock, uint8_t *buf, size_t *len, int *fds, int *nfds, int *truncated, int *empty);
void close_fds(int *fds, int n);

/* Validates an envelope that arrived from the host: everything the codec checks (id order,
 * reply_to, fd_count against what arrived and against the body, bounds). The caller has
 * checked nothing but that it decoded. */
int validate_envelope(const Remoteview__Envelope *env, int nfds, uint64_t last_id, violation *v);
void violation_set(violation *v, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---------- view.c: buffers and drawing ---------- */

typedef struct buffer {
    struct buffer *next;
    uint32_t id;
    int width, height, stride;      /* pixels */
    uint8_t *map;
    size_t size;
    int held;                       /* committed and not yet released by the host */
    int retired;                    /* of an old size: destroy once the host lets go */
} buffer;

typedef struct view {
    int has_size;                   /* a resize arrived */
    uint32_t pt_w, pt_h, scale_permille;
    int px_w, px_h;                 /* the buffers' size */
    double scale;                   /* drawing scale: pixels per point */
    buffer *buffers;
    uint32_t next_buffer_id;
    uint64_t frame;                 /* last committed frame number */
    int in_flight;                  /* a commit awaits frame_done */
    uint64_t in_flight_frame;
    int dirty_full, dirty_text;     /* what needs drawing */
    int committed_once;
} view;

/* What to draw. */
typedef struct scene {
    const char *text;
    size_t text_len;
    int show_button;
} scene;

/* Pixel size for a resize, clamped to the buffer bounds of Protocol.md (Surfaces). */
void view_resize(view *vw, uint32_t w, uint32_t h, uint32_t scale_permille);
buffer *view_free_buffer(view *vw);            /* a current-size buffer the host does not hold */
buffer *view_new_buffer(view *vw, int *memfd); /* creates, maps and seals; NULL on failure */
int view_count_current(const view *vw);
void view_draw(view *vw, buffer *b, const scene *sc);
void view_damage_rect(const view *vw, Remoteview__Rect *r); /* what changed since the last frame */
buffer *view_find(view *vw, uint32_t id);
void view_unlink_free(view *vw, buffer *b);
void view_free_all(view *vw);
int button_contains(const view *vw, double x, double y);
/* The button's rect and the text's band, in the view's points (before any clipping). */
void button_rect(const view *vw, double *x, double *y, double *w, double *h);
void text_rect(const view *vw, int show_button, double *x, double *y, double *w, double *h);

/* ---------- tree.c: the semantic tree (Protocol.md, "Accessibility") ---------- */

#define TREE_MAX_LABEL 1024         /* a label's bytes of UTF-8 */
#define TREE_MAX_NODES 72           /* 3, or 71 with --break=tree-depth */
#define TREE_MAX_CHILDREN 2
#define NODE_ROOT 1
#define NODE_TEXT 2
#define NODE_BUTTON 3

typedef struct tnode {
    uint32_t id;
    int role;                       /* Remoteview__AccessibilityRole */
    char *label;                    /* malloc'd; at most TREE_MAX_LABEL bytes */
    uint32_t states, actions;
    float x, y, width, height;      /* the view's points, clipped to the view */
    uint32_t children[TREE_MAX_CHILDREN];
    size_t n_children;
} tnode;

typedef struct tree {
    tnode nodes[TREE_MAX_NODES];    /* the root first */
    size_t n;
} tree;

/* The tree of what the view shows now. Returns 0 when out of memory. */
int tree_build(tree *t, const view *vw, const scene *sc);
void tree_free(tree *t);
const tnode *tree_find(const tree *t, uint32_t id);
int tnode_equal(const tnode *a, const tnode *b);
/* Copies s (len bytes of UTF-8) into out (max + 1 bytes): all of it when it fits in max bytes,
 * else its longest prefix on a character boundary followed by "…", within max. */
size_t label_cut(char *out, const char *s, size_t len, size_t max);

#endif
