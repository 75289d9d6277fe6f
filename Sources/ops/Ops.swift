import ArgumentParser

/// `ops`: runs the documents' examples, the benchmark and the soak test.
@main
struct Ops: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ops",
        abstract: "Operation queues for Swift on Linux: demos, benchmark, soak test.",
        subcommands: [Demo.self, Bench.self, Soak.self]
    )
}
