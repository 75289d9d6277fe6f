// The task that runs an `async` operation body: how it starts, how the
// operation's cancellation reaches it, and the task-local context that
// tells code inside the body which operation and queue it runs for.

/// How an `async` body's task starts.
enum AsyncBodyTask {
    /// Starts `body` in a new, unstructured task; the operation's
    /// cancellation cancels it (see `AsyncBodyCancellation`).
    ///
    /// With `onCallingThread` (a queue's drain loop starting the operation,
    /// on a thread that runs no task), the task runs on the calling thread
    /// until its first suspension, where the runtime has `Task.immediate`: a
    /// body that does not suspend then costs no hop to Swift's cooperative
    /// pool and back. Otherwise (a `start()` by hand, or from inside a task,
    /// whose caller may hold locks or task-local values the body must not
    /// see) it is a detached task, and `start()` returns at once.
    static func start(priority: TaskPriority, onCallingThread: Bool, _ body: @escaping @Sendable () async -> Void) -> Task<Void, Never> {
        if onCallingThread, #available(macOS 26.0, iOS 26.0, tvOS 26.0, watchOS 26.0, visionOS 26.0, *) {
            return Task.immediate(priority: priority, operation: body)
        }
        return Task.detached(priority: priority, operation: body)
    }

    /// Starts `body` for `operation` on the calling thread (see
    /// `start(priority:onCallingThread:_:)`), a drain loop's thread whose
    /// context is `context`. Returns the task, and whether the body returned
    /// before its first suspension, in which case it left finishing the
    /// operation to the caller (`returnedInline(_:)`): the drain loop then
    /// retires it as it retires a synchronous body, without a separate
    /// acquisition of the queue's lock.
    static func startInline(
        _ operation: Operation,
        context: ThreadContext,
        priority: TaskPriority,
        _ body: @escaping @Sendable () async -> Void
    ) -> (Task<Void, Never>, Bool) {
        let savedBody = context.inlineAsyncBody
        let savedReturned = context.inlineAsyncBodyReturned
        context.inlineAsyncBody = Unmanaged.passUnretained(operation)
        context.inlineAsyncBodyReturned = false
        let task = start(priority: priority, onCallingThread: true, body)
        let returned = context.inlineAsyncBodyReturned
        context.inlineAsyncBody = savedBody
        context.inlineAsyncBodyReturned = savedReturned
        return (task, returned)
    }

    /// Called by `operation`'s body task when the body has returned: true
    /// if that happened inside `startInline` on the starting thread (before
    /// any suspension), which then finishes the operation. False otherwise:
    /// the task finishes it itself.
    static func returnedInline(_ operation: Operation) -> Bool {
        ThreadContext.withCurrent { context in
            guard let inline = context.inlineAsyncBody, inline.toOpaque() == Unmanaged.passUnretained(operation).toOpaque() else {
                return false
            }
            context.inlineAsyncBodyReturned = true
            return true
        }
    }

    /// Whether the calling thread runs no task.
    static var callerIsOutsideTasks: Bool {
        withUnsafeCurrentTask { $0 == nil }
    }
}

/// Carries an operation's `cancel()` to the task running its `async` body,
/// at any moment: before the task starts, while it runs its first part on
/// the starting thread (inside `Task.immediate`, before a handle exists),
/// and afterwards. Also records the task's identity (see
/// `OperationTaskContext.own`). As a scope, it holds the body's operation
/// and queue for the tasks the body creates until the body returns
/// (`end()`): an unstructured task that outlives the body keeps neither
/// alive.
///
/// The task records itself first thing (`attachCurrentTask`); the starting
/// thread stores the handle once the task is created (`holdHandle`). A
/// cancellation cancels whichever it finds, or is remembered and applied by
/// `attachCurrentTask`. Cancelling a task runs its cancellation handlers
/// (user code), so it happens after the lock is released.
final class AsyncBodyCancellation: BodyScope, @unchecked Sendable {
    // @unchecked Sendable: every field is read and written only while the
    // scope's `lock` is held. `current` and `handle` each retain the task
    // object (`UnsafeCurrentTask` holds a strong reference, as `Task` does),
    // so whichever is set is valid to cancel from any thread, and the task's
    // address stays unique while this object lives.
    private var current: UnsafeCurrentTask?
    private var handle: Task<Void, Never>?
    private var requested = false
    private var identity: UInt = 0

    /// The identity of the body's task (0 until it has started).
    var taskIdentity: UInt { lock.withLock { identity } }

    /// Called by the body's task before anything else.
    func attachCurrentTask() {
        withUnsafeCurrentTask { task in
            guard let task else { return }
            let identity = OperationTaskContext.identity(of: task)
            let cancelNow = lock.withLock { () -> Bool in
                self.identity = identity
                if requested { return true }
                current = task
                return false
            }
            // Cancelling itself: no other thread is involved.
            if cancelNow { task.cancel() }
        }
    }

    /// Keeps the task's handle for later cancellations; applies one that
    /// came before it.
    func holdHandle(_ task: Task<Void, Never>) {
        let cancelNow = lock.withLock { () -> Bool in
            handle = task
            return requested
        }
        if cancelNow { task.cancel() }
    }

    /// The operation was cancelled.
    func cancel() {
        let (task, running) = lock.withLock { () -> (Task<Void, Never>?, UnsafeCurrentTask?) in
            requested = true
            return (handle, handle == nil ? current : nil)
        }
        if let task {
            task.cancel()
        } else if let running {
            running.cancel()
        }
    }
}

/// The operation an `async` body runs for, as a task-local value, so that
/// `OperationQueue.current`, adds that bypass the pending limit, and wait
/// checks work inside async bodies.
///
/// Task-local values are copied into every task created inside the body:
/// structured children (`async let`, task groups), which cannot outlive it,
/// and unstructured tasks, which can. The runtime does not tell them apart.
/// So:
/// - `inherited` (the body and every task it created, while the operation
///   has not finished) decides `OperationQueue.current` and the pending-limit
///   bypass, where counting an unstructured task as inside costs little and
///   not counting a structured child could deadlock;
/// - `own` (the body's own task only) decides what a wait counts as running,
///   where counting an unstructured task that waits for the operation would
///   report a deadlock that is not one. A structured child that waits for
///   its own operation is therefore not recognised (it hangs, as in
///   Foundation, and the hang report names it).
struct OperationTaskContext: Sendable {
    /// The operation and queue, held only until the `async` body returns or
    /// the ``AsyncOperation`` finishes (tasks created meanwhile may outlive
    /// either).
    private let scope: BodyScope
    /// The body's task: holding its cancellation keeps the task object (and
    /// so its address, which `own` compares) alive as long as any task
    /// carries this context. It is also the scope. Nil for an
    /// ``AsyncOperation``'s `execute()`, which runs on a thread: tasks it
    /// creates inherit the context, and none of them is the body's own.
    let body: AsyncBodyCancellation?

    /// The context of an `async` body.
    init(body: AsyncBodyCancellation) {
        scope = body
        self.body = body
    }

    /// The context of an ``AsyncOperation``'s `execute()`.
    init(scope: BodyScope) {
        self.scope = scope
        body = nil
    }

    /// The operation, or nil once the scope has ended.
    var operation: Operation? { scope.operation }

    /// The operation's queue, if it has one (and the scope has not ended).
    var queue: OperationQueue? { scope.queue }

    @TaskLocal static var current: OperationTaskContext?

    /// The identity of the calling task (0 outside a task). Compared only,
    /// never dereferenced.
    static var currentTaskIdentity: UInt {
        withUnsafeCurrentTask { task in task.map(identity(of:)) ?? 0 }
    }

    /// `task`'s identity: the address of its task object.
    static func identity(of task: UnsafeCurrentTask) -> UInt {
        // `UnsafeCurrentTask` is one reference to the task object.
        unsafeBitCast(task, to: UInt.self)
    }

    /// The context of the body or of a task it created, while the operation
    /// has not finished.
    static var inherited: OperationTaskContext? {
        guard let context = current, let operation = context.operation, !operation.loadState().isFinished else { return nil }
        return context
    }

    /// The context, if the calling task is the body's own task and its
    /// operation has not finished; nil in tasks the body created.
    static var own: OperationTaskContext? {
        guard let context = inherited, let body = context.body, body.taskIdentity == currentTaskIdentity else { return nil }
        return context
    }

    /// The operation whose `async` body the calling task is running, if any.
    static var ownOperation: Operation? { own?.operation }
}

/// The operation and queue of an `async` body or an ``AsyncOperation``'s
/// `execute()`, as seen by the tasks it creates: held until the body
/// returns or the operation finishes (`end()`), then let go, so that a task
/// that outlives either keeps neither alive.
class BodyScope: @unchecked Sendable {
    // @unchecked Sendable: `held` (and a subclass's fields) are read and
    // written only while `lock` is held.
    // One per body: an inline lock, so that making one allocates nothing
    // beyond the object itself (its sections are a few stores, no user
    // code).
    final let lock = InlineSpinLock()
    private var held: (operation: Operation, queue: OperationQueue?)?

    init(operation: Operation, queue: OperationQueue?) {
        held = (operation, queue)
    }

    /// The operation, or nil once the scope has ended.
    final var operation: Operation? { lock.withLock { held?.operation } }

    /// The operation's queue, or nil once the scope has ended (or if it has none).
    final var queue: OperationQueue? { lock.withLock { held?.queue } }

    /// Lets go of the operation and queue.
    final func end() {
        let dropped = lock.withLock { () -> (operation: Operation, queue: OperationQueue?)? in
            defer { held = nil }
            return held
        }
        // Released here, after unlocking.
        withExtendedLifetime(dropped) {}
    }
}
