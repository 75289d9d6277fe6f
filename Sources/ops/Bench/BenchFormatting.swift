// Number formatting and JSON encoding for the report. No Foundation: the
// benchmark's own code stays on the standard library, like the library.

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

/// A wall-clock span given in seconds, for the progress line: "45 s",
/// "3 min 20 s", "1 h 5 min".
func benchSpan(_ seconds: Double) -> String {
    guard seconds.isFinite else { return "–" }
    let whole = max(0, Int(seconds.rounded()))
    if whole < 60 { return "\(whole) s" }
    if whole < 3_600 { return "\(whole / 60) min \(whole % 60) s" }
    return "\(whole / 3_600) h \(whole % 3_600 / 60) min"
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

// MARK: JSON

/// A JSON value, written by hand for `ops bench --format json`.
enum BenchJSON {
    case null
    case bool(Bool)
    case int(Int)
    /// Written as `null` when not finite: JSON has no NaN or infinity.
    case number(Double)
    case string(String)
    case array([BenchJSON])
    /// Keys in the order given, so that lines compare well with `diff`.
    case object([(String, BenchJSON)])

    /// `value`, or `null` when nil.
    static func number(_ value: Double?) -> BenchJSON { value.map { .number($0) } ?? .null }
    static func string(_ value: String?) -> BenchJSON { value.map { .string($0) } ?? .null }
    static func bool(_ value: Bool?) -> BenchJSON { value.map { .bool($0) } ?? .null }
    static func numbers(_ values: [Double]) -> BenchJSON { .array(values.map { .number($0) }) }

    /// The value on one line, without spaces.
    var text: String {
        var output = ""
        write(to: &output)
        return output
    }

    private func write(to output: inout String) {
        switch self {
        case .null: output += "null"
        case .bool(let value): output += value ? "true" : "false"
        case .int(let value): output += String(value)
        case .number(let value):
            // Swift's shortest round-trip form ("0.1", "1e-05", "120000.0")
            // is valid JSON for every finite value.
            output += value.isFinite ? String(value) : "null"
        case .string(let value): Self.writeString(value, to: &output)
        case .array(let values):
            output += "["
            for (index, value) in values.enumerated() {
                if index > 0 { output += "," }
                value.write(to: &output)
            }
            output += "]"
        case .object(let fields):
            output += "{"
            for (index, (key, value)) in fields.enumerated() {
                if index > 0 { output += "," }
                Self.writeString(key, to: &output)
                output += ":"
                value.write(to: &output)
            }
            output += "}"
        }
    }

    private static func writeString(_ value: String, to output: inout String) {
        output += "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                output += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: output.unicodeScalars.append(scalar)
            }
        }
        output += "\""
    }
}
