/* test-host: drives ./uppercase-share the way a RemoteView launcher and host would, from
 * docs/Protocol.md alone, and checks what comes back. Run by `make check`.
 *
 *   ./test-host [--valgrind] [--snapshot DIR] ./uppercase-share
 *
 * Never sleeps to synchronise: every wait is a poll() on the event, with a deadline. */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cairo.h>

#include "remoteview.pb-c.h"

#define BODY(x) REMOTEVIEW__ENVELOPE__BODY_##x
#define STATE(x) REMOTEVIEW__ACTIVITY_STATE__ACTIVITY_STATE_##x
#define RESULT(x) REMOTEVIEW__SHARE_RESULT__SHARE_RESULT_##x
#define PCODE(x) REMOTEVIEW__PROTOCOL_ERROR_CODE__PROTOCOL_ERROR_CODE_##x
#define ROLE(x) REMOTEVIEW__ACCESSIBILITY_ROLE__ACCESSIBILITY_ROLE_##x
#define ACTION(x) REMOTEVIEW__ACCESSIBILITY_ACTION_KIND__ACCESSIBILITY_ACTION_##x
#define MAX_PACKET 65536

/* The button in a 320 x 200 view, in points (scale 1: pixels too): what the pixel checks, the
 * click and the tree's node 3 use. */
static const float button_frame[4] = { 16, 144, 160, 40 };

static const char *service;
static int use_valgrind;
static int tmul = 1;            /* timeouts multiplier (valgrind is slow) */
static pid_t child = -1;
static int checks;
static int fuzzing;              /* the service may close the connection under a send */

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("test-host: FAIL: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (child > 0) kill(child, SIGKILL);
    exit(1);
}

#define CHECK(cond, ...) do { checks++; if (!(cond)) fail(__VA_ARGS__); } while (0)

static void step(const char *what) { fprintf(stderr, "test-host: %s\n", what); }

/* ---------- a peer: one end of a connection ---------- */

typedef struct peer {
    int fd;
    uint64_t next_id, last_in;
    const char *name;
    int a11y;                   /* announces "accessibility" */
    uint32_t max_packet;        /* announces this max_packet_size (0: MAX_PACKET) */
} peer;

static void send_raw(int fd, const void *buf, size_t len, const int *fds, int nfds)
{
    struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
    union {
        struct cmsghdr align;
        char space[CMSG_SPACE(sizeof(int) * 16)];
    } control;
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (nfds > 0) {
        memset(&control, 0, sizeof control);
        msg.msg_control = control.space;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    if (sendmsg(fd, &msg, MSG_NOSIGNAL) != (ssize_t)len && !(fuzzing && (errno == EPIPE || errno == ECONNRESET)))
        fail("sendmsg: %s", strerror(errno));
}

/* fd_count is set to nfds unless declared >= 0 (to lie about it). */
static uint64_t send_env_fds(peer *p, Remoteview__Envelope *e, const int *fds, int nfds, int declared)
{
    uint8_t buf[MAX_PACKET];
    e->id = ++p->next_id;
    e->fd_count = declared >= 0 ? (uint32_t)declared : (uint32_t)nfds;
    size_t n = remoteview__envelope__get_packed_size(e);
    if (n > sizeof buf) fail("packet too large");
    remoteview__envelope__pack(e, buf);
    send_raw(p->fd, buf, n, fds, nfds);
    return e->id;
}

static uint64_t send_env(peer *p, Remoteview__Envelope *e) { return send_env_fds(p, e, NULL, 0, -1); }

/* Receives one envelope within ms (times tmul). Returns NULL at end of file. */
static Remoteview__Envelope *recv_env(peer *p, int ms, int *fd_out)
{
    static uint8_t buf[MAX_PACKET];
    struct pollfd pf = { .fd = p->fd, .events = POLLIN };
    int r;
    do r = poll(&pf, 1, ms * tmul);
    while (r < 0 && errno == EINTR);
    if (r == 0) fail("%s: nothing arrived within %d ms", p->name, ms * tmul);
    union {
        struct cmsghdr align;
        char space[CMSG_SPACE(sizeof(int) * 16)];
    } control;
    struct iovec iov = { .iov_base = buf, .iov_len = sizeof buf };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space,
                          .msg_controllen = sizeof control.space };
    ssize_t n = recvmsg(p->fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
        if (errno == ECONNRESET) return NULL;
        fail("%s: recvmsg: %s", p->name, strerror(errno));
    }
    int fds[16], nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < k && nfds < 16; i++) memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        }
    if (n == 0 && nfds == 0) return NULL;
    CHECK(!(msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)), "%s: truncated packet", p->name);
    CHECK(!p->max_packet || (size_t)n <= p->max_packet, "%s: a %zd-byte packet, over the %u this host announced", p->name, n, p->max_packet);
    Remoteview__Envelope *e = remoteview__envelope__unpack(NULL, (size_t)n, buf);
    CHECK(e != NULL, "%s: a packet that does not decode (%zd bytes)", p->name, n);
    CHECK(e->id > p->last_in, "%s: envelope id %llu not increasing", p->name, (unsigned long long)e->id);
    p->last_in = e->id;
    CHECK(e->fd_count == (uint32_t)nfds, "%s: fd_count %u but %d fds", p->name, e->fd_count, nfds);
    CHECK(e->body_case != BODY(ACCESSIBILITY_UPDATE) || p->a11y,
          "%s: accessibility_update to a host that did not announce \"accessibility\"", p->name);
    if (fd_out) *fd_out = nfds ? fds[0] : -1;
    else for (int i = 0; i < nfds; i++) close(fds[i]);
    if (fd_out) for (int i = 1; i < nfds; i++) close(fds[i]);
    return e;
}

static const char *body_name(int b)
{
    switch (b) {
    case BODY(HANDSHAKE): return "handshake";
    case BODY(GOODBYE): return "goodbye";
    case BODY(PROTOCOL_ERROR): return "protocol_error";
    case BODY(PONG): return "pong";
    case BODY(REPLY): return "reply";
    case BODY(FAILURE): return "failure";
    case BODY(ATTACH_BUFFER): return "attach_buffer";
    case BODY(COMMIT): return "commit";
    case BODY(DESTROY_BUFFER): return "destroy_buffer";
    case BODY(ACTIVITY_UPDATE): return "activity_update";
    case BODY(SHARE_COMPLETE): return "share_complete";
    case BODY(ACCESSIBILITY_UPDATE): return "accessibility_update";
    default: return "other";
    }
}

static Remoteview__Envelope *expect(peer *p, int body, int *fd_out)
{
    Remoteview__Envelope *e = recv_env(p, 5000, fd_out);
    CHECK(e != NULL, "%s: end of file, expected %s", p->name, body_name(body));
    if (e->body_case == BODY(PROTOCOL_ERROR))
        fail("%s: protocol_error %d \"%s\", expected %s", p->name, e->protocol_error->code, e->protocol_error->reason, body_name(body));
    if (e->body_case == BODY(GOODBYE))
        fail("%s: goodbye \"%s\", expected %s", p->name, e->goodbye->reason, body_name(body));
    CHECK((int)e->body_case == body, "%s: got %s (%d), expected %s", p->name, body_name(e->body_case), e->body_case, body_name(body));
    return e;
}

static void expect_eof(peer *p)
{
    Remoteview__Envelope *e = recv_env(p, 5000, NULL);
    if (e) fail("%s: expected end of file, got %s", p->name, body_name(e->body_case));
}

static void send_handshake(peer *p)
{
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__Handshake h = REMOTEVIEW__HANDSHAKE__INIT;
    h.protocol_version = 1;
    h.role = REMOTEVIEW__PEER_ROLE__PEER_ROLE_HOST;
    char *caps[] = { "accessibility" };
    h.identifier = "com.example.test-host";
    h.max_packet_size = p->max_packet ? p->max_packet : MAX_PACKET;
    h.max_protocol_version = 2;
    if (p->a11y) {
        h.n_capabilities = 1;
        h.capabilities = caps;
    }
    e.body_case = BODY(HANDSHAKE);
    e.handshake = &h;
    send_env(p, &e);
}

static void check_service_handshake(peer *p)
{
    Remoteview__Envelope *e = expect(p, BODY(HANDSHAKE), NULL);
    Remoteview__Handshake *h = e->handshake;
    CHECK(h->protocol_version == 1, "handshake version %u", h->protocol_version);
    CHECK(h->role == REMOTEVIEW__PEER_ROLE__PEER_ROLE_SERVICE, "handshake role %d", h->role);
    CHECK(strcmp(h->identifier, "com.example.uppercase-c") == 0, "handshake identifier %s", h->identifier);
    CHECK(h->max_packet_size == MAX_PACKET, "max_packet_size %u", h->max_packet_size);
    CHECK(h->max_protocol_version == 2, "max_protocol_version %u", h->max_protocol_version);
    int share = 0, a11y = 0;
    for (size_t i = 0; i < h->n_capabilities; i++) {
        share |= strcmp(h->capabilities[i], "share") == 0;
        a11y |= strcmp(h->capabilities[i], "accessibility") == 0;
    }
    CHECK(share, "no share capability");
    CHECK(a11y, "no accessibility capability");
    remoteview__envelope__free_unpacked(e, NULL);
}

static void close_fds_host(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0) close(fds[i]);
}

/* ---------- the service process ---------- */

static int pidfd;

/* Starts the service with fd3 (its end) at fd 3 and LISTEN_FDS=1, LISTEN_PID unset. */
static void spawn_with(int fd3, const char *idle)
{
    int sv[2] = { -1, fd3 };
    child = fork();
    if (child < 0) fail("fork");
    if (child == 0) {
        if (sv[1] == 3) fcntl(3, F_SETFD, 0);
        else if (dup2(sv[1], 3) != 3) _exit(127);
        syscall(SYS_close_range, 4u, ~0u, 0u); /* as a launcher does: only 0-3 */
        setenv("LISTEN_FDS", "1", 1);
        unsetenv("LISTEN_PID");
        unsetenv("LISTEN_FDNAMES");
        if (idle) setenv("REMOTEVIEW_IDLE_TIMEOUT", idle, 1);
        else unsetenv("REMOTEVIEW_IDLE_TIMEOUT");
        if (use_valgrind) {
            char supp[4200];
            const char *slash = strrchr(service, '/');
            snprintf(supp, sizeof supp, "--suppressions=%.*svalgrind.supp", slash ? (int)(slash - service + 1) : 0, service);
            execlp("valgrind", "valgrind", "--quiet", "--error-exitcode=1", "--leak-check=full",
                   "--errors-for-leak-kinds=definite", "--show-leak-kinds=definite", supp, service, (char *)NULL);
        }
        else
            execl(service, service, (char *)NULL);
        _exit(127);
    }
    close(fd3);
    pidfd = (int)syscall(SYS_pidfd_open, child, 0);
    if (pidfd < 0) fail("pidfd_open: %s", strerror(errno));
}

static peer spawn_service(const char *idle)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) fail("socketpair");
    spawn_with(sv[1], idle);
    return (peer){ .fd = sv[0], .name = "fd 3" };
}

static int wait_exit(int ms)
{
    struct pollfd pf = { .fd = pidfd, .events = POLLIN };
    if (poll(&pf, 1, ms * tmul) != 1) fail("the service did not exit within %d ms", ms * tmul);
    int status;
    if (waitpid(child, &status, 0) != child) fail("waitpid");
    close(pidfd);
    child = -1;
    return status;
}

static void ping(peer *p, uint64_t nonce)
{
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__Ping pg = REMOTEVIEW__PING__INIT;
    pg.nonce = nonce;
    e.body_case = BODY(PING);
    e.ping = &pg;
    uint64_t id = send_env(p, &e);
    Remoteview__Envelope *r = expect(p, BODY(PONG), NULL);
    CHECK(r->reply_to == id && r->pong->nonce == nonce, "pong reply_to %llu nonce %llu",
          (unsigned long long)r->reply_to, (unsigned long long)r->pong->nonce);
    remoteview__envelope__free_unpacked(r, NULL);
}

/* A new client: a socket pair whose service end rides on remoteview.connect over fd 3. With
 * a11y, it announces "accessibility" and max_packet_size max_packet (0: 64 KiB). */
static peer open_client_with(peer *main, const char *name, int handshake, int a11y, uint32_t max_packet)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) fail("socketpair");
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__ServiceMessage m = REMOTEVIEW__SERVICE_MESSAGE__INIT;
    m.type = "remoteview.connect";
    e.body_case = BODY(MESSAGE);
    e.message = &m;
    send_env_fds(main, &e, &sv[1], 1, -1);
    close(sv[1]);
    peer p = { .fd = sv[0], .name = name, .a11y = a11y, .max_packet = max_packet };
    if (handshake) {
        send_handshake(&p);
        check_service_handshake(&p);
    }
    return p;
}

static peer open_client(peer *main, const char *name, int handshake)
{
    return open_client_with(main, name, handshake, 0, 0);
}

/* ---------- the semantic tree, host side (Protocol.md, "Accessibility") ---------- */

#define HT_MAX 80               /* this host's own limit, for this service's small trees */
#define HT_CHILDREN 8

typedef struct hnode {
    uint32_t id;
    int role;
    char label[1025];
    uint32_t states, actions;
    float x, y, w, h;
    uint32_t children[HT_CHILDREN];
    size_t n_children;
} hnode;

typedef struct htree {
    hnode nodes[HT_MAX];
    int n;
    uint32_t root, focus;
    int updates;                /* complete updates applied */
    int last_whole, last_parts;
    uint32_t changed[HT_MAX];   /* the last update's nodes, in its order */
    int n_changed;
    int commits_at_update;      /* commits seen when the last update began */
    hnode pending[HT_MAX];      /* parts so far of an update that said more */
    int n_pending, parts;
    int pend_whole;
    uint32_t pend_root, pend_focus;
} htree;

static int utf8_ok(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        int n = *s < 0x80 ? 0 : (*s >= 0xC2 && *s <= 0xDF) ? 1 : (*s >= 0xE0 && *s <= 0xEF) ? 2 : (*s >= 0xF0 && *s <= 0xF4) ? 3 : -1;
        if (n < 0) return 0;
        uint32_t cp = n == 0 ? *s : *s & (0x3F >> n);
        for (int k = 1; k <= n; k++) {
            if ((s[k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[k] & 0x3F);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        s += n + 1;
    }
    return 1;
}

static hnode *htree_find(hnode *nodes, int n, uint32_t id)
{
    for (int i = 0; i < n; i++)
        if (nodes[i].id == id) return &nodes[i];
    return NULL;
}

static hnode *tree_node(htree *t, uint32_t id) { return htree_find(t->nodes, t->n, id); }

/* One accessibility_update (or part of one), checked against every rule a host enforces:
 * view_w x view_h points is the largest size this host gave the view. */
static void tree_part(htree *t, const Remoteview__AccessibilityUpdate *u, float view_w, float view_h, int commits)
{
    if (t->parts == 0) {
        CHECK(commits > t->commits_at_update, "an accessibility_update with no commit since the last one");
        t->commits_at_update = commits;
        t->pend_whole = u->whole;
        t->pend_root = u->root;
        t->pend_focus = u->focus;
    }
    CHECK(!!u->whole == t->pend_whole && u->root == t->pend_root && u->focus == t->pend_focus,
          "the parts of one update disagree on whole, root or focus");
    CHECK(t->n_pending + (int)u->n_nodes <= HT_MAX, "an update of more than %d nodes", HT_MAX);
    for (size_t i = 0; i < u->n_nodes; i++) {
        const Remoteview__AccessibilityNode *a = u->nodes[i];
        CHECK(a->id != 0, "accessibility.structure: node id 0");
        CHECK(!htree_find(t->pending, t->n_pending, a->id), "accessibility.structure: node %u twice in one update", a->id);
        CHECK(strlen(a->label) <= 1024 && utf8_ok(a->label) && strlen(a->value) <= 1024 && utf8_ok(a->value),
              "accessibility.text-length: node %u", a->id);
        CHECK(isfinite(a->x) && isfinite(a->y) && isfinite(a->width) && isfinite(a->height) && a->width >= 0 && a->height >= 0,
              "accessibility.frame: node %u (%g, %g, %g, %g)", a->id, a->x, a->y, a->width, a->height);
        float rx = 16 * fmaxf(view_w, 1), ry = 16 * fmaxf(view_h, 1);
        CHECK(fabsf(a->x) <= rx && fabsf(a->x + a->width) <= rx && fabsf(a->y) <= ry && fabsf(a->y + a->height) <= ry,
              "accessibility.frame: node %u beyond 16 times the view", a->id);
        CHECK(a->n_children <= HT_CHILDREN, "node %u: %zu children, this host takes %d", a->id, a->n_children, HT_CHILDREN);
        hnode *h = &t->pending[t->n_pending++];
        *h = (hnode){ .id = a->id, .role = a->role, .states = a->states, .actions = a->actions,
                      .x = a->x, .y = a->y, .w = a->width, .h = a->height, .n_children = a->n_children };
        snprintf(h->label, sizeof h->label, "%s", a->label);
        memcpy(h->children, a->children, a->n_children * sizeof a->children[0]);
    }
    t->parts++;
    if (u->more) return;

    /* The whole update: apply it to a copy, then check the tree's shape. */
    static hnode next[HT_MAX];
    int n = 0;
    CHECK(t->updates > 0 || t->pend_whole, "accessibility.structure: the first update is not whole");
    if (!t->pend_whole) {
        CHECK(t->pend_root == 0, "a partial update with root %u", t->pend_root);
        memcpy(next, t->nodes, sizeof next[0] * (size_t)t->n);
        n = t->n;
    }
    for (int i = 0; i < t->n_pending; i++) {
        hnode *old = htree_find(next, n, t->pending[i].id);
        if (old) *old = t->pending[i];
        else {
            CHECK(n < HT_MAX, "more than %d nodes", HT_MAX);
            next[n++] = t->pending[i];
        }
    }
    uint32_t root = t->pend_whole ? t->pend_root : t->root;
    CHECK(root != 0 && htree_find(next, n, root), "accessibility.structure: root %u is not in the tree", root);
    /* reachable from the root, each node once, depth <= 64 */
    uint32_t stack[HT_MAX], seen[HT_MAX];
    int depth[HT_MAX], sp = 0, nseen = 0;
    stack[sp] = root;
    depth[sp++] = 1;
    seen[nseen++] = root;
    while (sp > 0) {
        sp--;
        uint32_t id = stack[sp];
        int d = depth[sp];
        CHECK(d <= 64, "accessibility.depth: node %u at depth %d", id, d);
        hnode *h = htree_find(next, n, id);
        for (size_t c = 0; c < h->n_children; c++) {
            uint32_t ch = h->children[c];
            CHECK(htree_find(next, n, ch), "accessibility.structure: node %u's child %u does not exist", id, ch);
            for (int k = 0; k < nseen; k++)
                CHECK(seen[k] != ch, "accessibility.structure: node %u has two parents", ch);
            seen[nseen++] = ch;
            stack[sp] = ch;
            depth[sp++] = d + 1;
        }
    }
    int found = t->pend_focus == 0;
    for (int k = 0; k < nseen && !found; k++) found = seen[k] == t->pend_focus;
    CHECK(found, "accessibility.focus: node %u is not in the tree", t->pend_focus);
    /* nodes no longer reachable are gone */
    t->n = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < nseen; k++)
            if (seen[k] == next[i].id) {
                t->nodes[t->n++] = next[i];
                break;
            }
    t->root = root;
    t->focus = t->pend_focus;
    t->last_whole = t->pend_whole;
    t->last_parts = t->parts;
    t->n_changed = t->n_pending;
    for (int i = 0; i < t->n_pending; i++) t->changed[i] = t->pending[i].id;
    t->updates++;
    t->n_pending = 0;
    t->parts = 0;
}

/* ---------- the view, host side ---------- */

typedef struct hbuf {
    uint32_t id;
    int w, h, stride;
    const uint8_t *map;
    size_t size;
} hbuf;

typedef struct hview {
    hbuf bufs[8];
    int n;
    uint64_t last_frame;
    uint32_t shown;             /* the last committed buffer */
    int commits, destroys;
    uint32_t last_destroyed;
    int auto_release;           /* answer each commit with release_buffer + frame_done */
    float pt_w, pt_h;           /* the largest size in points given to the view */
    htree tree;
} hview;

static hbuf *hview_find(hview *v, uint32_t id)
{
    for (int i = 0; i < v->n; i++)
        if (v->bufs[i].id == id) return &v->bufs[i];
    return NULL;
}

static void release_and_done(peer *p, uint32_t buffer_id, uint64_t frame)
{
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__ReleaseBuffer rb = REMOTEVIEW__RELEASE_BUFFER__INIT;
    rb.buffer_id = buffer_id;
    e.body_case = BODY(RELEASE_BUFFER);
    e.release_buffer = &rb;
    send_env(p, &e);
    Remoteview__Envelope f = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__FrameDone fd = REMOTEVIEW__FRAME_DONE__INIT;
    fd.frame = frame;
    f.body_case = BODY(FRAME_DONE);
    f.frame_done = &fd;
    send_env(p, &f);
}

/* Handles a surface body as a host's compositor would, checking every rule of Protocol.md. */
static int surface_body(peer *p, hview *v, Remoteview__Envelope *e, int fd)
{
    if (e->body_case == BODY(ATTACH_BUFFER)) {
        Remoteview__AttachBuffer *a = e->attach_buffer;
        CHECK(fd >= 0, "attach_buffer without an fd");
        CHECK(a->buffer_id != 0 && !hview_find(v, a->buffer_id) && v->n < 8, "attach_buffer id %u", a->buffer_id);
        CHECK(a->width >= 1 && a->width <= 16384 && a->height >= 1 && a->height <= 16384, "attach size");
        CHECK(a->stride % 4 == 0 && a->stride >= 4 * a->width, "stride %u", a->stride);
        CHECK(a->format == REMOTEVIEW__PIXEL_FORMAT__PIXEL_FORMAT_ARGB8888_PREMULTIPLIED, "format %d", a->format);
        int seals = fcntl(fd, F_GET_SEALS);
        CHECK(seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) == (F_SEAL_SHRINK | F_SEAL_GROW), "seals 0x%x", seals);
        struct stat st;
        size_t need = (size_t)a->stride * a->height;
        CHECK(fstat(fd, &st) == 0 && (size_t)st.st_size >= need, "memfd holds %lld bytes", (long long)st.st_size);
        void *map = mmap(NULL, need, PROT_READ, MAP_SHARED, fd, 0);
        CHECK(map != MAP_FAILED, "mmap");
        close(fd);
        v->bufs[v->n++] = (hbuf){ a->buffer_id, (int)a->width, (int)a->height, (int)a->stride, map, need };
        return 1;
    }
    if (fd >= 0) close(fd);
    if (e->body_case == BODY(COMMIT)) {
        Remoteview__Commit *c = e->commit;
        hbuf *b = hview_find(v, c->buffer_id);
        CHECK(b, "commit of buffer %u, not attached", c->buffer_id);
        CHECK(c->frame > v->last_frame, "commit frame %llu not increasing", (unsigned long long)c->frame);
        CHECK(c->n_damage <= 128, "damage rects");
        for (size_t i = 0; i < c->n_damage; i++) {
            Remoteview__Rect *r = c->damage[i];
            CHECK(r->x >= 0 && r->y >= 0 && r->width >= 1 && r->height >= 1 &&
                  r->x + (int64_t)r->width <= b->w && r->y + (int64_t)r->height <= b->h,
                  "damage rect %zu (%ux%u at (%d, %d)) outside the buffer (%dx%d)", i, r->width, r->height, r->x, r->y, b->w, b->h);
        }
        v->last_frame = c->frame;
        v->shown = c->buffer_id;
        v->commits++;
        if (v->auto_release) release_and_done(p, c->buffer_id, c->frame);
        return 1;
    }
    if (e->body_case == BODY(ACCESSIBILITY_UPDATE)) {
        tree_part(&v->tree, e->accessibility_update, v->pt_w, v->pt_h, v->commits);
        return 1;
    }
    if (e->body_case == BODY(DESTROY_BUFFER)) {
        hbuf *b = hview_find(v, e->destroy_buffer->buffer_id);
        CHECK(b, "destroy_buffer of buffer %u, not attached", e->destroy_buffer->buffer_id);
        munmap((void *)b->map, b->size);
        v->last_destroyed = b->id;
        *b = v->bufs[--v->n];
        v->destroys++;
        return 1;
    }
    return 0;
}

/* The next body that is not a surface one (those are handled on the way). */
static Remoteview__Envelope *next_share_body(peer *p, hview *v)
{
    for (;;) {
        int fd;
        Remoteview__Envelope *e = recv_env(p, 5000, &fd);
        CHECK(e != NULL, "%s: end of file", p->name);
        if (surface_body(p, v, e, fd)) {
            remoteview__envelope__free_unpacked(e, NULL);
            continue;
        }
        if (e->body_case == BODY(PROTOCOL_ERROR)) fail("%s: protocol_error: %s", p->name, e->protocol_error->reason);
        if (e->body_case == BODY(GOODBYE)) fail("%s: goodbye: %s", p->name, e->goodbye->reason);
        return e;
    }
}

static uint32_t pixel(const hbuf *b, int x, int y)
{
    uint32_t px;
    memcpy(&px, b->map + (size_t)y * (size_t)b->stride + (size_t)x * 4, 4);
    return px;
}

/* With --snapshot DIR, writes the buffer as DIR/NAME.png (to look at; nothing checks it). */
static const char *snapshot_dir;

static void snapshot(const hbuf *b, const char *name)
{
    if (!snapshot_dir) return;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.png", snapshot_dir, name);
    cairo_surface_t *s = cairo_image_surface_create_for_data((unsigned char *)b->map, CAIRO_FORMAT_ARGB32, b->w, b->h, b->stride);
    if (cairo_surface_write_to_png(s, path) == CAIRO_STATUS_SUCCESS) fprintf(stderr, "test-host:   wrote %s\n", path);
    cairo_surface_destroy(s);
}

static void send_share_request(peer *p, Remoteview__ShareItem **items, size_t n, const int *fds, int nfds)
{
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__ShareRequest r = REMOTEVIEW__SHARE_REQUEST__INIT;
    r.n_items = n;
    r.items = items;
    e.body_case = BODY(SHARE_REQUEST);
    e.share_request = &r;
    send_env_fds(p, &e, fds, nfds, -1);
}

static void share_text(peer *p, const char *text)
{
    Remoteview__ShareItem it = REMOTEVIEW__SHARE_ITEM__INIT;
    Remoteview__ShareItem *items[1] = { &it };
    it.kind = REMOTEVIEW__ITEM_KIND__ITEM_KIND_TEXT;
    it.content_type = "text/plain";
    it.text = (char *)text;
    send_share_request(p, items, 1, NULL, 0);
}

static void resize(peer *p, hview *v, uint32_t w, uint32_t h, uint32_t scale)
{
    if (v) {
        v->pt_w = fmaxf(v->pt_w, (float)w);
        v->pt_h = fmaxf(v->pt_h, (float)h);
    }
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__Resize r = REMOTEVIEW__RESIZE__INIT;
    r.width = w;
    r.height = h;
    r.scale_permille = scale;
    e.body_case = BODY(RESIZE);
    e.resize = &r;
    send_env(p, &e);
}

static uint64_t request(peer *p, const char *type)
{
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__ServiceMessage m = REMOTEVIEW__SERVICE_MESSAGE__INIT;
    m.type = (char *)type;
    e.body_case = BODY(REQUEST);
    e.request = &m;
    return send_env(p, &e);
}

static void settle(peer *p, hview *v)
{
    uint64_t id = request(p, "remoteview.settle");
    Remoteview__Envelope *e = next_share_body(p, v);
    CHECK(e->body_case == BODY(REPLY) && e->reply_to == id && strcmp(e->reply->type, "remoteview.settled") == 0,
          "settle: got %s", body_name(e->body_case));
    remoteview__envelope__free_unpacked(e, NULL);
}

static void pointer(peer *p, int phase, float x, float y, uint32_t button, uint32_t buttons)
{
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__PointerEvent pe = REMOTEVIEW__POINTER_EVENT__INIT;
    pe.phase = phase;
    pe.x = x;
    pe.y = y;
    pe.button = button;
    pe.buttons = buttons;
    e.body_case = BODY(POINTER);
    e.pointer = &pe;
    send_env(p, &e);
}

static void expect_activity(peer *p, hview *v, int state, float progress, int indeterminate, const char *subtitle)
{
    Remoteview__Envelope *e = next_share_body(p, v);
    CHECK(e->body_case == BODY(ACTIVITY_UPDATE), "%s: got %s, expected activity_update %d", p->name, body_name(e->body_case), state);
    Remoteview__ActivityUpdate *a = e->activity_update;
    CHECK((int)a->state == state, "activity state %d, expected %d", a->state, state);
    CHECK(strcmp(a->title, "Uppercase") == 0, "activity title %s", a->title);
    CHECK(!!a->indeterminate == indeterminate, "indeterminate %d", a->indeterminate);
    CHECK(fabsf(a->progress - progress) < 1e-6f, "progress %g, expected %g", a->progress, progress);
    if (subtitle) CHECK(strcmp(a->subtitle, subtitle) == 0, "subtitle \"%s\", expected \"%s\"", a->subtitle, subtitle);
    remoteview__envelope__free_unpacked(e, NULL);
}

static void goodbye(peer *p, const char *reason)
{
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__Goodbye g = REMOTEVIEW__GOODBYE__INIT;
    g.reason = (char *)reason;
    e.body_case = BODY(GOODBYE);
    e.goodbye = &g;
    send_env(p, &e);
}

static void close_view(hview *v)
{
    for (int i = 0; i < v->n; i++) munmap((void *)v->bufs[i].map, v->bufs[i].size);
    v->n = 0;
}

static void a11y_action(peer *p, uint32_t node, int action, const char *text)
{
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__AccessibilityAction a = REMOTEVIEW__ACCESSIBILITY_ACTION__INIT;
    a.node = node;
    a.action = action;
    if (text) a.text = (char *)text;
    e.body_case = BODY(ACCESSIBILITY_ACTION);
    e.accessibility_action = &a;
    send_env(p, &e);
}

static hnode *expect_node(htree *t, uint32_t id, int role, const char *label)
{
    hnode *n = tree_node(t, id);
    CHECK(n, "no node %u in the tree", id);
    CHECK(n->role == role, "node %u: role %d, expected %d", id, n->role, role);
    if (label) CHECK(strcmp(n->label, label) == 0, "node %u: label \"%s\", expected \"%s\"", id, n->label, label);
    return n;
}

/* One update since `before`, not whole, of exactly these nodes (in any order), focus 0. */
static void expect_changed(htree *t, int before, const uint32_t *ids, int n, const char *what)
{
    CHECK(t->updates == before + 1, "%s: %d accessibility updates, expected 1", what, t->updates - before);
    CHECK(!t->last_whole && t->focus == 0, "%s: whole %d, focus %u", what, t->last_whole, t->focus);
    CHECK(t->n_changed == n, "%s: an update of %d nodes, expected %d", what, t->n_changed, n);
    for (int i = 0; i < n; i++) {
        int found = 0;
        for (int k = 0; k < t->n_changed; k++) found |= t->changed[k] == ids[i];
        CHECK(found, "%s: node %u not in the update", what, ids[i]);
    }
}

static int frame_is(const hnode *n, float x, float y, float w, float h)
{
    return n->x == x && n->y == y && n->w == w && n->h == h;
}

/* ---------- the runs ---------- */

static void run_complete(peer *main)
{
    step("run 1: share \"hello\", type \" world\", click UPPERCASE (the host announces \"accessibility\")");
    peer p = open_client_with(main, "client 1", 1, 1, 0);
    hview v = { 0 };
    share_text(&p, "hello");
    expect_activity(&p, &v, STATE(PREPARING), 0, 1, "hello");
    resize(&p, &v, 320, 200, 1000);

    int fd;
    Remoteview__Envelope *e = expect(&p, BODY(ATTACH_BUFFER), &fd);
    CHECK(e->attach_buffer->width == 320 && e->attach_buffer->height == 200, "buffer %ux%u",
          e->attach_buffer->width, e->attach_buffer->height);
    surface_body(&p, &v, e, fd);
    remoteview__envelope__free_unpacked(e, NULL);
    e = expect(&p, BODY(COMMIT), NULL);
    surface_body(&p, &v, e, -1);
    uint32_t first = e->commit->buffer_id;
    uint64_t frame = e->commit->frame;
    remoteview__envelope__free_unpacked(e, NULL);

    hbuf *b = hview_find(&v, first);
    CHECK(pixel(b, 300, 10) == 0xFFFFFFFFu, "background at (300, 10) is %08x, not white", pixel(b, 300, 10));
    CHECK(pixel(b, 310, 190) == 0xFFFFFFFFu, "background at (310, 190) is %08x", pixel(b, 310, 190));
    int bx = (int)button_frame[0], by = (int)button_frame[1], bw = (int)button_frame[2], bh = (int)button_frame[3];
    CHECK(pixel(b, bx + 4, by + 4) == 0xFF2F6FEDu, "button at (%d, %d) is %08x, not #2F6FED", bx + 4, by + 4, pixel(b, bx + 4, by + 4));
    CHECK(pixel(b, bx + bw - 4, by + bh - 3) == 0xFF2F6FEDu, "button at (%d, %d) is %08x", bx + bw - 4, by + bh - 3,
          pixel(b, bx + bw - 4, by + bh - 3));
    CHECK(pixel(b, bx - 1, by + 6) == 0xFFFFFFFFu && pixel(b, bx + bw + 1, by + 6) == 0xFFFFFFFFu, "button wider than %d points", bw);
    int dark = 0, white_in_button = 0;
    for (int y = 16; y < 40; y++)
        for (int x = 16; x < 80; x++) dark += (pixel(b, x, y) & 0xFF) < 0x40;
    for (int y = 150; y < 180; y++)
        for (int x = 40; x < 150; x++) white_in_button += pixel(b, x, y) == 0xFFFFFFFFu;
    CHECK(dark > 20, "no text drawn at the top left (%d dark pixels)", dark);
    CHECK(white_in_button > 20, "no label in the button (%d white pixels)", white_in_button);

    snapshot(b, "1-shared");
    expect_activity(&p, &v, STATE(READY), 0, 0, "hello");
    release_and_done(&p, first, frame);
    v.auto_release = 1;

    /* the first frame's tree: whole, three nodes */
    htree *tr = &v.tree;
    CHECK(tr->updates == 1 && tr->last_whole && tr->root == 1 && tr->focus == 0 && tr->n == 3 && tr->n_changed == 3,
          "first tree: %d updates, whole %d, root %u, focus %u, %d nodes", tr->updates, tr->last_whole, tr->root, tr->focus, tr->n);
    hnode *root = expect_node(tr, 1, ROLE(GROUP), NULL);
    hnode *label = expect_node(tr, 2, ROLE(LABEL), "hello");
    hnode *button = expect_node(tr, 3, ROLE(BUTTON), "UPPERCASE");
    CHECK(root->n_children == 2 && root->children[0] == 2 && root->children[1] == 3 && !label->n_children && !button->n_children,
          "the root's children (%zu)", root->n_children);
    CHECK(frame_is(root, 0, 0, 320, 200), "root frame (%g, %g, %g, %g)", root->x, root->y, root->w, root->h);
    CHECK(frame_is(label, 16, 16, 304, 124), "label frame (%g, %g, %g, %g)", label->x, label->y, label->w, label->h);
    CHECK(frame_is(button, button_frame[0], button_frame[1], button_frame[2], button_frame[3]),
          "button frame (%g, %g, %g, %g), not the drawn (%g, %g, %g, %g)", button->x, button->y, button->w, button->h,
          button_frame[0], button_frame[1], button_frame[2], button_frame[3]);
    CHECK(button->states == 1 && button->actions == 3 && label->states == 0 && label->actions == 0 && root->actions == 0,
          "button states %u actions %u", button->states, button->actions);
    fprintf(stderr, "test-host:   tree after the first frame: whole, root 1 GROUP [2, 3] (0, 0, 320, 200), 2 LABEL \"%s\" "
            "(16, 16, 304, 124), 3 BUTTON \"%s\" (%g, %g, %g, %g) states 1 actions PRESS|FOCUS, focus 0\n",
            label->label, button->label, button->x, button->y, button->w, button->h);

    ping(&p, 42);
    settle(&p, &v);
    uint64_t id = request(&p, "com.example.unknown");
    e = next_share_body(&p, &v);
    CHECK(e->body_case == BODY(FAILURE) && e->reply_to == id && strcmp(e->failure->domain, "RemoteView") == 0 && e->failure->code == 1 && e->failure->message[0], "unknown request: %s", body_name(e->body_case));
    remoteview__envelope__free_unpacked(e, NULL);

    /* typing redraws the text */
    int commits = v.commits;
    Remoteview__Envelope t = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__TextInput ti = REMOTEVIEW__TEXT_INPUT__INIT;
    ti.text = " world";
    t.body_case = BODY(TEXT_INPUT);
    t.text_input = &ti;
    int updates = v.tree.updates;
    send_env(&p, &t);
    settle(&p, &v);
    CHECK(v.commits == commits + 1, "typing made %d commits", v.commits - commits);
    expect_changed(&v.tree, updates, (const uint32_t[]){ 2 }, 1, "typing");
    expect_node(&v.tree, 2, ROLE(LABEL), "hello world");
    fprintf(stderr, "test-host:   typing: an update of node 2 alone, label \"%s\"\n", tree_node(&v.tree, 2)->label);

    /* a press outside the button does nothing; one inside completes */
    pointer(&p, REMOTEVIEW__POINTER_PHASE__POINTER_PHASE_DOWN, 250, 20, 1, 1);
    pointer(&p, REMOTEVIEW__POINTER_PHASE__POINTER_PHASE_UP, 250, 20, 1, 0);
    settle(&p, &v);
    CHECK(v.tree.updates == updates + 1, "a press outside the button changed the tree");
    float cx = button_frame[0] + button_frame[2] / 2, cy = button_frame[1] + button_frame[3] / 2; /* (96, 164) */
    pointer(&p, REMOTEVIEW__POINTER_PHASE__POINTER_PHASE_DOWN, cx, cy, 1, 1);
    pointer(&p, REMOTEVIEW__POINTER_PHASE__POINTER_PHASE_UP, cx, cy, 1, 0);
    expect_activity(&p, &v, STATE(WORKING), 0.5f, 0, NULL);
    expect_activity(&p, &v, STATE(DONE), 1.0f, 0, NULL);
    e = next_share_body(&p, &v);
    CHECK(e->body_case == BODY(SHARE_COMPLETE), "got %s, expected share_complete", body_name(e->body_case));
    Remoteview__ShareComplete *sc = e->share_complete;
    CHECK(sc->result == RESULT(COMPLETED) && sc->n_items == 1 && sc->message[0] == 0, "share_complete result %d, %zu items",
          sc->result, sc->n_items);
    CHECK(sc->items[0]->kind == REMOTEVIEW__ITEM_KIND__ITEM_KIND_TEXT && strcmp(sc->items[0]->content_type, "text/plain") == 0,
          "returned item kind %d type %s", sc->items[0]->kind, sc->items[0]->content_type);
    CHECK(strcmp(sc->items[0]->text, "HELLO WORLD") == 0, "returned \"%s\"", sc->items[0]->text);
    fprintf(stderr, "test-host:   share_complete COMPLETED \"%s\"\n", sc->items[0]->text);
    remoteview__envelope__free_unpacked(e, NULL);
    commits = v.commits;
    updates = v.tree.updates;
    settle(&p, &v);
    CHECK(v.commits == commits + 1, "no redraw after completing (%d commits)", v.commits - commits);
    expect_changed(&v.tree, updates, (const uint32_t[]){ 2 }, 1, "completing");
    expect_node(&v.tree, 2, ROLE(LABEL), "HELLO WORLD");
    snapshot(hview_find(&v, v.shown), "2-completed");

    /* Return after completion does nothing (anything of the family after share_complete
     * would be a violation) */
    Remoteview__Envelope k = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__KeyEvent key = REMOTEVIEW__KEY_EVENT__INIT;
    key.down = 1;
    key.key_code = 40;
    k.body_case = BODY(KEY);
    k.key = &key;
    send_env(&p, &k);
    updates = v.tree.updates;
    settle(&p, &v);
    CHECK(v.tree.updates == updates, "Return after completion changed the tree");

    goodbye(&p, "done");
    expect_eof(&p);
    close(p.fd);
    close_view(&v);
}

static void run_action(peer *main)
{
    step("run 2: accessibility_action PRESS on the button completes the share");
    peer p = open_client_with(main, "client 2", 1, 1, 0);
    hview v = { .auto_release = 1 };
    share_text(&p, "hello");
    resize(&p, &v, 320, 200, 1000);
    expect_activity(&p, &v, STATE(PREPARING), 0, 1, "hello");
    expect_activity(&p, &v, STATE(READY), 0, 0, "hello");
    CHECK(v.tree.updates == 1 && v.tree.n == 3, "no whole tree before READY");
    /* ignored: a node that does not take the action, nodes that are not there, an action the
       button does not take; FOCUS changes nothing (the focus stays 0) */
    int updates = v.tree.updates, commits = v.commits;
    a11y_action(&p, 2, ACTION(PRESS), NULL);
    a11y_action(&p, 1, ACTION(PRESS), NULL);
    a11y_action(&p, 99, ACTION(PRESS), NULL);
    a11y_action(&p, 2, ACTION(SET_VALUE), "replaced");
    a11y_action(&p, 3, ACTION(SET_VALUE), "replaced");
    a11y_action(&p, 3, ACTION(INCREMENT), NULL);
    a11y_action(&p, 3, ACTION(SCROLL_INTO_VIEW), NULL);
    a11y_action(&p, 3, ACTION(FOCUS), NULL);
    settle(&p, &v);
    CHECK(v.tree.updates == updates && v.commits == commits && v.tree.focus == 0, "ignored actions changed the view or its tree");
    fprintf(stderr, "test-host:   PRESS on nodes 1, 2 and 99, SET_VALUE, INCREMENT, SCROLL_INTO_VIEW, FOCUS: ignored\n");
    a11y_action(&p, 3, ACTION(PRESS), NULL);
    expect_activity(&p, &v, STATE(WORKING), 0.5f, 0, NULL);
    expect_activity(&p, &v, STATE(DONE), 1.0f, 0, NULL);
    Remoteview__Envelope *e = next_share_body(&p, &v);
    CHECK(e->body_case == BODY(SHARE_COMPLETE) && e->share_complete->result == RESULT(COMPLETED) &&
          e->share_complete->n_items == 1 && strcmp(e->share_complete->items[0]->text, "HELLO") == 0,
          "PRESS: got %s", body_name(e->body_case));
    fprintf(stderr, "test-host:   PRESS on node 3: share_complete COMPLETED \"%s\"\n", e->share_complete->items[0]->text);
    remoteview__envelope__free_unpacked(e, NULL);
    settle(&p, &v);
    expect_changed(&v.tree, updates, (const uint32_t[]){ 2 }, 1, "PRESS");
    expect_node(&v.tree, 2, ROLE(LABEL), "HELLO");
    /* a second PRESS: the share is complete, nothing happens */
    updates = v.tree.updates;
    a11y_action(&p, 3, ACTION(PRESS), NULL);
    settle(&p, &v);
    CHECK(v.tree.updates == updates, "a PRESS after completion changed the tree");
    goodbye(&p, "done");
    expect_eof(&p);
    close(p.fd);
    close_view(&v);
}

static void run_key_and_cancel(peer *main)
{
    step("run 3: multi-byte text over 1024 bytes, packets of 1024 bytes, scale 2, resize, share_cancel");
    peer p = open_client_with(main, "client 3", 1, 1, 1024);
    hview v = { .auto_release = 1 };
    char text[1300] = "";
    while (strlen(text) + 12 < 1200) strcat(text, "ünïcödé "); /* 12 bytes each: 1188 bytes */
    share_text(&p, text);
    Remoteview__Envelope *e = next_share_body(&p, &v);
    CHECK(e->body_case == BODY(ACTIVITY_UPDATE), "expected PREPARING");
    const char *s = e->activity_update->subtitle;
    size_t cps = 0;
    for (const char *c = s; *c; c++) cps += ((unsigned char)*c & 0xC0) != 0x80;
    CHECK(cps == 40 && strncmp(s, text, strlen(s)) == 0, "subtitle \"%s\" has %zu characters, not the first 40", s, cps);
    remoteview__envelope__free_unpacked(e, NULL);

    resize(&p, &v, 200, 150, 2000);
    expect_activity(&p, &v, STATE(READY), 0, 0, NULL);
    CHECK(v.n == 1 && v.bufs[0].w == 400 && v.bufs[0].h == 300, "scale 2: buffer %dx%d", v.bufs[0].w, v.bufs[0].h);
    /* the label: cut on a character boundary, with "…", within 1024 bytes, and further so that
       its node fits in a 1024-byte packet; the update in parts (recv_env checks each size) */
    htree *tr = &v.tree;
    CHECK(tr->updates == 1 && tr->last_whole && tr->n == 3, "no whole tree");
    CHECK(tr->last_parts >= 2, "a whole tree with a long label in %d part(s) of at most 1024 bytes", tr->last_parts);
    const char *label = expect_node(tr, 2, ROLE(LABEL), NULL)->label;
    size_t ll = strlen(label);
    CHECK(ll <= 1024 && ll > 3 && strcmp(label + ll - 3, "…") == 0 && strncmp(label, text, ll - 3) == 0 && utf8_ok(label),
          "label of %zu bytes: not a prefix of the text ending with …", ll);
    fprintf(stderr, "test-host:   a %zu-byte text: the label is its first %zu bytes and \"…\", the whole tree came in %d parts\n",
            strlen(text), ll - 3, tr->last_parts);
    uint32_t old = v.bufs[0].id;
    int updates = tr->updates;
    resize(&p, &v, 100, 81, 1500); /* 150 x 121.5 -> 150 x 122 */
    settle(&p, &v);
    expect_changed(tr, updates, (const uint32_t[]){ 1, 2, 3 }, 3, "resize");
    hnode *button = tree_node(tr, 3);
    CHECK(frame_is(tree_node(tr, 1), 0, 0, 100, 81) && frame_is(button, 16, 25, 84, 40),
          "after the resize: button (%g, %g, %g, %g), clipped to the view", button->x, button->y, button->w, button->h);
    fprintf(stderr, "test-host:   resize to 100x81: an update of nodes 1, 2 and 3; the button (%g, %g, %g, %g), clipped to the view\n",
            button->x, button->y, button->w, button->h);
    CHECK(v.destroys == 1 && v.last_destroyed == old, "old buffer not destroyed (%d destroys)", v.destroys);
    CHECK(v.n == 1 && v.bufs[0].w == 150 && v.bufs[0].h == 122, "scale 1.5: buffer %dx%d", v.bufs[0].w, v.bufs[0].h);
    CHECK(v.shown == v.bufs[0].id, "the new buffer was not committed");
    snapshot(&v.bufs[0], "3-scale-1.5");
    /* the same size at another scale: a new frame, the same tree */
    updates = tr->updates;
    int commits = v.commits;
    resize(&p, &v, 100, 81, 1000);
    settle(&p, &v);
    CHECK(v.commits > commits && tr->updates == updates, "a new scale: %d commits, %d updates", v.commits - commits, tr->updates - updates);

    Remoteview__Envelope c = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__ShareCancel sc = REMOTEVIEW__SHARE_CANCEL__INIT;
    sc.reason = "the user dismissed the sheet";
    c.body_case = BODY(SHARE_CANCEL);
    c.share_cancel = &sc;
    send_env(&p, &c);
    e = next_share_body(&p, &v);
    CHECK(e->body_case == BODY(SHARE_COMPLETE) && e->share_complete->result == RESULT(CANCELLED) &&
          e->share_complete->n_items == 0, "cancel: got %s", body_name(e->body_case));
    fprintf(stderr, "test-host:   share_complete CANCELLED\n");
    remoteview__envelope__free_unpacked(e, NULL);
    close(p.fd); /* end of file without goodbye */
    close_view(&v);
}

static void run_refusals(peer *main)
{
    step("run 4: shapes it refuses (the host does not announce \"accessibility\")");
    peer p = open_client(main, "client 4", 1);
    hview v = { .auto_release = 1 };
    Remoteview__ShareItem a = REMOTEVIEW__SHARE_ITEM__INIT, b = REMOTEVIEW__SHARE_ITEM__INIT;
    Remoteview__ShareItem *items[2] = { &a, &b };
    a.kind = b.kind = REMOTEVIEW__ITEM_KIND__ITEM_KIND_TEXT;
    a.content_type = b.content_type = "text/plain";
    a.text = "one";
    b.text = "two";
    send_share_request(&p, items, 2, NULL, 0);
    Remoteview__Envelope *e = next_share_body(&p, &v);
    CHECK(e->body_case == BODY(SHARE_COMPLETE) && e->share_complete->result == RESULT(FAILED) &&
          strcmp(e->share_complete->message, "takes exactly one text/plain item, got 2") == 0,
          "two items: %s \"%s\"", body_name(e->body_case), e->body_case == BODY(SHARE_COMPLETE) ? e->share_complete->message : "");
    remoteview__envelope__free_unpacked(e, NULL);
    resize(&p, &v, 300, 100, 1000); /* the view still shows (why it failed) */
    settle(&p, &v);
    CHECK(v.commits == 1, "refused share: %d commits", v.commits);
    CHECK(v.tree.updates == 0 && v.tree.parts == 0, "an accessibility_update to a host that did not announce it");
    fprintf(stderr, "test-host:   a view and its commit, and no accessibility_update to a host that did not announce \"accessibility\"\n");
    goodbye(&p, "done");
    expect_eof(&p);
    close(p.fd);
    close_view(&v);

    p = open_client(main, "client 4b", 1);
    a.kind = REMOTEVIEW__ITEM_KIND__ITEM_KIND_URL;
    a.content_type = "text/uri-list";
    a.text = "https://example.com/x";
    send_share_request(&p, items, 1, NULL, 0);
    e = next_share_body(&p, &v);
    CHECK(e->body_case == BODY(SHARE_COMPLETE) && e->share_complete->result == RESULT(FAILED) &&
          strstr(e->share_complete->message, "URL"), "URL item: %s", body_name(e->body_case));
    fprintf(stderr, "test-host:   share_complete FAILED \"%s\"\n", e->share_complete->message);
    remoteview__envelope__free_unpacked(e, NULL);
    close(p.fd);

    /* a FILE item (sealed properly) is refused as well, and its fd closed */
    p = open_client(main, "client 4c", 1);
    int mfd = memfd_create("item", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (mfd < 0 || write(mfd, "abc", 3) != 3 ||
        fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
        fail("memfd");
    a = (Remoteview__ShareItem)REMOTEVIEW__SHARE_ITEM__INIT;
    a.kind = REMOTEVIEW__ITEM_KIND__ITEM_KIND_FILE;
    a.content_type = "application/octet-stream";
    a.name = "abc.bin";
    a.size = 3;
    send_share_request(&p, items, 1, &mfd, 1);
    close(mfd);
    e = next_share_body(&p, &v);
    CHECK(e->body_case == BODY(SHARE_COMPLETE) && e->share_complete->result == RESULT(FAILED), "FILE item: %s",
          body_name(e->body_case));
    remoteview__envelope__free_unpacked(e, NULL);
    close(p.fd);
}

static void expect_violation(peer *p, int code, const char *what)
{
    Remoteview__Envelope *e = recv_env(p, 5000, NULL);
    CHECK(e && e->body_case == BODY(PROTOCOL_ERROR), "%s: expected protocol_error, got %s", what, e ? body_name(e->body_case) : "end of file");
    CHECK((int)e->protocol_error->code == code, "%s: code %d, expected %d (%s)", what, e->protocol_error->code, code, e->protocol_error->reason);
    fprintf(stderr, "test-host:   %s -> protocol_error %d \"%s\"\n", what, code, e->protocol_error->reason);
    remoteview__envelope__free_unpacked(e, NULL);
    expect_eof(p);
    close(p->fd);
}

static void run_violations(peer *main)
{
    step("run 5: violations end the connection, not the service");
    peer p = open_client(main, "garbage", 1);
    send_raw(p.fd, "\xff\xff\xff\xff", 4, NULL, 0);
    expect_violation(&p, PCODE(MALFORMED), "garbage");

    p = open_client(main, "empty", 1);
    send_raw(p.fd, "", 0, NULL, 0);
    expect_violation(&p, PCODE(MALFORMED), "empty packet");

    p = open_client(main, "too large", 1);
    static char big[MAX_PACKET + 100];
    send_raw(p.fd, big, sizeof big, NULL, 0);
    expect_violation(&p, PCODE(TOO_LARGE), "a 65,636-byte packet");

    p = open_client(main, "fd mismatch", 1);
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__Ping pg = REMOTEVIEW__PING__INIT;
    e.body_case = BODY(PING);
    e.ping = &pg;
    send_env_fds(&p, &e, &devnull, 1, 0);
    close(devnull);
    expect_violation(&p, PCODE(FD_MISMATCH), "a ping carrying an undeclared fd");

    p = open_client(main, "no handshake", 0);
    check_service_handshake(&p);
    e = (Remoteview__Envelope)REMOTEVIEW__ENVELOPE__INIT;
    e.body_case = BODY(PING);
    e.ping = &pg;
    send_env(&p, &e);
    expect_violation(&p, PCODE(UNEXPECTED), "a ping before the handshake");

    p = open_client(main, "resize first", 1);
    resize(&p, NULL, 100, 100, 1000);
    expect_violation(&p, PCODE(UNEXPECTED), "resize before share_request");

    p = open_client(main, "bad resize", 1);
    share_text(&p, "x");
    resize(&p, NULL, 100, 100, 9000);
    Remoteview__Envelope *r = recv_env(&p, 5000, NULL); /* PREPARING */
    remoteview__envelope__free_unpacked(r, NULL);
    expect_violation(&p, PCODE(MALFORMED), "scale_permille 9000");

    p = open_client(main, "second share", 1);
    share_text(&p, "x");
    share_text(&p, "y");
    r = recv_env(&p, 5000, NULL);
    remoteview__envelope__free_unpacked(r, NULL);
    expect_violation(&p, PCODE(UNEXPECTED), "a second share_request");

    p = open_client(main, "unsealed file", 1);
    int mfd = memfd_create("item", MFD_CLOEXEC);
    Remoteview__ShareItem it = REMOTEVIEW__SHARE_ITEM__INIT;
    Remoteview__ShareItem *items[1] = { &it };
    it.kind = REMOTEVIEW__ITEM_KIND__ITEM_KIND_FILE;
    it.content_type = "image/png";
    it.name = "a.png";
    send_share_request(&p, items, 1, &mfd, 1);
    close(mfd);
    expect_violation(&p, PCODE(MALFORMED), "an unsealed FILE item");

    p = open_client(main, "bad mime", 1);
    it = (Remoteview__ShareItem)REMOTEVIEW__SHARE_ITEM__INIT;
    it.kind = REMOTEVIEW__ITEM_KIND__ITEM_KIND_TEXT;
    it.content_type = "Text/Plain";
    it.text = "x";
    send_share_request(&p, items, 1, NULL, 0);
    expect_violation(&p, PCODE(MALFORMED), "content_type Text/Plain");

    p = open_client(main, "service body", 1);
    Remoteview__ActivityUpdate au = REMOTEVIEW__ACTIVITY_UPDATE__INIT;
    au.title = "x";
    au.state = STATE(READY);
    e = (Remoteview__Envelope)REMOTEVIEW__ENVELOPE__INIT;
    e.body_case = BODY(ACTIVITY_UPDATE);
    e.activity_update = &au;
    send_env(&p, &e);
    expect_violation(&p, PCODE(UNEXPECTED), "activity_update from the host");

    p = open_client_with(main, "action on node 0", 1, 1, 0);
    a11y_action(&p, 0, ACTION(PRESS), NULL);
    expect_violation(&p, PCODE(MALFORMED), "accessibility_action on node 0");

    p = open_client_with(main, "action 7", 1, 1, 0);
    a11y_action(&p, 3, 7, NULL);
    expect_violation(&p, PCODE(MALFORMED), "accessibility_action 7");

    p = open_client_with(main, "action unspecified", 1, 1, 0);
    a11y_action(&p, 3, ACTION(UNSPECIFIED), NULL);
    expect_violation(&p, PCODE(MALFORMED), "accessibility_action 0");

    p = open_client_with(main, "long action text", 1, 1, 0);
    static char long_text[1026];
    memset(long_text, 'a', 1025);
    a11y_action(&p, 2, ACTION(SET_VALUE), long_text);
    expect_violation(&p, PCODE(MALFORMED), "SET_VALUE with 1025 bytes of text");

    p = open_client_with(main, "text and number", 1, 1, 0);
    Remoteview__AccessibilityAction both = REMOTEVIEW__ACCESSIBILITY_ACTION__INIT;
    both.node = 3;
    both.action = ACTION(SET_VALUE);
    both.text = "x";
    both.number = 1;
    both.has_number = 1;
    e = (Remoteview__Envelope)REMOTEVIEW__ENVELOPE__INIT;
    e.body_case = BODY(ACCESSIBILITY_ACTION);
    e.accessibility_action = &both;
    send_env(&p, &e);
    expect_violation(&p, PCODE(MALFORMED), "SET_VALUE with both a text and a number");

    p = open_client_with(main, "update from the host", 1, 1, 0);
    Remoteview__AccessibilityUpdate upd = REMOTEVIEW__ACCESSIBILITY_UPDATE__INIT;
    e = (Remoteview__Envelope)REMOTEVIEW__ENVELOPE__INIT;
    e.body_case = BODY(ACCESSIBILITY_UPDATE);
    e.accessibility_update = &upd;
    send_env(&p, &e);
    expect_violation(&p, PCODE(UNEXPECTED), "accessibility_update from the host");

    /* A host that breaks a surface rule: the service says goodbye with the reason. */
    p = open_client(main, "bad release", 1);
    hview v = { 0 };
    share_text(&p, "x");
    resize(&p, &v, 64, 64, 1000);
    expect_activity(&p, &v, STATE(PREPARING), 0, 1, "x");
    expect_activity(&p, &v, STATE(READY), 0, 0, "x");
    Remoteview__Envelope rb = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__ReleaseBuffer rel = REMOTEVIEW__RELEASE_BUFFER__INIT;
    rel.buffer_id = 77;
    rb.body_case = BODY(RELEASE_BUFFER);
    rb.release_buffer = &rel;
    send_env(&p, &rb);
    r = recv_env(&p, 5000, NULL);
    CHECK(r && r->body_case == BODY(GOODBYE) && strstr(r->goodbye->reason, "77"), "bad release: %s", r ? body_name(r->body_case) : "eof");
    fprintf(stderr, "test-host:   release_buffer 77 -> goodbye \"%s\"\n", r->goodbye->reason);
    remoteview__envelope__free_unpacked(r, NULL);
    expect_eof(&p);
    close(p.fd);
    close_view(&v);

    ping(main, 7); /* the service lives on */
}

/* Mutated packets on many connections: the service must answer each with a violation or
 * carry on, and never crash (under valgrind: never touch memory it should not). */
static size_t pack_into(Remoteview__Envelope *e, uint64_t id, uint8_t *buf)
{
    e->id = id;
    return remoteview__envelope__pack(e, buf);
}

static void run_fuzz(peer *main)
{
    step("run 6: 300 connections of mutated packets");
    static uint8_t templates[9][1024];
    size_t lens[9];
    int nt = 0;
    {
        Remoteview__ShareItem it = REMOTEVIEW__SHARE_ITEM__INIT;
        Remoteview__ShareItem *items[1] = { &it };
        it.kind = REMOTEVIEW__ITEM_KIND__ITEM_KIND_TEXT;
        it.content_type = "text/plain";
        it.text = "fuzz me";
        Remoteview__ShareRequest sr = REMOTEVIEW__SHARE_REQUEST__INIT;
        sr.n_items = 1;
        sr.items = items;
        Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
        e.body_case = BODY(SHARE_REQUEST);
        e.share_request = &sr;
        lens[nt] = pack_into(&e, 2, templates[nt]); nt++;
        Remoteview__Resize r = REMOTEVIEW__RESIZE__INIT;
        r.width = 120; r.height = 90; r.scale_permille = 1000;
        e = (Remoteview__Envelope)REMOTEVIEW__ENVELOPE__INIT;
        e.body_case = BODY(RESIZE); e.resize = &r;
        lens[nt] = pack_into(&e, 3, templates[nt]); nt++;
        Remoteview__PointerEvent pe = REMOTEVIEW__POINTER_EVENT__INIT;
        pe.phase = REMOTEVIEW__POINTER_PHASE__POINTER_PHASE_DOWN; pe.x = 30; pe.y = 50; pe.button = 1; pe.buttons = 1;
        e = (Remoteview__Envelope)REMOTEVIEW__ENVELOPE__INIT;
        e.body_case = BODY(POINTER); e.pointer = &pe;
        lens[nt] = pack_into(&e, 4, templates[nt]); nt++;
        Remoteview__TextInput ti = REMOTEVIEW__TEXT_INPUT__INIT;
        ti.text = "typed";
        e = (Remoteview__Envelope)REMOTEVIEW__ENVELOPE__INIT;
        e.body_case = BODY(TEXT_INPUT); e.text_input = &ti;
        lens[nt] = pack_into(&e, 5, templates[nt]); nt++;
        Remoteview__ServiceMessage m = REMOTEVIEW__SERVICE_MESSAGE__INIT;
        m.type = "remoteview.settle";
        e = (Remoteview__Envelope)REMOTEVIEW__ENVELOPE__INIT;
        e.body_case = BODY(REQUEST); e.request = &m;
        lens[nt] = pack_into(&e, 6, templates[nt]); nt++;
        Remoteview__ReleaseBuffer rb = REMOTEVIEW__RELEASE_BUFFER__INIT;
        rb.buffer_id = 1;
        e = (Remoteview__Envelope)REMOTEVIEW__ENVELOPE__INIT;
        e.body_case = BODY(RELEASE_BUFFER); e.release_buffer = &rb;
        lens[nt] = pack_into(&e, 7, templates[nt]); nt++;
        Remoteview__FrameDone fd = REMOTEVIEW__FRAME_DONE__INIT;
        fd.frame = 1;
        e = (Remoteview__Envelope)REMOTEVIEW__ENVELOPE__INIT;
        e.body_case = BODY(FRAME_DONE); e.frame_done = &fd;
        lens[nt] = pack_into(&e, 8, templates[nt]); nt++;
        Remoteview__ShareCancel sc = REMOTEVIEW__SHARE_CANCEL__INIT;
        e = (Remoteview__Envelope)REMOTEVIEW__ENVELOPE__INIT;
        e.body_case = BODY(SHARE_CANCEL); e.share_cancel = &sc;
        lens[nt] = pack_into(&e, 9, templates[nt]); nt++;
        Remoteview__AccessibilityAction aa = REMOTEVIEW__ACCESSIBILITY_ACTION__INIT;
        aa.node = 3; aa.action = ACTION(SET_VALUE); aa.text = "set";
        e = (Remoteview__Envelope)REMOTEVIEW__ENVELOPE__INIT;
        e.body_case = BODY(ACCESSIBILITY_ACTION); e.accessibility_action = &aa;
        lens[nt] = pack_into(&e, 10, templates[nt]); nt++;
    }
    srandom(12345);
    int iterations = use_valgrind ? 60 : 300;
    for (int it = 0; it < iterations; it++) {
        peer p = open_client_with(main, "fuzz", 1, it % 2, it % 4 == 1 ? 1024 : 0); /* half of them read the tree */
        for (int k = 0; k < nt; k++) {
            uint8_t buf[1100];
            size_t len = lens[k];
            memcpy(buf, templates[k], len);
            if (random() % 3 == 0) { /* mutate this one */
                int flips = 1 + (int)(random() % 4);
                for (int f = 0; f < flips; f++) buf[random() % len] ^= (uint8_t)(1u << (random() % 8));
                if (random() % 4 == 0) len = (size_t)random() % len + 1;
                if (random() % 4 == 0 && len + 8 < sizeof buf)
                    for (int a = 0; a < 8; a++) buf[len++] = (uint8_t)random();
            }
            int fds[2], nfds = 0;
            if (random() % 10 == 0) fds[nfds++] = open("/dev/null", O_RDONLY | O_CLOEXEC);
            fuzzing = 1;
            send_raw(p.fd, buf, len, fds, nfds);
            fuzzing = 0;
            close_fds_host(fds, nfds);
        }
        /* drain what came back, up to the end of file or a quiet moment */
        for (;;) {
            struct pollfd pf = { .fd = p.fd, .events = POLLIN };
            if (poll(&pf, 1, 200 * tmul) != 1) break;
            uint8_t sink[MAX_PACKET];
            union { struct cmsghdr align; char space[CMSG_SPACE(sizeof(int) * 4)]; } control;
            struct iovec iov = { .iov_base = sink, .iov_len = sizeof sink };
            struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space, .msg_controllen = sizeof control.space };
            ssize_t n = recvmsg(p.fd, &msg, MSG_CMSG_CLOEXEC);
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
                if (c->cmsg_type == SCM_RIGHTS)
                    for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                        int fd;
                        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
                        close(fd);
                    }
            if (n <= 0) break;
        }
        close(p.fd);
        ping(main, 1000 + (uint64_t)it); /* still alive */
    }
    fprintf(stderr, "test-host:   the service survived %d mutated conversations\n", iterations);
}

/* The fds the service holds that are not in the baseline (taken after its handshake: what it
 * inherited, what its libraries opened). Valgrind's own fds are >= 1000. */
static void list_fds(char *out, size_t size, const char *baseline)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)child);
    DIR *d = opendir(path);
    if (!d) fail("opendir %s", path);
    out[0] = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        int fd = atoi(de->d_name);
        if (fd < 1000) {
            char link[128], target[256], entry[300];
            snprintf(link, sizeof link, "%s/%d", path, fd);
            ssize_t n = readlink(link, target, sizeof target - 1);
            target[n > 0 ? n : 0] = 0;
            snprintf(entry, sizeof entry, " %d=%s", fd, target);
            if (baseline && strstr(baseline, entry)) continue;
            size_t l = strlen(out);
            snprintf(out + l, size - l, "%s", entry);
        }
    }
    closedir(d);
}

static char baseline[4096];

static void check_fds(peer *main)
{
    char extra[4096];
    for (int attempt = 0; attempt < 20; attempt++) {
        ping(main, 100 + (uint64_t)attempt); /* one more turn of the service's loop */
        list_fds(extra, sizeof extra, baseline);
        if (!extra[0]) {
            fprintf(stderr, "test-host: the service holds no fd beyond the ones it started with\n");
            return;
        }
    }
    fail("the service still holds fds:%s", extra);
}

int main(int argc, char **argv)
{
    int i = 1;
    if (i < argc && strcmp(argv[i], "--valgrind") == 0) {
        use_valgrind = 1;
        tmul = 20;
        i++;
    }
    if (i + 1 < argc && strcmp(argv[i], "--snapshot") == 0) {
        snapshot_dir = argv[i + 1];
        i += 2;
    }
    if (i >= argc) {
        fprintf(stderr, "usage: test-host [--valgrind] [--snapshot DIR] ./uppercase-share\n");
        return 2;
    }
    service = argv[i];
    signal(SIGPIPE, SIG_IGN);

    step("spawning the service with fd 3 and LISTEN_FDS=1");
    peer main_peer = spawn_service("30");
    send_handshake(&main_peer);
    check_service_handshake(&main_peer);
    ping(&main_peer, 1);
    list_fds(baseline, sizeof baseline, NULL);

    run_complete(&main_peer);
    run_action(&main_peer);
    run_key_and_cancel(&main_peer);
    run_refusals(&main_peer);
    run_violations(&main_peer);
    run_fuzz(&main_peer);
    check_fds(&main_peer);

    step("closing fd 3: the service exits 0");
    peer c = open_client(&main_peer, "open client", 1); /* a client still open when fd 3 closes */
    close(main_peer.fd);
    int status = wait_exit(5000);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status 0x%x", status);
    Remoteview__Envelope *e = recv_env(&c, 5000, NULL);
    if (e) {
        CHECK(e->body_case == BODY(GOODBYE), "client at exit: %s", body_name(e->body_case));
        remoteview__envelope__free_unpacked(e, NULL);
        expect_eof(&c);
    }
    close(c.fd);

    step("idle exit: REMOTEVIEW_IDLE_TIMEOUT=0.3");
    main_peer = spawn_service("0.3");
    send_handshake(&main_peer);
    check_service_handshake(&main_peer);
    e = recv_env(&main_peer, 3000, NULL);
    CHECK(e && e->body_case == BODY(GOODBYE) && strcmp(e->goodbye->reason, "idle exit") == 0, "expected goodbye \"idle exit\"");
    remoteview__envelope__free_unpacked(e, NULL);
    status = wait_exit(3000);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "idle exit status 0x%x", status);
    close(main_peer.fd);

    step("a listening socket at fd 3 (systemd Accept=no): a share, then idle exit with no connection open");
    int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    int alen = snprintf(addr.sun_path + 1, sizeof addr.sun_path - 1, "uppercase-test-%d", (int)getpid()) + 1;
    alen += (int)offsetof(struct sockaddr_un, sun_path);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, (socklen_t)alen) != 0 || listen(lfd, 4) != 0) fail("listen");
    spawn_with(lfd, "0.5");
    peer l = { .fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), .name = "accepted" };
    if (connect(l.fd, (struct sockaddr *)&addr, (socklen_t)alen) != 0) fail("connect: %s", strerror(errno));
    send_handshake(&l);
    check_service_handshake(&l);
    hview v = { .auto_release = 1 };
    share_text(&l, "abc");
    resize(&l, &v, 200, 100, 1000);
    Remoteview__Envelope k = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__KeyEvent key = REMOTEVIEW__KEY_EVENT__INIT;
    key.down = 1;
    key.key_code = 40;
    k.body_case = BODY(KEY);
    k.key = &key;
    send_env(&l, &k);
    expect_activity(&l, &v, STATE(PREPARING), 0, 1, "abc");
    expect_activity(&l, &v, STATE(READY), 0, 0, "abc");
    expect_activity(&l, &v, STATE(WORKING), 0.5f, 0, NULL);
    expect_activity(&l, &v, STATE(DONE), 1.0f, 0, NULL);
    e = next_share_body(&l, &v);
    CHECK(e->body_case == BODY(SHARE_COMPLETE) && e->share_complete->n_items == 1 &&
          strcmp(e->share_complete->items[0]->text, "ABC") == 0, "Return: no ABC");
    remoteview__envelope__free_unpacked(e, NULL);
    close_view(&v);
    close(l.fd);
    status = wait_exit(5000);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "idle exit status 0x%x", status);

    fprintf(stderr, "test-host: PASS (%d checks)%s\n", checks, use_valgrind ? " under valgrind" : "");
    return 0;
}
