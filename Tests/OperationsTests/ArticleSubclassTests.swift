// The articles' custom subclasses, written as the articles write them:
// 001's MLAsyncOperation (willSet/didSet announcing isExecuting/isFinished,
// finished from a callback) with its fan-in scenario, and 004's
// MyOperation (a state enum, overridden readiness and cancellation, work on
// a dedicated thread) on a suspended queue.

import Dispatch
import Synchronization
import Testing
@testable import Operations

// MARK: Article 001

/// Article 001's MLAsyncOperation: flags with willSet/didSet announcing
/// isExecuting / isFinished, finished by the caller from a callback.
private final class MLAsyncOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: the flags are `@Locked` (mutex-guarded boxes);
    // `block` is set once in init and read in start().
    typealias Block = @Sendable (MLAsyncOperation) -> Void

    @Locked private var ml_executing = false {
        willSet { willChangeValue(forKey: "isExecuting") }
        didSet { didChangeValue(forKey: "isExecuting") }
    }

    @Locked private var ml_finished = false {
        willSet { willChangeValue(forKey: "isFinished") }
        didSet { didChangeValue(forKey: "isFinished") }
    }

    private var block: Block?

    override var isAsynchronous: Bool { true }
    override var isConcurrent: Bool { true }
    override var isFinished: Bool { ml_finished }
    override var isExecuting: Bool { ml_executing }

    convenience init(operationBlock: @escaping Block) {
        self.init()
        block = operationBlock
    }

    override func start() {
        if isCancelled {
            ml_finished = true
            return
        }
        ml_executing = true
        block?(self)
    }

    func finishOperation() {
        ml_executing = false
        ml_finished = true
    }
}

/// Article 001's TestClass: one synchronous and two asynchronous methods.
/// The asynchronous callbacks meet at a rendezvous, proving that the two
/// asynchronous operations run at the same time.
private final class TestClass: Sendable {
    let queue = DispatchQueue(label: "TestClass_background_queue", attributes: .concurrent)
    let log: Recorder<String>
    let bothBegun = Latch(count: 2)

    init(log: Recorder<String>) { self.log = log }

    func method1() {
        log.record("method 1 begin")
        log.record("method 1 end")
    }

    func asyncMethod(_ index: Int, done: @escaping @Sendable () -> Void) {
        log.record("async method \(index) begin")
        bothBegun.countDown()
        queue.async { [self] in
            if !bothBegun.wait(timeout: patience) { log.record("async method \(index) timed out") }
            log.record("async method \(index) end")
            done()
        }
    }
}

// MARK: Article 004

/// Article 004's MyOperation: a state enum, overridden isReady, isExecuting,
/// isFinished, isCancelled and cancel(), start() only when ready, the work
/// performed on a dedicated thread.
private final class StateMachineOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `state` and `cancelled` are guarded by `lock`;
    // `action` is immutable.
    enum State: Int { case ready = 1, executing, finished }

    static let threadKey = DispatchSpecificKey<String>()
    /// The article's "MyOperation.Thread", kept alive for the process: a
    /// serial dispatch queue plays the long-lived run-loop thread.
    static let thread: DispatchQueue = {
        let queue = DispatchQueue(label: "MyOperation.Thread")
        queue.setSpecific(key: threadKey, value: "MyOperation.Thread")
        return queue
    }()

    private let lock = LockedValue<(state: State, cancelled: Bool)>((.ready, false))
    let action: @Sendable () -> Void

    init(action: @escaping @Sendable () -> Void) {
        self.action = action
        super.init()
    }

    private var state: State { lock.withLock { $0.state } }

    override var isConcurrent: Bool { true }
    override var isExecuting: Bool { state == .executing }
    override var isFinished: Bool { state == .finished }
    override var isReady: Bool { state == .ready }
    override var isCancelled: Bool { lock.withLock { $0.cancelled } }

    override func cancel() {
        willChangeValue(forKey: "isCancelled")
        lock.withLock { $0.cancelled = true }
        didChangeValue(forKey: "isCancelled")
    }

    override func start() {
        if isReady {
            willChangeValue(forKey: "isExecuting")
            willChangeValue(forKey: "isReady")
            lock.withLock { $0.state = .executing }
            didChangeValue(forKey: "isReady")
            didChangeValue(forKey: "isExecuting")
            Self.thread.async { [self] in operationDidStart() }
        }
    }

    private func operationDidStart() {
        if isCancelled {
            willChangeValue(forKey: "isFinished")
            willChangeValue(forKey: "isCancelled")
            lock.withLock { $0.state = .finished }
            didChangeValue(forKey: "isCancelled")
            didChangeValue(forKey: "isFinished")
        } else {
            action()
            willChangeValue(forKey: "isFinished")
            willChangeValue(forKey: "isExecuting")
            lock.withLock { $0.state = .finished }
            didChangeValue(forKey: "isExecuting")
            didChangeValue(forKey: "isFinished")
        }
    }
}

@Suite("Article subclasses")
struct ArticleSubclassTests {
    // MARK: Article 001

    @Test("article 001: two async operations finishing from callbacks, then the sync one that depends on both")
    func mlAsyncOperationFanIn() {
        let log = Recorder<String>()
        let object = TestClass(log: log)
        let operationQueue = makeQueue("article-001", width: 5)
        let op1 = BlockOperation { object.method1() }
        let asyncOp1 = MLAsyncOperation { operation in
            object.asyncMethod(1) { operation.finishOperation() }
        }
        let asyncOp2 = MLAsyncOperation { operation in
            object.asyncMethod(2) { operation.finishOperation() }
        }
        op1.addDependency(asyncOp1)
        op1.addDependency(asyncOp2)
        operationQueue.addOperation(asyncOp1)
        operationQueue.addOperation(asyncOp2)
        operationQueue.addOperation(op1)
        #expect(operationQueue.waitUntilAllOperationsAreFinished(timeout: patience))
        let events = log.events
        #expect(events.count == 6, "\(events)")
        #expect(Set(events.prefix(2)) == ["async method 1 begin", "async method 2 begin"])
        #expect(Set(events[2..<4]) == ["async method 1 end", "async method 2 end"])
        #expect(Array(events.suffix(2)) == ["method 1 begin", "method 1 end"])
        #expect(asyncOp1.isFinished && asyncOp2.isFinished && op1.isFinished)
        #expect(asyncOp1.isAsynchronous && asyncOp1.isConcurrent)
    }

    @Test("article 001: an async operation stays executing until its callback finishes it")
    func mlAsyncOperationStaysExecuting() {
        let callback = Gate()
        let op = MLAsyncOperation { operation in
            DispatchQueue.global().async {
                callback.wait()
                operation.finishOperation()
            }
        }
        let queue = makeQueue("article-001-executing")
        queue.addOperation(op)
        #expect(waitUntil { op.isExecuting })
        #expect(staysFalse { op.isFinished })
        #expect(queue.operationCount == 1)
        callback.open()
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(!op.isExecuting)
    }

    @Test("article 001: cancelled before start, MLAsyncOperation finishes without running its block")
    func mlAsyncOperationCancelled() {
        let ran = Counter()
        let op = MLAsyncOperation { operation in
            ran.increment()
            operation.finishOperation()
        }
        let dependent = BlockOperation {}
        dependent.addDependency(op)
        op.cancel()
        let queue = makeQueue("article-001-cancel")
        queue.addOperations([op, dependent], waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(ran.count == 0)
        #expect(op.isFinished && dependent.isFinished)
    }

    // MARK: Article 004

    @Test("article 004: MyOperation and block operations on a suspended queue, then resumed")
    func stateMachineOperationsOnSuspendedQueue() {
        let log = Recorder<String>()
        let onThread = Recorder<Bool>()
        let myOperation01 = StateMachineOperation {
            onThread.record(DispatchQueue.getSpecific(key: StateMachineOperation.threadKey) != nil)
            log.record("this is 01 MyOperation")
        }
        let myOperation02 = StateMachineOperation {
            onThread.record(DispatchQueue.getSpecific(key: StateMachineOperation.threadKey) != nil)
            log.record("this is 02 MyOperation")
        }
        let blockOperation01 = BlockOperation()
        blockOperation01.addExecutionBlock { log.record("this is no.1 block Operation") }
        let blockOperation02 = BlockOperation()
        blockOperation02.addExecutionBlock {
            log.record("this is no.2 block Operation, start")
            log.record("no.2 wake up.")
        }
        let blockOperation03 = BlockOperation()
        blockOperation03.addExecutionBlock { log.record("this is no.3 block Operation, no.2 operation is completed, start task") }
        blockOperation03.addDependency(blockOperation02)

        let queue = makeQueue("article-004")
        queue.isSuspended = true
        queue.maxConcurrentOperationCount = 5
        queue.addOperation(myOperation01)
        queue.addOperation(myOperation02)
        queue.addOperation(blockOperation01)
        queue.addOperation(blockOperation02)
        queue.addOperation(blockOperation03)
        #expect(staysFalse { log.count > 0 }, "a suspended queue started an operation")
        #expect(queue.operationCount == 5)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        let events = log.events
        #expect(events.count == 6)
        let wake = events.firstIndex(of: "no.2 wake up.") ?? .max
        let third = events.firstIndex(of: "this is no.3 block Operation, no.2 operation is completed, start task") ?? -1
        #expect(wake < third)
        #expect(events.contains("this is 01 MyOperation") && events.contains("this is 02 MyOperation"))
        #expect(onThread.events == [true, true], "MyOperation's work must run on MyOperation.Thread")
        #expect(myOperation01.isFinished && myOperation02.isFinished && !myOperation01.isExecuting)
    }

    @Test("article 004: MyOperation cancelled while queued finishes through its own cancel path")
    func stateMachineOperationCancelled() {
        let ran = Counter()
        let op = StateMachineOperation { ran.increment() }
        let dependent = BlockOperation {}
        dependent.addDependency(op)
        let queue = makeQueue("article-004-cancel")
        queue.isSuspended = true
        queue.addOperations([op, dependent], waitUntilFinished: false)
        op.cancel()
        #expect(op.isCancelled)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(ran.count == 0)
        #expect(op.isFinished && dependent.isFinished)
    }

    @Test("article 004: MyOperation started by hand runs asynchronously on its thread")
    func stateMachineOperationManual() {
        let release = Gate()
        let ran = Gate()
        let op = StateMachineOperation {
            release.wait()
            ran.open()
        }
        let block = BlockOperation()
        let blockRan = Counter()
        block.addExecutionBlock { blockRan.increment() }
        op.start()
        block.start()
        // start() returned while the action still waits: asynchronous.
        #expect(op.isExecuting && !op.isReady)
        #expect(blockRan.count == 1)
        release.open()
        #expect(ran.wait())
        #expect(op.waitUntilFinished(timeout: patience))
    }

}
