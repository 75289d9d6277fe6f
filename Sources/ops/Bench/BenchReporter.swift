#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// How `ops bench` prints its results.
enum BenchFormat: String, CaseIterable, Sendable {
    /// Tables for people, at most 100 columns wide where possible.
    case text
    /// One JSON object per line, for comparing runs across commits.
    case json

    func makeReporter() -> any BenchReporter {
        switch self {
        case .text: BenchTextReport()
        case .json: BenchJSONReport()
        }
    }
}

/// Receives the benchmark's results as they come, and prints them.
/// The runner calls `begin` once, `row` for each finished row (time rows
/// first, then memory rows), then `growth` and `finish` once each.
protocol BenchReporter: AnyObject {
    func begin(plan: BenchPlan, environment: BenchEnvironment)
    func row(_ result: BenchRowResult)
    func growth(_ growth: BenchGrowth)
    func finish(_ summary: BenchSummary)
}

/// The end of a run: every target's outcome and every validation failure.
struct BenchSummary {
    var targets: [BenchTargetOutcome]
    var failures: [String]
    var wallSeconds: Double
    var loadAverage = BenchEnvironment.loadAverage()
}

/// The machine and build a run measured.
struct BenchEnvironment {
    var cores: Int
    /// Kernel name, release and machine, e.g. "Linux 6.1.0 x86_64".
    var system: String
    /// "release" or "debug".
    var build: String
    /// The first three fields of /proc/loadavg at the start, or "unknown".
    var loadAverage: String

    static func current() -> BenchEnvironment {
        #if DEBUG
        let build = "debug"
        #else
        let build = "release"
        #endif
        return BenchEnvironment(cores: Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))), system: kernelDescription(),
                                build: build, loadAverage: loadAverage())
    }

    /// The first three fields of /proc/loadavg, or "unknown".
    static func loadAverage() -> String {
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

    private static func kernelDescription() -> String {
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

/// Notes on one engine's line of a row, shared by both formats' wording.
extension BenchRowResult {
    /// Short notes: repetitions cut by the row's time budget, runs per
    /// sample, the build share, order violations.
    func notes(for engine: BenchEngineID, plan: BenchPlan) -> [String] {
        guard let stats = stats[engine] else { return [] }
        if let notRun = stats.notRun { return [notRun] }
        var notes: [String] = []
        if stats.perOp.count < min(plan.repetitions, row.repetitionCap ?? Int.max) {
            notes.append("\(stats.perOp.count) repetitions (row time budget)")
        }
        if stats.runsPerSample > 1 { notes.append("\(stats.runsPerSample) runs/sample") }
        let build = stats.metric("buildShare")
        if !build.isEmpty { notes.append("build \(Int((benchMedian(build) * 100).rounded()))%") }
        let inversions = stats.metric("inversions")
        if !inversions.isEmpty {
            let fifo = stats.metric("fifoViolations")
            notes.append("\(Int(inversions.max() ?? 0)) inversions, \(Int(fifo.max() ?? 0)) FIFO violations")
        }
        let figures = Dictionary(rowFigures(for: engine), uniquingKeysWith: { first, _ in first })
        if let low = figures["finishMinNs"], let middle = figures["finishMedianNs"], let high = figures["finishMaxNs"],
           let spread = figures["finishMaxOverMedian"] {
            notes.append("queues finished at \(benchDuration(low)) / \(benchDuration(middle)) / \(benchDuration(high)) "
                + "(min/median/max), max/median \(benchFormat(spread, decimals: 2))")
        }
        if let before = figures["threadsBefore"], let peak = figures["threadsPeak"],
           let after = figures["threadsAfterIdle"], let idle = figures["idleSeconds"] {
            var text = "threads \(Int(before)) before, peak \(Int(peak)), \(Int(after)) after \(benchFormat(idle, decimals: 0)) s idle"
            if let bodies = figures["concurrentPeak"] { text += "; at most \(Int(bodies)) bodies at once" }
            notes.append(text)
        }
        return notes
    }

    /// The figures of W9 (the spread of the queues' finish times) and W10
    /// (thread counts) for `engine`: the median over the repetitions of each
    /// metric, in report order; empty for other rows.
    func rowFigures(for engine: BenchEngineID) -> [(key: String, value: Double)] {
        guard let stats = stats[engine] else { return [] }
        let keys: [String]
        switch row.workload {
        case .serialQueues: keys = ["finishMinNs", "finishMedianNs", "finishMaxNs", "finishMaxOverMedian"]
        case .blocking: keys = ["threadsBefore", "threadsPeak", "threadsAfterIdle", "idleSeconds", "concurrentPeak"]
        default: return []
        }
        return keys.compactMap { key in
            let values = stats.metric(key)
            return values.isEmpty ? nil : (key, benchMedian(values))
        }
    }
}
