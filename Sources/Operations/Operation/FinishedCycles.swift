import Synchronization

// Freeing a dependency cycle once its operations have finished.
//
// Every operation keeps its dependencies alive, as in Foundation. A cycle
// (`a` depends on `b`, which depends on `a`) can still run once one of its
// operations is cancelled: that one finishes first, ahead of a dependency
// that has not finished. Once all of them have finished, they still hold
// each other, and Foundation never frees them. This library does:
//
// - An operation that finishes while a dependency it was counting has not
//   finished (cancelled, or its class let it start early) stays in that
//   dependency's dependents list (`OperationState.isListedAhead`), unretained
//   as every entry is, until the dependency finishes or the operation is
//   deallocated (its `deinit` leaves the list, as an unfinished one does).
// - When the dependency finishes, it finds that entry finished
//   (`dependencyDidFinish` returns `.dependentFinished`) and looks for a path
//   from itself, through the dependencies of finished operations, back to
//   that dependent. A path means that the edge `dependent → dependency`
//   closes a cycle of operations that can no longer affect each other's
//   scheduling. That edge is kept, but weakly (`weakDependencies`):
//   `dependencies` still lists the dependency while something else keeps it
//   alive, and the cycle is freed once nothing outside it holds it.
//
// Why the last operation of a cycle to finish always finds it: the operation
// before it on the cycle, which depends on it, finished earlier while
// counting it, so it is still in its dependents list; and every other
// operation of the cycle has finished by then.
//
// The search costs nothing unless the dependent is itself some operation's
// dependency (`isDependedOn`: a cancelled leaf cannot be on a cycle) and the
// finishing operation has a finished dependency. It follows dependencies
// and the operations named by kept `DependencyError`s
// (`heldOperationsLocked`), and examines at most `cycleSearchLimit` edges: a
// cycle longer than that, or hidden behind more finished operations, is
// left as Foundation leaves every cycle.

/// A weak reference to an operation: an edge that closed a cycle. Its
/// identity is compared without loading it: a strong reference loaded under
/// a lock could be the last one, and releasing it there would run a
/// `deinit` (user code) under that lock.
struct WeakOperation {
    weak var operation: Operation?
    /// The operation's address, which a later operation may reuse once it is
    /// freed: equal identities mean the same operation only while `operation`
    /// is not nil.
    let identity: ObjectIdentifier

    init(_ operation: Operation) {
        self.operation = operation
        identity = ObjectIdentifier(operation)
    }

    /// Whether this refers to `candidate`, which the caller keeps alive (so
    /// that the reference loaded here is never the last one).
    func refers(to candidate: Operation) -> Bool {
        identity == ObjectIdentifier(candidate) && operation === candidate
    }
}

extension Operation {
    /// How many edges one search examines at most.
    static let cycleSearchLimit = 128

    /// Serializes the weakening of closing edges: two operations of one
    /// cycle that finish at once would otherwise each find the other and
    /// both weaken their edges, where one is enough. Lock order: this lock,
    /// then operations' lock bits. No user code runs under it.
    private static let cycleBreaking = PlatformLock()

    /// How many searches have run, for the tests (a relaxed count on a path
    /// that searches anyway).
    static let cycleSearches = Atomic<Int>(0)

    /// For each of `dependents`, which depend on this finished operation:
    /// if it can be reached from this operation through the dependencies of
    /// finished operations, its edge to this operation closes a cycle among
    /// them, and becomes weak. One search serves them all. Call with no lock
    /// held; the caller keeps this operation alive.
    final func releaseCycles(closedBy dependents: [Operation]) {
        // Only an operation that something depends on can be reached; a
        // cancelled leaf, the common case, cannot. And a path back starts
        // with a finished dependency of this operation (the dependent
        // itself, or one on the way). As a rule one of these fails: no
        // search, nothing allocated.
        let targets = dependents.filter { dependent in
            let state = dependent.loadState()
            return dependent !== self && state.isFinished && state.isDependedOn
        }
        guard !targets.isEmpty, hasFinishedDependency() else { return }
        Self.cycleSearches.add(1, ordering: .relaxed)
        // The searched lists hold their operations: released at the end,
        // with no lock held (one may be the last reference).
        var searched: [OperationList] = []
        defer { withExtendedLifetime(searched) {} }
        let found = reachedThroughFinished(targets, keepingAlive: &searched)
        guard !found.isEmpty else { return }
        // Again, with every other weakening held off, so that each cycle
        // loses exactly one strong edge.
        Self.cycleBreaking.lock()
        for dependent in reachedThroughFinished(found, keepingAlive: &searched) {
            dependent.withStateLock { state in
                // The list's strong reference goes under the lock; the
                // caller's keeps this operation alive.
                guard state.isFinished, dependent.storedDependencies.remove(self) else { return }
                dependent.extrasWhileLocked().weakDependencies.append(WeakOperation(self))
            }
        }
        Self.cycleBreaking.unlock()
    }

    /// Whether one of this operation's dependencies, or of the operations
    /// its dependency errors name, has finished.
    private func hasFinishedDependency() -> Bool {
        var found = false
        let errorsNamed = withStateLock { _ -> OperationList in
            storedDependencies.forEach { dependency in
                if !found, dependency.loadState().isFinished { found = true }
            }
            guard !found, extras != nil else { return .empty }
            var named = OperationList.empty
            heldOperationsLocked(into: &named)
            return named
        }
        // Read after unlocking, and released here: no lock is held.
        errorsNamed.forEach { operation in
            if !found, operation.loadState().isFinished { found = true }
        }
        return found
    }

    /// Those of `targets` that this operation reaches through the
    /// operations that finished operations hold (`heldOperationsLocked`),
    /// examining at most `cycleSearchLimit` edges. Appends every list it read
    /// to `searched`, for the caller to release after unlocking.
    private func reachedThroughFinished(_ targets: [Operation], keepingAlive searched: inout [OperationList]) -> [Operation] {
        var wanted = targets
        var reached: [Operation] = []
        var visited: [ObjectIdentifier] = [ObjectIdentifier(self)]
        var pending: [Operation] = [self]
        var budget = Operation.cycleSearchLimit
        while !wanted.isEmpty, budget > 0, let operation = pending.popLast() {
            let held = operation.withStateLock { state -> OperationList in
                guard state.isFinished else { return .empty }
                var held = operation.storedDependencies
                operation.heldOperationsLocked(into: &held)
                return held
            }
            held.forEach { next in
                guard budget > 0 else { return }
                budget -= 1
                if let index = wanted.firstIndex(where: { $0 === next }) {
                    reached.append(next)
                    wanted.remove(at: index)
                }
                let identity = ObjectIdentifier(next)
                if !visited.contains(identity) {
                    visited.append(identity)
                    pending.append(next)
                }
            }
            searched.append(held)
        }
        return reached
    }

    /// Whether `dependency` (which the caller keeps alive) is one of the
    /// weakened edges. Call with the lock held.
    final func hasWeakDependencyLocked(_ dependency: Operation) -> Bool {
        guard let extras, !extras.weakDependencies.isEmpty else { return false }
        return extras.weakDependencies.contains { $0.refers(to: dependency) }
    }

    /// Removes `dependency` (which the caller keeps alive) from the weakened
    /// edges. Returns whether it was there. Call with the lock held.
    final func removeWeakDependencyLocked(_ dependency: Operation) -> Bool {
        guard let extras, let index = extras.weakDependencies.firstIndex(where: { $0.refers(to: dependency) }) else {
            return false
        }
        extras.weakDependencies.remove(at: index)
        return true
    }
}
