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
/// it, through any number of other threads' waits — the wait is reported as
/// `OperationMisuse.Code.waitDeadlock` and not performed. Registration and
/// the check happen under one lock, so of the waits that close a cycle, the
/// last to begin sees the others and reports. A blocking wait also checks
/// again while it waits (`recheck`), so a cycle closed after it began (work
/// queued behind it, a dependency added) is reported too.
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
    /// when it is over), or an explanation when it can never end (nothing is
    /// registered then).
    func begin(_ record: Record) -> String? {
        lock.lock()
        defer { lock.unlock() }
        if !record.running.isEmpty {
            var analysis = Analysis(origin: record, records: Array(records.values))
            if let reason = analysis.neverEnds(record.target) {
                return reason
            }
        }
        records[ObjectIdentifier(record)] = record
        return nil
    }

    /// Checks again whether the registered wait `record` can ever end (the
    /// graph may have changed since it began). Returns the reason if it
    /// cannot; with `confirm`, the record is then also removed, under the
    /// same lock, so that of several waits on one cycle only the first to
    /// confirm gives up (the others then see its thread as free).
    func recheck(_ record: Record, confirm: Bool) -> String? {
        lock.lock()
        defer { lock.unlock() }
        guard records[ObjectIdentifier(record)] != nil else { return nil }
        var analysis = Analysis(origin: record, records: records.values.filter { $0 !== record })
        guard let reason = analysis.neverEnds(record.target) else { return nil }
        if confirm { records.removeValue(forKey: ObjectIdentifier(record)) }
        return reason
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
/// the hang report names it), so its operations count as free here.
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
        /// Stuck if all of these are stuck (slot holders; a queue's members for room).
        var anyOf: [Key]?
        var stuck = true
    }

    var nodes: [Key: Node] = [:]
    var pendingOperations: [Operation] = []

    init(origin: WaitRegistry.Record, records: [WaitRegistry.Record]) {
        self.origin = origin
        originRunning = Set(origin.running.map(ObjectIdentifier.init))
        for record in records {
            for operation in record.running { blockedRunner[ObjectIdentifier(operation)] = record }
        }
    }

    /// Why `target` can never be reached without the waiter, or nil.
    mutating func neverEnds(_ target: WaitRegistry.Target) -> String? {
        let root = explore(target)
        solve()
        guard nodes[root]?.stuck == true else { return nil }
        switch target {
        case .operation(let operation):
            let why = originRunning.contains(ObjectIdentifier(operation))
                ? "the waiter is running it."
                : "it needs work that is blocked behind this wait (a dependency, a barrier, a slot of its queue, or another waiting thread)."
            return "waits for \(operation.misuseSubject), which can only finish after \(waiterDescription) — \(why)"
        case .queue(let queue):
            if let own = origin.running.first(where: { $0.belongs(to: queue) && !$0.loadState().isFinished }) {
                return "waits for \(queue.misuseSubject) to finish all its operations from inside its own operation \(own.misuseSubject), which cannot finish while it waits."
            }
            return "waits for \(queue.misuseSubject) to finish all its operations, but one of them can only finish after \(waiterDescription)."
        case .room(let queue):
            return "waits for room under the pending limit of \(queue.misuseSubject), but none of its operations can finish before \(waiterDescription)."
        }
    }

    private var waiterDescription: String {
        origin.running.last.map { "\($0.misuseSubject), which is waiting" } ?? "the waiter"
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
            let needs = members.map { explore($0) }
            nodes[key]?.needs = needs
            if needs.isEmpty { nodes[key]?.fixed = false }
            return key
        case .room(let queue):
            let key = Key.room(ObjectIdentifier(queue))
            guard nodes[key] == nil else { return key }
            nodes[key] = Node()
            let members = queue.analysisOperations()
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
        if originRunning.contains(ObjectIdentifier(operation)) { return Node(fixed: true) }
        if let runner = blockedRunner[ObjectIdentifier(operation)] {
            return Node(needs: [explore(runner.target)])
        }
        if state.isFinished || state.hasBaseStarted { return Node(fixed: false) }
        var result = Node()
        if !state.isCancelled {
            // Queued or not, a pending operation cannot be started (by its
            // queue or by hand) before its dependencies finish.
            pendingOperations.append(operation)
            for dependency in operation.dependencies where dependency !== operation && !dependency.loadState().isFinished {
                result.needs.append(explore(dependency))
            }
        }
        guard let queue = operation.owningQueueForAnalysis(),
              let snapshot = queue.analysisSnapshot(of: operation) else {
            // In no queue: once ready, whoever holds it may start it.
            if result.needs.isEmpty { result.fixed = false }
            return result
        }
        if snapshot.dispatched || snapshot.suspended { return Node(fixed: false) }
        if !state.isCancelled {
            if let barrier = snapshot.barrier { result.needs.append(explore(barrier)) }
            for earlier in snapshot.earlier { result.needs.append(explore(earlier)) }
        }
        if snapshot.needsSlot, snapshot.slotsFull {
            let holders = snapshot.slotHolders.map { explore($0) }
            if !holders.isEmpty { result.anyOf = holders }
        }
        if result.needs.isEmpty, result.anyOf == nil { result.fixed = false }
        return result
    }

    // MARK: Solving

    private mutating func solve() {
        // Dependency cycles alone are Foundation's semantics, not a wait cycle.
        for cycle in DependencyGraph.cycles(reachableFrom: pendingOperations) {
            for operation in cycle { nodes[.operation(ObjectIdentifier(operation))]?.fixed = false }
        }
        for key in nodes.keys {
            if let fixed = nodes[key]?.fixed { nodes[key]?.stuck = fixed }
        }
        var changed = true
        while changed {
            changed = false
            for (key, node) in nodes where node.fixed == nil && node.stuck {
                let needed = node.needs.contains { nodes[$0]?.stuck ?? false }
                let slotBound = node.anyOf.map { holders in holders.allSatisfy { nodes[$0]?.stuck ?? false } } ?? false
                if !needed && !slotBound {
                    nodes[key]?.stuck = false
                    changed = true
                }
            }
        }
    }
}
