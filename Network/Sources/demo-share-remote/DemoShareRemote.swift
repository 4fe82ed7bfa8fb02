// demo-share-remote: the demo (DemoShareKit) built with the gateway's client, so that
// `demo-share window --gateway ADDRESS` shows a gateway's activities and embeds them. The main
// package's demo-share runs this executable for --gateway: it cannot link the client itself
// (this package depends on that one).
import DemoShareKit
import Logging
import RemoteGateway
import RemoteHost

@main
enum DemoShareRemote {
    static func main() async {
        DemoGateways.make.withLock {
            $0 = { options in
                var logger = Logger(label: "demo-share")
                logger.logLevel = .warning
                let client = GatewayClient(address: try GatewayClient.address(options.address), certificateChain: options.certificate,
                                           privateKey: options.key, gatewayCA: options.ca, serverName: options.serverName)
                return try GatewayConnector(gateways: [(name: options.name, client: client)], logger: logger)
            }
        }
        await DemoShare.main()
    }
}
