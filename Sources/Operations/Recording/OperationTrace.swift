/// Records what every queue and operation does, for pictures and analysis:
/// when each operation was added, became ready, started (on which thread),
/// finished or was cancelled, and how many operations each queue held.
///
/// ```swift
/// OperationTracing.start()
/// runTheWork()
/// let trace = OperationTracing.stop()
/// let json = trace.chromeTraceJSON()   // save it to a file; open it in ui.perfetto.dev
/// let svg = trace.svgTimeline()        // a picture any browser shows
/// ```
///
/// Off by default; while off, the scheduler pays one relaxed atomic load per
/// hook. While on, each event is appended to a per-thread buffer, which
/// nothing bounds: a recording holds a few hundred bytes per operation
/// (about 330 for an operation added, started and finished) until ``stop()``
/// returns them as the trace. Record a bounded stretch of work.
public enum OperationTracing {
    /// Starts recording. Returns false (and changes nothing) if a recording
    /// is already in progress.
    @discardableResult
    public static func start() -> Bool {
        TraceRecorder.shared.start()
    }

    /// Stops recording and returns what was recorded since `start()` (an
    /// empty trace if nothing was recording).
    public static func stop() -> OperationTrace {
        TraceRecorder.shared.stop()
    }

    /// Whether a recording is in progress.
    public static var isRecording: Bool { TraceRecorder.isActive }
}

/// What ``OperationTracing`` recorded: operations, queues, worker threads
/// and queue counters, with times in nanoseconds since the recording began.
public struct OperationTrace: Sendable {
    /// One operation seen during the recording.
    public struct OperationRecord: Sendable, Identifiable, Hashable {
        /// Its index in ``OperationTrace/operations``.
        public let id: Int
        /// Its name, if it had one when added (or started by hand).
        public let name: String?
        /// Its class, for example `BlockOperation`.
        public let typeName: String
        /// The index of its queue in ``OperationTrace/queues``, or nil if it
        /// was started by hand.
        public let queue: Int?
        /// Its priority and quality of service when added.
        public let priority: Operation.QueuePriority
        public let qualityOfService: QualityOfService
        /// The ids of its dependencies that were recorded too.
        public let dependencies: [Int]
        /// When it was added to its queue.
        public let added: UInt64?
        /// When it became ready (its last dependency finished, or it was
        /// cancelled, or it was ready when added).
        public let ready: UInt64?
        /// When its queue (or a caller, by hand) started it.
        public let started: UInt64?
        /// When it finished.
        public let finished: UInt64?
        /// When it was cancelled, if it was.
        public let cancelled: UInt64?
        /// The index of the thread that started it, in ``OperationTrace/workers``.
        public let worker: Int?

        /// A label: its name, or its type and id.
        public var label: String { name ?? "\(typeName) #\(id)" }
    }

    /// A queue seen during the recording.
    public struct QueueRecord: Sendable, Hashable {
        /// Its index in ``OperationTrace/queues``.
        public let id: Int
        /// Its name.
        public let name: String
    }

    /// A thread that started operations.
    public struct WorkerRecord: Sendable, Hashable {
        /// Its index in ``OperationTrace/workers``.
        public let id: Int
        /// `ops.worker.N`, `main`, or `thread N`.
        public let name: String
        /// The kernel's thread id (0 where unknown).
        public let threadID: Int32
    }

    /// A queue's counters after a change. A busy queue is sampled at most
    /// every 20 µs, and always when it becomes empty.
    public struct QueueSample: Sendable, Hashable {
        /// When.
        public let time: UInt64
        /// The queue's index.
        public let queue: Int
        /// Ready operations waiting for a slot.
        public let ready: Int
        /// Operations holding a slot.
        public let executing: Int
        /// Unfinished operations.
        public let pending: Int
    }

    /// The operations, in the order they were first seen.
    public let operations: [OperationRecord]
    /// The queues.
    public let queues: [QueueRecord]
    /// The threads that started operations.
    public let workers: [WorkerRecord]
    /// The queues' counters over time.
    public let samples: [QueueSample]
    /// The length of the recording, in nanoseconds.
    public let duration: UInt64

    /// Creates a trace from its parts (for tests and tools).
    public init(operations: [OperationRecord], queues: [QueueRecord], workers: [WorkerRecord], samples: [QueueSample], duration: UInt64) {
        self.operations = operations
        self.queues = queues
        self.workers = workers
        self.samples = samples
        self.duration = duration
    }

    /// Builds the trace from raw per-thread events.
    init(
        raw: [TraceRecorder.RawEvent],
        infos: [UInt: [TraceRecorder.OperationInfo]],
        queueNames: [UInt: String],
        threadNames: [Int32: String],
        startTime: UInt64,
        endTime: UInt64
    ) {
        // By time; events of one instant in lifecycle order (an operation's
        // `added` before its `ready`, recorded with the same time).
        let events = raw.sorted { ($0.time, $0.kind.rawValue) < ($1.time, $1.kind.rawValue) }
        var builder = Builder(startTime: startTime)
        for event in events { builder.apply(event, infos: infos, queueNames: queueNames, threadNames: threadNames) }
        operations = builder.finishedRecords()
        queues = builder.queues
        workers = builder.workers
        samples = builder.samples
        duration = endTime &- startTime
    }

    /// Folds raw events into records. An address seen again after its
    /// operation finished is a new operation (memory is reused). A record
    /// takes the description made at the time of one of its events (the
    /// event that introduced the operation): an operation added before the
    /// recording began, whose address may be one a described operation used
    /// before, gets none rather than someone else's.
    private struct Builder {
        let startTime: UInt64
        var drafts: [Draft] = []
        var current: [UInt: Int] = [:]
        var queueIndex: [UInt: Int] = [:]
        var queues: [QueueRecord] = []
        var workerIndex: [Int32: Int] = [:]
        var workers: [WorkerRecord] = []
        var samples: [QueueSample] = []

        struct Draft {
            var address: UInt
            var info: TraceRecorder.OperationInfo?
            var queue: Int?
            var added, ready, started, finished, cancelled: UInt64?
            var worker: Int?
        }

        init(startTime: UInt64) { self.startTime = startTime }

        mutating func apply(
            _ event: TraceRecorder.RawEvent,
            infos: [UInt: [TraceRecorder.OperationInfo]],
            queueNames: [UInt: String],
            threadNames: [Int32: String]
        ) {
            let time = event.time > startTime ? event.time - startTime : 0
            let queue = event.queue == 0 ? nil : queueID(event.queue, names: queueNames)
            if event.kind == .counts {
                if let queue {
                    samples.append(QueueSample(time: time, queue: queue, ready: Int(event.values.0), executing: Int(event.values.1), pending: Int(event.values.2)))
                }
                return
            }
            var index = current[event.operation]
            // Nothing is recorded for an operation after it finished: an
            // event at the address of a finished one belongs to a new one.
            if index == nil || drafts[index!].finished != nil {
                drafts.append(Draft(address: event.operation, info: nil))
                index = drafts.count - 1
                current[event.operation] = index
            }
            let slot = index!
            if drafts[slot].info == nil {
                // The description made at this event's time, if this is the
                // event that introduced the operation (an operation cancelled
                // before it was added is introduced by its later `added`).
                drafts[slot].info = infos[event.operation]?.first { $0.time == event.time }
            }
            if drafts[slot].queue == nil { drafts[slot].queue = queue }
            switch event.kind {
            case .added: drafts[slot].added = drafts[slot].added ?? time
            case .ready: drafts[slot].ready = drafts[slot].ready ?? time
            case .started:
                drafts[slot].started = drafts[slot].started ?? time
                drafts[slot].worker = workerID(event.thread, names: threadNames)
            case .finished: drafts[slot].finished = drafts[slot].finished ?? time
            case .cancelled: drafts[slot].cancelled = drafts[slot].cancelled ?? time
            case .counts: break
            }
        }

        /// The record of the queue with `serial` (its `traceSerial`, which
        /// no other queue shares, unlike its address).
        private mutating func queueID(_ serial: UInt, names: [UInt: String]) -> Int {
            if let known = queueIndex[serial] { return known }
            let id = queues.count
            queues.append(QueueRecord(id: id, name: names[serial] ?? "queue \(id)"))
            queueIndex[serial] = id
            return id
        }

        private mutating func workerID(_ thread: Int32, names: [Int32: String]) -> Int {
            if let known = workerIndex[thread] { return known }
            let id = workers.count
            workers.append(WorkerRecord(id: id, name: names[thread] ?? "thread \(thread)", threadID: thread))
            workerIndex[thread] = id
            return id
        }

        func finishedRecords() -> [OperationRecord] {
            // A dependency's address resolves to the latest operation at that
            // address seen before the dependent, else the first seen after it
            // (a dependency added to its queue later than its dependent).
            var byAddress: [UInt: [Int]] = [:]
            for (id, draft) in drafts.enumerated() { byAddress[draft.address, default: []].append(id) }
            func resolve(_ address: UInt, for dependent: Int) -> Int? {
                guard let ids = byAddress[address] else { return nil }
                return ids.last(where: { $0 < dependent }) ?? ids.first
            }
            var records: [OperationRecord] = []
            records.reserveCapacity(drafts.count)
            for (id, draft) in drafts.enumerated() {
                let info = draft.info
                let dependencies = (info?.dependencies ?? []).compactMap { resolve($0, for: id) }.filter { $0 != id }
                records.append(OperationRecord(
                    id: id,
                    name: info?.name,
                    typeName: info?.typeName ?? "Operation",
                    queue: draft.queue,
                    priority: info?.priority ?? .normal,
                    qualityOfService: info?.qualityOfService ?? .default,
                    dependencies: dependencies,
                    added: draft.added,
                    ready: draft.ready,
                    started: draft.started,
                    finished: draft.finished,
                    cancelled: draft.cancelled,
                    worker: draft.worker
                ))
            }
            return records
        }
    }
}
