import CSandboxFilter
import Glibc
import RemoteCore

/// What a service needs from the host's environment when the package is built with a sanitizer
/// (`swift build --sanitize=address|thread`, `scripts/sanitize`; docs/Fuzzing.md, "Sanitizers").
///
/// Decided at compile time (`rv_sanitizers()`): in a build without sanitizers there is nothing,
/// so a release host never passes its environment into a sandbox. In a sanitized build the
/// sanitizers' option variables reach the service, which is built with the same sanitizer (it is
/// a product of the same package): bubblewrap clears the environment (`--clearenv`), and an
/// unsandboxed service gets only the variables the launcher sets. The sandbox itself is not
/// changed, with one exception for AddressSanitizer, below.
struct SanitizerEnvironment: Equatable {
    /// The sanitizers' option variables for the service.
    var variables: [String: String] = [:]
    /// Suppression files the options name, for bubblewrap to bind read-only at the same path (a
    /// sanitizer that cannot read its suppressions file ends the process at start).
    var suppressionFiles: [String] = []

    /// The variables that are passed on.
    static let names = ["ASAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS", "UBSAN_OPTIONS"]

    /// For a service launched by this process; `nil` in a build without sanitizers.
    static func forService(sandboxed: Bool) -> SanitizerEnvironment? {
        make(sanitizers: rv_sanitizers(), sandboxed: sandboxed) { name in getenv(name).map { String(cString: $0) } }
    }

    /// - Parameters:
    ///   - sanitizers: `rv_sanitizers()`'s bits.
    ///   - value: The host's value of an environment variable.
    static func make(sanitizers: Int32, sandboxed: Bool, value: (String) -> String?) -> SanitizerEnvironment? {
        guard sanitizers != 0 else { return nil }
        var result = SanitizerEnvironment()
        for name in names { if let option = value(name), !option.isEmpty { result.variables[name] = option } }
        if sandboxed, sanitizers & RV_SANITIZER_ADDRESS != 0 {
            // LeakSanitizer's check at exit stops the process's threads with ptrace, which the
            // seccomp filter denies (SeccompFilter); it then fails with "LeakSanitizer has
            // encountered a fatal error" and exit code 1 instead of the service's own. So it is
            // off inside the sandbox (last, so it wins over the host's options); the service's
            // code is leak-checked in-process by the tests, and unsandboxed launches keep it.
            result.variables["ASAN_OPTIONS"] = (result.variables["ASAN_OPTIONS"].map { $0 + ":" } ?? "") + "detect_leaks=0"
        }
        if sandboxed {
            for options in result.variables.values.sorted() {
                for option in options.split(whereSeparator: { $0 == ":" || $0 == " " }) where option.hasPrefix("suppressions=") {
                    let path = String(option.dropFirst("suppressions=".count))
                    if path.hasPrefix("/"), !result.suppressionFiles.contains(path) { result.suppressionFiles.append(path) }
                }
            }
        }
        return result
    }
}
