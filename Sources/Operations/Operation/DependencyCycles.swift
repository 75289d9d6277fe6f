/// Dependency cycles: found for diagnostics and, when
/// `OperationMisuse.reportsDependencyCycles` is on, when an edge closes one.
///
/// As in Foundation, a cycle is not refused by default: its operations
/// never become ready, and cancelling any of them breaks it (a cancelled
/// operation is ready whatever its dependencies). These searches read the
/// graph one operation at a time, under each operation's own lock; while
/// other threads change edges they see a recent state, not a snapshot.
enum DependencyGraph {
    /// Held while an edge is checked and added with
    /// `OperationMisuse.reportsDependencyCycles` on, so that concurrent
    /// checked edits see each other's edges. Lock order: this lock, then
    /// operations' lock bits. No user code runs under it; edits made with
    /// the check off do not take it.
    static let checkedEdits = PlatformLock()

    /// The cycle that the edge `dependent → dependency` would close (a path
    /// from `dependency` to `dependent` along unfinished dependencies), as
    /// `[dependent, dependency, …, dependent]`, or nil.
    ///
    /// Every dependencies list the search read is appended to `keepAlive`:
    /// a caller that searches under a lock releases them after unlocking,
    /// since another thread may meanwhile have dropped the last other
    /// reference to an operation in them (its `deinit` is user code).
    ///
    /// - Complexity: O(V + E) over the unfinished operations reachable from
    ///   `dependency`.
    static func cycle(
        closedBy dependent: Operation,
        dependingOn dependency: Operation,
        keepingAlive keepAlive: inout [[Operation]]
    ) -> [Operation]? {
        if dependency === dependent { return [dependent, dependent] }
        if dependent.loadState().isFinished || dependency.loadState().isFinished { return nil }
        var parent: [ObjectIdentifier: Operation] = [ObjectIdentifier(dependency): dependency]
        var stack = [dependency]
        while let node = stack.popLast() {
            let dependencies = node.unfinishedDependencies(keepingAlive: &keepAlive)
            for next in dependencies where parent[ObjectIdentifier(next)] == nil {
                parent[ObjectIdentifier(next)] = node
                if next === dependent {
                    var path = [dependent]
                    var current = node
                    while current !== dependency {
                        path.append(current)
                        current = parent[ObjectIdentifier(current)] ?? dependency
                    }
                    path.append(dependency)
                    return [dependent] + path.reversed()
                }
                stack.append(next)
            }
        }
        return nil
    }

    /// `cycle(closedBy:dependingOn:keepingAlive:)`, for a caller that holds
    /// no lock.
    static func cycle(closedBy dependent: Operation, dependingOn dependency: Operation) -> [Operation]? {
        var kept: [[Operation]] = []
        return cycle(closedBy: dependent, dependingOn: dependency, keepingAlive: &kept)
    }

    /// `cycles(reachableFrom:limit:keepingAlive:)`, for a caller that holds
    /// no lock.
    static func cycles(reachableFrom roots: [Operation], limit: Int = 16) -> [[Operation]] {
        var kept: [[Operation]] = []
        return cycles(reachableFrom: roots, limit: limit, keepingAlive: &kept)
    }

    /// The dependency cycles among the unfinished operations reachable from
    /// `roots`, each as `[a, b, …, a]` where each depends on the next; at
    /// most `limit` of them.
    ///
    /// Every dependencies list the search read is appended to `keepAlive`,
    /// as in `cycle(closedBy:dependingOn:keepingAlive:)`.
    ///
    /// - Complexity: O(V + E), iterative (no recursion on deep graphs).
    static func cycles(
        reachableFrom roots: [Operation],
        limit: Int = 16,
        keepingAlive keepAlive: inout [[Operation]]
    ) -> [[Operation]] {
        enum Color { case active, done }
        var color: [ObjectIdentifier: Color] = [:]
        var found: [[Operation]] = []
        var seenCycles: Set<Set<ObjectIdentifier>> = []
        for root in roots where color[ObjectIdentifier(root)] == nil && !root.loadState().isFinished {
            let rootDependencies = root.unfinishedDependencies(keepingAlive: &keepAlive)
            var stack: [(Operation, [Operation])] = [(root, rootDependencies)]
            color[ObjectIdentifier(root)] = .active
            while !stack.isEmpty {
                guard let next = stack[stack.count - 1].1.popLast() else {
                    color[ObjectIdentifier(stack.removeLast().0)] = .done
                    continue
                }
                switch color[ObjectIdentifier(next)] {
                case .active?:
                    let start = stack.firstIndex { $0.0 === next } ?? 0
                    let cycle = stack[start...].map(\.0) + [next]
                    if seenCycles.insert(Set(cycle.map(ObjectIdentifier.init))).inserted {
                        found.append(cycle)
                        if found.count >= limit { return found }
                    }
                case .done?:
                    continue
                case nil:
                    color[ObjectIdentifier(next)] = .active
                    let dependencies = next.unfinishedDependencies(keepingAlive: &keepAlive)
                    stack.append((next, dependencies))
                }
            }
        }
        return found
    }
}

extension Operation {
    /// Unfinished operations this one waits for (a cancelled operation waits
    /// for none): the edges that count. An edge counts exactly while this
    /// operation is in the dependency's list of dependents (or, for a
    /// self-dependency, while it is counted): not one to a dependency whose
    /// overridden `isFinished` said it had finished when the edge was added
    /// (`DependencyGetter`), and none once this operation has started.
    final func unfinishedDependencies() -> [Operation] {
        var read: [[Operation]] = []
        return unfinishedDependencies(keepingAlive: &read)
    }

    /// `unfinishedDependencies()`, appending every dependency it read (the
    /// edges that no longer count too) to `keepAlive`: a caller that
    /// searches under a lock releases them after unlocking. Another thread
    /// may have removed an edge since this operation's list was copied,
    /// leaving the copy the last reference to that dependency, whose
    /// `deinit` is user code (the cycle check's deadlock, hit again after
    /// probe 10's fix, which kept only the edges that count).
    final func unfinishedDependencies(keepingAlive keepAlive: inout [[Operation]]) -> [Operation] {
        let (list, cancelled, countsSelf) = withStateLock { state in
            // A finished operation waits for nothing, though it may still be
            // in dependents lists (`isListedAhead`).
            (storedDependencies, state.isCancelled || state.isFinished, state.hasSelfDependency)
        }
        let read = list.array
        keepAlive.append(read)
        guard !cancelled else { return [] }
        return read.filter { dependency in
            if dependency === self { return countsSelf }
            return dependency.withStateLock { state in !state.isFinished && dependency.storedDependents.contains(self) }
        }
    }
}
