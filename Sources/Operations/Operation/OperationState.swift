/// The lifecycle of one operation: a 64-bit value and pure transitions.
///
/// An `Operation` keeps this value in one atomic word (see `OperationCore`);
/// bit 0 of that word is a lock bit that this type never sets. Every
/// transition is a mutating method that returns what happened, so that the
/// caller performs the side effects (notifications, releasing dependents,
/// telling the queue) after releasing the lock. Transitions call no user
/// code, so they are tested on their own.
///
/// ## Two views of "finished"
/// - The *base* state is what `Operation`'s own getters report, as in
///   Foundation: `isExecuting` while the default `start()` runs the body,
///   `isFinished` once it has run it (or skipped it because the operation was
///   cancelled), `isCancelled` once the base `cancel()` ran.
/// - The *outcome*: `finished` is set once the operation is finished as its
///   class reports it (its possibly overridden `isFinished` getter reads
///   true); from then on the consequences run exactly once (dependents
///   released, removed from the queue, observers, completion block), and
///   `retired` is set when they are done and waiters are released.
///
/// Layout:
///
/// | bits   | field                                                   |
/// |--------|---------------------------------------------------------|
/// | 0      | lock bit (owned by `OperationCore`)                     |
/// | 1      | base executing: the default `start()` runs the body     |
/// | 2      | base finished                                           |
/// | 3      | base cancelled                                          |
/// | 4      | enqueued: claimed by an `OperationQueue` (never cleared)|
/// | 5      | observed: at least one observer registered              |
/// | 6      | finished: the consequences have begun (terminal)        |
/// | 7      | retired: consequences done, waiters released            |
/// | 8      | queue start: the owning queue is calling `start()`      |
/// | 9–11   | queue priority index (0 = very low … 4 = very high)     |
/// | 12–14  | quality-of-service index (0 = background … 4)           |
/// | 15     | thread priority differs from 0.5                        |
/// | 16     | a dependency failure policy other than `.runAnyway`     |
/// | 17     | cancellation handlers have run (or were discarded)      |
/// | 18     | a counted dependency on itself                          |
/// | 19     | dispatched: its queue took it to start (see `isDispatched`) |
/// | 20     | readiness stale: an edge counted since its queue last read its `isReady` override |
/// | 21     | an uncounted self-dependency is listed                  |
/// | 22     | body end claimed: a call ending the body is announcing it |
/// | 23     | cancel announcing: a `cancel()` call announces `isCancelled` and sets it next |
/// | 24     | cancel awaited: another `cancel()` call waits for that one |
/// | 32–63  | unfinished dependencies                                 |
///
/// Invariants (checked by `checkInvariants()`):
/// - base executing and base finished are never both set;
/// - `retired` implies `finished`;
/// - cancel awaited implies cancel announcing;
/// - the dependency count equals the number of dependencies whose
///   dependents list holds this operation (see `DependentList`).
struct OperationState: Equatable, Sendable, CustomStringConvertible {
    private(set) var raw: UInt64

    init() { raw = Self.defaultRaw }

    init(raw: UInt64) { self.raw = raw & ~Self.lockBit }

    static let lockBit: UInt64 = 1
    private static let baseExecutingBit: UInt64 = 1 << 1
    private static let baseFinishedBit: UInt64 = 1 << 2
    private static let cancelledBit: UInt64 = 1 << 3
    private static let enqueuedBit: UInt64 = 1 << 4
    private static let observedBit: UInt64 = 1 << 5
    private static let finishedBit: UInt64 = 1 << 6
    private static let retiredBit: UInt64 = 1 << 7
    private static let queueStartBit: UInt64 = 1 << 8
    private static let priorityShift: UInt64 = 9
    private static let priorityMask: UInt64 = 0b111 << 9
    private static let qosShift: UInt64 = 12
    private static let qosMask: UInt64 = 0b111 << 12
    private static let threadPriorityBit: UInt64 = 1 << 15
    private static let failurePolicyBit: UInt64 = 1 << 16
    private static let cancellationHandledBit: UInt64 = 1 << 17
    private static let selfDependencyBit: UInt64 = 1 << 18
    private static let dispatchedBit: UInt64 = 1 << 19
    private static let readinessStaleBit: UInt64 = 1 << 20
    private static let uncountedSelfDependencyBit: UInt64 = 1 << 21
    private static let bodyEndClaimedBit: UInt64 = 1 << 22
    private static let cancelAnnouncingBit: UInt64 = 1 << 23
    private static let cancelAwaitedBit: UInt64 = 1 << 24
    private static let listedAheadBit: UInt64 = 1 << 25
    private static let dependedOnBit: UInt64 = 1 << 26
    private static let dependencyShift: UInt64 = 32
    private static let dependencyUnit: UInt64 = 1 << 32

    /// Normal priority (index 2), default quality of service (index 2).
    static let defaultRaw: UInt64 = (2 << 9) | (2 << 12)

    /// The bits that must be clear for the one-step start of a plain
    /// operation (`OperationCore.tryFastStart`): unlocked, not started, not
    /// cancelled, unobserved, no failure policy, no unfinished dependencies.
    static let fastStartMask: UInt64 = lockBit | baseExecutingBit | baseFinishedBit | cancelledBit
        | observedBit | finishedBit | failurePolicyBit | (UInt64(UInt32.max) << dependencyShift)
    /// The bits that must be clear for the one-step removal of an unfinished
    /// dependency (`OperationCore.tryFastDependencyFinished`): unlocked,
    /// unobserved, no failure policy.
    static let fastDependencyMask: UInt64 = lockBit | observedBit | failurePolicyBit
    /// One unfinished dependency in the raw word, and the lowest raw count
    /// the one-step removal accepts (two: one remains afterwards).
    static let dependencyStep: UInt64 = dependencyUnit
    static let fastDependencyMinimum: UInt64 = 2 << dependencyShift
    /// The base-executing bit, for the one-step start.
    static let baseExecutingFlag: UInt64 = baseExecutingBit
    /// The dispatched bit, set by a queue's claim (`claimForDispatch`).
    static let dispatchedFlag: UInt64 = dispatchedBit
    /// The readiness-stale bit, which a queue's claim of an operation whose
    /// class overrides `isReady` must find clear.
    static let readinessStaleFlag: UInt64 = readinessStaleBit
    /// The queue-start bit, consumed by the one-step start.
    static let queueStartFlag: UInt64 = queueStartBit
    /// The enqueued bit: a start by hand must not take the one-step path.
    static let enqueuedFlag: UInt64 = enqueuedBit

    // MARK: Fields

    /// Base `isExecuting`: the default `start()` is running the body.
    var isBaseExecuting: Bool { raw & Self.baseExecutingBit != 0 }
    /// Base `isFinished`.
    var isBaseFinished: Bool { raw & Self.baseFinishedBit != 0 }
    /// Base `isCancelled`.
    var isCancelled: Bool { raw & Self.cancelledBit != 0 }
    /// The default `start()` has been entered (it is running the body or has
    /// finished it).
    var hasBaseStarted: Bool { raw & (Self.baseExecutingBit | Self.baseFinishedBit) != 0 }

    var isEnqueued: Bool {
        get { raw & Self.enqueuedBit != 0 }
        set { set(Self.enqueuedBit, newValue) }
    }

    var isObserved: Bool {
        get { raw & Self.observedBit != 0 }
        set { set(Self.observedBit, newValue) }
    }

    /// The consequences of finishing have begun: terminal.
    var isFinished: Bool { raw & Self.finishedBit != 0 }
    /// Finished by its class's own announcement (an overridden `isFinished`
    /// read true) before the base `start()` ever ran: a class whose
    /// `start()` finishes a cancelled operation and then calls
    /// `super.start()`. The base `start()` then returns, as Darwin's does;
    /// it is not a second start.
    var finishedWithoutBaseStart: Bool {
        isFinished && raw & (Self.baseExecutingBit | Self.baseFinishedBit) == 0
    }
    /// Consequences done, waiters released.
    var isRetired: Bool { raw & Self.retiredBit != 0 }

    /// The owning queue called `start()` (a class that overrides it): the
    /// base `start()` accepts the call without the checks a call by hand
    /// gets, whenever it comes (the class may make it later, from another
    /// thread). Consumed by the base start, cleared by the finish.
    var isQueueStart: Bool {
        get { raw & Self.queueStartBit != 0 }
        set { set(Self.queueStartBit, newValue) }
    }

    /// The owning queue took the operation to start it: it left the queue's
    /// waiting operations. Set under the operation's lock when the queue
    /// picks it (`OperationCore.claimForDispatch`), which decides the race
    /// with another thread's `addDependency`: an edge added from then on
    /// does not count, as for an operation that started. Never cleared.
    var isDispatched: Bool {
        get { raw & Self.dispatchedBit != 0 }
        set { set(Self.dispatchedBit, newValue) }
    }

    /// For a class that overrides `isReady`: a dependency counted while the
    /// operation waited in its queue, and the queue has not read the
    /// override since. The queue does not take the operation to start while
    /// this is set (`OperationCore.claimForDispatch`); the re-read that the
    /// edit requested clears it (`OperationCore.takeStaleReadiness`).
    var isReadinessStale: Bool {
        get { raw & Self.readinessStaleBit != 0 }
        set { set(Self.readinessStaleBit, newValue) }
    }

    /// The operation lists itself as a dependency that does not count (it
    /// was added once the operation had been taken to start, or had
    /// started): dropped from the list when the operation finishes, like a
    /// counted one, or it would keep the operation alive forever.
    var hasUncountedSelfDependency: Bool {
        get { raw & Self.uncountedSelfDependencyBit != 0 }
        set { set(Self.uncountedSelfDependencyBit, newValue) }
    }

    /// Whether the operation waits in its queue to be started: readiness
    /// matters, and instruments hear of its changes, only then.
    var isWaitingInQueue: Bool {
        isEnqueued && !isRetired && !isDispatched && !hasBaseStarted
    }

    var hasCustomThreadPriority: Bool {
        get { raw & Self.threadPriorityBit != 0 }
        set { set(Self.threadPriorityBit, newValue) }
    }

    /// The operation finished while still counting unfinished
    /// dependencies, and stays in their dependents lists until each of them
    /// finishes or it is deallocated (`FinishedCycles.swift`).
    var isListedAhead: Bool {
        get { raw & Self.listedAheadBit != 0 }
        set { set(Self.listedAheadBit, newValue) }
    }

    /// Another operation has been given this one as a dependency (sticky):
    /// only such an operation can be on a dependency cycle
    /// (`FinishedCycles.swift`).
    var isDependedOn: Bool {
        get { raw & Self.dependedOnBit != 0 }
        set { set(Self.dependedOnBit, newValue) }
    }

    /// The operation depends on itself, and that edge counts.
    var hasSelfDependency: Bool {
        get { raw & Self.selfDependencyBit != 0 }
        set { set(Self.selfDependencyBit, newValue) }
    }

    var hasFailurePolicy: Bool {
        get { raw & Self.failurePolicyBit != 0 }
        set { set(Self.failurePolicyBit, newValue) }
    }

    /// 0 (very low) ... 4 (very high).
    var priorityIndex: Int {
        get { Int((raw & Self.priorityMask) >> Self.priorityShift) }
        set { raw = (raw & ~Self.priorityMask) | (UInt64(newValue & 0b111) << Self.priorityShift) }
    }

    /// 0 (background) ... 4 (user-interactive); 2 is `.default`.
    var qosIndex: Int {
        get { Int((raw & Self.qosMask) >> Self.qosShift) }
        set { raw = (raw & ~Self.qosMask) | (UInt64(newValue & 0b111) << Self.qosShift) }
    }

    var unfinishedDependencies: Int {
        Int(truncatingIfNeeded: raw >> Self.dependencyShift)
    }

    /// Base `isReady`: cancelled, or every dependency finished.
    var isBaseReady: Bool { isCancelled || unfinishedDependencies == 0 }

    /// Whether dependencies still count: the operation has not been started
    /// and has not finished.
    var countsDependencies: Bool { !hasBaseStarted && !isFinished }

    /// Whether a new dependency would count: dependencies still count, and
    /// no queue has taken the operation to start it. (An edge counted
    /// before the queue took it still counts: a cancelled operation is
    /// taken with unfinished dependencies.)
    var acceptsDependencies: Bool { countsDependencies && !isDispatched }

    private mutating func set(_ bit: UInt64, _ on: Bool) {
        raw = on ? raw | bit : raw & ~bit
    }

    /// The lifecycle as one value, for descriptions and diagnostics.
    enum Phase: String, Sendable {
        case pending
        case executing
        case bodyFinished = "body finished"
        case finished
        case retired
    }

    var phase: Phase {
        if isRetired { return .retired }
        if isFinished { return .finished }
        if isBaseFinished { return .bodyFinished }
        if isBaseExecuting { return .executing }
        return .pending
    }

    var description: String {
        var parts = [phase.rawValue]
        if isCancelled { parts.append("cancelled") }
        if isCancelAnnouncing { parts.append("being cancelled") }
        // The enqueued bit stays set for good (it refuses a second add); the
        // operation is in its queue only until it has finished (probe 27).
        if isEnqueued, !isFinished { parts.append("in a queue") }
        if unfinishedDependencies > 0 { parts.append("waits for \(unfinishedDependencies) dependencies") }
        return parts.joined(separator: ", ")
    }

    // MARK: Transitions

    /// What entering the base `start()` decided.
    enum StartDecision: Equatable, Sendable {
        /// Run the body: now base-executing.
        case run
        /// Cancelled: the body is skipped; now base-finished.
        case skipCancelled
        /// Misuse: the body is already running.
        case alreadyExecuting
        /// Misuse: already finished.
        case alreadyFinished
        /// Misuse: a start by hand, but a queue claimed the operation
        /// between the caller's checks and this decision.
        case ownedByQueue
    }

    /// Enters the base `start()`: the body is skipped if the base state is
    /// cancelled, as in Foundation. Consumes the queue-start mark.
    ///
    /// `announcedRun`: the caller told observers "will `isExecuting`" (it
    /// read the operation not cancelled). A cancellation that landed since
    /// does not withdraw that: the body runs, as in Foundation, whose start
    /// reads `isCancelled` once, before announcing anything.
    mutating func beginBaseStart(announcedRun: Bool, byHand: Bool = false) -> StartDecision {
        // Checked again here, under the lock the add claims under: an add
        // racing a start by hand must not let both proceed (probe 45). The
        // queue's start mark, which its own start may have set meanwhile,
        // is left for that start.
        if byHand, isEnqueued, !isBaseExecuting, !isBaseFinished, !isFinished { return .ownedByQueue }
        isQueueStart = false
        if isBaseExecuting { return .alreadyExecuting }
        if isBaseFinished || isFinished { return .alreadyFinished }
        if isCancelled, !announcedRun {
            raw |= Self.baseFinishedBit
            return .skipCancelled
        }
        raw |= Self.baseExecutingBit
        return .run
    }

    /// Claims the end of an asynchronous body for one caller: true once,
    /// while the body runs; false for every later or concurrent call, which
    /// then changes and announces nothing.
    mutating func claimBodyEnd() -> Bool {
        guard isBaseExecuting, raw & Self.bodyEndClaimedBit == 0 else { return false }
        raw |= Self.bodyEndClaimedBit
        return true
    }

    /// Whether a caller claimed the end of the asynchronous body
    /// (`claimBodyEnd`): `AsyncOperation.finish()` came.
    var isBodyEndClaimed: Bool { raw & Self.bodyEndClaimedBit != 0 }

    /// The body returned (or an asynchronous body finished): base-finished.
    /// Returns false when the base state was already finished.
    mutating func finishBody() -> Bool {
        guard !isBaseFinished else { return false }
        raw &= ~Self.baseExecutingBit
        raw |= Self.baseFinishedBit
        return true
    }

    /// Marks the operation finished, once. Returns false if it already was.
    mutating func beginFinishing() -> Bool {
        guard !isFinished else { return false }
        raw |= Self.finishedBit
        isQueueStart = false
        return true
    }

    /// Records that the consequences are done.
    mutating func retire() {
        raw |= Self.finishedBit | Self.retiredBit
    }

    /// What the base `cancel()` changed.
    struct CancelOutcome: Equatable, Sendable {
        /// False when the operation was already cancelled or has finished.
        var changed: Bool
        /// The base readiness before the change (it is true afterwards).
        var wasReady: Bool
    }

    /// How a `cancel()` call goes on, decided under the lock.
    enum CancelStart: Equatable, Sendable {
        /// Already cancelled, or finished: nothing to do.
        case nothing
        /// Not observed: cancelled now (`CancelOutcome.changed` is true).
        case cancelled(CancelOutcome)
        /// Observed: this call announces `isCancelled` (and `isReady` too,
        /// if the operation has not started), then calls `completeCancel`.
        case announce(includesReadiness: Bool)
        /// Another call is announcing `isCancelled`: this one must not
        /// announce it again (observers hear each change once, probe 30).
        /// It waits for that call's `completeCancel`, or, when it cannot
        /// (see `CancelAnnouncements`), sets the flag with `forceCancel`.
        case awaitAnnouncement
    }

    /// The first step of the base `cancel()`. Cancelling twice, or after
    /// finishing, changes nothing.
    ///
    /// `baseFinishCounts`: the class reports the base state as `isFinished`
    /// (it does not override the getter). Then an operation whose body has
    /// finished reads finished, and is not cancelled, although its finish is
    /// still being carried out (probe 27).
    mutating func beginCancel(baseFinishCounts: Bool) -> CancelStart {
        guard !isCancelled, !readsFinished(baseFinishCounts: baseFinishCounts) else { return .nothing }
        if isCancelAnnouncing {
            raw |= Self.cancelAwaitedBit
            return .awaitAnnouncement
        }
        if isObserved {
            raw |= Self.cancelAnnouncingBit
            return .announce(includesReadiness: !hasBaseStarted)
        }
        let wasReady = isBaseReady
        raw |= Self.cancelledBit
        return .cancelled(CancelOutcome(changed: true, wasReady: wasReady))
    }

    /// The second step of an announced cancellation (after observers heard
    /// "will change"). Returns what changed and whether another call waits
    /// for it (`cancelAwaited`).
    ///
    /// If the operation finished since `beginCancel`, the flag is still
    /// set, so that the change observers were promised happens (as in
    /// Foundation, where a cancel that passed its check sets the flag);
    /// nothing else follows from it (`changed` is false).
    mutating func completeCancel(baseFinishCounts: Bool) -> (outcome: CancelOutcome, awaited: Bool) {
        let awaited = raw & Self.cancelAwaitedBit != 0
        raw &= ~(Self.cancelAnnouncingBit | Self.cancelAwaitedBit)
        return (setCancelledFlag(baseFinishCounts: baseFinishCounts), awaited)
    }

    /// A call that found another one announcing `isCancelled` and cannot
    /// wait for it sets the flag itself, without announcing it: that call
    /// announces the change when its observers have heard "will change".
    /// What follows from the change is this call's (`changed`); that call's
    /// `completeCancel` then reports nothing changed.
    ///
    /// If the operation finished meanwhile, the flag is set all the same
    /// (the announcing call sets it too, as `completeCancel` does), so that
    /// this call also returns with the operation cancelled (probe 34);
    /// nothing else follows from it.
    mutating func forceCancel(baseFinishCounts: Bool) -> CancelOutcome {
        setCancelledFlag(baseFinishCounts: baseFinishCounts)
    }

    /// Sets the flag that a cancellation announced (or a waiting call
    /// stands in for), finished or not; `changed` only if it was neither.
    private mutating func setCancelledFlag(baseFinishCounts: Bool) -> CancelOutcome {
        let changed = !isCancelled && !readsFinished(baseFinishCounts: baseFinishCounts)
        let wasReady = isBaseReady
        raw |= Self.cancelledBit
        return CancelOutcome(changed: changed, wasReady: wasReady)
    }

    /// Finished as `cancel()` sees it: the outcome, or, for a class that
    /// reports the base state as `isFinished`, the base state.
    private func readsFinished(baseFinishCounts: Bool) -> Bool {
        isFinished || (baseFinishCounts && isBaseFinished)
    }

    /// A `cancel()` call is announcing `isCancelled` (and has not completed:
    /// the flag may have been set by another call meanwhile, `forceCancel`).
    var isCancelAnnouncing: Bool { raw & Self.cancelAnnouncingBit != 0 }

    /// Whether the cancellation handlers have run.
    var hasHandledCancellation: Bool { raw & Self.cancellationHandledBit != 0 }

    /// Takes the right to run the cancellation handlers: true once.
    mutating func takeCancellationHandling() -> Bool {
        guard raw & Self.cancellationHandledBit == 0 else { return false }
        raw |= Self.cancellationHandledBit
        return true
    }

    /// Counts one more unfinished dependency. Returns whether it counts (the
    /// operation has not started, finished, or been taken by its queue to
    /// start); the caller registers the dependents edge exactly when it does.
    mutating func addUnfinishedDependency() -> Bool {
        guard acceptsDependencies else { return false }
        raw &+= Self.dependencyUnit
        return true
    }

    /// A counted dependency finished or was removed. Returns whether the
    /// base readiness became true.
    mutating func removeUnfinishedDependency() -> Bool {
        guard unfinishedDependencies > 0 else { return false }
        let wasReady = isBaseReady
        raw &-= Self.dependencyUnit
        return !wasReady && isBaseReady && countsDependencies
    }

    /// Clears the dependency count (the operation finished or is being
    /// released, and has unregistered from every dependency).
    mutating func clearDependencies() {
        raw &= (Self.dependencyUnit - 1) & ~(Self.selfDependencyBit | Self.uncountedSelfDependencyBit)
    }

    /// Why a queue refuses the operation, or nil once claimed.
    enum EnqueueRefusal: Equatable, Sendable {
        case alreadyEnqueued
        case executing
        case finished
    }

    /// Claims the operation for a queue.
    mutating func enqueue() -> EnqueueRefusal? {
        // Finished first: an operation that ran in one queue and is added to
        // another is refused because it finished, as Foundation says.
        if isFinished || isBaseFinished { return .finished }
        if isEnqueued { return .alreadyEnqueued }
        if isBaseExecuting { return .executing }
        isEnqueued = true
        return nil
    }

    /// Verifies the invariants above; returns a description of the first
    /// broken one, or nil.
    func checkInvariants() -> String? {
        if isBaseExecuting && isBaseFinished { return "base executing and base finished at once: \(self)" }
        if isRetired && !isFinished { return "retired before finished: \(self)" }
        if raw & Self.cancelAwaitedBit != 0 && !isCancelAnnouncing { return "cancel awaited without an announcing cancel: \(self)" }
        return nil
    }
}
