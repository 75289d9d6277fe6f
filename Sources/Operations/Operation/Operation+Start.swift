// Starting an operation: the base `start()`, and how a queue starts the
// operations it dequeues.

extension Operation {
    /// How the body started by the base `start()` ended.
    enum BodyOutcome {
        /// The body has finished (synchronous work).
        case finished
        /// The body continues asynchronously; it reports its end through
        /// `bodyDidFinish(wasExecuting:)` (`AsyncOperation.finish()`,
        /// an `async` body's task).
        case continues
    }

    /// Whether the class overrides `member` (see `OverrideDetection`).
    @inline(__always)
    final func overrides(_ member: OverrideDetection.Member) -> Bool {
        OverrideDetection.overrides(self, member)
    }

    /// `isReady` as the class reports it (the getter when overridden).
    final var reportedReady: Bool {
        overrides(.isReady) ? isReady : loadState().isBaseReady
    }

    /// `isFinished` as the class reports it (the getter when overridden).
    final var reportedFinished: Bool {
        overrides(.isFinished) ? isFinished : loadState().isBaseFinished
    }

    // MARK: Entry points

    /// The base `start()`: called by hand, by a subclass's `super.start()`,
    /// or (for a class that overrides `start()`) through the queue's call.
    final func startByCall() {
        let snapshot = loadState()
        // Darwin's base `start()` simply returns for an operation its class
        // already finished (OTCore: `if isCancelled { completeOperation() };
        // super.start()`, also when its queue made the call: the finish
        // consumed the queue's mark). Not a start, and not a misuse.
        if snapshot.finishedWithoutBaseStart { return }
        performBaseStart(queueCall: snapshot.isQueueStart)?.run()
    }

    /// A start by hand has passed its checks and is about to run (or skip)
    /// the body: the context of the calling code is captured for the body,
    /// and the recorder and instruments hear of the start. Not before the
    /// checks: a refused start changes nothing and is no start (probe 44:
    /// a span opened for it never ended).
    private func manualStartCommitted() {
        // The caller's values replace any an add captured meanwhile: that
        // add was refused (this start passed its checks), and its body runs
        // here, for this caller (probe 45).
        captureContext(replacing: true)
        if TraceRecorder.isActive {
            let time = monotonicNanoseconds()
            TraceRecorder.shared.describe(self, queue: nil, at: time)
            TraceRecorder.shared.record(.started, self, queue: nil, at: time)
        }
        if OperationInstrumentation.isActive { OperationInstrumentation.emit(.started, self, queue: nil) }
    }

    /// Starts this operation for its queue, which has dequeued it.
    ///
    /// A class that overrides `start()` gets its `start()` called (user code;
    /// its finish arrives later through announcements). Otherwise the base
    /// start runs directly, and if the operation finished synchronously the
    /// finish plan is returned: the caller (the drain loop) removes the
    /// operation from the queue and then completes the plan, so that
    /// finishing and picking the next operation share one lock acquisition.
    final func startFromQueue(customStart: Bool, for queue: OperationQueue) -> FinishPlan? {
        guard customStart else { return performBaseStart(queueCall: true, owner: queue) }
        // The mark stays after `start()` returns, until the base start
        // consumes it or the operation finishes: a class may hand its
        // `super.start()` to another thread (or re-dispatch its own
        // `start()`), and that later call is still the queue's start, as in
        // Foundation (probe 25).
        withStateLock { $0.isQueueStart = true }
        ThreadContext.withCurrent { context in
            let saved = context.enter(self)
            withCarriedContext { start() }
            context.leave(restoring: saved)
        }
        return nil
    }

    // MARK: The base start

    /// Validates the start, runs the body, and returns the finish plan if
    /// the operation finished synchronously. Returns nil when the body
    /// continues asynchronously, when the class reports it unfinished, or
    /// when the call was a misuse that a handler refused.
    ///
    /// `owner`: the queue whose drain loop makes the call (it owns the
    /// operation), when known.
    final func performBaseStart(queueCall: Bool, owner: OperationQueue? = nil) -> FinishPlan? {
        // One compare-and-swap for the plain case: no dependencies,
        // observers, cancellation or failure policy, readiness not user code.
        if queueCall || !overrides(.isReady), tryFastStart(byQueue: queueCall) {
            if !queueCall { manualStartCommitted() }
            return withThreadContext { runBodyAndFinish(owner: owner) }
        }
        var state = loadState()
        // As in Foundation, the base start skips the body only for the base
        // cancellation (`Operation.cancel()`); a subclass that keeps its own
        // cancelled flag handles it in its `main()` or `start()`.
        var cancelled = state.isCancelled
        if !queueCall {
            if let refusal = manualStartRefusal(state, cancelled: cancelled) {
                OperationMisuse.report(refusal.code, subject: .operation(self), refusal.detail)
                return nil
            }
        }
        if state.hasFailurePolicy, !cancelled {
            applyFailurePolicy(after: dependencies)
            state = loadState()
            cancelled = state.isCancelled
        }
        // From here the thread runs this operation: observers of its
        // lifecycle (which may wait) are recognised as running inside it.
        return withThreadContext { startValidated(state: state, cancelled: cancelled, queueCall: queueCall, owner: owner) }
    }

    private func startValidated(state: OperationState, cancelled: Bool, queueCall: Bool, owner: OperationQueue?) -> FinishPlan? {
        let observed = state.isObserved
        let predicted: [String] = cancelled ? ["isFinished"] : ["isExecuting"]
        if observed {
            if !cancelled {
                // The body runs on this thread next, whatever the observers
                // do (see below): a wait of theirs for this operation or its
                // queue can never end (`WaitRegistry.Record.startingBody`).
                // (Unless a second `start()` by hand, a misuse, races this
                // one and wins: the wait is then reported too.)
                ThreadContext.withCurrent { context in
                    let saved = context.announcedBaseStart
                    context.announcedBaseStart = Unmanaged.passUnretained(self)
                    notifyWillChange(predicted)
                    context.announcedBaseStart = saved
                }
            } else {
                notifyWillChange(predicted)
            }
        }
        // Once "will isExecuting" is announced, the body runs even if a
        // cancellation lands before the lock is taken (as in Foundation):
        // observers hear the change they were told about, not false → false.
        let decision = withStateLock { $0.beginBaseStart(announcedRun: observed && !cancelled, byHand: !queueCall) }
        switch decision {
        case .run:
            if !queueCall { manualStartCommitted() }
            if observed {
                if cancelled {
                    // Unreachable with the base state (cancellation is never
                    // withdrawn); kept so that announcements always balance.
                    notifyDidChange(predicted)
                    notifyWillChange(["isExecuting"])
                }
                notifyDidChange(["isExecuting"])
            }
            return runBodyAndFinish(owner: owner)
        case .skipCancelled:
            if !queueCall { manualStartCommitted() }
            // Only when "will isFinished" was the announcement (or none was).
            discardUnrunBody()
            return bodyDidFinish(wasExecuting: false, announced: observed)
        case .ownedByQueue:
            if observed { notifyDidChange(predicted) }
            if let refusal = manualStartRefusal(loadState(), cancelled: cancelled) {
                OperationMisuse.report(refusal.code, subject: .operation(self), refusal.detail)
            }
            return nil
        case .alreadyExecuting, .alreadyFinished:
            if observed { notifyDidChange(predicted) }
            // The class finished it meanwhile, before any base start: the
            // call returns, as above (`startByCall`).
            if case .alreadyFinished = decision, loadState().finishedWithoutBaseStart { return nil }
            let refusal = startRefusal(loadState()) ?? (.startWhileExecuting, "was started twice; the other call is already running it.")
            OperationMisuse.report(refusal.code, subject: .operation(self), refusal.detail)
            return nil
        }
    }

    /// Runs the body with the thread context set; returns the finish plan if
    /// it finished synchronously.
    private func runBodyAndFinish(owner: OperationQueue?) -> FinishPlan? {
        // A queue's progress (`OperationsFoundation`) counts the body of
        // each operation its base start runs; nothing to check until one
        // is installed in the process.
        let outcome = ProgressHook.isInstalled ? runBodyReportingProgress(owner: owner) : runBody()
        guard case .finished = outcome else { return nil }
        return bodyDidFinish(wasExecuting: true, announced: false)
    }

    /// Runs `body` with the calling thread marked as running this operation
    /// (see `ThreadContext`), the queue unchanged.
    @inline(__always)
    final func withThreadContext<R: ~Copyable>(_ body: () -> R) -> R {
        // `withCurrent` lends the context without reference counting (the
        // thread-specific key holds a retain of it until this thread
        // exits); an `unowned(unsafe)` local would still be retained around
        // each call made on it.
        let saved = ThreadContext.withCurrent { $0.enter(self) }
        defer { ThreadContext.withCurrent { $0.leave(restoring: saved) } }
        return body()
    }

    /// Runs `body` with this operation marked as running on the calling
    /// thread for `queue` (its finish: its observers, or its queue's, are
    /// told inside it).
    @inline(__always)
    final func withThreadContext(queue: Unmanaged<OperationQueue>?, _ body: () -> Void) {
        let saved = ThreadContext.withCurrent { $0.enter(self, queue: queue) }
        body()
        ThreadContext.withCurrent { $0.leave(restoring: saved) }
    }

    /// Calls ``main()`` with ``threadPriority`` applied to the calling
    /// thread and the carried context bound.
    final func runMainWithThreadPriority() {
        guard loadState().hasCustomThreadPriority else {
            withCarriedContext { main() }
            return
        }
        let change = ThreadPriorityChange.apply(threadPriority)
        withCarriedContext { main() }
        change?.restore()
    }

    // MARK: Carried context

    /// Captures the registered context values of the calling code, once
    /// (when the operation is added). Returns the serial of the context this
    /// call captured, or nil if it captured none. Call with no lock held.
    final func captureContextIfNeeded() -> UInt64? {
        captureContext(replacing: false)
    }

    /// Captures the calling code's context values: when none are captured
    /// yet, or (`replacing`, a start by hand that passed its checks) in
    /// place of any. Returns the serial of the context captured, or nil.
    /// Call with no lock held.
    @discardableResult
    final func captureContext(replacing: Bool) -> UInt64? {
        guard OperationContextPropagation.isActive,
              replacing || withStateLock({ _ in extras?.carriedContext == nil }),
              let captured = OperationContextPropagation.capture(for: self) else { return nil }
        let replaced = withStateLock { _ -> (stored: Bool, old: CarriedContext?) in
            let old = extrasWhileLocked().carriedContext
            guard replacing || old == nil else { return (false, nil) }
            extras?.carriedContext = captured
            return (true, old)
        }
        // Released here, outside the lock: it holds another caller's values.
        withExtendedLifetime(replaced.old) {}
        return replaced.stored ? captured.serial : nil
    }

    /// Drops the context an add captured (`serial`), if the add did not
    /// give the operation to `queue` (it was refused, or found no room) and
    /// nobody replaced it since (a start by hand that won the race keeps its
    /// own): the operation is left as it was, and a later add captures its
    /// own caller's values. Call with no lock held.
    final func discardContextUnlessIn(_ queue: OperationQueue, captured serial: UInt64) {
        guard !belongs(to: queue) else { return }
        let dropped = withStateLock { _ -> CarriedContext? in
            guard let context = extras?.carriedContext, context.serial == serial else { return nil }
            extras?.carriedContext = nil
            return context
        }
        // Released here, outside the lock: it holds the caller's values.
        withExtendedLifetime(dropped) {}
    }

    /// The captured context, if any.
    final var carriedContext: CarriedContext? {
        guard OperationContextPropagation.isActive else { return nil }
        return withStateLock { _ in extras?.carriedContext }
    }

    /// Runs `body` with the carried context bound.
    @inline(__always)
    final func withCarriedContext(_ body: () -> Void) {
        guard let context = carriedContext else { return body() }
        context.run(body)
    }

    // MARK: Refusals

    private func manualStartRefusal(
        _ state: OperationState,
        cancelled: Bool
    ) -> (code: OperationMisuse.Code, detail: String)? {
        // Executing first: a second start of a queued operation that is
        // already running (two `super.start()` calls of a class's own
        // `start()`) is a start while executing, not a start by hand.
        if state.isBaseExecuting { return startRefusal(state) }
        if state.isEnqueued, !state.isFinished {
            let owner = withStateLock { _ in membership?.takeUnretainedValue() }
            let name = owner?.misuseSubject ?? "a queue"
            return (.startOwnedByQueue, "was started by hand, but \(name) owns it. A queued operation is started by its queue; call start() only on operations you run yourself.")
        }
        if let refusal = startRefusal(state) { return refusal }
        if !cancelled, !reportedReady {
            return (.startNotReady, notReadyExplanation())
        }
        return nil
    }

    private func startRefusal(_ state: OperationState) -> (code: OperationMisuse.Code, detail: String)? {
        if state.isBaseExecuting {
            return (.startWhileExecuting, "was started while it is already executing. An operation runs once; create a new one to run the work again.")
        }
        if state.isBaseFinished || state.isFinished {
            return (.startAfterFinished, "was started after it finished\(state.isCancelled ? " (it was cancelled)" : ""). An operation runs once; create a new one to run the work again.")
        }
        return nil
    }

    private func notReadyExplanation() -> String {
        let unfinished = dependencies.filter { !$0.loadState().isFinished }
        if unfinished.isEmpty {
            return "was started while it is not ready: its isReady returned false. Start it once isReady is true, or add it to a queue, which starts it when it becomes ready."
        }
        let names = unfinished.prefix(5).map(\.misuseSubject).joined(separator: ", ")
        return "was started while it is not ready: \(unfinished.count) of its dependencies have not finished (\(names)). Start it after they finish, or add it to a queue, which starts it when it becomes ready."
    }
}

/// A temporary change of the calling thread's nice value for `threadPriority`.
struct ThreadPriorityChange {
    let previous: Int32

    /// Applies `priority` (0.0 ... 1.0, 0.5 = unchanged) to the calling thread.
    static func apply(_ priority: Double) -> ThreadPriorityChange? {
        guard priority != 0.5, let current = Platform.currentNice() else { return nil }
        let offset = priority < 0.5 ? (0.5 - priority) * 2 * 19 : -(priority - 0.5) * 2 * 20
        let target = Int32(max(-20, min(19, Double(current) + offset.rounded())))
        guard target != current else { return nil }
        if target < current, !Platform.canRaisePriority { return nil }
        // Lowering cannot be undone without privilege: only do it on a pool
        // worker, which is retired afterwards.
        if target > current, !Platform.canRaisePriority, Worker.current == nil { return nil }
        guard Platform.setCurrentNice(target) else { return nil }
        return ThreadPriorityChange(previous: current)
    }

    func restore() {
        if !Platform.setCurrentNice(previous) {
            Worker.current?.retireAfterCurrentJob = true
        }
    }
}
