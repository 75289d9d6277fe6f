extension Operation {
    /// Waits until the operation retires (finished and completion block run),
    /// or until `deadline` (monotonic nanoseconds). Returns whether it retired.
    @discardableResult
    final func performWait(deadline: UInt64?) -> Bool {
        let snapshot = loadState()
        if snapshot.isRetired { return true }
        unowned(unsafe) let context = ThreadContext.current
        // Waiting from the operation's own completion block: it has finished.
        if snapshot.isFinished, context.completing === self { return true }
        if let reason = waitDeadlockReason(context: context) {
            OperationMisuse.report(.waitDeadlock, subject: misuseSubject, reason)
            return false
        }
        // On the main thread, an operation of a main-thread queue can only
        // run if this thread runs it: do so while waiting.
        if context.isMainThread,
           let queue = withStateLock({ _ in storedQueue }),
           queue.runsOnMainThread {
            return queue.runOnCallingThread(until: { [unowned self] in self.loadState().isRetired }, deadline: deadline)
        }
        let signal = WaitSignal()
        let registered = withStateLock { state -> Bool in
            if state.isRetired { return false }
            extrasWhileLocked().retireCallbacks.append { signal.signal() }
            return true
        }
        guard registered else { return true }
        return WorkerPool.shared.blocking(context: context) {
            HangReport.wait(on: signal, deadline: deadline) { self.hangDescription() }
        }
    }

    /// What a stuck `waitUntilFinished()` reports: the operation and its queue.
    final func hangDescription() -> String {
        let queue = withStateLock { _ in storedQueue }
        if let queue { return "waitUntilFinished on \(misuseSubject), in:\n" + queue.diagnostics() }
        return "waitUntilFinished on " + diagnosticLine(queueSuspended: false) + " (not in a queue: it runs when someone calls start())"
    }

    /// Why waiting for this operation from the current context can never
    /// end, or nil if it can.
    final func waitDeadlockReason(context: ThreadContext) -> String? {
        guard let current = context.operation ?? context.completing else { return nil }
        if current === self {
            return "waits for itself from inside its own start()/main(); it cannot finish while it waits."
        }
        if dependsTransitively(on: current) {
            return "is waited for from inside \(current.misuseSubject), but depends (directly or indirectly) on it, so it can only start after the waiting operation finishes."
        }
        if let queue = context.queue,
           let ownQueue = withStateLock({ state in state.isEnqueued && !state.hasStarted ? storedQueue : nil }),
           ownQueue === queue,
           queue.isSerialForDeadlockCheck {
            return "is waited for from inside \(current.misuseSubject) on the serial queue \(queue.misuseSubject), behind which it is queued; it can only start after the waiting operation finishes."
        }
        return nil
    }

    /// Whether `other` is reachable along unfinished dependency edges.
    final func dependsTransitively(on other: Operation) -> Bool {
        var seen: Set<ObjectIdentifier> = [ObjectIdentifier(self)]
        var stack = unfinishedDependencies()
        while let next = stack.popLast() {
            if next === other { return true }
            if seen.insert(ObjectIdentifier(next)).inserted {
                stack.append(contentsOf: next.unfinishedDependencies())
            }
        }
        return false
    }
}
