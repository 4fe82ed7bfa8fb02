/* frozen-v1-service: a RemoteView service of protocol version 1, frozen on purpose.
 *
 * Written from docs/Protocol.md as it stood before commit 6835398 (`git show
 * 6835398^:docs/Protocol.md`, "The RemoteView wire protocol, version 1") and the remoteview.proto
 * beside this file, as a service author of that day would have written it. Do not edit it to
 * follow a later Protocol.md: a host change that breaks this service is a protocol change, and
 * needs a new protocol version (README.md). Quotes in the comments are from that text.
 *
 * What it does: echo; a view of exact pixels (draw() below); any other request answered with
 * a failure in its own domain; idle exit. It handshakes with the capability "echo" only. */
#define _GNU_SOURCE 1
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "remoteview.pb-c.h"

#define IDENTIFIER "com.example.frozen-v1" /* the manifest's identifier (Conversation 1) */
#define DOMAIN "frozen-v1"                 /* this service's own failure domain */
#define UNKNOWN_REQUEST_CODE 404
#define MAX_PACKET 65536                   /* Transport: "At most 65,536 bytes" */
#define MAX_BODY_FDS 16                    /* Envelope rules: "<= 16 on request/reply/message" */
#define MAX_RECV_FDS 256                   /* more than the kernel passes (253): none dropped unseen */
#define HANDSHAKE_MS 5000                  /* Conversation 1: "Each side waits 5 s" */
#define SEND_MS 5000                       /* how long a full socket may hold up a send */
#define MAX_CONNS 64
#define MAX_SETTLES 256                    /* Conversation 2: "the Swift side allows 256" */
#define MAX_BUFFERS 4

#define CODE(x) REMOTEVIEW__PROTOCOL_ERROR_CODE__PROTOCOL_ERROR_CODE_##x
#define BODY(x) REMOTEVIEW__ENVELOPE__BODY_##x

typedef struct {
    uint32_t id;                /* 0: the slot is free */
    int width, height;          /* pixels; stride is 4 x width */
    int fd;                     /* the memfd, until it is sent with attach_buffer */
    uint8_t *map;
    size_t size;
    int held;                   /* committed, and the host has not released it */
} buffer;

typedef struct {
    int fd;
    int is_main;                /* fd 3, the launcher's main connection */
    int ended;
    int greeted;                /* the host's handshake arrived */
    int64_t handshake_deadline;
    uint64_t next_id, last_in_id;
    uint32_t peer_max_packet;
    /* the view ("Surfaces") */
    int has_size, width, height; /* pixels */
    int dirty, in_flight;
    uint64_t frame;
    uint32_t next_buffer_id;
    buffer buffers[MAX_BUFFERS];
    /* remoteview.settle requests waiting for the view to commit what is pending */
    uint64_t settles[MAX_SETTLES];
    size_t n_settles;
} conn;

static conn *conns[MAX_CONNS];
static int n_conns;
static int64_t idle_ms = -1;        /* -1: no idle exit */
static int64_t last_arrival;
static uint8_t packet[MAX_PACKET + 1];

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("frozen-v1-service: ", stderr);
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

/* ---------- sending (Transport) ---------- */

/* Writes one envelope as one packet, with `fd` (-1: none) as its one SCM_RIGHTS fd. Ids
 * increase in the order packets are written (Envelope rules, `id`). Returns 0, or -1 when the
 * peer is gone or the envelope is larger than the peer takes. */
static int send_env(conn *c, Remoteview__Envelope *e, int fd)
{
    if (c->ended) return -1;
    e->id = ++c->next_id;
    e->fd_count = fd >= 0 ? 1 : 0;
    size_t n = remoteview__envelope__get_packed_size(e);
    size_t limit = c->peer_max_packet && c->peer_max_packet < MAX_PACKET ? c->peer_max_packet : MAX_PACKET;
    if (n > limit) return -1;
    uint8_t *buf = malloc(n);
    if (!buf) return -1;
    remoteview__envelope__pack(e, buf);
    struct iovec iov = { .iov_base = buf, .iov_len = n };
    union {
        struct cmsghdr align;
        char space[CMSG_SPACE(sizeof(int))];
    } control;
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (fd >= 0) {
        memset(&control, 0, sizeof control);
        msg.msg_control = control.space;
        msg.msg_controllen = sizeof control.space;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    }
    int64_t deadline = now_ms() + SEND_MS;
    int result = -1;
    for (;;) {
        if (sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) >= 0) {
            result = 0;
            break;
        }
        if (errno == EINTR) continue;
        int64_t left = deadline - now_ms();
        if (errno != EAGAIN || left <= 0) break;
        struct pollfd p = { .fd = c->fd, .events = POLLOUT };
        poll(&p, 1, (int)left);
    }
    free(buf);
    if (result != 0) c->ended = 1; /* gone, or stuck: reading sees the rest */
    return result;
}

static void send_handshake(conn *c)
{
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__Handshake h = REMOTEVIEW__HANDSHAKE__INIT;
    char *caps[] = { "echo" }; /* not "surfaces": version 1 defines no capability names */
    h.protocol_version = 1;
    h.role = REMOTEVIEW__PEER_ROLE__PEER_ROLE_SERVICE;
    h.identifier = IDENTIFIER;
    h.n_capabilities = 1;
    h.capabilities = caps;
    h.max_packet_size = MAX_PACKET;
    e.body_case = BODY(HANDSHAKE);
    e.handshake = &h;
    send_env(c, &e, -1);
}

static void send_goodbye(conn *c, const char *reason)
{
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__Goodbye g = REMOTEVIEW__GOODBYE__INIT;
    g.reason = (char *)reason;
    e.body_case = BODY(GOODBYE);
    e.goodbye = &g;
    send_env(c, &e, -1);
}

/* Conversation 6 and 7: a goodbye, or a protocol_error for a violation, then shut the socket. */
static void end_conn(conn *c, int code, const char *reason)
{
    if (c->ended) return;
    if (code) {
        Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
        Remoteview__ProtocolError pe = REMOTEVIEW__PROTOCOL_ERROR__INIT;
        say("protocol violation on connection %d: %s", c->fd, reason);
        pe.code = code;
        pe.reason = (char *)reason;
        e.body_case = BODY(PROTOCOL_ERROR);
        e.protocol_error = &pe;
        send_env(c, &e, -1);
    } else if (reason) {
        send_goodbye(c, reason);
    }
    shutdown(c->fd, SHUT_RDWR);
    c->ended = 1;
}

/* A failure in this service's own domain (Conversation 2: "failure (domain, code, message)"). */
static void send_failure(conn *c, uint64_t reply_to, int64_t code, const char *message)
{
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__Failure f = REMOTEVIEW__FAILURE__INIT;
    f.domain = DOMAIN;
    f.code = code;
    f.message = (char *)message;
    e.reply_to = reply_to;
    e.body_case = BODY(FAILURE);
    e.failure = &f;
    send_env(c, &e, -1);
}

static void send_reply(conn *c, uint64_t reply_to, const char *type, ProtobufCBinaryData payload)
{
    Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
    Remoteview__ServiceMessage m = REMOTEVIEW__SERVICE_MESSAGE__INIT;
    m.type = (char *)type;
    m.payload = payload;
    e.reply_to = reply_to;
    e.body_case = BODY(REPLY);
    e.reply = &m;
    if (send_env(c, &e, -1) != 0 && !c->ended)
        send_failure(c, reply_to, 413, "the reply is larger than the host's max_packet_size");
}

static conn *conn_new(int fd, int is_main)
{
    conn *c = n_conns < MAX_CONNS ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        say("no room for another connection");
        close(fd);
        return NULL;
    }
    c->fd = fd;
    c->is_main = is_main;
    c->handshake_deadline = now_ms() + HANDSHAKE_MS;
    for (int i = 0; i < MAX_BUFFERS; i++) c->buffers[i].fd = -1;
    conns[n_conns++] = c;
    send_handshake(c); /* Conversation 1: "Each side sends a Handshake immediately" */
    return c;
}

static void buffer_free(buffer *b)
{
    if (b->map) munmap(b->map, b->size);
    if (b->fd >= 0) close(b->fd);
    memset(b, 0, sizeof *b);
    b->fd = -1;
}

static void conn_free(conn *c)
{
    for (int i = 0; i < MAX_BUFFERS; i++) buffer_free(&c->buffers[i]);
    close(c->fd);
    free(c);
}

/* ---------- the view (Surfaces) ---------- */

/* The pixels, each one a function of the buffer's width and height alone: a 1-pixel white
 * border; inside it four quadrants split at (width / 2, height / 2): red top left, green top
 * right, blue bottom left, and a translucent premultiplied 0x80402010 bottom right. Words are
 * ARGB8888_PREMULTIPLIED, stored as the bytes B, G, R, A ("Surfaces", attach_buffer). */
static uint32_t pixel_at(int x, int y, int w, int h)
{
    if (x == 0 || y == 0 || x == w - 1 || y == h - 1) return 0xFFFFFFFFu;
    if (y < h / 2) return x < w / 2 ? 0xFFFF0000u : 0xFF00FF00u;
    return x < w / 2 ? 0xFF0000FFu : 0x80402010u;
}

static void draw(buffer *b)
{
    for (int y = 0; y < b->height; y++)
        for (int x = 0; x < b->width; x++) {
            uint32_t p = pixel_at(x, y, b->width, b->height);
            uint8_t *q = b->map + (size_t)y * (size_t)b->width * 4 + (size_t)x * 4;
            q[0] = (uint8_t)p;
            q[1] = (uint8_t)(p >> 8);
            q[2] = (uint8_t)(p >> 16);
            q[3] = (uint8_t)(p >> 24);
        }
}

/* A new buffer of the view's size: a memfd "sealed against shrinking and growing (F_SEAL_SHRINK
 * | F_SEAL_GROW; the service keeps drawing into it, so not F_SEAL_WRITE)". */
static buffer *buffer_new(conn *c)
{
    buffer *b = NULL;
    for (int i = 0; i < MAX_BUFFERS && !b; i++)
        if (!c->buffers[i].id) b = &c->buffers[i];
    if (!b) return NULL;
    size_t size = (size_t)c->width * 4 * (size_t)c->height;
    int fd = memfd_create("frozen-v1-buffer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return NULL;
    void *map = MAP_FAILED;
    if (ftruncate(fd, (off_t)size) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0 ||
        (map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        close(fd);
        return NULL;
    }
    if (++c->next_buffer_id == 0) c->next_buffer_id = 1; /* buffer_id != 0 */
    b->id = c->next_buffer_id;
    b->width = c->width;
    b->height = c->height;
    b->fd = fd;
    b->map = map;
    b->size = size;
    return b;
}

/* Draws and commits when the view needs a frame and the host allows one ("frame_done: ready for
 * the next commit (at most one in flight)"; "release_buffer: ... the service may draw into it
 * again"); forgets buffers of an old size once the host lets go of them; then answers the
 * settles ("once its view has committed everything pending"). */
static void pump(conn *c)
{
    if (c->ended || !c->greeted) return;
    for (int i = 0; i < MAX_BUFFERS && !c->in_flight; i++) {
        buffer *b = &c->buffers[i];
        if (b->id && !b->held && (b->width != c->width || b->height != c->height)) {
            Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
            Remoteview__DestroyBuffer d = REMOTEVIEW__DESTROY_BUFFER__INIT;
            d.buffer_id = b->id;
            e.body_case = BODY(DESTROY_BUFFER);
            e.destroy_buffer = &d;
            send_env(c, &e, -1);
            buffer_free(b);
        }
    }
    if (c->has_size && c->dirty && !c->in_flight) {
        buffer *b = NULL;
        for (int i = 0; i < MAX_BUFFERS && !b; i++) {
            buffer *x = &c->buffers[i];
            if (x->id && !x->held && x->width == c->width && x->height == c->height) b = x;
        }
        if (!b) b = buffer_new(c);
        if (!b) return; /* every slot held: a release_buffer will come */
        draw(b);
        if (b->fd >= 0) {
            Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
            Remoteview__AttachBuffer a = REMOTEVIEW__ATTACH_BUFFER__INIT;
            a.buffer_id = b->id;
            a.width = (uint32_t)b->width;
            a.height = (uint32_t)b->height;
            a.stride = (uint32_t)b->width * 4;
            a.format = REMOTEVIEW__PIXEL_FORMAT__PIXEL_FORMAT_ARGB8888_PREMULTIPLIED;
            e.body_case = BODY(ATTACH_BUFFER);
            e.attach_buffer = &a;
            int fd = b->fd;
            b->fd = -1;
            if (send_env(c, &e, fd) != 0) say("attach_buffer failed on connection %d", c->fd);
            close(fd); /* the host has its own copy of the descriptor now */
        }
        Remoteview__Envelope e = REMOTEVIEW__ENVELOPE__INIT;
        Remoteview__Commit cm = REMOTEVIEW__COMMIT__INIT;
        Remoteview__Rect r = REMOTEVIEW__RECT__INIT;
        Remoteview__Rect *damage[] = { &r };
        r.width = (uint32_t)b->width; /* the whole buffer, which "lies inside the buffer" */
        r.height = (uint32_t)b->height;
        cm.buffer_id = b->id;
        cm.n_damage = 1;
        cm.damage = damage;
        cm.frame = ++c->frame; /* "frame increasing" */
        e.body_case = BODY(COMMIT);
        e.commit = &cm;
        send_env(c, &e, -1);
        b->held = 1;
        c->in_flight = 1;
        c->dirty = 0;
    }
    if (c->n_settles && !(c->has_size && c->dirty)) {
        ProtobufCBinaryData none = { 0, NULL };
        for (size_t i = 0; i < c->n_settles; i++) send_reply(c, c->settles[i], "remoteview.settled", none);
        c->n_settles = 0;
    }
}

/* ---------- receiving ---------- */

/* Surfaces: "resize | the view's size in points, 1...16384 a side, and its scale in thousandths
 * (250...8000)". The text gives no rounding from points to pixels; this takes the nearest
 * pixel, halves up, at least 1. */
static int on_resize(conn *c, const Remoteview__Resize *r, char *why, size_t n)
{
    if (r->width < 1 || r->width > 16384 || r->height < 1 || r->height > 16384 ||
        r->scale_permille < 250 || r->scale_permille > 8000) {
        snprintf(why, n, "resize %ux%u at %u permille is out of bounds", r->width, r->height, r->scale_permille);
        return 0;
    }
    uint64_t w = ((uint64_t)r->width * r->scale_permille + 500) / 1000;
    uint64_t h = ((uint64_t)r->height * r->scale_permille + 500) / 1000;
    w = w ? w : 1;
    h = h ? h : 1;
    if (w > 16384 || h > 16384 || w * h * 4 > 256u * 1024 * 1024) {
        snprintf(why, n, "resize %ux%u at %u permille needs a buffer over the bounds of attach_buffer",
                 r->width, r->height, r->scale_permille);
        return 0;
    }
    c->has_size = 1;
    c->width = (int)w;
    c->height = (int)h;
    c->dirty = 1;
    return 1;
}

/* Conversation 2: a request "expects exactly one answer: reply ... or failure". */
static void on_request(conn *c, uint64_t id, const Remoteview__ServiceMessage *m)
{
    if (strcmp(m->type, "echo") == 0) {
        send_reply(c, id, m->type, m->payload);
    } else if (strcmp(m->type, "remoteview.settle") == 0) { /* "Settling (a framework request)" */
        if (c->n_settles == MAX_SETTLES)
            send_failure(c, id, 429, "too many outstanding settles");
        else
            c->settles[c->n_settles++] = id; /* answered by pump() */
    } else {
        /* Version 1 leaves the answer to an unknown request to the service: a failure in its
         * own domain. */
        char message[400];
        snprintf(message, sizeof message, "no request of type \"%s\"", m->type);
        send_failure(c, id, UNKNOWN_REQUEST_CODE, message);
    }
}

/* "Being a launched service": "it sends one-way messages of type remoteview.connect, each with
 * exactly one fd attached: a new connected SOCK_SEQPACKET socket. Start a new conversation
 * (handshake first) on it". Other one-way messages are not this service's: dropped. */
static int on_message(conn *c, const Remoteview__ServiceMessage *m, int *fds, int nfds, char *why, size_t n)
{
    if (strcmp(m->type, "remoteview.connect") != 0 || !c->is_main) return 1;
    int type = 0;
    socklen_t len = sizeof type;
    if (nfds != 1 || getsockopt(fds[0], SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_SEQPACKET) {
        snprintf(why, n, "remoteview.connect takes exactly one SOCK_SEQPACKET socket (%d fds)", nfds);
        return 0;
    }
    conn_new(fds[0], 0);
    fds[0] = -1; /* taken */
    return 1;
}

static int type_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 256) return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7F) return 0;
    return 1;
}

/* One packet: the envelope rules, then the conversation. */
static void on_packet(conn *c, size_t len, int *fds, int nfds)
{
    char why[600];
    int code = 0;
    why[0] = 0;
    Remoteview__Envelope *e = remoteview__envelope__unpack(NULL, len, packet);
    if (!e) {
        code = CODE(MALFORMED);
        snprintf(why, sizeof why, "a packet that does not decode as an Envelope");
        goto done;
    }
    /* Envelope rules, fd_count: "<= 16 on request/reply/message, ... one per FILE item on
     * share_request ..., 0 on everything else" (attach_buffer and share_complete come from
     * services only, and are refused below). */
    uint32_t min_fds = 0, max_fds = 0;
    if (e->body_case == BODY(REQUEST) || e->body_case == BODY(REPLY) || e->body_case == BODY(MESSAGE))
        max_fds = MAX_BODY_FDS;
    if (e->body_case == BODY(SHARE_REQUEST))
        for (size_t i = 0; i < e->share_request->n_items; i++)
            if (e->share_request->items[i]->kind == REMOTEVIEW__ITEM_KIND__ITEM_KIND_FILE) min_fds = ++max_fds;
    int is_answer = e->body_case == BODY(PONG) || e->body_case == BODY(REPLY) || e->body_case == BODY(FAILURE);
    if (e->fd_count != (uint32_t)nfds || e->fd_count < min_fds || e->fd_count > max_fds) {
        code = CODE(FD_MISMATCH);
        snprintf(why, sizeof why, "fd_count %u with %d fds on body %d", e->fd_count, nfds, (int)e->body_case);
    } else if (e->body_case == REMOTEVIEW__ENVELOPE__BODY__NOT_SET) {
        code = CODE(MALFORMED);
        snprintf(why, sizeof why, "an envelope without a known body");
    } else if (e->id == 0 || e->id <= c->last_in_id) {
        code = CODE(MALFORMED);
        snprintf(why, sizeof why, "envelope id %llu is not above the last one, %llu",
                 (unsigned long long)e->id, (unsigned long long)c->last_in_id);
    } else if (is_answer != (e->reply_to != 0)) {
        code = CODE(MALFORMED);
        snprintf(why, sizeof why, "reply_to %llu on body %d", (unsigned long long)e->reply_to, (int)e->body_case);
    }
    if (code) goto done;
    c->last_in_id = e->id;

    if (!c->greeted) { /* Conversation 1 */
        const Remoteview__Handshake *h = e->handshake;
        if (e->body_case != BODY(HANDSHAKE)) {
            code = CODE(UNEXPECTED);
            snprintf(why, sizeof why, "the first packet is not a handshake");
        } else if (h->protocol_version != 1) {
            code = CODE(VERSION_MISMATCH);
            snprintf(why, sizeof why, "protocol version %u; this service speaks 1", h->protocol_version);
        } else if (h->role != REMOTEVIEW__PEER_ROLE__PEER_ROLE_HOST) {
            code = h->role == REMOTEVIEW__PEER_ROLE__PEER_ROLE_SERVICE ? CODE(ROLE) : CODE(MALFORMED);
            snprintf(why, sizeof why, "handshake role %d; this service talks to a host (1)", (int)h->role);
        } else if (h->max_packet_size < 1024 || h->n_capabilities > 32) {
            code = CODE(MALFORMED);
            snprintf(why, sizeof why, "handshake max_packet_size %u, %zu capabilities", h->max_packet_size, h->n_capabilities);
        } else {
            /* Fields this version does not know ride in h->base.unknown_fields: ignored. */
            c->greeted = 1;
            c->peer_max_packet = h->max_packet_size;
        }
        goto done;
    }

    switch (e->body_case) {
    case BODY(GOODBYE): /* Conversation 6 */
        end_conn(c, 0, NULL);
        break;
    case BODY(PROTOCOL_ERROR):
        say("the host reports a protocol error (%d) on connection %d: %s", (int)e->protocol_error->code, c->fd,
            e->protocol_error->reason);
        end_conn(c, 0, NULL);
        break;
    case BODY(PING): { /* Conversation 5 */
        Remoteview__Envelope r = REMOTEVIEW__ENVELOPE__INIT;
        Remoteview__Pong pong = REMOTEVIEW__PONG__INIT;
        pong.nonce = e->ping->nonce;
        r.reply_to = e->id;
        r.body_case = BODY(PONG);
        r.pong = &pong;
        send_env(c, &r, -1);
        break;
    }
    case BODY(REQUEST):
        if (!type_ok(e->request->type)) {
            code = CODE(MALFORMED);
            snprintf(why, sizeof why, "a request type of %zu bytes or with a control character", strlen(e->request->type));
        } else
            on_request(c, e->id, e->request);
        break;
    case BODY(MESSAGE):
        if (!type_ok(e->message->type)) {
            code = CODE(MALFORMED);
            snprintf(why, sizeof why, "a message type of %zu bytes or with a control character", strlen(e->message->type));
        } else if (!on_message(c, e->message, fds, nfds, why, sizeof why))
            code = CODE(MALFORMED);
        break;
    case BODY(CANCEL): /* Conversation 3: stop the work, need not answer */
        for (size_t i = 0; i < c->n_settles; i++)
            if (c->settles[i] == e->cancel->request_id) {
                c->settles[i] = c->settles[--c->n_settles];
                break;
            }
        break;
    case BODY(RESIZE):
        if (!on_resize(c, e->resize, why, sizeof why)) code = CODE(MALFORMED);
        break;
    case BODY(RELEASE_BUFFER): {
        buffer *b = NULL;
        for (int i = 0; i < MAX_BUFFERS && !b; i++)
            if (c->buffers[i].id && c->buffers[i].id == e->release_buffer->buffer_id) b = &c->buffers[i];
        if (!b || !b->held) {
            /* Input: "A host that breaks a surface rule towards the service (e.g. release_buffer
             * of a buffer it never got) loses that connection: the service says goodbye with
             * the reason." */
            snprintf(why, sizeof why, "release_buffer of buffer %u, which the host does not hold",
                     e->release_buffer->buffer_id);
            say("%s", why);
            end_conn(c, 0, why);
        } else
            b->held = 0;
        break;
    }
    case BODY(FRAME_DONE):
        if (!c->in_flight) {
            snprintf(why, sizeof why, "frame_done of frame %llu with no frame in flight",
                     (unsigned long long)e->frame_done->frame);
            say("%s", why);
            end_conn(c, 0, why);
        } else
            c->in_flight = 0;
        break;
    case BODY(POINTER):
    case BODY(KEY):
    case BODY(TEXT_INPUT):
    case BODY(FOCUS):
    case BODY(REMOTE_CONTROL):
    case BODY(TRAITS):
        break; /* Input: this view takes none */
    default:
        /* a second handshake, an answer to a request this service never sent, a body only a
         * service sends, the share family (this service takes no share) */
        code = CODE(UNEXPECTED);
        snprintf(why, sizeof why, "body %d is unexpected from the host here", (int)e->body_case);
        break;
    }
done:
    if (code) end_conn(c, code, why);
    /* "close every fd you received unless the message's handler takes it" */
    for (int i = 0; i < nfds; i++)
        if (fds[i] >= 0) close(fds[i]);
    if (e) remoteview__envelope__free_unpacked(e, NULL);
}

static void on_readable(conn *c)
{
    for (int round = 0; round < 32 && !c->ended; round++) {
        union {
            struct cmsghdr align;
            char space[CMSG_SPACE(sizeof(int) * MAX_RECV_FDS)];
        } control;
        struct iovec iov = { .iov_base = packet, .iov_len = sizeof packet };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.space,
                              .msg_controllen = sizeof control.space };
        ssize_t n = recvmsg(c->fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN) c->ended = 1;
            return;
        }
        int fds[MAX_RECV_FDS], nfds = 0;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
                for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++)
                    memcpy(&fds[nfds++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
        last_arrival = now_ms();
        if (n == 0) {
            /* Transport: an empty packet reads as end of file; "one carrying fds is a protocol
             * violation". End of file without a goodbye: the peer vanished (Conversation 6). */
            for (int i = 0; i < nfds; i++) close(fds[i]);
            if (nfds) end_conn(c, CODE(MALFORMED), "an empty packet carrying fds");
            c->ended = 1;
            return;
        }
        if ((size_t)n > MAX_PACKET || (msg.msg_flags & MSG_TRUNC)) {
            for (int i = 0; i < nfds; i++) close(fds[i]);
            end_conn(c, CODE(TOO_LARGE), "a packet over 65536 bytes");
            return;
        }
        if (msg.msg_flags & MSG_CTRUNC) {
            for (int i = 0; i < nfds; i++) close(fds[i]);
            end_conn(c, CODE(FD_MISMATCH), "more fds than any body takes");
            return;
        }
        on_packet(c, (size_t)n, fds, nfds);
        pump(c);
    }
}

/* ---------- the process ("Being a launched service") ---------- */

static void exit_all(const char *reason, int status)
{
    for (int i = 0; i < n_conns; i++) {
        end_conn(conns[i], 0, reason);
        conn_free(conns[i]);
    }
    n_conns = 0;
    exit(status);
}

static int outstanding(void)
{
    for (int i = 0; i < n_conns; i++)
        if (!conns[i]->ended && conns[i]->n_settles) return 1;
    return 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stderr, NULL, _IOLBF, 0);
    /* Transport: "A service finds it at fd 3, with LISTEN_FDS=1 ... Accept fd 3 when LISTEN_PID is
     * absent or equals your pid ... Mark it close-on-exec and unset LISTEN_*." */
    const char *fds = getenv("LISTEN_FDS"), *pid = getenv("LISTEN_PID");
    int type = 0, listening = 0;
    socklen_t len = sizeof type;
    if (!fds || strcmp(fds, "1") != 0 || (pid && strtol(pid, NULL, 10) != (long)getpid()) ||
        fcntl(3, F_SETFD, FD_CLOEXEC) != 0 || getsockopt(3, SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
        type != SOCK_SEQPACKET || (len = sizeof listening, getsockopt(3, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len)) != 0 ||
        listening) {
        fprintf(stderr, "frozen-v1-service: a RemoteView service; run it from a launcher (LISTEN_FDS=1, a connected SOCK_SEQPACKET socket at fd 3)\n");
        return 2;
    }
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDNAMES");
    /* "REMOTEVIEW_IDLE_TIMEOUT (seconds, decimal) is set from the manifest." */
    const char *idle = getenv("REMOTEVIEW_IDLE_TIMEOUT");
    if (idle && *idle) {
        char *end;
        double t = strtod(idle, &end);
        if (*end == 0 && isfinite(t) && t > 0 && t <= 86400)
            idle_ms = (int64_t)ceil(t * 1000);
        else
            say("ignoring REMOTEVIEW_IDLE_TIMEOUT=%s", idle);
    }
    conn *main_conn = conn_new(3, 1);
    if (!main_conn) return 1;
    last_arrival = now_ms();

    for (;;) {
        /* Ended connections go; "When fd 3 closes (goodbye or end of file), the host is done
         * with the process: close the client connections and exit." */
        if (main_conn->ended) exit_all("the host closed the service", 0);
        for (int i = 0; i < n_conns;) {
            if (conns[i]->ended) {
                conn_free(conns[i]);
                conns[i] = conns[--n_conns];
            } else
                i++;
        }

        int64_t now = now_ms();
        int timeout = -1;
        for (int i = 0; i < n_conns; i++)
            if (!conns[i]->greeted) {
                int64_t left = conns[i]->handshake_deadline - now;
                if (left <= 0) {
                    say("no handshake on connection %d within 5 s", conns[i]->fd);
                    end_conn(conns[i], 0, "no handshake within 5 s");
                    left = 0;
                }
                if (timeout < 0 || left < timeout) timeout = (int)left;
            }
        /* Idle exit: "Once no request has been outstanding and nothing has arrived on any
         * connection for that long, say goodbye { reason: "idle exit" } on every connection
         * (fd 3 included) and exit 0." */
        if (idle_ms > 0 && !outstanding()) {
            int64_t left = last_arrival + idle_ms - now;
            if (left <= 0) exit_all("idle exit", 0);
            if (timeout < 0 || left < timeout) timeout = (int)left;
        }

        struct pollfd pfds[MAX_CONNS];
        conn *owners[MAX_CONNS];
        int n = n_conns;
        for (int i = 0; i < n; i++) {
            pfds[i] = (struct pollfd){ .fd = conns[i]->fd, .events = POLLIN };
            owners[i] = conns[i];
        }
        if (poll(pfds, (nfds_t)n, timeout) < 0 && errno != EINTR) {
            say("poll: %s", strerror(errno));
            exit_all("internal error", 1);
        }
        for (int i = 0; i < n; i++)
            if (!owners[i]->ended && (pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) on_readable(owners[i]);
    }
}
