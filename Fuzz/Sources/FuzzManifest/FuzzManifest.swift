// libFuzzer target: a service manifest's bytes (docs/Fuzzing.md).
//
// Each run puts the input in a memfd and loads it with the registry's public entry point,
// ServiceRegistry.load(file:) on /proc/self/fd/N: the size cap, JSON decoding with every check of
// docs/Manifest.md, and the error report naming the key. The executable a manifest names
// relative to its folder is then looked up in /proc/self/fd, so a manifest refused for a file it
// names is decoded again directly (JSONDecoder, as load does); what decodes has its activation
// rules matched against a few sets of item types, without a MIME database and with the system's.
import FoundationEssentials
import Glibc
import RemoteHost

nonisolated(unsafe) private var input: Int32 = -1
nonisolated(unsafe) private var path = ""
nonisolated(unsafe) private var database: MIMEDatabase?

private let itemSets: [[String]] = [
    ["text/plain"], ["image/png", "image/png"], ["text/uri-list", "image/jpeg", "text/x-csrc"],
    ["application/pdf"], Array(repeating: "image/png", count: 17), [], ["not a type"],
]

private func fail(_ message: String) -> Never {
    let line = Array("fuzz-manifest: \(message)\n".utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    abort()
}

@_cdecl("LLVMFuzzerInitialize")
public func initialize(_ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>) -> Int32 {
    do {
        let file = try MemoryFile(name: "manifest.json")
        input = file.takeDescriptor().release()
    } catch {
        fatalError("memfd: \(error)")
    }
    path = "/proc/self/fd/\(input)"
    database = MIMEDatabase.system
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> Int32 {
    if ftruncate(input, 0) != 0 || pwrite(input, data, size, 0) != size { fail("cannot fill the memfd: \(errno)") }
    let manifest: ServiceManifest
    do {
        manifest = try ServiceRegistry.load(file: path)
    } catch {
        if error.file != path || error.reason.isEmpty { fail("a manifest error without its file or reason: \(error)") }
        // What load checks after decoding: the files the manifest names (relative ones never exist
        // here). Those manifests decoded, so their activation rules are matched too.
        // (An icon is never a refusal: the manifest is loaded without it, with a warning.)
        guard let key = error.key, key == "executable" || key.hasPrefix("sandbox.readOnlyPaths["),
              let decoded = try? JSONDecoder().decode(ServiceManifest.self, from: Data(bytes: data, count: size)) else {
            return 0
        }
        manifest = decoded
    }
    for items in itemSets {
        _ = manifest.activationVerdict(for: items, database: MIMEDatabase(directories: []))
        _ = manifest.activationVerdict(for: items, database: database!)
    }
    return 0
}
