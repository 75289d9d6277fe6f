import Synchronization

/// Something the library reports: a misuse, a wait that lasts too long, the
/// worker pool reaching its ceiling.
///
/// Reports go to standard error (hang and ceiling reports) or through the
/// misuse policy (misuses) as documented, and also to every observer added
/// with ``OperationReporting/addObserver(_:)``, for logging (for example,
/// an observer can forward them to a swift-log `Logger`).
public struct OperationReport: Sendable, CustomStringConvertible {
    /// What kind of report.
    public enum Kind: Sendable, Hashable {
        /// A programming error (``OperationMisuse``), before the misuse
        /// policy applies.
        case misuse(OperationMisuse.Code)
        /// A wait has lasted longer than `OPERATIONS_WAIT_WARNING_SECONDS`;
        /// the message explains what it waits for (dependency cycles
        /// included).
        case waitTooLong
        /// The worker pool reached ``OperationQueue/maximumWorkerThreads``
        /// while work waits.
        case workerCeiling
    }

    /// What kind of report.
    public let kind: Kind
    /// The full message.
    public let message: String
    /// The operation or queue concerned, as `Type "name" (0x…)`, if one.
    public let subject: String?

    /// The message.
    public var description: String { message }
}

/// Observers of ``OperationReport``s.
public enum OperationReporting {
    /// A registration; ``cancel()`` it (or let it go) to stop receiving reports.
    public final class Token: Sendable {
        private let id: Int
        init(id: Int) { self.id = id }

        /// Stops the observation. Calling it twice does nothing.
        public func cancel() { OperationReporting.remove(id) }

        deinit { cancel() }
    }

    private static let observers = LockedValue<[Int: @Sendable (OperationReport) -> Void]>([:])
    private static let nextID = Atomic<Int>(0)
    private static let hasObservers = Atomic<Bool>(false)

    /// Calls `observer` with every report, on the thread that makes it,
    /// never while a library lock is held. Keep the token as long as you
    /// want reports.
    public static func addObserver(_ observer: @escaping @Sendable (OperationReport) -> Void) -> Token {
        let id = nextID.add(1, ordering: .relaxed).newValue
        observers.withLock { $0[id] = observer }
        hasObservers.store(true, ordering: .releasing)
        return Token(id: id)
    }

    private static func remove(_ id: Int) {
        let removed = observers.withLock { observers -> (@Sendable (OperationReport) -> Void)? in
            defer { if observers.isEmpty { hasObservers.store(false, ordering: .releasing) } }
            return observers.removeValue(forKey: id)
        }
        withExtendedLifetime(removed) {}
    }

    /// Delivers `report` to the observers. Call with no library lock held.
    static func deliver(_ report: @autoclosure () -> OperationReport) {
        guard hasObservers.load(ordering: .acquiring) else { return }
        let value = report()
        let current = observers.withLock { Array($0.values) }
        for observer in current { observer(value) }
    }
}
