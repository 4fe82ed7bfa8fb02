/* uppercase-share: a RemoteView share activity in C.
 *
 * Written from docs/Protocol.md, docs/Manifest.md and Sources/CProto/remoteview.proto only. It
 * takes one text item, shows it with an UPPERCASE button, and on a click (or Return, or an
 * accessibility PRESS) answers the share with the text upper-cased. To a host that reads it, it
 * describes the view as a semantic tree. See README.md for what the documents left open. */
#include "rv.h"

#include <pango/pangocairo.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CODE(x) REMOTEVIEW__PROTOCOL_ERROR_CODE__PROTOCOL_ERROR_CODE_##x
#define BODY(x) REMOTEVIEW__ENVELOPE__BODY_##x
#define STATE(x) REMOTEVIEW__ACTIVITY_STATE__ACTIVITY_STATE_##x
#define RESULT(x) REMOTEVIEW__SHARE_RESULT__SHARE_RESULT_##x
#define HID_RETURN 40
#define ACTION(x) REMOTEVIEW__ACCESSIBILITY_ACTION_KIND__ACCESSIBILITY_ACTION_##x
#define CLOSE_FLUSH_MS 1000

enum share_state { SHARE_NONE, SHARE_ACTIVE, SHARE_FINISHED };

typedef struct conn {
    struct conn *next;
    int fd;
    int is_main;                    /* fd 3: the launcher's main connection */
    int dead;
    int got_handshake;
    int64_t handshake_deadline;
    uint64_t next_id, last_in_id;
    uint32_t peer_max_packet;
    int peer_accessibility;         /* the host announced "accessibility" */
    outpkt *out_head, *out_tail;

    enum share_state share;
    int cancel_seen;
    char *text;                     /* what the view shows (the shared text, or why it failed) */
    size_t text_len;
    int show_button;

    view vw;
    int down_in_button;
    int tree_sent;                  /* a whole tree went to the host */
    tree sent;                      /* the tree as the host knows it */

    uint64_t settles[MAX_OUTSTANDING_REQUESTS];
    size_t n_settles;
} conn;

static conn *conns;
static conn *main_conn;
static int listen_fd = -1;
static int64_t idle_timeout_ms = -1; /* -1: no idle exit */
static int64_t last_activity;
static uint8_t packet[MAX_PACKET];

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("uppercase-share: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---------- sending ---------- */

static void flush(conn *c)
{
    while (c->out_head && !c->dead) {
        outpkt *p = c->out_head;
        struct iovec iov = { .iov_base = p->buf, .iov_len = p->len };
        union {
            struct cmsghdr align;
            char space[CMSG_SPACE(sizeof(int))];
        } control;
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
        if (p->fd >= 0) {
            memset(&control, 0, sizeof control);
            msg.msg_control = control.space;
            msg.msg_controllen = sizeof control.space;
            struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
            cm->cmsg_level = SOL_SOCKET;
            cm->cmsg_type = SCM_RIGHTS;
            cm->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(cm), &p->fd, sizeof(int));
        }
        ssize_t n = sendmsg(c->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) return;
            c->dead = 1; /* the peer is gone; reading will see the end of file */
            return;
        }
        c->out_head = p->next;
        if (!c->out_head) c->out_tail = NULL;
        if (p->fd >= 0) close(p->fd);
        free(p->buf);
        free(p);
    }
}

/* Queues an envelope (assigning its id) and tries to send it. Takes fd (-1: none) in every case.
 * Returns 0, or -1 when it is larger than the peer accepts. */
static int send_env(conn *c, Remoteview__Envelope *e, int fd)
{
    if (rv_breaks("ids") && c->next_id > 0)
        e->id = c->next_id; /* broken on purpose: the same id again */
    else
        e->id = ++c->next_id;
    e->fd_count = fd >= 0 ? 1 : 0;
    size_t n = remoteview__envelope__get_packed_size(e);
    size_t limit = c->peer_max_packet && c->peer_max_packet < MAX_PACKET ? c->peer_max_packet : MAX_PACKET;
    outpkt *p = n <= limit ? calloc(1, sizeof *p) : NULL;
    uint8_t *buf = p ? malloc(n) : NULL;
    if (!buf) {
        free(p);
        if (fd >= 0) close(fd);
        c->next_id--;
        return -1;
    }
    remoteview__envelope__pack(e, buf);
    p->buf = buf;
    p->len = n;
    p->fd = fd;
    if (c->out_tail) c->out_tail->next = p;
    else c->out_head = p;
    c->out_tail = p;
    flush(c);
    return 0;
}

static void flush_for(conn *c, int ms)
{
    int64_t deadline = now_ms() + ms;
    flush(c);
    while (c->out_head && !c->dead) {
        int64_t left = deadline - now_ms();
        if (left <= 0) break;
        struct pollfd p = { .fd = c->fd, .events = POLLOUT };
        if (poll(&p, 1, (int)left) < 0 && errno != EINTR) break;
        flush(c);
    }
}

static void send_handshake(conn *c)
{
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__Handshake h = REMOTEVIEW__HANDSHAKE__INIT;
    char *caps[] = { "surfaces", "share", "accessibility" };
    h.protocol_version = 1;
    h.role = REMOTEVIEW__PEER_ROLE__PEER_ROLE_SERVICE;
    h.identifier = rv_breaks("identifier") ? "com.example.someone-else" : SERVICE_IDENTIFIER;
    h.n_capabilities = 3;
    h.capabilities = caps;
    h.max_packet_size = MAX_PACKET;
    /* Protocol.md, "Versions": this activity keeps version 2's rules (it announces "surfaces"
       and answers an unknown request in domain RemoteView, code 1). A host of version 1 ignores
       the field; the version in force is the lower of the two. */
    h.max_protocol_version = 2;
    e.body_case = BODY(HANDSHAKE);
    e.handshake = &h;
    send_env(c, &e, -1);
}

static void conn_free(conn *c)
{
    for (outpkt *p = c->out_head, *q; p; p = q) {
        q = p->next;
        if (p->fd >= 0) close(p->fd);
        free(p->buf);
        free(p);
    }
    view_free_all(&c->vw);
    tree_free(&c->sent);
    free(c->text);
    close(c->fd);
    free(c);
}

/* Ends a connection: optionally says goodbye or protocol_error first ("if you can"). */
static void conn_end(conn *c, const char *goodbye, int error_code, const char *error_reason)
{
    if (c->dead == 2) return;
    if (!c->dead) {
        Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
        Remoteview__Goodbye g = REMOTEVIEW__GOODBYE__INIT;
        Remoteview__ProtocolError pe = REMOTEVIEW__PROTOCOL_ERROR__INIT;
        char reason[1025];
        if (error_code) {
            snprintf(reason, sizeof reason, "%s", error_reason);
            pe.code = error_code;
            pe.reason = reason;
            e.body_case = BODY(PROTOCOL_ERROR);
            e.protocol_error = &pe;
            send_env(c, &e, -1);
        } else if (goodbye) {
            snprintf(reason, sizeof reason, "%s", goodbye);
            g.reason = reason;
            e.body_case = BODY(GOODBYE);
            e.goodbye = &g;
            send_env(c, &e, -1);
        }
        flush_for(c, CLOSE_FLUSH_MS);
        shutdown(c->fd, SHUT_RDWR);
    }
    c->dead = 2;
}

static void violation_end(conn *c, const violation *v)
{
    logf_("protocol violation on connection %d: %s", c->fd, v->reason);
    conn_end(c, NULL, v->code, v->reason);
}

static void surface_rule_end(conn *c, const char *reason)
{
    /* Protocol.md, Input: "A host that breaks a surface rule towards the service ... loses
     * that connection: the service says goodbye with the reason." */
    logf_("host broke a surface rule on connection %d: %s", c->fd, reason);
    conn_end(c, reason, 0, NULL);
}

static conn *conn_new(int fd, int is_main)
{
    conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return NULL;
    }
    c->fd = fd;
    c->is_main = is_main;
    c->handshake_deadline = now_ms() + HANDSHAKE_TIMEOUT_MS;
    c->next = conns;
    conns = c;
    send_handshake(c);
    return c;
}

/* ---------- the share ---------- */

static void send_activity(conn *c, int state, int indeterminate, float progress)
{
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__ActivityUpdate a = REMOTEVIEW__ACTIVITY_UPDATE__INIT;
    char subtitle[4 * 40 + 1];
    size_t n = utf8_prefix(c->text, c->text_len, 40);
    memcpy(subtitle, c->text, n);
    subtitle[n] = 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)subtitle[i] < 0x20) subtitle[i] = ' ';
    a.title = "Uppercase";
    a.subtitle = subtitle;
    a.indeterminate = indeterminate;
    a.progress = indeterminate ? 0 : progress;
    a.state = state;
    e.body_case = BODY(ACTIVITY_UPDATE);
    e.activity_update = &a;
    send_env(c, &e, -1);
}

static void send_complete(conn *c, int result, const char *message, Remoteview__ShareItem *item)
{
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__ShareComplete sc = REMOTEVIEW__SHARE_COMPLETE__INIT;
    Remoteview__ShareItem *items[1] = { item };
    sc.result = result;
    sc.message = (char *)(message ? message : "");
    sc.n_items = item ? 1 : 0;
    sc.items = item ? items : NULL;
    e.body_case = BODY(SHARE_COMPLETE);
    e.share_complete = &sc;
    if (send_env(c, &e, -1) != 0) {
        /* Larger than the host's max_packet_size (which may be as low as 1024). */
        Remoteview__ShareComplete failed = REMOTEVIEW__SHARE_COMPLETE__INIT;
        failed.result = RESULT(FAILED);
        failed.message = "the result is larger than the host's max_packet_size";
        e = (Remoteview__Envelope)REMOTEVIEW__ENVELOPE__INIT;
        e.body_case = BODY(SHARE_COMPLETE);
        e.share_complete = &failed;
        send_env(c, &e, -1);
    }
    c->share = SHARE_FINISHED;
}

static void set_text(conn *c, const char *s, size_t n)
{
    char *t = malloc(n + 1);
    if (!t) return;
    memcpy(t, s, n);
    t[n] = 0;
    free(c->text);
    c->text = t;
    c->text_len = n;
}

static void complete_share(conn *c)
{
    if (c->share != SHARE_ACTIVE) return;
    send_activity(c, STATE(WORKING), 0, 0.5f);
    for (size_t i = 0; i < c->text_len; i++)
        if (c->text[i] >= 'a' && c->text[i] <= 'z') c->text[i] = (char)(c->text[i] - 'a' + 'A');
    send_activity(c, STATE(DONE), 0, 1.0f);
    Remoteview__ShareItem item = REMOTEVIEW__SHARE_ITEM__INIT;
    item.kind = REMOTEVIEW__ITEM_KIND__ITEM_KIND_TEXT;
    item.content_type = "text/plain";
    item.text = c->text;
    send_complete(c, RESULT(COMPLETED), NULL, &item);
    c->vw.dirty_text = 1;
}

static const char *kind_name(int kind)
{
    switch (kind) {
    case REMOTEVIEW__ITEM_KIND__ITEM_KIND_TEXT: return "text";
    case REMOTEVIEW__ITEM_KIND__ITEM_KIND_URL: return "URL";
    default: return "file";
    }
}

static int on_share_request(conn *c, const Remoteview__ShareRequest *r, int *fds, violation *v)
{
    if (c->share != SHARE_NONE) {
        violation_set(v, CODE(UNEXPECTED), "a second share_request on this connection");
        return 0;
    }
    /* FILE items: the n-th fd is the n-th FILE item's memfd, sealed against shrinking, growing
     * and writing, its size equal to `size`. */
    int fi = 0;
    for (size_t i = 0; i < r->n_items; i++) {
        if (r->items[i]->kind != REMOTEVIEW__ITEM_KIND__ITEM_KIND_FILE) continue;
        int fd = fds[fi++];
        int seals = fcntl(fd, F_GET_SEALS);
        int need = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;
        struct stat st;
        if (seals < 0 || (seals & need) != need) {
            violation_set(v, CODE(MALFORMED), "item %zu (%.64s): its memfd is not sealed against shrinking, growing and writing", i, r->items[i]->name);
            return 0;
        }
        if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != r->items[i]->size) {
            violation_set(v, CODE(MALFORMED), "item %zu (%.64s): its memfd holds %lld bytes, not %llu", i, r->items[i]->name,
                          (long long)st.st_size, (unsigned long long)r->items[i]->size);
            return 0;
        }
    }
    /* The share is well formed; is it one we take? (Not a violation: a FAILED result.) */
    char why[200];
    why[0] = 0;
    if (r->n_items != 1)
        snprintf(why, sizeof why, "takes exactly one text/plain item, got %zu", r->n_items);
    else if (r->items[0]->kind != REMOTEVIEW__ITEM_KIND__ITEM_KIND_TEXT)
        snprintf(why, sizeof why, "takes exactly one text/plain item, got a %s item (%.100s)",
                 kind_name(r->items[0]->kind), r->items[0]->content_type);
    if (why[0]) {
        set_text(c, why, strlen(why));
        c->show_button = 0;
        logf_("refusing a share: %s", why);
        send_complete(c, RESULT(FAILED), why, NULL);
        return 1;
    }
    set_text(c, r->items[0]->text, strlen(r->items[0]->text));
    if (!c->text) {
        send_complete(c, RESULT(FAILED), "out of memory", NULL);
        return 1;
    }
    c->show_button = 1;
    c->share = SHARE_ACTIVE;
    send_activity(c, STATE(PREPARING), 1, 0);
    return 1;
}

static int on_share_cancel(conn *c, violation *v)
{
    if (c->share == SHARE_NONE) {
        violation_set(v, CODE(UNEXPECTED), "share_cancel before share_request");
        return 0;
    }
    if (c->cancel_seen) {
        violation_set(v, CODE(UNEXPECTED), "a second share_cancel");
        return 0;
    }
    c->cancel_seen = 1;
    if (c->share == SHARE_ACTIVE) send_complete(c, RESULT(CANCELLED), NULL, NULL);
    /* else: our share_complete crossed the cancel; the host takes that result. */
    return 1;
}

static void append_text(conn *c, const char *s)
{
    size_t n = strlen(s);
    if (c->text_len + n > MAX_SHARE_TEXT) {
        logf_("typed text dropped: the result would be over %d bytes", MAX_SHARE_TEXT);
        return;
    }
    char *t = realloc(c->text, c->text_len + n + 1);
    if (!t) return;
    memcpy(t + c->text_len, s, n + 1);
    c->text = t;
    c->text_len += n;
    c->vw.dirty_text = 1;
}

/* ---------- frames ---------- */

static int dirty(const conn *c) { return c->vw.dirty_full || c->vw.dirty_text; }

static void reply_settled(conn *c)
{
    for (size_t i = 0; i < c->n_settles; i++) {
        Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
        Remoteview__ServiceMessage m = REMOTEVIEW__SERVICE_MESSAGE__INIT;
        m.type = "remoteview.settled";
        e.reply_to = c->settles[i];
        e.body_case = BODY(REPLY);
        e.reply = &m;
        send_env(c, &e, -1);
    }
    c->n_settles = 0;
}

/* ---------- the semantic tree ---------- */

static size_t update_size(Remoteview__AccessibilityNode **nodes, size_t n, int whole)
{
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__AccessibilityUpdate u = REMOTEVIEW__ACCESSIBILITY_UPDATE__INIT;
    u.nodes = nodes;
    u.n_nodes = n;
    u.root = whole ? NODE_ROOT : 0;
    u.whole = whole;
    u.more = 1;
    e.id = UINT64_MAX; /* the longest id: a part never outgrows its estimate */
    e.body_case = BODY(ACCESSIBILITY_UPDATE);
    e.accessibility_update = &u;
    return remoteview__envelope__get_packed_size(&e);
}

/* After a commit: the nodes that changed since the last update (every node, whole, the first
 * time), in parts that each fit the host's max_packet_size. The focus is always 0: the view has
 * no keyboard focus model (Return presses the button wherever the focus is). */
static void send_tree(conn *c)
{
    tree now;
    scene sc = { .text = c->text ? c->text : "", .text_len = c->text_len, .show_button = c->show_button };
    if (!tree_build(&now, &c->vw, &sc)) {
        logf_("out of memory for the semantic tree");
        return;
    }
    int whole = !c->tree_sent;
    Remoteview__AccessibilityNode wire[TREE_MAX_NODES];
    Remoteview__AccessibilityNode *nodes[TREE_MAX_NODES];
    char *shortened[TREE_MAX_NODES];
    size_t n = 0;
    for (size_t i = 0; i < now.n; i++) {
        const tnode *t = &now.nodes[i], *old = whole ? NULL : tree_find(&c->sent, t->id);
        if (old && tnode_equal(old, t)) continue;
        Remoteview__AccessibilityNode *w = &wire[n];
        remoteview__accessibility_node__init(w);
        w->id = t->id;
        w->role = t->role;
        w->label = t->label;
        w->states = t->states;
        w->actions = t->actions;
        w->x = t->x;
        w->y = t->y;
        w->width = t->width;
        w->height = t->height;
        w->n_children = t->n_children;
        w->children = (uint32_t *)t->children;
        nodes[n] = w;
        shortened[n] = NULL;
        /* A label may be 1024 bytes, and a host's packets as small as 1024: a node that does not
           fit in a part alone has its label cut further. */
        size_t size, len = strlen(t->label);
        while ((size = update_size(&nodes[n], 1, whole)) > c->peer_max_packet && len > 0) {
            if (!shortened[n] && !(shortened[n] = malloc(TREE_MAX_LABEL + 1))) break;
            size_t max = size - c->peer_max_packet < len ? len - (size - c->peer_max_packet) : 0;
            len = label_cut(shortened[n], t->label, strlen(t->label), max);
            w->label = shortened[n];
        }
        n++;
    }
    if (n == 0) { /* nothing changed (and the focus never does): no update */
        tree_free(&now);
        return;
    }
    for (size_t start = 0, end; start < n; start = end) {
        end = start + 1;
        while (end < n && update_size(&nodes[start], end + 1 - start, whole) <= c->peer_max_packet) end++;
        Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
        Remoteview__AccessibilityUpdate u = REMOTEVIEW__ACCESSIBILITY_UPDATE__INIT;
        u.nodes = &nodes[start];
        u.n_nodes = end - start;
        u.root = whole ? NODE_ROOT : 0;
        u.focus = 0;
        u.whole = whole;
        u.more = end < n;
        e.body_case = BODY(ACCESSIBILITY_UPDATE);
        e.accessibility_update = &u;
        if (send_env(c, &e, -1) != 0) {
            logf_("a part of the semantic tree does not fit in %u bytes", c->peer_max_packet);
            break;
        }
    }
    for (size_t i = 0; i < n; i++) free(shortened[i]);
    tree_free(&c->sent);
    c->sent = now;
    c->tree_sent = 1;
}

/* Protocol.md, "Accessibility" 4: an action on a node that is gone, or that the node does not
 * take, is ignored. Only the button takes actions: PRESS, as a click on it, and FOCUS, which
 * changes nothing (no focus model). The nodes are those of what the view shows now. */
static void on_accessibility_action(conn *c, const Remoteview__AccessibilityAction *a)
{
    if (a->node != NODE_BUTTON || !c->vw.has_size || !c->show_button) return;
    if (a->action == ACTION(PRESS)) complete_share(c);
}

/* Draws and commits what is pending, as far as the host lets it; destroys buffers of an old
 * size once the host has let go of them; answers settles when nothing is left to commit. */
static void pump(conn *c)
{
    view *vw = &c->vw;
    if (c->dead) return;
    for (buffer *b = vw->buffers, *next; b; b = next) {
        next = b->next;
        if (b->retired && !b->held) {
            Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
            Remoteview__DestroyBuffer d = REMOTEVIEW__DESTROY_BUFFER__INIT;
            d.buffer_id = b->id;
            e.body_case = BODY(DESTROY_BUFFER);
            e.destroy_buffer = &d;
            send_env(c, &e, -1);
            view_unlink_free(vw, b);
        }
    }
    if (vw->has_size && dirty(c) && (!vw->in_flight || rv_breaks("commit-early"))) {
        buffer *b = view_free_buffer(vw);
        if (!b && view_count_current(vw) < BUFFERS_PER_SIZE) {
            int memfd;
            b = view_new_buffer(vw, &memfd);
            if (!b) {
                logf_("cannot create a %dx%d buffer: %s", vw->px_w, vw->px_h, strerror(errno));
                conn_end(c, "out of memory for the view's buffer", 0, NULL);
                return;
            }
            Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
            Remoteview__AttachBuffer a = REMOTEVIEW__ATTACH_BUFFER__INIT;
            a.buffer_id = b->id;
            a.width = (uint32_t)b->width;
            a.height = (uint32_t)b->height;
            a.stride = (uint32_t)b->stride;
            a.format = REMOTEVIEW__PIXEL_FORMAT__PIXEL_FORMAT_ARGB8888_PREMULTIPLIED;
            e.body_case = BODY(ATTACH_BUFFER);
            e.attach_buffer = &a;
            send_env(c, &e, memfd);
            /* A fresh buffer holds nothing of the previous frames. */
            vw->dirty_full = 1;
        }
        if (b) {
            scene sc = { .text = c->text ? c->text : "", .text_len = c->text_len, .show_button = c->show_button };
            view_draw(vw, b, &sc);
            Remoteview__Rect damage = REMOTEVIEW__RECT__INIT;
            Remoteview__Rect *rects[1] = { &damage };
            view_damage_rect(vw, &damage);
            Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
            Remoteview__Commit cm = REMOTEVIEW__COMMIT__INIT;
            cm.buffer_id = b->id;
            cm.n_damage = 1;
            cm.damage = rects;
            cm.frame = ++vw->frame;
            e.body_case = BODY(COMMIT);
            e.commit = &cm;
            send_env(c, &e, -1);
            b->held = 1;
            vw->in_flight = 1;
            vw->in_flight_frame = vw->frame;
            vw->dirty_full = vw->dirty_text = 0;
            /* the tree this frame shows, to a host that reads it (Accessibility 1 and 2) */
            if (c->peer_accessibility) send_tree(c);
            if (!vw->committed_once) {
                vw->committed_once = 1;
                if (c->share == SHARE_ACTIVE) send_activity(c, STATE(READY), 0, 0);
            }
        }
    }
    if (c->n_settles && (!vw->has_size || !dirty(c))) reply_settled(c);
}

/* ---------- requests and messages ---------- */

static void send_failure(conn *c, uint64_t reply_to, const char *domain, int64_t code, const char *message)
{
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__Failure f = REMOTEVIEW__FAILURE__INIT;
    char msg[4097];
    snprintf(msg, sizeof msg, "%s", message);
    f.domain = (char *)domain;
    f.code = code;
    f.message = msg;
    e.reply_to = reply_to;
    e.body_case = BODY(FAILURE);
    e.failure = &f;
    send_env(c, &e, -1);
}

static void on_request(conn *c, uint64_t id, const Remoteview__ServiceMessage *m)
{
    if (strcmp(m->type, "remoteview.settle") == 0) {
        if (c->n_settles == MAX_OUTSTANDING_REQUESTS) {
            send_failure(c, id, ERROR_DOMAIN, 2, "too many outstanding requests");
            return;
        }
        c->settles[c->n_settles++] = id;
        return; /* answered by pump() */
    }
    char msg[400];
    /* Protocol.md: an unknown request type is answered in the framework's domain, code 1. */
    snprintf(msg, sizeof msg, "%s handles no request of type \"%.256s\"", SERVICE_IDENTIFIER, m->type);
    send_failure(c, id, "RemoteView", 1, msg);
}

static void on_cancel(conn *c, uint64_t request_id)
{
    for (size_t i = 0; i < c->n_settles; i++)
        if (c->settles[i] == request_id) {
            memmove(&c->settles[i], &c->settles[i + 1], (c->n_settles - i - 1) * sizeof c->settles[0]);
            c->n_settles--;
            return;
        }
}

static int on_message(conn *c, const Remoteview__ServiceMessage *m, int *fds, int nfds, violation *v)
{
    if (strcmp(m->type, "remoteview.connect") != 0) {
        logf_("ignoring the one-way message \"%.256s\"", m->type);
        return 1;
    }
    if (!c->is_main) {
        logf_("ignoring remoteview.connect on a client connection");
        return 1;
    }
    int type = 0, domain = 0;
    socklen_t len = sizeof type;
    if (nfds != 1 || getsockopt(fds[0], SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
        type != SOCK_SEQPACKET || (len = sizeof domain, getsockopt(fds[0], SOL_SOCKET, SO_DOMAIN, &domain, &len)) != 0 ||
        domain != AF_UNIX) {
        violation_set(v, CODE(MALFORMED), "remoteview.connect takes exactly one AF_UNIX SOCK_SEQPACKET socket, got %d fds", nfds);
        return 0;
    }
    conn_new(fds[0], 0);
    fds[0] = -1; /* taken */
    return 1;
}

/* ---------- one packet ---------- */

static const char *body_name(int b)
{
    switch (b) {
    case BODY(ATTACH_BUFFER): return "attach_buffer";
    case BODY(COMMIT): return "commit";
    case BODY(DESTROY_BUFFER): return "destroy_buffer";
    case BODY(PREFERRED_SIZE): return "preferred_size";
    case BODY(ACTIVITY_UPDATE): return "activity_update";
    case BODY(SHARE_COMPLETE): return "share_complete";
    case BODY(ACCESSIBILITY_UPDATE): return "accessibility_update";
    default: return "?";
    }
}

static int on_surface(conn *c, const Remoteview__Envelope *e, violation *v)
{
    view *vw = &c->vw;
    char reason[200];
    switch (e->body_case) {
    case BODY(RESIZE):
        if (c->share == SHARE_NONE) {
            violation_set(v, CODE(UNEXPECTED), "resize before share_request (the host sends the share first)");
            return 0;
        }
        view_resize(vw, e->resize->width, e->resize->height, e->resize->scale_permille);
        return 1;
    case BODY(RELEASE_BUFFER): {
        buffer *b = view_find(vw, e->release_buffer->buffer_id);
        if (!b || !b->held) {
            snprintf(reason, sizeof reason, "release_buffer of buffer %u, which the host does not hold",
                     e->release_buffer->buffer_id);
            surface_rule_end(c, reason);
            return 1;
        }
        b->held = 0;
        return 1;
    }
    case BODY(FRAME_DONE):
        if (!vw->in_flight || e->frame_done->frame != vw->in_flight_frame) {
            snprintf(reason, sizeof reason, "frame_done of frame %llu, but %s",
                     (unsigned long long)e->frame_done->frame, vw->in_flight ? "another frame is in flight" : "no frame is in flight");
            surface_rule_end(c, reason);
            return 1;
        }
        vw->in_flight = 0;
        return 1;
    default:
        return 1;
    }
}

static void on_input(conn *c, const Remoteview__Envelope *e)
{
    if (!c->vw.has_size) return; /* no view yet: dropped */
    switch (e->body_case) {
    case BODY(POINTER): {
        const Remoteview__PointerEvent *p = e->pointer;
        int inside = button_contains(&c->vw, p->x, p->y);
        if (p->phase == REMOTEVIEW__POINTER_PHASE__POINTER_PHASE_DOWN && p->button == 1)
            c->down_in_button = inside;
        else if (p->phase == REMOTEVIEW__POINTER_PHASE__POINTER_PHASE_UP && p->button == 1) {
            if (c->down_in_button && inside && c->show_button) complete_share(c);
            c->down_in_button = 0;
        }
        break;
    }
    case BODY(KEY):
        if (e->key->down && !e->key->repeat && e->key->key_code == HID_RETURN) complete_share(c);
        break;
    case BODY(TEXT_INPUT):
        if (c->share == SHARE_ACTIVE) append_text(c, e->text_input->text);
        break;
    default:
        break; /* focus, remote control, traits: nothing to do here */
    }
}

static void on_packet(conn *c, size_t len, int *fds, int nfds, int truncated, int empty)
{
    violation v = { 0, "" };
    Remoteview__Envelope *e = NULL;
    last_activity = now_ms();
    if (truncated) {
        violation_set(&v, CODE(TOO_LARGE), "a packet over %d bytes", MAX_PACKET);
        goto fail;
    }
    if (empty) {
        violation_set(&v, CODE(MALFORMED), "an empty packet");
        goto fail;
    }
    e = remoteview__envelope__unpack(NULL, len, packet);
    if (!e) {
        violation_set(&v, CODE(MALFORMED), "a packet that does not decode as an Envelope");
        goto fail;
    }
    if (!validate_envelope(e, nfds, c->last_in_id, &v)) goto fail;
    c->last_in_id = e->id;

    if (!c->got_handshake) {
        if (e->body_case != BODY(HANDSHAKE)) {
            violation_set(&v, CODE(UNEXPECTED), "the first packet is not a handshake");
            goto fail;
        }
        if (e->handshake->role != REMOTEVIEW__PEER_ROLE__PEER_ROLE_HOST) {
            violation_set(&v, CODE(ROLE), "both peers are services");
            goto fail;
        }
        c->got_handshake = 1;
        c->peer_max_packet = e->handshake->max_packet_size < MAX_PACKET ? e->handshake->max_packet_size : MAX_PACKET;
        for (size_t i = 0; i < e->handshake->n_capabilities; i++)
            if (strcmp(e->handshake->capabilities[i], "accessibility") == 0) c->peer_accessibility = 1;
        goto done;
    }

    switch (e->body_case) {
    case BODY(HANDSHAKE):
        violation_set(&v, CODE(UNEXPECTED), "a second handshake");
        goto fail;
    case BODY(GOODBYE):
        logf_("goodbye from the host on connection %d: %s", c->fd, e->goodbye->reason);
        conn_end(c, NULL, 0, NULL);
        goto done;
    case BODY(PROTOCOL_ERROR):
        logf_("the host reports a protocol error (%d) on connection %d: %s", (int)e->protocol_error->code,
              c->fd, e->protocol_error->reason);
        conn_end(c, NULL, 0, NULL);
        goto done;
    case BODY(PING): {
        Remoteview__Envelope r = REMOTEVIEW__ENVELOPE__INIT;
        Remoteview__Pong pong = REMOTEVIEW__PONG__INIT;
        pong.nonce = e->ping->nonce;
        r.reply_to = e->id;
        r.body_case = BODY(PONG);
        r.pong = &pong;
        send_env(c, &r, -1);
        goto done;
    }
    case BODY(PONG):
    case BODY(REPLY):
    case BODY(FAILURE):
        violation_set(&v, CODE(UNEXPECTED), "an answer to %llu, which this service never sent",
                      (unsigned long long)e->reply_to);
        goto fail;
    case BODY(REQUEST):
        on_request(c, e->id, e->request);
        goto done;
    case BODY(MESSAGE):
        if (!on_message(c, e->message, fds, nfds, &v)) goto fail;
        goto done;
    case BODY(CANCEL):
        on_cancel(c, e->cancel->request_id);
        goto done;
    case BODY(RESIZE):
    case BODY(RELEASE_BUFFER):
    case BODY(FRAME_DONE):
        if (!on_surface(c, e, &v)) goto fail;
        goto done;
    case BODY(POINTER):
    case BODY(KEY):
    case BODY(TEXT_INPUT):
    case BODY(FOCUS):
    case BODY(REMOTE_CONTROL):
    case BODY(TRAITS):
        on_input(c, e);
        goto done;
    case BODY(SHARE_REQUEST):
        if (!on_share_request(c, e->share_request, fds, &v)) goto fail;
        goto done;
    case BODY(SHARE_CANCEL):
        if (!on_share_cancel(c, &v)) goto fail;
        goto done;
    case BODY(ACCESSIBILITY_ACTION):
        on_accessibility_action(c, e->accessibility_action);
        goto done;
    default:
        violation_set(&v, CODE(UNEXPECTED), "%s comes from the service, not the host", body_name(e->body_case));
        goto fail;
    }
fail:
    violation_end(c, &v);
done:
    close_fds(fds, nfds);
    if (e) remoteview__envelope__free_unpacked(e, NULL);
    pump(c);
}

static void on_readable(conn *c)
{
    int fds[256];
    for (int i = 0; i < 64 && !c->dead; i++) { /* bounded, so one busy peer cannot starve the rest */
        size_t len = 0;
        int nfds, truncated, empty;
        int r = recv_packet(c->fd, packet, &len, fds, &nfds, &truncated, &empty);
        if (r < 0) {
            if (errno != EAGAIN) conn_end(c, NULL, 0, NULL);
            return;
        }
        if (r == 0) {
            if (c->n_settles) logf_("connection %d closed with %zu settles unanswered", c->fd, c->n_settles);
            c->dead = 2; /* the peer is gone */
            return;
        }
        on_packet(c, len, fds, nfds, truncated, empty);
    }
}

/* ---------- process ---------- */

static void exit_all(const char *reason, int status)
{
    for (conn *c = conns; c; c = c->next) conn_end(c, reason, 0, NULL);
    while (conns) {
        conn *c = conns;
        conns = c->next;
        conn_free(c);
    }
    if (listen_fd >= 0) close(listen_fd);
    /* Pango's font map, then Cairo's font caches, so valgrind sees no leak of ours (the font map
       holds Cairo fonts: it goes first). */
    pango_cairo_font_map_set_default(NULL);
    cairo_debug_reset_static_data();
    exit(status);
}

static int busy(void)
{
    for (conn *c = conns; c; c = c->next) {
        if (c->dead) continue;
        if (c->n_settles) return 1;            /* a request is outstanding */
        if (c->share == SHARE_ACTIVE) return 1; /* a share awaits its result (a guess, see README) */
    }
    return 0;
}

static int setup(void)
{
    const char *fds = getenv("LISTEN_FDS");
    const char *pid = getenv("LISTEN_PID");
    if (!fds || strcmp(fds, "1") != 0) {
        fprintf(stderr, "uppercase-share: a RemoteView service; run it from a launcher (LISTEN_FDS=1, a socket at fd 3)\n");
        return -1;
    }
    if (pid && strtol(pid, NULL, 10) != (long)getpid()) {
        fprintf(stderr, "uppercase-share: LISTEN_PID is %s, not this process\n", pid);
        return -1;
    }
    if (fcntl(3, F_SETFD, FD_CLOEXEC) != 0) {
        fprintf(stderr, "uppercase-share: no fd 3\n");
        return -1;
    }
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDNAMES");
    const char *idle = getenv("REMOTEVIEW_IDLE_TIMEOUT");
    if (idle && *idle) {
        char *end;
        double t = strtod(idle, &end);
        if (*end || !isfinite(t) || t <= 0 || t > 86400)
            logf_("ignoring REMOTEVIEW_IDLE_TIMEOUT=%s", idle);
        else
            idle_timeout_ms = (int64_t)ceil(t * 1000.0);
    }
    int type = 0, listening = 0;
    socklen_t len = sizeof type;
    if (getsockopt(3, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_SEQPACKET) {
        fprintf(stderr, "uppercase-share: fd 3 is not a SOCK_SEQPACKET socket\n");
        return -1;
    }
    len = sizeof listening;
    if (getsockopt(3, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening)
        listen_fd = 3; /* systemd Accept=no */
    else
        main_conn = conn_new(3, 1);
    return 0;
}

static const char *broken_rule = "";

int rv_breaks(const char *rule)
{
    return strcmp(broken_rule, rule) == 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strncmp(argv[1], "--break=", 8) == 0) broken_rule = argv[1] + 8;
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stderr, NULL, _IOLBF, 0);
    if (setup() != 0) return 2;
    last_activity = now_ms();

    for (;;) {
        /* sweep ended connections */
        for (conn **p = &conns; *p;) {
            conn *c = *p;
            if (c->dead) {
                *p = c->next;
                if (c == main_conn) {
                    conn_free(c);
                    main_conn = NULL;
                    if (rv_breaks("fd3-exit"))
                        for (;;) pause(); /* broken on purpose: never exits */
                    exit_all("the host closed the service", 0);
                }
                conn_free(c);
            } else
                p = &c->next;
        }

        int64_t now = now_ms();
        int timeout = -1;
        for (conn *c = conns; c; c = c->next)
            if (!c->got_handshake) {
                int64_t left = c->handshake_deadline - now;
                if (left < 0) left = 0;
                if (timeout < 0 || left < timeout) timeout = (int)left;
            }
        int idle_applies = idle_timeout_ms > 0 && !busy() && (listen_fd < 0 || !conns);
        if (idle_applies) {
            int64_t left = last_activity + idle_timeout_ms - now;
            if (left <= 0) {
                logf_("idle exit");
                exit_all(rv_breaks("idle-goodbye") ? NULL : "idle exit", 0); /* broken: no goodbye */
            }
            if (timeout < 0 || left < timeout) timeout = (int)left;
        }

        struct pollfd pfds[1 + 1024];
        conn *owners[1 + 1024];
        nfds_t n = 0;
        if (listen_fd >= 0) {
            pfds[n] = (struct pollfd){ .fd = listen_fd, .events = POLLIN };
            owners[n++] = NULL;
        }
        for (conn *c = conns; c && n < 1 + 1024; c = c->next) {
            pfds[n] = (struct pollfd){ .fd = c->fd, .events = POLLIN | (c->out_head ? POLLOUT : 0) };
            owners[n++] = c;
        }
        int r = poll(pfds, n, timeout);
        if (r < 0) {
            if (errno == EINTR) continue;
            logf_("poll: %s", strerror(errno));
            exit_all("internal error", 1);
        }
        now = now_ms();
        for (nfds_t i = 0; i < n; i++) {
            conn *c = owners[i];
            if (!c) {
                if (pfds[i].revents & POLLIN) {
                    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
                    if (fd >= 0) {
                        last_activity = now;
                        conn_new(fd, 0);
                    }
                }
                continue;
            }
            if (c->dead) continue;
            if (pfds[i].revents & POLLOUT) flush(c);
            if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) on_readable(c);
            if (!c->dead && (pfds[i].revents & (POLLOUT | POLLIN))) pump(c);
        }
        for (conn *c = conns; c; c = c->next)
            if (!c->dead && !c->got_handshake && now >= c->handshake_deadline) {
                logf_("no handshake on connection %d within 5 s", c->fd);
                conn_end(c, "no handshake within 5 s", 0, NULL);
            }
    }
}
