import Dispatch

/// What a queue must do after a change of its state, once its lock is
/// released: start a drain loop, wake waiters, and give back its self-retain
/// when it became idle.
///
/// Trivial to copy and destroy in the common case (a drain loop request at
/// most): waiters to wake, which are rare, live in a `QueueWakeups` object.
struct QueueEffects {
    /// Where to start one more drain loop, if one was requested.
    var drainLoop: OperationQueue.DrainExecutor?
    /// Threads to wake and waiters to resume, if any.
    var wakeups: QueueWakeups?
    /// The queue's retain of itself, to release last.
    var selfRelease: Unmanaged<OperationQueue>?

    /// The wakeups object, made on first use.
    mutating func addingWakeups() -> QueueWakeups {
        if let wakeups { return wakeups }
        let made = QueueWakeups()
        wakeups = made
        return made
    }

    /// Performs the effects. Releases the self-retain last: a caller that
    /// holds no reference of its own must not touch the queue afterwards.
    consuming func perform(on queue: OperationQueue) {
        if let drainLoop { queue.post(drainLoopTo: drainLoop) }
        if let wakeups { wakeups.wake() }
        selfRelease?.release()
    }
}

/// Threads to wake (main-thread inline runners) and waiters to resume
/// (queue waits, producers waiting for room), collected under the queue's
/// lock and woken after it is released. Used by one thread at a time.
final class QueueWakeups {
    var signals: [WaitSignal] = []
    var resumptions: [@Sendable () -> Void] = []

    func wake() {
        for signal in signals { signal.signal() }
        for resume in resumptions { resume() }
    }
}

extension OperationQueue {
    /// Where drain loops run.
    enum DrainExecutor {
        case pool(qos: Int)
        /// The underlying `DispatchQueue`, held as `AnyObject`: a payload of
        /// a type from a resilient module would make every copy and destroy
        /// of `QueueEffects` go through runtime value witnesses, on the
        /// hot path of every add and every drain step.
        case dispatch(AnyObject)
        case mainThread
        /// No loop now: one is held back, and the queue is handed to the
        /// watcher (`LoopWatcher`), with its loops' progress then. (A case
        /// here rather than a field of `QueueEffects`: one more field makes
        /// every copy and destroy of the effects out of line.)
        case watch(progress: UInt64)
    }

    /// Collects the effects of the state's latest changes. Call with `lock`
    /// held, after every change.
    final func takeEffectsLocked() -> QueueEffects {
        var effects = QueueEffects()
        switch state.takeDrainerRequest(mayHoldBack: kind == .pool && storedUnderlyingQueue == nil) {
        case .none: break
        case .post: effects.drainLoop = drainExecutorLocked()
        case .watch: effects.drainLoop = .watch(progress: state.loops.progress)
        }
        if TraceRecorder.isActive { sampleCountsLocked() }
        if state.isIdle {
            if !drainWaiters.isEmpty { effects.addingWakeups().resumptions = drainWaiters.takeAll() }
            if let retained = retainedSelf {
                retainedSelf = nil
                effects.selfRelease = retained
                emitLocked(.drained)
            }
        } else if retainedSelf == nil {
            retainedSelf = Unmanaged.passRetained(self)
        }
        if !changeWaiters.isEmpty {
            effects.addingWakeups().signals = changeWaiters
            changeWaiters = []
        }
        if !roomWaiters.isEmpty {
            // Every waiter that may go ahead now, in arrival order, counting
            // the room the earlier ones are entitled to. Not only the first
            // ones: a batch that does not fit yet must not hold back a later
            // add that does, which the batch may be waiting for (probe 7).
            let wakeups = roomWaiters.takeWakeups(in: state)
            if !wakeups.isEmpty { effects.addingWakeups().resumptions.append(contentsOf: wakeups) }
        }
        return effects
    }

    /// Records the queue's ready, executing and pending counts for the
    /// trace: at most every 20 µs per queue, and whenever the queue holds
    /// nothing, so that a busy queue does not double the recorder's cost
    /// and every counter track ends at zero. Call with `lock` held.
    @inline(never)
    private func sampleCountsLocked() {
        let now = monotonicNanoseconds()
        guard state.count == 0 || now &- lastCountsSample >= 20_000 else { return }
        lastCountsSample = now
        TraceRecorder.shared.record(.counts, nil, queue: self, values: (
            Int32(clamping: state.readyCount), Int32(clamping: state.executing), Int32(clamping: state.count)))
    }

    /// The executor for drain loops. Call with `lock` held.
    final func drainExecutorLocked() -> DrainExecutor {
        switch kind {
        case .mainThread: return .mainThread
        case .pool:
            if let storedUnderlyingQueue { return .dispatch(storedUnderlyingQueue) }
            return .pool(qos: qualityOfServiceIndex.load(ordering: .relaxed))
        }
    }

    /// Starts one drain loop on `executor` (or, for `.watch`, hands the
    /// queue to the watcher).
    final func post(drainLoopTo executor: DrainExecutor) {
        switch executor {
        case .mainThread: DispatchQueue.main.async { self.drain(worker: nil) }
        case .dispatch(let queue): unsafeDowncast(queue, to: DispatchQueue.self).async { self.drain(worker: nil) }
        case .pool(let qos): WorkerPool.shared.submit(self, qos: qos)
        case .watch(let progress):
            LoopWatcher.shared.watch(self, mark: DrainLoops.Mark(progress: progress, returned: drainReturns.load(ordering: .relaxed)))
        }
    }

    /// Delivers `event` to every subscriber, in the order the queue's state
    /// changed. Call with `lock` held; yielding to a stream runs no user code.
    @inline(__always)
    final func emitLocked(_ event: @autoclosure () -> Event) {
        guard hasEventSinks.load(ordering: .relaxed) else { return }
        deliverLocked(event())
    }

    /// `emitLocked`'s delivery, kept out of line: its locals (a clock
    /// instant, the sinks) need runtime type metadata that the common path,
    /// with no subscriber, should not pay for.
    @inline(never)
    private func deliverLocked(_ value: Event) {
        guard !eventSinks.isEmpty else { return }
        let time = ContinuousClock.now
        for sink in eventSinks.values { sink.yield(value, at: time) }
    }
}
