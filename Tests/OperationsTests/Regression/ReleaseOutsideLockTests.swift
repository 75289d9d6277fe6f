// The last reference to an operation can be the drain loop's own: a custom
// concurrent operation that another thread finishes while its `start()` is
// still running leaves its queue (which releases its own reference) before
// `start()` returns. Dropping that last reference runs the operation's
// `deinit`, which is user code: it must run with no library lock held. Found
// in review (round 9): the loop held its reference until after it had taken
// the queue's lock for its next step, so a `deinit` that used the queue
// deadlocked. Probe 10 found two more: a wait's analysis and the locked
// cycle check released what they had read under their locks. Exit tests: a
// deadlock fails the child, not the run.

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
final class FinishedElsewhereDuringStart: ManualConcurrentOperation, @unchecked Sendable {
    // @unchecked Sendable: `onDeinit` is set once.
    private let onDeinit: @Sendable () -> Void

    init(onDeinit: @escaping @Sendable () -> Void) {
        self.onDeinit = onDeinit
    }

    deinit { onDeinit() }

    override func start() {
        super.start()
        let finished = Gate()
        // Weak: the finishing thread must not keep the operation alive once
        // its finish has run.
        spawnThread { [weak self] in
            self?.finish()
            finished.open()
        }
        _ = finished.wait()
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

/// An operation whose `deinit` runs `onDeinit`.
final class DeinitReportingOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: both closures are set once.
    private let work: @Sendable () -> Void
    private let onDeinit: @Sendable () -> Void

    init(work: @escaping @Sendable () -> Void = {}, onDeinit: @escaping @Sendable () -> Void) {
        self.work = work
        self.onDeinit = onDeinit
    }

    deinit { onDeinit() }

    override func main() { work() }
}

/// Runs `body` on another thread; exits with status 3 if it does not return
/// within `seconds` (a thread deadlocked on a library lock cannot be freed).
func exitIfItHangs(seconds: Int, _ body: @escaping @Sendable () -> Void) {
    let done = Gate()
    spawnThread {
        body()
        done.open()
    }
    guard done.wait(timeout: .seconds(seconds)) else { exit(3) }
}

/// An operation waits, without a deadline, for another queue whose
/// operations finish meanwhile: the wait's analysis (is it a wait that can
/// never end?) reads that queue's operations under the wait registry's lock
/// and may be the last to hold one of them. Its `deinit` makes a wait too,
/// which takes the same lock (probe 10, found in debug and release builds).
func scenarioDeinitDuringWaitAnalysis() {
    let idle = OperationQueue()
    exitIfItHangs(seconds: 300) {
        for _ in 0..<30 {
            let watched = OperationQueue()
            watched.maxConcurrentOperationCount = 2
            for _ in 0..<300 {
                watched.addOperation(DeinitReportingOperation(work: { usleep(20) }, onDeinit: {
                    idle.waitUntilAllOperationsAreFinished()
                }))
            }
            let waiter = OperationQueue()
            waiter.addOperation { watched.waitUntilAllOperationsAreFinished() }
            waiter.waitUntilAllOperationsAreFinished()
        }
    }
}

/// With cycle reporting on, `addDependency` searches the graph under a
/// lock of its own while another thread removes edges it has passed, so
/// that the search holds the last reference to an operation, whose
/// `deinit` adds a dependency (and takes that lock). Probe 10 hit it in
/// release builds; this version failed one debug run in two before the fix.
func scenarioDeinitDuringCycleCheck() {
    OperationMisuse.reportsDependencyCycles = true
    // The search has to be long for the race to be hit (fewer, shorter
    // rounds never hit it before the fix): this child process runs at the
    // lowest priority, so that it does not starve the tests running beside
    // it. Generous bounds: they only catch deadlocks, and sanitizers slow
    // the rounds down about tenfold.
    _ = nice(19)
    exitIfItHangs(seconds: 900) {
        for _ in 0..<10 {
            var chain: [Operation] = []
            var last: Operation = BlockOperation {}
            for _ in 0..<1_000 {
                let operation = BlockOperation {}
                operation.addDependency(last)
                chain.append(operation)
                last = operation
            }
            let victims = LockedValue<[(Operation, Operation)]>([])
            for index in stride(from: 0, to: chain.count, by: 2) {
                let side = BlockOperation {}
                let victim = DeinitReportingOperation(onDeinit: { BlockOperation {}.addDependency(BlockOperation {}) })
                victim.addDependency(BlockOperation {})
                side.addDependency(victim)
                chain[index].addDependency(side)
                victims.withLock { $0.append((side, victim)) }
            }
            let removed = Gate()
            spawnThread {
                while let (owner, victim) = victims.withLock({ $0.popLast() }) { owner.removeDependency(victim) }
                removed.open()
            }
            let newcomer = BlockOperation {}
            for _ in 0..<10 {
                newcomer.addDependency(last)
                newcomer.removeDependency(last)
            }
            guard removed.wait(timeout: .seconds(300)) else { exit(4) }
            withExtendedLifetime(chain) {}
        }
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

    @Test("the analysis of a wait that might never end releases what it read after the registry's lock (30 rounds)")
    func waitAnalysisReleasesOutsideTheLock() async {
        await #expect(processExitsWith: .success) {
            scenarioDeinitDuringWaitAnalysis()
        }
    }

    @Test("the locked cycle check of addDependency releases what it read after its lock (10 rounds)")
    func cycleCheckReleasesOutsideTheLock() async {
        await #expect(processExitsWith: .success) {
            scenarioDeinitDuringCycleCheck()
        }
    }
}

/// Runs `action` when deinitialized.
final class DeinitAction: Sendable {
    let action: @Sendable () -> Void
    init(_ action: @escaping @Sendable () -> Void) { self.action = action }
    deinit { action() }
}

@Suite("A completion block is released on the thread that ran it (regression: probe 53)")
struct CompletionBlockReleaseTests {
    /// Each completion block of a chain captures an object whose deinit
    /// waits for the next operation of the chain, as it may on Darwin,
    /// where the block is released on its secondary thread after it ran.
    /// Before the fix, the thread that finished an operation and handed
    /// its block on kept a reference, and was sometimes the one to release
    /// it (when the block had already run): the deinit then ran in the
    /// drain loop, before the finished operation's waiters were woken and
    /// while the loop held the dependents it had just readied, so the wait
    /// could not end (before the fix, one to three of these bounded waits
    /// timed out in 3 of 4 runs; the probe's unbounded version hung in 2
    /// of 3 runs of 20 rounds).
    @Test("a chain whose completion blocks' captures wait for the next operation on release drains (10 rounds)")
    func captureReleasedAfterItsBlockRan() {
        let timedOut = Counter()
        for round in 0..<10 {
            let queue = makeQueue("completion-release-\(round)", width: 3)
            var chain: [BlockOperation] = []
            for index in 0..<60 {
                // A millisecond of work, as in the probe: the chain's
                // operations then finish while the previous blocks run.
                let op = BlockOperation { usleep(1_000) }
                if index > 0 { op.addDependency(chain[index - 1]) }
                chain.append(op)
            }
            for (index, op) in chain.enumerated() {
                let next = index + 1 < chain.count ? chain[index + 1] : nil
                let capture = DeinitAction {
                    if let next, !next.waitUntilFinished(timeout: .seconds(5)) { _ = timedOut.increment() }
                }
                op.completionBlock = { withExtendedLifetime(capture) {} }
            }
            queue.addOperations(chain, waitUntilFinished: false)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience), "round \(round)")
        }
        #expect(timedOut.count == 0, "waits made by the release of a completion block's capture that timed out")
    }
    /// The same fault seen directly: whichever thread ran a completion
    /// block releases it, never the thread that finished its operation
    /// (before the fix, 2 to 124 of the 20,000 captures were released
    /// elsewhere in 4 of 5 runs).
    @Test("a completion block's captures are released on the thread that ran the block (20,000 operations)")
    func captureReleasedWhereBlockRan() {
        let elsewhere = Counter()
        let released = Counter()
        for round in 0..<50 {
            let queue = makeQueue("completion-release-thread-\(round)", width: 3)
            var operations: [BlockOperation] = []
            for _ in 0..<400 {
                let ranOn = Box<ThreadID?>(nil)
                let capture = DeinitAction {
                    if let thread = ranOn.value, pthread_equal(thread, currentThreadID()) == 0 { _ = elsewhere.increment() }
                    _ = released.increment()
                }
                let op = BlockOperation {}
                op.completionBlock = { withExtendedLifetime(capture) { ranOn.value = currentThreadID() } }
                operations.append(op)
            }
            queue.addOperations(operations, waitUntilFinished: false)
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience), "round \(round)")
        }
        #expect(waitUntil { released.count == 20_000 })
        #expect(elsewhere.count == 0, "captures released on another thread than their block's")
    }
}

