// CSpawn: the launcher's process start, in C because it runs between vfork and execve, where
// only async-signal-safe calls are allowed and Swift cannot run.
#ifndef REMOTEVIEW_CSPAWN_H
#define REMOTEVIEW_CSPAWN_H

#include <sys/types.h>

/// The most descriptors a child can be given (its fds 0 ..< this).
#define RV_SPAWN_MAX_FDS 8
/// The most resource limits a child can be given.
#define RV_SPAWN_MAX_LIMITS 8
/// The most control groups a child can join.
#define RV_SPAWN_MAX_GROUPS 4

/// What to start and how.
struct rv_spawn_request {
    /// Absolute path of the executable.
    const char *_Nullable path;
    /// NULL-terminated argument and environment vectors.
    char *const _Nullable *_Nullable argv;
    char *const _Nullable *_Nullable envp;
    /// The child's fd `i` becomes a copy of `fds[i]` (-1: /dev/null); every other fd is closed.
    int fds[RV_SPAWN_MAX_FDS];
    int fd_count;
    /// `PR_SET_PDEATHSIG` for the child (0: none). It fires when the *calling thread* exits, so
    /// call from a thread that lives as long as the process.
    int death_signal;
    /// Non-zero: the child starts a new session (`setsid`).
    int new_session;
    /// `setrlimit(limit_resources[i], {limit_soft[i], limit_hard[i]})` in the child.
    int limit_resources[RV_SPAWN_MAX_LIMITS];
    unsigned long long limit_soft[RV_SPAWN_MAX_LIMITS];
    unsigned long long limit_hard[RV_SPAWN_MAX_LIMITS];
    int limit_count;
    /// Open `cgroup.procs` files (write-only): the child writes "0" to each first, joining those
    /// control groups before anything else, so every process it starts is in them too.
    int group_fds[RV_SPAWN_MAX_GROUPS];
    int group_count;
};

/// Starts the process described by `request` with vfork + execve: signal mask and dispositions
/// reset, control groups joined, the fds arranged, the death signal set (and the child gone if
/// the caller died before it was), limits applied.
///
/// Returns the child's pid, or -1 with errno set: the child's own errno (and the step that failed
/// in `*failed_step`, e.g. "execve") when it could not start; the child is reaped then.
pid_t rv_spawn(const struct rv_spawn_request *_Nonnull request, const char *_Nullable *_Nonnull failed_step);

#endif
