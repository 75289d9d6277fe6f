import ArgumentParser

struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the documents' examples and check their outcomes.")
    func run() async throws { print("demo: not yet implemented") }
}
