extension OperationQueue {
    /// Blocks until the queue is empty or `timeout` passes. Returns whether
    /// the queue emptied.
    ///
    /// Like ``waitUntilAllOperationsAreFinished()``, with a bound: useful in
    /// tests and wherever a hang must become a diagnosable failure.
    @available(*, noasync, message: "Blocks a thread; in async code use `await queue.drained()`.")
    public func waitUntilAllOperationsAreFinished(timeout: Duration) -> Bool {
        waitUntilEmpty(deadline: Self.deadline(after: timeout))
    }

    static func deadline(after timeout: Duration) -> UInt64 {
        let (seconds, attoseconds) = timeout.components
        let nanoseconds = max(0, seconds) &* 1_000_000_000 &+ max(0, attoseconds) / 1_000_000_000
        return monotonicNanoseconds() &+ UInt64(nanoseconds)
    }

    /// Whether the queue's operations run on the main thread.
    var runsOnMainThread: Bool { kind == .mainThread }

    /// Whether waiting, from inside this queue's operation, for another of
    /// its operations that has not started can never end.
    var isSerialForDeadlockCheck: Bool {
        lock.withLock { scheduler.width == 1 || kind == .mainThread }
    }

    @discardableResult
    final func waitUntilEmpty(deadline: UInt64?) -> Bool {
        unowned(unsafe) let context = ThreadContext.current
        if context.queue === self, let current = context.operation ?? context.completing {
            OperationMisuse.report(
                .waitDeadlock,
                subject: misuseSubject,
                "was waited for (waitUntilAllOperationsAreFinished) from inside its own operation \(current.misuseSubject), which cannot finish while it waits. Wait from outside the queue, or use a completion block or a dependency."
            )
            return false
        }
        if runsOnMainThread, context.isMainThread {
            return runOnCallingThread(until: { [unowned self] in self.operationCount == 0 }, deadline: deadline)
        }
        let signal = WaitSignal()
        defer { waitForRetirementsInProgress() }
        let empty = lock.withLock { () -> Bool in
            if scheduler.count == 0 { return true }
            // On a timeout the callback stays until the queue drains; it only
            // signals this (then unused) signal.
            scheduler.drainCallbacks.append { signal.signal() }
            return false
        }
        if empty { return true }
        return WorkerPool.shared.blocking(context: context) {
            HangReport.wait(on: signal, deadline: deadline) { "waitUntilAllOperationsAreFinished on:\n" + diagnostics() }
        }
    }

    /// Waits for exactly `operations` (the ones an `addOperations` call
    /// accepted). Waits for the last first: by then most others are done,
    /// so the rest cost one atomic load each.
    final func waitForOperations(_ operations: [Operation]) {
        for operation in operations.reversed() {
            guard operation.performWait(deadline: nil) else { return }
        }
        waitForRetirementsInProgress()
    }

    /// Runs this queue's operations on the calling thread until `done`
    /// returns true or `deadline` passes: how the main thread waits for
    /// `OperationQueue.main` without deadlocking. Returns whether `done`.
    final func runOnCallingThread(until done: () -> Bool, deadline: UInt64?) -> Bool {
        unowned(unsafe) let context = ThreadContext.current
        while !done() {
            let now = monotonicNanoseconds()
            if let deadline, now >= deadline { return false }
            let signal = WaitSignal()
            lock.lock()
            let next = scheduler.popNext()
            if next != nil {
                scheduler.drainers += 1
                scheduler.busyDrainers += 1
            } else {
                scheduler.changeWaiters.append(signal)
            }
            lock.unlock()
            guard let operation = next else {
                // Re-check at least every 50 ms (an asynchronous operation
                // may finish without the queue signalling this waiter).
                _ = signal.wait(deadline: min(deadline ?? .max, now &+ 50_000_000))
                continue
            }
            let savedQueue = context.queueReference
            context.queue = self
            let retire = startAsDrainStep(operation, context: context)
            context.queueReference = savedQueue
            lock.lock()
            scheduler.busyDrainers -= 1
            scheduler.drainers -= 1
            let released = retire ? scheduler.retire(operation) : nil
            let selfRelease = retire ? takeSelfRetainIfEmptyLocked() : nil
            let wakeups = scheduler.takeWakeups()
            let tickets = scheduler.drainersNeeded()
            lock.unlock()
            _ = consume released
            if retire {
                operation.completeRetirement()
                emit(.finished(operation))
                if wakeups.drained { emit(.drained) }
            }
            selfRelease?.release()  // the caller holds the queue
            wakeups.fire()
            startDrainers(tickets)
        }
        return true
    }

}

extension Operation {
    /// Blocks until the operation has finished (and its completion block
    /// has run) or `timeout` passes. Returns whether it finished.
    @available(*, noasync, message: "Blocks a thread; in async code use `await operation.finished()`.")
    public func waitUntilFinished(timeout: Duration) -> Bool {
        performWait(deadline: OperationQueue.deadline(after: timeout))
    }
}
