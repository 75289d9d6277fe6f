import ArgumentParser

struct Soak: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the seeded stress test for a while.")
    func run() async throws { print("soak: not yet implemented") }
}
