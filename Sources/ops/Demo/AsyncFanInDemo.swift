import Dispatch
import Operations
import Synchronization

/// The async-operation article's `TestClass`: one synchronous method and two asynchronous
/// ones that finish on a concurrent dispatch queue and call back.
///
/// To show deterministically that the two asynchronous methods run at the
/// same time, each one's background work waits (bounded) until both have
/// begun, instead of the article's busy loop.
final class FanInTestClass: Sendable {
    // Sendable: `begun` is a Mutex; the rest is immutable or thread-safe.
    private let queue = DispatchQueue(label: "TestClass_background_queue", attributes: .concurrent)
    private let log: DemoLog
    private let begun = Mutex(0)
    private let bothBegun = Gate()
    /// Whether each background task saw the other method begin in time.
    let sawBothBegin = Mutex<[Bool]>([])

    init(log: DemoLog) {
        self.log = log
    }

    func method1() {
        log.note("method 1 begin")
        log.note("method 1 end")
    }

    func asyncMethod1(done: @escaping @Sendable () -> Void) {
        asyncMethod(1, done: done)
    }

    func asyncMethod2(done: @escaping @Sendable () -> Void) {
        asyncMethod(2, done: done)
    }

    private func asyncMethod(_ number: Int, done: @escaping @Sendable () -> Void) {
        log.note("async method \(number) begin")
        if begun.withLock({ count in count += 1; return count }) == 2 { bothBegun.open() }
        queue.async { [self] in
            let both = bothBegun.wait(seconds: 5)
            sawBothBegin.withLock { $0.append(both) }
            log.note("async method \(number) end")
            done()
        }
    }
}

/// `async-fan-in`: the async-operation article. Two asynchronous operations that finish
/// from a callback, and a synchronous one that depends on both.
enum AsyncFanInDemo {
    static let demo = DemoCase(
        name: "async-fan-in",
        summary: "two operations finish from callbacks; a dependent runs after both",
        sources: [DemoCitation(.asyncOperationArticle, "MLAsyncOperation and its test (asyncMethod1, asyncMethod2, then method1)")],
        shows: "An operation that finishes from a callback holds its dependents back until then.",
        lookFor: "Both \"async method N begin\" before either \"end\"; \"method 1 begin\" after both finish.",
        run: run
    )

    /// What an asynchronous operation looked like when its callback arrived,
    /// just before it finished.
    private struct Probe: Sendable {
        let name: String
        let executing: Bool
        let finished: Bool
        let dependentStarted: Bool
    }

    /// What op1's body saw of its dependencies when it began.
    private final class StartSnapshot: Sendable {
        private let state = Mutex<(awaited: [Operation], finished: [Bool]?)>(([], nil))
        func watch(_ operations: [Operation]) { state.withLock { $0.awaited = operations } }
        func record() { state.withLock { $0.finished = $0.awaited.map(\.isFinished) } }
        var finished: [Bool]? { state.withLock { $0.finished } }
    }

    static func run(_ log: DemoLog) {
        log.section("1. asyncOp1 (the article's MLAsyncOperation) and asyncOp2 (the library's AsyncOperation); op1 depends on both")
        let queue = OperationQueue()
        queue.name = "fan-in"
        queue.maxConcurrentOperationCount = 5
        let object = FanInTestClass(log: log)
        let recorder = StateRecorder(log: log)
        let probes = Mutex<[Probe]>([])

        let snapshot = StartSnapshot()
        let op1 = BlockOperation {
            snapshot.record()
            object.method1()
        }
        @Sendable func probe(_ operation: Operation, _ name: String) {
            let sample = Probe(
                name: name,
                executing: operation.isExecuting,
                finished: operation.isFinished,
                dependentStarted: op1.isExecuting || op1.isFinished
            )
            probes.withLock { $0.append(sample) }
        }
        let asyncOp1 = MLAsyncOperation { operation in
            object.asyncMethod1 {
                probe(operation, "asyncOp1")
                operation.finishOperation()
            }
        }
        let asyncOp2 = AsyncOperation { operation in
            object.asyncMethod2 {
                probe(operation, "asyncOp2")
                operation.finish()
            }
        }
        asyncOp1.name = "asyncOp1"
        asyncOp2.name = "asyncOp2"
        op1.name = "op1"
        recorder.watch(asyncOp1, as: "asyncOp1", printInitialValues: false)
        recorder.watch(asyncOp2, as: "asyncOp2", printInitialValues: false)
        recorder.watch(op1, as: "op1", printInitialValues: false)

        snapshot.watch([asyncOp1, asyncOp2])
        op1.addDependency(asyncOp1)
        op1.addDependency(asyncOp2)
        queue.addOperation(asyncOp1)
        queue.addOperation(asyncOp2)
        queue.addOperation(op1)
        let drained = queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10))
        recorder.stop()

        log.check(drained, "the queue finished all three operations within 10 s",
                  detail: "still queued: \(queue.operations.map { $0.name ?? "?" })")
        let running = ["isExecuting NO→YES", "isExecuting YES→NO", "isFinished NO→YES"]
        log.checkStateChanges(of: "asyncOp1", equal: running, "asyncOp1 (MLAsyncOperation): executing until its callback, then finished")
        log.checkStateChanges(of: "asyncOp2", equal: running, "asyncOp2 (AsyncOperation): executing until its callback, then finished")
        log.checkStateChanges(
            of: "op1",
            equal: ["isReady YES→NO", "isReady NO→YES"] + running,
            "op1: not ready once it has dependencies, ready again when both finished, then runs"
        )

        let begins = ["async method 1 begin", "async method 2 begin"].map { log.position(of: $0) }
        let ends = ["async method 1 end", "async method 2 end"].map { log.position(of: $0) }
        let allRecorded = (begins + ends).allSatisfy { $0 != nil }
        log.check(
            allRecorded && begins.compactMap { $0 }.max()! < ends.compactMap { $0 }.min()!,
            "the two async methods ran at the same time: both began before either ended",
            detail: allRecorded ? "an end came before the other begin" : "a begin or end line is missing"
        )
        log.check(
            object.sawBothBegin.withLock { $0 } == [true, true],
            "each background task saw the other async method begin (within 5 s)",
            detail: "saw: \(object.sawBothBegin.withLock { $0 })"
        )
        for name in ["asyncOp1", "asyncOp2"] {
            let sample = probes.withLock { $0.first { $0.name == name } }
            log.check(
                sample.map { $0.executing && !$0.finished && !$0.dependentStarted } ?? false,
                "\(name) was still executing when its callback arrived, long after start() returned, and op1 had not started",
                detail: sample.map { "isExecuting=\(yesNo($0.executing)) isFinished=\(yesNo($0.finished)) op1 started=\(yesNo($0.dependentStarted))" } ?? "the callback never ran"
            )
        }
        log.checkOrder(["async method 1 end", "method 1 begin", "method 1 end"], "the sync method ran after async method 1 ended")
        log.checkOrder(["async method 2 end", "method 1 begin"], "the sync method ran after async method 2 ended")
        // Finishing releases dependents first, then tells isFinished
        // observers: op1 may begin before the "isFinished NO→YES" lines are
        // printed, so its body reads both operations' state instead.
        log.check(
            snapshot.finished == [true, true],
            "asyncOp1 and asyncOp2 had both finished when the sync method began",
            detail: snapshot.finished.map { "isFinished: \($0.map(yesNo))" } ?? "the sync method never ran"
        )
        log.checkOrder(["async method 1 end", "op1 isReady NO→YES", "method 1 begin"], "op1 became ready only after asyncOp1 finished its work")
        log.checkOrder(["async method 2 end", "op1 isReady NO→YES", "method 1 begin"], "op1 became ready only after asyncOp2 finished its work")
        log.checkThreads(of: ["async method 1 begin", "async method 2 begin", "method 1 begin"], startWith: "ops.worker.",
                         "the operations ran on the library's worker threads")
    }
}
