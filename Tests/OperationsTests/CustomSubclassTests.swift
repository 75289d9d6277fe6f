// Custom Operation subclasses written the way the documents write them:
// the chapter's Listings 2-3/2-4 (override main, poll isCancelled) and
// 2-5...2-8 (a concurrent operation with its own flags, a thread of its own,
// and will/didChangeValue announcements), article 001's MLAsyncOperation,
// article 004's state-machine MyOperation, and a custom isReady.

import Dispatch
import Synchronization
import Testing
@testable import Operations

/// A value guarded by a mutex, usable with `willSet` / `didSet` observers
/// (the setter is nonmutating, the storage is a shared box).
@propertyWrapper
struct Locked<Value: Sendable>: Sendable {
    private let storage: Box<Value>
    init(wrappedValue: Value) { storage = Box(wrappedValue) }
    var wrappedValue: Value {
        get { storage.value }
        nonmutating set { storage.value = newValue }
    }
}

// MARK: Listings 2-3 and 2-4

/// Listing 2-3: a nonconcurrent operation with its data, overriding main;
/// Listing 2-4: main polls isCancelled in its loop.
private final class MyNonConcurrentOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `myData` is immutable; `processed` is atomic.
    let myData: [Int]
    let processed = Counter()
    let sum = Box(0)
    let started = Gate()
    let stepGate: Gate?

    init(data: [Int], stepGate: Gate? = nil) {
        myData = data
        self.stepGate = stepGate
        super.init()
    }

    override func main() {
        started.open()
        var isDone = false
        var index = 0
        while !isCancelled && !isDone {
            stepGate?.wait(timeout: .milliseconds(1))
            sum.value += myData[index]
            processed.increment()
            index += 1
            isDone = index == myData.count
        }
    }
}

// MARK: Listings 2-5 to 2-7

/// The chapter's MyOperation: its own `executing` / `finished` flags,
/// isConcurrent, start() detaching a thread that runs main(), and
/// completeOperation() announcing in the documented nested order.
private final class ListingConcurrentOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `flags` is a Mutex; `work` is immutable.
    private let flags = Mutex<(executing: Bool, finished: Bool)>((false, false))
    let work: @Sendable () -> Void
    let mainThread = Box<ThreadID?>(nil)

    init(work: @escaping @Sendable () -> Void) {
        self.work = work
        super.init()
    }

    override var isConcurrent: Bool { true }
    override var isExecuting: Bool { flags.withLock { $0.executing } }
    override var isFinished: Bool { flags.withLock { $0.finished } }

    override func start() {
        // Always check for cancellation before launching the task.
        if isCancelled {
            // Must move the operation to the finished state if it is canceled.
            willChangeValue(forKey: "isFinished")
            flags.withLock { $0.finished = true }
            didChangeValue(forKey: "isFinished")
            return
        }
        // If the operation is not canceled, begin executing the task.
        willChangeValue(forKey: "isExecuting")
        spawnThread { [self] in self.main() }
        flags.withLock { $0.executing = true }
        didChangeValue(forKey: "isExecuting")
    }

    override func main() {
        mainThread.value = currentThreadID()
        work()
        completeOperation()
    }

    func completeOperation() {
        willChangeValue(forKey: "isFinished")
        willChangeValue(forKey: "isExecuting")
        flags.withLock {
            $0.executing = false
            $0.finished = true
        }
        didChangeValue(forKey: "isExecuting")
        didChangeValue(forKey: "isFinished")
    }
}

/// Makes a Listing 2-5 operation whose work waits for `release`. Tests open
/// it once start() has returned (or once isExecuting is visible), which
/// keeps the listing's own start/complete race out of the way.
private func makeListingOperation(
    _ name: String,
    log: Recorder<String>,
    release: Gate
) -> ListingConcurrentOperation {
    let op = ListingConcurrentOperation {
        release.wait()
        log.record("work \(name)")
    }
    op.name = name
    return op
}

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

    private let lock = Mutex<(state: State, cancelled: Bool)>((.ready, false))
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

// MARK: Custom readiness

/// Ready only when its dependencies finished and `allow()` was called;
/// announces the change as the chapter asks.
private final class GatedReadinessOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `allowed` is atomic; `ran` is atomic.
    private let allowed = Atomic<Bool>(false)
    let ran = Gate()

    override var isReady: Bool { super.isReady && allowed.load(ordering: .acquiring) }

    func allow() {
        willChangeValue(forKey: "isReady")
        allowed.store(true, ordering: .releasing)
        didChangeValue(forKey: "isReady")
    }

    override func main() { ran.open() }
}

@Suite("Custom subclasses")
struct CustomSubclassTests {
    // MARK: Listings 2-3 / 2-4

    @Test("Listing 2-3: a subclass overriding main works on its data in a queue")
    func nonConcurrentSubclass() {
        let op = MyNonConcurrentOperation(data: Array(1...100))
        let queue = makeQueue("listing-2-3")
        queue.addOperation(op)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(op.sum.value == 5050)
        #expect(op.processed.count == 100)
        #expect(op.isFinished && !op.isCancelled)
    }

    @Test("Listing 2-4: main polling isCancelled stops early when cancelled")
    func cancellationPolling() {
        let neverOpened = Gate()
        let op = MyNonConcurrentOperation(data: Array(repeating: 1, count: 100_000), stepGate: neverOpened)
        let queue = makeQueue("listing-2-4")
        queue.addOperation(op)
        #expect(op.started.wait())
        op.cancel()
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(op.processed.count < 100_000)
        #expect(op.isCancelled && op.isFinished)
    }

    // MARK: Listings 2-5 to 2-7

    @Test("Listing 2-5: started by hand, start() returns at once and the work runs on its own thread")
    func listingOperationManualStart() {
        let log = Recorder<String>()
        let release = Gate()
        let op = makeListingOperation("manual", log: log, release: release)
        let completion = Box<ThreadID?>(nil)
        op.completionBlock = { completion.value = currentThreadID() }
        op.start()
        #expect(op.isExecuting && !op.isFinished)
        release.open()
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(op.isFinished && !op.isExecuting)
        #expect(log.events == ["work manual"])
        #expect(op.mainThread.value != nil && op.mainThread.value != currentThreadID())
        #expect(completion.value == op.mainThread.value, "the completion block should run on the thread that announced isFinished")
    }

    @Test("Listing 2-7: completeOperation announces isExecuting YES→NO, then isFinished NO→YES")
    func listingOperationNotifications() {
        let log = Recorder<String>()
        let release = Gate()
        let op = makeListingOperation("listing", log: log, release: release)
        let tokens = [
            op.observe(\.isExecuting, options: [.prior, .old, .new]) { _, change in
                log.record("\(change.isPrior ? "will" : "did") isExecuting \(change.oldValue.map { "\($0)" } ?? "-")→\(change.newValue.map { "\($0)" } ?? "-")")
            },
            op.observe(\.isFinished, options: [.prior, .old, .new]) { _, change in
                log.record("\(change.isPrior ? "will" : "did") isFinished \(change.oldValue.map { "\($0)" } ?? "-")→\(change.newValue.map { "\($0)" } ?? "-")")
            },
        ]
        op.start()
        release.open()
        #expect(op.waitUntilFinished(timeout: patience))
        #expect(log.events == [
            "will isExecuting false→-",
            "did isExecuting false→true",
            "work listing",
            "will isFinished false→-",
            "will isExecuting true→-",
            "did isExecuting true→false",
            "did isFinished false→true",
        ])
        withExtendedLifetime(tokens) {}
    }

    @Test("Listing 2-5 in a queue: dependents run, the slot is freed, waiters wake, the completion block runs")
    func listingOperationInQueue() {
        let log = Recorder<String>()
        let release = Gate()
        let op = makeListingOperation("custom", log: log, release: release)
        let completionRan = Gate()
        op.completionBlock = {
            log.record("completion custom")
            completionRan.open()
        }
        let dependent = BlockOperation { log.record("dependent") }
        dependent.addDependency(op)
        let next = BlockOperation { log.record("next in serial queue") }
        let serial = makeQueue("listing-serial", width: 1)
        let other = makeQueue("listing-other")
        serial.addOperation(op)
        serial.addOperation(next)
        other.addOperation(dependent)
        #expect(waitUntil { op.isExecuting })
        #expect(staysFalse { log.count > 0 }, "something ran while the custom operation held the only slot")
        let waiterWoke = Gate()
        spawnThread {
            op.waitUntilFinished()
            waiterWoke.open()
        }
        release.open()
        #expect(completionRan.wait())
        #expect(waiterWoke.wait())
        #expect(serial.waitUntilAllOperationsAreFinished(timeout: patience), "the serial queue's slot was not freed")
        #expect(other.waitUntilAllOperationsAreFinished(timeout: patience), "the dependent never ran")
        let events = log.events
        #expect(events.first == "work custom")
        #expect(Set(events) == ["work custom", "completion custom", "dependent", "next in serial queue"])
        #expect(serial.operationCount == 0)
    }

    @Test("Listing 2-6: cancelled before the queue starts it, it finishes without working and releases dependents")
    func listingOperationCancelledInQueue() {
        let log = Recorder<String>()
        let release = Gate()
        release.open()
        let op = makeListingOperation("cancelled", log: log, release: release)
        let dependent = BlockOperation { log.record("dependent") }
        dependent.addDependency(op)
        let queue = makeQueue("listing-cancel")
        queue.isSuspended = true
        queue.addOperations([op, dependent], waitUntilFinished: false)
        op.cancel()
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["dependent"])
        #expect(op.isFinished && op.isCancelled)
    }

    @Test("Listing 2-8: executing operations by hand, concurrent ones on a thread of their own")
    func listingManualExecution() {
        let log = Recorder<String>()
        let release = Gate()
        release.open()
        let concurrent = makeListingOperation("concurrent", log: log, release: release)
        let plain = BlockOperation { log.record("work plain") }
        let cancelled = BlockOperation { log.record("work cancelled") }
        cancelled.cancel()
        func perform(_ op: Operation) -> Bool {
            if op.isReady && !op.isCancelled {
                if !op.isConcurrent {
                    op.start()
                } else {
                    spawnThread { op.start() }
                }
                return true
            } else if op.isCancelled {
                op.start()
                return true
            }
            return false
        }
        #expect(perform(plain))
        #expect(perform(concurrent))
        #expect(perform(cancelled))
        #expect(concurrent.waitUntilFinished(timeout: patience))
        #expect(Set(log.events) == ["work plain", "work concurrent"])
        #expect(plain.isFinished && cancelled.isFinished)
    }

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

    // MARK: Custom readiness

    @Test("a custom isReady announced with will/didChangeValue(\"isReady\") is honoured by the queue")
    func customReadiness() {
        let op = GatedReadinessOperation()
        let queue = makeQueue("custom-ready")
        queue.addOperation(op)
        #expect(!op.isReady)
        #expect(staysFalse { op.ran.opened }, "the queue started an operation whose isReady is false")
        op.allow()
        #expect(op.ran.wait())
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("a custom isReady combined with super.isReady still waits for dependencies")
    func customReadinessWithDependency() {
        let gate = Gate()
        let dependency = BlockOperation { gate.wait() }
        let op = GatedReadinessOperation()
        op.addDependency(dependency)
        let queue = makeQueue("custom-ready-dependency")
        queue.addOperations([op, dependency], waitUntilFinished: false)
        op.allow()
        #expect(staysFalse { op.ran.opened }, "started before its dependency finished")
        gate.open()
        #expect(op.ran.wait())
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("a custom isReady on a serial queue lets ready operations behind it run")
    func customReadinessDoesNotBlockSerialQueue() {
        let op = GatedReadinessOperation()
        let behind = Gate()
        let queue = makeQueue("custom-ready-serial", width: 1)
        queue.addOperation(op)
        queue.addOperation { behind.open() }
        #expect(behind.wait(), "an unready operation blocked the serial queue")
        op.allow()
        #expect(op.ran.wait())
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }
}
