// A class whose `start()` finishes the operation itself (its overridden
// `isFinished` announced true) and then calls `super.start()`: OTCore's
// `BasicOperation` does `if isCancelled { completeOperation() };
// super.start()`. Darwin's base `start()` then simply returns. It trapped
// here (`startAfterFinished`), also when the queue made the call
// (ports 37). A second start of an operation the base `start()` already
// ran is still a misuse (see `MisuseTests`).

import Dispatch
import Synchronization
import Testing
@testable import Operations

/// OTCore's pattern, reduced.
private final class SelfFinishingOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: the flags are atomics; `ran` and `completed` are
    // Sendable counters.
    private let executing = Atomic<Bool>(false)
    private let finished = Atomic<Bool>(false)
    let ran = Counter()

    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { executing.load(ordering: .acquiring) }
    override var isFinished: Bool { finished.load(ordering: .acquiring) }

    override func start() {
        if isCancelled { complete() }
        super.start()
    }

    override func main() {
        guard !isCancelled else { return complete() }
        willChangeValue(forKey: "isExecuting")
        executing.store(true, ordering: .releasing)
        didChangeValue(forKey: "isExecuting")
        ran.increment()
        complete()
    }

    func complete() {
        let wasExecuting = executing.load(ordering: .acquiring)
        guard !finished.load(ordering: .acquiring) else { return }
        willChangeValue(forKey: "isFinished")
        if wasExecuting { willChangeValue(forKey: "isExecuting") }
        executing.store(false, ordering: .releasing)
        finished.store(true, ordering: .releasing)
        if wasExecuting { didChangeValue(forKey: "isExecuting") }
        didChangeValue(forKey: "isFinished")
    }
}

/// Builds `count` self-finishing operations with completion blocks.
private func selfFinishingOperations(_ count: Int, completions: Counter) -> [SelfFinishingOperation] {
    (0..<count).map { index in
        let op = SelfFinishingOperation()
        op.name = "self-finishing-\(index)"
        op.completionBlock = { completions.increment() }
        return op
    }
}

/// Exit-test body: the default policy traps on any misuse, so a
/// `startAfterFinished` from the queue's call ends the child process.
private func scenarioQueueStartsCancelledSelfFinishingOperations() {
    // Cancelled while queued in a suspended queue, then resumed.
    let suspended = makeQueue("self-finishing-suspended")
    suspended.isSuspended = true
    let completions = Counter()
    let first = selfFinishingOperations(20, completions: completions)
    suspended.addOperations(first, waitUntilFinished: false)
    suspended.cancelAllOperations()
    suspended.isSuspended = false
    #expect(suspended.waitUntilAllOperationsAreFinished(timeout: patience))
    #expect(first.allSatisfy { $0.isFinished && $0.isCancelled && $0.ran.count == 0 })
    // Cancelled while waiting behind a running operation of a serial queue.
    let serial = makeQueue("self-finishing-serial", width: 1)
    let gate = Gate()
    let gateRunning = Gate()
    serial.addOperation {
        gateRunning.open()
        gate.wait()
    }
    // Running, so that it holds the queue's one slot: cancelled while still
    // queued, it would leave at once with the rest, and the queue could
    // start the operations behind it while `cancelAllOperations()` was
    // still reaching them (one by one here: their class overrides
    // `isFinished`), as on Darwin.
    #expect(gateRunning.wait())
    let second = selfFinishingOperations(20, completions: completions)
    serial.addOperations(second, waitUntilFinished: false)
    serial.cancelAllOperations()
    gate.open()
    #expect(serial.waitUntilAllOperationsAreFinished(timeout: patience))
    #expect(second.allSatisfy { $0.isFinished && $0.ran.count == 0 })
    // Cancelled before it was added.
    let running = makeQueue("self-finishing-running")
    let third = selfFinishingOperations(20, completions: completions)
    third.forEach { $0.cancel() }
    running.addOperations(third, waitUntilFinished: true)
    #expect(third.allSatisfy { $0.isFinished })
    #expect(waitUntil { completions.count == 60 })
    // Not cancelled: they run once each.
    let fourth = selfFinishingOperations(20, completions: completions)
    running.addOperations(fourth, waitUntilFinished: true)
    #expect(fourth.allSatisfy { $0.isFinished && $0.ran.count == 1 })
}

@Suite("A start() that finishes the operation before super.start()")
struct SelfFinishingStartTests {
    @Test("started by hand after a cancel: super.start() returns, nothing is reported, the completion block runs once")
    func byHandAfterCancel() {
        let completions = Counter()
        let op = selfFinishingOperations(1, completions: completions)[0]
        op.cancel()
        let reported = misuses { op.start() }
        #expect(reported.isEmpty, "\(reported.map(\.message))")
        #expect(op.isFinished && op.isCancelled && !op.isExecuting && op.ran.count == 0)
        #expect(waitUntil { completions.count == 1 })
        // Starting it again is the same call: it returns.
        let again = misuses { op.start() }
        #expect(again.isEmpty, "\(again.map(\.message))")
        #expect(staysFalse { completions.count != 1 })
    }

    @Test("a second start() of an operation the base start() already ran is still reported")
    func secondBaseStartIsReported() {
        let op = BlockOperation {}
        op.name = "base-ran-once"
        op.start()
        let reported = misuses { op.start() }
        #expect(reported.map(\.code) == [.startAfterFinished])
    }

    @Test("the queue's start of cancelled operations that finish themselves before super.start() does not trap")
    func queueStartDoesNotTrap() async {
        await #expect(processExitsWith: .success) { scenarioQueueStartsCancelledSelfFinishingOperations() }
    }
}
