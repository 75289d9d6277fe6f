// The core's hook behind `OperationsFoundation`'s `OperationQueue.progress`
// (`OperationQueue+ProgressHook.swift`): which bodies a queue's reporter
// runs, on which thread, and with no library lock held.

import Dispatch
import Synchronization
import Testing
@_spi(Integrations) @testable import Operations

/// Records the operations whose bodies it ran, and checks inside each run
/// that the queue's lock and the operation's are free (reading
/// `operationCount` and `isExecuting` would deadlock otherwise).
private final class RecordingReporter: OperationQueueProgressReporter {
    let ran = Recorder<String>()
    let insideBody = Counter()
    private let queue = LockedValue<OperationQueue?>(nil)

    func attach(_ queue: OperationQueue) { self.queue.withLock { $0 = queue } }

    func run(_ operation: Operation, body: () -> Void) {
        _ = queue.withLock { $0 }?.operationCount
        _ = operation.isExecuting
        ran.record(operation.name ?? "?")
        body()
        insideBody.increment()
    }
}

@Suite("Progress hook")
struct ProgressHookTests {
    private func queueWithReporter(_ name: String, width: Int = 1) -> (OperationQueue, RecordingReporter) {
        let queue = makeQueue(name, width: width)
        let reporter = RecordingReporter()
        reporter.attach(queue)
        let installed = queue.progressReporter(installingIfAbsent: { reporter })
        #expect(installed === reporter)
        return (queue, reporter)
    }

    @Test("A queue's reporter runs the body of each operation its base start runs, once")
    func runsEachBaseStartBody() {
        let (queue, reporter) = queueWithReporter("hook.base")
        let bodies = Counter()
        for index in 0..<5 {
            let operation = BlockOperation { bodies.increment() }
            operation.name = "op\(index)"
            queue.addOperation(operation)
        }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(bodies.count == 5)
        #expect(reporter.ran.events == ["op0", "op1", "op2", "op3", "op4"])
        #expect(reporter.insideBody.count == 5)
    }

    @Test("Barriers, starts by hand, cancelled operations and starts that skip super are not reported")
    func skipsWhatDarwinDoesNotCount() {
        let (queue, reporter) = queueWithReporter("hook.skips")
        let handRun = BlockOperation {}
        handRun.name = "byHand"
        handRun.start()
        let cancelled = BlockOperation {}
        cancelled.name = "cancelled"
        cancelled.cancel()
        let custom = ManualConcurrentOperation()
        custom.name = "customStart"
        let plain = BlockOperation {}
        plain.name = "plain"
        queue.addOperation(cancelled)
        queue.addOperation(custom)
        #expect(custom.started.wait())
        custom.finish()
        queue.addBarrierBlock {}
        queue.addOperation(plain)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(reporter.ran.events == ["plain"])
    }

    @Test("A custom start that calls super.start() is reported once")
    func customStartCallingSuper() {
        final class CallsSuper: Operation, @unchecked Sendable {
            let bodies = Counter()
            override func start() { super.start() }
            override func main() { bodies.increment() }
        }
        let (queue, reporter) = queueWithReporter("hook.super")
        let operation = CallsSuper()
        operation.name = "callsSuper"
        queue.addOperation(operation)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(operation.bodies.count == 1)
        #expect(reporter.ran.events == ["callsSuper"])
    }

    @Test("The first reporter installed stays; a later one is dropped")
    func firstReporterStays() {
        let (queue, first) = queueWithReporter("hook.first")
        let second = RecordingReporter()
        let installed = queue.progressReporter(installingIfAbsent: { second })
        #expect(installed === first)
        #expect(queue.installedProgressReporter === first)
    }

    @Test("Queues without a reporter run their bodies as before")
    func queuesWithoutReporter() {
        _ = queueWithReporter("hook.other")
        let queue = makeQueue("hook.none")
        let bodies = Counter()
        for _ in 0..<3 { queue.addOperation { bodies.increment() } }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(bodies.count == 3)
        #expect(queue.installedProgressReporter == nil)
    }
}
