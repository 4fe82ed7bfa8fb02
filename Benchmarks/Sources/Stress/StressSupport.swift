import Glibc
import Logging
import RemoteHost

/// What every stress run needs: the service executable built beside this one, a folder of
/// manifests for it, and a launcher that logs only errors.
struct StressEnvironment {
    /// bench-service, from the same build folder as this executable.
    let serviceExecutable: String
    /// A fresh folder of manifests (removed by ``remove()``).
    let folder: String
    /// The identifiers of the manifests written into it.
    let identifiers: [String]

    /// The identifier of the shared service's manifest.
    static let shared = "com.example.stress.shared"
    /// The identifier of the manifest with a process per connection.
    static let perConnection = "com.example.stress.perconnection"

    /// bench-service's manifests: by default ``shared`` and ``perConnection``; or one per
    /// element of `services`, an identifier and its instance policy.
    init(services: [(identifier: String, policy: ServiceManifest.InstancePolicy)] = [(Self.shared, .shared), (Self.perConnection, .perConnection)]) throws {
        var path = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let length = readlink("/proc/self/exe", &path, path.count - 1)
        guard length > 0 else { throw StressError("cannot read /proc/self/exe") }
        let executable = String(decoding: path[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let buildFolder = String(executable[..<(executable.lastIndex(of: "/") ?? executable.endIndex)])
        serviceExecutable = buildFolder + "/bench-service"
        guard access(serviceExecutable, X_OK) == 0 else {
            throw StressError("bench-service is not at \(serviceExecutable): build it with swift build -c release --product remoteview-stress")
        }
        var template = Array("/tmp/remoteview-stress-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw StressError("mkdtemp failed: errno \(errno)") }
        folder = String(cString: made)
        identifiers = services.map(\.identifier)
        for (identifier, policy) in services {
            try write("\(identifier).json", """
                { "identifier": "\(identifier)", "executable": "\(serviceExecutable)", "arguments": ["\(identifier)"], "display": { "title": "Stress service" }, "idleTimeout": 3600, "instances": "\(policy.rawValue)" }
                """)
        }
    }

    private func write(_ name: String, _ contents: String) throws {
        let path = folder + "/" + name
        let fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw StressError("cannot write \(path): errno \(errno)") }
        defer { close(fd) }
        let bytes = Array(contents.utf8)
        guard bytes.withUnsafeBytes({ Glibc.write(fd, $0.baseAddress, $0.count) }) == bytes.count else {
            throw StressError("cannot write \(path): errno \(errno)")
        }
    }

    /// A launcher configuration for `sandboxed` or unsandboxed services that logs only errors.
    func configuration(sandboxed: Bool) -> Launcher.Configuration {
        var logger = Logger(label: "remoteview-stress")
        logger.logLevel = .error
        return Launcher.Configuration(hostIdentifier: "com.example.stress-host", sandbox: sandboxed ? .bubblewrap() : .unsandboxed,
                                      logger: logger)
    }

    /// Deletes the manifests and their folder.
    func remove() {
        for identifier in identifiers { unlink("\(folder)/\(identifier).json") }
        rmdir(folder)
    }
}

struct StressError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// `1.23 MiB`, `-45.6 KiB`, `789 B`.
func formatBytes(_ bytes: Int) -> String {
    let magnitude = abs(Double(bytes)), sign = bytes < 0 ? "-" : ""
    if magnitude >= 1_048_576 { return sign + String(format: "%.2f MiB", magnitude / 1_048_576) }
    if magnitude >= 1024 { return sign + String(format: "%.1f KiB", magnitude / 1024) }
    return "\(bytes) B"
}

/// `String(format:)` without Foundation, for one floating-point value.
extension String {
    init(format: String, _ value: Double) {
        var buffer = [CChar](repeating: 0, count: 64)
        _ = withVaList([value]) { vsnprintf(&buffer, buffer.count, format, $0) }
        self = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }
}
