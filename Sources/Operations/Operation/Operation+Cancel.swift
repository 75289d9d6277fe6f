// Cancellation: the base `cancel()`, cancellation handlers, and the
// reaction to a subclass announcing `isCancelled`.

extension Operation {
    /// The base `cancel()`.
    final func performCancel() {
        cancelWithoutQueueNews()?.memberReadinessMayHaveChanged(self)
    }

    /// The base `cancel()`, except that the owning queue is not told: returns
    /// the queue to tell that the operation's readiness may have changed, or
    /// nil if nothing changed, no queue owns it, or the queue was told
    /// already (a cancellation announced to observers tells it before their
    /// "did change"). `cancelAllOperations()` tells its queue once for a
    /// batch.
    final func cancelWithoutQueueNews() -> OperationQueue? {
        let snapshot = loadState()
        guard !snapshot.isCancelled, !snapshot.isFinished else { return nil }
        // Finished as the class reports it: an operation whose `isFinished`
        // already reads true is not cancelled, as in Foundation, which asks
        // the getter (its body may have returned while the rest of its
        // finish is still under way; probe 27). An override is user code,
        // read here, before any lock.
        if reportedFinished { return nil }
        let baseFinishCounts = !overrides(.isFinished)
        var consequences = CancelConsequences()
        var queueTold = false
        let identity = Unmanaged.passUnretained(self).toOpaque()
        let start = withStateLock { state -> OperationState.CancelStart in
            let start = state.beginCancel(baseFinishCounts: baseFinishCounts)
            switch start {
            case .cancelled(let outcome): takeCancelConsequencesLocked(&state, outcome, into: &consequences)
            case .announce: CancelAnnouncements.shared.claim(identity)
            case .nothing, .awaitAnnouncement: break
            }
            return start
        }
        switch start {
        case .nothing:
            return nil
        case .cancelled:
            break
        case .awaitAnnouncement:
            // Another call announces the change: wait for it to set the
            // flag, or set it here when waiting could not end.
            let settled = CancelAnnouncements.shared.awaitClaimant(of: identity) { loadState().isCancelAnnouncing }
            if settled { return nil }
            let changed = withStateLock { state -> Bool in
                let outcome = state.forceCancel(baseFinishCounts: baseFinishCounts)
                if outcome.changed { takeCancelConsequencesLocked(&state, outcome, into: &consequences) }
                return outcome.changed
            }
            guard changed else { return nil }
            // The queue hears now, not in a caller's batch: the announcing
            // call's observers may be waiting for this operation to finish.
            consequences.queue?.memberReadinessMayHaveChanged(self)
            queueTold = true
        case .announce(let includesReadiness):
            // As in Foundation, cancelling an operation that has not started
            // announces `isReady` too (it is ready now, whatever its
            // dependencies).
            let keys = includesReadiness ? ["isCancelled", "isReady"] : ["isCancelled"]
            notifyWillChange(keys)
            let (changed, awaited) = withStateLock { state -> (Bool, Bool) in
                let (outcome, awaited) = state.completeCancel(baseFinishCounts: baseFinishCounts)
                if outcome.changed { takeCancelConsequencesLocked(&state, outcome, into: &consequences) }
                return (outcome.changed, awaited)
            }
            CancelAnnouncements.shared.release(identity, wakeWaiters: awaited)
            // The queue hears before the observers: one of them may wait
            // for the operation to finish, which a cancelled operation in a
            // queue does once its queue retires it (as in Foundation, whose
            // queue reacts to the `isReady` change among the observers).
            if changed {
                consequences.queue?.memberReadinessMayHaveChanged(self)
                queueTold = true
            }
            // The same keys as announced. If the operation finished in
            // between, `completeCancel` still set the flag, so that the
            // announced `isCancelled` change happened.
            notifyDidChange(keys)
            guard changed else { return nil }
        }
        let queue = consequences.queue
        if TraceRecorder.isActive { TraceRecorder.shared.record(.cancelled, self, queue: nil) }
        if let cancelledAt = consequences.cancelledAt { OperationInstrumentation.emit(.cancelled, self, queue: queue, at: cancelledAt.time) }
        // An `isReady` override is reported by the queue, when it re-reads it.
        if let readyAt = consequences.readyAt, !overrides(.isReady) { OperationInstrumentation.emit(.ready, self, queue: queue, at: readyAt.time) }
        consequences.body?.cancel()
        for handler in consequences.handlers { handler() }
        return queueTold ? nil : queue
    }

    /// Whether cancelling this operation may call user code before the
    /// operation is cancelled: an overridden `cancel()` or `isFinished`, or
    /// observers. (Cancellation handlers run afterwards.)
    final var cancellationMayRunUserCode: Bool {
        overrides(.cancel) || overrides(.isFinished) || loadState().isObserved
    }

    /// What follows from a cancellation, taken under the lock of the step
    /// that set the flag, and carried out after it.
    private struct CancelConsequences {
        var handlers: [@Sendable () -> Void] = []
        var body: AsyncBodyCancellation?
        var queue: OperationQueue?
        var readyAt: OperationInstrumentation.Stamp?
        var cancelledAt: OperationInstrumentation.Stamp?
    }

    /// Takes what follows from the cancellation `outcome` describes. The
    /// state lock is held.
    @inline(__always)
    private final func takeCancelConsequencesLocked(
        _ state: inout OperationState,
        _ outcome: OperationState.CancelOutcome,
        into consequences: inout CancelConsequences
    ) {
        // Timed under the lock, so that a finish on another thread, which
        // needs this lock, has a later time (probe 13).
        if OperationInstrumentation.isActive { consequences.cancelledAt = OperationInstrumentation.Stamp() }
        // Cancelling makes a waiting operation ready (as its base state);
        // timed under the lock, like its other readiness changes.
        if !outcome.wasReady { consequences.readyAt = .readinessChange(of: state) }
        if state.takeCancellationHandling() {
            consequences.body = takeBodyCancellationLocked()
            if let extras {
                consequences.handlers = extras.cancellationHandlers
                extras.cancellationHandlers = []
            }
        }
        consequences.queue = queueForNews(state)
    }

    /// A subclass announced `isCancelled`: if its getter reports true, run
    /// the cancellation handlers (once) and let the queue re-read the
    /// operation's readiness. The announcement changes no state by itself.
    final func cancellationWasAnnounced() {
        guard isCancelled else { return }
        var handlers: [@Sendable () -> Void] = []
        var body: AsyncBodyCancellation?
        let queue = withStateLock { state -> OperationQueue? in
            if state.takeCancellationHandling() {
                body = takeBodyCancellationLocked()
                if let extras {
                    handlers = extras.cancellationHandlers
                    extras.cancellationHandlers = []
                }
            }
            return queueForNews(state)
        }
        body?.cancel()
        for handler in handlers { handler() }
        queue?.memberReadinessMayHaveChanged(self)
    }

    /// Registers `handler` to run once when the operation is cancelled, or
    /// runs it now if it already was. Dropped without running if the
    /// operation finishes first.
    final func onCancel(_ handler: @escaping @Sendable () -> Void) {
        let runNow = withStateLock { state -> Bool in
            if state.isFinished { return false }
            if state.isCancelled || state.hasHandledCancellation { return true }
            extrasWhileLocked().cancellationHandlers.append(handler)
            return false
        }
        if runNow { handler() }
    }
}
