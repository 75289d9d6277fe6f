import Dispatch
import Operations
import Synchronization

/// Runs seeded stress rounds against the library and checks its invariants.
///
/// A round creates its queues, runs the plan's driver steps on the calling
/// thread while the chaos threads suspend, resize and cancel, then waits
/// (bounded) for everything to complete and checks every operation. The
/// invariants checked, and how:
///
/// - **Every operation finishes exactly once**: at the end each created
///   operation `isFinished`; its completion block ran exactly once (counted,
///   a second run is reported when it happens); observed operations got
///   exactly one `isFinished` → true notification.
/// - **The body runs at most once, never after a cancellation that came
///   before the start**: the body (`main()`, async work, first block)
///   counts its starts; operations the engine cancels at a moment when they
///   certainly have not started (before being added, or from a dependency's
///   body while the dependency runs) must never run it; every operation
///   that ends not cancelled must have run it exactly once (so dependents
///   of cancelled operations do run), and block operations all their blocks.
/// - **No operation starts before its dependencies finished**: when a body
///   begins, every dependency `isFinished` and its own body is not running.
///   Operations started by hand are checked `isReady` when every
///   dependency's completion block has run.
/// - **Completion blocks**: exactly once, after `isFinished`, after the body
///   ended; `waitUntilFinished` returns only after it ran.
/// - **Serial queues and width limits**: see `TrackerState` for the rule;
///   a serial queue never runs two operations (or barriers) at once.
/// - **Suspension**: a body, or the retirement of a cancelled operation,
///   that could only have been started after a suspension took effect is
///   reported if the queue is still suspended.
/// - **Barriers**: a barrier block runs after every operation whose add
///   returned before the barrier was added has finished; an operation added
///   after the barrier was added starts its body only after the block ended.
/// - **Draining**: all operations complete within `drainTimeout`; then every
///   queue's `waitUntilAllOperationsAreFinished(timeout:)` succeeds, its
///   `operationCount` is 0 and `operations` is empty.
/// - **Bounded waits**: every wait has a timeout; reaching it is a
///   violation that carries a dump of the queues' states.
/// - **No misuse but the deliberate ones**: any misuse the library reports
///   is a violation, except the ones the driver commits on purpose
///   (starting an enqueued operation by hand, adding one to a second
///   queue), each of which must be reported exactly once and refused.
/// - **Pending limits**: a suspended queue filled to its limit holds exactly
///   the limit; `.reject` cancels what does not fit (it never runs);
///   `tryAddOperation` refuses and leaves the operation untouched; blocking
///   and `async` adds do not return until there is room.
/// - **Async bodies**: `ResultOperation` bodies and `queue.run {}` return
///   their typed values; `queue.run` throws `CancellationError` only if the
///   body never ran.
/// - **Cancelled barriers still order**: an operation that starts while the
///   barrier before it has not run its block finds every operation added
///   before that barrier finished, and that barrier's block never runs.
/// - **Invariants**: `OperationQueue._checkInvariants()` after every driver
///   step and at the end (when `checksInvariants`).
/// - **Lifetimes**: the engine holds an operation only until its completion
///   block ran; once the round drained it drops its queues too, and the
///   census checks that every operation, the sentinel captured by each of
///   its closures, every barrier block and every queue is released.
public enum StressRunner {
    /// Runs one round. `log` receives progress lines (the seed first, so
    /// that even a crash leaves the seed in the output).
    public static func run(_ configuration: StressConfiguration, log: (String) -> Void = { _ in }) -> StressReport {
        let clock = ContinuousClock()
        let started = clock.now
        let plan = StressPlan(configuration: configuration)
        log("stress round: seed \(configuration.seed), plan \(hex(plan.fingerprint)), \(plan.operations.count) operations, \(plan.queues.count) queues, \(plan.barrierCount) barriers")
        let round = StressRound(configuration: configuration, plan: plan)
        let previousHandler = OperationMisuse.handler
        if configuration.installsProcessWideMisuseHandler { OperationMisuse.handler = round.misuseHandler }
        defer {
            if configuration.installsProcessWideMisuseHandler { OperationMisuse.handler = previousHandler }
        }

        let (drained, completed) = round.scoped { () -> (Bool, Bool) in
            let chaos = configuration.chaos ? StressChaos(round: round) : nil
            chaos?.start()
            drive(round, chaos: chaos)
            chaos?.stop(timeout: configuration.waitTimeout)
            if configuration.accessorRaces { round.runAccessorRaces() }
            return finish(round)
        }
        var census = (tracked: 0, leaks: 0)
        if completed {
            checkRecords(round)
            round.checkStartsPastUnrunBarriers()
            census = round.census()
        }
        var report = makeReport(round, drained: drained)
        report.censusTracked = census.tracked
        report.censusLeaks = census.leaks
        report.elapsed = clock.now - started
        return report
    }

    /// Runs the plan's steps on the calling thread.
    private static func drive(_ round: StressRound, chaos: StressChaos?) {
        for step in round.plan.steps {
            switch step {
            case .add(let index):
                let operation = round.makeOperation(index)
                switch round.records[index].spec.placement {
                case .queue(let queue): round.add([index], toQueue: queue, batch: false)
                case .hand(let inline): round.armHandStart(index, inline: inline)
                }
                if let misuse = round.records[index].spec.misuse {
                    round.commitMisuse(misuse, index: index, operation: operation)
                }
                chaos?.tick()
            case .addBatch(let queue, let indices):
                for index in indices { round.makeOperation(index) }
                round.add(indices, toQueue: queue, batch: true)
                for _ in indices { chaos?.tick() }
            case .barrier(let queue, let id):
                round.addBarrier(id, toQueue: queue)
            case .waitForOperation(let index):
                round.waitFromOutside(for: index, who: "the driver")
            case .waitForQueue(let queue):
                round.waits.add(1, ordering: .relaxed)
                let timeout = round.configuration.waitTimeout
                if !round.trackers[queue].queue.waitUntilAllOperationsAreFinished(timeout: timeout) {
                    round.violate(.timeout, "the driver waited \(timeout) for queue \(queue) to drain\n\(round.dump())")
                }
            case .pending(let episode):
                round.runEpisode(episode)
            case .run(let queue, let index):
                round.startQueueRun(index, queue: queue)
                chaos?.tick()
            }
            round.checkInvariants(after: "driver step \(step)")
        }
    }

    /// Restores the queues, waits (bounded) for every operation to complete
    /// and every queue to drain. Returns (drained, everything completed).
    private static func finish(_ round: StressRound) -> (Bool, Bool) {
        let configuration = round.configuration
        for tracker in round.trackers {
            tracker.resume()
            if tracker.queue.maxConcurrentOperationCount != tracker.spec.initialWidth {
                tracker.setWidth(tracker.spec.initialWidth, clock: round.clock)
            }
        }
        if configuration.injectedFault == .leaveQueueSuspended {
            let tracker = round.trackers[0]
            tracker.suspend(clock: round.clock)
            let extra = BlockOperation {}
            extra.completionBlock = { [round] in round.releaseOutstanding() }
            round.outstanding.add(1, ordering: .sequentiallyConsistent)
            tracker.queue.addOperation(extra)
        }
        round.releaseOutstanding()
        var drained = true
        if round.allCompleted.wait(timeout: .after(configuration.drainTimeout)) == .timedOut {
            drained = false
            round.violate(.timeout, "the final drain did not complete within \(configuration.drainTimeout)\n\(round.dump())")
            // Try to recover, so that one failure does not hide the others.
            for tracker in round.trackers { tracker.resume() }
            if round.allCompleted.wait(timeout: .after(configuration.waitTimeout)) == .timedOut {
                round.violate(.timeout, "after resuming every queue, operations still did not complete within \(configuration.waitTimeout)\n\(round.dump())")
                return (false, false)
            }
        }
        for tracker in round.trackers {
            let queue = tracker.queue
            if !queue.waitUntilAllOperationsAreFinished(timeout: configuration.waitTimeout) {
                drained = false
                round.violate(.notDrained, "queue \(tracker.spec.index) did not drain within \(configuration.waitTimeout) although every operation completed\n\(round.dump())")
                continue
            }
            let count = queue.operationCount
            let remaining = queue.operations
            if count != 0 || !remaining.isEmpty || !queue.progress.isFinished {
                drained = false
                round.violate(.notDrained, "queue \(tracker.spec.index) drained but reports operationCount \(count), operations \(remaining), progress \(queue.progress)")
            }
            let running = tracker.state.withLock { $0.inFlight.keys.sorted() }
            if !running.isEmpty {
                round.violate(.completion, "queue \(tracker.spec.index): the engine still counts \(running) as running (their completion blocks never ran)")
            }
        }
        round.checkInvariants(after: "the final drain")
        return (drained, true)
    }

    /// The per-operation checks made once everything completed.
    private static func checkRecords(_ round: StressRound) {
        for record in round.records {
            let spec = record.spec
            let index = spec.index
            guard record.created.load(ordering: .sequentiallyConsistent) else {
                if case .child(let parent) = spec.origin {
                    let parentRecord = round.records[parent]
                    let mustExist = parentRecord.spec.childSource == .completionBlock
                        ? parentRecord.completions.load(ordering: .sequentiallyConsistent) > 0
                        : parentRecord.bodyStarts.load(ordering: .sequentiallyConsistent) > 0
                    if mustExist {
                        round.violate(.other, "engine: op \(index) was never created although its parent op \(parent) ran (children added from \(parentRecord.spec.childSource))")
                    }
                }
                continue
            }
            let starts = record.bodyStarts.load(ordering: .sequentiallyConsistent)
            let completions = record.completions.load(ordering: .sequentiallyConsistent)
            // Held strongly until its completion block ran; read then.
            let operation = completions > 0 ? nil : record.op
            let isCancelled = operation?.isCancelled ?? record.finalCancelled.load(ordering: .sequentiallyConsistent)
            if let operation, !operation.isFinished {
                round.violate(.finish, "op \(index) [\(spec.summary)] never finished: \(operation)")
            }
            if completions != 1 {
                round.violate(.completion, "op \(index) [\(spec.summary)]: completion block ran \(completions) times")
            }
            if record.knownCancelledBeforeStart.load(ordering: .sequentiallyConsistent), !isCancelled {
                round.violate(.other, "op \(index) was cancelled before it started but isCancelled is false")
            }
            if !isCancelled, starts != 1 {
                round.violate(.finish, "op \(index) [\(spec.summary)] was never cancelled but its body ran \(starts) times")
            }
            if case .blocks(let count) = spec.kind, starts > 0 {
                let runs = record.blockRuns.load(ordering: .sequentiallyConsistent)
                if runs != count { round.violate(.finish, "block operation op \(index) ran \(runs) of its \(count) blocks") }
            }
            if starts > 0, record.bodyState.load(ordering: .sequentiallyConsistent) != 2 {
                round.violate(.finish, "op \(index): its body began but never ended")
            }
            if spec.observesFinish {
                let notifications = round.finishNotifications(of: record)
                if notifications != 1 {
                    round.violate(.finish, "op \(index): observers saw isFinished become true \(notifications) times")
                }
            }
        }
        for barrier in round.barriers {
            let runs = barrier.runs.load(ordering: .sequentiallyConsistent)
            let skipped = barrier.skipped.load(ordering: .sequentiallyConsistent)
            if runs > 1 || (runs == 0) != skipped {
                round.violate(.finish, "barrier \(barrier.id) ran \(runs) times (block released without running: \(skipped))")
            }
        }
    }

    private static func makeReport(_ round: StressRound, drained: Bool) -> StressReport {
        var run = 0
        var bodies = 0
        var cancelled = 0
        var cancelledBeforeStart = 0
        var cancelledWhileRunning = 0
        for record in round.records where record.created.load(ordering: .sequentiallyConsistent) {
            let ran = record.bodyStarts.load(ordering: .sequentiallyConsistent) > 0
            if record.completions.load(ordering: .sequentiallyConsistent) > 0 { run += 1 }
            if ran { bodies += 1 }
            let isCancelled = record.completions.load(ordering: .sequentiallyConsistent) > 0
                ? record.finalCancelled.load(ordering: .sequentiallyConsistent)
                : record.op?.isCancelled ?? false
            if isCancelled {
                cancelled += 1
                if ran { cancelledWhileRunning += 1 }
            }
            if record.knownCancelledBeforeStart.load(ordering: .sequentiallyConsistent) { cancelledBeforeStart += 1 }
        }
        let barriersRun = round.barriers.filter { $0.runs.load(ordering: .sequentiallyConsistent) > 0 }.count
        let peak = round.trackers.map { tracker in tracker.state.withLock { $0.peak } }.max() ?? 0
        let (kept, count) = round.violations.snapshot
        let counters = round.counters
        var report = StressReport(
            seed: round.configuration.seed,
            planFingerprint: round.plan.fingerprint,
            operationsPlanned: round.plan.operations.count,
            operationsRun: run + barriersRun,
            bodiesRun: bodies,
            cancelled: cancelled,
            cancelledBeforeStart: cancelledBeforeStart,
            cancelledWhileRunning: cancelledWhileRunning,
            startedByHand: round.handStarts.load(ordering: .relaxed),
            barriers: barriersRun,
            waits: round.waits.load(ordering: .relaxed),
            chaosActions: round.chaosActions.load(ordering: .relaxed),
            peakConcurrency: peak,
            queuesDrained: drained,
            violations: kept,
            violationCount: count,
            elapsed: .zero
        )
        report.barriersCancelled = round.barriers.filter { $0.skipped.load(ordering: .sequentiallyConsistent) }.count
        report.rejected = counters.rejected.load(ordering: .relaxed)
        report.tryAddsRefused = counters.tryAddsRefused.load(ordering: .relaxed)
        report.waitedAdds = counters.waitedAdds.load(ordering: .relaxed)
        report.queueRuns = counters.queueRuns.load(ordering: .relaxed)
        report.misusesCommitted = counters.misusesCommitted.load(ordering: .relaxed)
        report.misusesReported = counters.misusesReported.load(ordering: .relaxed)
        report.observerActions = counters.observerActions.load(ordering: .relaxed)
        report.invariantChecks = counters.invariantChecks.load(ordering: .relaxed)
        return report
    }
}
