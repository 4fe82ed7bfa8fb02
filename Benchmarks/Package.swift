// swift-tools-version: 6.1
//
// RemoteView's benchmarks (what each figure is and its target: docs/Benchmarks.md), a package of
// its own so that the main package's build (and CI) stays lean. `swift run -c release remoteview-bench` runs every figure next to its
// baseline, measured in the same run, and prints a table (or --json).
import PackageDescription

let package = Package(
    name: "RemoteViewBenchmarks",
    platforms: [.macOS(.v15)],
    traits: [
        // `make bench`'s counting build (`--traits LockCounts`, in .build-counts): RemoteView
        // counts every lock acquisition, and --counts prints them per round trip.
        .trait(name: "LockCounts", description: "Build RemoteView with its lock counter (for remoteview-bench --counts)"),
    ],
    dependencies: [
        .package(name: "RemoteView", path: "..", traits: [.trait(name: "LockCounts", condition: .when(traits: ["LockCounts"]))]),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // The gRPC peer (a release build takes about 15 minutes the first time, mostly TLS).
        .package(url: "https://github.com/grpc/grpc-swift-2", from: "2.4.3"),
        .package(url: "https://github.com/grpc/grpc-swift-nio-transport", from: "2.9.2"),
    ],
    targets: [
        // The runner: the host side of every figure, and the baselines' driver.
        .executableTarget(
            name: "remoteview-bench",
            dependencies: [
                .product(name: "RemoteHost", package: "RemoteView"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Sources/Runner"
        ),
        // A lean service (no Foundation, no argument parser): echo, a one-way sink, frames.
        // Linked with the Swift runtime statically: a service's start-up is mostly the dynamic
        // loader resolving the Swift libraries, which this leaves out of every cold start. And
        // as a position-dependent executable: a PIE with the runtime inside has ~30 000
        // relocations for the loader to apply (and pages to copy) at every start (≈ 1 ms here).
        // `make bench` also links protobuf-c and libstdc++ from their archives (raw/static-link.sh);
        // Cairo stays shared, as Pango (loaded at the first text) draws with the shared libcairo.
        .executableTarget(
            name: "bench-service",
            dependencies: [.product(name: "RemoteService", package: "RemoteView")],
            path: "Sources/BenchService",
            linkerSettings: [.unsafeFlags(["-static-stdlib", "-Xclang-linker", "-no-pie"])]
        ),
        // Soak and stress runs against bench-service (docs/Benchmarks.md): `remoteview-stress soak`
        // checks that memory stays flat over many connections, `killstorm` that nothing hangs,
        // is lost or leaks while services are killed at random. Build it on its own
        // (`swift build -c release --product remoteview-stress`): it needs no gRPC.
        .executableTarget(
            name: "remoteview-stress",
            dependencies: [
                .product(name: "RemoteHost", package: "RemoteView"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                "bench-service",
                "CStress",
            ],
            path: "Sources/Stress"
        ),
        // pidfds and memfds for remoteview-stress (not in Swift's Glibc module).
        .target(name: "CStress", path: "Sources/CStress"),
        // gRPC-Swift unary Echo over a Unix socket, server and client, for the same-run comparison.
        .executableTarget(
            name: "grpc-peer",
            dependencies: [
                .product(name: "GRPCCore", package: "grpc-swift-2"),
                .product(name: "GRPCNIOTransportHTTP2", package: "grpc-swift-nio-transport"),
            ],
            path: "Sources/GRPCPeer"
        ),
    ]
)
