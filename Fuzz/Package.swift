// swift-tools-version: 6.1
//
// RemoteView's libFuzzer targets (docs/Fuzzing.md), a package of its own so that the main
// package's build (and CI) stays unaffected. Build and run one with `scripts/fuzz TARGET SECONDS`,
// which builds with `swift build -c release --sanitize fuzzer --sanitize address
// -Xswiftc -sanitize=fuzzer,address -Xswiftc -enable-testing` (why both: docs/Fuzzing.md): every
// target of both packages, the generated protobuf-c code (CProto) included, is then instrumented
// for coverage and checked by AddressSanitizer, and the targets reach package-level API with
// `@testable import`.
import PackageDescription

let package = Package(
    name: "RemoteViewFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "RemoteView", path: ".."),
    ],
    targets: [
        // The host's packet decoder (EnvelopeCodec.decode) and what the host checks right after
        // it: surface messages through a SurfaceCompositor, share items through
        // ShareItem.received, with the fds that "arrived" chosen by the input's first byte.
        .executableTarget(
            name: "fuzz-packet",
            dependencies: [.product(name: "RemoteHost", package: "RemoteView")],
            path: "Sources/FuzzPacket"
        ),
        // The manifest parser: ServiceRegistry.load(file:) (JSON decoding with every check, and
        // the error report) over the input's bytes, and the activation rules of what decodes.
        // Public API only.
        .executableTarget(
            name: "fuzz-manifest",
            dependencies: [.product(name: "RemoteHost", package: "RemoteView")],
            path: "Sources/FuzzManifest"
        ),
        // The manifest loader's duplicate-key scan (DuplicateKeyScanner, package-level, through
        // @testable import) against a second detector written for the test, on every input
        // JSONDecoder accepts: both must report the same keys, and the decoder must not merge
        // two keys the scan tells apart.
        .executableTarget(
            name: "fuzz-duplicates",
            dependencies: [.product(name: "RemoteHost", package: "RemoteView")],
            path: "Sources/FuzzDuplicates"
        ),
    ]
)
