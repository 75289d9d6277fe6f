extension OperationQueue {
    /// Suspends until the queue is empty: the `async` counterpart of
    /// ``waitUntilAllOperationsAreFinished()``, covering operations added
    /// while waiting and asynchronous operations that finish later.
    ///
    /// Cancelling the awaiting task stops the wait (the queue's operations
    /// are not cancelled). Awaiting a queue from inside one of its own
    /// operations' `async` bodies is a misuse (``OperationMisuse/Code/waitDeadlock``).
    public func drained() async {
        if let current = OperationTaskContext.current, current.queue === self {
            OperationMisuse.report(
                .waitDeadlock,
                subject: misuseSubject,
                "is awaited (drained()) from inside the async body of its own operation \(current.operation.misuseSubject), which cannot finish while it waits."
            )
            return
        }
        let gate = ResumeOnce()
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                gate.install(continuation)
                let emptyNow = lock.withLock { () -> Bool in
                    if scheduler.count == 0 { return true }
                    scheduler.drainCallbacks.append { gate.resume() }
                    return false
                }
                if emptyNow { gate.resume() }
            }
        } onCancel: {
            gate.resume()
        }
        waitForRetirementsInProgress()
    }

    /// Runs `body` as an operation of this queue and returns its value.
    ///
    /// The operation obeys the queue like any other: it waits for a slot of
    /// ``maxConcurrentOperationCount``, for the queue to be resumed, and for
    /// room under the pending limit; among ready operations it goes by
    /// `priority`. The body runs in a task at the priority matching
    /// `qualityOfService` (or the queue's), holding a slot but no thread.
    /// Cancelling the awaiting task cancels the operation.
    ///
    /// - Throws: The body's error, or `CancellationError` if the operation was
    ///   cancelled before its body ran.
    public func run<T: Sendable>(
        priority: Operation.QueuePriority = .normal,
        qualityOfService: QualityOfService = .default,
        _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let operation = ResultOperation<T, any Error>(body)
        return try await run(operation, priority: priority, qualityOfService: qualityOfService)
    }

    /// Runs the synchronous `body` as an operation of this queue (on a pool
    /// worker, like any synchronous operation) and returns its value.
    public func run<T: Sendable>(
        priority: Operation.QueuePriority = .normal,
        qualityOfService: QualityOfService = .default,
        _ body: @escaping @Sendable () throws -> T
    ) async throws -> T {
        let operation = ResultOperation<T, any Error>(body)
        return try await run(operation, priority: priority, qualityOfService: qualityOfService)
    }

    private func run<T: Sendable>(
        _ operation: ResultOperation<T, any Error>,
        priority: Operation.QueuePriority,
        qualityOfService: QualityOfService
    ) async throws -> T {
        operation.queuePriority = priority
        operation.qualityOfService = qualityOfService
        await addOperation(operation)
        return try await withTaskCancellationHandler {
            try await operation.value
        } onCancel: {
            operation.cancel()
        }
    }

    /// Something that happened in a queue (see ``events``).
    public enum Event: Sendable, CustomStringConvertible {
        /// An operation was added.
        case added(Operation)
        /// The queue started an operation.
        case started(Operation)
        /// An operation finished and left the queue.
        case finished(Operation)
        /// The queue was suspended (true) or resumed (false).
        case suspended(Bool)
        /// The queue became empty.
        case drained

        /// A short human-readable form.
        public var description: String {
            switch self {
            case .added(let operation): return "added \(operation.misuseSubject)"
            case .started(let operation): return "started \(operation.misuseSubject)"
            case .finished(let operation): return "finished \(operation.misuseSubject)"
            case .suspended(let suspended): return suspended ? "suspended" : "resumed"
            case .drained: return "drained"
            }
        }
    }

    /// The queue's events (operations added, started and finished;
    /// suspension; draining) as an asynchronous sequence, from now until the
    /// consumer stops iterating.
    ///
    /// Each access starts a new subscription; events are buffered until
    /// consumed. A queue with subscribers pays a small cost per event.
    public var events: AsyncStream<Event> {
        let (stream, continuation) = AsyncStream<Event>.makeStream()
        let id = lock.withLock { () -> Int in
            let id = nextEventSinkID
            nextEventSinkID += 1
            eventSinks[id] = continuation
            hasEventSinks.store(true, ordering: .releasing)
            return id
        }
        continuation.onTermination = { [weak self] _ in
            guard let self else { return }
            self.lock.withLock {
                self.eventSinks[id] = nil
                if self.eventSinks.isEmpty { self.hasEventSinks.store(false, ordering: .releasing) }
            }
        }
        return stream
    }

    /// Delivers `event` to every subscriber. Cheap when there are none.
    @inline(__always)
    final func emit(_ event: @autoclosure () -> Event) {
        guard hasEventSinks.load(ordering: .relaxed) else { return }
        let sinks = lock.withLock { Array(eventSinks.values) }
        let value = event()
        for sink in sinks { sink.yield(value) }
    }
}
