// The worker pool's parked list (Queuer's port, session 20): a worker whose
// timed park expired just as the pool handed it a job took the job, and the
// hand-off's signal stayed pending. At its next park that stale signal ended
// the wait at once, with no job, and the worker listed itself as parked a
// second time. The pool then handed it jobs while it was busy: a queue's
// drain loop was lost, or waited behind an operation that waited for it
// (Queuer's GroupOperation hung). The test gives a parked worker exactly
// that stale wake-up.

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
