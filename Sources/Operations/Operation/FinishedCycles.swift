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
// The search costs nothing unless the finishing operation has a finished
// dependency, and visits at most `cycleSearchLimit` operations: a cycle
// longer than that, or hidden behind more finished operations, is left as
// Foundation leaves every cycle.

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
    /// How many operations one search visits at most.
    static let cycleSearchLimit = 256

    /// For each of `dependents`, which depend on this finished operation:
    /// if it can be reached from this operation through the dependencies of
    /// finished operations, its edge to this operation closes a cycle among
    /// them, and becomes weak. One search serves them all. Call with no lock
    /// held; the caller keeps this operation alive.
    final func releaseCycles(closedBy dependents: [Operation]) {
        // A path back to a dependent starts with a finished dependency of
        // this operation (the dependent itself, or one on the way). As a
        // rule there is none (dependents finish ahead of their dependencies
        // when cancelled in a batch): no search, nothing allocated.
        guard hasFinishedDependency() else { return }
        let finished = dependents.filter { $0 !== self && $0.loadState().isFinished }
        guard !finished.isEmpty else { return }
        for dependent in reachedThroughFinished(finished) {
            dependent.withStateLock { state in
                // The list's strong reference goes under the lock; the
                // caller's keeps this operation alive.
                guard state.isFinished, dependent.storedDependencies.remove(self) else { return }
                dependent.extrasWhileLocked().weakDependencies.append(WeakOperation(self))
            }
        }
    }

    /// Whether one of this operation's dependencies has finished.
    final func hasFinishedDependency() -> Bool {
        withStateLock { _ in
            var found = false
            storedDependencies.forEach { dependency in
                if !found, dependency.loadState().isFinished { found = true }
            }
            return found
        }
    }

    /// Those of `targets` that are dependencies of this operation or,
    /// transitively, of a finished operation that this one reaches. Visits
    /// at most `cycleSearchLimit` operations.
    private func reachedThroughFinished(_ targets: [Operation]) -> [Operation] {
        var wanted = Set(targets.map(ObjectIdentifier.init))
        var reached: [Operation] = []
        var visited: Set<ObjectIdentifier> = [ObjectIdentifier(self)]
        // Each searched list holds its operations during the search; all
        // are released afterwards, with no lock held.
        var lists: [OperationList] = []
        defer { withExtendedLifetime(lists) {} }
        var pending: [Operation] = [self]
        var budget = Operation.cycleSearchLimit
        while !wanted.isEmpty, let operation = pending.popLast() {
            let dependencies = operation.withStateLock { state -> OperationList in
                state.isFinished ? operation.storedDependencies : .empty
            }
            dependencies.forEach { dependency in
                let identity = ObjectIdentifier(dependency)
                if wanted.remove(identity) != nil { reached.append(dependency) }
                if budget > 0, visited.insert(identity).inserted {
                    budget -= 1
                    pending.append(dependency)
                }
            }
            lists.append(dependencies)
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
