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
        /// A wait has lasted longer than
        /// ``OperationReporting/waitWarningThreshold``; the message explains
        /// what it waits for (dependency cycles included).
        case waitTooLong
        /// The worker pool reached ``OperationQueue/maximumWorkerThreads``
        /// while work waits.
        case workerCeiling
    }

    /// What a report's ``subject`` is.
    public enum SubjectKind: Sendable, Hashable {
        /// An operation: ``subject`` reads `Type "name" (0x…)`.
        case operation
        /// A queue: ``subject`` reads `OperationQueue "name"`.
        case queue
    }

    /// What kind of report.
    public let kind: Kind
    /// The full message.
    public let message: String
    /// The operation or queue concerned, as `Type "name" (0x…)`, if one.
    public let subject: String?
    /// Whether ``subject`` is an operation or a queue; nil when the report
    /// has no subject (the worker-ceiling report).
    public let subjectKind: SubjectKind?
    /// The ``Operation/name`` of the operation concerned, when the subject
    /// is an operation that has a name.
    public let operationName: String?
    /// The type of the operation concerned, such as `BlockOperation` or
    /// `ResultOperation<Data, any Error>`, when the subject is an operation.
    public let operationTypeName: String?
    /// The ``OperationQueue/name`` of the queue concerned, only when it has
    /// a name of its own (``OperationQueue/isNamed``): never the default
    /// `NSOperationQueue 0x…`, which holds an address.
    ///
    /// For a queue subject, that queue. For an operation subject, the queue
    /// the report concerns: the one it was being added to, for the add
    /// misuses (``OperationMisuse/Code/alreadyInQueue``,
    /// ``OperationMisuse/Code/addedAfterStart``,
    /// ``OperationMisuse/Code/duplicateInBatch``), otherwise the queue that
    /// owns the operation when the report is made, if any.
    public let queueName: String?
    /// The dependency cycle the report is about, in order: each member
    /// depends on the next, and the first is repeated at the end
    /// (`[a, b, a]`), as in ``OperationQueue/Diagnostics/cycles``. Each
    /// member reads `Type "name" (0x…)`.
    ///
    /// For a ``OperationMisuse/Code/dependencyCycle`` misuse, the cycle the
    /// refused dependency would have closed. For a ``Kind/waitTooLong``
    /// report, the cycle its explanation names (the one the waited-for
    /// operation is on, if any; the message names every cycle found). Nil
    /// for other reports.
    public let cycle: [String]?

    /// The message.
    public var description: String { message }

    init(kind: Kind, message: String, subject: ReportSubject = .none, cycle: [String]? = nil) {
        self.kind = kind
        self.message = message
        self.subject = subject.text
        self.subjectKind = subject.kind
        self.operationName = subject.operationName
        self.operationTypeName = subject.operationTypeName
        self.queueName = subject.queueName
        self.cycle = cycle
    }
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

    /// How long a wait may last before it is reported (``OperationReport/Kind/waitTooLong``),
    /// or nil when such reports are off.
    ///
    /// Any blocking wait (``Operation/waitUntilFinished()``,
    /// ``OperationQueue/waitUntilAllOperationsAreFinished()``, a synchronous
    /// add blocked by a pending limit) or `async` wait
    /// (``Operation/finished()``, ``ResultOperation/value``,
    /// ``OperationQueue/drained()``, `queue.run`, an `async` add waiting for
    /// room) that lasts longer writes, once, what it waits for to standard
    /// error and to the observers, then keeps waiting.
    ///
    /// The default comes from the environment variable
    /// `OPERATIONS_WAIT_WARNING_SECONDS` (a number of seconds, such as `10`
    /// or `0.5`), read the first time the threshold is needed; nil when it
    /// is unset or not a positive number. Setting the property replaces that
    /// value for the whole process, from any thread; a zero or negative
    /// duration turns reports off, as nil does. A change applies to waits
    /// that begin afterwards: a wait in progress keeps the threshold it
    /// began with.
    ///
    /// ```swift
    /// OperationReporting.waitWarningThreshold = .seconds(5)
    /// ```
    public static var waitWarningThreshold: Duration? {
        get { HangReport.threshold.map { .nanoseconds(Int64(clamping: $0)) } }
        set { HangReport.setThreshold(newValue) }
    }

    /// Delivers `report` to the observers. Call with no library lock held.
    static func deliver(_ report: @autoclosure () -> OperationReport) {
        guard hasObservers.load(ordering: .acquiring) else { return }
        let value = report()
        let current = observers.withLock { Array($0.values) }
        for observer in current { observer(value) }
    }
}
