import Synchronization

/// One thing that happened to an operation, for instruments such as metrics
/// (see ``OperationInstrumentation``).
public struct OperationEvent: Sendable {
    /// What happened.
    public enum Kind: Sendable, Hashable {
        /// Added to `queue`.
        case added
        /// Became ready while waiting in a queue: its last unfinished
        /// dependency finished or was removed, or it was cancelled; or, when
        /// it was added, it was ready already (then the event has the time of
        /// the add). For a class that overrides ``Operation/isReady``, when
        /// its queue reads the override as true (on add, and after each
        /// announcement of `isReady`, dependency change or cancellation).
        ///
        /// Readiness events (this one and ``notReady``) concern only an
        /// operation waiting in a queue, from its add until its queue starts
        /// it: none before the add (an operation added not ready has had no
        /// readiness event yet), none once it started. They alternate,
        /// starting with `ready`.
        case ready
        /// Became not ready again after ``ready``, while waiting in a queue:
        /// it was given a dependency that has not finished, or (for a class
        /// that overrides ``Operation/isReady``) its queue read the override
        /// as false. Pairs with ``ready``, so that a count of ready
        /// operations stays right; an operation's last readiness event, by
        /// ``OperationEvent/time``, tells whether it is ready. A dependency
        /// given once its queue has taken the operation to start it does not
        /// count and emits nothing.
        case notReady
        /// Started, by its queue or by hand.
        case started
        /// Finished and left its queue.
        case finished
        /// Cancelled.
        case cancelled
        /// Refused by `queue`'s pending limit (`.reject`, or a
        /// `tryAddOperation` that returned false).
        case rejected
    }

    /// What happened.
    public let kind: Kind
    /// The operation.
    public let operation: Operation
    /// Its queue, when known.
    public let queue: OperationQueue?
    /// When it happened. Events are delivered on the thread where they
    /// happen, after the library's locks are released, so two events of one
    /// operation on different threads can arrive out of order (a queue may
    /// start an operation before the thread that added it delivers `added`);
    /// their times are in the right order.
    public let time: ContinuousClock.Instant
}

/// Instruments that observe every operation's lifecycle: the hook behind the
/// metrics and tracing integrations (the `OperationsMetrics` and
/// `OperationsTracing` products).
///
/// With no instrument installed, each hook costs one relaxed atomic load.
/// Instruments are called on the thread where the event happens, never
/// while a library lock is held; they should be quick.
public enum OperationInstrumentation {
    /// A registration; ``cancel()`` it (or let it go) to stop.
    public final class Token: Sendable {
        private let id: Int
        init(id: Int) { self.id = id }

        /// Stops the instrument. Calling it twice does nothing.
        public func cancel() { OperationInstrumentation.remove(id) }

        deinit { cancel() }
    }

    private static let instruments = LockedValue<[Int: @Sendable (OperationEvent) -> Void]>([:])
    private static let nextID = Atomic<Int>(0)
    private static let installed = Atomic<Bool>(false)

    /// Installs `instrument`; keep the token as long as it should run.
    public static func addInstrument(_ instrument: @escaping @Sendable (OperationEvent) -> Void) -> Token {
        let id = nextID.add(1, ordering: .relaxed).newValue
        instruments.withLock { $0[id] = instrument }
        installed.store(true, ordering: .releasing)
        return Token(id: id)
    }

    private static func remove(_ id: Int) {
        let removed = instruments.withLock { instruments -> (@Sendable (OperationEvent) -> Void)? in
            defer { if instruments.isEmpty { installed.store(false, ordering: .releasing) } }
            return instruments.removeValue(forKey: id)
        }
        withExtendedLifetime(removed) {}
    }

    /// The time of an event, taken only when an instrument is installed.
    ///
    /// Hot paths keep it as an optional reference rather than an optional
    /// `ContinuousClock.Instant`: the instant's layout is not fixed at
    /// compile time, so every copy and test of an optional instant goes
    /// through runtime value witnesses even when no instrument is on, while
    /// a nil reference costs one comparison.
    final class Stamp: Sendable {
        let time: ContinuousClock.Instant
        init() { time = .now }

        /// The time of a readiness change of an operation whose state,
        /// read under its lock, is `state`; nil when no instrument hears of
        /// it: none is installed, or the operation does not wait in a queue
        /// (readiness events cover only that time, see `OperationEvent.Kind.ready`).
        @inline(__always)
        static func readinessChange(of state: OperationState) -> Stamp? {
            guard OperationInstrumentation.isActive, state.isWaitingInQueue else { return nil }
            return Stamp()
        }
    }

    /// Whether an instrument is installed: the one load every hook pays.
    @inline(__always)
    static var isActive: Bool { installed.load(ordering: .relaxed) }

    /// Delivers an event that happened at `time` (now, by default). Call
    /// only when `isActive`, with no library lock held.
    static func emit(_ kind: OperationEvent.Kind, _ operation: Operation, queue: OperationQueue?, at time: ContinuousClock.Instant = .now) {
        let event = OperationEvent(kind: kind, operation: operation, queue: queue, time: time)
        let current = instruments.withLock { Array($0.values) }
        for instrument in current { instrument(event) }
    }
}

/// Carries values from the code that adds an operation into the
/// operation's body, as `Task {}` carries task-local values into a task.
///
/// Swift offers no way to copy *every* task-local value into code that runs
/// later on another thread, so the library carries what is registered:
///
/// ```swift
/// enum Request { @TaskLocal static var id: String? }
/// let token = OperationContextPropagation.carry(Request.$id)
/// Request.$id.withValue("req-42") {
///     queue.addOperation { print(Request.id ?? "none") }   // prints "req-42"
/// }
/// ```
///
/// A registered value is captured when the operation is added (or, for an
/// operation run by hand, when it is started), and bound around its body:
/// `main()`, an `AsyncOperation`'s `execute()`, a `ResultOperation`'s
/// synchronous or `async` body, a `queue.run` body, and the `start()` of a
/// class that overrides it. It is not bound around completion blocks and
/// observers. A carrier for swift-distributed-tracing's `ServiceContext`
/// (which also carries swift-log metadata providers' values) is registered
/// the same way, with ``carry(_:)`` on its task-local.
public enum OperationContextPropagation {
    /// A registration; ``cancel()`` it (or let it go) to stop carrying.
    public final class Token: Sendable {
        private let id: Int
        init(id: Int) { self.id = id }

        /// Stops carrying. Calling it twice does nothing.
        public func cancel() { OperationContextPropagation.remove(id) }

        deinit { cancel() }
    }

    /// One carrier, type-erased: reads the current value (for the given
    /// operation) and returns a binder that restores it, or nil when there is
    /// nothing to carry.
    public typealias Capture = @Sendable (Operation) -> Binder?

    private static let carriers = LockedValue<[(id: Int, capture: Capture)]>([])
    private static let nextID = Atomic<Int>(0)
    private static let registered = Atomic<Bool>(false)

    /// Carries the task-local value `local` into operation bodies.
    public static func carry<Value: Sendable>(_ local: TaskLocal<Value>) -> Token {
        register { _ in
            let value = local.get()
            return Binder(
                sync: { body in local.withValue(value) { body() } },
                async: { body in await local.withValue(value) { await body() } }
            )
        }
    }

    /// Registers a carrier: `capture` runs in the adder's context with the
    /// operation being added and returns a binder for the value to carry, or
    /// nil. The binder runs around the operation's body (for example to bind
    /// a task-local value, or to open a tracing span). The operation keeps
    /// the binder until it finishes, then releases it, so a binder may
    /// capture the operation.
    public static func register(_ capture: @escaping Capture) -> Token {
        let id = nextID.add(1, ordering: .relaxed).newValue
        carriers.withLock { $0.append((id, capture)) }
        registered.store(true, ordering: .releasing)
        return Token(id: id)
    }

    /// Binds a captured value around synchronous and `async` code.
    public struct Binder: Sendable {
        let sync: @Sendable (() -> Void) -> Void
        let async: @Sendable (() async -> Void) async -> Void

        /// Creates a binder from a function that runs its argument with the
        /// value bound, in both forms.
        public init(
            sync: @escaping @Sendable (() -> Void) -> Void,
            async: @escaping @Sendable (() async -> Void) async -> Void
        ) {
            self.sync = sync
            self.async = async
        }
    }

    private static func remove(_ id: Int) {
        let removed = carriers.withLock { carriers -> [(id: Int, capture: Capture)] in
            let removed = carriers.filter { $0.id == id }
            carriers.removeAll { $0.id == id }
            if carriers.isEmpty { registered.store(false, ordering: .releasing) }
            return removed
        }
        withExtendedLifetime(removed) {}
    }

    /// Whether any carrier is registered: the one load the hot path pays.
    @inline(__always)
    static var isActive: Bool { registered.load(ordering: .relaxed) }

    /// Captures every registered value in the calling context.
    static func capture(for operation: Operation) -> CarriedContext? {
        let current = carriers.withLock { $0.map(\.capture) }
        let binders = current.compactMap { $0(operation) }
        guard !binders.isEmpty else { return nil }
        return CarriedContext(binders: binders, serial: captureSerials.add(1, ordering: .relaxed).newValue)
    }

    /// Numbers the captures, so that an add gives back only the context it
    /// captured itself.
    private static let captureSerials = Atomic<UInt64>(0)
}

/// The values captured for one operation.
struct CarriedContext: Sendable {
    let binders: [OperationContextPropagation.Binder]
    /// Which capture this is (`OperationContextPropagation.capture`).
    let serial: UInt64

    /// Runs `body` with every value bound.
    func run(_ body: () -> Void) {
        run(body, from: binders[...])
    }

    private func run(_ body: () -> Void, from rest: ArraySlice<OperationContextPropagation.Binder>) {
        guard let first = rest.first else { return body() }
        first.sync { run(body, from: rest.dropFirst()) }
    }

    /// Runs the `async` `body` with every value bound.
    func run(_ body: () async -> Void) async {
        await run(body, from: binders[...])
    }

    private func run(_ body: () async -> Void, from rest: ArraySlice<OperationContextPropagation.Binder>) async {
        guard let first = rest.first else { return await body() }
        await first.async { await run(body, from: rest.dropFirst()) }
    }
}
