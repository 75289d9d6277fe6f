#if Tracing
import Operations
import Tracing

/// Traces operations with swift-distributed-tracing: each operation is a
/// span, a child of the `ServiceContext` current where it was added, and
/// its body runs with that span's context current, so the work inside
/// creates child spans.
///
/// ```swift
/// import OperationsTracing
/// import Tracing
///
/// InstrumentationSystem.bootstrap(myTracer)              // once, at startup
/// let tracing = OperationTracing.install()
///
/// withSpan("request") { _ in
///     queue.addOperation(resize)       // span "resize", a child of "request"
/// }
/// // … keep `tracing` as long as operations should be traced; then:
/// tracing.cancel()
/// ```
///
/// Available with the package trait `Tracing`:
/// `.package(url: …, from: …, traits: ["Tracing"])`.
///
/// ## Spans
/// An operation's span is named by its ``Operations/Operation/name`` or,
/// without one, its class (``defaultSpanName(_:)``). It starts when the
/// operation starts and ends, once, when it finishes, at the times of those
/// events. It carries the attributes `operation.class`, `operation.queue`
/// (the name of its queue, when that queue has a name of its own:
/// ``Operations/OperationQueue/isNamed``) and `operation.cancelled` (`true`
/// or `false`), and an event `cancelled` when the operation is cancelled
/// while its span is open (or before it starts). A cancelled operation that its queue finishes
/// without running its work still gets a (short) span.
///
/// The parent and the tracer are taken where the operation is added (or,
/// for an operation started by hand, where it is started): the current
/// `ServiceContext` (or a top-level one), and the tracer current there
/// (the one bound with `withTracer`, or the one bootstrapped), unless
/// ``install(tracer:spanName:)`` is given one. The body — `main()`, an
/// `AsyncOperation`'s `execute()`, a `ResultOperation`'s synchronous or
/// `async` body, a `queue.run` body — runs with `ServiceContext.current`
/// set to the span's context and with that tracer bound (`withTracer`).
///
/// ## Without a tracer
/// With no tracer installed (a `NoOpTracer`), no span is made, but the
/// adder's `ServiceContext` is still carried into the body, as `Task {}`
/// carries it: baggage and swift-log metadata providers keep working
/// across the queue.
///
/// Install once: two installations make two spans per operation.
public enum OperationTracing {
    /// A running installation. ``cancel()`` it, or let it go, to stop
    /// tracing. Operations already captured keep their context; spans
    /// already open are ended when their operations finish only while the
    /// installation runs.
    public final class Token: Sendable {
        private let carrier: OperationContextPropagation.Token
        private let instrument: OperationInstrumentation.Token
        let spans: SpanTable

        init(carrier: OperationContextPropagation.Token, instrument: OperationInstrumentation.Token, spans: SpanTable) {
            self.carrier = carrier
            self.instrument = instrument
            self.spans = spans
        }

        /// Stops tracing. Calling it twice does nothing.
        public func cancel() {
            carrier.cancel()
            instrument.cancel()
        }
    }

    /// Starts tracing operations, until the returned token is cancelled or
    /// released.
    ///
    /// - Parameters:
    ///   - tracer: The tracer of every span, or nil (the default) for the
    ///     tracer current where each operation is added.
    ///   - spanName: An operation's span name; by default
    ///     ``defaultSpanName(_:)``.
    /// - Returns: The installation; keep it as long as operations should be
    ///   traced.
    public static func install(
        tracer: (any Tracer)? = nil,
        spanName: @escaping @Sendable (Operation) -> String = defaultSpanName
    ) -> Token {
        let spans = SpanTable(tracer: tracer, spanName: spanName)
        let carrier = OperationContextPropagation.register { operation in spans.capture(operation) }
        let instrument = OperationInstrumentation.addInstrument { event in spans.handle(event) }
        return Token(carrier: carrier, instrument: instrument, spans: spans)
    }

    /// The operation's ``Operations/Operation/name``, or its class's name
    /// if it has none.
    ///
    /// - Parameter operation: An operation.
    /// - Returns: Its span's name.
    @Sendable
    public static func defaultSpanName(_ operation: Operation) -> String {
        operation.name ?? String(describing: type(of: operation))
    }

    /// The attribute naming the operation's class: `operation.class`.
    public static let classAttribute = "operation.class"
    /// The attribute naming the operation's queue: `operation.queue`.
    public static let queueAttribute = "operation.queue"
    /// The attribute telling whether the operation was cancelled: `operation.cancelled`.
    public static let cancelledAttribute = "operation.cancelled"
    /// The span event recorded when the operation is cancelled: `cancelled`.
    public static let cancelledEvent = "cancelled"
}

/// One operation's tracing: captured when it is added, spanned while it runs.
final class TracedOperation: Sendable {
    private struct State {
        var span: (any Span)?
        var ended = false
        var cancelled = false
    }

    weak let operation: Operation?
    let parent: ServiceContext
    let tracer: (any Tracer)?
    private let state = LockedValue(State())

    init(operation: Operation, parent: ServiceContext, tracer: (any Tracer)?) {
        self.operation = operation
        self.parent = parent
        self.tracer = tracer
    }

    /// The context the body runs in: the span's, or the adder's.
    var bodyContext: ServiceContext {
        state.withLock { $0.span?.context } ?? parent
    }

    func start(name: String, queue: String?, className: String, at instant: DefaultTracerClock.Timestamp) {
        guard let tracer else { return }
        state.withLock { state in
            guard state.span == nil, !state.ended else { return }
            let span = tracer.startSpan(name, context: parent, ofKind: .internal, at: instant)
            state.span = span
            span.attributes[OperationTracing.classAttribute] = className
            if let queue { span.attributes[OperationTracing.queueAttribute] = queue }
            if state.cancelled { span.addEvent(SpanEvent(name: OperationTracing.cancelledEvent, at: instant)) }
        }
    }

    func cancel(at instant: DefaultTracerClock.Timestamp) {
        state.withLock { state in
            guard !state.cancelled else { return }
            state.cancelled = true
            if !state.ended, let span = state.span {
                span.addEvent(SpanEvent(name: OperationTracing.cancelledEvent, at: instant))
            }
        }
    }

    /// Ends the span, once. A span never started (a finish seen first) is
    /// started and ended at the finish.
    func end(name: String, queue: String?, className: String, cancelled: Bool, at instant: DefaultTracerClock.Timestamp) {
        if tracer != nil, state.withLock({ $0.span == nil && !$0.ended }) {
            start(name: name, queue: queue, className: className, at: instant)
        }
        let span = state.withLock { state -> (any Span)? in
            guard !state.ended else { return nil }
            state.ended = true
            return state.span
        }
        guard let span else { return }
        span.attributes[OperationTracing.cancelledAttribute] = cancelled
        span.end(at: instant)
    }
}

/// The operations being traced, and the hooks that trace them.
final class SpanTable: Sendable {
    private struct State {
        var traced: [ObjectIdentifier: TracedOperation] = [:]
        var sweepAt = 1024
    }

    private let state = LockedValue(State())
    private let fixedTracer: (any Tracer)?
    private let spanName: @Sendable (Operation) -> String
    /// Maps `ContinuousClock` instants (the events' times) to wall-clock
    /// instants (the tracer's).
    private let epochBase: UInt64
    private let continuousBase: ContinuousClock.Instant

    init(tracer: (any Tracer)?, spanName: @escaping @Sendable (Operation) -> String) {
        fixedTracer = tracer
        self.spanName = spanName
        continuousBase = .now
        epochBase = DefaultTracerClock.now.nanosecondsSinceEpoch
    }

    /// How many operations are being traced.
    var count: Int { state.withLock { $0.traced.count } }

    /// Runs in the adder's context: records the parent and the tracer, and
    /// returns the binder that runs the body in the span's context.
    func capture(_ operation: Operation) -> OperationContextPropagation.Binder? {
        let current = ServiceContext.current
        let found = fixedTracer ?? InstrumentationSystem.tracer
        let tracer: (any Tracer)? = found is NoOpTracer ? nil : found
        guard tracer != nil || current != nil else { return nil }
        let traced = TracedOperation(operation: operation, parent: current ?? .topLevel, tracer: tracer)
        if tracer != nil {
            state.withLock { state in
                state.traced[ObjectIdentifier(operation)] = traced
                if state.traced.count >= state.sweepAt {
                    state.traced = state.traced.filter { $0.value.operation != nil }
                    state.sweepAt = max(1024, state.traced.count * 2)
                }
            }
        }
        return OperationContextPropagation.Binder(
            sync: { body in
                ServiceContext.$current.withValue(traced.bodyContext) {
                    guard let tracer = traced.tracer else { return body() }
                    withTracer(tracer) { body() }
                }
            },
            async: { body in
                await ServiceContext.$current.withValue(traced.bodyContext) {
                    guard let tracer = traced.tracer else { return await body() }
                    await withTracer(tracer) { await body() }
                }
            }
        )
    }

    /// The instrument: starts, annotates and ends spans.
    func handle(_ event: OperationEvent) {
        let id = ObjectIdentifier(event.operation)
        let traced: TracedOperation? = state.withLock { state in
            guard let found = state.traced[id], found.operation === event.operation else { return nil }
            if event.kind == .finished || event.kind == .rejected { state.traced[id] = nil }
            return found
        }
        guard let traced else { return }
        let instant = timestamp(event.time)
        // An operation cancelled before it was added had no span to tell
        // then: its start (or its finish, for one never started) tells it.
        // Read outside the table's lock (`isCancelled` may be overridden).
        if event.kind == .started || event.kind == .finished, event.operation.isCancelled {
            traced.cancel(at: instant)
        }
        switch event.kind {
        case .started:
            let operation = event.operation
            traced.start(name: spanName(operation), queue: event.queue.flatMap(ownName), className: className(operation), at: instant)
        case .cancelled:
            traced.cancel(at: instant)
        case .finished:
            let operation = event.operation
            traced.end(
                name: spanName(operation),
                queue: event.queue.flatMap(ownName),
                className: className(operation),
                cancelled: operation.isCancelled,
                at: instant
            )
        case .added, .ready, .notReady, .rejected:
            break
        }
    }

    /// The `operation.queue` attribute: the queue's name, only if it has one
    /// of its own (the default, `NSOperationQueue 0x…`, holds an address).
    private func ownName(_ queue: OperationQueue) -> String? {
        guard queue.isNamed else { return nil }
        return queue.name
    }

    private func className(_ operation: Operation) -> String {
        String(describing: type(of: operation))
    }

    private func timestamp(_ time: ContinuousClock.Instant) -> DefaultTracerClock.Timestamp {
        let (seconds, attoseconds) = (time - continuousBase).components
        let offset = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        let nanoseconds = offset >= 0 ? epochBase &+ UInt64(offset) : epochBase &- UInt64(-offset)
        return DefaultTracerClock.Timestamp(nanosecondsSinceEpoch: nanoseconds)
    }
}
#endif
