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
