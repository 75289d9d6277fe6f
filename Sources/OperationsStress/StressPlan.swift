import Operations

/// Everything a stress round does, generated from its configuration alone:
/// the queues and their roles, every operation (kind, placement,
/// dependencies, priority, quality of service, cancellation), and the
/// driver's steps (adds, batches, barriers, outside waits).
///
/// Generation is deterministic: the same configuration gives an equal plan
/// (and the same ``fingerprint``) on every run and platform.
///
/// Dependencies never form cycles: an operation depends only on operations
/// with a smaller index. Operations added by the driver depend only on
/// earlier operations added by the driver (which exist by then); an
/// operation added by another operation (a *child*) depends only on its
/// parent, on driver operations older than its parent and on earlier
/// siblings, all of which exist when the parent creates it.
public struct StressPlan: Sendable, Hashable {
    /// A queue of the round.
    public struct QueueSpec: Sendable, Hashable {
        /// What the queue is used to check.
        public enum Role: String, Sendable, Hashable, CaseIterable {
            /// `maxConcurrentOperationCount == 1`, never changed: at most one
            /// operation at a time.
            case serial
            /// A fixed width of 2 to 4.
            case fixedWidth
            /// A width changed while running (chaos), and `cancelAllOperations`.
            case elastic
            /// The default width (-1). Now and then also a target of
            /// `cancelAllOperations()`, so that barriers get cancelled.
            case unbounded
            /// A pending limit (`setPendingLimit`): only the driver's
            /// ``StressPlan/PendingEpisode``s add to it; never suspended by
            /// chaos, no barriers, no children.
            case limited
        }
        /// Position in ``StressPlan/queues``.
        public var index: Int
        /// The role.
        public var role: Role
        /// `maxConcurrentOperationCount` at the start (and end) of the round.
        public var initialWidth: Int
        /// Whether the chaos threads suspend and resume it.
        public var suspendable: Bool
        /// Whether the driver adds barrier blocks to it.
        public var takesBarriers: Bool
        /// Whether the chaos threads call `cancelAllOperations()` on it. A
        /// queue may take barriers too: a cancelled barrier skips its block
        /// but still orders the queue.
        public var cancelAllTarget: Bool
        /// The queue's quality of service.
        public var qualityOfService: QualityOfService
    }

    /// One operation of the round.
    public struct OperationSpec: Sendable, Hashable {
        /// The class of the operation.
        public enum Kind: Sendable, Hashable {
            /// An `Operation` subclass overriding `main()`.
            case plain
            /// A `BlockOperation` with this many execution blocks.
            case blocks(Int)
            /// An `AsyncOperation`; `finishesElsewhere`: `finish()` is called
            /// later from another thread, otherwise from inside its work.
            case async(finishesElsewhere: Bool)
            /// A `ResultOperation<Int, Never>` with an `async` body, whose
            /// typed result is checked.
            case result
            /// An `async` body run with `queue.run {}` from a task: no
            /// operation object in the engine's hands, no dependencies, no
            /// dependents; see ``StressPlan/Step/run(queue:operation:)``.
            case queueRun
        }
        /// Who runs the operation.
        public enum Placement: Sendable, Hashable {
            /// Added to the queue at this index.
            case queue(Int)
            /// Started by hand once its dependencies finished; `inline`: in
            /// the completion block of the last one, otherwise on another thread.
            case hand(inline: Bool)
        }
        /// Who creates and adds the operation.
        public enum Origin: Sendable, Hashable {
            /// The driver thread.
            case driver
            /// The operation at this index, from inside its work.
            case child(of: Int)
        }
        /// How the operation is cancelled on purpose (the chaos threads may
        /// also cancel any operation at any time).
        public enum Cancellation: Sendable, Hashable {
            /// Not on purpose.
            case none
            /// Cancelled before it is added to a queue (or started by hand).
            case beforeAdd
            /// Cancelled by the dependency at this index when that
            /// dependency's work begins, so certainly before this one starts.
            case byDependency(Int)
            /// Cancels itself during its work.
            case selfDuringWork
        }

        /// Position in ``StressPlan/operations`` (and the operation's name, `op <index>`).
        public var index: Int
        /// The class of the operation.
        public var kind: Kind
        /// Who runs it.
        public var placement: Placement
        /// Who creates and adds it.
        public var origin: Origin
        /// Indices of its dependencies, all smaller than ``index``.
        public var dependencies: [Int]
        /// Its `queuePriority` (the chaos threads may change it later).
        public var priority: Operation.QueuePriority
        /// Its `qualityOfService`.
        public var qualityOfService: QualityOfService
        /// Iterations of simulated work (a short arithmetic loop).
        public var work: Int
        /// Whether the work polls `isCancelled` and stops early.
        public var cooperative: Bool
        /// How it is cancelled on purpose.
        public var cancellation: Cancellation
        /// Whether it is observed (`observe(\.isFinished)`), to count the
        /// `isFinished` notifications.
        public var observesFinish: Bool
        /// Operations this one creates and adds (see ``childSource``).
        public var children: [Int]
        /// Where ``children`` are created and added from.
        public var childSource: ChildSource = .body
        /// An operation that an `isFinished` observer of this one waits for
        /// (bounded `waitUntilFinished(timeout:)`), from the finishing thread.
        public var finishObserverWaitsFor: Int?
        /// A misuse the driver commits on purpose right after adding it.
        public var misuse: Misuse?
    }

    /// One step of the driver thread, in order.
    public enum Step: Sendable, Hashable {
        /// Create the operation and add it to its queue (or arm it to be
        /// started by hand).
        case add(Int)
        /// Create the operations and add them with one `addOperations` call.
        case addBatch(queue: Int, operations: [Int])
        /// `addBarrierBlock` on the queue; the barrier's number.
        case barrier(queue: Int, id: Int)
        /// Wait (bounded) from outside for the operation.
        case waitForOperation(Int)
        /// Wait (bounded) from outside for the queue to drain.
        case waitForQueue(Int)
        /// Fill a `.limited` queue up to a pending limit and add more.
        case pending(PendingEpisode)
        /// `try await queue.run { … }` from a task, for a `.queueRun` operation.
        case run(queue: Int, operation: Int)
    }

    /// The seed the plan was generated from.
    public var seed: UInt64
    /// The queues, by index.
    public var queues: [QueueSpec]
    /// Every operation, by index.
    public var operations: [OperationSpec]
    /// The driver's steps, in order.
    public var steps: [Step]
    /// Barrier steps in the plan.
    public var barrierCount: Int

    /// Generates the plan of `configuration`.
    public init(configuration: StressConfiguration) {
        var generator = PlanGenerator(configuration: configuration)
        self = generator.generate()
    }

    init(seed: UInt64, queues: [QueueSpec], operations: [OperationSpec], steps: [Step], barrierCount: Int) {
        self.seed = seed
        self.queues = queues
        self.operations = operations
        self.steps = steps
        self.barrierCount = barrierCount
    }

    /// A stable hash of the whole plan, to show that a seed reproduces it.
    public var fingerprint: UInt64 {
        var hash = Fingerprint()
        hash.combine(seed)
        for queue in queues {
            hash.combine(queue.index)
            hash.combine(QueueSpec.Role.allCases.firstIndex(of: queue.role) ?? -1)
            hash.combine(queue.initialWidth)
            hash.combine(queue.suspendable ? 1 : 0)
            hash.combine(queue.takesBarriers ? 1 : 0)
            hash.combine(queue.cancelAllTarget ? 1 : 0)
            hash.combine(queue.qualityOfService.rawValue)
        }
        for op in operations {
            hash.combine(op.index)
            switch op.kind {
            case .plain: hash.combine(1)
            case .blocks(let count): hash.combine(2); hash.combine(count)
            case .async(let elsewhere): hash.combine(3); hash.combine(elsewhere ? 1 : 0)
            case .result: hash.combine(4)
            case .queueRun: hash.combine(5)
            }
            switch op.placement {
            case .queue(let queue): hash.combine(10); hash.combine(queue)
            case .hand(let inline): hash.combine(11); hash.combine(inline ? 1 : 0)
            }
            switch op.origin {
            case .driver: hash.combine(20)
            case .child(let parent): hash.combine(21); hash.combine(parent)
            }
            hash.combine(op.dependencies.count)
            for dependency in op.dependencies { hash.combine(dependency) }
            hash.combine(op.priority.rawValue)
            hash.combine(op.qualityOfService.rawValue)
            hash.combine(op.work)
            hash.combine(op.cooperative ? 1 : 0)
            switch op.cancellation {
            case .none: hash.combine(30)
            case .beforeAdd: hash.combine(31)
            case .byDependency(let gate): hash.combine(32); hash.combine(gate)
            case .selfDuringWork: hash.combine(33)
            }
            hash.combine(op.observesFinish ? 1 : 0)
            hash.combine(op.children.count)
            for child in op.children { hash.combine(child) }
            hash.combine(op.childSource.fingerprintCode)
            hash.combine(op.finishObserverWaitsFor ?? -1)
            hash.combine(op.misuse?.fingerprintCode ?? -1)
        }
        for step in steps {
            switch step {
            case .add(let index): hash.combine(40); hash.combine(index)
            case .addBatch(let queue, let indices):
                hash.combine(41); hash.combine(queue); hash.combine(indices.count)
                for index in indices { hash.combine(index) }
            case .barrier(let queue, let id): hash.combine(42); hash.combine(queue); hash.combine(id)
            case .waitForOperation(let index): hash.combine(43); hash.combine(index)
            case .waitForQueue(let queue): hash.combine(44); hash.combine(queue)
            case .pending(let episode): hash.combine(45); episode.combine(into: &hash)
            case .run(let queue, let index): hash.combine(46); hash.combine(queue); hash.combine(index)
            }
        }
        return hash.value
    }
}

/// Builds a ``StressPlan`` from one seeded stream.
struct PlanGenerator {
    let configuration: StressConfiguration
    var random: StressRandom
    var queues: [StressPlan.QueueSpec] = []
    var operations: [StressPlan.OperationSpec] = []
    var steps: [StressPlan.Step] = []
    /// Indices of the operations the driver adds, in order.
    var driverIndices: [Int] = []
    var handIndices: [Int] = []
    /// For each operation, the operations started by hand inline in its
    /// completion block (`.hand(inline: true)` operations that depend on
    /// it): its retirement may contain theirs.
    var inlineDependents: [Int: [Int]] = [:]
    var barrierCount = 0
    /// Queues that take ordinary operations (all but `.limited` ones).
    var generalQueues: [Int] = []

    /// Driver operations between two outside waits for an older operation,
    /// and how far back the waited-for operation is: keeps the number of
    /// unfinished operations bounded.
    static let throttleInterval = 128
    static let throttleDistance = 96

    init(configuration: StressConfiguration) {
        self.configuration = configuration
        random = StressRandom(seed: configuration.seed, stream: 1)
    }

    mutating func generate() -> StressPlan {
        makeQueues()
        let barrierQueues = configuration.barriers ? queues.filter(\.takesBarriers).map(\.index) : []
        var sinceThrottle = 0
        while operations.count < configuration.operations {
            if !barrierQueues.isEmpty, random.chance(perMille: 6) {
                steps.append(.barrier(queue: random.pick(barrierQueues), id: barrierCount))
                barrierCount += 1
            }
            if random.chance(perMille: 2) {
                steps.append(.waitForQueue(random.below(queues.count)))
            }
            if addFeatureSteps() { continue }
            if sinceThrottle >= Self.throttleInterval, driverIndices.count > Self.throttleDistance {
                sinceThrottle = 0
                steps.append(.waitForOperation(driverIndices[driverIndices.count - Self.throttleDistance]))
            }
            if random.chance(perMille: 60) {
                let queue = random.pick(generalQueues)
                var batch: [Int] = []
                for _ in 0..<random.int(in: 2...6) where operations.count < configuration.operations {
                    batch.append(makeDriverOperation(placement: .queue(queue)))
                }
                steps.append(.addBatch(queue: queue, operations: batch))
                sinceThrottle += batch.count
            } else {
                let placement: StressPlan.OperationSpec.Placement
                if random.chance(perMille: 40) {
                    placement = .hand(inline: false)
                } else {
                    placement = .queue(random.pick(generalQueues))
                }
                let index = makeDriverOperation(placement: placement)
                planMisuse(index)
                steps.append(.add(index))
                sinceThrottle += 1
            }
        }
        return StressPlan(
            seed: configuration.seed,
            queues: queues,
            operations: operations,
            steps: steps,
            barrierCount: barrierCount
        )
    }

    private mutating func makeQueues() {
        let roles = StressPlan.QueueSpec.Role.allCases
        let repeatable = roles.filter { $0 != .limited }
        for index in 0..<configuration.queues {
            // Only one limited queue, and never the only queue.
            let role = index < roles.count && (roles[index] != .limited || index > 0) ? roles[index] : random.pick(repeatable)
            let width: Int
            switch role {
            case .serial: width = 1
            case .fixedWidth: width = random.int(in: 2...4)
            case .elastic: width = 2
            case .unbounded: width = OperationQueue.defaultMaxConcurrentOperationCount
            case .limited: width = random.int(in: 1...3)
            }
            queues.append(StressPlan.QueueSpec(
                index: index,
                role: role,
                initialWidth: width,
                suspendable: role == .fixedWidth ? random.chance(perMille: 500) : role != .limited,
                takesBarriers: role != .elastic && role != .limited,
                cancelAllTarget: role == .elastic || (role == .unbounded && random.chance(perMille: 500)),
                qualityOfService: random.pick(QualityOfService.allCases)
            ))
            if role != .limited { generalQueues.append(index) }
        }
    }

    private mutating func randomKind() -> StressPlan.OperationSpec.Kind {
        let roll = random.below(100)
        if roll < 45 { return .plain }
        if roll < 60 { return .blocks(random.int(in: 1...3)) }
        if roll < 88 { return .async(finishesElsewhere: random.chance(perMille: 600)) }
        return .result
    }

    private mutating func dependencyCount() -> Int {
        let roll = random.below(100)
        if roll < 40 { return 0 }
        if roll < 70 { return 1 }
        if roll < 90 { return 2 }
        return 3
    }

    /// Picks up to `count` distinct driver operations, mostly recent ones.
    private mutating func pickDriverDependencies(_ count: Int) -> [Int] {
        var picked: [Int] = []
        guard !driverIndices.isEmpty else { return picked }
        if let hand = handIndices.last, random.chance(perMille: 150) { picked.append(hand) }
        var attempts = 0
        while picked.count < count, attempts < count * 4 {
            attempts += 1
            let position: Int
            if random.chance(perMille: 750) {
                let window = min(24, driverIndices.count)
                position = driverIndices.count - 1 - random.below(window)
            } else {
                position = random.below(driverIndices.count)
            }
            let candidate = driverIndices[position]
            if !picked.contains(candidate) { picked.append(candidate) }
        }
        return picked
    }

    private mutating func randomCancellation(
        kind: StressPlan.OperationSpec.Kind,
        dependencies: [Int]
    ) -> StressPlan.OperationSpec.Cancellation {
        let roll = random.below(1000)
        if roll < 30 { return .beforeAdd }
        if roll < 70, !dependencies.isEmpty { return .byDependency(random.pick(dependencies)) }
        if case .blocks = kind { return .none }
        if roll < 100 { return .selfDuringWork }
        return .none
    }

    mutating func makeDriverOperation(placement: StressPlan.OperationSpec.Placement) -> Int {
        let index = operations.count
        let kind = randomKind()
        let dependencies = pickDriverDependencies(dependencyCount())
        var placement = placement
        if case .hand = placement {
            // Inline starts happen in a dependency's completion block; allow
            // them only when no dependency is itself started by hand, which
            // bounds the nesting.
            let inline = !dependencies.isEmpty
                && !dependencies.contains(where: handIndices.contains)
                && random.chance(perMille: 500)
            placement = .hand(inline: inline)
            handIndices.append(index)
        }
        operations.append(StressPlan.OperationSpec(
            index: index,
            kind: kind,
            placement: placement,
            origin: .driver,
            dependencies: dependencies,
            priority: random.pick(Operation.QueuePriority.allCases),
            qualityOfService: random.pick(QualityOfService.allCases),
            work: random.below(160),
            cooperative: random.chance(perMille: 500),
            cancellation: randomCancellation(kind: kind, dependencies: dependencies),
            observesFinish: random.chance(perMille: 50),
            children: []
        ))
        operations[index].finishObserverWaitsFor = pickObserverWaitTarget(for: index)
        if case .hand(inline: true) = placement {
            for dependency in dependencies { inlineDependents[dependency, default: []].append(index) }
        }
        driverIndices.append(index)
        if random.chance(perMille: 50) {
            let source = randomChildSource()
            var children: [Int] = []
            for _ in 0..<random.int(in: 1...3) where operations.count < configuration.operations {
                children.append(makeChild(parent: index, siblings: children, source: source))
            }
            operations[index].children = children
            operations[index].childSource = source
        }
        return index
    }

    private mutating func makeChild(parent: Int, siblings: [Int], source: StressPlan.OperationSpec.ChildSource) -> Int {
        let index = operations.count
        let kind: StressPlan.OperationSpec.Kind = random.chance(perMille: 600) ? .plain : .async(finishesElsewhere: random.chance(perMille: 500))
        // Candidates that exist when the parent runs: the parent, earlier
        // siblings, and driver operations older than the parent.
        var dependencies: [Int] = []
        if random.chance(perMille: 500) { dependencies.append(parent) }
        if let sibling = siblings.last, random.chance(perMille: 400) { dependencies.append(sibling) }
        let olderDrivers = driverIndices.count - 1
        if olderDrivers > 0, random.chance(perMille: 400) {
            let candidate = driverIndices[olderDrivers - 1 - random.below(min(16, olderDrivers))]
            if !dependencies.contains(candidate) { dependencies.append(candidate) }
        }
        operations.append(StressPlan.OperationSpec(
            index: index,
            kind: kind,
            placement: .queue(childQueue(parent: parent, source: source)),
            origin: .child(of: parent),
            dependencies: dependencies,
            priority: random.pick(Operation.QueuePriority.allCases),
            qualityOfService: random.pick(QualityOfService.allCases),
            work: random.below(120),
            cooperative: random.chance(perMille: 500),
            cancellation: randomCancellation(kind: kind, dependencies: dependencies),
            observesFinish: random.chance(perMille: 50),
            children: []
        ))
        return index
    }
}
