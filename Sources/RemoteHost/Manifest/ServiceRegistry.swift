import FoundationEssentials
import Glibc
import RemoteCore

/// What was wrong with one manifest: the file, the key (a dotted path such as
/// `sandbox.readOnlyPaths[1]`, or `nil` for the whole file) and why.
///
/// What the manifest wrote reaches its words escaped (`String.escapedForTerminal()`),
/// so an error can be printed or logged as it is: ``reason`` is escaped when the error is made,
/// ``key`` names keys beyond ASCII as `\u{…}`, and ``description`` escapes the file's name too
/// (a file name may hold controls).
public struct ManifestError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The manifest file (or folder) at fault, as its path was given (not escaped).
    public var file: String
    /// The key at fault, as a dotted path with indices.
    public var key: String?
    /// What is wrong with it.
    public var reason: String
    /// The identifier the file declares, when it got that far (as written: not escaped).
    public var identifier: String?

    /// - Parameters:
    ///   - file: The manifest file (or folder).
    ///   - key: The key at fault, as a dotted path (`nil`: the whole file).
    ///   - reason: What is wrong; escaped for the terminal here.
    ///   - identifier: The identifier the file declares, if known.
    public init(file: String, key: String? = nil, reason: String, identifier: String? = nil) {
        self.file = file
        self.key = key?.escapedForTerminal(asciiOnly: true)
        self.reason = reason.escapedForTerminal()
        self.identifier = identifier
    }

    /// `FILE: KEY: REASON`, escaped for the terminal.
    public var description: String {
        "\(file): \(key.map { "\($0): " } ?? "")\(reason)".escapedForTerminal()
    }
}

/// The services a host can launch: every `*.json` manifest in one or more folders, like
/// launchd's job folders.
///
/// Scanning never stops at a bad manifest: valid ones are listed in ``services``, every invalid
/// one in ``problems`` with its reason, and what a valid one was loaded without (its icon) in
/// ``warnings``.
public struct ServiceRegistry: Sendable {
    /// The folders scanned, in order.
    public let folders: [String]
    /// Valid services by identifier.
    public private(set) var services: [String: ServiceManifest] = [:]
    /// Every manifest that could not be used, and every folder that could not be read.
    public private(set) var problems: [ManifestError] = []
    /// What valid manifests were loaded without: an icon that is not a small PNG inside the
    /// manifest's folder or an icon folder (``ServiceManifest/Icon``), with the reason.
    public private(set) var warnings: [ManifestError] = []

    /// The largest manifest read, in bytes.
    public static let maxManifestSize = 64 * 1024

    /// The deepest nesting of arrays and objects a manifest may have: 16 (a manifest needs 4,
    /// `activation.contentTypes[0]`). Checked before decoding, so that deeper text is refused
    /// saying so (`JSONDecoder` refuses 513 levels with only "not valid JSON").
    public static let maxNestingDepth = 16

    /// Scans `folders` (not recursively) for `*.json` manifests.
    public init(scanning folders: [String]) {
        self.init(scanning: folders, installed: [])
    }

    /// Scans `folders`, then, with `includingInstalled`, the installed activities'
    /// ``installedFolders``: the user's, then the system's. An identifier declared again in a
    /// later folder is reported and ignored; a user's manifest that hides a system one this way
    /// is kept, marked (``ServiceManifest/shadows``), with a warning rather than a problem.
    public init(scanning folders: [String], includingInstalled: Bool) {
        self.init(scanning: folders, installed: includingInstalled ? Self.installedFolders : [])
    }

    /// Where installed activities' manifests are: `$XDG_DATA_HOME/remoteview/manifests`
    /// (`~/.local/share/remoteview/manifests` by default), the user's, first; then
    /// `remoteview/manifests` in each of `$XDG_DATA_DIRS` (`/usr/local/share:/usr/share` by
    /// default), the system's. (`$XDG_DATA_HOME/remoteview/services` is the services' data
    /// folders' root; nothing is installed there.)
    public static var installedFolders: [String] {
        installedFolders(dataHome: XDGBaseDirectories.dataHome(),
                         dataDirectories: XDGBaseDirectories.dataDirectories(XDGBaseDirectories.variable("XDG_DATA_DIRS")))
    }

    static func installedFolders(dataHome: String, dataDirectories: [String]) -> [String] {
        ([dataHome] + dataDirectories).map { $0 + "/remoteview/manifests" }
    }

    /// The user's installed folder, when scanned: its manifests shadow the system's.
    private let userFolder: String?

    init(scanning named: [String], installed: [String]) {
        folders = named + installed
        userFolder = installed.first
        for folder in folders {
            let names: [String]
            do {
                names = try Self.jsonFiles(in: folder)
            } catch {
                // An installed folder that does not exist is no problem: nothing is installed there.
                if !(installed.contains(folder) && (try? Syscall.linkStatus(ofPath: folder)) == nil) { problems.append(error) }
                continue
            }
            for name in names { add(file: folder + "/" + name) }
        }
    }

    /// A registry of already-loaded manifests (for hosts that build them in code).
    public init(manifests: [ServiceManifest]) {
        folders = []
        userFolder = nil
        for manifest in manifests { insert(manifest) }
    }

    /// The valid service named `identifier`, or why there is none.
    public func lookup(_ identifier: String) -> Result<ServiceManifest, ManifestLookupError> {
        if let manifest = services[identifier] { return .success(manifest) }
        if let problem = problems.first(where: { $0.identifier == identifier }) { return .failure(.invalid(problem)) }
        return .failure(.unknown(identifier: identifier, folders: folders))
    }

    /// This registry with remote services (``ServiceManifest/remote(identifier:title:subtitle:iconPNG:activation:gateway:warnings:)``,
    /// from gateways' catalogs, in the order the gateways are asked) next to its own, as a
    /// share sheet lists them: a local service wins a shared identifier, and the remote one is
    /// listed as `identifier@gateway`, which ``Launcher/connection(to:onRequest:onMessage:)``
    /// reaches; of two gateways offering one identifier, the first keeps the bare one.
    public func adding(remote manifests: [ServiceManifest]) -> ServiceRegistry {
        var registry = self
        for var manifest in manifests {
            guard let gateway = manifest.gateway else { continue }
            if registry.services[manifest.identifier] != nil || problems.contains(where: { $0.identifier == manifest.identifier }) {
                manifest.identifier += "@" + gateway
            }
            guard registry.services[manifest.identifier] == nil else { continue }
            registry.services[manifest.identifier] = manifest
        }
        return registry
    }

    /// Valid services, sorted by identifier.
    public var sortedServices: [ServiceManifest] {
        services.values.sorted { $0.identifier < $1.identifier }
    }

    /// Reads and validates one manifest file, resolving its executable and reading its icon;
    /// what it is loaded without (an icon left out) is dropped: ``load(file:warnings:)`` gives it.
    public static func load(file: String) throws(ManifestError) -> ServiceManifest {
        var warnings: [ManifestError] = []
        return try load(file: file, warnings: &warnings)
    }

    /// Reads and validates one manifest file, resolving its executable and reading its icon
    /// (``ServiceManifest/Icon``).
    ///
    /// - Parameters:
    ///   - file: The manifest's path.
    ///   - warnings: Gets what the manifest is loaded without: an icon that is left out, with
    ///     the reason (the key `display.icon`).
    public static func load(file: String, warnings: inout [ManifestError]) throws(ManifestError) -> ServiceManifest {
        let bytes = try read(file)
        // Before any JSON reader: the decoder and the duplicate-key scan must read one text.
        if let problem = ManifestText.encodingProblem(in: bytes) {
            throw ManifestError(file: file, reason: problem)
        }
        let depth = ManifestText.nestingDepth(of: bytes)
        guard depth <= maxNestingDepth else {
            throw ManifestError(file: file, reason: "nested \(depth) levels deep: at most \(maxNestingDepth) levels of arrays and objects (a manifest needs 4)")
        }
        let data = Data(bytes)
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
        if let finding = DuplicateKeyScanner.findings(in: bytes).first {
            let reason = switch finding.kind {
            case .duplicate: "appears twice in the same object (a key may appear once)"
            case .notASCII: ServiceManifest.notASCIIKeyReason
            }
            throw ManifestError(file: file, key: finding.keyPath, reason: reason, identifier: manifest.identifier)
        }
        let folder = directory(of: file)
        manifest.file = file
        manifest.executablePath = resolve(manifest.executable, against: folder)
        let fail = { (key: String, reason: String) in ManifestError(file: file, key: key, reason: reason, identifier: manifest.identifier) }
        let executable: stat
        do {
            executable = try Syscall.status(ofPath: manifest.executablePath)
        } catch {
            throw fail("executable", "\(manifest.executablePath) cannot be used: \(error.reason)")
        }
        guard executable.isRegularFile, (try? Syscall.checkAccess(manifest.executablePath, X_OK)) != nil else {
            throw fail("executable", "\(manifest.executablePath) is not an executable file")
        }
        for (index, path) in manifest.sandbox.readOnlyPaths.enumerated() {
            if case .failure(let refusal) = SandboxPaths.check(readOnly: path) {
                throw fail("sandbox.readOnlyPaths[\(index)]", "\(refusal)")
            }
        }
        // A type the shared MIME-info database does not know is legitimate (a private type), but
        // is more often a misspelling that no item will ever match: loaded, with a warning.
        let database = MIMEDatabase.system
        for (index, rule) in (manifest.activation?.contentTypes ?? []).enumerated() where database.listsTypes && !database.isKnown(rule.type) {
            let hint = database.suggestion(for: rule.type).map { " (did you mean \($0)?)" } ?? ""
            warnings.append(ManifestError(file: file, key: "activation.contentTypes[\(index)].type",
                                          reason: "\"\(rule.type)\" is not in the shared MIME-info database\(hint): the activity is offered only for items of exactly that type",
                                          identifier: manifest.identifier))
        }
        // Last: a manifest refused for something else gets no warning about its icon.
        if let icon = manifest.display.icon {
            do {
                manifest.icon = try ServiceManifest.Icon.read(icon, manifestFolder: resolve(folder, against: "."),
                                                              iconFolders: ServiceManifest.Icon.xdgIconFolders)
            } catch {
                warnings.append(ManifestError(file: file, key: "display.icon", reason: "\(error.reason): the service is listed without its icon",
                                              identifier: manifest.identifier))
            }
        }
        return manifest
    }

    // MARK: private

    private mutating func add(file: String) {
        var warnings: [ManifestError] = []
        do {
            if insert(try Self.load(file: file, warnings: &warnings), from: file) { self.warnings += warnings }
        } catch {
            problems.append(error)
        }
    }

    /// Adds `manifest` unless its identifier is taken (then reported); whether it was added.
    @discardableResult
    private mutating func insert(_ manifest: ServiceManifest, from file: String? = nil) -> Bool {
        if let existing = services[manifest.identifier] {
            let file = file ?? manifest.file
            if let userFolder, existing.file.hasPrefix(userFolder + "/"), !file.hasPrefix(userFolder + "/") {
                // The user's installed activity hides the system's: meant, and said.
                services[manifest.identifier]?.shadows.append(file)
                warnings.append(ManifestError(file: existing.file, key: "identifier",
                                              reason: "the user's \"\(manifest.identifier)\" shadows the one installed at \(file)", identifier: manifest.identifier))
                return false
            }
            problems.append(ManifestError(file: file, key: "identifier",
                                          reason: "\"\(manifest.identifier)\" is already declared by \(existing.file); this one is ignored"))
            return false
        }
        services[manifest.identifier] = manifest
        return true
    }

    private static func jsonFiles(in folder: String) throws(ManifestError) -> [String] {
        do {
            return try Syscall.directoryEntries(folder).filter { $0.hasSuffix(".json") && !$0.hasPrefix(".") }.sorted()
        } catch {
            throw ManifestError(file: folder, reason: "cannot read the manifest folder: \(error.reason)")
        }
    }

    /// The file's bytes. Opened without blocking and checked to be a regular file first, so a
    /// FIFO or a device where a manifest was expected cannot stall or flood the host.
    private static func read(_ file: String) throws(ManifestError) -> [UInt8] {
        // Looked at before it is opened: opening a device can have effects of its own.
        guard Syscall.isRegularFile(file) else {
            let reason: String
            do {
                _ = try Syscall.status(ofPath: file)
                reason = "not a regular file (a FIFO, device, socket or folder)"
            } catch where error.errno == ENOENT {
                // The name, or what a link names, does not exist.
                if let link = try? Syscall.linkStatus(ofPath: file), link.isSymbolicLink {
                    reason = "is a symbolic link to \(Syscall.symbolicLinkTarget(file) ?? "?"), which does not exist (a broken link)"
                } else {
                    reason = "does not exist"
                }
            } catch {
                reason = "cannot be read: \(error.reason)"
            }
            throw ManifestError(file: file, reason: reason)
        }
        let descriptor: OwnedFD
        do { descriptor = try Syscall.openForReading(file) } catch {
            throw ManifestError(file: file, reason: "cannot open: \(error.reason)")
        }
        // And again once open: the name may have been replaced in between.
        guard Syscall.isRegularFile(descriptor) else { throw ManifestError(file: file, reason: "not a regular file (a FIFO, device, socket or folder)") }
        do {
            return try Syscall.readToEnd(descriptor, limit: maxManifestSize, name: file)
        } catch where error.errno == EFBIG {
            throw ManifestError(file: file, reason: "larger than \(maxManifestSize) bytes")
        } catch {
            throw ManifestError(file: file, reason: "cannot read: \(error.reason)")
        }
    }

    /// The `identifier` a file declares, read leniently, so an invalid manifest can still be
    /// reported against the service it meant to declare.
    private static func declaredIdentifier(in data: Data) -> String? {
        struct Declared: Decodable { var identifier: String }
        return try? JSONDecoder().decode(Declared.self, from: data).identifier
    }

    static func describe(_ error: DecodingError, file: String) -> ManifestError {
        func path(_ codingPath: [any CodingKey]) -> String? {
            var result = ""
            for key in codingPath {
                if let index = key.intValue { result += "[\(index)]" } else { result += (result.isEmpty ? "" : ".") + key.stringValue }
            }
            // A key that is not ASCII is refused; shown escaped, so a look-alike shows as one.
            return result.isEmpty ? nil : result.escapedForTerminal(asciiOnly: true)
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
        if !joined.hasPrefix("/"), let cwd = try? Syscall.currentDirectory() {
            joined = cwd + "/" + joined
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
                .escapedForTerminal()
        case .invalid(let problem):
            "the manifest of \"\(problem.identifier?.escapedForTerminal() ?? "?")\" is invalid: \(problem)"
        }
    }
}
