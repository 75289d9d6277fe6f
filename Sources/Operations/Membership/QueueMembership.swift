// The membership protocol: the only calls an operation makes to the queue
// that owns it. An operation reports that its readiness may have changed,
// that its priority changed, that it finished, and that its retirement is
// done; the queue never writes the operation's own state.
//
// Lifetimes: an operation refers to its queue unretained (`membership`). The
// queue keeps itself alive (`retainedSelf`) while it holds operations or a
// retirement it counted is in flight, which covers every call here:
// - `memberFinished` is made while the operation is still a member;
// - `memberRetired` is made while the counted retirement is in flight;
// - `memberReadinessMayHaveChanged` and `memberPriorityChanged` are made
//   through a strong reference taken while the operation was a member
//   (`Operation.queueForNews`), or by the queue's own drain loop.
// Each of these calls releases the queue's self-retain, if it drops it, as
// its very last action.

extension OperationQueue {
    /// The operation's readiness may have changed (a dependency finished or
    /// was removed, it was cancelled, or its class announced `isReady` or
    /// `isCancelled`): read it as the class reports it and move the operation
    /// into or out of the ready lanes.
    final func memberReadinessMayHaveChanged(_ operation: Operation) {
        let custom = operation.overrides(.isReady)
        guard custom else {
            lock.lock()
            let current = operation.loadState()
            state.apply(operation, ready: current.isBaseReady, cancelled: current.isCancelled)
            let effects = takeEffectsLocked()
            lock.unlock()
            effects.perform(on: self)
            return
        }
        // Readiness is user code: read it outside the lock, and apply only
        // the newest evaluation (another notification may overtake this one).
        let epoch = lock.withLock { () -> UInt64? in
            guard operation.queueLink.has(QueueLink.Flags.linked),
                  !operation.queueLink.has(QueueLink.Flags.dispatched) else { return nil }
            return state.beginReadinessEvaluation(of: operation)
        }
        guard let epoch else { return }
        let ready = operation.reportedReady
        // The cheap path for cancelled operations follows the base state: only
        // then does the base `start()` skip the body.
        let cancelled = operation.loadState().isCancelled
        var change: (kind: OperationEvent.Kind, time: ContinuousClock.Instant)?
        lock.lock()
        if state.isNewestReadinessEvaluation(epoch, of: operation) {
            state.apply(operation, ready: ready, cancelled: cancelled)
            change = readinessChangeLocked(operation, ready: ready)
        }
        let effects = takeEffectsLocked()
        lock.unlock()
        effects.perform(on: self)
        if let change { OperationInstrumentation.emit(change.kind, operation, queue: self, at: change.time) }
    }

    /// Records the readiness just applied for an operation whose readiness is
    /// user code, and returns the event for the instruments if it changed
    /// (and they are installed). Call with `lock` held, so that the times
    /// order the operation's readiness events as they were applied.
    private func readinessChangeLocked(_ operation: Operation, ready: Bool) -> (kind: OperationEvent.Kind, time: ContinuousClock.Instant)? {
        let link = operation.queueLink
        guard link.has(QueueLink.Flags.linked), !link.has(QueueLink.Flags.dispatched),
              link.has(QueueLink.Flags.reportedReady) != ready else { return nil }
        operation.queueLink.flags ^= QueueLink.Flags.reportedReady
        guard OperationInstrumentation.isActive else { return nil }
        return (ready ? .ready : .notReady, .now)
    }

    /// The readiness of several members may have changed (a batch of
    /// `cancelAllOperations()`): like `memberReadinessMayHaveChanged` for
    /// each, in one lock acquisition. Only for operations whose readiness is
    /// the base state (their class does not override `isReady`).
    final func membersReadinessMayHaveChanged(_ operations: [Operation]) {
        lock.lock()
        for operation in operations {
            let current = operation.loadState()
            state.apply(operation, ready: current.isBaseReady, cancelled: current.isCancelled)
        }
        let effects = takeEffectsLocked()
        lock.unlock()
        effects.perform(on: self)
    }

    /// A queued operation's priority changed.
    final func memberPriorityChanged(_ operation: Operation) {
        lock.withLock { state.priorityChanged(operation) }
    }

    /// The operation finished (step 3 of the retirement path): it leaves the
    /// queue, its slot is freed, barriers advance, and more operations may
    /// start. `retirementPending` counts its observers and completion block
    /// as in flight until `memberRetired()`.
    ///
    /// With `keepingSlot`, an operation that holds a slot keeps it, as a
    /// drain loop's does, until the caller has told its
    /// `isExecuting`/`isFinished` observers and called `releaseKeptSlot(of:)`
    /// (Foundation's order: the slot starts its next operation after them).
    /// Returns whether the slot was kept.
    @discardableResult
    final func memberFinished(_ operation: Operation, retirementPending: Bool, keepingSlot: Bool = false) -> Bool {
        let isObserved = observed.load(ordering: .relaxed)
        if isObserved { notifyWillChange(Self.contentKeys) }
        lock.lock()
        let keeps = keepingSlot && operation.queueLink.has(QueueLink.Flags.holdsSlot)
        let released = state.unlink(operation, retirementPending: retirementPending, keepingSlot: keeps)
        emitLocked(.finished(operation))
        let effects = takeEffectsLocked()
        lock.unlock()
        // The caller still holds the operation: this drops only the list's
        // reference.
        released?.release()
        if isObserved {
            // Inside the finished operation's retirement, as a drain loop
            // tells them: a wait there for the operation returns at once,
            // and one for the queue leaves its retirement out (probe 57:
            // the wait for an `AsyncOperation` that had just left never
            // ended).
            operation.withThreadContext(queue: Unmanaged.passUnretained(self)) { notifyDidChange(Self.contentKeys) }
        }
        effects.perform(on: self)
        return keeps
    }

    /// A retirement counted by `memberFinished` is done (step 6).
    final func memberRetired() {
        lock.lock()
        state.retirementDone()
        let effects = takeEffectsLocked()
        lock.unlock()
        effects.perform(on: self)
    }

    /// The keys that change when operations are added or leave.
    static let contentKeys = ["operations", "operationCount", "progress"]
}

/// An operation that became ready and whose `isReady` observers are being
/// told on this thread before its queue hears of it (the queue is told
/// after they return, so that, as in Foundation's logs, they hear `isReady`
/// before `isExecuting`).
///
/// An observer may wait there for the operation itself (or for work that
/// needs it): the queue would then never hear of it (probe 55: the wait
/// never ended, even on an idle queue of its own). So a library wait made
/// on this thread first tells the queues of every operation pending here
/// (`admitAll`); telling a queue twice is harmless (it re-reads the
/// readiness and keeps an operation already in place).
struct PendingAdmission {
    /// Unretained: the announcing frame holds both until it pops the entry.
    let operation: Unmanaged<Operation>
    let queue: Unmanaged<OperationQueue>
    /// The dependency whose finish made the operation ready, if that is
    /// how it became ready: it may still hold a slot of its own queue,
    /// which it gives up only once its finish has been handled, after the
    /// observers have returned.
    let finished: Unmanaged<Operation>?
    var isAdmitted = false

    /// Runs `announce` (the observers' notification) with `operation`
    /// recorded as pending admission to `queue`, made ready by the finish
    /// of `finished` (if so); just runs it when the operation is in no
    /// queue.
    static func whileAnnouncing(_ operation: Operation, readyIn queue: OperationQueue?, after finished: Operation? = nil, _ announce: () -> Void) {
        guard let queue else { return announce() }
        ThreadContext.withCurrent {
            $0.pendingAdmissions.append(PendingAdmission(
                operation: .passUnretained(operation),
                queue: .passUnretained(queue),
                finished: finished.map { .passUnretained($0) }
            ))
        }
        announce()
        ThreadContext.withCurrent { _ = $0.pendingAdmissions.popLast() }
    }

    /// Tells the queues of the operations pending admission on this thread
    /// (once each). Call before blocking, with no lock held.
    static func admitAll(_ context: ThreadContext) {
        guard context.pendingAdmissions.contains(where: { !$0.isAdmitted }) else { return }
        var due: [PendingAdmission] = []
        for index in context.pendingAdmissions.indices where !context.pendingAdmissions[index].isAdmitted {
            context.pendingAdmissions[index].isAdmitted = true
            due.append(context.pendingAdmissions[index])
        }
        // Outside the array: telling a queue may read an `isReady`
        // override (user code), which may announce on this thread.
        for entry in due {
            entry.queue._withUnsafeGuaranteedRef { queue in
                entry.operation._withUnsafeGuaranteedRef { queue.memberReadinessMayHaveChanged($0) }
            }
            // The finished dependency gives up its slot now: at width 1 it
            // may be the one the operation needs (probe 55: the wait never
            // ended).
            entry.finished?._withUnsafeGuaranteedRef { finished in
                finished.owningQueueForAnalysis()?.releaseSlotEarly(of: finished)
            }
        }
    }
}
