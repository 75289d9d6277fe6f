// Setters with rules or side effects: priority, completion block, thread
// priority.

extension Operation {
    final func setQueuePriority(_ priority: QueuePriority) {
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
        let observed = loadState().isObserved
        if block != nil {
            let state = loadState()
            if state.hasBaseStarted || state.isFinished {
                let when = state.isFinished || state.isBaseFinished ? "after it finished" : "while it is executing"
                OperationMisuse.report(
                    .completionBlockAfterStart,
                    subject: .operation(self),
                    "was given a completion block \(when). Set completionBlock before the operation starts (before adding it to a queue)."
                )
                return
            }
        }
        if observed { notifyWillChange(["completionBlock"]) }
        let replaced = withStateLock { _ -> (@Sendable () -> Void)? in
            if block == nil && extras == nil { return nil }
            let old = extrasWhileLocked().completionBlock
            extras?.completionBlock = block
            return old
        }
        // The replaced block may capture user values: released after unlocking.
        withExtendedLifetime(replaced) {}
        if observed { notifyDidChange(["completionBlock"]) }
    }

    final func setThreadPriority(_ priority: Double) {
        guard priority >= 0, priority <= 1, !priority.isNaN else {
            OperationMisuse.report(
                .invalidThreadPriority,
                subject: .operation(self),
                "was given threadPriority \(priority); it must be between 0.0 and 1.0."
            )
            return
        }
        let observed = loadState().isObserved
        if observed { notifyWillChange(["threadPriority"]) }
        withStateLock { state in
            extrasWhileLocked().threadPriority = priority
            state.hasCustomThreadPriority = priority != 0.5
        }
        if observed { notifyDidChange(["threadPriority"]) }
    }
}
