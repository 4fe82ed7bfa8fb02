#include "CSandboxFilter.h"

#include <errno.h>
#include <linux/sched.h>
#include <sched.h>
#include <seccomp.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/socket.h>

// What a sandboxed service may not do, and the errno it gets instead. Everything else is allowed
// (a deny-list, as Flatpak's): a service is an ordinary program that must run unmodified. Each
// denial of a native (x86-64) call answers with an errno, never a kill, so a denied service stays
// debuggable and can fall back (ENOSYS where a library tries an older call next, as glibc does
// for clone3). A call through another entry point (32-bit int $0x80, x32) matches no
// architecture of the filter and gets libseccomp's default for a foreign architecture: the
// calling thread is killed with SIGSYS (docs/Manifest.md says so).
//
// Listed in docs/Manifest.md ("The seccomp filter"); the hostile suite tries each one.
struct denial {
    const char *name;
    int error;
};

static const struct denial denials[] = {
    // The kernel keyrings are not namespaced: the host's session keyring would be reachable.
    {"keyctl", EPERM}, {"add_key", EPERM}, {"request_key", EPERM},
    // New namespaces (a user namespace gives back every capability inside it), and joining one.
    {"unshare", EPERM}, {"setns", EPERM},
    // clone3 passes its flags in memory a filter cannot read: glibc falls back to clone.
    {"clone3", ENOSYS},
    // Other processes' memory and registers.
    {"ptrace", EPERM}, {"process_vm_readv", EPERM}, {"process_vm_writev", EPERM},
    {"kcmp", EPERM}, {"pidfd_getfd", EPERM},
    // Kernel attack surface a service has no use for.
    {"perf_event_open", ENOSYS}, {"bpf", EPERM}, {"userfaultfd", EPERM},
    {"io_uring_setup", ENOSYS}, {"io_uring_enter", ENOSYS}, {"io_uring_register", ENOSYS},
    {"lookup_dcookie", EPERM}, {"quotactl", EPERM}, {"quotactl_fd", EPERM},
    {"acct", EPERM}, {"swapon", EPERM}, {"swapoff", EPERM}, {"syslog", EPERM},
    {"uselib", EPERM}, {"vhangup", EPERM}, {"nfsservctl", EPERM}, {"open_by_handle_at", EPERM},
    {"name_to_handle_at", EPERM}, {"fanotify_init", EPERM},
    // The mount family.
    {"mount", EPERM}, {"umount2", EPERM}, {"pivot_root", EPERM}, {"chroot", EPERM},
    {"move_mount", EPERM}, {"open_tree", EPERM}, {"fsopen", EPERM}, {"fsconfig", EPERM},
    {"fsmount", EPERM}, {"fspick", EPERM}, {"mount_setattr", EPERM},
    // Kernels and modules.
    {"kexec_load", EPERM}, {"kexec_file_load", EPERM}, {"init_module", EPERM},
    {"finit_module", EPERM}, {"delete_module", EPERM}, {"reboot", EPERM},
    // The clock and the host name are the host's.
    {"settimeofday", EPERM}, {"clock_settime", EPERM}, {"clock_adjtime", EPERM}, {"adjtimex", EPERM},
};

// Namespace flags `clone` may not carry.
static const unsigned long namespace_flags[] = {
    CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWUTS, CLONE_NEWIPC,
    CLONE_NEWCGROUP,
#ifdef CLONE_NEWTIME
    CLONE_NEWTIME,
#endif
};

// Socket families a service may create (all others: EAFNOSUPPORT).
static const int unix_families[] = {AF_UNIX};
static const int inet_families[] = {AF_INET, AF_INET6, AF_NETLINK};

int rv_sandbox_filter_export(int fd, int allow_inet, const char **failed_step) {
    int rc;
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == NULL) {
        *failed_step = "seccomp_init";
        return -ENOMEM;
    }
#define STEP(name, call) do { rc = (call); if (rc < 0) { *failed_step = (name); goto out; } } while (0)
    for (size_t i = 0; i < sizeof denials / sizeof denials[0]; i++) {
        int number = seccomp_syscall_resolve_name(denials[i].name);
        if (number == __NR_SCMP_ERROR) continue;  // not a call of this architecture
        STEP(denials[i].name, seccomp_rule_add(ctx, SCMP_ACT_ERRNO(denials[i].error), number, 0));
    }
    for (size_t i = 0; i < sizeof namespace_flags / sizeof namespace_flags[0]; i++) {
        // On x86-64 the flags are clone's first argument.
        STEP("clone", seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                       SCMP_A0(SCMP_CMP_MASKED_EQ, namespace_flags[i], namespace_flags[i])));
    }
    // Any personality but Linux's own: READ_IMPLIES_EXEC and ADDR_NO_RANDOMIZE weaken the
    // process's own protections. (The query, personality(0xffffffff), is refused too: a filter
    // rule compares an argument once, and no common library asks.)
    STEP("personality", seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                                         SCMP_A0(SCMP_CMP_NE, (unsigned long)PER_LINUX)));
    // Typing into the host's terminal, and its console.
    STEP("ioctl(TIOCSTI)", seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                                            SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, (unsigned long)TIOCSTI)));
    STEP("ioctl(TIOCLINUX)", seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                                              SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, (unsigned long)TIOCLINUX)));
    // Sockets: an allow-list of families. libseccomp cannot say "not in this set" in one rule,
    // so every family number outside it is denied; the kernel itself refuses numbers from
    // AF_MAX on. Only the low 32 bits are compared: the kernel reads the family as an int, so
    // a value with high bits set must not slip past.
    for (int family = 0; family < AF_MAX; family++) {
        int allowed = 0;
        for (size_t i = 0; i < sizeof unix_families / sizeof unix_families[0]; i++) allowed |= family == unix_families[i];
        for (size_t i = 0; allow_inet && i < sizeof inet_families / sizeof inet_families[0]; i++) allowed |= family == inet_families[i];
        if (allowed) continue;
        STEP("socket", seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                                        SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffUL, (unsigned long)family)));
    }
    // With the network, netlink stays for NETLINK_ROUTE only (protocol 0): getaddrinfo and
    // getifaddrs ask it for the addresses; the other netlink families (audit, xfrm, …) are
    // kernel surface a service has no use for.
    if (allow_inet) {
        STEP("socket(AF_NETLINK)", seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 2,
                                                    SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffUL, (unsigned long)AF_NETLINK),
                                                    SCMP_A2(SCMP_CMP_NE, 0UL)));
    }
    STEP("seccomp_export_bpf", seccomp_export_bpf(ctx, fd));
    rc = 0;
out:
#undef STEP
    seccomp_release(ctx);
    return rc;
}

// SwiftPM's --sanitize gives C targets -fsanitize= too, so these see the build's sanitizers.
#ifndef __has_feature
#define __has_feature(x) 0
#endif

int rv_sanitizers(void) {
    int sanitizers = 0;
#if __has_feature(address_sanitizer) || defined(__SANITIZE_ADDRESS__)
    sanitizers |= RV_SANITIZER_ADDRESS;
#endif
#if __has_feature(thread_sanitizer) || defined(__SANITIZE_THREAD__)
    sanitizers |= RV_SANITIZER_THREAD;
#endif
    return sanitizers;
}
