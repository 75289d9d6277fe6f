// Operations that block: more of them than cores must not starve each
// other, because the shared pool adds workers while workers block.

import Dispatch
import Synchronization
import Testing
@testable import Operations

@Suite("Blocking operations")
struct BlockingTests {
    @Test("8 operations that each wait until all 8 are running: the pool grows past the core count")
    func poolGrowsForBlockedOperations() {
        let count = 8
        let allRunning = Latch(count: count)
        let met = Counter()
        let workersSeen = Box(0)
        let queue = makeQueue("blocking")
        for _ in 0..<count {
            queue.addOperation {
                allRunning.countDown()
                // A plain semaphore wait: the pool has to notice on its own.
                if allRunning.wait(timeout: patience) { met.increment() }
                workersSeen.value = max(workersSeen.value, WorkerPool.shared.snapshot.workers)
            }
        }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 2))
        #expect(met.count == count, "only \(count - allRunning.count) of \(count) blocking operations ever ran at once")
        #expect(workersSeen.value >= count)
    }

    @Test("many short blocking operations (each waits 2 ms, so workers complete operations all the time): more run at once than there are cores")
    func poolGrowsForShortBlockingOperations() {
        let cores = WorkerPool.shared.targetConcurrency
        let count = max(1_000, cores * 100)
        let tracker = ConcurrencyTracker()
        let finished = Counter()
        // Opens when more bodies than cores run at once, or when all have
        // finished without that happening (the failure).
        let done = Gate()
        let queue = makeQueue("short-blocking")
        for _ in 0..<count {
            queue.addOperation {
                tracker.enter()
                if tracker.running > cores { done.open() }
                // The blocking under test: a semaphore wait that times out
                // after 2 ms, or ends at once when the pool has grown (so
                // that the remaining operations then finish quickly).
                _ = done.wait(timeout: .milliseconds(2))
                tracker.leave()
                if finished.increment() == count { done.open() }
            }
        }
        #expect(done.wait(timeout: patience * 2))
        queue.cancelAllOperations()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(tracker.maximum > cores, "at most \(tracker.maximum) of \(count) operations that each block for 2 ms ran at once on \(cores) cores")
    }

    @Test("operations waiting (waitUntilFinished) for operations queued after them on the same concurrent queue")
    func waitsForLaterOperations() {
        let count = 8
        let queue = makeQueue("waits-later")
        let log = Recorder<String>()
        let targets = (0..<count).map { index in BlockOperation { log.record("target \(index)") } }
        let waiters = (0..<count).map { index in
            BlockOperation {
                targets[index].waitUntilFinished()
                log.record("waiter \(index)")
            }
        }
        queue.addOperations(waiters, waitUntilFinished: false)
        queue.addOperations(targets, waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 2), "waiting operations starved the queue")
        let events = log.events
        #expect(events.count == count * 2)
        for index in 0..<count {
            let target = events.firstIndex(of: "target \(index)") ?? .max
            let waiter = events.firstIndex(of: "waiter \(index)") ?? -1
            #expect(target < waiter)
        }
    }

    @Test("a chain of waits across queues: each operation waits for one on the next queue")
    func waitsAcrossQueues() {
        let depth = 6
        let queues = (0..<depth).map { makeQueue("chain-\($0)", width: 1) }
        let release = Gate()
        let finished = Counter()
        var previous: BlockOperation?
        for index in (0..<depth).reversed() {
            let next = previous
            let op = BlockOperation {
                if let next { next.waitUntilFinished() } else { release.wait() }
                finished.increment()
            }
            queues[index].addOperation(op)
            previous = op
        }
        release.open()
        for queue in queues {
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        }
        #expect(finished.count == depth)
    }

    @Test("blocking operations on several queues at once all finish")
    func blockingAcrossQueues() {
        let queues = (0..<4).map { makeQueue("blocking-\($0)", width: 2) }
        let allRunning = Latch(count: 8)
        let met = Counter()
        for queue in queues {
            for _ in 0..<2 {
                queue.addOperation {
                    allRunning.countDown()
                    if allRunning.wait(timeout: patience) { met.increment() }
                }
            }
        }
        for queue in queues {
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 2))
        }
        #expect(met.count == 8)
    }

    @Test("a BlockOperation with 8 blocks that wait for each other (the chapter: all blocks go to a concurrent queue)")
    func blockingExecutionBlocks() {
        let allRunning = Latch(count: 8)
        let met = Counter()
        let gaveUp = Box(false)
        let op = BlockOperation()
        for _ in 0..<8 {
            op.addExecutionBlock {
                allRunning.countDown()
                // Once one block gave up, the others stop waiting, so that a
                // failure costs one timeout, not one per block.
                if gaveUp.value { return }
                if allRunning.wait(timeout: .seconds(5)) {
                    met.increment()
                } else {
                    gaveUp.value = true
                }
            }
        }
        let queue = makeQueue("blocking-blocks")
        queue.addOperation(op)
        #expect(op.waitUntilFinished(timeout: patience * 2))
        #expect(met.count == 8, "only \(8 - allRunning.count) blocks ran before the first gave up waiting for the others")
    }

    @Test("waitUntilFinished from many threads at once on one operation")
    func manyWaiters() {
        let release = Gate()
        let op = BlockOperation { release.wait() }
        let queue = makeQueue("many-waiters")
        queue.addOperation(op)
        let woke = Latch(count: 6)
        for _ in 0..<6 {
            spawnThread {
                op.waitUntilFinished()
                woke.countDown()
            }
        }
        #expect(staysFalse { woke.count < 6 })
        release.open()
        #expect(woke.wait())
    }
}
