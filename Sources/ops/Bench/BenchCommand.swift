/// `ops bench`: the workloads of BENCHMARKS.md on this library, Foundation's
/// OperationQueue and raw Dispatch, in one process, interleaved.
struct Bench: OpsCommand {
    static let spec = CommandSpec(
        name: "bench",
        abstract: "Benchmark against Foundation and Dispatch.",
        discussion: """
            Runs each workload on this library, Foundation's OperationQueue and raw Dispatch, \
            interleaved per repetition, and prints median/min/max per operation, operations per \
            second, the ratio to Dispatch and PASS/MISS for the targets. Every run is validated; \
            a validation failure makes the exit status 1, a hang 3, a bad argument 64. Targets \
            never change the exit status. On a terminal a status line shows the row being run \
            and an estimate of the time left. Build with -c release.
            """,
        options: [
            .init(name: "quick", value: nil, help: "A short smoke run for CI (a few seconds): small N, one repetition. Timings are not meaningful."),
            .init(name: "repetitions", value: "repetitions", help: "Repetitions per row (default 5, or 1 with --quick; 1M and memory rows at most 3)."),
            .init(name: "seed", value: "seed", help: "Seed for the random DAG (W5) and the priorities (W7)."),
            .init(name: "max-run-seconds", value: "seconds", help: "Skip an engine on a row when its single run is predicted to take longer (default 60, or 10 with --quick). The prediction extrapolates the smaller sizes of the same workload (W1, W3, W4, W5)."),
            .init(name: "only", value: "rows", help: "Run only these rows, comma-separated ids; a trailing * matches a prefix (e.g. W1,W3*)."),
            .init(name: "engines", value: "engines", help: "Run only these engines, comma-separated: operations, foundation, dispatch (e.g. for profiling; without dispatch there are no ratios)."),
            .init(name: "format", value: "format", help: "text: tables for people; json: one JSON object per line (JSON Lines), to compare runs across commits."),
            .init(name: "record", value: nil, help: "Record this library's runs with OperationTracing, to measure what the recorder costs when it is on."),
        ],
        positionals: []
    )

    /// The longest `--max-run-seconds` accepts: an hour (a run is declared
    /// hung after three times this).
    static let maximumRunSeconds = 3_600.0

    let plan: BenchPlan
    let format: BenchFormat

    init(_ arguments: ParsedArguments) throws(UsageError) {
        let quick = arguments.flag("quick")
        let repetitions = try arguments.integer("repetitions", as: Int.self)
        let seed = try arguments.integer("seed", as: UInt64.self) ?? 20_240_601
        let maxRunSeconds = try arguments.number("max-run-seconds")
        let only = arguments.string("only")
        let engines = arguments.string("engines")
        if let text = arguments.string("format") {
            guard let format = BenchFormat(rawValue: text) else {
                throw UsageError("--format takes text or json; got '\(text)'.")
            }
            self.format = format
        } else {
            format = .text
        }
        if let repetitions, repetitions < 1 {
            throw UsageError("--repetitions must be at least 1; got \(repetitions).")
        }
        if let maxRunSeconds, !(maxRunSeconds > 0 && maxRunSeconds <= Self.maximumRunSeconds) {
            throw UsageError("--max-run-seconds must be above 0 and at most \(Int(Self.maximumRunSeconds)); got \(maxRunSeconds).")
        }
        var engineFilter: [BenchEngineID]?
        if let engines {
            engineFilter = try engines.split(separator: ",", omittingEmptySubsequences: false).map { (name) throws(UsageError) -> BenchEngineID in
                guard let engine = BenchEngineID.allCases.first(where: { $0.name.lowercased() == name.lowercased() }) else {
                    throw UsageError("Unknown engine '\(name)' in --engines; use operations, foundation or dispatch, comma-separated.")
                }
                return engine
            }
        }
        let patterns = only.map { $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init) } ?? []
        if only != nil || engineFilter != nil {
            let every = BenchPlan(quick: quick, repetitions: repetitions, seed: seed, maxRunSeconds: maxRunSeconds, only: [])
            let ids = every.rows.map(\.id)
            if patterns.contains("") {
                throw UsageError("--only '\(only ?? "")' has an empty row id; give ids separated by single commas, e.g. W1,W3*.")
            }
            for pattern in patterns where !ids.contains(where: { BenchPlan.pattern(pattern, matches: $0) }) {
                throw UsageError(
                    "No row matches --only '\(pattern)'. The rows\(quick ? " with --quick" : "") are: "
                        + ids.joined(separator: ", ") + " (a trailing * matches a prefix, e.g. W1*).")
            }
        }
        var plan = BenchPlan(quick: quick, repetitions: repetitions, seed: seed, maxRunSeconds: maxRunSeconds,
                             only: patterns, engines: engineFilter)
        plan.record = arguments.flag("record")
        self.plan = plan
        if plan.rows.isEmpty {
            throw UsageError("None of the rows selected by --only '\(only ?? "")' runs on --engines '\(engines ?? "")'.")
        }
    }

    func run() async -> Int32 {
        let plan = self.plan
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
        return passed ? 0 : 1
    }
}
