// The lifecycle side effects of `Operation`: entering `start()`, running
// `main()`, finishing, retiring, cancelling. Each path computes its outcome
// under the state lock bit, releases it, and only then notifies observers,
// releases dependents, informs the queue and runs the completion block.

extension Operation {
    // MARK: Starting

    /// Validates a call to `start()` and moves to executing.
    ///
    /// Returns true when the caller should run the operation's body. Returns
    /// false when the call was a misuse that a handler refused, or when the
    /// operation had been cancelled and has now finished without its body.
    final func beginStart(context: ThreadContext) -> Bool {
        let startedByQueue = ThreadContext.refers(context.queueStartingReference, to: self)
        // Fast path: one compare-and-swap moves a plain pending operation
        // (started by its queue, or by hand when ready) to executing.
        if startedByQueue || isReady, tryFastStart(enqueued: startedByQueue) { return true }
        var snapshot = loadState()
        if snapshot.isEnqueued && !startedByQueue {
            let owner = withStateLock { _ in storedQueue?.misuseSubject } ?? "a queue"
            OperationMisuse.report(
                .startOwnedByQueue,
                subject: misuseSubject,
                "was started by hand, but \(owner) owns it. A queued operation is started by its queue; call start() only on operations you run yourself."
            )
            return false
        }
        if let refusal = startRefusal(snapshot) {
            OperationMisuse.report(refusal.code, subject: misuseSubject, refusal.detail)
            return false
        }
        if snapshot.hasFailurePolicy, !snapshot.isCancelled {
            applyFailurePolicy(after: withStateLock { _ in storedDependencies.array })
            snapshot = loadState()
        }
        if !startedByQueue, !snapshot.isCancelled, !isReady {
            OperationMisuse.report(.startNotReady, subject: misuseSubject, notReadyExplanation())
            return false
        }
        let observed = snapshot.isObserved
        if observed && !snapshot.isCancelled { notifyWillChange(["isExecuting"]) }
        let decision = withStateLock { $0.beginStart() }
        switch decision {
        case .run:
            if observed || loadState().isObserved { notifyDidChange(["isExecuting"]) }
            return true
        case .finishCancelled:
            finish(announced: false)
            return false
        case .alreadyExecuting, .alreadyStarted, .alreadyFinished:
            let refusal = startRefusal(loadState()) ?? (
                OperationMisuse.Code.startWhileExecuting,
                "was started twice; the other call is already running it."
            )
            OperationMisuse.report(refusal.code, subject: misuseSubject, refusal.detail)
            return false
        }
    }

    /// Moves pending → executing in one compare-and-swap if the state is
    /// plain (see `OperationState.fastStartMask`). Returns false to take the
    /// general path.
    @inline(__always)
    private func tryFastStart(enqueued: Bool) -> Bool {
        let required = enqueued ? OperationState.enqueuedFlag : 0
        var current = stateWord.load(ordering: .relaxed)
        while current & OperationState.fastStartMask == required {
            let desired = current | OperationState.startedFlag | OperationState.executingPhase
            let (exchanged, original) = stateWord.weakCompareExchange(
                expected: current,
                desired: desired,
                successOrdering: .acquiringAndReleasing,
                failureOrdering: .relaxed
            )
            if exchanged { return true }
            current = original
        }
        return false
    }

    private func startRefusal(_ state: OperationState) -> (code: OperationMisuse.Code, detail: String)? {
        switch state.phase {
        case .executing:
            return (.startWhileExecuting, "was started while it is already executing. An operation runs once; create a new one to run the work again.")
        case .finished:
            return (.startAfterFinished, "was started after it finished\(state.isCancelled ? " (it was cancelled)" : ""). An operation runs once; create a new one to run the work again.")
        case .pending:
            if state.hasStarted {
                return (.startWhileExecuting, "was started twice; the other call is already running it.")
            }
            return nil
        }
    }

    private func notReadyExplanation() -> String {
        let unfinished = withStateLock { _ in storedDependencies.array }.filter { !$0.isFinished }
        if unfinished.isEmpty {
            return "was started while it is not ready: its isReady returned false. Start it once isReady is true, or add it to a queue, which starts it when it becomes ready."
        }
        let names = unfinished.prefix(5).map(\.misuseSubject).joined(separator: ", ")
        return "was started while it is not ready: \(unfinished.count) of its dependencies have not finished (\(names)). Start it after they finish, or add it to a queue, which starts it when it becomes ready."
    }

    /// Runs `main()` with the thread context and thread priority set.
    final func runMain(context: ThreadContext) {
        let savedOperation = context.operationReference
        let savedStarting = context.queueStartingReference
        context.operationReference = Unmanaged.passUnretained(self)
        context.queueStartingReference = nil
        let priority = loadState().hasCustomThreadPriority
            ? ThreadPriorityChange.apply(threadPriority, context: context)
            : nil
        main()
        priority?.restore(context: context)
        context.operationReference = savedOperation
        context.queueStartingReference = savedStarting
    }

    // MARK: Finishing

    /// Moves to finished and performs every consequence exactly once:
    /// observers, dependents, the completion block, the queue, waiters.
    ///
    /// `announced` is true when a subclass announced `isFinished` itself; its
    /// observers have then already been told.
    final func finish(announced: Bool) {
        // Fast path: nothing to notify, release or run besides the queue.
        var fastQueue: Unmanaged<OperationQueue>?
        let fast = withStateLock { state -> Bool in
            guard !state.isObserved, state.phase != .finished, storedDependents.isEmpty, extras == nil else {
                return false
            }
            _ = state.finish()
            fastQueue = queueReference
            return true
        }
        if fast {
            retire(queue: fastQueue)
            return
        }
        let snapshot = loadState()
        guard snapshot.phase != .finished else { return }
        let observed = snapshot.isObserved && !announced
        if observed {
            notifyWillChange(snapshot.phase == .executing ? ["isFinished", "isExecuting"] : ["isFinished"])
        }
        var dependents = OperationList.empty
        var completion: (@Sendable () -> Void)?
        var queue: Unmanaged<OperationQueue>?
        var barrier: Operation?
        var handlers: [@Sendable () -> Void] = []
        let outcome = withStateLock { state -> OperationState.FinishOutcome in
            let outcome = state.finish()
            if case .finished = outcome {
                // Resolve the unretained dependents while this lock keeps
                // them from completing deallocation (see `DependentList`).
                storedDependents.take().forEach { entry in
                    if let dependent = Operation.retainIfAlive(entry) { dependents.append(dependent) }
                }
                completion = extras?.completionBlock
                extras?.completionBlock = nil
                // The hidden barrier edge has done its job; keeping it would
                // keep every earlier operation of the queue alive.
                barrier = extras?.hiddenDependency
                extras?.hiddenDependency = nil
                // Cancellation handlers (an async body's task) are useless now,
                // and may reference this operation.
                if let extras, !extras.cancellationHandlers.isEmpty {
                    handlers = extras.cancellationHandlers
                    extras.cancellationHandlers = []
                }
                queue = queueReference
            }
            return outcome
        }
        withExtendedLifetime(barrier) {}
        withExtendedLifetime(handlers) {}
        guard case .finished(let wasExecuting) = outcome else { return }
        if observed {
            notifyDidChange(wasExecuting ? ["isExecuting", "isFinished"] : ["isFinished"])
        }
        dependents.forEach { $0.dependencyDidFinish(self) }
        dependents = .empty
        if let completion {
            unowned(unsafe) let context = ThreadContext.current
            let savedCompleting = context.completingReference
            let savedQueue = context.queueReference
            context.completingReference = Unmanaged.passUnretained(self)
            if let queue { context.queueReference = queue }
            completion()
            context.completingReference = savedCompleting
            context.queueReference = savedQueue
        }
        retire(queue: queue)
    }

    /// Informs the queue (if any), then releases waiters.
    ///
    /// `queue` is unretained: the queue stays alive at least until this
    /// operation's `completeRetirement()` (see `queueReference`).
    final func retire(queue: Unmanaged<OperationQueue>?) {
        guard let queue else {
            completeRetirement()
            return
        }
        let deferred = ThreadContext.withCurrent { context -> Bool in
            guard ThreadContext.refers(context.drainOperationReference, to: self) else { return false }
            // The drain loop that started this operation retires it under
            // the lock it takes anyway to pick the next operation, then
            // calls `completeRetirement()`.
            context.drainOperationRetirePending = true
            return true
        }
        if deferred { return }
        let selfRelease = queue._withUnsafeGuaranteedRef { $0.operationDidRetire(self) }
        selfRelease?.release()
    }

    /// Marks the operation retired and runs its retire callbacks (waiters).
    /// Called after the queue's bookkeeping, so that a woken waiter sees the
    /// operation gone from its queue.
    final func completeRetirement() {
        for callback in takeRetirement() { callback() }
    }

    /// Marks the operation retired and returns its retire callbacks
    /// (waiters) without running them, so that a caller can first drop its
    /// own references: a woken waiter then finds the operation released if
    /// nothing else holds it.
    final func takeRetirement() -> [@Sendable () -> Void] {
        var callbacks: [@Sendable () -> Void] = []
        withStateLock { state in
            state.retire()
            queueReference = nil
            if let extras, !extras.retireCallbacks.isEmpty {
                callbacks = extras.retireCallbacks
                extras.retireCallbacks = []
            }
        }
        return callbacks
    }

    /// One of this operation's counted dependencies finished (`dependency`
    /// is nil for the internal holds a queue places on barriers).
    final func dependencyDidFinish(_ dependency: Operation?) {
        // A failure policy cancels before the operation can become ready, so
        // that a queue never starts it.
        if let dependency, loadState().hasFailurePolicy { applyFailurePolicy(after: [dependency]) }
        let snapshot = loadState()
        let mayBecomeReady = snapshot.unfinishedDependencies == 1 && !snapshot.isCancelled
            && snapshot.phase == .pending && !snapshot.hasStarted
        if snapshot.isObserved && mayBecomeReady { notifyWillChange(["isReady"]) }
        var queue: OperationQueue?
        let change = withStateLock { state -> OperationState.ReadinessChange in
            let change = state.dependencyFinished()
            if change == .becameReady, state.isEnqueued { queue = storedQueue }
            return change
        }
        guard change == .becameReady else { return }
        if loadState().isObserved { notifyDidChange(["isReady"]) }
        queue?.operationMayBeReady(self)
    }

    // MARK: Cancelling

    final func performCancel() {
        let snapshot = loadState()
        guard !snapshot.isCancelled, snapshot.phase != .finished else { return }
        let pendingNow = snapshot.phase == .pending && !snapshot.hasStarted
        let keys = pendingNow ? ["isCancelled", "isReady"] : ["isCancelled"]
        if snapshot.isObserved { notifyWillChange(keys) }
        var queue: OperationQueue?
        var handlers: [@Sendable () -> Void] = []
        let outcome = withStateLock { state -> OperationState.CancelOutcome in
            let outcome = state.cancel()
            guard outcome.changed else { return outcome }
            if outcome.wasPending, state.isEnqueued { queue = storedQueue }
            if let extras, !extras.cancellationHandlers.isEmpty {
                handlers = extras.cancellationHandlers
                extras.cancellationHandlers = []
            }
            return outcome
        }
        guard outcome.changed else { return }
        if loadState().isObserved {
            notifyDidChange(outcome.wasPending ? ["isCancelled", "isReady"] : ["isCancelled"])
        }
        for handler in handlers { handler() }
        queue?.operationWasCancelled(self)
    }

    /// Registers `handler` to run once when the operation is cancelled, or
    /// runs it now if it already was.
    final func onCancel(_ handler: @escaping @Sendable () -> Void) {
        let runNow = withStateLock { state -> Bool in
            if state.isCancelled { return true }
            if state.phase == .finished { return false }
            extrasWhileLocked().cancellationHandlers.append(handler)
            return false
        }
        if runNow { handler() }
    }

    /// Registers `callback` to run once the operation retires, or runs it now
    /// if it already has.
    final func onRetire(_ callback: @escaping @Sendable () -> Void) {
        let runNow = withStateLock { state -> Bool in
            if state.isRetired { return true }
            extrasWhileLocked().retireCallbacks.append(callback)
            return false
        }
        if runNow { callback() }
    }

    // MARK: Announcements from subclasses

    /// Feeds a subclass's `didChangeValue(forKey:)` into the state machine.
    final func handleAnnouncement(_ key: String) {
        switch key {
        case "isFinished":
            if isFinished { finish(announced: true) }
        case "isExecuting":
            if isExecuting { withStateLock { $0.markExecuting() } }
        case "isReady":
            let queue = withStateLock { state in state.isEnqueued ? storedQueue : nil }
            queue?.operationReadinessMayHaveChanged(self)
        case "isCancelled":
            guard isCancelled else { return }
            var queue: OperationQueue?
            let outcome = withStateLock { state -> OperationState.CancelOutcome in
                let outcome = state.cancel()
                if outcome.changed, outcome.wasPending, state.isEnqueued { queue = storedQueue }
                return outcome
            }
            if outcome.changed { queue?.operationWasCancelled(self) }
        default:
            break
        }
    }

    // MARK: Properties with side effects

    final func setQueuePriority(_ priority: QueuePriority) {
        let observed = loadState().isObserved
        if observed { notifyWillChange(["queuePriority"]) }
        var queue: OperationQueue?
        withStateLock { state in
            state.priorityIndex = priority.index
            if state.isEnqueued, state.phase == .pending, !state.hasStarted { queue = storedQueue }
        }
        if observed { notifyDidChange(["queuePriority"]) }
        queue?.operationPriorityDidChange(self)
    }

    final func setCompletionBlock(_ block: (@Sendable () -> Void)?) {
        let observed = loadState().isObserved
        if observed { notifyWillChange(["completionBlock"]) }
        let refused = withStateLock { state -> Bool in
            if block != nil, state.phase != .pending || state.hasStarted { return true }
            if block == nil, extras == nil { return false }
            extrasWhileLocked().completionBlock = block
            return false
        }
        if refused {
            let when = isFinished ? "after it finished" : "while it is executing"
            OperationMisuse.report(
                .completionBlockAfterStart,
                subject: misuseSubject,
                "was given a completion block \(when). Set completionBlock before the operation starts (before adding it to a queue)."
            )
            return
        }
        if observed { notifyDidChange(["completionBlock"]) }
    }
}

/// A temporary change of the calling thread's nice value for `threadPriority`.
struct ThreadPriorityChange {
    let previous: Int32

    /// Applies `priority` (0.0 ... 1.0, 0.5 = unchanged) to the calling thread.
    static func apply(_ priority: Double, context: ThreadContext) -> ThreadPriorityChange? {
        guard priority != 0.5, let current = Platform.currentNice() else { return nil }
        let offset = priority < 0.5 ? (0.5 - priority) * 2 * 19 : -(priority - 0.5) * 2 * 20
        let target = Int32(max(-20, min(19, Double(current) + offset.rounded())))
        guard target != current else { return nil }
        if target < current, !Platform.canRaisePriority { return nil }
        // Lowering cannot be undone without privilege: only do it on a pool
        // worker, which is retired afterwards.
        if target > current, !Platform.canRaisePriority, context.worker == nil { return nil }
        guard Platform.setCurrentNice(target) else { return nil }
        return ThreadPriorityChange(previous: current)
    }

    func restore(context: ThreadContext) {
        if !Platform.setCurrentNice(previous) {
            context.worker?.retireAfterCurrentJob = true
        }
    }
}
