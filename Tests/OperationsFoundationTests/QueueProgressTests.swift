// `OperationsFoundation`'s `OperationQueue.progress`: Darwin's rules for a
// queue's progress, with Foundation's `Progress`.

import Dispatch
import class Foundation.Progress
import Operations
import OperationsFoundation
import Synchronization
import Testing

/// Runs after `start()` announces itself and finishes when told; never
/// calls `super.start()`.
private final class HandStartedOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `flags` is a Mutex.
    private let flags = Mutex<(executing: Bool, finished: Bool)>((false, false))
    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { flags.withLock { $0.executing } }
    override var isFinished: Bool { flags.withLock { $0.finished } }

    override func start() {
        willChangeValue(forKey: "isExecuting")
        flags.withLock { $0.executing = true }
        didChangeValue(forKey: "isExecuting")
        willChangeValue(forKey: "isExecuting")
        willChangeValue(forKey: "isFinished")
        flags.withLock { $0 = (false, true) }
        didChangeValue(forKey: "isFinished")
        didChangeValue(forKey: "isExecuting")
    }
}

/// Calls `super.start()` from its own `start()`.
private final class SuperStartingOperation: Operation, @unchecked Sendable {
    override func start() { super.start() }
    override func main() {}
}

@Suite("OperationQueue.progress")
struct QueueProgressTests {
    private func serialQueue() -> OperationQueue {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        return queue
    }

    @Test("The queue reports nothing until totalUnitCount is set, then one unit per operation")
    func reportsOnceTotalIsSet() {
        let queue = serialQueue()
        queue.addOperation {}
        queue.addOperation {}
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10)))
        #expect(queue.progress.completedUnitCount == 0)
        #expect(queue.progress.fractionCompleted == 0)

        queue.progress.totalUnitCount = 3
        for _ in 0..<3 { queue.addOperation {} }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10)))
        #expect(queue.progress.completedUnitCount == 3)
        #expect(queue.progress.fractionCompleted == 1)
    }

    @Test("The same Progress every time, also through OperationQueue.current")
    func sameInstance() {
        let queue = serialQueue()
        let first = queue.progress
        let seen = Mutex<Progress?>(nil)
        queue.addOperation { seen.withLock { $0 = OperationQueue.current?.progress } }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10)))
        #expect(queue.progress === first)
        #expect(seen.withLock { $0 } === first)
    }

    @Test("A unit completes when main() returns: the fraction counts finished bodies")
    func fractionPerOperation() {
        let queue = serialQueue()
        queue.progress.totalUnitCount = 4
        let fractions = Mutex<[Double]>([])
        for _ in 0..<4 {
            queue.addOperation { fractions.withLock { $0.append(queue.progress.fractionCompleted) } }
        }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10)))
        #expect(fractions.withLock { $0 } == [0, 0.25, 0.5, 0.75])
        #expect(queue.progress.fractionCompleted == 1)
    }

    @Test("A Progress made inside main() becomes the operation's unit")
    func implicitChild() {
        let queue = serialQueue()
        queue.progress.totalUnitCount = 1
        let halfway = Mutex<Double>(-1)
        queue.addOperation {
            let own = Progress(totalUnitCount: 4)
            own.completedUnitCount = 2
            halfway.withLock { $0 = queue.progress.fractionCompleted }
            own.completedUnitCount = 4
        }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10)))
        #expect(halfway.withLock { $0 } == 0.5)
        #expect(queue.progress.fractionCompleted == 1)
    }

    @Test("Cancelled operations, barriers and starts that skip super add nothing; super.start() adds one")
    func whatCounts() {
        let queue = serialQueue()
        queue.progress.totalUnitCount = 10
        let cancelled = BlockOperation {}
        cancelled.cancel()
        queue.addOperation(cancelled)
        queue.addOperation(HandStartedOperation())
        queue.addBarrierBlock {}
        queue.addOperation(SuperStartingOperation())
        queue.addOperation {}
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10)))
        #expect(queue.progress.completedUnitCount == 2)
    }

    @Test("Concurrent operations each add their unit")
    func concurrentUnits() {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 8
        queue.progress.totalUnitCount = 2_000
        for _ in 0..<2_000 { queue.addOperation {} }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10)))
        #expect(queue.progress.completedUnitCount == 2_000)
        #expect(queue.progress.fractionCompleted == 1)
    }

    @Test("A queue's progress can be a child of another Progress")
    func childOfAnotherProgress() {
        let queue = serialQueue()
        let overall = Progress(totalUnitCount: 2)
        overall.addChild(queue.progress, withPendingUnitCount: 1)
        queue.progress.totalUnitCount = 2
        queue.addOperation {}
        queue.addOperation {}
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10)))
        #expect(overall.fractionCompleted == 0.5)
        #expect(overall.completedUnitCount == 1)
    }
}
