import Operations

/// The state-sequences article's `TestBlockOperation`: a block operation that reports when
/// `start()`, `main()` and `cancel()` are entered and left, so that the state
/// changes can be placed among them.
final class TestBlockOperation: BlockOperation, @unchecked Sendable {
    // @unchecked Sendable: adds only `label` and `log`, both immutable; the
    // base class guards its own state.
    private let label: String
    private let log: DemoLog

    init(_ label: String, log: DemoLog, block: @escaping @Sendable () -> Void) {
        self.label = label
        self.log = log
        super.init()
        name = label
        addExecutionBlock(block)
    }

    override func start() {
        log.note("\(label) before start")
        super.start()
        log.note("\(label) after start")
    }

    override func main() {
        log.note("\(label) before main")
        super.main()
        log.note("\(label) after main")
    }

    override func cancel() {
        log.note("\(label) before cancel")
        super.cancel()
        log.note("\(label) after cancel")
    }
}

/// `state-sequences`: the state-sequences article's four recorded sequences of
/// isReady / isCancelled / isExecuting / isFinished.
enum StateSequencesDemo {
    static let demo = DemoCase(
        name: "state-sequences",
        summary: "state changes announced for start+cancel, cancel+start, queues, a dependency",
        sources: [DemoCitation(.stateSequencesArticle, "Operation操作流程 (the operation's course): start then cancel; cancel then start; a queue without, then with, a dependency")],
        shows: "Which of isReady/isCancelled/isExecuting/isFinished change, and in which order.",
        lookFor: "Cancel after start changes nothing; cancel before start: isReady YES→YES, no executing.",
        run: run
    )

    private static let ran = ["isExecuting NO→YES", "isExecuting YES→NO", "isFinished NO→YES"]

    static func run(_ log: DemoLog) {
        startThenCancel(log)
        cancelThenStart(log)
        queueWithoutDependency(log)
        queueWithDependency(log)
    }

    /// The state-sequences article, "先執行start，後執行cancel": the operation runs; the late cancel
    /// changes nothing.
    private static func startThenCancel(_ log: DemoLog) {
        log.section("1. start, then cancel")
        let recorder = StateRecorder(log: log)
        let op = TestBlockOperation("op", log: log) {
            log.note("enter op")
            log.note("leave op")
        }
        let initial = recorder.watch(op, as: "op")
        op.completionBlock = { log.note("All task finished.") }
        op.start()
        op.cancel()
        _ = log.waitForLines(["All task finished."])
        recorder.stop()
        log.say("     (As in Foundation, the completion block is handed to another thread before the\n" +
                "      isExecuting/isFinished observers are told, and runs asynchronously: the article prints\n" +
                "      \"All task finished.\" ahead of them; here it may print before or after them.)")

        recorder.checkFresh(initial, as: "op")
        log.checkStateChanges(of: "op", equal: ran, "state changes: isExecuting NO→YES, then YES→NO and isFinished NO→YES; nothing on cancel")
        log.checkOrder(
            ["op before start", "op isExecuting NO→YES", "op before main", "enter op", "leave op", "op after main",
             "op isExecuting YES→NO", "op isFinished NO→YES", "op after start",
             "op before cancel", "op after cancel"],
            "isExecuting turns YES before main() and back after it, and isFinished after it"
        )
        checkCompletionBlock("All task finished.", after: "op after main", startedByHand: true, log)
        log.check(!op.isCancelled && op.isFinished, "cancelling a finished operation leaves it finished and not cancelled",
                  detail: "isCancelled=\(yesNo(op.isCancelled)) isFinished=\(yesNo(op.isFinished))")
    }

    /// The state-sequences article, "先執行cancel，後執行start": cancel makes it ready (YES→YES) and
    /// start finishes it without calling main().
    private static func cancelThenStart(_ log: DemoLog) {
        log.section("2. cancel, then start")
        let recorder = StateRecorder(log: log)
        let op = TestBlockOperation("op", log: log) {
            log.note("enter op")
            log.note("leave op")
        }
        let initial = recorder.watch(op, as: "op")
        op.completionBlock = { log.note("All task finished.") }
        op.cancel()
        op.start()
        _ = log.waitForLines(["All task finished."])
        recorder.stop()

        recorder.checkFresh(initial, as: "op")
        log.checkStateChanges(
            of: "op",
            equal: ["isCancelled NO→YES", "isReady YES→YES", "isFinished NO→YES"],
            "state changes: isCancelled NO→YES, isReady YES→YES, then isFinished NO→YES; never executing"
        )
        log.checkOrder(
            ["op before cancel", "op isCancelled NO→YES", "op isReady YES→YES", "op after cancel",
             "op before start", "op isFinished NO→YES", "op after start"],
            "cancel announces isCancelled then isReady; start finishes the operation"
        )
        log.check(log.count(of: "op before main") == 0 && log.count(of: "enter op") == 0,
                  "main() never ran", detail: "main() or the block ran")
        checkCompletionBlock("All task finished.", after: "op before start", startedByHand: true, log)
    }

    /// The state-sequences article, "NSOperationQueue 但是沒有依賴": bp1 and bp2 run at the same time.
    private static func queueWithoutDependency(_ log: DemoLog) {
        log.section("3. a queue, no dependency: bp1 and bp2 run at the same time")
        let recorder = StateRecorder(log: log)
        let together = Rendezvous(parties: 2)
        let overlap = Rendezvous.poolCanOverlap
        let (bp1, bp2) = (
            blockOperation("bp1", log: log, meeting: overlap ? together : nil),
            blockOperation("bp2", log: log, meeting: overlap ? together : nil)
        )
        let initial1 = recorder.watch(bp1, as: "bp1")
        let initial2 = recorder.watch(bp2, as: "bp2")
        let queue = OperationQueue()
        queue.name = "003 no dependency"
        queue.addOperation(bp1)
        queue.addOperation(bp2)
        let drained = queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10))
        // The queue is empty once the operations have finished; their
        // `start()` overrides may still be returning on the workers, as in
        // Foundation. Their last lines are waited for (one CI run checked
        // before bp2's was recorded).
        _ = log.waitForLines(["bp1 after start", "bp2 after start", "bp1 complete", "bp2 complete"])
        recorder.stop()

        log.check(drained, "the queue finished bp1 and bp2 within 10 s")
        recorder.checkFresh(initial1, as: "bp1")
        recorder.checkFresh(initial2, as: "bp2")
        for name in ["bp1", "bp2"] {
            log.checkStateChanges(of: name, equal: ran, "\(name): isExecuting NO→YES, YES→NO, isFinished NO→YES")
            log.checkOrder(
                ["\(name) before start", "\(name) isExecuting NO→YES", "\(name) before main", "enter \(name)",
                 "leave \(name)", "\(name) after main", "\(name) isExecuting YES→NO", "\(name) isFinished NO→YES",
                 "\(name) after start"],
                "\(name): its lifecycle in order"
            )
            checkCompletionBlock("\(name) complete", after: "\(name) after main", log)
        }
        if overlap {
            let entered = ["enter bp1", "enter bp2"].compactMap { log.position(of: $0) }
            let left = ["leave bp1", "leave bp2"].compactMap { log.position(of: $0) }
            log.check(
                entered.count == 2 && left.count == 2 && entered.max()! < left.min()!,
                "bp1 and bp2 ran at the same time: both entered before either left",
                detail: "they did not overlap within 5 s"
            )
        } else {
            log.note("(one processor: the pool has one worker, so bp1 and bp2 are not required to overlap)")
        }
        log.checkThreads(of: ["enter bp1", "enter bp2"], startWith: "ops.worker.", "bp1 and bp2 ran on the library's worker threads")
    }

    /// The state-sequences article, "NSOperationQueue 但是有依賴": bp1 depends on bp2, so bp2 runs first
    /// although bp1 was added first.
    private static func queueWithDependency(_ log: DemoLog) {
        log.section("4. a queue, bp1 depends on bp2")
        let recorder = StateRecorder(log: log)
        let bp1 = blockOperation("bp1", log: log, meeting: nil)
        let bp2 = blockOperation("bp2", log: log, meeting: nil)
        recorder.watch(bp1, as: "bp1")
        recorder.watch(bp2, as: "bp2")
        let queue = OperationQueue()
        queue.name = "003 dependency"
        log.note("bp1 before addDependency:")
        bp1.addDependency(bp2)
        log.note("bp1 after addDependency:")
        queue.addOperation(bp1)
        queue.addOperation(bp2)
        let drained = queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10))
        // As above: the `start()` overrides may still be returning, and the
        // completion blocks running.
        _ = log.waitForLines(["bp1 after start", "bp2 after start", "bp1 complete", "bp2 complete"])
        recorder.stop()

        log.check(drained, "the queue finished bp1 and bp2 within 10 s")
        log.checkStateChanges(of: "bp1", equal: ["isReady YES→NO", "isReady NO→YES"] + ran,
                              "bp1: isReady YES→NO at addDependency, NO→YES when bp2 finished, then runs")
        log.checkStateChanges(of: "bp2", equal: ran, "bp2: isExecuting NO→YES, YES→NO, isFinished NO→YES")
        log.checkOrder(["bp1 before addDependency:", "bp1 isReady YES→NO", "bp1 after addDependency:"],
                       "addDependency: turned bp1's isReady to NO")
        log.checkOrder(
            ["leave bp2", "bp2 after main", "bp1 isReady NO→YES", "bp2 isFinished NO→YES", "bp2 after start"],
            "as in the article, bp1 became ready after bp2's main() and before bp2's isFinished observers"
        )
        checkCompletionBlock("bp2 complete", after: "bp2 after main", log)
        log.checkOrder(["bp1 isReady NO→YES", "bp1 before start", "bp1 isExecuting NO→YES", "enter bp1", "bp1 complete"],
                       "bp1 started only once ready")
    }

    /// Checks that the completion block that logs `line` ran once, after
    /// the operation's work ended (`workEnded`); for an operation started by
    /// hand (`startedByHand`), on a thread other than the caller's: as in
    /// Foundation (the article's output shows the block on another thread,
    /// ahead of the isExecuting/isFinished observers), it is handed to a
    /// worker before those observers are told and runs asynchronously (on
    /// a worker that may be the one that ran a queued operation, once it is
    /// free), so it may print before or after them.
    private static func checkCompletionBlock(_ line: String, after workEnded: String, startedByHand: Bool = false, _ log: DemoLog) {
        log.check(log.count(of: line) == 1, "the completion block ran exactly once",
                  detail: "it ran \(log.count(of: line)) times")
        log.checkOrder([workEnded, line], "the completion block ran after the operation's work ended")
        if startedByHand {
            log.check(log.thread(of: line) != log.thread(of: workEnded),
                      "the completion block ran on another thread, asynchronously, as in Foundation",
                      detail: "it ran on \(log.thread(of: line) ?? "?"), the thread that called start()")
        }
    }

    /// The state-sequences article's bp1/bp2: enter, (meet the other), leave; a completion block.
    private static func blockOperation(_ name: String, log: DemoLog, meeting: Rendezvous?) -> TestBlockOperation {
        let operation = TestBlockOperation(name, log: log) {
            log.note("enter \(name)")
            if let meeting, !meeting.arrive(seconds: 5) {
                log.note("\(name) waited 5 s for the other operation to be running too")
            }
            log.note("leave \(name)")
        }
        operation.completionBlock = { log.note("\(name) complete") }
        return operation
    }
}
