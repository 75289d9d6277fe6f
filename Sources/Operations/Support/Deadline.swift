/// A point on the monotonic clock by which a wait gives up.
///
/// Built from any `Duration`: negative durations are already past, and
/// durations too large to add to the clock (say `.seconds(10_000_000_000)`)
/// mean "no deadline" (`init(after:)` returns nil), never an overflow.
struct Deadline: Sendable, Comparable {
    /// Monotonic nanoseconds (`monotonicNanoseconds()`).
    let nanoseconds: UInt64

    init(monotonicNanoseconds nanoseconds: UInt64) {
        self.nanoseconds = nanoseconds
    }

    /// `timeout` from now, or nil when it is too far away to represent.
    init?(after timeout: Duration) {
        let (seconds, attoseconds) = timeout.components
        let now = monotonicNanoseconds()
        if seconds < 0 || (seconds == 0 && attoseconds <= 0) {
            self.init(monotonicNanoseconds: now)
            return
        }
        // Whole nanoseconds, saturating: anything past ~292 years is "never".
        let (secondsPart, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        let fraction = UInt64(max(0, attoseconds) / 1_000_000_000)
        guard !overflow else { return nil }
        let (total, overflowTotal) = secondsPart.addingReportingOverflow(fraction)
        let (deadline, overflowDeadline) = now.addingReportingOverflow(total)
        guard !overflowTotal, !overflowDeadline, deadline < UInt64(Int64.max) else { return nil }
        self.init(monotonicNanoseconds: deadline)
    }

    /// `nanoseconds` from now (saturating).
    init(nanosecondsFromNow delta: UInt64) {
        let (sum, overflow) = monotonicNanoseconds().addingReportingOverflow(delta)
        self.init(monotonicNanoseconds: overflow ? UInt64(Int64.max) : min(sum, UInt64(Int64.max)))
    }

    func hasPassed(now: UInt64 = monotonicNanoseconds()) -> Bool { now >= nanoseconds }

    /// Nanoseconds left, or 0.
    func remaining(now: UInt64 = monotonicNanoseconds()) -> UInt64 { nanoseconds > now ? nanoseconds - now : 0 }

    /// The earlier of `deadline` (nil: never) and `other`.
    static func earliest(_ deadline: Deadline?, _ other: Deadline) -> Deadline {
        guard let deadline else { return other }
        return min(deadline, other)
    }

    static func < (lhs: Deadline, rhs: Deadline) -> Bool { lhs.nanoseconds < rhs.nanoseconds }
}
