import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension Operation {
    /// Claims the operation for `queue`. Returns why it cannot be queued (and
    /// the queue that owns it, if any), or nil once claimed.
    final func claim(for queue: OperationQueue) -> (OperationState.EnqueueRefusal, OperationQueue?)? {
        withStateLock { state in
            if let refusal = state.enqueue() { return (refusal, storedQueue) }
            storedQueue = queue
            return nil
        }
    }

    /// The ready lane for the operation's current state.
    var readyLane: Int {
        let state = loadState()
        return state.isCancelled ? QueueScheduler.cancelledLane : QueueScheduler.lane(forPriorityIndex: state.priorityIndex)
    }
}

extension OperationQueue: PoolJob {
    func runJob(on worker: Worker) {
        drain(worker: worker)
    }
}

extension OperationQueue {
    // MARK: Adding

    /// How `enqueue` behaves when the queue's pending limit is reached.
    enum AdmissionMode {
        /// Wait for room (or refuse, under the `.reject` policy).
        case synchronous
        /// Return nil and leave the operations unclaimed.
        case attempt
    }

    /// Claims, links and schedules `operations`. Returns the ones accepted,
    /// or nil when `mode` is `.attempt` and the pending limit left no room.
    @discardableResult
    final func enqueue<C: Collection<Operation>>(
        _ operations: C,
        mode: AdmissionMode = .synchronous
    ) -> [Operation]? {
        var accepted: [Operation] = []
        accepted.reserveCapacity(operations.count)
        for operation in operations {
            if let (refusal, owner) = operation.claim(for: self) {
                reportRefusedAdd(operation, refusal: refusal, owner: owner, inBatch: accepted)
                continue
            }
            accepted.append(operation)
        }
        guard !accepted.isEmpty else { return [] }
        return admit(claimed: accepted, mode: mode)
    }

    /// Adds one operation: the common case, with one lock acquisition and
    /// no allocation when the queue has no barrier, pending limit, observers
    /// or event subscribers.
    final func enqueueOne(_ operation: Operation) {
        if let (refusal, owner) = operation.claim(for: self) {
            reportRefusedAdd(operation, refusal: refusal, owner: owner, inBatch: [])
            return
        }
        let ready = operation.isReady
        lock.lock()
        guard scheduler.lastBarrier == nil, scheduler.pendingLimit == nil,
              !observed.load(ordering: .relaxed), !hasEventSinks.load(ordering: .relaxed) else {
            lock.unlock()
            admit(claimed: [operation], mode: .synchronous)
            return
        }
        scheduler.link(operation)
        retainSelfIfNeededLocked()
        var recheck = false
        let baseReady = operation.loadState().isReady
        if ready && baseReady {
            scheduler.pushReady(operation, lane: operation.readyLane)
        } else if baseReady {
            recheck = true
        }
        let tickets = scheduler.drainersNeeded()
        let executor = tickets > 0 ? drainExecutorLocked() : nil
        let stalled = scheduler.isStalled
        let wakeups = scheduler.takeWakeups()
        lock.unlock()
        if let executor { post(drainers: tickets, to: executor) }
        wakeups.fire()
        if recheck { operationReadinessMayHaveChanged(operation) }
        if stalled { checkStall() }
    }

    /// Links and schedules operations already claimed for this queue.
    @discardableResult
    final func admit(claimed accepted: [Operation], mode: AdmissionMode) -> [Operation]? {
        let observedNow = observed.load(ordering: .relaxed)
        if observedNow { notifyWillChange(["operations", "operationCount"]) }

        unowned(unsafe) let context = ThreadContext.current
        var (barrier, limited) = lock.withLock { (scheduler.lastBarrier, scheduler.pendingLimit != nil) }
        var stalled = false
        var recheck: [Operation] = []
        // Large batches are linked in chunks, releasing the lock in between,
        // so that drain loops start running the first operations while the
        // rest are linked. A batch under a pending limit is one chunk, so
        // that the limit holds exactly.
        let chunkSize = limited ? accepted.count : 256
        var linked = 0
        while linked < accepted.count {
            let end = min(linked + chunkSize, accepted.count)
            let chunk = accepted[linked..<end]
            if let barrier {
                for operation in chunk where operation !== barrier {
                    operation.addDependency(barrier, hidden: true)
                }
            }
            // `isReady` may be overridden: ask outside the lock.
            let readiness = chunk.map { $0.isReady }
            lock.lock()
            if scheduler.lastBarrier !== barrier, !(scheduler.lastBarrier.map { accepted.contains($0) } ?? false) {
                // A barrier was added meanwhile: what is not linked yet comes after it.
                barrier = scheduler.lastBarrier
                lock.unlock()
                continue
            }
            if linked == 0, scheduler.pendingLimit != nil {
                if !scheduler.hasRoom(for: accepted.count) {
                    // Adds from the queue's own operations are never held back:
                    // they could wait for themselves.
                    let fromInside = context.queue === self && context.operation != nil
                    if !fromInside {
                        let policy = pendingLimitPolicy
                        if mode == .attempt || policy == .reject {
                            lock.unlock()
                            refuseForLackOfRoom(accepted, cancel: mode == .synchronous)
                            return mode == .attempt ? nil : []
                        }
                        let signal = WaitSignal()
                        scheduler.roomWaiters.append((accepted.count, { signal.signal() }))
                        lock.unlock()
                        WorkerPool.shared.blocking(context: context) { _ = signal.wait() }
                        continue
                    }
                }
            }
            linkLocked(chunk, readiness: readiness, recheck: &recheck)
            var tickets = 0
            for _ in 0..<min(end - linked, WorkerPool.shared.targetConcurrency) {
                let needed = scheduler.drainersNeeded()
                if needed == 0 { break }
                tickets += needed
            }
            stalled = scheduler.isStalled
            let wakeups = scheduler.takeWakeups()
            let executor = tickets > 0 ? drainExecutorLocked() : nil
            lock.unlock()
            if let executor { post(drainers: tickets, to: executor) }
            wakeups.fire()
            linked = end
        }
        for operation in accepted { emit(.added(operation)) }
        for operation in recheck { operationReadinessMayHaveChanged(operation) }
        if observedNow { notifyDidChange(["operations", "operationCount"]) }
        if stalled { checkStall() }
        return accepted
    }

    /// Links `operations` and admits the ready ones. Call with `lock` held.
    private func linkLocked(_ operations: ArraySlice<Operation>, readiness: [Bool], recheck: inout [Operation]) {
        for (offset, operation) in operations.enumerated() {
            scheduler.link(operation)
            retainSelfIfNeededLocked()
            let baseReady = operation.loadState().isReady
            if readiness[offset] && baseReady {
                scheduler.pushReady(operation, lane: operation.readyLane)
            } else if baseReady {
                recheck.append(operation)
            }
        }
    }

    private func reportRefusedAdd(
        _ operation: Operation,
        refusal: OperationState.EnqueueRefusal,
        owner: OperationQueue?,
        inBatch: [Operation]
    ) {
        let state = operation.loadState()
        let code: OperationMisuse.Code
        let detail: String
        if state.isFinished {
            code = .addedAfterStart
            detail = "was added to \(misuseSubject) after it finished. An operation runs once; create a new one to run the work again."
        } else if refusal == .alreadyEnqueued, owner === self, inBatch.contains(where: { $0 === operation }) {
            code = .duplicateInBatch
            detail = "appears more than once in one addOperations call to \(misuseSubject); it was added once."
        } else if refusal == .alreadyEnqueued, let owner {
            code = .alreadyInQueue
            detail = owner === self
                ? "was added to \(misuseSubject) twice; it is already in this queue."
                : "was added to \(misuseSubject), but it already belongs to \(owner.misuseSubject). An operation can be in one queue, once."
        } else {
            code = .addedAfterStart
            detail = "was added to \(misuseSubject) while it is executing. Add operations to a queue before starting them."
        }
        OperationMisuse.report(code, subject: operation.misuseSubject, detail)
    }

    /// Adds a barrier: it depends on every operation in the queue now, and
    /// operations added after it depend on it.
    final func addBarrier(_ barrier: BarrierOperation) {
        // Hold the barrier back until its dependencies are registered.
        _ = barrier.withStateLock { $0.addUnfinishedDependency() }
        let prior = lock.withLock { () -> [Operation] in
            let operations = scheduler.operations
            scheduler.lastBarrier = barrier
            return operations
        }
        for operation in prior { barrier.addDependency(operation, hidden: false) }
        enqueue(CollectionOfOne(barrier))
        barrier.dependencyDidFinish(nil)
    }

    // MARK: Drain loops

    /// Where drain loops run.
    enum DrainExecutor {
        case pool(qos: Int)
        case dispatch(DispatchQueue)
        case mainThread
    }

    /// The executor for drain loops. Call with `lock` held.
    final func drainExecutorLocked() -> DrainExecutor {
        switch kind {
        case .mainThread: return .mainThread
        case .pool:
            if let storedUnderlyingQueue { return .dispatch(storedUnderlyingQueue) }
            return .pool(qos: storedQualityOfService.index)
        }
    }

    /// Starts `count` drain loops on `executor`.
    final func post(drainers count: Int, to executor: DrainExecutor) {
        for _ in 0..<count {
            switch executor {
            case .mainThread: DispatchQueue.main.async { self.drain(worker: nil) }
            case .dispatch(let queue): queue.async { self.drain(worker: nil) }
            case .pool(let qos): WorkerPool.shared.submit(self, qos: qos)
            }
        }
    }

    /// Starts `count` drain loops on the queue's executor.
    final func startDrainers(_ count: Int) {
        guard count > 0 else { return }
        post(drainers: count, to: lock.withLock { drainExecutorLocked() })
    }

    /// Starts ready operations one after another on the calling thread until
    /// none can start, then returns. Finishing an operation and picking the
    /// next one share one lock acquisition.
    final func drain(worker: Worker?) {
        unowned(unsafe) let context = ThreadContext.current
        let savedQueue = context.queueReference
        context.queueReference = Unmanaged.passUnretained(self)
        let pool = WorkerPool.shared
        let queueQoS = lock.withLock { storedQualityOfService.index }
        var toRetire: Operation?
        // Cancelled operations are started and retired in batches (they need
        // no slot and no order): `cancelledBatch` to start, `retireBatch`
        // finished ones awaiting retirement.
        var cancelledBatch: [Operation] = []
        var retireBatch: [Operation] = []
        var startedInSlice = 0
        var sliceStart: UInt64 = 0
        var yielded = false
        let isObserved = observed.load(ordering: .relaxed)

        lock.lock()
        while true {
            var stalled = false
            let released = toRetire.flatMap { scheduler.retire($0) }
            var releasedBatch: [Operation] = []
            for operation in retireBatch {
                if let owned = scheduler.retire(operation) { releasedBatch.append(owned) }
            }
            let retiringCount = (toRetire != nil ? 1 : 0) + retireBatch.count
            if retiringCount > 0 { retiringNow.add(retiringCount, ordering: .relaxed) }
            let selfRelease = retiringCount > 0 ? takeSelfRetainIfEmptyLocked() : nil
            if !context.deferredAdmissions.isEmpty { admitDeferredLocked(context) }
            if startedInSlice > 0, shouldYieldSlice(worker: worker, pool: pool, started: startedInSlice, since: sliceStart) {
                yielded = true
            }
            let next = yielded ? nil : scheduler.popNext()
            if next == nil {
                if !yielded { scheduler.drainers -= 1 }
            } else {
                scheduler.busyDrainers += 1
                if next!.queueFlags & QueueLinkFlags.bypass != 0 {
                    scheduler.popCancelled(upTo: 63, into: &cancelledBatch)
                }
            }
            let tickets = scheduler.drainersNeeded()
            if retiringCount > 0 { stalled = scheduler.isStalled }
            let wakeups = retiringCount > 0 ? scheduler.takeWakeups() : Wakeups()
            lock.unlock()

            // Retire the finished operations and drop every reference this
            // loop holds to them before waking their waiters.
            var retireCallbacks = retireFinished(&toRetire, released: consume released, isObserved: isObserved)
            if !retireBatch.isEmpty {
                retireCallbacks += retireBatchFinished(&retireBatch, released: &releasedBatch, isObserved: isObserved)
            }
            if retiringCount > 0 { retiringNow.subtract(retiringCount, ordering: .releasing) }
            if retiringCount > 0, wakeups.drained { emit(.drained) }
            for callback in retireCallbacks { callback() }
            selfRelease?.release()  // the drain job still holds the queue
            wakeups.fire()
            startDrainers(tickets)
            if stalled { checkStall() }
            guard let operation = next else { break }

            if startedInSlice == 0 { sliceStart = pool.hasWaitingJobs ? monotonicNanoseconds() : 0 }
            if let worker {
                let qos = operation.loadState().qosIndex
                worker.applyQualityOfService(index: qos == 2 ? queueQoS : qos)
            }
            let savedAdmitting = context.admittingQueueReference
            context.admittingQueueReference = Unmanaged.passUnretained(self)
            let finishedNow = startAsDrainStep(operation, context: context)
            context.admittingQueueReference = savedAdmitting
            if finishedNow {
                toRetire = operation
                if isObserved { notifyWillChange(["operations", "operationCount"]) }
            }
            worker?.recordProgress()
            startedInSlice += 1
            if !cancelledBatch.isEmpty {
                startCancelledBatch(&cancelledBatch, retire: &retireBatch, context: context, isObserved: isObserved)
            }
            lock.lock()
            scheduler.busyDrainers -= 1
        }
        context.queueReference = savedQueue
        if yielded { startDrainers(1) }
    }

    /// Completes the retirement of the operation in `slot` and releases the
    /// caller's references to it (`slot` and `released`); returns its
    /// waiters' callbacks, to run once nothing here holds the operation.
    @inline(__always)
    private func retireFinished(
        _ slot: inout Operation?,
        released: consuming Operation?,
        isObserved: Bool
    ) -> [@Sendable () -> Void] {
        guard let finished = slot else { return [] }
        slot = nil
        _ = consume released
        if isObserved { notifyDidChange(["operations", "operationCount"]) }
        emit(.finished(finished))
        // Last: publish the retirement, then drop the final reference.
        return finished.takeRetirement()
    }

    /// Starts `operation` as this queue's drain step on the calling thread:
    /// marks the call as the queue's (so `start()` accepts it) and notes
    /// whether the operation finished synchronously, in which case the
    /// caller retires it. Returns whether it did.
    @inline(__always)
    final func startAsDrainStep(_ operation: Operation, context: ThreadContext) -> Bool {
        emit(.started(operation))
        let reference = Unmanaged.passUnretained(operation)
        context.queueStartingReference = reference
        context.drainOperationReference = reference
        context.drainOperationRetirePending = false
        operation.start()
        context.queueStartingReference = nil
        context.drainOperationReference = nil
        defer { context.drainOperationRetirePending = false }
        return context.drainOperationRetirePending
    }

    /// Starts a batch of cancelled operations one after another (each
    /// finishes at once); those that finished join `retire`.
    private func startCancelledBatch(
        _ batch: inout [Operation],
        retire: inout [Operation],
        context: ThreadContext,
        isObserved: Bool
    ) {
        let savedAdmitting = context.admittingQueueReference
        context.admittingQueueReference = Unmanaged.passUnretained(self)
        for operation in batch {
            if startAsDrainStep(operation, context: context) {
                retire.append(operation)
                if isObserved { notifyWillChange(["operations", "operationCount"]) }
            }
        }
        context.admittingQueueReference = savedAdmitting
        batch.removeAll(keepingCapacity: true)
    }

    /// `retireFinished` for a batch: completes each retirement, drops the
    /// references, returns the waiters' callbacks.
    private func retireBatchFinished(
        _ batch: inout [Operation],
        released: inout [Operation],
        isObserved: Bool
    ) -> [@Sendable () -> Void] {
        var callbacks: [@Sendable () -> Void] = []
        released.removeAll()
        for operation in batch {
            if isObserved { notifyDidChange(["operations", "operationCount"]) }
            emit(.finished(operation))
            callbacks += operation.takeRetirement()
        }
        batch.removeAll(keepingCapacity: true)
        return callbacks
    }

    /// Waits (briefly, bounded) until no drain loop is between retiring an
    /// operation and dropping its references to it.
    final func waitForRetirementsInProgress() {
        guard retiringNow.load(ordering: .acquiring) > 0 else { return }
        // Normally nanoseconds; bounded (2 s) in case the drain thread is
        // preempted for long on a loaded machine.
        let deadline = monotonicNanoseconds() &+ 2_000_000_000
        while retiringNow.load(ordering: .acquiring) > 0, monotonicNanoseconds() < deadline {
            sched_yield()
        }
    }

    /// Whether a drain loop should give its thread back: the pool is
    /// oversubscribed, or other jobs wait and this loop used its time slice
    /// (2 ms). On the main thread, every 64 operations.
    private func shouldYieldSlice(worker: Worker?, pool: WorkerPool, started: Int, since start: UInt64) -> Bool {
        guard worker != nil else { return kind == .mainThread && started >= 64 }
        guard pool.hasWaitingJobs else { return false }
        if pool.shouldYield { return true }
        return start == 0 || monotonicNanoseconds() &- start > 2_000_000
    }

    // MARK: Events from operations

    /// A dependency of `operation` finished (or was removed): enter a lane if
    /// it is ready now.
    final func operationMayBeReady(_ operation: Operation) {
        guard operation.isReady else { return }
        admit(operation)
    }

    /// A subclass announced `isReady`: admit the operation or take it out of
    /// its lane.
    final func operationReadinessMayHaveChanged(_ operation: Operation) {
        if operation.isReady {
            admit(operation)
        } else {
            lock.withLock {
                if operation.laneIndex > 0 { scheduler.removeFromLane(operation) }
            }
        }
    }

    private func admit(_ operation: Operation) {
        let deferred = ThreadContext.withCurrent { context -> Bool in
            guard ThreadContext.refers(context.admittingQueueReference, to: self) else { return false }
            context.deferredAdmissions.append(operation)
            return true
        }
        if deferred { return }
        lock.lock()
        // `isReady` was asked outside the lock and may be stale: the base
        // readiness (dependencies, cancellation) is checked again here. An
        // operation that is not ready is admitted later, when its last
        // dependency finishes or its `isReady` announcement arrives.
        guard scheduler.canEnterLane(operation), operation.loadState().isReady else {
            lock.unlock()
            return
        }
        scheduler.pushReady(operation, lane: operation.readyLane)
        let tickets = scheduler.drainersNeeded()
        let wakeups = scheduler.takeWakeups()
        lock.unlock()
        startDrainers(tickets)
        wakeups.fire()
    }

    /// Takes the queue's self-retain if it holds operations. Call with `lock`
    /// held, after linking.
    @inline(__always)
    final func retainSelfIfNeededLocked() {
        if retainedSelf == nil, scheduler.count > 0 { retainedSelf = Unmanaged.passRetained(self) }
    }

    /// Gives back the self-retain if the queue is now empty. Call with `lock`
    /// held; release the result after the retired operation's
    /// `completeRetirement()`, outside the lock.
    @inline(__always)
    final func takeSelfRetainIfEmptyLocked() -> Unmanaged<OperationQueue>? {
        guard scheduler.count == 0, let retained = retainedSelf else { return nil }
        retainedSelf = nil
        return retained
    }

    /// Admits the dependents collected while the drain loop ran an
    /// operation. Call with `lock` held; their `isReady` was already asked.
    final func admitDeferredLocked(_ context: ThreadContext) {
        for operation in context.deferredAdmissions
        where scheduler.canEnterLane(operation) && operation.loadState().isReady {
            scheduler.pushReady(operation, lane: operation.readyLane)
        }
        context.deferredAdmissions.removeAll(keepingCapacity: true)
    }

    /// A queued operation that had not started was cancelled: move it to the
    /// cancelled lane, to be retired promptly.
    final func operationWasCancelled(_ operation: Operation) {
        let deferred = ThreadContext.withCurrent { context -> Bool in
            guard ThreadContext.refers(context.cancellingQueueReference, to: self) else { return false }
            context.deferredCancellations.append(operation)
            return true
        }
        if deferred { return }
        lock.lock()
        if operation.laneIndex > 0 { scheduler.removeFromLane(operation) }
        guard scheduler.canEnterLane(operation) else {
            lock.unlock()
            return
        }
        scheduler.pushReady(operation, lane: QueueScheduler.cancelledLane)
        let tickets = scheduler.drainersNeeded()
        let wakeups = scheduler.takeWakeups()
        lock.unlock()
        startDrainers(tickets)
        wakeups.fire()
    }

    /// Moves the operations collected by `cancelAllOperations()` to the
    /// cancelled lane, under one lock acquisition.
    final func moveCancelledOperations(_ context: ThreadContext) {
        guard !context.deferredCancellations.isEmpty else { return }
        lock.lock()
        for operation in context.deferredCancellations {
            if operation.laneIndex > 0 { scheduler.removeFromLane(operation) }
            if scheduler.canEnterLane(operation) {
                scheduler.pushReady(operation, lane: QueueScheduler.cancelledLane)
            }
        }
        var tickets = 0
        for _ in 0..<WorkerPool.shared.targetConcurrency {
            let needed = scheduler.drainersNeeded()
            if needed == 0 { break }
            tickets += needed
        }
        let executor = tickets > 0 ? drainExecutorLocked() : nil
        let wakeups = scheduler.takeWakeups()
        lock.unlock()
        context.deferredCancellations.removeAll(keepingCapacity: false)
        if let executor { post(drainers: tickets, to: executor) }
        wakeups.fire()
    }

    /// A ready operation's priority changed: move it to its new lane.
    final func operationPriorityDidChange(_ operation: Operation) {
        lock.withLock {
            guard operation.laneIndex > 0 else { return }
            scheduler.removeFromLane(operation)
            scheduler.pushReady(operation, lane: operation.readyLane)
        }
    }

    /// An operation finished away from a drain loop (asynchronous operations,
    /// announced finishes): release its slot, complete its retirement and
    /// schedule more. Returns the queue's self-retain if the queue is now
    /// empty: the caller releases it once it no longer uses the queue.
    final func operationDidRetire(_ operation: Operation) -> Unmanaged<OperationQueue>? {
        let isObserved = observed.load(ordering: .relaxed)
        if isObserved { notifyWillChange(["operations", "operationCount"]) }
        lock.lock()
        let released = scheduler.retire(operation)
        let selfRelease = takeSelfRetainIfEmptyLocked()
        let wakeups = scheduler.takeWakeups()
        let tickets = scheduler.drainersNeeded()
        let stalled = scheduler.isStalled
        lock.unlock()
        _ = consume released
        operation.completeRetirement()
        wakeups.fire()
        startDrainers(tickets)
        if isObserved { notifyDidChange(["operations", "operationCount"]) }
        emit(.finished(operation))
        if wakeups.drained { emit(.drained) }
        if stalled { checkStall() }
        return selfRelease
    }

    // MARK: Stalls

    /// The queue holds operations but none can start: if some dependency
    /// edge was never verified, look for a cycle among its operations and
    /// report it. If the report is refused, cancel the cycle so the queue
    /// can drain.
    final func checkStall() {
        guard DependencyGraph.hasUnverifiedEdges else { return }
        guard let cycle = DependencyGraph.findCycle(from: operations) else { return }
        OperationMisuse.report(
            .dependencyCycle,
            subject: misuseSubject,
            "cannot make progress: its operations wait on a dependency cycle: \(DependencyGraph.describe(cycle)). The operations on the cycle are cancelled so that the queue can drain."
        )
        for operation in Set(cycle) { operation.cancel() }
    }
}
