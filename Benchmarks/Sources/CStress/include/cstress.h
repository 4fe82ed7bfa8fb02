// What remoteview-stress needs from Linux that Swift's Glibc module does not show (it needs
// _GNU_SOURCE or is not in the module): pidfds, so that a signal never reaches a reused pid
// (pid_max is 32768 on these VMs, and a storm starts thousands of processes), and memfds to
// attach to requests.
#ifndef CSTRESS_H
#define CSTRESS_H

#include <sys/types.h>

/// pidfd_open(pid, 0): a descriptor of the process with that pid now, or -1 (errno set).
int cstress_pidfd_open(pid_t pid);

/// pidfd_send_signal(fd, signal, NULL, 0): 0, or -1 (errno set; ESRCH: it has exited).
int cstress_pidfd_send_signal(int pidfd, int signal);

/// memfd_create(name, MFD_CLOEXEC) with `size` bytes: a descriptor, or -1 (errno set).
int cstress_memfd(const char *name, long size);

#endif
