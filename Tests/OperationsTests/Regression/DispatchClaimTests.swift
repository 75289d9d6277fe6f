// A dependency given to a queued operation while its queue is taking it to
// start: the edit and the queue's choice are decided in one order under the
// operation's lock. Either the edge counts (the operation reads not ready
// afterwards) and the operation waits for the dependency, or the queue took
// the operation first and the edge is only listed, as for an operation that
// already started. Before the claim, the queue could take an operation,
// the edge could then count, and the operation still ran: not ready, with an
// unfinished dependency (probe 13, about one start in a hundred).

import Synchronization
import Testing
@testable import Operations

/// Records, when its body runs, whether its dependency had finished.
private final class DependencyCheckingOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `gate` is set before the operation is shared and
    // never changed; the flags are atomic.
    let gate: Operation
    let ranEarly = Atomic<Bool>(false)
    let ran = Atomic<Bool>(false)

    init(gate: Operation) {
        self.gate = gate
        super.init()
    }

    override func main() {
        if !gate.isFinished { ranEarly.store(true, ordering: .releasing) }
        ran.store(true, ordering: .releasing)
    }
}

/// Its `isReady` is `super.isReady`, read through a hook that can run once,
/// inside the getter: the moment the queue re-reads the override.
private final class HookedReadiness: Operation, @unchecked Sendable {
    // @unchecked Sendable: `gate` is set before the operation is shared; the
    // hook is behind a mutex; the flags are atomic.
    let gate: Operation
    let hook = Mutex<(@Sendable () -> Void)?>(nil)
    let ranEarly = Atomic<Bool>(false)
    let started = Gate()

    init(gate: Operation) {
        self.gate = gate
        super.init()
    }

    override var isReady: Bool {
        let ready = super.isReady
        if let hook = hook.withLock({ $0.take() }) { hook() }
        return ready
    }

    override func main() {
        if !gate.isFinished { ranEarly.store(true, ordering: .releasing) }
        started.open()
    }
}

@Suite("A dependency added while the queue takes the operation")
struct DispatchClaimTests {
    @Test("an edge that counts holds the operation back, even when added while its queue takes it (regression: probe 13)")
    func countedEdgeHoldsBack() {
        var counted = 0
        var notCounted = 0
        for round in 0..<300 {
            let queue = makeQueue("dispatch-claim-\(round)", width: 2)
            let gate = BlockOperation {}
            let operations = (0..<40).map { _ in DependencyCheckingOperation(gate: gate) }
            let edgeCounted = Mutex<[Bool]>(Array(repeating: false, count: operations.count))
            let go = Latch(count: 1)
            let done = Latch(count: 1)
            spawnThread {
                go.wait()
                for (index, operation) in operations.enumerated().reversed() {
                    operation.addDependency(gate)
                    // The gate has not run: not ready means the edge counts.
                    let holds = !operation.isReady
                    edgeCounted.withLock { $0[index] = holds }
                }
                done.countDown()
            }
            go.countDown()
            for operation in operations { queue.addOperation(operation) }
            #expect(done.wait(timeout: patience))
            gate.start()
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            let holds = edgeCounted.withLock { $0 }
            for (index, operation) in operations.enumerated() {
                let ran = operation.ran.load(ordering: .acquiring)
                #expect(ran, "round \(round), operation \(index) never ran")
                if holds[index] {
                    counted += 1
                    let early = operation.ranEarly.load(ordering: .acquiring)
                    if early {
                        Issue.record("round \(round), operation \(index): not ready after addDependency, yet it ran before its dependency finished")
                        return
                    }
                } else {
                    notCounted += 1
                    // Taken by the queue first: the edge is listed all the same.
                    #expect(operation.dependencies.contains { $0 === gate })
                }
            }
            expectQueueInvariants(queue)
        }
        #expect(counted > 0, "no edge counted in \(counted + notCounted) tries: the scenario tests nothing")
    }

    @Test("an isReady override read before a dependency counted is not trusted: the queue waits for its re-read (regression: probe 14)")
    func staleOverrideReadingIsNotTrusted() {
        for round in 0..<10 {
            let queue = makeQueue("dispatch-claim-override-\(round)", width: 1)
            let blockerRunning = Gate()
            let releaseBlocker = Gate()
            queue.addOperation {
                blockerRunning.open()
                releaseBlocker.wait()
            }
            #expect(blockerRunning.wait())
            let gate = BlockOperation {}
            let operation = HookedReadiness(gate: gate)
            // Read ready when added: it waits in its lane for the slot.
            queue.addOperation(operation)
            // The edit below counts its edge, then asks the queue to re-read
            // the override. While the getter runs, the slot frees: the queue
            // must not start the operation on its earlier reading.
            operation.hook.withLock { hook in
                hook = {
                    releaseBlocker.open()
                    _ = operation.started.wait(timeout: negativeWindow)
                }
            }
            operation.addDependency(gate)
            #expect(!operation.isReady)
            let early = operation.ranEarly.load(ordering: .acquiring)
            if early {
                Issue.record("round \(round): the operation ran before its dependency, on a reading of isReady taken before the dependency counted")
                return
            }
            #expect(staysFalse { operation.started.opened })
            gate.start()
            #expect(operation.started.wait())
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            expectQueueInvariants(queue)
        }
    }

    @Test("a self-dependency given once the operation started, or after it finished, does not keep it alive (regression: probe 14)")
    func lateSelfDependencyDoesNotLeak() {
        let queue = makeQueue("dispatch-claim-self", width: 1)
        let entered = Gate()
        let release = Gate()
        let executing = WeakReference<BlockOperation>(nil)
        let finished = WeakReference<BlockOperation>(nil)
        do {
            let operation = BlockOperation {
                entered.open()
                release.wait()
            }
            executing.object = operation
            queue.addOperation(operation)
            #expect(entered.wait())
            operation.addDependency(operation)
            #expect(operation.dependencies.count == 1, "listed while it runs")
            #expect(operation.isReady, "does not count once started")
            release.open()
            #expect(operation.waitUntilFinished(timeout: patience))
            #expect(operation.dependencies.isEmpty, "dropped when it finished")

            let done = BlockOperation {}
            finished.object = done
            done.start()
            done.addDependency(done)
            #expect(done.dependencies.isEmpty, "not listed after the finish")
        }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(waitUntil { executing.isReleased }, "an operation given itself as a dependency while executing was never released")
        #expect(finished.isReleased, "a finished operation given itself as a dependency was never released")
    }

    @Test("an edge added after the queue took the operation is listed and does not count, and a duplicate is still refused")
    func uncountedEdgeIsListedOnce() {
        let queue = makeQueue("dispatch-claim-listed", width: 1)
        let entered = Gate()
        let release = Gate()
        let dependency = BlockOperation {}
        let operation = BlockOperation {
            entered.open()
            _ = release.wait()
        }
        queue.addOperation(operation)
        #expect(entered.wait())
        operation.addDependency(dependency)
        operation.addDependency(dependency)
        #expect(operation.dependencies.count == 1)
        #expect(operation.isReady, "an edge added while executing does not count")
        release.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        operation.removeDependency(dependency)
        #expect(operation.dependencies.isEmpty)
    }
}

@Suite("The claim's state bits")
struct DispatchClaimStateTests {
    @Test("a dispatched operation accepts no new dependency, but one counted before still counts")
    func dispatchedAcceptsNoDependency() {
        var state = OperationState()
        let countedBefore = state.addUnfinishedDependency()
        #expect(countedBefore)
        state.isDispatched = true
        #expect(!state.acceptsDependencies)
        #expect(state.countsDependencies, "the edge counted before the claim still counts")
        let countedAfter = state.addUnfinishedDependency()
        #expect(!countedAfter)
        #expect(state.unfinishedDependencies == 1)
        _ = state.removeUnfinishedDependency()
        #expect(state.unfinishedDependencies == 0)
    }

    @Test("clearing the dependencies drops both self-dependency marks; the stale mark is independent")
    func clearingDropsSelfMarks() {
        var state = OperationState()
        state.hasSelfDependency = true
        state.hasUncountedSelfDependency = true
        state.isReadinessStale = true
        state.clearDependencies()
        #expect(!state.hasSelfDependency && !state.hasUncountedSelfDependency)
        #expect(state.isReadinessStale)
        state.isReadinessStale = false
        #expect(state == OperationState())
    }

    @Test("the claim respects its condition and the stale mark")
    func claimConditions() {
        let waiting = BlockOperation {}
        let dependency = BlockOperation {}
        waiting.addDependency(dependency)
        #expect(!waiting.claimForDispatch(.baseReadiness), "an unfinished dependency counts")
        #expect(!waiting.loadState().isDispatched)
        let stale = BlockOperation {}
        stale.withStateLock { $0.isReadinessStale = true }
        #expect(!stale.claimForDispatch(.freshReadiness))
        #expect(stale.claimForDispatch(.baseReadiness), "the stale mark concerns only isReady overrides")
        #expect(stale.loadState().isDispatched)
        #expect(waiting.claimForDispatch(.none), "a cancelled operation's claim checks nothing")
        dependency.start()
    }
}
