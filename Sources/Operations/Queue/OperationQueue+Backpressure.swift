extension OperationQueue {
    /// The most unfinished operations the queue accepts, or nil (the
    /// default) for no bound.
    public var pendingLimit: Int? {
        lock.withLock { state.pendingLimit }
    }

    /// Bounds the number of unfinished operations, so that a producer
    /// cannot flood the queue (the chapter's advice, enforced).
    ///
    /// When the queue is full:
    /// - ``addOperationWhenRoom(_:)-(Operation)`` and the other `async` adds
    ///   suspend until there is room;
    /// - ``tryAddOperation(_:)`` returns false and leaves the operation
    ///   untouched;
    /// - the synchronous ``addOperation(_:)-5grj9`` and
    ///   ``addOperations(_:waitUntilFinished:)`` follow `policy`: `.block`
    ///   waits for room (on a pool worker, the pool compensates), `.reject`
    ///   cancels the operations (with their class's `cancel()` and the base
    ///   class's) and finishes them without running their work, instead of
    ///   adding them: their completion blocks still run. The operation is
    ///   started as a queue starts a cancelled one, on the calling thread:
    ///   the default `start()` skips `main()`; a class's own `start()` is
    ///   called, and must finish a cancelled operation without doing the
    ///   work, as Foundation asks of every such `start()`.
    ///
    /// A batch larger than the limit is accepted when the queue is empty, so
    /// that it cannot wait forever. Adds made from inside the queue's own
    /// work (operation bodies, `async` bodies and the tasks they create,
    /// tasks created by an ``AsyncOperation``'s `execute()` until it
    /// finishes, completion blocks, observers) are never held back (they
    /// could wait for themselves), so such adds
    /// can exceed the bound. Lowering the limit below the current count
    /// affects only later adds. When room is made, every waiting add that
    /// now fits goes ahead, in arrival order: a batch that does not fit yet
    /// does not hold back a smaller add behind it, and the room a waiting
    /// add is woken for stays its own (an add behind it, one that never
    /// waited, and ``tryAddOperation(_:)`` cannot take it). A barrier
    /// (``addBarrierBlock(_:)``) waits for room under `.block`, and is added
    /// beyond the bound under `.reject`: its block could not be seen
    /// refused, so it is never dropped. Misuse (an operation of
    /// another queue, an executing or finished one, one twice in a batch)
    /// is reported as an add with room reports it, before any wait or
    /// refusal for lack of room, and such an operation is left untouched.
    ///
    /// - Parameters:
    ///   - limit: At least 1, or nil to remove the bound. A value below 1 is
    ///     a misuse (``OperationMisuse/Code/invalidPendingLimit``).
    ///   - policy: What synchronous adds do when the queue is full:
    ///     ``PendingLimitPolicy/block`` (the default) or
    ///     ``PendingLimitPolicy/reject``.
    public func setPendingLimit(_ limit: Int?, policy: PendingLimitPolicy = .block) {
        if let limit, limit < 1 {
            OperationMisuse.report(
                .invalidPendingLimit,
                subject: .queue(self),
                "was given a pending limit of \(limit); use at least 1, or nil for no limit."
            )
            return
        }
        let effects = lock.withLock { () -> QueueEffects in
            state.pendingLimit = limit
            pendingLimitPolicy = policy
            return takeEffectsLocked()
        }
        effects.perform(on: self)
    }

    /// Adds `operation` if the pending limit leaves room, and returns true;
    /// otherwise returns false and leaves the operation untouched, so that
    /// it can be added later. Misuse (an operation already queued, executing
    /// or finished) is reported as by ``addOperation(_:)-5grj9``.
    @discardableResult
    public func tryAddOperation(_ operation: Operation) -> Bool {
        guard let accepted = admit(CollectionOfOne(operation), mode: .attempt, collecting: true) else { return false }
        return !accepted.isEmpty
    }

    /// Adds `operation`, suspending while the queue is at its pending limit.
    ///
    /// Named apart from ``addOperation(_:)-5grj9`` on purpose: an `async`
    /// overload of Foundation's name would be preferred in every `async`
    /// function, so that ported code calling `queue.addOperation(op)`
    /// there, as Foundation allows, would stop compiling without `await`.
    /// Without a pending limit this adds at once, as `addOperation(_:)`.
    ///
    /// Cancelling the awaiting task while it waits for room cancels the
    /// operation and returns without adding it: it still finishes, without
    /// running its work, and its completion block runs (as for
    /// ``PendingLimitPolicy/reject``, see ``setPendingLimit(_:policy:)``).
    public func addOperationWhenRoom(_ operation: Operation) async {
        await addOperationsWhenRoom([operation])
    }

    /// Wraps `block` in a ``BlockOperation`` and adds it, suspending while
    /// the queue is at its pending limit (see
    /// ``addOperationWhenRoom(_:)-(Operation)``).
    public func addOperationWhenRoom(_ block: @escaping @Sendable () -> Void) async {
        await addOperationsWhenRoom([makeBlockOperation(block)])
    }

    /// Adds `operations`, suspending while they do not fit under the
    /// pending limit (see ``addOperationWhenRoom(_:)-(Operation)``).
    public func addOperationsWhenRoom(_ operations: [Operation]) async {
        _ = await addOperationsReportingRefusal(operations)
    }

    /// `addOperationsWhenRoom(_:)`, returning the misuse when the wait for
    /// room could never end and a handler refused it (the operations were
    /// not added and are untouched), else nil.
    final func addOperationsReportingRefusal(_ operations: [Operation]) async -> OperationMisuse? {
        // Misuse is reported once, up front; only the rest waits for room
        // (and is refused if the wait is cancelled).
        let operations = pendingLimit != nil ? removingRefusedAdds(operations) : operations
        if operations.isEmpty { return nil }
        // This add's place in line once it has waited: kept across its
        // waits, so that a later add cannot take the room it is woken for.
        var ticket: Int?
        defer { if let ticket { leaveRoomLine(ticket) } }
        while true {
            if admit(operations, mode: .attempt, roomTicket: ticket) != nil { return nil }
            if Task.isCancelled {
                // Only what is still this call's to refuse (another thread
                // may have queued or started one meanwhile).
                refuseForLackOfRoom(operations.filter { $0.enqueueRefusal() == nil })
                return nil
            }
            if let refusal = await waitForRoomAsync(count: operations.count, ticket: &ticket) { return refusal }
        }
    }

    /// Suspends until there may be room for `count` operations, in line
    /// behind the adds that waited before (`ticket`: this add's place, set
    /// on its first wait). Returns the misuse when the wait could never end
    /// (reported; the operations are not added), as the blocking add does,
    /// else nil.
    private func waitForRoomAsync(count: Int, ticket: inout Int?) async -> OperationMisuse? {
        // Registered like a blocking wait for room, so that the deadlock
        // checks see what this body waits for (and other waits see it).
        let running = OperationTaskContext.ownOperation.map { [$0] } ?? []
        let record = WaitRegistry.Record(running: running, target: .room(self))
        if let verdict = WaitRegistry.shared.begin(record) {
            return reportNoRoomEver(verdict.reason)
        }
        defer { WaitRegistry.shared.end(record) }
        let gate = ResumeOnce()
        let deadlockWatch = WaitRegistry.shared.watch(record) { gate.resume() }
        defer { deadlockWatch?.cancel() }
        let place = LockedValue<Int?>(ticket)
        let watch = HangReport.watch { [self] in .queue(self, "await addOperation waits for room under the pending limit of:") }
        defer { watch?.cancel() }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                gate.install(continuation)
                let current = place.withLock { $0 }
                let registered = lock.withLock {
                    roomWaiters.wait(count, ticket: current, in: state, resume: { gate.resume() })
                }
                if let registered { place.withLock { $0 = registered } } else { gate.resume() }
            }
        } onCancel: {
            gate.resume()
        }
        // The caller keeps its place for its next wait, and leaves the line
        // when it is added or gives up.
        ticket = place.withLock { $0 }
        // A verdict confirmed just as room was made is moot.
        if let verdict = deadlockWatch?.verdict, !lock.withLock({ roomWaiters.fits(count, ticket: ticket, in: state) }) {
            return reportNoRoomEver(verdict.reason)
        }
        return nil
    }

    /// Reports an add that waits for room that can never come (`reason`:
    /// the wait's verdict).
    @discardableResult
    func reportNoRoomEver(_ reason: String) -> OperationMisuse {
        OperationMisuse.reportReturning(.waitDeadlock, subject: .queue(self), "is full (pending limit) and the add can never proceed: it \(reason) The operations were not added.")
    }
}

/// Resumes a continuation exactly once, from whichever of several paths
/// gets there first (room freed, task cancelled).
final class ResumeOnce: @unchecked Sendable {
    // @unchecked Sendable: `continuation` and `resumed` are guarded by `lock`.
    private let lock = PlatformLock()
    private var continuation: CheckedContinuation<Void, Never>?
    private var resumed = false

    func install(_ continuation: CheckedContinuation<Void, Never>) {
        let resumeNow = lock.withLock { () -> Bool in
            if resumed { return true }
            self.continuation = continuation
            return false
        }
        if resumeNow { continuation.resume() }
    }

    func resume() {
        let continuation = lock.withLock { () -> CheckedContinuation<Void, Never>? in
            resumed = true
            defer { self.continuation = nil }
            return self.continuation
        }
        continuation?.resume()
    }
}
