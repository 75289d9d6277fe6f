// A queue finds an operation's barrier segment from its add sequence (the
// segment is not stored in the operation). These tests hold barriers across
// the point where add sequences wrap, and with several segments alive at
// once, and check the order and the queue's bookkeeping. Also: a cancelled
// barrier retires before earlier ones, and must not release what those
// still hold back (probe 27).

import Testing
@testable import Operations

@Suite("Barrier segments found from add sequences")
struct BarrierSegmentTests {
    /// Adds, on a suspended queue numbered from `start`: a held-open
    /// operation and three more, a barrier, three operations, a second
    /// barrier and three operations. Resumes, then checks that each barrier
    /// started after everything added before it finished, and before
    /// anything added after it started.
    private func runSegments(startingAt start: UInt32) {
        let log = Recorder<String>()
        let queue = makeQueue("segments-\(start)")
        queue.setNextAddSequence(start)
        queue.isSuspended = true
        let release = Gate()
        queue.addOperation { #expect(release.wait()); log.record("a0") }
        for index in 1...3 { queue.addOperation { log.record("a\(index)") } }
        queue.addBarrierBlock { log.record("barrier 1") }
        for index in 0..<3 { queue.addOperation { log.record("b\(index)") } }
        queue.addBarrierBlock { log.record("barrier 2") }
        for index in 0..<3 { queue.addOperation { log.record("c\(index)") } }
        expectQueueInvariants(queue)
        queue.isSuspended = false
        #expect(waitUntil { log.count == 3 })
        expectQueueInvariants(queue)
        #expect(!log.events.contains("barrier 1"), "the first barrier ran before a0 finished")
        release.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        expectQueueInvariants(queue)

        let events = log.events
        #expect(events.count == 12)
        guard let first = events.firstIndex(of: "barrier 1"), let second = events.firstIndex(of: "barrier 2") else {
            Issue.record("a barrier did not run: \(events)")
            return
        }
        for index in 0...3 { #expect(events.firstIndex(of: "a\(index)").map { $0 < first } == true, "\(events)") }
        for index in 0..<3 {
            #expect(events.firstIndex(of: "b\(index)").map { $0 > first && $0 < second } == true, "\(events)")
            #expect(events.firstIndex(of: "c\(index)").map { $0 > second } == true, "\(events)")
        }
    }

    @Test("barriers keep their order when add sequences start at zero")
    func fromZero() {
        runSegments(startingAt: 0)
    }

    @Test("barriers keep their order, and the queue its counts, when add sequences wrap between the segments (regression)")
    func acrossTheWrap() {
        // The first segment holds sequences 2³²−3 … 0 and the barrier is 1:
        // a lone segment's start must be renewed when a barrier arrives, or
        // its operations are counted in the next one.
        runSegments(startingAt: UInt32.max - 2)
    }

    @Test("barriers keep their order when the wrap falls inside a later segment")
    func wrapInLaterSegment() {
        runSegments(startingAt: UInt32.max - 6)
    }

    /// How long a barrier that holds the queue waits for a later operation
    /// to start wrongly. The later operation may start only after it.
    private static let overtakingWindow: Duration = .milliseconds(200)

    /// A block that opens `running`, then runs until a later operation opens
    /// `overtaken` (bounded by `overtakingWindow`), then logs `name`.
    private func heldUntilOvertaken(
        _ name: String, log: Recorder<String>, running: Gate, overtaken: Gate
    ) -> @Sendable () -> Void {
        {
            running.open()
            _ = overtaken.wait(timeout: Self.overtakingWindow)
            log.record(name)
        }
    }

    /// The barriers of `queue`, in add order.
    private func barriers(of queue: OperationQueue) -> [Operation] {
        queue.operations.filter { $0 is BarrierOperation }
    }

    @Test("cancelling a later barrier does not let later operations overtake a running barrier (probe 27)")
    func cancelledLaterBarrierWhileEarlierRuns() {
        let log = Recorder<String>()
        let queue = makeQueue("cancel-later-barrier")
        let firstRuns = Gate()
        let laterStarted = Gate()
        queue.addBarrierBlock(heldUntilOvertaken("barrier 1", log: log, running: firstRuns, overtaken: laterStarted))
        #expect(firstRuns.wait())
        queue.addOperation { laterStarted.open(); log.record("x") }
        queue.addBarrierBlock { log.record("barrier 2") }
        queue.addOperation { laterStarted.open(); log.record("y") }
        let added = barriers(of: queue)
        #expect(added.count == 2)
        added.last?.cancel()
        expectQueueInvariants(queue)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        expectQueueInvariants(queue)
        let events = log.events
        #expect(events.first == "barrier 1", "an operation added after the running barrier started during it: \(events)")
        #expect(Set(events) == ["barrier 1", "x", "y"], "\(events)")
    }

    @Test("cancelAllOperations during a barrier, with a later barrier queued: work added next waits for the running barrier (probe 27)")
    func cancelAllDuringBarrier() {
        let log = Recorder<String>()
        let queue = makeQueue("cancel-all-during-barrier")
        let firstRuns = Gate()
        let laterStarted = Gate()
        queue.addBarrierBlock(heldUntilOvertaken("barrier 1", log: log, running: firstRuns, overtaken: laterStarted))
        #expect(firstRuns.wait())
        queue.addBarrierBlock { log.record("barrier 2") }
        queue.cancelAllOperations()
        queue.addOperation { laterStarted.open(); log.record("added after") }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        expectQueueInvariants(queue)
        #expect(log.events == ["barrier 1", "added after"])
    }

    @Test("cancelling a later barrier while an earlier one waits for its turn: the earlier one still comes first (probe 27)")
    func cancelledLaterBarrierWhileEarlierPending() {
        let log = Recorder<String>()
        let queue = makeQueue("cancel-later-pending")
        let firstRuns = Gate()
        let laterStarted = Gate()
        queue.addOperation(heldUntilOvertaken("a", log: log, running: firstRuns, overtaken: laterStarted))
        #expect(firstRuns.wait())
        queue.addBarrierBlock { laterStarted.open(); log.record("barrier 1") }
        queue.addOperation { laterStarted.open(); log.record("x") }
        queue.addBarrierBlock { log.record("barrier 2") }
        queue.addOperation { laterStarted.open(); log.record("y") }
        barriers(of: queue).last?.cancel()
        expectQueueInvariants(queue)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        expectQueueInvariants(queue)
        let events = log.events
        #expect(Array(events.prefix(2)) == ["a", "barrier 1"], "\(events)")
        #expect(Set(events) == ["a", "barrier 1", "x", "y"], "\(events)")
    }

    @Test("several barriers cancelled out of order on a suspended queue: every operation starts after the barriers before it that ran (probe 27)")
    func barriersCancelledOutOfOrder() {
        let log = Recorder<String>()
        let queue = makeQueue("cancel-out-of-order")
        queue.isSuspended = true
        var expectedAfter: [String: [String]] = [:]
        var ranBarriers: [String] = []
        for round in 0..<8 {
            queue.addOperation { log.record("op \(round)") }
            expectedAfter["op \(round)"] = ranBarriers
            queue.addBarrierBlock { log.record("barrier \(round)") }
            if round % 3 != 1 { ranBarriers.append("barrier \(round)") }
        }
        let added = barriers(of: queue)
        for (round, barrier) in added.enumerated().reversed() where round % 3 == 1 { barrier.cancel() }
        expectQueueInvariants(queue)
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        expectQueueInvariants(queue)
        let events = log.events
        for (operation, barriersBefore) in expectedAfter {
            guard let position = events.firstIndex(of: operation) else {
                Issue.record("\(operation) did not run: \(events)")
                continue
            }
            for barrier in barriersBefore {
                #expect(events.firstIndex(of: barrier).map { $0 < position } == true, "\(operation) ran before \(barrier): \(events)")
            }
        }
    }
}
