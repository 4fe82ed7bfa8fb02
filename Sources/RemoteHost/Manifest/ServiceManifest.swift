import FoundationEssentials
import RemoteCore

/// What a service declares about itself: a JSON file beside its executable, like an XPC
/// service's `Info.plist` or a launchd job's plist. The schema is in `docs/Manifest.md`.
///
/// ```json
/// {
///   "identifier": "com.example.echo",
///   "executable": "echo-service",
///   "display": { "title": "Echo" },
///   "idleTimeout": 10
/// }
/// ```
///
/// Decoding checks every value and refuses unknown keys; a ``ManifestError`` names the file,
/// the key and what was wrong.
public struct ServiceManifest: Sendable, Hashable {
    /// Reverse-DNS name hosts ask for, e.g. `com.example.share.mail`.
    public var identifier: String
    /// The executable as written in the manifest: relative to the manifest's folder, or absolute.
    public var executable: String
    /// `argv[1...]`.
    public var arguments: [String]
    /// How a host presents the service.
    public var display: Display
    /// When a share sheet offers the service; `nil`: never (a plain XPC-style service).
    public var activation: Activation?
    /// What the sandbox allows.
    public var sandbox: Sandbox
    /// After this long with no outstanding request and no traffic, the service exits.
    public var idleTimeout: Duration
    /// One process per connection, or one shared by every connection of the host.
    public var instances: InstancePolicy
    /// Resource limits for the process.
    public var limits: Limits

    /// The manifest file this came from (set by the registry, like the paths below).
    public var file: String = ""
    /// The executable's absolute path.
    public var executablePath: String = ""
    /// The icon, read and checked when the registry loaded the manifest: `nil` when none is
    /// named, or when it was left out (``ServiceRegistry/warnings`` says why).
    public var icon: Icon?
    /// The manifests of the same identifier this one hides: installed system-wide, while this
    /// one is the user's (``ServiceRegistry/init(scanning:includingInstalled:)``). Empty otherwise.
    public internal(set) var shadows: [String] = []
    /// The gateway a remote service is reached through, by its name in the host's
    /// configuration; `nil` for a local one. Its ``executable`` is then empty: nothing runs
    /// here (``remote(identifier:title:subtitle:iconPNG:activation:gateway:warnings:)``).
    public internal(set) var gateway: String?

    /// Display metadata.
    public struct Display: Sendable, Hashable, Codable {
        /// Shown in share sheets and lists; 1…200 bytes.
        public var title: String
        /// A second line; at most 400 bytes.
        public var subtitle: String?
        /// A PNG, relative to the manifest's folder, or an absolute path inside it or inside an
        /// XDG icon folder (``ServiceManifest/Icon``).
        public var icon: String?
    }

    /// Which shared items activate the service, like an app extension's
    /// `NSExtensionActivationRule`: it is offered when every item can be given to a rule its
    /// MIME type conforms to with each rule's count within its bounds
    /// (``activationVerdict(for:database:)``; `docs/Manifest.md`, "Activation").
    public struct Activation: Sendable, Hashable, Codable {
        /// 1…32 rules.
        public var contentTypes: [ContentTypeRule]
    }

    /// A MIME type (e.g. `text/plain`, `image/png`) or a whole family (`image/*`), and how many
    /// of the shared items the service takes of it. An item counts for the rule when its type
    /// conforms to the rule's (``MIMEDatabase/conforms(_:to:)``).
    public struct ContentTypeRule: Sendable, Hashable, Codable {
        /// The MIME type, or `major/*`, in lower case.
        public var type: String
        /// The fewest items of this type: 0…16 (`ShareLimits.maxItems`); default 1.
        public var min: Int
        /// The most items of this type: `max(min, 1)`…16 (`ShareLimits.maxItems`); default `min`.
        public var max: Int
    }

    /// Sandbox entitlements.
    public struct Sandbox: Sendable, Hashable, Codable {
        /// Whether the service shares the host's network namespace (else it has loopback only).
        public var network: Bool
        /// Absolute host paths bound read-only at the same place inside the sandbox.
        public var readOnlyPaths: [String]
        /// Whether the service gets a writable folder of its own that outlives its processes,
        /// like a Flatpak app's `~/.var/app/ID`: `<dataRoot>/<identifier>` on the host
        /// (``Launcher/Configuration/dataRoot``), `/data` inside the sandbox, named by the
        /// `REMOTEVIEW_DATA_DIR` environment variable.
        public var dataFolder: Bool

        /// Entitlements; none by default.
        public init(network: Bool = false, readOnlyPaths: [String] = [], dataFolder: Bool = false) {
            self.network = network
            self.readOnlyPaths = readOnlyPaths
            self.dataFolder = dataFolder
        }
    }

    /// ``ServiceManifest/instances``.
    public enum InstancePolicy: String, Sendable, Hashable, Codable, CaseIterable {
        /// All of a host's connections share one process (each over its own socket).
        case shared
        /// Each connection gets its own process.
        case perConnection
    }

    /// Resource limits. `openFiles` and `cpuSeconds` are applied as rlimits at start; memory and
    /// processes are validated and reported, and enforced once the launcher uses cgroups.
    public struct Limits: Sendable, Hashable, Codable {
        /// Memory, MiB (16…65536). Validated; enforced with cgroups later.
        public var memoryMiB: Int
        /// Open files (16…65536), as `RLIMIT_NOFILE`.
        public var openFiles: Int
        /// Processes (1…4096). Validated; enforced with cgroups later.
        public var processes: Int
        /// CPU seconds (1…86400), as `RLIMIT_CPU`.
        public var cpuSeconds: Int
        /// The most a view's restorable state may hold, KiB (0…1024; 0: the host keeps no state
        /// for the service's views and does not announce `restorable-state` to it).
        public var restorableStateKiB: Int

        public init(memoryMiB: Int = 512, openFiles: Int = 256, processes: Int = 64, cpuSeconds: Int = 3600,
                    restorableStateKiB: Int = RestorableStateLimits.defaultKiB) {
            self.memoryMiB = memoryMiB
            self.openFiles = openFiles
            self.processes = processes
            self.cpuSeconds = cpuSeconds
            precondition((0...RestorableStateLimits.maxKiB).contains(restorableStateKiB),
                         "limits.restorableStateKiB must be 0…\(RestorableStateLimits.maxKiB), not \(restorableStateKiB)")
            self.restorableStateKiB = restorableStateKiB
        }

        /// ``restorableStateKiB`` in bytes.
        public var restorableStateBytes: Int { restorableStateKiB * 1024 }
    }
}

// MARK: decoding with validation

extension ServiceManifest: Decodable {
    enum CodingKeys: String, CodingKey, CaseIterable {
        case identifier, executable, arguments, display, activation, sandbox, idleTimeout, instances, limits
    }

    /// The shortest ``idleTimeout``: a sandboxed start takes about 10 ms here, and a service
    /// that times out before its first client reaches it would only crash-loop.
    public static let minimumIdleTimeout: Duration = .milliseconds(100)

    /// The default ``idleTimeout``.
    public static let defaultIdleTimeout: Duration = .seconds(30)

    public init(from decoder: any Decoder) throws {
        try decoder.rejectUnknownKeys(CodingKeys.self)
        let container = try decoder.container(keyedBy: CodingKeys.self)
        identifier = try container.decode(String.self, forKey: .identifier)
        try container.check(Self.isReverseDNS(identifier), .identifier,
                            "\"\(identifier.escapedForTerminal())\" is not a reverse-DNS identifier (two or more dot-separated labels of letters, digits and '-', at most \(WireLimits.maxIdentifierLength) bytes)")
        executable = try container.decode(String.self, forKey: .executable)
        try container.check(!executable.isEmpty && !executable.contains("\0"), .executable, "must be a non-empty path")
        arguments = try container.decodeIfPresent([String].self, forKey: .arguments) ?? []
        try container.check(arguments.count <= 64 && arguments.allSatisfy { $0.utf8.count <= 4096 && !$0.contains("\0") },
                            .arguments, "at most 64 arguments of at most 4096 bytes, without NUL")
        display = try container.decode(Display.self, forKey: .display)
        activation = try container.decodeIfPresent(Activation.self, forKey: .activation)
        sandbox = try container.decodeIfPresent(Sandbox.self, forKey: .sandbox) ?? Sandbox()
        if let seconds = try container.decodeIfPresent(Double.self, forKey: .idleTimeout) {
            try container.check(seconds >= Self.minimumIdleTimeout.inSeconds && seconds <= 86_400, .idleTimeout,
                                "\(seconds) is not a number of seconds in [\(Self.minimumIdleTimeout.inSeconds), 86400] (a shorter timeout ends a service before it can start)")
            idleTimeout = .milliseconds(Int64((seconds * 1000).rounded(.up)))
        } else {
            idleTimeout = Self.defaultIdleTimeout
        }
        if let written = try container.decodeIfPresent(String.self, forKey: .instances) {
            // Decoded as a string: JSONDecoder's own refusal of the enum names the Swift type.
            let names = InstancePolicy.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
            guard let policy = InstancePolicy(rawValue: written) else {
                throw DecodingError.dataCorruptedError(forKey: .instances, in: container,
                                                       debugDescription: "\"\(written.escapedForTerminal())\" is not one of \(names)")
            }
            instances = policy
        } else {
            instances = .shared
        }
        limits = try container.decodeIfPresent(Limits.self, forKey: .limits) ?? Limits()
    }

    /// Why a key beyond ASCII is refused.
    static let notASCIIKeyReason = "is not ASCII (every key of the schema is ASCII, and keys are compared byte for byte)"

    static func isReverseDNS(_ identifier: String) -> Bool {
        guard identifier.utf8.count <= WireLimits.maxIdentifierLength else { return false }
        let labels = identifier.split(separator: ".", omittingEmptySubsequences: false)
        return labels.count >= 2 && labels.allSatisfy { label in
            !label.isEmpty && label.first != "-" && label.last != "-"
                && label.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-") }
        }
    }
}

extension ServiceManifest.Display {
    enum CodingKeys: String, CodingKey, CaseIterable { case title, subtitle, icon }

    public init(from decoder: any Decoder) throws {
        try decoder.rejectUnknownKeys(CodingKeys.self)
        let container = try decoder.container(keyedBy: CodingKeys.self)
        title = try container.decode(String.self, forKey: .title)
        try container.check(!title.isEmpty && title.utf8.count <= 200, .title, "must be 1 to 200 bytes")
        try container.checkShownAsIs(title, .title)
        subtitle = try container.decodeIfPresent(String.self, forKey: .subtitle)
        try container.check((subtitle?.utf8.count ?? 0) <= 400, .subtitle, "must be at most 400 bytes")
        if let subtitle { try container.checkShownAsIs(subtitle, .subtitle) }
        icon = try container.decodeIfPresent(String.self, forKey: .icon)
        try container.check(icon.map { !$0.isEmpty && !$0.contains("\0") } ?? true, .icon, "must be a non-empty path")
    }
}

extension ServiceManifest.Activation {
    enum CodingKeys: String, CodingKey, CaseIterable { case contentTypes }

    public init(from decoder: any Decoder) throws {
        try decoder.rejectUnknownKeys(CodingKeys.self)
        let container = try decoder.container(keyedBy: CodingKeys.self)
        contentTypes = try container.decode([ServiceManifest.ContentTypeRule].self, forKey: .contentTypes)
        try container.check(!contentTypes.isEmpty && contentTypes.count <= 32, .contentTypes, "must list 1 to 32 rules")
    }
}

extension ServiceManifest.ContentTypeRule {
    enum CodingKeys: String, CodingKey, CaseIterable { case type, min, max }

    public init(from decoder: any Decoder) throws {
        try decoder.rejectUnknownKeys(CodingKeys.self)
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let written = try container.decode(String.self, forKey: .type)
        try container.check(MIMEType.isValid(written, allowingWildcard: true), .type,
                            "\"\(written.escapedForTerminal())\" is not a MIME type (type/subtype, or type/* for a whole family, e.g. image/*)")
        type = MIMEType.normalized(written)
        let most = ShareLimits.maxItems
        min = try container.decodeInteger(.min, in: 0...most, "a share carries at most \(most) items") ?? 1
        max = try container.decodeInteger(.max, in: Swift.max(min, 1)...most, "at least min and 1; a share carries at most \(most) items")
            ?? Swift.max(min, 1)
    }
}

extension ServiceManifest.Sandbox {
    enum CodingKeys: String, CodingKey, CaseIterable { case network, readOnlyPaths, dataFolder }

    public init(from decoder: any Decoder) throws {
        try decoder.rejectUnknownKeys(CodingKeys.self)
        let container = try decoder.container(keyedBy: CodingKeys.self)
        network = try container.decodeIfPresent(Bool.self, forKey: .network) ?? false
        dataFolder = try container.decodeIfPresent(Bool.self, forKey: .dataFolder) ?? false
        readOnlyPaths = try container.decodeIfPresent([String].self, forKey: .readOnlyPaths) ?? []
        for path in readOnlyPaths {
            let parts = path.split(separator: "/")
            try container.check(path.hasPrefix("/") && !parts.contains("..") && !parts.contains(".") && !path.contains("\0") && parts.count >= 1,
                                .readOnlyPaths, "\"\(path.escapedForTerminal())\" is not a normalised absolute path below /")
        }
    }
}

extension ServiceManifest.Limits {
    enum CodingKeys: String, CodingKey, CaseIterable { case memoryMiB, openFiles, processes, cpuSeconds, restorableStateKiB }

    public init(from decoder: any Decoder) throws {
        try decoder.rejectUnknownKeys(CodingKeys.self)
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let defaults = Self()
        memoryMiB = try container.decodeInteger(.memoryMiB, in: 16...65_536) ?? defaults.memoryMiB
        openFiles = try container.decodeInteger(.openFiles, in: 16...65_536) ?? defaults.openFiles
        processes = try container.decodeInteger(.processes, in: 1...4096) ?? defaults.processes
        cpuSeconds = try container.decodeInteger(.cpuSeconds, in: 1...86_400) ?? defaults.cpuSeconds
        restorableStateKiB = try container.decodeInteger(.restorableStateKiB, in: 0...RestorableStateLimits.maxKiB) ?? defaults.restorableStateKiB
    }
}

// MARK: helpers

private struct AnyKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

extension Decoder {
    /// Throws for the first key of this object that `Keys` does not name.
    fileprivate func rejectUnknownKeys<Keys: CodingKey & CaseIterable>(_ keys: Keys.Type) throws {
        let container = try self.container(keyedBy: AnyKey.self)
        // Every key of the schema is ASCII. Beyond it, Swift's String compares by canonical
        // equivalence ("\u{212A}", the Kelvin sign, is "K"), jq and Python byte for byte.
        for key in container.allKeys where !key.stringValue.unicodeScalars.allSatisfy(\.isASCII) {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath + [key], debugDescription: ServiceManifest.notASCIIKeyReason))
        }
        for key in container.allKeys.sorted(by: { $0.stringValue < $1.stringValue }) where Keys(stringValue: key.stringValue) == nil {
            let known = Keys.allCases.map(\.stringValue).joined(separator: ", ")
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath + [key],
                                                    debugDescription: "unknown key (this object takes \(known))"))
        }
    }
}

extension KeyedDecodingContainer {
    /// An integer value in `range`. (Decoding `Int` directly reports `1.5`, and any integer
    /// beyond `Int`, as "not valid JSON" for the whole file, without the key.) A whole number
    /// out of the range, however large, is said to be out of it, with `why` after it.
    fileprivate func decodeInteger(_ key: Key, in range: ClosedRange<Int>, _ why: String? = nil) throws -> Int? {
        guard let value = try decodeIfPresent(Double.self, forKey: key) else { return nil }
        try check(value.rounded() == value, key, "\(value) is not an integer")
        // Compared as doubles, so a value beyond Int is out of range too, not a trap.
        let written = abs(value) < 1e15 ? "\(Int(value))" : "\(value)"
        try check(value >= Double(range.lowerBound) && value <= Double(range.upperBound), key,
                  "\(written) is not in \(range.lowerBound)...\(range.upperBound)\(why.map { " (\($0))" } ?? "")")
        return Int(value)
    }

    /// Throws unless `text` (a title or a subtitle, which hosts show as they are) is free of what
    /// a terminal or a bidi renderer acts on: C0 and C1 controls, DEL, and the bidi embedding,
    /// override and isolate controls (`Unicode.Scalar.isEscapedForTerminal`). The marks
    /// LRM and RLM, and right-to-left text, are fine.
    fileprivate func checkShownAsIs(_ text: String, _ key: Key) throws {
        guard let scalar = text.unicodeScalars.first(where: \.isEscapedForTerminal) else { return }
        let hex = String(scalar.value, radix: 16, uppercase: true)
        let kind = switch scalar.value {
        case 0x202A...0x202E: "a bidi embedding or override control"
        case 0x2066...0x2069: "a bidi isolate control"
        case 0x7F: "DEL"
        default: "a control character"
        }
        try check(false, key, "holds U+\(String(repeating: "0", count: max(0, 4 - hex.count)))\(hex), \(kind): it is shown as it is, so it may hold no C0 or C1 control, DEL, or bidi embedding, override or isolate control (U+202A-U+202E, U+2066-U+2069); LRM and RLM are fine")
    }

    /// Throws a `DecodingError` naming `key` with `reason` unless `condition` holds.
    fileprivate func check(_ condition: Bool, _ key: Key, _ reason: @autoclosure () -> String) throws {
        if !condition { throw DecodingError.dataCorruptedError(forKey: key, in: self, debugDescription: reason()) }
    }
}

// MARK: encoding (installing a manifest writes it again)

extension ServiceManifest: Encodable {
    /// Writes the schema's keys (`docs/Manifest.md`) as the manifest holds them now: what
    /// `demo-share install` writes, with the executable made absolute. The registry's own
    /// fields (``file``, ``executablePath``, ``icon``, ``shadows``) are not part of it.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(identifier, forKey: .identifier)
        try container.encode(executable, forKey: .executable)
        if !arguments.isEmpty { try container.encode(arguments, forKey: .arguments) }
        try container.encode(display, forKey: .display)
        try container.encodeIfPresent(activation, forKey: .activation)
        try container.encode(sandbox, forKey: .sandbox)
        try container.encode(idleTimeout.inSeconds, forKey: .idleTimeout)
        try container.encode(instances.rawValue, forKey: .instances)
        try container.encode(limits, forKey: .limits)
    }
}

// MARK: remote services

extension ServiceManifest {
    /// A remote service's manifest, from what its gateway's catalog says, checked as a manifest
    /// file is: the identifier, the title and subtitle (the string rules), the activation rules,
    /// and the icon's bytes (a PNG of at most 1 MiB and 1024 × 1024 pixels, else it is left
    /// out, as a local manifest's would be, with a warning). Marked with `gateway`; nothing of
    /// it runs here.
    ///
    /// - Throws: ``ManifestError`` naming the gateway and the key, as a manifest file's would.
    public static func remote(identifier: String, title: String, subtitle: String?, iconPNG: [UInt8]?,
                              activation: Activation?, gateway: String, warnings: inout [ManifestError]) throws(ManifestError) -> ServiceManifest {
        struct Written: Encodable {
            var identifier: String
            var executable = "remote"
            var display: [String: String]
            var activation: Activation?
        }
        let source = "the catalog of gateway \(gateway)"
        var display = ["title": title]
        if let subtitle { display["subtitle"] = subtitle }
        var manifest: ServiceManifest
        do {
            let data = try JSONEncoder().encode(Written(identifier: identifier, display: display, activation: activation))
            manifest = try JSONDecoder().decode(ServiceManifest.self, from: data)
        } catch let error as DecodingError {
            var problem = ServiceRegistry.describe(error, file: source)
            problem.identifier = identifier
            throw problem
        } catch {
            throw ManifestError(file: source, reason: "\(error)", identifier: identifier)
        }
        manifest.executable = ""
        manifest.file = source
        manifest.gateway = gateway
        if let iconPNG {
            do throws(Icon.Refusal) {
                manifest.icon = try Icon.checking(iconPNG, what: "the icon of \(identifier) from gateway \(gateway)")
            } catch {
                warnings.append(ManifestError(file: source, key: "display.icon", reason: "\(error.reason); shown without it", identifier: identifier))
            }
        }
        return manifest
    }
}
