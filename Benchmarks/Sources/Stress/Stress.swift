import ArgumentParser

/// Long runs against a service that a benchmark's few seconds cannot show: memory that grows
/// with every connection, processes or fds left behind. Each run is a subcommand; each exits
/// non-zero when what it checks does not hold.
@main
struct RemoteViewStress: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remoteview-stress",
        abstract: "Soak and stress runs of RemoteView against bench-service (release build).",
        subcommands: [Soak.self, KillStorm.self])
}
