// Ready operations of equal priority start in the order they were added to
// the queue, however late each became ready (Foundation's order, and the
// "first in, first out through the pipe" of the serial-queue article).
// Before the fix, a queue started them in the order they became ready.

import Testing
@testable import Operations

@Suite("Ready operations start in add order")
struct ReadyOrderTests {
    @Test("a serial queue starts an operation whose dependency finished late before a later-added ready one")
    func dependencyFinishedLate() {
        let log = Recorder<String>()
        let queue = makeQueue("ready-order", width: 1)
        queue.isSuspended = true
        let gate = BlockOperation {}
        let early = BlockOperation { log.record("early") }
        early.addDependency(gate)
        let later = BlockOperation { log.record("later") }
        queue.addOperations([early, later], waitUntilFinished: false)
        gate.start()
        #expect(early.isReady)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["early", "later"])
    }

    @Test("the same while the queue runs: the article's pipe keeps add order")
    func dependencyFinishedWhileRunning() {
        let log = Recorder<String>()
        let queue = makeQueue("ready-order-running", width: 1)
        let other = makeQueue("ready-order-other")
        let gate = BlockOperation { log.record("gate") }
        let inBlocker = Gate()
        let release = Gate()
        let early = BlockOperation { log.record("early") }
        early.addDependency(gate)
        let blocker = BlockOperation {
            log.record("blocker")
            inBlocker.open()
            _ = release.wait()
        }
        let later = BlockOperation { log.record("later") }
        queue.addOperations([early, blocker, later], waitUntilFinished: false)
        #expect(inBlocker.wait())
        other.addOperation(gate)
        #expect(gate.waitUntilFinished(timeout: patience))
        #expect(waitUntil { early.isReady })
        release.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["blocker", "gate", "early", "later"])
    }

    @Test("an isReady override that turns true late keeps its add order")
    func customReadinessLate() {
        let log = Recorder<String>()
        let queue = makeQueue("ready-order-custom", width: 1)
        queue.isSuspended = true
        let first = GatedReadinessOperation { log.record("first") }
        let second = BlockOperation { log.record("second") }
        let third = GatedReadinessOperation { log.record("third") }
        queue.addOperations([first, second, third], waitUntilFinished: false)
        third.allow()
        first.allow()
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["first", "second", "third"])
    }

    @Test("with two slots, the two oldest ready operations take them")
    func widthTwo() {
        let queue = makeQueue("ready-order-two", width: 2)
        queue.isSuspended = true
        let started = Recorder<String>()
        let release = Gate()
        let gate = BlockOperation {}
        func blocking(_ label: String) -> BlockOperation {
            BlockOperation {
                started.record(label)
                _ = release.wait()
            }
        }
        let first = blocking("first")
        let early = blocking("early")
        early.addDependency(gate)
        let later = blocking("later")
        queue.addOperations([first, early, later], waitUntilFinished: false)
        gate.start()
        queue.isSuspended = false
        #expect(waitUntil { started.count == 2 })
        #expect(staysFalse { started.count > 2 })
        #expect(Set(started.events) == ["first", "early"])
        release.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("a width set after operations became ready puts them back in add order")
    func widthSetLater() {
        let log = Recorder<String>()
        let queue = makeQueue("ready-order-width-later")
        queue.isSuspended = true
        let gates = (0..<3).map { _ in BlockOperation {} }
        let operations = (0..<6).map { index in BlockOperation { log.record("\(index)") } }
        for index in [0, 2, 4] { operations[index].addDependency(gates[index / 2]) }
        queue.addOperations(operations, waitUntilFinished: false)
        for gate in gates.reversed() { gate.start() }
        queue.maxConcurrentOperationCount = 1
        expectQueueInvariants(queue)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["0", "1", "2", "3", "4", "5"])
    }

    @Test("priority still comes first: a later-added higher-priority operation starts before an older normal one")
    func priorityBeforeAddOrder() {
        let log = Recorder<String>()
        let queue = makeQueue("ready-order-priority", width: 1)
        queue.isSuspended = true
        let gate = BlockOperation {}
        let early = BlockOperation { log.record("early") }
        early.addDependency(gate)
        let low = BlockOperation { log.record("low") }
        low.queuePriority = .low
        let high = BlockOperation { log.record("high") }
        high.queuePriority = .high
        let later = BlockOperation { log.record("later") }
        queue.addOperations([low, early, later, high], waitUntilFinished: false)
        gate.start()
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["high", "early", "later", "low"])
    }

    @Test("operations released by a barrier start in add order")
    func barrierReleasesInAddOrder() {
        let log = Recorder<String>()
        let queue = makeQueue("ready-order-barrier", width: 1)
        queue.isSuspended = true
        let gate = BlockOperation {}
        queue.addBarrierBlock { log.record("barrier") }
        let early = BlockOperation { log.record("early") }
        early.addDependency(gate)
        let later = BlockOperation { log.record("later") }
        queue.addOperations([early, later], waitUntilFinished: false)
        gate.start()
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.events == ["barrier", "early", "later"])
    }

    @Test("many operations made ready in a random order start in add order; leaving the lane keeps it sorted",
          arguments: [UInt64(1), 2, 3])
    func randomReadinessOrder(seed: UInt64) {
        var random = SeededRandom(seed: seed)
        let count = 600
        let log = Recorder<Int>()
        let queue = makeQueue("ready-order-random-\(seed)", width: 1)
        queue.isSuspended = true
        var gates: [BlockOperation] = []
        var operations: [BlockOperation] = []
        for index in 0..<count {
            let operation = BlockOperation { log.record(index) }
            if index % 3 != 0 {
                let gate = BlockOperation {}
                operation.addDependency(gate)
                gates.append(gate)
            }
            operations.append(operation)
        }
        queue.addOperations(operations, waitUntilFinished: false)
        gates.shuffle(using: &random)
        for (step, gate) in gates.enumerated() {
            gate.start()
            if step % 50 == 0 { expectQueueInvariants(queue) }
        }
        // Operations leaving their lane from the middle: cancelled, given a
        // new unfinished dependency, moved to another priority.
        var cancelled: Set<Int> = []
        var held: Set<Int> = []
        let holder = BlockOperation {}
        for index in stride(from: 5, to: count, by: 41) {
            operations[index].cancel()
            cancelled.insert(index)
        }
        for index in stride(from: 7, to: count, by: 53) where !cancelled.contains(index) {
            operations[index].addDependency(holder)
            held.insert(index)
        }
        expectQueueInvariants(queue)
        queue.isSuspended = false
        #expect(waitUntil { log.count == count - cancelled.count - held.count })
        holder.start()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        let expected = (0..<count).filter { !cancelled.contains($0) && !held.contains($0) } + held.sorted()
        let events = log.events
        let divergence = Array(zip(events, expected)).firstIndex { $0 != $1 } ?? min(events.count, expected.count)
        #expect(events == expected, "first difference at position \(divergence) of \(expected.count)")
        expectQueueInvariants(queue)
    }
}

@Suite("Invariant checks")
struct InvariantCheckTests {
    @Test("a broken invariant is reported, not a deadlock (the message named the queue under its own lock)")
    func brokenInvariantIsReported() {
        let queue = makeQueue("broken-on-purpose")
        queue.isSuspended = true
        let operation = BlockOperation {}
        queue.addOperation(operation)
        // Break one invariant by hand: a queue that holds work retains itself.
        let saved = queue.lock.withLock { () -> Unmanaged<OperationQueue>? in
            let saved = queue.retainedSelf
            queue.retainedSelf = nil
            return saved
        }
        let report = LockedValue<String?>(nil)
        let returned = completesInTime { report.withLock { $0 = queueInvariantProblem(queue) } }
        #expect(returned, "_checkInvariants() did not return")
        #expect(report.withLock { $0 }?.contains("broken-on-purpose") == true)
        #expect(report.withLock { $0 }?.contains("does not retain itself") == true)
        guard returned else { return }
        queue.lock.withLock { queue.retainedSelf = saved }
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }
}

@Suite("Ready lanes (scheduling state)")
struct ReadyLaneStateTests {
    /// Links `count` operations into a fresh scheduling state and makes
    /// them ready in `readyOrder`, as a running queue of the default width
    /// would (holding nothing back); then `hold` makes the state hold ready
    /// operations back. Returns the order `popNext` starts them in.
    private func startOrder(count: Int, readyOrder: [Int], hold: (inout QueueState) -> Void) -> [Int] {
        var state = QueueState()
        defer { state.releaseStorage() }
        let operations = (0..<count).map { _ in BlockOperation {} }
        for operation in operations {
            state.link(operation, barrier: false, customReadiness: false, customStart: false)
        }
        for index in readyOrder {
            state.apply(operations[index], ready: true, cancelled: false)
        }
        #expect(state.checkInvariants() == nil)
        hold(&state)
        #expect(state.checkInvariants() == nil)
        return startAll(&state).map { started in operations.firstIndex { $0 === started } ?? -1 }
    }

    /// Starts (pops) and retires every operation the state lets start, in
    /// order, giving back the add-order list's retain of each.
    private func startAll(_ state: inout QueueState) -> [Operation] {
        var order: [Operation] = []
        while let popped = state.popNext() {
            let next = popped.takeUnretainedValue()
            order.append(next)
            if let owned = state.unlink(next, retirementPending: false) { owned.release() }
        }
        return order
    }

    @Test("setting a width puts lanes filled in readiness order back in add order")
    func widthOrdersLanes() {
        let order = startOrder(count: 8, readyOrder: [3, 1, 7, 0, 2, 6, 4, 5]) { state in
            state.width = 1
        }
        #expect(order == Array(0..<8))
    }

    @Test("suspending puts lanes filled in readiness order back in add order")
    func suspensionOrdersLanes() {
        let order = startOrder(count: 8, readyOrder: [5, 4, 6, 2, 0, 7, 1, 3]) { state in
            state.isSuspended = true
            state.isSuspended = false
        }
        #expect(order == Array(0..<8))
    }

    @Test("operations a barrier releases go to their lanes in add order, even on a queue of the default width")
    func barrierReleaseInAddOrder() {
        var state = QueueState()
        defer { state.releaseStorage() }
        let first = BlockOperation {}
        state.link(first, barrier: false, customReadiness: false, customStart: false)
        let barrier = BlockOperation {}
        state.link(barrier, barrier: true, customReadiness: false, customStart: false)
        state.barrierLinked(barrier)
        let held = (0..<5).map { _ in BlockOperation {} }
        for operation in held {
            state.link(operation, barrier: false, customReadiness: false, customStart: false)
        }
        for index in [3, 0, 4, 1, 2] {
            state.apply(held[index], ready: true, cancelled: false)
        }
        state.apply(first, ready: true, cancelled: false)
        let order = startAll(&state)
        #expect(order.count == 7)
        #expect(order.first === first && order.dropFirst().first === barrier)
        #expect(order.dropFirst(2).map { operation in held.firstIndex { $0 === operation } ?? -1 } == Array(0..<5))
        #expect(state.checkInvariants() == nil)
    }

    @Test("a running queue of the default width starts in readiness order (Foundation hands them to Dispatch as they become ready)")
    func defaultWidthKeepsReadinessOrder() {
        let order = startOrder(count: 6, readyOrder: [4, 2, 0, 5, 1, 3]) { _ in }
        #expect(order == [4, 2, 0, 5, 1, 3])
    }
}
