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
        if isDuplicateDependency(dependency, hidden: hidden) {
            DependencyGraph.lock.unlock()
            return
        }
        switch DependencyGraph.search(dependent: self, dependency: dependency) {
        case .cycle(let path):
            DependencyGraph.lock.unlock()
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
        // Lock order: dependency, then dependent. Only this function (under
        // the graph lock) holds two operation locks at once.
        dependency.withStateLock { dependencyState in
            let dependencyUnfinished = dependencyState.phase != .finished
            self.withStateLock { state in
                if hidden {
                    extrasWhileLocked().hiddenDependency = dependency
                } else {
                    storedDependencies.append(dependency)
                }
                let counts = dependencyUnfinished && state.phase == .pending && !state.hasStarted
                if counts {
                    _ = state.addUnfinishedDependency()
                    dependency.storedDependents.append(self)
                }
            }
        }
        DependencyGraph.lock.unlock()
    }

    /// Whether `dependency` is already registered. Call with the graph lock held.
    private func isDuplicateDependency(_ dependency: Operation, hidden: Bool) -> Bool {
        withStateLock { _ in
            hidden ? extras?.hiddenDependency === dependency : storedDependencies.contains(dependency)
        }
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

    /// Unfinished operations waiting for this one.
    final func unfinishedDependents() -> [Operation] {
        withStateLock { _ in storedDependents.operations }.filter { !$0.loadState().isFinished }
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
        // The common ways to build a graph end here in O(1): a new operation
        // has no dependents yet, and a source has no dependencies.
        let firstDependents = dependent.unfinishedDependents()
        if firstDependents.isEmpty { return .none }
        let firstDependencies = dependency.unfinishedDependencies()
        if firstDependencies.isEmpty { return .none }
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
