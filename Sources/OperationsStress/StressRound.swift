import Dispatch
import Operations
import Synchronization

/// The shared state of one running round: the plan, the records, the queue
/// trackers, and the instrumented bodies of the operations. Every
/// operation's closures point here; the records point back to the
/// operations until `teardown()`.
final class StressRound: Sendable {
    let configuration: StressConfiguration
    let plan: StressPlan
    let records: [OpRecord]
    let barriers: [BarrierRecord]
    let trackers: [QueueTracker]
    let clock = RoundClock()
    let violations = ViolationLog()

    /// Operations created and not yet completed, plus one for the driver
    /// until it has added everything. Reaching 0 signals `allCompleted`.
    let outstanding = Atomic<Int>(1)
    let allCompleted = DispatchSemaphore(value: 0)
    /// One more than the highest index created so far (for random picks).
    let createdHighWater = Atomic<Int>(0)
    let created = Atomic<Int>(0)
    let handStarts = Atomic<Int>(0)
    let waits = Atomic<Int>(0)
    let chaosActions = Atomic<Int>(0)
    let dumps = Atomic<Int>(0)
    /// Recently started bodies, for cancellation during execution.
    let running = StressLock<RunningRing>(RunningRing())
    /// Counters of the newer features (see `StressReport`).
    let counters = FeatureCounters()
    /// References kept on purpose by the `leak…` faults.
    let faultHold = StressLock<[any AnyObject & Sendable]>([])

    init(configuration: StressConfiguration, plan: StressPlan) {
        self.configuration = configuration
        self.plan = plan
        records = plan.operations.map { OpRecord(spec: $0) }
        barriers = (0..<plan.barrierCount).map { BarrierRecord(id: $0) }
        trackers = plan.queues.map { spec in
            let queue = OperationQueue()
            queue.name = "stress.q\(spec.index).\(spec.role.rawValue)"
            queue.qualityOfService = spec.qualityOfService
            let notSerial = configuration.injectedFault == .serialQueueNotSerial && spec.role == .serial
            queue.maxConcurrentOperationCount = notSerial ? OperationQueue.defaultMaxConcurrentOperationCount : spec.initialWidth
            return QueueTracker(
                spec: spec,
                queue: queue,
                appliesSuspension: configuration.injectedFault != .suspensionNotApplied
            )
        }
        if configuration.injectedFault == .leakQueue, let first = trackers.first {
            faultHold.withLock { $0.append(first.queue) }
        }
    }

    // MARK: Reporting

    func violate(_ kind: StressViolation.Kind, _ message: String) {
        violations.record(StressViolation(kind: kind, message: "seed \(configuration.seed): \(message)"))
    }

    /// Receives misuses: the engine never misuses the library on purpose.
    var misuseHandler: OperationMisuse.Handler {
        { [weak self] misuse in
            self?.violate(.misuse, "the library reported a misuse: \(misuse.message)")
        }
    }

    /// Runs `body` with misuse reported as a violation instead of a trap.
    func scoped<R>(_ body: () -> R) -> R {
        OperationMisuse.withHandler(misuseHandler, body)
    }

    // MARK: Creating and adding

    /// Creates operation `index` with its dependencies, completion block,
    /// observation and planned cancellation. Does not add or start it.
    @discardableResult
    func makeOperation(_ index: Int) -> Operation {
        let record = records[index]
        let spec = record.spec
        let bodySentinel = Sentinel()
        let completionSentinel = Sentinel()
        let operation: Operation
        switch spec.kind {
        case .plain:
            operation = StressOperation(index: index, round: self, sentinel: bodySentinel)
        case .blocks(let count):
            let blocks = BlockOperation()
            for block in 0..<count {
                blocks.addExecutionBlock { [self, bodySentinel] in
                    bodySentinel.keep()
                    runBlock(index, block: block, of: count)
                }
            }
            operation = blocks
        case .async:
            operation = AsyncOperation { [self, bodySentinel] operation in
                bodySentinel.keep()
                runAsync(index, operation)
            }
        case .result, .queueRun:
            operation = ResultOperation<Int, Never> { [self, bodySentinel] () async -> Int in
                bodySentinel.keep()
                return await runResult(index)
            }
        }
        operation.name = "op \(index)"
        operation.queuePriority = spec.priority
        operation.qualityOfService = spec.qualityOfService
        record.refs.withLock { refs in
            refs.strong = operation
            refs.weak = operation
            refs.bodySentinel = bodySentinel
            refs.completionSentinel = completionSentinel
        }
        record.created.store(true, ordering: .sequentiallyConsistent)
        if faultHold.withLock({ $0.isEmpty }) {
            if configuration.injectedFault == .leakOperation { faultHold.withLock { $0.append(operation) } }
            if configuration.injectedFault == .leakClosure { faultHold.withLock { $0.append(completionSentinel) } }
        }
        for dependency in spec.dependencies where configuration.injectedFault != .dependenciesNotAdded {
            guard let other = records[dependency].op else {
                // Finished and released: nothing to wait for.
                if records[dependency].completions.load(ordering: .sequentiallyConsistent) > 0 { continue }
                violate(.other, "engine: dependency op \(dependency) of op \(index) does not exist (not created yet, or released before its completion block ran)")
                continue
            }
            operation.addDependency(other)
        }
        operation.completionBlock = { [self, completionSentinel] in
            completionSentinel.keep()
            completionDidRun(index)
        }
        installObservers(record, operation)
        outstanding.add(1, ordering: .sequentiallyConsistent)
        created.add(1, ordering: .relaxed)
        createdHighWater.max(index + 1, ordering: .sequentiallyConsistent)
        switch spec.cancellation {
        case .beforeAdd:
            record.knownCancelledBeforeStart.store(true, ordering: .sequentiallyConsistent)
            operation.cancel()
        case .byDependency(let gate):
            // Registered only while the dependency's body has not begun:
            // then this operation certainly cannot start before it is cancelled.
            records[gate].gate.withLock { state in
                if !state.bodyBegun { state.pendingCancels.append(index) }
            }
        case .none, .selfDuringWork:
            break
        }
        return operation
    }

    /// Adds created operations to queue `queue` (one `addOperations` call
    /// when `batch`), stamping their add tick and required barrier first.
    func add(_ indices: [Int], toQueue queue: Int, batch: Bool) {
        let tracker = trackers[queue]
        let operations = indices.compactMap { records[$0].op }
        stampAdd(indices, tracker: tracker)
        if batch {
            tracker.queue.addOperations(operations, waitUntilFinished: false)
        } else {
            for operation in operations { tracker.queue.addOperation(operation) }
        }
        tracker.state.withLock { $0.addLog.append(contentsOf: indices) }
    }

    /// Records when the adds of `indices` to the tracker's queue begin, and
    /// the barrier they must follow.
    func stampAdd(_ indices: [Int], tracker: QueueTracker) {
        tracker.state.withLock { state in
            let tick = clock.tick()
            for index in indices {
                records[index].addTick.store(tick, ordering: .sequentiallyConsistent)
                records[index].requiredBarrier.store(state.lastReturnedBarrier, ordering: .sequentiallyConsistent)
            }
        }
    }

    /// Arms operation `index` to be started by hand once every dependency's
    /// completion block has run (so every dependency has finished).
    func armHandStart(_ index: Int, inline: Bool) {
        let dependencies = records[index].spec.dependencies
        let countdown = Countdown(dependencies.count + 1)
        let fire: @Sendable () -> Void = { [self] in
            if countdown.decrement() { startByHand(index, inline: inline) }
        }
        for dependency in dependencies { records[dependency].onCompletion(fire) }
        fire()
    }

    private func startByHand(_ index: Int, inline: Bool) {
        let start: @Sendable () -> Void = { [self] in
            scoped {
                guard let operation = records[index].op else { return }
                if !operation.isReady {
                    violate(.startedBeforeDependency, "op \(index) (started by hand) is not ready although every dependency's completion block has run: \(operation)")
                }
                handStarts.add(1, ordering: .relaxed)
                operation.start()
            }
        }
        if inline { start() } else { DispatchQueue.global().async(execute: start) }
    }

    /// Adds a barrier block to `queue`, recording which operations it must
    /// follow and which must follow it.
    func addBarrier(_ id: Int, toQueue queue: Int) {
        let tracker = trackers[queue]
        let barrier = barriers[id]
        tracker.state.withLock { state in
            let end = state.addLog.count
            barrier.before.withLock { $0 = Array(state.addLog[state.barrierCheckpoint..<end]) }
            barrier.previous.store(state.lastReturnedBarrier, ordering: .sequentiallyConsistent)
            barrier.queueIndex.store(queue, ordering: .sequentiallyConsistent)
            state.barrierCheckpoint = end
            barrier.addTick.store(clock.tick(), ordering: .sequentiallyConsistent)
        }
        outstanding.add(1, ordering: .sequentiallyConsistent)
        // Released with the block: if the block never ran (a cancelled
        // barrier), its release completes the barrier for the engine.
        let token = BarrierToken(round: self, id: id, queue: queue)
        barrier.token.withLock { $0.token = token }
        if configuration.injectedFault == .barriersNotBarriers {
            tracker.queue.addOperation { [self, token] in token.run { scoped { runBarrier(id, queue: queue) } } }
        } else {
            tracker.queue.addBarrierBlock { [self, token] in token.run { scoped { runBarrier(id, queue: queue) } } }
        }
        tracker.state.withLock { $0.lastReturnedBarrier = id }
    }

    // MARK: Bodies

    /// The body of a plain operation (`main()`).
    func runPlain(_ index: Int, _ operation: Operation) {
        scoped {
            let record = records[index]
            bodyWillStart(record, operation)
            if record.spec.cancellation == .selfDuringWork { cancelDuringWork(record, operation) }
            consume(simulateWork(record.spec.work, seed: index, isCancelled: record.spec.cooperative ? { operation.isCancelled } : nil))
            addChildren(of: record, from: .body)
            bodyDidEnd(record)
        }
    }

    /// One execution block of a block operation.
    func runBlock(_ index: Int, block: Int, of count: Int) {
        scoped {
            let record = records[index]
            let runs = record.blockRuns.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
            if runs > count {
                violate(.bodyRanTwice, "block operation op \(index) ran \(runs) execution blocks but has \(count)")
            }
            if runs == 1 {
                if let operation = record.op { bodyWillStart(record, operation) }
            }
            consume(simulateWork(record.spec.work / count + 1, seed: index &+ block))
            if runs == 1 { addChildren(of: record, from: .body) }
            if record.blocksDone.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue == count {
                bodyDidEnd(record)
            }
        }
    }

    /// The work of an asynchronous operation, which finishes it now or from
    /// another thread.
    func runAsync(_ index: Int, _ operation: AsyncOperation) {
        scoped {
            let record = records[index]
            bodyWillStart(record, operation)
            if record.spec.cancellation == .selfDuringWork { cancelDuringWork(record, operation) }
            consume(simulateWork(record.spec.work / 2, seed: index, isCancelled: record.spec.cooperative ? { operation.isCancelled } : nil))
            addChildren(of: record, from: .body)
            guard case .async(let elsewhere) = record.spec.kind, elsewhere else {
                bodyDidEnd(record)
                operation.finish()
                return
            }
            DispatchQueue.global().async { [self] in
                scoped {
                    consume(simulateWork(record.spec.work / 2, seed: index &+ 1))
                    bodyDidEnd(record)
                    operation.finish()
                }
            }
        }
    }

    func runBarrier(_ id: Int, queue: Int) {
        let barrier = barriers[id]
        let tracker = trackers[queue]
        let runs = barrier.runs.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
        if runs > 1 { violate(.bodyRanTwice, "barrier \(id) on queue \(queue) ran \(runs) times") }
        let key = -id - 1
        for violation in tracker.enter(key: key, lowerBound: barrier.addTick.load(ordering: .sequentiallyConsistent), label: "barrier \(id)") {
            violations.record(StressViolation(kind: violation.kind, message: "seed \(configuration.seed): \(violation.message)"))
        }
        for index in barrier.before.withLock({ $0 }) {
            let record = records[index]
            let finished = record.hasFinished
            if !finished || record.bodyState.load(ordering: .sequentiallyConsistent) == 1 {
                violate(.barrierOrder, "barrier \(id) on queue \(queue) ran before op \(index), added before it, finished (\(record.op.map { "\($0)" } ?? "nil"))")
            }
        }
        consume(simulateWork(8, seed: id))
        tracker.exit(key: key)
        barrier.blockEnded.store(true, ordering: .sequentiallyConsistent)
        releaseOutstanding()
    }

    /// Checks made when a body begins, then marks it running.
    func bodyWillStart(_ record: OpRecord, _ operation: Operation) {
        let index = record.spec.index
        let previous = record.bodyStarts.wrappingAdd(1, ordering: .sequentiallyConsistent).oldValue
        if previous > 0 { violate(.bodyRanTwice, "op \(index): its body began \(previous + 1) times") }
        if record.knownCancelledBeforeStart.load(ordering: .sequentiallyConsistent) {
            violate(.bodyRanAfterCancel, "op \(index): its body ran although it was cancelled before it started (\(record.spec.cancellation))")
        }
        if record.completions.load(ordering: .sequentiallyConsistent) > 0 {
            violate(.completion, "op \(index): its body began after its completion block ran")
        }
        if operation.isFinished || !operation.isExecuting {
            violate(.other, "op \(index): its body runs but isFinished is \(operation.isFinished), isExecuting is \(operation.isExecuting)")
        }
        var lowerBound = record.addTick.load(ordering: .sequentiallyConsistent)
        for dependency in record.spec.dependencies {
            let other = records[dependency]
            let finished = other.hasFinished
            if !finished || other.bodyState.load(ordering: .sequentiallyConsistent) == 1 {
                violate(.startedBeforeDependency, "op \(index) started before its dependency op \(dependency) finished (dependency: \(other.op.map { "\($0)" } ?? "nil"), body state \(other.bodyState.load(ordering: .sequentiallyConsistent)))")
            }
            lowerBound = max(lowerBound, other.bodyEndTick.load(ordering: .sequentiallyConsistent))
        }
        let barrier = record.requiredBarrier.load(ordering: .sequentiallyConsistent)
        if barrier >= 0, !barriers[barrier].blockEnded.load(ordering: .sequentiallyConsistent),
           !barrierMayHaveBeenCancelled(barrier, before: index) {
            let other = barriers[barrier]
            let runs = other.runs.load(ordering: .sequentiallyConsistent)
            violate(.barrierOrder, "op \(index) [\(record.spec.summary)] started before barrier \(barrier) finished, although the barrier's addBarrierBlock returned before the op's add began (op add tick \(record.addTick.load(ordering: .sequentiallyConsistent)), barrier add tick \(other.addTick.load(ordering: .sequentiallyConsistent)), barrier block \(runs == 0 ? "not started" : "running")); op: \(operation)")
        }
        if let queue = record.queueIndex {
            record.inFlight.store(true, ordering: .sequentiallyConsistent)
            for violation in trackers[queue].enter(key: index, lowerBound: lowerBound, label: "op \(index)") {
                violations.record(StressViolation(kind: violation.kind, message: "seed \(configuration.seed): \(violation.message)"))
            }
        }
        record.bodyState.store(1, ordering: .sequentiallyConsistent)
        running.withLock { $0.push(index) }
        // Dependents registered for cancellation: this operation has not
        // finished, so none of them can have started.
        let cancels = record.gate.withLock { state -> [Int] in
            state.bodyBegun = true
            defer { state.pendingCancels = [] }
            return state.pendingCancels
        }
        for dependent in cancels {
            records[dependent].knownCancelledBeforeStart.store(true, ordering: .sequentiallyConsistent)
            records[dependent].op?.cancel()
        }
    }

    func bodyDidEnd(_ record: OpRecord) {
        record.bodyEndTick.store(clock.tick(), ordering: .sequentiallyConsistent)
        record.bodyState.store(2, ordering: .sequentiallyConsistent)
        // The operation leaves its queue's slot when it finishes, which is
        // right after its body ends and before its completion block runs:
        // from here on another operation may start in that slot.
        if record.inFlight.exchange(false, ordering: .sequentiallyConsistent), let queue = record.queueIndex {
            trackers[queue].exit(key: record.spec.index)
        }
    }

    private func cancelDuringWork(_ record: OpRecord, _ operation: Operation) {
        operation.cancel()
        if !operation.isCancelled || !operation.isExecuting || operation.isFinished {
            violate(.other, "op \(record.spec.index) cancelled itself while executing: isCancelled \(operation.isCancelled), isExecuting \(operation.isExecuting), isFinished \(operation.isFinished)")
        }
    }

    func addChildren(of record: OpRecord, from source: StressPlan.OperationSpec.ChildSource) {
        guard record.spec.childSource == source else { return }
        if source != .body { counters.observerActions.add(1, ordering: .relaxed) }
        for child in record.spec.children {
            makeOperation(child)
            guard case .queue(let queue) = records[child].spec.placement else { continue }
            add([child], toQueue: queue, batch: false)
        }
    }

    // MARK: Completion

    func completionDidRun(_ index: Int) {
        scoped {
            let record = records[index]
            let previous = record.completions.wrappingAdd(1, ordering: .sequentiallyConsistent).oldValue
            if previous > 0 { violate(.completion, "op \(index): completion block ran \(previous + 1) times") }
            guard let operation = record.op else {
                violate(.leak, "op \(index): released before its completion block ran")
                releaseOutstanding()
                return
            }
            if !operation.isFinished {
                violate(.completion, "op \(index): completion block ran before the operation finished: \(operation)")
            }
            let starts = record.bodyStarts.load(ordering: .sequentiallyConsistent)
            if starts == 0, !operation.isCancelled {
                violate(.finish, "op \(index) finished without running its body, but it was not cancelled: \(operation)")
            }
            if starts > 0, record.bodyState.load(ordering: .sequentiallyConsistent) != 2 {
                violate(.completion, "op \(index): completion block ran before its body ended")
            }
            if starts == 0, let queue = record.queueIndex, !record.expectsRejection.load(ordering: .sequentiallyConsistent) {
                // A cancelled operation is retired by its queue's start(): a
                // suspended queue starts nothing, cancelled operations included.
                let addTick = record.addTick.load(ordering: .sequentiallyConsistent)
                let since = trackers[queue].state.withLock { $0.suspendedSince }
                if let since, addTick > since {
                    violate(.startedWhileSuspended, "cancelled op \(index) was retired by queue \(queue), suspended since tick \(since), although it was added after (tick \(addTick))")
                }
            }
            let listeners = record.gate.withLock { state -> [@Sendable () -> Void] in
                state.completed = true
                defer { state.completionListeners = [] }
                return state.completionListeners
            }
            for listener in listeners { listener() }
            checkResult(record, operation, bodyRan: starts > 0)
            addChildren(of: record, from: .completionBlock)
            record.finalCancelled.store(operation.isCancelled, ordering: .sequentiallyConsistent)
            // The engine is done with the operation: from now on only the
            // library (until it retires it), dependents and the observations
            // keep it alive. The observations stay until `teardown`: the
            // block is handed on before the `isFinished` observers are told
            // (as on Darwin), so they may not have been told yet.
            record.refs.withLock { $0.strong = nil }
            releaseOutstanding()
        }
    }

    func releaseOutstanding() {
        if outstanding.wrappingSubtract(1, ordering: .sequentiallyConsistent).newValue == 0 {
            allCompleted.signal()
        }
    }

    /// Breaks the reference cycles between records, operations and the round.
    func teardown() {
        for record in records {
            if let operation = record.refs.withLock({ $0.strong }) {
                record.finalCancelled.store(operation.isCancelled, ordering: .sequentiallyConsistent)
            }
            record.refs.withLock { $0.strong = nil }
            let tokens = record.observations.withLock { tokens in
                defer { tokens = [] }
                return tokens
            }
            for token in tokens { token.invalidate() }
            record.gate.withLock { state in
                state.pendingCancels = []
                state.completionListeners = []
            }
        }
    }
}

/// A plain operation of the round: `main()` runs the instrumented body.
final class StressOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: restated as `Operation` subclasses must; the
    // subclass adds only immutable `let`s of Sendable types.
    let index: Int
    let round: StressRound
    /// Tracked weakly by the census, like the closures of other kinds.
    let sentinel: Sentinel

    init(index: Int, round: StressRound, sentinel: Sentinel) {
        self.index = index
        self.round = round
        self.sentinel = sentinel
        super.init()
    }

    override func main() {
        round.runPlain(index, self)
    }
}

/// Counts down to zero once.
final class Countdown: Sendable {
    private let remaining: Atomic<Int>

    init(_ count: Int) { remaining = Atomic(count) }

    /// Returns true for the call that reaches zero.
    func decrement() -> Bool {
        remaining.wrappingSubtract(1, ordering: .sequentiallyConsistent).newValue == 0
    }
}

/// The last few operations whose body began, for the chaos canceller.
struct RunningRing {
    private var slots = [Int](repeating: -1, count: 32)
    private var next = 0

    mutating func push(_ index: Int) {
        slots[next] = index
        next = (next + 1) & 31
    }

    func pick(_ random: inout StressRandom) -> Int? {
        let index = slots[random.below(slots.count)]
        return index >= 0 ? index : nil
    }
}
