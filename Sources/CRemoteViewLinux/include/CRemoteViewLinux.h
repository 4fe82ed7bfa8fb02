// CRemoteViewLinux: thin C shims for the Linux calls Swift cannot make directly (like swift-nio's
// CNIOLinux). Every shim is a plain function or constant, prefixed `rv_`, with no logic beyond
// what Swift cannot express (function-like macros, _GNU_SOURCE-only declarations, raw
// syscalls, and the futex waits, which need the address of an atomic word that Swift's `Atomic`
// does not give). Only RemoteCore/System calls them.
#ifndef REMOTEVIEW_CREMOTEVIEWLINUX_H
#define REMOTEVIEW_CREMOTEVIEWLINUX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

// MARK: SCM_RIGHTS ancillary data (CMSG_* are macros)

/// `CMSG_SPACE(length)`.
size_t rv_cmsg_space(size_t length);
/// `CMSG_LEN(length)`.
size_t rv_cmsg_len(size_t length);
/// `CMSG_FIRSTHDR(message)`.
struct cmsghdr *_Nullable rv_cmsg_firsthdr(const struct msghdr *_Nonnull message);
/// `CMSG_NXTHDR(message, header)`.
struct cmsghdr *_Nullable rv_cmsg_nxthdr(const struct msghdr *_Nonnull message, const struct cmsghdr *_Nonnull header);
/// `CMSG_DATA(header)`.
unsigned char *_Nonnull rv_cmsg_data(const struct cmsghdr *_Nonnull header);

/// `MSG_CMSG_CLOEXEC` (Linux-only flag).
extern const int rv_msg_cmsg_cloexec;

/// `struct mmsghdr` (needs _GNU_SOURCE): one message of a `recvmmsg` batch, and its length.
struct rv_mmsghdr {
    struct msghdr msg_hdr;
    unsigned int msg_len;
};

/// `recvmmsg(fd, messages, count, flags, NULL)` (needs _GNU_SOURCE).
int rv_recvmmsg(int fd, struct rv_mmsghdr *_Nonnull messages, unsigned int count, int flags);

/// `sendmmsg(fd, messages, count, flags)` (needs _GNU_SOURCE).
int rv_sendmmsg(int fd, struct rv_mmsghdr *_Nonnull messages, unsigned int count, int flags);

/// `accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)` (accept4 needs _GNU_SOURCE).
int rv_accept_cloexec_nonblock(int fd);

/// `pipe2(fds, O_CLOEXEC)` (pipe2 needs _GNU_SOURCE).
int rv_pipe_cloexec(int fds[_Nonnull 2]);

// MARK: memfd and seals (need _GNU_SOURCE)

/// `memfd_create(name, flags)`.
int rv_memfd_create(const char *_Nonnull name, unsigned int flags);
extern const unsigned int rv_mfd_cloexec;
extern const unsigned int rv_mfd_allow_sealing;
extern const int rv_f_add_seals;
extern const int rv_f_get_seals;
extern const int rv_f_seal_seal;
extern const int rv_f_seal_shrink;
extern const int rv_f_seal_grow;
extern const int rv_f_seal_write;
/// `fcntl(fd, command, argument)` with an int argument (fcntl is variadic).
int rv_fcntl_int(int fd, int command, int argument);

// MARK: threads

/// `pthread_setname_np(pthread_self(), name)` (needs _GNU_SOURCE): names the calling thread
/// for `top -H`, `perf` and debuggers (at most 15 bytes).
int rv_name_this_thread(const char *_Nonnull name);

// MARK: files

/// `syscall(SYS_openat2, directory, path, &how, sizeof how)` with `how` = `{flags, mode,
/// resolve}` (glibc has no wrapper): opens `path` relative to `directory`, resolved as `resolve`
/// says (`RESOLVE_BENEATH`: never above `directory`, by `..`, an absolute path or a symbolic
/// link). Linux 5.6.
int rv_openat2(int directory, const char *_Nonnull path, uint64_t flags, uint64_t mode, uint64_t resolve);
/// `O_PATH` (needs _GNU_SOURCE): a descriptor that names a file without opening it for I/O.
extern const int rv_o_path;
/// `RESOLVE_BENEATH` and `RESOLVE_NO_MAGICLINKS` (`<linux/openat2.h>`).
extern const uint64_t rv_resolve_beneath;
extern const uint64_t rv_resolve_no_magiclinks;

// MARK: processes

/// `syscall(SYS_pidfd_open, pid, flags)`.
int rv_pidfd_open(pid_t pid, unsigned int flags);
/// `syscall(SYS_pidfd_send_signal, pidfd, signal, NULL, flags)`.
int rv_pidfd_send_signal(int pidfd, int signal, unsigned int flags);
/// `waitid(P_PIDFD, pidfd, ...)`: collects the exit of the process behind `pidfd`, waiting for
/// it when `block` is non-zero (else `WNOHANG`). Returns 0 and sets `*exited` to 1 with `*code`/`*status` (si_code / si_status)
/// when it has exited, 0 with `*exited` = 0 when it is still running, -1 with errno otherwise.
int rv_waitid_pidfd(int pidfd, int block, int *_Nonnull exited, int *_Nonnull code, int *_Nonnull status);
/// `CLD_EXITED`, `CLD_KILLED`, `CLD_DUMPED` for the `code` above.
extern const int rv_cld_exited;
extern const int rv_cld_killed;
extern const int rv_cld_dumped;
/// `prctl(PR_SET_CHILD_SUBREAPER, on)` (prctl is variadic, which Swift cannot call).
int rv_set_child_subreaper(int on);
/// `prctl(PR_GET_CHILD_SUBREAPER, &result)`: 1 when this process is a child subreaper, 0 when
/// not, -1 with errno on failure.
int rv_is_child_subreaper(void);
/// `prctl(PR_GET_DUMPABLE)`: 1 when this process may dump core and be traced by its own user,
/// 0 when not, -1 with errno on failure.
int rv_is_dumpable(void);

// MARK: memory

/// `mallinfo2()` (in `<malloc.h>`, which Swift's Glibc module leaves out): the bytes malloc has
/// handed out and not had back, in its arenas (`uordblks`) and in chunks of their own mapping
/// (`hblkhd`).
void rv_heap_in_use(size_t *_Nonnull arenas, size_t *_Nonnull mapped);

// MARK: ThreadSanitizer

/// 1 when this module was compiled with ThreadSanitizer (`swift build --sanitize=thread` gives C
/// targets `-fsanitize=thread`), else 0. Decided at compile time.
int rv_thread_sanitizer(void);
/// `__tsan_acquire(address)` / `__tsan_release(address)` in a ThreadSanitizer build, nothing
/// otherwise: tell ThreadSanitizer about a lock it cannot see (RemoteCore's `Mutex`).
void rv_tsan_acquire(void *_Nonnull address);
void rv_tsan_release(void *_Nonnull address);

// MARK: threads

/// 1 on the process's main thread (its thread id is its process id).
int rv_is_main_thread(void);

// MARK: blocking waits (futex: a thread that waits sleeps in the kernel, with no lock)

/// How the event loop's thread and a thread that borrows it take turns (EventLoop's
/// `borrow(_:)`, for a blocking call): the loop marks itself awake between `epoll_wait`s, a
/// borrower marks the loop borrowed, each then looks at the other's mark (Dekker's order, all
/// sequentially consistent), and a loop that wakes while it is borrowed sleeps on `borrowed`
/// until it is given back. Only the functions below touch the fields.
typedef struct {
    uint32_t borrowed;
    uint32_t awake;
    uint32_t parked;
} rv_loop_gate;

/// A gate whose loop is awake (it has not slept yet).
void rv_gate_init(rv_loop_gate *_Nonnull gate);
/// The loop is about to wait in `epoll_wait`: it touches none of its state until it wakes.
void rv_gate_loop_sleeps(rv_loop_gate *_Nonnull gate);
/// The loop came back from `epoll_wait`: waits while a borrower holds it.
void rv_gate_loop_wakes(rv_loop_gate *_Nonnull gate);
/// Borrows the loop if it sleeps and nobody else holds it: 1 if borrowed, 0 if not.
int rv_gate_borrow(rv_loop_gate *_Nonnull gate);
/// Gives the loop back (waking it if it woke meanwhile and waits).
void rv_gate_return(rv_loop_gate *_Nonnull gate);

/// A word one thread waits on until another says it is done: 0 pending, 1 done, 2 pending and
/// a thread waits. `rv_oneshot_wait` returns 1 once done, 0 when `timeout_ns` (relative;
/// negative: no limit) passed first.
int rv_oneshot_wait(uint32_t *_Nonnull word, int64_t timeout_ns);
/// Marks `word` done, waking its waiter if one sleeps (no system call otherwise).
void rv_oneshot_signal(uint32_t *_Nonnull word);
/// Whether `word` is done (an acquiring load).
int rv_oneshot_is_done(uint32_t *_Nonnull word);

/// `recvmsg(fd, message, MSG_CMSG_CLOEXEC)`, blocking (the socket must not be `O_NONBLOCK`).
ssize_t rv_recvmsg_blocking(int fd, struct msghdr *_Nonnull message);
/// `setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, …)`: a blocking receive gives up (`EAGAIN`) after
/// `nanoseconds` (0: never).
int rv_set_receive_timeout(int fd, int64_t nanoseconds);

// MARK: stdio

/// Makes stdout line-buffered (Swift 6 cannot name the global `stdout`).
void rv_stdout_line_buffered(void);

#endif
