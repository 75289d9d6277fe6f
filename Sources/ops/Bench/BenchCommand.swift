import ArgumentParser

struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Benchmark against Foundation and Dispatch.")
    func run() async throws { print("bench: not yet implemented") }
}
