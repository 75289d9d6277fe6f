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

    /// Whether tracing is on: the one load every hook pays.
    let active = Atomic<Bool>(false)

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
        var queue: UInt
        var thread: Int32
        /// `counts`: ready, executing, pending.
        var values: (Int32, Int32, Int32) = (0, 0, 0)
    }

    /// What is known about an operation when it is added or started by hand.
    struct OperationInfo {
        var name: String?
        var typeName: String
        var priority: Operation.QueuePriority
        var qualityOfService: QualityOfService
        var dependencies: [UInt]
    }

    /// Per-thread storage. Each has its own lock, taken by its thread for
    /// every event and by `stop()` once.
    final class ThreadBuffer: @unchecked Sendable {
        // @unchecked Sendable: `events`, `infos`, `queueNames` and
        // `threadName` are guarded by `lock`; `session` is touched only by
        // the buffer's own thread; `thread` is immutable.
        let lock = PlatformLock()
        /// Read and written only by the buffer's own thread.
        var session = -1
        var events: [RawEvent] = []
        var infos: [UInt: OperationInfo] = [:]
        var queueNames: [UInt: String] = [:]
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
    static var isActive: Bool { shared.active.load(ordering: .relaxed) }

    // MARK: Sessions

    func start() -> Bool {
        lock.withLock {
            guard !active.load(ordering: .relaxed) else { return false }
            session.add(1, ordering: .relaxed)
            buffers = []
            startTime = monotonicNanoseconds()
            active.store(true, ordering: .releasing)
            return true
        }
    }

    func stop() -> OperationTrace {
        let (collected, begin) = lock.withLock { () -> ([ThreadBuffer], UInt64) in
            active.store(false, ordering: .releasing)
            defer { buffers = [] }
            return (buffers, startTime)
        }
        var events: [RawEvent] = []
        var infos: [UInt: OperationInfo] = [:]
        var queueNames: [UInt: String] = [:]
        var threadNames: [Int32: String] = [:]
        for buffer in collected {
            buffer.lock.withLock {
                events += buffer.events
                infos.merge(buffer.infos) { first, _ in first }
                queueNames.merge(buffer.queueNames) { first, _ in first }
                if let name = buffer.threadName { threadNames[buffer.thread] = name }
                buffer.events = []
                buffer.infos = [:]
                buffer.queueNames = [:]
            }
        }
        return OperationTrace(
            raw: events,
            infos: infos,
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
                buffer.infos = [:]
                buffer.queueNames = [:]
                buffer.threadName = name
            }
            buffers.append(buffer)
        }
    }

    /// Records `kind` for `operation` (and `queue`). Call only when
    /// `isActive`; never calls user code (names are read by the caller).
    func record(_ kind: RawEvent.Kind, _ operation: Operation?, queue: OperationQueue?, values: (Int32, Int32, Int32) = (0, 0, 0)) {
        let buffer = buffer()
        let event = RawEvent(
            time: monotonicNanoseconds(),
            kind: kind,
            operation: operation.map { UInt(bitPattern: ObjectIdentifier($0).hashValue) } ?? 0,
            queue: queue.map { UInt(bitPattern: ObjectIdentifier($0).hashValue) } ?? 0,
            thread: buffer.thread,
            values: values
        )
        buffer.lock.withLock { buffer.events.append(event) }
    }

    /// Records what is known about `operation` (its name, type, priority,
    /// dependencies) and its queue's name. The caller holds no library lock:
    /// the names are read through their (possibly overridden) getters.
    func describe(_ operation: Operation, queue: OperationQueue?) {
        let info = OperationInfo(
            name: operation.name,
            typeName: String(describing: type(of: operation)),
            priority: operation.queuePriority,
            qualityOfService: operation.qualityOfService,
            dependencies: operation.dependencies.map { UInt(bitPattern: ObjectIdentifier($0).hashValue) }
        )
        let id = UInt(bitPattern: ObjectIdentifier(operation).hashValue)
        let queueName = queue.map { ($0.name ?? "queue", UInt(bitPattern: ObjectIdentifier($0).hashValue)) }
        let buffer = buffer()
        buffer.lock.withLock {
            buffer.infos[id] = info
            if let (name, queueID) = queueName { buffer.queueNames[queueID] = name }
        }
    }
}
