import ArgumentParser

/// `ops bench`: the workloads of BENCHMARKS.md on this library, Foundation's
/// OperationQueue and raw Dispatch, in one process, interleaved.
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Benchmark against Foundation and Dispatch.",
        discussion: """
            Runs each workload on this library, Foundation's OperationQueue and raw Dispatch, \
            interleaved per repetition, and prints median/min/max per operation, operations per \
            second, the ratio to Dispatch and PASS/MISS for the targets. Every run is validated; \
            a validation failure makes the exit status 1, a hang 3. Targets never change the exit \
            status. Build with -c release.
            """
    )

    @Flag(help: "A short smoke run for CI (a few seconds): small N, one repetition. Timings are not meaningful.")
    var quick = false

    @Option(help: "Repetitions per row (default 5, or 1 with --quick; 1M and memory rows at most 3).")
    var repetitions: Int?

    @Option(help: "Seed for the random DAG (W5) and the priorities (W7).")
    var seed: UInt64 = 20_240_601

    @Option(help: ArgumentHelp(
        "Skip an engine on a row when its single run is predicted to take longer (default 60, or 10 with --quick).",
        discussion: "The prediction extrapolates the smaller sizes of the same workload (W1, W3, W4, W5)."))
    var maxRunSeconds: Double?

    @Option(help: "Run only these rows, comma-separated ids; a trailing * matches a prefix (e.g. W1,W3*).")
    var only: String?

    @Option(help: "Run only these engines, comma-separated: operations, foundation, dispatch (e.g. for profiling; without dispatch there are no ratios).")
    var engines: String?

    private var engineFilter: [BenchEngineID]? {
        get throws {
            guard let engines else { return nil }
            return try engines.split(separator: ",").map { name in
                guard let engine = BenchEngineID.allCases.first(where: { $0.name.lowercased() == name.lowercased() }) else {
                    throw ValidationError("Unknown engine '\(name)'; use operations, foundation or dispatch.")
                }
                return engine
            }
        }
    }

    func validate() throws {
        _ = try engineFilter
        if let repetitions, repetitions < 1 {
            throw ValidationError("--repetitions must be at least 1.")
        }
        if let maxRunSeconds, !(maxRunSeconds > 0) {
            throw ValidationError("--max-run-seconds must be positive.")
        }
    }

    func run() async throws {
        let filters = only.map { $0.split(separator: ",").map(String.init) } ?? []
        let plan = BenchPlan(quick: quick, repetitions: repetitions, seed: seed,
                             maxRunSeconds: maxRunSeconds, only: filters, engines: try engineFilter)
        // The runner blocks (waits for queues and groups), so it runs on a
        // thread of its own rather than on the cooperative pool.
        let passed = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            benchDetach { continuation.resume(returning: BenchRunner(plan: plan).run()) }
        }
        if !passed {
            throw ExitCode(1)
        }
    }
}
