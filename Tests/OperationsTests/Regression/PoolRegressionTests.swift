// The worker pool's parked list (Queuer's port, session 20): a worker whose
// timed park expired just as the pool handed it a job took the job, and the
// hand-off's signal stayed pending. At its next park that stale signal ended
// the wait at once, with no job, and the worker listed itself as parked a
// second time. The pool then handed it jobs while it was busy: a queue's
// drain loop was lost, or waited behind an operation that waited for it
// (Queuer's GroupOperation hung). The test gives a parked worker exactly
// that stale wake-up.

import Dispatch
import Synchronization
import Testing
@testable import Operations

@Suite("Worker pool (regression)")
struct PoolRegressionTests {
    /// Whether the pool lists a worker as parked more than once.
    private func parkedListHasDuplicates(_ pool: WorkerPool) -> Bool {
        let parked = pool.parkedWorkers
        return Set(parked.map(ObjectIdentifier.init)).count != parked.count
    }

    @Test("a parked worker woken without a job is not listed as parked twice (20 stale wake-ups)")
    func staleWakeUpDoesNotDuplicateParkedWorker() {
        let pool = WorkerPool.shared
        // Some work, so that the pool has workers that park afterwards.
        let queue = OperationQueue()
        for _ in 0..<8 { queue.addOperation {} }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        for round in 0..<20 {
            guard waitUntil({ !pool.parkedWorkers.isEmpty }), let worker = pool.parkedWorkers.last else {
                Issue.record("round \(round): no worker parked")
                return
            }
            worker.wake.signal()
            // A worker that re-listed itself does so within microseconds.
            let duplicated = waitUntil(timeout: .milliseconds(100)) { parkedListHasDuplicates(pool) }
            #expect(!duplicated, "round \(round): a worker is listed as parked twice: \(pool.snapshot)")
            if duplicated { return }
            // The pool still runs work.
            let probe = BlockOperation {}
            queue.addOperation(probe)
            #expect(probe.waitUntilFinished(timeout: patience), "round \(round): \(pool.snapshot)")
        }
    }
}

// Ops bench, W10 (session 32): the pool decided once, on the thread that
// first used it, whether the kernel keeps scheduler statistics, and judged
// by that thread's run time. A young thread's run time is accounted lazily
// and reads 0 (`0 0 1`), so in three runs in four the pool fell back to the
// rule that counts a worker as blocked only when it completed nothing in a
// tick: 2,000 operations that each sleep 2 ms ran two at a time.

/// The availability check made on a thread that has just started, as the
/// pool's first user may be. Where the kernel keeps statistics (the thread's
/// line shows a time slice), the check must say so.
func scenarioSleepShareDetectedOnYoungThread() {
    let verdict = Box<(reading: Platform.Schedstat?, provided: Bool)?>(nil)
    let done = Gate()
    spawnThread {
        // The first use of the check, on a thread a few microseconds old.
        let provided = Platform.providesThreadBusyTime
        verdict.value = (Platform.callingThreadSchedstat, provided)
        done.open()
    }
    #expect(done.wait())
    guard let (reading, provided) = verdict.value else { return }
    if let reading, reading.timeslices > 0 {
        #expect(provided, "the kernel keeps statistics (\(reading)), but the pool would not use them")
    }
}

@Suite("Worker pool: scheduler statistics")
struct SchedstatTests {
    @Test("a schedstat line parses into run time, runqueue wait and time slices")
    func parses() {
        #expect(Platform.parseSchedstat(Array("916229 120 3\n".utf8)) == Platform.Schedstat(runNanoseconds: 916229, waitNanoseconds: 120, timeslices: 3))
        #expect(Platform.parseSchedstat(Array("5 6".utf8)) == Platform.Schedstat(runNanoseconds: 5, waitNanoseconds: 6, timeslices: 0))
        #expect(Platform.parseSchedstat(Array("17\n".utf8)) == nil)
        #expect(Platform.parseSchedstat(Array("".utf8)) == nil)
    }

    @Test("statistics are kept when a young thread reads no run time yet but a time slice (0 0 1); not when all is zero")
    func youngThreadKeepsStatistics() {
        #expect(Platform.schedstatKeepsStatistics(Platform.Schedstat(runNanoseconds: 0, waitNanoseconds: 0, timeslices: 1)))
        #expect(Platform.schedstatKeepsStatistics(Platform.Schedstat(runNanoseconds: 916229, waitNanoseconds: 0, timeslices: 1)))
        #expect(!Platform.schedstatKeepsStatistics(Platform.Schedstat(runNanoseconds: 0, waitNanoseconds: 0, timeslices: 0)))
    }

    @Test("the pool's check, made first on a thread that has just started, sees the kernel's statistics")
    func checkOnYoungThread() async {
        await #expect(processExitsWith: .success) { scenarioSleepShareDetectedOnYoungThread() }
    }
}

// Ports 38 (Queuer's `testAddChainedOperationsEmpty`): on a loaded machine,
// an operation whose block woke a waiting thread was still in its queue
// about 4 ms later, nearly every time (corelibs: almost never). An idle
// worker spun with `sched_yield()` before parking; under EEVDF a thread
// that yields is the first preempted when it wakes another, so the worker
// that took the operation stopped for a whole tick right after the block's
// signal, before it could finish the operation.

/// Two threads keep both processors busy while, 200 times, an operation's
/// block signals the waiting thread, which then watches `operationCount` for
/// up to 0.5 ms. Counts the rounds where the operation was still counted
/// after that.
///
/// Reading once, at once, was not enough: the worker still has its own
/// finish to do after the signal, and a single immediate read found the
/// operation still counted in 113 of 200 rounds under ThreadSanitizer (CI,
/// stop 33), and in up to 128 in debug builds since, without any stall. The
/// fault this test catches leaves it counted for up to a tick (4 ms). Four
/// debug runs each, this machine: 9–12 of 200 rounds with the fix, 127–182
/// with the yielding spin put back.
func scenarioCountAfterSignalUnderLoad() {
    let stop = Atomic<Bool>(false)
    let hogs = Latch(count: 2)
    for _ in 0..<2 {
        spawnThread {
            hogs.countDown()
            var spin = 0
            while !stop.load(ordering: .relaxed) { spin &+= 1 }
        }
    }
    defer { stop.store(true, ordering: .relaxed) }
    #expect(hogs.wait())
    let rounds = 200
    var stillCounted = 0
    for _ in 0..<rounds {
        let queue = OperationQueue()
        let signalled = DispatchSemaphore(value: 0)
        queue.addOperation(BlockOperation { signalled.signal() })
        guard signalled.wait(timeout: .now() + 10) == .success else {
            Issue.record("the operation did not run")
            return
        }
        let graceEnd = ContinuousClock.now + .microseconds(500)
        while queue.operationCount != 0, ContinuousClock.now < graceEnd {}
        if queue.operationCount != 0 { stillCounted += 1 }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }
    // The reads race with the worker by nature; the grace separates a
    // finish that follows the signal from one that waits for the scheduler.
    #expect(stillCounted < rounds / 4, "\(stillCounted) of \(rounds) rounds still counted the operation 0.5 ms after the block's signal")
}

@Suite("Worker pool: idle spin")
struct IdleSpinTests {
    @Test("on a loaded machine, an operation whose block wakes a thread finishes without waiting for a scheduler tick (most of 200 rounds find it gone within 0.5 ms)")
    func countAfterSignalUnderLoad() async {
        await #expect(processExitsWith: .success) { scenarioCountAfterSignalUnderLoad() }
    }
}
