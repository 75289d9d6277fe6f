import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A unit of work with a lifecycle, dependencies, a priority, cancellation,
/// a completion block and observable state: the Swift counterpart of
/// Foundation's `Operation` (`NSOperation`), with the same names and shapes.
///
/// Subclass it and override ``main()`` for synchronous work, or override
/// ``start()``, ``isExecuting``, ``isFinished`` and ``isAsynchronous`` for a
/// concurrent operation that announces its own state with
/// ``willChangeValue(forKey:)`` / ``didChangeValue(forKey:)``, exactly as in
/// Apple's "Operation Queues" chapter. ``BlockOperation``,
/// ``InvocationOperation`` and ``AsyncOperation`` are ready-made subclasses.
///
/// ## Lifecycle
/// An operation is *pending*, then *executing*, then *finished*; a cancelled
/// operation that never started goes straight from pending to finished
/// without running ``main()``. It is *ready* when it is cancelled or every
/// dependency has finished. After it finishes, its dependents are released,
/// its completion block runs once, and only then do ``waitUntilFinished()``
/// callers (and its queue's waiters) wake.
///
/// ## Thread safety
/// Every member may be called from any thread. State lives in one atomic
/// word: reading ``isCancelled``, ``isReady``, ``isExecuting`` or
/// ``isFinished`` is a single atomic load, cheap enough to poll in a loop.
/// Changes take a lock bit in that word, and no observer, completion block or
/// other user code ever runs while it is held.
///
/// In a file that also imports Foundation, write
/// `import class Operations.Operation` so that the name refers to this class.
/// Subclasses should restate `@unchecked Sendable`, as with Foundation.
open class Operation: @unchecked Sendable {
    // @unchecked Sendable, justified field by field:
    // (storedDependents holds weak references: see `DependentList`.)
    // - `stateWord` is atomic. Its bit 0 is a lock bit (`withStateLock`).
    // - `storedDependencies`, `storedDependents`, `storedQueue` and `extras`
    //   are read and written only while that lock bit is held.
    // - The `queue…` link fields are read and written only while the lock of
    //   the `OperationQueue` that owns the operation is held (the queue sets
    //   them after claiming the operation and clears them before releasing it).

    /// The lifecycle word: see `OperationState`.
    final let stateWord = Atomic<UInt64>(OperationState.defaultRaw)

    // Guarded by the state lock bit. The lock already guarantees exclusive
    // access, so Swift's dynamic exclusivity checks (about 60 instructions
    // per access) are turned off for these fields.
    @exclusivity(unchecked) final var storedDependencies: OperationList = .empty
    @exclusivity(unchecked) final var storedDependents: DependentList = .empty
    /// The queue that owns the operation, unretained: a queue retains itself
    /// while it holds operations (see `OperationQueue.retainedSelf`), and
    /// gives up that retain only after the last operation's
    /// `completeRetirement()` has cleared this field. Saves a cross-thread
    /// retain/release of the queue per operation.
    @exclusivity(unchecked) final var queueReference: Unmanaged<OperationQueue>?

    /// The owning queue as a strong reference. Read with the lock bit held,
    /// before the operation retires.
    final var storedQueue: OperationQueue? {
        get { queueReference?.takeUnretainedValue() }
        set { queueReference = newValue.map { Unmanaged.passUnretained($0) } }
    }
    @exclusivity(unchecked) final var extras: OperationExtras?

    // Guarded by the owning queue's lock (exclusivity checks off, as above).
    // Unmanaged, so that moving operations between lists costs no reference
    // counting: the queue's add-order list owns one retain of each operation,
    // taken in `QueueScheduler.link` and given back in `retire`.
    /// Neighbours in the queue's add-order list.
    @exclusivity(unchecked) final var queueNext: Unmanaged<Operation>?
    @exclusivity(unchecked) final var queuePrevious: Unmanaged<Operation>?
    /// Neighbours in the queue's ready lane.
    @exclusivity(unchecked) final var laneNext: Unmanaged<Operation>?
    @exclusivity(unchecked) final var lanePrevious: Unmanaged<Operation>?
    /// The ready lane holding the operation, or -1.
    @exclusivity(unchecked) final var laneIndex: Int8 = -1
    /// Queue bookkeeping flags (`QueueLinkFlags`).
    @exclusivity(unchecked) final var queueFlags: UInt8 = 0

    /// Creates a pending operation with normal priority and default quality
    /// of service.
    public init() {}

    deinit {
        if case .empty = storedDependencies, extras == nil { return }
        unregisterFromUnretiredDependencies()
        // Release the dependency chain iteratively: a long chain released
        // recursively (each operation freeing its dependency in its deinit)
        // would overflow the stack at around 100k links. Each dependency that
        // only this walk still holds gives up its own dependencies to the
        // walk before it is released, so every deinit along the chain finds
        // nothing left to release. A chain costs no allocation.
        var current = storedDependencies.take()
        var pending: [OperationList] = []
        if let hidden = extras?.hiddenDependency {
            extras?.hiddenDependency = nil
            pending.append(.one(hidden))
        }
        while true {
            switch current {
            case .empty:
                guard let next = pending.popLast() else { return }
                current = next
            case .one(var operation):
                current = .empty
                if isKnownUniquelyReferenced(&operation) {
                    current = operation.takeDependenciesForRelease(into: &pending)
                }
            case .many(var list):
                current = .empty
                while var operation = list.popLast() {
                    if isKnownUniquelyReferenced(&operation) {
                        pending.append(operation.takeDependenciesForRelease(into: &pending))
                    }
                }
            }
        }
    }

    /// Removes this (deallocating) operation from the dependents of every
    /// dependency that has not retired, so that a dependency finishing later
    /// never touches freed memory (see `DependentList`). A dependency that
    /// is finishing right now holds its lock: waiting for it here keeps this
    /// operation's memory valid until it is done.
    private final func unregisterFromUnretiredDependencies() {
        func unregister(from dependency: Operation) {
            guard !dependency.loadState().isRetired else { return }
            dependency.withStateLock { _ in _ = dependency.storedDependents.remove(self) }
        }
        storedDependencies.forEach(unregister)
        if let hidden = extras?.hiddenDependency { unregister(from: hidden) }
    }

    /// A strong reference to the operation behind `entry`, or nil if it is
    /// being deallocated. Call while holding the lock of the operation whose
    /// `storedDependents` holds `entry` (see `DependentList`).
    static func retainIfAlive(_ entry: Unmanaged<Operation>) -> Operation? {
        entry._withUnsafeGuaranteedRef { operation -> Operation? in
            let state = operation.loadState()
            // Owned by a queue until it retires: certainly alive.
            if state.isEnqueued, !state.isRetired { return operation }
            return probe(operation)
        }
    }

    /// A weak reference to an operation whose deinitialization has begun
    /// reads as nil: the runtime's way to retain only if still alive. (It
    /// gives the operation a side table, which is why it is used only for
    /// dependents that are not owned by a queue.)
    @inline(never)
    private static func probe(_ operation: Operation) -> Operation? {
        weak let reference = operation
        return reference
    }

    /// Hands this operation's dependencies to a releasing walk. Only called
    /// when nothing else references the operation.
    private final func takeDependenciesForRelease(into pending: inout [OperationList]) -> OperationList {
        if let hidden = extras?.hiddenDependency {
            extras?.hiddenDependency = nil
            pending.append(.one(hidden))
        }
        return storedDependencies.take()
    }

    // MARK: The state word

    /// A snapshot of the lifecycle state, without taking the lock.
    @inline(__always)
    final func loadState() -> OperationState {
        OperationState(raw: stateWord.load(ordering: .acquiring))
    }

    /// Runs `body` with the state lock bit held, then publishes the new state.
    ///
    /// `body` may read and write the fields guarded by the lock bit. It must
    /// not call user code, take another operation's lock (except where the
    /// dependency code documents an order), or take a queue's lock.
    @inline(__always)
    final func withStateLock<R>(_ body: (inout OperationState) -> R) -> R {
        var current = stateWord.load(ordering: .relaxed)
        var spins = 0
        while true {
            if current & OperationState.lockBit == 0 {
                let (exchanged, original) = stateWord.weakCompareExchange(
                    expected: current,
                    desired: current | OperationState.lockBit,
                    successOrdering: .acquiring,
                    failureOrdering: .relaxed
                )
                if exchanged { break }
                current = original
            } else {
                spins += 1
                if spins > 64 { sched_yield() }
                current = stateWord.load(ordering: .relaxed)
            }
        }
        var state = OperationState(raw: current)
        let result = body(&state)
        stateWord.store(state.raw, ordering: .releasing)
        return result
    }

    /// The extras box, created on first use. Call with the lock bit held.
    final func extrasWhileLocked() -> OperationExtras {
        if let extras { return extras }
        let created = OperationExtras()
        extras = created
        return created
    }

    // MARK: Work

    /// Begins the operation.
    ///
    /// The default implementation checks that the operation may start
    /// (it must be ready, not yet started and, if a queue owns it, started by
    /// that queue), then runs ``main()`` on the calling thread with
    /// ``threadPriority`` applied, and finishes. If the operation was
    /// cancelled before it started, it finishes without running ``main()``.
    ///
    /// Override it (without calling `super`) to build a concurrent operation:
    /// start the work asynchronously, and announce `isExecuting` and
    /// `isFinished` with ``willChangeValue(forKey:)`` and
    /// ``didChangeValue(forKey:)``. Or subclass ``AsyncOperation``, which
    /// does that for you.
    ///
    /// Misuse (starting an operation that is not ready, is executing, has
    /// finished, or belongs to a queue) is reported through
    /// ``OperationMisuse``.
    open func start() {
        let run = ThreadContext.withCurrent { context -> Bool in
            guard beginStart(context: context) else { return false }
            runMain(context: context)
            return true
        }
        if run { finish(announced: false) }
    }

    /// The operation's work. The default implementation does nothing.
    ///
    /// Check ``isCancelled`` at convenient points and return early once it
    /// is true. Do not call `super` unless a superclass has work of its own.
    open func main() {}

    /// Asks the operation to stop.
    ///
    /// Cancellation is cooperative: it sets ``isCancelled``, which ``main()``
    /// is expected to poll. An operation cancelled before it starts becomes
    /// ready at once, even with unfinished dependencies, and finishes without
    /// running ``main()`` when it is started; its queue retires it promptly.
    /// Cancelling a finished or already-cancelled operation does nothing.
    open func cancel() {
        performCancel()
    }

    /// Makes this operation wait for `operation` to finish before it starts.
    ///
    /// Dependencies may cross queues and may involve operations you start by
    /// hand. Adding a dependency that is already present does nothing.
    /// Adding one after this operation started has no effect on its start.
    ///
    /// A dependency that would close a cycle (this operation already
    /// directly or indirectly precedes `operation`) is a misuse
    /// (``OperationMisuse/Code/dependencyCycle``) reported with the names of
    /// the operations on the cycle; the dependency is not added. Detection
    /// is immediate for all but very large, densely connected graphs; in
    /// those, the cycle is reported at the latest when a queue holding it
    /// would otherwise stall.
    ///
    /// - Complexity: O(1) when this operation has no dependents yet (the
    ///   usual way graphs are built), otherwise bounded by a small search.
    open func addDependency(_ operation: Operation) {
        addDependency(operation, hidden: false)
    }

    /// Removes a dependency. If `operation` had not finished, this operation
    /// may become ready at once (and its queue may start it).
    open func removeDependency(_ operation: Operation) {
        performRemoveDependency(operation)
    }

    /// The operations this one waits for, in the order they were added.
    /// Finished dependencies stay listed until removed.
    open var dependencies: [Operation] {
        withStateLock { _ in storedDependencies.array }
    }

    // MARK: State

    /// Whether ``cancel()`` has been called. A single atomic load.
    open var isCancelled: Bool { loadState().isCancelled }

    /// Whether the operation is running its task.
    open var isExecuting: Bool { loadState().isExecuting }

    /// Whether the operation has finished (or was cancelled and then started).
    open var isFinished: Bool { loadState().isFinished }

    /// Whether the operation can start now: it is cancelled, or all of its
    /// dependencies have finished.
    ///
    /// Override it to add conditions of your own, combine them with
    /// `super.isReady`, and announce changes with
    /// `willChangeValue(forKey: "isReady")` / `didChangeValue(forKey: "isReady")`;
    /// a queue re-checks readiness when you do. A queue starts an operation
    /// only when both this property and the dependencies agree: an override
    /// that ignores `super.isReady` cannot make a queue start an operation
    /// before its dependencies have finished (remove the dependencies
    /// instead).
    open var isReady: Bool { loadState().isReady }

    /// Whether the operation runs asynchronously with respect to the thread
    /// that calls ``start()``. The default is false.
    open var isAsynchronous: Bool { false }

    /// The older name for ``isAsynchronous``; returns ``isAsynchronous``
    /// unless overridden.
    open var isConcurrent: Bool { isAsynchronous }

    // MARK: Priority and service

    /// The priority among ready operations of the same queue.
    ///
    /// Set it before adding the operation to a queue. A change made while
    /// the operation waits in a queue takes effect for its position among
    /// the ready operations.
    open var queuePriority: QueuePriority {
        get { QueuePriority(index: loadState().priorityIndex) }
        set { setQueuePriority(newValue) }
    }

    /// The quality of service for the operation's work. `.default` inherits
    /// the queue's.
    open var qualityOfService: QualityOfService {
        get { QualityOfService(index: loadState().qosIndex) }
        set {
            let observed = loadState().isObserved
            if observed { notifyWillChange(["qualityOfService"]) }
            withStateLock { $0.qosIndex = newValue.index }
            if observed { notifyDidChange(["qualityOfService"]) }
        }
    }

    /// The thread priority during ``main()``, from 0.0 (lowest) to 1.0
    /// (highest); 0.5 (the default) leaves the thread's priority unchanged.
    ///
    /// On Linux the value maps to the thread's nice value (0.0 → +19,
    /// 0.5 → unchanged, 1.0 → −20) for the duration of ``main()`` only, and
    /// is restored afterwards; the completion block runs at the normal
    /// priority. Raising priority needs `CAP_SYS_NICE` (or root, or a
    /// sufficient `RLIMIT_NICE`); without it a request to raise is ignored.
    /// Without it, lowering is applied only on the library's own worker
    /// threads, which are retired after the operation because they could
    /// not be restored; on a thread of yours it is skipped.
    ///
    /// A value outside 0.0 ... 1.0 is a misuse (``OperationMisuse/Code/invalidThreadPriority``).
    open var threadPriority: Double {
        get { withStateLock { _ in extras?.threadPriority ?? 0.5 } }
        set {
            guard newValue >= 0, newValue <= 1, !newValue.isNaN else {
                OperationMisuse.report(
                    .invalidThreadPriority,
                    subject: misuseSubject,
                    "was given threadPriority \(newValue); it must be between 0.0 and 1.0."
                )
                return
            }
            withStateLock { state in
                extrasWhileLocked().threadPriority = newValue
                state.hasCustomThreadPriority = newValue != 0.5
            }
        }
    }

    /// A name for debugging, logs and misuse messages.
    open var name: String? {
        get { withStateLock { _ in extras?.name } }
        set {
            let observed = loadState().isObserved
            if observed { notifyWillChange(["name"]) }
            withStateLock { _ in
                if newValue == nil && extras == nil { return }
                extrasWhileLocked().name = newValue
            }
            if observed { notifyDidChange(["name"]) }
        }
    }

    /// A block that runs exactly once after the operation finishes,
    /// including when it was cancelled.
    ///
    /// It runs on the thread that finished the operation, after dependents
    /// have been released and before ``waitUntilFinished()`` returns. It is
    /// released as soon as it has run, so a block that captures its own
    /// operation does not leak. Setting a non-nil block after the operation
    /// began executing is a misuse; setting nil is always allowed.
    open var completionBlock: (@Sendable () -> Void)? {
        get { withStateLock { _ in extras?.completionBlock } }
        set { setCompletionBlock(newValue) }
    }

    /// Blocks the calling thread until the operation has finished and its
    /// completion block has run.
    ///
    /// Works for synchronous and asynchronous operations. Waiting for an
    /// operation that can only run after the caller (itself, one that
    /// depends on the calling operation, or one queued behind it on the same
    /// serial queue) is a misuse (``OperationMisuse/Code/waitDeadlock``)
    /// instead of a silent hang. On a pool worker, the pool starts another
    /// worker while this one waits, so waits cannot starve the pool.
    @available(*, noasync, message: "Blocks a thread; in async code use `await operation.finished()`.")
    open func waitUntilFinished() {
        performWait(deadline: nil)
    }

    // MARK: Key-value notifications

    /// Announces that the value for `key` is about to change.
    ///
    /// Custom concurrent operations call this (and ``didChangeValue(forKey:)``)
    /// around changes to their own `executing` / `finished` flags. Observers
    /// registered with `.prior` are told now, and `.old` values are read now.
    open func willChangeValue(forKey key: String) {
        if loadState().isObserved { notifyWillChange([key]) }
    }

    /// Announces that the value for `key` has changed.
    ///
    /// Observers are told first. Then, for the keys the library relies on:
    /// - `isFinished`, when ``isFinished`` now returns true: the operation
    ///   finishes — dependents are released, its queue frees the slot, the
    ///   completion block runs and waiters wake.
    /// - `isExecuting`, when ``isExecuting`` now returns true: the operation
    ///   counts as started.
    /// - `isReady`: its queue re-checks ``isReady``.
    /// - `isCancelled`, when ``isCancelled`` now returns true: the operation
    ///   counts as cancelled.
    open func didChangeValue(forKey key: String) {
        if loadState().isObserved { notifyDidChange([key]) }
        handleAnnouncement(key)
    }

    // MARK: Description

    /// A one-line description: type, name, address and state.
    open var description: String {
        "<\(misuseSubject): \(loadState())>"
    }
}

extension Operation: Hashable {
    /// Operations are equal only to themselves.
    public static func == (lhs: Operation, rhs: Operation) -> Bool { lhs === rhs }

    /// Hashes the operation's identity.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(ObjectIdentifier(self))
    }
}

extension Operation: CustomStringConvertible {}

/// Rarely used per-operation storage, allocated on first use so that a plain
/// operation stays small. Guarded by the owning operation's state lock bit.
final class OperationExtras {
    var name: String?
    var completionBlock: (@Sendable () -> Void)?
    var threadPriority: Double = 0.5
    /// Registered observers; also referenced by their `Observation` tokens.
    var observers: ObservationRegistry?
    /// Called once the operation retires (waiters, awaiting tasks).
    var retireCallbacks: [@Sendable () -> Void] = []
    /// Called once when the operation is cancelled (async bodies).
    var cancellationHandlers: [@Sendable () -> Void] = []
    /// A dependency that `dependencies` does not list: the queue's barrier.
    var hiddenDependency: Operation?
    /// The error the operation failed with (`ResultOperation`, failure policies).
    var failure: (any Error)?
    /// What happens when a dependency fails or is cancelled.
    var failurePolicy: DependencyFailurePolicy = .runAnyway
    /// The dependency failures that made a failure policy cancel the operation.
    var dependencyErrors: [DependencyError] = []
}
