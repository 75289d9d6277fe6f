extension QualityOfService {
    /// The Swift concurrency priority for this quality of service, as on
    /// Darwin: `.userInteractive` → raw value 33 (above `.high`, which has
    /// no name of its own in `TaskPriority`), `.userInitiated` → high (25),
    /// `.default` → medium (21), `.utility` → utility (17, also `.low`),
    /// `.background` → background (9).
    public var taskPriority: TaskPriority {
        switch self {
        case .userInteractive: return TaskPriority(rawValue: UInt8(QualityOfService.userInteractive.rawValue))
        case .userInitiated: return .userInitiated
        case .default: return .medium
        case .utility: return .utility
        case .background: return .background
        }
    }

    /// The quality of service for a Swift concurrency priority (the
    /// inverse of ``taskPriority``; values in between round down).
    public init(_ priority: TaskPriority) {
        switch priority.rawValue {
        case 33...: self = .userInteractive
        case 25..<33: self = .userInitiated
        case 21..<25: self = .default
        case 17..<21: self = .utility
        default: self = .background
        }
    }
}

extension Operation {
    /// Suspends until the operation has finished: the `async` counterpart of
    /// ``waitUntilFinished()``. Its completion block runs asynchronously and
    /// is not waited for, as in Foundation.
    ///
    /// Cancelling the awaiting task cancels the operation; this still waits
    /// until the operation finishes (a cancelled operation that has not
    /// started finishes promptly, unless its queue is suspended: then, as in
    /// Foundation, when the queue resumes; a running one when it notices). A wait
    /// that can never end — for the operation from inside its own `async`
    /// body, for one that depends on it, or one queued behind it — is a
    /// misuse (``OperationMisuse/Code/waitDeadlock``) and returns: at once
    /// when nothing can change the verdict (the operation's own body awaits
    /// it), otherwise once the verdict has held for a second, since another
    /// thread could still end the wait meanwhile (see
    /// <doc:DiagnosingHangsAndMisuse>).
    public func finished() async {
        _ = await awaitRetirement()
    }

    /// Waits for the retirement; returns the misuse if the wait could never
    /// end and a handler refused it.
    /// `wait` names the call for a hang report.
    final func awaitRetirement(wait: String = "await finished()") async -> OperationMisuse? {
        if loadState().isRetired { return nil }
        let running = OperationTaskContext.ownOperation.map { [$0] } ?? []
        let record = WaitRegistry.Record(running: running, target: .operation(self))
        if let verdict = WaitRegistry.shared.begin(record) {
            let reason = verdict.reason
            return OperationMisuse.reportReturning(.waitDeadlock, subject: .operation(self), "is awaited but can never finish: the wait \(reason)")
        }
        defer { WaitRegistry.shared.end(record) }
        let watch = HangReport.watch { [self] in self.hangDescription(wait: wait) }
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
                if let registered = addRetireWaiter({ gate.resume() }) {
                    key.withLock { $0 = registered }
                } else {
                    gate.resume()
                }
            }
        } onCancel: {
            self.cancel()
        }
        // A verdict confirmed just as the operation retired is moot.
        if let verdict = deadlockWatch?.verdict, !loadState().isRetired {
            if let registered = key.withLock({ $0 }) { removeRetireWaiter(registered) }
            return OperationMisuse.reportReturning(.waitDeadlock, subject: .operation(self), "is awaited but can never finish: the wait \(verdict.reason)")
        }
        return nil
    }

    /// One change of a lifecycle property, as observed.
    public struct StateChange: Sendable, Hashable, CustomStringConvertible {
        /// The lifecycle properties.
        public enum Key: String, Sendable, Hashable, CaseIterable {
            /// ``Operation/isReady``.
            case isReady
            /// ``Operation/isCancelled``.
            case isCancelled
            /// ``Operation/isExecuting``.
            case isExecuting
            /// ``Operation/isFinished``.
            case isFinished
        }

        /// Which property changed.
        public let key: Key
        /// Its value before the change.
        public let oldValue: Bool
        /// Its value after the change.
        public let newValue: Bool

        /// A short human-readable form.
        public var description: String {
            "\(key.rawValue) \(oldValue ? "YES" : "NO")→\(newValue ? "YES" : "NO")"
        }
    }

    /// The operation's lifecycle changes (`isReady`, `isCancelled`,
    /// `isExecuting`, `isFinished`) as an asynchronous sequence, in the order
    /// they happen. The sequence ends after `isFinished` becomes true; for an
    /// operation that has already finished it ends at once; for one that is
    /// deinitialized without finishing (never started), it ends then. The
    /// sequence does not keep the operation alive.
    ///
    /// Each access starts a new subscription. Changes are buffered until
    /// consumed.
    public var stateChanges: AsyncStream<StateChange> {
        let (stream, continuation) = AsyncStream<StateChange>.makeStream()
        if loadState().isFinished {
            continuation.finish()
            return stream
        }
        var tokens: [KeyValueObservation] = []
        var registry: ObservationRegistry?
        let sink = StateChangeSink(continuation)
        for key in StateChange.Key.allCases {
            let entry = ObserverEntry<Operation, Bool>(
                key: key.rawValue,
                options: [.old, .new],
                read: { $0.valueForObservedKey(key.rawValue) as? Bool ?? false },
                handler: { _, change in
                    sink.deliver(StateChange(key: key, oldValue: change.oldValue ?? false, newValue: change.newValue ?? false))
                }
            )
            let registered = registerObserver(entry)
            registry = registered
            tokens.append(KeyValueObservation(registry: registered, entry: entry))
        }
        // An operation deinitialized before it finished ends the stream too.
        let endKey = registry?.onOwnerDeinitialized { sink.end() }
        let held = ObservationBag(tokens)
        continuation.onTermination = { [weak registry] _ in
            held.invalidate()
            if let endKey { registry?.removeOwnerHandler(endKey) }
        }
        // Finished between the check above and the registration: the
        // stream ends with `isFinished` if it heard part of the finish.
        if loadState().isFinished { sink.endFinished() }
        return stream
    }
}

/// Delivers one `stateChanges` subscription's changes, so that nothing
/// follows the change that ends it: handlers on other threads (a `cancel()`
/// racing the finish) yield either before `isFinished` becomes true, or not
/// at all.
final class StateChangeSink: @unchecked Sendable {
    // @unchecked Sendable: `ended` is read and written only while `lock` is
    // held; the continuation is Sendable.
    private let lock = PlatformLock()
    private var ended = false
    /// Whether a change was yielded.
    private var yielded = false
    private let continuation: AsyncStream<Operation.StateChange>.Continuation

    init(_ continuation: AsyncStream<Operation.StateChange>.Continuation) {
        self.continuation = continuation
    }

    /// Yields `change` unless the stream has ended; ends it after
    /// `isFinished` becomes true. Buffering a change runs no user code.
    func deliver(_ change: Operation.StateChange) {
        let ends = lock.withLock { () -> Bool in
            guard !ended else { return false }
            continuation.yield(change)
            yielded = true
            if change.key == .isFinished, change.newValue { ended = true }
            return ended
        }
        // Outside the lock: ending runs the stream's termination handler.
        if ends { continuation.finish() }
    }

    /// Ends the stream (the operation was deinitialized without finishing).
    func end() {
        lock.withLock { ended = true }
        continuation.finish()
    }

    /// Ends the stream of an operation that finished while the subscription
    /// was being set up. A stream that heard part of the finish (the
    /// `isExecuting` change) but not the `isFinished` change, which came
    /// before its observer was registered, gets that change last; one that
    /// heard nothing stays empty, as for an operation already finished.
    func endFinished() {
        lock.withLock {
            guard !ended else { return }
            if yielded { continuation.yield(Operation.StateChange(key: .isFinished, oldValue: false, newValue: true)) }
            ended = true
        }
        continuation.finish()
    }
}

/// Observations kept alive by a stream until it terminates.
final class ObservationBag: Sendable {
    private let tokens: [KeyValueObservation]
    init(_ tokens: [KeyValueObservation]) { self.tokens = tokens }
    func invalidate() { for token in tokens { token.invalidate() } }
}
