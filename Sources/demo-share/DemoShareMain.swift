// demo-share: the demo host and its share services (DemoShareKit). Its manifests
// (Services/) are this executable's resources: each names this executable ("../../demo-share").
import DemoShareKit

@main
enum DemoShareMain {
    static func main() async {
        await DemoShare.main()
    }
}
