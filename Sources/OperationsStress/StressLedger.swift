import Operations
import Synchronization

/// What the engine knows about one planned operation: the object once it is
/// created, and counters that the checks read. Created for every planned
/// operation when the round starts.
final class OpRecord: Sendable {
    let spec: StressPlan.OperationSpec

    /// The operation, once created (children are created by their parent):
    /// held strongly until its completion block has run (or the end of the
    /// round), weakly after that, with weak references to the sentinels its
    /// closures capture; the census at the end of the round checks that
    /// they are all gone.
    let refs = StressLock(OpRefs())
    /// Whether the operation was created (set once).
    let created = Atomic<Bool>(false)
    /// `isCancelled` as read in its completion block (or at the end).
    let finalCancelled = Atomic<Bool>(false)
    /// The operation will be refused by a `.reject` pending limit: its
    /// completion block runs while its queue is suspended.
    let expectsRejection = Atomic<Bool>(false)

    /// How many times the body (`main()`, the async work, or the first
    /// execution block) began. Must end 0 or 1.
    let bodyStarts = Atomic<Int>(0)
    /// 0: not begun; 1: running; 2: ended (for an asynchronous operation:
    /// `finish()` is about to be called).
    let bodyState = Atomic<Int>(0)
    /// Execution blocks begun / ended (block operations).
    let blockRuns = Atomic<Int>(0)
    let blocksDone = Atomic<Int>(0)
    /// Completion block runs. Must end exactly 1.
    let completions = Atomic<Int>(0)
    /// `isFinished` notifications with new value true (observed operations).
    let finishNotifications = Atomic<Int>(0)
    /// Set just before the engine cancels the operation at a moment when it
    /// certainly has not started; its body must then never run.
    let knownCancelledBeforeStart = Atomic<Bool>(false)
    /// Whether the queue tracker counts it as running.
    let inFlight = Atomic<Bool>(false)
    /// Round clock when its add to a queue began (0 for hand operations).
    let addTick = Atomic<UInt64>(0)
    /// Round clock when its body ended (0: never).
    let bodyEndTick = Atomic<UInt64>(0)
    /// The barrier that its queue's last completed `addBarrierBlock` call
    /// added before this operation's add began, or -1.
    let requiredBarrier = Atomic<Int>(-1)
    /// Cancellations and completion listeners (see `GateState`).
    let gate = StressLock(GateState())
    /// Whether its children were added (by an observer: once).
    let childrenAdded = Atomic<Bool>(false)
    /// The operation's observations, kept until its completion block ran.
    let observations = StressLock<[KeyValueObservation]>([])

    init(spec: StressPlan.OperationSpec) {
        self.spec = spec
    }

    /// The operation, while anything keeps it alive.
    var op: Operation? { refs.withLock { $0.strong ?? $0.weak } }

    /// Whether the operation finished: `isFinished` while it is alive;
    /// once it is gone, whether its completion block ran (an operation
    /// released before that is reported by the census of its record).
    var hasFinished: Bool {
        if let operation = op { return operation.isFinished }
        return completions.load(ordering: .sequentiallyConsistent) > 0
    }

    var queueIndex: Int? {
        if case .queue(let queue) = spec.placement { return queue }
        return nil
    }

    /// Runs `listener` once this operation's completion block has run (now,
    /// if it already has).
    func onCompletion(_ listener: @escaping @Sendable () -> Void) {
        let runNow = gate.withLock { state -> Bool in
            if state.completed { return true }
            state.completionListeners.append(listener)
            return false
        }
        if runNow { listener() }
    }
}

/// Guarded by `OpRecord.gate`.
struct GateState {
    /// The body began: dependents registered from now on can no longer be
    /// cancelled "certainly before they start" by it.
    var bodyBegun = false
    /// Dependents to cancel when the body begins (`.byDependency`).
    var pendingCancels: [Int] = []
    var completed = false
    var completionListeners: [@Sendable () -> Void] = []
}

/// One planned barrier block.
final class BarrierRecord: Sendable {
    let id: Int
    let runs = Atomic<Int>(0)
    let blockEnded = Atomic<Bool>(false)
    /// The barrier's block was released without running (it was cancelled).
    let skipped = Atomic<Bool>(false)
    /// The barrier added before this one on the same queue, or -1.
    let previous = Atomic<Int>(-1)
    /// Its queue's index (set when it is added).
    let queueIndex = Atomic<Int>(-1)
    /// The object its block captures, weakly (for the census).
    let token = StressLock(WeakBarrierToken())
    let addTick = Atomic<UInt64>(0)
    /// The operations (by index) whose adds to the queue returned before
    /// this barrier's add began, since the previous barrier's.
    let before = StressLock<[Int]>([])

    init(id: Int) { self.id = id }
}

/// The engine's view of one queue: what it allowed and what ran.
final class QueueTracker: Sendable {
    let spec: StressPlan.QueueSpec
    /// The queue: strong during the round, weak once released.
    let refs: StressLock<QueueRefs>
    let state = StressLock(TrackerState())
    /// False only under the `.suspensionNotApplied` fault.
    let appliesSuspension: Bool

    init(spec: StressPlan.QueueSpec, queue: OperationQueue, appliesSuspension: Bool = true) {
        self.spec = spec
        refs = StressLock(QueueRefs(strong: queue, weak: queue))
        self.appliesSuspension = appliesSuspension
        state.withLock { $0.limits = [(0, spec.initialWidth)] }
    }

    /// The queue (only until ``release()``).
    var queue: OperationQueue {
        guard let queue = refs.withLock({ $0.strong }) else { preconditionFailure("stress engine: queue \(spec.index) used after the round released it") }
        return queue
    }

    /// Drops the engine's strong reference to the queue.
    func release() { refs.withLock { $0.strong = nil } }

    /// Changes the width, logging the new limit first (see `TrackerState`).
    func setWidth(_ width: Int, clock: RoundClock) {
        state.withLock { $0.limits.append((clock.tick(), width)) }
        queue.maxConcurrentOperationCount = width
    }

    /// Suspends the queue; the suspension counts once the setter returned.
    func suspend(clock: RoundClock) {
        if appliesSuspension { queue.isSuspended = true }
        state.withLock { $0.suspendedSince = clock.tick() }
    }

    /// Resumes the queue; the suspension stops counting before the setter runs.
    func resume() {
        state.withLock { $0.suspendedSince = nil }
        queue.isSuspended = false
    }

    /// An operation (or barrier, negative key) of this queue began its body.
    /// Returns violations to report (outside the lock).
    func enter(key: Int, lowerBound: UInt64, label: String) -> [StressViolation] {
        state.withLock { state in
            var found: [StressViolation] = []
            if let since = state.suspendedSince, lowerBound > since {
                found.append(StressViolation(
                    kind: .startedWhileSuspended,
                    message: "\(label) started on queue \(spec.index) (\(spec.role.rawValue)), suspended since tick \(since), although it could only be started after tick \(lowerBound)"
                ))
            }
            state.inFlight[key] = lowerBound
            let count = state.inFlight.count
            state.peak = max(state.peak, count)
            let oldest = state.inFlight.values.min() ?? lowerBound
            if let bound = state.bound(since: oldest), count > bound {
                let running = state.inFlight.keys.sorted().map { $0 >= 0 ? "op \($0)" : "barrier \(-$0 - 1)" }
                found.append(StressViolation(
                    kind: .concurrency,
                    message: "\(count) operations running at once on queue \(spec.index) (\(spec.role.rawValue)), but the largest maxConcurrentOperationCount in force since tick \(oldest) was \(bound) (limits: \(state.limitsDescription(since: oldest))); running: \(running.joined(separator: ", "))"
                ))
            }
            return found
        }
    }

    func exit(key: Int) {
        state.withLock { _ = $0.inFlight.removeValue(forKey: key) }
    }
}

/// A barrier's token, weakly.
struct WeakBarrierToken {
    weak var token: BarrierToken?
}

/// A queue, strongly and weakly.
struct QueueRefs {
    var strong: OperationQueue?
    weak var weak: OperationQueue?
}

/// An operation and the sentinels its closures capture: strongly until the
/// completion block ran, weakly always (for the census).
struct OpRefs {
    var strong: Operation?
    weak var weak: Operation?
    weak var bodySentinel: Sentinel?
    weak var completionSentinel: Sentinel?
}

/// An object captured by an operation's body or completion closure: if the
/// closure is released, so is the sentinel.
final class Sentinel: Sendable {
    init() {}
}

/// The state of a `QueueTracker`, guarded by its mutex.
///
/// **The concurrency rule.** The queue holds a slot for an operation from
/// the moment it pops it until the operation retires (after its completion
/// block). The engine counts an operation as running from the start of its
/// body until the end of its completion block: a sub-interval of the slot.
/// A queue pops only while fewer than the current limit hold slots, so at
/// any moment the slots held are at most the limit in force when the most
/// recent of them was popped. That pop happened after the *lower bound* of
/// every running operation (when its add began, or when one of its
/// dependencies' bodies ended, whichever is later). Hence the check: when a
/// body begins, the number running must not exceed the largest limit in
/// force since the oldest lower bound among the running operations. Limits
/// are logged with a tick just before the setter runs; the entry before the
/// one in force at that tick is included too, in case its setter had not
/// returned yet. A limit of -1 disables the check for that window. Queues
/// whose width never changes are therefore checked exactly (a serial queue:
/// never two at once).
struct TrackerState {
    /// (tick logged, limit), in tick order.
    var limits: [(tick: UInt64, width: Int)] = []
    /// Running operations (index; barriers as -id-1) → lower bound tick.
    var inFlight: [Int: UInt64] = [:]
    var peak = 0
    /// Tick after the last suspension took effect, or nil while resumed.
    var suspendedSince: UInt64?
    /// Indices of operations whose add to this queue returned, in order.
    var addLog: [Int] = []
    /// Where the last barrier's "before" range ended in `addLog`.
    var barrierCheckpoint = 0
    /// The last barrier whose `addBarrierBlock` call returned, or -1.
    var lastReturnedBarrier = -1

    /// The largest limit that may have been in force since `tick`, or nil
    /// if unlimited (-1).
    func bound(since tick: UInt64) -> Int? {
        var low = 0
        var high = limits.count - 1
        while low < high {
            let middle = (low + high + 1) / 2
            if limits[middle].tick <= tick { low = middle } else { high = middle - 1 }
        }
        var largest = 0
        for entry in limits[max(0, low - 1)...] {
            if entry.width < 0 { return nil }
            largest = max(largest, entry.width)
        }
        return largest
    }

    func limitsDescription(since tick: UInt64) -> String {
        let recent = limits.filter { $0.tick >= tick }.suffix(8)
        let before = limits.last { $0.tick < tick }
        return ((before.map { [$0] } ?? []) + recent).map { "\($0.width)@\($0.tick)" }.joined(separator: " ")
    }
}

/// The round's logical clock: a counter that orders the engine's events.
final class RoundClock: Sendable {
    private let value = Atomic<UInt64>(1)

    /// A new tick, greater than every tick taken before.
    func tick() -> UInt64 { value.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue }
}

/// Collected violations (the first 200 kept).
final class ViolationLog: Sendable {
    private let state = StressLock<(kept: [StressViolation], count: Int)>(([], 0))
    static let keep = 200

    func record(_ violation: StressViolation) {
        state.withLock { state in
            state.count += 1
            if state.kept.count < Self.keep { state.kept.append(violation) }
        }
    }

    var snapshot: (kept: [StressViolation], count: Int) { state.withLock { $0 } }
}
