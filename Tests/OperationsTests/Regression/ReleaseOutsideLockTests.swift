// The last reference to an operation can be the drain loop's own: a custom
// concurrent operation that another thread finishes while its `start()` is
// still running leaves its queue (which releases its own reference) before
// `start()` returns. Dropping that last reference runs the operation's
// `deinit`, which is user code: it must run with no library lock held. Found
// in review (round 9): the loop held its reference until after it had taken
// the queue's lock for its next step, so a `deinit` that used the queue
// deadlocked. Exit tests: a deadlock fails the child, not the run.

import Dispatch
import Testing
@testable import Operations
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A concurrent operation whose `start()` has another thread finish it, and
/// returns only once that finish is complete; `deinit` calls `onDeinit`.
final class FinishedElsewhereDuringStart: Operation, @unchecked Sendable {
    // @unchecked Sendable: `flags` is locked; `onDeinit` is set once.
    private let flags = LockedValue<(executing: Bool, finished: Bool)>((false, false))
    private let onDeinit: @Sendable () -> Void

    init(onDeinit: @escaping @Sendable () -> Void) {
        self.onDeinit = onDeinit
    }

    deinit { onDeinit() }

    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { flags.withLock { $0.executing } }
    override var isFinished: Bool { flags.withLock { $0.finished } }

    override func start() {
        willChangeValue(forKey: "isExecuting")
        flags.withLock { $0.executing = true }
        didChangeValue(forKey: "isExecuting")
        let finished = Gate()
        // Weak: the finishing thread must not keep the operation alive once
        // its finish has run.
        spawnThread { [weak self] in
            self?.finish()
            finished.open()
        }
        _ = finished.wait()
    }

    private func finish() {
        willChangeValue(forKey: "isFinished")
        willChangeValue(forKey: "isExecuting")
        flags.withLock { $0 = (false, true) }
        didChangeValue(forKey: "isExecuting")
        didChangeValue(forKey: "isFinished")
    }
}

/// Each round adds an operation that only its queue holds; its `deinit`
/// reads the queue's `operationCount`, which takes the queue's lock. Exits
/// with status 3 if a `deinit` does not complete (it ran under that lock).
func scenarioDeinitOfOperationReleasedByDrainLoop() {
    for _ in 0..<50 {
        let released = Gate()
        let queue = OperationQueue()
        queue.addOperation(FinishedElsewhereDuringStart {
            _ = queue.operationCount
            released.open()
        })
        guard released.wait(timeout: .seconds(5)) else { exit(3) }
        guard queue.waitUntilAllOperationsAreFinished(timeout: .seconds(5)) else { exit(4) }
    }
}

@Suite("Releases outside library locks")
struct ReleaseOutsideLockTests {
    @Test("an operation whose last reference is its drain loop's is deinitialized with no queue lock held (50 rounds)")
    func drainLoopReleasesOutsideTheLock() async {
        await #expect(processExitsWith: .success) {
            scenarioDeinitOfOperationReleasedByDrainLoop()
        }
    }
}
