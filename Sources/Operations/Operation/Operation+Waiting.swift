extension Operation {
    /// Blocks until the operation has finished or `timeout` passes. Returns
    /// whether it finished. (Its completion block runs asynchronously and
    /// is not waited for, as in Foundation.)
    ///
    /// Any timeout works, including `.zero` (which only reads the state)
    /// and durations too large to represent as a deadline (treated as no
    /// deadline: such a wait is checked for deadlocks, and reported, like the
    /// untimed one). A wait with a deadline always ends, so it is never reported
    /// as ``OperationMisuse/Code/waitDeadlock``: if the operation can only
    /// finish after the caller, it returns false at the deadline.
    ///
    /// Foundation has no timed wait, and projects often add their own under
    /// this name (OTCore's takes a `DispatchTimeInterval`). This one is the
    /// disfavoured overload, so that a call such as `timeout: .seconds(1)`,
    /// which both would accept, picks the project's own and still compiles.
    @_disfavoredOverload
    @available(*, noasync, message: "Blocks a thread; in async code use `await operation.finished()`.")
    public func waitUntilFinished(timeout: Duration) -> Bool {
        performWait(deadline: Deadline(after: timeout))
    }

    /// Waits until the operation retires (finished, left its queue, its
    /// observers told), or until `deadline`. Returns whether it retired.
    @discardableResult
    final func performWait(deadline: Deadline?) -> Bool {
        let snapshot = loadState()
        if snapshot.isRetired { return true }
        unowned(unsafe) let context = ThreadContext.current
        // From its own completion block or finishing observers: it has
        // finished. (The block is handed on before the observers are told,
        // so it may run before the operation retires.)
        if snapshot.isFinished, context.isRunning(self) || context.isCompleting(self) { return true }
        // A deadline already passed only reads the state: nothing blocks,
        // so nothing this thread holds is let go early (probe 57: a `.zero`
        // wait freed a kept slot and reordered a serial queue).
        if let deadline, deadline.hasPassed() { return loadState().isRetired }
        // From the observers of a finished operation: its queue slot, kept
        // for them, may be what this operation needs.
        OperationQueue.threadWillBlock(context)
        // On the main thread (or in a block of the main dispatch queue), an
        // operation of a main-thread queue can only run if this thread runs
        // it: do so while waiting. The thread is checked first: the queue
        // check takes the operation's lock.
        if context.isOnMainQueue, let queue = owningQueueForAnalysis(), queue.runsOnMainThread {
            // Waiting for itself can never end there either (probe 51: it
            // hung silently).
            if deadline == nil, let verdict = WaitRegistry.shared.verdictForInlineWait(
                WaitRegistry.Record(running: context.runningOperationsIncludingTask, target: .operation(self))
            ) {
                reportWaitThatNeverEnds(verdict.reason)
                return false
            }
            return queue.runOnCallingThread(until: { [unowned self] in self.loadState().isRetired }, deadline: deadline) {
                self.hangDescription()
            }
        }
        if let deadline, deadline.hasPassed() { return loadState().isRetired }
        // Only a wait without a deadline can block forever: it is checked
        // (and registered, for other waits' checks). A bounded wait ends by
        // itself, so it neither is reported nor counts as blocking its thread.
        let record = deadline == nil ? WaitRegistry.Record(running: context.runningOperationsIncludingTask, target: .operation(self)) : nil
        if let record, let verdict = WaitRegistry.shared.begin(record) {
            let reason = verdict.reason
            reportWaitThatNeverEnds(reason)
            return false
        }
        defer { if let record { WaitRegistry.shared.end(record) } }
        let signal = WaitSignal()
        guard let key = addRetireWaiter({ signal.signal() }) else { return true }
        let outcome = WorkerPool.shared.blocking {
            WaitRegistry.block(on: signal, deadline: deadline, record: record) { self.hangDescription() }
        }
        guard outcome != .signalled else { return true }
        removeRetireWaiter(key)
        // A verdict confirmed just as the operation retired is moot.
        if loadState().isRetired { return true }
        if case .neverEnds(let reason) = outcome {
            reportWaitThatNeverEnds(reason)
        }
        return false
    }

    /// Reports a `waitUntilFinished` that can never end (`reason`: the
    /// verdict's explanation). Call with no lock held: it runs the misuse
    /// handler.
    private func reportWaitThatNeverEnds(_ reason: String) {
        OperationMisuse.report(.waitDeadlock, subject: .operation(self), "is waited for (waitUntilFinished) but can never finish: the wait \(reason)")
    }

    /// What a stuck wait for this operation reports: the operation and its
    /// queue, and the dependency cycle it is on (or else the first one found).
    /// `wait` names the call that waits.
    final func hangDescription(wait: String = "waitUntilFinished") -> HangDescription {
        let own = misuseSubject
        if let queue = owningQueueForAnalysis() {
            let diagnostics = queue.diagnostics()
            return HangDescription(
                text: "\(wait) on \(own), in:\n" + diagnostics.description,
                subject: .operation(self, in: queue),
                cycle: diagnostics.cycles.first { $0.contains(own) } ?? diagnostics.cycles.first
            )
        }
        let cycles = DependencyGraph.cycles(reachableFrom: [self])
        let described = cycles.map { $0.map(\.misuseSubject) }
        var lines = ["\(wait) on " + OperationQueue.Diagnostics.OperationReport(self, queue: nil, cycles: cycles).description]
        for cycle in described {
            lines.append("  cycle: " + cycle.joined(separator: " → ") + " (each depends on the next; cancel one to break it)")
        }
        return HangDescription(
            text: lines.joined(separator: "\n"),
            subject: .operation(self, in: nil),
            cycle: described.first { $0.contains(own) } ?? described.first
        )
    }

    /// The owning queue, retained, while the operation belongs to it.
    final func owningQueueForAnalysis() -> OperationQueue? {
        withStateLock { state in queueForNews(state) }
    }

    /// Whether `queue` owns this operation (it has not retired from it).
    final func belongs(to queue: OperationQueue) -> Bool {
        withStateLock { state in
            !state.isRetired && membership?.toOpaque() == Unmanaged.passUnretained(queue).toOpaque()
        }
    }

    /// Whether `other` is reachable along unfinished dependency edges.
    final func dependsTransitively(on other: Operation) -> Bool {
        var seen: Set<ObjectIdentifier> = [ObjectIdentifier(self)]
        var stack = dependencies.filter { !$0.loadState().isFinished }
        while let next = stack.popLast() {
            if next === other { return true }
            if seen.insert(ObjectIdentifier(next)).inserted {
                stack.append(contentsOf: next.dependencies.filter { !$0.loadState().isFinished })
            }
        }
        return false
    }
}
