#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The report: markdown tables, printed as rows finish.
extension BenchRunner {
    func printHeader() {
        let cores = sysconf(Int32(_SC_NPROCESSORS_ONLN))
        #if DEBUG
        let build = "debug (numbers are meaningless; use -c release)"
        #else
        let build = "release"
        #endif
        print("# ops bench\(plan.quick ? " --quick (smoke test: timings are not meaningful)" : "")")
        print("")
        print("- machine: \(cores) cores, \(kernelDescription()); build: \(build)")
        print("- engines: Operations (this library), Foundation (its OperationQueue, same workload source), Dispatch (DispatchQueue + DispatchGroup)")
        print("- \(plan.repetitions) repetitions per row (at most 3 for 1M rows and memory), engines interleaved, order rotating; " +
              (plan.warmUp ? "one validated warm-up run per engine first (not for N ≥ 1M or runs predicted ≥ 2 s); a sample repeats its workload until it lasts ≥ \(plan.sampleTargetNanoseconds / 1_000_000) ms; a row stops repeating after \(benchFormat(plan.rowBudgetSeconds, decimals: 0)) s" : "no warm-up, one run per sample"))
        print("- times are per operation: median, min, max over repetitions; ×Dispatch = median over repetitions of (engine ÷ Dispatch in that repetition); targets apply to Operations")
        print("- seed \(plan.seed); every run validated (each operation ran once, every ordering held)")
        print("- load average at start: \(loadAverage()) (other processes on the machine distort timings; ratios are taken within a repetition to limit that)")
        fflush(nil)
    }

    /// The first three fields of /proc/loadavg, or "unknown".
    func loadAverage() -> String {
        #if os(Linux)
        let descriptor = open("/proc/loadavg", O_RDONLY)
        guard descriptor >= 0 else { return "unknown" }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: 128)
        let length = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, 127) }
        guard length > 0 else { return "unknown" }
        return String(decoding: buffer[0..<length], as: UTF8.self)
            .split(separator: " ").prefix(3).joined(separator: " ")
        #else
        return "unknown"
        #endif
    }

    func printTimeTableHeader() {
        print("")
        print("## Time")
        print("")
        print("| row | workload | N | engine | median | min | max | ops/s | ×Dispatch | target | result | notes |")
        print("|---|---|--:|---|--:|--:|--:|--:|--:|---|---|---|")
        fflush(nil)
    }

    func printTimeRow(_ result: BenchRowResult) {
        let row = result.row
        if let reason = row.skipReason {
            print("| \(row.id) | \(row.title) | \(benchCount(row.count)) | all | – | – | – | – | – | – | skipped | \(reason) |")
            fflush(nil)
            return
        }
        for (position, engine) in row.engines.enumerated() {
            guard let stats = result.stats[engine] else { continue }
            let first = position == 0
            let median = benchMedian(stats.perOp)
            var notes: [String] = []
            if first {
                notes.append("row \(benchFormat(result.wallSeconds, decimals: 1)) s")
                if let note = row.note { notes.append(note) }
            }
            if let notRun = stats.notRun {
                var verdict = ""
                if engine == .operations, let target = row.target {
                    targets.append(BenchTargetOutcome(
                        what: "\(row.id) \(row.title) (N = \(benchCount(row.count))) ×Dispatch",
                        measured: notRun, target: target.label, passed: false))
                    verdict = "MISS"
                }
                let predicted = stats.predictedPerOp.map { "~" + benchDuration($0) } ?? "–"
                let cells = [
                    first ? row.id : "", first ? row.title : "", first ? benchCount(row.count) : "", engine.name,
                    predicted, "–", "–", "–", "–", engine == .operations ? row.target?.label ?? "" : "", verdict,
                    (notes + [notRun]).joined(separator: "; "),
                ]
                print("| " + cells.joined(separator: " | ") + " |")
                continue
            }
            if stats.perOp.count < min(plan.repetitions, row.repetitionCap ?? Int.max) {
                notes.append("\(stats.perOp.count) repetitions (row time budget)")
            }
            if stats.runsPerSample > 1 { notes.append("\(stats.runsPerSample) runs/sample") }
            notes += metricNotes(stats)
            var targetLabel = ""
            var verdict = stats.failed ? "FAIL" : ""
            if engine == .operations, let target = row.target {
                targetLabel = target.label
                if !stats.failed { verdict = evaluate(target, result: result) ? "PASS" : "MISS" }
            }
            let ratio = stats.ratios.isEmpty ? "–" : benchFormat(benchMedian(stats.ratios), decimals: 2) + "×"
            let cells = [
                first ? row.id : "", first ? row.title : "", first ? benchCount(row.count) : "", engine.name,
                benchDuration(median), benchDuration(stats.perOp.min() ?? 0), benchDuration(stats.perOp.max() ?? 0),
                benchRate(median), ratio, targetLabel, verdict, notes.joined(separator: "; "),
            ]
            print("| " + cells.joined(separator: " | ") + " |")
        }
        fflush(nil)
    }

    func printMemoryTableHeader() {
        print("")
        print("## Memory per pending operation")
        print("")
        print("| row | N | engine | RSS B/op median | min | max | add time/op | ×Dispatch (bytes) | target | result |")
        print("|---|--:|---|--:|--:|--:|--:|--:|---|---|")
        fflush(nil)
    }

    func printMemoryRow(_ result: BenchRowResult) {
        let row = result.row
        let anchor = result.stats[.dispatch].map { benchMedian($0.metric("rssBytesPerOp")) }
        for (position, engine) in row.engines.enumerated() {
            guard let stats = result.stats[engine] else { continue }
            let bytes = stats.metric("rssBytesPerOp")
            let median = benchMedian(bytes)
            var targetLabel = ""
            var verdict = stats.failed ? "FAIL" : ""
            if engine == .operations, let target = row.target {
                targetLabel = target.label
                if !stats.failed { verdict = evaluate(target, result: result) ? "PASS" : "MISS" }
            }
            let ratio = anchor.map { $0 > 0 ? benchFormat(median / $0, decimals: 2) + "×" : "–" } ?? "–"
            let cells = [
                position == 0 ? row.id : "", position == 0 ? benchCount(row.count) : "", engine.name,
                benchFormat(median, decimals: 1), benchFormat(bytes.min() ?? 0, decimals: 1),
                benchFormat(bytes.max() ?? 0, decimals: 1), benchDuration(benchMedian(stats.perOp)),
                ratio, targetLabel, verdict,
            ]
            print("| " + cells.joined(separator: " | ") + " |")
        }
        fflush(nil)
    }

    /// Per-operation cost against N for W1, W3, W4, W5: the growth exponent
    /// (1.0 is linear) and the cost per operation at the largest N relative
    /// to the smallest.
    func printGrowthTable() {
        let points = plan.scalePoints
        let groups = ["W1", "W3", "W4", "W5"]
        let labels = points.map(benchCount)
        var lines: [String] = []
        for group in groups {
            for engine in BenchPlan.withoutFoundation {
                var predicted = false
                let medians = points.map { size -> Double? in
                    guard let result = results.first(where: { $0.row.scaleGroup == group && $0.row.count == size }),
                          let stats = result.stats[engine] else { return nil }
                    if stats.perOp.isEmpty, let estimate = stats.predictedPerOp {
                        predicted = true
                        return estimate
                    }
                    return stats.perOp.isEmpty ? nil : benchMedian(stats.perOp)
                }
                guard let small = medians[0], let middle = medians[1], let large = medians[2] else { continue }
                let mark = predicted ? " (predicted)" : ""
                let whole = 1 + log(large / small) / log(Double(points[2]) / Double(points[0]))
                let upper = 1 + log(large / middle) / log(Double(points[2]) / Double(points[1]))
                let cost = large / small
                var verdict = ""
                if engine == .operations {
                    let growthPass = max(whole, upper) <= 1.1
                    let costPass = cost <= 1.3
                    verdict = "growth ≤1.1: \(growthPass ? "PASS" : "MISS"); cost ≤1.3×: \(costPass ? "PASS" : "MISS")"
                    let title = group + " " + (results.first { $0.row.scaleGroup == group }?.row.title ?? "")
                    targets.append(BenchTargetOutcome(
                        what: "\(title): growth exponent up to \(labels[2])",
                        measured: benchFormat(max(whole, upper), decimals: 2) + mark,
                        target: "≤1.1", passed: growthPass))
                    targets.append(BenchTargetOutcome(
                        what: "\(title): cost per op at \(labels[2]) vs \(labels[0])",
                        measured: benchFormat(cost, decimals: 2) + "×" + mark,
                        target: "≤1.3×", passed: costPass))
                }
                let cells = [
                    group, engine.name, benchDuration(small), benchDuration(middle),
                    (predicted ? "~" : "") + benchDuration(large) + mark,
                    benchFormat(whole, decimals: 2), benchFormat(upper, decimals: 2),
                    benchFormat(cost, decimals: 2) + "×", verdict,
                ]
                lines.append("| " + cells.joined(separator: " | ") + " |")
            }
        }
        guard !lines.isEmpty else { return }
        print("")
        print("## Growth (per-operation time against N)")
        print("")
        print("| workload | engine | \(labels[0]) | \(labels[1]) | \(labels[2]) | growth \(labels[0])→\(labels[2]) | growth \(labels[1])→\(labels[2]) | cost \(labels[2])/\(labels[0]) | targets (Operations) |")
        print("|---|---|--:|--:|--:|--:|--:|--:|---|")
        for line in lines { print(line) }
        print("")
        print("Growth exponent = log(time ratio) / log(N ratio); the growth target uses the larger of the two exponents. " +
              "\"~… (predicted)\": not run (see --max-run-seconds); extrapolated from the smaller sizes.")
        fflush(nil)
    }

    func printSummary(wallSeconds: Double) {
        print("")
        print("## Targets (Operations)")
        print("")
        for outcome in targets {
            print("- \(outcome.passed ? "PASS" : "MISS") \(outcome.what): \(outcome.measured) (target \(outcome.target))")
        }
        print("")
        print("## Validation")
        print("")
        if failures.isEmpty {
            print("All runs validated: every operation ran exactly once and every ordering held.")
        } else {
            print("\(failures.count) validation failures:")
            for failure in failures { print("- FAIL \(failure)") }
        }
        print("")
        print("Total wall time: \(benchFormat(wallSeconds, decimals: 1)) s; load average at end: \(loadAverage())")
        fflush(nil)
    }

    // MARK: Helpers

    /// Evaluates a row target for Operations and records it for the summary.
    private func evaluate(_ target: BenchTarget, result: BenchRowResult) -> Bool {
        guard let stats = result.stats[.operations] else { return false }
        let what = "\(result.row.id) \(result.row.title) (N = \(benchCount(result.row.count)))"
        let outcome: BenchTargetOutcome
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
        targets.append(outcome)
        return outcome.passed
    }

    private func metricNotes(_ stats: BenchEngineStats) -> [String] {
        var notes: [String] = []
        let build = stats.metric("buildShare")
        if !build.isEmpty { notes.append("build \(Int((benchMedian(build) * 100).rounded()))%") }
        let inversions = stats.metric("inversions")
        let fifo = stats.metric("fifoViolations")
        if !inversions.isEmpty {
            notes.append("\(Int(inversions.max() ?? 0)) inversions, \(Int(fifo.max() ?? 0)) FIFO violations")
        }
        return notes
    }

    private func kernelDescription() -> String {
        var name = utsname()
        guard uname(&name) == 0 else { return "unknown OS" }
        func text<T>(_ field: T) -> String {
            withUnsafeBytes(of: field) { bytes in
                String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
            }
        }
        return "\(text(name.sysname)) \(text(name.release)) \(text(name.machine))"
    }
}

// MARK: Formatting (no Foundation in this target's bench files)

func benchMedian(_ values: [Double]) -> Double {
    guard !values.isEmpty else { return .nan }
    let sorted = values.sorted()
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

/// `value` with `decimals` digits after the point.
func benchFormat(_ value: Double, decimals: Int) -> String {
    guard value.isFinite else { return "–" }
    var scale = 1
    for _ in 0..<decimals { scale *= 10 }
    let scaled = Int((abs(value) * Double(scale)).rounded())
    let sign = value < 0 && scaled != 0 ? "-" : ""
    guard decimals > 0 else { return sign + String(scaled) }
    let fraction = String(scaled % scale)
    return sign + String(scaled / scale) + "." + String(repeating: "0", count: decimals - fraction.count) + fraction
}

/// Three significant digits.
private func benchSignificant(_ value: Double) -> String {
    benchFormat(value, decimals: value < 10 ? 2 : value < 100 ? 1 : 0)
}

/// A duration given in nanoseconds.
func benchDuration(_ nanoseconds: Double) -> String {
    guard nanoseconds.isFinite else { return "–" }
    if nanoseconds < 1_000 { return benchSignificant(nanoseconds) + " ns" }
    if nanoseconds < 1_000_000 { return benchSignificant(nanoseconds / 1_000) + " µs" }
    if nanoseconds < 1_000_000_000 { return benchSignificant(nanoseconds / 1_000_000) + " ms" }
    return benchSignificant(nanoseconds / 1_000_000_000) + " s"
}

/// Operations per second, given nanoseconds per operation.
func benchRate(_ nanosecondsPerOp: Double) -> String {
    guard nanosecondsPerOp.isFinite, nanosecondsPerOp > 0 else { return "–" }
    let rate = 1e9 / nanosecondsPerOp
    if rate >= 1e6 { return benchSignificant(rate / 1e6) + " M" }
    if rate >= 1e3 { return benchSignificant(rate / 1e3) + " k" }
    return benchSignificant(rate)
}

/// 1000 → "1k", 1_000_000 → "1M".
func benchCount(_ count: Int) -> String {
    if count >= 1_000_000, count % 1_000_000 == 0 { return "\(count / 1_000_000)M" }
    if count >= 1_000, count % 1_000 == 0 { return "\(count / 1_000)k" }
    return String(count)
}
