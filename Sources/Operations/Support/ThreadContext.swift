#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// What the calling thread is doing on behalf of the library: which queue
/// and operation it runs, whether it is a pool worker, and so on.
///
/// One instance per thread, created on first use and released by the
/// thread-specific-data destructor when the thread exits. Only its own
/// thread reads or writes it, so it needs no lock.
///
/// The object references are `unowned(unsafe)`: each is set by a frame that
/// holds a strong reference for as long as the field is set, and restored
/// before that frame returns. Callers hold the context itself as
/// `unowned(unsafe)` too: it lives as long as its thread, and skipping the
/// reference counting matters on the per-operation path.
final class ThreadContext {
    // Only the owning thread touches these fields, so dynamic exclusivity
    // checks are off. They are `Unmanaged`: comparing identities and saving
    // and restoring them are then plain pointer operations, with no
    // reference counting on the per-operation path.

    /// The queue whose operation (or completion block) this thread is running.
    @exclusivity(unchecked) var queueReference: Unmanaged<OperationQueue>?
    /// The innermost operation whose `start()` is running on this thread.
    @exclusivity(unchecked) var operationReference: Unmanaged<Operation>?
    /// Set by a queue around its call to `operation.start()`, so that the
    /// base `start()` can tell the queue's call from a user's.
    @exclusivity(unchecked) var queueStartingReference: Unmanaged<Operation>?
    /// The operation whose completion block this thread is running.
    @exclusivity(unchecked) var completingReference: Unmanaged<Operation>?
    /// The operation a queue's drain loop is starting on this thread; when it
    /// finishes synchronously the loop retires it under the same lock
    /// acquisition it uses to pick the next operation.
    @exclusivity(unchecked) var drainOperationReference: Unmanaged<Operation>?
    /// Set by the finishing path when `drainOperation` finished on this thread.
    @exclusivity(unchecked) var drainOperationRetirePending = false
    /// The pool worker this thread is, if any.
    @exclusivity(unchecked) var workerReference: Unmanaged<Worker>?
    /// The queue whose drain loop is starting an operation on this thread.
    /// Dependents of that queue that become ready meanwhile are collected in
    /// `deferredAdmissions` and admitted under the loop's next lock
    /// acquisition, instead of taking the queue's lock once more each.
    @exclusivity(unchecked) var admittingQueueReference: Unmanaged<OperationQueue>?
    @exclusivity(unchecked) var deferredAdmissions: [Operation] = []
    /// The queue whose `cancelAllOperations()` runs on this thread: its
    /// cancelled operations are collected in `deferredCancellations` and
    /// moved to the cancelled lane under one lock acquisition at the end.
    @exclusivity(unchecked) var cancellingQueueReference: Unmanaged<OperationQueue>?
    @exclusivity(unchecked) var deferredCancellations: [Operation] = []

    var queue: OperationQueue? {
        get { queueReference?.takeUnretainedValue() }
        set { queueReference = newValue.map { Unmanaged.passUnretained($0) } }
    }

    var operation: Operation? {
        get { operationReference?.takeUnretainedValue() }
        set { operationReference = newValue.map { Unmanaged.passUnretained($0) } }
    }

    var completing: Operation? {
        get { completingReference?.takeUnretainedValue() }
        set { completingReference = newValue.map { Unmanaged.passUnretained($0) } }
    }

    var worker: Worker? {
        get { workerReference?.takeUnretainedValue() }
        set { workerReference = newValue.map { Unmanaged.passUnretained($0) } }
    }

    /// Whether `reference` refers to `object`, without reference counting.
    @inline(__always)
    static func refers<T: AnyObject>(_ reference: Unmanaged<T>?, to object: T) -> Bool {
        reference?.toOpaque() == Unmanaged.passUnretained(object).toOpaque()
    }

    private var cachedThreadID: Int32 = -1

    /// The kernel thread id, read once.
    var threadID: Int32 {
        if cachedThreadID < 0 { cachedThreadID = Platform.currentThreadID() }
        return cachedThreadID
    }

    /// Whether this is the process's main thread.
    lazy var isMainThread: Bool = Platform.isMainThread(threadID: threadID)

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let status = pthread_key_create(&key) { pointer in
            guard let pointer else { return }
            Unmanaged<ThreadContext>.fromOpaque(pointer).release()
        }
        precondition(status == 0, "pthread_key_create failed with \(status)")
        return key
    }()

    /// Runs `body` with the calling thread's context, without reference
    /// counting (the context lives as long as its thread).
    @inline(__always)
    static func withCurrent<R>(_ body: (ThreadContext) -> R) -> R {
        if let pointer = pthread_getspecific(key) {
            return Unmanaged<ThreadContext>.fromOpaque(pointer)._withUnsafeGuaranteedRef(body)
        }
        return body(makeCurrent())
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
