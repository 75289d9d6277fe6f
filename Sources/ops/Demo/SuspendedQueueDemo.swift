import Operations
import Synchronization

/// `suspended-queue`: the concurrent-operation article's suspended queue with
/// maxConcurrentOperationCount = 5, no.3 depending on no.2, then resumed.
enum SuspendedQueueDemo {
    static let demo = DemoCase(
        name: "suspended-queue",
        summary: "a suspended queue starts nothing; resumed, no.1 and no.2 overlap, then no.3",
        sources: [DemoCitation(.concurrentOperationArticle, "Operation在Queue的用法 (operations in a queue): runOperationsatCustomQueue, a suspended queue (max 5) resumed")],
        shows: "A suspended queue holds its operations; resumed, width and dependencies set the order.",
        lookFor: "No \"isExecuting NO→YES\" before \"queue.isSuspended = false\"; no.3 starts after no.2.",
        run: run
    )

    private static let one = "this is no.1 block Operation"
    private static let two = "this is no.2 block Operation, start sleep"
    private static let twoAwake = "no.2 wake up."
    private static let three = "this is no.3 block Operation, no.2 operation is completed, start task"
    private static let resuming = "queue.isSuspended = false"

    static func run(_ log: DemoLog) {
        log.section("1. suspend, add no.1, no.2 and no.3 (no.3 depends on no.2), resume")
        let queue = OperationQueue()
        queue.name = "004 suspended"
        let suspension = queue.observe(\.isSuspended, options: [.old, .new]) { _, change in
            log.stateChange("queue isSuspended \(yesNo(change.oldValue))→\(yesNo(change.newValue))")
        }
        let recorder = StateRecorder(log: log)
        let started = Mutex(0)
        let overlap = Rendezvous.poolCanOverlap
        let together = Rendezvous(parties: 2)
        let met = Mutex(0)
        @Sendable func meet() {
            if overlap, together.arrive(seconds: 5) { met.withLock { $0 += 1 } }
        }

        // The article's no.2 sleeps for a second; here no.1 and no.2 wait for
        // each other instead, which also proves they run at the same time.
        let block1 = BlockOperation()
        block1.addExecutionBlock {
            started.withLock { $0 += 1 }
            log.note(one)
            meet()
        }
        let block2 = BlockOperation()
        block2.addExecutionBlock {
            started.withLock { $0 += 1 }
            log.note(two)
            meet()
            log.note(twoAwake)
        }
        let block3 = BlockOperation()
        block3.addExecutionBlock {
            started.withLock { $0 += 1 }
            log.note(three)
        }
        recorder.watch(block1, as: "no.1", printInitialValues: false)
        recorder.watch(block2, as: "no.2", printInitialValues: false)
        recorder.watch(block3, as: "no.3", printInitialValues: false)
        block3.addDependency(block2)

        queue.isSuspended = true
        queue.maxConcurrentOperationCount = 5
        queue.addOperation(block1)
        queue.addOperation(block2)
        queue.addOperation(block3)
        let countWhileSuspended = queue.operationCount
        log.note("added no.1, no.2, no.3 while suspended: operationCount = \(countWhileSuspended)")

        // Give the shared pool every chance to (wrongly) start something:
        // run an operation on another queue and wait for it.
        let probeQueue = OperationQueue()
        probeQueue.name = "004 probe"
        probeQueue.addOperation { log.note("an operation on another queue ran meanwhile") }
        let probed = probeQueue.waitUntilAllOperationsAreFinished(timeout: .seconds(5))
        let startedWhileSuspended = started.withLock { $0 }
        let executingWhileSuspended = [block1, block2, block3].filter { $0.isExecuting || $0.isFinished }.count
        let countAfterProbe = queue.operationCount

        log.note(resuming)
        queue.isSuspended = false
        let drained = queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10))
        recorder.stop()
        suspension.invalidate()

        log.check(drained, "the resumed queue finished all three within 10 s",
                  detail: "still queued: \(queue.operationCount)")
        log.check(probed, "the probe operation on another queue ran while this one was suspended")
        log.check(
            countWhileSuspended == 3 && countAfterProbe == 3 && startedWhileSuspended == 0 && executingWhileSuspended == 0,
            "nothing ran while the queue was suspended: 3 operations held, none started",
            detail: "operationCount \(countWhileSuspended) then \(countAfterProbe), \(startedWhileSuspended) started, \(executingWhileSuspended) executing or finished"
        )
        log.check(
            [one, two, three].allSatisfy { (log.position(of: $0) ?? -1) > (log.position(of: resuming) ?? Int.max) },
            "every operation started after the queue was resumed"
        )
        let suspensionChanges = log.entries.filter { $0.isStateChange && $0.text.hasPrefix("queue ") }.map(\.text)
        log.check(suspensionChanges == ["queue isSuspended NO→YES", "queue isSuspended YES→NO"],
                  "the queue announced isSuspended NO→YES, then YES→NO",
                  detail: "observed \(suspensionChanges)")
        if overlap {
            log.check(met.withLock { $0 } == 2, "no.1 and no.2 ran at the same time", detail: "they did not meet within 5 s")
        }
        log.checkOrder([twoAwake, "no.3 isReady NO→YES", three],
                       "no.3 started only after no.2 finished")
        log.checkOrder(["no.3 isReady NO→YES", "no.2 isFinished NO→YES"],
                       "no.2's finish released no.3 before its isFinished observers were told")
        let ran = ["isExecuting NO→YES", "isExecuting YES→NO", "isFinished NO→YES"]
        log.checkStateChanges(of: "no.1", equal: ran, "no.1: executing, then finished")
        log.checkStateChanges(of: "no.2", equal: ran, "no.2: executing, then finished")
        log.checkStateChanges(of: "no.3", equal: ["isReady YES→NO", "isReady NO→YES"] + ran,
                              "no.3: not ready once it depends on no.2, ready when no.2 finished, then runs")
        log.checkThreads(of: [one, two, three], startWith: "ops.worker.",
                         "the queue ran them on the library's worker threads; we managed no threads")
    }
}
