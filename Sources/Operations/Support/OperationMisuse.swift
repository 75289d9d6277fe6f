import Synchronization

/// A programming error detected by the library, such as starting an
/// operation that is not ready or adding one operation to two queues.
///
/// ## Policy
/// Every misuse the library detects goes through one policy:
///
/// 1. The library builds an `OperationMisuse` whose ``message`` names the
///    operation or queue and the rule that was broken.
/// 2. It calls the active handler: the innermost one installed with
///    ``withHandler(_:_:)`` on the current task or thread, otherwise the
///    process-wide ``handler``.
/// 3. With no handler installed, the process traps with the message, as
///    Foundation raises an exception. This is the default.
/// 4. If a handler is installed and returns, the offending call is
///    **refused**: it returns without changing any state, so the operation,
///    its queue and every unrelated operation carry on as if the call had
///    never been made. A server can use this to record the misuse instead of
///    crashing.
///
/// A misuse never leaves an operation or queue half-changed, whichever way
/// it is handled.
public struct OperationMisuse: Error, Sendable, CustomStringConvertible {
    /// Identifies the rule that was broken. Extensible: new codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// A stable identifier, such as `"startNotReady"`.
        public let rawValue: String
        /// Creates a code. Library codes are the static members.
        public init(_ rawValue: String) { self.rawValue = rawValue }
        /// The code's identifier.
        public var description: String { rawValue }

        /// `start()` was called on an operation whose `isReady` is false.
        public static let startNotReady = Code("startNotReady")
        /// `start()` was called on an operation that is already executing.
        public static let startWhileExecuting = Code("startWhileExecuting")
        /// `start()` was called on an operation that has already finished.
        public static let startAfterFinished = Code("startAfterFinished")
        /// `start()` was called by hand on an operation that a queue owns.
        public static let startOwnedByQueue = Code("startOwnedByQueue")
        /// A completion block was set on an operation that is executing or
        /// has finished ("Operation Queues": the operation throws "when you
        /// try to add a completion block to an operation that is already
        /// executing or finished").
        ///
        /// A *tolerated* misuse. With a handler installed, the handler
        /// receives it and the block is refused, as for every other code.
        /// With no handler, the process does not trap: today's Darwin
        /// Foundation accepts the block, and ported code such as
        /// `queue.addOperation(op); op.completionBlock = …` races the
        /// operation's finish. The report still reaches
        /// ``OperationReporting`` observers, and the block behaves as on
        /// Darwin: kept (and run once) if the operation has not finished,
        /// dropped if it has. Clearing the block (`nil`) is never reported.
        /// "Executing" means that the default `start()` has begun or, for a
        /// class that overrides `start()`, that its queue has called it (the
        /// library does not ask overridden getters here: one started by hand
        /// is reported only once finished).
        public static let completionBlockAfterStart = Code("completionBlockAfterStart")
        /// The result of a cancelled `InvocationOperation` was read.
        public static let cancelledInvocationResult = Code("cancelledInvocationResult")
        /// `addExecutionBlock(_:)` was called after the operation began executing.
        public static let executionBlockAfterStart = Code("executionBlockAfterStart")
        /// An operation already owned by a queue was added to a queue.
        public static let alreadyInQueue = Code("alreadyInQueue")
        /// An executing or finished operation was added to a queue.
        public static let addedAfterStart = Code("addedAfterStart")
        /// The same operation appeared twice in one `addOperations` call.
        public static let duplicateInBatch = Code("duplicateInBatch")
        /// `maxConcurrentOperationCount` was set below -1.
        public static let invalidMaxConcurrentOperationCount = Code("invalidMaxConcurrentOperationCount")
        /// `threadPriority` was set outside 0.0 ... 1.0 (or to NaN).
        ///
        /// Tolerated, as ``completionBlockAfterStart`` is: with a handler
        /// installed the value is refused; with none the process does not
        /// trap and, as in Darwin's Foundation, the value is clamped to the
        /// range (NaN is ignored).
        public static let invalidThreadPriority = Code("invalidThreadPriority")
        /// A dependency would close a cycle, while
        /// ``OperationMisuse/reportsDependencyCycles`` is on.
        public static let dependencyCycle = Code("dependencyCycle")
        /// A wait can never end, because what it waits for can only run after
        /// the waiting code itself.
        public static let waitDeadlock = Code("waitDeadlock")
        /// `underlyingQueue` was changed while the queue held operations.
        public static let underlyingQueueWhileBusy = Code("underlyingQueueWhileBusy")
        /// `finish()` was called on an asynchronous operation that never started.
        public static let finishBeforeStart = Code("finishBeforeStart")
        /// A bound on pending operations was set below 1.
        public static let invalidPendingLimit = Code("invalidPendingLimit")
        /// An input of a `ResultOperation(after:…)` was removed from its
        /// dependencies: its body needs the input's value.
        public static let resultInputRemoved = Code("resultInputRemoved")
        /// A subclass announced a change with the key-path form
        /// (`willChangeValue(for: \.state)`) of a computed property, or of
        /// one a subclass can override, whose name Swift does not report,
        /// while its lifecycle keys depend on keys of its own
        /// (``Operation/keyPathsForValuesAffectingValue(forKey:)``), and
        /// the library could not tell which of them the key path is.
        ///
        /// On Darwin the property is `@objc` and the key path carries its
        /// name, so the dependent `isReady`, `isExecuting` and `isFinished`
        /// are announced with it. Here only observers of that key path hear
        /// of the change: the queue does not re-read the lifecycle getters,
        /// and the operation may never start or finish. The library names
        /// such a key path itself when exactly one of the class's own
        /// dependent keys, say `state`, has a stored property `state` or
        /// `_state` of the key path's value type (or of one generic wrapper
        /// of it, such as a property wrapper's), and that type is the
        /// program's own (not `Int`, `Bool` or another type of the standard
        /// library, which many properties share); otherwise it reports
        /// this, once per class and key path. Announce the property by name
        /// (`willChangeValue(forKey: "state")`) instead.
        ///
        /// A *warning*: reported to ``OperationReporting`` observers and to
        /// a handler, if one is installed, but never refused and never
        /// trapping. The announcement is made either way.
        public static let unnamedKeyPathAnnouncement = Code("unnamedKeyPathAnnouncement")
    }

    /// The rule that was broken.
    public let code: Code
    /// The operation or queue involved, as `Type "name" (0x…)`.
    public let subject: String
    /// A complete sentence naming the subject, the mistake and the fix.
    public let message: String

    /// The full message.
    public var description: String { message }

    /// Receives misuses. If it returns, the offending call is refused.
    public typealias Handler = @Sendable (OperationMisuse) -> Void

    private static let globalHandler = HandlerSlot()
    @TaskLocal private static var scopedHandler: Handler?

    /// The process-wide handler, or nil to trap (the default).
    ///
    /// Setting it affects every thread; prefer ``withHandler(_:_:)`` where
    /// the misuse happens on the calling thread or task.
    public static var handler: Handler? {
        get { globalHandler.current }
        set {
            // The replaced handler may capture user values: released after unlocking.
            let replaced = globalHandler.replace(with: newValue)
            withExtendedLifetime(replaced) {}
        }
    }

    private static let cycleReporting = Atomic<Bool>(false)

    /// Whether an `addDependency` that closes a dependency cycle is reported
    /// as a misuse (``Code/dependencyCycle``). Off by default.
    ///
    /// As in Foundation, a cycle is otherwise kept: its operations never
    /// start unless one of them is cancelled, and
    /// ``OperationQueue/diagnostics()`` names it. Turn this on in tests (or
    /// wherever a cycle is always a bug) to catch the edge that closes one:
    /// with the default policy the process traps with the operations on the
    /// cycle; with a handler installed, the edge is not added. Only edges
    /// that hold an operation back take part: one added to a cancelled,
    /// executing or finished operation, or to a dependency whose overridden
    /// `isFinished` already returns true, closes no cycle. The check
    /// searches the graph reachable from the new dependency, so it costs
    /// O(V + E) per `addDependency` while on.
    public static var reportsDependencyCycles: Bool {
        get {
            // The task-local read costs more than the rest of an
            // `addDependency`: it is skipped until a scope has been used.
            // (Sticky, not a count of open scopes: a task created in a scope
            // keeps its value after the scope ends.)
            if cycleScopesUsed.load(ordering: .relaxed), let scoped = scopedCycleReporting { return scoped }
            return cycleReporting.load(ordering: .relaxed)
        }
        set { cycleReporting.store(newValue, ordering: .relaxed) }
    }

    @TaskLocal private static var scopedCycleReporting: Bool?
    /// Set once `withDependencyCycleReporting` has been called.
    private static let cycleScopesUsed = Atomic<Bool>(false)

    /// Runs `body` with ``reportsDependencyCycles`` set to `enabled` for the
    /// current task or thread (and tasks it creates) only: the scoped form,
    /// for tests that run in parallel with others that build cycles on
    /// purpose.
    public static func withDependencyCycleReporting<R>(
        _ enabled: Bool = true,
        _ body: () throws -> R
    ) rethrows -> R {
        cycleScopesUsed.store(true, ordering: .relaxed)
        return try $scopedCycleReporting.withValue(enabled, operation: body)
    }

    /// Runs `body` with `handler` receiving the misuses detected on this
    /// task or thread (and tasks it creates), instead of trapping.
    public static func withHandler<R>(
        _ handler: @escaping Handler,
        _ body: () throws -> R
    ) rethrows -> R {
        try $scopedHandler.withValue(handler, operation: body)
    }

    /// Runs `body` with `handler` receiving the misuses detected on this task.
    public static func withHandler<R>(
        _ handler: @escaping Handler,
        isolation: isolated (any Actor)? = #isolation,
        _ body: () async throws -> R
    ) async rethrows -> R {
        try await $scopedHandler.withValue(handler, operation: body)
    }

    /// Reports a misuse. Returns only if a handler refused the call.
    static func report(_ code: Code, subject: ReportSubject, _ detail: String, cycle: [String]? = nil) {
        _ = reportReturning(code, subject: subject, detail, cycle: cycle)
    }

    /// Reports a tolerated misuse (``Code/completionBlockAfterStart``,
    /// ``Code/invalidThreadPriority``):
    /// observers always hear of it; a handler, if one is installed, receives
    /// it. Returns whether the call is refused, which is when a handler was
    /// installed. With no handler it returns false instead of trapping.
    static func reportTolerated(_ code: Code, subject: ReportSubject, _ detail: String) -> Bool {
        deliver(code, subject: subject, detail, cycle: nil).1
    }

    /// Reports a misuse and returns it (for calls that throw it when a
    /// handler refused it). Returns only if a handler refused the call.
    static func reportReturning(_ code: Code, subject: ReportSubject, _ detail: String, cycle: [String]? = nil) -> OperationMisuse {
        let (misuse, handled) = deliver(code, subject: subject, detail, cycle: cycle)
        if handled { return misuse }
        fatalError(misuse.message)
    }

    /// Builds the misuse, tells the report observers, then the active
    /// handler if there is one. Returns the misuse and whether a handler
    /// received it.
    private static func deliver(_ code: Code, subject: ReportSubject, _ detail: String, cycle: [String]?) -> (OperationMisuse, Bool) {
        let text = subject.text ?? ""
        let misuse = OperationMisuse(
            code: code,
            subject: text,
            message: "Operations misuse [\(code.rawValue)]: \(text) \(detail)"
        )
        OperationReporting.deliver(OperationReport(kind: .misuse(code), message: misuse.message, subject: subject, cycle: cycle))
        guard let handler = scopedHandler ?? globalHandler.current else { return (misuse, false) }
        handler(misuse)
        return (misuse, true)
    }
}

/// The process-wide misuse handler, under a lock, in a slot of its concrete
/// type. Not `LockedValue<Handler?>`: passing a function-typed value
/// `inout` through a generic function reabstracts it on the way in and
/// again on the way back, so every read through `withLock { $0 }` wrapped
/// the stored closure in two more thunks, until a call to it overflowed the
/// stack (about 50,000 reports).
private final class HandlerSlot: @unchecked Sendable {
    // @unchecked Sendable: `handler` is read and written only while `lock`
    // is held.
    private let lock = PlatformLock()
    private var handler: OperationMisuse.Handler?

    var current: OperationMisuse.Handler? {
        lock.lock()
        defer { lock.unlock() }
        return handler
    }

    /// Installs `newHandler`; returns the one it replaced, for the caller to
    /// release after the lock.
    func replace(with newHandler: OperationMisuse.Handler?) -> OperationMisuse.Handler? {
        lock.lock()
        defer { lock.unlock() }
        let replaced = handler
        handler = newHandler
        return replaced
    }
}

extension Operation {
    /// `Type "name" (0x…)`, used in misuse messages and descriptions.
    var misuseSubject: String {
        let type = String(describing: Swift.type(of: self))
        let address = "0x" + String(UInt(bitPattern: ObjectIdentifier(self)), radix: 16)
        if let name { return "\(type) \"\(name)\" (\(address))" }
        return "\(type) (\(address))"
    }
}

extension OperationQueue {
    /// `OperationQueue "name"`, used in misuse messages.
    var misuseSubject: String {
        "\(String(describing: Swift.type(of: self))) \"\(name ?? "unnamed")\""
    }
}
