import Dispatch

/// What a queue must do after a change of its state, once its lock is
/// released: start a drain loop, wake waiters, and give back its self-retain
/// when it became idle.
struct QueueEffects {
    /// Where to start one more drain loop, if one was requested.
    var drainLoop: OperationQueue.DrainExecutor?
    /// Threads to wake (main-thread inline runners).
    var signals: [WaitSignal] = []
    /// Waiters to resume (queue waits, producers waiting for room).
    var resumptions: [@Sendable () -> Void] = []
    /// The queue's retain of itself, to release last.
    var selfRelease: Unmanaged<OperationQueue>?

    /// Performs the effects. Releases the self-retain last: a caller that
    /// holds no reference of its own must not touch the queue afterwards.
    consuming func perform(on queue: OperationQueue) {
        if let drainLoop { queue.post(drainLoopTo: drainLoop) }
        for signal in signals { signal.signal() }
        for resume in resumptions { resume() }
        selfRelease?.release()
    }
}

extension OperationQueue {
    /// Where drain loops run.
    enum DrainExecutor {
        case pool(qos: Int)
        case dispatch(DispatchQueue)
        case mainThread
    }

    /// Collects the effects of the state's latest changes. Call with `lock`
    /// held, after every change.
    final func takeEffectsLocked() -> QueueEffects {
        var effects = QueueEffects()
        if state.takeDrainerRequest() { effects.drainLoop = drainExecutorLocked() }
        if TraceRecorder.isActive {
            TraceRecorder.shared.record(.counts, nil, queue: self, values: (
                Int32(clamping: state.readyCount), Int32(clamping: state.executing), Int32(clamping: state.count)))
        }
        if state.isIdle {
            if !drainWaiters.isEmpty { effects.resumptions = drainWaiters.takeAll() }
            if let retained = retainedSelf {
                retainedSelf = nil
                effects.selfRelease = retained
                emitLocked(.drained)
            }
        } else if retainedSelf == nil {
            retainedSelf = Unmanaged.passRetained(self)
        }
        if !changeWaiters.isEmpty {
            effects.signals = changeWaiters
            changeWaiters = []
        }
        while let first = roomWaiters.first, state.hasRoom(for: first.count) {
            roomWaiters.removeFirst()
            effects.resumptions.append(first.resume)
        }
        return effects
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

    /// Starts one drain loop on `executor`.
    final func post(drainLoopTo executor: DrainExecutor) {
        switch executor {
        case .mainThread: DispatchQueue.main.async { self.drain(worker: nil) }
        case .dispatch(let queue): queue.async { self.drain(worker: nil) }
        case .pool(let qos): WorkerPool.shared.submit(self, qos: qos)
        }
    }

    /// Delivers `event` to every subscriber, in the order the queue's state
    /// changed. Call with `lock` held; yielding to a stream runs no user code.
    final func emitLocked(_ event: @autoclosure () -> Event) {
        guard hasEventSinks.load(ordering: .relaxed), !eventSinks.isEmpty else { return }
        let value = event()
        let time = ContinuousClock.now
        for sink in eventSinks.values { sink.yield(value, at: time) }
    }
}
