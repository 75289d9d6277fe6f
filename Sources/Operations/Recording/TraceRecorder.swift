import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Records what the scheduler does while tracing is on (see
/// ``OperationTracing``). Off by default: each hook then costs one relaxed
/// atomic load.
///
/// While on, each thread appends raw events to a buffer of its own (under
/// that buffer's uncontended lock), so recording threads do not contend;
/// `stop()` collects the buffers and builds an ``OperationTrace``.
final class TraceRecorder: @unchecked Sendable {
    // @unchecked Sendable: `buffers` and `startTime` are read and written
    // only while `lock` is held; `active` and `session` are atomic.

    static let shared = TraceRecorder()

    /// Whether tracing is on: the one load every hook pays. Static, so
    /// that a hook reads it without retaining `shared`.
    private static let active = Atomic<Bool>(false)

    private let lock = PlatformLock()
    private var buffers: [ThreadBuffer] = []
    /// The current recording session; a thread's buffer from an older
    /// session registers again.
    private let session = Atomic<Int>(0)
    private var startTime: UInt64 = 0

    /// One recorded event, as cheap to store as possible.
    struct RawEvent {
        enum Kind: UInt8 {
            case added, ready, started, finished, cancelled, counts
        }
        var time: UInt64
        var kind: Kind
        var operation: UInt
        /// The queue's `traceSerial` (0: none); unlike an address, never
        /// shared by two queues.
        var queue: UInt
        var thread: Int32
        /// `counts`: ready, executing, pending.
        var values: (Int32, Int32, Int32) = (0, 0, 0)
    }

    /// What is known about an operation when it is added or started by hand.
    struct OperationInfo {
        var name: String?
        /// The class; its name is written out when the recording stops
        /// (`typeName`), once per class, off the recording threads.
        var type: Operation.Type
        var typeName = ""
        /// The time of the event that introduced the operation (its
        /// `added`, or a start by hand): how the trace tells apart the
        /// operations that reused one address, and leaves out those it never
        /// saw introduced (added before the recording began).
        var time: UInt64 = 0
        var priority: Operation.QueuePriority
        var qualityOfService: QualityOfService
        var dependencies: [UInt]
    }

    /// Per-thread storage. Each has its own lock, taken by its thread for
    /// every event and by `stop()` once.
    final class ThreadBuffer: @unchecked Sendable {
        // @unchecked Sendable: `events`, `infos`, `queueNames` and
        // `threadName` are guarded by `lock`; `session` and `lastQueue` are touched only by
        // the buffer's own thread; `thread` is immutable.
        let lock = PlatformLock()
        /// Read and written only by the buffer's own thread.
        var session = -1
        var events: [RawEvent] = []
        /// In the order described; `stop()` keeps the first per operation.
        var infos: [(UInt, OperationInfo)] = []
        var queueNames: [UInt: String] = [:]
        /// The queue last described on this thread: its name is read again
        /// only when another queue is described. Read and written only by
        /// the buffer's own thread (`describe`, `register`).
        var lastQueue: UInt = 0
        var threadName: String?
        let thread: Int32

        init(thread: Int32) { self.thread = thread }
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let status = pthread_key_create(&key) { pointer in
            guard let pointer else { return }
            Unmanaged<ThreadBuffer>.fromOpaque(pointer).release()
        }
        precondition(status == 0, "Operations: pthread_key_create failed with \(status)")
        return key
    }()

    /// Whether hooks should record. One relaxed load.
    @inline(__always)
    static var isActive: Bool { active.load(ordering: .relaxed) }

    // MARK: Sessions

    func start() -> Bool {
        lock.withLock {
            guard !Self.active.load(ordering: .relaxed) else { return false }
            session.add(1, ordering: .relaxed)
            buffers = []
            startTime = monotonicNanoseconds()
            Self.active.store(true, ordering: .releasing)
            return true
        }
    }

    func stop() -> OperationTrace {
        let (collected, begin, wasRecording) = lock.withLock { () -> ([ThreadBuffer], UInt64, Bool) in
            let wasRecording = Self.active.load(ordering: .relaxed)
            Self.active.store(false, ordering: .releasing)
            defer { buffers = [] }
            return (buffers, startTime, wasRecording)
        }
        // Nothing was recording: an empty trace, which lasted no time (not
        // the time since the process began, or since an earlier recording).
        guard wasRecording else {
            let now = monotonicNanoseconds()
            return OperationTrace(raw: [], infos: [:], queueNames: [:], threadNames: [:], startTime: now, endTime: now)
        }
        var events: [RawEvent] = []
        var described: [(UInt, OperationInfo)] = []
        var queueNames: [UInt: String] = [:]
        var threadNames: [Int32: String] = [:]
        var typeNames: [ObjectIdentifier: String] = [:]
        for buffer in collected {
            buffer.lock.withLock {
                events += buffer.events
                for (id, var info) in buffer.infos {
                    let key = ObjectIdentifier(info.type)
                    if let known = typeNames[key] {
                        info.typeName = known
                    } else {
                        info.typeName = String(describing: info.type)
                        typeNames[key] = info.typeName
                    }
                    described.append((id, info))
                }
                queueNames.merge(buffer.queueNames) { first, _ in first }
                if let name = buffer.threadName { threadNames[buffer.thread] = name }
                buffer.events = []
                buffer.infos = []
                buffer.queueNames = [:]
            }
        }
        return OperationTrace(
            raw: events,
            infos: Dictionary(grouping: described.sorted { $0.1.time < $1.1.time }, by: \.0).mapValues { $0.map(\.1) },
            queueNames: queueNames,
            threadNames: threadNames,
            startTime: begin,
            endTime: monotonicNanoseconds()
        )
    }

    // MARK: Recording

    private func buffer() -> ThreadBuffer {
        if let pointer = pthread_getspecific(Self.key) {
            let buffer = Unmanaged<ThreadBuffer>.fromOpaque(pointer).takeUnretainedValue()
            if buffer.session == session.load(ordering: .relaxed) { return buffer }
            register(buffer)
            return buffer
        }
        let buffer = ThreadBuffer(thread: Platform.currentThreadID())
        pthread_setspecific(Self.key, Unmanaged.passRetained(buffer).toOpaque())
        register(buffer)
        return buffer
    }

    private func register(_ buffer: ThreadBuffer) {
        let name = Worker.current.map { "ops.worker.\($0.index)" }
            ?? (ThreadContext.current.isMainThread ? "main" : "thread \(buffer.thread)")
        lock.withLock {
            buffer.session = session.load(ordering: .relaxed)
            buffer.lock.withLock {
                buffer.events = []
                buffer.infos = []
                buffer.queueNames = [:]
                buffer.lastQueue = 0
                buffer.threadName = name
            }
            buffers.append(buffer)
        }
    }

    /// Records `kind` for `operation` (and `queue`). Call only when
    /// `isActive`; never calls user code (names are read by the caller).
    func record(_ kind: RawEvent.Kind, _ operation: Operation?, queue: OperationQueue?, values: (Int32, Int32, Int32) = (0, 0, 0), at time: UInt64? = nil) {
        let buffer = buffer()
        let event = RawEvent(
            time: time ?? monotonicNanoseconds(),
            kind: kind,
            operation: operation.map { UInt(bitPattern: ObjectIdentifier($0)) } ?? 0,
            queue: queue?.traceSerial ?? 0,
            thread: buffer.thread,
            values: values
        )
        buffer.lock.withLock { buffer.events.append(event) }
    }

    /// Records what is known about `operation` (its name, type, priority,
    /// dependencies) and its queue's name. The caller holds no library lock:
    /// the names are read through their (possibly overridden) getters.
    func describe(_ operation: Operation, queue: OperationQueue?, at time: UInt64) {
        let dependencies = operation.withStateLock { _ in operation.storedDependencies }
        let info = OperationInfo(
            name: operation.name,
            type: type(of: operation),
            time: time,
            priority: operation.queuePriority,
            qualityOfService: operation.qualityOfService,
            dependencies: dependencies.isEmpty ? [] : dependencies.array.map { UInt(bitPattern: ObjectIdentifier($0)) }
        )
        let id = UInt(bitPattern: ObjectIdentifier(operation))
        let queueID = queue?.traceSerial ?? 0
        let buffer = buffer()
        // A thread usually describes many operations of one queue in a row.
        let queueName = queueID != 0 && queueID != buffer.lastQueue ? queue?.name ?? "queue" : nil
        buffer.lock.withLock {
            buffer.infos.append((id, info))
            if let queueName {
                buffer.lastQueue = queueID
                if buffer.queueNames[queueID] == nil { buffer.queueNames[queueID] = queueName }
            }
        }
    }
}
