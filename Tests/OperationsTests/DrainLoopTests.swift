// A queue on the shared pool runs one drain loop while that loop keeps up,
// and adds loops as work allows once it does not (`DrainLoops`). The policy
// is a pure state machine, tested here step by step; the behaviour a user
// can see is that nothing waits for the second loop for long: an operation
// that blocks, spins or waits for another operation of its own queue still
// gets it, through the watcher (`LoopWatcher`) or the library's waits.

import Dispatch
import Synchronization
import Testing
@testable import Operations
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

@Suite("Drain loops: the policy")
struct DrainLoopPolicyTests {
    /// A queue with one loop running inside an operation, a second one
    /// held back and watched.
    private func oneLoopInsideAnOperation() -> DrainLoops {
        var loops = DrainLoops()
        #expect(loops.request(admissible: 3, mayHoldBack: true) == .post)
        loops.started()
        loops.setBusy(true)
        #expect(loops.request(admissible: 2, mayHoldBack: true) == .watch)
        return loops
    }

    @Test("the first loop is posted; while it runs, a second is held back and the queue watched once")
    func holdsBack() {
        var loops = oneLoopInsideAnOperation()
        #expect(loops.isWatched)
        #expect(loops.request(admissible: 2, mayHoldBack: true) == .none)
        #expect(loops.pending == 0 && loops.running == 1)
    }

    @Test("a queue off the shared pool (main thread, underlying queue) never holds a loop back")
    func offThePool() {
        var loops = DrainLoops()
        #expect(loops.request(admissible: 3, mayHoldBack: false) == .post)
        loops.started()
        loops.setBusy(true)
        #expect(loops.request(admissible: 2, mayHoldBack: false) == .post)
    }

    @Test("an operation that began before the last look and has not returned: loops are added freely")
    func stuckOperation() {
        var loops = oneLoopInsideAnOperation()
        let seen = DrainLoops.Mark(progress: loops.progress, returned: loops.progress &- 1)
        let verdict = loops.watch(seen: seen, returned: loops.progress &- 1, admissible: 2, stuck: false)
        #expect(!verdict.keepsWatching)
        #expect(loops.addsFreely && !loops.isWatched)
        #expect(loops.request(admissible: 2, mayHoldBack: true) == .post)
    }

    @Test("a loop that returned and waits for the queue's lock is not stuck")
    func returnedLoop() {
        var loops = oneLoopInsideAnOperation()
        let seen = DrainLoops.Mark(progress: loops.progress, returned: loops.progress &- 1)
        let verdict = loops.watch(seen: seen, returned: loops.progress, admissible: 2, stuck: false)
        #expect(verdict.keepsWatching)
        #expect(!loops.addsFreely)
        #expect(loops.request(admissible: 2, mayHoldBack: true) == .none)
    }

    @Test("a loop that began another operation since the last look is not stuck")
    func progressingLoop() {
        var loops = oneLoopInsideAnOperation()
        let seen = DrainLoops.Mark(progress: loops.progress, returned: loops.progress &- 1)
        loops.setBusy(false)
        loops.setBusy(true)
        let verdict = loops.watch(seen: seen, returned: loops.progress &- 1, admissible: 2, stuck: false)
        #expect(verdict.keepsWatching)
        #expect(verdict.mark.progress == seen.progress &+ 1)
        #expect(!loops.addsFreely)
    }

    @Test("a look too soon after the last one only records what it sees")
    func tooSoon() {
        var loops = oneLoopInsideAnOperation()
        let verdict = loops.watch(seen: nil, returned: loops.progress &- 1, admissible: 2, stuck: false)
        #expect(verdict.keepsWatching && !loops.addsFreely)
        #expect(verdict.mark.progress == loops.progress)
    }

    @Test("the watcher lets go when no loop is held back, and the next hold-back hands the queue over again")
    func letsGo() {
        var loops = oneLoopInsideAnOperation()
        let seen = DrainLoops.Mark(progress: loops.progress, returned: 0)
        let verdict = loops.watch(seen: seen, returned: 0, admissible: 0, stuck: false)
        #expect(!verdict.keepsWatching && !loops.isWatched && !loops.addsFreely)
        #expect(loops.request(admissible: 2, mayHoldBack: true) == .watch)
    }

    @Test("without a watcher thread, a held-back loop is let go at once")
    func threadless() {
        var loops = oneLoopInsideAnOperation()
        let seen = DrainLoops.Mark(progress: 0, returned: 0)
        let verdict = loops.watch(seen: seen, returned: loops.progress, admissible: 2, stuck: true)
        #expect(!verdict.keepsWatching && loops.addsFreely)
    }

    @Test("a loop about to wait, or timing operations that are not tiny, adds loops freely until no loop runs")
    func blockingAndSlow() {
        var loops = oneLoopInsideAnOperation()
        let first = loops.loopWillBlock()
        let second = loops.loopWillBlock()
        #expect(first && !second)
        #expect(loops.request(admissible: 2, mayHoldBack: true) == .post)
        loops.started()
        loops.setBusy(false)
        loops.stopped()
        #expect(loops.addsFreely)
        loops.stopped()
        #expect(!loops.addsFreely)
        #expect(loops.isConsistent)

        var slow = oneLoopInsideAnOperation()
        slow.loopIsSlow()
        #expect(slow.request(admissible: 2, mayHoldBack: true) == .post)
    }

    @Test("the watcher's thread ends after a while with nothing to watch, and the next hand-over starts another")
    func watcherThreadEnds() {
        let watcher = LoopWatcher(idleExitNanoseconds: 20_000_000)
        let queue = makeQueue("drain.watcher")
        for _ in 0..<2 {
            // The queue holds nothing back: the first look lets it go.
            watcher.watch(queue, mark: DrainLoops.Mark(progress: 0, returned: 0))
            #expect(watcher.hasRunningThread)
            #expect(waitUntil { !watcher.hasRunningThread })
        }
    }

    @Test("the watcher's tick doubles up to its longest while loops keep up, resets when one did not, and is at least eight passes")
    func watcherTick() {
        let shortest = LoopWatcher.shortestTick
        let longest = LoopWatcher.longestTick
        // Doubling, capped.
        #expect(LoopWatcher.nextTick(after: shortest, everyLoopKeptUp: true, passNanoseconds: 0) == shortest * 2)
        #expect(LoopWatcher.nextTick(after: longest, everyLoopKeptUp: true, passNanoseconds: 0) == longest)
        #expect(LoopWatcher.nextTick(after: longest - 1, everyLoopKeptUp: true, passNanoseconds: 0) == longest)
        // A loop that did not keep up: back to the shortest.
        #expect(LoopWatcher.nextTick(after: longest, everyLoopKeptUp: false, passNanoseconds: 1_000) == shortest)
        // A long pass (thousands of watched queues): eight times the pass,
        // whether the loops kept up or not.
        #expect(LoopWatcher.nextTick(after: shortest, everyLoopKeptUp: false, passNanoseconds: 1_000_000) == 8_000_000)
        #expect(LoopWatcher.nextTick(after: longest, everyLoopKeptUp: true, passNanoseconds: 1_000_000) == 8_000_000)
        // After a long pass, a short one brings the tick back down.
        #expect(LoopWatcher.nextTick(after: 8_000_000, everyLoopKeptUp: true, passNanoseconds: 1_000) == longest)
        // Saturates instead of trapping.
        #expect(LoopWatcher.nextTick(after: .max, everyLoopKeptUp: true, passNanoseconds: .max) == .max)
        #expect(LoopWatcher.nextTick(after: .max, everyLoopKeptUp: true, passNanoseconds: 0) == longest)
    }

    @Test("no loop is requested while one is pending, or when the loops between operations can take the work")
    func noRequest() {
        var loops = DrainLoops()
        #expect(loops.request(admissible: 0, mayHoldBack: true) == .none)
        #expect(loops.request(admissible: 5, mayHoldBack: false) == .post)
        #expect(loops.request(admissible: 5, mayHoldBack: false) == .none)
        loops.started()
        #expect(loops.request(admissible: 1, mayHoldBack: false) == .none)
        loops.requestDropped()
        #expect(loops.isConsistent)
    }
}

/// A flag shared with operations.
private final class Flag: Sendable {
    private let value = Atomic<Bool>(false)
    func set(_ newValue: Bool = true) { value.store(newValue, ordering: .releasing) }
    var isSet: Bool { value.load(ordering: .acquiring) }
}

@Suite("Drain loops: nothing waits for the second loop")
struct DrainLoopBehaviourTests {
    @Test("an operation blocked on a semaphore gets the operation that signals it, on a default-width queue", arguments: [false, true])
    func blockedOnSemaphore(spins: Bool) {
        let queue = makeQueue("drain.semaphore")
        for _ in 0..<20 {
            // Tiny operations first, so that one loop holds the queue.
            for _ in 0..<200 { queue.addOperation {} }
            let signalled = DispatchSemaphore(value: 0)
            let flag = Flag()
            let waited = Flag()
            queue.addOperation {
                if spins {
                    let deadline = ContinuousClock.now + patience
                    while !flag.isSet, ContinuousClock.now < deadline {}
                    waited.set(flag.isSet)
                } else {
                    waited.set(signalled.wait(timeout: patience.dispatchTimeout) == .success)
                }
            }
            queue.addOperation {
                flag.set()
                signalled.signal()
            }
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 2))
            #expect(waited.isSet)
        }
    }

    @Test("an operation waiting for another operation of its queue with waitUntilFinished gets it")
    func waitsForSibling() {
        let queue = makeQueue("drain.sibling")
        for _ in 0..<20 {
            for _ in 0..<200 { queue.addOperation {} }
            let sibling = BlockOperation {}
            let waiter = BlockOperation { sibling.waitUntilFinished() }
            queue.addOperation(waiter)
            queue.addOperation(sibling)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(waiter.isFinished && sibling.isFinished)
        }
    }

    @Test("a completion block that blocks until a later operation runs does not hold it up")
    func blockingCompletionBlock() {
        let queue = makeQueue("drain.completion")
        let later = DispatchSemaphore(value: 0)
        let waited = Flag()
        let first = BlockOperation {}
        first.completionBlock = {
            waited.set(later.wait(timeout: patience.dispatchTimeout) == .success)
        }
        queue.addOperation(first)
        for _ in 0..<100 { queue.addOperation {} }
        queue.addOperation { later.signal() }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 2))
        // The completion block runs asynchronously: the wait does not wait
        // for it.
        #expect(waitUntil { waited.isSet })
    }

    @Test("eight operations that each wait for all eight to have started all run at once on a default-width queue")
    func rendezvous() {
        let queue = makeQueue("drain.rendezvous")
        let arrived = Latch(count: 8)
        let allArrived = Counter()
        for _ in 0..<8 {
            queue.addOperation {
                arrived.countDown()
                if arrived.wait() { _ = allArrived.increment() }
            }
        }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 2))
        #expect(allArrived.count == 8)
    }

    /// Five rounds on a queue of width 2: `make` returns the operations to
    /// add at once (and anything to keep alive meanwhile). Their user code
    /// blocks on `later` until a later operation signals it, and records in
    /// `waited` whether that came in time. The queue must drain, in time.
    private func expectLaterOperationRuns(
        _ name: String,
        _ make: (_ queue: OperationQueue, _ later: DispatchSemaphore, _ waited: Flag) -> (operations: [Operation], keepAlive: Any?)
    ) {
        for _ in 0..<5 {
            let queue = makeQueue(name, width: 2)
            let later = DispatchSemaphore(value: 0)
            let waited = Flag()
            let (operations, keepAlive) = make(queue, later, waited)
            queue.addOperations(operations, waitUntilFinished: false)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 2))
            // A completion block runs asynchronously: the queue's wait does
            // not wait for it.
            #expect(waitUntil { waited.isSet })
            withExtendedLifetime(keepAlive) {}
        }
    }

    @Test("an isReady observer that blocks, on the loop's thread, until a later operation runs does not hold it up (regression: probe 15)")
    func blockingReadinessObserver() {
        expectLaterOperationRuns("drain.readiness") { _, later, waited in
            let first = BlockOperation {}
            let dependent = BlockOperation {}
            dependent.addDependency(first)
            let token = dependent.observe(\.isReady, options: [.new]) { _, change in
                guard change.newValue == true else { return }
                waited.set(later.wait(timeout: patience.dispatchTimeout) == .success)
            }
            return ([first, dependent, BlockOperation { later.signal() }], token)
        }
    }

    @Test("a queue's .prior observer that blocks, on the loop's thread, until a later operation runs does not hold it up (regression: probe 15)")
    func blockingPriorQueueObserver() {
        expectLaterOperationRuns("drain.prior") { queue, later, waited in
            // The thread that ran `first`: the observer blocks only there,
            // when told that `first` is about to leave the queue.
            let loopThread = Box<ThreadID?>(nil)
            let first = BlockOperation { loopThread.value = currentThreadID() }
            let token = queue.observe(\.operationCount, options: [.prior]) { _, change in
                guard change.isPrior, let thread = loopThread.value, pthread_equal(thread, currentThreadID()) != 0 else { return }
                loopThread.value = nil
                waited.set(later.wait(timeout: patience.dispatchTimeout) == .success)
            }
            return ([first, BlockOperation { later.signal() }], token)
        }
    }

    @Test("a completion block that blocks until its own dependent runs does not hold it up (regression: probe 15)")
    func completionBlockWaitsForDependent() {
        expectLaterOperationRuns("drain.dependent") { _, later, waited in
            let first = BlockOperation {}
            let dependent = BlockOperation { later.signal() }
            dependent.addDependency(first)
            first.completionBlock = { waited.set(later.wait(timeout: patience.dispatchTimeout) == .success) }
            return ([first, dependent], nil)
        }
    }

    @Test("a queue the watcher watched is released once its work is done and its owner lets go")
    func watchedQueueIsReleased() {
        weak var released: OperationQueue?
        do {
            let queue = makeQueue("drain.released")
            released = queue
            for _ in 0..<20 {
                queue.addOperations((0..<500).map { _ in BlockOperation {} }, waitUntilFinished: true)
            }
        }
        #expect(waitUntil { released == nil })
    }

    @Test("operations that run long use more than one thread on a default-width queue")
    func longOperationsSpread() {
        let queue = makeQueue("drain.long")
        let tracker = ConcurrencyTracker()
        // Each operation runs until two have overlapped (or a bound passes):
        // the queue must run a second loop while the first is inside one.
        let overlapped = Gate()
        for _ in 0..<4 {
            queue.addOperation {
                tracker.enter()
                defer { tracker.leave() }
                if tracker.maximum >= 2 { overlapped.open() }
                _ = overlapped.wait(timeout: .seconds(2))
            }
        }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 2))
        #expect(tracker.maximum >= 2)
    }
}
