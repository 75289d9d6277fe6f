// Memory: finished operations, queues and the closures they captured are
// released; self-references through completion blocks do not leak; a long
// dependency chain is released without overflowing the stack. Plus a check
// of the queue's internal bookkeeping helpers.

import Dispatch
import Synchronization
import Testing
@testable import Operations

@Suite("Lifetimes")
struct LifetimeTests {
    @Test("after finishing, operations, the queue and captured closures are released")
    func releasedAfterFinishing() {
        let tracker = LifetimeTracker()
        do {
            let queue = tracker.track(makeQueue("lifetime"), "queue")
            var ops: [Operation] = []
            for index in 0..<20 {
                let captured = tracker.track(Tracked("block \(index)"))
                let completionCaptured = tracker.track(Tracked("completion \(index)"))
                let op = tracker.track(BlockOperation { _ = captured }, "op \(index)")
                op.completionBlock = { _ = completionCaptured }
                if let last = ops.last { op.addDependency(last) }
                ops.append(op)
            }
            let asyncOp = tracker.track(AsyncOperation { operation in
                DispatchQueue.global().async { operation.finish() }
            }, "async op")
            asyncOp.addDependency(ops[5])
            ops.append(asyncOp)
            queue.addOperations(ops, waitUntilFinished: false)
            queue.addBarrierBlock {}
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        }
        let alive = tracker.waitForRelease()
        #expect(alive.isEmpty, "still alive: \(alive)")
    }

    @Test("an AsyncOperation finished before its execute() ran keeps neither itself nor its queue alive")
    func asyncOperationFinishedBeforeExecute() {
        // finish() may come as soon as the operation reads executing, from
        // any thread: here from its own isExecuting observer, which runs
        // before execute(). The scope that execute() sets up (holding the
        // operation and its queue for the tasks it creates) used to be kept
        // after such a finish, never ended: the operation held itself and
        // its queue forever (the rare "queue outlived its operations"
        // failure of the defect-3 test).
        let tracker = LifetimeTracker()
        let executed = Gate()
        let finished = Gate()
        var token: KeyValueObservation?
        do {
            let queue = tracker.track(makeQueue("finish-before-execute"), "queue")
            let operation = tracker.track(AsyncOperation { _ in executed.open() }, "operation")
            token = operation.observe(\.isExecuting, options: [.new]) { operation, change in
                if change.newValue == true { operation.finish() }
            }
            operation.completionBlock = { finished.open() }
            queue.addOperation(operation)
            #expect(finished.wait(), "the operation did not finish")
            #expect(executed.wait(), "execute() did not run")
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(operation.isFinished && !operation.isExecuting)
        }
        token?.invalidate()
        token = nil
        let alive = tracker.waitForRelease()
        #expect(alive.isEmpty, "still alive: \(alive)")
    }

    @Test("a dependency cycle broken by a cancel, with one edge removed afterwards, is released")
    func brokenCycleReleasedAfterRemovingAnEdge() {
        let tracker = LifetimeTracker()
        do {
            let queue = tracker.track(makeQueue("broken-cycle"), "queue")
            let ran = Counter()
            let a = tracker.track(BlockOperation { ran.increment() }, "a")
            let b = tracker.track(BlockOperation { ran.increment() }, "b")
            a.addDependency(b)
            b.addDependency(a)
            queue.addOperations([a, b], waitUntilFinished: false)
            b.cancel()
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(ran.count == 1, "a runs, b (cancelled) does not")
            #expect(a.dependencies == [b] && b.dependencies == [a], "the edges are kept, as in Foundation")
            b.removeDependency(a)
        }
        let alive = tracker.waitForRelease()
        #expect(alive.isEmpty, "still alive: \(alive)")
    }

    @Test("operations captured by each other's completion blocks are released")
    func mutualCompletionCaptures() {
        let tracker = LifetimeTracker()
        let done = Latch(count: 2)
        do {
            let a = tracker.track(BlockOperation {}, "a")
            let b = tracker.track(BlockOperation {}, "b")
            b.addDependency(a)
            a.completionBlock = {
                _ = b.isReady
                done.countDown()
            }
            b.completionBlock = {
                _ = a.isFinished
                done.countDown()
            }
            let queue = makeQueue("mutual")
            queue.addOperations([a, b], waitUntilFinished: false)
        }
        #expect(done.wait())
        #expect(tracker.waitForRelease().isEmpty, "still alive: \(tracker.alive)")
    }

    @Test("a manually started operation and its completion block are released")
    func manualOperationReleased() {
        let tracker = LifetimeTracker()
        do {
            let op = tracker.track(BlockOperation {}, "op")
            op.completionBlock = { _ = op }
            op.start()
        }
        #expect(tracker.waitForRelease().isEmpty)
    }

    @Test("cancelled queued operations and their closures are released")
    func cancelledOperationsReleased() {
        let tracker = LifetimeTracker()
        do {
            let queue = tracker.track(makeQueue("cancelled-lifetime"), "queue")
            queue.isSuspended = true
            let never = tracker.track(BlockOperation {}, "never-run dependency")
            for index in 0..<5 {
                let captured = tracker.track(Tracked("closure \(index)"))
                let op = tracker.track(BlockOperation { _ = captured }, "op \(index)")
                op.addDependency(never)
                queue.addOperation(op)
            }
            queue.cancelAllOperations()
            queue.isSuspended = false
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        }
        let alive = tracker.waitForRelease()
        #expect(alive.isEmpty, "still alive: \(alive)")
    }

    @Test("a large cancelled batch, some with completion blocks, retires once each and is released")
    func largeCancelledBatchRetiresAndIsReleased() {
        let tracker = LifetimeTracker()
        let completions = Atomic<Int>(0)
        do {
            let queue = tracker.track(makeQueue("cancelled-batch"), "queue")
            queue.isSuspended = true
            var operations: [Operation] = []
            // More than a drain loop retires per lock acquisition, so that
            // batches fill (and the batch storage grows); every third has a
            // completion block, which runs on the loop or on a job of its own.
            for index in 0..<300 {
                let captured = tracker.track(Tracked("closure \(index)"))
                let operation = tracker.track(BlockOperation { _ = captured }, "op \(index)")
                if index % 3 == 0 { operation.completionBlock = { completions.add(1, ordering: .relaxed) } }
                operations.append(operation)
            }
            queue.addOperations(operations, waitUntilFinished: false)
            queue.cancelAllOperations()
            queue.isSuspended = false
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(operations.allSatisfy { $0.isFinished && $0.isCancelled })
            operations.removeAll()
        }
        let alive = tracker.waitForRelease()
        #expect(alive.isEmpty, "still alive: \(alive)")
        #expect(completions.load(ordering: .relaxed) == 100)
    }

    @Test("an unfinished dependency graph that is dropped is released")
    func droppedGraphReleased() {
        let tracker = LifetimeTracker()
        do {
            let a = tracker.track(BlockOperation {}, "a")
            let b = tracker.track(BlockOperation {}, "b")
            let c = tracker.track(BlockOperation {}, "c")
            b.addDependency(a)
            c.addDependency(a)
            c.addDependency(b)
        }
        let alive = tracker.waitForRelease(timeout: .seconds(1))
        #expect(alive.isEmpty, "never-run operations with dependencies leak: \(alive)")
    }

    @Test("releasing a 100k chain of operations linked to finished dependencies does not overflow the stack")
    func longFinishedChainRelease() {
        let length = 100_000
        let tracker = LifetimeTracker()
        let finished = completesInTime(timeout: .seconds(60)) {
            var last = Operation()
            last.start()
            tracker.track(last, "first")
            for _ in 1..<length {
                let next = Operation()
                next.addDependency(last)
                next.start()
                last = next
            }
            tracker.track(last, "last")
            // `last` goes out of scope: each operation held its dependency,
            // so the whole chain is released here.
        }
        #expect(finished, "building or releasing the chain did not finish (or crashed the thread)")
        let alive = tracker.waitForRelease(timeout: .seconds(5))
        #expect(alive.isEmpty, "chain not released: \(alive)")
    }

    @Test("building and dropping a 100k chain of unfinished operations: fast, released, no stack overflow")
    func longUnfinishedChainRelease() {
        let length = 100_000
        let tracker = LifetimeTracker()
        let built = Box(0)
        let buildTime = Box<Duration>(.zero)
        let buildBudget: Duration = .seconds(30)
        let finished = completesInTime(timeout: .seconds(60)) {
            let clock = ContinuousClock()
            let start = clock.now
            var last = Operation()
            tracker.track(last, "first")
            var count = 1
            while count < length {
                let next = Operation()
                next.addDependency(last)
                last = next
                count += 1
                // Give up early (and fail below) if adding dependencies to a
                // chain is not O(1): the chain is still dropped and checked.
                if count % 1_000 == 0, clock.now - start > buildBudget { break }
            }
            built.value = count
            buildTime.value = clock.now - start
            tracker.track(last, "last")
        }
        #expect(finished, "building or releasing the chain did not finish (or crashed the thread)")
        #expect(built.value == length, "built only \(built.value) links in \(buildTime.value): addDependency on a chain is not O(1)")
        let alive = tracker.waitForRelease(timeout: .seconds(1))
        #expect(alive.isEmpty, "the dropped chain (\(built.value) links) was not released: \(alive)")
    }

    @Test("a chain run through a serial queue is released afterwards")
    func executedChainReleased() {
        let tracker = LifetimeTracker()
        do {
            let queue = makeQueue("chain", width: 1)
            var previous: Operation?
            var ops: [Operation] = []
            for index in 0..<300 {
                let op = BlockOperation {}
                if index % 100 == 0 { tracker.track(op, "op \(index)") }
                if let previous { op.addDependency(previous) }
                previous = op
                ops.append(op)
            }
            queue.addOperations(ops.reversed(), waitUntilFinished: false)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        }
        #expect(tracker.waitForRelease().isEmpty, "still alive: \(tracker.alive)")
    }
}

@Suite("Queue internals")
struct QueueInternalsTests {
    @Test("the scheduler's bookkeeping stays consistent under a mixed workload")
    func invariantsAfterMixedWorkload() {
        let queue = makeQueue("mixed", width: 3)
        queue.isSuspended = true
        let never = BlockOperation {}
        var ops: [Operation] = []
        for index in 0..<60 {
            let op = BlockOperation {}
            op.queuePriority = Operation.QueuePriority.allCases[index % 5]
            if index % 7 == 0 { op.addDependency(never) }
            if index % 3 == 0, let last = ops.last { op.addDependency(last) }
            ops.append(op)
        }
        queue.addOperations(ops, waitUntilFinished: false)
        expectQueueInvariants(queue)
        for (index, op) in ops.enumerated() where index % 7 == 0 || index % 11 == 0 { op.cancel() }
        expectQueueInvariants(queue)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        expectQueueInvariants(queue)
        #expect(queue.operationCount == 0)
    }

    @Test("the worker pool's snapshot is consistent")
    func poolSnapshot() {
        let queue = makeQueue("snapshot")
        queue.addOperation {}
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        let snapshot = WorkerPool.shared.snapshot
        #expect(snapshot.workers >= 1)
        #expect(snapshot.blocked >= 0 && snapshot.blocked <= snapshot.active)
        #expect(WorkerPool.shared.targetConcurrency >= 1)
    }
}
