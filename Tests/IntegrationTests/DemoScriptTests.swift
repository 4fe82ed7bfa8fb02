import FoundationEssentials
import Glibc
import RemoteHost
import RemoteTestSupport
import Testing

/// `demo-share share --script`: scripts that address controls by role and name in the
/// activity's semantic tree (`click button "Save"`, `type into "Note" …`, `press button …`),
/// run against the real, sandboxed Notes; and the mistakes a script can make, each reported with
/// its line before anything is launched, or (a control that never appears) with the tree's size.
@Suite("demo-share scripts by role and name", .serialized)
struct DemoScriptTests {
    /// Runs `demo-share share` for Notes with `script` and returns its exit status and output.
    static func share(_ script: String, _ arguments: [String] = []) throws -> (Int32, String) {
        let folder = try TemporaryFolder()
        let path = folder.path + "/script.txt"
        try Data(script.utf8).write(to: URL(filePath: path))
        let output = folder.path + "/out"
        return try DemoListTests.demoShare(["share", "--activity", "notes", "--text", "Hello", "--script", path, "--output", output,
                                            "--timeout", "10"] + arguments)
    }

    @Test("type into \"Note\", then click button \"Save\": the note holds the typed text and the share completes")
    func clickByName() throws {
        let (status, output) = try Self.share("""
            wait ready
            type into "Note"  and more
            click button "Save"
            wait outcome
            """)
        #expect(status == 0, "\(output)")
        #expect(output.contains("outcome: completed") && output.contains("Hello and more"), "\(output)")
    }

    @Test("press button \"Save\" (the tree's press action, no pointer) completes the share; names match ignoring case")
    func pressByName() throws {
        let (status, output) = try Self.share("""
            wait ready
            press button "save"  # a "# comment" after the name
            wait outcome
            """)
        #expect(status == 0 && output.contains("outcome: completed"), "\(output)")
    }

    @Test("mistakes are named with their line: a name without quotes, a role that does not exist, type into without text")
    func mistakes() throws {
        for (script, words) in [("wait ready\nclick button Save", "script.txt:2: expected click ROLE \"NAME\": the name in double quotes"),
                                ("click widget \"Save\"", "script.txt:1: \"widget\" is not a role"),
                                ("type into \"Note\"", "script.txt:1: type into \"Note\" needs the text to type"),
                                ("press button \"Save", "no closing quote")] {
            let (status, output) = try Self.share(script)
            #expect(status != 0 && output.contains(words), "\(script): \(output)")
        }
    }

    @Test("a control that never appears: the step fails after the timeout, naming it and the tree's size")
    func missingControl() throws {
        let (status, output) = try Self.share("wait ready\nclick button \"Nope\"", ["--timeout", "1"])
        #expect(status != 0 && output.contains("click button \"Nope\": no button named \"Nope\" in the view's tree after"), "\(output)")
    }
}
