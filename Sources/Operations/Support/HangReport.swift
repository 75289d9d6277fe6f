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
