import Dispatch
import Operations

extension StressRound {
    /// The weak-reference census, once the round drained: drops every
    /// reference the engine holds (operations, observations, queues), then
    /// waits (bounded by `censusTimeout`) for every weakly tracked
    /// operation, closure sentinel, barrier block and queue to be released.
    /// Whatever is still alive then is reported as a `leak`, by name.
    /// Returns (references tracked, references leaked).
    func census() -> (tracked: Int, leaks: Int) {
        teardown()
        for tracker in trackers { tracker.release() }
        let deadline = DispatchTime.after(configuration.censusTimeout)
        let pause = DispatchSemaphore(value: 0)
        var delay = Duration.milliseconds(1)
        var (tracked, alive) = survivors()
        while !alive.isEmpty, DispatchTime.now() < deadline {
            _ = pause.wait(timeout: .after(delay))
            delay = min(delay * 2, .milliseconds(50))
            (tracked, alive) = survivors()
        }
        for survivor in alive {
            violate(.leak, "\(survivor) is still alive \(configuration.censusTimeout) after the round drained and the engine dropped its references")
        }
        return (tracked, alive.count)
    }

    /// How many times `record`'s observers saw `isFinished` become true,
    /// once they have been told. The completion block, which the final
    /// drain waits for, is handed on before the observers are told, so a
    /// finish on a thread the drain does not wait for (a `start()` by hand)
    /// may still be telling them: waited for, bounded by `waitTimeout`.
    func finishNotifications(of record: OpRecord) -> Int {
        let deadline = DispatchTime.after(configuration.waitTimeout)
        let pause = DispatchSemaphore(value: 0)
        var delay = Duration.milliseconds(1)
        var seen = record.finishNotifications.load(ordering: .sequentiallyConsistent)
        while seen == 0, DispatchTime.now() < deadline {
            _ = pause.wait(timeout: .after(delay))
            delay = min(delay * 2, .milliseconds(50))
            seen = record.finishNotifications.load(ordering: .sequentiallyConsistent)
        }
        return seen
    }

    /// Counts the weakly tracked references and names the live ones.
    private func survivors() -> (tracked: Int, alive: [String]) {
        var tracked = 0
        var alive: [String] = []
        for record in records where record.created.load(ordering: .sequentiallyConsistent) {
            let index = record.spec.index
            let (operation, body, completion) = record.refs.withLock { ($0.weak, $0.bodySentinel, $0.completionSentinel) }
            tracked += record.spec.kind == .queueRun ? 1 : 3
            if let operation { alive.append("op \(index) [\(record.spec.summary)] (\(operation))") }
            if body != nil { alive.append("the body closure of op \(index) (its sentinel)") }
            if completion != nil { alive.append("the completion block of op \(index) (its sentinel)") }
        }
        for barrier in barriers {
            tracked += 1
            if barrier.token.withLock({ $0.token }) != nil {
                alive.append("the block of barrier \(barrier.id) on queue \(barrier.queueIndex.load(ordering: .relaxed))")
            }
        }
        for tracker in trackers {
            tracked += 1
            if let queue = tracker.refs.withLock({ $0.weak }) {
                alive.append("queue \(tracker.spec.index) (\(tracker.spec.role.rawValue)) \(queue)")
            }
        }
        return (tracked, alive)
    }
}
