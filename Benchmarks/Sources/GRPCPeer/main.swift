// The gRPC-Swift peer a user would pick instead of RemoteView: a unary Echo over HTTP/2 on a Unix
// socket (grpc-swift-2 with the NIO transport, plaintext). Raw bytes in and out (no protobuf),
// so the figure is the RPC stack, not a message codec.
//   grpc-peer serve PATH        serve Echo on the socket at PATH until killed
//   grpc-peer call PATH N       N unary calls with 64 bytes (after 1000 warm-up calls); prints
//                               one JSON object like Benchmarks/raw/baselines.c
import GRPCCore
import GRPCNIOTransportHTTP2
import Glibc

/// [UInt8] as the message, both ways.
struct Bytes: MessageSerializer, MessageDeserializer {
    typealias Message = [UInt8]
    func serialize<Output: GRPCContiguousBytes>(_ message: [UInt8]) throws -> Output { Output(message) }
    func deserialize<Input: GRPCContiguousBytes>(_ serializedMessageBytes: Input) throws -> [UInt8] {
        serializedMessageBytes.withUnsafeBytes { Array($0) }
    }
}

let echo = MethodDescriptor(fullyQualifiedService: "bench.Echo", method: "Echo")

struct EchoService: RegistrableRPCService {
    func registerMethods<Transport: ServerTransport>(with router: inout RPCRouter<Transport>) {
        router.registerHandler(forMethod: echo, deserializer: Bytes(), serializer: Bytes()) { request, _ in
            StreamingServerResponse(of: [UInt8].self) { writer in
                for try await message in request.messages { try await writer.write(message) }
                return [:]
            }
        }
    }
}

func nowMicroseconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) * 1e6 + Double(now.tv_nsec) / 1e3
}

/// Writes a line to stderr (fd 2; the C `stderr` global is not concurrency-safe).
func complain(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
}

let arguments = CommandLine.arguments
guard arguments.count >= 3 else {
    complain("usage: grpc-peer serve PATH | call PATH N [WARM-UP] [samples]")
    exit(64)
}
let path = arguments[2]
switch arguments[1] {
case "serve":
    unlink(path)
    let server = GRPCServer(transport: .http2NIOPosix(address: .unixDomainSocket(path: path), transportSecurity: .plaintext),
                            services: [EchoService()])
    try await server.serve()
case "call":
    let count = arguments.count > 3 ? Int(arguments[3]) ?? 1000 : 1000
    let warmUp = arguments.count > 4 ? Int(arguments[4]) ?? 1000 : 1000
    let printSamples = arguments.last == "samples"
    let payload = [UInt8](repeating: 0x2A, count: 64)
    let samples = try await withGRPCClient(transport: .http2NIOPosix(target: .unixDomainSocket(path: path), transportSecurity: .plaintext)) { client in
        func call() async throws {
            let reply = try await client.unary(request: ClientRequest(message: payload), descriptor: echo, serializer: Bytes(),
                                               deserializer: Bytes(), options: .defaults) { try $0.message }
            guard reply.count == 64 else { throw RPCError(code: .dataLoss, message: "short reply") }
        }
        for _ in 0..<warmUp { try await call() }
        var samples: [Double] = []
        for _ in 0..<count {
            let start = nowMicroseconds()
            try await call()
            samples.append(nowMicroseconds() - start)
        }
        return samples
    }
    if printSamples {
        print("{\"samples\":[\(samples.map { String($0) }.joined(separator: ","))]}")
        exit(0)
    }
    let sorted = samples.sorted(), total = samples.reduce(0, +)
    print("{\"median_us\":\(sorted[sorted.count / 2]),\"p99_us\":\(sorted[sorted.count * 99 / 100]),\"min_us\":\(sorted[0]),\"max_us\":\(sorted[sorted.count - 1]),\"count\":\(sorted.count),\"per_second\":\(Double(sorted.count) / (total / 1e6))}")
default:
    complain("grpc-peer: unknown command \(arguments[1])")
    exit(64)
}
