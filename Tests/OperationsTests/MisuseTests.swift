// Misuse detected on the calling thread, one test per case: the misuse is
// reported with a message naming the operation or queue, the call is
// refused without a state change, and unrelated work keeps running.

import Dispatch
import Synchronization
import Testing
@testable import Operations

private final class LateBlockMarker: Sendable {}

@Suite("Misuse on the calling thread")
struct MisuseTests {
    // MARK: start()

    @Test("start() on an operation that is not ready")
    func startNotReady() {
        let ran = Counter()
        let dependency = namedOperation("dependency")
        let op = namedOperation("not-ready") { ran.increment() }
        op.addDependency(dependency)
        let reported = misuses { op.start() }
        expectSingle(reported, .startNotReady, naming: "\"not-ready\"")
        #expect(reported.first?.message.contains("\"dependency\"") == true, "the message should name the unfinished dependency")
        #expect(!op.isExecuting && !op.isFinished && ran.count == 0)
        dependency.start()
        op.start()
        #expect(op.isFinished && ran.count == 1)
        unrelatedWorkStillRuns()
    }

    @Test("start() twice: after it finished")
    func startAfterFinished() {
        let ran = Counter()
        let op = namedOperation("twice") { ran.increment() }
        op.start()
        let reported = misuses { op.start() }
        expectSingle(reported, .startAfterFinished, naming: "\"twice\"")
        #expect(ran.count == 1 && op.isFinished)
        unrelatedWorkStillRuns()
    }

    @Test("start() on a cancelled, finished operation")
    func startAfterCancelledFinish() {
        let op = namedOperation("cancelled-twice")
        op.cancel()
        op.start()
        let reported = misuses { op.start() }
        expectSingle(reported, .startAfterFinished, naming: "\"cancelled-twice\"")
        unrelatedWorkStillRuns()
    }

    @Test("start() while executing (from inside main)")
    func startWhileExecuting() {
        let ran = Counter()
        let op = BlockOperation()
        op.name = "reentrant"
        op.addExecutionBlock { [unowned op] in
            ran.increment()
            op.start()
        }
        let reported = misuses { op.start() }
        expectSingle(reported, .startWhileExecuting, naming: "\"reentrant\"")
        #expect(ran.count == 1)
        #expect(op.isFinished && !op.isExecuting)
        unrelatedWorkStillRuns()
    }

    @Test("start() by hand on an operation a queue owns")
    func startOwnedByQueue() {
        let ran = Counter()
        let queue = makeQueue("owner")
        queue.isSuspended = true
        let op = namedOperation("queued") { ran.increment() }
        queue.addOperation(op)
        let reported = misuses { op.start() }
        expectSingle(reported, .startOwnedByQueue, naming: "\"queued\"")
        #expect(reported.first?.message.contains("\"owner\"") == true)
        #expect(ran.count == 0 && !op.isExecuting && !op.isFinished)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(ran.count == 1)
        unrelatedWorkStillRuns()
    }

    // MARK: Properties after start

    @Test("completion block set after the operation finished: reported, refused, released at once")
    func completionBlockAfterFinish() {
        let op = namedOperation("late-completion")
        op.start()
        let calls = Counter()
        let tracker = LifetimeTracker()
        let reported = misuses {
            let marker = tracker.track(LateBlockMarker(), "captured by the late block")
            op.completionBlock = { _ = marker; calls.increment() }
        }
        expectSingle(reported, .completionBlockAfterStart, naming: "\"late-completion\"")
        #expect(reported.first?.message.contains("after it finished") == true)
        #expect(op.completionBlock == nil)
        #expect(calls.count == 0)
        #expect(tracker.waitForRelease().isEmpty, "the refused block is released at once")
        #expect(misuses { op.completionBlock = nil }.isEmpty, "clearing the block is not a misuse")
        unrelatedWorkStillRuns()
    }

    @Test("completion block set while the operation is executing: reported, refused, the earlier block runs")
    func completionBlockWhileExecuting() {
        let op = BlockOperation()
        op.name = "executing-completion"
        let first = Counter()
        let late = Counter()
        op.completionBlock = { first.increment() }
        op.addExecutionBlock { [unowned op] in
            op.completionBlock = { late.increment() }
        }
        let reported = misuses { op.start() }
        expectSingle(reported, .completionBlockAfterStart, naming: "\"executing-completion\"")
        #expect(reported.first?.message.contains("while it is executing") == true)
        #expect(waitUntil { first.count == 1 })
        #expect(late.count == 0)
        #expect(op.completionBlock == nil, "released once it has run")
        unrelatedWorkStillRuns()
    }

    @Test("completion block set while a queue runs an operation that overrides start(): reported, refused")
    func completionBlockWhileCustomStartExecutes() {
        let queue = makeQueue("custom-start-completion")
        let op = ManualConcurrentOperation()
        op.name = "custom-start"
        let first = Counter()
        let late = Counter()
        op.completionBlock = { first.increment() }
        queue.addOperation(op)
        #expect(op.started.wait())
        let reported = misuses { op.completionBlock = { late.increment() } }
        expectSingle(reported, .completionBlockAfterStart, naming: "\"custom-start\"")
        op.finish()
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(waitUntil { first.count == 1 })
        #expect(late.count == 0)
    }

    @Test("completion block set before the start, or cleared after it: not a misuse")
    func completionBlockBeforeStart() {
        let queue = makeQueue("early-completion-queue")
        queue.isSuspended = true
        let calls = Counter()
        let op = BlockOperation {}
        let reported = misuses {
            op.completionBlock = { Issue.record("replaced block ran") }
            queue.addOperation(op)
            op.completionBlock = { calls.increment() }
            queue.isSuspended = false
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            op.completionBlock = nil
        }
        #expect(reported.isEmpty, "\(describeMisuses(reported))")
        #expect(waitUntil { calls.count == 1 })
    }

    @Test("with no handler, a late completion block does not trap: reported to observers, kept as on Darwin")
    func completionBlockTolerated() async {
        await #expect(processExitsWith: .success) { scenarioLateCompletionBlockWithoutHandler() }
    }

    @Test("result of a cancelled invocation")
    func cancelledInvocationResult() {
        let op = InvocationOperation { 42 }
        op.name = "cancelled-invocation"
        op.cancel()
        op.start()
        let (value, reported) = recordingMisuse { op.result }
        expectSingle(reported, .cancelledInvocationResult, naming: "\"cancelled-invocation\"")
        #expect(value == nil)
        unrelatedWorkStillRuns()
    }

    @Test("addExecutionBlock after the operation started")
    func executionBlockAfterStart() {
        let op = namedOperation("late-block")
        op.start()
        let ran = Counter()
        let reported = misuses { op.addExecutionBlock { ran.increment() } }
        expectSingle(reported, .executionBlockAfterStart, naming: "\"late-block\"")
        #expect(op.executionBlocks.isEmpty)
        #expect(ran.count == 0)
        unrelatedWorkStillRuns()
    }

    @Test("finish() on an async operation that never started")
    func finishBeforeStart() {
        let ran = Counter()
        let op = AsyncOperation { operation in
            ran.increment()
            operation.finish()
        }
        op.name = "early-finish"
        let reported = misuses { op.finish() }
        expectSingle(reported, .finishBeforeStart, naming: "\"early-finish\"")
        #expect(!op.isFinished)
        op.start()
        #expect(op.isFinished && ran.count == 1)
        unrelatedWorkStillRuns()
    }

    // MARK: Adding to queues

    @Test("adding an operation to two queues")
    func addToTwoQueues() {
        let ran = Counter()
        let first = makeQueue("first-owner")
        let second = makeQueue("second-owner")
        first.isSuspended = true
        let op = namedOperation("shared") { ran.increment() }
        first.addOperation(op)
        let reported = misuses { second.addOperation(op) }
        expectSingle(reported, .alreadyInQueue, naming: "\"shared\"")
        #expect(reported.first?.message.contains("\"first-owner\"") == true)
        #expect(second.operationCount == 0)
        first.isSuspended = false
        #expect(first.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(ran.count == 1)
        unrelatedWorkStillRuns()
    }

    @Test("adding an operation to the same queue twice")
    func addTwice() {
        let ran = Counter()
        let queue = makeQueue("twice")
        queue.isSuspended = true
        let op = namedOperation("added-twice") { ran.increment() }
        queue.addOperation(op)
        let reported = misuses { queue.addOperation(op) }
        expectSingle(reported, .alreadyInQueue, naming: "\"added-twice\"")
        #expect(queue.operationCount == 1)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(ran.count == 1)
        expectQueueInvariants(queue)
        unrelatedWorkStillRuns()
    }

    @Test("adding a finished operation")
    func addAfterFinished() {
        let ran = Counter()
        let op = namedOperation("finished") { ran.increment() }
        op.start()
        let queue = makeQueue("after-finish")
        let reported = misuses { queue.addOperation(op) }
        expectSingle(reported, .addedAfterStart, naming: "\"finished\"")
        #expect(queue.operationCount == 0)
        #expect(ran.count == 1)
        unrelatedWorkStillRuns()
    }

    @Test("adding an operation that finished in another queue is refused because it finished (regression)")
    func addAfterFinishedInAnotherQueue() {
        let ran = Counter()
        let first = makeQueue("ran-here")
        let op = namedOperation("finished-elsewhere") { ran.increment() }
        first.addOperation(op)
        #expect(first.waitUntilAllOperationsAreFinished(timeout: patience))
        let second = makeQueue("second-home")
        let reported = misuses { second.addOperation(op) }
        expectSingle(reported, .addedAfterStart, naming: "\"finished-elsewhere\"")
        #expect(reported.first?.message.contains("after it finished") == true)
        #expect(second.operationCount == 0)
        #expect(ran.count == 1)
        unrelatedWorkStillRuns()
    }

    @Test("adding an executing operation")
    func addWhileExecuting() {
        let queue = makeQueue("while-executing")
        let op = BlockOperation()
        op.name = "running"
        op.addExecutionBlock { queue.addOperation(op) }
        let reported = misuses { op.start() }
        expectSingle(reported, .addedAfterStart, naming: "\"running\"")
        #expect(queue.operationCount == 0)
        unrelatedWorkStillRuns()
    }

    @Test("the same operation twice in one addOperations call: the others are still added")
    func duplicateInBatch() {
        let log = Recorder<String>()
        let a = namedOperation("a") { log.record("a") }
        let b = namedOperation("b") { log.record("b") }
        let c = namedOperation("c") { log.record("c") }
        let queue = makeQueue("batch", width: 1)
        queue.isSuspended = true
        let reported = misuses { queue.addOperations([a, b, a, c], waitUntilFinished: false) }
        expectSingle(reported, .duplicateInBatch, naming: "\"a\"")
        #expect(queue.operations == [a, b, c])
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["a", "b", "c"])
        unrelatedWorkStillRuns()
    }

    @Test("addOperations with a duplicate and waitUntilFinished still waits for the accepted ones")
    func duplicateInBatchWaits() {
        let log = Recorder<String>()
        let a = namedOperation("wait-a") { log.record("a") }
        let b = namedOperation("wait-b") { log.record("b") }
        let queue = makeQueue("batch-wait")
        let reported = misuses { queue.addOperations([a, a, b], waitUntilFinished: true) }
        expectSingle(reported, .duplicateInBatch, naming: "\"wait-a\"")
        #expect(a.isFinished && b.isFinished)
        #expect(log.events.sorted() == ["a", "b"])
    }

    @Test("addOperations with another queue's operation is refused as a whole: it returns at once and adds nothing")
    func refusedBatchAddsNothing() {
        let otherGate = Gate()
        let otherQueue = makeQueue("elsewhere")
        let other = namedOperation("other") { otherGate.wait() }
        otherQueue.addOperation(other)
        let ran = Counter()
        let a = namedOperation("batch-a") { ran.increment() }
        let b = namedOperation("batch-b") { ran.increment() }
        let queue = makeQueue("batch-refused")
        // Returns without waiting: `other` is blocked until after the call.
        let reported = misuses { queue.addOperations([a, other, a, b], waitUntilFinished: true) }
        #expect(reported.map(\.code).sorted { "\($0)" < "\($1)" } == [OperationMisuse.Code.alreadyInQueue, .duplicateInBatch].sorted { "\($0)" < "\($1)" })
        #expect(queue.operationCount == 0)
        #expect(!a.isFinished && !b.isFinished && !a.isCancelled)
        otherGate.open()
        #expect(otherQueue.waitUntilAllOperationsAreFinished(timeout: patience))
        // Untouched: they can be added once the batch is put right.
        queue.addOperations([a, b], waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(ran.count == 2)
        unrelatedWorkStillRuns()
    }

    @Test("addOperations with a finished operation is refused as a whole, as Foundation raises before adding any (probe 46)")
    func batchWithFinishedAddsNothing() {
        let finished = namedOperation("already-finished")
        finished.start()
        let ran = Counter()
        let fresh = namedOperation("fresh") { ran.increment() }
        let queue = makeQueue("batch-finished")
        let reported = misuses { queue.addOperations([fresh, finished], waitUntilFinished: true) }
        expectSingle(reported, .addedAfterStart, naming: "\"already-finished\"")
        #expect(ran.count == 0)
        #expect(!fresh.isFinished)
        #expect(queue.operationCount == 0)
        queue.addOperations([fresh], waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(ran.count == 1)
    }

    @Test("a batch with an operation whose class reports it executing is refused as a whole")
    func batchWithReportedExecutingAddsNothing() {
        final class Running: Operation, @unchecked Sendable {
            override var isExecuting: Bool { true }
        }
        let running = Running()
        running.name = "reports-executing"
        let ran = Counter()
        let fresh = namedOperation("fresh-2") { ran.increment() }
        let queue = makeQueue("batch-executing")
        queue.isSuspended = true
        let reported = misuses { queue.addOperations([fresh, running], waitUntilFinished: false) }
        expectSingle(reported, .addedAfterStart, naming: "\"reports-executing\"")
        #expect(queue.operationCount == 0)
        queue.isSuspended = false
        #expect(ran.count == 0)
    }

    // MARK: Queue configuration

    @Test("maxConcurrentOperationCount = -2")
    func invalidWidth() {
        let queue = makeQueue("bad-width", width: 3)
        let reported = misuses { queue.maxConcurrentOperationCount = -2 }
        expectSingle(reported, .invalidMaxConcurrentOperationCount, naming: "\"bad-width\"")
        #expect(queue.maxConcurrentOperationCount == 3)
        queue.addOperation {}
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        unrelatedWorkStillRuns()
    }

    @Test("threadPriority = 1.5")
    func invalidThreadPriority() {
        let op = namedOperation("bad-priority")
        let reported = misuses { op.threadPriority = 1.5 }
        expectSingle(reported, .invalidThreadPriority, naming: "\"bad-priority\"")
        #expect(op.threadPriority == 0.5)
        op.start()
        #expect(op.isFinished)
        unrelatedWorkStillRuns()
    }

    @Test("underlyingQueue changed while the queue holds operations")
    func underlyingQueueWhileBusy() {
        let queue = makeQueue("busy-underlying")
        queue.isSuspended = true
        queue.addOperation {}
        let reported = misuses { queue.underlyingQueue = DispatchQueue(label: "late") }
        expectSingle(reported, .underlyingQueueWhileBusy, naming: "\"busy-underlying\"")
        #expect(queue.underlyingQueue == nil)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        unrelatedWorkStillRuns()
    }

    @Test("an operation added while underlyingQueue is being set (after its check) makes the change a misuse")
    func underlyingQueueRacingAnAdd() {
        let queue = makeQueue("racing-underlying")
        queue.isSuspended = true
        // The observer of the will-change runs after the setter's first
        // look found the queue empty, and adds an operation: the change must
        // not land on a queue that holds one (probe 27).
        let token = queue.observe(key: "underlyingQueue", options: [.prior]) { queue, change in
            if change.isPrior { queue.addOperation {} }
        }
        let reported = misuses { queue.underlyingQueue = DispatchQueue(label: "late") }
        expectSingle(reported, .underlyingQueueWhileBusy, naming: "\"racing-underlying\"")
        #expect(queue.underlyingQueue == nil)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        withExtendedLifetime(token) {}
    }

    @Test("a pending limit below 1")
    func invalidPendingLimit() {
        let queue = makeQueue("bad-limit")
        let reported = misuses { queue.setPendingLimit(0) }
        expectSingle(reported, .invalidPendingLimit, naming: "\"bad-limit\"")
        #expect(queue.pendingLimit == nil)
        unrelatedWorkStillRuns()
    }

    // MARK: Waits on the calling thread

    @Test("waiting for itself from inside its own main (started by hand)")
    func waitForItself() {
        let after = Counter()
        let op = BlockOperation()
        op.name = "self-waiter"
        op.addExecutionBlock { [unowned op] in
            op.waitUntilFinished()
            after.increment()
        }
        let (returned, reported) = recordingMisuse {
            op.start()
            return op.isFinished
        }
        expectSingle(reported, .waitDeadlock, naming: "\"self-waiter\"")
        #expect(returned && after.count == 1)
        unrelatedWorkStillRuns()
    }

    @Test("waiting, inside a manually started operation, for an operation that depends on it")
    func waitForDependentManually() {
        let dependent = namedOperation("dependent-of-waiter")
        let op = BlockOperation()
        op.name = "manual-waiter"
        dependent.addDependency(op)
        op.addExecutionBlock { dependent.waitUntilFinished() }
        let reported = misuses { op.start() }
        expectSingle(reported, .waitDeadlock, naming: "\"dependent-of-waiter\"")
        #expect(reported.first?.message.contains("\"manual-waiter\"") == true)
        #expect(op.isFinished && dependent.isReady)
        dependent.start()
        #expect(dependent.isFinished)
        unrelatedWorkStillRuns()
    }
}

/// Exit-test body: no misuse handler anywhere in the child, so a trap would
/// fail the test. A block set from the body runs once; one set from the
/// completion block never runs; both are reported to observers.
private func scenarioLateCompletionBlockWithoutHandler() {
    let reports = ReportCollector(mentioning: "tolerated-late-completion")
    defer { reports.cancel() }
    let queue = makeQueue("tolerated-late-completion-queue")
    let op = BlockOperation()
    op.name = "tolerated-late-completion"
    let first = Counter()
    let second = Counter()
    op.addExecutionBlock { [unowned op] in
        op.completionBlock = { [unowned op] in
            first.increment()
            op.completionBlock = { second.increment() }
        }
    }
    queue.addOperation(op)
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    #expect(op.waitUntilFinished(timeout: patience))
    // The completion block (which sets the second) runs asynchronously.
    #expect(waitUntil { first.count == 1 && reports.all.count == 2 })
    #expect(second.count == 0)
    #expect(op.completionBlock == nil)
    let codes = reports.all.map(\.kind)
    #expect(codes == [.misuse(.completionBlockAfterStart), .misuse(.completionBlockAfterStart)], "\(reports.all.map(\.message))")
    #expect(reports.all.first?.message.contains("while it is executing") == true)
    #expect(reports.all.last?.message.contains("after it finished") == true)
}
