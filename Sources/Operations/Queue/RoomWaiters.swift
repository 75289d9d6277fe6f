/// The adds waiting for room under a queue's pending limit, in arrival
/// order, and the rule that decides which of them may go ahead.
///
/// An add that finds no room registers once and keeps its place (its
/// ticket) until it is added or gives up: a waiter that is woken but finds
/// the room gone again (the limit was lowered) waits again where it was.
/// Room is granted in arrival order, counting the room that the waiters
/// ahead are entitled to, so a later add — a waiter behind, or a new add
/// that never waited — cannot take room that an earlier waiter was woken
/// for. A waiter whose batch does not fit yet does not hold back a smaller
/// add behind it.
///
/// Guarded by the queue's lock. The resumptions are the library's own
/// closures (they wake a `WaitSignal` or resume a continuation), so
/// dropping them under the lock runs no user code.
struct RoomWaiters {
    private struct Entry {
        let ticket: Int
        let count: Int
        var resume: @Sendable () -> Void
        /// Whether `resume` was called since the waiter last began to wait.
        var woken: Bool
    }

    private var entries: [Entry] = []
    private var lastTicket = 0

    var isEmpty: Bool { entries.isEmpty }

    /// The adds in line.
    var count: Int { entries.count }

    /// Whether an add of `count` operations fits now. `ticket` is the
    /// caller's place if it waited; nil for an add that has not waited,
    /// which comes after every waiter.
    func fits(_ count: Int, ticket: Int?, in state: QueueState) -> Bool {
        var entitled = 0
        for entry in entries {
            if entry.ticket == ticket { return state.hasRoom(for: count, after: entitled) }
            if state.hasRoom(for: entry.count, after: entitled) { entitled += entry.count }
        }
        return state.hasRoom(for: count, after: entitled)
    }

    /// Makes the caller wait for room with `resume`, unless its add fits
    /// now (then returns nil and registers nothing new). A caller without a
    /// ticket gets one (its place in line), returned; one with a ticket
    /// keeps its place.
    mutating func wait(_ count: Int, ticket: Int?, in state: QueueState, resume: @escaping @Sendable () -> Void) -> Int? {
        if fits(count, ticket: ticket, in: state) { return nil }
        if let ticket, let index = entries.firstIndex(where: { $0.ticket == ticket }) {
            entries[index].resume = resume
            entries[index].woken = false
            return ticket
        }
        lastTicket += 1
        entries.append(Entry(ticket: lastTicket, count: count, resume: resume, woken: false))
        return lastTicket
    }

    /// The caller with `ticket` was added, or gives up: it leaves the line.
    /// Returns whether it was in it. Take the queue's effects afterwards:
    /// its leaving may let waiters behind it go ahead.
    @discardableResult
    mutating func leave(_ ticket: Int) -> Bool {
        guard let index = entries.firstIndex(where: { $0.ticket == ticket }) else { return false }
        entries.remove(at: index)
        return true
    }

    /// The resumptions of the waiters that may go ahead now and were not
    /// woken yet, in arrival order; they are marked woken and stay in line
    /// until they are added or give up.
    mutating func takeWakeups(in state: QueueState) -> [@Sendable () -> Void] {
        var entitled = 0
        var wakeups: [@Sendable () -> Void] = []
        for index in entries.indices where state.hasRoom(for: entries[index].count, after: entitled) {
            entitled += entries[index].count
            if !entries[index].woken {
                entries[index].woken = true
                wakeups.append(entries[index].resume)
            }
        }
        return wakeups
    }
}
