#define _GNU_SOURCE 1
#include <stdlib.h>
#include <string.h>
#include "CRemoteViewLinux.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/futex.h>
#include <limits.h>
#include <time.h>
#include <errno.h>
#include <unistd.h>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

size_t rv_cmsg_space(size_t length) { return CMSG_SPACE(length); }
size_t rv_cmsg_len(size_t length) { return CMSG_LEN(length); }
struct cmsghdr *rv_cmsg_firsthdr(const struct msghdr *message) { return CMSG_FIRSTHDR(message); }
struct cmsghdr *rv_cmsg_nxthdr(const struct msghdr *message, const struct cmsghdr *header) {
    return CMSG_NXTHDR((struct msghdr *)message, (struct cmsghdr *)header);
}
unsigned char *rv_cmsg_data(const struct cmsghdr *header) { return CMSG_DATA((struct cmsghdr *)header); }
const int rv_msg_cmsg_cloexec = MSG_CMSG_CLOEXEC;

_Static_assert(sizeof(struct rv_mmsghdr) == sizeof(struct mmsghdr), "rv_mmsghdr mirrors mmsghdr");
_Static_assert(offsetof(struct rv_mmsghdr, msg_len) == offsetof(struct mmsghdr, msg_len), "rv_mmsghdr mirrors mmsghdr");
int rv_recvmmsg(int fd, struct rv_mmsghdr *messages, unsigned int count, int flags) {
    return recvmmsg(fd, (struct mmsghdr *)messages, count, flags, NULL);
}

int rv_sendmmsg(int fd, struct rv_mmsghdr *messages, unsigned int count, int flags) {
    return sendmmsg(fd, (struct mmsghdr *)messages, count, flags);
}

int rv_accept_cloexec_nonblock(int fd) { return accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK); }
int rv_pipe_cloexec(int fds[2]) { return pipe2(fds, O_CLOEXEC); }
int rv_memfd_create(const char *name, unsigned int flags) { return memfd_create(name, flags); }
const unsigned int rv_mfd_cloexec = MFD_CLOEXEC;
const unsigned int rv_mfd_allow_sealing = MFD_ALLOW_SEALING;
const int rv_f_add_seals = F_ADD_SEALS;
const int rv_f_get_seals = F_GET_SEALS;
const int rv_f_seal_seal = F_SEAL_SEAL;
const int rv_f_seal_shrink = F_SEAL_SHRINK;
const int rv_f_seal_grow = F_SEAL_GROW;
const int rv_f_seal_write = F_SEAL_WRITE;
int rv_fcntl_int(int fd, int command, int argument) { return fcntl(fd, command, argument); }

int rv_openat2(int directory, const char *path, uint64_t flags, uint64_t mode, uint64_t resolve) {
    struct open_how how = {.flags = flags, .mode = mode, .resolve = resolve};
    return (int)syscall(SYS_openat2, directory, path, &how, sizeof how);
}
const int rv_o_path = O_PATH;
const uint64_t rv_resolve_beneath = RESOLVE_BENEATH;
const uint64_t rv_resolve_no_magiclinks = RESOLVE_NO_MAGICLINKS;

int rv_pidfd_open(pid_t pid, unsigned int flags) { return (int)syscall(SYS_pidfd_open, pid, flags); }
int rv_pidfd_send_signal(int pidfd, int signal, unsigned int flags) {
    return (int)syscall(SYS_pidfd_send_signal, pidfd, signal, NULL, flags);
}
int rv_waitid_pidfd(int pidfd, int block, int *exited, int *code, int *status) {
    siginfo_t info = {0};
    if (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &info, WEXITED | (block ? 0 : WNOHANG)) != 0) return -1;
    *exited = info.si_pid != 0;
    *code = info.si_code;
    *status = info.si_status;
    return 0;
}
const int rv_cld_exited = CLD_EXITED;
const int rv_cld_killed = CLD_KILLED;
const int rv_cld_dumped = CLD_DUMPED;

int rv_set_child_subreaper(int on) {
    return prctl(PR_SET_CHILD_SUBREAPER, (unsigned long)(on != 0), 0UL, 0UL, 0UL);
}

int rv_is_dumpable(void) { return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0); }
int rv_is_child_subreaper(void) {
    int result = 0;
    if (prctl(PR_GET_CHILD_SUBREAPER, &result, 0UL, 0UL, 0UL) != 0) return -1;
    return result != 0;
}

void rv_heap_in_use(size_t *arenas, size_t *mapped) {
    struct mallinfo2 info = mallinfo2();
    *arenas = info.uordblks;
    *mapped = info.hblkhd;
}

// MARK: threads

int rv_is_main_thread(void) { return getpid() == (pid_t)syscall(SYS_gettid); }

void rv_stdout_line_buffered(void) { setvbuf(stdout, NULL, _IOLBF, 0); }

int rv_name_this_thread(const char *name) { return pthread_setname_np(pthread_self(), name); }

// MARK: ThreadSanitizer

#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if __has_feature(thread_sanitizer) || defined(__SANITIZE_THREAD__)
// The ThreadSanitizer runtime's annotation interface (compiler-rt's tsan_interface.h).
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
int rv_thread_sanitizer(void) { return 1; }
void rv_tsan_acquire(void *address) { __tsan_acquire(address); }
void rv_tsan_release(void *address) { __tsan_release(address); }
#else
int rv_thread_sanitizer(void) { return 0; }
void rv_tsan_acquire(void *address) { (void)address; }
void rv_tsan_release(void *address) { (void)address; }
#endif

// MARK: blocking waits

static long rv_futex(uint32_t *word, int operation, uint32_t value, const struct timespec *timeout) {
    return syscall(SYS_futex, word, operation, value, timeout, NULL, 0);
}

void rv_gate_init(rv_loop_gate *gate) {
    __atomic_store_n(&gate->borrowed, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&gate->awake, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&gate->parked, 0, __ATOMIC_SEQ_CST);
}

void rv_gate_loop_sleeps(rv_loop_gate *gate) {
    __atomic_store_n(&gate->awake, 0, __ATOMIC_SEQ_CST);
}

void rv_gate_loop_wakes(rv_loop_gate *gate) {
    __atomic_store_n(&gate->awake, 1, __ATOMIC_SEQ_CST);
    // While awake is set, no new borrow succeeds: the loop waits for one borrower at most.
    while (__atomic_load_n(&gate->borrowed, __ATOMIC_SEQ_CST)) {
        __atomic_store_n(&gate->parked, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&gate->borrowed, __ATOMIC_SEQ_CST)) {
            rv_futex(&gate->borrowed, FUTEX_WAIT_PRIVATE, 1, NULL);
        }
        __atomic_store_n(&gate->parked, 0, __ATOMIC_SEQ_CST);
    }
}

int rv_gate_borrow(rv_loop_gate *gate) {
    uint32_t expected = 0;
    if (!__atomic_compare_exchange_n(&gate->borrowed, &expected, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return 0;
    if (__atomic_load_n(&gate->awake, __ATOMIC_SEQ_CST)) {
        rv_gate_return(gate);
        return 0;
    }
    return 1;
}

void rv_gate_return(rv_loop_gate *gate) {
    __atomic_store_n(&gate->borrowed, 0, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&gate->parked, __ATOMIC_SEQ_CST)) rv_futex(&gate->borrowed, FUTEX_WAKE_PRIVATE, 1, NULL);
}

int rv_oneshot_wait(uint32_t *word, int64_t timeout_ns) {
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        uint32_t value = __atomic_load_n(word, __ATOMIC_SEQ_CST);
        if (value == 1) return 1;
        if (value == 0) {
            uint32_t expected = 0;
            if (!__atomic_compare_exchange_n(word, &expected, 2, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) continue;
        }
        struct timespec remaining, *limit = NULL;
        if (timeout_ns >= 0) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            int64_t elapsed = (int64_t)(now.tv_sec - start.tv_sec) * 1000000000 + (now.tv_nsec - start.tv_nsec);
            int64_t left = timeout_ns - elapsed;
            if (left <= 0) return __atomic_load_n(word, __ATOMIC_SEQ_CST) == 1;
            remaining.tv_sec = left / 1000000000;
            remaining.tv_nsec = left % 1000000000;
            limit = &remaining;
        }
        rv_futex(word, FUTEX_WAIT_PRIVATE, 2, limit);
    }
}

void rv_oneshot_signal(uint32_t *word) {
    if (__atomic_exchange_n(word, 1, __ATOMIC_SEQ_CST) == 2) rv_futex(word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL);
}

int rv_oneshot_is_done(uint32_t *word) {
    return __atomic_load_n(word, __ATOMIC_ACQUIRE) == 1;
}

ssize_t rv_recvmsg_blocking(int fd, struct msghdr *message) {
    return recvmsg(fd, message, MSG_CMSG_CLOEXEC);
}

int rv_set_receive_timeout(int fd, int64_t nanoseconds) {
    struct timeval value = { .tv_sec = nanoseconds / 1000000000, .tv_usec = (nanoseconds % 1000000000) / 1000 };
    if (nanoseconds > 0 && value.tv_sec == 0 && value.tv_usec == 0) value.tv_usec = 1;
    return setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, sizeof value);
}
