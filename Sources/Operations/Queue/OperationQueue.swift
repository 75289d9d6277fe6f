import Dispatch
import Synchronization

/// Runs operations in order of readiness, then priority, with a limit on how
/// many run at once: the Swift counterpart of Foundation's `OperationQueue`,
/// with the same names and shapes.
///
/// ## Scheduling
/// - An operation starts only once it is ready: its dependencies finished,
///   or it was cancelled, as its (possibly overridden) ``Operation/isReady``
///   reports. Among ready operations the highest
///   ``Operation/queuePriority`` starts first, first in first out within a
///   priority. With ``maxConcurrentOperationCount`` = 1 this holds strictly,
///   but readiness still comes first, so a serial operation queue is not a
///   serial dispatch queue: use dependencies to fix an order.
/// - The queue calls ``Operation/start()`` on every operation it dequeues,
///   exactly once, cancelled ones included. A cancelled operation whose class
///   keeps the base `start()` is retired promptly without a slot; one whose
///   class overrides `start()` is started in its turn like any other.
/// - A finishing operation releases exactly its own dependents; the queue
///   never scans waiting operations, so every step costs O(1) whatever the
///   queue's length.
/// - All queues share one process-wide pool of worker threads sized to the
///   machine (unless ``underlyingQueue`` is set): more queues do not mean
///   more operations at once. Across queues, higher ``qualityOfService``
///   runs first. Operations that block (sleep, I/O, waits) do not stall the
///   pool: it starts other workers meanwhile, up to
///   ``maximumWorkerThreads``.
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
    // @unchecked Sendable: `state`, `retainedSelf`, `storedName`,
    // `storedUnderlyingQueue`, `observers`,
    // `pendingLimitPolicy`, `drainWaiters`, `changeWaiters`, `roomWaiters`,
    // `eventSinks`, `nextEventSinkID`, `lastCountsSample` and `storedProgressReporter` are read and written only while
    // `lock` is held. `observed`, `qualityOfServiceIndex`, `hasEventSinks` and `hasProgressReporter` are atomic. `kind` is
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
    @exclusivity(unchecked) final var state = QueueState()
    final let kind: Kind
    @exclusivity(unchecked) final var storedName: String?
    @exclusivity(unchecked) final var storedUnderlyingQueue: DispatchQueue?
    @exclusivity(unchecked) final var observers: ObservationRegistry?
    final let observed = Atomic<Bool>(false)
    /// The queue's quality of service, by index: written while `lock` is
    /// held (so that it changes in order with the queue's other state),
    /// readable without it (`addOperation(_:)` with a block reads it).
    final let qualityOfServiceIndex = Atomic<Int>(QualityOfService.default.index)
    /// The queue's retain of itself while it holds operations or has
    /// retirements in flight, so that a queue that goes out of scope still
    /// runs everything it holds, and so that its operations can refer to it
    /// unretained. Taken when it stops being idle; given back (after
    /// unlocking) when it becomes idle again.
    @exclusivity(unchecked) final var retainedSelf: Unmanaged<OperationQueue>?
    /// When the trace recorder last sampled this queue's counts
    /// (monotonic nanoseconds); see `takeEffectsLocked`.
    @exclusivity(unchecked) final var lastCountsSample: UInt64 = 0
    /// What synchronous adds do when the pending limit is reached.
    @exclusivity(unchecked) final var pendingLimitPolicy: PendingLimitPolicy = .block
    /// Called once the queue is idle (blocking and `async` queue waits).
    @exclusivity(unchecked) final var drainWaiters = CallbackList()
    /// Threads waiting for any change (main-thread waits that run operations inline).
    @exclusivity(unchecked) final var changeWaiters: [WaitSignal] = []
    /// Producers waiting for room under the pending limit, in arrival order.
    @exclusivity(unchecked) final var roomWaiters = RoomWaiters()
    /// Subscribers to `events`, by id.
    @exclusivity(unchecked) final var eventSinks: [Int: EventSink] = [:]
    @exclusivity(unchecked) final var nextEventSinkID = 0
    /// The progress reporter of `OperationsFoundation`'s `progress`, if
    /// installed (see `OperationQueue+ProgressHook.swift`).
    @exclusivity(unchecked) final var storedProgressReporter: (any OperationQueueProgressReporter)?
    /// Whether `storedProgressReporter` is set (read without the lock).
    final let hasProgressReporter = Atomic<Bool>(false)
    /// Whether `eventSinks` is non-empty (read without the lock).
    final let hasEventSinks = Atomic<Bool>(false)
    /// The number, in the drain loops' progress (`DrainLoops.progress`),
    /// of the operation or tail a loop returned from last: stored by the
    /// loops without the lock, read by the watcher (`DrainLoops.watch`).
    final let drainReturns = Atomic<UInt64>(0)
    /// A number no other queue of this process has (a queue freed and
    /// another made at its address get two): how a trace tells queues apart.
    final let traceSerial = OperationQueue.nextTraceSerial.add(1, ordering: .relaxed).newValue
    private static let nextTraceSerial = Atomic<UInt>(0)

    /// The value of ``maxConcurrentOperationCount`` that lets the system
    /// choose: -1, as in Foundation.
    public static let defaultMaxConcurrentOperationCount: Int = -1

    /// The most worker threads the shared pool starts, including those that
    /// replace workers blocked in operations (sleeping, doing I/O, waiting).
    ///
    /// The pool keeps as many workers running as there are processors; when
    /// operations block, it starts more so that other work proceeds, up to
    /// this ceiling. Reaching it is reported once on standard error (the
    /// pool then waits for a blocked worker to return). The default is 512,
    /// or the value of the environment variable
    /// `OPERATIONS_MAX_WORKER_THREADS`. Values below the processor count are
    /// raised to it.
    public static var maximumWorkerThreads: Int {
        get { WorkerPool.shared.maximumWorkers }
        set { WorkerPool.shared.maximumWorkers = newValue }
    }

    /// Creates a concurrent queue that runs on the shared worker pool.
    public init() {
        kind = .pool
    }

    deinit {
        // Nothing can produce events any more: end every subscriber's
        // sequence, so that `for await` loops over `events` finish.
        let sinks = eventSinks.values
        eventSinks = [:]
        for sink in sinks { sink.finish() }
        state.releaseStorage()
    }

    init(mainThread: Void) {
        kind = .mainThread
        storedName = "NSOperationQueue Main Queue"
        qualityOfServiceIndex.store(QualityOfService.userInteractive.index, ordering: .relaxed)
        state.width = 1
    }

    // MARK: Configuration

    /// A name for debugging. Defaults to `NSOperationQueue 0x…` with the
    /// queue's address, and ``main``'s to `NSOperationQueue Main Queue`, as
    /// in Foundation.
    open var name: String? {
        get {
            let stored = lock.withLock { storedName }
            return stored ?? defaultName
        }
        set {
            // As in Foundation, the main queue keeps its name.
            guard kind == .pool else { return }
            notifyWillChange(["name"])
            let old = lock.withLock { () -> String? in
                defer { storedName = newValue }
                return storedName
            }
            withExtendedLifetime(old) {}
            notifyDidChange(["name"])
        }
    }

    /// Whether the queue has a name of its own: true once ``name`` has been
    /// set to a string (and for ``main``), false while ``name`` reads the
    /// default, `NSOperationQueue 0x…` (Foundation's format), which holds
    /// the queue's address.
    ///
    /// Use it to keep addresses out of logs and metrics: label unnamed
    /// queues together rather than one per address. A subclass that
    /// overrides ``name`` is named whenever its getter returns something
    /// other than nil and the default.
    public final var isNamed: Bool { ownName != nil }

    /// The default quality of service of the queue's operations, and its
    /// place among queues on the shared pool. Defaults to `.default`.
    ///
    /// As in Foundation, an operation runs at the higher of its own and the
    /// queue's (an operation at `.default` takes the queue's), and
    /// `addOperation(_:)` with a block gives the operation it makes from a
    /// block the queue's quality of service, when it is not `.default`.
    open var qualityOfService: QualityOfService {
        get { QualityOfService(index: qualityOfServiceIndex.load(ordering: .relaxed)) }
        set {
            // As in Foundation, the main queue keeps `.userInteractive`.
            guard kind == .pool else { return }
            notifyWillChange(["qualityOfService"])
            lock.withLock { qualityOfServiceIndex.store(newValue.index, ordering: .relaxed) }
            notifyDidChange(["qualityOfService"])
        }
    }

    /// The most operations that may execute at once.
    ///
    /// - `1` makes the queue serial (one operation at a time, in readiness
    ///   and priority order).
    /// - `n > 1` bounds concurrency, up to `Int.max`; `0` starts nothing
    ///   (cancelled operations are still retired).
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
    ///
    /// The count is a bound, not a promise of threads. A queue whose
    /// operations are tiny (well under a microsecond each) runs them one
    /// after another on one thread, which is faster than sharing them out:
    /// each handover between threads costs more than such an operation.
    /// It starts them on more threads, up to this bound, as soon as one
    /// takes longer: at once when the thread waits in one of this module's
    /// waits (such as ``Operation/waitUntilFinished()``), after a few
    /// operations that each run longer than about 0.4 µs, and otherwise
    /// within 0.1–0.5 ms of an operation starting to block, sleep or spin
    /// (a watcher thread notices it).
    open var maxConcurrentOperationCount: Int {
        get { lock.withLock { state.width } }
        set {
            guard newValue >= -1 else {
                OperationMisuse.report(
                    .invalidMaxConcurrentOperationCount,
                    subject: .queue(self),
                    "was given maxConcurrentOperationCount \(newValue); use a positive count, 0 to start nothing, or -1 (defaultMaxConcurrentOperationCount) to let the system choose."
                )
                return
            }
            guard kind == .pool else { return }
            notifyWillChange(["maxConcurrentOperationCount"])
            let effects = lock.withLock { () -> QueueEffects in
                state.width = newValue
                return takeEffectsLocked()
            }
            effects.perform(on: self)
            notifyDidChange(["maxConcurrentOperationCount"])
        }
    }

    /// Whether the queue has stopped starting operations.
    ///
    /// Suspending does not pause operations that are running; it stops new
    /// ones from starting (cancelled ones included). Resuming continues
    /// where the queue left off, in readiness and priority order.
    open var isSuspended: Bool {
        get { lock.withLock { state.isSuspended } }
        set {
            // As in Foundation, the main queue cannot be suspended.
            guard kind == .pool else { return }
            notifyWillChange(["isSuspended"])
            let effects = lock.withLock { () -> QueueEffects in
                // An event tells of a change: setting the value it has
                // already is announced to key-value observers, as every set
                // is, but is not an event.
                if state.isSuspended != newValue { emitLocked(.suspended(newValue)) }
                state.isSuspended = newValue
                return takeEffectsLocked()
            }
            // Tell observers before any operation can start because of it.
            notifyDidChange(["isSuspended"])
            effects.perform(on: self)
        }
    }

    /// A dispatch queue to run the queue's operations on, instead of the
    /// shared pool. Setting it while the queue holds operations is a misuse
    /// (``OperationMisuse/Code/underlyingQueueWhileBusy``), as in Foundation.
    /// ``OperationQueue/main`` reports `DispatchQueue.main`, as in
    /// Foundation, and its underlying queue cannot be changed.
    ///
    /// Operations start on the dispatch queue, and their observers are told
    /// there; their completion blocks run on the shared pool, as every
    /// completion block does (asynchronously, as on Darwin), so that a
    /// serial dispatch queue can start the next operation while a completion
    /// block runs (or waits for it).
    open var underlyingQueue: DispatchQueue? {
        get {
            if kind == .mainThread { return DispatchQueue.main }
            return lock.withLock { storedUnderlyingQueue }
        }
        set {
            guard kind == .pool else { return }
            let busy = lock.withLock { state.count > 0 }
            if busy {
                reportUnderlyingQueueWhileBusy()
                return
            }
            notifyWillChange(["underlyingQueue"])
            // Checked again where it is stored: an operation added since the
            // first look (by another thread, or by an observer of the
            // will-change) keeps the queue as it is.
            let (stored, old) = lock.withLock { () -> (Bool, DispatchQueue?) in
                guard state.count == 0 else { return (false, nil) }
                defer { storedUnderlyingQueue = newValue }
                return (true, storedUnderlyingQueue)
            }
            withExtendedLifetime(old) {}
            notifyDidChange(["underlyingQueue"])
            if !stored { reportUnderlyingQueueWhileBusy() }
        }
    }

    private func reportUnderlyingQueueWhileBusy() {
        OperationMisuse.report(
            .underlyingQueueWhileBusy,
            subject: .queue(self),
            "had its underlyingQueue changed while it holds operations. Set underlyingQueue before adding operations, or when the queue is empty."
        )
    }

    // MARK: Contents

    /// The unfinished operations, in the order they were added.
    /// - Complexity: O(n).
    open var operations: [Operation] {
        lock.withLock { state.operations }
    }

    /// The number of unfinished operations.
    /// - Complexity: O(1).
    open var operationCount: Int {
        lock.withLock { state.count }
    }

    /// Progress of the work added since the queue was last idle. Observable
    /// (`observe(\.progress)`): it changes whenever an operation is added or
    /// finishes.
    ///
    /// Code that imports `OperationsFoundation` gets Foundation's
    /// `OperationQueue.progress` instead: a Foundation `Progress` that
    /// reports, as on Darwin, once its `totalUnitCount` is set. This value
    /// stays available there by its type (`let counts: QueueProgress =
    /// queue.progress`).
    @_disfavoredOverload
    open var progress: QueueProgress {
        lock.withLock {
            QueueProgress(totalUnitCount: state.progressTotal, completedUnitCount: state.progressCompleted)
        }
    }

    // MARK: Adding

    /// Adds an operation. The queue starts it when it is ready and a slot
    /// is free.
    ///
    /// Adding an operation that is already in a queue (this one or
    /// another), or that is executing or finished, is a misuse
    /// (``OperationMisuse/Code/alreadyInQueue``,
    /// ``OperationMisuse/Code/addedAfterStart``). Under a pending limit
    /// (``setPendingLimit(_:policy:)``) the call follows the limit's policy,
    /// except from inside this queue's own work, which is never held back.
    open func addOperation(_ operation: Operation) {
        admitOne(operation)
    }

    /// Wraps `block` in a ``BlockOperation`` and adds it through
    /// `addOperation(_:)` (the one that takes an ``Operation``), as
    /// Foundation does, so that a subclass that overrides that method sees
    /// these operations too.
    @preconcurrency
    open func addOperation(_ block: @escaping @Sendable () -> Void) {
        // @preconcurrency, as Darwin's declaration is (imported from
        // Objective-C): a closure that breaks the `@Sendable` rules (a
        // main-actor class's `OperationQueue.main.addOperation { self.update() }`)
        // gets a warning there, not an error, so ported code keeps
        // compiling. The same goes for the other block-taking members and
        // `observe`.
        addOperation(makeBlockOperation(block))
    }

    /// The operation the block forms of `addOperation` add: as in
    /// Foundation, it takes the queue's quality of service when the queue
    /// has one.
    final func makeBlockOperation(_ block: @escaping @Sendable () -> Void) -> BlockOperation {
        let operation = BlockOperation(block: block)
        let qos = qualityOfServiceIndex.load(ordering: .relaxed)
        if qos != QualityOfService.default.index { operation.qualityOfService = QualityOfService(index: qos) }
        return operation
    }

    /// Adds several operations in one step and, if `wait` is true, blocks
    /// until exactly those operations have finished (their completion
    /// blocks run asynchronously and are not waited for, as in Foundation).
    ///
    /// An operation that may not be added (finished, executing, or already
    /// in a queue) is a misuse, and the whole batch is refused: none of
    /// `operations` is added, as Foundation raises before adding any, and
    /// the call returns at once. (If another thread adds one of the batch's
    /// operations to a queue at the same moment, that race is settled per
    /// operation: only the one taken is refused.) The same operation twice in `operations`
    /// is a misuse too (``OperationMisuse/Code/duplicateInBatch``), but
    /// only its first occurrence counts: the other operations are still
    /// added.
    open func addOperations(_ operations: [Operation], waitUntilFinished wait: Bool) {
        let accepted = admit(operations, mode: .synchronous, collecting: wait) ?? []
        if wait { waitForOperations(accepted) }
    }

    /// Adds a block that runs after every operation added before it has
    /// finished; operations added after it wait until it has finished.
    ///
    /// The barrier holds no dependency edges: `dependencies` of the
    /// operations around it are unchanged. Cancelled operations, which are
    /// ready whatever they wait for, are not held back by a barrier.
    ///
    /// As in Foundation, the barrier is an operation of the queue until it
    /// has run: it is listed in ``operations`` and counted in
    /// ``operationCount``, and ``cancelAllOperations()`` cancels it, so that
    /// its block does not run. A cancelled barrier finishes at once and
    /// holds nothing back; operations added after it still wait for every
    /// earlier barrier that has not finished.
    ///
    /// Under a pending limit (``setPendingLimit(_:policy:)``) the barrier
    /// waits for room with the `.block` policy, and is added beyond the
    /// bound with `.reject`: it is never refused.
    @preconcurrency
    open func addBarrierBlock(_ barrier: @escaping @Sendable () -> Void) {
        admit(CollectionOfOne(BarrierOperation(block: barrier)), mode: .synchronous, barrier: true)
    }

    /// Cancels every operation in the queue. Cancelled operations that have
    /// not started are retired promptly, even if their dependencies have not
    /// finished (on a suspended queue, as in Foundation, once it resumes).
    /// Running operations see ``Operation/isCancelled`` and are expected to
    /// stop early.
    open func cancelAllOperations() {
        // As in Foundation, a no-op on the main queue: cancel its operations
        // one by one.
        guard kind == .pool else { return }
        let snapshot = lock.withLock { state.operations }
        // Operations whose class keeps the base `cancel()` and `isReady` are
        // moved to the cancelled lane in batches, one lock acquisition each;
        // an overridden `cancel()` is called as is.
        var batch: [Operation] = []
        batch.reserveCapacity(min(snapshot.count, Self.cancelBatchSize))
        for operation in snapshot {
            // The queue hears of the batch before user code runs (an
            // overridden `cancel()` or `isFinished`, observers): it may
            // wait for an operation cancelled earlier in the batch to
            // finish, which its queue must retire first (probe 34).
            if !batch.isEmpty, operation.cancellationMayRunUserCode {
                membersReadinessMayHaveChanged(batch)
                batch.removeAll(keepingCapacity: true)
            }
            if operation.overrides(.cancel) {
                operation.cancel()
                continue
            }
            guard let queue = operation.cancelWithoutQueueNews() else { continue }
            guard queue === self, !operation.overrides(.isReady) else {
                queue.memberReadinessMayHaveChanged(operation)
                continue
            }
            batch.append(operation)
            if batch.count == Self.cancelBatchSize {
                membersReadinessMayHaveChanged(batch)
                batch.removeAll(keepingCapacity: true)
            }
        }
        if !batch.isEmpty { membersReadinessMayHaveChanged(batch) }
    }

    /// How many cancelled operations `cancelAllOperations()` moves per lock
    /// acquisition: large enough to amortize the lock, small enough that
    /// drain loops are not held back.
    private static let cancelBatchSize = 256

    // MARK: Waiting

    /// Blocks until the queue is empty: every operation finished, including
    /// operations added while waiting and asynchronous operations that
    /// finish later. As in Foundation, completion blocks run asynchronously
    /// and are not waited for.
    ///
    /// Waiting from inside one of the queue's own operations can never end
    /// and is a misuse (``OperationMisuse/Code/waitDeadlock``); so is any
    /// wait that a cycle of waits through other threads would block forever.
    /// From inside the completion block of one of its operations, or an
    /// observer of that operation's finish, it waits for every other
    /// operation. An observer of another change (a cancellation being
    /// announced, say) waits for that operation too, which cannot finish
    /// before the observer returns: use a timeout there. On the main
    /// thread, waiting for ``OperationQueue/main`` runs its operations on
    /// this thread. The queue's own observers (of `operationCount`, say) may
    /// still be hearing the last change when it returns.
    @available(*, noasync, message: "Blocks a thread; in async code use `await queue.drained()`.")
    open func waitUntilAllOperationsAreFinished() {
        waitUntilIdle(deadline: nil)
    }

    // MARK: Key-value notifications

    /// Announces that the value for `key` is about to change, as Foundation's
    /// `NSObject` method does: for a subclass's own properties, observed with
    /// `observe(key:)`. Observers registered with `.prior` are told now, and
    /// `.old` values are read now. The queue's own properties announce
    /// themselves.
    open func willChangeValue(forKey key: String) {
        notifyWillChange([key])
    }

    /// Announces that the value for `key` has changed: observers of `key`
    /// are told, with the new value read now.
    open func didChangeValue(forKey key: String) {
        notifyDidChange([key])
    }

    // MARK: Current and main

    /// The queue that is running the current operation (including inside
    /// an `async` operation body and the tasks it creates, while the body
    /// runs, and the tasks an ``AsyncOperation``'s `execute()` creates, while
    /// the operation has not finished), or ``OperationQueue/main`` on the main
    /// thread and in blocks of the main dispatch queue (including
    /// `@MainActor` code, which on Linux runs on another thread once
    /// `dispatchMain()` is called, as under `swift test`), otherwise nil. As
    /// in Foundation, where completion blocks run outside the queue, it is
    /// nil inside a completion block (``main`` on the main thread).
    open class var current: OperationQueue? {
        unowned(unsafe) let context = ThreadContext.current
        if !context.inCompletionBlock {
            if let queue = context.queue { return queue }
            // An async body's task: not inside a completion block it runs
            // (one of an operation it finished or started by hand).
            if let queue = OperationTaskContext.inherited?.queue { return queue }
        }
        return context.isOnMainQueue ? OperationQueue.main : nil
    }

    private static let mainQueue = OperationQueue(mainThread: ())

    /// The queue of the main thread: serial, its operations run on the main
    /// dispatch queue (on Linux, once `dispatchMain()` is called, a worker
    /// thread drains that queue; elsewhere it is the main thread).
    ///
    /// They run when the main dispatch queue is serviced (`dispatchMain()`,
    /// a Foundation run loop, the main actor), or while the main thread, or
    /// a block of the main dispatch queue, waits for them with
    /// ``waitUntilAllOperationsAreFinished()`` or
    /// ``Operation/waitUntilFinished()``: the wait runs them itself, and is
    /// reported past ``OperationReporting/waitWarningThreshold`` like any
    /// other wait. It does not run operations of other queues, so a wait
    /// there for another queue's operation that depends on one of `main`'s
    /// never ends, as on Darwin (reported past the threshold).
    ///
    /// As in Foundation, its configuration is fixed: setting ``isSuspended``,
    /// ``name``, ``qualityOfService`` (`.userInteractive`),
    /// ``maxConcurrentOperationCount`` (1) or ``underlyingQueue``
    /// (`DispatchQueue.main`) changes nothing and tells no observer, and
    /// ``cancelAllOperations()`` does nothing; cancel its operations one by
    /// one with ``Operation/cancel()``.
    open class var main: OperationQueue { mainQueue }

    /// A one-line description with the name and counts.
    open var description: String {
        let (count, ready, executing, suspended) = lock.withLock {
            (state.count, state.readyCount, state.executing, state.isSuspended)
        }
        return "<\(misuseSubject): \(count) operations, \(ready) ready, \(executing) executing\(suspended ? ", suspended" : "")>"
    }

    /// The description for debugging, as Foundation's `NSObject` has it:
    /// by default the same as ``description``.
    open var debugDescription: String { description }

    /// Whether `object` is equal to this queue, as `NSObject`'s
    /// `isEqual(_:)`: by default only the queue itself is. `==` asks this
    /// method, as Foundation's `==` on `NSObject` does; override it together
    /// with ``hash``. (The library itself compares queues by identity.)
    open func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? OperationQueue else { return false }
        return other === self
    }

    /// The hash value, as `NSObject`'s `hash`: by default from the queue's
    /// identity. `Hashable` hashes this value; queues that are equal
    /// (``isEqual(_:)``) must have the same hash.
    open var hash: Int { ObjectIdentifier(self).hashValue }
}

extension OperationQueue: Hashable {
    /// Equal when ``isEqual(_:)`` says so (by default, only to itself).
    public static func == (lhs: OperationQueue, rhs: OperationQueue) -> Bool { lhs === rhs || lhs.isEqual(rhs) }

    /// Hashes ``hash`` (by default the queue's identity).
    public func hash(into hasher: inout Hasher) {
        hasher.combine(hash)
    }
}

extension OperationQueue: CustomStringConvertible, CustomDebugStringConvertible {}

/// The progress of a queue's work: how many operations were added since the
/// queue was last idle, and how many of them have finished.
public struct QueueProgress: Sendable, Hashable, CustomStringConvertible {
    /// Operations added since the queue was last idle.
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
    /// `addOperation` refuses the operation: it is cancelled, finished
    /// without running its work (its completion block runs), and not added.
    /// `tryAddOperation` reports the refusal.
    case reject
}
