// Adding operations: misuse checks, the pending limit, claiming and linking.
//
// The room check, the claim (marking the operation as owned) and the link
// happen under one acquisition of the queue's lock, so a refused add — no
// room under `.attempt`, `.reject`, or a misuse — leaves the operation
// exactly as it was.

extension OperationQueue {
    /// How an add behaves when the queue's pending limit is reached.
    enum AdmissionMode {
        /// Follow the policy: wait for room (`.block`) or refuse (`.reject`).
        case synchronous
        /// Return nil and leave the operations untouched.
        case attempt
    }

    /// Adds `operations` (as a barrier when `barrier` is true). Returns the
    /// ones accepted when `collecting` is true (otherwise an empty array), or
    /// nil when `mode` is `.attempt` and there was no room.
    ///
    /// Allocation-free for the common single add: the lists below are built
    /// only when something needs them.
    /// Adds one operation (`addOperation`): the common case, with no
    /// allocation and one acquisition of the lock. Anything unusual (an
    /// overridden state getter, a pending limit, instruments or the trace
    /// recorder) takes the general path, `admit(_:mode:barrier:collecting:)`.
    final func admitOne(_ operation: Operation) {
        guard !TraceRecorder.isActive, !OperationInstrumentation.isActive,
              !operation.overrides(.isReady), !operation.overrides(.isFinished), !operation.overrides(.isExecuting) else {
            admit(CollectionOfOne(operation), mode: .synchronous)
            return
        }
        // An add that does not give the operation to this queue gives back
        // the context it captured.
        let captured = OperationContextPropagation.isActive ? operation.captureContextIfNeeded() : nil
        defer { if let captured { operation.discardContextUnlessIn(self, captured: captured) } }
        let isObserved = observed.load(ordering: .relaxed)
        if isObserved { notifyWillChange(Self.contentKeys) }
        defer { if isObserved { notifyDidChange(Self.contentKeys) } }
        lock.lock()
        if state.pendingLimit != nil {
            // The room check and any wait for room belong to the general path.
            lock.unlock()
            admit(CollectionOfOne(operation), mode: .synchronous, contentAnnounced: true)
            return
        }
        if let (refusal, owner) = operation.claim(for: self) {
            lock.unlock()
            reportRefusedAdd(operation, refusal: refusal, owner: owner, batch: [operation])
            return
        }
        state.link(operation, barrier: false, customReadiness: false, customStart: operation.overrides(.start))
        emitLocked(.added(operation))
        let current = operation.loadState()
        state.apply(operation, ready: current.isBaseReady, cancelled: current.isCancelled)
        let effects = takeEffectsLocked()
        lock.unlock()
        effects.perform(on: self)
    }

    /// `contentAnnounced`: the caller already sent the will-change of the
    /// queue's content keys and sends the did-change itself.
    /// `prevalidated`: `removingRefusedAdds` already checked `operations`.
    @discardableResult
    final func admit<C: Collection<Operation>>(
        _ operations: C,
        mode: AdmissionMode,
        barrier: Bool = false,
        collecting: Bool = false,
        contentAnnounced: Bool = false,
        prevalidated: Bool = false,
        roomTicket waitingTicket: Int? = nil
    ) -> [Operation]? {
        // A batch with an operation that may not be added (finished,
        // executing, in a queue) is refused as a whole, as Foundation
        // raises before it adds any (probe 46: the others were added and
        // ran under a misuse handler). Only a duplicate within the batch
        // lets the rest through (its first occurrence counts). The check
        // reads each operation's state word once, without locks; a
        // refusal that races it is still reported below, by the claim.
        if !prevalidated, operations.count > 1, Self.batchMayBeRefused(operations) {
            let (valid, refusedOther) = validatedBatch(Array(operations))
            if refusedOther || valid.isEmpty { return [] }
            return admit(valid, mode: mode, barrier: barrier, collecting: collecting,
                         contentAnnounced: contentAnnounced, prevalidated: true, roomTicket: waitingTicket)
        }
        // A class that overrides `isExecuting` or `isFinished` reports its
        // own state: ask it before taking any lock (once: a batch's getters
        // were read above, or by `validatedBatch` when `prevalidated`).
        let gettersRead = prevalidated || operations.count > 1
        var refusedByGetter: Set<ObjectIdentifier> = []
        // The operations whose context this call captured: an operation
        // this call does not add gives its context back (see the end).
        var captured: [(operation: Operation, serial: UInt64)] = []
        if !gettersRead || OperationContextPropagation.isActive {
            operations.forEachBorrowed { operation in
                if !gettersRead, let refusal = operation.reportedEnqueueRefusal() {
                    reportRefusedAdd(operation, refusal: refusal, owner: nil, batch: [])
                    refusedByGetter.insert(ObjectIdentifier(operation))
                } else if OperationContextPropagation.isActive, let serial = operation.captureContextIfNeeded() {
                    captured.append((operation, serial))
                }
            }
        }
        defer {
            for (operation, serial) in captured { operation.discardContextUnlessIn(self, captured: serial) }
        }
        let total = operations.count - refusedByGetter.count
        guard total > 0 else { return [] }
        let isObserved = !contentAnnounced && observed.load(ordering: .relaxed)
        if isObserved { notifyWillChange(Self.contentKeys) }
        defer { if isObserved { notifyDidChange(Self.contentKeys) } }

        let tracing = TraceRecorder.isActive
        let instrumented = OperationInstrumentation.isActive
        // Instruments are told after the lock is released, when the queue may
        // already have started the operation: the event carries the time of
        // the add itself.
        let addedAt: ContinuousClock.Instant? = instrumented ? .now : nil
        // The accepted operations, for the instruments only: a caller that
        // collects them gets its own collection back when nothing was
        // refused (see the end), so the common batch is not copied.
        var accepted: [(operation: Operation, ready: Bool)] = []
        var refused: [(Operation, OperationState.EnqueueRefusal, OperationQueue?)] = []
        // Positions (from 0) of the operations `claim` refused.
        var refusedOffsets: [Int] = []
        var offset = -1
        var customReadiness: [Operation] = []
        // With the recorder on: each linked operation, when, and whether it
        // was ready then.
        var traced: [(Operation, UInt64, Bool)] = []
        var next = operations.startIndex
        var linked = 0
        // This add's place in line for room under the pending limit, once
        // it has waited (see `RoomWaiters`); given by an `async` add that
        // waited before this attempt.
        var ticket = waitingTicket
        // A place this call took must be given up on every way out that
        // does not add (a waiting add refused under `.reject` once the
        // policy changed, probe 43): a stale place would keep claiming room.
        // The `async` caller's own place is its to give up.
        defer { if let ticket, ticket != waitingTicket { leaveRoomLine(ticket) } }
        while next != operations.endIndex {
            lock.lock()
            // A barrier is never refused for lack of room: its block has no
            // operation the caller could see cancelled, so refusing it would
            // lose it. Under `.reject` it is added beyond the bound; under
            // `.block` it waits in line like any add.
            if linked == 0, state.pendingLimit != nil, !(barrier && pendingLimitPolicy == .reject),
               !roomWaiters.fits(total, ticket: ticket, in: state), !isCalledFromInside() {
                if !prevalidated {
                    lock.unlock()
                    // Misuse first, as an add that found room reports it,
                    // and only what may be added counts toward the room: a
                    // duplicate or another queue's operation must neither
                    // make a valid one wait nor get it refused.
                    let valid = removingRefusedAdds(operations.filter { !refusedByGetter.contains(ObjectIdentifier($0)) })
                    if valid.isEmpty { return [] }
                    return admit(valid, mode: mode, barrier: barrier, collecting: collecting, contentAnnounced: true, prevalidated: true, roomTicket: ticket)
                }
                if mode == .attempt {
                    lock.unlock()
                    if instrumented {
                        for operation in operations { OperationInstrumentation.emit(.rejected, operation, queue: self) }
                    }
                    return nil
                }
                if pendingLimitPolicy == .reject {
                    lock.unlock()
                    // An add that waited under `.block` and finds no room
                    // once the policy is `.reject` leaves the line before
                    // it is refused.
                    if let waited = ticket {
                        leaveRoomLine(waited)
                        ticket = nil
                    }
                    refuseForLackOfRoom(Array(operations))
                    return []
                }
                guard waitForRoomLocked(count: total, ticket: &ticket) else { return [] }
                continue
            }
            if linked == 0, let waited = ticket {
                // Added: the add leaves the line (its room is now counted
                // as the queue's own operations).
                roomWaiters.leave(waited)
                ticket = nil
            }
            // Large batches are linked in chunks, releasing the lock in
            // between, so that drain loops start on the first operations
            // while the rest are linked. Under a pending limit a batch is one
            // chunk, so that the limit holds exactly.
            var inChunk = 0
            while next != operations.endIndex, state.pendingLimit != nil || inChunk < 256 {
                let operation = operations[next]
                operations.formIndex(after: &next)
                inChunk += 1
                offset += 1
                if !refusedByGetter.isEmpty, refusedByGetter.contains(ObjectIdentifier(operation)) { continue }
                var readyWhenClaimed = false
                if let (refusal, owner) = operation.claim(for: self, readyWhenClaimed: &readyWhenClaimed) {
                    refused.append((operation, refusal, owner))
                    refusedOffsets.append(offset)
                    continue
                }
                let custom = operation.overrides(.isReady)
                state.link(operation, barrier: barrier, customReadiness: custom, customStart: operation.overrides(.start))
                emitLocked(.added(operation))
                linked += 1
                if instrumented { accepted.append((operation, readyWhenClaimed)) }
                if barrier {
                    state.barrierLinked(operation)
                } else if custom {
                    customReadiness.append(operation)
                } else {
                    let current = operation.loadState()
                    state.apply(operation, ready: current.isBaseReady, cancelled: current.isCancelled)
                }
                if tracing {
                    // Recorded after unlocking, with the time of the add.
                    traced.append((operation, monotonicNanoseconds(), operation.queueLink.lane != QueueLink.noLane))
                }
            }
            let effects = takeEffectsLocked()
            lock.unlock()
            effects.perform(on: self)
        }
        for (operation, refusal, owner) in refused {
            reportRefusedAdd(operation, refusal: refusal, owner: owner, batch: Array(operations))
        }
        for operation in customReadiness { memberReadinessMayHaveChanged(operation) }
        if tracing {
            for (operation, time, ready) in traced {
                TraceRecorder.shared.record(.added, operation, queue: self, at: time)
                if ready { TraceRecorder.shared.record(.ready, operation, queue: self, at: time) }
                TraceRecorder.shared.describe(operation, queue: self, at: time)
            }
        }
        if let addedAt {
            for (operation, ready) in accepted {
                OperationInstrumentation.emit(.added, operation, queue: self, at: addedAt)
                // An `isReady` override is reported by memberReadinessMayHaveChanged.
                if ready, !operation.overrides(.isReady) { OperationInstrumentation.emit(.ready, operation, queue: self, at: addedAt) }
            }
        }
        guard collecting else { return [] }
        if refused.isEmpty, refusedByGetter.isEmpty {
            if let whole = operations as? [Operation] { return whole }
            return Array(operations)
        }
        var kept: [Operation] = []
        for (position, operation) in operations.enumerated()
        where !refusedOffsets.contains(position) && !refusedByGetter.contains(ObjectIdentifier(operation)) {
            kept.append(operation)
        }
        return kept
    }

    /// Whether the caller is inside this queue's own work (an operation's
    /// body, a completion block, an observer, an `async` body): such adds are
    /// never held back by the pending limit, since they could wait for
    /// themselves.
    final func isCalledFromInside() -> Bool {
        if ThreadContext.current.queue === self { return true }
        return OperationTaskContext.inherited?.queue === self
    }

    /// Waits until the pending limit leaves room for `count` operations,
    /// in line behind the adds that waited before (`ticket`: this add's
    /// place once it has one, kept across its waits). Called with `lock`
    /// held; returns with it released. Returns false when the wait could
    /// never end and the add was refused as a misuse (it then left the line).
    private func waitForRoomLocked(count: Int, ticket: inout Int?) -> Bool {
        let signal = WaitSignal()
        guard let registered = roomWaiters.wait(count, ticket: ticket, in: state, resume: { signal.signal() }) else {
            lock.unlock()
            return true
        }
        ticket = registered
        lock.unlock()
        // From the observers of a finished operation: the queue slot it kept
        // for them may be needed to make room.
        OperationQueue.threadWillBlock(ThreadContext.current)
        let record = WaitRegistry.Record(running: ThreadContext.current.runningOperationsIncludingTask, target: .room(self))
        if let verdict = WaitRegistry.shared.begin(record) {
            leaveRoomLine(registered)
            reportNoRoomEver(verdict.reason)
            return false
        }
        defer { WaitRegistry.shared.end(record) }
        // Inside a Swift task the add blocks a thread of the cooperative
        // pool, whose other tasks (those that would make room) may need it.
        let header = AsyncBodyTask.callerIsOutsideTasks
            ? "addOperation waits for room under the pending limit of:"
            : "addOperation, called inside a Swift task, blocks a thread of Swift's cooperative pool (use `await queue.addOperationWhenRoom`, which suspends instead) while it waits for room under the pending limit of:"
        let outcome = WorkerPool.shared.blocking {
            WaitRegistry.block(on: signal, deadline: nil, record: record) {
                .queue(self, header)
            }
        }
        if case .neverEnds(let reason) = outcome {
            leaveRoomLine(registered)
            reportNoRoomEver(reason)
            return false
        }
        return true
    }

    /// The add with `ticket` gives up waiting for room: it leaves the line,
    /// and the adds behind it are woken if that lets them go ahead.
    /// Idempotent. Call with no lock held.
    final func leaveRoomLine(_ ticket: Int) {
        lock.lock()
        guard roomWaiters.leave(ticket) else {
            lock.unlock()
            return
        }
        let effects = takeEffectsLocked()
        lock.unlock()
        effects.perform(on: self)
    }

    /// The operations of `operations` that this queue may add, each once:
    /// the others are reported as an add reports them (a duplicate in the
    /// batch, an operation of another queue or of this one, an executing or
    /// finished one) and left untouched. Checked without claiming anything,
    /// where the pending limit refuses the add before the claim: refusing
    /// for lack of room cancels and finishes operations, which must never
    /// touch one that is not this call's to refuse.
    final func removingRefusedAdds(_ operations: [Operation]) -> [Operation] {
        validatedBatch(operations).valid
    }

    /// `removingRefusedAdds`, also saying whether anything but a duplicate
    /// within the batch was refused (`refusedOther`).
    final func validatedBatch(_ operations: [Operation]) -> (valid: [Operation], refusedOther: Bool) {
        var seen = Set<ObjectIdentifier>()
        var valid: [Operation] = []
        var refusedOther = false
        valid.reserveCapacity(operations.count)
        for operation in operations {
            guard seen.insert(ObjectIdentifier(operation)).inserted else {
                reportRefusedAdd(operation, refusal: .alreadyEnqueued, owner: self, batch: operations)
                continue
            }
            if let (refusal, owner) = operation.enqueueRefusal() {
                reportRefusedAdd(operation, refusal: refusal, owner: owner, batch: [operation])
                refusedOther = true
                continue
            }
            if let refusal = operation.reportedEnqueueRefusal() {
                reportRefusedAdd(operation, refusal: refusal, owner: nil, batch: [])
                refusedOther = true
                continue
            }
            valid.append(operation)
        }
        return (valid, refusedOther)
    }

    /// Whether some operation of the batch may be refused: its state word
    /// says it is finished, executing or in a queue, or its class reports
    /// it finished or executing. Read without locks (one load each); the
    /// getters are user code, called with no lock held.
    static func batchMayBeRefused<C: Collection<Operation>>(_ operations: C) -> Bool {
        var found = false
        operations.forEachBorrowed { operation in
            guard !found else { return }
            var probe = operation.loadState()
            if probe.enqueue() != nil || operation.reportedEnqueueRefusal() != nil { found = true }
        }
        return found
    }

    /// Refuses operations that found no room under `.reject` (or whose
    /// async add was cancelled while waiting for room), after
    /// `removingRefusedAdds`: they are cancelled and finished without
    /// running their work (their completion blocks run). They are not added.
    ///
    /// The class's `cancel()` runs, and the base cancellation too (a class
    /// that keeps its own cancelled flag does not call `super.cancel()`,
    /// and the base start would otherwise run its `main()`, or refuse to
    /// start it while not ready: probe 25). Then the operation is started
    /// as a queue starts a cancelled operation: the base start skips the
    /// body; a class's own `start()` is called, and Foundation's contract
    /// for it is to finish a cancelled operation without doing the work.
    final func refuseForLackOfRoom(_ operations: [Operation]) {
        for operation in operations {
            if OperationInstrumentation.isActive { OperationInstrumentation.emit(.rejected, operation, queue: self) }
            operation.cancel()
            operation.performCancel()
            // Its `cancel()` (user code) may have finished it, or given it
            // to a queue, which then starts it: not this call's to start.
            guard operation.enqueueRefusal() == nil else { continue }
            if operation.overrides(.start) {
                operation.start()
            } else {
                operation.performBaseStart(queueCall: false)?.run()
            }
        }
    }

    /// Waits for exactly `operations` (the ones an `addOperations` call
    /// accepted). Waits for the last first: by then most others are done,
    /// so the rest cost one atomic load each.
    final func waitForOperations(_ operations: [Operation]) {
        // Borrowed from the array, not retained: the workers are touching
        // these operations' reference counts meanwhile.
        operations.forEachBorrowedInReverse { $0.performWait(deadline: nil) }
    }

    func reportRefusedAdd(
        _ operation: Operation,
        refusal: OperationState.EnqueueRefusal,
        owner: OperationQueue?,
        batch: [Operation]
    ) {
        let code: OperationMisuse.Code
        let detail: String
        switch refusal {
        case .finished:
            code = .addedAfterStart
            detail = "was added to \(misuseSubject) after it finished. An operation runs once; create a new one to run the work again."
        case .executing:
            code = .addedAfterStart
            detail = "was added to \(misuseSubject) while it is executing. Add operations to a queue before starting them."
        case .alreadyEnqueued:
            if owner === self, batch.filter({ $0 === operation }).count > 1 {
                code = .duplicateInBatch
                detail = "appears more than once in one addOperations call to \(misuseSubject); only its first occurrence counts."
            } else if let owner, owner !== self {
                code = .alreadyInQueue
                detail = "was added to \(misuseSubject), but it already belongs to \(owner.misuseSubject). An operation can be in one queue, once."
            } else {
                code = .alreadyInQueue
                detail = "was added to \(misuseSubject) twice; it is already in this queue."
            }
        }
        OperationMisuse.report(code, subject: .operation(operation, in: self), detail)
    }
}

extension Operation {
    /// Claims the operation for `queue`. Returns why it cannot be queued (and
    /// the queue that owns it, if any), or nil once claimed. Called with the
    /// queue's lock held (lock order: queue, then operation).
    final func claim(for queue: OperationQueue) -> (OperationState.EnqueueRefusal, OperationQueue?)? {
        var ready = false
        return claim(for: queue, readyWhenClaimed: &ready)
    }

    /// `claim(for:)`, also reporting the base readiness at the moment the
    /// queue claimed the operation: what the instruments are told with the
    /// add. From that moment on, another thread's change of readiness is
    /// reported by that thread (the operation waits in a queue), so the
    /// events alternate.
    final func claim(for queue: OperationQueue, readyWhenClaimed: inout Bool) -> (OperationState.EnqueueRefusal, OperationQueue?)? {
        withStateLock { state in
            if let refusal = state.enqueue() {
                let owner = state.isRetired ? nil : membership?.takeUnretainedValue()
                return (refusal, owner)
            }
            membership = Unmanaged.passUnretained(queue)
            readyWhenClaimed = state.isBaseReady
            return nil
        }
    }

    /// Why the operation could not be claimed for a queue now (and the
    /// queue that owns it, if any), without claiming it.
    final func enqueueRefusal() -> (OperationState.EnqueueRefusal, OperationQueue?)? {
        withStateLock { state in
            var probe = state
            guard let refusal = probe.enqueue() else { return nil }
            return (refusal, state.isRetired ? nil : membership?.takeUnretainedValue())
        }
    }

    /// Why a class that overrides `isFinished` or `isExecuting` may not be
    /// queued, as it reports its own state (user code: call outside locks).
    final func reportedEnqueueRefusal() -> OperationState.EnqueueRefusal? {
        if overrides(.isFinished), isFinished { return .finished }
        if overrides(.isExecuting), isExecuting { return .executing }
        return nil
    }
}
