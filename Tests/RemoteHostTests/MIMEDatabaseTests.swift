@testable import RemoteHost
import RemoteTestSupport
import Testing

/// The shared MIME-info database: a tiny handwritten one pins the rules (aliases, subclasses,
/// implicit supertypes, globs and the folders' precedence), and the system's (Debian
/// `shared-mime-info`, installed by scripts/bootstrap) shows them on real entries.
@Suite("MIME database")
struct MIMEDatabaseTests {
    /// A `mime` folder with these files (name → contents).
    static func folder(_ files: [String: String]) throws -> TemporaryFolder {
        let folder = try TemporaryFolder("remoteview-mime")
        for (name, contents) in files { try folder.write(name, contents) }
        return folder
    }

    static let handwritten: [String: String] = [
        "aliases": """
            image/X-Old image/new
            text/x-c text/x-csrc
            loop/a loop/b
            loop/b loop/a
            """,
        "subclasses": """
            # comments and blank lines are skipped

            text/x-csrc text/plain
            application/x-script text/x-generic
            image/vector application/xml
            application/xml text/xml
            cycle/one cycle/two
            cycle/two cycle/one
            inode/mount-point inode/directory
            """,
        "globs2": """
            # weight:type:pattern[:flags]
            50:image/new:*.new
            50:application/gzip:*.gz
            50:application/x-compressed-tar:*.tar.gz
            50:text/x-csrc:*.c:cs
            50:text/x-csrc:*.c
            50:text/x-c++src:*.C:cs
            50:text/x-c++src:*.C
            60:application/x-sharedlib:*.so.[0-9]*
            10:text/x-readme:readme*
            50:text/x-makefile:makefile
            90:text/x-weighty:*.w
            80:text/x-long:*.long.w
            50:text/x-negated:*.[!0-9]x
            50:text/x-one:?.q
            not a line
            """,
    ]

    @Test("canonical types: lower case, aliases resolved, a cycle of aliases ends")
    func canonical() throws {
        let folder = try Self.folder(Self.handwritten)
        defer { folder.remove() }
        let database = MIMEDatabase(directories: [folder.path])
        #expect(database.canonical("IMAGE/PNG") == "image/png")
        #expect(database.canonical("image/x-old") == "image/new")
        #expect(database.canonical("Image/X-OLD") == "image/new")
        #expect(database.canonical("text/x-c") == "text/x-csrc")
        #expect(["loop/a", "loop/b"].contains(database.canonical("loop/a")))
    }

    @Test("supertypes: subclasses breadth first, text/plain for text/*, octet-stream last but not for inode/*")
    func supertypes() throws {
        let folder = try Self.folder(Self.handwritten)
        defer { folder.remove() }
        let database = MIMEDatabase(directories: [folder.path])
        #expect(database.supertypes(of: "text/x-c") == ["text/plain", "application/octet-stream"])
        #expect(database.supertypes(of: "application/x-script") == ["text/x-generic", "text/plain", "application/octet-stream"])
        #expect(database.supertypes(of: "image/vector") == ["application/xml", "text/xml", "text/plain", "application/octet-stream"])
        #expect(database.supertypes(of: "cycle/one") == ["cycle/two", "application/octet-stream"])
        #expect(database.supertypes(of: "inode/mount-point") == ["inode/directory"])
        #expect(database.supertypes(of: "application/octet-stream") == [])
        #expect(database.supertypes(of: "text/plain") == ["application/octet-stream"])
    }

    @Test("conformance: same type, alias, subclass, implicit text/plain and octet-stream, major/* through supertypes")
    func conformance() throws {
        let folder = try Self.folder(Self.handwritten)
        defer { folder.remove() }
        let database = MIMEDatabase(directories: [folder.path])
        #expect(database.conforms("image/new", to: "image/new"))
        #expect(database.conforms("image/x-old", to: "IMAGE/NEW"), "alias on the item's side")
        #expect(database.conforms("image/new", to: "image/x-old"), "alias on the pattern's side")
        #expect(database.conforms("image/vector", to: "text/xml"), "transitive subclass")
        #expect(database.conforms("image/vector", to: "text/plain"), "implicit: text/xml is text")
        #expect(database.conforms("anything/at-all", to: "application/octet-stream"))
        #expect(!database.conforms("inode/directory", to: "application/octet-stream"))
        #expect(database.conforms("text/whatever", to: "text/plain"))
        #expect(!database.conforms("text/plain", to: "text/x-csrc"), "a parent does not conform to its child")
        #expect(database.conforms("image/png", to: "image/*"))
        #expect(database.conforms("image/vector", to: "application/*"), "through its superclass application/xml")
        #expect(database.conforms("image/vector", to: "text/*"))
        #expect(!database.conforms("image/png", to: "application/*"), "octet-stream does not make everything application/*")
        #expect(database.conforms("application/octet-stream", to: "application/*"))
        #expect(!database.conforms("cycle/one", to: "cycle/three"), "a cycle of subclasses ends")
        #expect(database.conforms("cycle/one", to: "cycle/two"))
    }

    @Test("file names: weight, then the longest pattern; cs patterns keep case; sets; octet-stream for the rest",
          arguments: [("photo.new", "image/new"), ("PHOTO.NEW", "image/new"), ("dir/sub/x.tar.gz", "application/x-compressed-tar"),
                      ("x.TAR.GZ", "application/x-compressed-tar"), ("x.gz", "application/gzip"), ("main.c", "text/x-csrc"),
                      ("main.C", "text/x-c++src"), ("libz.so.1", "application/x-sharedlib"), ("libz.so.x", "application/octet-stream"),
                      ("README.md", "text/x-readme"), ("Makefile", "text/x-makefile"), ("a.long.w", "text/x-weighty"),
                      ("a.bx", "text/x-negated"), ("a.1x", "application/octet-stream"),
                      ("a.q", "text/x-one"), ("ab.q", "application/octet-stream"), ("plain", "application/octet-stream"), ("", "application/octet-stream"), ("dir/", "application/octet-stream")])
    func fileNames(_ name: String, _ type: String) throws {
        let folder = try Self.folder(Self.handwritten)
        defer { folder.remove() }
        #expect(MIMEDatabase(directories: [folder.path]).type(forFileName: name) == type)
    }

    @Test("folders: the more important one's alias wins, parents add up, __NOGLOBS__ drops the less important globs")
    func precedence() throws {
        let home = try Self.folder([
            "aliases": "image/x-old image/home\n",
            "subclasses": "image/new image/home-parent\n",
            "globs2": "0:image/new:__NOGLOBS__\n50:image/new:*.newer\n",
        ])
        let system = try Self.folder(Self.handwritten)
        defer { home.remove(); system.remove() }
        let database = MIMEDatabase(directories: [home.path, "/nonexistent/mime", system.path])
        #expect(database.canonical("image/x-old") == "image/home")
        #expect(database.type(forFileName: "a.newer") == "image/new")
        #expect(database.type(forFileName: "a.new") == "application/octet-stream")
        #expect(database.type(forFileName: "a.gz") == "application/gzip", "other types keep their globs")
        #expect(database.supertypes(of: "image/vector") == ["application/xml", "text/xml", "text/plain", "application/octet-stream"])
        #expect(database.conforms("image/new", to: "image/home-parent"))
    }

    @Test("without a database: identical types, major/* and octet-stream still match")
    func empty() {
        let database = MIMEDatabase(directories: ["/nonexistent/mime"])
        #expect(database.conforms("image/png", to: "image/png"))
        #expect(database.conforms("image/png", to: "image/*"))
        #expect(database.conforms("image/png", to: "application/octet-stream"))
        #expect(database.conforms("text/x-csrc", to: "text/plain"))
        #expect(!database.conforms("image/png", to: "image/jpeg"))
        #expect(database.type(forFileName: "a.png") == "application/octet-stream")
    }

    @Test("the XDG search path: data home (else ~/.local/share), then the data folders (else /usr/local/share:/usr/share)")
    func searchPath() {
        #expect(MIMEDatabase.searchPath(dataHome: nil, dataDirectories: nil, home: "/home/u")
                    == ["/home/u/.local/share/mime", "/usr/local/share/mime", "/usr/share/mime"])
        #expect(MIMEDatabase.searchPath(dataHome: "/x/data/", dataDirectories: "/a:relative::/b:/a", home: "/home/u")
                    == ["/x/data/mime", "/a/mime", "/b/mime"])
        #expect(MIMEDatabase.searchPath(dataHome: "", dataDirectories: "", home: nil) == ["/usr/local/share/mime", "/usr/share/mime"])
        #expect(MIMEDatabase.searchPath(dataHome: "relative", dataDirectories: nil, home: "/root").first == "/root/.local/share/mime")
    }

    @Test("the system database (shared-mime-info): real aliases, subclasses and globs")
    func system() {
        let database = MIMEDatabase.system
        #expect(database.directories.contains("/usr/share/mime"))
        #expect(database.canonical("image/pjpeg") == "image/jpeg")
        #expect(database.canonical("image/x-MS-bmp") == "image/bmp")
        #expect(database.canonical("text/x-c") == "text/x-csrc")
        #expect(database.conforms("text/x-csrc", to: "text/plain"))
        #expect(database.conforms("application/x-shellscript", to: "text/plain"))
        #expect(database.conforms("application/x-shellscript", to: "application/x-executable"))
        #expect(database.conforms("application/x-shellscript", to: "text/*"))
        #expect(database.conforms("image/svg+xml", to: "application/xml"))
        #expect(database.conforms("image/svg+xml", to: "image/*") && database.conforms("image/svg+xml", to: "application/*"))
        #expect(database.conforms("image/pdf", to: "application/pdf") && !database.conforms("image/pdf", to: "image/*"),
                "image/pdf is an alias of application/pdf")
        #expect(database.supertypes(of: "text/x-python3").prefix(3) == ["text/x-python", "text/plain", "application/x-executable"])
        #expect(database.type(forFileName: "photo.png") == "image/png")
        #expect(database.type(forFileName: "PHOTO.PNG") == "image/png")
        #expect(database.type(forFileName: "backup.tar.gz") == "application/x-compressed-tar")
        #expect(database.type(forFileName: "main.c") == "text/x-csrc")
        #expect(database.type(forFileName: "main.C") == "text/x-c++src")
        #expect(database.type(forFileName: "libz.so.1") == "application/x-sharedlib")
        #expect(database.type(forFileName: "notes.txt") == "text/plain")
        #expect(database.type(forFileName: "no-extension-here") == "application/octet-stream")
    }
}
