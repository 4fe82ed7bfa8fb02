import FoundationEssentials
import Glibc
import Logging
@testable import RemoteHost
import RemoteTestSupport
import Testing

/// An activity a root host installed, whose executable lives below a folder only root may enter
/// (a home of mode 0700, as `/root` is): issue 33, item 1. Its service runs as a uid of its own,
/// which cannot pass that folder, so the launcher copies the executable and the libraries beside
/// it into the sandbox (`--ro-bind-data`; bubblewrap 0.8.0's `--ro-bind-fd` resolves the
/// descriptor back to the path as that uid, and fails), at the same path, and nothing else of the
/// folder. An executable whose own mode keeps other users out is refused, naming it.
@Suite("Installed executables of a root host", .serialized)
struct InstalledExecutableTests {
    static let identifier = "com.example.installed-root"
    static let closedIdentifier = "com.example.installed-root-closed"

    /// `demo-share install MANIFEST` for the user whose data folder is `dataHome`, and no system
    /// folder.
    static func install(_ manifest: String, dataHome: String) throws -> (Int32, String) {
        let demo = testServiceExecutable.replacing("remoteview-test-service", with: "demo-share")
        return try runCommands([["/usr/bin/env", "XDG_DATA_HOME=\(dataHome)", "XDG_DATA_DIRS=\(dataHome)/no-system", demo, "install", manifest]])[0]
    }

    /// A folder `name` of `home` (mode 0755) holding a copy of the test service, mode `mode`, and
    /// its manifest, with the executable relative to it; returns the folder.
    static func application(_ name: String, in home: String, identifier: String, mode: mode_t) throws -> String {
        let folder = home + "/" + name
        try #require(mkdir(folder, 0o755) == 0 && chmod(folder, 0o755) == 0)
        let copied = try runCommands([["cp", testServiceExecutable, folder + "/remoteview-test-service"]])[0]
        try #require(copied.status == 0, "cp: \(copied.output)")
        try #require(chmod(folder + "/remoteview-test-service", mode) == 0)
        let manifest = """
            {"identifier": "\(identifier)", "executable": "remoteview-test-service", "arguments": ["serve", "\(identifier)"],
             "display": {"title": "Installed by root"}, "idleTimeout": 30}
            """
        try #require(FileManager.default.createFile(atPath: folder + "/service.json", contents: Data(manifest.utf8)))
        return folder
    }

    @Test("a root host's installed activity whose executable is below a folder of mode 0700: installed with its executable made absolute, launched as a uid of its own (not 0) from a copy of the executable and the libraries beside it, answering; nothing else of the folder is in the sandbox. An executable of mode 0700 is refused at once, naming its path and its mode, and install warns of it",
          .enabled(if: getuid() == 0, "needs root: only a root host runs its services as uids of their own"))
    func closedFolder() async throws {
        // A home as /root is: mkdtemp's mode 0700, owned by root.
        let home = try TemporaryFolder("remoteview-root-home")
        defer { LauncherTests.removeTree(home.path) }
        #expect(try Syscall.status(ofPath: home.path).st_mode & 0o777 == 0o700)
        let dataHome = home.path + "/.local/share"

        // The application: the service, a library beside it (its RUNPATH has $ORIGIN), a file
        // every user may read that is no library, a private one, and a folder beside them.
        let folder = try Self.application("app", in: home.path, identifier: Self.identifier, mode: 0o755)
        let executable = folder + "/remoteview-test-service", library = folder + "/libbeside.so"
        try #require(ELFRunPath.entries(of: executable).contains("$ORIGIN"), "the test service's RUNPATH names its own folder")
        try #require(FileManager.default.createFile(atPath: library, contents: Data("not really a library".utf8), attributes: [.posixPermissions: 0o644]))
        try #require(FileManager.default.createFile(atPath: folder + "/notes.txt", contents: Data("readable".utf8), attributes: [.posixPermissions: 0o644]))
        try #require(FileManager.default.createFile(atPath: folder + "/secret.txt", contents: Data("root's".utf8), attributes: [.posixPermissions: 0o600]))
        try #require(mkdir(home.path + "/other", 0o755) == 0)

        let (installed, said) = try Self.install(folder + "/service.json", dataHome: dataHome)
        let user = dataHome + "/remoteview/manifests/\(Self.identifier).json"
        #expect(installed == 0 && said.contains("installed \(Self.identifier) at \(user)") && !said.contains("warning"), "\(said)")
        let copy = try String(decoding: Data(contentsOf: URL(filePath: user)), as: UTF8.self)
        #expect(copy.contains("\"executable\" : \"\(executable)\""), "the executable is made absolute: \(copy)")

        // One whose executable's own mode keeps other users out.
        let closed = try Self.application("closed", in: home.path, identifier: Self.closedIdentifier, mode: 0o700)
        let (closedInstalled, warned) = try Self.install(closed + "/service.json", dataHome: dataHome)
        #expect(closedInstalled == 0 && warned.contains("warning: \(closed)/remoteview-test-service: its mode 700 does not give other users o+rx, so a host run by root, whose services run as uids of their own, refuses to launch it"),
                "\(warned)")

        // The installed folders as a host scans them: the user's, then a system folder that does not exist.
        let registry = ServiceRegistry(scanning: [], installed: ServiceRegistry.installedFolders(dataHome: dataHome, dataDirectories: [dataHome + "/no-system"]))
        #expect(registry.problems.isEmpty, "\(registry.problems)")
        #expect(registry.services[Self.identifier]?.executablePath == executable)

        let records = LogRecords()
        let logger = Logger(label: "tests") { _ in records.handler() }
        try await withoutLeaks(within: .seconds(30)) {
            try await withLauncher(registry: registry, configuration: fastLauncherConfiguration(logger)) { launcher in
                let connection = launcher.connection(to: Self.identifier)
                defer { withExtendedLifetime(connection) {} }
                #expect(try await connection.request(ServiceMessage(type: "echo", text: "hello")).text == "hello")

                // Its uid, as the kernel sees it: its own, never 0, with no supplementary groups.
                let process = try #require(await launcher.status().first { $0.identifier == Self.identifier }?.processes.first)
                let uid = try #require(process.userID, "a root host runs it as a uid of its own")
                let service = try #require(process.servicePid)
                let status = String(decoding: Syscall.readSmallFile("/proc/\(service)/status", limit: 1 << 16) ?? [], as: UTF8.self)
                func field(_ name: String) -> [UInt32] {
                    status.split(separator: "\n").first { $0.hasPrefix(name + ":") }?.dropFirst(name.count + 1)
                        .split(whereSeparator: \.isWhitespace).compactMap { UInt32($0) } ?? []
                }
                #expect(uid != 0 && ServiceUserPool.defaultIDs.contains(uid))
                #expect(field("Uid") == [uid, uid, uid, uid] && field("Gid") == [uid, uid, uid, uid] && field("Groups").isEmpty, "\(status)")
                // That uid could not pass the folder: the executable and the library were copied in.
                #expect(SandboxPaths.unreachableFolder(above: executable) == home.path)
                let copying = try await records.first("the launcher's note of the copies") { $0.message.hasPrefix("copying ") }
                #expect(copying.message == "copying \(executable), \(library) into the sandbox of \(Self.identifier): its uid \(uid), gid \(uid) cannot reach them where they are",
                        "\(copying.message)")

                // What the sandbox shows of the folder: the copies at their paths, read-only, and nothing else.
                let shown = [(executable, "exists"), (library, "exists"), (folder + "/notes.txt", "absent: No such file or directory"),
                             (folder + "/secret.txt", "absent: No such file or directory"), (folder + "/service.json", "absent: No such file or directory"),
                             (home.path + "/other", "absent: No such file or directory")]
                for (path, expected) in shown {
                    #expect(try await connection.request(ServiceMessage(type: "stat", text: path)).text == expected, "\(path)")
                }
                // The copies are read-only; the folders bubblewrap made for them are the sandbox's
                // own memory (its root is a tmpfs): a file written there never reaches the host.
                #expect(try await connection.request(ServiceMessage(type: "write-file", text: executable)).text?.hasPrefix("denied") == true)
                #expect(try await connection.request(ServiceMessage(type: "write-file", text: library)).text?.hasPrefix("denied") == true)
                _ = try await connection.request(ServiceMessage(type: "write-file", text: folder + "/written"))
                #expect(!Syscall.isRegularFile(folder + "/written"))

                // An executable of mode 0700: refused at once (no crash, no hang), naming it and its mode.
                let refused = try await withDeadline(.seconds(10), "the refusal") {
                    await requestError(launcher.connection(to: Self.closedIdentifier), ServiceMessage(type: "echo", text: "hello"))
                }
                #expect(refused?.code == .invalidated, "\(String(describing: refused))")
                #expect(refused?.reason.contains("\(closed)/remoteview-test-service cannot be run by the service's uid") == true
                        && refused?.reason.contains("(the host is root): its mode 700 does not give other users o+rx") == true,
                        "\(String(describing: refused))")
                // The other activity keeps answering.
                #expect(try await connection.request(ServiceMessage(type: "echo", text: "still")).text == "still")
            }
        }
    }
}
