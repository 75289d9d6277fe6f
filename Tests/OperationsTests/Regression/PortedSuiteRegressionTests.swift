// Regression tests for differences from Foundation that real projects' test
// suites (ProcedureKit's and Overdrive's, compiled against this library) ran
// into. Each failed before its fix.

import Dispatch
import Synchronization
import Testing
@testable import Operations

/// An operation whose `isReady` override counts how often it is asked.
private final class CountingReadiness: Operation, @unchecked Sendable {
    // @unchecked Sendable: `reads` and `readyReads` are atomic.
    let reads = Atomic<Int>(0)
    let readyReads = Atomic<Int>(0)

    override var isReady: Bool {
        let ready = super.isReady
        reads.add(1, ordering: .relaxed)
        if ready { readyReads.add(1, ordering: .relaxed) }
        return ready
    }
}

/// An operation in the style of Overdrive's tasks: one `state` property that
/// `isReady` depends on, and an `isReady` getter that moves the state on
/// when read (it evaluates the task's conditions).
private final class SteppingReadiness: Operation, @unchecked Sendable {
    // @unchecked Sendable: `state` is atomic.
    enum Step: Int { case initial, pending, ready }
    private let step = Atomic<Int>(Step.initial.rawValue)
    var state: Step { Step(rawValue: step.load(ordering: .acquiring))! }

    /// Announced as `state`, which `isReady` depends on.
    func enqueue() {
        willChangeValue(forKey: "state")
        step.store(Step.pending.rawValue, ordering: .releasing)
        didChangeValue(forKey: "state")
    }

    override var isReady: Bool {
        if state == .pending, super.isReady { step.store(Step.ready.rawValue, ordering: .releasing) }
        return state == .ready && super.isReady
    }

    override class func keyPathsForValuesAffectingValue(forKey key: String) -> Set<String> {
        key == "isReady" ? ["state"] : super.keyPathsForValuesAffectingValue(forKey: key)
    }
}

/// A queue subclass that counts the operations added through `addOperation(_:)`.
private final class CountingQueue: OperationQueue, @unchecked Sendable {
    // @unchecked Sendable: `added` is atomic.
    let added = Atomic<Int>(0)

    override func addOperation(_ operation: Operation) {
        added.add(1, ordering: .relaxed)
        super.addOperation(operation)
    }
}

@Suite("Ported suites: Foundation behaviours they rely on")
struct PortedSuiteRegressionTests {
    @Test("an isReady override of an operation in no queue is read when its last dependency finishes (started by hand)")
    func readinessReadWhenDependencyFinishesByHand() {
        let dependency = BlockOperation {}
        let dependent = CountingReadiness()
        dependent.addDependency(dependency)
        let before = dependent.readyReads.load(ordering: .relaxed)
        dependency.start()
        #expect(dependent.readyReads.load(ordering: .relaxed) == before + 1, "the getter was not asked once the operation became ready")
    }

    @Test("an isReady override of an operation in no queue is read when its last dependency finishes in a queue")
    func readinessReadWhenDependencyFinishesInQueue() {
        let first = BlockOperation {}
        let second = BlockOperation {}
        let dependent = CountingReadiness()
        dependent.addDependency(first)
        dependent.addDependency(second)
        let queue = makeQueue("readiness-reread")
        queue.addOperation(first)
        #expect(first.waitUntilFinished(timeout: patience))
        #expect(dependent.readyReads.load(ordering: .relaxed) == 0, "not ready while a dependency is unfinished")
        queue.addOperation(second)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(waitUntil { dependent.readyReads.load(ordering: .relaxed) == 1 })
    }

    @Test("an isReady override of an operation in no queue is read once when isReady is announced")
    func readinessReadWhenAnnouncedOutsideQueue() {
        let operation = CountingReadiness()
        operation.willChangeValue(forKey: "isReady")
        operation.didChangeValue(forKey: "isReady")
        #expect(operation.reads.load(ordering: .relaxed) == 1)
    }

    @Test("a getter that moves its state on when read runs when a key that isReady depends on is announced (Overdrive)")
    func readinessReadThroughDependentKey() {
        let operation = SteppingReadiness()
        operation.enqueue()
        #expect(operation.state == .ready, "nobody read isReady after the announcement")
        let unfinished = BlockOperation {}
        let dependent = SteppingReadiness()
        dependent.addDependency(unfinished)
        dependent.enqueue()
        #expect(dependent.state == .pending, "not ready while its dependency is unfinished")
    }

    @Test("addDependency nests its announcements: will dependencies, will isReady, did isReady, did dependencies")
    func addDependencyNestsAnnouncements() {
        let dependency = BlockOperation {}
        let operation = BlockOperation {}
        let log = Recorder<String>()
        let tokens = ["isReady", "dependencies"].map { key in
            operation.observe(key: key, options: [.prior, .new]) { _, change in
                log.record("\(change.isPrior ? "will" : "did") \(key)")
            }
        }
        operation.addDependency(dependency)
        #expect(log.events == ["will dependencies", "will isReady", "did isReady", "did dependencies"])
        log.removeAll()
        operation.removeDependency(dependency)
        #expect(log.events == ["will dependencies", "will isReady", "did isReady", "did dependencies"])
        withExtendedLifetime(tokens) {}
    }

    @Test("OperationQueue.main reports DispatchQueue.main as its underlying queue")
    func mainUnderlyingQueue() {
        #expect(OperationQueue.main.underlyingQueue?.label == DispatchQueue.main.label)
        #expect(OperationQueue().underlyingQueue == nil)
    }

    @Test("addOperation with a block goes through an overridden addOperation(_:)")
    func blockAddGoesThroughOverride() {
        let queue = CountingQueue()
        let ran = Counter()
        queue.addOperation { ran.increment() }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(queue.added.load(ordering: .relaxed) == 1)
        #expect(ran.count == 1)
    }

    @Test("default queue names are Foundation's")
    func defaultNames() {
        #expect(OperationQueue.main.name == "NSOperationQueue Main Queue")
        let queue = OperationQueue()
        #expect(queue.name?.hasPrefix("NSOperationQueue 0x") == true)
        #expect(!queue.isNamed)
    }
}
