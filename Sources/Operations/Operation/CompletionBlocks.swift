// Completion blocks, run asynchronously on the pool, as Foundation runs them
// ("typically a secondary thread"; Linux Foundation dispatches each to a
// global queue once the operation has finished and its waiters are woken).
//
// They start in the order their operations finished. One job per block on
// the pool would not keep that order: two jobs submitted one after the other
// go to two workers, and the second often runs first (ports rerun:
// SwiftQueue's cancel-all test, which records its jobs' removals from their
// completion blocks, saw them reversed in 18 of 30 runs, and 816 of 1,000
// pairs finished in a queue started in reverse). So the blocks wait
// in one first-in-first-out line, and a runner job takes one block from its
// head, posts the next runner if more wait, and only then runs its block,
// once the block before it has started (the runner that took it is between
// taking it and calling it, in library code: the wait is short). Blocks that
// block or run long still run side by side, one per runner.

import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The line of completion blocks waiting for a worker, and the runner that
/// is posted for its head. A pure state machine behind one lock.
enum CompletionBlocks {
    /// One waiting completion block, with the operation it holds until the
    /// block has run (as Foundation's does), the queue the operation
    /// belonged to (held too: adds from the block to that queue are its own
    /// work, never held back by a pending limit), and the quality of service
    /// it runs at.
    struct Item {
        let block: @Sendable () -> Void
        let operation: Operation
        let queue: OperationQueue?
        let qos: Int
        /// Its place in the line, from 1.
        var sequence: UInt64 = 0
    }

    /// Guarded by the lock of `line`, below.
    struct Line {
        var items = RingBuffer<Item>()
        /// Whether a runner is posted and has not yet taken its block. While
        /// it is, `items` is not empty: only runners take items.
        var runnerPosted = false
        /// The sequence number of the last item added.
        var lastSequence: UInt64 = 0

        /// Adds `item`; returns the quality of service of a runner to post,
        /// if none is posted.
        mutating func append(_ item: consuming Item) -> Int? {
            lastSequence += 1
            item.sequence = lastSequence
            let qos = item.qos
            items.append(item)
            guard !runnerPosted else { return nil }
            runnerPosted = true
            return qos
        }

        /// A runner takes the head; returns it, and the quality of service
        /// of the next runner to post if more wait.
        mutating func take() -> (item: Item?, next: Int?) {
            runnerPosted = false
            let item = items.popFirst()
            guard let head = items.first else { return (item, nil) }
            runnerPosted = true
            return (item, head.qos)
        }
    }

    /// The line. Its lock guards no other state; no user code runs under
    /// it, and no block is released under it (a taken item is moved out).
    private static let line = LockedValue(Line())
    /// The sequence number of the last block called.
    private static let started = Atomic<UInt64>(0)

    /// Queues `block`, which holds `operation` (and its `queue`) until it
    /// has run, to run at `qos` once the blocks queued before it have
    /// started.
    ///
    /// The caller's reference to `block` is moved into the line, and the
    /// line holds the only one once the lock is released: a runner may
    /// take the block and run it at once, and its release (the deinit of
    /// what it captured, user code) must happen there, after it ran, never
    /// on the submitting thread. That thread is finishing the operation:
    /// its waiters are not woken yet, and a drain loop holds the dependents
    /// it just readied (probe 53: a captured object whose deinit waited for
    /// the next operation of a chain deadlocked the drain loop).
    static func submit(_ block: consuming @escaping @Sendable () -> Void, of operation: Operation, queue: OperationQueue?, qos: Int) {
        var item: Item? = Item(block: consume block, operation: operation, queue: queue, qos: qos)
        let post = line.withLock { $0.append(item.take()!) }
        if let post { WorkerPool.shared.submit(CompletionRunner(), qos: post) }
    }

    /// Takes the head of the line for a runner, posting the next runner
    /// first if more blocks wait.
    fileprivate static func takeHead() -> Item? {
        let (item, next) = line.withLock { $0.take() }
        if let next { WorkerPool.shared.submit(CompletionRunner(), qos: next) }
        return item
    }

    /// Waits until the block before `item` has been called, then records
    /// `item`'s call. The runner of that block took it before this one
    /// took `item`, and runs only library code until it calls it.
    fileprivate static func waitForTurn(of item: Item) {
        var spins = 0
        while started.load(ordering: .acquiring) != item.sequence &- 1 {
            spins += 1
            if spins > 64 { sched_yield() }
        }
        started.store(item.sequence, ordering: .releasing)
    }
}

/// Runs the completion block at the head of the line (see
/// `CompletionBlocks`). Inside the block, `OperationQueue.current` is nil,
/// as in Foundation. The thread is marked as doing the queue's work (adds
/// to it are never held back by its pending limit), but not as running the
/// operation: the operation has finished, and a wait from the block (for
/// the operation or its queue) is an ordinary wait (probe 47: marked as
/// running it, the block's wait for its queue stepped aside for a
/// retirement the queue did not count, and never ended).
final class CompletionRunner: PoolJob, Sendable {
    func runJob(on worker: Worker) {
        guard let item = CompletionBlocks.takeHead() else { return }
        CompletionBlocks.waitForTurn(of: item)
        ThreadContext.withCurrent { context in
            // The item holds the queue while the reference is set.
            let savedQueue = context.queueReference
            context.queueReference = item.queue.map { Unmanaged.passUnretained($0) }
            let outer = context.completingOperation
            context.completingOperation = Unmanaged.passUnretained(item.operation)
            item.block()
            context.completingOperation = outer
            context.queueReference = savedQueue
        }
        // The block, then the operation and the queue, are released here,
        // on the worker, with no lock held.
    }
}
