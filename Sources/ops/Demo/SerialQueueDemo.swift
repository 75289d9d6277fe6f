import Operations
import Synchronization

/// Counts how many operations run at once, and the most seen.
final class ConcurrencyMeter: Sendable {
    // Sendable: `counts` is a Mutex.
    private let counts = Mutex((now: 0, peak: 0))

    /// Runs `body`, counted as running.
    func measure(_ body: () -> Void) {
        counts.withLock { counts in
            counts.now += 1
            counts.peak = max(counts.peak, counts.now)
        }
        body()
        counts.withLock { $0.now -= 1 }
    }

    /// The most operations seen running at once.
    var peak: Int { counts.withLock { $0.peak } }
}

/// `serial-queue`: the state-sequences article's queue with maxConcurrentOperationCount = 1
/// (operation1…3, a completion block on operation2), then the same with 2.
enum SerialQueueDemo {
    static let demo = DemoCase(
        name: "serial-queue",
        summary: "width 1 runs operation1..3 one at a time, in order; width 2, two at a time",
        sources: [DemoCitation(.stateSequencesArticle, "NSOperationQueue: maxConcurrentOperationCount = 1, then 2 (operation1..3); the simple custom SAMOperation")],
        shows: "A queue of width 1 runs operations one by one in the order added; width 2, two at once.",
        lookFor: "Width 1: each \"isFinished NO→YES\" before the next start; width 2: two overlap.",
        run: run
    )

    static func run(_ log: DemoLog) {
        serial(log)
        widthTwo(log)
        waitingCaller(log)
    }

    private static func serial(_ log: DemoLog) {
        log.section("1. maxConcurrentOperationCount = 1")
        let meter = ConcurrencyMeter()
        let queue = OperationQueue()
        queue.name = "003 serial"
        queue.maxConcurrentOperationCount = 1
        let recorder = StateRecorder(log: log)
        let operations = (1...3).map { number in
            BlockOperation { meter.measure { log.note("operation\(number)") } }
        }
        operations[1].completionBlock = { log.note("operation2-completionBlock") }
        for (index, operation) in operations.enumerated() {
            recorder.watch(operation, as: "operation\(index + 1)", printInitialValues: false)
        }
        for operation in operations { queue.addOperation(operation) }
        let drained = queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10))
        // The completion block runs asynchronously, as in Foundation: the
        // wait does not wait for it.
        _ = log.waitForLines(["operation2-completionBlock"])
        recorder.stop()

        log.check(drained, "waitUntilAllOperationsAreFinished returned within 10 s")
        log.checkOrder(["operation1", "operation2", "operation3"],
                       "the operations ran in the order they were added, as if each depended on the previous one")
        log.checkOrder(["operation1 isFinished NO→YES", "operation2 isExecuting NO→YES",
                        "operation2 isFinished NO→YES", "operation3 isExecuting NO→YES"],
                       "each operation started only after the previous one had finished")
        log.checkOrder(["operation2", "operation2-completionBlock"],
                       "operation2's completion block ran after operation2's work")
        log.say("     (operation3 starts only after operation2 announced isFinished. operation2 has left the queue\n" +
                "      when its completion block is handed to another thread, before its isFinished observers are\n" +
                "      told: as on Darwin, whose output in the article shows the block on another thread, the block\n" +
                "      may run before, while or after operation3 starts.)")
        log.check(meter.peak == 1, "never more than one operation ran at a time", detail: "\(meter.peak) ran at once")
        log.checkThreads(of: ["operation1", "operation2", "operation3"], startWith: "ops.worker.",
                         "they ran on the library's worker threads")
    }

    private static func widthTwo(_ log: DemoLog) {
        log.section("2. maxConcurrentOperationCount = 2")
        let meter = ConcurrencyMeter()
        let overlap = Rendezvous.poolCanOverlap
        let together = Rendezvous(parties: 2)
        let met = Mutex(0)
        let queue = OperationQueue()
        queue.name = "003 width 2"
        queue.maxConcurrentOperationCount = 2
        let operations = (1...3).map { number in
            let operation = BlockOperation {
                meter.measure {
                    log.note("operation\(number)")
                    // operation1 and operation2 wait for each other: both must run at once.
                    if overlap, number < 3, together.arrive(seconds: 5) {
                        met.withLock { $0 += 1 }
                    }
                }
            }
            operation.name = "operation\(number)"
            return operation
        }
        operations[1].completionBlock = { log.note("operation2-completionBlock") }
        let recorder = StateRecorder(log: log)
        for operation in operations {
            recorder.watch(operation, as: operation.name ?? "?", printInitialValues: false)
        }
        for operation in operations { queue.addOperation(operation) }
        let drained = queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10))
        // The completion block runs asynchronously, as in Foundation: the
        // wait does not wait for it.
        _ = log.waitForLines(["operation2-completionBlock"])
        recorder.stop()

        log.check(drained, "waitUntilAllOperationsAreFinished returned within 10 s")
        log.check(meter.peak <= 2, "never more than two operations ran at a time", detail: "\(meter.peak) ran at once")
        if overlap {
            log.check(met.withLock { $0 } == 2, "operation1 and operation2 ran at the same time",
                      detail: "they did not meet within 5 s")
        }
        log.check(["operation1", "operation2", "operation3", "operation2-completionBlock"].allSatisfy { log.count(of: $0) == 1 },
                  "each operation and the completion block ran once")
    }

    /// The state-sequences article's simple custom operation (`SAMOperation`, only `main`), and what
    /// `waitUntilAllOperationsAreFinished` does to the caller's order.
    private static func waitingCaller(_ log: DemoLog) {
        log.section("3. a simple custom operation; the caller waits with waitUntilAllOperationsAreFinished")
        let queue = OperationQueue()
        queue.name = "003 SAMOperation"
        log.note("begin func")
        let operation = SAMOperation(log: log)
        operation.name = "SAMOperation"
        queue.addOperation(operation)
        let drained = queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10))
        log.note("end func")

        log.check(drained, "waitUntilAllOperationsAreFinished returned within 10 s")
        log.checkOrder(["begin func", "Begin", "End", "end func"],
                       "the caller printed \"end func\" only after the operation's main() ended")
        log.checkThreads(of: ["Begin"], startWith: "ops.worker.", "main() ran on a library worker thread")
    }
}

/// The state-sequences article's `SAMOperation`: a non-concurrent operation that only
/// overrides `main()` and checks for cancellation first.
final class SAMOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: adds only `log`, which is immutable.
    private let log: DemoLog

    init(log: DemoLog) {
        self.log = log
        super.init()
    }

    override func main() {
        guard !isCancelled else { return }
        log.note("Begin")
        log.note("End")
    }
}
