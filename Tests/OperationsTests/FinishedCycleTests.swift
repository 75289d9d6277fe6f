@testable import Operations
import Testing

/// A dependency cycle that a cancel let run is freed once its operations have
/// finished (Foundation keeps them forever; probe 38, defect 3), while
/// `dependencies` keeps listing every edge for as long as its dependency is
/// alive.
@Suite("Finished dependency cycles are freed")
struct FinishedCycleTests {
    @Test("a two-operation cycle broken by a cancel is freed without removing an edge")
    func twoOperationCycle() {
        let tracker = LifetimeTracker()
        do {
            let queue = tracker.track(makeQueue("two-cycle"), "queue")
            let ran = Counter()
            let a = tracker.track(BlockOperation { ran.increment() }, "a")
            let b = tracker.track(BlockOperation { ran.increment() }, "b")
            a.addDependency(b)
            b.addDependency(a)
            queue.addOperations([a, b], waitUntilFinished: false)
            b.cancel()
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(ran.count == 1, "a runs, b (cancelled) does not")
            #expect(a.dependencies == [b] && b.dependencies == [a], "both edges are still listed")
        }
        let alive = tracker.waitForRelease()
        #expect(alive.isEmpty, "still alive: \(alive)")
    }

    @Test("a longer cycle is freed, whichever of its operations is cancelled", arguments: 0..<4)
    func longerCycle(cancelled: Int) {
        let tracker = LifetimeTracker()
        do {
            let queue = tracker.track(makeQueue("ring"), "queue")
            let ran = Counter()
            let ring = (0..<4).map { index in tracker.track(BlockOperation { ran.increment() }, "op\(index)") }
            for index in ring.indices { ring[index].addDependency(ring[(index + 1) % ring.count]) }
            queue.addOperations(ring, waitUntilFinished: false)
            ring[cancelled].cancel()
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(ran.count == 3)
            for index in ring.indices {
                #expect(ring[index].dependencies == [ring[(index + 1) % ring.count]], "op\(index)'s edge is still listed")
            }
        }
        let alive = tracker.waitForRelease()
        #expect(alive.isEmpty, "still alive: \(alive)")
    }

    @Test("a cycle among operations with other dependencies, all cancelled on a suspended queue, is freed")
    func cancelAllOnSuspendedQueue() {
        let tracker = LifetimeTracker()
        do {
            let queue = tracker.track(makeQueue("cancel-all"), "queue")
            queue.isSuspended = true
            let ran = Counter()
            let operations = (0..<40).map { index in tracker.track(BlockOperation { ran.increment() }, "op\(index)") }
            // A chain, closed into a cycle, plus edges across it.
            for index in 1..<operations.count { operations[index].addDependency(operations[index - 1]) }
            operations[0].addDependency(operations[39])
            for index in stride(from: 5, to: 40, by: 7) { operations[index].addDependency(operations[index / 2]) }
            // Added in reverse, so that dependents finish ahead of their dependencies.
            queue.addOperations(operations.reversed(), waitUntilFinished: false)
            queue.cancelAllOperations()
            queue.isSuspended = false
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(ran.count == 0)
        }
        let alive = tracker.waitForRelease()
        #expect(alive.isEmpty, "still alive: \(alive.count), for example \(alive.prefix(3))")
    }

    @Test("a cycle run by hand, without a queue, is freed")
    func startedByHand() {
        let tracker = LifetimeTracker()
        do {
            let a = tracker.track(BlockOperation {}, "a")
            let b = tracker.track(BlockOperation {}, "b")
            a.addDependency(b)
            b.addDependency(a)
            b.cancel()
            b.start()
            #expect(a.isReady)
            a.start()
            #expect(a.isFinished && b.isFinished)
        }
        let alive = tracker.waitForRelease()
        #expect(alive.isEmpty, "still alive: \(alive)")
    }

    @Test("the freed edge can be removed, is not added twice, and goes with its dependency")
    func weakenedEdgeEdits() {
        let queue = makeQueue("edits")
        let a = BlockOperation {}
        var b: BlockOperation? = BlockOperation {}
        a.addDependency(b!)
        b!.addDependency(a)
        queue.addOperations([a, b!], waitUntilFinished: false)
        b!.cancel()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        // b finished ahead of a: its edge to a is the one that closed the cycle.
        b!.addDependency(a)
        #expect(b!.dependencies == [a], "not listed twice")
        b!.removeDependency(a)
        #expect(b!.dependencies.isEmpty)
        b!.addDependency(a)
        #expect(b!.dependencies == [a], "added again, strongly")
        b!.removeDependency(a)

        // Weak: once only the cycle held the dependency, the edge goes with it.
        let c = BlockOperation {}
        weak var weakD: BlockOperation?
        do {
            let d = BlockOperation {}
            weakD = d
            c.addDependency(d)
            d.addDependency(c)
            queue.addOperations([c, d], waitUntilFinished: false)
            c.cancel()
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(c.dependencies == [d])
        }
        #expect(waitUntil { weakD == nil }, "d is held only by the weakened edge")
        #expect(c.dependencies.isEmpty)
        b = nil
    }

    @Test("an acyclic graph keeps its edges strong after a cancel")
    func acyclicEdgesStayStrong() {
        let queue = makeQueue("acyclic")
        let first = BlockOperation {}
        let second = BlockOperation {}
        second.addDependency(first)
        weak let weakFirst: BlockOperation? = first
        queue.addOperations([second, first], waitUntilFinished: false)
        second.cancel()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        _ = consume first
        #expect(staysFalse { weakFirst == nil }, "the finished dependent still holds its dependency")
        #expect(second.dependencies.count == 1)
    }

    @Test("an operation that finished ahead of its dependency and was freed leaves that dependency's list")
    func freedAheadOfDependency() {
        let queue = makeQueue("freed-ahead")
        let gate = Gate()
        let blocker = BlockOperation { _ = gate.wait() }
        let dependency = BlockOperation {}
        dependency.addDependency(blocker)
        weak var weakDependent: BlockOperation?
        do {
            let dependent = BlockOperation {}
            weakDependent = dependent
            dependent.addDependency(dependency)
            dependent.cancel()
            queue.addOperations([blocker, dependency, dependent], waitUntilFinished: false)
            #expect(waitUntil { dependent.isFinished })
        }
        // Freed while its dependency (which it held) has not finished; the
        // dependency's finish must not find it in its list.
        #expect(waitUntil { weakDependent == nil }, "the cancelled dependent is freed once its queue lets go of it")
        gate.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(dependency.isFinished)
    }

    @Test("dependents freed while their dependency finishes are skipped safely", arguments: [false, true])
    func freedWhileDependencyFinishes(inQueue: Bool) {
        let queue = makeQueue("freed-race")
        for _ in 0..<300 {
            let dependency = BlockOperation {}
            let dependents = (0..<4).map { _ in
                let dependent = BlockOperation {}
                dependent.addDependency(dependency)
                dependent.cancel()
                return dependent
            }
            if inQueue {
                queue.addOperations(dependents, waitUntilFinished: true)
            } else {
                for dependent in dependents { dependent.start() }
            }
            let holder = Box<[BlockOperation]?>(dependents)
            _ = consume dependents
            let go = Latch(count: 1)
            let dropped = Latch(count: 1)
            spawnThread {
                go.wait()
                holder.value = nil
                dropped.countDown()
            }
            go.countDown()
            dependency.start()
            #expect(dropped.wait())
            #expect(dependency.isFinished)
        }
    }

    /// Its `deinit` stops until told to go on: it is then deinitializing,
    /// but still in the dependents list of its dependency.
    final class PausedDeinit: Operation, @unchecked Sendable {
        let entered: Latch
        let proceed: Latch
        init(entered: Latch, proceed: Latch) {
            self.entered = entered
            self.proceed = proceed
        }
        deinit {
            entered.countDown()
            proceed.wait()
        }
    }

    @Test("a dependency that finishes while a dependent that finished ahead of it is being deallocated does not hold it")
    func dependentDeallocatingDuringFinish() {
        let queue = makeQueue("deallocating")
        let entered = Latch(count: 1)
        let proceed = Latch(count: 1)
        let freed = Latch(count: 1)
        let dependency = BlockOperation {}
        let holder = Box<PausedDeinit?>(PausedDeinit(entered: entered, proceed: proceed))
        holder.value!.addDependency(dependency)
        holder.value!.cancel()
        queue.addOperation(holder.value!)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        // Deallocated on another thread, and paused there in its `deinit`.
        spawnThread {
            holder.value = nil
            freed.countDown()
        }
        #expect(entered.wait())
        // The finish finds it in its list: it must not take a reference to
        // it, which the completion block below would outlive.
        dependency.completionBlock = {
            proceed.countDown()
            freed.wait()
        }
        dependency.start()
        #expect(freed.wait())
        #expect(dependency.isFinished)
    }

    @Test("a cycle through a ResultOperation's input, held by the error its failure policy records, is freed")
    func resultOperationInputCycle() {
        let tracker = LifetimeTracker()
        do {
            let queue = tracker.track(makeQueue("result-cycle"), "queue")
            let a = tracker.track(ResultOperation<Int, Never> { 1 }, "a")
            let b = tracker.track(ResultOperation<Int, Never>(after: a) { $0 + 1 }, "b")
            a.addDependency(b)
            a.cancel()
            queue.addOperations([a, b], waitUntilFinished: false)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(b.isCancelled, "its failure policy cancelled it, naming a")
        }
        let alive = tracker.waitForRelease()
        #expect(alive.isEmpty, "still alive: \(alive)")
    }

    @Test("two operations of a cycle finishing at once weaken one edge, not both")
    func concurrentFinishesWeakenOneEdge() {
        var bothWeakened = 0
        for _ in 0..<300 {
            let a = BlockOperation {}
            let b = BlockOperation {}
            a.addDependency(b)
            b.addDependency(a)
            a.cancel()
            b.cancel()
            // Both threads spin until both have arrived, so that the two
            // finishes overlap (a semaphore's wake-up staggers them).
            let arrived = Counter()
            let done = Latch(count: 2)
            for operation in [a, b] {
                spawnThread {
                    arrived.increment()
                    let deadline = ContinuousClock.now + patience
                    while arrived.count < 2, ContinuousClock.now < deadline {}
                    operation.start()
                    done.countDown()
                }
            }
            #expect(done.wait())
            let strongEdges = [a, b].map { operation in operation.withStateLock { _ in operation.storedDependencies.count } }
            #expect(a.dependencies == [b] && b.dependencies == [a])
            if strongEdges == [0, 0] { bothWeakened += 1 }
            #expect(strongEdges.reduce(0, +) >= 1, "one strong edge is kept")
        }
        #expect(bothWeakened == 0)
    }

    @Test("finishing an acyclic chain whose cancelled followers finished first searches for no cycle")
    func cancelledLeavesAreNotSearched() {
        let queue = makeQueue("ladder", width: 1)
        queue.isSuspended = true
        let links = (0..<500).map { _ in BlockOperation {} }
        let followers = (0..<500).map { _ in BlockOperation {} }
        for index in 1..<links.count { links[index].addDependency(links[index - 1]) }
        for index in followers.indices { followers[index].addDependency(links[index]) }
        queue.addOperations(followers, waitUntilFinished: false)
        queue.addOperations(links, waitUntilFinished: false)
        for follower in followers { follower.cancel() }
        let searchesBefore = Operation.cycleSearches.load(ordering: .relaxed)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        // Each link finishes with a finished dependency behind it and a
        // follower that finished ahead of it; no follower is anyone's
        // dependency, so none can be on a cycle. (Other tests may search
        // meanwhile: the count is a bound, not an exact figure.)
        let searches = Operation.cycleSearches.load(ordering: .relaxed) - searchesBefore
        #expect(searches < 100, "\(searches) searches for 500 finishes")
    }
}
