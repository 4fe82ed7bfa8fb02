import RemoteCore

/// What the kernel's Landlock offers the launcher. Landlock is the Linux security module with
/// which a process restricts itself and everything it runs, without privileges (like
/// OpenBSD's `pledge` and `unveil`).
///
/// The launcher uses one of its scopes: a service's process keeps to the abstract-socket scope
/// (`LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET`) before it runs bubblewrap, so nothing in the sandbox
/// can connect to an abstract Unix socket (`@name`) the host's processes made, such as X11's or
/// the session bus's. A service entitled to the network shares the host's network namespace,
/// where those sockets live; without the scope it could reach them.
public enum Landlock {
    /// The kernel's Landlock ABI version, 0 without Landlock (or with it off at boot).
    public static let abi: Int = Syscall.landlockABI

    /// Whether the kernel has the abstract-socket scope: ABI 6 (Linux 6.12) or later.
    public static var scopesAbstractSockets: Bool { abi >= 6 }
}
