#include "CHostileCalls.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <stddef.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

// The result of a call that returns -1 and sets errno on failure.
static int result(long rc) { return rc < 0 ? errno : 0; }

// A clone that succeeded made a child: it leaves at once, and is reaped.
static int cloned(long pid) {
    if (pid == 0) _exit(0);
    if (pid < 0) return errno;
    int status;
    waitpid((pid_t)pid, &status, __WALL);
    return 0;
}

static int keyring_read(void) {
    // The session keyring's id, then its contents: the host's keys, without the filter.
    long id = syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0);
    if (id < 0) return errno;
    char buffer[256];
    return result(syscall(SYS_keyctl, KEYCTL_READ, id, buffer, sizeof buffer));
}

static int socket_of(int family, int type, int protocol) {
    int fd = socket(family, type, protocol);
    if (fd < 0) return errno;
    close(fd);
    return 0;
}

static int inet_connect(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return errno;
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons(53)};
    inet_pton(AF_INET, "1.1.1.1", &address.sin_addr);
    int rc = result(connect(fd, (struct sockaddr *)&address, sizeof address));
    close(fd);
    return rc;
}

static int perf_event(void) {
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.size = sizeof attr;
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    attr.exclude_kernel = 1;
    long fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
    if (fd < 0) return errno;
    close((int)fd);
    return 0;
}

static int io_uring(void) {
    unsigned char params[120];  // struct io_uring_params
    memset(params, 0, sizeof params);
    long fd = syscall(425 /* io_uring_setup */, 1, params);
    if (fd < 0) return errno;
    close((int)fd);
    return 0;
}

static int process_vm_read(void) {
    char mine[8], theirs[8];
    struct iovec local = {mine, sizeof mine}, remote = {theirs, sizeof theirs};
    return result(process_vm_readv(1, &local, 1, &remote, 1, 0));
}

static int clone3_newuser(void) {
    struct clone_args args;
    memset(&args, 0, sizeof args);
    args.flags = CLONE_NEWUSER;
    args.exit_signal = SIGCHLD;
    return cloned(syscall(SYS_clone3, &args, sizeof args));
}

static int create_file(const char *path) {
    int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) return errno;
    close(fd);
    unlink(path);
    return 0;
}

// Opens `path` for writing and closes it again: nothing is ever written (a test must never
// change the host's kernel settings), so success only says the sandbox let it open.
static int open_for_writing(const char *path) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    close(fd);
    return 0;
}

// Connects to the Unix socket named `name`: in the abstract namespace (`@name`, where a host's
// X11 or session bus listens) or at a path (the host's accessibility bus listens under its
// XDG_RUNTIME_DIR).
static int connect_unix(const char *name, int abstract) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    size_t length = strlen(name);
    if (length + 1 > sizeof address.sun_path) { close(fd); return ENAMETOOLONG; }
    // An abstract name follows a NUL (sun_path[0] == 0) and is as long as the address says.
    memcpy(address.sun_path + (abstract ? 1 : 0), name, length);
    socklen_t size = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + length);
    int rc = result(connect(fd, (struct sockaddr *)&address, size));
    close(fd);
    return rc;
}

int hostile_call(const char *name) {
#define IS(n) (strcmp(name, (n)) == 0)
    static const char abstract_prefix[] = "connect-abstract:", path_prefix[] = "connect-path:";
    if (strncmp(name, abstract_prefix, sizeof abstract_prefix - 1) == 0) return connect_unix(name + sizeof abstract_prefix - 1, 1);
    if (strncmp(name, path_prefix, sizeof path_prefix - 1) == 0) return connect_unix(name + sizeof path_prefix - 1, 0);
    if (IS("write-core-pattern")) return open_for_writing("/proc/sys/kernel/core_pattern");
    if (IS("write-randomize-va-space")) return open_for_writing("/proc/sys/kernel/randomize_va_space");
    if (IS("write-perf-event-paranoid")) return open_for_writing("/proc/sys/kernel/perf_event_paranoid");
    if (IS("write-overcommit-memory")) return open_for_writing("/proc/sys/vm/overcommit_memory");
    if (IS("write-suid-dumpable")) return open_for_writing("/proc/sys/fs/suid_dumpable");
    if (IS("write-irq-affinity")) return open_for_writing("/proc/irq/default_smp_affinity");
    if (IS("write-sysrq-trigger")) return open_for_writing("/proc/sysrq-trigger");
    if (IS("write-proc-bus")) return open_for_writing("/proc/bus/pci/00/00.0");
    if (IS("write-cgroup-procs")) return open_for_writing("/sys/fs/cgroup/cgroup.procs");
    if (IS("read-sys")) return result(access("/sys/kernel", F_OK));
    if (IS("keyring-read")) return keyring_read();
    if (IS("add-key")) return result(syscall(SYS_add_key, "user", "remoteview-hostile", "x", 1, KEY_SPEC_SESSION_KEYRING));
    if (IS("request-key")) return result(syscall(SYS_request_key, "user", "remoteview-hostile", NULL, KEY_SPEC_SESSION_KEYRING));
    if (IS("unshare-user")) return result(unshare(CLONE_NEWUSER));
    if (IS("unshare-mount")) return result(unshare(CLONE_NEWNS));
    if (IS("clone-newuser")) return cloned(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0));
    if (IS("clone-newnet")) return cloned(syscall(SYS_clone, CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0));
    if (IS("clone3-newuser")) return clone3_newuser();
    if (IS("setns")) {
        int fd = open("/proc/self/ns/user", O_RDONLY | O_CLOEXEC);
        if (fd < 0) return errno;
        int rc = result(setns(fd, 0));
        close(fd);
        return rc;
    }
    if (IS("mount")) return result(mount("tmpfs", "/tmp", "tmpfs", 0, NULL));
    if (IS("ptrace-pid1")) {
        int rc = result(ptrace(PTRACE_ATTACH, 1, NULL, NULL));
        if (rc == 0) ptrace(PTRACE_DETACH, 1, NULL, NULL);
        return rc;
    }
    if (IS("process-vm-readv")) return process_vm_read();
    if (IS("perf-event-open")) return perf_event();
    if (IS("io-uring-setup")) return io_uring();
    if (IS("bpf")) return result(syscall(SYS_bpf, 0, NULL, 0));
    if (IS("userfaultfd")) {
        long fd = syscall(SYS_userfaultfd, 0);
        if (fd < 0) return errno;
        close((int)fd);
        return 0;
    }
    if (IS("personality")) {
        int rc = result(personality(PER_LINUX | READ_IMPLIES_EXEC));
        if (rc == 0) personality(PER_LINUX);
        return rc;
    }
    if (IS("tiocsti")) {
        char byte = 'x';
        return result(ioctl(0, TIOCSTI, &byte));
    }
    if (IS("netlink")) return socket_of(AF_NETLINK, SOCK_RAW, 0);
    if (IS("netlink-audit")) return socket_of(AF_NETLINK, SOCK_RAW, 9 /* NETLINK_AUDIT */);
    if (IS("packet")) return socket_of(AF_PACKET, SOCK_RAW, 0);
    if (IS("inet-connect")) return inet_connect();
    if (IS("inet-socket")) return socket_of(AF_INET, SOCK_STREAM, 0);
    if (IS("init-module")) return result(syscall(SYS_init_module, NULL, 0, ""));
    if (IS("kexec-load")) return result(syscall(SYS_kexec_load, 0, 0, NULL, 0));
    if (IS("write-usr")) return create_file("/usr/remoteview-hostile");
    if (IS("write-data-unentitled")) return create_file("/data/remoteview-hostile");
    return -1;
#undef IS
}
