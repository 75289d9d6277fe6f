import Dispatch
import Synchronization

/// The lower bound for each workload: the same operation bodies
/// (`BenchRecorder.record`) run with raw Dispatch (DispatchQueue,
/// DispatchGroup, DispatchWorkItem). Each anchor is documented in
/// BENCHMARKS.md; every one is validated like the operation engines.
enum DispatchEngine: BenchEngine {
    static let engineName = "Dispatch"

    /// W0 anchor: create a `DispatchWorkItem` and `perform()` it.
    static func createAndStart(count: Int) -> BenchRunResult {
        let recorder = BenchRecorder(count: count)
        let start = benchNow()
        for index in 0..<count {
            let item = DispatchWorkItem { recorder.record(index) }
            item.perform()
        }
        let elapsed = benchNow() - start
        return (elapsed, recorder.checkEachRanOnce() + recorder.checkRanInIndexOrder(), [:])
    }

    /// W1/W2 anchor: `async(group:)` each block, then `group.wait()`. A
    /// concurrent queue for width ≠ 1 (Dispatch has no width limit; on two
    /// cores the pool is two wide anyway), a serial queue for width 1.
    /// Dispatch has no batch add, so W2's anchor is the same as W1's.
    static func independent(count: Int, width: Int, batched: Bool) -> BenchRunResult {
        let queue = width == 1
            ? DispatchQueue(label: "bench.serial")
            : DispatchQueue(label: "bench.concurrent", attributes: .concurrent)
        let group = DispatchGroup()
        let recorder = BenchRecorder(count: count)
        let start = benchNow()
        for index in 0..<count {
            queue.async(group: group) { recorder.record(index) }
        }
        group.wait()
        let elapsed = benchNow() - start
        var failures = recorder.checkEachRanOnce()
        if width == 1 { failures += recorder.checkRanInIndexOrder() }
        return (elapsed, failures, [:])
    }

    /// W1a anchor: one unstructured `Task` per closure (Swift concurrency's
    /// cooperative pool runs async bodies), counted out with a `DispatchGroup`.
    static func independentAsync(count: Int) -> BenchRunResult? {
        let group = DispatchGroup()
        let recorder = BenchRecorder(count: count)
        let start = benchNow()
        for index in 0..<count {
            group.enter()
            Task {
                recorder.record(index)
                group.leave()
            }
        }
        group.wait()
        let elapsed = benchNow() - start
        return (elapsed, recorder.checkEachRanOnce(), [:])
    }

    /// W3 anchor: each block runs its body, then dispatches the next link.
    static func chain(count: Int) -> BenchRunResult {
        let queue = DispatchQueue(label: "bench.concurrent", attributes: .concurrent)
        let group = DispatchGroup()
        let recorder = BenchRecorder(count: count)
        let start = benchNow()
        queue.async(group: group) { chainLink(0, count: count, queue: queue, group: group, recorder: recorder) }
        group.wait()
        let elapsed = benchNow() - start
        return (elapsed, recorder.checkEachRanOnce() + recorder.checkRanInIndexOrder(), [:])
    }

    private static func chainLink(
        _ index: Int, count: Int, queue: DispatchQueue, group: DispatchGroup, recorder: BenchRecorder
    ) {
        recorder.record(index)
        let next = index + 1
        guard next < count else { return }
        queue.async(group: group) { chainLink(next, count: count, queue: queue, group: group, recorder: recorder) }
    }

    /// W4 anchor: the root block dispatches the `count` middles into a
    /// group; `group.notify` runs the sink.
    static func fanOutFanIn(count: Int) -> BenchRunResult {
        let queue = DispatchQueue(label: "bench.concurrent", attributes: .concurrent)
        let middles = DispatchGroup()
        let done = DispatchGroup()
        let recorder = BenchRecorder(count: count + 2)
        let start = benchNow()
        done.enter()
        queue.async {
            recorder.record(0)
            for index in 1...count {
                queue.async(group: middles) { recorder.record(index) }
            }
            middles.notify(queue: queue) {
                recorder.record(count + 1)
                done.leave()
            }
        }
        done.wait()
        let elapsed = benchNow() - start
        var failures = recorder.checkEachRanOnce()
        if failures.isEmpty {
            if recorder.sequence(0) != 1 { failures.append("the root ran \(recorder.sequence(0))-th, expected first") }
            if recorder.sequence(count + 1) != count + 2 {
                failures.append("the sink ran \(recorder.sequence(count + 1))-th, expected last")
            }
        }
        return (elapsed, failures, [:])
    }

    /// W5 anchor: a hand-written DAG scheduler. Timed: building successor
    /// lists and per-node atomic counters of unfinished dependencies (the
    /// counterpart of `addDependency`), then running: each finished node
    /// decrements its successors' counters and dispatches those that reach 0.
    static func randomGraph(count: Int, seed: UInt64) -> BenchRunResult {
        let graph = BenchGraph.random(count: count, seed: seed)
        let queue = DispatchQueue(label: "bench.concurrent", attributes: .concurrent)
        let recorder = BenchRecorder(count: count)
        let start = benchNow()
        let run = DispatchGraphRun(graph: graph, queue: queue, recorder: recorder)
        let built = benchNow()
        run.start()
        run.group.wait()
        let end = benchNow()
        var failures = recorder.checkEachRanOnce()
        if failures.isEmpty { failures += graph.checkOrder(recorder) }
        return (end - start, failures, [
            "buildShare": Double(built - start) / Double(max(end - start, 1)),
            "edges": Double(graph.edgeCount),
        ])
    }

    /// W6 anchor: `count` `DispatchWorkItem`s on a suspended concurrent
    /// queue (not timed); timed: `cancel()` each, resume, `group.wait()`.
    static func cancelSuspended(count: Int) -> BenchRunResult {
        let queue = DispatchQueue(label: "bench.concurrent", attributes: .concurrent)
        queue.suspend()
        let group = DispatchGroup()
        let recorder = BenchRecorder(count: count)
        var items: [DispatchWorkItem] = []
        items.reserveCapacity(count)
        for index in 0..<count {
            let item = DispatchWorkItem { recorder.record(index) }
            items.append(item)
            queue.async(group: group, execute: item)
        }
        let start = benchNow()
        for item in items { item.cancel() }
        queue.resume()
        group.wait()
        let elapsed = benchNow() - start
        var failures = recorder.checkNoneRan()
        let notCancelled = items.count(where: { !$0.isCancelled })
        if notCancelled > 0 { failures.append("\(notCancelled) work items not cancelled") }
        return (elapsed, failures, [:])
    }

    /// W7 anchor: `count` blocks on a suspended serial queue (not timed);
    /// timed: resume and wait. Dispatch has no per-block priority within a
    /// queue, so it runs first in, first out: its "inversions" only show
    /// what ignoring priorities would cost.
    static func priorities(count: Int, seed: UInt64) -> BenchRunResult {
        let levels = benchPriorities(count: count, seed: seed)
        let queue = DispatchQueue(label: "bench.serial")
        queue.suspend()
        let group = DispatchGroup()
        let recorder = BenchRecorder(count: count)
        for index in 0..<count {
            queue.async(group: group) { recorder.record(index) }
        }
        let start = benchNow()
        queue.resume()
        group.wait()
        let elapsed = benchNow() - start
        let failures = recorder.checkEachRanOnce()
        guard failures.isEmpty else { return (elapsed, failures, [:]) }
        let violations = benchPriorityViolations(order: recorder.executionOrder(), priorities: levels)
        return (elapsed, failures, [
            "inversions": Double(violations.inversions),
            "fifoViolations": Double(violations.fifo),
        ])
    }

    /// W8 anchor: `count` blocks (the same closure) queued with `async` on a
    /// suspended serial queue; resident memory before and after.
    static func pendingMemory(count: Int) -> BenchRunResult {
        let queue = DispatchQueue(label: "bench.serial")
        queue.suspend()
        let group = DispatchGroup()
        let recorder = BenchRecorder(count: count)
        let before = BenchMemory.snapshot()
        let start = benchNow()
        for index in 0..<count {
            queue.async(group: group) { recorder.record(index) }
        }
        let elapsed = benchNow() - start
        let metrics = BenchMemory.metrics(since: before, count: count)
        queue.resume()
        group.wait()
        // The blocks are not cancellable, so they ran once the queue resumed.
        return (elapsed, recorder.checkEachRanOnce(), metrics)
    }

    /// W9 anchor: `queues` serial `DispatchQueue`s, all targeting the global
    /// concurrent queue, fed by `producers` threads exactly as in the
    /// operation engines (`async(group:)` instead of `addOperation`); after
    /// joining the producers, `group.wait()`. Validated the same way.
    static func serialQueues(count: Int, queues queueCount: Int, producers: Int) -> BenchRunResult {
        let tracker = BenchSerialQueues(queues: queueCount, perQueue: count / queueCount, producers: producers)
        let recorder = BenchRecorder(count: tracker.count)
        let target = DispatchQueue.global()
        let queues = (0..<queueCount).map { DispatchQueue(label: "bench.serial.\($0)", target: target) }
        let group = DispatchGroup()
        let gate = BenchGate(count: producers)
        let threads = (0..<producers).map { producer in
            BenchThread {
                gate.wait()
                for round in 0..<tracker.perProducer {
                    for queue in 0..<queueCount {
                        let index = tracker.index(queue: queue, producer: producer, round: round)
                        queues[queue].async(group: group) {
                            tracker.run(queue: queue, index: index, recorder: recorder)
                        }
                    }
                }
            }
        }
        let start = benchNow()
        gate.open()
        for thread in threads { thread.join() }
        group.wait()
        let elapsed = benchNow() - start
        let failures = tracker.check(recorder)
        return (elapsed, failures, failures.isEmpty ? tracker.metrics(start: start) : [:])
    }

    /// W10 anchor: `count` blocking blocks `async(group:)` on the global
    /// concurrent queue, then `group.wait()`; threads sampled as in the
    /// operation engines.
    static func blocking(count: Int, sleepMicroseconds: Int, idleSeconds: Double) -> BenchRunResult {
        let queue = DispatchQueue.global()
        let group = DispatchGroup()
        let run = BenchBlockingRun(count: count, sleepMicroseconds: sleepMicroseconds)
        let start = benchNow()
        for index in 0..<count {
            queue.async(group: group) { run.body(index) }
        }
        group.wait()
        return run.result(nanoseconds: benchNow() - start, idleSeconds: idleSeconds)
    }
}

/// State of one W5 Dispatch run.
final class DispatchGraphRun: @unchecked Sendable {
    // @unchecked Sendable: `successorOffsets` and `successors` are immutable
    // after `init`; `remaining` holds one atomic per node; `queue`, `group`
    // and `recorder` are Sendable.
    let queue: DispatchQueue
    let group = DispatchGroup()
    let recorder: BenchRecorder
    let count: Int
    private let successorOffsets: [Int]
    private let successors: [Int]
    /// Nodes without dependencies, fixed before anything runs.
    private let roots: [Int]
    private let remaining: UnsafeMutablePointer<Atomic<Int>>

    init(graph: BenchGraph, queue: DispatchQueue, recorder: BenchRecorder) {
        self.queue = queue
        self.recorder = recorder
        count = graph.count
        var offsets = [Int](repeating: 0, count: graph.count + 1)
        for target in graph.targets { offsets[target + 1] += 1 }
        for index in 0..<graph.count { offsets[index + 1] += offsets[index] }
        var cursor = offsets
        var list = [Int](repeating: 0, count: graph.targets.count)
        remaining = .allocate(capacity: max(graph.count, 1))
        for index in 0..<graph.count {
            let first = graph.offsets[index]
            let end = graph.offsets[index + 1]
            (remaining + index).initialize(to: Atomic(end - first))
            for edge in first..<end {
                let dependency = graph.targets[edge]
                list[cursor[dependency]] = index
                cursor[dependency] += 1
            }
        }
        successorOffsets = offsets
        successors = list
        roots = (0..<graph.count).filter { graph.offsets[$0] == graph.offsets[$0 + 1] }
    }

    deinit {
        remaining.deinitialize(count: count)
        remaining.deallocate()
    }

    /// Dispatches every node without dependencies.
    func start() {
        for root in roots {
            queue.async(group: group) { self.run(root) }
        }
    }

    private func run(_ node: Int) {
        recorder.record(node)
        for position in successorOffsets[node]..<successorOffsets[node + 1] {
            let successor = successors[position]
            if remaining[successor].wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
                queue.async(group: group) { self.run(successor) }
            }
        }
    }
}
