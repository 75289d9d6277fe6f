#if Metrics
import CoreMetrics
import Dispatch
import MetricsTestKit
import Operations
@testable import OperationsMetrics
import Testing

/// The factory bootstrapped into `MetricsSystem`, once per process.
enum MetricsBootstrap {
    static let factory: TestMetrics = {
        let factory = TestMetrics()
        MetricsSystem.bootstrap(factory)
        return factory
    }()
}

/// Its readiness is user code: `super.isReady` and a flag, announced with
/// willChange/didChange of `isReady`.
final class SwitchedReadinessOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `allowed` is guarded by its lock.
    private let allowed = TestLock(true)

    override var isReady: Bool { super.isReady && allowed.withLock { $0 } }

    func set(_ value: Bool) {
        willChangeValue(forKey: "isReady")
        allowed.withLock { $0 = value }
        didChangeValue(forKey: "isReady")
    }
}

extension IntegrationTests {
    @Suite("OperationsMetrics")
    struct MetricsTests {
        let labels = OperationMetrics.Labels()

        func meter(_ metrics: TestMetrics, _ label: String, _ queue: String) throws -> TestMeter {
            try metrics.expectMeter(label, [("queue", queue)])
        }

        func timer(_ metrics: TestMetrics, _ label: String, _ queue: String) throws -> TestTimer {
            try metrics.expectTimer(label, [("queue", queue)])
        }

        @Test("Gauges follow pending, ready and executing operations and return to 0; every operation is timed")
        func gaugesAndTimers() throws {
            let metrics = TestMetrics()
            let token = OperationMetrics.install(factory: metrics)
            defer { token.cancel() }
            let queue = OperationQueue()
            let name = uniqueName("images")
            queue.name = name
            queue.maxConcurrentOperationCount = 2

            let gate = Gate()
            let running = Arrivals()
            let blocked = (0..<4).map { _ in
                BlockOperation {
                    running.arrive()
                    _ = gate.wait()
                }
            }
            let dependency = BlockOperation {}
            let waiting = BlockOperation {}
            waiting.addDependency(dependency)   // not ready until `dependency` runs
            queue.addOperations(blocked + [waiting], waitUntilFinished: false)
            #expect(running.wait(for: 2))

            // Two execute (the width), two more are ready, `waiting` is not.
            #expect(try meter(metrics, labels.executing, name).lastValue == 2)
            #expect(try meter(metrics, labels.pending, name).lastValue == 3)
            #expect(try meter(metrics, labels.ready, name).lastValue == 2)

            dependency.start()                  // by hand: counted in no queue
            #expect(try meter(metrics, labels.ready, name).lastValue == 3)
            #expect(try meter(metrics, labels.pending, name).lastValue == 3)

            gate.open()
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(retired(blocked + [waiting]))

            for label in [labels.pending, labels.ready, labels.executing] {
                let values = try meter(metrics, label, name).values
                #expect(values.last == 0, "\(label) returns to 0")
                #expect(values.allSatisfy { $0 >= 0 }, "\(label) never negative")
            }
            let executing = try meter(metrics, labels.executing, name).values
            #expect(executing.max() == 2, "the width bounds executing")
            let waits = try timer(metrics, labels.waitDuration, name).values
            let runs = try timer(metrics, labels.runDuration, name).values
            #expect(waits.count == 5 && runs.count == 5, "one wait and one run per operation")
            #expect(waits.allSatisfy { $0 >= 0 } && runs.allSatisfy { $0 >= 0 })
            #expect(token.recorder.entryCount == 0, "bookkeeping released at finish")
        }

        @Test("The ready gauge takes an operation out when it becomes not ready: a dependency added, an isReady override turning false")
        func readyGaugeFollowsNotReady() throws {
            let metrics = TestMetrics()
            let token = OperationMetrics.install(factory: metrics)
            defer { token.cancel() }
            let queue = OperationQueue()
            let name = uniqueName("gauge-not-ready")
            queue.name = name
            queue.isSuspended = true
            func ready() throws -> Double? { try meter(metrics, labels.ready, name).lastValue }
            func pending() throws -> Double? { try meter(metrics, labels.pending, name).lastValue }

            let plain = BlockOperation {}
            let switched = SwitchedReadinessOperation()
            queue.addOperations([plain, switched], waitUntilFinished: false)
            #expect(try ready() == 2)
            #expect(try pending() == 2)

            let dependency = BlockOperation {}
            plain.addDependency(dependency)      // ready → not ready
            #expect(try ready() == 1)
            switched.set(false)                  // its override turns false, announced
            #expect(try ready() == 0)
            #expect(try pending() == 2)

            dependency.start()                   // by hand: `plain` is ready again
            #expect(try ready() == 1)
            switched.set(true)
            #expect(try ready() == 2)

            queue.isSuspended = false
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(retired([plain, switched]))
            for label in [labels.pending, labels.ready, labels.executing] {
                let values = try meter(metrics, label, name).values
                #expect(values.last == 0, "\(label) returns to 0")
                #expect(values.allSatisfy { $0 >= 0 }, "\(label) never negative")
            }
            #expect(token.recorder.entryCount == 0)
        }

        @Test("Cancellations (also before the add) and rejections are counted per queue")
        func cancellationsAndRejections() throws {
            let metrics = TestMetrics()
            let token = OperationMetrics.install(factory: metrics)
            defer { token.cancel() }
            let queue = OperationQueue()
            let name = uniqueName("uploads")
            queue.name = name
            queue.isSuspended = true
            queue.setPendingLimit(3)

            let ran = Collected<Int>()
            let operations = (0..<3).map { index in BlockOperation { ran.append(index) } }
            // Cancelled before it is added: counted too (probe 44: it was not,
            // its cancellation had no queue yet).
            operations[0].cancel()
            queue.addOperations(operations, waitUntilFinished: false)
            #expect(!queue.tryAddOperation(BlockOperation {}), "the limit refuses a fourth")
            operations[2].cancel()
            #expect(try meter(metrics, labels.pending, name).lastValue == 3)

            queue.isSuspended = false
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(retired(operations))

            #expect(ran.all == [1])
            #expect(try metrics.expectCounter(labels.cancellations, [("queue", name)]).totalValue == 2)
            #expect(try metrics.expectCounter(labels.rejections, [("queue", name)]).totalValue == 1)
            #expect(try timer(metrics, labels.runDuration, name).values.count == 3, "cancelled operations finish too")
            #expect(try meter(metrics, labels.pending, name).lastValue == 0)
            #expect(try meter(metrics, labels.executing, name).lastValue == 0)
            #expect(token.recorder.entryCount == 0)
        }

        @Test("An asynchronous operation executes until finish() is called")
        func asynchronousOperation() throws {
            let metrics = TestMetrics()
            let token = OperationMetrics.install(factory: metrics)
            defer { token.cancel() }
            let queue = OperationQueue()
            let name = uniqueName("downloads")
            queue.name = name

            let gate = Gate()
            let executed = Arrivals()
            let download = AsyncOperation { operation in
                executed.arrive()
                DispatchQueue.global().async { _ = gate.wait(); operation.finish() }
            }
            queue.addOperation(download)
            #expect(executed.wait(for: 1))
            #expect(try meter(metrics, labels.executing, name).lastValue == 1)
            #expect(try timer(metrics, labels.runDuration, name).values.isEmpty)

            gate.open()
            #expect(download.waitUntilFinished(timeout: patience))
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(try meter(metrics, labels.executing, name).lastValue == 0)
            #expect(try timer(metrics, labels.runDuration, name).values.count == 1)
        }

        @Test("By default, the bootstrapped factory; unnamed queues share one series")
        func bootstrappedFactory() throws {
            let metrics = MetricsBootstrap.factory
            let token = OperationMetrics.install()
            defer { token.cancel() }
            let named = OperationQueue()
            let name = uniqueName("bootstrapped")
            named.name = name
            let operation = BlockOperation {}
            named.addOperation(operation)
            #expect(retired([operation]))
            #expect(try timer(metrics, labels.runDuration, name).values.count == 1)
            #expect(try meter(metrics, labels.pending, name).lastValue == 0)

            #expect(OperationMetrics.defaultQueueDimension(OperationQueue()) == OperationMetrics.unnamedQueue)
            #expect(OperationMetrics.defaultQueueDimension(named) == name)
            // A name of the user's own is kept, even one that looks like a default.
            let lookalike = OperationQueue()
            lookalike.name = "NSOperationQueue 0x1234"
            #expect(OperationMetrics.defaultQueueDimension(lookalike) == "NSOperationQueue 0x1234")
            lookalike.name = nil
            #expect(OperationMetrics.defaultQueueDimension(lookalike) == OperationMetrics.unnamedQueue)
        }

        @Test("Custom labels and dimensions; a task-local factory at install")
        func customLabels() throws {
            let metrics = TestMetrics()
            let custom = OperationMetrics.Labels(prefix: "jobs")
            let token = withMetricsFactory(metrics) {
                OperationMetrics.install(labels: custom, queueDimension: { _ in "all" })
            }
            defer { token.cancel() }
            let queue = OperationQueue()
            queue.name = uniqueName("custom")
            let operation = BlockOperation {}
            queue.addOperation(operation)
            #expect(retired([operation]))
            #expect(custom.runDuration == "jobs.run_duration")
            #expect(try metrics.expectTimer("jobs.run_duration", [("queue", "all")]).values.count >= 1)
            #expect(metrics.timers(label: labels.runDuration).isEmpty)
        }
    }
}
#endif
