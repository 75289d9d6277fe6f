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
/// - elsewhere (sleep, I/O, locks), a monitor thread, which ticks every
///   10 ms while jobs wait for capacity, notices it and counts the worker as
///   blocked.
/// Either way the pool hands queued jobs to another worker, creating one if
/// needed (up to `maximumWorkers`), so blocking operations cannot stall the
/// process, as with Dispatch. Workers beyond the target exit after being
/// idle for a while.
///
/// How the monitor decides that a worker is blocked:
/// - Linux (sleep-share rule): from the kernel's scheduler statistics
///   (`/proc/self/task/<tid>/schedstat`: nanoseconds on a processor plus
///   nanoseconds runnable, waiting for one), the share of the last tick the
///   worker's thread was busy while it held jobs. Less than 1/2 busy means
///   mostly asleep: counted as blocked at once if the worker also completed
///   nothing during the tick (it may wait for the jobs that wait), and
///   otherwise (many short blocking operations, as 2 ms sleeps in a row)
///   one such worker per tick, beyond twice the target only while the
///   pool's busy shares add up to less than half a processor (a contended
///   lock keeps one processor busy, and more threads would not help).
///   A counted worker keeps the count across jobs it takes back to back (a
///   drain loop hands its worker back every time slice), and stops counting
///   once busy for more than 3/4 of a tick, or when it runs out of jobs.
///   Short lock waits and waiting for a processor keep a worker busy, so CPU
///   work does not grow the pool. The monitor keeps ticking while any
///   worker is so counted, to notice when it stops blocking.
/// - Elsewhere, or when the kernel keeps no such statistics (progress
///   rule): a worker that completed nothing for a whole tick and whose
///   thread sleeps in the kernel when looked at (`/proc/.../stat` state `S`
///   or `D`, Linux only) is counted as blocked until it completes something.
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
            changeAndDispatch {
                maximumWorkersValue = max(targetConcurrency, newValue)
                ceilingReported = false
            }
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
    /// Active workers known to be blocked: in a managed block, or detected
    /// by the monitor.
    private var blocked = 0
    /// Active workers detected as blocked by the monitor (part of `blocked`).
    private var detected = 0
    /// The most workers that existed at once.
    private var peakWorkers = 0
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

    /// Whether the monitor judges workers by the share of each tick their
    /// thread slept (Linux, from the kernel's scheduler statistics), rather
    /// than by whether they completed anything during the tick.
    let samplesSleepShare = Platform.providesThreadBusyTime

    private init() {
        spareCapacity.store(targetConcurrency, ordering: .relaxed)
    }

    // MARK: Submitting work

    /// Queues `job` at quality-of-service index `qos` (0 background ... 4
    /// user-interactive) and makes sure a worker will run it.
    func submit(_ job: PoolJob, qos: Int) {
        changeAndDispatch {
            lanes[min(4, max(0, qos))].append(job)
            queuedJobs += 1
        }
    }

    /// Runs `change` under the lock, then hands queued jobs to parked or new
    /// workers as capacity allows; those workers are woken or started after
    /// the lock is released.
    private func changeAndDispatch(_ change: () -> Void) {
        var spawn: [Worker] = []
        var wake: [Worker] = []
        lock.withLock {
            change()
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
                // Only a worker that is parked now may be handed a job (the
                // list holds each parked worker once; see `nextJob`).
                guard worker.isParked, worker.handedJob == nil else { continue }
                worker.handedJob = dequeueLocked()
                worker.isParked = false
                worker.holdsJob = true
                active += 1
                wake.append(worker)
            } else if workers.count < maximumWorkersValue {
                let worker = Worker(index: nextWorkerIndex, pool: self)
                nextWorkerIndex += 1
                worker.handedJob = dequeueLocked()
                worker.holdsJob = true
                workers.append(worker)
                peakWorkers = max(peakWorkers, workers.count)
                active += 1
                spawn.append(worker)
            } else {
                reportCeilingLocked()
                break
            }
        }
        if queuedJobs > 0, active - blocked >= targetConcurrency {
            // Work is waiting for capacity: let the monitor look for blocked workers.
            wakeMonitorLocked()
        }
    }

    private func wakeMonitorLocked() {
        if !monitorStarted {
            monitorStarted = true
            startMonitor()
        } else if monitorIdle {
            monitorIdle = false
            monitorSignal.signal()
        }
    }

    /// Counts `worker`, which holds a job, as blocked (detected, not a
    /// managed block).
    private func markBlockedLocked(_ worker: Worker) {
        worker.detectedBlocked.store(true, ordering: .relaxed)
        blocked += 1
        detected += 1
    }

    private func unmarkBlockedLocked(_ worker: Worker) {
        worker.detectedBlocked.store(false, ordering: .relaxed)
        blocked -= 1
        detected -= 1
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
        changeAndDispatch {
            // Counted once: as in a managed block, no longer as detected.
            if worker.detectedBlocked.load(ordering: .relaxed) { unmarkBlockedLocked(worker) }
            worker.isInManagedBlock = true
            worker.activityEpoch &+= 1
            blocked += 1
        }
        let result = body()
        lock.withLock {
            worker.isInManagedBlock = false
            worker.activityEpoch &+= 1
            blocked -= 1
            updateMirrorsLocked()
        }
        return result
    }

    /// Called by a worker that was counted as blocked by the monitor and has
    /// since made progress. Under the progress rule, that ends the count;
    /// under the sleep-share rule (Linux), completing an operation says
    /// nothing about whether the next one sleeps too, and the monitor ends
    /// the count when the worker stops sleeping.
    func workerMadeProgress(_ worker: Worker) {
        guard !samplesSleepShare, worker.detectedBlocked.load(ordering: .relaxed) else { return }
        lock.withLock {
            if worker.detectedBlocked.load(ordering: .relaxed) {
                unmarkBlockedLocked(worker)
                updateMirrorsLocked()
            }
        }
    }

    // MARK: Worker side

    /// Called by a worker that finished a job (or is starting): returns its
    /// next job, parking until there is one, or nil when it should exit.
    func nextJob(for worker: Worker, finishedJob: Bool) -> (PoolJob, Int)? {
        lock.lock()
        // Under the sleep-share rule, a worker detected as blocked that goes
        // straight on to another job stays counted as blocked (the monitor
        // re-checks it every tick): a queue's drain loop gives its worker
        // back every time slice, and clearing the count each time would
        // undo the growth that the blocking earned.
        var keepsBlockedCount = false
        if finishedJob {
            active -= 1
            worker.holdsJob = false
            if worker.detectedBlocked.load(ordering: .relaxed) {
                unmarkBlockedLocked(worker)
                keepsBlockedCount = samplesSleepShare
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
            if queuedJobs > 0, keepsBlockedCount || active - blocked < targetConcurrency, let job = dequeueLocked() {
                active += 1
                worker.holdsJob = true
                if keepsBlockedCount { markBlockedLocked(worker) }
                var spawn: [Worker] = []
                var wake: [Worker] = []
                dispatchLocked(wake: &wake, spawn: &spawn)
                updateMirrorsLocked()
                lock.unlock()
                for other in wake { other.wake.signal() }
                for other in spawn { startThread(for: other) }
                return job
            }
            keepsBlockedCount = false
            // Out of work: what the monitor measured of this worker no longer applies.
            worker.activityEpoch &+= 1
            updateMirrorsLocked()
            // Spin briefly: a producer often submits again within microseconds,
            // and a spinning worker saves it a wake-up. Without yielding:
            // a thread that calls `sched_yield()` gives up the rest of its
            // time slice, and under EEVDF (Linux 6.6 and later) it is then
            // the first thread preempted when it wakes another. On a loaded
            // machine the worker that took the next job stopped for a whole
            // tick (4 ms) as soon as its operation signalled a waiting
            // thread, before it could finish the operation: the waiter found
            // the operation still in the queue (ports 38, Queuer's
            // `operationCount` checks).
            spinning += 1
            lock.unlock()
            let spinUntil = monotonicNanoseconds() &+ spinNanoseconds
            while monotonicNanoseconds() < spinUntil {
                if queuedJobCount.load(ordering: .relaxed) > 0, spareCapacity.load(ordering: .relaxed) > 0 { break }
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
            // No job: the wait timed out, or the wake-up is a stale one (a
            // job handed just as an earlier wait timed out was taken then;
            // its signal stayed pending and ended this wait at once). Either
            // way the worker leaves the parked list before it parks again:
            // listed twice, it would be handed a job while busy, and that
            // job would wait for whatever it runs (a lost drain loop, or a
            // deadlock when that waits for the job; Queuer's port found it).
            if worker.isParked {
                parked.removeAll { $0 === worker }
                worker.isParked = false
            }
            if !woken, workers.count > targetConcurrency {
                workers.removeAll { $0 === worker }
                lock.unlock()
                return nil
            }
        }
    }

    private func startThread(for worker: Worker) {
        let status = Platform.startDetachedThread(named: nil) { worker.run() }
        precondition(status == 0, "Operations: could not create a worker thread (pthread_create returned \(status))")
    }

    // MARK: Monitor

    private func startMonitor() {
        let status = Platform.startDetachedThread(named: "ops.monitor") { self.monitorLoop() }
        precondition(status == 0, "Operations: could not create the pool monitor thread (\(status))")
    }

    /// Every 10 ms while jobs wait for capacity (and, under the sleep-share
    /// rule, while any worker is counted as detected-blocked): looks for
    /// workers that hold a job but are blocked, and counts them as blocked
    /// so that the waiting jobs get other workers.
    private func monitorLoop() {
        let tick: UInt64 = 10_000_000
        while true {
            lock.lock()
            let starved = queuedJobs > 0 && active - blocked >= targetConcurrency
            if !starved, !(samplesSleepShare && detected > 0) {
                monitorIdle = true
                lock.unlock()
                monitorSignal.wait()
                continue
            }
            if samplesSleepShare {
                sleepShareTickLocked(tick: tick)
            } else {
                progressTickLocked()
            }
            _ = monitorSignal.wait(deadline: Deadline(nanosecondsFromNow: tick))
        }
    }

    /// The monitor's tick where the kernel reports no sleep share (the
    /// fallback rule): counts as blocked any running worker that completed
    /// nothing since the last tick and whose thread sleeps in the kernel at
    /// the moment of looking. Called with the lock held; releases it.
    private func progressTickLocked() {
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
        guard !sleeping.isEmpty else { return }
        changeAndDispatch {
            for (worker, progress) in sleeping
            where worker.progress.load(ordering: .relaxed) == progress && !worker.isParked
                && !worker.isInManagedBlock && !worker.detectedBlocked.load(ordering: .relaxed) {
                markBlockedLocked(worker)
            }
        }
    }

    /// A worker as the monitor saw it under the lock.
    private struct ShareSample {
        let worker: Worker
        let epoch: UInt64
        let progress: UInt64
        let marked: Bool
    }

    /// A worker counts as blocked when its thread slept more than this share
    /// of a tick...
    private static let blockedBelowShare = 0.5
    /// ...and stops counting as blocked when it was busy (on a processor or
    /// runnable) for more than this share.
    private static let runningAboveShare = 0.75

    /// The monitor's tick under the sleep-share rule (Linux). For every
    /// worker that held a job since the last tick (same `activityEpoch`, not
    /// in a managed block), the kernel's count of the nanoseconds the thread
    /// was on a processor or waiting for one gives its busy share of the
    /// tick; the rest it slept (sleep, I/O, a lock, a semaphore).
    /// - A worker that slept more than half the tick and completed nothing
    ///   is counted as blocked at once, as many as there are (they may be
    ///   waiting for the very jobs that wait for a worker).
    /// - A worker that slept more than half the tick but completed
    ///   operations (many short blocking calls) is counted too, but one per
    ///   tick, and beyond twice the target only while all the pool's jobs
    ///   together keep less than half a processor busy: the pool then grows
    ///   step by step while more threads still find the processors idle,
    ///   and does not grow without end when what the workers wait for is
    ///   each other (a contended lock keeps one processor busy).
    /// - A worker counted so that was busy more than 3/4 of the tick is
    ///   counted as running again.
    /// Waiting a few microseconds on a lock, or for a processor (the wait is
    /// part of the busy time), does not count as blocked. Called with the
    /// lock held; releases it.
    private func sleepShareTickLocked(tick: UInt64) {
        var samples: [ShareSample] = []
        for worker in workers where worker.holdsJob && !worker.isInManagedBlock {
            samples.append(ShareSample(
                worker: worker, epoch: worker.activityEpoch,
                progress: worker.progress.load(ordering: .relaxed),
                marked: worker.detectedBlocked.load(ordering: .relaxed)
            ))
        }
        lock.unlock()

        // The files are read without the lock. Each worker's last reading
        // (`sample*`) belongs to this thread alone.
        var stalled: [ShareSample] = []
        var sleepy: (sample: ShareSample, share: Double)?
        var running: [ShareSample] = []
        var load = 0.0
        for sample in samples {
            let worker = sample.worker
            guard let busy = Platform.threadBusyNanoseconds(threadID: worker.threadID.load(ordering: .relaxed)) else {
                worker.sampleEpoch = .max
                continue
            }
            let now = monotonicNanoseconds()
            guard worker.sampleEpoch == sample.epoch, busy >= worker.sampleBusy, now > worker.sampleTime else {
                worker.recordSample(epoch: sample.epoch, busy: busy, time: now, progress: sample.progress)
                continue
            }
            let wall = now &- worker.sampleTime
            // A tick cut short (the monitor was woken early) measures too
            // little: keep the older reading.
            guard wall >= tick / 2 else { continue }
            let share = min(1, Double(busy &- worker.sampleBusy) / Double(wall))
            let progressed = sample.progress != worker.sampleProgress
            worker.recordSample(epoch: sample.epoch, busy: busy, time: now, progress: sample.progress)
            load += share
            if sample.marked {
                if share > Self.runningAboveShare { running.append(sample) }
            } else if share < Self.blockedBelowShare {
                if !progressed {
                    stalled.append(sample)
                } else if sleepy == nil || share < sleepy!.share {
                    sleepy = (sample, share)
                }
            }
        }
        guard !stalled.isEmpty || sleepy != nil || !running.isEmpty else { return }

        changeAndDispatch {
            // Still as sampled: holding the job it held, outside managed blocks.
            func unchanged(_ sample: ShareSample) -> Bool {
                let worker = sample.worker
                return worker.holdsJob && !worker.isInManagedBlock && worker.activityEpoch == sample.epoch
                    && worker.detectedBlocked.load(ordering: .relaxed) == sample.marked
            }
            for sample in running where unchanged(sample) { unmarkBlockedLocked(sample.worker) }
            // Counting workers as blocked only helps jobs that wait.
            if queuedJobs > 0, active - blocked >= targetConcurrency {
                for sample in stalled where unchanged(sample) { markBlockedLocked(sample.worker) }
                if let sample = sleepy?.sample, unchanged(sample),
                   workers.count < 2 * targetConcurrency || load < 0.5 {
                    markBlockedLocked(sample.worker)
                }
            }
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
        /// The most workers that existed at once since the process started.
        var peakWorkers: Int
        var description: String {
            "workers \(workers) (peak \(peakWorkers)), active \(active), blocked \(blocked), parked \(parked), queued jobs \(queuedJobs)"
        }
    }

    /// For tests: the parked workers, in the order they parked.
    var parkedWorkers: [Worker] { lock.withLock { parked } }

    /// For tests: whether `worker` is parked.
    func isParked(_ worker: Worker) -> Bool { lock.withLock { worker.isParked } }

    var snapshot: Snapshot {
        lock.withLock {
            Snapshot(
                workers: workers.count, active: active, blocked: blocked, parked: parked.count,
                queuedJobs: queuedJobs, peakWorkers: peakWorkers
            )
        }
    }
}
