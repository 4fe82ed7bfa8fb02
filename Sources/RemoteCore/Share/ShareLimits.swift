/// The bounds of a share: how many items, how large, how long their names and texts may be.
/// Both sides enforce them on what they receive and check them on what they send
/// (`docs/Protocol.md`, "Share").
public enum ShareLimits {
    /// The most items one share request or one completion carries (each file item's memfd
    /// rides on the same packet, and a packet carries at most ``WireLimits/maxAttachments`` fds).
    public static let maxItems = WireLimits.maxAttachments
    /// The longest MIME type, in bytes (RFC 6838: 127 for the type and the subtype each).
    public static let maxContentTypeLength = 255
    /// The longest inline text item, in bytes of UTF-8.
    public static let maxTextBytes = 32_768
    /// The longest URL item, in bytes.
    public static let maxURLBytes = 4_096
    /// The longest file name of a file item, in bytes.
    public static let maxFileNameBytes = 255
    /// The largest file item, in bytes.
    public static let maxFileBytes = 256 * 1024 * 1024
    /// The longest activity title, in bytes.
    public static let maxTitleBytes = 200
    /// The longest activity subtitle, in bytes.
    public static let maxSubtitleBytes = 400
    /// The longest failure or cancellation message of a completion, in bytes.
    public static let maxMessageBytes = 4_096
    /// How long an ended share keeps its items (their sealed memfds) so that it can be run
    /// again with them (`ShareSession.retry()`): 10 minutes, then they are let go.
    public static let retryRetention: Duration = .seconds(600)
}

/// MIME types as items and activation rules carry them (`text/plain`, `image/png`; rules also
/// `image/*`).
public enum MIMEType {
    /// Whether `type` is a MIME type without parameters: `type/subtype`, each 1…127 characters
    /// of RFC 6838's restricted names (letters, digits and `!#$&-^_.+`, starting with a letter
    /// or digit), at most ``ShareLimits/maxContentTypeLength`` bytes. With `allowingWildcard`,
    /// `type/*` too.
    public static func isValid(_ type: String, allowingWildcard: Bool = false) -> Bool {
        let utf8 = Array(type.utf8)
        guard utf8.count <= ShareLimits.maxContentTypeLength, let slash = utf8.firstIndex(of: UInt8(ascii: "/")) else { return false }
        let major = utf8[..<slash], minor = utf8[(slash + 1)...]
        guard isRestrictedName(major) else { return false }
        if allowingWildcard && minor.elementsEqual([UInt8(ascii: "*")]) { return true }
        return isRestrictedName(minor)
    }

    /// `type` in lower case: MIME types compare without regard to case.
    public static func normalized(_ type: String) -> String {
        String(decoding: type.utf8.map { (0x41...0x5A).contains($0) ? $0 + 0x20 : $0 }, as: UTF8.self)
    }

    private static func isRestrictedName(_ bytes: ArraySlice<UInt8>) -> Bool {
        guard let first = bytes.first, bytes.count <= 127, isAlphanumeric(first) else { return false }
        return bytes.allSatisfy { isAlphanumeric($0) || "!#$&-^_.+".utf8.contains($0) }
    }

    private static func isAlphanumeric(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
    }
}
