extension OperationQueue {
    /// Suspends until the queue is empty: the `async` counterpart of
    /// ``waitUntilAllOperationsAreFinished()``, covering operations added
    /// while waiting and asynchronous operations that finish later.
    ///
    /// Cancelling the awaiting task stops the wait (the queue's operations
    /// are not cancelled). Awaiting a queue from inside one of its own
    /// operations' `async` bodies is a misuse (``OperationMisuse/Code/waitDeadlock``).
    public func drained() async {
        _ = await awaitIdle()
    }

    /// Waits until the queue is idle; returns the misuse if the wait could
    /// never end and a handler refused it.
    final func awaitIdle() async -> OperationMisuse? {
        let running = OperationTaskContext.ownOperation.map { [$0] } ?? []
        let record = WaitRegistry.Record(running: running, target: .queue(self))
        if let verdict = WaitRegistry.shared.begin(record) {
            let reason = verdict.reason
            return OperationMisuse.reportReturning(.waitDeadlock, subject: .queue(self), "is awaited (drained()) but can never drain: the wait \(reason)")
        }
        defer { WaitRegistry.shared.end(record) }
        let watch = HangReport.watch { [self] in .queue(self, "await drained() on:") }
        defer { watch?.cancel() }
        let gate = ResumeOnce()
        // A wait that other threads could still end is re-checked while it
        // lasts; a verdict that holds ends it as a misuse.
        let deadlockWatch = WaitRegistry.shared.watch(record) { gate.resume() }
        defer { deadlockWatch?.cancel() }
        let key = LockedValue<Int?>(nil)
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                gate.install(continuation)
                let registered = lock.withLock { () -> Int? in
                    if state.isIdle { return nil }
                    return drainWaiters.add { gate.resume() }
                }
                if let registered { key.withLock { $0 = registered } } else { gate.resume() }
            }
        } onCancel: {
            gate.resume()
        }
        // A cancelled wait leaves nothing behind.
        if let registered = key.withLock({ $0 }) {
            let removed = lock.withLock { drainWaiters.remove(registered) }
            withExtendedLifetime(removed) {}
        }
        // A verdict confirmed just as the queue drained is moot.
        if let verdict = deadlockWatch?.verdict, !lock.withLock({ state.isIdle }) {
            return OperationMisuse.reportReturning(.waitDeadlock, subject: .queue(self), "is awaited (drained()) but can never drain: the wait \(verdict.reason)")
        }
        return nil
    }

    /// Runs `body` as an operation of this queue and returns its value.
    ///
    /// The operation obeys the queue like any other: it waits for a slot of
    /// ``maxConcurrentOperationCount``, for the queue to be resumed, and for
    /// room under the pending limit; among ready operations it goes by
    /// `priority`. The body runs in a task at the priority matching
    /// `qualityOfService` (or the queue's), holding a slot but no thread.
    /// Cancelling the awaiting task cancels the operation; the call returns
    /// once it has finished (on a suspended queue, as in Foundation, a
    /// cancelled operation finishes when the queue resumes).
    ///
    /// - Throws: The body's error, `CancellationError` if the operation was
    ///   cancelled before its body ran, or the ``OperationMisuse`` a handler
    ///   refused when the operation could never be added (a
    ///   ``OperationMisuse/Code/waitDeadlock`` under the pending limit).
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
        if let refusal = await addOperationsReportingRefusal([operation]) {
            // The add could never proceed (a handler refused it): the
            // operation is in no queue, so its value would never come.
            operation.cancel()
            throw refusal
        }
        return try await withTaskCancellationHandler {
            do {
                return try await operation.value
            } catch let misuse as OperationMisuse {
                // The wait could never end (a handler refused it): the
                // operation must not run later on its own.
                operation.cancel()
                throw misuse
            }
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
        /// The queue was suspended (true) or resumed (false). Setting
        /// ``OperationQueue/isSuspended`` to the value it has is no event.
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
    /// consumer stops iterating (it leaves its loop, or its task is
    /// cancelled), the sequence is released without being iterated, or the
    /// queue is deallocated (the sequence then ends).
    ///
    /// Events arrive in the order the queue's state changed: an operation is
    /// `added` before it is `started`, and `finished` before the queue
    /// reports `drained`. Each access starts a new subscription; events are
    /// buffered until consumed. An event holds its operation, so a
    /// subscription that nobody consumes would keep finished operations
    /// alive: it ends as soon as its iterator is released, even while the
    /// sequence itself is still kept. A queue with subscribers pays a small
    /// cost per event. ``timedEvents`` carries the same events with the time
    /// each happened.
    public var events: EventSequence<Event> {
        subscribedSequence(EventSink.plain)
    }

    /// An event with the time it happened (see ``events``).
    public struct TimedEvent: Sendable, CustomStringConvertible {
        /// When the queue's state changed.
        public let time: ContinuousClock.Instant
        /// What happened.
        public let event: Event

        /// A short human-readable form.
        public var description: String { "\(time) \(event)" }
    }

    /// The queue's events, each with the time it happened, in the order the
    /// queue's state changed; the subscription lasts as that of ``events``.
    public var timedEvents: EventSequence<TimedEvent> {
        subscribedSequence(EventSink.timed)
    }

    /// A new subscription, delivered through `sink`, as a sequence whose
    /// end (its stream's termination) unsubscribes.
    private func subscribedSequence<Element: Sendable>(
        _ sink: (AsyncStream<Element>.Continuation) -> EventSink
    ) -> EventSequence<Element> {
        let (stream, continuation) = AsyncStream<Element>.makeStream()
        let id = subscribe(sink(continuation))
        continuation.onTermination = { [weak self] _ in self?.unsubscribe(id) }
        return EventSequence(stream: stream, subscription: EventSubscription { continuation.finish() })
    }

    /// A subscription to a queue's events (``events``, ``timedEvents``): an
    /// asynchronous sequence for one consumer.
    ///
    /// The subscription begins when the sequence is made and ends when its
    /// iterator is released (the consumer's loop ended), when the sequence
    /// is released without being iterated, when the consuming task is
    /// cancelled, or when the queue is deallocated. Afterwards the sequence
    /// yields what was buffered before the end, then nil.
    public struct EventSequence<Element: Sendable>: AsyncSequence, Sendable {
        /// Iterating never throws.
        public typealias Failure = Never

        let stream: AsyncStream<Element>
        let subscription: EventSubscription

        /// Makes the sequence's iterator. A sequence has one consumer: its
        /// first iterator's release ends the subscription.
        public func makeAsyncIterator() -> AsyncIterator {
            AsyncIterator(base: stream.makeAsyncIterator(), iteration: EventIteration(subscription))
        }

        /// The iterator of an ``EventSequence``; releasing it ends the
        /// subscription.
        public struct AsyncIterator: AsyncIteratorProtocol {
            /// Iterating never throws.
            public typealias Failure = Never

            var base: AsyncStream<Element>.Iterator
            let iteration: EventIteration

            /// The next event, or nil once the subscription has ended and
            /// its buffer is empty.
            public mutating func next() async -> Element? {
                await base.next()
            }

            /// The next event, or nil once the subscription has ended and
            /// its buffer is empty, awaited on `actor`.
            public mutating func next(isolation actor: isolated (any Actor)?) async -> Element? {
                await base.next(isolation: actor)
            }
        }
    }

    private func subscribe(_ sink: EventSink) -> Int {
        lock.withLock { () -> Int in
            let id = nextEventSinkID
            nextEventSinkID += 1
            eventSinks[id] = sink
            hasEventSinks.store(true, ordering: .releasing)
            return id
        }
    }

    private func unsubscribe(_ id: Int) {
        let removed = lock.withLock { () -> EventSink? in
            let removed = eventSinks.removeValue(forKey: id)
            if eventSinks.isEmpty { hasEventSinks.store(false, ordering: .releasing) }
            return removed
        }
        withExtendedLifetime(removed) {}
    }
}

/// The end of one event subscription (`OperationQueue.EventSequence`),
/// called when the sequence is released (un-iterated, or after its
/// iterator): it finishes the stream, whose termination handler
/// unsubscribes, so that no further event is buffered.
final class EventSubscription: Sendable {
    private let end: @Sendable () -> Void

    init(_ end: @escaping @Sendable () -> Void) {
        self.end = end
    }

    /// Ends the subscription now (idempotent: finishing a stream twice does
    /// nothing).
    func finish() { end() }

    deinit { end() }
}

/// The life of an `EventSequence`'s iterator: ends the subscription when
/// the consumer releases the iterator (it left its loop), even while the
/// sequence itself is still held.
final class EventIteration: Sendable {
    private let subscription: EventSubscription

    init(_ subscription: EventSubscription) {
        self.subscription = subscription
    }

    deinit { subscription.finish() }
}

/// A subscriber to a queue's events.
enum EventSink: Sendable {
    case plain(AsyncStream<OperationQueue.Event>.Continuation)
    case timed(AsyncStream<OperationQueue.TimedEvent>.Continuation)

    /// Delivers `event`; yielding buffers it and runs no user code.
    func yield(_ event: OperationQueue.Event, at time: ContinuousClock.Instant) {
        switch self {
        case .plain(let continuation): continuation.yield(event)
        case .timed(let continuation): continuation.yield(OperationQueue.TimedEvent(time: time, event: event))
        }
    }

    /// Ends the subscriber's sequence (its queue is gone).
    func finish() {
        switch self {
        case .plain(let continuation): continuation.finish()
        case .timed(let continuation): continuation.finish()
        }
    }
}
