// The task that runs an `async` operation body: how it starts, how the
// operation's cancellation reaches it, and the task-local context that
// tells code inside the body which operation and queue it runs for.

/// How an `async` body's task starts.
enum AsyncBodyTask {
    /// Starts `body` in a new task that runs on the calling thread (the
    /// worker that starts the operation) until its first suspension, where
    /// the runtime allows it: a body that does not suspend then costs no
    /// hop to Swift's cooperative pool and back. Elsewhere it is a detached
    /// task. The task is unstructured either way; the operation's
    /// cancellation cancels it (see `AsyncBodyCancellation`).
    static func start(priority: TaskPriority, _ body: @escaping @Sendable () async -> Void) -> Task<Void, Never> {
        if #available(macOS 26.0, iOS 26.0, tvOS 26.0, watchOS 26.0, visionOS 26.0, *) {
            return Task.immediate(priority: priority, operation: body)
        }
        return Task.detached(priority: priority, operation: body)
    }
}

/// Carries an operation's `cancel()` to the task running its `async` body,
/// at any moment: before the task starts, while it runs its first part on
/// the starting thread (inside `Task.immediate`, before a handle exists),
/// and afterwards.
///
/// The task records itself first thing (`attachCurrentTask`); the starting
/// thread stores the handle once `Task.immediate` returns (`holdHandle`).
/// A cancellation cancels whichever it finds, or is remembered and applied
/// by `attachCurrentTask`. Cancelling a task runs its cancellation handlers
/// (user code), so it happens after the lock is released.
final class AsyncBodyCancellation: @unchecked Sendable {
    // @unchecked Sendable: every field is read and written only while
    // `lock` is held. `current` refers to the body's task without retaining
    // it; the task object stays alive at least as long as the handle that
    // `AsyncBodyTask.start` returns, which the starting thread holds from
    // before `current` can be read until it hands it to `holdHandle`, after
    // which this object holds it. So `current` is valid whenever it is read.
    private let lock = PlatformLock()
    private var current: UnsafeCurrentTask?
    private var handle: Task<Void, Never>?
    private var requested = false

    /// Called by the body's task before anything else.
    func attachCurrentTask() {
        withUnsafeCurrentTask { task in
            guard let task else { return }
            let cancelNow = lock.withLock { () -> Bool in
                if requested { return true }
                current = task
                return false
            }
            // Cancelling itself: no other thread is involved.
            if cancelNow { task.cancel() }
        }
    }

    /// Keeps the task's handle (and so the task object) for later
    /// cancellations; applies one that came before it.
    func holdHandle(_ task: Task<Void, Never>) {
        let cancelNow = lock.withLock { () -> Bool in
            handle = task
            current = nil
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
/// Task-local values are copied into every task created inside the body,
/// including unstructured ones that outlive it: `task` identifies the
/// body's own task, so that only the body itself counts as running the
/// operation (`ownOperation`, `ownQueue`).
struct OperationTaskContext: Sendable {
    let operation: Operation
    let queue: OperationQueue?
    /// The identity of the task running the body.
    let task: UInt

    @TaskLocal static var current: OperationTaskContext?

    /// The identity of the calling task (0 outside a task). Compared only,
    /// never dereferenced.
    static var currentTaskIdentity: UInt {
        withUnsafeCurrentTask { task in
            guard let task else { return 0 }
            if MemoryLayout<UnsafeCurrentTask>.size == MemoryLayout<UInt>.size {
                return unsafeBitCast(task, to: UInt.self)
            }
            return UInt(bitPattern: task.hashValue)
        }
    }

    /// The context, if the calling task is the body's own task and its
    /// operation has not finished; nil in tasks the body created.
    static var own: OperationTaskContext? {
        guard let context = current, !context.operation.loadState().isFinished,
              context.task == currentTaskIdentity else { return nil }
        return context
    }

    /// The operation whose `async` body the calling task is running, if any.
    static var ownOperation: Operation? { own?.operation }
}
