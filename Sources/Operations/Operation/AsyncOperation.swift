/// An operation that stays executing after `start()` returns, until
/// ``finish()`` is called: the pattern of the article's `MLAsyncOperation`
/// and the chapter's concurrent operations, ready to use.
///
/// Use it with a block that receives the operation and calls ``finish()``
/// when its callback arrives:
///
/// ```swift
/// let download = AsyncOperation { operation in
///     client.fetch(url) { data in
///         store(data)
///         operation.finish()
///     }
/// }
/// ```
///
/// or subclass it, override ``execute()``, and call ``finish()``.
///
/// Cancelled before it starts, it finishes without running its work. It
/// does not override ``Operation/start()``: a queue treats it like any
/// operation that keeps the base `start()`.
/// Cancelled while executing, it keeps executing until ``finish()``: check
/// ``Operation/isCancelled`` in your callbacks. Its dependents, its queue
/// slot, its completion block and its waiters all follow ``finish()``, so
/// dependencies order asynchronous work exactly as they order synchronous
/// work.
open class AsyncOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `body` is set in `init` and read once in
    // `execute()` (or dropped unrun), then cleared under the state lock bit.
    private final var body: (@Sendable (AsyncOperation) -> Void)?
    /// What the tasks that `execute()` creates see as their operation and
    /// queue; ended by ``finish()``. Read and written under the state lock
    /// bit.
    private final var executeScope: BodyScope?

    /// Creates an operation for a subclass that overrides ``execute()``.
    public override init() {
        super.init()
    }

    /// Creates an operation that runs `block` and finishes when the block
    /// (or a callback it sets up) calls ``finish()``.
    public init(block: @escaping @Sendable (AsyncOperation) -> Void) {
        body = block
        super.init()
    }

    /// Always true: the operation finishes when ``finish()`` is called.
    open override var isAsynchronous: Bool { true }

    /// Runs ``execute()`` for the base `start()`, which validates the start
    /// and skips the work when the operation was cancelled. The operation
    /// stays executing until ``finish()``.
    override func runBody() -> BodyOutcome {
        guard loadState().hasCustomThreadPriority else {
            withCarriedContext { executeAsQueueWork() }
            return .continues
        }
        let change = ThreadPriorityChange.apply(threadPriority)
        withCarriedContext { executeAsQueueWork() }
        change?.restore()
        return .continues
    }

    /// Runs ``execute()`` so that the tasks it creates (the usual way to
    /// finish later) count as this operation's work until it finishes, as
    /// those of an `async` body do: what they add to its queue is not held
    /// back by the pending limit, and `OperationQueue.current` is the queue.
    private func executeAsQueueWork() {
        let scope = BodyScope(operation: self, queue: ThreadContext.withCurrent { $0.queue })
        // `finish()` may already have come: any thread may call it once the
        // operation reads executing, which is before this runs (an
        // `isExecuting` observer can). It found no scope to end, so this one
        // is not kept; kept, it would hold the operation and its queue
        // forever. Decided under the lock that `finish()` claims the end
        // under, so one of the two always ends the scope.
        let kept = withStateLock { state -> Bool in
            guard !state.isBodyEndClaimed else { return false }
            executeScope = scope
            return true
        }
        if !kept { scope.end() }
        OperationTaskContext.$current.withValue(OperationTaskContext(scope: scope)) {
            execute()
        }
    }

    override func discardUnrunBody() {
        withExtendedLifetime(takeBody()) {}
    }

    /// Takes the block given to ``init(block:)``, once. The caller runs or
    /// drops it after unlocking.
    private func takeBody() -> (@Sendable (AsyncOperation) -> Void)? {
        withStateLock { _ in
            defer { body = nil }
            return body
        }
    }

    /// The work. The default runs the block given to ``init(block:)``.
    /// Override it in a subclass; call ``finish()`` when the work is done,
    /// from any thread, now or later.
    open func execute() {
        if let block = takeBody() {
            block(self)
        } else {
            finish()
        }
    }

    /// Marks the operation finished: dependents are released, its queue
    /// frees the slot, the completion block runs and waiters wake.
    ///
    /// Called from a task (on Swift's cooperative pool), for an operation
    /// with a completion block, only the first step happens before it
    /// returns (``Operation/isFinished`` reads true); the rest, with the
    /// completion block, runs on a worker of the operation pool, where a
    /// blocking wait cannot starve the tasks it may wait for. If the
    /// operation has observers, the whole finish runs there, observers
    /// included, and ``Operation/isFinished`` becomes true shortly after
    /// the call returns.
    ///
    /// Calling it again does nothing, even from another thread at the same
    /// time or from an observer of the first call's change: one call ends
    /// the body and announces it. Calling it before the operation
    /// started is a misuse (``OperationMisuse/Code/finishBeforeStart``).
    /// Once the operation reads executing, a call is valid even before
    /// ``execute()`` has run (from an `isExecuting` observer, or another
    /// thread): the operation finishes, and ``execute()`` still runs, as
    /// the start began it.
    public final func finish() {
        let state = loadState()
        if !state.hasBaseStarted {
            OperationMisuse.report(
                .finishBeforeStart,
                subject: .operation(self),
                "had finish() called before it started. Call finish() from execute() or the callbacks it sets up."
            )
            return
        }
        // One call ends the body and announces it; a second call, at the
        // same time on another thread or from an observer of the first
        // call's announcement, does nothing.
        guard state.isBaseExecuting, withStateLock({ $0.claimBodyEnd() }) else { return }
        // The tasks `execute()` created no longer count as its work, and no
        // longer hold the operation or its queue.
        let scope = withStateLock { _ -> BodyScope? in
            defer { executeScope = nil }
            return executeScope
        }
        defer { scope?.end() }
        let inTask = !AsyncBodyTask.callerIsOutsideTasks
        if inTask, loadState().isObserved {
            // Called from a task, on a thread of Swift's cooperative pool,
            // with observers: they and the completion block (synchronous
            // code that may block) run on a worker of the operation pool,
            // which makes up for blocked workers, as an `async` body's do;
            // the whole finish moves there, so that observers hear both
            // halves of each change on one thread.
            WorkerPool.shared.submit(ClosureJob { [self] in
                withThreadContext { bodyDidFinish(wasExecuting: true, announced: false) }?.run()
            }, qos: state.qosIndex)
            return
        }
        guard let plan = withThreadContext({ bodyDidFinish(wasExecuting: true, announced: false) }) else { return }
        if inTask, plan.hasUserTail {
            // From a task, not observed: the operation is finished already;
            // the rest, with the completion block, runs on a worker.
            WorkerPool.shared.submit(FinishPlanJob(plan), qos: state.qosIndex)
        } else {
            plan.run()
        }
    }
}
