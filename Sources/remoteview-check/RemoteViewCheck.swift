import ArgumentParser
import Foundation
import Logging
import RemoteCore
import RemoteHost

/// `remoteview-check MANIFEST`: starts the service as the launcher would (sandboxed), runs it
/// through the rules of `docs/Protocol.md` as a host, and some hostile packets a host may send
/// by mistake, and prints which rules it keeps. Like h2spec for HTTP/2 servers.
@main
struct RemoteViewCheck: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remoteview-check",
        abstract: "Runs a RemoteView service through the protocol's rules and says which it breaks.",
        discussion: """
            The service is started as the launcher starts it: under bubblewrap with the manifest's \
            sandbox, its socket at fd 3. It is started twice: once for the conversation (fd 3, \
            clients, hostile packets, its view and its share if it announces them, the exit when \
            fd 3 closes), and once with a 1 s idle timeout for the idle exit. Exits 0 when every \
            rule tried held, 1 when one failed, 2 when the manifest is unusable.
            """)

    @Argument(help: "The service's manifest (a JSON file, docs/Manifest.md).")
    var manifest: String

    @Flag(help: "Print the table as JSON: an array of {rule, result, seen, text}.")
    var json = false

    @Flag(help: "Start the service without bubblewrap (as SandboxPolicy.unsandboxed does).")
    var unsandboxed = false

    @Option(help: "The bubblewrap executable (default: found on PATH).")
    var bubblewrap: String?

    @Flag(help: "Show the service's own output (stdout and stderr lines).")
    var verbose = false

    @Option(name: .customLong("protocol"),
            help: ArgumentHelp("The highest protocol version the checker offers (1 or 2; default: 2, the latest). 1 checks the service as a version-1 host would.",
                               valueName: "version"))
    var protocolVersion: UInt32 = remoteViewLatestProtocolVersion

    func validate() throws {
        guard (remoteViewProtocolVersion...remoteViewLatestProtocolVersion).contains(protocolVersion) else {
            throw ValidationError("--protocol must be \(remoteViewProtocolVersion) to \(remoteViewLatestProtocolVersion), not \(protocolVersion)")
        }
    }

    func run() async throws {
        let loaded: ServiceManifest
        var warnings: [ManifestError] = []
        do {
            loaded = try ServiceRegistry.load(file: manifest, warnings: &warnings)
        } catch {
            FileHandle.standardError.write(Data("remoteview-check: \(error)\n".utf8))
            throw ExitCode(2)
        }
        for warning in warnings { FileHandle.standardError.write(Data("remoteview-check: warning: \(warning)\n".utf8)) }
        var logger = Logger(label: "remoteview-check")
        logger.logLevel = verbose ? .debug : .critical
        // The service's data folder, when its manifest asks for one: made for this check, and
        // removed with whatever the service wrote into it (a link in it is removed, not followed).
        let dataRoot = "/tmp/remoteview-check-\(Syscall.processID)"
        defer { try? FileManager.default.removeItem(atPath: dataRoot) }
        let checker = Checker(manifest: loaded, sandbox: unsandboxed ? .unsandboxed : .bubblewrap(path: bubblewrap),
                              dataRoot: dataRoot, logger: logger, offeredVersion: protocolVersion)
        let report = await checker.run()
        if json {
            print(try Self.json(report))
        } else {
            print(Self.table(report, manifest: loaded))
        }
        if report.failed { throw ExitCode(1) }
    }

    static func table(_ report: Report, manifest: ServiceManifest) -> String {
        let rows = report.rows
        let width = rows.map(\.rule.id.count).max() ?? 0
        var lines = ["\(manifest.identifier) (\(manifest.file.escapedForTerminal()))"]
        if let versions = report.protocolVersions {
            lines.append("protocol: the service speaks up to version \(versions.service), the checker offered up to \(versions.offered): checked under protocol \(versions.inForce)")
        }
        lines.append("")
        lines.append("RULE".padding(toLength: width, withPad: " ", startingAt: 0) + "  RESULT   SEEN")
        for (rule, entry) in rows {
            // What was seen quotes what the service said: escaped for the terminal.
            let seen = entry.verdict == .passed && entry.seen.isEmpty ? rule.text : entry.seen.escapedForTerminal()
            lines.append(rule.id.padding(toLength: width, withPad: " ", startingAt: 0) + "  "
                         + entry.verdict.rawValue.padding(toLength: 7, withPad: " ", startingAt: 0) + "  " + seen)
        }
        let counts = [Report.Verdict.passed, .warning, .failed, .skipped].map { verdict in
            "\(rows.filter { $0.entry.verdict == verdict }.count) \(verdict == .warning ? "warnings" : verdict.rawValue)"
        }
        lines.append("")
        lines.append(counts.joined(separator: ", "))
        // How each run's process ended, and what it last said on stderr.
        if !report.processEnds.isEmpty { lines.append("") }
        for (run, reason) in report.processEnds {
            lines.append("process (\(run) run): " + (reason?.report ?? "did not end by itself; the checker killed it"))
        }
        return lines.joined(separator: "\n")
    }

    struct Row: Encodable {
        let rule: String
        let result: String
        let seen: String
        let text: String
    }

    static func json(_ report: Report) throws -> String {
        // The rules, then how each run's process ended (result "ended").
        let rows = report.rows.map { Row(rule: $0.rule.id, result: $0.entry.verdict.rawValue, seen: $0.entry.seen, text: $0.rule.text) }
            + report.processEnds.map { run, reason in
                Row(rule: "process.\(run.replacing(" ", with: "-"))", result: "ended",
                    seen: reason.map { ([$0.description] + $0.standardErrorTail).joined(separator: "\n") } ?? "did not end by itself; the checker killed it",
                    text: "how the service's process of the \(run) run ended, and its last lines on stderr")
            }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return String(jsonForTerminal: try encoder.encode(rows))
    }
}
