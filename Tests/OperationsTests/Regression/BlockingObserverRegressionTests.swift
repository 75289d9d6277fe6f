// Regression tests for the stalls of `ops soak --blocking-observers` (seeds
// 777004 and 777009, and most rounds of 20,000 operations): an `isFinished`
// observer that waits for an older operation of its queue, which stays
// "pending, in a queue" (or "finished, cancelled, in a queue") although a
// slot is free.
//
// A drain loop told a finished operation's isExecuting/isFinished observers
// on its own thread before it posted the drain loop it had requested (so
// that, as in Foundation, a serial queue's next operation starts only after
// the previous one announced isFinished), and before it handed the other
// tails of its batch to jobs of their own. Meanwhile the queue's state
// counted that request as pending, so no other thread could request one:
// an observer that waited for an operation needing the freed slot waited
// for a drain loop that nobody would post, and one that waited for another
// operation of its batch waited for a retirement queued behind itself.
//
// Each scenario forces its interleaving with priorities, a suspended queue
// and cancelled operations (no timing); every wait is bounded.

import Dispatch
import Synchronization
import Testing
@testable import Operations

/// How long an observer in these scenarios waits for another operation:
/// long enough for any machine once the queue can start it, short enough
/// that the old stall fails the test quickly.
private let observerPatience: Duration = .seconds(3)

@Suite("Blocking isFinished observers do not stall their queue (regression)")
struct BlockingObserverRegressionTests {
    /// The observer of `later` (high priority, so it starts first) waits for
    /// `older` (very low priority, ready in the same queue). At width 2, a
    /// third operation holds the other slot until the end, so `older` can
    /// only run in the slot `later` leaves.
    @Test("An isFinished observer that waits for a ready operation needing the slot its operation left does not stall (regression)",
          arguments: [1, 2])
    func observerWaitsForOperationNeedingTheFreedSlot(width: Int) {
        let queue = makeQueue("freed-slot", width: width)
        queue.isSuspended = true
        let release = Gate()
        let holderStarted = Gate()
        if width == 2 {
            let holder = BlockOperation {
                holderStarted.open()
                release.wait()
            }
            holder.queuePriority = .veryHigh
            queue.addOperation(holder)
        }
        let older = BlockOperation {}
        older.queuePriority = .veryLow
        let later = BlockOperation {}
        later.queuePriority = .high
        let waited = Atomic<Int>(0)
        let token = later.observe(\.isFinished, options: [.new]) { _, change in
            guard change.newValue == true else { return }
            waited.store(older.waitUntilFinished(timeout: observerPatience) ? 1 : 2, ordering: .sequentiallyConsistent)
        }
        queue.addOperations([older, later], waitUntilFinished: false)
        queue.isSuspended = false
        if width == 2 { #expect(holderStarted.wait()) }
        #expect(later.waitUntilFinished(timeout: patience))
        #expect(waited.load(ordering: .sequentiallyConsistent) == 1,
                "width \(width): the isFinished observer's wait for an operation ready in its queue timed out (\(queue.diagnostics()))")
        release.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        expectQueueInvariants(queue)
        token.invalidate()
    }

    /// Two cancelled operations are retired by one drain loop in one batch;
    /// the observer of the second waits for the first. With `targetHasTail`,
    /// the first has a completion block, so its retirement is a tail too.
    @Test("An isFinished observer that waits for another operation retired in the same batch does not stall (regression)",
          arguments: [false, true])
    func observerWaitsForBatchMate(targetHasTail: Bool) {
        let queue = makeQueue("batch", width: 1)
        queue.isSuspended = true
        let first = BlockOperation {}
        let second = BlockOperation {}
        let completed = Gate()
        if targetHasTail { first.completionBlock = { completed.open() } }
        let waited = Atomic<Int>(0)
        let token = second.observe(\.isFinished, options: [.new]) { _, change in
            guard change.newValue == true else { return }
            waited.store(first.waitUntilFinished(timeout: observerPatience) ? 1 : 2, ordering: .sequentiallyConsistent)
        }
        first.cancel()
        second.cancel()
        queue.addOperations([first, second], waitUntilFinished: false)
        queue.isSuspended = false
        #expect(second.waitUntilFinished(timeout: patience))
        #expect(waited.load(ordering: .sequentiallyConsistent) == 1,
                "completion block \(targetHasTail): the isFinished observer's wait for an operation of its batch timed out")
        if targetHasTail { #expect(completed.wait()) }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        expectQueueInvariants(queue)
        token.invalidate()
    }

    /// What the fix must keep: on a serial queue, the next operation starts
    /// only after the previous one's isFinished observers have returned
    /// (Foundation's order), when they do not wait in the library.
    @Test("On a serial queue, the next operation starts only after the previous one's isFinished observers returned")
    func serialQueueKeepsFoundationOrder() {
        let queue = makeQueue("order", width: 1)
        queue.isSuspended = true
        let probe = ObserverOverlapProbe()
        let first = BlockOperation {}
        let second = BlockOperation { probe.secondStarted.open() }
        let token = probe.observe(first)
        queue.addOperations([first, second], waitUntilFinished: false)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(probe.result.load(ordering: .sequentiallyConsistent) == 2,
                "the next operation started while the previous one's isFinished observer ran")
        expectQueueInvariants(queue)
        token.invalidate()
    }
}

/// Whether a serial queue's next operation starts while the previous one's
/// isFinished observer runs: the observer waits up to 200 ms for
/// `secondStarted` (which the next operation opens) and stores 1 in
/// `result` if it opened, 2 if not. Not a library wait: the observer keeps
/// the slot meanwhile.
final class ObserverOverlapProbe: Sendable {
    let secondStarted = Gate()
    let result = Atomic<Int>(0)

    func observe(_ first: Operation) -> KeyValueObservation {
        first.observe(\.isFinished, options: [.new]) { [self] _, change in
            guard change.newValue == true else { return }
            result.store(secondStarted.wait(timeout: .milliseconds(200)) ? 1 : 2, ordering: .sequentiallyConsistent)
        }
    }
}

/// An operation that finishes later, from another thread: how it does so.
enum LateFinish: String, CaseIterable, Sendable {
    /// `AsyncOperation.finish()` from a dispatch queue.
    case asyncOperation
    /// A `ResultOperation` whose `async` body suspends before returning.
    case suspendingBody
    /// A subclass with its own `start()` that announces `isFinished` from a
    /// dispatch queue.
    case customStart

    func make(_ work: @escaping @Sendable () -> Void) -> Operation {
        switch self {
        case .asyncOperation:
            return AsyncOperation { operation in
                work()
                DispatchQueue.global().async { operation.finish() }
            }
        case .suspendingBody:
            return ResultOperation<Int, Never> { () async -> Int in
                work()
                await Task.yield()
                return 1
            }
        case .customStart:
            return LateFinishingOperation(work)
        }
    }
}

/// A concurrent operation built by hand: `start()` runs `work`, then
/// finishes from a dispatch queue with `isExecuting`/`isFinished`
/// announcements.
final class LateFinishingOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `state` is guarded by its lock; `work` is immutable.
    private let state = LockedValue<(executing: Bool, finished: Bool)>((false, false))
    private let work: @Sendable () -> Void

    init(_ work: @escaping @Sendable () -> Void) {
        self.work = work
        super.init()
    }

    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { state.withLock { $0.executing } }
    override var isFinished: Bool { state.withLock { $0.finished } }

    override func start() {
        willChangeValue(forKey: "isExecuting")
        state.withLock { $0.executing = true }
        didChangeValue(forKey: "isExecuting")
        work()
        DispatchQueue.global().async { [self] in
            willChangeValue(forKey: "isExecuting")
            willChangeValue(forKey: "isFinished")
            state.withLock { $0 = (false, true) }
            didChangeValue(forKey: "isExecuting")
            didChangeValue(forKey: "isFinished")
        }
    }
}

@Suite("A serial queue keeps Foundation's order for operations that finish later (regression: probe A3)")
struct LateFinishOrderRegressionTests {
    /// A drain loop kept the slot of an operation that finished inside it
    /// while its isFinished observers ran; an operation that finished later
    /// (from another thread) freed its slot first, so the next one could
    /// start while the observers were still running.
    ///
    /// The test is `async` and awaits the queue: a suspended `async` body
    /// resumes on Swift's cooperative pool, which a blocking wait from a
    /// test (run on that pool, next to other tests) would starve.
    @Test("the next operation starts only after the previous one's isFinished observers returned", arguments: LateFinish.allCases)
    func nextStartsAfterObservers(kind: LateFinish) async throws {
        let queue = makeQueue("late-order", width: 1)
        queue.isSuspended = true
        let probe = ObserverOverlapProbe()
        let first = kind.make {}
        let second = kind.make { probe.secondStarted.open() }
        let token = probe.observe(first)
        queue.addOperations([first, second], waitUntilFinished: false)
        queue.isSuspended = false
        try await withTimeLimit { await queue.drained() }
        #expect(probe.result.load(ordering: .sequentiallyConsistent) == 2,
                "\(kind): the next operation started while the previous one's isFinished observer ran")
        expectQueueInvariants(queue)
        token.invalidate()
    }
}

// MARK: - Tails of async bodies

/// The isFinished observers and completion blocks of operations with
/// `async` bodies (`ResultOperation`) ran on the task that ran the body, a
/// thread of Swift's cooperative pool. They are synchronous code, where a
/// blocking wait is allowed; but a blocked cooperative thread is one that no
/// task can use, and the pool does not grow: once as many tails as it has
/// threads waited, no `async` body could start, including the one they
/// waited for (in the soak: a serial queue's executing `ResultOperation`
/// whose body never began, "body starts 0", with older operations pending
/// behind it).
///
/// More blockers than the cooperative pool has threads: half wait from an
/// isFinished observer, half from a completion block, each for `target`,
/// which is added once they have begun (or after a bounded pause).
func scenarioTailsOfAsyncBodiesWaitForAnAsyncBody() {
    let blockers = Platform.processorCount + 2
    let queue = makeQueue("async-tails")
    let target = ResultOperation<Int, Never> { () async -> Int in 7 }
    let entered = Latch(count: blockers)
    let waited = Counter()
    let wait: @Sendable () -> Void = {
        entered.countDown()
        if target.waitUntilFinished(timeout: .seconds(3)) { waited.increment() }
    }
    var tokens: [KeyValueObservation] = []
    for index in 0..<blockers {
        let operation = ResultOperation<Int, Never> { () async -> Int in index }
        if index.isMultiple(of: 2) {
            operation.completionBlock = wait
        } else {
            tokens.append(operation.observe(\.isFinished, options: [.new]) { _, change in
                if change.newValue == true { wait() }
            })
        }
        queue.addOperation(operation)
    }
    let allEntered = entered.wait(timeout: .seconds(2))
    queue.addOperation(target)
    #expect(target.waitUntilFinished(timeout: patience), "the async body of the operation the tails wait for never ran")
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    #expect(allEntered, "not every tail began: the ones that did hold every thread of the cooperative pool")
    // Completion blocks run asynchronously: the queue's wait does not wait
    // for them.
    #expect(waitUntil { waited.count == blockers }, "\(blockers - waited.count) of \(blockers) tails timed out waiting for an async body")
    for token in tokens { token.invalidate() }
}

@Suite("Tails of async bodies do not block Swift's cooperative pool (regression)")
struct AsyncBodyTailRegressionTests {
    @Test("isFinished observers and completion blocks of operations with async bodies may wait for another async body (regression)")
    func tailsOfAsyncBodiesMayWait() async {
        await #expect(processExitsWith: .success) { scenarioTailsOfAsyncBodiesWaitForAnAsyncBody() }
    }
}

@Suite("A queue's operationCount observer that waits for the queue's next operation (regression: probe 55)")
struct QueueObserverWaitTests {
    /// Before: the drain loop took the next operation (counting it as
    /// executing) and then told the queue's observers on the same thread,
    /// so the wait could not end (the bounded wait timed out every time);
    /// when the finished operation had observers of its own, it kept its
    /// slot while the queue's observers were told, so at width 1 the next
    /// operation could not start either.
    @Test("the wait returns once the next operation ran", arguments: [false, true])
    func observerWaitsForNextOperation(finishedIsObserved: Bool) {
        let queue = makeQueue("queue-observer-waits", width: 1)
        queue.isSuspended = true
        let a = BlockOperation {}
        let b = BlockOperation {}
        let ownToken = finishedIsObserved ? a.observe(\.isFinished) { _, _ in } : nil
        let armed = Box(false)
        let waited = Recorder<Bool>()
        // Told of 1 (b waits), or, when a loop the watcher added ran b
        // before this thread told the observers (seen under
        // ThreadSanitizer), of 0: the wait then returns at once.
        let token = queue.observe(\.operationCount, options: [.new]) { _, change in
            guard armed.value, let count = change.newValue, count <= 1, waited.events.isEmpty else { return }
            waited.record(b.waitUntilFinished(timeout: patience))
        }
        queue.addOperations([a, b], waitUntilFinished: false)
        armed.value = true
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 2))
        // The observer records once its wait returns, which may be just
        // after the queue drained.
        #expect(waitUntil { !waited.events.isEmpty })
        #expect(!waited.events.isEmpty && waited.events.allSatisfy { $0 }, "\(waited.events)")
        withExtendedLifetime((token, ownToken)) {}
    }
}

@Suite("An isReady observer that waits for its operation (regression: probe 55)")
struct ReadyObserverWaitTests {
    enum BecameReady: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// Its dependency ran on another queue.
        case dependencyOnAnotherQueue
        /// Its dependency ran on its own queue, of the default width.
        case dependencyOnItsQueue
        /// Its dependency ran on its own queue, of width 1: the dependency
        /// holds the only slot until its finish has been handled, after
        /// the observers (timed out before its own fix).
        case dependencyOnItsSerialQueue
        /// Its only dependency was removed, from a thread of the test's.
        case dependencyRemoved
        /// Its dependency, in no queue, was started by hand.
        case dependencyStartedByHand
        var testDescription: String { rawValue }
    }

    /// Before: the observers were told before the queue heard that the
    /// operation was ready, and the queue heard only once they returned, so
    /// the wait could not end (the bounded wait timed out in every case).
    /// A library wait made there now tells the queue first.
    @Test("the wait returns once the operation ran", arguments: BecameReady.allCases)
    func observerWaitsForItsOperation(_ how: BecameReady) {
        let first = makeQueue("ready-observer-dependency", width: how == .dependencyOnItsSerialQueue ? 1 : -1)
        let sameQueue = how == .dependencyOnItsQueue || how == .dependencyOnItsSerialQueue
        let queue = sameQueue ? first : makeQueue("ready-observer-waits")
        let dependency = BlockOperation {}
        let operation = BlockOperation {}
        operation.addDependency(dependency)
        let waited = Recorder<Bool>()
        let token = operation.observe(\.isReady, options: [.new]) { observed, change in
            guard change.newValue == true, waited.events.isEmpty else { return }
            waited.record(observed.waitUntilFinished(timeout: patience))
        }
        queue.addOperation(operation)
        switch how {
        case .dependencyOnAnotherQueue, .dependencyOnItsQueue, .dependencyOnItsSerialQueue:
            first.addOperation(dependency)
        case .dependencyRemoved:
            spawnThread { operation.removeDependency(dependency) }
        case .dependencyStartedByHand:
            spawnThread { dependency.start() }
        }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 2))
        #expect(waitUntil { !waited.events.isEmpty })
        #expect(waited.events == [true])
        expectQueueInvariants(queue)
        withExtendedLifetime(token) {}
    }
}
