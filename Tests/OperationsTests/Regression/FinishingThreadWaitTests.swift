// Waits made from user code that runs on the thread finishing an operation:
// its observers, its dependents' `isReady` observers, its queue's
// observers. Probe 57 found four faults there: a wait for the queue from
// the `isFinished` observer of a cancelled operation counted its own
// retirement out twice (a regression of the deinit fix before it); waits
// for an operation whose `isFinished` already read true, from its
// dependents' or its queue's observers, waited for a retirement only the
// waiting thread could complete; and a wait whose deadline had passed let
// go of a kept slot, reordering a serial queue.

import Dispatch
import Testing
@testable import Operations
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// An asynchronous operation that another thread finishes.
private final class FinishedByAnotherThread: AsyncOperation, @unchecked Sendable {
    override func execute() {
        spawnThread { [self] in finish() }
    }
}

@Suite("Waits from code run while an operation finishes (regression: probe 57)")
struct FinishingThreadWaitTests {
    /// The drain loop tells a cancelled operation's observers as part of
    /// completing its retirement, which it already counted as owed: the
    /// wait left that retirement out twice, so the queue never looked idle
    /// (the wait hung at the fix before this one; it returned before it).
    @Test("an isFinished observer of a cancelled operation waiting for its queue returns")
    func cancelledObserverWaitsForQueue() {
        let queue = makeQueue("cancelled-observer-queue-wait", width: 1)
        let waited = Recorder<Bool>()
        let operation = BlockOperation {}
        operation.cancel()
        let token = operation.observe(\.isFinished, options: [.new]) { _, change in
            guard change.newValue == true else { return }
            waited.record(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        }
        queue.addOperation(operation)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 2))
        #expect(waitUntil { !waited.events.isEmpty })
        #expect(waited.events == [true])
        expectQueueInvariants(queue)
        withExtendedLifetime(token) {}
    }

    /// The same observer's wait still waits for the queue's other work:
    /// another operation's retirement in flight (its observer holds it).
    @Test("that wait still waits for another operation's retirement")
    func cancelledObserverWaitWaitsForOthers() {
        let queue = makeQueue("cancelled-observer-queue-wait-others", width: 2)
        let release = Gate()
        let otherInObserver = Gate()
        let otherDone = Box(false)
        let other = BlockOperation {}
        let otherToken = other.observe(\.isFinished, options: [.new]) { _, change in
            guard change.newValue == true else { return }
            otherInObserver.open()
            _ = release.wait()
            otherDone.value = true
        }
        queue.addOperation(other)
        #expect(otherInObserver.wait())
        let sawOtherDone = Recorder<Bool>()
        let cancelled = BlockOperation {}
        cancelled.cancel()
        let token = cancelled.observe(\.isFinished, options: [.new]) { _, change in
            guard change.newValue == true else { return }
            _ = queue.waitUntilAllOperationsAreFinished(timeout: patience)
            sawOtherDone.record(otherDone.value)
        }
        queue.addOperation(cancelled)
        // The cancelled operation's observer is now waiting, or about to.
        #expect(staysFalse { !sawOtherDone.events.isEmpty }, "the wait returned while another retirement was in flight")
        release.open()
        #expect(waitUntil { !sawOtherDone.events.isEmpty })
        #expect(sawOtherDone.events == [true])
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        withExtendedLifetime((token, otherToken)) {}
    }

    enum Placement: String, CaseIterable, CustomTestStringConvertible {
        /// Neither operation in a queue; the dependency started by hand.
        case noQueue
        /// Both in one serial queue.
        case serialQueue
        /// The dependency in another queue.
        case otherQueue
        var testDescription: String { rawValue }
    }

    /// A dependent's `isReady` observer runs during its dependency's
    /// finish, when the dependency's `isFinished` already reads true: a
    /// wait there for the dependency returns at once, as Foundation's does
    /// (it timed out in every placement before).
    @Test("an isReady observer waiting for the dependency that made it ready returns", arguments: Placement.allCases)
    func readyObserverWaitsForFinishedDependency(_ placement: Placement) {
        let first = makeQueue("ready-observer-finished-dependency", width: 1)
        let second = placement == .otherQueue ? makeQueue("ready-observer-finished-dependency-other") : first
        let dependency = BlockOperation {}
        let dependent = BlockOperation {}
        dependent.addDependency(dependency)
        let waited = Recorder<Bool>()
        let token = dependent.observe(\.isReady, options: [.new]) { _, change in
            guard change.newValue == true, waited.events.isEmpty else { return }
            waited.record(dependency.waitUntilFinished(timeout: patience))
        }
        switch placement {
        case .noQueue:
            spawnThread { dependency.start() }
        case .serialQueue, .otherQueue:
            first.addOperation(dependent)
            second.addOperation(dependency)
        }
        #expect(waitUntil { !waited.events.isEmpty })
        #expect(waited.events == [true])
        if placement == .noQueue {
            dependent.start()
        }
        #expect(first.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(second.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(dependent.isFinished)
        withExtendedLifetime(token) {}
    }

    /// A queue's observers hear that an operation finished by another
    /// thread left it on that thread, during its retirement: a wait there
    /// for the operation returns at once (it timed out before).
    @Test("a queue's operationCount observer waiting for an asynchronous operation that just left returns")
    func queueObserverWaitsForOperationThatLeft() {
        let queue = makeQueue("queue-observer-async-left")
        let operation = FinishedByAnotherThread()
        let waited = Recorder<Bool>()
        let armed = Box(false)
        let token = queue.observe(\.operationCount, options: [.new]) { _, change in
            guard armed.value, change.newValue == 0, waited.events.isEmpty else { return }
            waited.record(operation.waitUntilFinished(timeout: patience))
        }
        armed.value = true
        queue.addOperation(operation)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 2))
        #expect(waitUntil { !waited.events.isEmpty })
        #expect(waited.events == [true])
        withExtendedLifetime(token) {}
    }

    /// A wait whose deadline has passed only reads the state. Before, it
    /// let go of what its thread held as if it blocked: from a dependent's
    /// `isReady` observer, it freed the finished operation's slot, so a
    /// serial queue started its next operations before that operation's
    /// `isFinished` observers were told.
    @Test("a zero-timeout wait from an isReady observer keeps a serial queue's order", arguments: [false, true])
    func zeroTimeoutWaitKeepsOrder(waitsForQueue: Bool) {
        let queue = makeQueue("zero-wait-order", width: 1)
        let order = Recorder<String>()
        let a = BlockOperation { order.record("A") }
        let b = BlockOperation { order.record("B") }
        let c = BlockOperation { order.record("C") }
        b.addDependency(a)
        let unrelated = BlockOperation {}
        let finishedToken = a.observe(\.isFinished, options: [.new]) { _, change in
            guard change.newValue == true else { return }
            // Long enough for another loop to start B or C if the slot
            // were free.
            usleep(20_000)
            order.record("A observed")
        }
        let readyToken = b.observe(\.isReady, options: [.new]) { _, change in
            guard change.newValue == true else { return }
            if waitsForQueue {
                _ = queue.waitUntilAllOperationsAreFinished(timeout: .zero)
            } else {
                _ = unrelated.waitUntilFinished(timeout: .zero)
            }
        }
        queue.addOperations([a, b, c], waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(order.events == ["A", "A observed", "B", "C"])
        withExtendedLifetime((finishedToken, readyToken)) {}
    }
}
