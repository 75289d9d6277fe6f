/// A target from the benchmark's issue, checked for this library's engine
/// (`Operations`) on one row. Targets are reported PASS/MISS and never change
/// the exit status; order violations (W7) are correctness failures.
enum BenchTarget: Sendable {
    /// Median of the per-repetition ratios to Dispatch at most this.
    case ratioAtMost(Double)
    /// Resident bytes per pending operation at most this.
    case bytesPerOpAtMost(Double)
    /// No priority inversion and no FIFO violation (W7).
    case noOrderViolations

    var label: String {
        switch self {
        case .ratioAtMost(let limit): "≤\(benchFormat(limit, decimals: 1))×"
        case .bytesPerOpAtMost(let limit): "≤\(Int(limit)) B"
        case .noOrderViolations: "0 inv, 0 FIFO"
        }
    }
}

/// One row of the benchmark: a workload at one size on some engines.
struct BenchRow: Sendable {
    var id: String
    var title: String
    var workload: BenchWorkload
    var count: Int
    var engines: [BenchEngineID]
    var target: BenchTarget?
    /// Rows sharing a group (W1, W3, W4, W5) at different sizes form the growth table.
    var scaleGroup: String?
    /// At most this many repetitions (large rows).
    var repetitionCap: Int?
    /// Why the row is not run.
    var skipReason: String?
    var note: String?
    /// One run per engine per repetition: no warm-up run and one run per
    /// sample (W10, whose every run ends with an idle wait).
    var singleRun = false
    /// About how long one run takes, for the progress line, where the
    /// default guess (a microsecond per operation) is far off.
    var runSecondsHint: Double?

    var isMemory: Bool {
        if case .pendingMemory = workload { return true }
        return false
    }
}

/// What to run and how.
struct BenchPlan: Sendable {
    var quick: Bool
    var repetitions: Int
    var seed: UInt64
    /// A timed sample repeats its workload until it lasts at least this long
    /// (decided from the warm-up run), so that small rows are not dominated
    /// by clock resolution and wake-up latency.
    var sampleTargetNanoseconds: UInt64
    var warmUp: Bool
    /// A single run longer than this is reported as a hang (exit status 3).
    var hangLimitSeconds: Int
    /// An engine whose single run on a row is predicted (from the smaller
    /// sizes of the same growth group) to take longer than this is not run
    /// on that row; the prediction is reported instead.
    var maxRunSeconds: Double
    /// No further repetitions once a row has run this long (at least one is done).
    var rowBudgetSeconds: Double
    /// The sizes of the growth table, smallest first; the middle one is also
    /// the size of the main rows.
    var scalePoints: [Int]
    var foundationCap: Int
    var rows: [BenchRow] = []
    /// Whether this library's runs are recorded (`OperationTracing`), to
    /// measure what the recorder costs when it is on.
    var record = false

    static let all = BenchEngineID.allCases
    static let withoutFoundation: [BenchEngineID] = [.operations, .dispatch]

    init(
        quick: Bool, repetitions: Int?, seed: UInt64, maxRunSeconds: Double?, only: [String],
        engines: [BenchEngineID]? = nil
    ) {
        self.quick = quick
        self.seed = seed
        if quick {
            self.repetitions = repetitions ?? 1
            sampleTargetNanoseconds = 0
            warmUp = false
            self.maxRunSeconds = maxRunSeconds ?? 10
            rowBudgetSeconds = 5
            scalePoints = [300, 2_000, 5_000]
            foundationCap = 300
        } else {
            self.repetitions = repetitions ?? 5
            sampleTargetNanoseconds = 200_000_000
            warmUp = true
            self.maxRunSeconds = maxRunSeconds ?? 60
            rowBudgetSeconds = 20
            scalePoints = [1_000, 100_000, 1_000_000]
            foundationCap = 2_000
        }
        hangLimitSeconds = max(quick ? 60 : 300, Int(3 * self.maxRunSeconds))
        rows = Self.makeRows(scalePoints: scalePoints, foundationCap: foundationCap, quick: quick)
        if !only.isEmpty {
            rows = rows.filter { row in only.contains { Self.pattern($0, matches: row.id) } }
        }
        if let engines {
            rows = rows.compactMap { row in
                var kept = row
                kept.engines = row.engines.filter(engines.contains)
                return kept.engines.isEmpty ? nil : kept
            }
        }
    }

    /// Whether an `--only` pattern selects the row `id`: the same id, or,
    /// for a pattern ending in `*`, an id starting with what precedes it
    /// where that prefix does not end inside a number (`W1*` selects W1,
    /// W1s and W1@1M, not W10).
    static func pattern(_ pattern: String, matches id: String) -> Bool {
        guard pattern.hasSuffix("*") else { return id == pattern }
        let prefix = pattern.dropLast()
        guard id.hasPrefix(prefix) else { return false }
        let next = id.dropFirst(prefix.count).first
        return !(prefix.last?.isNumber == true && next?.isNumber == true)
    }

    private static func makeRows(scalePoints: [Int], foundationCap cap: Int, quick: Bool) -> [BenchRow] {
        let main = scalePoints[1]
        let capNote = "N capped at \(cap) for Foundation (quadratic on dependency graphs)"
        let foundationRowNote = "same workload at Foundation's capped N"
        // W9 and W10 have sizes of their own (W10's runs end with an idle wait).
        let serialQueues = quick ? 100 : 1_000
        let blockingIdle = quick ? 1.0 : 5.0
        var rows: [BenchRow] = [
            BenchRow(id: "W0", title: "create + start() by hand", workload: .createAndStart,
                     count: main, engines: all, target: .ratioAtMost(1.0)),
            BenchRow(id: "W1", title: "independent, add one by one, default width",
                     workload: .independent(width: -1, batched: false), count: main, engines: all,
                     target: .ratioAtMost(1.0), scaleGroup: "W1"),
            BenchRow(id: "W1s", title: "independent, add one by one, width 1",
                     workload: .independent(width: 1, batched: false), count: main, engines: all,
                     target: .ratioAtMost(1.0)),
            BenchRow(id: "W1w2", title: "independent, add one by one, width 2",
                     workload: .independent(width: 2, batched: false), count: main, engines: all),
            BenchRow(id: "W1a", title: "independent, async bodies", workload: .independentAsync,
                     count: main, engines: withoutFoundation, target: .ratioAtMost(1.0),
                     note: "Operations: ResultOperation with an async body; Dispatch column: one Task per closure; Foundation has no async bodies"),
            BenchRow(id: "W2", title: "independent, addOperations(waitUntilFinished: true)",
                     workload: .independent(width: -1, batched: true), count: main, engines: all,
                     target: .ratioAtMost(1.0)),
            BenchRow(id: "W3", title: "chain, per link", workload: .chain, count: main,
                     engines: withoutFoundation, target: .ratioAtMost(1.2), scaleGroup: "W3", note: capNote),
            BenchRow(id: "W3f", title: "chain, per link", workload: .chain, count: cap, engines: all, target: .ratioAtMost(1.2),
                     note: foundationRowNote),
            BenchRow(id: "W4", title: "fan-out/fan-in, per middle", workload: .fanOutFanIn, count: main,
                     engines: withoutFoundation, target: .ratioAtMost(1.2), scaleGroup: "W4", note: capNote),
            BenchRow(id: "W4f", title: "fan-out/fan-in, per middle", workload: .fanOutFanIn, count: cap,
                     engines: all, target: .ratioAtMost(1.2), note: foundationRowNote),
            BenchRow(id: "W5", title: "random DAG (0–4 deps)", workload: .randomGraph, count: main,
                     engines: withoutFoundation, target: .ratioAtMost(1.2), scaleGroup: "W5", note: capNote),
            BenchRow(id: "W5f", title: "random DAG (0–4 deps)", workload: .randomGraph, count: cap,
                     engines: all, target: .ratioAtMost(1.2), note: foundationRowNote),
            BenchRow(id: "W6", title: "cancel suspended queue, resume, wait", workload: .cancelSuspended,
                     count: main, engines: all, target: .ratioAtMost(1.0)),
            BenchRow(id: "W7", title: "random priorities, serial, resume + wait", workload: .priorities,
                     count: main, engines: all, target: .noOrderViolations),
            BenchRow(id: "W9", title: "\(benchCount(serialQueues)) serial queues, 4 producers",
                     workload: .serialQueues(queues: serialQueues, producers: 4),
                     count: serialQueues * (quick ? 20 : 100), engines: all, target: .ratioAtMost(1.0),
                     note: "\(quick ? 20 : 100) operations per queue; Dispatch: serial queues targeting the global queue"),
            BenchRow(id: "W10", title: "blocking operations (2 ms sleep), default width",
                     workload: .blocking(sleepMicroseconds: 2_000, idleSeconds: blockingIdle),
                     count: quick ? 200 : 2_000, engines: all, repetitionCap: 3,
                     note: "Dispatch: the global concurrent queue; threads after \(benchFormat(blockingIdle, decimals: 0)) s idle",
                     singleRun: true, runSecondsHint: blockingIdle + (quick ? 0.3 : 1.5)),
        ]
        // The growth table's other sizes (the middle size is the main row).
        // Each group's smallest size runs right before its main row, and the
        // largest sizes after all main rows, so that a size's run time can be
        // predicted from the smaller ones (see `BenchPlan.maxRunSeconds`).
        let scaled: [String: (title: String, workload: BenchWorkload, target: BenchTarget?)] = [
            "W1": ("independent, add one by one, default width", .independent(width: -1, batched: false), nil),
            "W3": ("chain, per link", .chain, .ratioAtMost(1.2)),
            "W4": ("fan-out/fan-in, per middle", .fanOutFanIn, .ratioAtMost(1.2)),
            "W5": ("random DAG (0–4 deps)", .randomGraph, .ratioAtMost(1.2)),
        ]
        func scaleRow(_ group: String, _ size: Int) -> BenchRow {
            let spec = scaled[group]!
            return BenchRow(
                id: "\(group)@\(benchCount(size))", title: spec.title, workload: spec.workload, count: size,
                engines: withoutFoundation, target: spec.target, scaleGroup: group,
                repetitionCap: size >= 1_000_000 ? 3 : nil
            )
        }
        rows = rows.flatMap { row -> [BenchRow] in
            guard let group = row.scaleGroup else { return [row] }
            return [scaleRow(group, scalePoints[0]), row]
        }
        rows += ["W1", "W3", "W4", "W5"].map { scaleRow($0, scalePoints[2]) }
        rows.append(BenchRow(id: "W8", title: "resident memory per pending operation", workload: .pendingMemory,
                             count: quick ? 100_000 : 1_000_000, engines: all,
                             target: .bytesPerOpAtMost(160), repetitionCap: 3))
        return rows
    }
}
