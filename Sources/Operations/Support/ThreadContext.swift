import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// What the calling thread is running on behalf of the library: the queue
/// and the operation. That is all it holds; no other decision depends on a
/// thread-local value (the pool's own worker identity is `Worker.current`).
///
/// - `queue` answers `OperationQueue.current`.
/// - `operation` (with `outerOperations` for operations started by hand from
///   inside another one) tells a wait what the waiting thread is running, so
///   that a wait that can never end is reported (`WaitRegistry`).
///
/// One instance per thread, created on first use and released by the
/// thread-specific-data destructor when the thread exits. Only its own
/// thread reads or writes it, so it needs no lock.
///
/// The references are `Unmanaged`: each is set by a frame that holds a strong
/// reference for as long as the field is set (`enter`), and restored before
/// that frame returns (`leave`). Callers hold the context itself unretained:
/// it lives as long as its thread.
final class ThreadContext {
    // Only the owning thread touches these fields, so dynamic exclusivity
    // checks are off.

    /// The queue whose operation (or completion block) this thread is running.
    @exclusivity(unchecked) var queueReference: Unmanaged<OperationQueue>?
    /// The innermost operation this thread is running (its `start()`, body,
    /// or finishing observers and completion block).
    @exclusivity(unchecked) var operationReference: Unmanaged<Operation>?
    /// Operations further out, when one was started from inside another.
    @exclusivity(unchecked) private var outerOperations: [Unmanaged<Operation>] = []
    /// The operation whose `async` body this thread is starting with
    /// `Task.immediate` (see `ResultOperation.runBody`), while the task's
    /// synchronous first part runs here; nil otherwise. Unretained: it is
    /// only compared by identity, never dereferenced, and the drain loop
    /// that set it holds the operation meanwhile.
    @exclusivity(unchecked) var inlineAsyncBody: Unmanaged<Operation>?
    /// Set by that body when it returned before its first suspension: its
    /// starter finishes the operation, as for a synchronous body.
    @exclusivity(unchecked) var inlineAsyncBodyReturned = false

    /// The operation whose completion block this thread is running, while
    /// it runs; compared by identity only. Unretained: the runner's item
    /// holds the operation until the block has returned.
    @exclusivity(unchecked) var completingOperation: Unmanaged<Operation>?

    /// Whether this thread runs a completion block: as in Foundation, where
    /// completion blocks run outside the queue, `OperationQueue.current` is
    /// then nil (or the main queue, on the main thread). `queue` keeps
    /// naming the operation's queue for the library's own checks.
    var inCompletionBlock: Bool { completingOperation != nil }

    /// The dependency edits this thread is announcing to observers (an
    /// observed `addDependency` or `removeDependency`, from its will-change
    /// on): the same edit made again from one of their observers is
    /// already under way, and does nothing (see `Operation.EdgeEdit`).
    @exclusivity(unchecked) var announcedEdgeEdits: [Operation.EdgeEdit] = []

    /// Operations this thread is announcing ready to their observers before
    /// their queue has been told (see `PendingAdmission`), innermost last.
    @exclusivity(unchecked) var pendingAdmissions: [PendingAdmission] = []

    /// What a drain loop on this thread took from its queue and has not
    /// started yet, while the operations it let go of may run their
    /// `deinit` here; nil otherwise (see `DrainClaim`).
    @exclusivity(unchecked) var drainClaim: Unmanaged<Operation>?
    /// The queue of the drain loop this thread runs, if any.
    @exclusivity(unchecked) var drainClaimQueue: Unmanaged<OperationQueue>?
    /// The cancelled operations taken with the claim's operation (empty
    /// unless a drain loop's claim is set and it took some).
    @exclusivity(unchecked) var drainClaimCancelled: [Operation] = []
    /// The claim was given back to its queue: the loop starts none of it.
    @exclusivity(unchecked) var drainClaimGivenBack = false

    /// Retirements of `drainClaimQueue` that the drain loop on this thread
    /// has completed (or is completing: letting go of the operation, whose
    /// `deinit` may run here) but not yet settled under the queue's lock.
    @exclusivity(unchecked) var drainOwedRetirements = 0
    /// The queue whose counted retirement this thread is completing outside
    /// a drain loop, while it lets go of the operation (its `deinit` may
    /// run here); settled right after.
    @exclusivity(unchecked) var releasingRetirementOf: Unmanaged<OperationQueue>?

    /// The operation whose base `start()` this thread is announcing to
    /// `.prior` `isExecuting` observers: its body runs
    /// here next, whatever they do. Unretained: the starting frame holds
    /// the operation while it is set.
    @exclusivity(unchecked) var announcedBaseStart: Unmanaged<Operation>?

    /// What `leave` restores.
    struct Saved {
        fileprivate let operation: Unmanaged<Operation>?
        fileprivate let queue: Unmanaged<OperationQueue>?
    }

    var queue: OperationQueue? {
        queueReference?.takeUnretainedValue()
    }

    var operation: Operation? {
        operationReference?.takeUnretainedValue()
    }

    /// Marks `operation` as running on this thread (the queue unchanged).
    @inline(__always)
    func enter(_ operation: Operation) -> Saved {
        enter(operation, queue: queueReference)
    }

    /// Marks `operation` as running on this thread for `queue`.
    @inline(__always)
    func enter(_ operation: Operation, queue: Unmanaged<OperationQueue>?) -> Saved {
        let saved = Saved(operation: operationReference, queue: queueReference)
        if let outer = operationReference { outerOperations.append(outer) }
        operationReference = Unmanaged.passUnretained(operation)
        queueReference = queue
        return saved
    }

    /// Restores what `enter` replaced.
    @inline(__always)
    func leave(restoring saved: Saved) {
        if saved.operation != nil { outerOperations.removeLast() }
        operationReference = saved.operation
        queueReference = saved.queue
    }

    /// Every operation this thread is running, innermost last.
    var runningOperations: [Operation] {
        var result = outerOperations.map { $0.takeUnretainedValue() }
        if let operation { result.append(operation) }
        return result
    }

    /// `runningOperations`, plus the operation whose `async` body the
    /// calling task runs (a blocking wait made from a synchronous function
    /// that the body calls, after its first suspension, runs on a thread of
    /// Swift's cooperative pool, which has no thread context). For the wait
    /// checks only: reading the task-local costs more than the rest.
    var runningOperationsIncludingTask: [Operation] {
        var result = runningOperations
        if let own = OperationTaskContext.ownOperation, !result.contains(where: { $0 === own }) {
            result.append(own)
        }
        return result
    }

    /// Whether `operation` is one this thread is running.
    /// Whether this thread runs `operation`'s completion block.
    func isCompleting(_ operation: Operation) -> Bool {
        completingOperation?.toOpaque() == Unmanaged.passUnretained(operation).toOpaque()
    }

    func isRunning(_ operation: Operation) -> Bool {
        let opaque = Unmanaged.passUnretained(operation).toOpaque()
        if operationReference?.toOpaque() == opaque { return true }
        return outerOperations.contains { $0.toOpaque() == opaque }
    }

    private var cachedThreadID: Int32 = -1

    /// The kernel thread id, read once.
    var threadID: Int32 {
        if cachedThreadID < 0 { cachedThreadID = Platform.currentThreadID() }
        return cachedThreadID
    }

    /// Whether this is the process's main thread.
    lazy var isMainThread: Bool = Platform.isMainThread(threadID: threadID)

    /// Whether the calling code runs where Darwin runs main-thread code: on
    /// the process's main thread, or in a block of the main dispatch queue.
    /// They differ on Linux once `dispatchMain()` has been called (as
    /// `swift test` does for Swift Testing): a worker thread then drains the
    /// main queue, and `@MainActor` code runs there (probe 48). Not cached:
    /// a worker runs main-queue blocks only some of the time.
    var isOnMainQueue: Bool {
        isMainThread || MainDispatchQueueMark.isCurrent
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let status = pthread_key_create(&key) { pointer in
            guard let pointer else { return }
            Unmanaged<ThreadContext>.fromOpaque(pointer).release()
        }
        precondition(status == 0, "Operations: pthread_key_create failed with \(status)")
        return key
    }()

    /// Runs `body` with the calling thread's context, without reference
    /// counting (the context lives as long as its thread).
    @inline(__always)
    static func withCurrent<R>(_ body: (ThreadContext) throws -> R) rethrows -> R {
        if let pointer = pthread_getspecific(key) {
            return try Unmanaged<ThreadContext>.fromOpaque(pointer)._withUnsafeGuaranteedRef(body)
        }
        return try body(makeCurrent())
    }

    /// The calling thread's context, created on first use.
    static var current: ThreadContext {
        @inline(__always) get {
            if let pointer = pthread_getspecific(key) {
                return Unmanaged<ThreadContext>.fromOpaque(pointer).takeUnretainedValue()
            }
            return makeCurrent()
        }
    }

    @inline(never)
    private static func makeCurrent() -> ThreadContext {
        let context = ThreadContext()
        pthread_setspecific(key, Unmanaged.passRetained(context).toOpaque())
        return context
    }
}

/// A mark set on the main dispatch queue, so that code can tell it runs in
/// one of its blocks on whatever thread drains it
/// (``ThreadContext/isOnMainQueue``).
enum MainDispatchQueueMark {
    // Set on the queue once, by the initializer of the `static let`, before
    // any read (`setSpecific` is itself thread-safe).
    private static let key: DispatchSpecificKey<Bool> = {
        let key = DispatchSpecificKey<Bool>()
        DispatchQueue.main.setSpecific(key: key, value: true)
        return key
    }()

    /// Whether the calling code runs in a block of the main dispatch queue
    /// (or of a queue that targets it).
    static var isCurrent: Bool {
        DispatchQueue.getSpecific(key: key) == true
    }
}
