import Dispatch
import Operations
import Synchronization

extension StressRound {
    /// Runs a pending-limit episode (see ``StressPlan/PendingEpisode``).
    /// Every wait is bounded; the checks hold for any interleaving.
    func runEpisode(_ episode: StressPlan.PendingEpisode) {
        let tracker = trackers[episode.queue]
        let queue = tracker.queue
        let timeout = configuration.waitTimeout
        let label = "pending episode on queue \(episode.queue) (limit \(episode.limit), \(episode.policy))"
        guard queue.waitUntilAllOperationsAreFinished(timeout: timeout) else {
            violate(.timeout, "\(label): the queue did not drain within \(timeout) before the episode\n\(dump())")
            return
        }
        tracker.suspend(clock: clock)
        queue.setPendingLimit(episode.limit, policy: episode.policy)
        for index in episode.accepted {
            makeOperation(index)
            add([index], toQueue: episode.queue, batch: false)
        }
        checkCount(queue, episode.limit, label: "\(label), after the accepted adds")
        var deferred: [Int] = []
        var waiting: [WaitingAdd] = []
        for entry in episode.overflow {
            let index = entry.index
            let operation = makeOperation(index)
            switch entry.mode {
            case .rejected:
                records[index].expectsRejection.store(true, ordering: .sequentiallyConsistent)
                records[index].knownCancelledBeforeStart.store(true, ordering: .sequentiallyConsistent)
                add([index], toQueue: episode.queue, batch: false)
                counters.rejected.add(1, ordering: .relaxed)
                if !operation.isCancelled {
                    violate(.pendingLimit, "\(label): op \(index) was added beyond the limit under .reject but not cancelled: \(operation)")
                }
            case .tryAdd:
                stampAdd([index], tracker: tracker)
                if queue.tryAddOperation(operation) {
                    violate(.pendingLimit, "\(label): tryAddOperation accepted op \(index) beyond the limit")
                } else {
                    counters.tryAddsRefused.add(1, ordering: .relaxed)
                    if operation.isFinished || operation.isExecuting {
                        violate(.pendingLimit, "\(label): tryAddOperation refused op \(index) but did not leave it untouched: \(operation)")
                    }
                    deferred.append(index)
                }
            case .blockingAdd, .asyncAdd:
                let wait = WaitingAdd(index: index)
                waiting.append(wait)
                startWaitingAdd(wait, mode: entry.mode, tracker: tracker)
            }
        }
        for entry in waiting where entry.returned.load(ordering: .sequentiallyConsistent) {
            violate(.pendingLimit, "\(label): the waiting add of op \(entry.index) returned while the suspended queue was full")
        }
        checkCount(queue, episode.limit, label: "\(label), after the adds beyond the limit")
        tracker.resume()
        for entry in waiting {
            counters.waitedAdds.add(1, ordering: .relaxed)
            if entry.done.wait(timeout: .after(timeout)) == .timedOut {
                violate(.timeout, "\(label): the waiting add of op \(entry.index) did not return within \(timeout) after the queue was resumed\n\(dump())")
            }
        }
        for index in deferred {
            guard let operation = records[index].op else { continue }
            guard queue.waitUntilAllOperationsAreFinished(timeout: timeout) else {
                violate(.timeout, "\(label): the queue did not drain within \(timeout) before op \(index) was added again\n\(dump())")
                continue
            }
            stampAdd([index], tracker: tracker)
            if !queue.tryAddOperation(operation) {
                violate(.pendingLimit, "\(label): tryAddOperation refused op \(index) although the queue was empty: \(operation)")
                // Keep the ledger whole: the operation must still complete.
                operation.cancel()
                operation.start()
            }
        }
        queue.setPendingLimit(nil)
    }

    private func checkCount(_ queue: OperationQueue, _ limit: Int, label: String) {
        let count = queue.operationCount
        if count != limit {
            violate(.pendingLimit, "\(label): the suspended queue holds \(count) operations, expected exactly its limit \(limit)")
        }
    }

    /// Adds op `index` on a helper thread (synchronous add under `.block`)
    /// or from a task (`await addOperation`); signals `done` on return.
    private func startWaitingAdd(_ wait: WaitingAdd, mode: StressPlan.PendingEpisode.OverflowMode, tracker: QueueTracker) {
        let index = wait.index
        let done = wait.done
        let queueIndex = tracker.spec.index
        if mode == .blockingAdd {
            let body: @Sendable () -> Void = { [self] in
                scoped { add([index], toQueue: queueIndex, batch: false) }
                wait.returned.store(true, ordering: .sequentiallyConsistent)
                done.signal()
            }
            if StressThread.start(body) == nil {
                violate(.other, "engine: could not create a thread for a blocking add")
                done.signal()
            }
            return
        }
        guard let operation = records[index].op else { return }
        let queue = tracker.queue
        stampAdd([index], tracker: tracker)
        Task { [self] in
            await OperationMisuse.withHandler(misuseHandler) {
                await queue.addOperationWhenRoom(operation)
            }
            wait.returned.store(true, ordering: .sequentiallyConsistent)
            done.signal()
        }
    }
}

/// An add that must wait for room: signalled when it returns.
final class WaitingAdd: Sendable {
    let index: Int
    let done = DispatchSemaphore(value: 0)
    let returned = Atomic<Bool>(false)

    init(index: Int) { self.index = index }
}
