#if Metrics
import CoreMetrics
import Operations

/// Reports every queue's activity through swift-metrics: how many
/// operations wait, are ready and execute; how long they wait to start and
/// how long they run; how many are cancelled and rejected.
///
/// ```swift
/// import Metrics
/// import OperationsMetrics
///
/// MetricsSystem.bootstrap(myPrometheusOrStatsdFactory)   // once, at startup
/// let metrics = OperationMetrics.install()
/// // … keep `metrics` as long as metrics should be recorded; then:
/// metrics.cancel()
/// ```
///
/// Available with the package trait `Metrics`:
/// `.package(url: …, from: …, traits: ["Metrics"])`.
///
/// ## Metrics
/// Every metric has the dimension `queue`: the queue's
/// ``Operations/OperationQueue/name`` (``unnamedQueue`` for a queue without
/// a name of its own, ``Operations/OperationQueue/isNamed``, so that
/// unnamed queues share one series instead of one per address). With the
/// default prefix `operations`:
///
/// | Label | Type | What |
/// |---|---|---|
/// | `operations.pending` | `Meter` | added and not started yet (ready or not) |
/// | `operations.ready` | `Meter` | of those, the ready ones: waiting for a slot |
/// | `operations.executing` | `Meter` | started and not finished |
/// | `operations.wait_duration` | `Timer` | from added to started, per operation |
/// | `operations.run_duration` | `Timer` | from started to finished, per operation |
/// | `operations.cancellations` | `Counter` | operations that left the queue cancelled (counted when they finish, also when cancelled before they were added) |
/// | `operations.rejections` | `Counter` | operations refused by a pending limit |
///
/// An operation started by hand, outside any queue, is counted in no
/// series. Cancelled operations are started and finished by their queue
/// without running their work: they are timed too, with a short run.
/// `ready` counts an operation while its last readiness event
/// (``Operations/OperationEvent/Kind/ready`` or
/// ``Operations/OperationEvent/Kind/notReady``) says it is ready, until it
/// starts: a dependency added to a ready operation takes it out again, and
/// so does an `isReady` override that turns false (announced with
/// `willChangeValue(forKey: "isReady")` / `didChangeValue(forKey: "isReady")`).
///
/// ## Cost and bounds
/// Events are recorded under one lock. Events of one operation can arrive
/// out of order across threads (see ``Operations/OperationEvent/time``):
/// each operation's phase follows from all the events known for it, so the
/// meters move by exact steps and end at the right values whatever the
/// order. The bookkeeping holds one small entry per
/// operation between its first event and its last, and releases it when
/// the operation finishes; entries of operations that were released without
/// finishing while observed are dropped by a sweep, so it stays bounded by
/// the number of live operations. The meters themselves are not: each
/// distinct `queue` dimension creates its series once and keeps it for the
/// life of the process (the metrics backend owns them), so name queues from
/// a small set, or map many names onto few with a custom dimension.
public enum OperationMetrics {
    /// The `queue` dimension of queues that were never named: `"unnamed"`.
    public static let unnamedQueue = "unnamed"

    /// The labels of the metrics, from a prefix.
    public struct Labels: Sendable, Hashable {
        /// `<prefix>.pending`: a `Meter` of operations added and not started.
        public var pending: String
        /// `<prefix>.ready`: a `Meter` of pending operations that are ready.
        public var ready: String
        /// `<prefix>.executing`: a `Meter` of operations started and not finished.
        public var executing: String
        /// `<prefix>.wait_duration`: a `Timer` of the time from added to started.
        public var waitDuration: String
        /// `<prefix>.run_duration`: a `Timer` of the time from started to finished.
        public var runDuration: String
        /// `<prefix>.cancellations`: a `Counter` of cancelled operations.
        public var cancellations: String
        /// `<prefix>.rejections`: a `Counter` of operations a pending limit refused.
        public var rejections: String

        /// The labels `<prefix>.pending`, `<prefix>.ready`, and so on.
        ///
        /// - Parameter prefix: The first part of every label, such as `"operations"`.
        public init(prefix: String = "operations") {
            pending = prefix + ".pending"
            ready = prefix + ".ready"
            executing = prefix + ".executing"
            waitDuration = prefix + ".wait_duration"
            runDuration = prefix + ".run_duration"
            cancellations = prefix + ".cancellations"
            rejections = prefix + ".rejections"
        }
    }

    /// A running installation. ``cancel()`` it, or let it go, to stop
    /// recording. The meters keep their last values.
    public final class Token: Sendable {
        private let registration: OperationInstrumentation.Token
        let recorder: MetricsRecorder

        init(registration: OperationInstrumentation.Token, recorder: MetricsRecorder) {
            self.registration = registration
            self.recorder = recorder
        }

        /// Stops recording. Calling it twice does nothing.
        public func cancel() { registration.cancel() }
    }

    /// Records every queue's activity until the returned token is cancelled
    /// or released.
    ///
    /// Install once: two installations with one factory record everything
    /// twice. Operations already in queues when it is installed are counted
    /// from their next event on.
    ///
    /// - Parameters:
    ///   - factory: Makes the metrics. By default the factory current where
    ///     `install` is called: the one bound with `withMetricsFactory`, or
    ///     the one given to `MetricsSystem.bootstrap`.
    ///   - labels: The metrics' labels.
    ///   - queueDimension: The `queue` dimension of a queue; by default
    ///     ``defaultQueueDimension(_:)``. Keep the number of distinct values
    ///     small: each is a series in every metric.
    /// - Returns: The installation; keep it as long as metrics should be
    ///   recorded.
    public static func install(
        factory: any MetricsFactory = MetricsSystem.factory,
        labels: Labels = Labels(),
        queueDimension: @escaping @Sendable (OperationQueue) -> String = defaultQueueDimension
    ) -> Token {
        let recorder = MetricsRecorder(factory: factory, labels: labels, queueDimension: queueDimension)
        let registration = OperationInstrumentation.addInstrument { event in recorder.record(event) }
        return Token(registration: registration, recorder: recorder)
    }

    /// The queue's name, or ``unnamedQueue`` if it has no name of its own
    /// (``Operations/OperationQueue/isNamed``: the default name,
    /// `NSOperationQueue 0x…`, holds an address).
    ///
    /// - Parameter queue: A queue.
    /// - Returns: The value of its `queue` dimension.
    @Sendable
    public static func defaultQueueDimension(_ queue: OperationQueue) -> String {
        guard queue.isNamed, let name = queue.name else { return unnamedQueue }
        return name
    }
}

/// The metrics of one `queue` dimension value, with the counts behind its meters.
final class QueueSeries: Sendable {
    let pending: Meter
    let ready: Meter
    let executing: Meter
    let waitDuration: Timer
    let runDuration: Timer
    let cancellations: Counter
    let rejections: Counter

    init(name: String, labels: OperationMetrics.Labels, factory: any MetricsFactory) {
        let dimensions = [("queue", name)]
        pending = Meter(label: labels.pending, dimensions: dimensions, factory: factory)
        ready = Meter(label: labels.ready, dimensions: dimensions, factory: factory)
        executing = Meter(label: labels.executing, dimensions: dimensions, factory: factory)
        waitDuration = Timer(label: labels.waitDuration, dimensions: dimensions, factory: factory)
        runDuration = Timer(label: labels.runDuration, dimensions: dimensions, factory: factory)
        cancellations = Counter(label: labels.cancellations, dimensions: dimensions, factory: factory)
        rejections = Counter(label: labels.rejections, dimensions: dimensions, factory: factory)
        // A series starts at 0, so that it reads 0 (not "no value") even when
        // the events of its first operations cancel each other out.
        pending.set(0)
        ready.set(0)
        executing.set(0)
    }
}

/// What the recorder knows of one operation.
struct OperationEntry {
    weak var operation: Operation?
    var series: QueueSeries?
    var added: ContinuousClock.Instant?
    /// The latest readiness event by time: when, and whether it made the
    /// operation ready (`.ready`) or not (`.notReady`).
    var readiness: (time: ContinuousClock.Instant, isReady: Bool)?
    var started: ContinuousClock.Instant?
    var finished: ContinuousClock.Instant?
    /// The phase counted in the meters.
    var counted = Phase.none
    /// Whether the finish came from a queue (then an `added` may still come).
    var finishedInQueue = false
    var waitRecorded = false
    var runRecorded = false

    enum Phase: Equatable { case none, pending, ready, executing }

    /// The phase the known events put it in.
    var phase: Phase {
        guard series != nil, finished == nil else { return .none }
        if started != nil { return .executing }
        guard added != nil else { return .none }
        return readiness?.isReady == true ? .ready : .pending
    }

    /// Whether no further event can change what is recorded.
    var isComplete: Bool {
        guard finished != nil else { return false }
        return added != nil || !finishedInQueue
    }
}

/// Turns events into metrics.
final class MetricsRecorder: Sendable {
    private struct State {
        var entries: [ObjectIdentifier: OperationEntry] = [:]
        var series: [String: QueueSeries] = [:]
        var counts: [ObjectIdentifier: Counts] = [:]
        var sweepAt = 1024
    }

    private struct Counts {
        var pending = 0
        var ready = 0
        var executing = 0
    }

    private let state = LockedValue(State())
    private let factory: any MetricsFactory
    private let labels: OperationMetrics.Labels
    private let queueDimension: @Sendable (OperationQueue) -> String

    init(factory: any MetricsFactory, labels: OperationMetrics.Labels, queueDimension: @escaping @Sendable (OperationQueue) -> String) {
        self.factory = factory
        self.labels = labels
        self.queueDimension = queueDimension
    }

    /// How many operations the bookkeeping holds.
    var entryCount: Int { state.withLock { $0.entries.count } }

    /// Records one event.
    func record(_ event: OperationEvent) {
        // User code (the queue's name, the dimension function, an
        // `isCancelled` override) runs before the lock.
        let name = event.queue.map(queueDimension)
        let finishedCancelled = event.kind == .finished && event.queue != nil && event.operation.isCancelled
        state.withLock { state in record(event, queue: name, finishedCancelled: finishedCancelled, in: &state) }
    }

    private func record(_ event: OperationEvent, queue name: String?, finishedCancelled: Bool, in state: inout State) {
        let series: QueueSeries? = if let name { self.series(named: name, in: &state) } else { nil }
        let id = ObjectIdentifier(event.operation)
        if let stale = state.entries[id], stale.operation !== event.operation {
            // A released operation's address, reused.
            drop(stale, id: id, in: &state)
        }
        switch event.kind {
        case .rejected:
            series?.rejections.increment()
            return
        case .cancelled:
            // Counted when the operation leaves its queue cancelled (below):
            // one cancelled before it was added has no queue yet here.
            return
        case .ready, .notReady:
            // A readiness event for an operation no queue has claimed yet
            // (its dependencies finished before it was added) is repeated
            // by the add. One with a queue may arrive before the add's
            // `added`: it is kept.
            guard state.entries[id] != nil || event.queue != nil else { return }
        case .added, .started, .finished:
            break
        }
        var entry = state.entries[id] ?? OperationEntry(operation: event.operation)
        if entry.series == nil { entry.series = series }
        switch event.kind {
        case .added: entry.added = event.time
        case .ready, .notReady:
            // Events of one operation can arrive out of order: the latest by
            // time decides (on a tie, the later arrival).
            if entry.readiness.map({ $0.time <= event.time }) ?? true {
                entry.readiness = (event.time, event.kind == .ready)
            }
        case .started: entry.started = event.time
        case .finished:
            entry.finished = event.time
            entry.finishedInQueue = event.queue != nil
            if finishedCancelled { entry.series?.cancellations.increment() }
        case .cancelled, .rejected: break
        }
        update(&entry, in: &state)
        if entry.isComplete {
            state.entries[id] = nil
        } else {
            state.entries[id] = entry
            if state.entries.count >= state.sweepAt { sweep(&state) }
        }
    }

    private func series(named name: String, in state: inout State) -> QueueSeries {
        if let existing = state.series[name] { return existing }
        let created = QueueSeries(name: name, labels: labels, factory: factory)
        state.series[name] = created
        return created
    }

    /// Moves the entry's contribution to the meters to its current phase,
    /// and records its timers once their two ends are known.
    private func update(_ entry: inout OperationEntry, in state: inout State) {
        guard let series = entry.series else { return }
        let phase = entry.phase
        if phase != entry.counted {
            move(series, from: entry.counted, to: phase, in: &state)
            entry.counted = phase
        }
        if !entry.waitRecorded, let added = entry.added, let started = entry.started {
            entry.waitRecorded = true
            series.waitDuration.recordNanoseconds(nanoseconds(from: added, to: started))
        }
        if !entry.runRecorded, let started = entry.started, let finished = entry.finished {
            entry.runRecorded = true
            series.runDuration.recordNanoseconds(nanoseconds(from: started, to: finished))
        }
    }

    private func move(_ series: QueueSeries, from old: OperationEntry.Phase, to new: OperationEntry.Phase, in state: inout State) {
        let key = ObjectIdentifier(series)
        var counts = state.counts[key] ?? Counts()
        let before = counts
        for (phase, delta) in [(old, -1), (new, 1)] {
            switch phase {
            case .none: break
            case .pending: counts.pending += delta
            case .ready:
                counts.pending += delta
                counts.ready += delta
            case .executing: counts.executing += delta
            }
        }
        state.counts[key] = counts
        if counts.pending != before.pending { series.pending.set(counts.pending) }
        if counts.ready != before.ready { series.ready.set(counts.ready) }
        if counts.executing != before.executing { series.executing.set(counts.executing) }
    }

    /// Drops the entries of operations that no longer exist (no event can
    /// come for them), taking back what they count in the meters.
    private func sweep(_ state: inout State) {
        for (id, entry) in state.entries where entry.operation == nil {
            drop(entry, id: id, in: &state)
        }
        state.sweepAt = max(1024, state.entries.count * 2)
    }

    private func drop(_ entry: OperationEntry, id: ObjectIdentifier, in state: inout State) {
        if let series = entry.series, entry.counted != .none {
            move(series, from: entry.counted, to: .none, in: &state)
        }
        state.entries[id] = nil
    }

    private func nanoseconds(from start: ContinuousClock.Instant, to end: ContinuousClock.Instant) -> Int64 {
        let duration = max(.zero, end - start)
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
#endif
