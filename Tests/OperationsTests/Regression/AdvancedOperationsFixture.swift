// A fixture in the style of the WWDC 2015 "Advanced NSOperations" sample (and
// its maintained form, PSOperations), written for these tests in our own
// words: real client code that ports from Foundation by changing imports.
//
// - `PhasedOperation` keeps one `phase` behind its own lock and derives
//   `isReady`, `isExecuting` and `isFinished` from it (overriding the
//   getters); it has its own cancellation flag and `cancel()` that announces
//   `isCancelled` without calling `super.cancel()`; conditions are evaluated
//   (asynchronously) once its dependencies have finished, before it reports
//   ready; `start()` calls `super.start()` (which runs `main()`) and then
//   finishes a cancelled operation itself; `finish()` moves to `.finished`.
// - `GatedOperation` finishes when a gate opens (a deterministic stand-in for
//   asynchronous work); `DelayOperation` finishes after a time interval.
// - `GroupingOperation` runs its children on an internal queue and finishes
//   when that queue has run them all.
// - `ExclusivityRegistry` makes operations of one category mutually
//   exclusive by chaining dependencies, as the sample's exclusivity
//   controller does.
//
// Every phase change announces "state" and, because the old library has no
// dependent-key support, also the derived keys (`announcedKeys`). A subclass
// in NewAPIRegressionTests announces only "state" and declares the derived
// keys with `keyPathsForValuesAffectingValue(forKey:)`.

import Dispatch
import Testing
@testable import Operations

/// Something that must hold before a `PhasedOperation` may start.
protocol PhaseCondition: Sendable {
    /// Calls `completion` (on any thread, at any later time) with whether
    /// the operation may run. A failed condition cancels the operation.
    func evaluate(for operation: PhasedOperation, completion: @escaping @Sendable (Bool) -> Void)
}

/// A condition that holds once its gate opens.
struct GateCondition: PhaseCondition {
    let gate: Gate

    func evaluate(for operation: PhasedOperation, completion: @escaping @Sendable (Bool) -> Void) {
        // A thread of its own: blocking a Dispatch worker could starve
        // unrelated work on a two-core machine.
        spawnThread {
            completion(gate.wait(timeout: patience))
        }
    }
}

/// The fixture's base class. See the file comment.
class PhasedOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: every mutable field is guarded by `lock`; the
    // counters and recorder are thread-safe.

    enum Phase: Int, Comparable, Sendable, CustomStringConvertible {
        case created, evaluatingConditions, ready, executing, finishing, finished

        static func < (lhs: Phase, rhs: Phase) -> Bool { lhs.rawValue < rhs.rawValue }

        var description: String {
            switch self {
            case .created: return "created"
            case .evaluatingConditions: return "evaluatingConditions"
            case .ready: return "ready"
            case .executing: return "executing"
            case .finishing: return "finishing"
            case .finished: return "finished"
            }
        }
    }

    private let lock = RegressionLock()
    private var storedPhase = Phase.created
    private var storedCancelled = false
    private var storedConditions: [any PhaseCondition] = []

    /// Calls of `start()`, `execute()` and `finish()` that took effect.
    let startCalls = Counter()
    let executeCalls = Counter()
    let finishCalls = Counter()
    /// "start", "execute", "finish" (and whatever subclasses add), in order.
    let log = Recorder<String>()
    /// Entered when `execute()` begins, left when the operation finishes.
    var tracker: ConcurrencyTracker?

    /// The keys announced around every phase change. The old library acts
    /// only on the lifecycle keys themselves, so the fixture announces them
    /// too; the new-API variant announces only "state".
    class var announcedKeys: [String] { ["state", "isReady", "isExecuting", "isFinished"] }

    override init() {
        super.init()
    }

    /// Adds a condition. Call before the operation is added to a queue.
    func addCondition(_ condition: any PhaseCondition) {
        lock.withLock { storedConditions.append(condition) }
    }

    // MARK: State

    /// The operation's one piece of lifecycle state.
    var phase: Phase {
        lock.withLock { storedPhase }
    }

    /// Moves to `next` (forward only), announcing the change. Returns
    /// whether it moved.
    @discardableResult
    final func advance(to next: Phase) -> Bool {
        let keys = Self.announcedKeys
        for key in keys { willChangeValue(forKey: key) }
        let moved = lock.withLock { () -> Bool in
            guard next > storedPhase else { return false }
            storedPhase = next
            return true
        }
        for key in keys.reversed() { didChangeValue(forKey: key) }
        return moved
    }

    override var isReady: Bool {
        switch phase {
        case .created:
            if isCancelled { return true }
            // Dependencies finished: evaluate the conditions (once).
            if super.isReady { beginEvaluatingConditions() }
            return false
        case .evaluatingConditions:
            return isCancelled
        case .ready:
            return super.isReady || isCancelled
        case .executing, .finishing, .finished:
            return false
        }
    }

    override var isExecuting: Bool { phase == .executing }
    override var isFinished: Bool { phase == .finished }
    override var isCancelled: Bool { lock.withLock { storedCancelled } }

    /// Moves to `.evaluatingConditions` without an announcement (readiness
    /// does not change), then evaluates every condition asynchronously and
    /// moves to `.ready` (announced) once all of them answered.
    private func beginEvaluatingConditions() {
        let conditions = lock.withLock { () -> [any PhaseCondition]? in
            guard storedPhase == .created else { return nil }
            storedPhase = .evaluatingConditions
            return storedConditions
        }
        guard let conditions else { return }
        guard !conditions.isEmpty else {
            spawnThread { self.advance(to: .ready) }
            return
        }
        let remaining = Latch(count: conditions.count)
        let allHeld = Box(true)
        for condition in conditions {
            condition.evaluate(for: self) { held in
                if !held { allHeld.value = false }
                remaining.countDown()
                if remaining.count == 0 {
                    if !allHeld.value { self.cancel() }
                    self.advance(to: .ready)
                }
            }
        }
    }

    // MARK: Lifecycle

    override func start() {
        startCalls.increment()
        log.record("start")
        // The base start() runs main(); a concurrent subclass stays
        // executing after main() returns, until finish() announces it.
        super.start()
        // "Must move the operation to the finished state if it is canceled."
        if isCancelled { finish() }
    }

    override func main() {
        guard !isCancelled else {
            finish()
            return
        }
        advance(to: .executing)
        executeCalls.increment()
        log.record("execute")
        tracker?.enter()
        execute()
    }

    /// The work. Subclasses override it and call `finish()` when done; the
    /// default finishes at once.
    func execute() {
        finish()
    }

    /// Its own cancellation: sets its flag and announces `isCancelled` (and
    /// `isReady`, which follows), without calling `super.cancel()`.
    override func cancel() {
        guard lock.withLock({ !storedCancelled && storedPhase < .finishing }) else { return }
        willChangeValue(forKey: "isCancelled")
        willChangeValue(forKey: "isReady")
        lock.withLock { storedCancelled = true }
        didChangeValue(forKey: "isReady")
        didChangeValue(forKey: "isCancelled")
    }

    /// Finishes once (later calls do nothing).
    final func finish() {
        let first = lock.withLock { () -> Bool in
            guard storedPhase < .finishing else { return false }
            storedPhase = .finishing
            return true
        }
        guard first else { return }
        finishCalls.increment()
        log.record("finish")
        if executeCalls.count > 0 { tracker?.leave() }
        advance(to: .finished)
    }
}

/// Finishes when `gate` opens (or, as a cleanup bound, after `patience`).
final class GatedOperation: PhasedOperation, @unchecked Sendable {
    // @unchecked Sendable: `gate` and `executing` are thread-safe.
    let gate: Gate
    /// Opened when `execute()` began.
    let executing = Gate()

    init(gate: Gate = Gate()) {
        self.gate = gate
        super.init()
    }

    override func execute() {
        executing.open()
        spawnThread {
            self.gate.wait(timeout: patience)
            self.finish()
        }
    }
}

/// Finishes `interval` after `execute()` began.
final class DelayOperation: PhasedOperation, @unchecked Sendable {
    // @unchecked Sendable: `interval` is immutable; `executeBegan` is locked.
    let interval: DispatchTimeInterval
    let executeBegan = Box<UInt64?>(nil)

    init(_ interval: DispatchTimeInterval) {
        self.interval = interval
        super.init()
    }

    override func execute() {
        executeBegan.value = nowNanoseconds()
        DispatchQueue.global().asyncAfter(deadline: .now() + interval) {
            self.finish()
        }
    }
}

/// Runs `children` on an internal queue; finishes when they all finished.
final class GroupingOperation: PhasedOperation, @unchecked Sendable {
    // @unchecked Sendable: `internalQueue` and `finishing` are immutable
    // references to thread-safe objects.
    let internalQueue = OperationQueue()
    private let finishing = BlockOperation {}

    init(children: [Operation]) {
        super.init()
        internalQueue.isSuspended = true
        internalQueue.name = "group internal queue"
        let finishing = self.finishing
        finishing.addExecutionBlock { [weak self] in self?.finish() }
        for child in children { finishing.addDependency(child) }
        internalQueue.addOperations(children + [finishing], waitUntilFinished: false)
    }

    override func execute() {
        internalQueue.isSuspended = false
    }

    override func cancel() {
        internalQueue.cancelAllOperations()
        super.cancel()
    }
}

/// Makes operations of one category mutually exclusive: each one added
/// depends on the previous one of its category.
final class ExclusivityRegistry: @unchecked Sendable {
    // @unchecked Sendable: `last` is guarded by `lock`.
    private let lock = RegressionLock()
    private var last: [String: Operation] = [:]

    func add(_ operation: Operation, category: String) {
        let previous = lock.withLock { () -> Operation? in
            defer { last[category] = operation }
            return last[category]
        }
        if let previous { operation.addDependency(previous) }
    }
}
