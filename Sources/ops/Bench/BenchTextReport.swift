/// The report for people: a header, then one table per kind of row, printed
/// as rows finish, then the targets and the validation. Lines stay within
/// 100 columns: each row starts with a heading line (id, workload, N, row
/// time) and notes that do not fit beside the numbers go on lines below them.
final class BenchTextReport: BenchReporter {
    private var plan: BenchPlan?
    private var printedTimeHeader = false
    private var printedMemoryHeader = false

    private static let width = TextLayout.lineWidth
    /// Where notes that do not fit beside the numbers start.
    private static let noteIndent = "              "

    func begin(plan: BenchPlan, environment: BenchEnvironment) {
        self.plan = plan
        let build = environment.build == "release" ? "release" : "debug (numbers are meaningless; use -c release)"
        print("# ops bench\(plan.quick ? " --quick (smoke test: timings are not meaningful)" : "")")
        print("")
        let sampling = plan.warmUp
            ? "one validated warm-up run per engine first (not for N ≥ 1M or runs predicted ≥ 2 s); a sample "
                + "repeats its workload until it lasts ≥ \(plan.sampleTargetNanoseconds / 1_000_000) ms; a row stops "
                + "repeating after \(benchFormat(plan.rowBudgetSeconds, decimals: 0)) s"
            : "no warm-up, one run per sample"
        let bullets = [
            "ops \(operationsVersion), build: \(build); machine: \(environment.cores) cores, \(environment.system)",
            "engines: Operations (this library), Foundation (its OperationQueue, same workload source), "
                + "Dispatch (DispatchQueue + DispatchGroup)",
            "\(plan.repetitions) repetition\(plan.repetitions == 1 ? "" : "s") per row (at most 3 for 1M rows and memory), engines interleaved, "
                + "order rotating; " + sampling,
            "times are per operation: median, min, max over repetitions; ×Dispatch = median over repetitions of "
                + "(engine ÷ Dispatch in that repetition); targets apply to Operations",
            "seed \(plan.seed); every run validated (each operation ran once, every ordering held)",
            "\(plan.rows.count) rows: " + plan.rows.map(\.id).joined(separator: ", "),
            "load average at start: \(environment.loadAverage) (other processes on the machine distort timings; "
                + "ratios are taken within a repetition to limit that)",
        ]
        for bullet in bullets { emit(TextLayout.wrap(bullet, first: "- ", rest: "  ")) }
    }

    func row(_ result: BenchRowResult) {
        guard let plan else { return }
        let row = result.row
        if row.isMemory {
            printMemoryHeaderOnce()
        } else {
            printTimeHeaderOnce()
        }
        print("")
        var heading = "\(row.id) · \(row.title) · N = \(benchCount(row.count))"
        if let reason = row.skipReason {
            emit(TextLayout.wrap(heading + " · skipped: " + reason, rest: "    "))
            return
        }
        heading += " · \(benchFormat(result.wallSeconds, decimals: 1)) s"
        if let note = row.note { heading += " · " + note }
        emit(TextLayout.wrap(heading, rest: "    "))
        for engine in row.engines {
            guard let stats = result.stats[engine] else { continue }
            let cells = row.isMemory ? memoryCells(result, engine, stats) : timeCells(result, engine, stats)
            let notes = row.isMemory ? [] : result.notes(for: engine, plan: plan)
            let numbers = "  " + cells.joined(separator: " ")
            let inline = notes.isEmpty ? numbers : Self.pad(numbers, 84) + notes.joined(separator: "; ")
            if TextLayout.displayWidth(inline) <= Self.width {
                emit([inline])
            } else {
                emit([numbers])
                emit(TextLayout.wrap(notes.joined(separator: "; "), first: Self.noteIndent, rest: Self.noteIndent))
            }
        }
    }

    func growth(_ growth: BenchGrowth) {
        guard !growth.lines.isEmpty else { return }
        let labels = growth.sizes.map(benchCount)
        let headers = ["exp \(labels[0])→\(labels[2])", "exp \(labels[1])→\(labels[2])", "cost \(labels[2])/\(labels[0])"]
        let widths = headers.map { max($0.count, 8) }
        func line(_ cells: [String]) -> String {
            let fixed = [
                TextLayout.pad(cells[0], to: 8), TextLayout.pad(cells[1], to: 10),
                TextLayout.pad(cells[2], to: 8, right: true), TextLayout.pad(cells[3], to: 8, right: true),
                TextLayout.pad(cells[4], to: 8, right: true),
            ].joined(separator: "  ")
            let figures = (0..<3).map { TextLayout.pad(cells[5 + $0], to: widths[$0], right: true) }
            return Self.trimmed(([fixed] + figures + [cells[8]]).joined(separator: "  "))
        }
        print("")
        print("## Growth (per-operation time against N)")
        print("")
        print(line(["workload", "engine"] + labels + headers + ["targets"]))
        for entry in growth.lines {
            let sizes = entry.perOp.enumerated().map { index, value in
                (entry.predicted[index] ? "~" : "") + benchDuration(value)
            }
            var verdicts = ""
            if let growthPassed = entry.growthPassed, let costPassed = entry.costPassed {
                verdicts = (growthPassed ? "PASS" : "MISS") + ", " + (costPassed ? "PASS" : "MISS")
            }
            print(line([entry.group, entry.engine.name] + sizes + [
                benchFormat(entry.wholeExponent, decimals: 2), benchFormat(entry.upperExponent, decimals: 2),
                benchFormat(entry.cost, decimals: 2) + "×", verdicts,
            ]))
        }
        print("")
        emit(TextLayout.wrap(
            "Growth exponent = log(time ratio) / log(N ratio). Targets (Operations): the larger exponent "
                + "≤\(benchFormat(BenchGrowth.exponentLimit, decimals: 1)), then the cost "
                + "≤\(benchFormat(BenchGrowth.costLimit, decimals: 1))×. \"~\": not run (see --max-run-seconds), "
                + "predicted from the smaller sizes."))
    }

    func finish(_ summary: BenchSummary) {
        print("")
        print("## Targets (Operations)")
        print("")
        for outcome in summary.targets {
            let text = "\(outcome.passed ? "PASS" : "MISS") \(outcome.what): \(outcome.measured) (target \(outcome.target))"
            emit(TextLayout.wrap(text, first: "- ", rest: "  "))
        }
        print("")
        print("## Validation")
        print("")
        if summary.failures.isEmpty {
            print("All runs validated: every operation ran exactly once and every ordering held.")
        } else {
            print("\(summary.failures.count) validation failures:")
            for failure in summary.failures { emit(TextLayout.wrap("FAIL " + failure, first: "- ", rest: "  ")) }
        }
        print("")
        print("Total wall time: \(benchFormat(summary.wallSeconds, decimals: 1)) s; load average at end: \(summary.loadAverage)")
    }

    // MARK: Tables

    private func printTimeHeaderOnce() {
        guard !printedTimeHeader else { return }
        printedTimeHeader = true
        print("")
        print("## Time")
        print("")
        print(Self.trimmed("  " + [
            TextLayout.pad("engine", to: 10), TextLayout.pad("median", to: 8, right: true),
            TextLayout.pad("min", to: 8, right: true), TextLayout.pad("max", to: 8, right: true),
            TextLayout.pad(" ops/s", to: 8, right: true), TextLayout.pad(" ×Dispatch", to: 10, right: true),
            TextLayout.pad(" target", to: 14), TextLayout.pad(" result", to: 7), " notes",
        ].joined(separator: " ")))
    }

    private func printMemoryHeaderOnce() {
        guard !printedMemoryHeader else { return }
        printedMemoryHeader = true
        print("")
        print("## Memory per pending operation")
        print("")
        print(Self.trimmed("  " + [
            TextLayout.pad("engine", to: 10), TextLayout.pad(" B/op median", to: 12, right: true),
            TextLayout.pad("min", to: 8, right: true), TextLayout.pad("max", to: 8, right: true),
            TextLayout.pad(" add time/op", to: 12, right: true), TextLayout.pad(" ×Dispatch", to: 10, right: true),
            TextLayout.pad(" target", to: 14), " result",
        ].joined(separator: " ")))
        print("  (resident bytes per pending operation; ×Dispatch compares bytes)")
    }

    /// engine, median, min, max, ops/s, ×Dispatch, target, result: 83 columns.
    private func timeCells(_ result: BenchRowResult, _ engine: BenchEngineID, _ stats: BenchEngineStats) -> [String] {
        let target = result.targetLabel(for: engine) ?? ""
        let verdict = result.verdict(for: engine) ?? ""
        if stats.notRun != nil {
            let predicted = stats.predictedPerOp.map { "~" + benchDuration($0) } ?? "–"
            return [
                TextLayout.pad(engine.name, to: 10), TextLayout.pad(predicted, to: 8, right: true),
                TextLayout.pad("–", to: 8, right: true), TextLayout.pad("–", to: 8, right: true),
                TextLayout.pad("–", to: 8, right: true), TextLayout.pad("–", to: 10, right: true),
                " " + TextLayout.pad(target, to: 13), " " + TextLayout.pad(verdict.isEmpty ? "not run" : verdict, to: 6),
            ]
        }
        let ratio = stats.ratio.map { benchFormat($0, decimals: 2) + "×" } ?? "–"
        return [
            TextLayout.pad(engine.name, to: 10), TextLayout.pad(benchDuration(stats.median), to: 8, right: true),
            TextLayout.pad(benchDuration(stats.perOp.min() ?? .nan), to: 8, right: true),
            TextLayout.pad(benchDuration(stats.perOp.max() ?? .nan), to: 8, right: true),
            TextLayout.pad(benchRate(stats.median), to: 8, right: true), TextLayout.pad(ratio, to: 10, right: true),
            " " + TextLayout.pad(target, to: 13), " " + TextLayout.pad(verdict, to: 6),
        ]
    }

    /// engine, bytes median, min, max, add time, ×Dispatch (bytes), target, result.
    private func memoryCells(_ result: BenchRowResult, _ engine: BenchEngineID, _ stats: BenchEngineStats) -> [String] {
        let bytes = stats.metric("rssBytesPerOp")
        let median = benchMedian(bytes)
        let anchor = result.stats[.dispatch].map { benchMedian($0.metric("rssBytesPerOp")) }
        let ratio = anchor.map { $0 > 0 ? benchFormat(median / $0, decimals: 2) + "×" : "–" } ?? "–"
        return [
            TextLayout.pad(engine.name, to: 10), TextLayout.pad(benchFormat(median, decimals: 1), to: 12, right: true),
            TextLayout.pad(benchFormat(bytes.min() ?? .nan, decimals: 1), to: 8, right: true),
            TextLayout.pad(benchFormat(bytes.max() ?? .nan, decimals: 1), to: 8, right: true),
            TextLayout.pad(benchDuration(stats.median), to: 12, right: true), TextLayout.pad(ratio, to: 10, right: true),
            " " + TextLayout.pad(result.targetLabel(for: engine) ?? "", to: 13),
            " " + TextLayout.pad(result.verdict(for: engine) ?? "", to: 6),
        ]
    }

    // MARK: Helpers

    private func emit(_ lines: [String]) {
        for line in lines { print(Self.trimmed(line)) }
    }

    private static func pad(_ text: String, _ width: Int) -> String {
        TextLayout.pad(trimmed(text), to: width)
    }

    private static func trimmed(_ text: String) -> String {
        var text = Substring(text)
        while text.last == " " { text = text.dropLast() }
        return String(text)
    }
}
