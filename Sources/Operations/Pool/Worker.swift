// A pool thread, and the job that runs a closure on one. The pool that
// schedules them is in `WorkerPool.swift`.

import Dispatch
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// One pool thread.
final class Worker: @unchecked Sendable {
    // @unchecked Sendable:
    // - `handedJob`, `isParked`, `holdsJob`, `isInManagedBlock`,
    //   `activityEpoch`, `progressAtLastTick` are guarded by the pool's lock;
    // - `sampleEpoch`, `sampleBusy`, `sampleTime`, `sampleProgress` are
    //   touched only by the pool's monitor thread;
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
    /// Whether the worker holds a job (counted in the pool's `active`).
    var holdsJob = false
    var isInManagedBlock = false
    /// Changes whenever the worker stops holding jobs or enters or leaves a
    /// managed block: a monitor measurement spanning a change is discarded.
    var activityEpoch: UInt64 = 0
    var progressAtLastTick: UInt64 = .max
    /// The monitor's last reading of the thread (sleep-share rule).
    var sampleEpoch: UInt64 = .max
    var sampleBusy: UInt64 = 0
    var sampleTime: UInt64 = 0
    var sampleProgress: UInt64 = 0
    let progress = Atomic<UInt64>(0)
    let threadID = Atomic<Int32>(0)
    let detectedBlocked = Atomic<Bool>(false)
    var retireAfterCurrentJob = false
    private var currentNice: Int32 = 0

    init(index: Int, pool: WorkerPool) {
        self.index = index
        self.pool = pool
    }

    /// Called by the monitor thread only.
    func recordSample(epoch: UInt64, busy: UInt64, time: UInt64, progress: UInt64) {
        sampleEpoch = epoch
        sampleBusy = busy
        sampleTime = time
        sampleProgress = progress
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
