import CRemoteViewLinux
import Glibc

/// How much memory a process uses, for leak checks and diagnostics: what a soak test compares
/// over many connections, and what a service can report about itself.
///
/// ```swift
/// let before = MemoryUsage.current()
/// // … 10,000 connections …
/// let grown = MemoryUsage.current().heapBytes - before.heapBytes
/// ```
///
/// The heap figure is exact and moves only with allocations, so it shows a leak of a few bytes
/// per operation within a few hundred operations; the resident figure also moves with the
/// allocator's caching and the kernel's paging, and needs many more.
public struct MemoryUsage: Sendable, Hashable, Codable, CustomStringConvertible {
    /// Resident memory (the resident set size, `/proc/PID/statm`), in bytes.
    public var residentBytes: UInt64
    /// The bytes `malloc` has handed out and not had back, in its arenas and in chunks mapped
    /// on their own (glibc's `mallinfo2()`: `uordblks + hblkhd`), in bytes; `nil` when measured
    /// from outside the process, which cannot see it.
    public var heapBytes: UInt64?

    /// A measurement of the figures.
    public init(residentBytes: UInt64, heapBytes: UInt64?) {
        self.residentBytes = residentBytes
        self.heapBytes = heapBytes
    }

    /// This process's memory now.
    public static func current() -> MemoryUsage {
        MemoryUsage(residentBytes: Syscall.residentBytes(of: Syscall.processID) ?? 0, heapBytes: Syscall.heapInUse())
    }

    /// The resident memory of process `pid` (no heap figure: only a process can see its own),
    /// or `nil` once it is gone.
    public static func of(pid: Int32) -> MemoryUsage? {
        Syscall.residentBytes(of: pid).map { MemoryUsage(residentBytes: $0, heapBytes: nil) }
    }

    /// `"RSS 12.3 MiB, heap 4.5 MiB"`.
    public var description: String {
        func mebibytes(_ bytes: UInt64) -> String {
            let tenths = (bytes * 10 + 524_288) / 1_048_576
            return "\(tenths / 10).\(tenths % 10) MiB"
        }
        return "RSS \(mebibytes(residentBytes))" + (heapBytes.map { ", heap \(mebibytes($0))" } ?? "")
    }
}

extension Syscall {
    /// `mallinfo2()`: the bytes `malloc` has handed out and not had back (`uordblks + hblkhd`).
    package static func heapInUse() -> UInt64 {
        var arenas = 0, mapped = 0
        rv_heap_in_use(&arenas, &mapped)
        return UInt64(arenas) + UInt64(mapped)
    }

    /// The resident set size of process `pid` in bytes (the second field of `/proc/PID/statm`,
    /// in pages), or `nil` once it is gone.
    package static func residentBytes(of pid: Int32) -> UInt64? {
        guard let statm = readSmallFile("/proc/\(pid)/statm") else { return nil }
        let fields = statm.split(separator: UInt8(ascii: " "))
        guard fields.count > 1, let pages = UInt64(String(decoding: fields[1], as: UTF8.self)) else { return nil }
        return pages * UInt64(pageSize)
    }
}
