import Testing
@testable import Operations

/// `cancelAllOperations()` cancels operations of plain classes in batches and
/// calls an overridden `cancel()` one operation at a time; either way every
/// operation is cancelled once, started once, and leaves the queue.
@Suite("cancelAllOperations")
struct CancelAllTests {
    /// Counts the calls of its own `cancel()` and `start()`, and forwards both.
    final class CountingCancel: Operation, @unchecked Sendable {
        let cancels = Counter()
        let starts = Counter()
        override func cancel() {
            cancels.increment()
            super.cancel()
        }
        override func start() {
            starts.increment()
            super.start()
        }
    }

    /// Its readiness is user code (it overrides `isReady`), so the queue
    /// reads it outside its lock, one operation at a time.
    final class Gated: Operation, @unchecked Sendable {
        override var isReady: Bool { super.isReady }
    }

    @Test("a completion block of a cancelled batch may wait for another operation of the same batch (regression: CI soak seeds 565860/565861)")
    func tailWaitsForBatchMember() {
        let queue = makeQueue("cancel-all-batch-tails", width: 1)
        queue.isSuspended = true
        let waited = Box(false)
        let first = BlockOperation {}
        let second = BlockOperation {}
        // Both have tails; the first's waits (bounded) for the second, which
        // is retired in the same batch, after it.
        first.completionBlock = { waited.value = second.waitUntilFinished(timeout: .seconds(5)) }
        second.completionBlock = {}
        queue.addOperations([first, second], waitUntilFinished: false)
        queue.cancelAllOperations()
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(waitUntil { waited.value }, "the completion block's wait for its batch neighbour timed out")
    }

    @Test("an overridden cancel() is called once per operation, plain ones are cancelled in batches, and all retire")
    func mixedClasses() {
        let queue = makeQueue("cancel-all-mixed", width: 1)
        queue.isSuspended = true
        let counting = (0..<5).map { _ in CountingCancel() }
        let plain = (0..<1_000).map { _ in BlockOperation { Issue.record("a cancelled block ran") } }
        let gated = (0..<5).map { _ in Gated() }
        let ran = Counter()
        let blocker = BlockOperation { ran.increment() }
        // Plain operations that wait for a dependency that never runs.
        let neverRuns = BlockOperation {}
        for operation in plain.prefix(10) { operation.addDependency(neverRuns) }
        queue.addOperations(counting + plain + gated, waitUntilFinished: false)
        queue.cancelAllOperations()
        #expect(counting.allSatisfy { $0.cancels.count == 1 && $0.isCancelled })
        #expect(plain.allSatisfy(\.isCancelled) && gated.allSatisfy(\.isCancelled))
        queue.addOperation(blocker)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(counting.allSatisfy { $0.starts.count == 1 && $0.isFinished })
        #expect(plain.allSatisfy(\.isFinished) && gated.allSatisfy(\.isFinished))
        #expect(ran.count == 1 && queue.operationCount == 0)
        expectQueueInvariants(queue)
    }

    @Test("a barrier is an operation of the queue until it runs: counted, listed, and cancelled with the rest")
    func cancelsPendingBarrier() {
        let queue = makeQueue("cancel-all-barrier")
        queue.isSuspended = true
        let ran = Box(false)
        queue.addOperation {}
        queue.addBarrierBlock { ran.value = true }
        #expect(queue.operationCount == 2)
        #expect(queue.operations.count == 2)
        queue.cancelAllOperations()
        #expect(queue.operations.allSatisfy { $0.isCancelled })
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(!ran.value)
        #expect(queue.operationCount == 0)
    }
}
