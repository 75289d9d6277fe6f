import Operations
import Synchronization

/// The chapter's Listing 2-4: a `main()` that polls `isCancelled` each time
/// round its loop and returns as soon as it is set.
///
/// It announces (through `looping`) that it has entered its loop, and once
/// it sees the cancellation it waits (bounded) for `release` before
/// returning, so that the demo can observe what happens while it is still
/// executing.
final class PollingOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: adds only immutable references (`looping`,
    // `release`, `outcome`); `outcome` is a Mutex.
    private let looping: Gate
    private let release: Gate
    /// How the loop ended: "cancelled" or "deadline", and the iterations.
    let outcome = Mutex<(reason: String, iterations: Int)?>(nil)

    init(looping: Gate, release: Gate) {
        self.looping = looping
        self.release = release
        super.init()
    }

    override func main() {
        // A bound, so that a lost cancellation ends the loop anyway.
        let deadline = ContinuousClock.now + .seconds(5)
        var iterations = 0
        var isDone = false
        while !isCancelled && !isDone {
            // Do some work and set isDone when finished.
            iterations += 1
            if iterations == 1 { looping.open() }
            isDone = ContinuousClock.now >= deadline
        }
        outcome.withLock { $0 = (isDone ? "deadline" : "cancelled", iterations) }
        _ = release.wait(seconds: 5)
    }
}

/// `cancellation`: the chapter's "Responding to Cancellation Events"
/// (Listing 2-4) and "Canceling Operations".
enum CancellationDemo {
    static let demo = DemoCase(
        name: "cancellation",
        summary: "cancelAllOperations: a running operation polls isCancelled; a waiting one ends",
        sources: [DemoCitation(.appleOperationQueues, "Responding to Cancellation Events (Listing 2-4) and Canceling Operations")],
        shows: "Cancel stops a running operation where it checks isCancelled, a waiting one at once.",
        lookFor: "\"waiting isFinished NO→YES\" while the looper still executes; then \"after\" runs anyway.",
        run: run
    )

    static func run(_ log: DemoLog) {
        log.section("1. cancelAllOperations: a running operation polls isCancelled; a waiting one is retired at once")
        let looping = Gate()
        let release = Gate()
        let waitingRetired = Gate()
        let recorder = StateRecorder(log: log)

        let looper = PollingOperation(looping: looping, release: release)
        let waiting = BlockOperation { log.note("waiting runs") }
        let after = BlockOperation { log.note("after runs") }
        recorder.watch(looper, as: "looper", printInitialValues: false)
        recorder.watch(waiting, as: "waiting", printInitialValues: false)
        recorder.watch(after, as: "after", printInitialValues: false)
        waiting.addDependency(looper)
        after.addDependency(waiting)
        waiting.completionBlock = {
            log.note("waiting's completion block")
            waitingRetired.open()
        }

        let queue = OperationQueue()
        queue.name = "cancellable"
        let otherQueue = OperationQueue()
        otherQueue.name = "other"
        queue.addOperations([looper, waiting], waitUntilFinished: false)
        otherQueue.addOperation(after)
        let entered = looping.wait(seconds: 5)
        log.note("looper is in its loop: queue.cancelAllOperations()")
        queue.cancelAllOperations()
        // The waiting operation must be retired while the looper still runs.
        let retiredEarly = waitingRetired.wait(seconds: 5)
        let looperStillExecuting = looper.isExecuting
        log.note("waiting retired; looper.isExecuting = \(yesNo(looperStillExecuting)); releasing the looper")
        release.open()
        let drained = queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10))
        let otherDrained = otherQueue.waitUntilAllOperationsAreFinished(timeout: .seconds(10))
        recorder.stop()

        let outcome = looper.outcome.withLock { $0 }
        if let outcome { log.note("looper left its loop: \(outcome.reason), after \(outcome.iterations) iteration\(outcome.iterations == 1 ? "" : "s")") }
        log.check(entered, "the looper entered its loop within 5 s")
        log.check(drained && otherDrained, "both queues finished within 10 s")
        log.check(outcome?.reason == "cancelled", "the looper saw isCancelled and left its loop early",
                  detail: "it left because of \(outcome?.reason ?? "nothing: main() never returned")")
        log.check(retiredEarly && looperStillExecuting,
                  "the cancelled waiting operation was retired at once, while its dependency was still executing",
                  detail: retiredEarly ? "the looper had already finished" : "waiting was not retired within 5 s")
        log.check(log.count(of: "waiting runs") == 0, "the waiting operation's work never ran")
        log.checkStateChanges(of: "looper", equal: ["isExecuting NO→YES", "isCancelled NO→YES", "isExecuting YES→NO", "isFinished NO→YES"],
                              "looper: executing, cancelled while executing, then finished")
        log.checkStateChanges(of: "waiting", equal: ["isReady YES→NO", "isCancelled NO→YES", "isReady NO→YES", "isFinished NO→YES"],
                              "waiting: not ready, then cancelled, which made it ready, then finished without executing")
        log.checkOrder(["waiting isCancelled NO→YES", "after isReady NO→YES", "after runs"],
                       "the operation depending on the cancelled one (on another queue) ran once it finished")
        log.checkStateChanges(of: "after", equal: ["isReady YES→NO", "isReady NO→YES", "isExecuting NO→YES", "isExecuting YES→NO", "isFinished NO→YES"],
                              "after: a cancelled dependency counts as finished, so it ran")
        log.check(!after.isCancelled, "cancelAllOperations on one queue left the other queue's operation alone")
    }
}
