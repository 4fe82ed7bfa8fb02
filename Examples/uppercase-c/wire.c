/* Transport and validation: what docs/Protocol.md ("Transport", "Envelope rules", and the bounds
 * of each family) asks of a receiver. */
#include "rv.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define CODE(x) REMOTEVIEW__PROTOCOL_ERROR_CODE__PROTOCOL_ERROR_CODE_##x
#define MAX_RECV_FDS 256 /* more than SCM_MAX_FD (253), so the kernel never drops any unseen */

void violation_set(violation *v, int code, const char *fmt, ...)
{
    va_list ap;
    v->code = code;
    va_start(ap, fmt);
    vsnprintf(v->reason, sizeof v->reason, fmt, ap);
    va_end(ap);
}

/* ---------- strings ---------- */

int utf8_valid(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        size_t n;
        uint32_t cp;
        if (c < 0x80) { i++; continue; }
        else if (c >= 0xC2 && c <= 0xDF) { n = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { n = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { n = 3; cp = c & 0x07; }
        else return 0;
        if (len - i - 1 < n) return 0; /* truncated sequence */
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += n + 1;
    }
    return 1;
}

size_t utf8_prefix(const char *str, size_t len, size_t max_chars)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, chars = 0;
    while (i < len && chars < max_chars) {
        i++;
        while (i < len && (s[i] & 0xC0) == 0x80) i++;
        chars++;
    }
    return i;
}

static int id_char(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
}

int identifier_valid(const char *s, size_t min, size_t max)
{
    size_t n = strlen(s);
    if (n < min || n > max) return 0;
    for (size_t i = 0; i < n; i++)
        if (!id_char((unsigned char)s[i])) return 0;
    return 1;
}

/* RFC 6838 restricted-name, lower case: 1..127 of letters, digits and !#$&-^_.+, starting
 * with a letter or digit. */
static int mime_part(const char *s, size_t n)
{
    if (n < 1 || n > 127) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (i == 0 && !alnum) return 0;
        if (!alnum && !strchr("!#$&-^_.+", c)) return 0;
    }
    return 1;
}

int mime_valid(const char *s)
{
    size_t n = strlen(s);
    const char *slash = strchr(s, '/');
    if (n > 255 || !slash) return 0;
    return mime_part(s, (size_t)(slash - s)) && mime_part(slash + 1, n - (size_t)(slash - s) - 1);
}

/* "one absolute URL, 1…4096 bytes: a scheme (a letter, then letters, digits, +, ., -), :, and
 * more; no whitespace or control characters; http, https and ftp URLs need // and a host". */
int url_valid(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 4096 || !utf8_valid(s, n)) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == 0x7F) return 0;
        if (c == 0xC2 && i + 1 < n && ((unsigned char)s[i + 1] == 0x85 ||
                                       (unsigned char)s[i + 1] == 0xA0 ||
                                       ((unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] <= 0x9F)))
            return 0; /* C1 controls, NEL, NBSP */
    }
    size_t i = 0;
    if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'))) return 0;
    for (i = 1; i < n && s[i] != ':'; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '+' || c == '.' || c == '-'))
            return 0;
    }
    if (i == n || i + 1 == n) return 0; /* no ':' or nothing after it */
    size_t scheme_len = i;
    int needs_host = (scheme_len == 4 && strncasecmp(s, "http", 4) == 0) ||
                     (scheme_len == 5 && strncasecmp(s, "https", 5) == 0) ||
                     (scheme_len == 3 && strncasecmp(s, "ftp", 3) == 0);
    if (!needs_host) return 1;
    const char *rest = s + scheme_len + 1;
    if (strncmp(rest, "//", 2) != 0) return 0;
    const char *auth = rest + 2;
    size_t alen = strcspn(auth, "/?#");
    const char *at = memrchr(auth, '@', alen);
    const char *host = at ? at + 1 : auth;
    size_t hlen = alen - (size_t)(host - auth);
    /* drop a port */
    if (hlen && host[0] != '[') {
        const char *colon = memchr(host, ':', hlen);
        if (colon) hlen = (size_t)(colon - host);
    }
    return hlen > 0;
}

int file_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 255 || strchr(s, '/')) return 0;
    if (strcmp(s, ".") == 0 || strcmp(s, "..") == 0) return 0;
    return utf8_valid(s, n);
}

/* ---------- packets ---------- */

void close_fds(int *fds, int n)
{
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0) { close(fds[i]); fds[i] = -1; }
}

int recv_packet(int sock, uint8_t *buf, size_t *len, int *fds, int *nfds, int *truncated, int *empty)
{
    union {
        struct cmsghdr align;
        char space[CMSG_SPACE(sizeof(int) * MAX_RECV_FDS)];
    } control;
    struct iovec iov = { .iov_base = buf, .iov_len = MAX_PACKET };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
                          .msg_control = control.space, .msg_controllen = sizeof control.space };
    *nfds = 0;
    *truncated = 0;
    *empty = 0;
    ssize_t n;
    do n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0) return -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int count = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < count; i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
                if (*nfds < MAX_RECV_FDS) fds[(*nfds)++] = fd;
                else close(fd);
            }
        }
    }
    if (msg.msg_flags & MSG_TRUNC) *truncated = 1;
    if (n == 0) {
        /* SOCK_SEQPACKET: 0 is either end of file or an empty packet. The peer's shutdown
         * shows as POLLRDHUP; without it, the packet was empty. */
        struct pollfd p = { .fd = sock, .events = POLLIN | POLLRDHUP };
        if (*nfds == 0 && poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP))) return 0;
        *empty = 1;
    }
    *len = (size_t)n;
    return 1;
}

/* ---------- envelope validation ---------- */

static int str_ok(const char *s, size_t lo, size_t hi)
{
    size_t n = strlen(s);
    return n >= lo && n <= hi && utf8_valid(s, n);
}

static int modifiers_ok(uint32_t m) { return (m & ~0x1Fu) == 0; }
static int coord_ok(float f) { return isfinite(f) && fabsf(f) <= 16384.0f; }

static int service_message_ok(const Remoteview__ServiceMessage *m, const char *what, violation *v)
{
    size_t n = strlen(m->type);
    if (n < 1 || n > 256 || !utf8_valid(m->type, n)) {
        violation_set(v, CODE(MALFORMED), "%s type must be 1...256 bytes of UTF-8", what);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)m->type[i];
        if (c < 0x20 || c == 0x7F ||
            (c == 0xC2 && i + 1 < n && (unsigned char)m->type[i + 1] <= 0x9F)) {
            violation_set(v, CODE(MALFORMED), "%s type has a control character", what);
            return 0;
        }
    }
    return 1;
}

static int share_item_ok(const Remoteview__ShareItem *it, size_t index, violation *v)
{
    if (!mime_valid(it->content_type)) {
        violation_set(v, CODE(MALFORMED), "item %zu: content_type \"%.64s\" is not a lower-case MIME type", index, it->content_type);
        return 0;
    }
    switch (it->kind) {
    case REMOTEVIEW__ITEM_KIND__ITEM_KIND_TEXT:
        if (strncmp(it->content_type, "text/", 5) != 0) {
            violation_set(v, CODE(MALFORMED), "item %zu: a TEXT item's content_type must be text/..., not %.64s", index, it->content_type);
            return 0;
        }
        if (!str_ok(it->text, 1, MAX_SHARE_TEXT)) {
            violation_set(v, CODE(MALFORMED), "item %zu: text must be 1...32768 bytes of UTF-8", index);
            return 0;
        }
        break;
    case REMOTEVIEW__ITEM_KIND__ITEM_KIND_URL:
        if (strcmp(it->content_type, "text/uri-list") != 0) {
            violation_set(v, CODE(MALFORMED), "item %zu: a URL item's content_type must be text/uri-list", index);
            return 0;
        }
        if (!url_valid(it->text)) {
            violation_set(v, CODE(MALFORMED), "item %zu: not an absolute URL", index);
            return 0;
        }
        break;
    case REMOTEVIEW__ITEM_KIND__ITEM_KIND_FILE:
        if (!file_name_valid(it->name)) {
            violation_set(v, CODE(MALFORMED), "item %zu: bad file name", index);
            return 0;
        }
        if (it->size > 268435456u) {
            violation_set(v, CODE(MALFORMED), "item %zu: size %llu over 268435456", index, (unsigned long long)it->size);
            return 0;
        }
        if (it->text[0]) {
            violation_set(v, CODE(MALFORMED), "item %zu: a FILE item has text", index);
            return 0;
        }
        return 1;
    default:
        violation_set(v, CODE(MALFORMED), "item %zu: kind %d is not TEXT, URL or FILE", index, (int)it->kind);
        return 0;
    }
    if (it->name[0] || it->size) {
        violation_set(v, CODE(MALFORMED), "item %zu: name and size are for FILE items only", index);
        return 0;
    }
    return 1;
}

static size_t file_items(Remoteview__ShareItem **items, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (items[i]->kind == REMOTEVIEW__ITEM_KIND__ITEM_KIND_FILE) c++;
    return c;
}

static int body_bounds_ok(const Remoteview__Envelope *e, violation *v)
{
    switch (e->body_case) {
    case REMOTEVIEW__ENVELOPE__BODY_HANDSHAKE: {
        const Remoteview__Handshake *h = e->handshake;
        if (h->protocol_version != 1) {
            violation_set(v, CODE(VERSION_MISMATCH), "protocol version %u, this service speaks 1", h->protocol_version);
            return 0;
        }
        if (h->role != REMOTEVIEW__PEER_ROLE__PEER_ROLE_HOST && h->role != REMOTEVIEW__PEER_ROLE__PEER_ROLE_SERVICE) {
            violation_set(v, CODE(MALFORMED), "handshake role %d is not 1 or 2", (int)h->role);
            return 0;
        }
        if (!identifier_valid(h->identifier, 1, 255)) {
            violation_set(v, CODE(MALFORMED), "handshake identifier must be 1...255 bytes of [A-Za-z0-9._-]");
            return 0;
        }
        if (h->n_capabilities > 32) {
            violation_set(v, CODE(MALFORMED), "%zu capabilities, at most 32", h->n_capabilities);
            return 0;
        }
        for (size_t i = 0; i < h->n_capabilities; i++)
            if (!identifier_valid(h->capabilities[i], 1, 64)) {
                violation_set(v, CODE(MALFORMED), "capability %zu must be 1...64 bytes of [A-Za-z0-9._-]", i);
                return 0;
            }
        if (h->max_packet_size < 1024) {
            violation_set(v, CODE(MALFORMED), "max_packet_size %u below 1024", h->max_packet_size);
            return 0;
        }
        return 1;
    }
    case REMOTEVIEW__ENVELOPE__BODY_GOODBYE:
        if (!str_ok(e->goodbye->reason, 0, 1024)) {
            violation_set(v, CODE(MALFORMED), "goodbye reason over 1024 bytes or not UTF-8");
            return 0;
        }
        return 1;
    case REMOTEVIEW__ENVELOPE__BODY_PROTOCOL_ERROR:
        if (e->protocol_error->code < 1 || e->protocol_error->code > 6 || !str_ok(e->protocol_error->reason, 0, 1024)) {
            violation_set(v, CODE(MALFORMED), "protocol_error code or reason out of bounds");
            return 0;
        }
        return 1;
    case REMOTEVIEW__ENVELOPE__BODY_REQUEST: return service_message_ok(e->request, "request", v);
    case REMOTEVIEW__ENVELOPE__BODY_REPLY: return service_message_ok(e->reply, "reply", v);
    case REMOTEVIEW__ENVELOPE__BODY_MESSAGE: return service_message_ok(e->message, "message", v);
    case REMOTEVIEW__ENVELOPE__BODY_FAILURE:
        if (!str_ok(e->failure->domain, 0, 1024) || !str_ok(e->failure->message, 0, 4096)) {
            violation_set(v, CODE(MALFORMED), "failure domain or message out of bounds");
            return 0;
        }
        return 1;
    case REMOTEVIEW__ENVELOPE__BODY_CANCEL:
        if (e->cancel->request_id == 0) {
            violation_set(v, CODE(MALFORMED), "cancel.request_id is 0");
            return 0;
        }
        return 1;
    case REMOTEVIEW__ENVELOPE__BODY_RELEASE_BUFFER:
        if (e->release_buffer->buffer_id == 0) {
            violation_set(v, CODE(MALFORMED), "release_buffer of buffer 0");
            return 0;
        }
        return 1;
    case REMOTEVIEW__ENVELOPE__BODY_RESIZE: {
        const Remoteview__Resize *r = e->resize;
        if (r->width < 1 || r->width > 16384 || r->height < 1 || r->height > 16384) {
            violation_set(v, CODE(MALFORMED), "resize %u x %u: each side must be 1...16384", r->width, r->height);
            return 0;
        }
        if (r->scale_permille < 250 || r->scale_permille > 8000) {
            violation_set(v, CODE(MALFORMED), "resize scale_permille %u not in 250...8000", r->scale_permille);
            return 0;
        }
        return 1;
    }
    case REMOTEVIEW__ENVELOPE__BODY_POINTER: {
        const Remoteview__PointerEvent *p = e->pointer;
        if (p->phase < 1 || p->phase > 4) {
            violation_set(v, CODE(MALFORMED), "pointer phase %d", (int)p->phase);
            return 0;
        }
        if (!coord_ok(p->x) || !coord_ok(p->y) || !coord_ok(p->scroll_x) || !coord_ok(p->scroll_y)) {
            violation_set(v, CODE(MALFORMED), "pointer coordinate not finite or beyond 16384");
            return 0;
        }
        int updown = p->phase == REMOTEVIEW__POINTER_PHASE__POINTER_PHASE_DOWN ||
                     p->phase == REMOTEVIEW__POINTER_PHASE__POINTER_PHASE_UP;
        if (updown ? (p->button < 1 || p->button > 8) : p->button != 0) {
            violation_set(v, CODE(MALFORMED), "pointer button %u", p->button);
            return 0;
        }
        if (p->buttons > 0xFF || !modifiers_ok(p->modifiers)) {
            violation_set(v, CODE(MALFORMED), "pointer buttons 0x%x or modifiers 0x%x out of bounds", p->buttons, p->modifiers);
            return 0;
        }
        return 1;
    }
    case REMOTEVIEW__ENVELOPE__BODY_KEY: {
        const Remoteview__KeyEvent *k = e->key;
        if (k->key_code < 1 || k->key_code > 65535 || !str_ok(k->text, 0, 64) || !modifiers_ok(k->modifiers)) {
            violation_set(v, CODE(MALFORMED), "key code %u, text or modifiers 0x%x out of bounds", k->key_code, k->modifiers);
            return 0;
        }
        return 1;
    }
    case REMOTEVIEW__ENVELOPE__BODY_TEXT_INPUT:
        if (!str_ok(e->text_input->text, 1, 4096)) {
            violation_set(v, CODE(MALFORMED), "text_input must be 1...4096 bytes of UTF-8");
            return 0;
        }
        return 1;
    case REMOTEVIEW__ENVELOPE__BODY_REMOTE_CONTROL:
        if (e->remote_control->command < 1 || e->remote_control->command > 7) {
            violation_set(v, CODE(MALFORMED), "remote_control command %d", (int)e->remote_control->command);
            return 0;
        }
        return 1;
    case REMOTEVIEW__ENVELOPE__BODY_TRAITS:
        if (e->traits->style < 1 || e->traits->style > 2 ||
            e->traits->font_scale_permille < 500 || e->traits->font_scale_permille > 4000) {
            violation_set(v, CODE(MALFORMED), "traits style %d or font_scale_permille %u out of bounds",
                          (int)e->traits->style, e->traits->font_scale_permille);
            return 0;
        }
        return 1;
    case REMOTEVIEW__ENVELOPE__BODY_SHARE_REQUEST: {
        const Remoteview__ShareRequest *s = e->share_request;
        if (s->n_items < 1 || s->n_items > 16) {
            violation_set(v, CODE(MALFORMED), "share_request with %zu items (1...16)", s->n_items);
            return 0;
        }
        for (size_t i = 0; i < s->n_items; i++)
            if (!share_item_ok(s->items[i], i, v)) return 0;
        return 1;
    }
    case REMOTEVIEW__ENVELOPE__BODY_SHARE_CANCEL:
        if (!str_ok(e->share_cancel->reason, 0, 1024)) {
            violation_set(v, CODE(MALFORMED), "share_cancel reason over 1024 bytes or not UTF-8");
            return 0;
        }
        return 1;
    case REMOTEVIEW__ENVELOPE__BODY_ACCESSIBILITY_ACTION: {
        const Remoteview__AccessibilityAction *a = e->accessibility_action;
        if (a->node == 0) {
            violation_set(v, CODE(MALFORMED), "accessibility.structure: accessibility_action on node 0");
            return 0;
        }
        if (a->action < 1 || a->action > 6) {
            violation_set(v, CODE(MALFORMED), "accessibility_action %d is not an action (1...6)", (int)a->action);
            return 0;
        }
        if (!str_ok(a->text, 0, 1024)) {
            violation_set(v, CODE(MALFORMED), "accessibility.text-length: accessibility_action text over 1024 bytes or not UTF-8");
            return 0;
        }
        if (!isfinite(a->number)) {
            violation_set(v, CODE(MALFORMED), "accessibility_action number is not finite");
            return 0;
        }
        if (a->action == REMOTEVIEW__ACCESSIBILITY_ACTION_KIND__ACCESSIBILITY_ACTION_SET_VALUE && a->text[0] && a->has_number) {
            violation_set(v, CODE(MALFORMED), "accessibility_action SET_VALUE with both a text and a number");
            return 0;
        }
        return 1;
    }
    default:
        /* ping, pong, frame_done, focus: nothing to bound. The service's own bodies
         * (attach_buffer, commit, ...) are refused by direction in the caller. */
        return 1;
    }
}

int validate_envelope(const Remoteview__Envelope *e, int nfds, uint64_t last_id, violation *v)
{
    if (e->fd_count != (uint32_t)nfds) {
        violation_set(v, CODE(FD_MISMATCH), "fd_count %u, but %d fds arrived", e->fd_count, nfds);
        return 0;
    }
    if (e->body_case == REMOTEVIEW__ENVELOPE__BODY__NOT_SET) {
        violation_set(v, CODE(MALFORMED), "envelope without a known body");
        return 0;
    }
    if (e->id == 0) {
        violation_set(v, CODE(MALFORMED), "envelope id 0");
        return 0;
    }
    if (e->id <= last_id) {
        violation_set(v, CODE(MALFORMED), "envelope id %llu does not increase (last %llu)",
                      (unsigned long long)e->id, (unsigned long long)last_id);
        return 0;
    }
    int is_answer = e->body_case == REMOTEVIEW__ENVELOPE__BODY_PONG ||
                    e->body_case == REMOTEVIEW__ENVELOPE__BODY_REPLY ||
                    e->body_case == REMOTEVIEW__ENVELOPE__BODY_FAILURE;
    if (is_answer != (e->reply_to != 0)) {
        violation_set(v, CODE(MALFORMED), is_answer ? "an answer without reply_to" : "reply_to set on a body that answers nothing");
        return 0;
    }
    uint32_t want_min = 0, want_max = 0;
    switch (e->body_case) {
    case REMOTEVIEW__ENVELOPE__BODY_REQUEST:
    case REMOTEVIEW__ENVELOPE__BODY_REPLY:
    case REMOTEVIEW__ENVELOPE__BODY_MESSAGE:
        want_max = MAX_FDS_PER_BODY;
        break;
    case REMOTEVIEW__ENVELOPE__BODY_ATTACH_BUFFER:
        want_min = want_max = 1;
        break;
    case REMOTEVIEW__ENVELOPE__BODY_SHARE_REQUEST:
        want_min = want_max = (uint32_t)file_items(e->share_request->items, e->share_request->n_items);
        break;
    case REMOTEVIEW__ENVELOPE__BODY_SHARE_COMPLETE:
        want_min = want_max = (uint32_t)file_items(e->share_complete->items, e->share_complete->n_items);
        break;
    default:
        break;
    }
    if (e->fd_count < want_min || e->fd_count > want_max) {
        violation_set(v, CODE(FD_MISMATCH), "%u fds on body %d, which takes %u...%u",
                      e->fd_count, (int)e->body_case, want_min, want_max);
        return 0;
    }
    return body_bounds_ok(e, v);
}
