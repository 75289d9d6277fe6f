import Synchronization
import Testing
@testable import Operations

/// An `isReady` override that turns true without announcing it (the usual
/// porting slip, and what an unnamed key-path announcement amounts to).
private final class SilentlyReadyOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `allowed` is atomic.
    let allowed = Atomic<Bool>(false)
    override var isReady: Bool { super.isReady && allowed.load(ordering: .acquiring) }
    override func main() {}
}

/// A hand-built operation whose finish is set without an announcement
/// until `announce()` (probe 46: the report said only that it waits for its
/// finish).
private final class SilentlyFinishedOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: the flags are atomics; `started` is a Sendable gate.
    let executing = Atomic<Bool>(false)
    let finished = Atomic<Bool>(false)
    let started = Gate()
    override var isAsynchronous: Bool { true }
    override var isExecuting: Bool { executing.load(ordering: .acquiring) }
    override var isFinished: Bool { finished.load(ordering: .acquiring) }
    override func start() {
        willChangeValue(forKey: "isExecuting")
        executing.store(true, ordering: .releasing)
        didChangeValue(forKey: "isExecuting")
        started.open()
    }
    func finishSilently() {
        executing.store(false, ordering: .releasing)
        finished.store(true, ordering: .releasing)
    }
    func announce() {
        willChangeValue(forKey: "isFinished")
        didChangeValue(forKey: "isFinished")
    }
}

@Suite("diagnostics")
struct DiagnosticsTests {
    @Test("an operation whose isFinished override turned true unannounced: the reason says the queue was not told (probe 46)")
    func unannouncedFinish() {
        let queue = makeQueue("diagnostics-silent-finish")
        let operation = SilentlyFinishedOperation()
        operation.name = "silently-finished"
        queue.addOperation(operation)
        #expect(operation.started.wait())
        operation.finishSilently()
        let report = queue.diagnostics().operations.first { $0.subject.contains("silently-finished") }
        #expect(report?.reasons == [.finishNotAnnounced], "\(String(describing: report))")
        #expect(report?.reasons.first?.description.contains("no isFinished announcement") == true)
        operation.announce()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("an operation with its own start(), started by its queue, is reported executing, not waiting for a slot (Queuer port)")
    func customStartReportedExecuting() {
        let queue = OperationQueue()
        let operation = ManualConcurrentOperation()
        operation.name = "own-start"
        queue.addOperation(operation)
        #expect(operation.started.wait())
        let report = queue.diagnostics().operations.first { $0.subject.contains("own-start") }
        #expect(report?.phase == "executing")
        #expect(report?.reasons == [.asynchronousFinish])
        operation.finish()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("a barrier waiting for earlier operations says so, not that it waits for a slot (regression: probe 13)")
    func barrierWaitsForEarlier() {
        let queue = makeQueue("diagnostics-barrier", width: 1)
        let outside = BlockOperation {}
        outside.name = "outside"
        let earlier = BlockOperation {}
        earlier.name = "earlier"
        earlier.addDependency(outside)
        queue.addOperation(earlier)
        let ran = Gate()
        queue.addBarrierBlock { ran.open() }
        let reports = queue.diagnostics().operations
        let barrier = reports.first { !$0.subject.contains("\"earlier\"") }
        #expect(barrier?.reasons == [.barrierWaitsFor([earlier.misuseSubject])], "\(reports)")
        #expect(barrier?.reasons.first?.description.contains("waits for the operations added before it") == true)
        outside.start()
        #expect(ran.wait())
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("an isReady override that turned true unannounced: the reason says the queue was not told, not that it returns false (mullvad port)")
    func unannouncedReadiness() {
        let queue = makeQueue("diagnostics-unannounced")
        let operation = SilentlyReadyOperation()
        operation.name = "silently-ready"
        queue.addOperation(operation)
        operation.allowed.store(true, ordering: .releasing)
        let report = queue.diagnostics().operations.first { $0.subject.contains("silently-ready") }
        #expect(report?.reasons == [.readinessOverride])
        let text = report?.reasons.first?.description ?? ""
        #expect(text.contains("not read true when announced"), "\(text)")
        #expect(!text.contains("returns false"), "\(text)")
        operation.willChangeValue(forKey: "isReady")
        operation.didChangeValue(forKey: "isReady")
        #expect(operation.waitUntilFinished(timeout: patience))
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("the report says why each operation is not running")
    func report() {
        let queue = OperationQueue()
        queue.name = "stuck"
        queue.isSuspended = true
        let blocker = BlockOperation {}
        blocker.name = "never-started"
        let waiting = BlockOperation {}
        waiting.name = "waiting"
        waiting.addDependency(blocker)
        let ready = BlockOperation {}
        ready.name = "ready"
        queue.addOperations([waiting, ready], waitUntilFinished: false)
        let report = queue.diagnostics()
        #expect(report.contains("OperationQueue \"stuck\": 2 unfinished"))
        #expect(report.contains("SUSPENDED"))
        #expect(report.contains("\"waiting\""))
        #expect(report.contains("waits for BlockOperation \"never-started\""))
        #expect(report.contains("\"ready\""))
        #expect(report.contains("ready, queue suspended"))
        blocker.start()
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: .seconds(10)))
        #expect(queue.diagnostics().contains("0 unfinished"))
    }
}
