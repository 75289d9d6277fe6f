#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Reports blocking waits that take suspiciously long.
///
/// Set the environment variable `OPERATIONS_WAIT_WARNING_SECONDS` (for
/// example to `10`) and any `waitUntilFinished()` or
/// `waitUntilAllOperationsAreFinished()` that has waited that long prints,
/// once, to standard error what it waits for and why that cannot run yet
/// (see `OperationQueue.diagnostics()`), then keeps waiting. Off by default.
enum HangReport {
    /// The threshold in nanoseconds, or nil when reporting is off.
    static let threshold: UInt64? = {
        guard let raw = getenv("OPERATIONS_WAIT_WARNING_SECONDS"),
              let seconds = Double(String(cString: raw)), seconds > 0 else { return nil }
        return UInt64(seconds * 1_000_000_000)
    }()

    /// Waits on `signal` until `deadline`, printing `describe()` once if the
    /// wait outlasts the threshold. Returns whether the signal arrived.
    static func wait(on signal: WaitSignal, deadline: UInt64?, describe: () -> String) -> Bool {
        guard let threshold else { return signal.wait(deadline: deadline) }
        let warnAt = monotonicNanoseconds() &+ threshold
        if deadline.map({ $0 <= warnAt }) ?? false { return signal.wait(deadline: deadline) }
        if signal.wait(deadline: warnAt) { return true }
        let report = "Operations: a wait has lasted \(Double(threshold) / 1e9) s.\n" + describe() + "\n"
        _ = report.withCString { write(2, $0, strlen($0)) }
        return signal.wait(deadline: deadline)
    }
}
