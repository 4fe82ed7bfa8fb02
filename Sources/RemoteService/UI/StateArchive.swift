/// A small archive for a view controller's restorable state, without Foundation: values
/// written in order, read back in the same order (``ViewController/encodeRestorableState()``,
/// ``ViewController/restoreState(from:)``).
///
/// ```swift
/// override func encodeRestorableState() -> [UInt8]? {
///     var archive = StateArchive()
///     archive.append(field.text)
///     archive.append(field.selection.lowerBound)
///     return archive.bytes
/// }
///
/// override func restoreState(from state: [UInt8]) {
///     var reader = StateArchive.Reader(state)
///     guard let text = reader.string(), let caret = reader.int() else { return }
///     field.text = text
///     let position = min(max(caret, 0), text.count)
///     field.selection = position..<position
/// }
/// ```
///
/// Integers are 8 bytes, little-endian; strings and byte arrays are a 4-byte length, then the
/// bytes. A reader returns `nil` for a value that is not there or does not fit, and for every
/// value after it: a state from another version of the service is ignored, not trusted.
public struct StateArchive: Sendable {
    /// What was written.
    public private(set) var bytes: [UInt8] = []

    public init() {}

    /// Appends an integer.
    public mutating func append(_ value: Int) {
        withUnsafeBytes(of: Int64(value).littleEndian) { bytes.append(contentsOf: $0) }
    }

    /// Appends a Boolean.
    public mutating func append(_ value: Bool) {
        bytes.append(value ? 1 : 0)
    }

    /// Appends a string (its UTF-8).
    public mutating func append(_ value: String) {
        append(bytes: Array(value.utf8))
    }

    /// Appends bytes.
    public mutating func append(bytes value: [UInt8]) {
        withUnsafeBytes(of: UInt32(truncatingIfNeeded: value.count).littleEndian) { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: value)
    }

    /// Reads an archive's values in the order they were written.
    public struct Reader: Sendable {
        private let archive: [UInt8]
        private var offset = 0
        private var failed = false

        public init(_ bytes: [UInt8]) {
            archive = bytes
        }

        /// Whether every value was read: nothing is left, and nothing failed.
        public var isAtEnd: Bool { !failed && offset == archive.count }

        private mutating func take(_ count: Int) -> ArraySlice<UInt8>? {
            guard !failed, count >= 0, archive.count - offset >= count else {
                failed = true
                return nil
            }
            defer { offset += count }
            return archive[offset..<(offset + count)]
        }

        /// The next integer.
        public mutating func int() -> Int? {
            guard let slice = take(8) else { return nil }
            let value = slice.reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            return Int(truncatingIfNeeded: Int64(bitPattern: value))
        }

        /// The next Boolean.
        public mutating func bool() -> Bool? {
            guard let slice = take(1) else { return nil }
            switch slice.first {
            case 0: return false
            case 1: return true
            default:
                failed = true
                return nil
            }
        }

        /// The next string; `nil` when it is not valid UTF-8.
        public mutating func string() -> String? {
            guard let value = self.bytes() else { return nil }
            guard let string = String(validating: value, as: UTF8.self) else {
                failed = true
                return nil
            }
            return string
        }

        /// The next bytes.
        public mutating func bytes() -> [UInt8]? {
            guard let header = take(4) else { return nil }
            let count = header.reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            return take(Int(count)).map(Array.init)
        }
    }
}
