extension Operation {
    final func performRemoveDependency(_ operation: Operation) {
        // Announce only when something will change, and balance every
        // will-change with a did-change for the same keys.
        let observed = loadState().isObserved
        var keys: [String] = []
        if observed {
            guard withStateLock({ _ in storedDependencies.contains(operation) }) else { return }
            let state = loadState()
            let mayBecomeReady = !state.isReady && state.phase == .pending && !state.hasStarted
                && state.unfinishedDependencies == 1 && !operation.loadState().isFinished
            keys = mayBecomeReady ? ["dependencies", "isReady"] : ["dependencies"]
            notifyWillChange(keys)
        }
        var removed = false
        var readiness = OperationState.ReadinessChange.none
        var queue: OperationQueue?
        DependencyGraph.lock.withLock {
            operation.withStateLock { _ in
                let wasCounted = operation.storedDependents.remove(self)
                self.withStateLock { state in
                    removed = storedDependencies.remove(operation)
                    if wasCounted { readiness = state.dependencyFinished() }
                    if readiness == .becameReady, state.isEnqueued { queue = storedQueue }
                }
            }
        }
        if observed { notifyDidChange(keys) }
        guard removed else { return }
        queue?.operationMayBeReady(self)
    }

    /// Registers `dependency`. A hidden dependency (a queue's barrier) is
    /// counted but not listed in `dependencies`.
    final func addDependency(_ dependency: Operation, hidden: Bool) {
        if dependency === self {
            OperationMisuse.report(
                .dependencyCycle,
                subject: misuseSubject,
                "was made a dependency of itself, a cycle that could never start. Remove the addDependency call."
            )
            return
        }
        // Observers are told only about an edge that will be added, and every
        // will-change is balanced by a did-change for the same keys.
        let observed = loadState().isObserved
        var keys: [String] = []
        if observed {
            let rejected = DependencyGraph.lock.withLock { () -> Bool in
                isDuplicateDependency(dependency, hidden: hidden)
                    || { if case .cycle = DependencyGraph.search(dependent: self, dependency: dependency) { return true }; return false }()
            }
            if !rejected {
                let state = loadState()
                let mayBecomeUnready = state.isReady && state.phase == .pending && !state.hasStarted
                    && !dependency.loadState().isFinished
                keys = (hidden ? [] : ["dependencies"]) + (mayBecomeUnready ? ["isReady"] : [])
                notifyWillChange(keys)
            }
        }
        defer { if !keys.isEmpty { notifyDidChange(keys) } }

        DependencyGraph.lock.lock()
        defer { DependencyGraph.lock.unlock() }
        // Fast path: one nested critical section (dependency, then
        // dependent) checks for a duplicate, rules a cycle out in O(1) and
        // registers the edge.
        switch register(dependency, hidden: hidden, force: false) {
        case .duplicate, .registered:
            return
        case .needsSearch:
            break
        }
        switch DependencyGraph.search(dependent: self, dependency: dependency) {
        case .cycle(let path):
            OperationMisuse.report(
                .dependencyCycle,
                subject: misuseSubject,
                "was given a dependency that closes a cycle: \(DependencyGraph.describe(path)). None of these operations could ever start; the dependency was not added."
            )
            return
        case .unknown:
            DependencyGraph.markUnverified()
        case .none:
            break
        }
        register(dependency, hidden: hidden, force: true)
    }

    private enum RegistrationOutcome {
        case duplicate
        case registered
        case needsSearch
    }

    /// Registers the edge under both operations' locks (dependency, then
    /// dependent: the only place two operation locks nest, under the graph
    /// lock). Without `force`, registers only when no cycle is possible: this
    /// operation has no unfinished dependents, or `dependency` has no
    /// unfinished dependencies (the usual ways to build a graph).
    @discardableResult
    private func register(_ dependency: Operation, hidden: Bool, force: Bool) -> RegistrationOutcome {
        dependency.withStateLock { dependencyState in
            let dependencyUnfinished = dependencyState.phase != .finished
            return self.withStateLock { state -> RegistrationOutcome in
                if isDuplicateLocked(dependency, hidden: hidden, dependencyUnfinished: dependencyUnfinished, state: state) {
                    return .duplicate
                }
                if !force, dependencyUnfinished, state.phase != .finished,
                   hasUnfinishedDependentsLocked, dependency.hasUnfinishedDependenciesLocked {
                    return .needsSearch
                }
                if hidden {
                    extrasWhileLocked().hiddenDependency = dependency
                } else {
                    storedDependencies.append(dependency)
                }
                if dependencyUnfinished, state.phase == .pending, !state.hasStarted {
                    _ = state.addUnfinishedDependency()
                    dependency.storedDependents.append(self)
                }
                return .registered
            }
        }
    }

    /// Whether the edge exists, checked on the shorter list. Call with both
    /// operations' locks held (see `isDuplicateDependency`).
    private func isDuplicateLocked(
        _ dependency: Operation,
        hidden: Bool,
        dependencyUnfinished: Bool,
        state: OperationState
    ) -> Bool {
        if hidden { return extras?.hiddenDependency === dependency }
        let ownCount = storedDependencies.count
        if ownCount == 0 { return false }
        if dependencyUnfinished, state.phase == .pending, !state.hasStarted,
           dependency.storedDependents.count <= ownCount {
            return dependency.storedDependents.contains(self)
        }
        return storedDependencies.contains(dependency)
    }

    /// `hasUnfinishedDependents` with this operation's lock already held.
    fileprivate var hasUnfinishedDependentsLocked: Bool {
        var found = false
        storedDependents.forEach { entry in
            if !found, entry._withUnsafeGuaranteedRef({ !$0.loadState().isFinished }) { found = true }
        }
        return found
    }

    /// `hasUnfinishedDependencies` with this operation's lock already held.
    fileprivate var hasUnfinishedDependenciesLocked: Bool {
        var found = false
        storedDependencies.forEach { if !found, !$0.loadState().isFinished { found = true } }
        if !found, let hidden = extras?.hiddenDependency, !hidden.loadState().isFinished { found = true }
        return found
    }

    /// Whether `dependency` is already registered. Call with the graph lock held.
    ///
    /// - Complexity: O(min(a, b)), where a is this operation's number of
    ///   dependencies and b the dependency's number of dependents, so that
    ///   neither fan-in nor fan-out graphs are quadratic to build. While the
    ///   dependency is unfinished and this operation has not started, each
    ///   edge is in both lists, so either can answer.
    private func isDuplicateDependency(_ dependency: Operation, hidden: Bool) -> Bool {
        if hidden { return withStateLock { _ in extras?.hiddenDependency === dependency } }
        let (ownCount, pending) = withStateLock { state in
            (storedDependencies.count, state.phase == .pending && !state.hasStarted)
        }
        if ownCount == 0 { return false }
        if pending {
            let answer = dependency.withStateLock { state -> Bool? in
                guard state.phase != .finished, dependency.storedDependents.count <= ownCount else { return nil }
                return dependency.storedDependents.contains(self)
            }
            if let answer { return answer }
        }
        return withStateLock { _ in storedDependencies.contains(dependency) }
    }

    /// Unfinished operations this one waits for (listed and hidden).
    final func unfinishedDependencies() -> [Operation] {
        var result: [Operation] = []
        withStateLock { _ in
            storedDependencies.forEach { result.append($0) }
            if let hidden = extras?.hiddenDependency { result.append(hidden) }
        }
        return result.filter { !$0.loadState().isFinished }
    }

    /// Whether some unfinished operation (listed or hidden) is still a
    /// dependency. Allocation-free.
    final var hasUnfinishedDependencies: Bool {
        withStateLock { _ in hasUnfinishedDependenciesLocked }
    }

    /// Whether some live, unfinished operation waits for this one.
    /// Allocation-free.
    final var hasUnfinishedDependents: Bool {
        withStateLock { _ in hasUnfinishedDependentsLocked }
    }

    /// Unfinished operations waiting for this one.
    final func unfinishedDependents() -> [Operation] {
        var result: [Operation] = []
        withStateLock { _ in
            storedDependents.forEach { entry in
                if let dependent = Operation.retainIfAlive(entry) { result.append(dependent) }
            }
        }
        return result.filter { !$0.loadState().isFinished }
    }
}

/// The process-wide dependency graph: a lock that serializes changes to
/// dependency edges, and cycle detection.
///
/// Every `addDependency` / `removeDependency` holds `lock`, so the edges it
/// inspects cannot change under it, except that operations finishing
/// concurrently drop their outgoing "dependents" edges, which can only
/// remove cycles, never create them.
enum DependencyGraph {
    /// Serializes edge changes. Lock order: graph, then operations.
    static let lock = PlatformLock()

    /// Edges added without a conclusive cycle check, since the last full check.
    private nonisolated(unsafe) static var unverifiedEdgeCount = 0
    // nonisolated(unsafe): read and written only while `lock` is held.

    static func markUnverified() {
        unverifiedEdgeCount += 1
    }

    /// Whether a full cycle check is due (some edge was never verified).
    static var hasUnverifiedEdges: Bool {
        lock.withLock { unverifiedEdgeCount > 0 }
    }

    enum SearchResult {
        case none
        case cycle([Operation])
        case unknown
    }

    /// The most operations one `addDependency` check may visit.
    static let searchBudget = 512

    /// Whether `dependent → dependency` would close a cycle, i.e. whether
    /// `dependent` is already reachable from `dependency` along dependency
    /// edges. Bidirectional breadth-first search over unfinished operations,
    /// expanding the smaller frontier; a side that runs out proves there is
    /// no cycle. Call with `lock` held.
    static func search(dependent: Operation, dependency: Operation) -> SearchResult {
        if dependent.loadState().isFinished || dependency.loadState().isFinished { return .none }
        // The common ways to build a graph end here in O(1), without
        // allocating: a new operation has no dependents yet, and a source has
        // no dependencies.
        if !dependent.hasUnfinishedDependents || !dependency.hasUnfinishedDependencies { return .none }
        // forward: reached from `dependency` by following dependencies.
        var forwardParent: [ObjectIdentifier: Operation] = [ObjectIdentifier(dependency): dependency]
        var backwardParent: [ObjectIdentifier: Operation] = [ObjectIdentifier(dependent): dependent]
        var forwardFrontier = [dependency]
        var backwardFrontier = [dependent]
        var visited = 2
        while !forwardFrontier.isEmpty && !backwardFrontier.isEmpty {
            if visited > searchBudget { return .unknown }
            let expandForward = forwardFrontier.count <= backwardFrontier.count
            var next: [Operation] = []
            for node in expandForward ? forwardFrontier : backwardFrontier {
                let neighbours = expandForward ? node.unfinishedDependencies() : node.unfinishedDependents()
                for neighbour in neighbours {
                    let id = ObjectIdentifier(neighbour)
                    if expandForward {
                        guard forwardParent[id] == nil else { continue }
                        forwardParent[id] = node
                        if backwardParent[id] != nil {
                            return .cycle(path(meeting: neighbour, forward: forwardParent, backward: backwardParent,
                                               dependent: dependent, dependency: dependency))
                        }
                    } else {
                        guard backwardParent[id] == nil else { continue }
                        backwardParent[id] = node
                        if forwardParent[id] != nil {
                            return .cycle(path(meeting: neighbour, forward: forwardParent, backward: backwardParent,
                                               dependent: dependent, dependency: dependency))
                        }
                    }
                    visited += 1
                    next.append(neighbour)
                }
            }
            if expandForward { forwardFrontier = next } else { backwardFrontier = next }
        }
        return .none
    }

    /// The cycle as `[dependent, dependency, …, dependent]`, each element
    /// depending on the next.
    private static func path(
        meeting: Operation,
        forward: [ObjectIdentifier: Operation],
        backward: [ObjectIdentifier: Operation],
        dependent: Operation,
        dependency: Operation
    ) -> [Operation] {
        // dependency ⇝ meeting along dependencies (walk forward parents back).
        var head: [Operation] = [meeting]
        var node = meeting
        while node !== dependency, let parent = forward[ObjectIdentifier(node)], parent !== node {
            head.append(parent)
            node = parent
        }
        head.reverse()  // dependency … meeting
        // meeting ⇝ dependent along dependencies (backward parents lead there).
        var tail: [Operation] = []
        node = meeting
        while node !== dependent, let parent = backward[ObjectIdentifier(node)], parent !== node {
            tail.append(parent)
            node = parent
        }
        return [dependent] + head + tail
    }

    /// "a → b → c → a", where each arrow reads "depends on".
    static func describe(_ path: [Operation]) -> String {
        path.map(\.misuseSubject).joined(separator: " → ") + " (each depends on the next)"
    }

    /// Finds a cycle among the unfinished operations reachable from `roots`
    /// along dependency edges, or nil. Iterative depth-first search, O(V + E).
    /// Clears the "unverified" mark when none is found.
    static func findCycle(from roots: [Operation]) -> [Operation]? {
        lock.lock()
        defer { lock.unlock() }
        enum Color { case active, done }
        var color: [ObjectIdentifier: Color] = [:]
        for root in roots where color[ObjectIdentifier(root)] == nil && !root.loadState().isFinished {
            // Stack of (node, its unvisited dependencies).
            var stack: [(Operation, [Operation])] = [(root, root.unfinishedDependencies())]
            color[ObjectIdentifier(root)] = .active
            while !stack.isEmpty {
                if let next = stack[stack.count - 1].1.popLast() {
                    let id = ObjectIdentifier(next)
                    switch color[id] {
                    case .active?:
                        // Back edge: the cycle is the stack from `next` up.
                        let start = stack.firstIndex { $0.0 === next } ?? 0
                        return stack[start...].map(\.0) + [next]
                    case .done?:
                        continue
                    case nil:
                        color[id] = .active
                        stack.append((next, next.unfinishedDependencies()))
                    }
                } else {
                    color[ObjectIdentifier(stack.removeLast().0)] = .done
                }
            }
        }
        unverifiedEdgeCount = 0
        return nil
    }
}
