// Regression tests for issues 9 and 10 that use API the rewrite adds (see
// /work/notes/DESIGN.md). This file does not compile against the old
// library:
// - `OperationMisuse.reportsDependencyCycles` (the optional cycle hook),
// - `Operation.keyPathsForValuesAffectingValue(forKey:)` (dependent keys),
// - `OperationQueue.maximumWorkerThreads` (the pool's ceiling),
// - `KeyValueObservation` (the renamed observation token).

import Dispatch
import Testing
@testable import Operations

// MARK: - The cycle hook (issue 10) and misuse handlers that add dependencies (issue 9, defect 10)

/// With the hook on, an `addDependency` that closes a cycle is a
/// `.dependencyCycle` misuse naming the operations, and is refused.
func scenarioCycleHookReportsAndRefuses() {
    OperationMisuse.reportsDependencyCycles = true
    let misuses = installChildMisuseRecorder()
    let a = BlockOperation {}
    let b = BlockOperation {}
    let c = BlockOperation {}
    a.name = "hook-a"
    b.name = "hook-b"
    c.name = "hook-c"
    a.addDependency(b)
    b.addDependency(c)
    c.addDependency(a)
    #expect(misuses.events.map(\.code) == [.dependencyCycle], "\(describeMisuses(misuses.events))")
    for name in ["hook-a", "hook-b", "hook-c"] {
        #expect(misuses.events.first?.message.contains("\"\(name)\"") == true, "the report does not name \(name)")
    }
    #expect(c.dependencies.isEmpty, "the refused edge was added")
    let queue = OperationQueue()
    queue.addOperations([a, b, c], waitUntilFinished: false)
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))

    misuses.removeAll()
    let selfDependent = BlockOperation {}
    selfDependent.name = "hook-self"
    selfDependent.addDependency(selfDependent)
    #expect(misuses.events.map(\.code) == [.dependencyCycle], "a self-dependency is a cycle: \(describeMisuses(misuses.events))")
    #expect(selfDependent.dependencies.isEmpty && selfDependent.isReady)
}

/// A misuse handler that itself calls `addDependency` while a cycle is
/// reported: the report runs with no library lock held.
func scenarioHandlerAddsDependencyDuringCycleReport() {
    OperationMisuse.reportsDependencyCycles = true
    let log = Recorder<OperationMisuse>()
    let x = BlockOperation {}
    let y = BlockOperation {}
    OperationMisuse.handler = { misuse in
        log.record(misuse)
        x.addDependency(y)
    }
    let a = BlockOperation {}
    let b = BlockOperation {}
    a.addDependency(b)
    expectReturns("a cycle report whose handler calls addDependency") {
        b.addDependency(a)
    }
    #expect(log.events.map(\.code) == [.dependencyCycle])
    #expect(x.dependencies == [y], "the handler's own addDependency did not take effect")
    #expect(b.dependencies.isEmpty)
}

@Suite("Issue 9/10 (new API): the cycle hook")
struct CycleHookTests {
    @Test("issue 10 bullet 3: OperationMisuse.reportsDependencyCycles turns a cycle (and a self-dependency) into a refused .dependencyCycle misuse")
    func hookReportsAndRefuses() async {
        await #expect(processExitsWith: .success) { scenarioCycleHookReportsAndRefuses() }
    }

    @Test("defect 10: a misuse handler that calls addDependency during a cycle report does not deadlock")
    func handlerAddsDependency() async {
        await #expect(processExitsWith: .success) { scenarioHandlerAddsDependencyDuringCycleReport() }
    }
}

// MARK: - Dependent keys (issue 10)

/// A `PhasedOperation` that announces only "state", the Advanced NSOperations
/// way, and declares which lifecycle keys follow it.
final class StateOnlyOperation: PhasedOperation, @unchecked Sendable {
    // @unchecked Sendable: `gate` and `executing` are thread-safe.
    let gate = Gate()
    let executing = Gate()

    override class var announcedKeys: [String] { ["state"] }

    override class func keyPathsForValuesAffectingValue(forKey key: String) -> Set<String> {
        switch key {
        case "isReady", "isExecuting", "isFinished": return ["state"]
        default: return super.keyPathsForValuesAffectingValue(forKey: key)
        }
    }

    override func execute() {
        executing.open()
        spawnThread {
            self.gate.wait(timeout: patience)
            self.finish()
        }
    }
}

@Suite("Issue 10 (new API): dependent keys")
struct DependentKeyTests {
    @Test("issue 10 bullet 5: announcing only \"state\" starts, finishes and releases an operation whose getters derive from it")
    func stateAnnouncementDrivesTheQueue() {
        let op = StateOnlyOperation()
        let dependent = BlockOperation {}
        dependent.addDependency(op)
        let queue = makeQueue("state-only")
        queue.addOperations([op, dependent], waitUntilFinished: false)
        #expect(op.executing.wait(), "the queue never started an operation that announced only \"state\" when it became ready")
        #expect(staysFalse { dependent.isFinished || queue.operationCount < 2 })
        op.gate.open()
        #expect(op.waitUntilFinished(timeout: patience), "announcing only \"state\" did not finish the operation")
        #expect(dependent.waitUntilFinished(timeout: patience))
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("issue 10 bullet 5: observers of isFinished and isExecuting are told when only \"state\" is announced")
    func observersToldThroughDependentKeys() {
        let op = StateOnlyOperation()
        op.gate.open()
        let seen = Recorder<String>()
        let finished: KeyValueObservation = op.observe(key: "isFinished", options: [.new]) { _, change in
            seen.record("isFinished=\(String(describing: (change.newValue ?? nil) as? Bool))")
        }
        let executing: KeyValueObservation = op.observe(key: "isExecuting", options: [.new]) { _, change in
            seen.record("isExecuting=\(String(describing: (change.newValue ?? nil) as? Bool))")
        }
        let queue = makeQueue("state-only-observed")
        queue.addOperation(op)
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(seen.events.contains("isExecuting=Optional(true)"), "\(seen.events)")
        #expect(seen.events.contains("isFinished=Optional(true)"), "\(seen.events)")
        withExtendedLifetime((finished, executing)) {}
    }

    @Test("issue 10 bullet 5: the base class declares no dependent keys")
    func baseDeclaresNone() {
        #expect(Operation.keyPathsForValuesAffectingValue(forKey: "isFinished").isEmpty)
        #expect(StateOnlyOperation.keyPathsForValuesAffectingValue(forKey: "isFinished") == ["state"])
    }
}

// MARK: - The pool's ceiling (issue 9, defect 13)

/// With a ceiling of 8 workers, 16 operations that wait for each other
/// cannot all run: reaching the ceiling is reported on standard error.
func scenarioCeilingReachedIsReported() {
    OperationQueue.maximumWorkerThreads = 8
    let count = 16
    let queue = OperationQueue()
    let allStarted = Latch(count: count)
    for _ in 0..<count {
        queue.addOperation {
            allStarted.countDown()
            allStarted.wait(timeout: .seconds(2))
        }
    }
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 2))
}

@Suite("Issue 9 (new API): the pool's ceiling")
struct PoolCeilingTests {
    @Test("defect 13: reaching OperationQueue.maximumWorkerThreads is reported on standard error, not silent")
    func ceilingReported() async {
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
            scenarioCeilingReachedIsReported()
        }
        if let result {
            let text = String(decoding: result.standardErrorContent, as: UTF8.self)
            #expect(text.contains("maximumWorkerThreads") || text.contains("OPERATIONS_MAX_WORKER_THREADS"),
                    "no report naming the ceiling on standard error:\n\(text)")
        }
    }
}
