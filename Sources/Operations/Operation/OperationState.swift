/// The lifecycle of one operation, as a 64-bit value and pure transitions.
///
/// An `Operation` keeps this value in an atomic word. Bit 0 of that word is
/// a lock bit (see `Operation.withStateLock`); the value type here never
/// sets it. Every transition is a mutating method that returns what
/// happened, so the caller can perform the side effects (notifications,
/// waking dependents, informing the queue) after releasing the lock. The
/// transitions do no I/O and call no user code, so they can be tested on
/// their own.
///
/// Layout:
///
/// | bits   | field                                      |
/// |--------|--------------------------------------------|
/// | 0      | lock bit (owned by `Operation`)            |
/// | 1–2    | phase: pending, executing, finished        |
/// | 3      | cancelled                                  |
/// | 4      | enqueued: owned by an `OperationQueue`     |
/// | 5      | observed: at least one observer registered |
/// | 6      | retired: completion ran, waiters released  |
/// | 7      | started: `start()` has been entered        |
/// | 8–10   | queue priority index (0 = very low)        |
/// | 11–13  | quality-of-service index                   |
/// | 14     | asynchronous body (finishes on `finish()`) |
/// | 15     | thread priority differs from 0.5           |
/// | 16     | a dependency failure policy is set         |
/// | 32–63  | unfinished dependencies                    |
///
/// Invariants:
/// - `phase` only moves forward: pending → executing → finished, or
///   pending → finished (cancelled before start, or announced finished).
/// - `retired` implies `phase == .finished`.
/// - `unfinishedDependencies` counts dependencies registered while both the
///   operation was pending and the dependency unfinished; it only reaches
///   zero through `dependencyFinished()` or `dependencyRemoved()`.
struct OperationState: Equatable, Sendable, CustomStringConvertible {
    /// The operation's position in its lifecycle.
    enum Phase: UInt64, Sendable {
        case pending = 0
        case executing = 1
        case finished = 2
    }

    private(set) var raw: UInt64

    init() { raw = Self.defaultRaw }

    init(raw: UInt64) { self.raw = raw & ~Self.lockBit }

    static let lockBit: UInt64 = 1
    private static let phaseShift: UInt64 = 1
    private static let phaseMask: UInt64 = 0b11 << 1
    private static let cancelledBit: UInt64 = 1 << 3
    private static let enqueuedBit: UInt64 = 1 << 4
    private static let observedBit: UInt64 = 1 << 5
    private static let retiredBit: UInt64 = 1 << 6
    private static let startedBit: UInt64 = 1 << 7
    private static let priorityShift: UInt64 = 8
    private static let priorityMask: UInt64 = 0b111 << 8
    private static let qosShift: UInt64 = 11
    private static let qosMask: UInt64 = 0b111 << 11
    private static let asyncBodyBit: UInt64 = 1 << 14
    private static let threadPriorityBit: UInt64 = 1 << 15
    private static let failurePolicyBit: UInt64 = 1 << 16
    private static let dependencyShift: UInt64 = 32
    private static let dependencyUnit: UInt64 = 1 << 32

    /// Bits that must all be clear (except `enqueued`, for a queue's start)
    /// for `start()` to take its fast path: unlocked, pending, not started,
    /// not cancelled, unobserved, no failure policy, no dependencies.
    static let fastStartMask: UInt64 = lockBit | phaseMask | cancelledBit | enqueuedBit | observedBit
        | startedBit | failurePolicyBit | (UInt64(UInt32.max) << dependencyShift)
    static let enqueuedFlag: UInt64 = enqueuedBit
    static let startedFlag: UInt64 = startedBit
    static let executingPhase: UInt64 = Phase.executing.rawValue << phaseShift

    /// Normal priority (index 2), default QoS (index 2), pending, no dependencies.
    static let defaultRaw: UInt64 = (2 << 8) | (2 << 11)

    // MARK: Fields

    var phase: Phase {
        get { Phase(rawValue: (raw & Self.phaseMask) >> Self.phaseShift) ?? .finished }
        set { raw = (raw & ~Self.phaseMask) | (newValue.rawValue << Self.phaseShift) }
    }

    var isCancelled: Bool {
        get { raw & Self.cancelledBit != 0 }
        set { set(Self.cancelledBit, newValue) }
    }

    var isEnqueued: Bool {
        get { raw & Self.enqueuedBit != 0 }
        set { set(Self.enqueuedBit, newValue) }
    }

    var isObserved: Bool {
        get { raw & Self.observedBit != 0 }
        set { set(Self.observedBit, newValue) }
    }

    var isRetired: Bool {
        get { raw & Self.retiredBit != 0 }
        set { set(Self.retiredBit, newValue) }
    }

    var hasStarted: Bool {
        get { raw & Self.startedBit != 0 }
        set { set(Self.startedBit, newValue) }
    }

    var hasAsynchronousBody: Bool {
        get { raw & Self.asyncBodyBit != 0 }
        set { set(Self.asyncBodyBit, newValue) }
    }

    var hasCustomThreadPriority: Bool {
        get { raw & Self.threadPriorityBit != 0 }
        set { set(Self.threadPriorityBit, newValue) }
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

    /// The base class's readiness: cancelled, or every dependency finished.
    var isReady: Bool { isCancelled || unfinishedDependencies == 0 }

    var isExecuting: Bool { phase == .executing }
    var isFinished: Bool { phase == .finished }

    private mutating func set(_ bit: UInt64, _ on: Bool) {
        raw = on ? raw | bit : raw & ~bit
    }

    var description: String {
        var parts = ["\(phase)"]
        if isCancelled { parts.append("cancelled") }
        if isEnqueued { parts.append("enqueued") }
        if hasStarted { parts.append("started") }
        if isRetired { parts.append("retired") }
        if unfinishedDependencies > 0 { parts.append("waiting on \(unfinishedDependencies)") }
        return parts.joined(separator: ", ")
    }

    // MARK: Transitions

    /// What `start()` should do.
    enum StartDecision: Equatable, Sendable {
        /// Run the body: the phase is now executing.
        case run
        /// Cancelled before starting: go straight to finished, skip the body.
        case finishCancelled
        /// Misuse: already executing.
        case alreadyExecuting
        /// Misuse: already finished.
        case alreadyFinished
        /// Misuse: `start()` already entered (by another thread) but the
        /// phase has not moved yet.
        case alreadyStarted
    }

    /// Enters `start()`. Readiness and ownership are checked by the caller,
    /// which must call user code (`isReady`) outside the lock.
    mutating func beginStart() -> StartDecision {
        switch phase {
        case .executing: return .alreadyExecuting
        case .finished: return .alreadyFinished
        case .pending:
            if hasStarted { return .alreadyStarted }
            hasStarted = true
            if isCancelled { return .finishCancelled }
            phase = .executing
            return .run
        }
    }

    /// What `cancel()` changed.
    struct CancelOutcome: Equatable, Sendable {
        /// False when the operation was already cancelled or finished.
        var changed: Bool
        /// The operation had not started, so its readiness is reported.
        var wasPending: Bool
        /// Readiness before the change (it is always true afterwards).
        var wasReady: Bool
    }

    /// Cancels. Cancelling twice, or after finishing, changes nothing.
    mutating func cancel() -> CancelOutcome {
        guard !isCancelled, phase != .finished else {
            return CancelOutcome(changed: false, wasPending: false, wasReady: isReady)
        }
        let wasReady = isReady
        isCancelled = true
        return CancelOutcome(changed: true, wasPending: phase == .pending && !hasStarted, wasReady: wasReady)
    }

    /// What finishing changed.
    enum FinishOutcome: Equatable, Sendable {
        /// Now finished; `wasExecuting` tells which notifications apply.
        case finished(wasExecuting: Bool)
        /// Already finished: finishing twice is ignored.
        case alreadyFinished
    }

    /// Moves to finished (from executing, or from pending when cancelled
    /// before start or when a subclass announces it finished).
    mutating func finish() -> FinishOutcome {
        switch phase {
        case .finished:
            return .alreadyFinished
        case .executing:
            phase = .finished
            return .finished(wasExecuting: true)
        case .pending:
            hasStarted = true
            phase = .finished
            return .finished(wasExecuting: false)
        }
    }

    /// Records that the completion block ran and waiters were released.
    mutating func retire() {
        precondition(phase == .finished, "retire() before finish(): \(self)")
        isRetired = true
    }

    /// A change of the base class's readiness, if any.
    enum ReadinessChange: Equatable, Sendable {
        case none
        case becameReady
        case becameUnready
    }

    /// Counts one more unfinished dependency. Only a pending operation that
    /// has not started counts dependencies.
    mutating func addUnfinishedDependency() -> ReadinessChange {
        guard phase == .pending, !hasStarted else { return .none }
        let wasReady = isReady
        raw &+= Self.dependencyUnit
        return wasReady && !isReady ? .becameUnready : .none
    }

    /// A counted dependency finished or was removed.
    mutating func dependencyFinished() -> ReadinessChange {
        guard unfinishedDependencies > 0 else { return .none }
        let wasReady = isReady
        raw &-= Self.dependencyUnit
        guard phase == .pending, !hasStarted else { return .none }
        return !wasReady && isReady ? .becameReady : .none
    }

    /// A subclass announced `isExecuting`: count the operation as started.
    mutating func markExecuting() {
        guard phase == .pending else { return }
        hasStarted = true
        phase = .executing
    }

    /// Claims the operation for a queue. Returns why it cannot be claimed, or nil.
    enum EnqueueRefusal: Equatable, Sendable {
        case alreadyEnqueued
        case executing
        case finished
    }

    /// Gives the operation back after a refused `tryAddOperation`.
    mutating func unenqueue() {
        isEnqueued = false
    }

    mutating func enqueue() -> EnqueueRefusal? {
        if isEnqueued { return .alreadyEnqueued }
        switch phase {
        case .executing: return .executing
        case .finished: return .finished
        case .pending:
            if hasStarted { return .executing }
            isEnqueued = true
            return nil
        }
    }
}
