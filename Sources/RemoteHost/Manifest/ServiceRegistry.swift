import FoundationEssentials
import Glibc

/// What was wrong with one manifest: the file, the key (a dotted path such as
/// `sandbox.readOnlyPaths[1]`, or `nil` for the whole file) and why.
public struct ManifestError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The manifest file (or folder) at fault.
    public var file: String
    /// The key at fault, as a dotted path with indices.
    public var key: String?
    /// What is wrong with it.
    public var reason: String
    /// The identifier the file declares, when it got that far.
    public var identifier: String?

    public init(file: String, key: String? = nil, reason: String, identifier: String? = nil) {
        self.file = file
        self.key = key
        self.reason = reason
        self.identifier = identifier
    }

    public var description: String {
        "\(file): \(key.map { "\($0): " } ?? "")\(reason)"
    }
}

/// The services a host can launch: every `*.json` manifest in one or more folders, like
/// launchd's job folders.
///
/// Scanning never stops at a bad manifest: valid ones are listed in ``services``, every invalid
/// one in ``problems`` with its reason.
public struct ServiceRegistry: Sendable {
    /// The folders scanned, in order.
    public let folders: [String]
    /// Valid services by identifier.
    public private(set) var services: [String: ServiceManifest] = [:]
    /// Every manifest that could not be used, and every folder that could not be read.
    public private(set) var problems: [ManifestError] = []

    /// The largest manifest read, in bytes.
    public static let maxManifestSize = 64 * 1024

    /// Scans `folders` (not recursively) for `*.json` manifests.
    public init(scanning folders: [String]) {
        self.folders = folders
        for folder in folders {
            let names: [String]
            do {
                names = try Self.jsonFiles(in: folder)
            } catch {
                problems.append(error)
                continue
            }
            for name in names { add(file: folder + "/" + name) }
        }
    }

    /// A registry of already-loaded manifests (for hosts that build them in code).
    public init(manifests: [ServiceManifest]) {
        folders = []
        for manifest in manifests { insert(manifest) }
    }

    /// The valid service named `identifier`, or why there is none.
    public func lookup(_ identifier: String) -> Result<ServiceManifest, ManifestLookupError> {
        if let manifest = services[identifier] { return .success(manifest) }
        if let problem = problems.first(where: { $0.identifier == identifier }) { return .failure(.invalid(problem)) }
        return .failure(.unknown(identifier: identifier, folders: folders))
    }

    /// Valid services, sorted by identifier.
    public var sortedServices: [ServiceManifest] {
        services.values.sorted { $0.identifier < $1.identifier }
    }

    /// Reads and validates one manifest file, resolving its executable and icon.
    public static func load(file: String) throws(ManifestError) -> ServiceManifest {
        let data = try read(file)
        var manifest: ServiceManifest
        do {
            manifest = try JSONDecoder().decode(ServiceManifest.self, from: data)
        } catch let error as DecodingError {
            var problem = Self.describe(error, file: file)
            problem.identifier = declaredIdentifier(in: data)
            throw problem
        } catch {
            throw ManifestError(file: file, reason: "\(error)", identifier: declaredIdentifier(in: data))
        }
        let folder = directory(of: file)
        manifest.file = file
        manifest.executablePath = resolve(manifest.executable, against: folder)
        let fail = { (key: String, reason: String) in ManifestError(file: file, key: key, reason: reason, identifier: manifest.identifier) }
        var info = stat()
        guard stat(manifest.executablePath, &info) == 0 else {
            throw fail("executable", "\(manifest.executablePath) cannot be used: \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & S_IFMT == S_IFREG, access(manifest.executablePath, X_OK) == 0 else {
            throw fail("executable", "\(manifest.executablePath) is not an executable file")
        }
        if let icon = manifest.display.icon {
            let path = resolve(icon, against: folder)
            guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
                throw fail("display.icon", "\(path) is not a file")
            }
            manifest.iconPath = path
        }
        for (index, path) in manifest.sandbox.readOnlyPaths.enumerated() where stat(path, &info) != 0 {
            throw fail("sandbox.readOnlyPaths[\(index)]", "\(path) cannot be bound: \(String(cString: strerror(errno)))")
        }
        return manifest
    }

    // MARK: private

    private mutating func add(file: String) {
        do {
            insert(try Self.load(file: file), from: file)
        } catch {
            problems.append(error)
        }
    }

    private mutating func insert(_ manifest: ServiceManifest, from file: String? = nil) {
        if let existing = services[manifest.identifier] {
            problems.append(ManifestError(file: file ?? manifest.file, key: "identifier",
                                          reason: "\"\(manifest.identifier)\" is already declared by \(existing.file); this one is ignored"))
            return
        }
        services[manifest.identifier] = manifest
    }

    private static func jsonFiles(in folder: String) throws(ManifestError) -> [String] {
        guard let directory = opendir(folder) else {
            throw ManifestError(file: folder, reason: "cannot read the manifest folder: \(String(cString: strerror(errno)))")
        }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name.hasSuffix(".json") && !name.hasPrefix(".") { names.append(name) }
        }
        return names.sorted()
    }

    private static func read(_ file: String) throws(ManifestError) -> Data {
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw ManifestError(file: file, reason: "cannot open: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = Glibc.read(fd, &chunk, chunk.count)
            if count < 0 {
                if errno == EINTR { continue }
                throw ManifestError(file: file, reason: "cannot read: \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            bytes += chunk[..<count]
            guard bytes.count <= maxManifestSize else {
                throw ManifestError(file: file, reason: "larger than \(maxManifestSize) bytes")
            }
        }
        return Data(bytes)
    }

    /// The `identifier` a file declares, read leniently, so an invalid manifest can still be
    /// reported against the service it meant to declare.
    private static func declaredIdentifier(in data: Data) -> String? {
        struct Declared: Decodable { var identifier: String }
        return try? JSONDecoder().decode(Declared.self, from: data).identifier
    }

    private static func describe(_ error: DecodingError, file: String) -> ManifestError {
        func path(_ codingPath: [any CodingKey]) -> String? {
            var result = ""
            for key in codingPath {
                if let index = key.intValue { result += "[\(index)]" } else { result += (result.isEmpty ? "" : ".") + key.stringValue }
            }
            return result.isEmpty ? nil : result
        }
        switch error {
        case .keyNotFound(let key, let context):
            return ManifestError(file: file, key: path(context.codingPath + [key]), reason: "missing (required)")
        case .typeMismatch(let type, let context):
            return ManifestError(file: file, key: path(context.codingPath), reason: "expected \(typeName(type))")
        case .valueNotFound(let type, let context):
            return ManifestError(file: file, key: path(context.codingPath), reason: "expected \(typeName(type)), found null")
        case .dataCorrupted(let context):
            if context.codingPath.isEmpty {
                return ManifestError(file: file, reason: "not valid JSON: \(context.underlyingError.map { "\($0)" } ?? context.debugDescription)")
            }
            return ManifestError(file: file, key: path(context.codingPath), reason: context.debugDescription)
        @unknown default:
            return ManifestError(file: file, reason: "\(error)")
        }
    }

    private static func typeName(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "true or false"
        case is Int.Type: "an integer"
        case is Double.Type: "a number"
        case is [String].Type: "an array of strings"
        default: "\(type)".hasPrefix("Array") ? "an array" : "an object"
        }
    }

    private static func directory(of file: String) -> String {
        guard let slash = file.lastIndex(of: "/") else { return "." }
        return slash == file.startIndex ? "/" : String(file[..<slash])
    }

    /// `path` made absolute against `folder` (and the working directory) with `.` and `..` removed.
    private static func resolve(_ path: String, against folder: String) -> String {
        var joined = path.hasPrefix("/") ? path : folder + "/" + path
        if !joined.hasPrefix("/"), let cwd = getcwd(nil, 0) {
            joined = String(cString: cwd) + "/" + joined
            free(cwd)
        }
        var parts: [Substring] = []
        for part in joined.split(separator: "/") where part != "." {
            if part == ".." { _ = parts.popLast() } else { parts.append(part) }
        }
        return "/" + parts.joined(separator: "/")
    }
}

/// Why ``ServiceRegistry/lookup(_:)`` found no usable service.
public enum ManifestLookupError: Error, Sendable, Hashable, CustomStringConvertible {
    /// No manifest declares the identifier.
    case unknown(identifier: String, folders: [String])
    /// The manifest declaring it is invalid.
    case invalid(ManifestError)

    public var description: String {
        switch self {
        case .unknown(let identifier, let folders):
            "no service \"\(identifier)\" is registered (manifest folders: \(folders.isEmpty ? "none" : folders.joined(separator: ", ")))"
        case .invalid(let problem):
            "the manifest of \"\(problem.identifier ?? "?")\" is invalid: \(problem)"
        }
    }
}
