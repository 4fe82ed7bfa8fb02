// CSandboxFilter: the seccomp filter every sandboxed service runs under, built with libseccomp
// and exported as classic BPF for bubblewrap's `--seccomp FD`.
#ifndef REMOTEVIEW_CSANDBOXFILTER_H
#define REMOTEVIEW_CSANDBOXFILTER_H

/// Writes the filter's BPF program to `fd` (from its current offset).
///
/// `allow_inet` non-zero lets the service create AF_INET and AF_INET6 sockets, and AF_NETLINK
/// ones of protocol NETLINK_ROUTE (the manifest's `sandbox.network`); otherwise only AF_UNIX
/// sockets can be made.
///
/// Returns 0, or a negative errno with `*failed_step` naming the libseccomp call that failed.
int rv_sandbox_filter_export(int fd, int allow_inet, const char *_Nullable *_Nonnull failed_step);

/// The sanitizers this build was compiled with: `RV_SANITIZER_ADDRESS`, `RV_SANITIZER_THREAD`
/// (0 in a normal build). Decided by the compiler's flags, never at run time, so that a release
/// build cannot be talked into the sanitizer-only behaviour of the launcher
/// (`SanitizerEnvironment`).
int rv_sanitizers(void);

#define RV_SANITIZER_ADDRESS 1
#define RV_SANITIZER_THREAD 2

#endif
