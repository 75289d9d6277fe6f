// How a queue picks and starts operations: readiness before priority,
// strict priority then FIFO on a serial queue, maxConcurrentOperationCount,
// suspension, cancellation and barriers.

import Dispatch
import Synchronization
import Testing
@testable import Operations

/// Builds operations that record their label when they run.
private func recordingOperation(_ label: String, into log: Recorder<String>, priority: Operation.QueuePriority = .normal) -> BlockOperation {
    let op = BlockOperation { log.record(label) }
    op.name = label
    op.queuePriority = priority
    return op
}

@Suite("Queue scheduling")
struct QueueSchedulingTests {
    // MARK: Order

    @Test("readiness before priority: a ready low-priority operation runs before an unready very-high one")
    func readinessBeforePriority() {
        let log = Recorder<String>()
        let gate = Gate()
        let external = BlockOperation { gate.wait() }
        let urgent = recordingOperation("urgent", into: log, priority: .veryHigh)
        urgent.addDependency(external)
        let low = recordingOperation("low", into: log, priority: .veryLow)
        let queue = makeQueue("readiness", width: 1)
        queue.isSuspended = true
        queue.addOperation(urgent)
        queue.addOperation(low)
        queue.isSuspended = false
        #expect(waitUntil { log.count == 1 })
        #expect(log.events == ["low"])
        let other = makeQueue("external")
        other.addOperation(external)
        gate.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["low", "urgent"])
    }

    @Test("serial queue: strict priority order, FIFO within a priority")
    func strictPriorityThenFIFO() {
        let log = Recorder<String>()
        let plan: [(String, Operation.QueuePriority)] = [
            ("n1", .normal), ("l1", .low), ("vh1", .veryHigh), ("h1", .high), ("n2", .normal),
            ("vl1", .veryLow), ("h2", .high), ("vh2", .veryHigh), ("l2", .low), ("n3", .normal),
        ]
        let queue = makeQueue("priority", width: 1)
        queue.isSuspended = true
        for (label, priority) in plan {
            queue.addOperation(recordingOperation(label, into: log, priority: priority))
        }
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["vh1", "vh2", "h1", "h2", "n1", "n2", "n3", "l1", "l2", "vl1"])
    }

    @Test("serial queue without priorities runs in add order")
    func fifoOrder() {
        let log = Recorder<String>()
        let queue = makeQueue("fifo", width: 1)
        for index in 0..<50 {
            queue.addOperation(recordingOperation("\(index)", into: log))
        }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == (0..<50).map(String.init))
    }

    @Test("changing the priority of a waiting operation moves it")
    func priorityChangeWhileQueued() {
        let log = Recorder<String>()
        let queue = makeQueue("reprioritize", width: 1)
        queue.isSuspended = true
        let first = recordingOperation("first", into: log)
        let second = recordingOperation("second", into: log)
        queue.addOperations([first, second], waitUntilFinished: false)
        second.queuePriority = .veryHigh
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["second", "first"])
    }

    @Test("an operation becoming ready later keeps its add order among the ready ones of its priority (Foundation's order)")
    func readyLaterOrder() {
        let log = Recorder<String>()
        let queue = makeQueue("ready-later", width: 1)
        queue.isSuspended = true
        let dependency = BlockOperation {}
        let late = recordingOperation("late", into: log)
        late.addDependency(dependency)
        queue.addOperation(late)
        queue.addOperation(recordingOperation("a", into: log))
        dependency.start()
        queue.addOperation(recordingOperation("b", into: log))
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["late", "a", "b"])
    }

    // MARK: Width

    @Test("-1 is the default and lets operations run concurrently")
    func defaultWidth() {
        let queue = OperationQueue()
        #expect(OperationQueue.defaultMaxConcurrentOperationCount == -1)
        #expect(queue.maxConcurrentOperationCount == -1)
        let arrived = Latch(count: 4)
        let met = Counter()
        for _ in 0..<4 {
            queue.addOperation {
                arrived.countDown()
                if arrived.wait(timeout: patience) { met.increment() }
            }
        }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 2))
        #expect(met.count == 4, "four operations did not run at the same time on the default queue")
    }

    @Test("maxConcurrentOperationCount = N bounds concurrency and reaches N", arguments: [1, 2, 3])
    func widthBoundsConcurrency(width: Int) {
        let tracker = ConcurrencyTracker()
        let firstWave = Latch(count: width)
        let queue = makeQueue("width-\(width)", width: width)
        for _ in 0..<(width * 4) {
            queue.addOperation {
                tracker.enter()
                firstWave.countDown()
                // Hold the slot until N operations run at once (or time out).
                firstWave.wait(timeout: .seconds(5))
                tracker.leave()
            }
        }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 2))
        #expect(tracker.maximum == width)
        #expect(tracker.entered == width * 4)
    }

    @Test("raising maxConcurrentOperationCount while running starts more at once; lowering it waits for running ones")
    func changingWidthWhileRunning() {
        let tracker = ConcurrencyTracker()
        let release = Gate()
        let queue = makeQueue("resize", width: 1)
        for _ in 0..<6 {
            queue.addOperation {
                tracker.enter()
                release.wait()
                tracker.leave()
            }
        }
        #expect(waitUntil { tracker.running == 1 })
        #expect(staysFalse { tracker.running > 1 }, "width 1 ran two operations")
        queue.maxConcurrentOperationCount = 3
        #expect(queue.maxConcurrentOperationCount == 3)
        #expect(waitUntil { tracker.running == 3 }, "raising the width did not start more operations")
        queue.maxConcurrentOperationCount = 1
        #expect(tracker.running == 3, "lowering the width must not stop running operations")
        release.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(tracker.entered == 6)
        #expect(tracker.maximum == 3)
    }

    @Test("lowering the width holds back new starts until running operations drop below it")
    func loweringWidth() {
        let tracker = ConcurrencyTracker()
        let firstRelease = Gate()
        let queue = makeQueue("lower", width: 2)
        let started = Latch(count: 2)
        for _ in 0..<2 {
            queue.addOperation {
                tracker.enter()
                started.countDown()
                firstRelease.wait()
                tracker.leave()
            }
        }
        #expect(started.wait())
        queue.maxConcurrentOperationCount = 1
        let lateRan = Counter()
        let lateTracker = ConcurrencyTracker()
        for _ in 0..<3 {
            queue.addOperation {
                lateTracker.enter()
                tracker.enter()
                lateRan.increment()
                tracker.leave()
                lateTracker.leave()
            }
        }
        #expect(staysFalse { lateRan.count > 0 }, "started while over the lowered width")
        firstRelease.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(lateRan.count == 3)
        #expect(lateTracker.maximum == 1)
    }

    @Test("width 0 starts nothing until raised")
    func zeroWidth() {
        let ran = Counter()
        let queue = makeQueue("zero", width: 0)
        queue.addOperation { ran.increment() }
        #expect(staysFalse { ran.count > 0 })
        queue.maxConcurrentOperationCount = 1
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(ran.count == 1)
    }

    // MARK: Suspension

    @Test("suspension stops new starts, leaves running operations alone; resume continues")
    func suspension() {
        let release = Gate()
        let running = Gate()
        let log = Recorder<String>()
        let queue = makeQueue("suspend")
        queue.addOperation {
            running.open()
            release.wait()
            log.record("running finished")
        }
        #expect(running.wait())
        queue.isSuspended = true
        #expect(queue.isSuspended)
        queue.addOperation { log.record("added while suspended") }
        release.open()
        #expect(waitUntil { log.count == 1 }, "a running operation was paused by suspension")
        #expect(staysFalse { log.count > 1 }, "a suspended queue started an operation")
        #expect(queue.operationCount == 1)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["running finished", "added while suspended"])
    }

    @Test("a suspended queue does not retire cancelled operations either")
    func suspendedQueueKeepsCancelled() {
        let queue = makeQueue("suspend-cancel")
        queue.isSuspended = true
        let op = BlockOperation {}
        queue.addOperation(op)
        op.cancel()
        #expect(staysFalse { op.isFinished })
        #expect(queue.operationCount == 1)
        queue.isSuspended = false
        #expect(op.waitUntilFinished(timeout: patience))
    }

    @Test("a dependency given to a queued operation that nobody observes holds it back until the dependency has run")
    func dependencyGivenWhileQueued() {
        let log = Recorder<String>()
        let queue = makeQueue("dependency-while-queued")
        queue.isSuspended = true
        let later = BlockOperation { log.record("later") }
        queue.addOperation(later)
        let first = BlockOperation { log.record("first") }
        // Added while `later` waits in the queue as ready: the queue must
        // learn that it is not ready any more (no observer asks it to).
        later.addDependency(first)
        queue.isSuspended = false
        #expect(staysFalse { later.isFinished }, "ran before its dependency was even added")
        queue.addOperation(first)
        #expect(later.waitUntilFinished(timeout: patience))
        #expect(log.events == ["first", "later"])
        expectQueueInvariants(queue)
    }

    // MARK: Cancellation

    @Test("cancelAllOperations retires queued operations promptly, even with unfinished dependencies")
    func cancelAllRetiresPromptly() {
        let release = Gate()
        let running = Gate()
        let sawCancel = Box(false)
        let queue = makeQueue("cancel-all", width: 1)
        let busy = BlockOperation()
        busy.addExecutionBlock { [unowned busy] in
            running.open()
            release.wait()
            sawCancel.value = busy.isCancelled
        }
        let neverRuns = BlockOperation {}
        let ran = Counter()
        let waiting = BlockOperation { ran.increment() }
        waiting.addDependency(neverRuns)
        let plain = BlockOperation { ran.increment() }
        let completions = Counter()
        waiting.completionBlock = { completions.increment() }
        plain.completionBlock = { completions.increment() }
        queue.addOperations([busy, waiting, plain], waitUntilFinished: false)
        #expect(running.wait())
        queue.cancelAllOperations()
        // The busy operation still holds the only slot: the cancelled ones
        // must be retired without it.
        #expect(waiting.waitUntilFinished(timeout: patience), "cancelled operation with an unfinished dependency was not retired")
        #expect(plain.waitUntilFinished(timeout: patience))
        #expect(queue.operationCount == 1)
        #expect(ran.count == 0)
        #expect(waitUntil { completions.count == 2 })
        release.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(sawCancel.value, "the running operation did not see isCancelled")
        expectQueueInvariants(queue)
    }

    @Test("cancelling one queued operation releases its dependents")
    func cancelReleasesDependents() {
        let log = Recorder<String>()
        let queue = makeQueue("cancel-one")
        queue.isSuspended = true
        let first = recordingOperation("first", into: log)
        let second = recordingOperation("second", into: log)
        second.addDependency(first)
        queue.addOperations([first, second], waitUntilFinished: false)
        first.cancel()
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["second"])
        #expect(first.isFinished && first.isCancelled)
    }

    @Test("the queue keeps working after cancelAllOperations")
    func queueWorksAfterCancelAll() {
        let queue = makeQueue("after-cancel", width: 2)
        queue.isSuspended = true
        for _ in 0..<10 { queue.addOperation {} }
        queue.cancelAllOperations()
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        let ran = Counter()
        queue.addOperation { ran.increment() }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(ran.count == 1)
    }

    // MARK: Barriers

    @Test("a barrier runs after every earlier operation and before every later one")
    func barrier() {
        let log = Recorder<String>()
        let release = Gate()
        let queue = makeQueue("barrier")
        let earlierStarted = Latch(count: 3)
        for index in 0..<3 {
            queue.addOperation {
                earlierStarted.countDown()
                release.wait()
                log.record("earlier \(index)")
            }
        }
        queue.addBarrierBlock { log.record("barrier") }
        for index in 0..<3 {
            queue.addOperation { log.record("later \(index)") }
        }
        #expect(earlierStarted.wait())
        #expect(staysFalse { log.count > 0 }, "the barrier or a later operation ran before the earlier ones finished")
        release.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        let events = log.events
        #expect(events.count == 7)
        #expect(Set(events.prefix(3)) == ["earlier 0", "earlier 1", "earlier 2"])
        #expect(events[3] == "barrier")
        #expect(Set(events.suffix(3)) == ["later 0", "later 1", "later 2"])
    }

    @Test("a barrier on an empty queue runs, and later operations still run")
    func barrierOnEmptyQueue() {
        let log = Recorder<String>()
        let queue = makeQueue("barrier-empty")
        queue.addBarrierBlock { log.record("barrier") }
        queue.addOperation { log.record("after") }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["barrier", "after"])
    }

    @Test("consecutive barriers run in order")
    func consecutiveBarriers() {
        let log = Recorder<String>()
        let queue = makeQueue("barriers")
        for index in 0..<4 {
            queue.addOperation { log.record("op \(index)") }
            queue.addBarrierBlock { log.record("barrier \(index)") }
        }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == (0..<4).flatMap { ["op \($0)", "barrier \($0)"] })
        // The barrier's hidden dependency is not listed.
        let op = BlockOperation {}
        queue.isSuspended = true
        queue.addBarrierBlock {}
        queue.addOperation(op)
        #expect(op.dependencies.isEmpty)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }
}
