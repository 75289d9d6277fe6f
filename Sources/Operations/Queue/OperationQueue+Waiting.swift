extension OperationQueue {
    /// Blocks until the queue is empty or `timeout` passes. Returns whether
    /// the queue emptied.
    ///
    /// Like ``waitUntilAllOperationsAreFinished()``, with a bound: useful in
    /// tests and wherever a hang must become a diagnosable failure. Any
    /// timeout works, including `.zero` (which only reads the state) and
    /// durations too large to represent as a deadline (treated as no
    /// deadline: such a wait is checked for deadlocks, and reported, like the
    /// untimed one). A wait with a deadline always ends, so it is never reported
    /// as ``OperationMisuse/Code/waitDeadlock``: if the queue can only drain
    /// after the caller, it returns false at the deadline.
    ///
    /// Foundation has no timed wait, and projects often add their own under
    /// this name (OTCore's takes a `DispatchTimeInterval`). This one is the
    /// disfavoured overload, so that a call such as `timeout: .seconds(1)`,
    /// which both would accept, picks the project's own and still compiles.
    @_disfavoredOverload
    @available(*, noasync, message: "Blocks a thread; in async code use `await queue.drained()`.")
    public func waitUntilAllOperationsAreFinished(timeout: Duration) -> Bool {
        waitUntilIdle(deadline: Deadline(after: timeout))
    }

    /// Whether the queue's operations run on the main thread.
    var runsOnMainThread: Bool { kind == .mainThread }

    /// Waits until the queue holds no operation and no retirement is in
    /// flight, or until `deadline`. Returns whether it became idle.
    @discardableResult
    final func waitUntilIdle(deadline: Deadline?) -> Bool {
        unowned(unsafe) let context = ThreadContext.current
        // A deadline already passed only reads the state (see
        // `Operation.performWait`).
        if let deadline, deadline.hasPassed() { return lock.withLock { state.isIdle } }
        // From the observers of a finished operation: the queue slot it kept
        // for them may be needed by the work waited for.
        OperationQueue.threadWillBlock(context)
        if runsOnMainThread, context.isOnMainQueue {
            // Waiting for its own queue from inside one of its operations can
            // never end there either (probe 51: it hung silently).
            if deadline == nil, let verdict = WaitRegistry.shared.verdictForInlineWait(
                WaitRegistry.Record(running: context.runningOperationsIncludingTask, target: .queue(self))
            ) {
                reportWaitThatNeverEnds(verdict.reason)
                return false
            }
            // From the observers of one of its own finished operations, as
            // below: that retirement must not keep the wait waiting for
            // itself (probe 53: it hung silently on `main` only).
            let stepsAside = retirementsSteppingAside(context)
            if stepsAside > 0 { lock.withLock { state.retirementStepsAside(true, count: stepsAside) } }
            let idle = runOnCallingThread(until: { [unowned self] in self.lock.withLock { self.state.isIdle } }, deadline: deadline) {
                .queue(self, "waitUntilAllOperationsAreFinished on:")
            }
            if stepsAside > 0 { stopSteppingAside(stepsAside) }
            return idle
        }
        if let deadline, deadline.hasPassed() { return lock.withLock { state.isIdle } }
        // As for an operation's wait: only an unbounded wait is checked and
        // registered.
        let record = deadline == nil ? WaitRegistry.Record(running: context.runningOperationsIncludingTask, target: .queue(self)) : nil
        if let record, let verdict = WaitRegistry.shared.begin(record) {
            let reason = verdict.reason
            reportWaitThatNeverEnds(reason)
            return false
        }
        defer { if let record { WaitRegistry.shared.end(record) } }
        // Inside the retirement of one of this queue's operations (its
        // observers): that retirement must not keep this wait waiting for
        // itself.
        let stepsAside = retirementsSteppingAside(context)
        let signal = WaitSignal()
        let key = lock.withLock { () -> Int? in
            if stepsAside > 0 { state.retirementStepsAside(true, count: stepsAside) }
            if state.isIdle { return nil }
            return drainWaiters.add { signal.signal() }
        }
        var idle = true
        var neverEnds: String?
        if let key {
            let outcome = WorkerPool.shared.blocking {
                WaitRegistry.block(on: signal, deadline: deadline, record: record) {
                    .queue(self, "waitUntilAllOperationsAreFinished on:")
                }
            }
            idle = outcome == .signalled
            if !idle {
                let (removed, idleNow) = lock.withLock { (drainWaiters.remove(key), state.isIdle) }
                withExtendedLifetime(removed) {}
                // A verdict confirmed just as the queue drained is moot.
                idle = idleNow
            }
            if !idle, case .neverEnds(let reason) = outcome { neverEnds = reason }
        }
        if stepsAside > 0 { stopSteppingAside(stepsAside) }
        if let neverEnds {
            reportWaitThatNeverEnds(neverEnds)
        }
        return idle
    }

    /// The retirements of this queue that the calling thread is inside,
    /// which must not keep its wait for the queue waiting for themselves:
    /// - one if an operation it runs is a finished operation of this queue
    ///   (it is telling that operation's observers);
    /// - those its drain loop completed but has not settled yet (the wait
    ///   comes from the `deinit` of an operation the loop let go of);
    /// - one if it is letting go of an operation of this queue whose
    ///   retirement it settles right after (a `deinit` again).
    private func retirementsSteppingAside(_ context: ThreadContext) -> Int {
        let identity = Unmanaged.passUnretained(self).toOpaque()
        var count = context.runningOperations.contains { $0.loadState().isFinished && $0.belongs(to: self) } ? 1 : 0
        if context.drainClaimQueue?.toOpaque() == identity { count += context.drainOwedRetirements }
        if context.releasingRetirementOf?.toOpaque() == identity { count += 1 }
        return count
    }

    /// Counts the `count` retirements that stepped aside for a wait again,
    /// once the wait has ended.
    private func stopSteppingAside(_ count: Int) {
        let effects = lock.withLock { () -> QueueEffects in
            state.retirementStepsAside(false, count: count)
            return takeEffectsLocked()
        }
        effects.perform(on: self)
    }

    /// Reports a wait for this queue that can never end (`reason`: the
    /// verdict's explanation). Call with no lock held: it runs the misuse
    /// handler.
    private func reportWaitThatNeverEnds(_ reason: String) {
        OperationMisuse.report(.waitDeadlock, subject: .queue(self), "cannot be waited for here: the wait \(reason) Wait from outside the queue, or use a completion block or a dependency.")
    }

    /// Runs this queue's operations on the calling thread until `done`
    /// returns true or `deadline` passes: how the main thread waits for
    /// `OperationQueue.main` without deadlocking. Returns whether `done`.
    ///
    /// A wait still blocked after ``OperationReporting/waitWarningThreshold``
    /// is reported once, with `describe`, as every other blocking wait is
    /// (probe 51: from a main-dispatch-queue block it hung silently).
    final func runOnCallingThread(until done: () -> Bool, deadline: Deadline?, describe: () -> HangDescription) -> Bool {
        unowned(unsafe) let context = ThreadContext.current
        // Only a wait that may outlast the threshold is reported.
        var warnAt: Deadline? = HangReport.threshold.flatMap { threshold in
            let at = Deadline(nanosecondsFromNow: threshold)
            if let deadline, deadline <= at { return nil }
            return at
        }
        while !done() {
            let now = monotonicNanoseconds()
            if let deadline, deadline.hasPassed(now: now) { return false }
            if let warning = warnAt, warning.hasPassed(now: now), let threshold = HangReport.threshold {
                warnAt = nil
                HangReport.emit(describe(), threshold: threshold)
                continue
            }
            let signal = WaitSignal()
            lock.lock()
            let next = state.popNext()?.takeUnretainedValue()
            if let next {
                state.drainerStarted()
                state.drainerBusy(true)
                // Sent once: not again for an operation a drain loop gave
                // back (`DrainClaim`).
                if !next.queueLink.has(QueueLink.Flags.givenBack) { emitLocked(.started(next)) }
                if TraceRecorder.isActive { TraceRecorder.shared.record(.started, next, queue: self) }
            } else {
                changeWaiters.append(signal)
            }
            let customStart = next?.queueLink.has(QueueLink.Flags.customStart) ?? false
            lock.unlock()
            guard let operation = next else {
                // Re-check at least every 50 ms (an asynchronous operation
                // may finish without the queue signalling this waiter).
                _ = signal.wait(deadline: Deadline.earliest(deadline, Deadline(nanosecondsFromNow: 50_000_000)))
                continue
            }
            if OperationInstrumentation.isActive { OperationInstrumentation.emit(.started, operation, queue: self) }
            let savedQueue = context.queueReference
            context.queueReference = Unmanaged.passUnretained(self)
            var plan = operation.startFromQueue(customStart: customStart, for: self)
            context.queueReference = savedQueue
            // As a drain loop does: the queue's observers hear the finished
            // operation leave (`operationCount`, `operations`) around its
            // retirement, before its completion block is handed on.
            let announces = plan != nil && observed.load(ordering: .relaxed)
            if announces { notifyWillChange(Self.contentKeys) }
            // This thread's reference may be the operation's last (it may
            // have finished elsewhere, as a custom `start()` or an `async`
            // body can): it is dropped after the lock below is released,
            // since the release may run its `deinit`. Under the lock, the
            // plan holds the operation whenever it is used.
            defer { withExtendedLifetime(operation) {} }
            // Unretained: `plan` holds them until it completes, below.
            var readied: [Unmanaged<Operation>] = []
            plan?.releaseDependents(collectingFor: self, into: &readied)
            let countsRetirement = plan?.countsRetirement
            lock.lock()
            state.drainerBusy(false)
            state.drainerStopped()
            for entry in readied {
                entry._withUnsafeGuaranteedRef { ready in
                    let current = ready.loadState()
                    state.apply(ready, ready: current.isBaseReady, cancelled: current.isCancelled)
                }
            }
            readied.removeAll()
            var released: Unmanaged<Operation>?
            if let countsRetirement {
                released = state.unlink(operation, retirementPending: countsRetirement)
                emitLocked(.finished(operation))
            }
            let effects = takeEffectsLocked()
            lock.unlock()
            // The list's reference goes before the retirement completes.
            released?.release()
            if announces { notifyDidChange(Self.contentKeys) }
            if let finished = plan.take() {
                let settle = finished.countsRetirement
                finished.complete(settle: settle)
            }
            effects.perform(on: self)
        }
        return true
    }
}
