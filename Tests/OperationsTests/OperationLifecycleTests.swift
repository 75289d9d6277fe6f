// The lifecycle of a single operation: start, main, cancel, readiness,
// dependencies, the completion block, waiting, and the plain properties.

import Dispatch
import Synchronization
import Testing
@testable import Operations

/// An operation that records the thread its `main()` ran on.
private final class ThreadRecordingOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `thread` is a Mutex.
    let thread = LockedValue<ThreadID?>(nil)
    let mainCalls = Counter()
    override func main() {
        mainCalls.increment()
        thread.withLock { $0 = currentThreadID() }
    }
}

@Suite("Operation lifecycle")
struct OperationLifecycleTests {
    @Test("a new operation is ready and idle")
    func initialState() {
        let op = BlockOperation {}
        #expect(op.isReady)
        #expect(!op.isCancelled)
        #expect(!op.isExecuting)
        #expect(!op.isFinished)
        #expect(!op.isAsynchronous)
        #expect(!op.isConcurrent)
        #expect(op.dependencies.isEmpty)
        #expect(op.queuePriority == .normal)
        #expect(op.completionBlock == nil)
    }

    @Test("start() runs main() on the calling thread, then the operation is finished")
    func startRunsMainOnCallingThread() {
        let op = ThreadRecordingOperation()
        op.start()
        #expect(op.mainCalls.count == 1)
        #expect(op.thread.withLock { $0 } == currentThreadID())
        #expect(op.isFinished)
        #expect(!op.isExecuting)
        #expect(!op.isCancelled)
    }

    @Test("isExecuting is true during main() and false after")
    func executingDuringMain() {
        let seen = Box<(Bool, Bool)?>(nil)
        let op = BlockOperation()
        op.addExecutionBlock { [unowned op] in seen.value = (op.isExecuting, op.isFinished) }
        op.start()
        #expect(seen.value?.0 == true)
        #expect(seen.value?.1 == false)
        #expect(!op.isExecuting)
    }

    @Test("cancel before start: start() finishes without calling main()")
    func cancelBeforeStart() {
        let op = ThreadRecordingOperation()
        op.cancel()
        #expect(op.isCancelled)
        #expect(op.isReady)
        #expect(!op.isFinished)
        op.start()
        #expect(op.mainCalls.count == 0)
        #expect(op.isFinished)
        #expect(!op.isExecuting)
    }

    @Test("cancel after finishing changes nothing")
    func cancelAfterFinish() {
        let op = BlockOperation {}
        op.start()
        op.cancel()
        #expect(op.isFinished)
        #expect(!op.isCancelled)
    }

    @Test("main() that polls isCancelled stops once cancelled from another thread")
    func pollingIsCancelled() {
        let started = Gate()
        let iterations = Counter()
        let op = BlockOperation()
        op.addExecutionBlock { [unowned op] in
            let clock = ContinuousClock()
            let deadline = clock.now + patience
            // Open the gate from inside the loop, so at least one iteration
            // has run before the test cancels.
            while !op.isCancelled && clock.now < deadline {
                iterations.increment()
                started.open()
            }
        }
        let queue = makeQueue("polling")
        queue.addOperation(op)
        #expect(started.wait())
        op.cancel()
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(op.isCancelled)
        #expect(iterations.count > 0)
    }

    @Test("isCancelled is cheap enough to poll in a tight loop")
    func isCancelledIsCheap() {
        let op = BlockOperation {}
        let clock = ContinuousClock()
        let start = clock.now
        var cancelledSeen = 0
        for _ in 0..<200_000 where op.isCancelled { cancelledSeen += 1 }
        let elapsed = clock.now - start
        #expect(cancelledSeen == 0)
        // 10 µs per call would still pass: only a lock or allocation per read fails this.
        #expect(elapsed < .seconds(2), "200k isCancelled reads took \(elapsed)")
    }

    @Test("isReady follows dependencies")
    func readinessFollowsDependencies() {
        let first = BlockOperation {}
        let second = BlockOperation {}
        let dependent = BlockOperation {}
        dependent.addDependency(first)
        dependent.addDependency(second)
        #expect(dependent.dependencies == [first, second])
        #expect(!dependent.isReady)
        first.start()
        #expect(!dependent.isReady)
        second.start()
        #expect(dependent.isReady)
        // Finished dependencies stay listed.
        #expect(dependent.dependencies == [first, second])
        dependent.start()
        #expect(dependent.isFinished)
    }

    @Test("adding a finished operation as a dependency keeps the operation ready")
    func finishedDependency() {
        let done = BlockOperation {}
        done.start()
        let op = BlockOperation {}
        op.addDependency(done)
        #expect(op.isReady)
        #expect(op.dependencies == [done])
    }

    @Test("adding the same dependency twice lists it once")
    func duplicateDependency() {
        let dependency = BlockOperation {}
        let op = BlockOperation {}
        op.addDependency(dependency)
        op.addDependency(dependency)
        #expect(op.dependencies.count == 1)
        dependency.start()
        #expect(op.isReady)
    }

    @Test("removeDependency of an unfinished dependency restores readiness")
    func removeUnfinishedDependency() {
        let never = BlockOperation {}
        let other = BlockOperation {}
        let op = BlockOperation {}
        op.addDependency(never)
        op.addDependency(other)
        op.removeDependency(never)
        #expect(!op.isReady)
        #expect(op.dependencies == [other])
        op.removeDependency(other)
        #expect(op.isReady)
        #expect(op.dependencies.isEmpty)
        op.start()
        #expect(op.isFinished)
        // The removed dependency no longer affects the operation when it finishes.
        never.start()
        #expect(never.isFinished)
    }

    @Test("removeDependency lets a queue start an operation waiting on an unfinished dependency")
    func removeDependencyReleasesQueuedOperation() {
        let never = BlockOperation {}
        let ran = Gate()
        let op = BlockOperation { ran.open() }
        op.addDependency(never)
        let queue = makeQueue("remove-dependency")
        queue.addOperation(op)
        #expect(staysFalse { ran.opened })
        op.removeDependency(never)
        #expect(ran.wait())
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("dependencies across queues")
    func dependenciesAcrossQueues() {
        let gate = Gate()
        let order = Recorder<String>()
        let upstream = BlockOperation { gate.wait(); order.record("upstream") }
        let downstream = BlockOperation { order.record("downstream") }
        downstream.addDependency(upstream)
        let first = makeQueue("first")
        let second = makeQueue("second")
        second.addOperation(downstream)
        first.addOperation(upstream)
        #expect(staysFalse { downstream.isExecuting || downstream.isFinished })
        gate.open()
        #expect(second.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(first.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(order.events == ["upstream", "downstream"])
    }

    @Test("a queued operation depending on a manually started one runs after it")
    func dependencyOnManualOperation() {
        let order = Recorder<String>()
        let manual = BlockOperation { order.record("manual") }
        let queued = BlockOperation { order.record("queued") }
        queued.addDependency(manual)
        let queue = makeQueue("after-manual")
        queue.addOperation(queued)
        #expect(staysFalse { queued.isFinished })
        manual.start()
        #expect(queued.waitUntilFinished(timeout: patience))
        #expect(order.events == ["manual", "queued"])
    }

    @Test("a manually started operation depending on a queued one becomes ready when it finishes")
    func manualOperationDependingOnQueued() {
        let gate = Gate()
        let queued = BlockOperation { gate.wait() }
        let manual = BlockOperation {}
        manual.addDependency(queued)
        let queue = makeQueue("before-manual")
        queue.addOperation(queued)
        #expect(!manual.isReady)
        gate.open()
        #expect(queued.waitUntilFinished(timeout: patience))
        #expect(manual.isReady)
        manual.start()
        #expect(manual.isFinished)
    }

    @Test("the completion block runs exactly once, after the operation finished")
    func completionBlockOnce() {
        let calls = Counter()
        let sawFinished = Box(false)
        let op = BlockOperation {}
        op.completionBlock = { [unowned op] in
            calls.increment()
            sawFinished.value = op.isFinished
        }
        let queue = makeQueue("completion")
        queue.addOperation(op)
        #expect(op.waitUntilFinished(timeout: patience))
        // As in Foundation, the completion block runs asynchronously: the
        // wait does not wait for it.
        #expect(waitUntil { calls.count == 1 })
        #expect(sawFinished.value)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        op.cancel()
        #expect(calls.count == 1)
    }

    @Test("the completion block runs once for an operation cancelled before it started")
    func completionBlockForCancelled() {
        let calls = Counter()
        let bodies = Counter()
        let op = BlockOperation { bodies.increment() }
        op.completionBlock = { calls.increment() }
        op.cancel()
        op.start()
        #expect(waitUntil { calls.count == 1 })
        let queued = BlockOperation { bodies.increment() }
        queued.completionBlock = { calls.increment() }
        queued.cancel()
        let queue = makeQueue("cancelled-completion")
        queue.addOperation(queued)
        #expect(queued.waitUntilFinished(timeout: patience))
        #expect(waitUntil { calls.count == 2 })
        #expect(bodies.count == 0, "a cancelled operation ran its block")
    }

    @Test("the completion block runs on another thread, as the chapter's article shows on Darwin (a worker of the pool), with OperationQueue.current nil")
    func completionBlockThread() {
        let thread = Box<ThreadID?>(nil)
        let current = Box<Bool?>(nil)
        let ran = Gate()
        let op = BlockOperation {}
        op.completionBlock = {
            thread.value = currentThreadID()
            current.value = OperationQueue.current == nil
            ran.open()
        }
        op.start()
        #expect(ran.wait())
        #expect(thread.value != currentThreadID())
        #expect(current.value == true)
    }

    @Test("completion blocks of operations that finish one after another start in that order (ports rerun: SwiftQueue's cancel-all test)")
    func completionBlocksStartInFinishOrder() {
        // As with Foundation's global queue, a block may overtake the one
        // before it only in the instant between being taken and being
        // called; one job per block on the pool reversed 43% of pairs
        // started by hand and 82% of pairs finished in a queue.
        let trials = 300
        var reversed = 0
        let queue = makeQueue("completion-order", width: 1)
        for trial in 0..<trials {
            let order = Recorder<Int>()
            let first = BlockOperation {}
            let second = BlockOperation {}
            first.completionBlock = { order.record(1) }
            second.completionBlock = { order.record(2) }
            if trial.isMultiple(of: 2) {
                first.start()
                second.start()
            } else {
                queue.addOperations([first, second], waitUntilFinished: false)
            }
            #expect(waitUntil { order.count == 2 })
            if order.events != [1, 2] { reversed += 1 }
        }
        #expect(reversed <= trials / 50, "\(reversed) of \(trials) pairs of completion blocks started in the reverse order")
    }

    @Test("a completion block that waits for its own, now empty, queue returns at once, and so does a wait from outside (probe 47)")
    func completionBlockWaitsForItsQueue() {
        var stuck = 0
        for _ in 0..<100 {
            let queue = makeQueue("completion-waits-queue", width: 1)
            let result = LockedValue<Bool?>(nil)
            let op = BlockOperation {}
            op.completionBlock = {
                let idle = queue.waitUntilAllOperationsAreFinished(timeout: .seconds(2))
                result.withLock { $0 = idle }
            }
            queue.addOperation(op)
            #expect(waitUntil { result.withLock { $0 } != nil })
            if result.withLock({ $0 }) != true { stuck += 1 }
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: .seconds(2)))
        }
        #expect(stuck == 0, "\(stuck) of 100 completion blocks waited in vain for their empty queue")
    }

    @Test("an add from a completion block to its operation's queue is its own work: never held back by the pending limit (probe 47)", arguments: [PendingLimitPolicy.block, .reject])
    func completionBlockAddIsNotHeldBack(policy: PendingLimitPolicy) {
        let queue = makeQueue("completion-add", width: 2)
        queue.setPendingLimit(2, policy: policy)
        let yRan = Gate()
        let y = BlockOperation { yRan.open() }
        let xSawY = Box(false)
        // X needs Y, which A's completion block adds while X and W fill
        // the queue to its limit.
        let x = BlockOperation { xSawY.value = yRan.wait(timeout: .seconds(5)) }
        let w = BlockOperation {}
        w.addDependency(x)
        let added = Gate()
        let filled = Gate()
        let a = BlockOperation {}
        a.completionBlock = {
            _ = filled.wait()
            queue.addOperation(y)
            added.open()
        }
        queue.addOperation(a)
        #expect(a.waitUntilFinished(timeout: patience))
        queue.addOperations([x, w], waitUntilFinished: false)
        filled.open()
        #expect(added.wait(timeout: .seconds(2)), "the completion block's add was held back by the pending limit")
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(xSawY.value)
        #expect(!y.isCancelled && y.isFinished)
    }

    /// A completion block that takes `lock` (held by the waiter in the
    /// tests below), then opens `gate`.
    private func takesLock(_ lock: PlatformLock, thenOpens gate: Gate) -> @Sendable () -> Void {
        {
            lock.lock()
            lock.unlock()
            gate.open()
        }
    }

    @Test("a wait does not wait for the completion block: one that takes a lock the waiter holds does not hang it (probe 46)")
    func waitDoesNotWaitForCompletionBlock() {
        let lock = PlatformLock()
        let completed = Gate()
        let returned = Gate()
        let op = BlockOperation {}
        op.completionBlock = takesLock(lock, thenOpens: completed)
        let queue = makeQueue("completion-lock")
        spawnThread {
            lock.lock()
            queue.addOperations([op], waitUntilFinished: true)
            returned.open()
            lock.unlock()
        }
        #expect(returned.wait(), "the wait waited for a completion block that needs the waiter's lock")
        #expect(completed.wait())
    }

    @Test("a start by hand under a lock the completion block takes returns; the block runs once the lock is free (probe 46)")
    func manualStartUnderCompletionLock() {
        let lock = PlatformLock()
        let completed = Gate()
        let returned = Gate()
        let op = BlockOperation {}
        op.completionBlock = takesLock(lock, thenOpens: completed)
        spawnThread {
            lock.lock()
            op.start()
            returned.open()
            lock.unlock()
        }
        #expect(returned.wait(), "start() ran the completion block on the thread that holds the lock")
        #expect(completed.wait())
        #expect(op.isFinished)
    }

    @Test("a completion block that waits for the thread that waits for its operation does not hang it (probe 46)")
    func completionWaitsForWaiter() {
        let waiterDone = Gate()
        let completed = Gate()
        let op = BlockOperation {}
        op.completionBlock = {
            // Stands for `DispatchQueue.main.sync {}` while main waits.
            if waiterDone.wait() { completed.open() }
        }
        let queue = makeQueue("completion-waits")
        queue.addOperation(op)
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        waiterDone.open()
        #expect(completed.wait())
    }

    @Test("the completion block is released after it ran")
    func completionBlockReleased() {
        let tracker = LifetimeTracker()
        let op = BlockOperation {}
        do {
            let captured = tracker.track(Tracked("captured by completion"))
            op.completionBlock = { _ = captured }
        }
        #expect(tracker.alive.count == 1)
        op.start()
        #expect(op.completionBlock == nil)
        #expect(tracker.waitForRelease().isEmpty)
    }

    @Test("an operation captured by its own completion block does not leak")
    func selfCapturingCompletionBlock() {
        let tracker = LifetimeTracker()
        let ran = Gate()
        do {
            let op = tracker.track(BlockOperation {}, "self-capturing op")
            op.completionBlock = {
                _ = op.isFinished
                ran.open()
            }
            let queue = tracker.track(makeQueue("self-capture"), "queue")
            queue.addOperation(op)
        }
        #expect(ran.wait())
        #expect(tracker.waitForRelease().isEmpty)
    }

    @Test("waitUntilFinished waits for a queued synchronous operation")
    func waitForSynchronousOperation() {
        let gate = Gate()
        let finishedBody = Box(false)
        let op = BlockOperation {
            gate.wait()
            finishedBody.value = true
        }
        let queue = makeQueue("wait-sync")
        queue.addOperation(op)
        #expect(!op.waitUntilFinished(timeout: .milliseconds(20)), "returned before the operation finished")
        let waiterDone = Gate()
        spawnThread {
            op.waitUntilFinished()
            waiterDone.open()
        }
        #expect(staysFalse { waiterDone.opened })
        gate.open()
        #expect(waiterDone.wait())
        #expect(finishedBody.value)
        #expect(op.isFinished)
    }

    @Test("waitUntilFinished waits for an asynchronous operation to call finish()")
    func waitForAsynchronousOperation() {
        let gate = Gate()
        let completion = Box(false)
        let op = AsyncOperation { operation in
            DispatchQueue.global().async {
                gate.wait()
                operation.finish()
            }
        }
        op.completionBlock = { completion.value = true }
        op.start()
        #expect(op.isExecuting)
        #expect(!op.waitUntilFinished(timeout: .milliseconds(20)))
        gate.open()
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(op.isFinished)
        // The completion block runs asynchronously, as in Foundation.
        #expect(waitUntil { completion.value })
    }

    @Test("waitUntilFinished on a finished operation returns at once")
    func waitOnFinished() {
        let op = BlockOperation {}
        op.start()
        #expect(completesInTime(timeout: .seconds(2)) { op.waitUntilFinished() })
    }

    @Test("threadPriority defaults to 0.5 and keeps valid values")
    func threadPriority() {
        let op = BlockOperation {}
        #expect(op.threadPriority == 0.5)
        op.threadPriority = 0.2
        #expect(op.threadPriority == 0.2)
        op.threadPriority = 1.0
        #expect(op.threadPriority == 1.0)
        op.threadPriority = 0.0
        #expect(op.threadPriority == 0.0)
        op.start()
        #expect(op.isFinished)
    }

    @Test("threadPriority outside 0...1 is refused", arguments: [1.5, -0.1, Double.nan, Double.infinity])
    func threadPriorityValidation(value: Double) {
        let op = BlockOperation {}
        op.name = "priority"
        op.threadPriority = 0.3
        let reported = misuses { op.threadPriority = value }
        #expect(reported.map(\.code) == [.invalidThreadPriority])
        #expect(reported.first?.message.contains("\"priority\"") == true)
        #expect(op.threadPriority == 0.3)
    }

    @Test("an operation with a custom thread priority runs main and finishes")
    func threadPriorityRuns() {
        let ran = Counter()
        let low = BlockOperation { ran.increment() }
        low.threadPriority = 0.1
        let high = BlockOperation { ran.increment() }
        high.threadPriority = 0.9
        let queue = makeQueue("thread-priority")
        queue.addOperations([low, high], waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(ran.count == 2)
    }

    @Test("qualityOfService defaults to .default and uses Foundation's raw values")
    func qualityOfService() {
        let op = BlockOperation {}
        #expect(op.qualityOfService == .default)
        op.qualityOfService = .utility
        #expect(op.qualityOfService == .utility)
        op.qualityOfService = .userInteractive
        #expect(op.qualityOfService == .userInteractive)
        #expect(QualityOfService.userInteractive.rawValue == 0x21)
        #expect(QualityOfService.userInitiated.rawValue == 0x19)
        #expect(QualityOfService.utility.rawValue == 0x11)
        #expect(QualityOfService.background.rawValue == 0x09)
        #expect(QualityOfService.default.rawValue == -1)
        #expect(QualityOfService.background < .utility && QualityOfService.utility < .default)
        #expect(QualityOfService.default < .userInitiated && QualityOfService.userInitiated < .userInteractive)
    }

    @Test("operations of every quality of service run")
    func qualityOfServiceRuns() {
        let queue = makeQueue("qos")
        let ran = Counter()
        let ops = QualityOfService.allCases.map { qos -> Operation in
            let op = BlockOperation { ran.increment() }
            op.qualityOfService = qos
            return op
        }
        queue.addOperations(ops, waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(ran.count == QualityOfService.allCases.count)
    }

    @Test("queuePriority uses Foundation's raw values")
    func queuePriorityValues() {
        #expect(Operation.QueuePriority.veryLow.rawValue == -8)
        #expect(Operation.QueuePriority.low.rawValue == -4)
        #expect(Operation.QueuePriority.normal.rawValue == 0)
        #expect(Operation.QueuePriority.high.rawValue == 4)
        #expect(Operation.QueuePriority.veryHigh.rawValue == 8)
        let op = BlockOperation {}
        for priority in Operation.QueuePriority.allCases {
            op.queuePriority = priority
            #expect(op.queuePriority == priority)
        }
    }

    @Test("name is nil by default, settable, and appears in the description")
    func name() {
        let op = BlockOperation {}
        #expect(op.name == nil)
        op.name = "resize"
        #expect(op.name == "resize")
        #expect(op.description.contains("resize"))
        op.name = nil
        #expect(op.name == nil)
    }

    @Test("operations are equal and hash by identity")
    func hashableByIdentity() {
        let a = BlockOperation {}
        let b = BlockOperation {}
        a.name = "same"
        b.name = "same"
        #expect(a == a)
        #expect(a != b)
        let set: Set<Operation> = [a, b, a]
        #expect(set.count == 2)
        #expect(set.contains(a) && set.contains(b))
        var dictionary: [Operation: Int] = [a: 1]
        dictionary[b] = 2
        #expect(dictionary[a] == 1 && dictionary[b] == 2)
    }
}
