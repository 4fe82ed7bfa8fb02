// CSpawn: the launcher's process start, in C because it runs between vfork and execve, where
// only async-signal-safe calls are allowed and Swift cannot run.
#ifndef REMOTEVIEW_CSPAWN_H
#define REMOTEVIEW_CSPAWN_H

#include <sys/types.h>

/// The most descriptors a child can be given (its fds 0 ..< this).
#define RV_SPAWN_MAX_FDS 32
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
    /// Non-zero: once in its groups and under its limits, the child drops to `uid` and `gid`
    /// with no supplementary groups (`setgroups`, `setresgid`, `setresuid`, as raw system calls:
    /// glibc's wrappers would signal every thread of the process whose memory the child still
    /// shares). Only a root parent can.
    int drop_credentials;
    uid_t uid;
    gid_t gid;
    /// Landlock scopes (`LANDLOCK_SCOPE_*` bits, see `rv_landlock_abi`) the child restricts
    /// itself to before `execve`, with `PR_SET_NO_NEW_PRIVS` set first; 0: none.
    unsigned long long landlock_scopes;
};

/// `LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET` (Landlock ABI 6, Linux 6.12): no connecting to an
/// abstract Unix socket made outside the domain. Defined here: older kernel headers lack it.
#define RV_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET 0x1ULL

/// The kernel's Landlock ABI version (`landlock_create_ruleset(NULL, 0,
/// LANDLOCK_CREATE_RULESET_VERSION)`), or 0 when it has none (or it is disabled at boot).
int rv_landlock_abi(void);

/// Starts the process described by `request` with vfork + execve: signal mask and dispositions
/// reset, control groups joined, the fds arranged, limits applied, credentials dropped, the death
/// signal set (after the drop, which clears it; the child is gone if the caller died before
/// it was set), the Landlock scopes applied.
///
/// A drop of credentials in the vfork child changes the memory it shares with the caller: the
/// kernel makes that memory non-dumpable. The caller's dumpable flag is restored before this
/// returns.
///
/// Returns the child's pid, or -1 with errno set: the child's own errno (and the step that failed
/// in `*failed_step`, e.g. "execve") when it could not start; the child is reaped then.
pid_t rv_spawn(const struct rv_spawn_request *_Nonnull request, const char *_Nullable *_Nonnull failed_step);

#endif
