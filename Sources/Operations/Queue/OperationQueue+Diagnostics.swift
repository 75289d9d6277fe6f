extension OperationQueue {
    /// A report of the queue's state, for when something seems stuck: its
    /// settings and, for each unfinished operation in add order, its state
    /// and why it is not running yet, followed to the root cause (a
    /// dependency in no queue, a suspended queue, a dependency cycle, a full
    /// set of slots, an `isReady` override).
    ///
    /// The report is a snapshot; operations may change while it is built.
    /// Print it (its `description` is a multi-line text) or inspect its
    /// fields.
    public func diagnostics() -> Diagnostics {
        let (members, suspended, width, executing, ready, held, limit, started, barriers) = lock.withLock {
            let members = state.operations
            return (members, state.isSuspended, state.width, state.executing, state.readyCount, state.heldCount, state.pendingLimit,
                    Set(state.slotHolders.map(ObjectIdentifier.init)),
                    Set(members.filter { $0.queueLink.has(QueueLink.Flags.barrier) }.map(ObjectIdentifier.init)))
        }
        let summary = Diagnostics.QueueSummary(
            subject: misuseSubject,
            operationCount: members.count,
            executing: executing,
            ready: ready,
            heldBehindBarriers: held,
            maxConcurrentOperationCount: width,
            isSuspended: suspended,
            pendingLimit: limit
        )
        let cycles = DependencyGraph.cycles(reachableFrom: members)
        // `members` is in add order: a barrier waits for every member before
        // it. The oldest are named (a bounded list: a hang report builds
        // this for queues of any size).
        let reports = members.enumerated().map { index, operation in
            Diagnostics.OperationReport(
                operation, queue: self, summary: summary, cycles: cycles,
                startedByQueue: started.contains(ObjectIdentifier(operation)),
                barrierWaitsFor: barriers.contains(ObjectIdentifier(operation)) ? Array(members[..<min(index, 64)]) : []
            )
        }
        return Diagnostics(
            queue: summary,
            operations: reports,
            cycles: cycles.map { $0.map(\.misuseSubject) },
            pool: WorkerPool.shared.snapshotDescriptionWithoutLock
        )
    }

    /// The state of a queue and its operations (see ``diagnostics()``).
    public struct Diagnostics: Sendable, CustomStringConvertible {
        /// The queue's settings and counts.
        public struct QueueSummary: Sendable {
            /// `OperationQueue "name"`.
            public let subject: String
            /// Unfinished operations.
            public let operationCount: Int
            /// Operations holding a slot.
            public let executing: Int
            /// Operations ready and waiting for a slot.
            public let ready: Int
            /// Ready operations held back by an unfinished barrier.
            public let heldBehindBarriers: Int
            /// The queue's `maxConcurrentOperationCount`.
            public let maxConcurrentOperationCount: Int
            /// Whether the queue is suspended.
            public let isSuspended: Bool
            /// The pending limit, if any.
            public let pendingLimit: Int?
        }

        /// Why an operation is not running (yet), or what it waits for.
        public enum Reason: Sendable, Hashable, CustomStringConvertible {
            /// It waits for these unfinished dependencies.
            case dependencies([String])
            /// Following its first unfinished dependency leads to this
            /// operation, which is itself not waiting for a dependency;
            /// `state` says why that one is not done.
            case root(String, state: String)
            /// A dependency is in no queue: it runs only when someone calls
            /// its `start()`.
            case dependencyInNoQueue(String)
            /// It is on a dependency cycle (each depends on the next); it
            /// can start only if one of them is cancelled.
            case cycle([String])
            /// It waits behind a barrier added before it.
            case barrier
            /// It is a barrier (``OperationQueue/addBarrierBlock(_:)``) and
            /// waits for the unfinished operations added before it: the
            /// oldest of them, up to 64.
            case barrierWaitsFor([String])
            /// The queue is suspended.
            case queueSuspended
            /// It is ready and waits for a slot: `executing` of `limit`.
            case waitsForSlot(executing: Int, limit: Int)
            /// Its dependencies have finished, but its `isReady` override
            /// has not read true at any announcement its queue heard: it
            /// returns false, or it returns true and the change was never
            /// announced (`didChangeValue(forKey: "isReady")`, or of a key
            /// that `isReady` depends on). The queue reads the getter only
            /// when told, as Foundation's does.
            case readinessOverride
            /// It is executing asynchronously and waits for its own finish.
            case asynchronousFinish
            /// Its body finished, but its `isFinished` override still
            /// returns false.
            case finishNotReported
            /// Its `isFinished` override returns true, but the change was
            /// never announced (`didChangeValue(forKey: "isFinished")`, or of
            /// a key that `isFinished` depends on): the queue reads the
            /// getter only when told, as Foundation's does, so the operation
            /// stays in its queue.
            case finishNotAnnounced

            /// A short phrase.
            public var description: String {
                switch self {
                case .dependencies(let names):
                    let shown = names.prefix(5).joined(separator: ", ")
                    return "waits for " + shown + (names.count > 5 ? " and \(names.count - 5) more" : "")
                case .root(let name, let state): return "root: \(name) \(state)"
                case .dependencyInNoQueue(let name): return "\(name) is in no queue (it runs only when someone calls start())"
                case .cycle(let names): return "cycle: " + names.joined(separator: " → ")
                case .barrier: return "waits behind a barrier"
                case .barrierWaitsFor(let names):
                    let shown = names.prefix(5).joined(separator: ", ")
                    let more = names.count >= 64 ? " and more" : names.count > 5 ? " and \(names.count - 5) more" : ""
                    return "barrier: waits for the operations added before it: " + shown + more
                case .queueSuspended: return "ready, queue suspended"
                case .waitsForSlot(let executing, let limit): return "ready, waits for a slot: \(executing) of \(limit) executing"
                case .readinessOverride: return "its isReady override has not read true when announced (the queue re-reads it only after an isReady announcement)"
                case .asynchronousFinish: return "asynchronous: waits for its finish"
                case .finishNotReported: return "its body finished; its isFinished override still returns false"
                case .finishNotAnnounced: return "its isFinished override returns true, but no isFinished announcement was heard (didChangeValue(forKey: \"isFinished\")): the queue re-reads the getter only when told"
                }
            }
        }

        /// One operation of the queue.
        public struct OperationReport: Sendable, CustomStringConvertible {
            /// `Type "name" (0x…)`.
            public let subject: String
            /// pending, executing, body finished, finished or retired.
            public let phase: String
            /// Whether it is cancelled (as its class reports it).
            public let isCancelled: Bool
            /// Why it is not running, or what it waits for, most direct first.
            public let reasons: [Reason]

            /// `startedByQueue`: its queue has called its `start()` and it
            /// holds a slot (for a class that overrides `start()`, the only
            /// sign that it is executing).
            /// `barrierWaitsFor`: for a barrier, the unfinished operations
            /// added before it.
            init(
                _ operation: Operation, queue: OperationQueue?, summary: QueueSummary? = nil, cycles: [[Operation]] = [],
                startedByQueue: Bool = false, barrierWaitsFor earlier: [Operation] = []
            ) {
                let state = operation.loadState()
                subject = operation.misuseSubject
                // A class with its own `start()` never sets the base state:
                // once its queue started it, it is executing, not pending.
                let ownStart = startedByQueue && state.phase == .pending
                phase = ownStart ? OperationState.Phase.executing.rawValue : state.phase.rawValue
                isCancelled = state.isCancelled
                let reasons = ownStart
                    ? [.asynchronousFinish]
                    : Self.reasons(for: operation, state: state, summary: summary, cycles: cycles, earlier: earlier)
                // A finish set without an announcement (probe 46: the report
                // said only that it waits for its finish). The getter is
                // user code, read with no lock held.
                let executing = ownStart || state.phase == .executing
                if executing, !state.isFinished, operation.overrides(.isFinished), operation.isFinished {
                    self.reasons = [.finishNotAnnounced]
                } else {
                    self.reasons = reasons
                }
            }

            private static func reasons(
                for operation: Operation, state: OperationState, summary: QueueSummary?, cycles: [[Operation]], earlier: [Operation]
            ) -> [Reason] {
                switch state.phase {
                case .executing:
                    return operation.isAsynchronous ? [.asynchronousFinish] : []
                case .bodyFinished:
                    return [.finishNotReported]
                case .finished, .retired:
                    return []
                case .pending:
                    break
                }
                if let cycle = cycles.first(where: { $0.contains { $0 === operation } }) {
                    return [.cycle(cycle.map(\.misuseSubject))]
                }
                let waiting = operation.unfinishedDependencies()
                if !waiting.isEmpty {
                    var result: [Reason] = [.dependencies(waiting.map(\.misuseSubject))]
                    for dependency in waiting where dependency.owningQueueForAnalysis() == nil && !dependency.loadState().hasBaseStarted {
                        result.append(.dependencyInNoQueue(dependency.misuseSubject))
                    }
                    if let root = rootCause(from: waiting[0]) { result.append(root) }
                    return result
                }
                guard let summary else { return [] }
                if state.isBaseReady && !operation.reportedReadyForDiagnostics {
                    return [.readinessOverride]
                }
                if summary.isSuspended { return [.queueSuspended] }
                if !earlier.isEmpty { return [.barrierWaitsFor(earlier.map(\.misuseSubject))] }
                if summary.heldBehindBarriers > 0, operation.isHeldBehindBarrier { return [.barrier] }
                let limit = summary.maxConcurrentOperationCount
                return [.waitsForSlot(executing: summary.executing, limit: limit < 0 ? WorkerPool.shared.targetConcurrency : limit)]
            }

            /// Follows first unfinished dependencies to an operation that
            /// waits for none, and says why that one is not done.
            private static func rootCause(from start: Operation) -> Reason? {
                var current = start
                var seen: Set<ObjectIdentifier> = []
                while seen.insert(ObjectIdentifier(current)).inserted {
                    guard let next = current.unfinishedDependencies().first else { break }
                    current = next
                }
                guard current !== start || current.unfinishedDependencies().isEmpty else { return nil }
                let state = current.loadState()
                let why: String
                switch state.phase {
                case .executing: why = "is executing"
                case .bodyFinished: why = "finished its body; its isFinished override still returns false"
                case .finished, .retired: why = "is finishing"
                case .pending:
                    if let queue = current.owningQueueForAnalysis() {
                        let suspended = queue.lock.withLock { queue.state.isSuspended }
                        why = suspended ? "is pending in \(queue.misuseSubject), which is suspended" : "is pending in \(queue.misuseSubject)"
                    } else {
                        why = "is in no queue (it runs only when someone calls start())"
                    }
                }
                return .root(current.misuseSubject, state: why)
            }

            /// One line: the operation, its state and why.
            public var description: String {
                var line = "\(subject): \(phase)\(isCancelled ? ", cancelled" : "")"
                if !reasons.isEmpty { line += "; " + reasons.map(\.description).joined(separator: "; ") }
                return line
            }
        }

        /// The queue.
        public let queue: QueueSummary
        /// Its unfinished operations, in add order.
        public let operations: [OperationReport]
        /// Dependency cycles among its operations (and what they wait for),
        /// each as `[a, b, …, a]`.
        public let cycles: [[String]]
        /// The shared worker pool's counters.
        public let pool: String

        /// The report as text, one line per operation.
        public var description: String {
            var lines: [String] = []
            let width = queue.maxConcurrentOperationCount
            lines.append("\(queue.subject): \(queue.operationCount) unfinished, \(queue.executing) executing, \(queue.ready) ready"
                + (queue.heldBehindBarriers > 0 ? ", \(queue.heldBehindBarriers) held behind barriers" : "")
                + ", maxConcurrentOperationCount \(width)"
                + (queue.pendingLimit.map { ", pending limit \($0)" } ?? "")
                + (queue.isSuspended ? ", SUSPENDED (nothing starts until isSuspended = false)" : ""))
            for cycle in cycles {
                lines.append("  cycle: " + cycle.joined(separator: " → ") + " (each depends on the next; cancel one to break it)")
            }
            for operation in operations {
                lines.append("  " + operation.description)
            }
            lines.append("  pool: \(pool)")
            return lines.joined(separator: "\n")
        }

        /// Whether the text report contains `text`.
        public func contains(_ text: String) -> Bool {
            description.contains(text)
        }
    }
}

extension Operation {
    /// Whether the operation counts as ready, for diagnostics: for a class
    /// that overrides `isReady`, as its queue last applied the getter (a
    /// getter that turned true unannounced still counts as not ready, as it
    /// does for starting), or the getter itself in no queue (user code);
    /// otherwise the base state.
    var reportedReadyForDiagnostics: Bool {
        guard overrides(.isReady) else { return loadState().isBaseReady }
        guard let queue = owningQueueForAnalysis() else { return isReady }
        return queue.lock.withLock {
            queueLink.lane != QueueLink.noLane || queueLink.has(QueueLink.Flags.dispatched) || !queueLink.has(QueueLink.Flags.linked)
        }
    }

    /// Whether the operation sits in its queue's barrier-held list.
    var isHeldBehindBarrier: Bool {
        guard let queue = owningQueueForAnalysis() else { return false }
        return queue.lock.withLock { queueLink.lane == QueueLink.heldLane }
    }
}

extension WorkerPool {
    /// The pool's counters, read without taking its lock (approximate).
    var snapshotDescriptionWithoutLock: String {
        "queued jobs \(queuedJobCount.load(ordering: .relaxed)), spare capacity \(spareCapacity.load(ordering: .relaxed))"
    }
}

extension OperationQueue {
    /// The unfinished operations, for the wait analysis.
    final func analysisOperations() -> [Operation] {
        lock.withLock { state.operations }
    }

    /// What the wait analysis needs to know about a queued operation.
    struct AnalysisSnapshot {
        var dispatched: Bool
        var suspended: Bool
        var barrier: Operation?
        /// For a barrier: the operations added before it, all of which it needs.
        var earlier: [Operation]
        var needsSlot: Bool
        var slotsFull: Bool
        var slotHolders: [Operation]
    }

    /// A snapshot of `operation`'s place in this queue, or nil if it is not
    /// linked here.
    final func analysisSnapshot(of operation: Operation) -> AnalysisSnapshot? {
        lock.withLock { () -> AnalysisSnapshot? in
            let link = operation.queueLink
            guard link.has(QueueLink.Flags.linked) else { return nil }
            let cancelledCheap = operation.loadState().isCancelled && !link.has(QueueLink.Flags.customStart)
            let full = state.width >= 0 && state.usedSlots >= state.width
            return AnalysisSnapshot(
                dispatched: link.has(QueueLink.Flags.dispatched),
                suspended: state.isSuspended || state.width == 0,
                barrier: state.gate(of: operation)?.takeUnretainedValue(),
                earlier: link.has(QueueLink.Flags.barrier) ? state.operationsBefore(barrier: operation) : [],
                needsSlot: !cancelledCheap,
                slotsFull: full,
                slotHolders: full ? state.slotHolders : []
            )
        }
    }
}

extension OperationQueue {
    /// Verifies the queue's internal bookkeeping and the state of each of its
    /// operations, and returns a description of the first broken invariant,
    /// or nil. O(n); meant for tests and stress runs (the stress engine calls
    /// it after every step), not for production paths.
    public func _checkInvariants() -> String? {
        // The message names the queue or operation after the lock is
        // released: reading a name takes the queue's lock (and an
        // operation's `name` may be overridden).
        let found = lock.withLock { () -> (Operation?, String)? in
            if let problem = state.checkInvariants() { return (nil, problem) }
            for operation in state.operations {
                if let problem = operation.loadState().checkInvariants() { return (operation, problem) }
                if operation.loadState().isRetired { return (operation, "is retired but still linked") }
            }
            if state.isIdle, retainedSelf != nil { return (nil, "is idle but retains itself") }
            if !state.isIdle, retainedSelf == nil { return (nil, "holds work but does not retain itself") }
            return nil
        }
        guard let (operation, problem) = found else { return nil }
        return "\(operation?.misuseSubject ?? misuseSubject): \(problem)"
    }
}

extension OperationQueue {
    /// Numbers the next operations added from `sequence` (tests: crossing
    /// the point where add sequences wrap). Only for an empty queue.
    final func setNextAddSequence(_ sequence: UInt32) {
        lock.withLock { state.setNextSequence(sequence) }
    }

    /// Whether this queue has called `operation`'s `start()` and still holds
    /// it. Only for an operation this queue owns (or owned: a finished one
    /// is unlinked and never joins another queue).
    final func hasStarted(_ operation: Operation) -> Bool {
        lock.withLock {
            operation.queueLink.has(QueueLink.Flags.linked) && operation.queueLink.has(QueueLink.Flags.dispatched)
        }
    }
}
