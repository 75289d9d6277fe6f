// Finishing an operation: the one retirement path.
//
// Whatever finished the operation — the base `start()` after `main()`, an
// asynchronous body, `AsyncOperation.finish()`, or a subclass announcing
// `isFinished` — the consequences run once, in this order:
//
// 1. the operation is marked finished (`beginFinish`), once;
// 2. it leaves the dependents lists of its unfinished dependencies, and its
//    own dependents are released (`FinishPlan.releaseDependents`);
// 3. it leaves its queue (`OperationQueue.memberFinished`, or the drain loop
//    that started it, under the lock it takes anyway);
// 4. the completion block is handed to a worker of the pool, then the
//    `isExecuting`/`isFinished` did-change observers run (`FinishPlan.announce`
//    and `FinishPlan.complete`): Darwin's logs in the chapter's article show
//    the block under way before those observers are told;
// 5. it retires: waiters wake;
// 6. the queue is told the retirement is done (its waiters may wake).

extension Operation {
    /// The body has ended (the base `start()` after `main()` returned, or an
    /// asynchronous body): the base state becomes finished, with
    /// will/did-change announcements. Returns the finish plan if the class
    /// now reports the operation finished; the caller runs it.
    ///
    /// `announced` is true when the caller already sent the will-change.
    final func bodyDidFinish(wasExecuting: Bool, announced: Bool) -> FinishPlan? {
        var observed = loadState().isObserved
        if !observed, !announced, !overrides(.isFinished) {
            // Nothing to announce, and the base state is the truth: the body's
            // end and the start of finishing share one critical section,
            // unless an observer registered since the snapshot above (it may
            // already have read "not finished": it must hear the change, or a
            // `stateChanges` stream taken now would never end).
            var becameObserved = false
            let plan = beginFinish(announcing: [], endingBody: true, unlessObserved: &becameObserved)
            guard becameObserved else { return plan }
            observed = true
        }
        let keys: LifecycleKeys = observed || announced ? (wasExecuting ? [.isExecuting, .isFinished] : .isFinished) : []
        if observed, !announced { notifyWillChange(keys.names) }
        withStateLock { _ = $0.finishBody() }
        return finishIfReportedFinished(announcing: keys)
    }

    /// Asks the class whether the operation is finished (the getter when it
    /// is overridden) and, if so, begins finishing. `keys` are the
    /// did-change announcements owed to observers: delivered by the plan
    /// after the operation left its queue, or now if it is not finished.
    final func finishIfReportedFinished(announcing keys: LifecycleKeys) -> FinishPlan? {
        guard reportedFinished, let plan = beginFinish(announcing: keys) else {
            if !keys.isEmpty { notifyDidChange(keys.names) }
            return nil
        }
        return plan
    }

    /// Whether finishing now would run observers of the operation (user
    /// code that may block) on the finishing thread, as far as can be told
    /// before it finishes. (The completion block runs on a worker of the
    /// pool in any case.)
    final var finishRunsUserTail: Bool {
        loadState().isObserved
    }

    /// Step 1: marks the operation finished, once, and takes everything the
    /// later steps need. Returns nil if it had already finished.
    /// With `endingBody`, the base state also becomes finished (see
    /// `bodyDidFinish`), in the same critical section.
    final func beginFinish(announcing keys: LifecycleKeys, endingBody: Bool = false) -> FinishPlan? {
        var unused = false
        return beginFinish(announcing: keys, endingBody: endingBody, unlessObserved: &unused, checkingObserved: false)
    }

    /// `beginFinish`, except that if the operation is observed when the lock
    /// is taken it changes nothing, sets `becameObserved` and returns nil:
    /// the caller announces the change instead.
    final func beginFinish(
        announcing keys: LifecycleKeys,
        endingBody: Bool,
        unlessObserved becameObserved: inout Bool,
        checkingObserved: Bool = true
    ) -> FinishPlan? {
        // Cancellation handlers (an async body's task) are useless once the
        // operation finished; they may capture user values, so they are
        // released outside the lock (`discarded`).
        var discarded: [@Sendable () -> Void] = []
        // The context carried into the body (its binders may capture the
        // operation: kept, they would keep it alive; probe 38). No body
        // runs after the finish; released outside the lock.
        var droppedContext: CarriedContext?
        var droppedInputs = OperationList.empty
        var observedNow = false
        defer { becameObserved = observedNow }
        let plan = withStateLock { state -> FinishPlan? in
            if checkingObserved, state.isObserved {
                observedNow = true
                return nil
            }
            // An observer that registered after the caller looked (a subclass
            // announcing its own `isFinished`) hears the did-change: it may
            // have read "not finished" already, and a `stateChanges` stream
            // taken then would never end (probe 8).
            let keys: LifecycleKeys = keys.isEmpty && state.isObserved ? .isFinished : keys
            if endingBody { _ = state.finishBody() }
            guard state.beginFinishing() else { return nil }
            if storedDependents.isEmpty, storedDependencies.isEmpty, extras == nil, keys.isEmpty {
                // The plain case: nothing to release, run or announce.
                return FinishPlan(operation: self, dependents: .none, registered: .empty, completion: nil, queue: membership, keys: [])
            }
            let dependents = Operation.retainDependents(storedDependents.take())
            // Still registered with unfinished dependencies (it was cancelled,
            // or its class let it start early).
            let counted = state.unfinishedDependencies > 0
            let dependsOnItself = state.hasSelfDependency || state.hasUncountedSelfDependency
            state.clearDependencies()
            // Inputs it lets go of (`ResultOperation`): it leaves their
            // dependents lists before the queue lets go of it (see
            // `DependentList`); `registered` holds them until then.
            droppedInputs = takeInputsOnFinishLocked()
            let registered = counted ? droppedInputs : .empty
            // The dependencies it keeps: it stays in their lists, so that
            // their finish can tell whether it closed a cycle
            // (`FinishedCycles.swift`), until they finish or it is
            // deallocated. Each one's lock is taken once before the queue
            // lets go of it (`listed`; see `Operation.retainDependent`).
            let listed = counted ? storedDependencies : .empty
            if counted, !listed.isEmpty { state.isListedAhead = true }
            var completion: (@Sendable () -> Void)?
            if let extras {
                completion = extras.completionBlock
                extras.completionBlock = nil
                if !extras.cancellationHandlers.isEmpty {
                    discarded = extras.cancellationHandlers
                    extras.cancellationHandlers = []
                }
                if extras.carriedContext != nil {
                    droppedContext = extras.carriedContext
                    extras.carriedContext = nil
                }
            }
            let plan = FinishPlan(
                operation: self,
                dependents: dependents,
                registered: registered,
                listed: listed,
                completion: completion,
                queue: membership,
                keys: keys
            )
            // A self-dependency would keep the operation alive forever; the
            // plan holds it, so dropping that reference here frees nothing.
            if dependsOnItself { _ = storedDependencies.remove(self) }
            return plan
        }
        withExtendedLifetime(discarded) {}
        withExtendedLifetime(droppedContext) {}
        withExtendedLifetime(droppedInputs) {}
        if plan != nil, TraceRecorder.isActive { TraceRecorder.shared.record(.finished, self, queue: nil) }
        return plan
    }

    /// Step 5: marks the operation retired and forgets its queue. Returns the
    /// waiters to wake, which the caller calls once it has dropped its own
    /// reference to the operation (so that a woken waiter finds it released
    /// if nothing else holds it).
    final func retire() -> [@Sendable () -> Void] {
        withStateLock { state -> [@Sendable () -> Void] in
            state.retire()
            membership = nil
            return extras?.waiters.takeAll() ?? []
        }
    }

    /// Registers `callback` to run once the operation retires. Returns the
    /// key that removes it, or nil if the operation has already retired (the
    /// callback is then not called).
    final func addRetireWaiter(_ callback: @escaping @Sendable () -> Void) -> Int? {
        withStateLock { state -> Int? in
            if state.isRetired { return nil }
            return extrasWhileLocked().waiters.add(callback)
        }
    }

    /// Removes a callback registered with `addRetireWaiter` (a wait that
    /// timed out or was cancelled).
    final func removeRetireWaiter(_ key: Int) {
        let removed = withStateLock { _ in extras?.waiters.remove(key) }
        withExtendedLifetime(removed) {}
    }

    /// Strong references to the dependents in `list` that are not being
    /// deallocated, in order. Call while holding the lock of the operation
    /// whose list `list` was (see `retainDependent`). A list of several keeps
    /// its buffer, whose entries are retained in place (see
    /// `HeldDependents`): finishing allocates nothing for them.
    static func retainDependents(_ list: DependentList) -> HeldDependents {
        switch list {
        case .empty:
            return .none
        case .one(let entry):
            guard let dependent = retainDependent(entry) else { return .none }
            return .one(dependent)
        case .many(let array):
            array.holdEntries { entry in
                guard let dependent = retainDependent(entry) else { return false }
                _ = Unmanaged.passRetained(dependent)
                return true
            }
            return .many(array)
        }
    }

    /// A strong reference to the dependent behind `entry`, or nil if it is
    /// being deallocated. Call while holding the lock of the operation whose
    /// dependents list holds `entry`: that lock keeps the dependent's memory
    /// valid (see `DependentList`).
    static func retainDependent(_ entry: Unmanaged<Operation>) -> Operation? {
        entry._withUnsafeGuaranteedRef { dependent -> Operation? in
            // A queued dependent is retained by its queue, which lets go of it
            // only after step 2 of its own finish, which takes this lock. It
            // has then left this list, unless it finished ahead of this
            // operation (`isListedAhead`, set before that step): such an
            // entry may outlive its queue's reference.
            let state = dependent.loadState()
            if state.isEnqueued, !state.isListedAhead { return dependent }
            // Otherwise only its owner keeps it alive, and it may be
            // deinitializing (its `deinit` then waits for this lock).
            return RuntimeTryRetain.strongReference(to: dependent)
        }
    }
}

/// The dependents a finishing operation releases, each retained: none, one,
/// or the dependents buffer taken from the operation, whose entries were
/// retained in place (`DependentArray.holdEntries`) and are released when
/// the buffer is deallocated.
enum HeldDependents {
    case none
    case one(Operation)
    case many(DependentArray)

    var isEmpty: Bool {
        if case .none = self { return true }
        return false
    }
}

/// What remains to do after an operation was marked finished: steps 2 to 6
/// of the retirement path. Created by `Operation.beginFinish`; used once.
///
/// A few references and a flag, so that it copies cheaply through the drain
/// loop. The dependents are held directly (one operation, or one array for
/// several); the rest lives in a `FinishDetails` object, made only when
/// needed.
struct FinishPlan: ~Copyable {
    /// The finished operation, held until step 5 is done. The drain loop
    /// reads it to remove it from the queue.
    let operation: Operation
    /// The owning queue, unretained: it keeps itself alive while the
    /// operation is a member, and while a retirement it counted is in flight.
    let queue: Unmanaged<OperationQueue>?
    /// The dependents to release (retained), held directly: no allocation
    /// for the common finish.
    private let dependents: HeldDependents
    /// Dependencies still to leave, completion block and owed announcements;
    /// nil when there are none.
    private let details: FinishDetails?
    /// Whether instruments were installed when the operation finished.
    private let instrumented: Bool

    init(
        operation: Operation,
        dependents: HeldDependents,
        registered: OperationList,
        listed: OperationList = .empty,
        completion: (@Sendable () -> Void)?,
        queue: Unmanaged<OperationQueue>?,
        keys: LifecycleKeys
    ) {
        self.operation = operation
        self.queue = queue
        self.dependents = dependents
        if registered.isEmpty, listed.isEmpty, completion == nil, keys.isEmpty {
            details = nil
        } else {
            details = FinishDetails(registered: registered, listed: listed, completion: completion, keys: keys)
        }
        instrumented = OperationInstrumentation.isActive
    }

    /// Whether step 4 tells observers (user code) on the finishing thread,
    /// so that the queue counts the retirement as in flight until done. The
    /// completion block is not counted: it runs on a worker of the pool.
    var hasUserTail: Bool { details?.hasUserTail ?? false }

    /// Whether step 4 tells observers of `isExecuting`/`isFinished`.
    var announces: Bool { details?.announces ?? false }


    /// Whether the queue must count the retirement as in flight until step
    /// 6: the tail runs user code, or instruments are told `finished` there
    /// (queue waiters must not wake before they are).
    var countsRetirement: Bool { instrumented || hasUserTail }

    /// Steps 2 to 6, for every finish except a drain loop's own. The queue
    /// counts the retirement as in flight until it is complete, so that its
    /// waiters wake only after this plan has let go of the operation.
    ///
    /// As in a drain loop, an operation that holds a slot keeps it while its
    /// `isExecuting`/`isFinished` observers are told, so that a serial
    /// queue's next operation starts after them (Foundation's order); an
    /// observer that blocks in one of the library's waits frees it first
    /// (`OperationQueue.threadWillBlock(_:)`).
    consuming func run() {
        if details != nil || !dependents.isEmpty {
            var none: [Unmanaged<Operation>] = []
            releaseDependents(collectingFor: nil, into: &none)
        }
        if let queue {
            let finished = operation
            let kept = queue._withUnsafeGuaranteedRef {
                $0.memberFinished(finished, retirementPending: true, keepingSlot: announces)
            }
            if kept {
                announce()
                queue._withUnsafeGuaranteedRef { $0.releaseKeptSlot(of: finished) }
            }
        }
        complete(settle: true)
    }

    /// Step 2. Dependents that became ready and belong to `queue` (whose
    /// readiness is the base state) are appended to `readied` for the caller
    /// to admit under its own lock; others are handed to their queues.
    /// Appending to the caller's array (kept across a drain loop's
    /// iterations) costs no allocation per finished operation.
    ///
    /// `readied` holds them unretained: this plan holds each one (its
    /// `dependents`) until it is completed or dropped, and every caller
    /// admits `readied` and empties it before that.
    @inline(__always)
    func releaseDependents(collectingFor queue: OperationQueue?, into readied: inout [Unmanaged<Operation>]) {
        // Rarely, the operation still has dependency lists to leave or to
        // synchronize with (it was cancelled, or its class let it start
        // early): first, before the queue lets go of it.
        details?.leaveRegisteredLists(of: operation)
        // Dependents found finished below finished ahead of this operation
        // and may have closed a cycle with it, checked last
        // (`FinishedCycles.swift`). Empty, and unallocated, as a rule.
        var finishedAhead: [Operation] = []
        switch dependents {
        case .none:
            break
        case .one(let dependent):
            Self.release(dependent, of: operation, collectingFor: queue, into: &readied, finishedAhead: &finishedAhead)
        case .many(let list):
            // The plan holds each entry's retain (`holdEntries`) until it is
            // dropped, so borrowing them here is safe.
            list.forEach { entry in
                entry._withUnsafeGuaranteedRef {
                    Self.release($0, of: operation, collectingFor: queue, into: &readied, finishedAhead: &finishedAhead)
                }
            }
        }
        if !finishedAhead.isEmpty { operation.releaseCycles(closedBy: finishedAhead) }
    }

    /// Tells `dependent` that `operation` finished; see
    /// `releaseDependents(collectingFor:into:)`.
    @inline(__always)
    private static func release(
        _ dependent: Operation,
        of operation: Operation,
        collectingFor queue: OperationQueue?,
        into readied: inout [Unmanaged<Operation>],
        finishedAhead: inout [Operation]
    ) {
        switch dependent.dependencyDidFinish(operation, callerQueue: queue) {
        case .none:
            break
        case .dependentFinished:
            finishedAhead.append(dependent)
        case .readyInCallerQueue:
            readied.append(Unmanaged.passUnretained(dependent))
        case .ready(let other):
            other.memberReadinessMayHaveChanged(dependent)
        }
    }

    /// Step 4: the completion block goes to the pool, then the did-change
    /// announcements owed to the operation's observers are made, once. The
    /// drain loop delivers them while the operation still keeps its slot,
    /// so that, as in Foundation, a serial queue's next operation starts
    /// after the previous one announced `isFinished` (unless an observer
    /// blocks in one of the library's waits, which frees the slot first).
    func announce() {
        submitCompletion()
        guard let details, let names = details.takeAnnouncement() else { return }
        let finished = operation
        finished.withThreadContext(queue: queue) { finished.notifyDidChange(names) }
    }

    /// Step 4, first half: hands the completion block, if any, to a worker
    /// of the pool, once. Before the `isExecuting`/`isFinished` observers
    /// are told, as on Darwin, where the chapter's article logs the block
    /// ahead of them: an observer may wait for the block to run. Before the
    /// waiters wake, so that it starts as soon as a worker is free, and in
    /// the order the operations finished (`CompletionBlocks`). The queue is
    /// still alive here (the operation's retirement is in flight, or the
    /// caller runs its drain loop).
    func submitCompletion() {
        guard let details, let block = details.takeCompletion() else { return }
        let owner = queue
        let queueQoS = owner?._withUnsafeGuaranteedRef { $0.qualityOfServiceIndex.load(ordering: .relaxed) }
            ?? QualityOfService.default.index
        let qos = OperationQueue.effectiveQualityOfService(operation: operation.loadState().qosIndex, queue: queueQoS)
        // Moved: this thread keeps no reference to release (see `submit`).
        CompletionBlocks.submit(consume block, of: operation, queue: owner?.takeUnretainedValue(), qos: qos)
    }

    /// Steps 4 to 6: the completion block and the observers (unless
    /// `announce()` handled them), retirement, and (when `settle` is true)
    /// telling the queue that the retirement it counted is done. Drops the
    /// operation before the queue is told, so that a queue waiter that
    /// wakes finds it released if nothing else holds it (unless its
    /// completion block is still to run, which holds it, as Foundation's
    /// does).
    ///
    /// As in Foundation, the completion block runs asynchronously, on a
    /// worker of the pool ("typically a secondary thread"): waiters do not
    /// wait for it, and a serial queue's next operation may start before or
    /// while it runs. So a completion block that takes a lock the waiter
    /// holds, or that waits for the thread the waiter blocks, does not hang
    /// the wait (probe 46).
    consuming func complete(settle: Bool) {
        let owner = queue
        if instrumented || OperationInstrumentation.isActive {
            OperationInstrumentation.emit(.finished, operation, queue: owner?.takeUnretainedValue())
        }
        if let details {
            submitCompletion()
            if details.hasUserTail {
                let finished = operation
                finished.withThreadContext(queue: owner) {
                    if let names = details.takeAnnouncement() { finished.notifyDidChange(names) }
                }
            }
        }
        let waiters = operation.retire()
        if settle, let owner {
            // Letting go of the operation may run its `deinit` here, which
            // may wait for its queue: this retirement, settled only below,
            // must not keep that wait waiting (`waitUntilIdle`).
            let context = ThreadContext.current
            let saved = context.releasingRetirementOf
            context.releasingRetirementOf = owner
            _ = consume self
            context.releasingRetirementOf = saved
        } else {
            _ = consume self
        }
        for wake in waiters { wake() }
        if settle, let owner {
            owner._withUnsafeGuaranteedRef { $0.memberRetired() }
        }
    }
}

/// The parts of a `FinishPlan` beyond the plain case. Used by the one thread
/// that runs the plan (and, for `announce`, the drain loop before it hands
/// the plan on): never shared concurrently.
final class FinishDetails {
    private var registered: OperationList
    private var listed: OperationList
    private var completion: (@Sendable () -> Void)?
    private let keys: LifecycleKeys
    private var announced = false
    /// Whether the retirement tells observers (user code) on the finishing
    /// thread. Fixed at creation: the queue counted the retirement as in
    /// flight on that basis, and settles it on the same basis.
    let hasUserTail: Bool

    init(registered: OperationList, listed: OperationList, completion: (@Sendable () -> Void)?, keys: LifecycleKeys) {
        self.registered = registered
        self.listed = listed
        self.completion = completion
        self.keys = keys
        // The completion block is not part of it: it runs on a worker of
        // the pool (`CompletionBlocks`).
        hasUserTail = !keys.isEmpty
    }

    /// Whether the retirement owes observers announcements.
    var announces: Bool { !keys.isEmpty }


    /// The owed announcements' key names, once.
    func takeAnnouncement() -> [String]? {
        guard !keys.isEmpty, !announced else { return nil }
        announced = true
        return keys.names
    }

    /// The completion block, once.
    func takeCompletion() -> (@Sendable () -> Void)? {
        defer { completion = nil }
        return completion
    }

    /// Removes `operation` from the dependents lists of the dependencies it
    /// lets go of, once, and takes the lock of each one whose list it stays
    /// in: after that, a finishing dependency that finds it in its list
    /// knows that it may be deallocated (see `Operation.retainDependent`).
    func leaveRegisteredLists(of operation: Operation) {
        if !registered.isEmpty {
            registered.forEach { dependency in
                dependency.removeDependent(operation)
            }
            registered = .empty
        }
        if !listed.isEmpty {
            listed.forEach { dependency in
                guard dependency !== operation else { return }
                dependency.withStateLock { _ in }
            }
            listed = .empty
        }
    }
}

/// The lifecycle keys whose did-change announcements a finish owes its
/// observers, without allocating on the common path.
struct LifecycleKeys: OptionSet, Sendable {
    let rawValue: UInt8
    static let isExecuting = LifecycleKeys(rawValue: 1)
    static let isFinished = LifecycleKeys(rawValue: 2)

    /// The key names, `isExecuting` before `isFinished` (Foundation's order).
    var names: [String] {
        var result: [String] = []
        if contains(.isExecuting) { result.append("isExecuting") }
        if contains(.isFinished) { result.append("isFinished") }
        return result
    }
}

/// Steps 2 to 6 of one finish (`FinishPlan.run()`), run as a pool job: for
/// a finish on a thread where its user tail must not run (Swift's
/// cooperative pool).
final class FinishPlanJob: PoolJob, @unchecked Sendable {
    // @unchecked Sendable: `plan` is taken once, by the one worker that runs
    // the job; nothing else touches it.
    private var plan: FinishPlan?

    init(_ plan: consuming FinishPlan) {
        self.plan = consume plan
    }

    func runJob(on worker: Worker) {
        plan.take()?.run()
    }
}
