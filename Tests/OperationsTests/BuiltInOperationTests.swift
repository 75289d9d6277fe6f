// The ready-made subclasses: BlockOperation (several blocks, concurrently),
// InvocationOperation (a method chosen at run time, its result) and
// AsyncOperation (finishes when finish() is called).

import Dispatch
import Synchronization
import Testing
@testable import Operations

/// The chapter's MyCustomClass (Listing 2-1), in Swift terms.
private final class ImageWorker: Sendable {
    let calls = Recorder<String>()

    func thumbnail(_ size: Int) -> Int {
        calls.record("thumbnail \(size)")
        return size / 4
    }

    func preview(_ size: Int) -> Int {
        calls.record("preview \(size)")
        return size / 2
    }

    func log(_ message: String) {
        calls.record("log \(message)")
    }

    func version() -> String { "1.0" }

    /// Listing 2-1's taskWithData: returns an operation that calls a method.
    func task(with data: Int, preview wantsPreview: Bool) -> InvocationOperation {
        let method = wantsPreview ? ImageWorker.preview : ImageWorker.thumbnail
        return InvocationOperation(target: self, method: method, argument: data)
    }
}

/// An AsyncOperation subclass that finishes from a callback.
private final class DelayedAsyncOperation: AsyncOperation, @unchecked Sendable {
    // @unchecked Sendable: `release` and `executed` are thread-safe.
    let release: Gate
    let executed = Counter()

    init(release: Gate) {
        self.release = release
        super.init()
    }

    override func execute() {
        executed.increment()
        DispatchQueue.global().async { [self] in
            release.wait()
            finish()
        }
    }
}

@Suite("BlockOperation")
struct BlockOperationTests {
    @Test("two blocks of one operation run at the same time (rendezvous)")
    func blocksRunConcurrently() {
        let first = Gate()
        let second = Gate()
        let met = Counter()
        let op = BlockOperation {
            first.open()
            if second.wait(timeout: patience) { met.increment() }
        }
        op.addExecutionBlock {
            second.open()
            if first.wait(timeout: patience) { met.increment() }
        }
        let queue = makeQueue("rendezvous")
        queue.addOperation(op)
        #expect(op.waitUntilFinished(timeout: patience * 2))
        #expect(met.count == 2, "the two blocks did not run concurrently")
    }

    @Test("blocks run concurrently when the operation is started by hand too")
    func blocksRunConcurrentlyManually() {
        let arrived = Latch(count: 3)
        let met = Counter()
        let op = BlockOperation()
        for _ in 0..<3 {
            op.addExecutionBlock {
                arrived.countDown()
                if arrived.wait(timeout: patience) { met.increment() }
            }
        }
        #expect(completesInTime(timeout: patience * 2) { op.start() })
        #expect(met.count == 3)
        #expect(op.isFinished)
    }

    @Test("the operation finishes only after all of its blocks finished")
    func finishesAfterAllBlocks() {
        let slowGate = Gate()
        let fastDone = Gate()
        let slowStarted = Gate()
        let log = Recorder<String>()
        let op = BlockOperation {
            log.record("fast")
            fastDone.open()
        }
        op.addExecutionBlock {
            slowStarted.open()
            slowGate.wait()
            log.record("slow")
        }
        op.completionBlock = { log.record("completion") }
        let queue = makeQueue("all-blocks")
        queue.addOperation(op)
        #expect(fastDone.wait())
        #expect(slowStarted.wait())
        #expect(staysFalse { op.isFinished }, "finished while a block was still running")
        #expect(op.isExecuting)
        slowGate.open()
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(waitUntil { log.count == 3 })
        #expect(log.events.last == "completion")
        #expect(Set(log.events) == ["fast", "slow", "completion"])
    }

    @Test("with several blocks, the first runs on the thread that runs the operation, as documented (probe 51)")
    func firstBlockOnStartingThread() {
        // Helpers were submitted before the starting thread claimed the first
        // block, and a worker already awake could take it: a main-actor
        // first block of an operation of `OperationQueue.main` then ran off
        // the main queue.
        let offThread = Counter()
        for _ in 0..<2_000 {
            let caller = Platform.currentThreadToken()
            let op = BlockOperation {
                if Platform.currentThreadToken() != caller { offThread.increment() }
            }
            for _ in 0..<7 { op.addExecutionBlock {} }
            op.start()
        }
        #expect(offThread.count == 0)
    }

    @Test("many blocks all run exactly once")
    func manyBlocks() {
        let runs = Recorder<Int>()
        let op = BlockOperation()
        for index in 0..<50 {
            op.addExecutionBlock { runs.record(index) }
        }
        #expect(op.executionBlocks.count == 50)
        let queue = makeQueue("many-blocks")
        queue.addOperation(op)
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(runs.events.sorted() == Array(0..<50))
    }

    @Test("executionBlocks keeps the order of every block, the first one included")
    func executionBlocksOrder() {
        let calls = Recorder<Int>()
        let op = BlockOperation { calls.record(0) }
        for index in 1..<5 { op.addExecutionBlock { calls.record(index) } }
        for block in op.executionBlocks { block() }
        #expect(calls.events == [0, 1, 2, 3, 4])
        let empty = BlockOperation()
        #expect(empty.executionBlocks.isEmpty)
        empty.addExecutionBlock { calls.record(5) }
        #expect(empty.executionBlocks.count == 1)
    }

    @Test("a block's captures are released once it has run, even while helper jobs are still queued (regression: probe D5)")
    func blocksReleasedWhenRun() {
        // Many blocks: the starting thread claims most of them itself and
        // returns while most of the helper jobs (one per extra block) are
        // still waiting for a worker. They used to hold every block until
        // the last of them ran.
        for _ in 0..<20 {
            let tracker = LifetimeTracker()
            let op = BlockOperation()
            do {
                for index in 0..<200 {
                    let captured = tracker.track(Tracked("capture \(index)"))
                    op.addExecutionBlock { _ = captured }
                }
            }
            op.start()
            #expect(op.isFinished)
            let alive = tracker.alive
            #expect(alive.count == 0, "\(alive.count) captures still alive right after start() returned")
            if !alive.isEmpty { break }
        }
    }

    @Test("executionBlocks lists the blocks in order and is emptied once they ran")
    func executionBlocksEmptied() {
        let tracker = LifetimeTracker()
        let op = BlockOperation()
        do {
            let captured = tracker.track(Tracked())
            op.addExecutionBlock { _ = captured }
            op.addExecutionBlock {}
        }
        #expect(op.executionBlocks.count == 2)
        op.start()
        #expect(op.executionBlocks.isEmpty)
        #expect(tracker.waitForRelease().isEmpty, "blocks are released once they ran")
    }

    @Test("a BlockOperation without blocks finishes")
    func noBlocks() {
        let op = BlockOperation()
        op.start()
        #expect(op.isFinished)
    }

    @Test("a cancelled BlockOperation runs none of its blocks")
    func cancelledRunsNoBlocks() {
        let ran = Counter()
        let op = BlockOperation { ran.increment() }
        op.addExecutionBlock { ran.increment() }
        op.cancel()
        op.start()
        #expect(ran.count == 0)
        #expect(op.isFinished)
    }
}

@Suite("InvocationOperation")
struct InvocationOperationTests {
    @Test("the method is chosen at run time and its result kept", arguments: [false, true])
    func methodChosenAtRunTime(preview: Bool) {
        let worker = ImageWorker()
        let op = worker.task(with: 400, preview: preview)
        let queue = makeQueue("invocation")
        queue.addOperations([op], waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(op.isFinished)
        #expect(op.result as? Int == (preview ? 200 : 100))
        #expect(worker.calls.events == [preview ? "preview 400" : "thumbnail 400"])
    }

    @Test("a Void method gives a nil result")
    func voidMethod() {
        let worker = ImageWorker()
        let op = InvocationOperation(target: worker, method: ImageWorker.log, argument: "hello")
        op.start()
        #expect(op.isFinished)
        #expect(op.result == nil)
        #expect(worker.calls.events == ["log hello"])
    }

    @Test("a method returning nil gives a nil result; a non-nil optional casts to its value")
    func optionalResult() {
        final class Lookup: Sendable {
            func find(_ key: String) -> Int? { key == "answer" ? 42 : nil }
        }
        let lookup = Lookup()
        let missing = InvocationOperation(target: lookup, method: Lookup.find, argument: "nothing")
        missing.start()
        #expect(missing.result == nil)
        let found = InvocationOperation(target: lookup, method: Lookup.find, argument: "answer")
        found.start()
        #expect(found.result as? Int == 42)
    }

    @Test("a method without arguments")
    func noArgumentMethod() {
        let worker = ImageWorker()
        let op = InvocationOperation(target: worker, method: ImageWorker.version)
        op.start()
        #expect(op.result as? String == "1.0")
    }

    @Test("a prepared invocation")
    func preparedInvocation() {
        let op = InvocationOperation { 6 * 7 }
        #expect(op.result == nil, "no result before it ran")
        op.start()
        #expect(op.result as? Int == 42)
    }

    @Test("the target is released once the operation has run")
    func targetReleased() {
        let tracker = LifetimeTracker()
        let op: InvocationOperation
        do {
            let worker = tracker.track(ImageWorker())
            op = InvocationOperation(target: worker, method: ImageWorker.thumbnail, argument: 8)
        }
        #expect(tracker.alive.count == 1, "the operation keeps its target until it runs")
        op.start()
        #expect(tracker.waitForRelease().isEmpty)
        #expect(op.result as? Int == 2)
    }
}

@Suite("AsyncOperation")
struct AsyncOperationTests {
    @Test("block form: stays executing after start() until finish()")
    func blockForm() {
        let release = Gate()
        let completion = Counter()
        let op = AsyncOperation { operation in
            DispatchQueue.global().async {
                release.wait()
                operation.finish()
            }
        }
        op.completionBlock = { completion.increment() }
        #expect(op.isAsynchronous)
        #expect(op.isConcurrent)
        op.start()
        #expect(op.isExecuting)
        #expect(staysFalse { op.isFinished })
        #expect(completion.count == 0)
        release.open()
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(op.isFinished && !op.isExecuting)
        #expect(waitUntil { completion.count == 1 })
    }

    @Test("subclass form: execute() and finish() from a callback, in a queue with a dependent")
    func subclassForm() {
        let release = Gate()
        let op = DelayedAsyncOperation(release: release)
        let order = Recorder<String>()
        op.completionBlock = { order.record("async done") }
        let dependent = BlockOperation { [unowned op] in
            order.record(op.isFinished ? "dependent after finish" : "dependent before finish")
        }
        dependent.addDependency(op)
        let queue = makeQueue("async-subclass")
        queue.addOperations([dependent, op], waitUntilFinished: false)
        #expect(waitUntil { op.isExecuting })
        #expect(staysFalse { dependent.isExecuting || dependent.isFinished })
        #expect(queue.operationCount == 2)
        release.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(op.executed.count == 1)
        // Dependents are released when the operation finishes, before its
        // completion block runs (the order of article 003), so the two may
        // interleave; the dependent always sees the operation finished.
        #expect(waitUntil { order.count == 2 })
        #expect(order.events.sorted() == ["async done", "dependent after finish"])
    }

    @Test("finish() called synchronously inside the block")
    func finishInsideBlock() {
        let op = AsyncOperation { $0.finish() }
        op.start()
        #expect(op.isFinished)
    }

    @Test("cancelled before start, it finishes without running its work")
    func cancelledBeforeStart() {
        let ran = Counter()
        let op = AsyncOperation { operation in
            ran.increment()
            operation.finish()
        }
        let subclassed = DelayedAsyncOperation(release: Gate())
        op.cancel()
        subclassed.cancel()
        op.start()
        let queue = makeQueue("async-cancelled")
        queue.addOperation(subclassed)
        #expect(subclassed.waitUntilFinished(timeout: patience))
        #expect(ran.count == 0)
        #expect(subclassed.executed.count == 0)
        #expect(op.isFinished && subclassed.isFinished)
    }

    @Test("cancelled while running: the work sees isCancelled and finishes")
    func cancelledWhileRunning() {
        let op = AsyncOperation { operation in
            DispatchQueue.global().async {
                _ = waitUntil { operation.isCancelled }
                operation.finish()
            }
        }
        let queue = makeQueue("async-cancel-running")
        queue.addOperation(op)
        #expect(waitUntil { op.isExecuting })
        op.cancel()
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(op.isCancelled)
    }

    @Test("finish() twice is harmless: one completion, one retirement")
    func finishTwice() {
        let completion = Counter()
        let op = AsyncOperation { operation in
            operation.finish()
            operation.finish()
        }
        op.completionBlock = { completion.increment() }
        let queue = makeQueue("finish-twice", width: 1)
        queue.addOperation(op)
        #expect(op.waitUntilFinished(timeout: patience))
        op.finish()
        #expect(waitUntil { completion.count == 1 })
        let next = Gate()
        queue.addOperation { next.open() }
        #expect(next.wait(), "the serial queue stalled after a double finish")
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(queue.operationCount == 0)
        expectQueueInvariants(queue)
    }

    @Test("an async operation holds its queue slot until it finishes")
    func holdsSlot() {
        let release = Gate()
        let op = AsyncOperation { operation in
            DispatchQueue.global().async {
                release.wait()
                operation.finish()
            }
        }
        let behind = Gate()
        let queue = makeQueue("async-slot", width: 1)
        queue.addOperation(op)
        queue.addOperation { behind.open() }
        #expect(staysFalse { behind.opened }, "ran while the async operation held the only slot")
        release.open()
        #expect(behind.wait())
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }
}
