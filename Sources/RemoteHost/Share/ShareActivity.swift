import RemoteCore

/// An activity a share sheet offers: a share service as its manifest presents it, before
/// anything is launched (`UIActivity`'s title and image).
public struct ShareActivity: Sendable, Identifiable, CustomStringConvertible {
    /// The service's identifier.
    public var id: String { identifier }
    /// The service's identifier.
    public let identifier: String
    /// The manifest's `display.title`.
    public let title: String
    /// The manifest's `display.subtitle`.
    public let subtitle: String?
    /// The manifest's icon, decoded from the bytes the registry read and checked
    /// (``ServiceManifest/icon``; `nil` when it has none, or it is not a PNG Cairo reads).
    public let icon: RemoteImage?
    /// The whole manifest.
    public let manifest: ServiceManifest

    /// The activity of `manifest`, its icon decoded from the bytes read when the manifest was
    /// loaded (the file is not opened again).
    public init(manifest: ServiceManifest) {
        identifier = manifest.identifier
        title = manifest.display.title
        subtitle = manifest.display.subtitle
        icon = manifest.icon.flatMap { try? RemoteImage(pngData: $0.pngData) }
        self.manifest = manifest
    }

    /// `TITLE (IDENTIFIER)`, escaped for the terminal (`String.escapedForTerminal()`):
    /// a registry built in code (``ServiceRegistry/init(manifests:)``) checks no title.
    public var description: String { "\(title) (\(identifier))".escapedForTerminal() }
}
