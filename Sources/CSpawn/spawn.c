
#include "CSpawn.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_restrict_self 446
#endif

// `struct landlock_ruleset_attr` as of Landlock ABI 6 (older headers end before `scoped`).
struct rv_landlock_ruleset_attr {
    uint64_t handled_access_fs;
    uint64_t handled_access_net;
    uint64_t scoped;
};

int rv_landlock_abi(void) {
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1 /* LANDLOCK_CREATE_RULESET_VERSION */);
    return abi < 0 ? 0 : (int)abi;
}

// The child half. It shares the parent's memory (vfork) until execve, so it only writes to the
// two out-variables, calls async-signal-safe functions and never returns.
static void run_child(const struct rv_spawn_request *request, pid_t parent,
                      volatile int *child_errno, const char *volatile *failed_step) {
#define FAIL(step) do { *child_errno = errno; *failed_step = (step); _exit(127); } while (0)
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        struct sigaction action = {0};
        action.sa_handler = SIG_DFL;
        sigemptyset(&action.sa_mask);
        (void)sigaction(sig, &action, NULL);  // fails harmlessly for glibc's reserved signals
    }
    for (int i = 0; i < request->group_count; i++) {
        if (write(request->group_fds[i], "0", 1) != 1) FAIL("write(cgroup.procs)");
    }
    if (request->new_session && setsid() < 0) FAIL("setsid");
    // Move every source above the target range first, so dup2 never clobbers a later source.
    int moved[RV_SPAWN_MAX_FDS];
    for (int i = 0; i < request->fd_count; i++) {
        if (request->fds[i] < 0) {
            moved[i] = open("/dev/null", O_RDWR | O_CLOEXEC);
            if (moved[i] < 0) FAIL("open(/dev/null)");
        } else {
            moved[i] = request->fds[i];
        }
        if (moved[i] < request->fd_count) {
            moved[i] = fcntl(moved[i], F_DUPFD_CLOEXEC, request->fd_count);
            if (moved[i] < 0) FAIL("fcntl(F_DUPFD_CLOEXEC)");
        }
    }
    for (int i = 0; i < request->fd_count; i++) {
        if (dup2(moved[i], i) < 0) FAIL("dup2");  // the copy at i is not close-on-exec
    }
    if (close_range((unsigned)request->fd_count, ~0U, 0) != 0) FAIL("close_range");
    for (int i = 0; i < request->limit_count; i++) {
        struct rlimit limit = {request->limit_soft[i], request->limit_hard[i]};
        if (setrlimit(request->limit_resources[i], &limit) != 0) FAIL("setrlimit");
    }
    if (request->drop_credentials) {
        // Raw system calls: they change this task's credentials only. (The wrappers broadcast
        // the change to every thread of the process, which is the caller's.)
        if (syscall(SYS_setgroups, 0, NULL) != 0) FAIL("setgroups");
        if (syscall(SYS_setresgid, request->gid, request->gid, request->gid) != 0) FAIL("setresgid");
        if (syscall(SYS_setresuid, request->uid, request->uid, request->uid) != 0) FAIL("setresuid");
    }
    if (request->landlock_scopes != 0) {
        // Landlock needs no_new_privs from a process without CAP_SYS_ADMIN. A scope-only
        // ruleset (no filesystem or network rights handled) leaves bubblewrap's mounts alone.
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) FAIL("prctl(PR_SET_NO_NEW_PRIVS)");
        struct rv_landlock_ruleset_attr attributes = {0, 0, request->landlock_scopes};
        long ruleset = syscall(SYS_landlock_create_ruleset, &attributes, sizeof attributes, 0);
        if (ruleset < 0) FAIL("landlock_create_ruleset");
        if (syscall(SYS_landlock_restrict_self, ruleset, 0) != 0) FAIL("landlock_restrict_self");
        close((int)ruleset);
    }
    // A change of credentials clears the death signal: set it after the drop.
    if (request->death_signal != 0) {
        if (prctl(PR_SET_PDEATHSIG, request->death_signal) != 0) FAIL("prctl(PR_SET_PDEATHSIG)");
        // The parent is suspended in vfork, but check anyway, as the man page advises.
        if (getppid() != parent) { errno = ESRCH; FAIL("getppid"); }
    }
    sigset_t none;
    sigemptyset(&none);
    if (sigprocmask(SIG_SETMASK, &none, NULL) != 0) FAIL("sigprocmask");
    execve(request->path, request->argv, request->envp);
    FAIL("execve");
#undef FAIL
}

pid_t rv_spawn(const struct rv_spawn_request *request, const char **failed_step) {
    if (request->fd_count < 0 || request->fd_count > RV_SPAWN_MAX_FDS ||
        request->limit_count < 0 || request->limit_count > RV_SPAWN_MAX_LIMITS ||
        request->group_count < 0 || request->group_count > RV_SPAWN_MAX_GROUPS) {
        *failed_step = "rv_spawn arguments";
        errno = EINVAL;
        return -1;
    }
    // No signal handler of this process may run in the child while it shares our memory.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t parent = getpid();
    // The child's drop of credentials makes the memory it shares with us non-dumpable (the
    // kernel's flag is on the memory, not the task): put ours back once it has gone on.
    int dumpable = request->drop_credentials ? prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) : -1;
    volatile int child_errno = 0;
    const char *volatile step = NULL;
    pid_t pid = vfork();
    if (pid == 0) run_child(request, parent, &child_errno, &step);
    int saved = errno;
    if (dumpable >= 0 && prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != dumpable) (void)prctl(PR_SET_DUMPABLE, dumpable, 0, 0, 0);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        *failed_step = "vfork";
        errno = saved;
        return -1;
    }
    if (child_errno != 0) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        *failed_step = step;
        errno = child_errno;
        return -1;
    }
    return pid;
}
