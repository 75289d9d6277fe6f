// Probe 38: references kept after the work they served had ended. A
// `BlockOperation`'s late helper jobs used its freed queue; an `async` wait
// that had ended kept what it awaited until the wait-warning threshold; a
// carried context kept its operation after the finish. Each scenario runs in
// a child process: the carriers and the threshold it sets are process-wide.

import Testing
@testable import Operations

/// Fire-and-forget queues, each running a `BlockOperation` of three blocks:
/// the starting thread often runs every block itself, and the helper jobs
/// submitted for the other two run after the operation finished and its
/// queue was freed. They used that queue (as `OperationQueue.current` in the
/// carried context's binder, and in the library's own waits there).
func scenarioLateBlockHelpersTouchNothing() {
    let lateBindings = Counter()
    let token = OperationContextPropagation.register { operation in
        let owner = WeakReference<Operation>(operation)
        return OperationContextPropagation.Binder(
            sync: { body in
                if owner.object?.isFinished ?? true { lateBindings.increment() }
                if let queue = OperationQueue.current { _ = queue.name }
                body()
            },
            async: { body in await body() }
        )
    }
    defer { token.cancel() }
    for round in 0..<20 {
        var operations: [BlockOperation] = []
        for _ in 0..<50 {
            let operation = BlockOperation {}
            operation.addExecutionBlock {}
            operation.addExecutionBlock {}
            operations.append(operation)
            OperationQueue().addOperation(operation)
        }
        #expect(waitUntil { operations.allSatisfy(\.isFinished) }, "round \(round): the operations did not finish")
    }
    // The last round's helpers: run once the pool has no job left queued.
    #expect(waitUntil { WorkerPool.shared.snapshot.queuedJobs == 0 })
    #expect(lateBindings.count == 0, "a helper bound the context of an operation that had finished \(lateBindings.count) times")
}

/// A carrier whose binder uses the operation it was captured for: the
/// operation kept the binder after it finished, so it kept itself alive.
func scenarioCarriedContextReleasedAtFinish() {
    let token = OperationContextPropagation.register { operation in
        OperationContextPropagation.Binder(
            sync: { body in
                _ = operation.name
                body()
            },
            async: { body in
                _ = operation.name
                await body()
            }
        )
    }
    defer { token.cancel() }
    let tracker = LifetimeTracker()
    do {
        let queue = tracker.track(makeQueue("carried-context"), "queue")
        queue.isSuspended = true
        let block = tracker.track(BlockOperation {}, "BlockOperation")
        let blocks = tracker.track(BlockOperation {}, "BlockOperation with two blocks")
        blocks.addExecutionBlock {}
        let asynchronous = tracker.track(AsyncOperation { $0.finish() }, "AsyncOperation")
        let result = tracker.track(ResultOperation<Int, Never> { () async -> Int in
            await Task.yield()
            return 1
        }, "ResultOperation")
        queue.addOperations([block, blocks, asynchronous, result], waitUntilFinished: false)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }
    let alive = tracker.waitForRelease()
    #expect(alive.isEmpty, "still alive after finishing: \(alive)")
}

/// `async` waits that ended, with a wait-warning threshold far off: the
/// pending report kept what it would describe (the operation, the queue)
/// until the threshold passed.
func scenarioEndedAsyncWaitsKeepNothing() async {
    OperationReporting.waitWarningThreshold = .seconds(600)
    let tracker = LifetimeTracker()
    do {
        let queue = tracker.track(makeQueue("awaited"), "queue")
        let operation = tracker.track(BlockOperation {}, "awaited operation")
        let result = tracker.track(ResultOperation<Int, Never> { 7 }, "awaited ResultOperation")
        await queue.addOperationWhenRoom(operation)
        await queue.addOperationWhenRoom(result)
        await operation.finished()
        let value = try? await result.value
        #expect(value == 7)
        await queue.drained()
    }
    let alive = tracker.waitForRelease()
    #expect(alive.isEmpty, "still alive after the waits ended: \(alive)")
}

@Suite("Probe 38: references kept after the work ended")
struct LateReferenceRegressionTests {
    @Test("a BlockOperation's helper jobs that find no block left touch neither its finished operation nor its freed queue")
    func lateBlockHelpers() async {
        await #expect(processExitsWith: .success) { scenarioLateBlockHelpersTouchNothing() }
    }

    @Test("an operation's carried context is released when it finishes, even if its binder captures the operation")
    func carriedContextReleased() async {
        await #expect(processExitsWith: .success) { scenarioCarriedContextReleasedAtFinish() }
    }

    @Test("an async wait that ended keeps neither the operation nor the queue it awaited until the wait-warning threshold")
    func endedAsyncWaits() async {
        await #expect(processExitsWith: .success) { await scenarioEndedAsyncWaitsKeepNothing() }
    }
}
