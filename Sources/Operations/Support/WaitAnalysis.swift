// The question "can this wait ever end without outside help?", answered
// over the graph of what each piece of work needs. Run by `WaitRegistry`,
// on the waiting thread (an `async` wait's timer) with no registry lock held,
// over a snapshot of the registered waits, when a wait begins and at each
// re-check.
//
// Nodes are operations and wait targets; each is free (it may make progress
// by itself: running on a thread that is not waiting, asynchronous, in a
// suspended queue or in no queue), the waiter's own work (stuck), or stuck
// when one thing it needs is stuck, or when every holder of the slots it
// needs is stuck. The answer is the greatest fixed point: everything is
// assumed stuck until shown free, so a cycle of waits closes.
//
// A cycle of dependencies alone is not a wait cycle (cancelling a member
// breaks it, and the hang report names it). So the operations of one
// strongly connected component of the dependency graph (a self-dependent
// operation included) are solved as one node: the dependency edges between
// them are ignored, and the component is free once everything its members
// need outside it is free. A cycle whose members also need work blocked
// behind the wait is stuck as a whole (probes 24 and 26).
//
// Both phases are linear in the graph and iterative: a chain of 100,000
// dependencies neither overflows the stack nor costs quadratic time
// (probe 26).

/// One analysis of the waits registered at one moment.
struct WaitAnalysis {
    let origin: WaitRegistry.Record
    /// Running operation → the wait of the thread or task running it.
    private var blockedRunner: [ObjectIdentifier: WaitRegistry.Record] = [:]
    private let originRunning: Set<ObjectIdentifier>
    /// The other waits the analysis met: operations it found blocked
    /// because their thread is in one of these waits.
    private var metWaits: [(operation: Key, wait: ObjectIdentifier)] = []
    /// The other waits the verdict relies on: those met whose operation
    /// turned out stuck. A verdict stays true while these waits last (a
    /// wait that begins later can only block more work, and one whose
    /// operation is free anyway changes nothing when it ends; probe 28);
    /// see `WaitRegistry.recheck`. Set by `neverEnds(_:)`.
    private(set) var consultedWaits: Set<ObjectIdentifier> = []

    private enum Key: Hashable {
        case operation(ObjectIdentifier)
        case queue(ObjectIdentifier)
        case room(ObjectIdentifier)
    }

    private struct Node {
        /// A known value (free: false; the waiter's own work: true), or nil.
        var fixed: Bool?
        /// Stuck if any of these is stuck.
        var needs: [Key] = []
        /// The operation's unfinished dependencies: stuck if any of these is
        /// stuck, except those in its own strongly connected component.
        var dependencies: [Key] = []
        /// Stuck if all of these are stuck (slot holders; a queue's members for room).
        var anyOf: [Key]?
    }

    private var nodes: [Key: Node] = [:]
    /// Nodes registered but not explored yet, with what they stand for.
    private var unexplored: [(Key, WaitRegistry.Target)] = []
    /// Every operation and queue the analysis obtained, kept until the
    /// analysis itself is released (see `WaitRegistry.analysis(of:_:)`). Another
    /// thread may meanwhile drop the last other reference to one of them:
    /// its `deinit` (user code) must not run in the middle of the analysis,
    /// where a queue's lock may be held (probe 10), and its address must
    /// not be reused by a new object while the nodes are keyed by it.
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
        let root = key(for: target)
        while let (key, item) = unexplored.popLast() { nodes[key] = node(for: item) }
        let stuck = stuckKeys()
        guard stuck.contains(root) else { return nil }
        consultedWaits = Set(metWaits.lazy.filter { stuck.contains($0.operation) }.map(\.wait))
        let waiter = origin.running.last
        switch target {
        case .operation(let operation):
            if originRunning.contains(ObjectIdentifier(operation)) {
                // Its own body, run by the base `start()` (on this thread, or
                // an `async` body awaiting it): nothing else can finish it.
                return WaitVerdict(kind: .runsTarget(operation), waiter: waiter, isCertain: onlyItsBodyFinishes(operation))
            }
            return WaitVerdict(kind: .operationBlocked(operation), waiter: waiter, isCertain: false)
        case .queue(let queue):
            if let own = origin.running.first(where: { $0.belongs(to: queue) && !$0.loadState().isFinished }) {
                return WaitVerdict(kind: .ownQueue(queue, own), waiter: waiter, isCertain: onlyItsBodyFinishes(own))
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
    ///
    /// Also true of the operation whose base `start()` the waiter is
    /// announcing (a `.prior` `isExecuting` observer): its
    /// body runs on the waiter's thread next (probe 55: such a wait was
    /// never confirmed, and hung without a report).
    private func onlyItsBodyFinishes(_ operation: Operation) -> Bool {
        guard !(operation is AsyncOperation) else { return false }
        return operation.loadState().isBaseExecuting || origin.startingBody == ObjectIdentifier(operation)
    }

    // MARK: Building the graph

    /// The key of `target`, registered to be explored if it is new. Never
    /// explores anything itself, so deep graphs cost no stack.
    private mutating func key(for target: WaitRegistry.Target) -> Key {
        let targetKey: Key
        switch target {
        case .operation(let operation): return key(for: operation)
        case .queue(let queue): targetKey = .queue(ObjectIdentifier(queue))
        case .room(let queue): targetKey = .room(ObjectIdentifier(queue))
        }
        if nodes[targetKey] == nil {
            nodes[targetKey] = Node()
            unexplored.append((targetKey, target))
        }
        return targetKey
    }

    private mutating func key(for operation: Operation) -> Key {
        let key = Key.operation(ObjectIdentifier(operation))
        if nodes[key] == nil {
            nodes[key] = Node()
            unexplored.append((key, .operation(operation)))
        }
        return key
    }

    /// A queue waited for needs all its operations; room in it, any one of
    /// them to finish.
    private mutating func node(for target: WaitRegistry.Target) -> Node {
        switch target {
        case .operation(let operation):
            return node(for: operation)
        case .queue(let queue):
            let members = queue.analysisOperations()
            heldLists.append(members)
            let needs = members.map { key(for: $0) }
            return needs.isEmpty ? Node(fixed: false) : Node(needs: needs)
        case .room(let queue):
            let members = queue.analysisOperations()
            heldLists.append(members)
            let holders = members.map { key(for: $0) }
            return holders.isEmpty ? Node(fixed: false) : Node(anyOf: holders)
        }
    }

    private mutating func node(for operation: Operation) -> Node {
        let state = operation.loadState()
        if state.isRetired { return Node(fixed: false) }
        if originRunning.contains(ObjectIdentifier(operation)) {
            // The waiter's own work is stuck while it waits, unless something
            // else may finish it: an `AsyncOperation`'s `finish()`, or a
            // class's own `start()` (never base-executing), may come from any
            // thread, as in Foundation. One that has finished and is still
            // in its queue is being finished by the waiter (its dependents'
            // `isReady` observers are told inside that finish): it leaves
            // the queue only once the wait returns (probe 57: a wait there
            // for its queue, or for a dependent it had not released yet,
            // hung without a report). A finish by another thread would
            // retire it within the confirmation delay.
            let finishing = state.isFinished && operation.owningQueueForAnalysis() != nil
            return Node(fixed: onlyItsBodyFinishes(operation) || finishing ? true : false)
        }
        if let runner = blockedRunner[ObjectIdentifier(operation)] {
            metWaits.append((.operation(ObjectIdentifier(operation)), ObjectIdentifier(runner)))
            return Node(needs: [key(for: runner.target)])
        }
        if state.isFinished || state.hasBaseStarted { return Node(fixed: false) }
        var result = Node()
        if !state.isCancelled {
            // Queued or not, a pending operation cannot be started (by its
            // queue or by hand) before its dependencies finish.
            // The stored edges, not the `open` getter: an override is user
            // code, which the check does not run (it may block or wait).
            let dependencies = operation.unfinishedDependencies()
            heldLists.append(dependencies)
            for dependency in dependencies where dependency !== operation {
                result.dependencies.append(key(for: dependency))
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
            if let barrier = snapshot.barrier { result.needs.append(key(for: barrier)) }
            for earlier in snapshot.earlier { result.needs.append(key(for: earlier)) }
        }
        if snapshot.needsSlot, snapshot.slotsFull {
            let holders = snapshot.slotHolders.map { key(for: $0) }
            if !holders.isEmpty { result.anyOf = holders }
        }
        return result
    }

    // MARK: Solving

    /// The keys of the stuck nodes: everything not shown free, where a
    /// component (see the file's header) is free once none of its members
    /// is the waiter's own work, nothing its members need outside it is
    /// stuck, and each member that needs a slot has a free slot holder.
    private func stuckKeys() -> Set<Key> {
        let keys = Array(nodes.keys)
        var position: [Key: Int] = [:]
        position.reserveCapacity(keys.count)
        for (index, key) in keys.enumerated() { position[key] = index }
        let list = keys.map { nodes[$0]! }
        let component = Self.dependencyComponents(list.map { $0.dependencies.compactMap { position[$0] } })
        let components = (component.max() ?? -1) + 1

        // Per component: what is still needed (edges, and slot groups not
        // yet served), whether it can never be free, and who waits on it.
        var pending = [Int](repeating: 0, count: components)
        var blocked = [Bool](repeating: false, count: components)
        var waiting = [[(component: Int, group: Int)]](repeating: [], count: components)
        var groupServed: [Bool] = []
        for (index, node) in list.enumerated() {
            let own = component[index]
            if node.fixed == true { blocked[own] = true }
            guard node.fixed == nil else { continue }
            for needed in node.needs {
                guard let target = position[needed].map({ component[$0] }) else { continue }
                // A member that needs another member (a barrier between
                // them) can never be served from inside: stuck.
                if target == own { blocked[own] = true; continue }
                pending[own] += 1
                waiting[target].append((own, -1))
            }
            for dependency in node.dependencies {
                guard let target = position[dependency].map({ component[$0] }), target != own else { continue }
                pending[own] += 1
                waiting[target].append((own, -1))
            }
            if let holders = node.anyOf {
                let group = groupServed.count
                groupServed.append(false)
                pending[own] += 1
                for holder in holders {
                    guard let target = position[holder].map({ component[$0] }), target != own else { continue }
                    waiting[target].append((own, group))
                }
            }
        }

        var free = [Bool](repeating: false, count: components)
        var ready: [Int] = []
        for index in 0..<components where pending[index] == 0 && !blocked[index] {
            free[index] = true
            ready.append(index)
        }
        while let done = ready.popLast() {
            for (dependent, group) in waiting[done] where !free[dependent] {
                if group >= 0 {
                    guard !groupServed[group] else { continue }
                    groupServed[group] = true
                }
                pending[dependent] -= 1
                if pending[dependent] == 0, !blocked[dependent] {
                    free[dependent] = true
                    ready.append(dependent)
                }
            }
        }
        var stuck = Set<Key>()
        for (index, key) in keys.enumerated() where !free[component[index]] { stuck.insert(key) }
        return stuck
    }

    /// The strongly connected component of each node of the dependency
    /// graph `successors` (Tarjan's algorithm, iterative), numbered from 0;
    /// a node on no cycle is a component of its own.
    private static func dependencyComponents(_ successors: [[Int]]) -> [Int] {
        let count = successors.count
        var order = [Int](repeating: -1, count: count)
        var lowLink = [Int](repeating: 0, count: count)
        var onStack = [Bool](repeating: false, count: count)
        var component = [Int](repeating: -1, count: count)
        var stack: [Int] = []
        var visited = 0
        var components = 0
        for root in 0..<count where order[root] < 0 {
            // (node, position of the next successor to visit)
            var frames: [(node: Int, next: Int)] = [(root, 0)]
            order[root] = visited
            lowLink[root] = visited
            visited += 1
            stack.append(root)
            onStack[root] = true
            while let (node, next) = frames.last {
                if next < successors[node].count {
                    frames[frames.count - 1].next += 1
                    let successor = successors[node][next]
                    if order[successor] < 0 {
                        order[successor] = visited
                        lowLink[successor] = visited
                        visited += 1
                        stack.append(successor)
                        onStack[successor] = true
                        frames.append((successor, 0))
                    } else if onStack[successor] {
                        lowLink[node] = min(lowLink[node], order[successor])
                    }
                    continue
                }
                frames.removeLast()
                if let parent = frames.last?.node { lowLink[parent] = min(lowLink[parent], lowLink[node]) }
                guard lowLink[node] == order[node] else { continue }
                while let member = stack.popLast() {
                    onStack[member] = false
                    component[member] = components
                    if member == node { break }
                }
                components += 1
            }
        }
        return component
    }
}
