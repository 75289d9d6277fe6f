import Operations
import Synchronization

/// `concurrent-operation`: concurrent operations built by hand — the
/// chapter's `MyOperation` (Listings 2-5 to 2-7, a new thread per
/// operation) and the concurrent-operation article's `MyOperation` (a state enum, one shared
/// thread) — started by hand and run by queues.
enum ConcurrentOperationDemo {
    static let demo = DemoCase(
        name: "concurrent-operation",
        summary: "hand-built concurrent operations (start() overridden), by hand and in queues",
        sources: [
            DemoCitation(.appleOperationQueues, "Configuring Operations for Concurrent Execution (Listings 2-5 to 2-7)"),
            DemoCitation(.concurrentOperationArticle, "建立concurrent Operation (building a concurrent operation): MyOperation"),
        ],
        shows: "Operations that override start() and announce their own state, by hand and in queues.",
        lookFor: "start() returns before the work runs on its own thread; dependents wait for isFinished.",
        run: run
    )

    private static let ran = ["isExecuting NO→YES", "isExecuting YES→NO", "isFinished NO→YES"]

    static func run(_ log: DemoLog) {
        listingStartedByHand(log)
        listingInQueue(log)
        myOperationStartedByHand(log)
        myOperationsInQueue(log)
    }

    /// Listings 2-5..2-7: start() returns at once; main() runs on a new thread.
    private static func listingStartedByHand(_ log: DemoLog) {
        log.section("1. Listings 2-5..2-7: MyOperation started by hand")
        let recorder = StateRecorder(log: log)
        let startReturned = Gate()
        let waited = Mutex(true)
        let op = ListingOperation("op", log: log) {
            // The work waits until start() has returned, proving start() did not wait for it.
            let opened = startReturned.wait(seconds: 5)
            waited.withLock { $0 = opened }
            log.note("op does the main work")
        }
        recorder.watch(op, as: "op", printInitialValues: false)
        log.note("op.isConcurrent = \(yesNo(op.isConcurrent))")
        log.note("calling op.start()")
        op.start()
        log.note("op.start() returned")
        startReturned.open()
        let finished = op.waitUntilFinished(timeout: .seconds(5))
        recorder.stop()

        log.check(finished, "waitUntilFinished returned within 5 s: completeOperation's isFinished announcement finished it")
        log.check(waited.withLock { $0 }, "start() returned before main() did its work (asynchronous with respect to the caller)")
        log.checkOrder(["calling op.start()", "op isExecuting NO→YES", "op.start() returned", "op does the main work",
                        "op completeOperation()", "op isExecuting YES→NO", "op isFinished NO→YES"],
                       "isExecuting NO→YES inside start(); the work and completeOperation() after start() returned")
        log.checkStateChanges(of: "op", equal: ran, "state changes: isExecuting NO→YES, YES→NO, isFinished NO→YES")
        log.checkThreads(of: ["op main() on its own thread"], startWith: "detached.", "main() ran on the thread start() detached")
    }

    /// Listing 2-7's final announcement releases a dependent; a cancelled
    /// one finishes from start() without main().
    private static func listingInQueue(_ log: DemoLog) {
        log.section("2. Listings 2-5..2-7 in a queue: a dependent waits for completeOperation(); a cancelled one never runs main()")
        let recorder = StateRecorder(log: log)
        let queue = OperationQueue()
        queue.name = "listing 2-6"
        let worker = ListingOperation("worker", log: log) {}
        let dependent = BlockOperation { log.note("dependent runs") }
        let cancelled = ListingOperation("cancelled", log: log) {}
        recorder.watch(worker, as: "worker", printInitialValues: false)
        recorder.watch(dependent, as: "dependent", printInitialValues: false)
        recorder.watch(cancelled, as: "cancelled", printInitialValues: false)
        dependent.addDependency(worker)
        cancelled.cancel()
        queue.addOperations([dependent, cancelled, worker], waitUntilFinished: false)
        let drained = queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10))
        recorder.stop()

        log.check(drained, "the queue finished all three within 10 s", detail: "still queued: \(queue.operations.map { $0.name ?? "?" })")
        log.checkStateChanges(of: "worker", equal: ran, "worker: executing, then finished by completeOperation()")
        log.checkOrder(["worker completeOperation()", "dependent isReady NO→YES", "dependent runs"],
                       "the dependent ran only after the worker announced isFinished")
        log.checkOrder(["dependent isReady NO→YES", "worker isFinished NO→YES"],
                       "finishing released the dependent before isFinished observers were told")
        log.checkStateChanges(of: "dependent", equal: ["isReady YES→NO", "isReady NO→YES"] + ran,
                              "dependent: not ready until the worker finished, then runs")
        log.checkStateChanges(of: "cancelled", equal: ["isCancelled NO→YES", "isReady YES→YES", "isFinished NO→YES"],
                              "cancelled: isCancelled NO→YES, then start() moved it straight to finished")
        log.check(log.count(of: "cancelled main() on its own thread") == 0, "the cancelled operation never ran main()")
        log.checkThreads(of: ["worker main() on its own thread"], startWith: "detached.", "the worker's main() ran on its own detached thread")
    }

    /// The concurrent-operation article's runOperations: MyOperation and a BlockOperation started by hand.
    private static func myOperationStartedByHand(_ log: DemoLog) {
        log.section("3. the article's MyOperation and a BlockOperation started by hand")
        let recorder = StateRecorder(log: log)
        let bothReturned = Gate()
        let waited = Mutex(true)
        let caller = ThreadInfo.label()
        let myOperation = MyOperation("myOperation", log: log) {
            let opened = bothReturned.wait(seconds: 5)
            waited.withLock { $0 = opened }
            log.note("this is MyOperation")
        }
        let blockOperation = BlockOperation()
        blockOperation.name = "blockOperation"
        blockOperation.addExecutionBlock { log.note("this is block Operation") }
        recorder.watch(myOperation, as: "myOperation", printInitialValues: false)
        myOperation.start()
        blockOperation.start()
        log.note("both start() calls returned")
        bothReturned.open()
        let finished = myOperation.waitUntilFinished(timeout: .seconds(5))
        recorder.stop()

        log.check(finished, "myOperation finished within 5 s")
        log.check(waited.withLock { $0 }, "myOperation's start() returned before its action ran")
        log.checkOrder(["myOperation isReady YES→NO", "myOperation isExecuting NO→YES", "this is block Operation",
                        "both start() calls returned", "this is MyOperation",
                        "myOperation isExecuting YES→NO", "myOperation isFinished NO→YES"],
                       "start() announced isReady and isExecuting and returned; the block operation ran meanwhile; then the action and the finish")
        log.checkStateChanges(of: "myOperation", equal: ["isReady YES→NO"] + ran,
                              "myOperation: isReady YES→NO, isExecuting NO→YES, YES→NO, isFinished NO→YES")
        log.checkThreads(of: ["this is MyOperation"], startWith: "MyOp.Thread", "MyOperation's action ran on MyOp.Thread")
        log.checkThreads(of: ["this is block Operation"], startWith: caller,
                         "the block operation ran synchronously on the calling thread (\(caller))")
    }

    /// The concurrent-operation article's second queue example: MyOperations share one thread, so they
    /// run one after the other, while a block operation runs beside them.
    private static func myOperationsInQueue(_ log: DemoLog) {
        log.section("4. the article's MyOperations and a BlockOperation in a suspended queue (max 5), then resumed")
        let recorder = StateRecorder(log: log)
        let meter = ConcurrencyMeter()
        let beside = Rendezvous(parties: 2)
        let met = Mutex(0)
        @Sendable func meet() {
            if beside.arrive(seconds: 5) { met.withLock { $0 += 1 } }
        }
        let myOperation01 = MyOperation("myOperation01", log: log) {
            meter.measure {
                log.note("this is 01 MyOperation")
                meet()
            }
        }
        let myOperation02 = MyOperation("myOperation02", log: log) {
            meter.measure { log.note("this is 02 MyOperation") }
        }
        let myOperation03 = MyOperation("myOperation03", log: log) {
            log.note("this is 03 MyOperation")
        }
        let blockOperation01 = BlockOperation {
            log.note("this is no.1 block Operation")
            meet()
        }
        blockOperation01.name = "blockOperation01"
        recorder.watch(myOperation01, as: "myOperation01", printInitialValues: false)
        recorder.watch(myOperation02, as: "myOperation02", printInitialValues: false)
        recorder.watch(myOperation03, as: "myOperation03", printInitialValues: false)
        let queue = OperationQueue()
        queue.name = "004 MyOperation"
        queue.isSuspended = true
        queue.maxConcurrentOperationCount = 5
        queue.addOperation(myOperation01)
        queue.addOperation(myOperation02)
        queue.addOperation(myOperation03)
        queue.addOperation(blockOperation01)
        myOperation03.cancel()
        log.note("cancelled myOperation03; resuming the queue")
        queue.isSuspended = false
        let drained = queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10))
        recorder.stop()

        log.check(drained, "the queue finished all four within 10 s: each MyOperation's isFinished announcement retired it",
                  detail: "still queued: \(queue.operations.map { $0.name ?? "?" })")
        log.check(met.withLock { $0 } == 2, "myOperation01 and the block operation ran at the same time",
                  detail: "they did not meet within 5 s")
        log.checkThreads(of: ["this is 01 MyOperation", "this is 02 MyOperation"], startWith: "MyOp.Thread",
                         "both MyOperations ran their actions on the one MyOp.Thread")
        log.check(meter.peak == 1, "so myOperation01 and myOperation02 never ran at the same time",
                  detail: "\(meter.peak) ran at once")
        log.checkThreads(of: ["this is no.1 block Operation"], startWith: "ops.worker.", "the block operation ran on a library worker thread")
        for name in ["myOperation01", "myOperation02"] {
            log.checkStateChanges(of: name, equal: ["isReady YES→NO"] + ran, "\(name): isReady YES→NO and isExecuting NO→YES in start(), then finished")
        }
        log.check(log.count(of: "this is 03 MyOperation") == 0, "the cancelled myOperation03 never ran its action")
        log.checkStateChanges(
            of: "myOperation03",
            equal: ["isCancelled NO→YES", "isReady YES→NO"] + ran,
            "myOperation03: cancelled, then started by the queue and finished without its action"
        )
    }
}
