import Operations
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The measurements of one engine on one row.
struct BenchEngineStats {
    /// Nanoseconds per operation, one value per repetition.
    var perOp: [Double] = []
    /// Ratio to Dispatch's nanoseconds per operation in the same repetition.
    var ratios: [Double] = []
    /// Workload metrics, one dictionary per repetition (averaged over the sample's runs).
    var metrics: [[String: Double]] = []
    /// Runs per timed sample.
    var runsPerSample = 1
    /// Whether any run of this engine failed validation on this row.
    var failed = false
    /// Set when the engine was not run on this row: why.
    var notRun: String?
    /// The predicted nanoseconds per operation, when not run for being too slow.
    var predictedPerOp: Double?
    /// This engine's validation failures on this row (also on standard error).
    var failures: [String] = []

    func metric(_ key: String) -> [Double] { metrics.compactMap { $0[key] } }

    /// Median nanoseconds per operation over the repetitions (NaN without any).
    var median: Double { benchMedian(perOp) }
    /// Median ratio to Dispatch over the repetitions, or nil without Dispatch.
    var ratio: Double? { ratios.isEmpty ? nil : benchMedian(ratios) }
}

/// A finished row.
struct BenchRowResult {
    var row: BenchRow
    var stats: [BenchEngineID: BenchEngineStats] = [:]
    var wallSeconds = 0.0
    /// The row's target, judged for Operations (nil without a target, or
    /// when Operations failed validation on this row).
    var outcome: BenchTargetOutcome?

    /// "PASS" or "MISS" for the engine the row's target applies to
    /// (Operations), "FAIL" for an engine that failed validation, else nil.
    func verdict(for engine: BenchEngineID) -> String? {
        guard let stats = stats[engine] else { return nil }
        if stats.failed { return "FAIL" }
        guard engine == .operations, row.target != nil else { return nil }
        return outcome?.passed == true ? "PASS" : "MISS"
    }

    /// The target's label for `engine`: targets apply to Operations only.
    func targetLabel(for engine: BenchEngineID) -> String? {
        engine == .operations ? row.target?.label : nil
    }
}

/// A target's outcome, for the summary.
struct BenchTargetOutcome {
    var what: String
    var measured: String
    var target: String
    var passed: Bool
}

/// Runs the plan: rows in order, engines interleaved within each repetition
/// (the order rotates every repetition), every run validated. Each finished
/// row goes to the reporter at once.
final class BenchRunner {
    let plan: BenchPlan
    private let reporter: any BenchReporter
    private let progress: BenchProgress?
    private let watchdog: BenchWatchdog
    private(set) var results: [BenchRowResult] = []
    private(set) var failures: [String] = []
    private(set) var targets: [BenchTargetOutcome] = []

    /// - Parameter progress: the status line ("row k of n", time left), or
    ///   nil when standard output is not a terminal.
    init(plan: BenchPlan, reporter: any BenchReporter, progress: BenchProgress?) {
        self.plan = plan
        self.reporter = reporter
        self.progress = progress
        watchdog = BenchWatchdog(limitSeconds: plan.hangLimitSeconds) { progress?.clear() }
    }

    /// Runs everything and reports it. Returns false if any validation failed.
    func run() -> Bool {
        let start = benchNow()
        reporter.begin(plan: plan, environment: BenchEnvironment.current())
        // Time rows first, then memory rows (their own table).
        let rows = plan.rows.filter { !$0.isMemory } + plan.rows.filter(\.isMemory)
        // The estimates' model, scaled by how long the rows so far took
        // against what it said for them.
        var modelled = 0.0
        var measured = 0.0
        for (index, row) in rows.enumerated() {
            let scale = modelled > 0 ? measured / modelled : 1
            progress?.show(
                row: index + 1, of: rows.count, id: row.id,
                elapsedSeconds: Double(benchNow() - start) / 1e9,
                leftSeconds: rows[index...].reduce(0) { $0 + estimatedSeconds($1, scale: scale) })
            let model = modelSeconds(row)
            var result = runRow(row)
            // A row cut short by its time budget says nothing about the scale.
            if result.wallSeconds < plan.rowBudgetSeconds {
                modelled += model
                measured += result.wallSeconds
            }
            judge(&result)
            results.append(result)
            progress?.clear()
            reporter.row(result)
        }
        let growth = BenchGrowth(plan: plan, results: results)
        targets += growth.outcomes
        reporter.growth(growth)
        reporter.finish(BenchSummary(
            targets: targets, failures: failures, wallSeconds: Double(benchNow() - start) / 1e9))
        return failures.isEmpty
    }

    // MARK: Judging

    /// Judges the row's target for Operations and records the outcome for
    /// the summary. A row on which Operations failed validation has no
    /// outcome (its verdict is FAIL); one on which it was not run misses.
    private func judge(_ result: inout BenchRowResult) {
        let row = result.row
        guard let target = row.target, let stats = result.stats[.operations], !stats.failed else { return }
        let what = "\(row.id) \(row.title) (N = \(benchCount(row.count)))"
        let outcome: BenchTargetOutcome
        if let notRun = stats.notRun {
            outcome = BenchTargetOutcome(what: what + " ×Dispatch", measured: notRun, target: target.label, passed: false)
        } else {
            switch target {
            case .ratioAtMost(let limit):
                let ratio = benchMedian(stats.ratios)
                outcome = BenchTargetOutcome(what: what + " ×Dispatch", measured: benchFormat(ratio, decimals: 2) + "×",
                                             target: target.label, passed: ratio <= limit)
            case .bytesPerOpAtMost(let limit):
                let bytes = benchMedian(stats.metric("rssBytesPerOp"))
                outcome = BenchTargetOutcome(what: what, measured: benchFormat(bytes, decimals: 1) + " B",
                                             target: target.label, passed: bytes <= limit)
            case .noOrderViolations:
                let inversions = Int(stats.metric("inversions").max() ?? -1)
                let fifo = Int(stats.metric("fifoViolations").max() ?? -1)
                outcome = BenchTargetOutcome(what: what, measured: "\(inversions) inversions, \(fifo) FIFO violations",
                                             target: target.label, passed: inversions == 0 && fifo == 0)
            }
        }
        result.outcome = outcome
        targets.append(outcome)
    }

    // MARK: Estimating

    /// About how long `row` will take, for the progress line: the model's
    /// figure times `scale`, at most the row's time budget plus one
    /// repetition (a row stops repeating once it has run for its budget).
    private func estimatedSeconds(_ row: BenchRow, scale: Double) -> Double {
        let repetitions = Double(min(plan.repetitions, row.repetitionCap ?? Int.max))
        let seconds = modelSeconds(row) * scale
        return min(seconds, plan.rowBudgetSeconds + seconds / max(repetitions, 1))
    }

    /// The time `row` would take if a sample lasted exactly as long as it
    /// must (the sampling target, or a whole run where the growth group
    /// predicts a longer one), with nothing else to do. The real time is
    /// longer by a factor that the progress line measures as it goes.
    private func modelSeconds(_ row: BenchRow) -> Double {
        guard row.skipReason == nil else { return 0 }
        let repetitions = Double(min(plan.repetitions, row.repetitionCap ?? Int.max))
        // With --quick there is no sampling target: every row counts alike.
        let sample = max(Double(plan.sampleTargetNanoseconds) / 1e9, 0.01)
        // Without a prediction, a run is taken to cost about a microsecond
        // per operation: this matters for the large rows only.
        let run = row.runSecondsHint ?? max(sample, Double(row.count) * 1e-6)
        var total = 0.0
        for engine in row.engines {
            guard let prediction = predictedRun(row, engine) else {
                let warmUp = plan.warmUp && row.count < 1_000_000 && !row.singleRun ? run : 0
                total += warmUp + repetitions * run
                continue
            }
            if prediction.seconds > plan.maxRunSeconds { continue }
            let warmUp = plan.warmUp && prediction.seconds < 2 && row.count < 1_000_000 ? prediction.seconds : 0
            total += warmUp + repetitions * max(prediction.seconds, sample)
        }
        return total
    }

    // MARK: Running

    private func runRow(_ row: BenchRow) -> BenchRowResult {
        var result = BenchRowResult(row: row)
        guard row.skipReason == nil else { return result }
        let rowStart = benchNow()
        for engine in row.engines { result.stats[engine] = BenchEngineStats() }

        var engines: [BenchEngineID] = []
        var warmUp: [BenchEngineID] = []
        for engine in row.engines {
            guard let prediction = predictedRun(row, engine) else {
                engines.append(engine)
                // A million operations amortize any warm-up effect; a
                // single-run row runs once per repetition only.
                if row.count < 1_000_000, !row.singleRun { warmUp.append(engine) }
                continue
            }
            if prediction.seconds > plan.maxRunSeconds {
                result.stats[engine]?.notRun = "not run: predicted ~\(benchDuration(prediction.seconds * 1e9)) per run (\(prediction.basis)) > --max-run-seconds \(benchDuration(plan.maxRunSeconds * 1e9))"
                result.stats[engine]?.predictedPerOp = prediction.seconds * 1e9 / Double(row.count)
                continue
            }
            engines.append(engine)
            // A run this long needs no warm-up and is its own sample.
            if prediction.seconds < 2, row.count < 1_000_000, !row.singleRun { warmUp.append(engine) }
        }

        if plan.warmUp {
            for engine in warmUp {
                let warm = runOnce(row, engine, repetition: -1, into: &result)
                if !row.isMemory, plan.sampleTargetNanoseconds > 0 {
                    let runs = (plan.sampleTargetNanoseconds + max(warm.nanoseconds, 1) - 1) / max(warm.nanoseconds, 1)
                    result.stats[engine]?.runsPerSample = Int(min(max(runs, 1), 10_000))
                }
            }
        }

        let repetitions = min(plan.repetitions, row.repetitionCap ?? Int.max)
        for repetition in 0..<repetitions where !engines.isEmpty {
            if repetition > 0, Double(benchNow() - rowStart) / 1e9 > plan.rowBudgetSeconds { break }
            let shift = repetition % engines.count
            let order = Array(engines[shift...] + engines[..<shift])
            var perOp: [BenchEngineID: Double] = [:]
            for engine in order {
                let runs = result.stats[engine]?.runsPerSample ?? 1
                var total: UInt64 = 0
                var metrics: [String: Double] = [:]
                for _ in 0..<runs {
                    let outcome = runOnce(row, engine, repetition: repetition, into: &result)
                    total += outcome.nanoseconds
                    metrics.merge(outcome.metrics, uniquingKeysWith: +)
                }
                perOp[engine] = Double(total) / Double(runs * row.count)
                result.stats[engine]?.perOp.append(perOp[engine]!)
                result.stats[engine]?.metrics.append(metrics.mapValues { $0 / Double(runs) })
            }
            if let anchor = perOp[.dispatch], anchor > 0 {
                for engine in engines {
                    result.stats[engine]?.ratios.append(perOp[engine]! / anchor)
                }
            }
        }
        result.wallSeconds = Double(benchNow() - rowStart) / 1e9
        checkOrderViolations(&result)
        return result
    }

    /// The predicted duration of one run of `engine` on `row`, extrapolated
    /// from the two largest smaller sizes of the row's growth group (growth
    /// exponent at least 1), or nil without data.
    func predictedRun(_ row: BenchRow, _ engine: BenchEngineID) -> (seconds: Double, basis: String)? {
        guard let group = row.scaleGroup else { return nil }
        let measured = results
            .filter { $0.row.scaleGroup == group && $0.row.count < row.count }
            .compactMap { result -> (count: Int, nanoseconds: Double)? in
                guard let stats = result.stats[engine], !stats.perOp.isEmpty else { return nil }
                return (result.row.count, benchMedian(stats.perOp) * Double(result.row.count))
            }
            .sorted { $0.count < $1.count }
        guard let largest = measured.last else { return nil }
        var exponent = 1.0
        var basis = "linear from \(benchCount(largest.count))"
        if measured.count >= 2 {
            let previous = measured[measured.count - 2]
            exponent = max(1, log(largest.nanoseconds / previous.nanoseconds) / log(Double(largest.count) / Double(previous.count)))
            basis = "growth \(benchFormat(exponent, decimals: 2)) from \(benchCount(previous.count))→\(benchCount(largest.count))"
        }
        let seconds = largest.nanoseconds * pow(Double(row.count) / Double(largest.count), exponent) / 1e9
        return (seconds, basis)
    }

    /// One validated run.
    private func runOnce(
        _ row: BenchRow, _ engine: BenchEngineID, repetition: Int, into result: inout BenchRowResult
    ) -> BenchRunResult {
        watchdog.begin("\(row.id) (\(row.title)) on \(engine.name), N = \(row.count)")
        // With --record, this library's runs are recorded; the trace is
        // built and dropped after the timed region.
        let recording = plan.record && engine == .operations && OperationTracing.start()
        let outcome = row.workload.run(on: engine.engine, count: row.count, seed: plan.seed)
            ?? (0, ["the engine cannot run this workload"], [:])
        if recording { _ = OperationTracing.stop() }
        watchdog.end()
        if !outcome.failures.isEmpty {
            result.stats[engine]?.failed = true
            let when = repetition < 0 ? "warm-up" : "repetition \(repetition + 1)"
            for failure in outcome.failures {
                let message = "\(row.id) \(engine.name) N=\(row.count) \(when): \(failure)"
                failures.append(message)
                result.stats[engine]?.failures.append(message)
                progress?.clear()
                benchPrintError("FAIL " + message)
            }
        }
        return outcome
    }

    /// W7: this library must have no priority inversion and no FIFO
    /// violation; other engines are only reported.
    private func checkOrderViolations(_ result: inout BenchRowResult) {
        guard case .priorities = result.row.workload, let stats = result.stats[.operations] else { return }
        let inversions = stats.metric("inversions").max() ?? 0
        let fifo = stats.metric("fifoViolations").max() ?? 0
        if inversions > 0 || fifo > 0 {
            result.stats[.operations]?.failed = true
            let message = "\(result.row.id) Operations: \(Int(inversions)) priority inversions, \(Int(fifo)) FIFO violations (both must be 0)"
            failures.append(message)
            result.stats[.operations]?.failures.append(message)
            progress?.clear()
            benchPrintError("FAIL " + message)
        }
    }
}

/// Reports a run that does not return (a hang) and ends the process with
/// status 3, so that a hang fails loudly instead of stalling CI.
final class BenchWatchdog: @unchecked Sendable {
    // @unchecked Sendable: `current` is a Mutex; `limit` and `beforeReport`
    // are immutable.
    private let current = Mutex<(label: String, start: UInt64)?>(nil)
    private let limit: UInt64
    private let beforeReport: @Sendable () -> Void

    /// - Parameter beforeReport: called on the watchdog's thread just before
    ///   it reports a hang (it erases the progress line).
    init(limitSeconds: Int, beforeReport: @escaping @Sendable () -> Void = {}) {
        limit = UInt64(limitSeconds) * 1_000_000_000
        self.beforeReport = beforeReport
        let box = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        let status = pthread_create(&thread, nil, { argument in
            guard let argument else { return nil }
            let watchdog = Unmanaged<BenchWatchdog>.fromOpaque(argument).takeRetainedValue()
            watchdog.watch()
            return nil
        }, box)
        if status == 0 {
            pthread_detach(thread)
        } else {
            Unmanaged<BenchWatchdog>.fromOpaque(box).release()
        }
    }

    func begin(_ label: String) {
        current.withLock { $0 = (label, benchNow()) }
    }

    func end() {
        current.withLock { $0 = nil }
    }

    private func watch() {
        while true {
            usleep(250_000)
            let overdue = current.withLock { state -> String? in
                guard let state, benchNow() - state.start > limit else { return nil }
                return state.label
            }
            if let overdue {
                beforeReport()
                benchPrintError("HANG: \(overdue) did not finish within \(limit / 1_000_000_000) s")
                fflush(nil)
                exit(3)
            }
        }
    }
}

/// Starts `body` on a new detached thread. The benchmark runs on its own
/// thread so that its blocking waits never occupy a thread of Swift
/// concurrency's cooperative pool (where async bodies and tasks run).
func benchDetach(_ body: @escaping @Sendable () -> Void) {
    final class Box: Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    let box = Unmanaged.passRetained(Box(body)).toOpaque()
    var thread = pthread_t()
    let status = pthread_create(&thread, nil, { argument in
        guard let argument else { return nil }
        Unmanaged<Box>.fromOpaque(argument).takeRetainedValue().body()
        return nil
    }, box)
    precondition(status == 0, "ops bench: could not start the benchmark thread (\(status))")
    pthread_detach(thread)
}

/// Writes a line to standard error.
func benchPrintError(_ message: String) {
    let line = message + "\n"
    _ = line.withCString { write(2, $0, strlen($0)) }
}
