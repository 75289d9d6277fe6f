// How many drain loops a queue runs, and when it asks for one more.
//
// Every loop takes the queue's lock once or twice per operation. When the
// operations are tiny, a second loop on another core does not double the
// throughput: it lowers it (by a fifth to a third in round 12's measurement
// of independent operations), because the lock and every line it guards
// (lane heads, counters, the operations being linked and unlinked) move
// between the cores on nearly every acquisition (BENCHMARKS.md, rounds 7
// and 12). So a queue on the shared pool runs one loop while that loop
// keeps up, and adds loops as work allows as soon as it does not:
//
// - the loop waits in one of the library's waits (`waitUntilFinished`,
//   waiting for a queue, for room): at once (`OperationQueue.drainLoopWillBlock`);
// - the operations are not tiny: the loop times one step in eight (an
//   operation's `start()` and the release of its dependents, or a batch of
//   cancelled operations), and four timings in a row of more than 400 ns
//   are enough;
// - an operation (or a finished operation's observers and completion
//   block) does not return: it sleeps, blocks on a lock or a semaphore, or
//   runs long. The watcher (`LoopWatcher`) notices when a loop is inside
//   the same operation at two of its looks, a tick apart: 50 µs at first,
//   up to 200 µs while the loops keep returning (plus the system's timer
//   slack), so within 0.1–0.5 ms of the operation's start.
//
// From then until the queue has no loop running, it adds loops as before:
// one whenever ready work exceeds the loops that are between operations.
// Queues served by the main thread or by an `underlyingQueue` never hold a
// loop back.

/// The drain loops of one queue: requested, running, inside an operation,
/// and whether one more is held back. A pure state machine, guarded by the
/// queue's lock as part of `QueueState`.
struct DrainLoops {
    /// Loops requested from the executor but not yet running (0 or 1).
    private(set) var pending = 0
    /// Loops running.
    private(set) var running = 0
    /// Running loops inside an operation's `start()` or a finished
    /// operation's observers.
    private(set) var busy = 0
    /// Operations (and finished operations' tails) the loops have begun,
    /// wrapping: the watcher's measure of progress.
    private(set) var progress: UInt64 = 0
    /// Whether loops are added whenever work allows, until no loop runs:
    /// the one loop did not keep up, or it waits.
    private(set) var addsFreely = false
    /// Whether the watcher holds this queue.
    private(set) var isWatched = false

    /// A loop that times `slowTimingsInARow` steps in a row that took longer
    /// than this outside the queue's lock no longer keeps the queue to
    /// itself. A step is one operation's `start()` and the release of its
    /// dependents, or a batch of up to 64 cancelled operations: the work a
    /// second loop could overlap, against the cost of sharing the lock.
    static let slowStepNanoseconds: UInt64 = 400
    /// Four: one timing in a hundred or so of even the tiniest operations
    /// is much longer than the rest (a page fault, an interrupt, a
    /// preemption), and they come alone.
    static let slowTimingsInARow = 4

    /// What a queue does after a change of its state.
    enum Request: Equatable {
        /// Nothing: no more loops are needed, or one is requested already,
        /// or one is held back and watched.
        case none
        /// Post a loop to the executor.
        case post
        /// Hold the loop back, and hand the queue to the watcher, which is
        /// not watching it yet.
        case watch
    }

    /// Whether one more loop is needed, given the work the loops could start
    /// now (`admissible`), and whether the queue may hold it back
    /// (`mayHoldBack`: it runs on the shared pool). At most one request is
    /// outstanding at a time; each loop that starts running asks again if
    /// work remains, so the number of loops follows what the executor
    /// actually runs (blocked operations included) without a fixed ceiling.
    mutating func request(admissible: Int, mayHoldBack: Bool) -> Request {
        guard pending == 0, admissible > running - busy else { return .none }
        if mayHoldBack, running > 0, !addsFreely {
            guard !isWatched else { return .none }
            isWatched = true
            return .watch
        }
        pending = 1
        return .post
    }

    /// A requested loop starts running.
    mutating func started() {
        pending = 0
        running += 1
    }

    /// A loop stops. The last one ends the free adding: the next burst of
    /// work starts again with one loop.
    mutating func stopped() {
        running -= 1
        if running == 0 { addsFreely = false }
    }

    /// A loop enters (true) or leaves (false) an operation's `start()` or a
    /// finished operation's tail.
    mutating func setBusy(_ isBusy: Bool) {
        if isBusy {
            busy += 1
            progress &+= 1
        } else {
            busy -= 1
        }
    }

    /// A requested loop could not be delivered (its executor refused it).
    mutating func requestDropped() {
        pending = 0
    }

    /// A loop is about to wait in one of the library's waits: loops are
    /// added freely from now on. Returns whether that changed anything.
    mutating func loopWillBlock() -> Bool {
        guard running > 0, !addsFreely else { return false }
        addsFreely = true
        return true
    }

    /// A loop timed steps that were not tiny (see the file's header):
    /// loops are added freely from now on.
    mutating func loopIsSlow() {
        guard running > 0 else { return }
        addsFreely = true
    }

    /// What the watcher compares between two looks: the operations and
    /// tails the loops began (`progress`), and the number, in that count, of
    /// the step a loop finished last (`returned`, stored by the loops
    /// without the lock, once every piece of user code of the step has
    /// returned: the operation, its dependents' `isReady` observers, the
    /// queue's observers).
    struct Mark: Equatable {
        var progress: UInt64
        var returned: UInt64
    }

    /// The watcher's look at the queue, a tick after the one that saw
    /// `seen` (nil: too soon after it to judge; the look only records),
    /// given the work the loops could start now (`admissible`) and
    /// the last return now. If a loop is held back while the operation (or
    /// tail) begun last has not returned, and nothing began since the last
    /// look, that operation has run for at least a tick: loops are added
    /// freely from now on; `stuck` says so without looking (there is no
    /// watcher thread). A loop that returned and waits for the queue's lock
    /// is not stuck. Returns whether the watcher keeps watching (a loop is
    /// still held back), and what it saw.
    mutating func watch(seen: Mark?, returned: UInt64, admissible: Int, stuck: Bool) -> (keepsWatching: Bool, mark: Mark) {
        let mark = Mark(progress: progress, returned: returned)
        guard running > 0, !addsFreely, pending == 0, admissible > running - busy else {
            isWatched = false
            return (false, mark)
        }
        if stuck || (busy > 0 && mark.progress == seen?.progress && mark.returned != mark.progress) {
            addsFreely = true
            isWatched = false
            return (false, mark)
        }
        return (true, mark)
    }

    /// Whether the counters are consistent.
    var isConsistent: Bool {
        busy >= 0 && running >= busy && (pending == 0 || pending == 1)
    }
}
