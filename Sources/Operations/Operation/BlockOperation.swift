import Synchronization

/// An operation that runs one or more blocks concurrently and finishes when
/// all of them have finished (group semantics), like Foundation's
/// `BlockOperation`.
///
/// With one block, the block runs on the thread that runs the operation.
/// With several, the first runs there and the others run on the shared
/// worker pool at the same time; the calling thread also takes blocks that
/// no worker has picked up yet, so the operation never waits for a block
/// that has not started. Blocks are released once they have run.
///
/// In a file that also imports Foundation, write
/// `import class Operations.BlockOperation`.
open class BlockOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `firstBlock` (and `OperationExtras.moreBlocks`)
    // are read and written only while the state lock bit (see `Operation`)
    // is held (so their dynamic exclusivity checks are off).

    /// The first block, the only one in the common case. Blocks added after
    /// it live in `OperationExtras.moreBlocks`, so that a one-block operation
    /// stores 16 bytes here (an enum with a "many" case would need a tag
    /// byte, and the object one more 16-byte heap granule).
    @exclusivity(unchecked) final var firstBlock: (@Sendable () -> Void)?

    /// Creates an operation with no blocks; add them with ``addExecutionBlock(_:)``.
    public override init() {
        super.init()
    }

    /// Creates an operation that runs `block`.
    @preconcurrency
    public convenience init(block: @escaping @Sendable () -> Void) {
        self.init()
        firstBlock = block
    }

    /// Adds a block to run concurrently with the others.
    ///
    /// Adding a block after the operation began executing or finished is a
    /// misuse (``OperationMisuse/Code/executionBlockAfterStart``).
    @preconcurrency
    open func addExecutionBlock(_ block: @escaping @Sendable () -> Void) {
        let refused = withStateLock { state -> Bool in
            guard !state.hasBaseStarted, !state.isFinished else { return true }
            appendBlockLocked(block)
            return false
        }
        if refused {
            OperationMisuse.report(
                .executionBlockAfterStart,
                subject: .operation(self),
                "was given an execution block \(isFinished ? "after it finished" : "while it is executing"). Add execution blocks before the operation starts (before adding it to a queue)."
            )
        }
    }

    /// The blocks, in the order they were added. Empty once they have run,
    /// or once the operation, cancelled, finished without running them.
    open var executionBlocks: [@Sendable () -> Void] {
        withStateLock { _ in
            guard let firstBlock else { return [] }
            return [firstBlock] + (extras?.moreBlocks ?? [])
        }
    }

    override func discardUnrunBody() {
        let blocks = withStateLock { _ in takeBlocksLocked() }
        withExtendedLifetime(blocks) {}
    }

    /// Runs the blocks and returns when all of them have finished.
    open override func main() {
        switch withStateLock({ _ in takeBlocksLocked() }) {
        case .empty:
            return
        case .one(let block):
            block()
        case .many(let list):
            ConcurrentBlocks(list, operation: self).run()
        }
    }
}

extension BlockOperation {
    /// Appends `block`. Call with the state lock bit held.
    final func appendBlockLocked(_ block: @escaping @Sendable () -> Void) {
        if firstBlock == nil {
            firstBlock = block
        } else {
            extrasWhileLocked().moreBlocks.append(block)
        }
    }

    /// Takes every block (they are released once run). Call with the state
    /// lock bit held; the caller runs or drops them after unlocking.
    final func takeBlocksLocked() -> BlockList {
        guard let first = firstBlock else { return .empty }
        firstBlock = nil
        guard let extras, !extras.moreBlocks.isEmpty else { return .one(first) }
        var list = [first]
        list.append(contentsOf: extras.moreBlocks)
        extras.moreBlocks = []
        return .many(list)
    }
}

/// The blocks taken from a ``BlockOperation`` to run: none, one (no
/// array), or several.
enum BlockList {
    case empty
    case one(@Sendable () -> Void)
    case many([@Sendable () -> Void])
}

/// Runs blocks concurrently: the calling thread and pool helpers claim
/// blocks by index until none are left; the caller then waits only for
/// blocks already running elsewhere.
///
/// Each block is moved out of its slot by the thread that claims it and
/// released once it has run, so that a block's captures do not outlive the
/// operation while helper jobs that found nothing left to claim are still
/// queued (they hold this object, not the blocks).
final class ConcurrentBlocks: @unchecked Sendable {
    // @unchecked Sendable: slot `i` of `slots` is read (moved out) only by
    // the one thread whose `nextIndex` claim returned `i`; the counters are
    // atomic; the other fields are immutable.
    private let slots: UnsafeMutablePointer<(@Sendable () -> Void)?>
    private let count: Int
    private let nextIndex = Atomic<Int>(0)
    private let unfinished: Atomic<Int>
    private let done = WaitSignal()
    private let operation: Operation
    /// The queue the starting thread ran for, unretained. It is alive while
    /// a block is unfinished (the operation, or the operation that started
    /// it by hand, is still running in it), so a helper retains it once it
    /// has claimed a block, and only then (see `helpOnPoolThread`).
    private let queue: Unmanaged<OperationQueue>?

    init(_ blocks: [@Sendable () -> Void], operation: Operation) {
        count = blocks.count
        slots = .allocate(capacity: blocks.count)
        for (index, block) in blocks.enumerated() { (slots + index).initialize(to: block) }
        self.unfinished = Atomic(blocks.count)
        self.operation = operation
        self.queue = ThreadContext.current.queueReference
    }

    deinit {
        // Every slot was claimed (and moved out) before `run()` returned;
        // any left are released here.
        let claimed = min(nextIndex.load(ordering: .acquiring), count)
        (slots + claimed).deinitialize(count: count - claimed)
        slots.deallocate()
    }

    func run() {
        // The first block is this thread's, claimed before any helper
        // exists: a worker already awake could otherwise take it, and a
        // block that must run where the operation runs (a main-actor block
        // of `OperationQueue.main`) would run elsewhere (probe 51).
        let first = claim()
        // One helper job per extra block, as Foundation submits every block
        // to a concurrent queue: if blocks block (or wait for each other),
        // the pool grows and runs the rest. A helper that finds no block left
        // returns at once.
        let helpers = count - 1
        for _ in 0..<helpers {
            WorkerPool.shared.submit(ClosureJob { [self] in self.helpOnPoolThread() }, qos: operation.loadState().qosIndex)
        }
        runClaimedBlocks(from: first)
        if unfinished.load(ordering: .acquiring) > 0 {
            WorkerPool.shared.blocking { _ = done.wait() }
        }
    }

    private func helpOnPoolThread() {
        // A block first: a helper that finds none left may run long after
        // the operation finished and its queue was freed (the starting
        // thread often runs every block itself). It touches neither, and
        // binds no context (probe 38).
        let first = claim()
        guard first < count else { return }
        // The claimed block has not run, so the operation has not finished
        // and the queue is alive: retained here, it stays so until this
        // helper has left it, after its last block (whose end may let the
        // operation finish and the queue go).
        let retained = queue?.retain()
        defer { retained?.release() }
        ThreadContext.withCurrent { context in
            let saved = context.enter(operation, queue: queue)
            // The carried context is bound around every block, as around
            // `main()` on the starting thread: which thread claims a block
            // is scheduling, not something the block can see.
            operation.withCarriedContext { runClaimedBlocks(from: first) }
            context.leave(restoring: saved)
        }
    }

    /// The index of the next unclaimed block (`count` or more: none left).
    private func claim() -> Int {
        nextIndex.add(1, ordering: .acquiringAndReleasing).oldValue
    }

    /// Runs the block at `index` (claimed by the caller, or claimed here
    /// when nil), then claims and runs blocks until none are left.
    private func runClaimedBlocks(from claimed: Int? = nil) {
        var index = claimed ?? claim()
        while index < count {
            // Moved out: released when this iteration ends, after it ran.
            if let block = (slots + index).move() { block() }
            if unfinished.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
                done.signal()
            }
            index = claim()
        }
    }
}

/// The operation behind `addBarrierBlock(_:)`.
final class BarrierOperation: BlockOperation, @unchecked Sendable {
    // @unchecked Sendable: no stored state of its own. The queue gates the
    // operations around it (see `QueueState`); it has no dependency edges.
}
