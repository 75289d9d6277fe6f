#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The thread that notices when a queue's one drain loop stops keeping up
/// (see `DrainLoops`). While queues hold a loop back, it looks at each of
/// them every tick: 50 µs after a queue arrives or after a look that added
/// loops, then twice as long after each round in which every watched loop
/// kept up, up to 200 µs, and at least eight times as long as its last
/// pass over the watched queues took. A look takes the queue's lock once,
/// and runs no user code. With nothing to watch it sleeps, and after 2 s of that its
/// thread ends; the next queue that holds a loop back starts another.
final class LoopWatcher: @unchecked Sendable {
    // @unchecked Sendable: `arrivals`, `isSleeping`, `hasThread` and
    // `isThreadless` are guarded by `lock`; `watched` belongs to the
    // watcher's thread alone.

    static let shared = LoopWatcher()

    /// The first tick, and the tick after a look that added loops.
    static let shortestTick: UInt64 = 50_000
    /// The longest tick, reached while every watched loop keeps up.
    static let longestTick: UInt64 = 200_000
    /// How long the thread waits for a queue to watch before it ends.
    let idleExitNanoseconds: UInt64

    private struct Entry {
        /// Strong, and given back when the watcher lets the queue go, on the
        /// watcher's thread and outside its lock (the queue's `deinit` may
        /// run then). Not weak: a weak reference gives the queue a side
        /// table, which sends every later retain and release of it down the
        /// runtime's slow path (about 850 instructions per operation with
        /// `async` bodies, callgrind).
        let queue: OperationQueue
        /// What the last look saw.
        var mark: DrainLoops.Mark
        /// When that look was.
        var time: UInt64
    }

    private let lock = PlatformLock()
    private var arrivals: [Entry] = []
    private var isSleeping = false
    private var hasThread = false
    /// The thread could not be started: nothing is watched, and every
    /// queue that holds a loop back is told at once to add loops freely.
    private var isThreadless = false
    private let signal = WaitSignal()
    private var watched: [Entry] = []

    /// A watcher whose thread ends after `idleExitNanoseconds` with nothing
    /// to watch (2 s for the shared one; tests use their own).
    init(idleExitNanoseconds: UInt64 = 2_000_000_000) {
        self.idleExitNanoseconds = idleExitNanoseconds
    }

    /// For tests: whether the watcher's thread runs.
    var hasRunningThread: Bool { lock.withLock { hasThread } }

    /// Starts watching `queue`, which holds a loop back; `mark` is what it
    /// was when it did.
    func watch(_ queue: OperationQueue, mark: DrainLoops.Mark) {
        let entry = Entry(queue: queue, mark: mark, time: monotonicNanoseconds())
        var startsThread = false
        var wakes = false
        let threadless = lock.withLock { () -> Bool in
            if isThreadless { return true }
            arrivals.append(entry)
            if !hasThread {
                hasThread = true
                startsThread = true
            } else if isSleeping {
                isSleeping = false
                wakes = true
            }
            return false
        }
        if threadless {
            // As if the loop had been seen stuck.
            _ = queue.watchDrainLoops(seen: mark, stuck: true)
            return
        }
        if startsThread { startThread() }
        if wakes { signal.signal() }
    }

    /// Asks for a look at every watched queue now rather than at the end
    /// of the tick: a drain loop of a watched queue stopped, and the queue,
    /// with nothing left to hold back, can be let go (and released) at once.
    func nudge() {
        signal.signal()
    }

    private func startThread() {
        let status = Platform.startDetachedThread(named: "ops.loops") { self.run() }
        guard status != 0 else { return }
        let message = "Operations: could not start the drain-loop watcher thread (pthread_create returned \(status)); queues run as many drain loops as work allows.\n"
        _ = message.withCString { write(2, $0, strlen($0)) }
        let stranded = lock.withLock { () -> [Entry] in
            isThreadless = true
            defer { arrivals.removeAll() }
            return arrivals
        }
        for entry in stranded {
            _ = entry.queue.watchDrainLoops(seen: entry.mark, stuck: true)
        }
    }

    private func run() {
        var tick = Self.shortestTick
        while true {
            lock.lock()
            if !arrivals.isEmpty {
                watched += arrivals
                arrivals.removeAll()
                tick = Self.shortestTick
            }
            if watched.isEmpty {
                isSleeping = true
                lock.unlock()
                if signal.wait(deadline: Deadline(nanosecondsFromNow: idleExitNanoseconds)) { continue }
                lock.lock()
                // Nobody handed it a queue meanwhile (a producer that did
                // cleared `isSleeping` and signals): the thread ends, and
                // the next hand-over starts another.
                if isSleeping, arrivals.isEmpty {
                    isSleeping = false
                    hasThread = false
                    lock.unlock()
                    return
                }
                lock.unlock()
                continue
            }
            lock.unlock()
            _ = signal.wait(deadline: Deadline(nanosecondsFromNow: tick))
            let passStart = monotonicNanoseconds()
            var everyLoopKeptUp = true
            var index = 0
            while index < watched.count {
                let now = monotonicNanoseconds()
                // A look soon after the last one (a nudge cut the tick
                // short) only records: an operation that began in between
                // has not run long enough to be judged.
                let judges = now &- watched[index].time >= Self.shortestTick / 2
                let verdict = watched[index].queue.watchDrainLoops(seen: judges ? watched[index].mark : nil)
                if verdict.keepsWatching {
                    watched[index].mark = verdict.mark
                    watched[index].time = now
                    index += 1
                } else {
                    everyLoopKeptUp = false
                    watched.swapAt(index, watched.count - 1)
                    // The queue is released here, outside the lock.
                    watched.removeLast()
                }
            }
            tick = Self.nextTick(after: tick, everyLoopKeptUp: everyLoopKeptUp, passNanoseconds: monotonicNanoseconds() &- passStart)
        }
    }

    /// The tick after a pass: twice `tick` (up to `longestTick`) when every
    /// watched loop kept up, else `shortestTick`; and at least eight times
    /// the pass. With many queues watched at once a pass takes long, and
    /// the tick grows with it, so that the watcher keeps to about an eighth
    /// of a processor (and its looks, to the queues' locks, stay rare).
    /// Saturates rather than overflows.
    static func nextTick(after tick: UInt64, everyLoopKeptUp: Bool, passNanoseconds: UInt64) -> UInt64 {
        let base = everyLoopKeptUp ? (tick >= longestTick / 2 ? longestTick : tick * 2) : shortestTick
        let (bound, overflow) = passNanoseconds.multipliedReportingOverflow(by: 8)
        return max(base, overflow ? UInt64.max : bound)
    }
}
