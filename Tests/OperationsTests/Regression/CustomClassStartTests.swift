// Classes with their own `start()` or their own cancelled flag, on paths
// where the library starts or refuses them (probe 25): a `super.start()`
// made after the queue's call returned, and operations refused for lack of
// room under a pending limit.

import Dispatch
import Synchronization
import Testing
@testable import Operations

/// Re-dispatches its own start onto `target`, the queue's underlying
/// dispatch queue: the base start comes only after the queue's call to
/// `start()` has returned.
private final class RedispatchingOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `target` is immutable; `ran` is Sendable.
    let target: DispatchQueue
    let ran = Counter()

    init(target: DispatchQueue) {
        self.target = target
        super.init()
    }

    override func start() {
        target.async { super.start() }
    }

    override func main() { ran.increment() }
}

/// Keeps its own cancelled flag: `cancel()` does not call `super.cancel()`.
private final class OwnCancelFlagOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `flag` is atomic; `ran` is Sendable.
    private let flag = Atomic<Bool>(false)
    let ran = Counter()

    override var isCancelled: Bool { flag.load(ordering: .acquiring) }

    override func cancel() {
        willChangeValue(forKey: "isCancelled")
        flag.store(true, ordering: .releasing)
        didChangeValue(forKey: "isCancelled")
    }

    override func main() { ran.increment() }
}

/// Hands itself to `refuge` when cancelled.
private final class FleeingOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `refuge` is immutable; `ran` is Sendable.
    let refuge: OperationQueue
    let ran = Counter()

    init(refuge: OperationQueue) {
        self.refuge = refuge
        super.init()
    }

    override func cancel() {
        super.cancel()
        refuge.addOperation(self)
    }

    override func main() { ran.increment() }
}

/// Starts its base start on another thread, and, while that one runs
/// `main()`, calls `super.start()` a second time itself.
private final class DoubleStartingOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: the gates and `ran` are Sendable.
    let entered = Gate()
    let release = Gate()
    let ran = Counter()

    override func start() {
        spawnThread { super.start() }
        _ = entered.wait()
        super.start()
        release.open()
    }

    override func main() {
        ran.increment()
        entered.open()
        _ = release.wait()
    }
}

/// A queue full under `.reject`: suspended, holding one operation.
private func fullRejectingQueue(_ name: String) -> OperationQueue {
    let queue = makeQueue(name)
    queue.isSuspended = true
    queue.setPendingLimit(1, policy: .reject)
    queue.addOperation(BlockOperation {})
    return queue
}

func scenarioSuperStartAfterQueueCallReturned() {
    let misuses = installChildMisuseRecorder()
    let underlying = DispatchQueue(label: "redispatch")
    let queue = makeQueue("redispatch")
    queue.underlyingQueue = underlying
    let operations = (0..<10).map { index -> RedispatchingOperation in
        let operation = RedispatchingOperation(target: underlying)
        operation.name = "redispatched-\(index)"
        return operation
    }
    queue.addOperations(operations, waitUntilFinished: false)
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience), "the re-dispatched operations never finish")
    #expect(misuses.events.isEmpty, "\(describeMisuses(misuses.events))")
    #expect(operations.allSatisfy { $0.isFinished && $0.ran.count == 1 })
}

func scenarioSecondSuperStartWhileExecuting() {
    let misuses = installChildMisuseRecorder()
    let queue = makeQueue("double-start")
    let operation = DoubleStartingOperation()
    operation.name = "double-start"
    queue.addOperation(operation)
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    #expect(misuses.events.map(\.code) == [.startWhileExecuting], "\(describeMisuses(misuses.events))")
    #expect(operation.ran.count == 1 && operation.isFinished)
}

@Suite("Classes with their own start() or cancelled flag (probe 25)")
struct CustomClassStartTests {
    @Test("a class that re-dispatches its start onto its queue's underlying queue runs once, without a misuse")
    func superStartAfterQueueCallReturned() async {
        await #expect(processExitsWith: .success) { scenarioSuperStartAfterQueueCallReturned() }
    }

    @Test("a refused operation that keeps its own cancelled flag does not run, and finishes")
    func rejectedOwnCancelFlag() {
        let queue = fullRejectingQueue("reject-own-flag")
        let completed = Counter()
        let operation = OwnCancelFlagOperation()
        operation.completionBlock = { completed.increment() }
        let reported = misuses { queue.addOperation(operation) }
        #expect(reported.isEmpty, "\(describeMisuses(reported))")
        #expect(operation.ran.count == 0, "the refused operation's main() ran on the producer's thread")
        #expect(operation.isCancelled && operation.isFinished)
        #expect(waitUntil { completed.count == 1 })
        #expect(queue.operationCount == 1)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("a refused, not ready operation that keeps its own cancelled flag is not started by hand: no misuse")
    func rejectedOwnCancelFlagNotReady() {
        let queue = fullRejectingQueue("reject-own-flag-not-ready")
        let operation = OwnCancelFlagOperation()
        let dependency = BlockOperation {}
        operation.addDependency(dependency)
        let reported = misuses { queue.addOperation(operation) }
        #expect(reported.isEmpty, "\(describeMisuses(reported))")
        #expect(operation.ran.count == 0)
        #expect(operation.isFinished)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("a refused hand-built operation is started cancelled, and finishes without running")
    func rejectedHandBuilt() {
        let queue = fullRejectingQueue("reject-hand-built")
        let completed = Counter()
        let ran = Counter()
        let operation = ListingConcurrentOperation { ran.increment() }
        operation.completionBlock = { completed.increment() }
        queue.addOperation(operation)
        #expect(operation.isCancelled && operation.isFinished && ran.count == 0)
        #expect(waitUntil { completed.count == 1 })
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("a refused operation whose cancel() gives it to another queue is left to that queue: no misuse, no work")
    func rejectedOperationFleesToAnotherQueue() {
        let queue = fullRejectingQueue("reject-fleeing")
        let refuge = makeQueue("refuge")
        let completed = Counter()
        let operation = FleeingOperation(refuge: refuge)
        operation.completionBlock = { completed.increment() }
        let reported = misuses { queue.addOperation(operation) }
        #expect(reported.isEmpty, "\(describeMisuses(reported))")
        #expect(refuge.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(operation.isFinished && operation.ran.count == 0)
        #expect(waitUntil { completed.count == 1 })
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("a second super.start() while the queue's start runs main() is a start while executing")
    func secondSuperStartWhileExecuting() async {
        await #expect(processExitsWith: .success) { scenarioSecondSuperStartWhileExecuting() }
    }

    @Test("cancelling an async add that waits for room finishes a hand-built operation, and its completion block runs")
    func cancelledAsyncAddOfHandBuilt() async throws {
        let queue = OperationQueue()
        queue.isSuspended = true
        queue.setPendingLimit(1)
        await queue.addOperationWhenRoom(BlockOperation {})
        let completed = Counter()
        let ran = Counter()
        let waiting = ListingConcurrentOperation { ran.increment() }
        waiting.completionBlock = { completed.increment() }
        let producer = Task { await queue.addOperationWhenRoom(waiting) }
        producer.cancel()
        try await withTimeLimit { await producer.value }
        #expect(waiting.isCancelled && ran.count == 0)
        // Polled, not awaited: `finished()` waits for the finish even when
        // cancelled, and before the fix the operation never finished.
        #expect(await waitUntilAsync { waiting.isFinished && completed.count == 1 })
        #expect(queue.operationCount == 1)
        queue.isSuspended = false
        try await withTimeLimit { await queue.drained() }
    }
}
