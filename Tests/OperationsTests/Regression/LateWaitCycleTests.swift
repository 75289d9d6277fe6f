// Waits that become impossible after they began (found by the adversarial
// probes): the work they need is queued behind them, or made to depend on
// them, only once they are already blocked. A blocking wait re-checks itself
// while it waits, so these are reported as `.waitDeadlock` too. And bounded
// waits, which always end, are never reported.

import Testing
@testable import Operations

/// Blocks until `count` waits are registered (the waiters are blocked).
private func waitersAreBlocked(_ count: Int) -> Bool {
    waitUntil { WaitRegistry.shared.count >= count }
}

/// C: on a serial queue, an operation waits for one that is queued behind it
/// only after the wait began.
func scenarioSerialTargetQueuedAfterWaitBegan() {
    let misuses = installChildMisuseRecorder()
    let queue = OperationQueue()
    queue.name = "late-serial"
    queue.maxConcurrentOperationCount = 1
    let later = BlockOperation {}
    later.name = "queued-later"
    queue.addOperation { later.waitUntilFinished() }
    #expect(waitersAreBlocked(1))
    queue.addOperation(later)
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience), "the serial queue hangs")
    #expect(misuses.events.map(\.code) == [.waitDeadlock], "\(describeMisuses(misuses.events))")
    #expect(misuses.events.first?.message.contains("\"queued-later\"") == true)
}

/// B: two operations fill a width-2 queue, each waiting for a third that is
/// added only after both waits began. One of them reports; the other then
/// sees the third run.
func scenarioWidthTwoTargetAddedAfterWaitsBegan() {
    let misuses = installChildMisuseRecorder()
    let queue = OperationQueue()
    queue.name = "late-width-two"
    queue.maxConcurrentOperationCount = 2
    let third = BlockOperation {}
    third.name = "third"
    let returned = Counter()
    for _ in 0..<2 {
        queue.addOperation {
            third.waitUntilFinished()
            returned.increment()
        }
    }
    #expect(waitersAreBlocked(2))
    queue.addOperation(third)
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience), "the width-2 queue hangs")
    #expect(misuses.events.map(\.code) == [.waitDeadlock], "\(describeMisuses(misuses.events))")
    #expect(third.isFinished && returned.count == 2)
}

/// D: the awaited operation is made to depend on its waiter after the wait began.
func scenarioDependencyOnWaiterAddedAfterWaitBegan() {
    let misuses = installChildMisuseRecorder()
    let queue = OperationQueue()
    queue.name = "late-dependency"
    let target = BlockOperation {}
    target.name = "target"
    let waiter = BlockOperation { target.waitUntilFinished() }
    waiter.name = "waiter"
    queue.addOperation(waiter)
    #expect(waitersAreBlocked(1))
    target.addDependency(waiter)
    queue.addOperation(target)
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience), "the queue hangs")
    #expect(misuses.events.map(\.code) == [.waitDeadlock], "\(describeMisuses(misuses.events))")
}

@Suite("Issue 9: waits that become impossible after they began")
struct LateWaitCycleTests {
    @Test("a serial queue's operation waits for one queued behind it after the wait began: reported")
    func serialTargetQueuedLater() async {
        await #expect(processExitsWith: .success) { scenarioSerialTargetQueuedAfterWaitBegan() }
    }

    @Test("two waiters fill a width-2 queue, the awaited third is added afterwards: one is reported, both return")
    func widthTwoTargetAddedLater() async {
        await #expect(processExitsWith: .success) { scenarioWidthTwoTargetAddedAfterWaitsBegan() }
    }

    @Test("the awaited operation is made to depend on its waiter after the wait began: reported")
    func dependencyOnWaiterAddedLater() async {
        await #expect(processExitsWith: .success) { scenarioDependencyOnWaiterAddedAfterWaitBegan() }
    }

    @Test("a long legitimate wait from inside an operation is not reported")
    func longLegitimateWait() {
        let queue = makeQueue("long-legit-wait")
        let gate = Gate()
        let target = BlockOperation { _ = gate.wait() }
        let reported = misuses {
            queue.addOperation { target.waitUntilFinished() }
            #expect(waitersAreBlocked(1))
            queue.addOperation(target)
            // Several re-checks happen while the target runs.
            #expect(staysFalse(for: .milliseconds(400)) { target.isFinished })
            gate.open()
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        }
        #expect(reported.isEmpty, "\(describeMisuses(reported))")
    }

    @Test("bounded waits that could never end return false at their deadline, without a misuse")
    func boundedWaitsAreNotMisuse() {
        let queue = makeQueue("bounded-self-wait")
        let results = Recorder<Bool>()
        let op = BlockOperation()
        op.addExecutionBlock { [unowned op] in
            results.record(op.waitUntilFinished(timeout: .milliseconds(50)))
            results.record(queue.waitUntilAllOperationsAreFinished(timeout: .milliseconds(50)))
        }
        // No handler: a misuse would trap the test process.
        queue.addOperation(op)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(results.events == [false, false])
    }

    @Test("a zero timeout only reads the state")
    func zeroTimeout() {
        let queue = makeQueue("zero-timeout")
        queue.isSuspended = true
        let op = BlockOperation {}
        queue.addOperation(op)
        #expect(!op.waitUntilFinished(timeout: .zero))
        #expect(!queue.waitUntilAllOperationsAreFinished(timeout: .zero))
        queue.isSuspended = false
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(op.waitUntilFinished(timeout: .zero) && queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("a queue's event sequences end when the queue is deallocated")
    func eventsEndWithTheQueue() async {
        var queue: OperationQueue? = OperationQueue()
        let events = queue!.events
        let timed = queue!.timedEvents
        let consumer = Task { () -> Int in
            var count = 0
            for await _ in events { count += 1 }
            for await _ in timed { count += 1 }
            return count
        }
        await queue!.addOperationWhenRoom(BlockOperation {})
        await queue!.drained()
        weak let released = queue
        queue = nil
        #expect(released == nil)
        let count = await consumer.value
        #expect(count >= 4, "added, started, finished and drained on each sequence")
    }
}
