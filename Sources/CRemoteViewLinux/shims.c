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
