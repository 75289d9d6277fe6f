extension OperationQueue {
    /// A multi-line report of the queue's state, for when something seems
    /// stuck: its settings and, for each unfinished operation in add order,
    /// its state and why it is not running yet (for example the unfinished
    /// dependencies it waits for, or a suspended queue).
    ///
    /// The report is a snapshot; operations may change while it is built.
    public func diagnostics() -> String {
        let (operations, suspended, width, executing, ready, pool) = lock.withLock {
            (scheduler.operations, scheduler.isSuspended, scheduler.width, scheduler.executing,
             scheduler.readyCount, WorkerPool.shared.snapshotDescriptionWithoutLock)
        }
        var lines: [String] = []
        lines.append("\(misuseSubject): \(operations.count) unfinished, \(executing) executing, \(ready) ready"
            + ", maxConcurrentOperationCount \(width)\(suspended ? ", SUSPENDED (nothing starts until isSuspended = false)" : "")")
        for operation in operations {
            lines.append("  " + operation.diagnosticLine(queueSuspended: suspended))
        }
        lines.append("  pool: \(pool)")
        return lines.joined(separator: "\n")
    }
}

extension Operation {
    /// One line: the operation, its state and what it waits for.
    func diagnosticLine(queueSuspended: Bool) -> String {
        let state = loadState()
        var line = "\(misuseSubject): \(state)"
        switch state.phase {
        case .executing:
            line += isAsynchronous ? " (asynchronous: waits for its finish)" : ""
        case .finished:
            line += " (finished; retiring)"
        case .pending:
            let waiting = unfinishedDependencies()
            if !waiting.isEmpty {
                line += "; waits for " + waiting.prefix(5).map(\.misuseSubject).joined(separator: ", ")
                if waiting.count > 5 { line += " and \(waiting.count - 5) more" }
            } else if state.isReady && !isReady {
                line += "; its isReady override returns false"
            } else if queueSuspended {
                line += "; ready, queue suspended"
            } else {
                line += "; ready, waiting for a slot"
            }
        }
        return line
    }
}

extension WorkerPool {
    /// The pool's counters, read without taking its lock (for diagnostics
    /// built under another lock): approximate.
    var snapshotDescriptionWithoutLock: String {
        "queued jobs \(queuedJobCount.load(ordering: .relaxed)), spare capacity \(spareCapacity.load(ordering: .relaxed))"
    }
}
