import Dispatch
import Synchronization

/// Runs operations in order of readiness, then priority, with a limit on how
/// many run at once: the Swift counterpart of Foundation's `OperationQueue`,
/// with the same names and shapes.
///
/// ## Scheduling
/// - An operation starts only once it is ready (its dependencies finished,
///   or it was cancelled). Among ready operations the highest
///   ``Operation/queuePriority`` starts first, first in first out within a
///   priority. With ``maxConcurrentOperationCount`` = 1 this holds strictly,
///   but readiness still comes first, so a serial operation queue is not a
///   serial dispatch queue: use dependencies to fix an order.
/// - A finishing operation releases exactly its own dependents; the queue
///   never scans waiting operations, so every step costs O(1) whatever the
///   queue's length.
/// - All queues share one process-wide pool of worker threads sized to the
///   machine (unless ``underlyingQueue`` is set): more queues do not mean
///   more operations at once. Across queues, higher ``qualityOfService``
///   runs first. Operations that block (sleep, I/O, waits) do not stall the
///   pool: it starts other workers meanwhile.
/// - Each drain of the queue starts many operations in a row on one worker,
///   instead of paying a thread hand-off per operation.
///
/// ## Lifetime
/// A queue that goes out of scope still runs every operation it holds; once
/// they finish, the queue, its operations and their closures are released.
///
/// ## Thread safety
/// Every member may be called from any thread. The queue's state is guarded
/// by one lock, never held while user code runs.
///
/// In a file that also imports Foundation, write
/// `import class Operations.OperationQueue`.
open class OperationQueue: @unchecked Sendable {
    // @unchecked Sendable: `scheduler`, `retainedSelf`, `storedName`,
    // `storedQualityOfService`, `storedUnderlyingQueue`, `observers`, `pendingLimitPolicy`,
    // `eventSinks` and `nextEventSinkID` are read and written only while
    // `lock` is held. `observed` and `hasEventSinks` are atomic. `kind` is
    // immutable.

    /// Where drain loops run.
    enum Kind {
        /// The shared worker pool (or `underlyingQueue` when set).
        case pool
        /// The main thread (`OperationQueue.main`).
        case mainThread
    }

    final let lock = PlatformLock()
    /// Guarded by `lock`, which guarantees exclusivity: dynamic checks off.
    @exclusivity(unchecked) final var scheduler = QueueScheduler()
    final let kind: Kind
    final var storedName: String?
    final var storedQualityOfService: QualityOfService = .default
    final var storedUnderlyingQueue: DispatchQueue?
    final var observers: ObservationRegistry?
    final let observed = Atomic<Bool>(false)
    /// The queue's retain of itself while it holds operations, so that a
    /// queue that goes out of scope still runs everything it holds (its
    /// operations refer to it unretained). Taken when the first operation is
    /// linked; given back after the last one's `completeRetirement()`.
    @exclusivity(unchecked) final var retainedSelf: Unmanaged<OperationQueue>?
    /// What synchronous adds do when the pending limit is reached.
    final var pendingLimitPolicy: PendingLimitPolicy = .block
    /// Drain loops between retiring an operation (under the lock) and
    /// dropping their last references to it. Waits that find their condition
    /// met wait for this to reach zero, so that an operation the caller no
    /// longer holds is already released when the wait returns.
    final let retiringNow = Atomic<Int>(0)
    /// Subscribers to `events`, by id.
    final var eventSinks: [Int: AsyncStream<Event>.Continuation] = [:]
    final var nextEventSinkID = 0
    /// Whether `eventSinks` is non-empty (read without the lock).
    final let hasEventSinks = Atomic<Bool>(false)

    /// The value of ``maxConcurrentOperationCount`` that lets the system
    /// choose: -1, as in Foundation.
    public static let defaultMaxConcurrentOperationCount: Int = -1

    /// Creates a concurrent queue that runs on the shared worker pool.
    public init() {
        kind = .pool
    }

    deinit {
        scheduler.releaseStorage()
    }

    init(mainThread: Void) {
        kind = .mainThread
        storedName = "OperationQueue Main Queue"
        storedQualityOfService = .userInteractive
        scheduler.width = 1
    }

    // MARK: Configuration

    /// A name for debugging. Defaults to `OperationQueue 0x…`.
    open var name: String? {
        get { lock.withLock { storedName } ?? "OperationQueue 0x" + String(UInt(bitPattern: ObjectIdentifier(self).hashValue), radix: 16) }
        set {
            notifyWillChange(["name"])
            lock.withLock { storedName = newValue }
            notifyDidChange(["name"])
        }
    }

    /// The default quality of service of the queue's operations, and its
    /// place among queues on the shared pool. Defaults to `.default`.
    open var qualityOfService: QualityOfService {
        get { lock.withLock { storedQualityOfService } }
        set {
            notifyWillChange(["qualityOfService"])
            lock.withLock { storedQualityOfService = newValue }
            notifyDidChange(["qualityOfService"])
        }
    }

    /// The most operations that may execute at once.
    ///
    /// - `1` makes the queue serial (one operation at a time, in readiness
    ///   and priority order).
    /// - `n > 1` bounds concurrency; `0` starts nothing (cancelled
    ///   operations are still retired).
    /// - ``defaultMaxConcurrentOperationCount`` (-1, the default) lets the
    ///   system choose: as many as the shared pool can run, which follows
    ///   the processor count and grows while operations block.
    /// - A value below -1 is a misuse
    ///   (``OperationMisuse/Code/invalidMaxConcurrentOperationCount``).
    ///
    /// Changes take effect immediately: a larger value starts waiting
    /// operations at once; a smaller one lets running operations finish and
    /// starts no more until they are under the new limit. On
    /// ``OperationQueue/main`` the value stays 1.
    open var maxConcurrentOperationCount: Int {
        get { lock.withLock { scheduler.width } }
        set {
            guard newValue >= -1 else {
                OperationMisuse.report(
                    .invalidMaxConcurrentOperationCount,
                    subject: misuseSubject,
                    "was given maxConcurrentOperationCount \(newValue); use a positive count, 0 to start nothing, or -1 (defaultMaxConcurrentOperationCount) to let the system choose."
                )
                return
            }
            guard kind == .pool else { return }
            notifyWillChange(["maxConcurrentOperationCount"])
            let tickets = lock.withLock { () -> Int in
                scheduler.width = newValue
                return scheduler.drainersNeeded()
            }
            startDrainers(tickets)
            notifyDidChange(["maxConcurrentOperationCount"])
        }
    }

    /// Whether the queue has stopped starting operations.
    ///
    /// Suspending does not pause operations that are running; it stops new
    /// ones from starting (cancelled ones included). Resuming continues
    /// where the queue left off, in readiness and priority order.
    open var isSuspended: Bool {
        get { lock.withLock { scheduler.isSuspended } }
        set {
            notifyWillChange(["isSuspended"])
            let tickets = lock.withLock { () -> Int in
                scheduler.isSuspended = newValue
                return scheduler.drainersNeeded()
            }
            // Tell observers before any operation can start because of it.
            notifyDidChange(["isSuspended"])
            emit(.suspended(newValue))
            startDrainers(tickets)
        }
    }

    /// A dispatch queue to run the queue's operations on, instead of the
    /// shared pool. Setting it while the queue holds operations is a misuse
    /// (``OperationMisuse/Code/underlyingQueueWhileBusy``), as in Foundation.
    /// Cannot be changed on ``OperationQueue/main``.
    open var underlyingQueue: DispatchQueue? {
        get { lock.withLock { storedUnderlyingQueue } }
        set {
            guard kind == .pool else { return }
            notifyWillChange(["underlyingQueue"])
            let refused = lock.withLock { () -> Bool in
                guard scheduler.count == 0 else { return true }
                storedUnderlyingQueue = newValue
                return false
            }
            if refused {
                OperationMisuse.report(
                    .underlyingQueueWhileBusy,
                    subject: misuseSubject,
                    "had its underlyingQueue changed while it holds operations. Set underlyingQueue before adding operations, or when the queue is empty."
                )
                return
            }
            notifyDidChange(["underlyingQueue"])
        }
    }

    // MARK: Contents

    /// The unfinished operations, in the order they were added.
    /// - Complexity: O(n).
    open var operations: [Operation] {
        lock.withLock { scheduler.operations }
    }

    /// The number of unfinished operations.
    /// - Complexity: O(1).
    open var operationCount: Int {
        lock.withLock { scheduler.count }
    }

    /// Progress of the work added since the queue was last empty.
    open var progress: QueueProgress {
        lock.withLock {
            QueueProgress(totalUnitCount: scheduler.progressTotal, completedUnitCount: scheduler.progressCompleted)
        }
    }

    // MARK: Adding

    /// Adds an operation. The queue starts it when it is ready and a slot
    /// is free.
    ///
    /// Adding an operation that is already in a queue (this one or
    /// another), or that is executing or finished, is a misuse
    /// (``OperationMisuse/Code/alreadyInQueue``,
    /// ``OperationMisuse/Code/addedAfterStart``).
    open func addOperation(_ operation: Operation) {
        enqueueOne(operation)
    }

    /// Wraps `block` in a ``BlockOperation`` and adds it.
    open func addOperation(_ block: @escaping @Sendable () -> Void) {
        enqueueOne(BlockOperation(block: block))
    }

    /// Adds several operations in one step and, if `wait` is true, blocks
    /// until exactly those operations have finished (and their completion
    /// blocks have run).
    ///
    /// The same operation twice in `operations` is a misuse
    /// (``OperationMisuse/Code/duplicateInBatch``); the other operations
    /// are still added.
    open func addOperations(_ operations: [Operation], waitUntilFinished wait: Bool) {
        let accepted = enqueue(operations) ?? []
        if wait { waitForOperations(accepted) }
    }

    /// Adds a block that runs after every operation added before it has
    /// finished; operations added after it wait until it has finished.
    open func addBarrierBlock(_ barrier: @escaping @Sendable () -> Void) {
        addBarrier(BarrierOperation(block: barrier))
    }

    /// Cancels every operation in the queue. Cancelled operations that have
    /// not started are retired promptly, even if their dependencies have not
    /// finished. Running operations see ``Operation/isCancelled`` and are
    /// expected to stop early.
    open func cancelAllOperations() {
        let snapshot = lock.withLock { scheduler.operations }
        ThreadContext.withCurrent { context in
            // Saved and restored, so that a nested call (a `cancel()` override
            // cancelling another queue) keeps its own batch.
            let savedQueue = context.cancellingQueueReference
            let savedBatch = context.deferredCancellations
            context.cancellingQueueReference = Unmanaged.passUnretained(self)
            context.deferredCancellations = []
            for operation in snapshot { operation.cancel() }
            context.cancellingQueueReference = savedQueue
            moveCancelledOperations(context)
            context.deferredCancellations = savedBatch
        }
    }

    // MARK: Waiting

    /// Blocks until the queue is empty: every operation finished and its
    /// completion block ran, including operations added while waiting and
    /// asynchronous operations that finish later.
    ///
    /// Waiting from inside one of the queue's own operations (or completion
    /// blocks) can never end and is a misuse
    /// (``OperationMisuse/Code/waitDeadlock``). On the main thread, waiting
    /// for ``OperationQueue/main`` runs its operations on this thread.
    @available(*, noasync, message: "Blocks a thread; in async code use `await queue.drained()`.")
    open func waitUntilAllOperationsAreFinished() {
        waitUntilEmpty(deadline: nil)
    }

    // MARK: Current and main

    /// The queue that is running the current operation (including inside
    /// an `async` operation body), or ``OperationQueue/main`` on the main
    /// thread, otherwise nil.
    open class var current: OperationQueue? {
        unowned(unsafe) let context = ThreadContext.current
        if let queue = context.queue { return queue }
        if let queue = OperationTaskContext.current?.queue { return queue }
        return context.isMainThread ? OperationQueue.main : nil
    }

    private static let mainQueue = OperationQueue(mainThread: ())

    /// The queue of the main thread: serial, its operations run on the main
    /// thread.
    ///
    /// They run when the main thread services the main dispatch queue
    /// (`dispatchMain()`, a Foundation run loop, the main actor), or while
    /// the main thread waits for them with ``waitUntilAllOperationsAreFinished()``
    /// or ``Operation/waitUntilFinished()``. Suspension, cancellation and
    /// the name work as on any queue.
    open class var main: OperationQueue { mainQueue }

    /// A one-line description with the name and counts.
    open var description: String {
        let (count, ready, executing, suspended) = lock.withLock {
            (scheduler.count, scheduler.readyCount, scheduler.executing, scheduler.isSuspended)
        }
        return "<\(misuseSubject): \(count) operations, \(ready) ready, \(executing) executing\(suspended ? ", suspended" : "")>"
    }
}

extension OperationQueue: Hashable {
    /// Queues are equal only to themselves.
    public static func == (lhs: OperationQueue, rhs: OperationQueue) -> Bool { lhs === rhs }

    /// Hashes the queue's identity.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(ObjectIdentifier(self))
    }
}

extension OperationQueue: CustomStringConvertible {}

/// The progress of a queue's work: how many operations were added since the
/// queue was last empty, and how many of them have finished.
public struct QueueProgress: Sendable, Hashable, CustomStringConvertible {
    /// Operations added since the queue was last empty.
    public var totalUnitCount: Int
    /// Of those, the operations that have finished.
    public var completedUnitCount: Int

    /// `completedUnitCount / totalUnitCount`, or 1 when nothing was added.
    public var fractionCompleted: Double {
        totalUnitCount == 0 ? 1 : Double(completedUnitCount) / Double(totalUnitCount)
    }

    /// Whether every operation added has finished.
    public var isFinished: Bool { completedUnitCount == totalUnitCount }

    /// "completed/total", for example "3/10".
    public var description: String { "\(completedUnitCount)/\(totalUnitCount)" }
}

/// What a queue with a pending-operation bound does when it is full and
/// code adds synchronously (see ``OperationQueue/setPendingLimit(_:policy:)``).
public enum PendingLimitPolicy: Sendable, Hashable {
    /// `addOperation` blocks until there is room (the default).
    case block
    /// `addOperation` refuses the operation: it is cancelled, never runs its
    /// work, and is not added. `tryAddOperation` reports the refusal.
    case reject
}
