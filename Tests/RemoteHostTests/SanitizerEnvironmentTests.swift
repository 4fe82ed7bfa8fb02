import CSandboxFilter
@testable import RemoteHost
import Testing

/// What a sanitized build passes into a service's environment and sandbox (scripts/sanitize), and
/// that a normal build passes nothing.
@Suite("Sanitizer environment")
struct SanitizerEnvironmentTests {
    static let host = ["ASAN_OPTIONS": "abort_on_error=0", "LSAN_OPTIONS": "suppressions=/src/scripts/lsan.supp",
                       "TSAN_OPTIONS": "suppressions=/src/scripts/tsan.supp halt_on_error=0", "HOME": "/home/u"]

    @Test("a build without sanitizers passes nothing; this build matches its compiler flags")
    func normalBuild() {
        #expect(SanitizerEnvironment.make(sanitizers: 0, sandboxed: true) { Self.host[$0] } == nil)
        #expect((SanitizerEnvironment.forService(sandboxed: true) == nil) == (rv_sanitizers() == 0))
    }

    @Test("AddressSanitizer: the options pass on; in the sandbox LeakSanitizer is off (ptrace is denied) and the suppression files are bound")
    func address() throws {
        let sandboxed = try #require(SanitizerEnvironment.make(sanitizers: Int32(RV_SANITIZER_ADDRESS), sandboxed: true) { Self.host[$0] })
        #expect(sandboxed.variables["ASAN_OPTIONS"] == "abort_on_error=0:detect_leaks=0")
        #expect(sandboxed.variables["LSAN_OPTIONS"] == Self.host["LSAN_OPTIONS"])
        #expect(sandboxed.variables["HOME"] == nil, "only the sanitizers' variables")
        #expect(sandboxed.suppressionFiles == ["/src/scripts/lsan.supp", "/src/scripts/tsan.supp"])
        let alone = try #require(SanitizerEnvironment.make(sanitizers: Int32(RV_SANITIZER_ADDRESS), sandboxed: true) { _ in nil })
        #expect(alone.variables == ["ASAN_OPTIONS": "detect_leaks=0"])
        let unsandboxed = try #require(SanitizerEnvironment.make(sanitizers: Int32(RV_SANITIZER_ADDRESS), sandboxed: false) { Self.host[$0] })
        #expect(unsandboxed.variables["ASAN_OPTIONS"] == "abort_on_error=0", "LeakSanitizer works outside the sandbox")
        #expect(unsandboxed.suppressionFiles.isEmpty)
    }

    @Test("ThreadSanitizer: the options pass on unchanged; the sandbox binds the suppressions read-only and sets them")
    func thread() throws {
        let sanitizers = try #require(SanitizerEnvironment.make(sanitizers: Int32(RV_SANITIZER_THREAD), sandboxed: true) { Self.host[$0] })
        #expect(sanitizers.variables["TSAN_OPTIONS"] == Self.host["TSAN_OPTIONS"])
        #expect(sanitizers.variables["ASAN_OPTIONS"] == Self.host["ASAN_OPTIONS"])
        let arguments = try BubblewrapCommand(bubblewrap: "/usr/bin/bwrap", manifest: try SandboxTests.manifest(), environment: ["LISTEN_FDS": "1"],
                                              sanitizers: sanitizers).arguments.joined(separator: " ")
        #expect(arguments.contains("--ro-bind-try /src/scripts/tsan.supp /src/scripts/tsan.supp"))
        #expect(arguments.contains("--setenv TSAN_OPTIONS suppressions=/src/scripts/tsan.supp halt_on_error=0"))
        #expect(arguments.contains("--setenv LISTEN_FDS 1"))
        #expect(arguments.contains("--clearenv"))
        #expect(!arguments.contains("HOME"))
    }
}
