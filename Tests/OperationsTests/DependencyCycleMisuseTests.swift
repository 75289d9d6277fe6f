// Dependency cycles as misuse: with `OperationMisuse.reportsDependencyCycles`
// on, an edge that would close a cycle is refused and reported with every
// member named; by default a cycle is kept, as in Foundation, and
// cancelling a member breaks it.

import Dispatch
import Synchronization
import Testing
@testable import Operations

@Suite("Misuse: dependency cycles")
struct DependencyCycleMisuseTests {
    @Test("with cycle reporting on, a two-operation cycle A→B→A is refused and names both")
    func twoOperationCycle() {
        let log = Recorder<String>()
        let a = namedOperation("cycle-A") { log.record("A") }
        let b = namedOperation("cycle-B") { log.record("B") }
        a.addDependency(b)
        let reported = OperationMisuse.withDependencyCycleReporting { misuses { b.addDependency(a) } }
        expectSingle(reported, .dependencyCycle, naming: "\"cycle-B\"")
        #expect(reported.first?.message.contains("\"cycle-A\"") == true)
        #expect(b.dependencies.isEmpty)
        #expect(b.isReady)
        let queue = makeQueue("after-cycle")
        queue.addOperations([a, b], waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["B", "A"])
        unrelatedWorkStillRuns()
    }

    @Test("with cycle reporting on, two threads adding A→B and B→A at once never both succeed (regression)")
    func concurrentCheckedEditsCannotCloseACycle() async {
        // Both adds run in tasks that inherit the reporting scope and the
        // recording handler; they start together, so that before the fix
        // both could pass the check before either added its edge.
        var closed = 0
        var reportedTotal = 0
        for _ in 0..<3_000 {
            let a = BlockOperation {}
            let b = BlockOperation {}
            let reported = Counter()
            let arrived = Counter()
            let tasks = OperationMisuse.withHandler({ _ in reported.increment() }) {
                OperationMisuse.withDependencyCycleReporting {
                    [(a, b), (b, a)].map { pair in
                        Task {
                            arrived.increment()
                            // Bounded spin until both tasks run.
                            var spins = 0
                            while arrived.count < 2, spins < 100_000 { spins += 1 }
                            pair.0.addDependency(pair.1)
                        }
                    }
                }
            }
            for task in tasks { await task.value }
            if a.dependencies.count == 1, b.dependencies.count == 1 { closed += 1 }
            reportedTotal += reported.count
        }
        #expect(closed == 0, "\(closed) cycles were closed without a report")
        #expect(reportedTotal == 3_000, "one of each pair of adds is refused and reported")
    }

    @Test("with cycle reporting on, an edge that cannot hold anything back closes no cycle: from a running, a cancelled or a finished operation, or a self-dependency of one (regression: probe 24)")
    func edgesThatDoNotCountCloseNoCycle() {
        // From a running operation (its new dependencies have no effect, as in Foundation).
        let release = Gate()
        let entered = Gate()
        let running = namedOperation("nocount-running") {
            entered.open()
            _ = release.wait(timeout: patience)
        }
        let waiting = namedOperation("nocount-waiting")
        waiting.addDependency(running)
        spawnThread { running.start() }
        #expect(entered.wait(timeout: patience))
        let fromRunning = OperationMisuse.withDependencyCycleReporting { misuses { running.addDependency(waiting) } }
        #expect(fromRunning.isEmpty, "\(fromRunning.map(\.message))")
        #expect(running.dependencies.count == 1, "the edge is added")
        // A self-dependency of the running operation.
        let selfWhileRunning = OperationMisuse.withDependencyCycleReporting { misuses { running.addDependency(running) } }
        #expect(selfWhileRunning.isEmpty, "\(selfWhileRunning.map(\.message))")
        release.open()
        #expect(running.waitUntilFinished(timeout: patience))
        // From a cancelled operation: it is ready whatever it depends on.
        let cancelled = namedOperation("nocount-cancelled")
        let dependent = namedOperation("nocount-dependent")
        cancelled.cancel()
        dependent.addDependency(cancelled)
        let fromCancelled = OperationMisuse.withDependencyCycleReporting { misuses { cancelled.addDependency(dependent) } }
        #expect(fromCancelled.isEmpty, "\(fromCancelled.map(\.message))")
        #expect(cancelled.isReady)
        // A self-dependency of a finished operation.
        let finished = namedOperation("nocount-finished")
        finished.start()
        let selfWhenFinished = OperationMisuse.withDependencyCycleReporting { misuses { finished.addDependency(finished) } }
        #expect(selfWhenFinished.isEmpty, "\(selfWhenFinished.map(\.message))")
        // A pending self-dependency still counts, and is still reported.
        let pending = namedOperation("nocount-pending")
        let selfPending = OperationMisuse.withDependencyCycleReporting { misuses { pending.addDependency(pending) } }
        expectSingle(selfPending, .dependencyCycle, naming: "\"nocount-pending\"")
    }

    @Test("with cycle reporting on, a longer cycle A→B→C→D→A is refused and names every operation on it")
    func longerCycle() {
        let ops = ["A", "B", "C", "D"].map { namedOperation("long-\($0)") }
        ops[0].addDependency(ops[1])
        ops[1].addDependency(ops[2])
        ops[2].addDependency(ops[3])
        let reported = OperationMisuse.withDependencyCycleReporting { misuses { ops[3].addDependency(ops[0]) } }
        expectSingle(reported, .dependencyCycle, naming: "\"long-D\"")
        for name in ["A", "B", "C", "D"] {
            #expect(reported.first?.message.contains("\"long-\(name)\"") == true, "the message does not name long-\(name)")
        }
        #expect(ops[3].dependencies.isEmpty)
        let queue = makeQueue("after-long-cycle")
        queue.addOperations(ops, waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        unrelatedWorkStillRuns()
    }

    @Test("with cycle reporting on, an operation made its own dependency is refused")
    func selfDependency() {
        let op = namedOperation("self-dependent")
        let reported = OperationMisuse.withDependencyCycleReporting { misuses { op.addDependency(op) } }
        expectSingle(reported, .dependencyCycle, naming: "\"self-dependent\"")
        #expect(op.dependencies.isEmpty && op.isReady)
        unrelatedWorkStillRuns()
    }

    @Test("by default a cycle is kept, as in Foundation: it never runs, diagnostics name it, cancelling a member breaks it")
    func cycleKeptAndBroken() {
        let log = Recorder<String>()
        let a = namedOperation("kept-A") { log.record("A") }
        let b = namedOperation("kept-B") { log.record("B") }
        let c = namedOperation("kept-C") { log.record("C") }
        let reported = misuses {
            a.addDependency(b)
            b.addDependency(c)
            c.addDependency(a)
        }
        #expect(reported.isEmpty)
        #expect(c.dependencies == [a])
        #expect(!a.isReady && !b.isReady && !c.isReady)
        let queue = makeQueue("kept-cycle")
        queue.addOperations([a, b, c], waitUntilFinished: false)
        #expect(!queue.waitUntilAllOperationsAreFinished(timeout: negativeWindow))
        #expect(queue.operationCount == 3)
        let report = queue.diagnostics()
        #expect(report.cycles.count == 1)
        #expect(report.contains("cycle:"))
        for name in ["kept-A", "kept-B", "kept-C"] { #expect(report.contains(name)) }
        c.cancel()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["B", "A"])
        #expect(c.isCancelled && c.isFinished)
    }

    @Test("by default a self-dependency is kept: the operation waits until cancelled, and is then released")
    func selfDependencyKept() {
        weak var released: Operation?
        do {
            let op = namedOperation("self-kept")
            released = op
            op.addDependency(op)
            #expect(op.dependencies == [op])
            #expect(!op.isReady)
            let queue = makeQueue("self-kept")
            queue.addOperation(op)
            #expect(!queue.waitUntilAllOperationsAreFinished(timeout: negativeWindow))
            op.cancel()
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(op.isFinished)
        }
        #expect(released == nil)
    }

    @Test("a diamond is not a cycle")
    func diamondIsNotACycle() {
        let top = namedOperation("top"), left = namedOperation("left"), right = namedOperation("right"), bottom = namedOperation("bottom")
        let reported = misuses {
            left.addDependency(top)
            right.addDependency(top)
            bottom.addDependency(left)
            bottom.addDependency(right)
        }
        #expect(reported.isEmpty)
        let queue = makeQueue("diamond")
        queue.addOperations([bottom, right, left, top], waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }
}
