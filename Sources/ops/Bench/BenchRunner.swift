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

    func metric(_ key: String) -> [Double] { metrics.compactMap { $0[key] } }
}

/// A finished row.
struct BenchRowResult {
    var row: BenchRow
    var stats: [BenchEngineID: BenchEngineStats] = [:]
    var wallSeconds = 0.0
}

/// A target's outcome, for the summary.
struct BenchTargetOutcome {
    var what: String
    var measured: String
    var target: String
    var passed: Bool
}

/// Runs the plan: rows in order, engines interleaved within each repetition
/// (the order rotates every repetition), every run validated.
final class BenchRunner {
    let plan: BenchPlan
    private let watchdog: BenchWatchdog
    private(set) var results: [BenchRowResult] = []
    private(set) var failures: [String] = []
    var targets: [BenchTargetOutcome] = []

    init(plan: BenchPlan) {
        self.plan = plan
        watchdog = BenchWatchdog(limitSeconds: plan.hangLimitSeconds)
    }

    /// Runs everything and prints the report. Returns false if any
    /// validation failed.
    func run() -> Bool {
        let start = benchNow()
        printHeader()
        printTimeTableHeader()
        for row in plan.rows where !row.isMemory {
            let result = runRow(row)
            results.append(result)
            printTimeRow(result)
        }
        let memoryRows = plan.rows.filter(\.isMemory)
        if !memoryRows.isEmpty {
            printMemoryTableHeader()
            for row in memoryRows {
                let result = runRow(row)
                results.append(result)
                printMemoryRow(result)
            }
        }
        printGrowthTable()
        printSummary(wallSeconds: Double(benchNow() - start) / 1e9)
        return failures.isEmpty
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
                // A million operations amortize any warm-up effect.
                if row.count < 1_000_000 { warmUp.append(engine) }
                continue
            }
            if prediction.seconds > plan.maxRunSeconds {
                result.stats[engine]?.notRun = "not run: predicted ~\(benchFormat(prediction.seconds, decimals: 0)) s per run (\(prediction.basis)) > --max-run-seconds \(benchFormat(plan.maxRunSeconds, decimals: 0))"
                result.stats[engine]?.predictedPerOp = prediction.seconds * 1e9 / Double(row.count)
                continue
            }
            engines.append(engine)
            // A run this long needs no warm-up and is its own sample.
            if prediction.seconds < 2, row.count < 1_000_000 { warmUp.append(engine) }
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
    private func predictedRun(_ row: BenchRow, _ engine: BenchEngineID) -> (seconds: Double, basis: String)? {
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
        let outcome = row.workload.run(on: engine.engine, count: row.count, seed: plan.seed)
            ?? (0, ["the engine cannot run this workload"], [:])
        watchdog.end()
        if !outcome.failures.isEmpty {
            result.stats[engine]?.failed = true
            let when = repetition < 0 ? "warm-up" : "repetition \(repetition + 1)"
            for failure in outcome.failures {
                let message = "\(row.id) \(engine.name) N=\(row.count) \(when): \(failure)"
                failures.append(message)
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
            benchPrintError("FAIL " + message)
        }
    }
}

/// Reports a run that does not return (a hang) and ends the process with
/// status 3, so that a hang fails loudly instead of stalling CI.
final class BenchWatchdog: @unchecked Sendable {
    // @unchecked Sendable: `current` is a Mutex; `limit` is immutable.
    private let current = Mutex<(label: String, start: UInt64)?>(nil)
    private let limit: UInt64

    init(limitSeconds: Int) {
        limit = UInt64(limitSeconds) * 1_000_000_000
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
