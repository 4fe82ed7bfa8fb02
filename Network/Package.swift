// swift-tools-version: 6.1
//
// RemoteView beyond one machine (docs/Architecture.md, "Beyond one machine"): `remoteview-gateway`
// serves a machine's services to hosts elsewhere over gRPC-Swift 2 (HTTP/2, mutual TLS). A
// package of its own: gRPC and its TLS (BoringSSL) take minutes to build, and the main package's
// build stays lean. It depends on the main package by path.
import PackageDescription

let package = Package(
    name: "RemoteViewNetwork",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "RemoteGateway", targets: ["RemoteGateway"]),
        .executable(name: "remoteview-gateway", targets: ["remoteview-gateway"]),
        .executable(name: "demo-share-remote", targets: ["demo-share-remote"]),
    ],
    dependencies: [
        .package(name: "RemoteView", path: ".."),
        .package(url: "https://github.com/grpc/grpc-swift-2", from: "2.4.3"),
        .package(url: "https://github.com/grpc/grpc-swift-nio-transport", from: "2.9.2"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
        // The TLS handler, found in each accepted connection's pipeline to log why a handshake failed.
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // The tests' certificates (a CA, the gateway's, clients' valid, expired and foreign).
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"6.0.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
    ],
    targets: [
        // lz4 and zstd, for a remote view's frames (docs/Gateway.md, "Views").
        .systemLibrary(name: "CCompression", path: "Sources/CCompression"),
        // The gateway's server side: its TLS settings, who a client is, what it may reach, and
        // the gRPC service.
        .target(
            name: "RemoteGateway",
            dependencies: [
                "CCompression",
                .product(name: "RemoteHost", package: "RemoteView"),
                .product(name: "GRPCCore", package: "grpc-swift-2"),
                .product(name: "GRPCNIOTransportHTTP2", package: "grpc-swift-nio-transport"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .executableTarget(
            name: "remoteview-gateway",
            dependencies: [
                "RemoteGateway",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // The gateway's figures across a veth pair, beside bare gRPC-Swift with the same mutual
        // TLS (docs/Benchmarks.md, "The gateway"), and the lean service they reach.
        .executableTarget(
            name: "gateway-bench",
            dependencies: [
                "RemoteGateway",
                .product(name: "GRPCCore", package: "grpc-swift-2"),
                .product(name: "GRPCNIOTransportHTTP2", package: "grpc-swift-nio-transport"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The demo built with the gateway's client: `demo-share window --gateway` runs it.
        .executableTarget(
            name: "demo-share-remote",
            dependencies: [
                "RemoteGateway",
                .product(name: "DemoShareKit", package: "RemoteView"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "gateway-bench-service",
            dependencies: [.product(name: "RemoteService", package: "RemoteView")]
        ),
        .testTarget(
            name: "RemoteGatewayTests",
            dependencies: [
                "RemoteGateway",
                .product(name: "GRPCCore", package: "grpc-swift-2"),
                .product(name: "GRPCNIOTransportHTTP2", package: "grpc-swift-nio-transport"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
    ]
)
