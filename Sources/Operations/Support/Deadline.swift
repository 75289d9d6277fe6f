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
        let now = monotonicNanoseconds()
        // Whole nanoseconds, saturating: anything past ~292 years is "never".
        let total = Self.saturatingNanoseconds(timeout)
        let (deadline, overflow) = now.addingReportingOverflow(total)
        guard !overflow, deadline < UInt64(Int64.max) else { return nil }
        self.init(monotonicNanoseconds: deadline)
    }

    /// `duration` in whole nanoseconds: 0 when it is zero or negative,
    /// `UInt64.max` when it is longer than that. Any `Duration` is accepted,
    /// including those beyond ±`Int64.max` seconds, whose `components`
    /// cannot be represented (probe 21).
    static func saturatingNanoseconds(_ duration: Duration) -> UInt64 {
        guard duration > .zero else { return 0 }
        guard duration < .seconds(Int64.max) else { return .max }
        let (seconds, attoseconds) = duration.components
        let (whole, overflow) = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
        let (total, overflowTotal) = whole.addingReportingOverflow(UInt64(max(0, attoseconds) / 1_000_000_000))
        return overflow || overflowTotal ? .max : total
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
