import Dispatch
import Synchronization

/// The waits in progress, blocking or `async`, and the check that turns a
/// wait that can never end into a report instead of a silent hang.
///
/// A wait is registered with what the waiting thread (or task) is running
/// — operations whose `start()`, body, observers or completion block it is
/// inside — and what it waits for. Before it blocks, the registry asks:
/// can the target make progress without the waiter? Following what each
/// piece of work needs:
///
/// - a pending operation needs its unfinished dependencies, the barrier it
///   waits behind, and (unless it is cancelled and takes the cheap path) a
///   free slot of its queue; a suspended queue, or a ready operation in no
///   queue, may be helped from outside, so the check gives up there;
/// - a running operation needs the thread running it, and if that thread is
///   itself in a registered wait, that wait's target;
/// - a queue needs each of its operations.
///
/// If every way forward leads back to the waiter — it runs the target, or
/// holds the slot the target needs, or the target's dependencies wait for
/// it, through any number of other threads' waits — the wait can never end
/// as things stand. When nothing another thread does can change that (the
/// waiter runs the synchronous body it waits for, or one of the queue it
/// waits for), the wait is reported as `OperationMisuse.Code.waitDeadlock`
/// at once and not performed. Otherwise another thread may still end it (by
/// widening a queue, removing a dependency, cancelling an operation), as it
/// would in Foundation: the wait is registered and proceeds, checks again
/// while it waits (`recheck`), and is reported only once the verdict has
/// held for `confirmationDelay`. The same re-checks catch a cycle closed
/// after the wait began (work queued behind it, a dependency added).
/// Registration happens under the registry's lock; each check reads a
/// snapshot of the registered waits and runs with no registry lock held, so
/// that a check of a large graph holds up no other wait.
///
/// The check runs only when the waiter is running operations; a wait from
/// plain code (a test, `main`) holds nothing anyone could need.
///
/// Lock order: nothing is locked under this registry's lock (it guards the
/// records only), and nothing that holds a queue or operation lock takes it.
final class WaitRegistry: @unchecked Sendable {
    // @unchecked Sendable: `records` is read and written only while `lock` is held.

    static let shared = WaitRegistry()

    /// What a wait waits for.
    enum Target {
        /// An operation's retirement (`waitUntilFinished`, `finished()`).
        case operation(Operation)
        /// A queue becoming empty (`waitUntilAllOperationsAreFinished`, `drained()`).
        case queue(OperationQueue)
        /// Room under a queue's pending limit (a blocked `addOperation`).
        case room(OperationQueue)
    }

    /// One wait in progress.
    final class Record: @unchecked Sendable {
        // @unchecked Sendable: immutable after init; the operations it holds
        // are alive while the wait lasts (they are running on the waiter).
        let running: [Operation]
        let target: Target
        /// The operation whose base `start()` the waiting thread is
        /// announcing to its `.prior` `isExecuting` observers: its body runs
        /// on this thread next, and nothing else can start or finish it
        /// (`ThreadContext.announcedBaseStart`).
        let startingBody: ObjectIdentifier?

        /// A wait made on the calling thread (which it reads for
        /// `startingBody`).
        init(running: [Operation], target: Target) {
            self.running = running
            self.target = target
            startingBody = ThreadContext.withCurrent { context in
                context.announcedBaseStart.map { ObjectIdentifier($0.takeUnretainedValue()) }
            }
        }
    }

    private let lock = PlatformLock()
    private var records: [ObjectIdentifier: Record] = [:]

    /// Registers `record`. Returns nil when the wait may proceed (call `end`
    /// when it is over), or the verdict when it can certainly never end
    /// (nothing is registered then).
    ///
    /// Only a certain verdict refuses the wait at once: the waiter waits for
    /// the synchronous body it is itself running, or for the queue of that
    /// operation. Any other verdict depends on what other threads may still
    /// change (a queue's width, a dependency, a cancellation, a suspension),
    /// so the wait is registered and proceeds; a blocking wait re-checks it
    /// while it waits (`recheck`) and gives up only once the verdict has
    /// held for `confirmationDelay`.
    func begin(_ record: Record) -> WaitVerdict? {
        let identifier = ObjectIdentifier(record)
        guard !record.running.isEmpty else {
            // A wait from plain code holds nothing that anyone could need:
            // no check, and no other analysis reads it.
            lock.withLock { records[identifier] = record }
            return nil
        }
        // Registered before the check, which runs outside the lock (see
        // `analysis(of:_:)`). A certain verdict depends only on what this
        // waiter runs, so registering first changes no answer; another
        // wait's check that sees this record in between merely suspects a
        // wait that is about to be refused, and clears it at its next check.
        let others = lock.withLock {
            let others = Array(records.values)
            records[identifier] = record
            return others
        }
        var analysis = Self.analysis(of: record, others)
        guard let verdict = analysis.neverEnds(record.target), verdict.isCertain else { return nil }
        end(record)
        return verdict
    }

    /// The check of `record` against the other waits registered at one
    /// moment, made with no lock of the registry held: on a large graph it
    /// takes time linear in what it reads (about a tenth of a second at
    /// 100,000 dependencies), and every other wait in the process would wait
    /// for it (probe 26). The analysis holds operations and queues; its
    /// caller releases it outside every library lock (a `deinit` it
    /// triggers may be user code).
    private static func analysis(of record: Record, _ others: [Record]) -> WaitAnalysis {
        if hasAnalysisHook.load(ordering: .acquiring) { analysisWillRun.withLock { $0 }?() }
        return WaitAnalysis(origin: record, records: others)
    }

    /// Called before each analysis, with no lock held (tests: an analysis
    /// made to last, to show that other waits do not wait for it). Set it
    /// with `setAnalysisHook(_:)`. A `LockedValue` (a pthread mutex), which
    /// ThreadSanitizer understands, read only once a hook is installed: with
    /// `Synchronization.Mutex`, a client built with `-Xswiftc
    /// -sanitize=thread` saw its accesses reported as races (probe 28).
    private static let analysisWillRun = LockedValue<(@Sendable () -> Void)?>(nil)
    private static let hasAnalysisHook = Atomic<Bool>(false)

    /// Installs the test hook called before each analysis.
    static func setAnalysisHook(_ hook: @escaping @Sendable () -> Void) {
        let replaced = analysisWillRun.withLock { slot in
            defer { slot = hook }
            return slot
        }
        hasAnalysisHook.store(true, ordering: .releasing)
        withExtendedLifetime(replaced) {}
    }

    /// How long a wait's verdict "can never end" must keep holding, re-read
    /// along the way, before the wait gives up and reports it (unless it is
    /// certain from the start, see `begin`). Long enough for another thread
    /// to widen a queue, remove a dependency or cancel an operation.
    static let confirmationDelay: UInt64 = 1_000_000_000

    /// The least time before the next check of a wait whose last check
    /// began at `start` (monotonic nanoseconds) and has just returned:
    /// seven times what it took, so that the checks of a wait on a large
    /// graph (each one linear in the operations it reads) take at most an
    /// eighth of a core. At most a minute.
    static func spacing(afterCheckThatBegan start: UInt64) -> UInt64 {
        min(monotonicNanoseconds() &- start, 8_000_000_000) * 7
    }

    /// Checks again whether the registered wait `record` can ever end (the
    /// graph may have changed since it began). Returns nil if it may end;
    /// otherwise the verdict and whether the wait gave up.
    ///
    /// With `confirm`, the record is removed along with the verdict, under
    /// the lock, provided every other wait the verdict relies on (one whose
    /// operation the check found stuck because its thread waits) is still
    /// registered (`WaitAnalysis.consultedWaits`): of several waits on one
    /// cycle, only the first to confirm gives up, and the others then see
    /// its thread as free. Other waits that began or ended meanwhile do not
    /// matter: a wait that begins can only block more work. A check
    /// overtaken that way is made again, three times at
    /// most; after that the verdict is returned unconfirmed (the wait stays
    /// suspect), and a later check confirms it.
    func recheck(_ record: Record, confirm: Bool) -> (verdict: WaitVerdict, gaveUp: Bool)? {
        let identifier = ObjectIdentifier(record)
        var unconfirmed: WaitVerdict?
        for _ in 0..<3 {
            // The snapshot holds the records it lists, so the identifiers of
            // those the check relies on cannot be reused meanwhile.
            guard let others = lock.withLock({ records[identifier] == nil ? nil : records.values.filter { $0 !== record } }) else {
                return nil
            }
            var analysis = Self.analysis(of: record, others)
            guard let verdict = analysis.neverEnds(record.target) else { return nil }
            guard confirm else { return (verdict, false) }
            let consulted = analysis.consultedWaits
            let outcome = lock.withLock { () -> Bool? in
                guard records[identifier] != nil else { return nil }
                guard consulted.allSatisfy({ records[$0] != nil }) else { return false }
                records.removeValue(forKey: identifier)
                return true
            }
            switch outcome {
            case nil: return nil
            case true?: return (verdict, true)
            case false?: unconfirmed = verdict
            }
        }
        return unconfirmed.map { ($0, false) }
    }

    /// Blocks on `signal` until it is signalled or `deadline` passes. A wait
    /// registered with `begin` (`record`) by a thread that runs operations is
    /// checked again while it blocks (see `HangReport.wait(on:checking:describe:)`).
    static func block(
        on signal: WaitSignal,
        deadline: Deadline?,
        record: Record?,
        describe: () -> HangDescription
    ) -> HangReport.Outcome {
        if let record, deadline == nil, !record.running.isEmpty {
            return HangReport.wait(on: signal, checking: record, describe: describe)
        }
        return HangReport.wait(on: signal, deadline: deadline, describe: describe) ? .signalled : .timedOut
    }

    /// For an `async` wait registered with `begin`: re-checks it as a
    /// blocking wait does while it blocks (see
    /// `HangReport.wait(on:checking:describe:)`), from a timer, and calls
    /// `confirmed` once if it can never end (its record is then removed;
    /// the watch's `verdict` says why). Nil when the waiter runs no
    /// operation (such a wait is never checked). Cancel the returned watch
    /// when the wait ends.
    func watch(_ record: Record, confirmed: @escaping @Sendable () -> Void) -> WaitWatch? {
        guard !record.running.isEmpty else { return nil }
        let watch = WaitWatch(record: record, registry: self, confirmed: confirmed)
        watch.schedule(after: WaitWatch.suspectInterval)
        return watch
    }

    /// For a wait that runs its queue's operations on the waiting thread
    /// (`OperationQueue.runOnCallingThread`): why it can never end, if the
    /// waiter runs what it waits for, or waits for its own queue from inside
    /// one of its operations. Other verdicts assume a serial queue cannot
    /// run what is queued behind the waiter, which is false there, so they
    /// are not given. The wait is not left registered: other waits' checks
    /// would take this thread for blocked while it runs operations.
    func verdictForInlineWait(_ record: Record) -> WaitVerdict? {
        let verdict = begin(record)
        end(record)
        guard let verdict else { return nil }
        switch verdict.kind {
        case .runsTarget, .ownQueue: return verdict
        case .operationBlocked, .queueBlocked, .room: return nil
        }
    }

    /// Removes a wait registered with `begin`.
    func end(_ record: Record) {
        let removed = lock.withLock { records.removeValue(forKey: ObjectIdentifier(record)) }
        withExtendedLifetime(removed) {}
    }

    /// The number of waits in progress (tests, diagnostics).
    var count: Int { lock.withLock { records.count } }
}

/// Why a wait can never end: what the registry found, described (with the
/// names it reads, which may be user code) only once no lock is held.
struct WaitVerdict: Sendable {
    enum Kind {
        /// The waiter is running the operation it waits for.
        case runsTarget(Operation)
        /// The operation needs work that is blocked behind the wait.
        case operationBlocked(Operation)
        /// The waiter runs `Operation`, one of the queue's own operations.
        case ownQueue(OperationQueue, Operation)
        /// One of the queue's operations needs work blocked behind the wait.
        case queueBlocked(OperationQueue)
        /// No operation of the queue can finish to make room.
        case room(OperationQueue)
    }

    let kind: Kind
    /// The operation the waiter runs innermost, if any.
    let waiter: Operation?
    /// Whether no other thread can end the wait (see `WaitRegistry.begin`).
    let isCertain: Bool

    /// The explanation for the misuse report. Call with no lock held.
    var reason: String {
        let waiterText = waiter.map { "\($0.misuseSubject), which is waiting" } ?? "the waiter"
        switch kind {
        case .runsTarget(let operation):
            return "waits for \(operation.misuseSubject), which can only finish after \(waiterText) — the waiter is running it."
        case .operationBlocked(let operation):
            return "waits for \(operation.misuseSubject), which can only finish after \(waiterText) — it needs work that is blocked behind this wait (a dependency, a barrier, a slot of its queue, or another waiting thread)."
        case .ownQueue(let queue, let own):
            return "waits for \(queue.misuseSubject) to finish all its operations from inside its own operation \(own.misuseSubject), which cannot finish while it waits."
        case .queueBlocked(let queue):
            return "waits for \(queue.misuseSubject) to finish all its operations, but one of them can only finish after \(waiterText)."
        case .room(let queue):
            return "waits for room under the pending limit of \(queue.misuseSubject), but none of its operations can finish before \(waiterText)."
        }
    }
}

/// The re-checks of one `async` wait (see `WaitRegistry.watch`).
final class WaitWatch: @unchecked Sendable {
    // @unchecked Sendable: `registry` and `confirmed` are immutable; `state`
    // (with the record) is guarded by its own lock. A pending timer holds
    // the watch weakly, and `cancel()` drops the record, so a wait that
    // ended keeps neither its operations nor its queue alive.
    static let suspectInterval: UInt64 = 50_000_000
    private static let timerQueue = DispatchQueue(label: "operations.wait-checks")

    private let registry: WaitRegistry
    private let confirmed: @Sendable () -> Void
    private struct State {
        /// Nil once the wait ended (`cancel()`) or gave up.
        var record: WaitRegistry.Record?
        var interval: UInt64 = WaitWatch.suspectInterval
        var suspectSince: UInt64?
        var verdict: WaitVerdict?
    }
    private let state: LockedValue<State>

    /// Why the wait can never end, once confirmed; nil until then.
    var verdict: WaitVerdict? { state.withLock { $0.verdict } }

    init(record: WaitRegistry.Record, registry: WaitRegistry, confirmed: @escaping @Sendable () -> Void) {
        self.registry = registry
        self.confirmed = confirmed
        state = LockedValue(State(record: record))
    }

    /// Stops the checks (the wait ended); the record is released after
    /// unlocking.
    func cancel() {
        let released = state.withLock { state -> WaitRegistry.Record? in
            defer { state.record = nil }
            return state.record
        }
        withExtendedLifetime(released) {}
    }

    func schedule(after nanoseconds: UInt64) {
        Self.timerQueue.asyncAfter(deadline: .now() + .nanoseconds(Int(clamping: nanoseconds))) { [weak self] in
            self?.check()
        }
    }

    private func check() {
        let now = monotonicNanoseconds()
        let pending = state.withLock { state -> (WaitRegistry.Record, Bool)? in
            guard let record = state.record else { return nil }
            return (record, state.suspectSince.map { now &- $0 >= WaitRegistry.confirmationDelay } ?? false)
        }
        guard let (record, confirm) = pending else { return }
        let result = registry.recheck(record, confirm: confirm)
        let verdict = result?.verdict
        let spacing = WaitRegistry.spacing(afterCheckThatBegan: now)
        if let verdict, result?.gaveUp == true {
            let proceed = state.withLock { state -> Bool in
                guard state.record != nil else { return false }
                state.record = nil
                state.verdict = verdict
                return true
            }
            if proceed { confirmed() }
            return
        }
        let next: UInt64 = state.withLock { state in
            if verdict != nil {
                if state.suspectSince == nil { state.suspectSince = now }
                return max(Self.suspectInterval, spacing)
            }
            state.suspectSince = nil
            state.interval = min(state.interval * 2, 1_000_000_000)
            return max(state.interval, spacing)
        }
        schedule(after: next)
    }
}
