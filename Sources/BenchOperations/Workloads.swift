// The benchmark workloads. One source, compiled twice (BenchFoundation's
// Workloads.swift is a symlink to this file): against this library, and with
// ENGINE_FOUNDATION against Foundation's OperationQueue. It therefore uses only
// API that both share, with Foundation's names and shapes. The Dispatch
// anchors live in the `ops` target (Sources/ops/Bench/BenchDispatch.swift).
//
// Every workload runs once per call, times only the region documented on it,
// then validates: every operation ran exactly once, and every ordering the
// workload promises held (dependency edges, FIFO on a serial queue).
#if ENGINE_FOUNDATION
import Foundation
#else
import Operations
#endif
import Dispatch
import Synchronization

#if ENGINE_FOUNDATION
/// The benchmark workloads on Foundation's `OperationQueue`.
public enum FoundationEngine {
    /// The engine's name in the benchmark's tables.
    public static let engineName = "Foundation"
}
typealias WorkloadEngine = FoundationEngine
#else
/// The benchmark workloads on this library's `OperationQueue`.
public enum OperationsEngine {
    /// The engine's name in the benchmark's tables.
    public static let engineName = "Operations"
}
typealias WorkloadEngine = OperationsEngine
#endif

extension WorkloadEngine {
    /// Timed nanoseconds, validation failures (empty on success) and
    /// workload-specific numbers. A tuple, so that both engine modules and
    /// the `ops` target share one type.
    public typealias Outcome = (nanoseconds: UInt64, failures: [String], metrics: [String: Double])

    /// W0: create a `BlockOperation` and call `start()` by hand, `count`
    /// times on the calling thread. Timed: the whole loop.
    public static func createAndStart(count: Int) -> Outcome {
        let recorder = BenchRecorder(count: count)
        let start = benchNow()
        for index in 0..<count {
            let operation = BlockOperation { recorder.record(index) }
            operation.start()
        }
        let elapsed = benchNow() - start
        return (elapsed, recorder.checkEachRanOnce() + recorder.checkRanInIndexOrder(), [:])
    }

    /// W1 (`batched == false`): `count` independent operations added one by
    /// one, then `waitUntilAllOperationsAreFinished()`.
    /// W2 (`batched == true`): the same operations added with
    /// `addOperations(_:waitUntilFinished: true)`.
    /// Timed: creating the operations, adding them and waiting.
    /// `width` is `maxConcurrentOperationCount` (-1: the default). At width 1
    /// the operations must run in the order they were added.
    public static func independent(count: Int, width: Int, batched: Bool) -> Outcome {
        let queue = OperationQueue()
        if width != OperationQueue.defaultMaxConcurrentOperationCount {
            queue.maxConcurrentOperationCount = width
        }
        let recorder = BenchRecorder(count: count)
        let start = benchNow()
        if batched {
            var operations: [Operation] = []
            operations.reserveCapacity(count)
            for index in 0..<count {
                operations.append(BlockOperation { recorder.record(index) })
            }
            queue.addOperations(operations, waitUntilFinished: true)
        } else {
            for index in 0..<count {
                queue.addOperation(BlockOperation { recorder.record(index) })
            }
            queue.waitUntilAllOperationsAreFinished()
        }
        let elapsed = benchNow() - start
        var failures = recorder.checkEachRanOnce()
        if width == 1 { failures += recorder.checkRanInIndexOrder() }
        return (elapsed, failures, [:])
    }

    /// W3: a chain of `count` operations, each depending on the previous one,
    /// built completely and then added in one `addOperations` call.
    /// Timed: building (creation and `addDependency`), adding and running.
    /// Metric `buildShare`: the fraction of the time spent building.
    public static func chain(count: Int) -> Outcome {
        let queue = OperationQueue()
        let recorder = BenchRecorder(count: count)
        let start = benchNow()
        var operations: [Operation] = []
        operations.reserveCapacity(count)
        var previous: Operation?
        for index in 0..<count {
            let operation = BlockOperation { recorder.record(index) }
            if let previous { operation.addDependency(previous) }
            operations.append(operation)
            previous = operation
        }
        let built = benchNow()
        queue.addOperations(operations, waitUntilFinished: true)
        let end = benchNow()
        let failures = recorder.checkEachRanOnce() + recorder.checkRanInIndexOrder()
        return (end - start, failures, ["buildShare": Double(built - start) / Double(max(end - start, 1))])
    }

    /// W4: one root, `count` middles that depend on it, one sink that
    /// depends on all middles; added in one call.
    /// Timed: building, adding and running. Per-operation figures divide by `count`.
    public static func fanOutFanIn(count: Int) -> Outcome {
        let queue = OperationQueue()
        let recorder = BenchRecorder(count: count + 2)
        let start = benchNow()
        var operations: [Operation] = []
        operations.reserveCapacity(count + 2)
        let root = BlockOperation { recorder.record(0) }
        let sink = BlockOperation { recorder.record(count + 1) }
        operations.append(root)
        for index in 1...count {
            let middle = BlockOperation { recorder.record(index) }
            middle.addDependency(root)
            sink.addDependency(middle)
            operations.append(middle)
        }
        operations.append(sink)
        let built = benchNow()
        queue.addOperations(operations, waitUntilFinished: true)
        let end = benchNow()
        var failures = recorder.checkEachRanOnce()
        if failures.isEmpty {
            let rootFirst = recorder.sequence(0) == 1
            let sinkLast = recorder.sequence(count + 1) == count + 2
            if !rootFirst { failures.append("the root ran \(recorder.sequence(0))-th, expected first") }
            if !sinkLast { failures.append("the sink ran \(recorder.sequence(count + 1))-th, expected last") }
        }
        return (end - start, failures, ["buildShare": Double(built - start) / Double(max(end - start, 1))])
    }

    /// W5: a random DAG of `count` operations, each depending on 0 to 4
    /// earlier ones (`BenchGraph.random`, seeded); added in one call.
    /// Timed: building, adding and running (generating the graph's shape is not timed).
    public static func randomGraph(count: Int, seed: UInt64) -> Outcome {
        let graph = BenchGraph.random(count: count, seed: seed)
        let queue = OperationQueue()
        let recorder = BenchRecorder(count: count)
        let start = benchNow()
        var operations: [Operation] = []
        operations.reserveCapacity(count)
        for index in 0..<count {
            let operation = BlockOperation { recorder.record(index) }
            for edge in graph.offsets[index]..<graph.offsets[index + 1] {
                operation.addDependency(operations[graph.targets[edge]])
            }
            operations.append(operation)
        }
        let built = benchNow()
        queue.addOperations(operations, waitUntilFinished: true)
        let end = benchNow()
        var failures = recorder.checkEachRanOnce()
        if failures.isEmpty { failures += graph.checkOrder(recorder) }
        return (end - start, failures, [
            "buildShare": Double(built - start) / Double(max(end - start, 1)),
            "edges": Double(graph.edgeCount),
        ])
    }

    /// W6: `count` operations added to a suspended queue (not timed), then
    /// `cancelAllOperations()`, resume, `waitUntilAllOperationsAreFinished()`
    /// (timed). No body may run; every operation must end cancelled and finished.
    public static func cancelSuspended(count: Int) -> Outcome {
        let queue = OperationQueue()
        queue.isSuspended = true
        let recorder = BenchRecorder(count: count)
        var operations: [Operation] = []
        operations.reserveCapacity(count)
        for index in 0..<count {
            operations.append(BlockOperation { recorder.record(index) })
        }
        queue.addOperations(operations, waitUntilFinished: false)
        let start = benchNow()
        queue.cancelAllOperations()
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        let elapsed = benchNow() - start
        var failures = recorder.checkNoneRan()
        let unfinished = operations.count(where: { !$0.isFinished || !$0.isCancelled })
        if unfinished > 0 { failures.append("\(unfinished) operations not both cancelled and finished") }
        return (elapsed, failures, [:])
    }

    /// W7: `count` operations with seeded random priorities (`benchPriorities`)
    /// added one by one to a suspended serial queue (not timed), then resume
    /// and wait (timed). Metrics `inversions` and `fifoViolations`
    /// (`benchPriorityViolations`); the caller decides which engines must
    /// have zero of each.
    public static func priorities(count: Int, seed: UInt64) -> Outcome {
        let levels = benchPriorities(count: count, seed: seed)
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        queue.isSuspended = true
        let recorder = BenchRecorder(count: count)
        for index in 0..<count {
            let operation = BlockOperation { recorder.record(index) }
            operation.queuePriority = Operation.QueuePriority(rawValue: levels[index]) ?? .normal
            queue.addOperation(operation)
        }
        let start = benchNow()
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        let elapsed = benchNow() - start
        let failures = recorder.checkEachRanOnce()
        guard failures.isEmpty else { return (elapsed, failures, [:]) }
        let violations = benchPriorityViolations(order: recorder.executionOrder(), priorities: levels)
        return (elapsed, failures, [
            "inversions": Double(violations.inversions),
            "fifoViolations": Double(violations.fifo),
        ])
    }

    /// W8: memory per pending operation. `count` operations created and
    /// added one by one to a suspended queue (the queue holds the only
    /// reference); the resident set size is sampled before (after returning
    /// free heap pages to the kernel) and after. Metric `rssBytesPerOp`. Then the
    /// queue is cancelled, resumed and drained (not measured). Timed: the adds.
    public static func pendingMemory(count: Int) -> Outcome {
        let queue = OperationQueue()
        queue.isSuspended = true
        let recorder = BenchRecorder(count: count)
        let before = BenchMemory.snapshot()
        let start = benchNow()
        for index in 0..<count {
            queue.addOperation(BlockOperation { recorder.record(index) })
        }
        let elapsed = benchNow() - start
        let metrics = BenchMemory.metrics(since: before, count: count)
        queue.cancelAllOperations()
        queue.isSuspended = false
        queue.waitUntilAllOperationsAreFinished()
        var failures = recorder.checkNoneRan()
        let left = queue.operationCount
        if left != 0 { failures.append("\(left) operations still in the queue after draining") }
        return (elapsed, failures, metrics)
    }

    /// W9: `count` operations spread over `queues` serial queues
    /// (`maxConcurrentOperationCount = 1`), `count / queues` per queue, added
    /// by `producers` threads at once: each producer adds its share in rounds,
    /// one operation to every queue per round (`BenchSerialQueues`). The
    /// producer threads exist before the timed region and start together.
    /// Timed: from releasing the producers until every queue has finished
    /// (producers joined, then `waitUntilAllOperationsAreFinished()` on each
    /// queue). Validated: each operation ran once, no queue ran two at once,
    /// and each producer's operations ran in its order on every queue.
    /// Metrics: the spread of the queues' finish times (`finishMinNs`, …).
    public static func serialQueues(count: Int, queues queueCount: Int, producers: Int) -> Outcome {
        let tracker = BenchSerialQueues(queues: queueCount, perQueue: count / queueCount, producers: producers)
        let recorder = BenchRecorder(count: tracker.count)
        let queues = (0..<queueCount).map { _ in
            let queue = OperationQueue()
            queue.maxConcurrentOperationCount = 1
            return queue
        }
        let gate = BenchGate(count: producers)
        let threads = (0..<producers).map { producer in
            BenchThread {
                gate.wait()
                for round in 0..<tracker.perProducer {
                    for queue in 0..<queueCount {
                        let index = tracker.index(queue: queue, producer: producer, round: round)
                        queues[queue].addOperation(BlockOperation {
                            tracker.run(queue: queue, index: index, recorder: recorder)
                        })
                    }
                }
            }
        }
        let start = benchNow()
        gate.open()
        for thread in threads { thread.join() }
        for queue in queues { queue.waitUntilAllOperationsAreFinished() }
        let elapsed = benchNow() - start
        let failures = tracker.check(recorder)
        return (elapsed, failures, failures.isEmpty ? tracker.metrics(start: start) : [:])
    }

    /// W10: `count` operations whose body blocks for `sleepMicroseconds`
    /// (`usleep`), added one by one to one queue of default width, then
    /// `waitUntilAllOperationsAreFinished()`. Timed: create + add + wait.
    /// A sampling thread reads the process's thread count about every
    /// millisecond during the timed region; after it, the thread waits
    /// `idleSeconds` with nothing queued and counts the threads again.
    /// Metrics: `threadsBefore`, `threadsPeak`, `threadsAfterIdle`,
    /// `idleSeconds`, and `concurrentPeak` (the most bodies blocked at once).
    public static func blocking(count: Int, sleepMicroseconds: Int, idleSeconds: Double) -> Outcome {
        let queue = OperationQueue()
        let run = BenchBlockingRun(count: count, sleepMicroseconds: sleepMicroseconds)
        let start = benchNow()
        for index in 0..<count {
            queue.addOperation(BlockOperation { run.body(index) })
        }
        queue.waitUntilAllOperationsAreFinished()
        return run.result(nanoseconds: benchNow() - start, idleSeconds: idleSeconds)
    }

    /// W1a: W1 with `async` operation bodies: `count` operations whose body
    /// is an `async` closure (this library's `ResultOperation`), added one by
    /// one, then `waitUntilAllOperationsAreFinished()`. Timed: create + add +
    /// wait. Returns nil on Foundation, which has no async operation bodies.
    public static func independentAsync(count: Int) -> Outcome? {
        #if ENGINE_FOUNDATION
        return nil
        #else
        let queue = OperationQueue()
        let recorder = BenchRecorder(count: count)
        let start = benchNow()
        for index in 0..<count {
            queue.addOperation(ResultOperation<Void, Never> { () async in recorder.record(index) })
        }
        queue.waitUntilAllOperationsAreFinished()
        let elapsed = benchNow() - start
        return (elapsed, recorder.checkEachRanOnce(), [:])
        #endif
    }
}
