// A queue finds an operation's barrier segment from its add sequence (the
// segment is not stored in the operation). These tests hold barriers across
// the point where add sequences wrap, and with several segments alive at
// once, and check the order and the queue's bookkeeping.

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
}
