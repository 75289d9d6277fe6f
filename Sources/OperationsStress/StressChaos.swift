import Dispatch
import Operations
import Synchronization

/// The chaos threads of a round, each with its own seeded stream of
/// decisions, paced by the driver: the driver "ticks" a thread every few
/// operations it adds, and the thread performs one action per tick.
///
/// - suspender: suspends a suspendable queue, holds it until the next tick
///   (at most 2 ms, so it never stalls the round), resumes it;
/// - resizer: changes an elastic queue's `maxConcurrentOperationCount`
///   (1, 2, 3, 4, 6, -1, and now and then 0 for up to 2 ms);
/// - canceller: cancels a random created operation, or one whose body just
///   began (cancellation during execution), changes a priority, or calls
///   `cancelAllOperations()` (5% of its actions) on a queue that takes it,
///   which may cancel a pending barrier;
/// - waiter: waits from outside (bounded) for a random created operation
///   and checks that it finished and that its completion block runs (it
///   runs asynchronously, as in Foundation).
///
/// Every wait is bounded; the suspender and resizer are the only threads
/// that suspend queues or change widths, so the trackers' logs are exact.
final class StressChaos: Sendable {
    let round: StressRound
    /// Driver operations between two ticks of each thread.
    static let intervals = [24, 32, 10, 40]
    private let signals: [DispatchSemaphore]
    private let stopped = Atomic<Bool>(false)
    private let driverSteps = Atomic<Int>(0)
    private let threads = StressLock<[StressThread]>([])

    init(round: StressRound) {
        self.round = round
        signals = Self.intervals.map { _ in DispatchSemaphore(value: 0) }
    }

    /// Starts the threads.
    func start() {
        let bodies: [@Sendable () -> Void] = [
            { [self] in suspender() },
            { [self] in resizer() },
            { [self] in canceller() },
            { [self] in waiter() },
        ]
        for body in bodies {
            let scopedBody: @Sendable () -> Void = { [round] in round.scoped { body() } }
            guard let thread = StressThread.start(scopedBody) else {
                round.violate(.other, "engine: could not create a chaos thread")
                continue
            }
            threads.withLock { $0.append(thread) }
        }
    }

    /// The driver added an operation.
    func tick() {
        let steps = driverSteps.wrappingAdd(1, ordering: .relaxed).newValue
        for (index, interval) in Self.intervals.enumerated() where steps % interval == 0 {
            signals[index].signal()
        }
    }

    /// Stops the threads and waits (bounded) for them to return.
    func stop(timeout: Duration) {
        stopped.store(true, ordering: .sequentiallyConsistent)
        for signal in signals { signal.signal() }
        for thread in threads.withLock({ $0 }) where !thread.join(timeout: timeout) {
            round.violate(.timeout, "a chaos thread did not stop within \(timeout)\n\(round.dump())")
        }
    }

    /// Waits for the thread's next tick. Returns false once stopped.
    private func nextTick(_ thread: Int) -> Bool {
        while !stopped.load(ordering: .sequentiallyConsistent) {
            if signals[thread].wait(timeout: .after(.milliseconds(50))) == .success {
                return !stopped.load(ordering: .sequentiallyConsistent)
            }
        }
        return false
    }

    /// Holds a temporary state until the next tick or 2 ms.
    private func hold(_ thread: Int) {
        _ = signals[thread].wait(timeout: .after(.milliseconds(2)))
    }

    private func randomCreated(_ random: inout StressRandom) -> (Int, Operation)? {
        let highWater = round.createdHighWater.load(ordering: .sequentiallyConsistent)
        guard highWater > 0 else { return nil }
        let index = random.below(highWater)
        guard let operation = round.records[index].op else { return nil }
        return (index, operation)
    }

    private func suspender() {
        var random = StressRandom(seed: round.configuration.seed, stream: 100)
        let candidates = round.trackers.filter(\.spec.suspendable)
        while nextTick(0) {
            guard !candidates.isEmpty else { continue }
            let tracker = random.pick(candidates)
            tracker.suspend(clock: round.clock)
            round.chaosActions.add(1, ordering: .relaxed)
            hold(0)
            tracker.resume()
        }
    }

    private func resizer() {
        var random = StressRandom(seed: round.configuration.seed, stream: 101)
        let candidates = round.trackers.filter { $0.spec.role == .elastic }
        while nextTick(1) {
            guard !candidates.isEmpty else { continue }
            let tracker = random.pick(candidates)
            round.chaosActions.add(1, ordering: .relaxed)
            if random.chance(perMille: 60) {
                tracker.setWidth(0, clock: round.clock)
                hold(1)
                tracker.setWidth(random.int(in: 1...3), clock: round.clock)
            } else {
                tracker.setWidth(random.pick([1, 2, 3, 4, 6, -1]), clock: round.clock)
            }
        }
    }

    private func canceller() {
        var random = StressRandom(seed: round.configuration.seed, stream: 102)
        let cancelAllTargets = round.trackers.filter(\.spec.cancelAllTarget)
        while nextTick(2) {
            round.chaosActions.add(1, ordering: .relaxed)
            let roll = random.below(1000)
            if roll < 500 {
                randomCreated(&random)?.1.cancel()
            } else if roll < 750 {
                if let index = round.running.withLock({ $0.pick(&random) }) {
                    round.records[index].op?.cancel()
                }
            } else if roll < 950 {
                let priority = random.pick(Operation.QueuePriority.allCases)
                randomCreated(&random)?.1.queuePriority = priority
            } else if !cancelAllTargets.isEmpty {
                random.pick(cancelAllTargets).queue.cancelAllOperations()
            }
        }
    }

    private func waiter() {
        var random = StressRandom(seed: round.configuration.seed, stream: 103)
        while nextTick(3) {
            guard let (index, _) = randomCreated(&random) else { continue }
            round.waitFromOutside(for: index, who: "the waiter thread")
        }
    }
}
