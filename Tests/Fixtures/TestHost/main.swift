// A host process for the integration tests that must kill a host: launches one service from
// the manifests in argv[1], answers one request, prints the service's process tree, then waits
// to be killed.
import Glibc
import RemoteHost

guard CommandLine.arguments.count == 3 else {
    print("usage: remoteview-test-host MANIFEST-FOLDER IDENTIFIER")
    exit(64)
}
let registry = ServiceRegistry(scanning: [CommandLine.arguments[1]])
let identifier = CommandLine.arguments[2]
try await withLauncher(registry: registry) { launcher in
    let connection = launcher.connection(to: identifier)
    _ = try await connection.request(ServiceMessage(type: "echo", text: "hi"))
    // The whole tree: bubblewrap, the sandbox's pid 1 (when sandboxed), the service.
    let tree = await launcher.status().first { $0.identifier == identifier }?.processes.first.map { process in
        ChildProcess.processTree(of: process.pid)
    } ?? []
    let line = Array("service \(tree.map(String.init).joined(separator: " "))\n".utf8)
    _ = line.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
    while true { try await Task.sleep(for: .seconds(3600)) }
}
