// Setters with rules or side effects: priority, completion block, thread
// priority.

extension Operation {
    final func setQueuePriority(_ priority: QueuePriority) {
        // As in Foundation, setting the value it already has changes nothing
        // and tells no observer.
        guard loadState().priorityIndex != priority.index else { return }
        let observed = loadState().isObserved
        if observed { notifyWillChange(["queuePriority"]) }
        let queue = withStateLock { state -> OperationQueue? in
            state.priorityIndex = priority.index
            return state.hasBaseStarted ? nil : queueForNews(state)
        }
        if observed { notifyDidChange(["queuePriority"]) }
        queue?.memberPriorityChanged(self)
    }

    final func setCompletionBlock(_ block: (@Sendable () -> Void)?) {
        let snapshot = loadState()
        if block != nil, snapshot.hasBaseStarted || snapshot.isFinished || startedByQueue(snapshot) {
            // The chapter's rule, tolerated: refused only when a handler is
            // installed (the refused block is released by the caller's
            // frame, outside every lock).
            let when = snapshot.isFinished ? "after it finished" : "while it is executing"
            if OperationMisuse.reportTolerated(
                .completionBlockAfterStart,
                subject: .operation(self),
                "was given a completion block \(when); set completionBlock before the operation starts. With no misuse handler installed the block is accepted as on Darwin: it runs if the operation has not finished yet, and never runs if it has."
            ) { return }
        }
        let observed = snapshot.isObserved
        if observed { notifyWillChange(["completionBlock"]) }
        // As in Foundation, a block may be set at any time: one set before
        // the operation finishes (from its own body too) runs when it
        // finishes, since finishing takes the block under this lock; one set
        // after that never runs, and is released at once rather than kept.
        let released = withStateLock { state -> (@Sendable () -> Void)? in
            if state.isFinished { return block }
            if block == nil && extras == nil { return nil }
            let old = extrasWhileLocked().completionBlock
            extras?.completionBlock = block
            return old
        }
        // The replaced (or refused) block may capture user values: released
        // after unlocking.
        withExtendedLifetime(released) {}
        if observed { notifyDidChange(["completionBlock"]) }
    }

    /// For a class that overrides `start()` (whose base state never says
    /// "executing"): whether its queue has called that `start()` and it has
    /// not left the queue yet.
    private func startedByQueue(_ snapshot: OperationState) -> Bool {
        guard snapshot.isEnqueued, overrides(.start),
              let queue = withStateLock({ queueForNews($0) }) else { return false }
        return queue.hasStarted(self)
    }

    final func setThreadPriority(_ priority: Double) {
        // As in Foundation, the value only counts before the operation
        // starts: later it is ignored.
        let snapshot = loadState()
        guard !snapshot.hasBaseStarted, !snapshot.isFinished else { return }
        var priority = priority
        if !(priority >= 0 && priority <= 1) {
            // Tolerated: refused under a handler; otherwise clamped to
            // 0.0 ... 1.0, as Foundation does (NaN keeps the current value).
            if OperationMisuse.reportTolerated(
                .invalidThreadPriority,
                subject: .operation(self),
                "was given threadPriority \(priority); it must be between 0.0 and 1.0. With no misuse handler installed it is clamped to that range, as on Darwin."
            ) || priority.isNaN { return }
            priority = min(max(priority, 0), 1)
        }
        let observed = snapshot.isObserved
        if observed { notifyWillChange(["threadPriority"]) }
        withStateLock { state in
            extrasWhileLocked().threadPriority = priority
            state.hasCustomThreadPriority = priority != 0.5
        }
        if observed { notifyDidChange(["threadPriority"]) }
    }
}
