import Operations

extension StressPlan.OperationSpec {
    /// Where an operation's ``StressPlan/OperationSpec/children`` are created
    /// and added from.
    public enum ChildSource: Sendable, Hashable, CaseIterable {
        /// From inside its work (body, first execution block, async work).
        case body
        /// From an `isExecuting` observer, when the operation begins executing.
        case executingObserver
        /// From its completion block, to its own queue (children of an
        /// operation started by hand go to a random queue).
        case completionBlock

        var fingerprintCode: Int {
            switch self {
            case .body: return 0
            case .executingObserver: return 1
            case .completionBlock: return 2
            }
        }
    }

    /// A misuse the driver commits on purpose, inside a scoped
    /// `OperationMisuse.withHandler` that counts the reports: exactly one
    /// report is expected, the call is refused, and the round still drains.
    public enum Misuse: Sendable, Hashable {
        /// Call `start()` by hand on the operation its queue owns.
        case startEnqueued
        /// Add the operation, already in its queue, to this other queue.
        case addToSecondQueue(Int)

        var fingerprintCode: Int {
            switch self {
            case .startEnqueued: return 0
            case .addToSecondQueue(let queue): return 1 + queue
            }
        }
    }
}

extension StressPlan {
    /// One episode on a `.limited` queue: the driver waits for the queue to
    /// drain, suspends it, sets a pending limit, fills it with ``accepted``
    /// (plain adds, which must not block), adds ``overflow`` in the ways
    /// each entry says, checks that the limit held, resumes the queue and
    /// checks that the waiting adds got in.
    public struct PendingEpisode: Sendable, Hashable {
        /// How an operation beyond the limit is added.
        public enum OverflowMode: Sendable, Hashable, CaseIterable {
            /// Synchronous `addOperation` under `.reject`: the operation must
            /// be cancelled and never run, and released like any other.
            case rejected
            /// `tryAddOperation` must return false and leave the operation
            /// untouched; it is added with `tryAddOperation` again once the
            /// queue has drained, which must then return true.
            case tryAdd
            /// Synchronous `addOperation` under `.block` on a helper thread:
            /// it must not return while the queue is full.
            case blockingAdd
            /// `await queue.addOperationWhenRoom(_:)` from a task: it must not
            /// return while the queue is full.
            case asyncAdd
        }

        /// An operation added beyond the limit.
        public struct Overflow: Sendable, Hashable {
            /// The operation.
            public var index: Int
            /// How it is added.
            public var mode: OverflowMode
        }

        /// The `.limited` queue.
        public var queue: Int
        /// The pending limit (the number of ``accepted`` operations).
        public var limit: Int
        /// The policy for synchronous adds.
        public var policy: PendingLimitPolicy
        /// Operations added while there is room.
        public var accepted: [Int]
        /// Operations added beyond the limit.
        public var overflow: [Overflow]

        func combine(into hash: inout Fingerprint) {
            hash.combine(queue)
            hash.combine(limit)
            hash.combine(policy == .block ? 1 : 2)
            hash.combine(accepted.count)
            for index in accepted { hash.combine(index) }
            hash.combine(overflow.count)
            for entry in overflow {
                hash.combine(entry.index)
                hash.combine(OverflowMode.allCases.firstIndex(of: entry.mode) ?? -1)
            }
        }
    }
}

extension PlanGenerator {
    /// Adds a pending-limit episode or a `queue.run` step now and then.
    /// Returns true if it added one.
    mutating func addFeatureSteps() -> Bool {
        let room = configuration.operations - operations.count
        if let limited = queues.first(where: { $0.role == .limited })?.index, room >= 8, random.chance(perMille: 8) {
            steps.append(.pending(makeEpisode(queue: limited)))
            return true
        }
        if room >= 1, random.chance(perMille: 10) {
            let queue = random.pick(generalQueues)
            let index = makeLoneOperation(kind: .queueRun, queue: queue)
            steps.append(.run(queue: queue, operation: index))
            return true
        }
        return false
    }

    private mutating func makeEpisode(queue: Int) -> StressPlan.PendingEpisode {
        let policy: PendingLimitPolicy = random.chance(perMille: 500) ? .block : .reject
        let limit = random.int(in: 1...4)
        let accepted = (0..<limit).map { _ in makeLoneOperation(kind: randomEpisodeKind(), queue: queue) }
        let modes: [StressPlan.PendingEpisode.OverflowMode] = policy == .reject
            ? [.rejected, .tryAdd, .asyncAdd]
            : [.blockingAdd, .tryAdd, .asyncAdd]
        let overflow = (0..<random.int(in: 1...3)).map { _ in
            StressPlan.PendingEpisode.Overflow(
                index: makeLoneOperation(kind: randomEpisodeKind(), queue: queue),
                mode: random.pick(modes)
            )
        }
        return StressPlan.PendingEpisode(queue: queue, limit: limit, policy: policy, accepted: accepted, overflow: overflow)
    }

    private mutating func randomEpisodeKind() -> StressPlan.OperationSpec.Kind {
        let roll = random.below(4)
        if roll == 0 { return .plain }
        if roll == 1 { return .blocks(random.int(in: 1...2)) }
        if roll == 2 { return .async(finishesElsewhere: random.chance(perMille: 500)) }
        return .result
    }

    /// An operation with no dependencies and no dependents, not counted
    /// among the driver's operations (nothing picks it as a dependency).
    private mutating func makeLoneOperation(kind: StressPlan.OperationSpec.Kind, queue: Int) -> Int {
        let index = operations.count
        operations.append(StressPlan.OperationSpec(
            index: index,
            kind: kind,
            placement: .queue(queue),
            origin: .driver,
            dependencies: [],
            priority: random.pick(Operation.QueuePriority.allCases),
            qualityOfService: random.pick(QualityOfService.allCases),
            work: random.below(120),
            cooperative: random.chance(perMille: 500),
            cancellation: .none,
            observesFinish: false,
            children: []
        ))
        return index
    }

    /// Now and then, an older queued driver operation for an `isFinished`
    /// observer of `index` to wait for (it cannot depend on `index`).
    ///
    /// A wait must not close a cycle of retirements. An operation retires
    /// after its observers and completion block have run, so its
    /// retirement waits for the retirement its waiting observer waits for,
    /// and for that of each operation its completion block starts by hand
    /// inline. `index`, if started inline, runs inside the completion block
    /// of one of its dependencies: its observer must not wait for an
    /// operation whose retirement may wait for one of them (seeds 920047
    /// and 920058: the observer of op 6575, started inline by op 6570's
    /// completion block, waited for op 6571, whose observer waited for op
    /// 6570). Edges only ever leave a new operation or enter it, so this
    /// check, made as each operation is planned, rules out every cycle.
    mutating func pickObserverWaitTarget(for index: Int) -> Int? {
        guard configuration.blockingObservers, random.chance(perMille: 20) else { return nil }
        var enclosing: Set<Int> = []
        if case .hand(inline: true) = operations[index].placement {
            enclosing = Set(operations[index].dependencies)
        }
        let candidates = driverIndices.suffix(32).filter { candidate in
            guard case .queue = operations[candidate].placement else { return false }
            return enclosing.isEmpty || !retirementMayWait(from: candidate, forAnyOf: enclosing)
        }
        return candidates.isEmpty ? nil : random.pick(candidates)
    }

    /// Whether the retirement of `start` may wait, through waiting
    /// observers and inline starts, for the retirement of one of `targets`.
    private func retirementMayWait(from start: Int, forAnyOf targets: Set<Int>) -> Bool {
        var seen: Set<Int> = []
        var stack = [start]
        while let current = stack.popLast() {
            if targets.contains(current) { return true }
            guard seen.insert(current).inserted else { continue }
            if let waited = operations[current].finishObserverWaitsFor { stack.append(waited) }
            stack.append(contentsOf: inlineDependents[current, default: []])
        }
        return false
    }

    mutating func randomChildSource() -> StressPlan.OperationSpec.ChildSource {
        let roll = random.below(4)
        if roll < 2 { return .body }
        return roll == 2 ? .executingObserver : .completionBlock
    }

    /// A child added from a completion block goes to its parent's queue.
    mutating func childQueue(parent: Int, source: StressPlan.OperationSpec.ChildSource) -> Int {
        if source == .completionBlock, case .queue(let queue) = operations[parent].placement { return queue }
        return random.pick(generalQueues)
    }

    /// Now and then, a deliberate misuse on a queued driver operation.
    mutating func planMisuse(_ index: Int) {
        guard case .queue(let queue) = operations[index].placement, random.chance(perMille: 8) else { return }
        let others = generalQueues.filter { $0 != queue }
        if others.isEmpty || random.chance(perMille: 500) {
            operations[index].misuse = .startEnqueued
        } else {
            operations[index].misuse = .addToSecondQueue(random.pick(others))
        }
    }
}
