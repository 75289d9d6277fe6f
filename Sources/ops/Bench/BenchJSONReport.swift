/// The report for programs: JSON Lines, one object per line, each with a
/// `kind`: one `run` (version, build, machine, settings), one `time` or
/// `memory` object per engine of each row (every figure of the text tables,
/// plus the per-repetition values behind them), one `growth` object per
/// workload and engine, and one `summary`. Times are nanoseconds per
/// operation; absent figures are `null`.
///
/// Compare two commits, for example:
/// `jq -r 'select(.kind=="time") | [.row, .engine, .medianNs] | @tsv' a.jsonl`.
final class BenchJSONReport: BenchReporter {
    private var plan: BenchPlan?

    func begin(plan: BenchPlan, environment: BenchEnvironment) {
        self.plan = plan
        emit([
            ("kind", .string("run")),
            ("version", .string(operationsVersion)),
            ("build", .string(environment.build)),
            ("cores", .int(environment.cores)),
            ("system", .string(environment.system)),
            ("loadAverage", .string(environment.loadAverage)),
            ("quick", .bool(plan.quick)),
            ("seed", .string(String(plan.seed))),
            ("repetitions", .int(plan.repetitions)),
            ("warmUp", .bool(plan.warmUp)),
            ("sampleTargetNs", .int(Int(plan.sampleTargetNanoseconds))),
            ("rowBudgetSeconds", .number(plan.rowBudgetSeconds)),
            ("maxRunSeconds", .number(plan.maxRunSeconds)),
            ("rows", .array(plan.rows.map { .string($0.id) })),
        ])
    }

    func row(_ result: BenchRowResult) {
        guard let plan else { return }
        let row = result.row
        let common: [(String, BenchJSON)] = [
            ("kind", .string(row.isMemory ? "memory" : "time")),
            ("row", .string(row.id)),
            ("title", .string(row.title)),
            ("n", .int(row.count)),
        ]
        if let reason = row.skipReason {
            emit(common + [("skipped", .string(reason))])
            return
        }
        for engine in row.engines {
            guard let stats = result.stats[engine] else { continue }
            var fields = common + [
                ("engine", .string(engine.name)),
                ("rowSeconds", .number(result.wallSeconds)),
                ("repetitions", .int(stats.perOp.count)),
                ("runsPerSample", .int(stats.runsPerSample)),
                ("medianNs", .number(stats.perOp.isEmpty ? nil : stats.median)),
                ("minNs", .number(stats.perOp.min())),
                ("maxNs", .number(stats.perOp.max())),
                ("opsPerSecond", .number(stats.perOp.isEmpty || !(stats.median > 0) ? nil : 1e9 / stats.median)),
                ("ratioToDispatch", .number(stats.ratio)),
            ]
            if row.isMemory {
                let bytes = stats.metric("rssBytesPerOp")
                let anchor = result.stats[.dispatch].map { benchMedian($0.metric("rssBytesPerOp")) }
                let median = bytes.isEmpty ? nil : benchMedian(bytes)
                fields += [
                    ("bytesPerOpMedian", .number(median)),
                    ("bytesPerOpMin", .number(bytes.min())),
                    ("bytesPerOpMax", .number(bytes.max())),
                    ("bytesRatioToDispatch", .number(median.flatMap { value in anchor.map { value / $0 } })),
                ]
            }
            // W9: the queues' finish times; W10: thread counts (medians over
            // the repetitions; the values of each repetition are in `metrics`).
            fields += result.rowFigures(for: engine).map { ($0.key, .number($0.value)) }
            fields += [
                ("target", .string(result.targetLabel(for: engine))),
                ("result", .string(result.verdict(for: engine))),
                ("validated", .bool(!stats.failed)),
                ("failures", .array(stats.failures.map { .string($0) })),
                ("notRun", .string(stats.notRun)),
                ("predictedPerOpNs", .number(stats.predictedPerOp)),
                ("notes", .array(result.notes(for: engine, plan: plan).map { .string($0) })),
                ("rowNote", .string(row.note)),
                ("perOpNs", .numbers(stats.perOp)),
                ("ratios", .numbers(stats.ratios)),
                ("metrics", .object(metricKeys(stats).map { key in (key, .numbers(stats.metric(key))) })),
            ]
            emit(fields)
        }
    }

    func growth(_ growth: BenchGrowth) {
        for line in growth.lines {
            emit([
                ("kind", .string("growth")),
                ("workload", .string(line.group)),
                ("title", .string(line.title)),
                ("engine", .string(line.engine.name)),
                ("sizes", .array(growth.sizes.map { .int($0) })),
                ("perOpNs", .numbers(line.perOp)),
                ("predicted", .array(line.predicted.map { .bool($0) })),
                ("exponentWhole", .number(line.wholeExponent)),
                ("exponentUpper", .number(line.upperExponent)),
                ("cost", .number(line.cost)),
                ("exponentTarget", .number(line.growthPassed == nil ? nil : BenchGrowth.exponentLimit)),
                ("exponentResult", .string(line.growthPassed.map { $0 ? "PASS" : "MISS" })),
                ("costTarget", .number(line.costPassed == nil ? nil : BenchGrowth.costLimit)),
                ("costResult", .string(line.costPassed.map { $0 ? "PASS" : "MISS" })),
            ])
        }
    }

    func finish(_ summary: BenchSummary) {
        emit([
            ("kind", .string("summary")),
            ("validated", .bool(summary.failures.isEmpty)),
            ("failures", .array(summary.failures.map { .string($0) })),
            ("targetsPassed", .int(summary.targets.filter(\.passed).count)),
            ("targetsMissed", .int(summary.targets.filter { !$0.passed }.count)),
            ("targets", .array(summary.targets.map { outcome in
                .object([
                    ("what", .string(outcome.what)),
                    ("measured", .string(outcome.measured)),
                    ("target", .string(outcome.target)),
                    ("result", .string(outcome.passed ? "PASS" : "MISS")),
                ])
            })),
            ("wallSeconds", .number(summary.wallSeconds)),
            ("loadAverageEnd", .string(summary.loadAverage)),
        ])
    }

    private func metricKeys(_ stats: BenchEngineStats) -> [String] {
        Set(stats.metrics.flatMap(\.keys)).sorted()
    }

    private func emit(_ fields: [(String, BenchJSON)]) {
        print(BenchJSON.object(fields).text)
    }
}
