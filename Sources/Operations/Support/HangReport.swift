import Dispatch
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Reports waits that take suspiciously long.
///
/// Once `OperationReporting.waitWarningThreshold` is set (its default comes
/// from the environment variable `OPERATIONS_WAIT_WARNING_SECONDS`), any
/// blocking wait (`waitUntilFinished()`, `waitUntilAllOperationsAreFinished()`,
/// a blocked `addOperation`) or `async` wait (`await operation.finished()`,
/// `await operation.value`, `await queue.drained()`, `queue.run`) that has
/// waited that long reports, once, what it waits for and why that cannot run
/// yet (see `OperationQueue.diagnostics()`, which also names dependency
/// cycles), then keeps waiting. Off by default.
enum HangReport {
    /// The threshold in nanoseconds; 0 when reporting is off. Initialized
    /// from the environment the first time it is needed.
    private static let storedThreshold = Atomic<UInt64>(environmentThreshold ?? 0)

    /// `OPERATIONS_WAIT_WARNING_SECONDS` in nanoseconds, or nil when it is
    /// unset or not a positive number of seconds.
    static var environmentThreshold: UInt64? {
        guard let raw = getenv("OPERATIONS_WAIT_WARNING_SECONDS") else { return nil }
        return parseThreshold(String(cString: raw))
    }

    /// A number of seconds as nanoseconds, or nil when it is not a positive
    /// number below 1e9.
    static func parseThreshold(_ text: String) -> UInt64? {
        guard let seconds = Double(text), seconds > 0, seconds < 1e9 else { return nil }
        return max(1, UInt64(seconds * 1_000_000_000))
    }

    /// The threshold in nanoseconds, or nil when reporting is off.
    static var threshold: UInt64? {
        let value = storedThreshold.load(ordering: .relaxed)
        return value == 0 ? nil : value
    }

    /// Sets the threshold: nil, zero or negative turns reporting off; a
    /// duration beyond `UInt64.max` nanoseconds saturates.
    static func setThreshold(_ duration: Duration?) {
        var nanoseconds: UInt64 = 0
        // A positive threshold under a nanosecond still reports (1 ns).
        if let duration, duration > .zero {
            nanoseconds = max(1, Deadline.saturatingNanoseconds(duration))
        }
        storedThreshold.store(nanoseconds, ordering: .relaxed)
    }

    /// Waits on `signal` until `deadline`, reporting `describe()` once if the
    /// wait outlasts the threshold. Returns whether the signal arrived.
    static func wait(on signal: WaitSignal, deadline: Deadline?, describe: () -> HangDescription) -> Bool {
        guard let threshold else { return signal.wait(deadline: deadline) }
        let warnAt = Deadline(nanosecondsFromNow: threshold)
        if let deadline, deadline <= warnAt { return signal.wait(deadline: deadline) }
        if signal.wait(deadline: warnAt) { return true }
        emit(describe(), threshold: threshold)
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
    /// one that can never end, and other changes can make it one that ends
    /// again (`WaitRegistry.recheck`). The checks start after 50 ms and back
    /// off to one per second; once a check finds the wait stuck, it is
    /// checked every 50 ms, and the wait gives up only when every check for
    /// `WaitRegistry.confirmationDelay` found it stuck. A check of a large
    /// graph spaces the next one by seven times its own duration
    /// (`WaitRegistry.spacing(afterCheckThatBegan:)`).
    static func wait(on signal: WaitSignal, checking record: WaitRegistry.Record, describe: () -> HangDescription) -> Outcome {
        let threshold = Self.threshold
        var warnAt = threshold.map { Deadline(nanosecondsFromNow: $0) }
        let suspectInterval: UInt64 = 50_000_000
        var interval: UInt64 = suspectInterval
        var nextCheck = Deadline(nanosecondsFromNow: interval)
        // When the checks began finding the wait stuck, without a break.
        var suspectSince: UInt64?
        while true {
            let until = warnAt.map { min($0, nextCheck) } ?? nextCheck
            if signal.wait(deadline: until) { return .signalled }
            let now = monotonicNanoseconds()
            if let threshold, let warning = warnAt, warning.hasPassed(now: now) {
                emit(describe(), threshold: threshold)
                warnAt = nil
            }
            guard nextCheck.hasPassed(now: now) else { continue }
            let confirm = suspectSince.map { now &- $0 >= WaitRegistry.confirmationDelay } ?? false
            let result = WaitRegistry.shared.recheck(record, confirm: confirm)
            // A check of a large graph is paced by its own cost, so that it
            // takes at most about an eighth of a core.
            let spacing = WaitRegistry.spacing(afterCheckThatBegan: now)
            if let (verdict, gaveUp) = result {
                if gaveUp { return .neverEnds(verdict.reason) }
                if suspectSince == nil { suspectSince = now }
                nextCheck = Deadline(nanosecondsFromNow: max(suspectInterval, spacing))
            } else {
                suspectSince = nil
                interval = min(interval * 2, 1_000_000_000)
                nextCheck = Deadline(nanosecondsFromNow: max(interval, spacing))
            }
        }
    }

    /// For an `async` wait: reports `describe()` once if the returned watch
    /// is not cancelled within the threshold. Nil when reporting is off.
    static func watch(_ describe: @escaping @Sendable () -> HangDescription) -> HangWatch? {
        guard let threshold else { return nil }
        let watch = HangWatch(describe)
        // The timer holds the watch, not what it describes: a cancelled
        // watch has let go of `describe` (and the operation or queue it
        // captures) already, however far off the deadline is (probe 38).
        watchQueue.asyncAfter(deadline: .now() + .nanoseconds(Int(clamping: threshold))) {
            guard let describe = watch.take() else { return }
            emit(describe(), threshold: threshold)
        }
        return watch
    }

    private static let watchQueue = DispatchQueue(label: "operations.hang-report")

    /// Writes a report to standard error and to the report observers.
    static func emit(_ description: HangDescription, threshold: UInt64) {
        let seconds = Double(threshold) / 1e9
        let report = "Operations: a wait has lasted \(seconds) s.\n" + description.text + "\n"
        _ = report.withCString { write(2, $0, strlen($0)) }
        OperationReporting.deliver(
            OperationReport(kind: .waitTooLong, message: report, subject: description.subject, cycle: description.cycle)
        )
    }
}

/// What a wait that lasts too long reports: the text (what it waits for,
/// and why that cannot run yet), what it waits for, and the dependency cycle
/// the text names, if any.
struct HangDescription {
    var text: String
    var subject: ReportSubject
    var cycle: [String]?

    /// A wait for `queue`: `what` (such as `"await drained() on:"`),
    /// followed by the queue's diagnostics.
    static func queue(_ queue: OperationQueue, _ what: String) -> HangDescription {
        let diagnostics = queue.diagnostics()
        return HangDescription(
            text: what + "\n" + diagnostics.description,
            subject: .queue(queue),
            cycle: diagnostics.cycles.first
        )
    }
}

/// A pending hang report for an `async` wait; cancel it when the wait ends.
final class HangWatch: Sendable {
    /// What to report, until the report is made or the watch cancelled.
    private let describe: LockedValue<(@Sendable () -> HangDescription)?>

    init(_ describe: @escaping @Sendable () -> HangDescription) {
        self.describe = LockedValue(describe)
    }

    /// Takes what to report, once: nil after a cancel or an earlier take.
    func take() -> (@Sendable () -> HangDescription)? {
        describe.withLock { current in
            defer { current = nil }
            return current
        }
    }

    /// The wait ended: no report. What the report would have described is
    /// released here, after unlocking.
    func cancel() {
        withExtendedLifetime(take()) {}
    }
}
