import Operations

/// What one stress round does. Everything the round *generates* (queues,
/// operations, dependency graph, driver steps, chaos decisions) is a pure
/// function of these values, so a seed reruns the same round; only thread
/// interleavings differ between runs.
public struct StressConfiguration: Sendable, Hashable {
    /// The seed of the round. Printed with every failure; pass it back to rerun.
    public var seed: UInt64
    /// Operations to generate, including the ones that operations add.
    public var operations: Int
    /// Queues to spread them over (at least 1). Roles cycle through serial,
    /// fixed-width, elastic (width changed while running) and default width.
    public var queues: Int
    /// The bound on every wait the round makes (waits for an operation, for a
    /// queue, for chaos threads). A wait that reaches it is a violation,
    /// reported with a dump of the queues' states, never a hang.
    public var waitTimeout: Duration
    /// The bound on the final drain (all operations completed).
    public var drainTimeout: Duration
    /// Whether the plan adds barrier blocks (on by default). Turning them
    /// off changes the plan (and its fingerprint) for the same seed.
    public var barriers: Bool
    /// Whether to run the chaos threads (suspend/resume, width changes,
    /// cancellation, outside waits). On by default.
    public var chaos: Bool
    /// Whether to install `OperationMisuse.handler` (process-wide) for the
    /// round, so that a misuse the library reports on one of its own threads
    /// becomes a violation instead of a trap. Only for processes that own the
    /// handler, such as `ops soak`; tests leave it off and rely on the scoped
    /// handlers the engine installs around all of its own calls.
    public var installsProcessWideMisuseHandler: Bool
    /// A deliberate fault, to check that the engine reports failures.
    public var injectedFault: InjectedFault
    /// Whether to call `OperationQueue._checkInvariants()` on every queue
    /// after every driver step and at the end of the round (any string it
    /// returns is a violation). On by default in debug builds (tests), off
    /// in release builds (`ops soak --check-invariants` turns it on).
    public var checksInvariants: Bool
    /// Whether the plan gives some operations an `isFinished` observer that
    /// waits (bounded) for an older operation. On by default (the stalls it
    /// found are fixed: `BlockingObserverRegressionTests`,
    /// `AsyncBodyTailRegressionTests`); `ops soak --no-blocking-observers`
    /// turns it off.
    public var blockingObservers: Bool
    /// How long the weak-reference census waits for the last references
    /// to operations, closures and queues to go (threads that finished an
    /// operation may still hold it for a moment) before it reports leaks.
    public var censusTimeout: Duration
    /// Whether the round ends with `StressRound.runAccessorRaces`: up to
    /// 250 ms of two threads racing reads of an operation's properties
    /// against edits. Off by default, so that a test suite running rounds
    /// in parallel with other tests does not spend two cores on it; `ops
    /// soak` turns it on.
    public var accessorRaces: Bool

    /// Deliberate faults in the engine's own use of the library, to check
    /// that the checks catch what they are meant to catch. Each makes the
    /// engine believe something the library was never told.
    public enum InjectedFault: Sendable, Hashable, CaseIterable {
        /// None: the normal stress round.
        case none
        /// Suspend the first queue just before the final drain and leave it
        /// suspended: the drain must time out and be reported with a dump
        /// (deterministic).
        case leaveQueueSuspended
        /// Create the serial queue with the default width while checking it
        /// as serial: expect `concurrency` violations.
        case serialQueueNotSerial
        /// Do not add the planned dependencies: expect
        /// `startedBeforeDependency` violations.
        case dependenciesNotAdded
        /// Record suspensions without suspending: expect
        /// `startedWhileSuspended` violations.
        case suspensionNotApplied
        /// Add barrier blocks as plain blocks: expect `barrierOrder` violations.
        case barriersNotBarriers
        /// Keep a hidden strong reference to the first operation created:
        /// the census must report it (`leak`, naming the operation).
        case leakOperation
        /// Keep a hidden strong reference to the first operation's
        /// completion-block sentinel: the census must report the closure.
        case leakClosure
        /// Keep a hidden strong reference to queue 0: the census must
        /// report the queue.
        case leakQueue
    }

    /// Creates a configuration.
    public init(
        seed: UInt64,
        operations: Int = 3_000,
        queues: Int = 5,
        waitTimeout: Duration = .seconds(60),
        drainTimeout: Duration? = nil,
        barriers: Bool = true,
        chaos: Bool = true,
        installsProcessWideMisuseHandler: Bool = false,
        injectedFault: InjectedFault = .none,
        checksInvariants: Bool = _isDebugAssertConfiguration(),
        censusTimeout: Duration = .seconds(10),
        blockingObservers: Bool = true,
        accessorRaces: Bool = false
    ) {
        self.seed = seed
        self.operations = max(1, operations)
        self.queues = max(1, queues)
        self.waitTimeout = waitTimeout
        self.drainTimeout = drainTimeout ?? waitTimeout
        self.barriers = barriers
        self.chaos = chaos
        self.installsProcessWideMisuseHandler = installsProcessWideMisuseHandler
        self.injectedFault = injectedFault
        self.checksInvariants = checksInvariants
        self.censusTimeout = censusTimeout
        self.blockingObservers = blockingObservers
        self.accessorRaces = accessorRaces
    }
}

/// One broken invariant, found during a round.
public struct StressViolation: Sendable, Hashable, CustomStringConvertible {
    /// Which invariant.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// `main()` (or an async body, or a block) ran more than once.
        case bodyRanTwice
        /// `main()` ran for an operation cancelled before it started.
        case bodyRanAfterCancel
        /// An operation started before one of its dependencies finished.
        case startedBeforeDependency
        /// An operation queued after a barrier started before the barrier
        /// finished, or a barrier ran before an operation queued before it.
        case barrierOrder
        /// A completion block ran more or fewer than once, or too early.
        case completion
        /// An operation did not finish, finished twice, or was not run
        /// although it was never cancelled.
        case finish
        /// More operations ran at once than `maxConcurrentOperationCount`
        /// allowed (two at once on a serial queue).
        case concurrency
        /// A suspended queue started an operation.
        case startedWhileSuspended
        /// A queue did not drain, or `operationCount` did not return to 0.
        case notDrained
        /// A bounded wait reached its bound.
        case timeout
        /// The library reported a misuse the engine did not commit on
        /// purpose, or a deliberate misuse was not reported exactly once.
        case misuse
        /// An operation, one of its closures, or a queue was still alive
        /// after the round drained and the engine dropped its references.
        case leak
        /// `OperationQueue._checkInvariants()` returned a broken invariant.
        case invariant
        /// The pending limit was not enforced as its policy says
        /// (`tryAddOperation`, `.block`, `.reject`, `addOperationWhenRoom`).
        case pendingLimit
        /// An observer's or async body's check failed (a wait from an
        /// observer did not end, a typed result was wrong).
        case observer
        /// Anything else unexpected.
        case other
    }

    /// Which invariant broke.
    public var kind: Kind
    /// What happened, naming the operations and queues involved. Timeouts
    /// include a dump of the queues' states.
    public var message: String

    /// `[kind] message`.
    public var description: String { "[\(kind.rawValue)] \(message)" }
}

/// The outcome of one round.
public struct StressReport: Sendable, CustomStringConvertible {
    /// The round's seed: pass it back to rerun the round.
    public var seed: UInt64
    /// The plan's fingerprint (the same for the same configuration).
    public var planFingerprint: UInt64
    /// Operations generated by the plan (some, added by operations that were
    /// cancelled, are never created).
    public var operationsPlanned: Int
    /// Operations created and finished, barrier blocks included.
    public var operationsRun: Int
    /// Operations whose body (`main()`, blocks or async work) ran.
    public var bodiesRun: Int
    /// Operations that ended cancelled.
    public var cancelled: Int
    /// Operations the engine cancelled at a moment when they certainly had
    /// not started (their bodies must never run).
    public var cancelledBeforeStart: Int
    /// Operations cancelled while their body was running.
    public var cancelledWhileRunning: Int
    /// Operations started by hand rather than by a queue.
    public var startedByHand: Int
    /// Barrier blocks that ran.
    public var barriers: Int
    /// Outside waits performed (each bounded).
    public var waits: Int
    /// Chaos actions performed (suspensions, width changes, cancellations).
    public var chaosActions: Int
    /// The highest number of operations seen running at once on any queue.
    public var peakConcurrency: Int
    /// Whether every queue drained and reported `operationCount == 0`.
    public var queuesDrained: Bool
    /// Every broken invariant (the first 200 are kept; see `violationCount`).
    public var violations: [StressViolation]
    /// How many violations were found in all.
    public var violationCount: Int
    /// Wall-clock time of the round.
    public var elapsed: Duration
    /// Barrier blocks that did not run because `cancelAllOperations()`
    /// cancelled their barrier (which still ordered the queue).
    public var barriersCancelled: Int = 0
    /// Operations refused by a `.reject` pending limit (cancelled, never run).
    public var rejected: Int = 0
    /// `tryAddOperation` calls refused because the queue was full.
    public var tryAddsRefused: Int = 0
    /// Adds that waited for room (blocking `.block` adds and `async` adds).
    public var waitedAdds: Int = 0
    /// Bodies run by `queue.run {}` (async, no operation object in hand).
    public var queueRuns: Int = 0
    /// Misuses the engine committed on purpose, and reports received for them.
    public var misusesCommitted: Int = 0
    /// Misuse reports received for deliberate misuses (must equal ``misusesCommitted``).
    public var misusesReported: Int = 0
    /// Observer actions performed (waits from `isFinished` observers, adds
    /// from `isExecuting` observers and completion blocks).
    public var observerActions: Int = 0
    /// Calls of `OperationQueue._checkInvariants()` made.
    public var invariantChecks: Int = 0
    /// Weak references checked by the final census (operations, closure
    /// sentinels, queues), and how many were still alive.
    public var censusTracked: Int = 0
    /// References still alive after the census timeout (each a `leak` violation).
    public var censusLeaks: Int = 0

    /// Whether the round found nothing wrong.
    public var passed: Bool { violationCount == 0 && queuesDrained }

    /// A one-line summary.
    public var description: String {
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let secondsText = String(Int((seconds * 1000).rounded())) + " ms"
        return "seed \(seed) plan \(hex(planFingerprint)): \(operationsRun) operations run (bodies \(bodiesRun), cancelled \(cancelled): \(cancelledBeforeStart) surely before start, \(cancelledWhileRunning) while running; by hand \(startedByHand), barriers \(barriers)), waits \(waits), chaos actions \(chaosActions), peak concurrency \(peakConcurrency), barriers cancelled \(barriersCancelled), rejected \(rejected), tryAdd refused \(tryAddsRefused), waited adds \(waitedAdds), queue.run \(queueRuns), misuses \(misusesReported)/\(misusesCommitted), observer actions \(observerActions), invariant checks \(invariantChecks), census \(censusTracked) (leaks \(censusLeaks)), drained \(queuesDrained), violations \(violationCount), \(secondsText)"
    }
}

func hex(_ value: UInt64) -> String {
    let digits = String(value, radix: 16)
    return "0x" + String(repeating: "0", count: max(0, 16 - digits.count)) + digits
}
