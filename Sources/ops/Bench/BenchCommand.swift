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
            a validation failure makes the exit status 1, a hang 3, a bad argument 64. Targets \
            never change the exit status. On a terminal a status line shows the row being run \
            and an estimate of the time left. Build with -c release.
            """
    )

    // Numeric options parse `.unconditional`ly: the next word is the value
    // even if it starts with "-", so that `--repetitions -1` reaches
    // `validate()` and is refused with a message, instead of "Missing value".

    @Flag(help: "A short smoke run for CI (a few seconds): small N, one repetition. Timings are not meaningful.")
    var quick = false

    @Option(parsing: .unconditional, help: "Repetitions per row (default 5, or 1 with --quick; 1M and memory rows at most 3).")
    var repetitions: Int?

    @Option(parsing: .unconditional, help: "Seed for the random DAG (W5) and the priorities (W7).")
    var seed: UInt64 = 20_240_601

    @Option(parsing: .unconditional, help: ArgumentHelp(
        "Skip an engine on a row when its single run is predicted to take longer (default 60, or 10 with --quick).",
        discussion: "The prediction extrapolates the smaller sizes of the same workload (W1, W3, W4, W5)."))
    var maxRunSeconds: Double?

    @Option(help: "Run only these rows, comma-separated ids; a trailing * matches a prefix (e.g. W1,W3*).")
    var only: String?

    @Option(help: "Run only these engines, comma-separated: operations, foundation, dispatch (e.g. for profiling; without dispatch there are no ratios).")
    var engines: String?

    @Option(help: "text: tables for people; json: one JSON object per line (JSON Lines), to compare runs across commits.")
    var format: BenchFormat = .text

    /// The longest `--max-run-seconds` accepts: an hour (a run is declared
    /// hung after three times this).
    static let maximumRunSeconds = 3_600.0

    private var engineFilter: [BenchEngineID]? {
        get throws {
            guard let engines else { return nil }
            let names = engines.split(separator: ",", omittingEmptySubsequences: false)
            return try names.map { name in
                guard let engine = BenchEngineID.allCases.first(where: { $0.name.lowercased() == name.lowercased() }) else {
                    throw ValidationError("Unknown engine '\(name)' in --engines; use operations, foundation or dispatch, comma-separated.")
                }
                return engine
            }
        }
    }

    private var patterns: [String] {
        only.map { $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init) } ?? []
    }

    func validate() throws {
        let engineFilter = try engineFilter
        if let repetitions, repetitions < 1 {
            throw ValidationError("--repetitions must be at least 1; got \(repetitions).")
        }
        if let maxRunSeconds, !(maxRunSeconds > 0 && maxRunSeconds <= Self.maximumRunSeconds) {
            throw ValidationError("--max-run-seconds must be above 0 and at most \(Int(Self.maximumRunSeconds)); got \(maxRunSeconds).")
        }
        guard only != nil || engineFilter != nil else { return }
        let every = BenchPlan(quick: quick, repetitions: repetitions, seed: seed, maxRunSeconds: maxRunSeconds, only: [])
        let ids = every.rows.map(\.id)
        if patterns.contains("") {
            throw ValidationError("--only '\(only ?? "")' has an empty row id; give ids separated by single commas, e.g. W1,W3*.")
        }
        for pattern in patterns where !ids.contains(where: { BenchPlan.pattern(pattern, matches: $0) }) {
            throw ValidationError(
                "No row matches --only '\(pattern)'. The rows\(quick ? " with --quick" : "") are: "
                    + ids.joined(separator: ", ") + " (a trailing * matches a prefix, e.g. W1*).")
        }
        let plan = BenchPlan(quick: quick, repetitions: repetitions, seed: seed, maxRunSeconds: maxRunSeconds,
                             only: patterns, engines: engineFilter)
        if plan.rows.isEmpty {
            throw ValidationError("None of the rows selected by --only '\(only ?? "")' runs on --engines '\(engines ?? "")'.")
        }
    }

    func run() async throws {
        let plan = BenchPlan(quick: quick, repetitions: repetitions, seed: seed,
                             maxRunSeconds: maxRunSeconds, only: patterns, engines: try engineFilter)
        let format = self.format
        // The runner blocks (waits for queues and groups), so it runs on a
        // thread of its own rather than on the cooperative pool.
        let passed = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            benchDetach {
                let runner = BenchRunner(plan: plan, reporter: format.makeReporter(),
                                         progress: BenchProgress.forStandardOutput())
                continuation.resume(returning: runner.run())
            }
        }
        if !passed {
            throw ExitCode(1)
        }
    }
}

extension BenchFormat: ExpressibleByArgument {}
