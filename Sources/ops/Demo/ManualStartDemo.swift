import Operations
import Synchronization

/// `manual-start`: the chapter's Listing 2-8, `performOperation:`, which runs
/// an operation without a queue after checking it may run.
enum ManualStartDemo {
    static let demo = DemoCase(
        name: "manual-start",
        summary: "starting operations by hand: ready ones only, concurrent ones on a new thread",
        sources: [DemoCitation(.appleOperationQueues, "Executing Operations Manually (Listing 2-8)")],
        shows: "Running without a queue: ready operations only, concurrent ones on their own thread.",
        lookFor: "\"performOperation(dependent) = NO\" until its dependency ran; start() anyway: a misuse.",
        run: run
    )

    /// Listing 2-8's `performOperation:`. Returns whether the operation was
    /// dealt with; if not, the caller should try again later.
    ///
    /// For a cancelled operation the listing moves it to finished by hand
    /// (announcing on the wrong object, `self`); with this library, as with
    /// Foundation, `start()` does that for a cancelled operation, without
    /// running `main()`.
    static func performOperation(_ operation: Operation) -> Bool {
        var ranIt = false
        if operation.isReady && !operation.isCancelled {
            if !operation.isConcurrent {
                operation.start()
            } else {
                DemoThread.detach(name: "manual.start") { operation.start() }
            }
            ranIt = true
        } else if operation.isCancelled {
            // If it was cancelled before it was started, move it to the finished state.
            operation.start()
            // Set ranIt so that the operation is not passed here again.
            ranIt = true
        }
        return ranIt
    }

    static func run(_ log: DemoLog) {
        let caller = ThreadInfo.label()
        let recorder = StateRecorder(log: log)
        defer { recorder.stop() }

        log.section("1. a ready, non-concurrent operation runs on the calling thread")
        let plain = BlockOperation { log.note("plain operation runs") }
        recorder.watch(plain, as: "plain", printInitialValues: false)
        let ranPlain = performOperation(plain)
        log.note("performOperation(plain) = \(yesNo(ranPlain)); plain.isFinished = \(yesNo(plain.isFinished))")
        log.check(ranPlain && plain.isFinished, "it ran and finished before performOperation returned")
        log.checkThreads(of: ["plain operation runs"], startWith: caller, "it ran on the calling thread (\(caller))")
        log.checkStateChanges(of: "plain", equal: ["isExecuting NO→YES", "isExecuting YES→NO", "isFinished NO→YES"],
                              "plain: executing, then finished, all inside start()")

        log.section("2. a concurrent operation is started on a new thread")
        let concurrent = AsyncOperation { operation in
            log.note("concurrent operation runs (isConcurrent = \(yesNo(operation.isConcurrent)))")
            operation.finish()
        }
        concurrent.name = "concurrent"
        let ranConcurrent = performOperation(concurrent)
        log.note("performOperation(concurrent) = \(yesNo(ranConcurrent))")
        let concurrentFinished = concurrent.waitUntilFinished(timeout: .seconds(5))
        log.check(ranConcurrent && concurrentFinished, "it was started and finished within 5 s")
        log.checkThreads(of: ["concurrent operation runs (isConcurrent = YES)"], startWith: "manual.start",
                         "its start() ran on the new thread")

        log.section("3. an operation that is not ready is not run; the caller tries again later")
        let dependency = BlockOperation { log.note("dependency runs") }
        let dependent = BlockOperation { log.note("dependent runs") }
        dependency.name = "dependency"
        recorder.watch(dependent, as: "dependent", printInitialValues: false)
        dependent.addDependency(dependency)
        var attempts: [Bool] = []
        attempts.append(performOperation(dependent))
        log.note("performOperation(dependent) = \(yesNo(attempts[0])): its dependency has not finished")
        let misuses = Mutex<[OperationMisuse]>([])
        OperationMisuse.withHandler({ misuse in misuses.withLock { $0.append(misuse) } }) {
            dependent.start()
        }
        let reported = misuses.withLock { $0 }
        for misuse in reported { log.note("calling start() anyway is refused: \(misuse.message)") }
        attempts.append(performOperation(dependency))
        log.note("performOperation(dependency) = \(yesNo(attempts[1]))")
        attempts.append(performOperation(dependent))
        log.note("performOperation(dependent) = \(yesNo(attempts[2])) on the second try")
        log.check(attempts == [false, true, true], "performOperation said NO for the dependent, then YES once its dependency had run",
                  detail: "results: \(attempts.map(yesNo))")
        log.check(reported.map(\.code) == [.startNotReady],
                  "start() on the operation that was not ready was reported as a misuse (Foundation raises an exception)",
                  detail: "reported: \(reported.map(\.code))")
        log.checkOrder(["dependency runs", "dependent runs"], "the dependent ran after its dependency")
        log.check(log.count(of: "dependent runs") == 1 && dependent.isFinished, "the dependent ran once and finished")
        log.checkStateChanges(
            of: "dependent",
            equal: ["isReady YES→NO", "isReady NO→YES", "isExecuting NO→YES", "isExecuting YES→NO", "isFinished NO→YES"],
            "dependent: not ready while its dependency was unfinished (the refused start() changed nothing), then ran"
        )

        log.section("4. a cancelled operation is moved to finished without running")
        let doomed = BlockOperation { log.note("cancelled operation runs") }
        recorder.watch(doomed, as: "doomed", printInitialValues: false)
        doomed.cancel()
        let ranDoomed = performOperation(doomed)
        log.note("performOperation(doomed) = \(yesNo(ranDoomed)); doomed.isFinished = \(yesNo(doomed.isFinished))")
        log.check(ranDoomed && doomed.isFinished, "performOperation said YES and the operation is finished")
        log.check(log.count(of: "cancelled operation runs") == 0, "its work never ran")
        log.checkStateChanges(of: "doomed", equal: ["isCancelled NO→YES", "isReady YES→YES", "isFinished NO→YES"],
                              "state changes: isCancelled NO→YES, isReady YES→YES, isFinished NO→YES")
    }
}
