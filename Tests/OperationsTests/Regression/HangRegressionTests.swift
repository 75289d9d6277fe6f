// Regression tests for issue 9, defects 9–13: waits that can never end must
// be reported (`.waitDeadlock`) or must end; blocking must not stall the
// pool. Every wait is bounded inside an exit test's child: a hang records an
// issue and the child exits, taking its blocked threads with it.

import Dispatch
import Testing
@testable import Operations
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// MARK: - Defect 9: waits from observers

/// An `isExecuting` observer of a manually started operation waits for the
/// operation: it can never end, so it is reported, and start() returns.
func scenarioWaitForItselfFromExecutingObserver() {
    let misuses = installChildMisuseRecorder()
    let op = BlockOperation {}
    op.name = "executing-observer"
    let token = op.observe(\.isExecuting, options: [.new]) { op, change in
        if change.newValue == true { op.waitUntilFinished() }
    }
    expectReturns("start() with an isExecuting observer that waits for the operation") {
        op.start()
    }
    #expect(op.isFinished)
    #expect(misuses.events.map(\.code) == [.waitDeadlock], "\(describeMisuses(misuses.events))")
    #expect(misuses.events.first?.message.contains("\"executing-observer\"") == true)
    withExtendedLifetime(token) {}
}

/// A `.prior` observer of `isFinished` waits for the operation (it has not
/// finished yet, and cannot while the observer waits): reported.
func scenarioWaitForItselfFromPriorObserver() {
    let misuses = installChildMisuseRecorder()
    let op = BlockOperation {}
    op.name = "prior-observer"
    let token = op.observe(\.isFinished, options: [.prior]) { op, change in
        if change.isPrior { op.waitUntilFinished() }
    }
    expectReturns("start() with a .prior isFinished observer that waits for the operation") {
        op.start()
    }
    #expect(op.isFinished)
    #expect(misuses.events.map(\.code) == [.waitDeadlock], "\(describeMisuses(misuses.events))")
    withExtendedLifetime(token) {}
}

/// An `isFinished` observer (after the change) waits for the operation: it
/// has finished, so the wait returns at once, without a misuse.
func scenarioWaitForItselfFromFinishedObserver() {
    let misuses = installChildMisuseRecorder()
    let op = BlockOperation {}
    let waited = Counter()
    let token = op.observe(\.isFinished, options: [.new]) { op, change in
        guard change.newValue == true else { return }
        op.waitUntilFinished()
        waited.increment()
    }
    expectReturns("start() with an isFinished observer that waits for the operation") {
        op.start()
    }
    #expect(waited.count == 1)
    #expect(misuses.events.isEmpty, "\(describeMisuses(misuses.events))")
    withExtendedLifetime(token) {}
}

/// An `isFinished` observer of a queued operation waits for its queue: the
/// operation has left the queue, so the wait ends once the queue is empty.
func scenarioWaitForQueueFromFinishedObserver() {
    let misuses = installChildMisuseRecorder()
    let queue = OperationQueue()
    queue.name = "finished-observer-queue"
    let op = BlockOperation {}
    let waited = Gate()
    let token = op.observe(\.isFinished, options: [.new]) { _, change in
        guard change.newValue == true else { return }
        queue.waitUntilAllOperationsAreFinished()
        waited.open()
    }
    queue.addOperation(op)
    #expect(waited.wait(), "an isFinished observer waiting for its own queue hangs")
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    #expect(misuses.events.isEmpty, "\(describeMisuses(misuses.events))")
    withExtendedLifetime(token) {}
}

/// An `isExecuting` observer of a queued operation waits for its own queue,
/// which cannot drain while the operation has not finished: reported.
func scenarioWaitForQueueFromExecutingObserver() {
    let misuses = installChildMisuseRecorder()
    let queue = OperationQueue()
    queue.name = "executing-observer-queue"
    let op = BlockOperation {}
    let returned = Gate()
    let token = op.observe(\.isExecuting, options: [.new]) { _, change in
        guard change.newValue == true else { return }
        queue.waitUntilAllOperationsAreFinished()
        returned.open()
    }
    queue.addOperation(op)
    #expect(returned.wait(), "an isExecuting observer waiting for its own queue hangs")
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    #expect(misuses.events.map(\.code) == [.waitDeadlock], "\(describeMisuses(misuses.events))")
    #expect(misuses.events.first?.message.contains("\"executing-observer-queue\"") == true)
    withExtendedLifetime(token) {}
}

/// What a `.prior` `isExecuting` observer of a queued operation waits for.
enum PriorExecutingWait: String, Sendable {
    case itself, itsQueue, nextOnSerialQueue
}

/// A `.prior` `isExecuting` observer of an operation its queue starts waits
/// for the operation, its queue, or the next operation of a serial queue.
/// The observer runs on the thread that runs the body next, before the
/// body: the wait can never end (Darwin deadlocks). Probe 55: the wait was
/// never confirmed, and hung without a report; now it is reported (at once,
/// or after the confirmation delay for the next operation), and the queue
/// drains.
func scenarioPriorExecutingObserverWaits(_ kind: PriorExecutingWait) {
    let misuses = installChildMisuseRecorder()
    let queue = OperationQueue()
    queue.name = "prior-executing-\(kind.rawValue)"
    if kind == .nextOnSerialQueue { queue.maxConcurrentOperationCount = 1 }
    let op = BlockOperation {}
    let next = BlockOperation {}
    let returned = Gate()
    let token = op.observe(\.isExecuting, options: [.prior]) { op, change in
        guard change.isPrior, !returned.opened else { return }
        switch kind {
        case .itself: op.waitUntilFinished()
        case .itsQueue: queue.waitUntilAllOperationsAreFinished()
        case .nextOnSerialQueue: next.waitUntilFinished()
        }
        returned.open()
    }
    queue.addOperations([op, next], waitUntilFinished: false)
    #expect(returned.wait(), "a .prior isExecuting observer's wait hangs")
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    #expect(op.isFinished && next.isFinished)
    #expect(misuses.events.map(\.code) == [.waitDeadlock], "\(describeMisuses(misuses.events))")
    withExtendedLifetime(token) {}
}

/// The same observer of an operation started by hand: its body runs on the
/// calling thread once the observer returns (probe 57: only the queue's
/// start was covered, and this wait hung without a report).
func scenarioPriorExecutingObserverOfHandStartWaits() {
    let misuses = installChildMisuseRecorder()
    let op = BlockOperation {}
    op.name = "prior-executing-by-hand"
    let token = op.observe(\.isExecuting, options: [.prior]) { op, change in
        guard change.isPrior, !op.isExecuting, !op.isFinished else { return }
        op.waitUntilFinished()
    }
    expectReturns("start() with a .prior isExecuting observer that waits for the operation") {
        op.start()
    }
    #expect(op.isFinished)
    #expect(misuses.events.map(\.code) == [.waitDeadlock], "\(describeMisuses(misuses.events))")
    withExtendedLifetime(token) {}
}

/// A dependent's `isReady` observer, told inside its dependency's finish,
/// waits for their queue, which still holds the dependency: it leaves only
/// once the observer returns. Reported after the confirmation delay (probe
/// 57: it hung without a report; Foundation deadlocks).
func scenarioReadyObserverWaitsForQueueHoldingItsDependency() {
    let misuses = installChildMisuseRecorder()
    let queue = OperationQueue()
    queue.name = "ready-observer-waits-queue"
    let dependency = BlockOperation {}
    let dependent = BlockOperation {}
    dependent.addDependency(dependency)
    let returned = Gate()
    let token = dependent.observe(\.isReady, options: [.new]) { _, change in
        guard change.newValue == true, !returned.opened else { return }
        queue.waitUntilAllOperationsAreFinished()
        returned.open()
    }
    queue.addOperations([dependency, dependent], waitUntilFinished: false)
    #expect(returned.wait(), "an isReady observer waiting for the queue holding its dependency hangs")
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    #expect(misuses.events.map(\.code) == [.waitDeadlock], "\(describeMisuses(misuses.events))")
    withExtendedLifetime(token) {}
}

/// A timed wait whose timeout is too large for a deadline is an untimed
/// wait: a body waiting so for its own operation, or for its own queue, is
/// reported and returns false, rather than hanging without a word.
func scenarioHugeTimeoutSelfWaitIsReported() {
    let misuses = installChildMisuseRecorder()
    let queue = OperationQueue()
    let results = LockedValue<[Bool]>([])
    let own = BlockOperation {}
    own.name = "huge-timeout-self"
    own.addExecutionBlock { [unowned own] in
        results.withLock { $0.append(own.waitUntilFinished(timeout: .seconds(Int64.max / 2))) }
    }
    queue.addOperation(own)
    queue.addOperation {
        results.withLock { $0.append(queue.waitUntilAllOperationsAreFinished(timeout: .seconds(Int64.max / 2))) }
    }
    expectReturns("the queue drains") { queue.waitUntilAllOperationsAreFinished() }
    #expect(results.withLock { $0 } == [false, false])
    #expect(misuses.events.map(\.code) == [.waitDeadlock, .waitDeadlock], "\(describeMisuses(misuses.events))")
}

@Suite("Issue 9: waits from observers (defect 9)")
struct ObserverWaitRegressionTests {
    @Test("defect 9: waitUntilFinished() from an isExecuting observer is reported as .waitDeadlock, not a hang")
    func executingObserverWaitsForItself() async {
        await #expect(processExitsWith: .success) { scenarioWaitForItselfFromExecutingObserver() }
    }

    @Test("defect 9: waitUntilFinished() from a .prior isFinished observer is reported as .waitDeadlock, not a hang")
    func priorObserverWaitsForItself() async {
        await #expect(processExitsWith: .success) { scenarioWaitForItselfFromPriorObserver() }
    }

    @Test("defect 9: waitUntilFinished() from an isFinished observer returns at once")
    func finishedObserverWaitsForItself() async {
        await #expect(processExitsWith: .success) { scenarioWaitForItselfFromFinishedObserver() }
    }

    @Test("defect 9: waiting for the queue from an isFinished observer ends (the operation has left the queue)")
    func finishedObserverWaitsForQueue() async {
        await #expect(processExitsWith: .success) { scenarioWaitForQueueFromFinishedObserver() }
    }

    @Test("defect 9: waiting for the queue from an isExecuting observer is reported as .waitDeadlock, not a hang")
    func executingObserverWaitsForQueue() async {
        await #expect(processExitsWith: .success) { scenarioWaitForQueueFromExecutingObserver() }
    }

    @Test("a .prior isExecuting observer of a queued operation waiting for it is reported as .waitDeadlock, not a hang")
    func priorExecutingObserverWaitsForItself() async {
        await #expect(processExitsWith: .success) { scenarioPriorExecutingObserverWaits(.itself) }
    }

    @Test("a .prior isExecuting observer of a queued operation waiting for its queue is reported as .waitDeadlock, not a hang")
    func priorExecutingObserverWaitsForQueue() async {
        await #expect(processExitsWith: .success) { scenarioPriorExecutingObserverWaits(.itsQueue) }
    }

    @Test("an isReady observer waiting for the queue that still holds the dependency it was told of is reported as .waitDeadlock, not a hang")
    func readyObserverWaitsForQueueHoldingItsDependency() async {
        await #expect(processExitsWith: .success) { scenarioReadyObserverWaitsForQueueHoldingItsDependency() }
    }

    @Test("a .prior isExecuting observer of an operation started by hand waiting for it is reported as .waitDeadlock, not a hang")
    func priorExecutingObserverOfHandStartWaits() async {
        await #expect(processExitsWith: .success) { scenarioPriorExecutingObserverOfHandStartWaits() }
    }

    @Test("a .prior isExecuting observer waiting for the next operation of its serial queue is reported as .waitDeadlock, not a hang")
    func priorExecutingObserverWaitsForNext() async {
        await #expect(processExitsWith: .success) { scenarioPriorExecutingObserverWaits(.nextOnSerialQueue) }
    }

    @Test("a timeout too large for a deadline waits, and is checked, like an untimed wait: a self-wait is reported and returns false")
    func hugeTimeoutSelfWait() async {
        await #expect(processExitsWith: .success) { scenarioHugeTimeoutSelfWaitIsReported() }
    }
}

// MARK: - Defect 10: no user code under a library lock

/// Holds an operation and reads it when released: a completion block that
/// captures it runs this `deinit` wherever the library releases the block.
private final class ReadsOperationWhenReleased: @unchecked Sendable {
    // @unchecked Sendable: both fields are immutable.
    let operation: Operation
    let released: Gate

    init(_ operation: Operation, released: Gate) {
        self.operation = operation
        self.released = released
    }

    deinit {
        _ = operation.name
        _ = operation.dependencies
        released.open()
    }
}

/// Replacing a completion block releases the old one: its captures' deinit
/// is user code and must not run under the operation's lock.
func scenarioCompletionBlockReleasedOutsideLock() {
    let op = BlockOperation {}
    op.name = "replaced-completion"
    let released = Gate()
    do {
        let probe = ReadsOperationWhenReleased(op, released: released)
        op.completionBlock = { withExtendedLifetime(probe) {} }
    }
    expectReturns("replacing a completion block whose capture reads the operation in its deinit") {
        op.completionBlock = nil
    }
    #expect(released.opened)
}

/// A queue whose `name` override reads an operation: the library reads the
/// (open) name for misuse messages and must not hold an operation's lock then.
private final class NameReadingQueue: OperationQueue, @unchecked Sendable {
    // @unchecked Sendable: `probe` is a locked box.
    let probe = Box<Operation?>(nil)

    override var name: String? {
        get {
            if let operation = probe.value { return "queue holding \(operation.name ?? "?")" }
            return super.name
        }
        set { super.name = newValue }
    }
}

func scenarioQueueNameReadOutsideOperationLock() {
    let misuses = installChildMisuseRecorder()
    let queue = NameReadingQueue()
    queue.isSuspended = true
    let op = BlockOperation {}
    op.name = "owned"
    queue.addOperation(op)
    queue.probe.value = op
    expectReturns("a misuse report naming a queue whose name override reads the operation") {
        op.start()
    }
    #expect(misuses.events.map(\.code) == [.startOwnedByQueue], "\(describeMisuses(misuses.events))")
    queue.probe.value = nil
    queue.isSuspended = false
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
}

@Suite("Issue 9: no user code under a library lock (defect 10)")
struct UserCodeUnderLockRegressionTests {
    @Test("defect 10: the completion block being replaced is released outside the operation's lock")
    func completionBlockReleasedOutsideLock() async {
        await #expect(processExitsWith: .success) { scenarioCompletionBlockReleasedOutsideLock() }
    }

    @Test("defect 10: an overridden OperationQueue.name is not read under an operation's lock")
    func queueNameReadOutsideOperationLock() async {
        await #expect(processExitsWith: .success) { scenarioQueueNameReadOutsideOperationLock() }
    }
}

// MARK: - Defect 11: adds and async waits from inside a queue

/// A completion block adds to its own full queue: never held back.
func scenarioCompletionBlockAddsToFullQueue() {
    let queue = OperationQueue()
    queue.name = "full-completion"
    queue.setPendingLimit(1)
    let second = BlockOperation {}
    let first = BlockOperation {}
    first.completionBlock = { queue.addOperation(second) }
    queue.addOperation(first)
    #expect(second.waitUntilFinished(timeout: patience), "the completion block's add to its own full queue hangs")
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
}

/// An async body awaits `addOperation` on its own full queue.
func scenarioAsyncBodyAddsToFullQueue() {
    let queue = OperationQueue()
    queue.name = "full-async-add"
    queue.maxConcurrentOperationCount = 1
    queue.setPendingLimit(1)
    let inner = BlockOperation {}
    let outer = ResultOperation { () async -> Bool in
        await queue.addOperationWhenRoom(inner)
        return true
    }
    queue.addOperation(outer)
    #expect(outer.waitUntilFinished(timeout: patience), "an async body awaiting addOperation on its own full queue hangs")
    #expect(inner.waitUntilFinished(timeout: patience))
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
}

/// An async body awaits `queue.run` on its own full (concurrent) queue: the
/// add is not held back and the run returns its value.
func scenarioAsyncBodyRunsOnFullQueue() {
    let queue = OperationQueue()
    queue.name = "full-async-run"
    queue.setPendingLimit(1)
    let outer = ResultOperation { () async throws -> Int in
        try await queue.run { () async -> Int in 7 }
    }
    queue.addOperation(outer)
    #expect(outer.waitUntilFinished(timeout: patience), "an async body awaiting queue.run on its own full queue hangs")
    #expect(outer.result.flatMap { try? $0.get() } == 7)
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
}

/// An async body awaits `queue.run` on its own serial queue: the run can only
/// start after the body returns, so the wait is reported.
func scenarioAsyncBodyRunsOnOwnSerialQueue() {
    let misuses = installChildMisuseRecorder()
    let queue = OperationQueue()
    queue.name = "serial-async-run"
    queue.maxConcurrentOperationCount = 1
    let outer = ResultOperation { () async -> Bool in
        _ = try? await queue.run { () async -> Int in 7 }
        return true
    }
    outer.name = "serial-outer"
    queue.addOperation(outer)
    #expect(outer.waitUntilFinished(timeout: patience), "an async body awaiting queue.run on its own serial queue hangs")
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    #expect(misuses.events.map(\.code) == [.waitDeadlock], "\(describeMisuses(misuses.events))")
}

@Suite("Issue 9: adds and async waits from inside a queue (defect 11)")
struct InsideQueueRegressionTests {
    @Test("defect 11: a completion block adding to its own queue under setPendingLimit(1) is not held back")
    func completionBlockAddsToFullQueue() async {
        await #expect(processExitsWith: .success) { scenarioCompletionBlockAddsToFullQueue() }
    }

    @Test("defect 11: an async body awaiting addOperation on its own full serial queue is not held back")
    func asyncBodyAddsToFullQueue() async {
        await #expect(processExitsWith: .success) { scenarioAsyncBodyAddsToFullQueue() }
    }

    @Test("defect 11: an async body awaiting queue.run on its own full queue gets the value")
    func asyncBodyRunsOnFullQueue() async {
        await #expect(processExitsWith: .success) { scenarioAsyncBodyRunsOnFullQueue() }
    }

    @Test("defect 11: an async body awaiting queue.run on its own serial queue is reported as .waitDeadlock")
    func asyncBodyRunsOnOwnSerialQueue() async {
        await #expect(processExitsWith: .success) { scenarioAsyncBodyRunsOnOwnSerialQueue() }
    }
}

// MARK: - Defect 12: wait cycles through other threads

/// X on serial Q1 waits for Y on Q2; Y waits for Z, queued behind X on Q1.
func scenarioWaitCycleAcrossQueues() {
    let misuses = installChildMisuseRecorder()
    let q1 = OperationQueue()
    q1.name = "cycle-q1"
    q1.maxConcurrentOperationCount = 1
    let q2 = OperationQueue()
    q2.name = "cycle-q2"
    let yStarted = Gate()
    let z = BlockOperation {}
    z.name = "Z"
    let y = BlockOperation {
        yStarted.open()
        z.waitUntilFinished()
    }
    y.name = "Y"
    let x = BlockOperation {
        yStarted.wait()
        y.waitUntilFinished()
    }
    x.name = "X"
    q1.addOperations([x, z], waitUntilFinished: false)
    q2.addOperation(y)
    #expect(q1.waitUntilAllOperationsAreFinished(timeout: patience), "the wait cycle X → Y → Z (behind X) hangs")
    #expect(q2.waitUntilAllOperationsAreFinished(timeout: patience))
    #expect(!misuses.events.isEmpty && misuses.events.allSatisfy { $0.code == .waitDeadlock }, "\(describeMisuses(misuses.events))")
}

/// X (on Q1) waits for Q2 to drain while Q2 holds D, a dependent of X.
func scenarioWaitForQueueHoldingDependent() {
    let misuses = installChildMisuseRecorder()
    let q1 = OperationQueue()
    q1.name = "holder-q1"
    let q2 = OperationQueue()
    q2.name = "holder-q2"
    let x = BlockOperation { q2.waitUntilAllOperationsAreFinished() }
    x.name = "X"
    let d = BlockOperation {}
    d.name = "D"
    d.addDependency(x)
    q2.addOperation(d)
    q1.addOperation(x)
    #expect(q1.waitUntilAllOperationsAreFinished(timeout: patience), "X waiting for a queue that holds its dependent hangs")
    #expect(q2.waitUntilAllOperationsAreFinished(timeout: patience))
    #expect(misuses.events.map(\.code) == [.waitDeadlock], "\(describeMisuses(misuses.events))")
}

/// Two operations fill a width-2 queue and each waits for a third operation
/// of that queue, which can never get a slot.
func scenarioTwoWaitersFillWidthTwoQueue() {
    let misuses = installChildMisuseRecorder()
    let queue = OperationQueue()
    queue.name = "width-two"
    queue.maxConcurrentOperationCount = 2
    let bothStarted = Latch(count: 2)
    let third = BlockOperation {}
    third.name = "third"
    let waiters = (0..<2).map { index -> BlockOperation in
        let op = BlockOperation {
            bothStarted.countDown()
            bothStarted.wait()
            third.waitUntilFinished()
        }
        op.name = "waiter-\(index)"
        return op
    }
    queue.addOperations(waiters + [third], waitUntilFinished: false)
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience), "two waiters filling a width-2 queue hang")
    #expect(!misuses.events.isEmpty && misuses.events.allSatisfy { $0.code == .waitDeadlock }, "\(describeMisuses(misuses.events))")
}

@Suite("Issue 9: wait cycles through other threads (defect 12)")
struct WaitCycleRegressionTests {
    @Test("defect 12: X on serial Q1 waits for Y on Q2, which waits for Z queued behind X: reported")
    func waitCycleAcrossQueues() async {
        await #expect(processExitsWith: .success) { scenarioWaitCycleAcrossQueues() }
    }

    @Test("defect 12: X waits for a queue that holds a dependent of X: reported")
    func waitForQueueHoldingDependent() async {
        await #expect(processExitsWith: .success) { scenarioWaitForQueueHoldingDependent() }
    }

    @Test("defect 12: two waiters filling a width-2 queue, each waiting for a third operation of it: reported")
    func twoWaitersFillWidthTwoQueue() async {
        await #expect(processExitsWith: .success) { scenarioTwoWaitersFillWidthTwoQueue() }
    }
}

// MARK: - Defect 13: the pool grows while work is blocked

/// 65 operations on one queue each wait (plain semaphore waits, bounded)
/// until all 65 have started.
func scenarioSixtyFiveMutualWaiters() {
    let count = 65
    let queue = OperationQueue()
    queue.name = "sixty-five"
    let allStarted = Latch(count: count)
    let met = Counter()
    for _ in 0..<count {
        queue.addOperation {
            allStarted.countDown()
            if allStarted.wait(timeout: patience) { met.increment() }
        }
    }
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 3), "the queue did not drain")
    #expect(met.count == count, "only \(met.count) of \(count) mutually waiting operations saw all \(count) started within \(patience) (\(count - allStarted.count) started in the end)")
}

/// A chain of 100 nested waits on one queue: operation i waits for i + 1.
func scenarioHundredNestedWaits() {
    let depth = 100
    let queue = OperationQueue()
    queue.name = "nested-waits"
    let finished = Counter()
    var ops: [BlockOperation] = []
    var next: BlockOperation?
    for _ in 0..<depth {
        let target = next
        let op = BlockOperation {
            target?.waitUntilFinished()
            finished.increment()
        }
        ops.append(op)
        next = op
    }
    // Outermost waiter first: it is added (and started) first.
    queue.addOperations(ops.reversed(), waitUntilFinished: false)
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 3), "nested waits deeper than 64 hang")
    #expect(finished.count == depth)
}

@Suite("Issue 9: blocking cannot stall the process (defect 13)")
struct PoolGrowthRegressionTests {
    @Test("defect 13: 65 operations that each wait for all the others all run")
    func sixtyFiveMutualWaiters() async {
        await #expect(processExitsWith: .success) { scenarioSixtyFiveMutualWaiters() }
    }

    @Test("defect 13: 100 nested waits on one queue all end")
    func hundredNestedWaits() async {
        await #expect(processExitsWith: .success) { scenarioHundredNestedWaits() }
    }
}
