// Interoperability with stock protoc (Debian's protobuf-compiler): what EnvelopeCodec encodes
// is a plain remoteview.Envelope any protobuf implementation reads, and the other way round.
import Foundation
import Glibc
@testable import RemoteCore
import Testing

// Swift Testing has an `Attachment` type of its own; here the word means a file descriptor.
private typealias Attachment = RemoteCore.Attachment

@Suite("protoc reads what EnvelopeCodec writes")
struct ProtocDecodeTests {
    /// An envelope and lines protoc's text format must show for it.
    struct Case: Sendable, CustomTestStringConvertible {
        let name: String
        let envelope: Envelope
        let expectedLines: [String]
        var testDescription: String { name }
    }

    static let cases = [
        Case(name: "handshake",
             envelope: Envelope(id: 1, body: .handshake(Handshake(role: .host, identifier: "com.example.test",
                                                                  capabilities: ["surfaces", "share"]))),
             expectedLines: ["id: 1", "handshake {", "protocol_version: 1", "role: PEER_ROLE_HOST",
                             #"identifier: "com.example.test""#, #"capabilities: "surfaces""#, #"capabilities: "share""#,
                             "max_packet_size: \(WireLimits.maxPacketSize)"]),
        Case(name: "request",
             envelope: Envelope(id: 42, body: .request(type: "echo", payload: Array("hello".utf8))),
             expectedLines: ["id: 42", "request {", #"type: "echo""#, #"payload: "hello""#]),
        Case(name: "failure",
             envelope: Envelope(id: 43, replyTo: 42, body: .failure(ServiceFailure(domain: "com.example.echo", code: -7,
                                                                                   message: "no"))),
             expectedLines: ["id: 43", "reply_to: 42", "failure {", #"domain: "com.example.echo""#, "code: -7",
                             #"message: "no""#]),
    ]

    @Test("protoc --decode shows every field of an envelope encoded in Swift", arguments: cases)
    func protocDecodes(_ testCase: Case) throws {
        let packet = try EnvelopeCodec.encode(testCase.envelope)
        let text = try Protoc.run(["--decode=remoteview.Envelope"], input: packet)
        let lines = Set(text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) })
        for expected in testCase.expectedLines {
            #expect(lines.contains(expected), "protoc output lacks \(expected):\n\(text)")
        }
    }

    @Test("fd_count of a message with attachments is visible to protoc")
    func protocSeesFDCount() throws {
        let attachments = try (0..<2).map { _ in Attachment(try MemoryFile(name: "protoc-test").takeDescriptor()) }
        let packet = try EnvelopeCodec.encode(Envelope(id: 5, body: .message(type: "tick", payload: []),
                                                       attachments: attachments))
        let text = try Protoc.run(["--decode=remoteview.Envelope"], input: packet)
        #expect(text.contains("fd_count: 2"), "\(text)")
        #expect(text.contains(#"type: "tick""#), "\(text)")
    }

    @Test("an envelope protoc encodes from text decodes in Swift")
    func swiftDecodesProtoc() throws {
        let text = #"id: 9 handshake { protocol_version: 1 role: PEER_ROLE_SERVICE identifier: "com.example.svc" max_packet_size: 4096 }"#
        let packet = try Protoc.runBinary(["--encode=remoteview.Envelope"], input: Array(text.utf8))
        let envelope = try packet.withUnsafeBytes { buffer in
            Result { () throws(RemoteError) in try EnvelopeCodec.decode(buffer, attachments: []) }
        }.get()
        #expect(envelope.id == 9)
        guard case .handshake(let handshake) = envelope.body else {
            Issue.record("decoded \(envelope.body.name), not a handshake")
            return
        }
        // No max_protocol_version: the peer speaks version 1 (as a peer written before the field does).
        #expect(handshake == Handshake(role: .service, identifier: "com.example.svc", maxPacketSize: 4_096, maxProtocolVersion: nil))
        #expect(handshake.highestVersion == 1)
    }
}

/// Runs /usr/bin/protoc against the repository's remoteview.proto.
private enum Protoc {
    static let path = "/usr/bin/protoc"
    /// Sources/CProto, found from this file: <repo>/Tests/RemoteCoreTests/ProtocDecodeTests.swift.
    static let protoDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources/CProto").path

    /// protoc's standard output as text.
    static func run(_ arguments: [String], input: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) throws -> String {
        String(decoding: try runBinary(arguments, input: input, sourceLocation: sourceLocation), as: UTF8.self)
    }

    /// Runs protoc with `arguments` plus the schema, `input` on stdin, and returns its standard
    /// output; fails the test unless protoc exits 0.
    static func runBinary(_ arguments: [String], input: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) throws -> [UInt8] {
        try #require(FileManager.default.isExecutableFile(atPath: path),
                     "\(path) not found: run scripts/bootstrap to install protobuf-compiler", sourceLocation: sourceLocation)
        try #require(FileManager.default.fileExists(atPath: protoDirectory + "/remoteview.proto"),
                     "no remoteview.proto in \(protoDirectory)", sourceLocation: sourceLocation)
        // If protoc exits before reading stdin, writing to the pipe must fail with EPIPE rather
        // than kill the whole test process.
        signal(SIGPIPE, SIG_IGN)

        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments + ["--proto_path=\(protoDirectory)", "remoteview.proto"]
        let stdin = Pipe(), stdout = Pipe(), stderr = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()

        // protoc reads all of stdin before it writes anything, so this order cannot deadlock:
        // write everything, close (EOF), drain stdout to its end, then stderr, then reap.
        try stdin.fileHandleForWriting.write(contentsOf: input)
        try stdin.fileHandleForWriting.close()
        let output = try stdout.fileHandleForReading.readToEnd() ?? Data()
        let errors = try stderr.fileHandleForReading.readToEnd() ?? Data()
        process.waitUntilExit()

        try #require(process.terminationReason == .exit && process.terminationStatus == 0,
                     "protoc \(arguments) failed (\(process.terminationStatus)): \(String(decoding: errors, as: UTF8.self))",
                     sourceLocation: sourceLocation)
        return [UInt8](output)
    }
}
