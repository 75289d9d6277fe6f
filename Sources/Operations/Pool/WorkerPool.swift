import Dispatch
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Work the pool can run: a queue's drain loop, or a closure.
protocol PoolJob: AnyObject, Sendable {
    /// Runs on a pool worker. Returns when the job is done or yields.
    func runJob(on worker: Worker)
}

/// The process-wide pool of worker threads that every `OperationQueue`
/// without an `underlyingQueue` shares.
///
/// ## Sizing
/// The pool aims to keep `targetConcurrency` (the processor count) workers
/// *running*. A worker that blocks does not count:
/// - inside the library's own waits (`waitUntilFinished`, waiting for a
///   queue), the wait tells the pool at once (`blocking(_:)`);
/// - elsewhere (sleep, I/O, locks), a monitor thread notices that a worker
///   made no progress for one tick (10 ms) while its thread is sleeping in
///   the kernel, and counts it as blocked.
/// Either way the pool hands queued jobs to another worker, creating one if
/// needed (up to `maximumWorkers`), so blocking operations cannot stall the
/// process, as with Dispatch. Workers beyond the target exit after being
/// idle for a while.
///
/// ## Order
/// Jobs wait in five lanes, one per quality of service; workers take from
/// the most important non-empty lane, first in first out within a lane.
/// A queue's drain job yields after a time slice when other jobs wait, so
/// queues share the workers.
///
/// ## Thread priority (Linux)
/// A worker sets its nice value to match the quality of service of the job
/// (and of each operation) it runs: see `QualityOfService.niceOffset`.
final class WorkerPool: @unchecked Sendable {
    // @unchecked Sendable: every `var` below is read and written only while
    // `lock` is held. `queuedJobCount` and `spareCapacity` are atomic
    // mirrors, written under the lock and read without it as hints.

    static let shared = WorkerPool()

    let targetConcurrency = max(1, Platform.processorCount)
    /// The ceiling on worker threads (`OperationQueue.maximumWorkerThreads`).
    var maximumWorkers: Int {
        get { lock.withLock { maximumWorkersValue } }
        set {
            var spawn: [Worker] = []
            var wake: [Worker] = []
            lock.withLock {
                maximumWorkersValue = max(targetConcurrency, newValue)
                ceilingReported = false
                dispatchLocked(wake: &wake, spawn: &spawn)
                updateMirrorsLocked()
            }
            for worker in wake { worker.wake.signal() }
            for worker in spawn { startThread(for: worker) }
        }
    }
    private var maximumWorkersValue: Int = {
        if let raw = getenv("OPERATIONS_MAX_WORKER_THREADS"), let value = Int(String(cString: raw)), value > 0 {
            return max(Platform.processorCount, value)
        }
        return max(Platform.processorCount, 512)
    }()
    /// Whether reaching the ceiling has been reported since it was last set.
    private var ceilingReported = false
    /// How long an idle worker beyond the target stays before exiting.
    let idleTimeoutNanoseconds: UInt64 = 2_000_000_000
    /// How long an out-of-work worker spins before parking.
    let spinNanoseconds: UInt64 = 20_000

    private let lock = PlatformLock()
    private var lanes = [RingBuffer<PoolJob>](repeating: RingBuffer(), count: 5)
    private var queuedJobs = 0
    private var parked: [Worker] = []
    private var spinning = 0
    /// Workers holding a job, running or blocked.
    private var active = 0
    /// Active workers known to be blocked.
    private var blocked = 0
    private var workers: [Worker] = []
    private var nextWorkerIndex = 0
    private var monitorStarted = false
    private var monitorIdle = false
    private let monitorSignal = WaitSignal()

    /// Mirror of `queuedJobs`, for lock-free checks by drain loops.
    let queuedJobCount = Atomic<Int>(0)
    /// Mirror of `targetConcurrency - (active - blocked)`.
    let spareCapacity = Atomic<Int>(0)

    /// The nice value of the process when the pool started, which workers
    /// return to.
    let baseNice: Int32 = Platform.currentNice() ?? 0

    private init() {
        spareCapacity.store(targetConcurrency, ordering: .relaxed)
    }

    // MARK: Submitting work

    /// Queues `job` at quality-of-service index `qos` (0 background ... 4
    /// user-interactive) and makes sure a worker will run it.
    func submit(_ job: PoolJob, qos: Int) {
        var spawn: [Worker] = []
        var wake: [Worker] = []
        lock.withLock {
            lanes[min(4, max(0, qos))].append(job)
            queuedJobs += 1
            dispatchLocked(wake: &wake, spawn: &spawn)
            updateMirrorsLocked()
        }
        for worker in wake { worker.wake.signal() }
        for worker in spawn { startThread(for: worker) }
    }

    /// Hands queued jobs to parked or new workers while capacity allows.
    /// Jobs that spinning workers can take are left for them.
    private func dispatchLocked(wake: inout [Worker], spawn: inout [Worker]) {
        while queuedJobs > spinning, active - blocked < targetConcurrency {
            if let worker = parked.popLast() {
                worker.handedJob = dequeueLocked()
                worker.isParked = false
                active += 1
                wake.append(worker)
            } else if workers.count < maximumWorkersValue {
                let worker = Worker(index: nextWorkerIndex, pool: self)
                nextWorkerIndex += 1
                worker.handedJob = dequeueLocked()
                workers.append(worker)
                active += 1
                spawn.append(worker)
            } else {
                reportCeilingLocked()
                break
            }
        }
        if queuedJobs > 0, active - blocked >= targetConcurrency {
            // Work is waiting for capacity: let the monitor look for blocked workers.
            if !monitorStarted {
                monitorStarted = true
                startMonitor()
            } else if monitorIdle {
                monitorIdle = false
                monitorSignal.signal()
            }
        }
    }

    /// Work waits because every worker up to the ceiling exists and the
    /// running ones are blocked: say so once, instead of stalling silently.
    private func reportCeilingLocked() {
        guard !ceilingReported else { return }
        ceilingReported = true
        let message = "Operations: the worker pool reached its ceiling of \(maximumWorkersValue) threads (OperationQueue.maximumWorkerThreads, OPERATIONS_MAX_WORKER_THREADS) while \(blocked) of them are blocked in operations; further work waits until a blocked worker returns.\n"
        // Written directly (no user code, no allocation-heavy formatting
        // beyond the message) while the pool's lock is held.
        _ = message.withCString { write(2, $0, strlen($0)) }
        // Observers are user code: told later, outside the pool's lock.
        DispatchQueue.global().async {
            OperationReporting.deliver(OperationReport(kind: .workerCeiling, message: message))
        }
    }

    private func dequeueLocked() -> (PoolJob, Int)? {
        for qos in stride(from: 4, through: 0, by: -1) {
            if let job = lanes[qos].popFirst() {
                queuedJobs -= 1
                return (job, qos)
            }
        }
        return nil
    }

    private func updateMirrorsLocked() {
        queuedJobCount.store(queuedJobs, ordering: .relaxed)
        spareCapacity.store(targetConcurrency - (active - blocked), ordering: .relaxed)
    }

    /// Whether a running job should give its worker back: more workers are
    /// running than the target, and other jobs are waiting.
    var shouldYield: Bool {
        queuedJobCount.load(ordering: .relaxed) > 0 && spareCapacity.load(ordering: .relaxed) < 0
    }

    /// Whether other jobs are waiting for a worker.
    var hasWaitingJobs: Bool {
        queuedJobCount.load(ordering: .relaxed) > 0
    }

    // MARK: Blocking

    /// Runs `body`, which blocks, telling the pool so that it can run queued
    /// jobs on another worker meanwhile. Off the pool, just runs `body`.
    func blocking<R>(_ body: () -> R) -> R {
        guard let worker = Worker.current else { return body() }
        var spawn: [Worker] = []
        var wake: [Worker] = []
        lock.withLock {
            worker.isInManagedBlock = true
            blocked += 1
            dispatchLocked(wake: &wake, spawn: &spawn)
            updateMirrorsLocked()
        }
        for worker in wake { worker.wake.signal() }
        for worker in spawn { startThread(for: worker) }
        let result = body()
        lock.withLock {
            worker.isInManagedBlock = false
            blocked -= 1
            updateMirrorsLocked()
        }
        return result
    }

    /// Called by a worker that was counted as blocked by the monitor and has
    /// since made progress.
    func workerMadeProgress(_ worker: Worker) {
        guard worker.detectedBlocked.load(ordering: .relaxed) else { return }
        lock.withLock {
            if worker.detectedBlocked.load(ordering: .relaxed) {
                worker.detectedBlocked.store(false, ordering: .relaxed)
                blocked -= 1
                updateMirrorsLocked()
            }
        }
    }

    // MARK: Worker side

    /// Called by a worker that finished a job (or is starting): returns its
    /// next job, parking until there is one, or nil when it should exit.
    func nextJob(for worker: Worker, finishedJob: Bool) -> (PoolJob, Int)? {
        lock.lock()
        if finishedJob {
            active -= 1
            if worker.detectedBlocked.load(ordering: .relaxed) {
                worker.detectedBlocked.store(false, ordering: .relaxed)
                blocked -= 1
            }
            if worker.retireAfterCurrentJob {
                workers.removeAll { $0 === worker }
                updateMirrorsLocked()
                lock.unlock()
                return nil
            }
        } else if let handed = worker.handedJob {
            // A new worker, created with its first job.
            worker.handedJob = nil
            lock.unlock()
            return handed
        }
        while true {
            if queuedJobs > 0, active - blocked < targetConcurrency, let job = dequeueLocked() {
                active += 1
                var spawn: [Worker] = []
                var wake: [Worker] = []
                dispatchLocked(wake: &wake, spawn: &spawn)
                updateMirrorsLocked()
                lock.unlock()
                for other in wake { other.wake.signal() }
                for other in spawn { startThread(for: other) }
                return job
            }
            updateMirrorsLocked()
            // Spin briefly: a producer often submits again within microseconds,
            // and a spinning worker saves it a wake-up.
            spinning += 1
            lock.unlock()
            let spinUntil = monotonicNanoseconds() &+ spinNanoseconds
            while monotonicNanoseconds() < spinUntil {
                if queuedJobCount.load(ordering: .relaxed) > 0, spareCapacity.load(ordering: .relaxed) > 0 { break }
                sched_yield()
            }
            lock.lock()
            spinning -= 1
            if queuedJobs > 0, active - blocked < targetConcurrency { continue }
            // Park until handed a job.
            worker.isParked = true
            parked.append(worker)
            let isExtra = workers.count > targetConcurrency
            lock.unlock()
            let woken = worker.wake.wait(
                deadline: isExtra ? Deadline(nanosecondsFromNow: idleTimeoutNanoseconds) : nil
            )
            lock.lock()
            if let handed = worker.handedJob {
                worker.handedJob = nil
                lock.unlock()
                return handed
            }
            if !woken, worker.isParked {
                parked.removeAll { $0 === worker }
                worker.isParked = false
                if workers.count > targetConcurrency {
                    workers.removeAll { $0 === worker }
                    lock.unlock()
                    return nil
                }
            }
        }
    }

    private func startThread(for worker: Worker) {
        let box = Unmanaged.passRetained(worker).toOpaque()
        var thread = pthread_t()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        let status = pthread_create(&thread, &attributes, { argument in
            let worker = Unmanaged<Worker>.fromOpaque(argument!).takeRetainedValue()
            worker.run()
            return nil
        }, box)
        pthread_attr_destroy(&attributes)
        precondition(status == 0, "Operations: could not create a worker thread (pthread_create returned \(status))")
    }

    // MARK: Monitor

    private func startMonitor() {
        let box = Unmanaged.passRetained(self).toOpaque()
        var thread = pthread_t()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        let status = pthread_create(&thread, &attributes, { argument in
            let pool = Unmanaged<WorkerPool>.fromOpaque(argument!).takeRetainedValue()
            Platform.setCurrentThreadName("ops.monitor")
            pool.monitorLoop()
            return nil
        }, box)
        pthread_attr_destroy(&attributes)
        precondition(status == 0, "Operations: could not create the pool monitor thread (\(status))")
    }

    /// Every 10 ms while jobs wait for capacity: counts as blocked any
    /// running worker that completed nothing since the last tick and whose
    /// thread sleeps in the kernel.
    private func monitorLoop() {
        let tick: UInt64 = 10_000_000
        while true {
            lock.lock()
            let starved = queuedJobs > 0 && active - blocked >= targetConcurrency
            if !starved {
                monitorIdle = true
                lock.unlock()
                monitorSignal.wait()
                continue
            }
            var candidates: [(Worker, UInt64)] = []
            for worker in workers where !worker.isParked && !worker.isInManagedBlock
                && !worker.detectedBlocked.load(ordering: .relaxed) {
                let progress = worker.progress.load(ordering: .relaxed)
                if progress == worker.progressAtLastTick { candidates.append((worker, progress)) }
                worker.progressAtLastTick = progress
            }
            lock.unlock()
            var sleeping: [(Worker, UInt64)] = []
            for (worker, progress) in candidates {
                let state = Platform.threadState(threadID: worker.threadID.load(ordering: .relaxed))
                if state == UInt8(ascii: "S") || state == UInt8(ascii: "D") { sleeping.append((worker, progress)) }
            }
            if !sleeping.isEmpty {
                var spawn: [Worker] = []
                var wake: [Worker] = []
                lock.withLock {
                    for (worker, progress) in sleeping
                    where worker.progress.load(ordering: .relaxed) == progress && !worker.isParked
                        && !worker.isInManagedBlock && !worker.detectedBlocked.load(ordering: .relaxed) {
                        worker.detectedBlocked.store(true, ordering: .relaxed)
                        blocked += 1
                    }
                    dispatchLocked(wake: &wake, spawn: &spawn)
                    updateMirrorsLocked()
                }
                for worker in wake { worker.wake.signal() }
                for worker in spawn { startThread(for: worker) }
            }
            _ = monitorSignal.wait(deadline: Deadline(nanosecondsFromNow: tick))
        }
    }

    // MARK: Introspection (tests, diagnostics)

    /// A snapshot of the pool's counters.
    struct Snapshot: Sendable, CustomStringConvertible {
        var workers: Int
        var active: Int
        var blocked: Int
        var parked: Int
        var queuedJobs: Int
        var description: String {
            "workers \(workers), active \(active), blocked \(blocked), parked \(parked), queued jobs \(queuedJobs)"
        }
    }

    var snapshot: Snapshot {
        lock.withLock {
            Snapshot(workers: workers.count, active: active, blocked: blocked, parked: parked.count, queuedJobs: queuedJobs)
        }
    }
}

/// One pool thread.
final class Worker: @unchecked Sendable {
    // @unchecked Sendable:
    // - `handedJob`, `isParked`, `isInManagedBlock`, `progressAtLastTick`
    //   are guarded by the pool's lock;
    // - `progress`, `threadID`, `detectedBlocked` are atomics;
    // - `currentNice` and `retireAfterCurrentJob` are touched only by the
    //   worker's own thread (`retireAfterCurrentJob` is then read by
    //   `nextJob` on that same thread).
    let index: Int
    /// The pool lives as long as the process.
    unowned(unsafe) let pool: WorkerPool
    let wake = WaitSignal()
    var handedJob: (PoolJob, Int)?
    var isParked = false
    var isInManagedBlock = false
    var progressAtLastTick: UInt64 = .max
    let progress = Atomic<UInt64>(0)
    let threadID = Atomic<Int32>(0)
    let detectedBlocked = Atomic<Bool>(false)
    var retireAfterCurrentJob = false
    private var currentNice: Int32 = 0

    init(index: Int, pool: WorkerPool) {
        self.index = index
        self.pool = pool
    }

    /// The pool worker the calling thread is, if any: the pool's own
    /// thread-local, used only to compensate for blocking.
    static var current: Worker? {
        guard let pointer = pthread_getspecific(key) else { return nil }
        // The worker object lives as long as its thread runs `run()`, which
        // clears this value before it returns.
        return Unmanaged<Worker>.fromOpaque(pointer).takeUnretainedValue()
    }

    fileprivate static func setCurrent(_ worker: Worker?) {
        pthread_setspecific(key, worker.map { Unmanaged.passUnretained($0).toOpaque() })
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let status = pthread_key_create(&key, nil)
        precondition(status == 0, "Operations: pthread_key_create failed with \(status)")
        return key
    }()

    /// The thread's body.
    func run() {
        Worker.setCurrent(self)
        threadID.store(Platform.currentThreadID(), ordering: .relaxed)
        Platform.setCurrentThreadName("ops.worker.\(index)")
        currentNice = Platform.currentNice() ?? pool.baseNice
        if currentNice != pool.baseNice, Platform.setCurrentNice(pool.baseNice) {
            currentNice = pool.baseNice
        }
        var finished = false
        while let (job, qos) = pool.nextJob(for: self, finishedJob: finished) {
            applyQualityOfService(index: qos)
            job.runJob(on: self)
            progress.add(1, ordering: .relaxed)
            finished = true
        }
        Worker.setCurrent(nil)
    }

    /// Sets the thread's nice value for quality-of-service index `qos`.
    /// Lowering priority without the privilege to raise it again marks the
    /// worker for retirement after its job.
    func applyQualityOfService(index qos: Int) {
        let target = pool.baseNice + QualityOfService(index: qos).niceOffset
        guard target != currentNice else { return }
        if target < currentNice, !Platform.canRaisePriority { return }
        if Platform.setCurrentNice(target) {
            if target > pool.baseNice, !Platform.canRaisePriority { retireAfterCurrentJob = true }
            currentNice = target
        }
    }

    /// Records that one operation completed on this worker.
    @inline(__always)
    func recordProgress() {
        progress.add(1, ordering: .relaxed)
        if detectedBlocked.load(ordering: .relaxed) { pool.workerMadeProgress(self) }
    }
}

/// A closure run as a pool job.
final class ClosureJob: PoolJob, @unchecked Sendable {
    // @unchecked Sendable: `body` is a `@Sendable` closure, set once.
    private let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    func runJob(on worker: Worker) { body() }
}
