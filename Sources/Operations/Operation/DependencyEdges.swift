// Dependency edges: strong dependencies, unretained dependents, and the one
// rule that keeps the unretained side from dangling.
//
// An edge `dependent → dependency` is stored twice:
// - in the dependent's `storedDependencies`, retained (as in Foundation, an
//   operation keeps its dependencies alive), for as long as the edge exists;
// - in the dependency's `storedDependents`, unretained, while the edge
//   *counts*: the dependency has not finished and the dependent has not
//   started. The dependent's unfinished-dependency count equals the number
//   of dependents lists that hold it. One exception: a dependent that
//   finishes while the edge counts (cancelled, or started early by its
//   class) stays listed until the dependency finishes, whose finish then
//   checks whether the edge closed a cycle (`FinishedCycles.swift`).
//
// The rule: a dependent leaves every dependents list that holds it, under the
// list owner's lock, before its memory can go away — when it finishes (step 2
// of the retirement path, which comes before its queue lets go of it), when
// a dependency is removed, and in `deinit` (for operations in no queue, and
// for one that stayed listed).
// Therefore, while a dependency holds its own lock, every entry of its list
// points to valid memory; `Operation.retainDependent` turns an entry into a
// strong reference (or nil, for one being deallocated).

extension Operation {
    // MARK: Adding and removing

    final func performAddDependency(_ dependency: Operation) {
        let checksCycles = OperationMisuse.reportsDependencyCycles
        // An overridden `isFinished` is the truth, as in Foundation, whose
        // `addDependency` asks the dependency's getter: one that already
        // returns true does not hold this operation back, even if it never
        // announced it. Read here, before any lock (it is user code).
        let getter = DependencyGetter(dependency, of: self)
        if !checksCycles, dependency !== self, !loadState().isObserved {
            addUnwatchedDependency(dependency, getter)
            return
        }
        // An edge that cannot count holds nothing back, so it closes no
        // cycle: its dependency reports finished, or this operation is
        // cancelled (ready whatever it depends on), started or taken to
        // start (new dependencies have no effect on it), or finished. Each
        // of these lasts, so a snapshot is enough.
        let checksCycle = checksCycles && !getter.saysFinished && {
            let state = loadState()
            return !state.isCancelled && state.acceptsDependencies
                && (dependency === self || !dependency.loadState().isFinished)
        }()
        if checksCycle, let cycle = DependencyGraph.cycle(closedBy: self, dependingOn: dependency) {
            reportCycle(cycle)
            return
        }
        // Observers are told only about an edge that will be added, and every
        // will-change is balanced by a did-change for the same keys, nested
        // as Foundation nests them: will `dependencies`, will `isReady`, did
        // `isReady`, did `dependencies`.
        let observed = loadState().isObserved
        var keys: [String] = []
        var announcing: EdgeEdit?
        defer { announcing?.end() }
        if observed {
            guard !withStateLock({ _ in storedDependencies.contains(dependency) || hasWeakDependencyLocked(dependency) }) else { return }
            announcing = EdgeEdit.begin(self, dependency, adding: true)
            guard announcing != nil else { return }
            let state = loadState()
            let mayBecomeUnready = state.isBaseReady && state.acceptsDependencies && !dependency.loadState().isFinished
                && !getter.saysFinished
            keys = mayBecomeUnready ? ["dependencies", "isReady"] : ["dependencies"]
            notifyWillChange(keys)
        }
        var unready = ReadinessLoss()
        // Whether this edge made a ready operation not ready (read under
        // the lock, whatever the snapshot above predicted).
        var lostReadiness = false
        if dependency === self {
            // A self-dependency can never finish first: it counts until the
            // operation is cancelled, as in Foundation. It is not in its own
            // dependents list, and is dropped when the operation finishes (it
            // would otherwise retain itself forever); so one given after the
            // finish is not listed at all.
            withStateLock { state in
                guard !state.isFinished, !storedDependencies.contains(self) else { return }
                storedDependencies.append(self)
                let wasReady = state.isBaseReady
                if state.addUnfinishedDependency() {
                    state.hasSelfDependency = true
                    if wasReady {
                        lostReadiness = !state.isBaseReady
                        unready.record(&state, of: self)
                    }
                } else {
                    // Taken by its queue to start, or started: listed only.
                    state.hasUncountedSelfDependency = true
                }
            }
            if lostReadiness, !keys.contains("isReady"), loadState().isObserved {
                announceReadinessChangedLate()
            }
            if !keys.isEmpty { notifyDidChange(keys.reversed()) }
            unready.report(for: self)
            return
        }
        // The lists the locked check below read, released after unlocking
        // (they may hold the last reference to an operation; probe 10).
        var searched: [[Operation]] = []
        defer { withExtendedLifetime(searched) {} }
        if checksCycle {
            // Checked again with every other checked edit held off: two
            // threads adding `a → b` and `b → a` at once would otherwise both
            // pass the check above and close the cycle together.
            DependencyGraph.checkedEdits.lock()
            if let cycle = DependencyGraph.cycle(closedBy: self, dependingOn: dependency, keepingAlive: &searched) {
                DependencyGraph.checkedEdits.unlock()
                if !keys.isEmpty { notifyDidChange(keys.reversed()) }
                reportCycle(cycle)
                return
            }
        }
        Operation.withStateLocks(self, dependency) { state, dependencyState in
            lostReadiness = linkLocked(dependency, getter, &state, &dependencyState, &unready)
        }
        if checksCycle { DependencyGraph.checkedEdits.unlock() }
        if lostReadiness, loadState().isObserved, !keys.contains("isReady") {
            // The snapshot above saw the operation not ready (a dependency
            // finished in between): announce the change rather than not at all.
            announceReadinessChangedLate()
        }
        if !keys.isEmpty { notifyDidChange(keys.reversed()) }
        unready.report(for: self)
    }

    /// The common edit, nobody watching: no cycle check, not a
    /// self-dependency, and no observer when it began. The general path
    /// without its announcements; an observer that registers meanwhile hears
    /// the readiness change late, as there.
    private func addUnwatchedDependency(_ dependency: Operation, _ getter: DependencyGetter) {
        var unready = ReadinessLoss()
        let lostReadiness = Operation.withStateLocks(self, dependency) { state, dependencyState in
            linkLocked(dependency, getter, &state, &dependencyState, &unready)
        }
        if lostReadiness, loadState().isObserved { announceReadinessChangedLate() }
        unready.report(for: self)
    }

    /// Adds the edge to both lists (unless it exists) and counts it while
    /// `dependency` is unfinished (by its state, and by its overridden
    /// getter, read before locking) and this operation has not started.
    /// Returns whether this operation stopped being ready. Call with both
    /// operations' locks held; `dependency` is not this operation.
    @inline(__always)
    private func linkLocked(
        _ dependency: Operation,
        _ getter: DependencyGetter,
        _ state: inout OperationState,
        _ dependencyState: inout OperationState,
        _ unready: inout ReadinessLoss
    ) -> Bool {
        guard !isDuplicateLocked(dependency, getter, state: state, dependencyState: dependencyState) else { return false }
        storedDependencies.append(dependency)
        dependencyState.isDependedOn = true
        let wasReady = state.isBaseReady
        guard !dependencyState.isFinished, !getter.saysFinished, state.addUnfinishedDependency() else { return false }
        dependency.storedDependents.append(self)
        guard wasReady else { return false }
        // Only a queued operation has a queue to tell.
        if state.isEnqueued { unready.record(&state, of: self) }
        return !state.isBaseReady
    }

    /// Announces an `isReady` change that the snapshot taken before an edit
    /// or a dependency's finish did not predict (another thread changed the
    /// count in between): both halves after the fact (before the pending
    /// `dependencies` did-change, if any, so that it stays nested).
    final func announceReadinessChangedLate() {
        notifyWillChange(["isReady"])
        notifyDidChange(["isReady"])
    }

    /// Reports the dependency that would close `cycle` (the edge was not
    /// added). Call with no lock held: the report runs the misuse handler.
    private func reportCycle(_ cycle: [Operation]) {
        let members = cycle.map(\.misuseSubject)
        OperationMisuse.report(
            .dependencyCycle,
            subject: .operation(self),
            "was given a dependency that closes a cycle: \(members.joined(separator: " → ")). None of these operations could start unless one is cancelled; the dependency was not added (OperationMisuse.reportsDependencyCycles is on).",
            cycle: members
        )
    }

    /// A ready queued operation was given an unfinished dependency: what
    /// its queue and the instruments are told once the locks are released.
    struct ReadinessLoss {
        private var queue: OperationQueue?
        private var time: OperationInstrumentation.Stamp?

        /// Records the edit. Call with the operation's lock held, right
        /// after the change, so that the time orders it among the
        /// operation's other readiness changes.
        mutating func record(_ state: inout OperationState, of operation: Operation) {
            // Only an operation in a queue: before it is added, its readiness
            // is read when it is added.
            queue = operation.queueForNews(state)
            // The queue read an `isReady` override before this edge counted:
            // it must not take the operation to start on that reading. The
            // re-read that `report(for:)` requests clears the mark.
            if queue != nil, operation.overrides(.isReady) { state.isReadinessStale = true }
            // A cancelled operation stays ready (probe 12): the instruments
            // hear of a loss only when the base readiness fell. A queue
            // re-reads an `isReady` override either way, as Foundation's
            // does on the notification every `addDependency` posts.
            if queue != nil, !state.isBaseReady { time = .readinessChange(of: state) }
        }

        /// Tells the queue or the instruments. Call with no lock held.
        @inline(__always)
        func report(for operation: Operation) {
            guard let queue else { return }
            reportLoss(to: queue, of: operation)
        }

        private func reportLoss(to queue: OperationQueue, of operation: Operation) {
            if operation.overrides(.isReady) {
                // Readiness is user code: the queue re-reads it (and tells
                // the instruments if it changed), as Foundation's queue does
                // on the `isReady` notification that `addDependency` posts.
                queue.memberReadinessMayHaveChanged(operation)
            } else if let time {
                OperationInstrumentation.emit(.notReady, operation, queue: queue, at: time.time)
            }
        }
    }

    final func performRemoveDependency(_ dependency: Operation) {
        let observed = loadState().isObserved
        var keys: [String] = []
        var announcing: EdgeEdit?
        defer { announcing?.end() }
        if observed {
            guard withStateLock({ _ in storedDependencies.contains(dependency) || hasWeakDependencyLocked(dependency) }) else { return }
            announcing = EdgeEdit.begin(self, dependency, adding: false)
            guard announcing != nil else { return }
            let state = loadState()
            let mayBecomeReady = !state.isBaseReady && state.countsDependencies && state.unfinishedDependencies == 1
            keys = mayBecomeReady ? ["dependencies", "isReady"] : ["dependencies"]
            notifyWillChange(keys)
        }
        var removed: Operation?
        var becameReady = false
        var queue: OperationQueue?
        var readyAt: OperationInstrumentation.Stamp?
        func detach(_ state: inout OperationState, counted: Bool) {
            if counted, state.removeUnfinishedDependency() {
                becameReady = true
                queue = queueForNews(state)
                readyAt = .readinessChange(of: state)
            }
        }
        if dependency === self {
            withStateLock { state in
                guard storedDependencies.remove(self) else { return }
                removed = self
                let counted = state.hasSelfDependency
                state.hasSelfDependency = false
                state.hasUncountedSelfDependency = false
                detach(&state, counted: counted)
            }
        } else {
            Operation.withStateLocks(self, dependency) { state, _ in
                guard storedDependencies.remove(dependency) else {
                    // An edge weakened when it closed a cycle of finished
                    // operations (`FinishedCycles.swift`) counts for nothing.
                    _ = removeWeakDependencyLocked(dependency)
                    return
                }
                removed = dependency
                detach(&state, counted: dependency.storedDependents.remove(self))
            }
        }
        if becameReady, !keys.contains("isReady"), loadState().isObserved {
            // The snapshot above did not predict it (another edit or finish
            // ran in between): announce it now rather than not at all.
            announceReadinessChangedLate()
        }
        if !keys.isEmpty {
            PendingAdmission.whileAnnouncing(self, readyIn: becameReady ? queue : nil) { notifyDidChange(keys.reversed()) }
        }
        withExtendedLifetime(removed) {}
        // An `isReady` override is reported by the queue, when it re-reads it.
        if let readyAt, !overrides(.isReady) { OperationInstrumentation.emit(.ready, self, queue: queue, at: readyAt.time) }
        if becameReady { queue?.memberReadinessMayHaveChanged(self) }
    }

    /// An observed dependency edit between its will-change and its end, on
    /// the calling thread. An observer told of it (with `.prior`, before the
    /// edge changed) that makes the same edit again would otherwise find the
    /// edge as it was, announce it again, and so recurse until the stack
    /// overflows (probe 53): that nested edit is already under way, and
    /// returns at once.
    struct EdgeEdit: Equatable {
        private let dependent: ObjectIdentifier
        private let dependency: ObjectIdentifier
        private let adding: Bool

        /// Records the edit on this thread; nil if the same edit is already
        /// being announced there.
        static func begin(_ dependent: Operation, _ dependency: Operation, adding: Bool) -> EdgeEdit? {
            let edit = EdgeEdit(dependent: ObjectIdentifier(dependent), dependency: ObjectIdentifier(dependency), adding: adding)
            return ThreadContext.withCurrent { context -> EdgeEdit? in
                guard !context.announcedEdgeEdits.contains(edit) else { return nil }
                context.announcedEdgeEdits.append(edit)
                return edit
            }
        }

        /// The edit has ended.
        func end() {
            ThreadContext.withCurrent { context in
                if let index = context.announcedEdgeEdits.lastIndex(of: self) { context.announcedEdgeEdits.remove(at: index) }
            }
        }
    }

    /// Removes `dependent` from this operation's dependents list, if it is
    /// there, under this operation's lock (see the rule at the top).
    final func removeDependent(_ dependent: Operation) {
        withStateLock { _ in _ = storedDependents.remove(dependent) }
    }

    /// Whether the edge exists, checked on the shorter list. Call with both
    /// operations' locks held.
    ///
    /// - Complexity: O(min(a, b)), where a is this operation's number of
    ///   dependencies and b the dependency's number of dependents, so that
    ///   neither fan-in nor fan-out graphs are quadratic to build. While this
    ///   operation accepts dependencies, an edge to an unfinished dependency
    ///   counts and is in both lists, so either can answer (unless the
    ///   dependency's getter said it had finished, see `DependencyGetter`);
    ///   otherwise only this operation's list is sure to hold it.
    private func isDuplicateLocked(_ dependency: Operation, _ getter: DependencyGetter, state: OperationState, dependencyState: OperationState) -> Bool {
        let ownCount = storedDependencies.count
        if ownCount == 0 { return state.isFinished && hasWeakDependencyLocked(dependency) }
        // For an unfinished operation, the dependents list holds exactly its
        // counted edges: not those a getter that overrides `isFinished` kept
        // out, whatever it says now (finished dependents may be listed too).
        if dependency !== self, !dependencyState.isFinished, !getter.overrides, state.acceptsDependencies,
           dependency.storedDependents.count <= ownCount {
            return dependency.storedDependents.contains(self)
        }
        return storedDependencies.contains(dependency) || (state.isFinished && hasWeakDependencyLocked(dependency))
    }

    // MARK: A dependency finished

    /// What a finished dependency's release means for its dependent's queue.
    enum ReadinessNews {
        /// Nothing to do.
        case none
        /// The dependent became ready and belongs to the caller's queue.
        case readyInCallerQueue
        /// The dependent became ready and belongs to this queue (retained).
        case ready(OperationQueue)
        /// The dependent had already finished, ahead of this dependency: the
        /// edge may close a cycle (`FinishedCycles.swift`).
        case dependentFinished
    }

    /// One of this operation's counted dependencies finished.
    final func dependencyDidFinish(_ dependency: Operation, callerQueue: OperationQueue?) -> ReadinessNews {
        // Not the last one, and nothing watches: one compare-and-swap.
        if tryFastDependencyFinished() { return .none }
        // It finished ahead of the dependency and stayed in its list
        // (`isListedAhead`): there is nothing left to count, and the edge
        // may close a cycle.
        if loadState().isFinished { return .dependentFinished }
        // A failure policy cancels before the operation can become ready, so
        // that a queue never starts it.
        if loadState().hasFailurePolicy { applyFailurePolicy(after: [dependency]) }
        // Observed, and not the last one: decided and done under the lock,
        // with nothing to announce. Deciding from a snapshot taken before the
        // lock let two dependencies finishing at once both see two remaining:
        // neither announced in time, and the change was told late, from
        // ready to ready, instead of from not ready to ready.
        if loadState().isObserved, withStateLock({ state -> Bool in
            guard state.unfinishedDependencies >= 2 else { return false }
            _ = state.removeUnfinishedDependency()
            return true
        }) {
            return .none
        }
        let snapshot = loadState()
        let announce = snapshot.isObserved && snapshot.unfinishedDependencies == 1 && !snapshot.isCancelled
            && snapshot.countsDependencies
        if announce { notifyWillChange(["isReady"]) }
        var news = ReadinessNews.none
        var becameReady = false
        var readyAt: OperationInstrumentation.Stamp?
        // Read before the lock, so that the closure below compares
        // addresses and holds no reference to the caller's queue across a
        // call (which would retain and release it on every finish).
        let callerIdentity = callerQueue.map { Unmanaged.passUnretained($0).toOpaque() }
        let customReadiness = overrides(.isReady)
        withStateLock { state in
            guard state.removeUnfinishedDependency() else { return }
            becameReady = true
            // Taken under the lock: the times order this operation's
            // readiness changes as they happened.
            readyAt = .readinessChange(of: state)
            guard state.isEnqueued, !state.isRetired, let owner = membership else { return }
            // Whether readiness is user code comes from the class, not from
            // `queueLink`: that record belongs to the queue and is written
            // under the queue's lock, which this thread does not hold
            // (ThreadSanitizer found the race in a soak).
            if let callerIdentity, owner.toOpaque() == callerIdentity, !customReadiness {
                news = .readyInCallerQueue
            } else {
                // The queue is alive while this operation is a member (checked
                // under this lock); the strong reference keeps it so after.
                news = .ready(owner.takeUnretainedValue())
            }
        }
        if announce {
            let pendingIn: OperationQueue? = switch news {
            case .ready(let owner): owner
            case .readyInCallerQueue: callerQueue
            case .none, .dependentFinished: nil
            }
            // Told inside the finish of `dependency`, which this thread
            // runs: a wait there for it returns at once, as from its own
            // observers, since its `isFinished` already reads true (probe
            // 57: the wait was for its retirement, which only this thread
            // could complete, after the observers).
            dependency.withThreadContext {
                PendingAdmission.whileAnnouncing(self, readyIn: pendingIn, after: dependency) { notifyDidChange(["isReady"]) }
            }
        } else if becameReady, loadState().isObserved {
            // Another dependency finished between the snapshot above and the
            // lock, so the snapshot did not predict the change: announce it
            // now rather than not at all.
            announceReadinessChangedLate()
        }
        if becameReady, case .none = news, customReadiness {
            // In no queue, nothing else asks: read the override now, as
            // Foundation does when an operation's last dependency finishes.
            // Such getters may act on being asked (the "Advanced
            // NSOperations" pattern starts evaluating conditions there); a
            // queue re-reads it itself (`memberReadinessMayHaveChanged`).
            _ = isReady
        }
        if becameReady, TraceRecorder.isActive { TraceRecorder.shared.record(.ready, self, queue: nil) }
        // An `isReady` override is reported by the queue, when it re-reads it.
        if let readyAt, !customReadiness {
            let queue: OperationQueue? = switch news {
            case .none: nil
            case .readyInCallerQueue: callerQueue
            case .ready(let owner): owner
            case .dependentFinished: nil
            }
            OperationInstrumentation.emit(.ready, self, queue: queue, at: readyAt.time)
        }
        return news
    }

    /// The owning queue, retained, if the operation still belongs to it.
    /// Call with the lock bit held.
    final func queueForNews(_ state: OperationState) -> OperationQueue? {
        guard state.isEnqueued, !state.isRetired else { return nil }
        return membership?.takeUnretainedValue()
    }

    // MARK: Release

    /// Called from `deinit`: leaves the dependents lists that still hold this
    /// operation, then releases the dependency graph behind it iteratively.
    ///
    /// A long chain released recursively (each operation freeing its
    /// dependency in its `deinit`) would overflow the stack at around 100k
    /// links. Instead, each dependency that only this walk still holds gives
    /// up its own dependencies to the walk before it is released, so every
    /// `deinit` along the chain finds nothing left to release.
    final func releaseEdgesOnDeinit() {
        guard !storedDependencies.isEmpty || extras != nil else { return }
        var current = takeEdgesForRelease()
        var pending: [OperationList] = []
        while true {
            switch current {
            case .empty:
                guard let next = pending.popLast() else { return }
                current = next
            case .one(var operation):
                current = .empty
                if isKnownUniquelyReferenced(&operation) {
                    current = operation.takeEdgesForRelease()
                }
            case .many(var list):
                current = .empty
                while var operation = list.popLast() {
                    if isKnownUniquelyReferenced(&operation) {
                        pending.append(operation.takeEdgesForRelease())
                    }
                }
            }
        }
    }

    /// Leaves every dependents list that holds this operation and returns
    /// its dependencies (and anything else it retains that may be a long
    /// chain of operations), emptying them. Called only when nothing but the
    /// caller references the operation.
    private func takeEdgesForRelease() -> OperationList {
        var (dependencies, counted, errors) = withStateLock { state -> (OperationList, Bool, [any Error]) in
            // Still in dependents lists: counted, or left there at its finish.
            let counted = state.unfinishedDependencies > 0 || state.isListedAhead
            state.clearDependencies()
            return (storedDependencies.take(), counted, extras?.takeErrors() ?? [])
        }
        if counted {
            dependencies.forEach { dependency in
                guard dependency !== self else { return }
                dependency.removeDependent(self)
            }
        }
        var released = dependencies.appending(contentsOf: releasableOperations())
        // A failure policy's errors name the dependency that failed, whose own
        // failure names the one before it: a chain as long as the pipeline.
        // The walk holds each named operation before the error that names it
        // is released, so that releasing the error frees no operation here.
        for case let reason as DependencyError in errors { released.append(reason.dependency) }
        errors.removeAll()
        return released
    }

}

/// What a dependency's overridden `isFinished` said when an edge to it was
/// being added (read before any lock: it is user code).
struct DependencyGetter {
    /// Whether the dependency's class overrides `isFinished`.
    let overrides: Bool
    /// Whether that getter returned true.
    let saysFinished: Bool

    @inline(__always)
    init(_ dependency: Operation, of dependent: Operation) {
        overrides = dependency !== dependent && dependency.overrides(.isFinished)
        saysFinished = overrides && dependency.isFinished
    }
}
