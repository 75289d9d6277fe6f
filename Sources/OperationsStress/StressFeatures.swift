import Dispatch
import Operations
import Synchronization

/// Counters of the round's newer features, reported in `StressReport`.
final class FeatureCounters: Sendable {
    let rejected = Atomic<Int>(0)
    let tryAddsRefused = Atomic<Int>(0)
    let waitedAdds = Atomic<Int>(0)
    let queueRuns = Atomic<Int>(0)
    let misusesCommitted = Atomic<Int>(0)
    let misusesReported = Atomic<Int>(0)
    let observerActions = Atomic<Int>(0)
    let invariantChecks = Atomic<Int>(0)
    /// (operation, barrier): the operation's body began while the barrier
    /// it follows had not run its block, which is right only if the
    /// barrier was cancelled; checked again once the round drained.
    let startsPastUnrunBarriers = StressLock<[(operation: Int, barrier: Int)]>([])
}

extension Sentinel {
    /// Does nothing: a closure calls it so that it captures the sentinel.
    func keep() {}
}

/// Captured by a barrier's block. When the block is released without
/// having run (its barrier was cancelled), the barrier is complete for
/// the engine.
final class BarrierToken: Sendable {
    let round: StressRound
    let id: Int
    let queue: Int
    private let ran = Atomic<Bool>(false)

    init(round: StressRound, id: Int, queue: Int) {
        self.round = round
        self.id = id
        self.queue = queue
    }

    /// The barrier's block: marks the token, then runs `body`.
    func run(_ body: () -> Void) {
        ran.store(true, ordering: .sequentiallyConsistent)
        body()
    }

    deinit {
        if !ran.load(ordering: .sequentiallyConsistent) { round.barrierSkipped(id, queue: queue) }
    }
}

extension StressRound {
    // MARK: Barriers and cancelAllOperations

    /// A barrier's block was released without running.
    func barrierSkipped(_ id: Int, queue: Int) {
        if !trackers[queue].spec.cancelAllTarget {
            violate(.finish, "barrier \(id) on queue \(queue): its block was released without running, although nothing cancels that queue's operations")
        }
        barriers[id].skipped.store(true, ordering: .sequentiallyConsistent)
        releaseOutstanding()
    }

    /// Op `index` begins its body although barrier `id`, added before it,
    /// has not run its block. Right only if the barrier was cancelled: as
    /// in Foundation, a cancelled operation is ready whatever it waits for,
    /// so a cancelled barrier finishes at once without running its block
    /// and no longer holds back what was added after it. Queues a check
    /// that the barrier's block indeed never runs. Returns false if the
    /// barrier cannot have been cancelled.
    func barrierMayHaveBeenCancelled(_ id: Int, before index: Int) -> Bool {
        let barrier = barriers[id]
        let queue = barrier.queueIndex.load(ordering: .sequentiallyConsistent)
        guard queue >= 0, trackers[queue].spec.cancelAllTarget,
              barrier.runs.load(ordering: .sequentiallyConsistent) == 0 else { return false }
        counters.startsPastUnrunBarriers.withLock { $0.append((index, id)) }
        return true
    }

    /// Once drained: a barrier that an operation started past must not
    /// have run its block after all.
    func checkStartsPastUnrunBarriers() {
        for (index, id) in counters.startsPastUnrunBarriers.withLock({ $0 }) where barriers[id].runs.load(ordering: .sequentiallyConsistent) > 0 {
            violate(.barrierOrder, "op \(index) started before barrier \(id), added before it, ran its block")
        }
    }

    // MARK: Observers

    /// Installs the planned observations of `operation`.
    func installObservers(_ record: OpRecord, _ operation: Operation) {
        let spec = record.spec
        let index = spec.index
        var tokens: [KeyValueObservation] = []
        if spec.observesFinish {
            tokens.append(operation.observe(\.isFinished, options: [.new]) { [record] _, change in
                if change.newValue == true { record.finishNotifications.add(1, ordering: .sequentiallyConsistent) }
            })
        }
        if let target = spec.finishObserverWaitsFor {
            tokens.append(operation.observe(\.isFinished, options: [.new]) { [self] _, change in
                if change.newValue == true { observerWait(index, for: target) }
            })
        }
        if spec.childSource == .executingObserver, !spec.children.isEmpty {
            tokens.append(operation.observe(\.isExecuting, options: [.new]) { [self, record] _, change in
                guard change.newValue == true, !record.childrenAdded.exchange(true, ordering: .sequentiallyConsistent) else { return }
                scoped { addChildren(of: record, from: .executingObserver) }
            })
        }
        if !tokens.isEmpty { record.observations.withLock { $0 = tokens } }
    }

    /// An `isFinished` observer of op `index` waits (bounded) for op `target`.
    private func observerWait(_ index: Int, for target: Int) {
        counters.observerActions.add(1, ordering: .relaxed)
        scoped {
            guard let other = records[target].op else { return }
            if !other.waitUntilFinished(timeout: configuration.waitTimeout) {
                violate(.observer, "an isFinished observer of op \(index) waited \(configuration.waitTimeout) for op \(target) and it did not finish: \(other)\n\(dump())")
            }
        }
    }

    // MARK: Async bodies

    /// The value a `.result` or `.queueRun` body returns.
    func expectedValue(_ index: Int) -> Int { index &* 31 &+ 7 }

    /// The `async` body of a `ResultOperation` (`.result`) or of a
    /// `queue.run` call (`.queueRun`).
    func runResult(_ index: Int) async -> Int {
        let record = records[index]
        let isRun = record.spec.kind == .queueRun
        let operation = record.op
        scoped {
            if isRun {
                queueRunWillStart(record)
            } else if let operation {
                bodyWillStart(record, operation)
                if record.spec.cancellation == .selfDuringWork { operation.cancel() }
            } else {
                violate(.other, "op \(index): its async body runs but the operation is gone")
            }
            consume(simulateWork(record.spec.work / 2, seed: index, isCancelled: record.spec.cooperative ? { operation?.isCancelled ?? false } : nil))
        }
        await Task.yield()
        scoped {
            consume(simulateWork(record.spec.work / 2, seed: index &+ 1))
            if !isRun { addChildren(of: record, from: .body) }
            bodyDidEnd(record)
        }
        return expectedValue(index)
    }

    private func queueRunWillStart(_ record: OpRecord) {
        let index = record.spec.index
        let previous = record.bodyStarts.wrappingAdd(1, ordering: .sequentiallyConsistent).oldValue
        if previous > 0 { violate(.bodyRanTwice, "queue.run body of op \(index) began \(previous + 1) times") }
        if let queue = record.queueIndex {
            record.inFlight.store(true, ordering: .sequentiallyConsistent)
            let lowerBound = record.addTick.load(ordering: .sequentiallyConsistent)
            for violation in trackers[queue].enter(key: index, lowerBound: lowerBound, label: "op \(index) (queue.run)") {
                violations.record(StressViolation(kind: violation.kind, message: "seed \(configuration.seed): \(violation.message)"))
            }
        }
        let barrier = record.requiredBarrier.load(ordering: .sequentiallyConsistent)
        if barrier >= 0, !barriers[barrier].blockEnded.load(ordering: .sequentiallyConsistent),
           !barrierMayHaveBeenCancelled(barrier, before: index) {
            violate(.barrierOrder, "queue.run body of op \(index) began before barrier \(barrier), added before it, finished")
        }
        record.bodyState.store(1, ordering: .sequentiallyConsistent)
    }

    /// Checks a `ResultOperation`'s typed result in its completion block.
    func checkResult(_ record: OpRecord, _ operation: Operation, bodyRan: Bool) {
        guard record.spec.kind == .result else { return }
        let index = record.spec.index
        guard let typed = operation as? ResultOperation<Int, Never> else {
            violate(.other, "op \(index) is not a ResultOperation<Int, Never>: \(operation)")
            return
        }
        let result = typed.result
        if bodyRan {
            if case .success(let value)? = result, value == expectedValue(index) { return }
            violate(.observer, "op \(index): its async body returned \(expectedValue(index)) but result is \(String(describing: result))")
        } else if result != nil {
            violate(.observer, "op \(index) never ran its body but has the result \(String(describing: result))")
        }
    }

    /// `try await queue.run { … }` from a task, for op `index`.
    func startQueueRun(_ index: Int, queue: Int) {
        let record = records[index]
        let tracker = trackers[queue]
        let sentinel = Sentinel()
        record.refs.withLock { $0.bodySentinel = sentinel }
        record.created.store(true, ordering: .sequentiallyConsistent)
        outstanding.add(1, ordering: .sequentiallyConsistent)
        created.add(1, ordering: .relaxed)
        stampAdd([index], tracker: tracker)
        let target = tracker.queue
        let spec = record.spec
        Task { [self] in
            await OperationMisuse.withHandler(misuseHandler) {
                do {
                    let value = try await target.run(priority: spec.priority, qualityOfService: spec.qualityOfService) { [self, sentinel] () async -> Int in
                        sentinel.keep()
                        return await runResult(index)
                    }
                    if value != expectedValue(index) || record.bodyStarts.load(ordering: .sequentiallyConsistent) != 1 {
                        violate(.observer, "queue.run for op \(index) returned \(value) (expected \(expectedValue(index))) after \(record.bodyStarts.load(ordering: .sequentiallyConsistent)) body starts")
                    }
                } catch is CancellationError {
                    record.finalCancelled.store(true, ordering: .sequentiallyConsistent)
                    if record.bodyStarts.load(ordering: .sequentiallyConsistent) != 0 {
                        violate(.observer, "queue.run for op \(index) threw CancellationError although its body ran")
                    }
                } catch {
                    violate(.observer, "queue.run for op \(index) threw \(error)")
                }
            }
            record.completions.add(1, ordering: .sequentiallyConsistent)
            counters.queueRuns.add(1, ordering: .relaxed)
            releaseOutstanding()
        }
    }

    // MARK: Misuse on purpose

    /// Commits `misuse` with `operation` (op `index`, just added to its
    /// queue) under a counting handler: exactly one report is expected.
    func commitMisuse(_ misuse: StressPlan.OperationSpec.Misuse, index: Int, operation: Operation) {
        let codes = StressLock<[OperationMisuse.Code]>([])
        counters.misusesCommitted.add(1, ordering: .relaxed)
        let allowed: [OperationMisuse.Code]
        OperationMisuse.withHandler({ misuse in codes.withLock { $0.append(misuse.code) } }) {
            switch misuse {
            case .startEnqueued:
                operation.start()
            case .addToSecondQueue(let queue):
                trackers[queue].queue.addOperation(operation)
            }
        }
        switch misuse {
        case .startEnqueued: allowed = [.startOwnedByQueue, .startNotReady, .startWhileExecuting, .startAfterFinished]
        case .addToSecondQueue: allowed = [.alreadyInQueue, .addedAfterStart]
        }
        let reported = codes.withLock { $0 }
        counters.misusesReported.add(reported.count, ordering: .relaxed)
        if reported.count != 1 || !allowed.contains(reported[0]) {
            violate(.misuse, "op \(index): the deliberate misuse \(misuse) was reported \(reported.count) times (\(reported.map(\.rawValue))), expected once as one of \(allowed.map(\.rawValue)): \(operation)")
        }
    }

    // MARK: Invariants

    /// `_checkInvariants()` on every queue (when the configuration asks).
    func checkInvariants(after label: @autoclosure () -> String) {
        guard configuration.checksInvariants else { return }
        for tracker in trackers {
            counters.invariantChecks.add(1, ordering: .relaxed)
            if let problem = tracker.queue._checkInvariants() {
                violate(.invariant, "after \(label()): queue \(tracker.spec.index): \(problem)")
            }
        }
    }
}
