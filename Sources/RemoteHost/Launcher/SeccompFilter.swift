import CSandboxFilter
import RemoteCore

/// The seccomp filter a sandboxed service runs under: built with libseccomp (`CSandboxFilter`)
/// once per process and network entitlement, and handed to bubblewrap as a sealed memfd
/// (`--seccomp FD`), which installs it just before it runs the service, as Flatpak does.
///
/// It denies, with an errno rather than a kill, what a service never needs and an attacker
/// would: the kernel keyrings (not namespaced: the host's session keyring would be readable),
/// new namespaces and `setns`, `ptrace` and other processes' memory, `perf_event_open`, `bpf`,
/// `userfaultfd`, `io_uring`, personality changes, `TIOCSTI`/`TIOCLINUX`, the mount family,
/// kexec and modules, and every socket family but `AF_UNIX` (and `AF_INET`/`AF_INET6` with the
/// network entitlement). docs/Manifest.md lists each call and its errno.
enum SeccompFilter {
    /// The filter's BPF program, or why it could not be built.
    static func program(network: Bool) -> Result<[UInt8], SystemCallError> {
        network ? withNetwork : withoutNetwork
    }

    private static let withoutNetwork = build(network: false)
    private static let withNetwork = build(network: true)

    /// A sealed memfd holding the program, for bubblewrap to read.
    static func memoryFile(network: Bool) throws(SystemCallError) -> MemoryFile {
        try MemoryFile.sealed(name: "remoteview-seccomp", contents: try program(network: network).get())
    }

    private static func build(network: Bool) -> Result<[UInt8], SystemCallError> {
        Result { () throws(SystemCallError) -> [UInt8] in
            let file = try MemoryFile(name: "remoteview-seccomp-build")
            var step: UnsafePointer<CChar>?
            let result = rv_sandbox_filter_export(file.fd.rawValue, network ? 1 : 0, &step)
            guard result == 0 else {
                throw SystemCallError(call: "libseccomp \(step.map { String(cString: $0) } ?? "?")", errno: -result)
            }
            return try file.read(count: try file.size)
        }
    }
}
