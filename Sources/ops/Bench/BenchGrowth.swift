#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Per-operation cost against N for W1, W3, W4, W5: the growth exponent
/// (1.0 is linear) and the cost per operation at the largest N relative to
/// the smallest, with their targets for Operations.
struct BenchGrowth {
    /// One workload on one engine at the plan's three sizes.
    struct Line {
        var group: String
        var title: String
        var engine: BenchEngineID
        /// Median nanoseconds per operation at each size, smallest first.
        var perOp: [Double]
        /// Whether each size was predicted (see `--max-run-seconds`) rather than run.
        var predicted: [Bool]
        /// Growth exponent from the smallest to the largest size.
        var wholeExponent: Double
        /// Growth exponent from the middle to the largest size.
        var upperExponent: Double
        /// Cost per operation at the largest size ÷ at the smallest.
        var cost: Double
        /// For Operations: whether the larger exponent is at most 1.1.
        var growthPassed: Bool?
        /// For Operations: whether the cost is at most 1.3×.
        var costPassed: Bool?
    }

    static let exponentLimit = 1.1
    static let costLimit = 1.3

    let sizes: [Int]
    private(set) var lines: [Line] = []
    /// The targets' outcomes, for the summary.
    private(set) var outcomes: [BenchTargetOutcome] = []

    init(plan: BenchPlan, results: [BenchRowResult]) {
        sizes = plan.scalePoints
        let labels = sizes.map(benchCount)
        for group in ["W1", "W3", "W4", "W5"] {
            for engine in BenchPlan.withoutFoundation {
                var predicted: [Bool] = []
                let medians = sizes.map { size -> Double? in
                    guard let result = results.first(where: { $0.row.scaleGroup == group && $0.row.count == size }),
                          let stats = result.stats[engine] else { return nil }
                    predicted.append(stats.perOp.isEmpty && stats.predictedPerOp != nil)
                    return stats.perOp.isEmpty ? stats.predictedPerOp : stats.median
                }
                guard let small = medians[0], let middle = medians[1], let large = medians[2] else { continue }
                let title = results.first { $0.row.scaleGroup == group }?.row.title ?? ""
                var line = Line(
                    group: group, title: title, engine: engine, perOp: [small, middle, large], predicted: predicted,
                    wholeExponent: 1 + log(large / small) / log(Double(sizes[2]) / Double(sizes[0])),
                    upperExponent: 1 + log(large / middle) / log(Double(sizes[2]) / Double(sizes[1])),
                    cost: large / small)
                if engine == .operations {
                    let exponent = max(line.wholeExponent, line.upperExponent)
                    let mark = predicted.contains(true) ? " (predicted)" : ""
                    line.growthPassed = exponent <= Self.exponentLimit
                    line.costPassed = line.cost <= Self.costLimit
                    outcomes.append(BenchTargetOutcome(
                        what: "\(group) \(title): growth exponent up to \(labels[2])",
                        measured: benchFormat(exponent, decimals: 2) + mark,
                        target: "≤\(benchFormat(Self.exponentLimit, decimals: 1))", passed: line.growthPassed!))
                    outcomes.append(BenchTargetOutcome(
                        what: "\(group) \(title): cost per op at \(labels[2]) vs \(labels[0])",
                        measured: benchFormat(line.cost, decimals: 2) + "×" + mark,
                        target: "≤\(benchFormat(Self.costLimit, decimals: 1))×", passed: line.costPassed!))
                }
                lines.append(line)
            }
        }
    }
}
