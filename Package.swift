// swift-tools-version: 6.1
//
// RemoteView: XPC services, launchd-style on-demand launching and remote view controllers for
// Linux. Dependency direction (docs/Architecture.md):
// {CProto, CRemoteViewLinux, CSpawn} ← RemoteCore ← {RemoteService, RemoteHost} ← DemoShareKit ← demo-share.
import PackageDescription

let package = Package(
    name: "RemoteView",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "RemoteService", targets: ["RemoteService"]),
        .library(name: "RemoteHost", targets: ["RemoteHost"]),
        .executable(name: "demo-share", targets: ["demo-share"]),
        // The demo as a library, for Network/'s demo-share-remote (the same demo, given gateways).
        .library(name: "DemoShareKit", targets: ["DemoShareKit"]),
        .executable(name: "remoteview-check", targets: ["remoteview-check"]),
    ],
    traits: [
        // Off by default: every lock acquisition counted (`LockCounter`), for
        // `remoteview-bench --counts`, which builds the benchmarks with it on their own
        // (docs/Benchmarks.md, "Counts per round trip"). No other build has the counter.
        .trait(name: "LockCounts", description: "Count every Mutex acquisition and compare-and-swap loop (for remoteview-bench --counts)"),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        // Documentation: `make test` builds each library's DocC catalog and fails on a broken link.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // libprotobuf-c, found through pkg-config (Debian: libprotobuf-c-dev).
        .systemLibrary(
            name: "CProtobufC",
            pkgConfig: "libprotobuf-c",
            providers: [.apt(["libprotobuf-c-dev"])]
        ),
        // The wire schema and its generated protobuf-c code (committed; scripts/gen-proto).
        .target(
            name: "CProto",
            dependencies: ["CProtobufC"],
            exclude: ["remoteview.proto"]
        ),
        // Thin C shims for the Linux calls Swift cannot make (CMSG_* macros, memfd seals, pidfd),
        // called only from RemoteCore/System.
        .target(
            name: "CRemoteViewLinux",
            cSettings: [.define("_GNU_SOURCE", to: "1")],
            // The main queue's run-loop interface (a service's loop on its main thread).
            linkerSettings: [.linkedLibrary("dispatch")]
        ),
        // Cairo, through a module map (Debian: libcairo2-dev).
        .systemLibrary(
            name: "CCairo",
            path: "Sources/CCairo"
        ),
        // Pango over Cairo, for all text: shaping, bidi, line breaking, font fallback. Loaded with
        // dlopen when a process first lays out text (Debian: libpangocairo-1.0-0), so that a
        // service that draws none does not map it at start; its API is declared in the header.
        .target(
            name: "CPango",
            cSettings: [.define("_GNU_SOURCE", to: "1")]
        ),
        // The demo window's export to AT-SPI2: its tree mirrored as ATK objects on a thread of
        // their own, published by atk-bridge (Debian: libatk1.0-dev and libatk-bridge2.0-dev for
        // the headers; at run time at-spi2-core). ATK, atk-bridge and GLib are loaded with dlopen
        // when the window starts it, so the demo's services (the same executable) map none of
        // them; only their headers are needed to build, hence the include paths.
        .target(
            name: "CAccessibilityBridge",
            cSettings: [
                .define("_GNU_SOURCE", to: "1"),
                .unsafeFlags(["-I/usr/include/atk-1.0", "-I/usr/include/glib-2.0",
                              "-I/usr/lib/x86_64-linux-gnu/glib-2.0/include", "-I/usr/lib/aarch64-linux-gnu/glib-2.0/include"]),
            ]
        ),
        // The launcher's process start (vfork + execve), in C because it runs where Swift cannot;
        // called only through RemoteCore/System's Syscall.spawn.
        .target(
            name: "CSpawn",
            cSettings: [.define("_GNU_SOURCE", to: "1")]
        ),
        .target(
            name: "RemoteCore",
            dependencies: [
                "CProto",
                "CRemoteViewLinux",
                "CSpawn",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "RemoteService",
            dependencies: [
                "RemoteCore",
                "CCairo",
                "CPango",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The seccomp filter of sandboxed services, built with libseccomp (Debian: libseccomp-dev)
        // and handed to bubblewrap as BPF; used only by RemoteHost's launcher.
        .target(
            name: "CSandboxFilter",
            cSettings: [.define("_GNU_SOURCE", to: "1")],
            linkerSettings: [.linkedLibrary("seccomp")]
        ),
        .target(
            name: "RemoteHost",
            dependencies: [
                "RemoteCore",
                "CCairo",
                "CSandboxFilter",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // SDL2, through a module map (Debian: libsdl2-dev); only the demo's window uses it.
        .systemLibrary(
            name: "CSDL2",
            path: "Sources/CSDL2"
        ),
        // The demo's photograph (include/coffee.png, CC0), linked in for the scrolling-photo
        // animation: a service finds no file of its own inside the sandbox.
        .target(
            name: "CDemoPhoto",
            path: "Sources/CDemoPhoto",
            exclude: ["include/coffee.png"]
        ),
        // The demo: its host commands (the window among them), its services and activities. A
        // library, so that Network/'s demo-share-remote builds the same demo with the gateway's
        // client (demo-share window --gateway runs it).
        .target(
            name: "DemoShareKit",
            dependencies: [
                "RemoteHost",
                "RemoteService",
                "CDemoPhoto",
                "CSDL2",
                "CCairo",
                "CAccessibilityBridge",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "demo-share",
            dependencies: ["DemoShareKit"],
            // The demo's service manifests; their executable is this one ("../../demo-share").
            resources: [.copy("Services")]
        ),
        // The conformance checker for service authors: runs a service, sandboxed, through the
        // protocol's rules and prints which it breaks.
        .executableTarget(
            name: "remoteview-check",
            dependencies: [
                "RemoteHost",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Raw packets on a socket, past the codec's checks: for the tests and the hostile fixture.
        .target(
            name: "RawPacket",
            dependencies: ["RemoteCore", "CRemoteViewLinux"],
            path: "Tests/RawPacket"
        ),
        // The system calls the security suite's hostile service tries inside its sandbox.
        .target(
            name: "CHostileCalls",
            path: "Tests/Fixtures/CHostileCalls",
            cSettings: [.define("_GNU_SOURCE", to: "1")]
        ),
        // What the fixture service's fontconfig lists, for the security suite's font tests
        // (Debian: libfontconfig-dev, which libcairo2-dev brings).
        .target(
            name: "CFontQuery",
            path: "Tests/Fixtures/CFontQuery",
            linkerSettings: [.linkedLibrary("fontconfig")]
        ),
        // A real service executable the integration tests launch (not shipped).
        .executableTarget(
            name: "remoteview-test-service",
            dependencies: ["RemoteService", "RawPacket", "CHostileCalls", "CFontQuery"],
            path: "Tests/Fixtures/TestService"
        ),
        // A host process the integration tests kill, to see its services go with it.
        .executableTarget(
            name: "remoteview-test-host",
            dependencies: ["RemoteHost"],
            path: "Tests/Fixtures/TestHost"
        ),
        // Deadlines and fd/process leak checks shared by the test targets.
        .target(
            name: "RemoteTestSupport",
            dependencies: ["RemoteCore", "RemoteHost", "RawPacket", .product(name: "Logging", package: "swift-log")],
            path: "Tests/Support"
        ),
        .testTarget(
            name: "RemoteCoreTests",
            dependencies: ["RemoteCore", "CProto", "RemoteTestSupport"]
        ),
        .testTarget(
            name: "RemoteHostTests",
            dependencies: ["RemoteHost", "RemoteTestSupport"]
        ),
        .testTarget(
            name: "RenderingTests",
            dependencies: ["RemoteService", "RemoteHost", "RemoteTestSupport"]
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "RemoteHost", "RemoteCore", "RemoteService", "CProto", "RemoteTestSupport", "remoteview-test-service", "remoteview-test-host",
                // Built for DemoActivityTests, which launch the demo's activities from its manifests.
                "demo-share",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
    ]
)
