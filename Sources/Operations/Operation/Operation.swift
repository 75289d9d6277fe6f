import Synchronization

/// A unit of work with a lifecycle, dependencies, a priority, cancellation,
/// a completion block and observable state: the Swift counterpart of
/// Foundation's `Operation` (`NSOperation`), with the same names and shapes.
///
/// Subclass it and override ``main()`` for synchronous work, or override
/// ``start()``, ``isExecuting``, ``isFinished`` and ``isAsynchronous`` for a
/// concurrent operation that announces its own state with
/// ``willChangeValue(forKey:)`` / ``didChangeValue(forKey:)``, exactly as in
/// Apple's "Operation Queues" chapter. ``BlockOperation``,
/// ``InvocationOperation``, ``AsyncOperation`` and ``ResultOperation`` are
/// ready-made subclasses.
///
/// ## Lifecycle
/// An operation is *pending*, then *executing*, then *finished*; a cancelled
/// operation that is started finishes without running ``main()``. It is
/// *ready* when it is cancelled or every dependency has finished.
///
/// When it finishes, in this order: its dependents are released (and may
/// start), it leaves its queue (``OperationQueue/operationCount`` no longer
/// counts it), `isExecuting`/`isFinished` observers run, its completion block
/// is handed to a worker thread of the pool (it runs once, asynchronously,
/// as on Darwin), and ``waitUntilFinished()`` callers wake.
///
/// ## Overridden getters are the truth
/// A subclass may override ``isReady``, ``isExecuting``, ``isFinished`` and
/// ``isCancelled`` and announce changes with ``didChangeValue(forKey:)``. The
/// library then acts on what the getter returns when it is notified: an
/// announcement is only a notification. In particular, after the default
/// ``start()`` runs ``main()``, an operation whose class overrides
/// ``isFinished`` is finished only once that getter returns true.
///
/// ## Thread safety
/// Every member may be called from any thread. The base state lives in one
/// atomic word: reading ``isCancelled``, ``isReady``, ``isExecuting`` or
/// ``isFinished`` is one atomic load, cheap enough to poll. No observer,
/// completion block, overridden getter or other user code runs while a
/// library lock is held.
///
/// In a file that also imports Foundation, write
/// `import class Operations.Operation` so that the name refers to this class.
/// Subclasses restate `@unchecked Sendable`, as with Foundation, and protect
/// their own state.
open class Operation: @unchecked Sendable {
    // @unchecked Sendable, justified field by field:
    // - `stateWord` is atomic; bit 0 is a lock bit (`OperationCore.swift`,
    //   the only file that changes the word).
    // - `storedDependencies`, `storedDependents` and `membershipAndExtras`
    //   (which holds `membership` and `extras`) are read and written only
    //   while that lock bit is held.
    // - `queueLink` is read and written only by the files of `Queue/`, while
    //   the lock of the queue that owns the operation is held.

    /// The lifecycle word (see `OperationState`). Changed only in
    /// `OperationCore.swift`.
    final let stateWord = Atomic<UInt64>(OperationState.defaultRaw)

    // Guarded by the state lock bit. The lock already guarantees exclusive
    // access, so Swift's dynamic exclusivity checks are turned off for these.

    /// The operations this one waits for, retained (see `DependencyEdges.swift`).
    @exclusivity(unchecked) final var storedDependencies: OperationList = .empty
    /// The operations waiting for this one, unretained (see `DependentList`).
    @exclusivity(unchecked) final var storedDependents: DependentList = .empty
    /// The queue that owns the operation and the rarely used storage, in one
    /// word (see `MembershipAndExtras`); read through `membership` and `extras`.
    @exclusivity(unchecked) final var membershipAndExtras: MembershipAndExtras = .none

    /// The operation's place in its queue. Owned by the queue (see `QueueLink`).
    @exclusivity(unchecked) final var queueLink = QueueLink()

    /// Creates a pending operation with normal priority and default quality
    /// of service.
    public init() {}

    /// The queue that owns the operation, unretained: the queue keeps itself
    /// alive while it holds operations or has retirements in flight (see
    /// `OperationQueue.retainedSelf`), which covers every use through this
    /// property (`QueueMembership.swift`). Call with the lock bit held.
    final var membership: Unmanaged<OperationQueue>? {
        @inline(__always) get {
            switch membershipAndExtras {
            case .none: return nil
            case .queue(let queue): return queue
            case .extras(let extras): return extras.membership
            }
        }
        @inline(__always) set {
            if case .extras(let extras) = membershipAndExtras {
                extras.membership = newValue
            } else {
                membershipAndExtras = newValue.map { .queue($0) } ?? .none
            }
        }
    }

    /// Rarely used storage, or nil before its first use (created by
    /// `extrasWhileLocked()`). Call with the lock bit held.
    final var extras: OperationExtras? {
        @inline(__always) get {
            if case .extras(let extras) = membershipAndExtras { return extras }
            return nil
        }
    }

    deinit {
        // A state-change stream of an operation that never finished ends here.
        extras?.observers?.ownerDeinitialized()
        releaseEdgesOnDeinit()
    }

    // MARK: Work

    /// Begins the operation.
    ///
    /// The default implementation checks that the operation may start (it
    /// must be ready, not yet started and, if a queue owns it, started by
    /// that queue), then runs ``main()`` on the calling thread with
    /// ``threadPriority`` applied. An operation that is cancelled when it
    /// starts skips ``main()``. Afterwards the operation is finished, unless
    /// its class overrides ``isFinished`` and that getter still returns
    /// false, in which case it finishes when a later
    /// `didChangeValue(forKey: "isFinished")` finds it true.
    ///
    /// Override it (without calling `super`) to build a concurrent operation:
    /// start the work asynchronously, and announce `isExecuting` and
    /// `isFinished` with ``willChangeValue(forKey:)`` and
    /// ``didChangeValue(forKey:)``. A queue calls `start()` on every
    /// operation it dequeues, cancelled ones included, so check
    /// ``isCancelled`` first and move to finished if it is set.
    ///
    /// Misuse (starting an operation that is not ready, is executing, has
    /// finished, or belongs to a queue) is reported through
    /// ``OperationMisuse``. One case is not a misuse: a class whose own
    /// `start()` finishes the operation (its ``isFinished`` override
    /// announced true, typically because it was cancelled) and then calls
    /// `super.start()`. The base start has not run, and it returns at once,
    /// as Darwin's does, whether the queue or your code made the call.
    open func start() {
        startByCall()
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
    /// ready at once, even with unfinished dependencies (breaking a
    /// dependency cycle, for example); when it is started it finishes without
    /// running ``main()``. In a queue, such an operation is retired promptly
    /// (once the queue is not suspended, as in Foundation) and without a slot of ``OperationQueue/maxConcurrentOperationCount``,
    /// unless its class overrides ``start()``, in which case its `start()` is
    /// called in its turn. Cancelling an operation whose ``isFinished``
    /// reads true (an override is asked), or one already cancelled, does
    /// nothing.
    ///
    /// Observers hear only changes that happen, once each. When several
    /// calls cancel an observed operation at once, one announces the change,
    /// and every call returns with ``isCancelled`` true. The others wait for
    /// the first to set it, except when that could not end: a call made by
    /// an observer of the announcement, one that the announcing call's
    /// observers wait for (directly, or through other cancellations), or
    /// one that has waited 20 ms (the observers may be blocked on something
    /// the caller holds). Such a call sets the flag itself, before the
    /// announcing call's "did change"; an observer not yet told "will
    /// change" then reads the old value as true. The operation's queue
    /// hears of the change before the observers' "did change", so an
    /// observer may wait for a cancelled queued operation to finish (its
    /// queue retires it). A cancellation that lands
    /// while the operation starts, after the start announced `isExecuting`,
    /// does not stop the body (as in Foundation, whose start reads
    /// `isCancelled` once); and one that announced `isCancelled` sets it even
    /// if the operation finished meanwhile.
    open func cancel() {
        performCancel()
    }

    /// Makes this operation wait for `operation` to finish before it starts.
    ///
    /// Dependencies may cross queues and may involve operations you start by
    /// hand. Adding a dependency that is already present does nothing.
    /// Adding one after this operation started has no effect on its start,
    /// and neither has adding one to a queued operation that its queue has
    /// already taken to start: the dependency is listed but does not count,
    /// and ``isReady`` stays true. Either the new dependency counts (this
    /// operation reads not ready afterwards, and waits for it) or the queue
    /// took the operation first; another thread's edit can never count and
    /// still be overtaken by the start. To be sure a queued operation waits,
    /// give it its dependencies before adding it, or while its queue is
    /// suspended.
    ///
    /// As in Foundation, a dependency that closes a cycle is kept: the
    /// operations on the cycle never start unless one of them is cancelled
    /// (a cancelled operation is ready whatever its dependencies).
    /// ``OperationQueue/diagnostics()`` names such cycles, and
    /// ``OperationMisuse/reportsDependencyCycles`` turns them into misuses.
    ///
    /// - Complexity: O(1) amortized, plus a duplicate check bounded by the
    ///   shorter of this operation's dependencies and `operation`'s
    ///   dependents.
    open func addDependency(_ operation: Operation) {
        performAddDependency(operation)
    }

    /// Removes a dependency. If `operation` had not finished, this operation
    /// may become ready at once (and its queue may start it).
    open func removeDependency(_ operation: Operation) {
        performRemoveDependency(operation)
    }

    /// The operations this one waits for, in the order they were added.
    /// Finished dependencies stay listed until removed. An edge that closed
    /// a dependency cycle is held weakly once every operation on the cycle
    /// has finished, so that the cycle can be freed: it is listed last, for
    /// as long as its dependency is alive.
    open var dependencies: [Operation] {
        let (strong, weak) = withStateLock { _ in (storedDependencies.array, extras?.weakDependencies ?? []) }
        guard !weak.isEmpty else { return strong }
        // Loaded after unlocking: each loaded reference may be the last one.
        return strong + weak.compactMap(\.operation)
    }

    // MARK: State

    /// Whether ``cancel()`` has been called. A single atomic load.
    open var isCancelled: Bool { loadState().isCancelled }

    /// Whether the default ``start()`` is running the operation's body.
    open var isExecuting: Bool { loadState().isBaseExecuting }

    /// Whether the operation has finished (its body ran, or it was cancelled
    /// and then started).
    open var isFinished: Bool { loadState().isBaseFinished }

    /// Whether the operation can start now: it is cancelled, or all of its
    /// dependencies have finished.
    ///
    /// Override it to add conditions of your own (typically
    /// `super.isReady && myCondition`) and announce changes with
    /// `willChangeValue(forKey: "isReady")` / `didChangeValue(forKey: "isReady")`:
    /// a queue starts an operation when this getter returns true, as read
    /// when it was last notified. A dependency that counts while the
    /// operation waits in its queue makes the queue read the getter again,
    /// and until it has, the queue does not start the operation on the
    /// earlier reading.
    open var isReady: Bool { loadState().isBaseReady }

    /// Whether the operation runs asynchronously with respect to the thread
    /// that calls ``start()``. The default is false; as in Foundation, a
    /// class that overrides only the older ``isConcurrent`` (the chapter's
    /// listings do) answers with that.
    ///
    /// A queue ignores it: it calls ``start()`` on a thread of its own
    /// either way.
    open var isAsynchronous: Bool {
        // Only for a class that keeps this base getter: one that overrides
        // it and calls `super` gets false, so that the two base getters
        // never call each other in a loop.
        guard OverrideDetection.isPrecise, overrides(.isConcurrent), !overrides(.isAsynchronous) else { return false }
        return isConcurrent
    }

    /// The older name for ``isAsynchronous``: returns ``isAsynchronous``
    /// unless overridden.
    open var isConcurrent: Bool {
        // As in Foundation, an override that calls `super` gets false (the
        // base `isAsynchronous` would ask the override again).
        if OverrideDetection.isPrecise, overrides(.isConcurrent) { return false }
        return isAsynchronous
    }

    // MARK: Priority and service

    /// The priority among ready operations of the same queue.
    ///
    /// Set it before adding the operation to a queue. A change made while
    /// the operation waits in a queue takes effect for its position among
    /// the ready operations. As in Foundation, setting the value it already
    /// has tells no observer.
    open var queuePriority: QueuePriority {
        get { QueuePriority(index: loadState().priorityIndex) }
        set { setQueuePriority(newValue) }
    }

    /// The quality of service for the operation's work. `.default` inherits
    /// the queue's; as in Foundation, a queue's quality of service also
    /// raises a lower one chosen here (it never lowers it). The property
    /// keeps the value set.
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
    /// Set it before the operation starts: as in Foundation, a value set
    /// later is ignored. A value outside 0.0 ... 1.0 is the tolerated misuse
    /// ``OperationMisuse/Code/invalidThreadPriority``: refused under a misuse
    /// handler, otherwise clamped to the range, as Foundation does.
    open var threadPriority: Double {
        get { withStateLock { _ in extras?.threadPriority ?? 0.5 } }
        set { setThreadPriority(newValue) }
    }

    /// A name for debugging, logs and misuse messages.
    open var name: String? {
        get { withStateLock { _ in extras?.name } }
        set {
            let observed = loadState().isObserved
            if observed { notifyWillChange(["name"]) }
            let released = withStateLock { _ -> String? in
                if newValue == nil && extras == nil { return nil }
                let old = extrasWhileLocked().name
                extras?.name = newValue
                return old
            }
            withExtendedLifetime(released) {}
            if observed { notifyDidChange(["name"]) }
        }
    }

    /// A block that runs exactly once after the operation finishes,
    /// including when it was cancelled.
    ///
    /// It runs asynchronously, as in Foundation: on a worker thread of the
    /// operation pool (not the thread that finished the operation, nor the
    /// caller of a `start()` by hand), handed to it once dependents have
    /// been released and the operation has left its queue, and before the
    /// `isExecuting`/`isFinished` observers are told, as on Darwin (so it
    /// may run while they do, and an observer may wait for it). Waits
    /// (``waitUntilFinished()``, the queue's waits) do not wait
    /// for it. Blocks of operations that finish one after the other start in
    /// that order, and may run side by side; a block may block without
    /// starving Swift's cooperative pool. ``OperationQueue/current`` is nil
    /// inside it. It is released as soon as it has run, so a block that
    /// captures its own operation does not leak.
    ///
    /// Set it before the operation starts. Setting a block on an operation
    /// that is executing or has finished is the misuse
    /// ``OperationMisuse/Code/completionBlockAfterStart``, one of the two
    /// misuses the default policy tolerates (the other is an out-of-range
    /// ``threadPriority``): with a misuse handler installed the block
    /// is refused; with none, as in Darwin's Foundation, a block set before
    /// the operation finishes (from its own body too) is kept, and the block
    /// in place when it finishes is the one that runs, while a block set
    /// after it finished (for example from its own completion block) never
    /// runs, is released at once, and the property reads nil.
    open var completionBlock: (@Sendable () -> Void)? {
        get { withStateLock { _ in extras?.completionBlock } }
        set { setCompletionBlock(newValue) }
    }

    /// Blocks the calling thread until the operation has finished. As in
    /// Foundation, its completion block runs asynchronously, on another
    /// thread, and is not waited for.
    ///
    /// Works for synchronous and asynchronous operations. A wait that can
    /// never end — for itself from inside its own `start()`/`main()`, for an
    /// operation that depends on the caller, for one queued behind the caller
    /// on a serial queue, or any longer cycle of waits through other threads
    /// — is a misuse (``OperationMisuse/Code/waitDeadlock``) instead of a
    /// silent hang. From the operation's own completion block or `isFinished`
    /// observer it returns at once. On a pool worker, the pool starts another
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
    /// Keys that depend on `key` (see
    /// ``keyPathsForValuesAffectingValue(forKey:)``) are announced too.
    open func willChangeValue(forKey key: String) {
        handleWillChange(key)
    }

    /// Announces that the value for `key` has changed.
    ///
    /// Observers are told, and for the keys the library relies on it reads
    /// the (possibly overridden) getter and acts on its value:
    /// - `isFinished`: if ``isFinished`` now returns true, the operation
    ///   finishes: dependents are released, it leaves its queue, then the
    ///   completion block is handed to another thread, observers are told
    ///   and waiters wake.
    /// - `isReady`, `isCancelled`: its queue re-reads ``isReady`` and
    ///   ``isCancelled``; a true `isCancelled` also cancels an `async` body.
    ///   An operation in no queue whose class overrides ``isReady`` has that
    ///   getter read once when `isReady` is announced, as in Foundation (so
    ///   a getter must not announce `isReady` on every read: each
    ///   announcement reads it again).
    ///
    /// An announcement never changes the state by itself.
    open func didChangeValue(forKey key: String) {
        handleDidChange(key)
    }

    /// The keys whose values affect the value of `key`, as Foundation's
    /// `NSObject` method of the same name: announcing one of them announces
    /// `key` too.
    ///
    /// The default returns an empty set. A subclass that keeps one `state`
    /// property and announces only that key returns `["state"]` for
    /// `isReady`, `isExecuting` and `isFinished`:
    ///
    /// ```swift
    /// override class func keyPathsForValuesAffectingValue(forKey key: String) -> Set<String> {
    ///     switch key {
    ///     case "isReady", "isExecuting", "isFinished": return ["state"]
    ///     default: return super.keyPathsForValuesAffectingValue(forKey: key)
    ///     }
    /// }
    /// ```
    ///
    /// Then `willChangeValue(forKey: "state")` / `didChangeValue(forKey: "state")`
    /// notify observers of those keys and make the queue re-read them.
    ///
    /// As in Foundation, dependencies are followed through every level (if
    /// `isFinished` depends on `status` and `status` on `rawStatus`,
    /// announcing `rawStatus` announces both), and they apply to any key:
    /// an observer registered by name for a key of your own (`summary`,
    /// depending on `state`) is told when `state` is announced. The method
    /// is asked once per class and key.
    open class func keyPathsForValuesAffectingValue(forKey key: String) -> Set<String> {
        []
    }

    /// Whether setting a property of `key` notifies its observers by
    /// itself, as Foundation's `NSObject` method of the same name, which
    /// subclasses override to return false for the keys they announce by
    /// hand.
    ///
    /// There is no Objective-C runtime to send automatic notifications: a
    /// property of your own is announced by your `willChangeValue` /
    /// `didChangeValue` calls only, whatever this returns. The library does
    /// not call it; it is here so that such overrides compile unchanged.
    /// The default returns true.
    open class func automaticallyNotifiesObservers(forKey key: String) -> Bool {
        true
    }

    // MARK: Hooks for the library's own subclasses (internal)

    /// Runs the operation's work for the base `start()`: ``main()`` with the
    /// thread priority applied. `AsyncOperation` and `ResultOperation`
    /// override it for asynchronous bodies (user subclasses override `main()`
    /// or `start()`).
    func runBody() -> BodyOutcome {
        runMainWithThreadPriority()
        return .finished
    }

    /// The base start skipped the body (the operation was cancelled): the
    /// library's subclasses let go of the work they will never run, so that
    /// what it captures (possibly the operation itself) does not live as
    /// long as the operation. Call with no lock held; the work is released
    /// here, after unlocking.
    func discardUnrunBody() {}

    /// Operations a subclass holds as inputs that it lets go of when it
    /// finishes (`ResultOperation`'s, when its body never ran): removed from
    /// `dependencies` and returned, for the caller to release after
    /// unlocking. Called with the lock bit held, from `beginFinish`; the
    /// library's own override only moves stored references.
    func takeInputsOnFinishLocked() -> OperationList { .empty }

    /// The bridge to a running `async` body's task, taken (once) to cancel
    /// it: `ResultOperation` keeps it in a field of its own rather than as a
    /// cancellation handler, so that an `async` body costs no extras box,
    /// closure or array. Called with the lock bit held; the library's own
    /// override only moves a stored reference out.
    func takeBodyCancellationLocked() -> AsyncBodyCancellation? { nil }

    /// Operations a subclass retains outside `dependencies` that may form
    /// long chains (a `ResultOperation`'s inputs), handed to the releasing
    /// walk of `deinit`. The default has none.
    func releasableOperations() -> OperationList { .empty }

    /// Appends the operations that this finished operation holds beyond its
    /// dependencies: those named by the dependency errors it keeps. The
    /// cycle search follows them (`FinishedCycles.swift`). Call with the
    /// lock held.
    func heldOperationsLocked(into held: inout OperationList) {
        guard let extras else { return }
        if let error = extras.failure as? DependencyError { held.append(error.dependency) }
        for error in extras.dependencyErrors { held.append(error.dependency) }
    }

    /// Whether this operation finished with a value (`ResultOperation`).
    var hasSuccessValue: Bool { false }

    // MARK: Description

    /// A one-line description: type, name, address and state.
    open var description: String {
        "<\(misuseSubject): \(loadState())>"
    }

    /// The description for debugging, as Foundation's `NSObject` has it:
    /// by default the same as ``description``.
    open var debugDescription: String { description }

    /// Whether `object` is equal to this operation, as `NSObject`'s
    /// `isEqual(_:)`: by default only the operation itself is. `==` asks this
    /// method, as Foundation's `==` on `NSObject` does; override it together
    /// with ``hash``. (The library itself compares operations by identity.)
    open func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? Operation else { return false }
        return other === self
    }

    /// The hash value, as `NSObject`'s `hash`: by default from the operation's
    /// identity. `Hashable` hashes this value; operations that are equal
    /// (``isEqual(_:)``) must have the same hash.
    open var hash: Int { ObjectIdentifier(self).hashValue }
}

extension Operation: Hashable {
    /// Equal when ``isEqual(_:)`` says so (by default, only to itself).
    public static func == (lhs: Operation, rhs: Operation) -> Bool { lhs === rhs || lhs.isEqual(rhs) }

    /// Hashes ``hash`` (by default the operation's identity).
    public func hash(into hasher: inout Hasher) {
        hasher.combine(hash)
    }
}

extension Operation: CustomStringConvertible, CustomDebugStringConvertible {}

/// The queue that owns an operation and the operation's rarely used storage
/// (`OperationExtras`), in one word: the queue is stored here until the
/// operation needs its extras, and in the extras from then on. A plain
/// operation (no name, completion block, observers or waiters) reads its
/// queue at no extra cost, and `Operation` stays one word smaller (see
/// BENCHMARKS.md, W8). Guarded by the owning operation's state lock bit.
enum MembershipAndExtras {
    case none
    case queue(Unmanaged<OperationQueue>)
    case extras(OperationExtras)
}

/// Rarely used per-operation storage, allocated on first use so that a plain
/// operation stays small. Guarded by the owning operation's state lock bit.
final class OperationExtras {
    /// The queue that owns the operation, once the extras exist (see
    /// `MembershipAndExtras`).
    var membership: Unmanaged<OperationQueue>?
    var name: String?
    var completionBlock: (@Sendable () -> Void)?
    var threadPriority: Double = 0.5
    /// Registered observers; also referenced by their tokens.
    var observers: ObservationRegistry?
    /// Woken once the operation retires (blocking waiters, awaiting tasks).
    var waiters = CallbackList()
    /// Called once when the operation is cancelled (async bodies).
    var cancellationHandlers: [@Sendable () -> Void] = []
    /// The error the operation failed with (`ResultOperation`, failure policies).
    var failure: (any Error)?
    /// What happens when a dependency fails or is cancelled.
    var failurePolicy: DependencyFailurePolicy = .runAnyway
    /// The dependency failures that made a failure policy cancel the operation.
    var dependencyErrors: [DependencyError] = []
    /// Values carried from the code that added it (`OperationContextPropagation`).
    var carriedContext: CarriedContext?
    /// A `BlockOperation`'s blocks after its first (`BlockOperation.firstBlock`).
    var moreBlocks: [@Sendable () -> Void] = []
    /// Dependencies whose edge closed a cycle of finished operations, kept
    /// weakly so that the cycle can be freed (`FinishedCycles.swift`).
    var weakDependencies: [WeakOperation] = []

    /// Takes `failure` and `dependencyErrors` (the operation is being
    /// released), for the caller to drop outside the lock.
    func takeErrors() -> [any Error] {
        var errors: [any Error] = dependencyErrors
        if let failure { errors.append(failure) }
        failure = nil
        dependencyErrors = []
        return errors
    }
}

/// Callbacks registered until an event, each removable by its key (so that a
/// wait that times out leaves nothing behind).
struct CallbackList {
    private var entries: [(key: Int, callback: @Sendable () -> Void)] = []
    private var nextKey = 0

    var isEmpty: Bool { entries.isEmpty }
    var count: Int { entries.count }

    /// Adds `callback`; returns the key that removes it.
    mutating func add(_ callback: @escaping @Sendable () -> Void) -> Int {
        nextKey += 1
        entries.append((nextKey, callback))
        return nextKey
    }

    /// Removes the callback added under `key`, if still there. Returns it, so
    /// that the caller releases it after unlocking.
    @discardableResult
    mutating func remove(_ key: Int) -> (@Sendable () -> Void)? {
        guard let index = entries.firstIndex(where: { $0.key == key }) else { return nil }
        return entries.remove(at: index).callback
    }

    /// Takes every callback, leaving the list empty.
    mutating func takeAll() -> [@Sendable () -> Void] {
        defer { entries = [] }
        return entries.map(\.callback)
    }
}
