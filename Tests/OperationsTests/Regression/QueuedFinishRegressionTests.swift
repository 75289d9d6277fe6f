// Regressions from probe 21: an operation that finishes (announces
// `isFinished`) while it still waits in its queue, dropped at once by its
// last holder, must not be touched by a drain loop that has just picked it;
// and waits given a `Duration` beyond what `Duration.components` can
// represent must just work. Each scenario runs in an exit test, so that a
// crash (a use-after-free, a trap) fails the test instead of the whole run.

import Dispatch
import Synchronization
import Testing
@testable import Operations
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A concurrent operation built by hand whose overridden `isFinished` is the
/// truth: `finishNow()` announces it, from `start()` or from any thread, even
/// while the operation still waits in its queue (the common
/// `cancel() { super.cancel(); finish() }` pattern does this).
private final class FinishesWhileQueued: Operation, @unchecked Sendable {
    // @unchecked Sendable: `done` is atomic.
    private let done = Atomic<Bool>(false)
    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { false }
    override var isFinished: Bool { done.load(ordering: .acquiring) }
    override func start() { finishNow() }

    func finishNow() {
        willChangeValue(forKey: "isFinished")
        done.store(true, ordering: .releasing)
        didChangeValue(forKey: "isFinished")
    }
}

/// Adds such operations to a queue of width 2 for about 2 seconds, while a
/// second thread finishes each one and drops the last reference to it: a
/// drain loop that picked one of them must still hold it.
func scenarioFinishAnnouncedWhileQueued() {
    let queue = OperationQueue()
    queue.name = "finish-while-queued"
    queue.maxConcurrentOperationCount = 2
    let handedOver = LockedValue<[FinishesWhileQueued]>([])
    let more = DispatchSemaphore(value: 0)
    let stopping = Atomic<Bool>(false)
    let finisherDone = Gate()
    spawnThread {
        while true {
            _ = more.wait(timeout: .now() + 0.05)
            var batch = handedOver.withLock { list -> [FinishesWhileQueued] in
                defer { list.removeAll(keepingCapacity: true) }
                return list
            }
            for operation in batch { operation.finishNow() }
            // The finisher's references are the last ones.
            batch.removeAll()
            if stopping.load(ordering: .acquiring), handedOver.withLock({ $0.isEmpty }) { break }
        }
        finisherDone.open()
    }
    let deadline = ContinuousClock.now + .seconds(2)
    var added = 0
    while ContinuousClock.now < deadline, added < 400_000 {
        for _ in 0..<64 {
            let operation = FinishesWhileQueued()
            queue.addOperation(operation)
            handedOver.withLock { $0.append(operation) }
        }
        added += 64
        more.signal()
    }
    stopping.store(true, ordering: .releasing)
    more.signal()
    #expect(finisherDone.wait(timeout: patience), "the finishing thread did not end")
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience), "the queue did not drain after \(added) operations")
}

/// Timeouts and thresholds beyond `Int64.max` seconds (a `Duration` holds
/// more), positive and negative.
func scenarioDurationsBeyondInt64Seconds() {
    let huge: Duration = .seconds(Int64.max) + .seconds(1)
    let hugeNegative: Duration = .seconds(Int64.min) - .seconds(1)
    let queue = OperationQueue()
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: huge))
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: hugeNegative))
    let operation = BlockOperation {}
    operation.start()
    #expect(operation.waitUntilFinished(timeout: huge))
    #expect(operation.waitUntilFinished(timeout: hugeNegative))
    // An unfinished operation: a negative timeout has passed at once.
    let pending = BlockOperation {}
    #expect(!pending.waitUntilFinished(timeout: hugeNegative))
    let saved = OperationReporting.waitWarningThreshold
    OperationReporting.waitWarningThreshold = huge
    OperationReporting.waitWarningThreshold = hugeNegative
    OperationReporting.waitWarningThreshold = saved
}

@Suite("queued finishes and huge durations (regressions: probe 21)")
struct QueuedFinishRegressionTests {
    @Test("an operation finished while it waits in its queue and dropped at once is never used after it is freed (about 2 s)")
    func finishAnnouncedWhileQueued() async {
        await #expect(processExitsWith: .success) {
            scenarioFinishAnnouncedWhileQueued()
        }
    }

    @Test("waits and the warning threshold take durations beyond Int64.max seconds, positive and negative")
    func durationsBeyondInt64Seconds() async {
        await #expect(processExitsWith: .success) {
            scenarioDurationsBeyondInt64Seconds()
        }
    }
}
