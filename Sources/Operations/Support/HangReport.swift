import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Reports waits that take suspiciously long.
///
/// Set the environment variable `OPERATIONS_WAIT_WARNING_SECONDS` (for
/// example to `10`) and any blocking wait (`waitUntilFinished()`,
/// `waitUntilAllOperationsAreFinished()`, a blocked `addOperation`) or
/// `async` wait (`await operation.finished()`, `await operation.value`,
/// `await queue.drained()`, `queue.run`) that has waited that long prints,
/// once, what it waits for and why that cannot run yet (see
/// `OperationQueue.diagnostics()`, which also names dependency cycles), then
/// keeps waiting. Off by default.
enum HangReport {
    /// The threshold in nanoseconds, or nil when reporting is off.
    static let threshold: UInt64? = {
        guard let raw = getenv("OPERATIONS_WAIT_WARNING_SECONDS"),
              let seconds = Double(String(cString: raw)), seconds > 0, seconds < 1e9 else { return nil }
        return UInt64(seconds * 1_000_000_000)
    }()

    /// Waits on `signal` until `deadline`, printing `describe()` once if the
    /// wait outlasts the threshold. Returns whether the signal arrived.
    static func wait(on signal: WaitSignal, deadline: Deadline?, describe: () -> String) -> Bool {
        guard let threshold else { return signal.wait(deadline: deadline) }
        let warnAt = Deadline(nanosecondsFromNow: threshold)
        if let deadline, deadline <= warnAt { return signal.wait(deadline: deadline) }
        if signal.wait(deadline: warnAt) { return true }
        emit(describe())
        return signal.wait(deadline: deadline)
    }

    /// How a checked wait ended.
    enum Outcome: Equatable {
        case signalled
        case timedOut
        /// The wait became one that can never end (the reason, for the
        /// misuse report); its record has been removed from the registry.
        case neverEnds(String)
    }

    /// Waits on `signal` with no deadline, like `wait(on:deadline:describe:)`,
    /// and re-checks the registered wait `record` now and then: work added,
    /// dependencies added, or widths changed after the wait began can make it
    /// one that can never end (`WaitRegistry.recheck`). The checks start
    /// after 50 ms and back off to one per second; a verdict is confirmed by
    /// a second check 20 ms later before the wait gives up.
    static func wait(on signal: WaitSignal, checking record: WaitRegistry.Record, describe: () -> String) -> Outcome {
        var warnAt = threshold.map { Deadline(nanosecondsFromNow: $0) }
        var interval: UInt64 = 50_000_000
        var nextCheck = Deadline(nanosecondsFromNow: interval)
        var suspect = false
        while true {
            let until = warnAt.map { min($0, nextCheck) } ?? nextCheck
            if signal.wait(deadline: until) { return .signalled }
            let now = monotonicNanoseconds()
            if let warning = warnAt, warning.hasPassed(now: now) {
                emit(describe())
                warnAt = nil
            }
            guard nextCheck.hasPassed(now: now) else { continue }
            if let reason = WaitRegistry.shared.recheck(record, confirm: suspect) {
                if suspect { return .neverEnds(reason) }
                suspect = true
                nextCheck = Deadline(nanosecondsFromNow: 20_000_000)
            } else {
                suspect = false
                interval = min(interval * 2, 1_000_000_000)
                nextCheck = Deadline(nanosecondsFromNow: interval)
            }
        }
    }

    /// For an `async` wait: prints `describe()` once if the returned watch is
    /// not cancelled within the threshold. Nil when reporting is off.
    static func watch(_ describe: @escaping @Sendable () -> String) -> HangWatch? {
        guard let threshold else { return nil }
        let item = DispatchWorkItem { emit(describe()) }
        watchQueue.asyncAfter(deadline: .now() + .nanoseconds(Int(clamping: threshold)), execute: item)
        return HangWatch(item: item)
    }

    private static let watchQueue = DispatchQueue(label: "operations.hang-report")

    /// Writes a report to standard error and to the installed hook.
    static func emit(_ description: String) {
        let seconds = Double(threshold ?? 0) / 1e9
        let report = "Operations: a wait has lasted \(seconds) s.\n" + description + "\n"
        _ = report.withCString { write(2, $0, strlen($0)) }
        OperationReporting.deliver(OperationReport(kind: .waitTooLong, message: report, subject: nil))
    }
}

/// A pending hang report for an `async` wait; cancel it when the wait ends.
final class HangWatch: @unchecked Sendable {
    // @unchecked Sendable: `item` is immutable, and `DispatchWorkItem.cancel()`
    // is thread-safe (Dispatch documents work items as usable from any thread).
    private let item: DispatchWorkItem

    init(item: DispatchWorkItem) { self.item = item }

    func cancel() { item.cancel() }
}
