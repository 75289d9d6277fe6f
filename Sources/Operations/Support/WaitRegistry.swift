import Dispatch

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
/// Registration and the checks happen under one lock.
///
/// The check runs only when the waiter is running operations; a wait from
/// plain code (a test, `main`) holds nothing anyone could need.
///
/// Lock order: this registry's lock, then a queue's lock, then an
/// operation's lock bit. Nothing that holds a queue or operation lock takes
/// this one.
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

        init(running: [Operation], target: Target) {
            self.running = running
            self.target = target
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
        // The analysis holds operations and queues; it is released after
        // unlocking, in case it holds the last reference to one of them
        // (whose deinit may be user code).
        var analysis: Analysis?
        defer { withExtendedLifetime(analysis) {} }
        lock.lock()
        defer { lock.unlock() }
        if !record.running.isEmpty {
            analysis = Analysis(origin: record, records: Array(records.values))
            if let verdict = analysis?.neverEnds(record.target), verdict.isCertain {
                return verdict
            }
        }
        records[ObjectIdentifier(record)] = record
        return nil
    }

    /// How long a wait's verdict "can never end" must keep holding, re-read
    /// along the way, before the wait gives up and reports it (unless it is
    /// certain from the start, see `begin`). Long enough for another thread
    /// to widen a queue, remove a dependency or cancel an operation.
    static let confirmationDelay: UInt64 = 1_000_000_000

    /// Checks again whether the registered wait `record` can ever end (the
    /// graph may have changed since it began). Returns the verdict if it
    /// cannot; with `confirm`, the record is then also removed, under the
    /// same lock, so that of several waits on one cycle only the first to
    /// confirm gives up (the others then see its thread as free).
    func recheck(_ record: Record, confirm: Bool) -> WaitVerdict? {
        // Released after unlocking, as in `begin`.
        var analysis: Analysis?
        defer { withExtendedLifetime(analysis) {} }
        lock.lock()
        defer { lock.unlock() }
        guard records[ObjectIdentifier(record)] != nil else { return nil }
        analysis = Analysis(origin: record, records: records.values.filter { $0 !== record })
        guard let verdict = analysis?.neverEnds(record.target) else { return nil }
        if confirm { records.removeValue(forKey: ObjectIdentifier(record)) }
        return verdict
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

    /// Removes a wait registered with `begin`.
    func end(_ record: Record) {
        let removed = lock.withLock { records.removeValue(forKey: ObjectIdentifier(record)) }
        withExtendedLifetime(removed) {}
    }

    /// The number of waits in progress (tests, diagnostics).
    var count: Int { lock.withLock { records.count } }
}

/// The question "can this wait ever end without outside help?", answered
/// over the graph of what each piece of work needs. Called with the
/// registry's lock held.
///
/// Nodes are operations and wait targets; each is free (it may make progress
/// by itself: running on a thread that is not waiting, asynchronous, in a
/// suspended queue or in no queue), the waiter's own work (stuck), or stuck
/// when one thing it needs is stuck, or when every holder of the slots it
/// needs is stuck. The answer is the greatest fixed point: everything is
/// assumed stuck until shown free, so a cycle of waits closes. A cycle of
/// dependencies alone is not a wait cycle (cancelling a member breaks it, and
/// the hang report names it), so the dependency edges inside one (between
/// operations of one strongly connected component, a self-dependency
/// included) are ignored here. Everything else a member needs still counts:
/// a member that also needs work blocked behind the wait is stuck.
private struct Analysis {
    let origin: WaitRegistry.Record
    /// Running operation → the wait of the thread or task running it.
    var blockedRunner: [ObjectIdentifier: WaitRegistry.Record] = [:]
    var originRunning: Set<ObjectIdentifier>

    enum Key: Hashable {
        case operation(ObjectIdentifier)
        case queue(ObjectIdentifier)
        case room(ObjectIdentifier)
    }

    struct Node {
        /// A known value (free: false; the waiter's own work: true), or nil.
        var fixed: Bool?
        /// Stuck if any of these is stuck.
        var needs: [Key] = []
        /// The operation's unfinished dependencies: stuck if any of these is
        /// stuck, once the edges inside dependency cycles are dropped.
        var dependencies: [Key] = []
        /// Stuck if all of these are stuck (slot holders; a queue's members for room).
        var anyOf: [Key]?
        var stuck = true
    }

    var nodes: [Key: Node] = [:]
    /// Every operation and queue the analysis obtained, kept until the
    /// analysis itself is released, after the registry's lock (see
    /// `WaitRegistry.begin`). Another thread may meanwhile drop the last
    /// other reference to one of them, and its `deinit` (user code) must
    /// not run under the lock when a temporary goes out of scope (probe 10).
    private var heldLists: [[Operation]] = []
    private var heldObjects: [AnyObject] = []

    init(origin: WaitRegistry.Record, records: [WaitRegistry.Record]) {
        self.origin = origin
        originRunning = Set(origin.running.map(ObjectIdentifier.init))
        for record in records {
            for operation in record.running { blockedRunner[ObjectIdentifier(operation)] = record }
        }
    }

    /// Why `target` can never be reached without the waiter, or nil. Reads
    /// no names (user code): the verdict is described after unlocking.
    mutating func neverEnds(_ target: WaitRegistry.Target) -> WaitVerdict? {
        let root = explore(target)
        solve()
        guard nodes[root]?.stuck == true else { return nil }
        let waiter = origin.running.last
        switch target {
        case .operation(let operation):
            if originRunning.contains(ObjectIdentifier(operation)) {
                // Its own body, run by the base `start()` (on this thread, or
                // an `async` body awaiting it): nothing else can finish it.
                return WaitVerdict(kind: .runsTarget(operation), waiter: waiter, isCertain: Self.onlyItsBodyFinishes(operation))
            }
            return WaitVerdict(kind: .operationBlocked(operation), waiter: waiter, isCertain: false)
        case .queue(let queue):
            if let own = origin.running.first(where: { $0.belongs(to: queue) && !$0.loadState().isFinished }) {
                return WaitVerdict(kind: .ownQueue(queue, own), waiter: waiter, isCertain: Self.onlyItsBodyFinishes(own))
            }
            return WaitVerdict(kind: .queueBlocked(queue), waiter: waiter, isCertain: false)
        case .room(let queue):
            return WaitVerdict(kind: .room(queue), waiter: waiter, isCertain: false)
        }
    }

    /// Whether `operation` can finish only by its body returning: the base
    /// `start()` runs the body (base-executing), and it is not an
    /// ``AsyncOperation``, whose `finish()` may come from any thread (a
    /// class that overrides `start()` is never base-executing).
    private static func onlyItsBodyFinishes(_ operation: Operation) -> Bool {
        operation.loadState().isBaseExecuting && !(operation is AsyncOperation)
    }

    // MARK: Building the graph

    private mutating func explore(_ target: WaitRegistry.Target) -> Key {
        switch target {
        case .operation(let operation):
            return explore(operation)
        case .queue(let queue):
            let key = Key.queue(ObjectIdentifier(queue))
            guard nodes[key] == nil else { return key }
            nodes[key] = Node()
            let members = queue.analysisOperations()
            heldLists.append(members)
            let needs = members.map { explore($0) }
            nodes[key]?.needs = needs
            if needs.isEmpty { nodes[key]?.fixed = false }
            return key
        case .room(let queue):
            let key = Key.room(ObjectIdentifier(queue))
            guard nodes[key] == nil else { return key }
            nodes[key] = Node()
            let members = queue.analysisOperations()
            heldLists.append(members)
            let holders = members.map { explore($0) }
            if holders.isEmpty { nodes[key]?.fixed = false } else { nodes[key]?.anyOf = holders }
            return key
        }
    }

    private mutating func explore(_ operation: Operation) -> Key {
        let key = Key.operation(ObjectIdentifier(operation))
        guard nodes[key] == nil else { return key }
        nodes[key] = Node()
        nodes[key] = node(for: operation)
        return key
    }

    private mutating func node(for operation: Operation) -> Node {
        let state = operation.loadState()
        if state.isRetired { return Node(fixed: false) }
        if originRunning.contains(ObjectIdentifier(operation)) {
            // The waiter's own work is stuck while it waits, unless something
            // else may finish it: an `AsyncOperation`'s `finish()`, or a
            // class's own `start()` (never base-executing), may come from any
            // thread, as in Foundation.
            return Node(fixed: Self.onlyItsBodyFinishes(operation) ? true : false)
        }
        if let runner = blockedRunner[ObjectIdentifier(operation)] {
            return Node(needs: [explore(runner.target)])
        }
        if state.isFinished || state.hasBaseStarted { return Node(fixed: false) }
        var result = Node()
        if !state.isCancelled {
            // Queued or not, a pending operation cannot be started (by its
            // queue or by hand) before its dependencies finish.
            // The stored edges, not the `open` getter: an override is user
            // code, and this runs under the registry's lock.
            let dependencies = operation.unfinishedDependencies()
            heldLists.append(dependencies)
            for dependency in dependencies where dependency !== operation {
                result.dependencies.append(explore(dependency))
            }
        }
        guard let queue = operation.owningQueueForAnalysis() else {
            // In no queue: once ready, whoever holds it may start it.
            return result
        }
        heldObjects.append(queue)
        guard let snapshot = queue.analysisSnapshot(of: operation) else { return result }
        if let barrier = snapshot.barrier { heldObjects.append(barrier) }
        heldLists.append(snapshot.earlier)
        heldLists.append(snapshot.slotHolders)
        if snapshot.dispatched || snapshot.suspended { return Node(fixed: false) }
        if !state.isCancelled {
            if let barrier = snapshot.barrier { result.needs.append(explore(barrier)) }
            for earlier in snapshot.earlier { result.needs.append(explore(earlier)) }
        }
        if snapshot.needsSlot, snapshot.slotsFull {
            let holders = snapshot.slotHolders.map { explore($0) }
            if !holders.isEmpty { result.anyOf = holders }
        }
        return result
    }

    // MARK: Solving

    private mutating func solve() {
        // Dependency cycles alone are Foundation's semantics, not a wait
        // cycle: the edges inside them do not make anything stuck.
        dropEdgesInsideDependencyCycles()
        for key in nodes.keys {
            if let fixed = nodes[key]?.fixed { nodes[key]?.stuck = fixed }
        }
        // A node that needs nothing is free: the loop below frees it at the
        // first pass (`anyOf` is never an empty list).
        var changed = true
        while changed {
            changed = false
            for (key, node) in nodes where node.fixed == nil && node.stuck {
                let needed = node.needs.contains { nodes[$0]?.stuck ?? false }
                    || node.dependencies.contains { nodes[$0]?.stuck ?? false }
                let slotBound = node.anyOf.map { holders in holders.allSatisfy { nodes[$0]?.stuck ?? false } } ?? false
                if !needed && !slotBound {
                    nodes[key]?.stuck = false
                    changed = true
                }
            }
        }
    }

    /// Removes every dependency edge between two operations of the same
    /// strongly connected component of the dependency graph (Tarjan's
    /// algorithm, iterative: graphs may be deep).
    private mutating func dropEdgesInsideDependencyCycles() {
        let keys = Array(nodes.keys)
        var index: [Key: Int] = [:]
        index.reserveCapacity(keys.count)
        for (position, key) in keys.enumerated() { index[key] = position }
        let successors: [[Int]] = keys.map { key in (nodes[key]?.dependencies ?? []).compactMap { index[$0] } }
        var order = [Int](repeating: -1, count: keys.count)
        var lowLink = [Int](repeating: 0, count: keys.count)
        var onStack = [Bool](repeating: false, count: keys.count)
        var component = [Int](repeating: -1, count: keys.count)
        var stack: [Int] = []
        var visited = 0
        var components = 0
        for root in keys.indices where order[root] < 0 && !successors[root].isEmpty {
            // (node, position of the next successor to visit)
            var frames: [(Int, Int)] = [(root, 0)]
            order[root] = visited; lowLink[root] = visited; visited += 1
            stack.append(root); onStack[root] = true
            while let (node, next) = frames.last {
                if next < successors[node].count {
                    frames[frames.count - 1].1 += 1
                    let successor = successors[node][next]
                    if order[successor] < 0 {
                        order[successor] = visited; lowLink[successor] = visited; visited += 1
                        stack.append(successor); onStack[successor] = true
                        frames.append((successor, 0))
                    } else if onStack[successor] {
                        lowLink[node] = min(lowLink[node], order[successor])
                    }
                    continue
                }
                frames.removeLast()
                if let parent = frames.last?.0 { lowLink[parent] = min(lowLink[parent], lowLink[node]) }
                guard lowLink[node] == order[node] else { continue }
                while let member = stack.popLast() {
                    onStack[member] = false
                    component[member] = components
                    if member == node { break }
                }
                components += 1
            }
        }
        for (position, key) in keys.enumerated() where !successors[position].isEmpty {
            let own = component[position]
            let kept = successors[position].filter { component[$0] != own }
            if kept.count != successors[position].count {
                nodes[key]?.dependencies = kept.map { keys[$0] }
            }
        }
    }
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
        let verdict = registry.recheck(record, confirm: confirm)
        if let verdict, confirm {
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
                return Self.suspectInterval
            }
            state.suspectSince = nil
            state.interval = min(state.interval * 2, 1_000_000_000)
            return state.interval
        }
        schedule(after: next)
    }
}
