extension Operation {
    /// Blocks until the operation has finished (and its completion block
    /// has run) or `timeout` passes. Returns whether it finished.
    ///
    /// Any timeout works, including `.zero` and durations too large to
    /// represent as a deadline (treated as no deadline).
    @available(*, noasync, message: "Blocks a thread; in async code use `await operation.finished()`.")
    public func waitUntilFinished(timeout: Duration) -> Bool {
        performWait(deadline: Deadline(after: timeout))
    }

    /// Waits until the operation retires (finished and completion block
    /// run), or until `deadline`. Returns whether it retired.
    @discardableResult
    final func performWait(deadline: Deadline?) -> Bool {
        let snapshot = loadState()
        if snapshot.isRetired { return true }
        unowned(unsafe) let context = ThreadContext.current
        // From its own completion block or finishing observers: it has finished.
        if snapshot.isFinished, context.isRunning(self) { return true }
        // On the main thread, an operation of a main-thread queue can only
        // run if this thread runs it: do so while waiting.
        if context.isMainThread, let queue = owningQueueForAnalysis(), queue.runsOnMainThread {
            return queue.runOnCallingThread(until: { [unowned self] in self.loadState().isRetired }, deadline: deadline)
        }
        let record = WaitRegistry.Record(running: context.runningOperations, target: .operation(self))
        if let reason = WaitRegistry.shared.begin(record) {
            OperationMisuse.report(.waitDeadlock, subject: misuseSubject, "is waited for (waitUntilFinished) but can never finish: the wait \(reason)")
            return false
        }
        defer { WaitRegistry.shared.end(record) }
        let signal = WaitSignal()
        guard let key = addRetireWaiter({ signal.signal() }) else { return true }
        let retired = WorkerPool.shared.blocking {
            HangReport.wait(on: signal, deadline: deadline) { self.hangDescription() }
        }
        if !retired { removeRetireWaiter(key) }
        return retired
    }

    /// What a stuck wait for this operation reports: the operation and its queue.
    final func hangDescription() -> String {
        if let queue = owningQueueForAnalysis() {
            return "waitUntilFinished on \(misuseSubject), in:\n" + queue.diagnostics().description
        }
        return "waitUntilFinished on " + OperationQueue.Diagnostics.OperationReport(self, queue: nil).description
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
