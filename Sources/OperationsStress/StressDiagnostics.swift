import Dispatch
import Operations
import Synchronization

extension StressRound {
    /// Waits from outside (bounded) for operation `index`, then checks that
    /// it finished, and that its completion block, which runs
    /// asynchronously as in Foundation (the wait does not wait for it),
    /// runs once within the wait's bound.
    func waitFromOutside(for index: Int, who: String) {
        let record = records[index]
        guard let operation = record.op else { return }
        waits.add(1, ordering: .relaxed)
        guard operation.waitUntilFinished(timeout: configuration.waitTimeout) else {
            violate(.timeout, "\(who) waited \(configuration.waitTimeout) for op \(index) (\(record.spec.summary)) and it did not finish: \(operation)\n\(dump())")
            return
        }
        let completions = record.completions.load(ordering: .sequentiallyConsistent)
        if !operation.isFinished || completions > 1 {
            violate(.completion, "waitUntilFinished for op \(index) returned with isFinished \(operation.isFinished) and \(completions) completion block runs (it must return once the operation finished; the block runs once)")
            return
        }
        let completed = DispatchSemaphore(value: 0)
        record.onCompletion { completed.signal() }
        if completed.wait(timeout: .after(configuration.waitTimeout)) == .timedOut {
            violate(.completion, "op \(index) finished, but its completion block did not run within \(configuration.waitTimeout) of the wait's return")
        }
    }

    /// A description of the queues and of unfinished operations, for
    /// violations that are about progress (timeouts, undrained queues).
    /// The first three dumps are detailed; later ones are one line.
    func dump() -> String {
        let number = dumps.wrappingAdd(1, ordering: .relaxed).newValue
        let outstandingNow = outstanding.load(ordering: .sequentiallyConsistent)
        var lines = ["--- state dump (seed \(configuration.seed)): \(outstandingNow) outstanding (including the driver's token), \(created.load(ordering: .relaxed)) created, \(handStarts.load(ordering: .relaxed)) started by hand"]
        guard number <= 3 else { return lines[0] + " (further detail omitted)" }
        for tracker in trackers {
            let queue = tracker.queue
            let (inFlight, since, lastLimit) = tracker.state.withLock { state in
                (state.inFlight.keys.sorted(), state.suspendedSince, state.limits.last?.width ?? 0)
            }
            lines.append("queue \(tracker.spec.index) (\(tracker.spec.role.rawValue)): \(queue), maxConcurrentOperationCount \(queue.maxConcurrentOperationCount) (engine's last limit \(lastLimit)), isSuspended \(queue.isSuspended) (engine: \(since.map { "since tick \($0)" } ?? "resumed")), operationCount \(queue.operationCount), progress \(queue.progress), engine sees running: \(inFlight)")
            for operation in queue.operations.prefix(6) {
                let unfinished = operation.dependencies.filter { !$0.isFinished }
                lines.append("    \(operation) unfinished dependencies: \(unfinished.map { "\($0)" })")
            }
        }
        var listed = 0
        for record in records where listed < 12 {
            guard let operation = record.op, record.completions.load(ordering: .sequentiallyConsistent) == 0 else { continue }
            listed += 1
            let dependencies = record.spec.dependencies.map { dependency -> String in
                let other = records[dependency]
                return "op \(dependency) finished \(other.hasFinished) completed \(other.completions.load(ordering: .sequentiallyConsistent))"
            }
            lines.append("  incomplete op \(record.spec.index) [\(record.spec.summary)]: \(operation) body starts \(record.bodyStarts.load(ordering: .sequentiallyConsistent)) state \(record.bodyState.load(ordering: .sequentiallyConsistent)); dependencies: \(dependencies)")
        }
        return lines.joined(separator: "\n")
    }
}

extension StressPlan.OperationSpec {
    /// A short description for messages.
    public var summary: String {
        let kindText: String
        switch kind {
        case .plain: kindText = "plain"
        case .blocks(let count): kindText = "\(count) blocks"
        case .async(let elsewhere): kindText = elsewhere ? "async, finished elsewhere" : "async, finished inline"
        case .result: kindText = "ResultOperation, async body"
        case .queueRun: kindText = "queue.run, async body"
        }
        let placementText: String
        switch placement {
        case .queue(let queue): placementText = "queue \(queue)"
        case .hand(let inline): placementText = inline ? "by hand, inline" : "by hand"
        }
        let originText: String
        switch origin {
        case .driver: originText = "driver"
        case .child(let parent): originText = "child of op \(parent)"
        }
        var extras = ""
        if !children.isEmpty { extras += ", children \(children) from \(childSource)" }
        if let target = finishObserverWaitsFor { extras += ", isFinished observer waits for op \(target)" }
        if let misuse { extras += ", misuse \(misuse)" }
        return "\(kindText), \(placementText), \(originText), dependencies \(dependencies), \(priority), qos \(qualityOfService), cancellation \(cancellation)\(extras)"
    }
}

extension StressPlan {
    /// Describes operation `index` and the driver steps around the one that
    /// adds it (or its parent): for reading a failure's plan by hand.
    public func describe(operation index: Int, context: Int = 6) -> String {
        guard operations.indices.contains(index) else { return "no op \(index) in this plan" }
        let spec = operations[index]
        var lines = ["op \(index): \(spec.summary)" + (spec.children.isEmpty ? "" : ", children \(spec.children)")]
        var root = index
        if case .child(let parent) = spec.origin { root = parent }
        let position = steps.firstIndex { step in
            switch step {
            case .add(let added): return added == root
            case .addBatch(_, let batch): return batch.contains(root)
            default: return false
            }
        }
        if let position, case .queue(let queue) = spec.placement {
            let earlier = steps[..<position].indices.filter { offset in
                if case .barrier(let barrierQueue, _) = steps[offset] { return barrierQueue == queue }
                return false
            }.suffix(2)
            for offset in earlier { lines.append("  step \(offset): \(steps[offset]) (last barriers on queue \(queue) before it)") }
        }
        if let position {
            for offset in max(0, position - context)...min(steps.count - 1, position + context) {
                lines.append("\(offset == position ? ">" : " ") step \(offset): \(steps[offset])")
            }
        }
        return lines.joined(separator: "\n")
    }
}
