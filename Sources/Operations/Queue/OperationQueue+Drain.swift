// Drain loops: the threads that start a queue's operations.
//
// A drain loop starts ready operations one after another on the calling
// thread (a pool worker, the main thread, or the underlying dispatch queue)
// until none can start. An operation whose class keeps the base `start()`
// and finishes synchronously is retired by the loop itself: removing it from
// the queue, admitting the dependents it made ready, and picking the next
// operation share one lock acquisition. Its observers run right after, on
// the loop's thread, before the loop picks another operation; its
// completion block goes to a worker of the pool (`CompletionBlocks`), as
// Foundation runs it asynchronously.
//
// Foundation's order — a slot starts its next operation only after the
// previous one's `isExecuting`/`isFinished` observers were told — is kept by
// the queue's state, not by holding anything back: the finished operation
// keeps its slot (`QueueState.unlink(_:retirementPending:keepingSlot:)`)
// until the loop has told its observers, or until an observer blocks in one
// of the library's waits (`OperationQueue.threadWillBlock(_:)`), whichever
// comes first. So every request for another loop is posted at once, and the
// other tails of a batch are handed to jobs of their own, before any user
// code runs on the loop's thread.
//
// How many loops a queue runs at once is `DrainLoops`' decision: one, while
// it keeps up with tiny operations, then as many as work allows. The loop
// feeds that decision only while the watcher watches its queue: which
// operation it returned from last, and a timing of one step in eight.

extension OperationQueue: PoolJob {
    func runJob(on worker: Worker) {
        drain(worker: worker)
    }
}

extension OperationQueue {
    final func drain(worker: Worker?) {
        unowned(unsafe) let context = ThreadContext.current
        let savedQueue = context.queueReference
        context.queueReference = Unmanaged.passUnretained(self)
        // The queue of what this loop claims (see `DrainClaim`).
        let savedClaimQueue = context.drainClaimQueue
        context.drainClaimQueue = Unmanaged.passUnretained(self)
        defer {
            context.queueReference = savedQueue
            context.drainClaimQueue = savedClaimQueue
        }
        let pool = WorkerPool.shared
        let isObserved = observed.load(ordering: .relaxed)
        // The plan of the operation the loop started, if it finished
        // synchronously, and those of the cancelled operations retired with
        // it: each still has to leave the queue (under the loop's next lock
        // acquisition) and holds its operation. Plans are moved, never
        // copied (`FinishPlan` is noncopyable).
        var primary: FinishPlan?
        var batch = FinishPlanBatch()
        // Dependents that the last operations made ready, unretained: the
        // plans below hold them until they are completed, after the loop's
        // next lock acquisition has admitted them.
        var readied: [Unmanaged<Operation>] = []
        var cancelledBatch: [Operation] = []
        // The list's references to operations retired under the lock, to
        // release after unlocking (each still counted: see `unlink`).
        var released: [Unmanaged<Operation>] = []
        var owedRetirements = 0
        var startedInSlice = 0
        var sliceStart: UInt64 = 0
        // What the loop tells the queue's loop policy (`DrainLoops`) while
        // the watcher watches the queue (`watched`, read under the lock):
        // which operation or tail it returned from last (`begun`, its number
        // in the loops' progress, stored for the watcher without the lock),
        // and its timings of one step in eight (the work between releasing
        // the lock and taking it again). Nothing otherwise: a
        // serial queue, or one whose loops are added freely, pays nothing.
        var begun: UInt64 = 0
        var watched = false
        var untilTiming = 0
        var timedFrom: UInt64 = 0
        var slowTimings = 0

        lock.lock()
        state.drainerStarted()
        let queueQoS = qualityOfServiceIndex.load(ordering: .relaxed)
        while true {
            // Admit what the last operations made ready, retire them, settle
            // the retirements completed since, and pick the next operation.
            for entry in readied {
                entry._withUnsafeGuaranteedRef { operation in
                    let current = operation.loadState()
                    state.apply(operation, ready: current.isBaseReady, cancelled: current.isCancelled)
                }
            }
            readied.empty()
            // Whether a plan's tail (observers) runs user code, and whether the primary operation keeps its slot
            // until its observers have been told: only it can, since the
            // cancelled operations of a batch hold no slot.
            var userTail = false
            var keptSlot = false
            let hadFinishes = primary != nil || !batch.isEmpty
            if let plan = primary.take() {
                (userTail, keptSlot) = retireLocked(plan, mayKeepSlot: true, released: &released)
                primary = consume plan
            }
            batch.forEach { plan in
                if retireLocked(plan, mayKeepSlot: false, released: &released).userTail { userTail = true }
            }
            if owedRetirements > 0 {
                state.retirementDone(owedRetirements)
                owedRetirements = 0
                context.drainOwedRetirements = 0
            }
            // The queue's own observers (`operationCount`, `operations`) hear
            // of these finishes on this thread: user code too, which may wait
            // for the next operation (probe 55: taken first, it could not
            // start until the wait ended, which it never did).
            if isObserved, hadFinishes { userTail = true }
            var customStart = false
            // An observer runs before the next operation is picked: it may wait for (or add) work that must be able to
            // take the slot this loop would otherwise hold. (A constant, so
            // that binding it below borrows rather than retains.)
            let next: Unmanaged<Operation>? = if !userTail,
                startedInSlice == 0 || !shouldYieldSlice(worker: worker, pool: pool, started: startedInSlice, since: sliceStart) {
                state.popNext()
            } else {
                nil
            }
            if let next {
                // The loop's own reference, taken while the list still holds
                // the operation: once the lock is released, a finish announced
                // on another thread (an `isFinished` override) can take it out
                // of the list, and its last holder can let it go, before the
                // loop starts it (probe 21). Given back after the start, below.
                _ = next.retain()
                state.drainerBusy(true)
                begun = state.loops.progress
                let link = next._withUnsafeGuaranteedRef { $0.queueLink }
                customStart = link.has(QueueLink.Flags.customStart)
                // Sent once: not again for an operation given back (`DrainClaim`).
                if !link.has(QueueLink.Flags.givenBack) { emitLocked(.started(next.takeUnretainedValue())) }
                if !link.has(QueueLink.Flags.holdsSlot) {
                    // Cancelled operations need no slot and no order: retire a
                    // batch of them per lock acquisition.
                    state.popCancelled(upTo: 63, into: &cancelledBatch)
                    for operation in cancelledBatch where !operation.queueLink.has(QueueLink.Flags.givenBack) {
                        emitLocked(.started(operation))
                    }
                }
            } else if userTail {
                // The tail (observers) is user code that
                // may block, for example waiting for the next operation: the
                // loop counts as busy meanwhile, so that another loop takes
                // the slot the finished operation frees.
                state.drainerBusy(true)
                begun = state.loops.progress
            } else {
                state.drainerStopped()
            }
            var effects = takeEffectsLocked()
            watched = state.loops.isWatched
            lock.unlock()

            // The list's references go first. Then, before any user code runs
            // on this thread: the requested loop is posted (it may be what a
            // tail below waits for), tail-less plans complete (they only wake
            // waiters), and every tail but one gets a job of its own (a tail
            // may wait for another operation of this batch). Then the queue's
            // observers, and the remaining tail: its operation's
            // isExecuting/isFinished observers and the release of the slot it
            // kept for them (its completion block goes to the pool).
            // What the loop took to start next is claimed while it lets go
            // of the operations it retired: a `deinit` that runs here may
            // wait for it (`DrainClaim`).
            let claimsCancelled = hadFinishes && !cancelledBatch.isEmpty
            if hadFinishes {
                context.drainClaim = next
                if claimsCancelled { Self.moveCancelled(from: &cancelledBatch, to: context) }
            }
            if !released.isEmpty {
                for reference in released { reference.release() }
                released.empty()
            }
            if let loop = effects.drainLoop {
                effects.drainLoop = nil
                post(drainLoopTo: loop)
            }
            if hadFinishes {
                // The tail that runs on this thread: the primary's if it has
                // one (it is the one that may keep its slot), else the first
                // of the batch.
                var own: FinishPlan?
                if let plan = primary.take() {
                    if plan.hasUserTail {
                        own = consume plan
                    } else {
                        if plan.countsRetirement { owe(&owedRetirements, context) }
                        plan.complete(settle: false)
                    }
                }
                batch.takeAll { plan in
                    if !plan.hasUserTail {
                        if plan.countsRetirement { owe(&owedRetirements, context) }
                        plan.complete(settle: false)
                    } else if own == nil {
                        own = consume plan
                    } else {
                        // Settled by the job itself (`memberRetired`).
                        pool.submit(RetirementJob(plan), qos: queueQoS)
                    }
                }
                if isObserved {
                    if keptSlot, let plan = own.take() {
                        // Told as part of the retirement of the operation
                        // that keeps its slot for its observers: a library
                        // wait made there frees the slot, as one made by
                        // those observers does (probe 55: at width 1 the wait
                        // for the next operation never ended).
                        let finished = plan.operation
                        own = consume plan
                        finished.withThreadContext(queue: Unmanaged.passUnretained(self)) { notifyDidChange(Self.contentKeys) }
                    } else {
                        notifyDidChange(Self.contentKeys)
                    }
                }
                if let plan = own.take() {
                    // The completion block goes to the pool, then observers
                    // are told, before the kept slot is given back. Told
                    // before the retirement is owed: a wait of theirs for
                    // the queue already leaves their operation's retirement
                    // out (probe 57: counted twice, it never ended).
                    plan.announce()
                    if keptSlot { releaseKeptSlot(of: plan.operation) }
                    owe(&owedRetirements, context)
                    // Moved, not copied: the plan holds the loop's only
                    // reference when it wakes the operation's waiters.
                    plan.complete(settle: false)
                }
            }
            var givenBack = false
            if hadFinishes {
                givenBack = context.drainClaimGivenBack
                if givenBack { context.drainClaimGivenBack = false }
                context.drainClaim = nil
                // Emptied by the give-back, if there was one.
                if claimsCancelled { Self.moveCancelled(from: context, to: &cancelledBatch) }
            }
            effects.perform(on: self)
            // Emptied now: left as is, its references (a drain executor,
            // wakeups) would be released at the end of the iteration, under
            // the lock taken again by then.
            effects = QueueEffects()
            if givenBack, let next {
                // Another loop starts what this one gave back: drop the
                // loop's own reference, and pick again.
                next.release()
            }
            if userTail || givenBack {
                // Pick the next operation now that the tail has run (or
                // what was taken was given back).
                if watched { drainReturns.store(begun, ordering: .relaxed) }
                lock.lock()
                state.drainerBusy(false)
                continue
            }
            guard let next else {
                // The watcher can let the queue go now rather than at the
                // end of its tick.
                if watched { LoopWatcher.shared.nudge() }
                break
            }
            if startedInSlice == 0 { sliceStart = pool.hasWaitingJobs ? monotonicNanoseconds() : 0 }
            do {
                // The loop's own reference (taken under the lock) while the
                // operation starts: it may finish, leave the list and be
                // released elsewhere meanwhile (a custom `start()`, an `async`
                // body, a finish announced on another thread), which can make
                // this the last reference. Its scope ends here, before the
                // lock is taken again: the release may run the operation's
                // `deinit`, user code (a regression test covers it).
                let operation = next.takeRetainedValue()
                worker?.applyQualityOfService(index: Self.effectiveQualityOfService(operation: operation.loadState().qosIndex, queue: queueQoS))
                if TraceRecorder.isActive {
                    TraceRecorder.shared.record(.started, operation, queue: self)
                    for cancelled in cancelledBatch { TraceRecorder.shared.record(.started, cancelled, queue: self) }
                }
                if OperationInstrumentation.isActive {
                    OperationInstrumentation.emit(.started, operation, queue: self)
                    for cancelled in cancelledBatch { OperationInstrumentation.emit(.started, cancelled, queue: self) }
                }
                if watched {
                    if untilTiming > 0 {
                        untilTiming -= 1
                    } else {
                        untilTiming = 7
                        timedFrom = monotonicNanoseconds()
                    }
                }
                primary = run(operation, customStart: customStart, readied: &readied)
            }
            for cancelled in cancelledBatch {
                if let plan = run(cancelled, customStart: false, readied: &readied) { batch.append(plan) }
            }
            cancelledBatch.empty()
            if timedFrom != 0 {
                // What a second loop could overlap: this step's work outside
                // the lock (one operation, or a batch of cancelled ones).
                let slow = monotonicNanoseconds() &- timedFrom > DrainLoops.slowStepNanoseconds
                slowTimings = slow ? slowTimings + 1 : 0
                timedFrom = 0
            }
            if isObserved, primary != nil || !batch.isEmpty { notifyWillChange(Self.contentKeys) }
            worker?.recordProgress()
            startedInSlice += 1
            // The step's user code (the operation, the `isReady` observers
            // of the dependents it released, the queue's observers) has all
            // returned: only now is the loop not inside it.
            if watched { drainReturns.store(begun, ordering: .relaxed) }
            lock.lock()
            state.drainerBusy(false)
            if slowTimings >= DrainLoops.slowTimingsInARow {
                slowTimings = 0
                state.drainLoopIsSlow()
            }
        }
        if owedRetirements > 0 {
            context.drainOwedRetirements = 0
            lock.lock()
            state.retirementDone(owedRetirements)
            let effects = takeEffectsLocked()
            lock.unlock()
            effects.perform(on: self)
        }
    }

    /// Counts one more retirement the loop owes, also in the thread's
    /// context, before the plan that counts it lets go of its operation: a
    /// wait for this queue from the operation's `deinit` must not wait for
    /// them (`waitUntilIdle`).
    @inline(__always)
    private func owe(_ owed: inout Int, _ context: ThreadContext) {
        owed += 1
        context.drainOwedRetirements = owed
    }

    /// Moves the loop's batch of cancelled operations into the drain claim
    /// (see `DrainClaim`). Out of line: the common step has none.
    @inline(never)
    private static func moveCancelled(from batch: inout [Operation], to context: ThreadContext) {
        swap(&context.drainClaimCancelled, &batch)
    }

    /// Moves them back (emptied if they were given back).
    @inline(never)
    private static func moveCancelled(from context: ThreadContext, to batch: inout [Operation]) {
        swap(&context.drainClaimCancelled, &batch)
    }

    /// Removes a finished operation from the queue, under the lock: returns
    /// whether its tail runs user code and whether it keeps its slot until
    /// its observers have been told (only if `mayKeepSlot`).
    @inline(__always)
    private func retireLocked(
        _ plan: borrowing FinishPlan,
        mayKeepSlot: Bool,
        released: inout [Unmanaged<Operation>]
    ) -> (userTail: Bool, keptSlot: Bool) {
        let operation = plan.operation
        let keepsSlot = mayKeepSlot && plan.announces && operation.queueLink.has(QueueLink.Flags.holdsSlot)
        if let owned = state.unlink(operation, retirementPending: plan.countsRetirement, keepingSlot: keepsSlot) {
            released.append(owned)
        }
        emitLocked(.finished(operation))
        return (plan.hasUserTail, keepsSlot)
    }

    /// Starts one dequeued operation; if it finished synchronously, releases
    /// its dependents and returns its plan for the loop to retire.
    private func run(_ operation: Operation, customStart: Bool, readied: inout [Unmanaged<Operation>]) -> FinishPlan? {
        guard let plan = operation.startFromQueue(customStart: customStart, for: self) else { return nil }
        plan.releaseDependents(collectingFor: self, into: &readied)
        return plan
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
}

extension Array {
    /// Removes every element, keeping the capacity. Much cheaper than
    /// `removeAll(keepingCapacity:)` for the drain loop's usual zero or one
    /// element.
    @inline(__always)
    mutating func empty() {
        switch count {
        case 0: return
        case 1: removeLast()
        default: removeAll(keepingCapacity: true)
        }
    }
}

extension OperationQueue {
    /// A drain loop of this queue is about to wait in one of the library's
    /// waits: if the queue holds further loops back, it adds them freely
    /// from now on, and posts one now if work waits.
    final func drainLoopWillBlock() {
        changeState { $0.drainLoopWillBlock() }
    }

    /// Applies `change` to the state under the lock and, if it changed
    /// anything (it returns true), lets the queue act on it: start what a
    /// freed slot allows, wake waiters.
    @inline(__always)
    private func changeState(_ change: (inout QueueState) -> Bool) {
        lock.lock()
        guard change(&state) else {
            lock.unlock()
            return
        }
        let effects = takeEffectsLocked()
        lock.unlock()
        effects.perform(on: self)
    }

    /// The watcher's look at this queue's drain loops (see `LoopWatcher`
    /// and `DrainLoops.watch`): posts a loop if the one running is stuck in
    /// an operation. Returns whether the watcher keeps watching, and what
    /// it saw.
    final func watchDrainLoops(seen: DrainLoops.Mark?, stuck: Bool = false) -> (keepsWatching: Bool, mark: DrainLoops.Mark) {
        lock.lock()
        let verdict = state.watchDrainLoops(seen: seen, returned: drainReturns.load(ordering: .relaxed), stuck: stuck)
        let effects = verdict.keepsWatching ? QueueEffects() : takeEffectsLocked()
        lock.unlock()
        effects.perform(on: self)
        return verdict
    }

    /// Frees the slot that the finished `operation` kept while its
    /// observers are told (see `drain`), if it still holds it, and lets the
    /// queue start what the slot allows.
    final func releaseKeptSlot(of operation: Operation) {
        changeState { $0.releaseKeptSlot(of: operation) }
    }

    /// Frees the slot of the finished `operation` before its retirement
    /// (see `QueueState.releaseSlotEarly(of:)`), if it still holds it, and
    /// lets the queue start what the slot allows.
    final func releaseSlotEarly(of operation: Operation) {
        changeState { $0.releaseSlotEarly(of: operation) }
    }

    /// The calling thread is about to block in one of the library's waits.
    /// The wait may be for work that needs what this thread holds:
    /// - if the thread runs a drain loop of a queue that holds further
    ///   loops back (`DrainLoops`), the queue adds loops freely from now on;
    /// - if it is telling the observers of a finished operation that kept
    ///   its slot for them, the slot is freed, which would otherwise happen
    ///   only once the observers have returned, that is, after this wait.
    static func threadWillBlock(_ context: ThreadContext) {
        // Operations whose `isReady` observers this thread is telling: their
        // queues hear of them now, since the wait may be for them.
        PendingAdmission.admitAll(context)
        // Operations a drain loop on this thread took and has not started:
        // the wait may be for them (`DrainClaim`).
        if let next = context.drainClaim, let queue = context.drainClaimQueue, !context.drainClaimGivenBack {
            context.drainClaimGivenBack = true
            var cancelled: [Operation] = []
            swap(&cancelled, &context.drainClaimCancelled)
            queue._withUnsafeGuaranteedRef { $0.giveBack(next, cancelled: cancelled) }
        }
        if let queue = context.queueReference {
            // The frame that set the reference (a drain loop) holds the queue.
            queue._withUnsafeGuaranteedRef { $0.drainLoopWillBlock() }
        }
        guard context.operationReference != nil else { return }
        for operation in context.runningOperations where operation.loadState().isFinished {
            operation.owningQueueForAnalysis()?.releaseKeptSlot(of: operation)
        }
    }
}

/// The tail (observers) of one finished operation, run on
/// a pool worker of its own: a drain loop that retired several operations
/// at once runs one tail itself and hands each other one to such a job.
/// The queue counted the retirement as in flight (`unlink` with
/// `retirementPending`), which keeps it alive until `complete(settle: true)`.
final class RetirementJob: PoolJob, @unchecked Sendable {
    // @unchecked Sendable: `plan` is taken once, by the one worker that runs
    // the job; nothing else touches it.
    private var plan: FinishPlan?

    init(_ plan: consuming FinishPlan) {
        self.plan = consume plan
    }

    func runJob(on worker: Worker) {
        plan.take()?.complete(settle: true)
    }
}

/// The finish plans of a drain loop's batch of cancelled operations, moved
/// in and out without copies (`FinishPlan` is noncopyable, so it cannot live
/// in an `Array`). Storage is allocated on first use and grows as needed.
struct FinishPlanBatch: ~Copyable {
    private var storage: UnsafeMutablePointer<FinishPlan>?
    private var capacity = 0
    private var count = 0

    init() {}

    deinit {
        guard let storage else { return }
        storage.deinitialize(count: count)
        storage.deallocate()
    }

    var isEmpty: Bool { count == 0 }

    mutating func append(_ plan: consuming FinishPlan) {
        if count == capacity {
            let grown = UnsafeMutablePointer<FinishPlan>.allocate(capacity: max(16, capacity * 2))
            if let storage {
                grown.moveInitialize(from: storage, count: count)
                storage.deallocate()
            }
            storage = grown
            capacity = max(16, capacity * 2)
        }
        (storage! + count).initialize(to: plan)
        count += 1
    }

    /// Calls `body` with each plan, in order, without taking them.
    func forEach(_ body: (borrowing FinishPlan) -> Void) {
        guard let storage else { return }
        for index in 0..<count { body(storage[index]) }
    }

    /// Moves every plan out, in order, to `body`; the batch is left empty.
    mutating func takeAll(_ body: (consuming FinishPlan) -> Void) {
        guard let storage else { return }
        let taken = count
        count = 0
        for index in 0..<taken { body((storage + index).move()) }
    }
}

extension OperationQueue {
    /// The quality of service an operation runs at, by index (2 is
    /// `.default`, which stands for "none chosen" on either side): the
    /// queue's for an operation that chose none, the operation's on a queue
    /// that chose none, otherwise the higher of the two. As in Foundation,
    /// a queue's quality of service raises its operations' but never lowers
    /// them.
    @inline(__always)
    static func effectiveQualityOfService(operation: Int, queue: Int) -> Int {
        if operation == 2 { return queue }
        if queue == 2 { return operation }
        return max(operation, queue)
    }
}

/// The drain claim: what a drain loop has taken from its queue to start
/// next, while it completes the operations it just retired. Completing one
/// lets go of the loop's reference to it, which may be the last: its
/// `deinit` (or that of an object it owns, such as its result) then runs on
/// the loop's thread, and may wait for the very operation the loop took, or
/// for the queue (probe 55). A library wait made there gives the operations
/// back to the queue first (`OperationQueue.threadWillBlock`), so that
/// another loop starts them; the loop then starts nothing and picks again.
///
/// Kept in the thread's context, in trivial fields so that setting and
/// clearing it on every step costs a few stores: `ThreadContext.drainClaim`
/// (the operation taken; set only while the loop completes operations),
/// `drainClaimCancelled` (cancelled operations taken with it, moved there
/// meanwhile), `drainClaimQueue` (set while the loop runs) and
/// `drainClaimGivenBack`. Unretained: the loop holds the operation taken
/// (its own retain, taken under the lock) and the queue (its frame runs on
/// it).
enum DrainClaim {}

extension OperationQueue {
    /// Gives back what a drain loop took and has not started (see
    /// `DrainClaim`), because its thread is about to block: the operations
    /// go back to their lanes, their slots are free, and loops are added
    /// freely, so that one is posted now for them.
    final func giveBack(_ next: Unmanaged<Operation>, cancelled: [Operation]) {
        lock.lock()
        next._withUnsafeGuaranteedRef { state.giveBack($0) }
        for operation in cancelled { state.giveBack(operation) }
        _ = state.drainLoopWillBlock()
        let effects = takeEffectsLocked()
        lock.unlock()
        effects.perform(on: self)
    }
}
