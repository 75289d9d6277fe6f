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
    // `execute()`, then cleared under the state lock bit.
    private final var body: (@Sendable (AsyncOperation) -> Void)?

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
            withCarriedContext { execute() }
            return .continues
        }
        let change = ThreadPriorityChange.apply(threadPriority)
        withCarriedContext { execute() }
        change?.restore()
        return .continues
    }

    /// The work. The default runs the block given to ``init(block:)``.
    /// Override it in a subclass; call ``finish()`` when the work is done,
    /// from any thread, now or later.
    open func execute() {
        let block = withStateLock { _ -> (@Sendable (AsyncOperation) -> Void)? in
            defer { body = nil }
            return body
        }
        if let block {
            block(self)
        } else {
            finish()
        }
    }

    /// Marks the operation finished: dependents are released, its queue
    /// frees the slot, the completion block runs and waiters wake.
    ///
    /// Calling it again does nothing, even from another thread at the same
    /// time or from an observer of the first call's change: one call ends
    /// the body and announces it. Calling it before the operation
    /// started is a misuse (``OperationMisuse/Code/finishBeforeStart``).
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
        withThreadContext { bodyDidFinish(wasExecuting: true, announced: false) }?.run()
    }
}
