@_exported import RawPacket
import RemoteCore

extension Connection.Configuration {
    /// A host side for connection tests.
    public static let testHost = Connection.Configuration(role: .host, identifier: "com.example.host")
    /// A service side for connection tests (it says it can echo).
    public static let testService = Connection.Configuration(role: .service, identifier: "com.example.service", capabilities: ["echo"])
}
