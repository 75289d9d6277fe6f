// Custom Operation subclasses written the way the documents write them:
// the chapter's Listings 2-3/2-4 (override main, poll isCancelled) and
// 2-5...2-8 (a concurrent operation with its own flags, a thread of its own,
// and will/didChangeValue announcements), article 001's MLAsyncOperation,
// article 004's state-machine MyOperation, and a custom isReady.

import Dispatch
import Synchronization
import Testing
@testable import Operations

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
/// completeOperation() announcing in the documented nested order. Also
/// used where the library refuses or starts such a class cancelled
/// (`CustomClassStartTests`).
final class ListingConcurrentOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `flags` is a Mutex; `work` is immutable.
    private let flags = LockedValue<(executing: Bool, finished: Bool)>((false, false))
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

// MARK: Custom readiness

/// Ready only when its dependencies finished and `allow()` was called;
/// announces the change as the chapter asks. Its `main()` runs `body`, then
/// opens `ran`.
final class GatedReadinessOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `allowed` is atomic; `ran` is a Gate; `body` is
    // set once.
    private let allowed = Atomic<Bool>(false)
    private let body: @Sendable () -> Void
    let ran = Gate()

    init(_ body: @escaping @Sendable () -> Void = {}) {
        self.body = body
    }

    override var isReady: Bool { super.isReady && allowed.load(ordering: .acquiring) }

    func allow() {
        willChangeValue(forKey: "isReady")
        allowed.store(true, ordering: .releasing)
        didChangeValue(forKey: "isReady")
    }

    override func main() {
        body()
        ran.open()
    }
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
        // As in Foundation, the completion block runs asynchronously, on a
        // worker of the pool: neither here nor necessarily where it finished.
        #expect(waitUntil { completion.value != nil })
        #expect(completion.value != currentThreadID())
    }

    @Test("Listing 2-7: completeOperation announces isExecuting YES→NO, then isFinished NO→YES")
    func listingOperationNotifications() {
        // Observed by key path on the subclass, which overrides isExecuting
        // and isFinished, with .prior so that the will/did nesting shows.
        let log = Recorder<String>()
        let release = Gate()
        let op = makeListingOperation("listing", log: log, release: release)
        // A key path to a property that a *final* class overrides is a
        // different key path in Swift, which the library cannot name; observe
        // through `Operation` (or by string key) to get Foundation's exact
        // will/did semantics. See `Operation.observe`.
        let observed: Operation = op
        let tokens = [
            observed.observe(\.isExecuting, options: [.prior, .old, .new]) { _, change in
                log.record("\(change.isPrior ? "will" : "did") isExecuting \(change.oldValue.map { "\($0)" } ?? "-")→\(change.newValue.map { "\($0)" } ?? "-")")
            },
            observed.observe(\.isFinished, options: [.prior, .old, .new]) { _, change in
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
