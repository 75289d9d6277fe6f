// The queue's other duties: waiting, addOperations(waitUntilFinished:),
// OperationQueue.current, its contents and progress, identity, the
// underlying dispatch queue, and running work after the caller let go.

import Dispatch
import Synchronization
import Testing
@testable import Operations

@Suite("Queue")
struct QueueTests {
    // MARK: Waiting

    @Test("waitUntilAllOperationsAreFinished covers operations added while waiting")
    func waitCoversOperationsAddedWhileWaiting() {
        let queue = makeQueue("wait-added")
        let log = Recorder<String>()
        let release = Gate()
        let secondRelease = Gate()
        queue.addOperation {
            release.wait()
            // Added from inside, before this operation finishes.
            queue.addOperation {
                secondRelease.wait()
                log.record("added later")
            }
            log.record("first")
        }
        let waiterDone = Gate()
        spawnThread {
            queue.waitUntilAllOperationsAreFinished()
            log.record("waiter returned")
            waiterDone.open()
        }
        release.open()
        #expect(waitUntil { log.count >= 1 })
        #expect(staysFalse { waiterDone.opened }, "returned while an operation added during the wait was pending")
        secondRelease.open()
        #expect(waiterDone.wait())
        #expect(log.events == ["first", "added later", "waiter returned"])
    }

    @Test("waitUntilAllOperationsAreFinished covers operations added from another thread during the wait")
    func waitCoversExternalAdds() {
        let queue = makeQueue("wait-external")
        let firstRelease = Gate()
        let lateRelease = Gate()
        let lateFinished = Box(false)
        queue.addOperation { firstRelease.wait() }
        let waiterDone = Gate()
        spawnThread {
            _ = queue.waitUntilAllOperationsAreFinished(timeout: patience)
            waiterDone.open()
        }
        queue.addOperation {
            lateRelease.wait()
            lateFinished.value = true
        }
        firstRelease.open()
        #expect(staysFalse { waiterDone.opened })
        lateRelease.open()
        #expect(waiterDone.wait())
        #expect(lateFinished.value)
    }

    @Test("waitUntilAllOperationsAreFinished waits for async operations that finish later")
    func waitCoversAsyncOperations() {
        let queue = makeQueue("wait-async")
        let release = Gate()
        let finished = Box(false)
        let op = AsyncOperation { operation in
            DispatchQueue.global().async {
                release.wait()
                finished.value = true
                operation.finish()
            }
        }
        queue.addOperation(op)
        #expect(!queue.waitUntilAllOperationsAreFinished(timeout: .milliseconds(30)), "returned while the async operation was executing")
        release.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(finished.value)
        #expect(queue.operationCount == 0)
    }

    @Test("waitUntilAllOperationsAreFinished returns at once on an empty queue; it does not wait for completion blocks, which run asynchronously as in Foundation")
    func waitForCompletionBlocks() {
        let queue = makeQueue("wait-completion")
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: .seconds(1)))
        let completed = Box(false)
        let op = BlockOperation {}
        op.completionBlock = { completed.value = true }
        queue.addOperation(op)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(waitUntil { completed.value }, "the completion block never ran")
    }

    @Test("the operation has left its queue when its completion block runs")
    func operationCountDuringCompletion() {
        let queue = makeQueue("count-during-completion")
        let seen = Box(-1)
        let listed = Box(true)
        let op = BlockOperation {}
        op.completionBlock = { [unowned op] in
            seen.value = queue.operationCount
            listed.value = queue.operations.contains(op)
        }
        queue.addOperation(op)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(waitUntil { seen.value != -1 })
        #expect(seen.value == 0, "the operation still counted in operationCount during its completion block")
        #expect(!listed.value, "the operation was still listed in operations during its completion block")
        #expect(queue.operationCount == 0)
    }

    @Test("queued operations run on the shared pool's worker threads (ops.worker.N)")
    func workerThreadNames() {
        let names = Recorder<String>()
        let queue = makeQueue("thread-names")
        for _ in 0..<4 {
            queue.addOperation { names.record(currentThreadName()) }
        }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(names.count == 4)
        #expect(names.events.allSatisfy { $0.hasPrefix("ops.worker.") }, "\(names.events)")
    }

    @Test("addOperations(waitUntilFinished: true) waits for exactly those operations")
    func addOperationsWaitsForExactlyThose() {
        let queue = makeQueue("add-wait")
        let unrelatedRelease = Gate()
        let unrelated = BlockOperation { unrelatedRelease.wait() }
        queue.addOperation(unrelated)
        let log = Recorder<String>()
        let batch = (0..<3).map { index in BlockOperation { log.record("batch \(index)") } }
        batch[2].completionBlock = { log.record("batch 2 completion") }
        let returned = completesInTime {
            queue.addOperations(batch, waitUntilFinished: true)
        }
        #expect(returned, "addOperations(waitUntilFinished:) waited for an unrelated operation (or hung)")
        #expect(batch.allSatisfy { $0.isFinished })
        #expect(waitUntil { log.events.contains("batch 2 completion") })
        #expect(!unrelated.isFinished)
        unrelatedRelease.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("addOperations(waitUntilFinished: true) on a suspended queue returns once resumed")
    func addOperationsWaitOnSuspendedQueue() {
        let queue = makeQueue("add-wait-suspended")
        queue.isSuspended = true
        let returned = Gate()
        let op = BlockOperation {}
        spawnThread {
            queue.addOperations([op], waitUntilFinished: true)
            returned.open()
        }
        #expect(staysFalse { returned.opened })
        queue.isSuspended = false
        #expect(returned.wait())
        #expect(op.isFinished)
    }

    // MARK: Current queue

    @Test("OperationQueue.current is the running operation's queue in main, and nil in the completion block (Darwin)")
    func currentQueue() {
        let queue = makeQueue("current")
        let insideMain = Box<OperationQueue?>(nil)
        let insideCompletion = Box<OperationQueue?>(queue)
        let afterCompletion = Box<OperationQueue?>(nil)
        let op = BlockOperation { insideMain.value = OperationQueue.current }
        op.completionBlock = { insideCompletion.value = OperationQueue.current }
        let next = BlockOperation { afterCompletion.value = OperationQueue.current }
        queue.maxConcurrentOperationCount = 1
        queue.addOperations([op, next], waitUntilFinished: false)
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(insideMain.value === queue)
        #expect(waitUntil { insideCompletion.value == nil })
        #expect(afterCompletion.value === queue, "the flag does not outlive the completion block")
    }

    @Test("OperationQueue.current is nil in a completion block run inside an async body (probe 9)")
    func currentInCompletionInsideAsyncBody() async throws {
        let queue = makeQueue("current-async")
        let inBody = Box<OperationQueue?>(nil)
        let inCompletion = Box<OperationQueue?>(queue)
        let body = ResultOperation<Int, Never> { () async -> Int in
            inBody.value = OperationQueue.current
            let inner = BlockOperation {}
            inner.completionBlock = { inCompletion.value = OperationQueue.current }
            inner.start()
            return 1
        }
        await queue.addOperationWhenRoom(body)
        _ = try await withTimeLimit { try await body.value }
        #expect(inBody.value === queue)
        #expect(await waitUntilAsync { inCompletion.value == nil })
    }

    @Test("OperationQueue.current is nil on a thread outside any queue, and main on the main queue")
    func currentQueueOutside() {
        let outside = Box<OperationQueue?>(OperationQueue.main)
        #expect(completesInTime { outside.value = OperationQueue.current })
        #expect(outside.value == nil)
        // A manually started operation is not in a queue either.
        let manual = Box<OperationQueue?>(OperationQueue.main)
        #expect(completesInTime {
            let op = BlockOperation { manual.value = OperationQueue.current }
            op.start()
        })
        #expect(manual.value == nil)
        let onTestThread = OperationQueue.current
        #expect(onTestThread == nil || onTestThread === OperationQueue.main)
    }

    @Test("OperationQueue.current inside nested queues is the innermost one")
    func currentQueueNested() {
        let outer = makeQueue("outer")
        let inner = makeQueue("inner")
        let seen = Recorder<String>()
        outer.addOperation {
            seen.record(OperationQueue.current?.name ?? "nil")
            inner.addOperations([BlockOperation { seen.record(OperationQueue.current?.name ?? "nil") }], waitUntilFinished: true)
            seen.record(OperationQueue.current?.name ?? "nil")
        }
        #expect(outer.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(seen.events == ["outer", "inner", "outer"])
    }

    @Test("OperationQueue.main is serial and named")
    func mainQueue() {
        let main = OperationQueue.main
        #expect(main === OperationQueue.main)
        #expect(main.maxConcurrentOperationCount == 1)
        #expect(main.name == "NSOperationQueue Main Queue")
    }

    @Test("operations added to OperationQueue.main run when the main dispatch queue is serviced")
    func mainQueueRuns() {
        // The test runner services the main dispatch queue (dispatchMain);
        // on Linux it drains it on a dispatch thread, so only the queue, not
        // the thread, is checked here.
        let current = Box<OperationQueue?>(nil)
        let op = BlockOperation { current.value = OperationQueue.current }
        OperationQueue.main.addOperation(op)
        #expect(op.waitUntilFinished(timeout: patience), "OperationQueue.main never ran the operation")
        #expect(current.value === OperationQueue.main)
    }

    // MARK: Article 003: selling tickets

    @Test("article 003: three serial queues sell 50 tickets under a lock, each exactly once")
    func ticketSale() {
        final class TicketOffice: Sendable {
            let lock = LockedValue(50)
            let sold = Recorder<String>()
            func sale(_ who: String) {
                while true {
                    let remaining: Int? = lock.withLock { count in
                        guard count > 0 else { return nil }
                        count -= 1
                        return count
                    }
                    guard let remaining else { return }
                    sold.record("\(remaining) \(who)")
                }
            }
        }
        let office = TicketOffice()
        let windows = ["Beijing", "Shanghai", "Shenzhen"].map { city -> OperationQueue in
            let queue = makeQueue(city, width: 1)
            queue.addOperation { office.sale(city) }
            return queue
        }
        for queue in windows {
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        }
        let remainders = office.sold.events.map { Int($0.split(separator: " ")[0])! }
        #expect(remainders.sorted() == Array(0..<50))
        #expect(office.lock.withLock { $0 } == 0)
    }

    // MARK: Contents

    @Test("operations and operationCount list unfinished operations in add order, empty when drained")
    func operationsInAddOrder() {
        let queue = makeQueue("contents")
        queue.isSuspended = true
        let ops = (0..<4).map { index -> BlockOperation in
            let op = BlockOperation {}
            op.name = "op\(index)"
            return op
        }
        queue.addOperation(ops[0])
        queue.addOperations([ops[1], ops[2]], waitUntilFinished: false)
        queue.addOperation(ops[3])
        queue.addOperation {}
        #expect(queue.operationCount == 5)
        #expect(Array(queue.operations.prefix(4)) == ops)
        #expect(queue.operations.last is BlockOperation)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(queue.operationCount == 0)
        #expect(queue.operations.isEmpty)
        expectQueueInvariants(queue)
    }

    @Test("a finished operation leaves the list while others stay")
    func finishedOperationsLeave() {
        let queue = makeQueue("leave")
        let release = Gate()
        let slow = BlockOperation { release.wait() }
        let fast = BlockOperation {}
        queue.addOperations([slow, fast], waitUntilFinished: false)
        #expect(fast.waitUntilFinished(timeout: patience))
        #expect(queue.operations == [slow])
        #expect(queue.operationCount == 1)
        release.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("progress counts operations added since the queue was last empty")
    func progress() {
        let queue = makeQueue("progress", width: 1)
        #expect(queue.progress.fractionCompleted == 1)
        queue.isSuspended = true
        for _ in 0..<4 { queue.addOperation {} }
        #expect(queue.progress.totalUnitCount == 4)
        #expect(queue.progress.completedUnitCount == 0)
        #expect(queue.progress.fractionCompleted == 0)
        #expect(!queue.progress.isFinished)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(queue.progress.completedUnitCount == 4)
        #expect(queue.progress.totalUnitCount == 4)
        #expect(queue.progress.isFinished)
        #expect(queue.progress.fractionCompleted == 1)
        queue.isSuspended = true
        queue.addOperation {}
        queue.addOperation {}
        #expect(queue.progress.totalUnitCount == 2, "progress did not restart after the queue emptied")
        #expect(queue.progress.completedUnitCount == 0)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(queue.progress.fractionCompleted == 1)
    }

    @Test("progress counts half-done work")
    func progressHalfway() {
        let queue = makeQueue("progress-half", width: 1)
        let release = Gate()
        // Progress counts the work added since the queue was last empty: add
        // both while suspended, so that the first cannot finish (emptying the
        // queue) before the second is added.
        queue.isSuspended = true
        queue.addOperation {}
        queue.addOperation { release.wait() }
        queue.isSuspended = false
        #expect(waitUntil { queue.progress.completedUnitCount == 1 })
        #expect(queue.progress.totalUnitCount == 2)
        #expect(queue.progress.fractionCompleted == 0.5)
        release.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("queues are equal and hash by identity; names default and can be set")
    func queueIdentity() {
        let a = OperationQueue()
        let b = OperationQueue()
        #expect(a == a && a != b)
        let set: Set<OperationQueue> = [a, b, a]
        #expect(set.count == 2)
        #expect(a.name?.hasPrefix("NSOperationQueue 0x") == true)
        #expect(a.name != b.name)
        a.name = "images"
        #expect(a.name == "images")
        #expect(a.description.contains("images"))
        #expect(a.qualityOfService == .default)
        a.qualityOfService = .utility
        #expect(a.qualityOfService == .utility)
    }

    // MARK: Underlying queue

    @Test("with underlyingQueue set to a serial dispatch queue, operations run there, one at a time")
    func underlyingQueue() {
        let key = DispatchSpecificKey<String>()
        let dispatchQueue = DispatchQueue(label: "underlying")
        dispatchQueue.setSpecific(key: key, value: "underlying")
        let queue = makeQueue("on-dispatch")
        queue.underlyingQueue = dispatchQueue
        #expect(queue.underlyingQueue === dispatchQueue)
        let onQueue = Recorder<Bool>()
        let tracker = ConcurrencyTracker()
        for _ in 0..<8 {
            queue.addOperation {
                tracker.enter()
                onQueue.record(DispatchQueue.getSpecific(key: key) == "underlying")
                tracker.leave()
            }
        }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(onQueue.events == Array(repeating: true, count: 8))
        #expect(tracker.maximum == 1)
    }

    @Test("an async operation on an underlying queue finishes and frees the queue")
    func underlyingQueueAsync() {
        let dispatchQueue = DispatchQueue(label: "underlying-async")
        let queue = makeQueue("on-dispatch-async")
        queue.underlyingQueue = dispatchQueue
        let op = AsyncOperation { operation in
            DispatchQueue.global().async { operation.finish() }
        }
        let after = Gate()
        queue.addOperation(op)
        queue.addOperation { after.open() }
        #expect(after.wait())
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("on a serial underlying queue, a completion block does not hold the queue: the next operation starts while it waits (regression: probe 36)")
    func underlyingQueueCompletionBlockDoesNotHoldIt() {
        let dispatchQueue = DispatchQueue(label: "underlying-completion")
        let queue = makeQueue("on-dispatch-completion")
        queue.underlyingQueue = dispatchQueue
        let nextStarted = Gate()
        let sawNext = Box(false)
        let completed = Gate()
        let first = BlockOperation {}
        first.completionBlock = {
            // Before the fix the completion block ran on the dispatch queue
            // itself, so the next operation could not start until it returned.
            sawNext.value = nextStarted.wait(timeout: .seconds(2))
            completed.open()
        }
        let next = BlockOperation { nextStarted.open() }
        queue.addOperations([first, next], waitUntilFinished: false)
        #expect(completed.wait())
        #expect(sawNext.value, "the next operation did not start while the completion block ran")
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("on a serial underlying queue, a completion block that waits for a later operation of the queue is not a deadlock (regression: probe 36)")
    func underlyingQueueCompletionBlockWaitsForLaterOperation() {
        let queue = makeQueue("on-dispatch-completion-wait")
        queue.underlyingQueue = DispatchQueue(label: "underlying-completion-wait")
        let first = BlockOperation {}
        let later = BlockOperation {}
        later.addDependency(first)
        let waited = Box(false)
        let completed = Gate()
        first.completionBlock = {
            waited.value = later.waitUntilFinished(timeout: .seconds(2))
            completed.open()
        }
        let finishedObserver = Recorder<Bool>()
        let token = first.observe(\.isFinished, options: [.new]) { _, change in
            // Observers are still told on the thread that finished it, the
            // dispatch queue (as key-value observers are on Darwin).
            finishedObserver.record(DispatchQueue.getSpecific(key: underlyingKey) == "underlying")
            _ = change
        }
        defer { token.invalidate() }
        queue.underlyingQueue?.setSpecific(key: underlyingKey, value: "underlying")
        queue.addOperations([first, later], waitUntilFinished: false)
        #expect(completed.wait())
        #expect(waited.value)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(finishedObserver.events == [true])
    }

    // MARK: Lifetime

    @Test("a queue released while it holds gated work still runs everything, then queue, ops and closures are released")
    func releasedQueueRunsItsWork() {
        let tracker = LifetimeTracker()
        let release = Gate()
        let ran = Latch(count: 6)
        let completions = Latch(count: 6)
        do {
            let queue = tracker.track(makeQueue("released", width: 2), "queue")
            for index in 0..<6 {
                let captured = tracker.track(Tracked("closure \(index)"))
                let op = tracker.track(BlockOperation {
                    _ = captured
                    release.wait()
                    ran.countDown()
                }, "op \(index)")
                op.completionBlock = { completions.countDown() }
                if index == 5 {
                    let dependency = tracker.track(BlockOperation { release.wait() }, "dependency")
                    op.addDependency(dependency)
                    queue.addOperation(dependency)
                }
                queue.addOperation(op)
            }
        }
        release.open()
        #expect(ran.wait(), "a released queue dropped its work")
        #expect(completions.wait())
        let alive = tracker.waitForRelease()
        #expect(alive.isEmpty, "still alive: \(alive)")
    }
}

/// Marks the dispatch queue under an `OperationQueue` in the tests above.
private let underlyingKey = DispatchSpecificKey<String>()
