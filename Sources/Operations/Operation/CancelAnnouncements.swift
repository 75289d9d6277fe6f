// Who is announcing the cancellation of an observed operation, and who
// waits for it: the bookkeeping that lets two `cancel()` calls at once
// produce one `isCancelled` change for observers (probe 30) without a
// call ever waiting for its own thread (probe 32).

/// The `cancel()` calls announcing `isCancelled` for observed operations
/// (one per operation: the claimant), and the calls waiting for them.
///
/// A call that finds another one announcing waits for it to set the flag,
/// so that observers hear one change and both calls return with the
/// operation cancelled. It does not wait, and sets the flag itself (without
/// announcing it), when waiting could not end:
/// - it is the claimant: an observer of the announcement cancels again;
/// - the claimant waits, directly or through other claimants, for the
///   calling thread: observers that cancel each other's operations, or
///   `cancelAllOperations()` called from observers on several threads;
/// - the claimant takes longer than `patience`: its observers may be
///   blocked on something the calling thread holds (a lock, or a thread
///   they join), which no bookkeeping can see.
///
/// Operations are identified by address only, never dereferenced: a
/// claim lasts while its `cancel()` call runs, which holds the operation,
/// and so does a waiting call.
final class CancelAnnouncements: @unchecked Sendable {
    // @unchecked Sendable: `claimants` and `waiting` are read and written
    // only with `signal`'s mutex held (`signal.withMutex`).
    private let signal = WaitSignal()
    /// Operation → the thread announcing its cancellation.
    private var claimants: [UnsafeMutableRawPointer: UInt] = [:]
    /// Thread → the operation whose announcement it waits for.
    private var waiting: [UInt: UnsafeMutableRawPointer] = [:]

    static let shared = CancelAnnouncements()

    /// How long a call waits for a claimant that is not known to wait for
    /// it. A claimant's observers normally take microseconds.
    static var patience: Duration { .milliseconds(20) }

    private init() {}

    /// The calling thread claims `operation`'s announcement. Called under
    /// the operation's state lock, where the claim is decided, so that a
    /// call that sees the claim finds it here.
    func claim(_ operation: UnsafeMutableRawPointer) {
        let thread = Platform.currentThreadToken()
        signal.withMutex { claimants[operation] = thread }
    }

    /// The claimant is done (the flag is set): waiting calls return.
    func release(_ operation: UnsafeMutableRawPointer, wakeWaiters: Bool) {
        signal.withMutex {
            claimants[operation] = nil
            if wakeWaiters { signal.broadcastLocked() }
        }
    }

    /// Waits until `stillAnnounced()` reads false (the claimant set the
    /// flag). Returns false, at once or after `patience`, when the caller
    /// must set the flag itself (see the type's description).
    /// `stillAnnounced` must not take locks or call user code.
    func awaitClaimant(of operation: UnsafeMutableRawPointer, stillAnnounced: () -> Bool) -> Bool {
        let thread = Platform.currentThreadToken()
        let deadline = Deadline(nanosecondsFromNow: Deadline.saturatingNanoseconds(Self.patience))
        return signal.withMutex {
            guard stillAnnounced() else { return true }
            if waitWouldCycle(on: operation, from: thread) { return false }
            waiting[thread] = operation
            defer { waiting[thread] = nil }
            while stillAnnounced() {
                if deadline.hasPassed() { return false }
                signal.waitLocked(until: deadline)
            }
            return true
        }
    }

    /// Whether the claimant of `operation` is `thread`, or waits (through
    /// other claimants) for `thread`. The mutex is held.
    private func waitWouldCycle(on operation: UnsafeMutableRawPointer, from thread: UInt) -> Bool {
        var current = operation
        // Each step follows one waiting thread; more steps than there are
        // waiting threads would revisit one.
        for _ in 0...waiting.count {
            guard let claimant = claimants[current] else { return false }
            if claimant == thread { return true }
            guard let next = waiting[claimant] else { return false }
            current = next
        }
        return false
    }
}
