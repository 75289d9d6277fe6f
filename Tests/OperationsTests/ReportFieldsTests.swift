// Structured reports: what a report is about (an operation or a queue), the
// names and type behind its subject, the dependency cycle it names; whether
// a queue has a name of its own; and the settable hang threshold.
//
// Report observers are process-wide and other tests make misuses in
// parallel: each test keeps only the reports that name its own operations or
// queues. Tests that change the process-wide threshold run in a child
// process of their own.

import Dispatch
import Testing
@testable import Operations
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Collects the reports whose message mentions `marker`, while installed.
final class ReportCollector: Sendable {
    let reports = Recorder<OperationReport>()
    private let token: OperationReporting.Token

    init(mentioning marker: String) {
        token = OperationReporting.addObserver { [reports] report in
            if report.message.contains(marker) { reports.record(report) }
        }
    }

    var all: [OperationReport] { reports.events }

    func cancel() { token.cancel() }
}

/// An `OperationQueue` subclass whose name is its own getter.
private final class FixedNameQueue: OperationQueue, @unchecked Sendable {
    override var name: String? {
        get { "fixed-name-queue" }
        set {}
    }
}

@Suite("Structured report fields")
struct ReportFieldsTests {
    @Test("a misuse of an operation in no queue: subject kind, operation name and type, no queue, no cycle")
    func operationMisuseFields() throws {
        let marker = "report-fields-not-ready"
        let reports = ReportCollector(mentioning: marker)
        defer { reports.cancel() }
        let operation = BlockOperation {}
        operation.name = marker
        operation.addDependency(BlockOperation {})
        let misuses = Recorder<OperationMisuse>()
        OperationMisuse.withHandler({ misuses.record($0) }) { operation.start() }

        let report = try #require(reports.all.first)
        #expect(reports.all.count == 1)
        #expect(report.kind == .misuse(.startNotReady))
        #expect(report.subjectKind == .operation)
        #expect(report.operationName == marker)
        #expect(report.operationTypeName == "BlockOperation")
        #expect(report.queueName == nil)
        #expect(report.cycle == nil)
        // The text fields are unchanged.
        #expect(report.subject == operation.misuseSubject)
        #expect(report.subject == misuses.events.first?.subject)
        #expect(report.message == misuses.events.first?.message)
    }

    @Test("an unnamed operation has a type but no name; a generic type is spelled out")
    func unnamedOperationFields() throws {
        let operation = ResultOperation<Int, Never> { 1 }
        let marker = operation.misuseSubject
        let reports = ReportCollector(mentioning: marker)
        defer { reports.cancel() }
        operation.addDependency(BlockOperation {})
        OperationMisuse.withHandler({ _ in }) { operation.start() }

        let report = try #require(reports.all.first)
        #expect(report.subjectKind == .operation)
        #expect(report.operationName == nil)
        #expect(report.operationTypeName == "ResultOperation<Int, Never>")
    }

    @Test("an add misuse names the queue the operation was added to, only if that queue is named")
    func addMisuseNamesTargetQueue() throws {
        let marker = "report-fields-added-twice"
        let reports = ReportCollector(mentioning: marker)
        defer { reports.cancel() }
        let owner = makeQueue("report-fields-owner")
        owner.isSuspended = true
        let operation = BlockOperation {}
        operation.name = marker
        owner.addOperation(operation)

        let named = makeQueue("report-fields-target")
        OperationMisuse.withHandler({ _ in }) { named.addOperation(operation) }
        let unnamed = OperationQueue()
        OperationMisuse.withHandler({ _ in }) { unnamed.addOperation(operation) }

        let found = reports.all
        #expect(found.count == 2)
        #expect(found.allSatisfy { $0.kind == .misuse(.alreadyInQueue) && $0.subjectKind == .operation })
        #expect(found.first?.queueName == "report-fields-target")
        #expect(found.last.map { $0.queueName == nil } == true, "an unnamed queue's default name is never a queue name")
        #expect(found.last?.message.contains("NSOperationQueue 0x") == true, "the message still names it")

        owner.isSuspended = false
        #expect(owner.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("a misuse of an operation that a named queue owns carries that queue's name")
    func ownedOperationNamesItsQueue() throws {
        let marker = "report-fields-owned"
        let reports = ReportCollector(mentioning: marker)
        defer { reports.cancel() }
        let queue = makeQueue("report-fields-owning-queue")
        queue.isSuspended = true
        let operation = BlockOperation {}
        operation.name = marker
        queue.addOperation(operation)
        OperationMisuse.withHandler({ _ in }) { operation.threadPriority = 2 }

        let report = try #require(reports.all.first)
        #expect(report.kind == .misuse(.invalidThreadPriority))
        #expect(report.subjectKind == .operation)
        #expect(report.operationName == marker)
        #expect(report.queueName == "report-fields-owning-queue")
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("a misuse of a queue: subject kind queue, its name only if named, no operation fields")
    func queueMisuseFields() throws {
        let named = makeQueue("report-fields-width")
        let unnamed = OperationQueue()
        let reports = ReportCollector(mentioning: "maxConcurrentOperationCount -7")
        defer { reports.cancel() }
        OperationMisuse.withHandler({ _ in }) {
            named.maxConcurrentOperationCount = -7
            unnamed.maxConcurrentOperationCount = -7
        }
        let found = reports.all.filter { $0.subject == named.misuseSubject || $0.subject == unnamed.misuseSubject }
        #expect(found.count == 2)
        let first = try #require(found.first { $0.subject == named.misuseSubject })
        #expect(first.kind == .misuse(.invalidMaxConcurrentOperationCount))
        #expect(first.subjectKind == .queue)
        #expect(first.queueName == "report-fields-width")
        #expect(first.operationName == nil && first.operationTypeName == nil && first.cycle == nil)
        let second = try #require(found.first { $0.subject == unnamed.misuseSubject })
        #expect(second.subjectKind == .queue)
        #expect(second.queueName == nil)
    }

    @Test("a dependency-cycle misuse lists the cycle in order, each member depending on the next")
    func cycleMisuseFields() throws {
        let marker = "report-fields-cycle"
        let reports = ReportCollector(mentioning: marker)
        defer { reports.cancel() }
        let first = BlockOperation {}
        first.name = marker + "-first"
        let second = BlockOperation {}
        second.name = marker + "-second"
        let third = BlockOperation {}
        third.name = marker + "-third"
        first.addDependency(second)
        second.addDependency(third)
        OperationMisuse.withDependencyCycleReporting {
            OperationMisuse.withHandler({ _ in }) { third.addDependency(first) }
        }

        let report = try #require(reports.all.first)
        #expect(report.kind == .misuse(.dependencyCycle))
        #expect(report.subjectKind == .operation)
        #expect(report.operationName == marker + "-third")
        // third → first → second → third: each depends on the next.
        #expect(report.cycle == [third, first, second, third].map(\.misuseSubject))
        #expect(report.message.contains(try #require(report.cycle).joined(separator: " → ")))
    }

    @Test("the worker-ceiling report has no subject")
    func noSubjectReport() {
        let report = OperationReport(kind: .workerCeiling, message: "ceiling")
        #expect(report.subject == nil && report.subjectKind == nil)
        #expect(report.operationName == nil && report.operationTypeName == nil)
        #expect(report.queueName == nil && report.cycle == nil)
    }
}

@Suite("OperationQueue.isNamed")
struct QueueIsNamedTests {
    @Test("false for the default name, true once named, false again when the name is cleared; main is named")
    func isNamed() {
        let queue = OperationQueue()
        #expect(!queue.isNamed)
        #expect(queue.name?.hasPrefix("NSOperationQueue 0x") == true)
        queue.name = "images"
        #expect(queue.isNamed)
        queue.name = nil
        #expect(!queue.isNamed)
        queue.name = ""
        #expect(queue.isNamed, "an empty name is still a name that was set")
        #expect(OperationQueue.main.isNamed)
    }

    @Test("a subclass that overrides name is named by its getter")
    func overriddenName() {
        let queue = FixedNameQueue()
        #expect(queue.isNamed)
        #expect(queue.ownName == "fixed-name-queue")
    }
}

// MARK: - The hang threshold (child processes: it is process-wide)

/// The default comes from OPERATIONS_WAIT_WARNING_SECONDS; the property
/// replaces it; nil, zero and negative durations turn reports off.
func scenarioThresholdFromEnvironmentAndSettable() {
    setenv("OPERATIONS_WAIT_WARNING_SECONDS", "0.25", 1)
    #expect(OperationReporting.waitWarningThreshold == .milliseconds(250))
    OperationReporting.waitWarningThreshold = .seconds(3)
    #expect(OperationReporting.waitWarningThreshold == .seconds(3))
    OperationReporting.waitWarningThreshold = nil
    #expect(OperationReporting.waitWarningThreshold == nil)
    OperationReporting.waitWarningThreshold = .zero
    #expect(OperationReporting.waitWarningThreshold == nil)
    OperationReporting.waitWarningThreshold = .seconds(-1)
    #expect(OperationReporting.waitWarningThreshold == nil)
    OperationReporting.waitWarningThreshold = .nanoseconds(1)
    #expect(OperationReporting.waitWarningThreshold == .nanoseconds(1))
    OperationReporting.waitWarningThreshold = .seconds(Int64.max)
    #expect(OperationReporting.waitWarningThreshold.map { $0 > .seconds(1_000_000_000) } == true, "saturates")
}

/// Without the variable, reports are off until the property is set.
func scenarioThresholdOffWithoutEnvironment() {
    unsetenv("OPERATIONS_WAIT_WARNING_SECONDS")
    #expect(OperationReporting.waitWarningThreshold == nil)
    for text in ["0", "-1", "nan", "ten"] { #expect(HangReport.parseThreshold(text) == nil, "\(text)") }
    #expect(HangReport.parseThreshold("1.5") == 1_500_000_000)
}

/// Setting the threshold applies to waits that begin afterwards: a wait
/// before it is not reported, one after it is, with the queue as subject.
func scenarioThresholdAppliesToLaterWaits() {
    unsetenv("OPERATIONS_WAIT_WARNING_SECONDS")
    let queue = makeQueue("threshold-later-waits")
    queue.isSuspended = true
    queue.addOperation {}
    let reports = ReportCollector(mentioning: "threshold-later-waits")
    defer { reports.cancel() }

    #expect(!queue.waitUntilAllOperationsAreFinished(timeout: .milliseconds(150)))
    #expect(reports.all.isEmpty, "reports are off: \(reports.all.map(\.message))")

    OperationReporting.waitWarningThreshold = .milliseconds(30)
    #expect(!queue.waitUntilAllOperationsAreFinished(timeout: .milliseconds(300)))
    let report = reports.all.first
    #expect(reports.all.count == 1)
    #expect(report?.kind == .waitTooLong)
    #expect(report?.subjectKind == .queue)
    #expect(report?.queueName == "threshold-later-waits")
    #expect(report?.subject == queue.misuseSubject)
    #expect(report?.message.contains("0.03 s") == true, "\(report?.message ?? "")")
    #expect(report?.cycle == nil)

    OperationReporting.waitWarningThreshold = nil
    #expect(!queue.waitUntilAllOperationsAreFinished(timeout: .milliseconds(150)))
    #expect(reports.all.count == 1, "off again")
    queue.isSuspended = false
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
}

/// A synchronous add that blocks for room from inside a Swift task: the
/// hang report says so, and names the `async` add that suspends instead.
func scenarioBlockingAddInTaskHangReport() async {
    unsetenv("OPERATIONS_WAIT_WARNING_SECONDS")
    OperationReporting.waitWarningThreshold = .milliseconds(30)
    let queue = makeQueue("blocking-add-in-task")
    queue.setPendingLimit(1)
    queue.isSuspended = true
    #expect(queue.tryAddOperation(BlockOperation {}))
    let reports = ReportCollector(mentioning: "blocking-add-in-task")
    defer { reports.cancel() }
    let added = AsyncGate()
    // A synchronous function, as code reached from a task can be: the
    // compiler picks the blocking add.
    @Sendable func addBlocking() { queue.addOperation {} }
    let task = Task.detached {
        addBlocking()
        added.open()
    }
    #expect(await waitUntilAsync { !reports.all.isEmpty }, "no hang report")
    let message = reports.all.first?.message ?? ""
    #expect(message.contains("Swift task"), "\(message)")
    #expect(message.contains("await"), "\(message)")
    queue.isSuspended = false
    let addReturned = await added.opened(within: 30)
    #expect(addReturned)
    guard addReturned else { return }
    await task.value
    _ = try? await withTimeLimit { await queue.drained() }
}

/// A named queue holding a two-operation cycle, and an observer that keeps
/// the hang reports naming `label` and breaks the cycle on the first.
struct CycleHangFixture {
    let queue: OperationQueue
    let first = BlockOperation {}
    let second = BlockOperation {}
    let reports = Recorder<OperationReport>()
    let token: OperationReporting.Token

    init(_ label: String) {
        unsetenv("OPERATIONS_WAIT_WARNING_SECONDS")
        OperationReporting.waitWarningThreshold = .milliseconds(50)
        queue = makeQueue(label)
        first.name = label + "-first"
        second.name = label + "-second"
        first.addDependency(second)
        second.addDependency(first)
        queue.addOperations([first, second], waitUntilFinished: false)
        token = OperationReporting.addObserver { [reports, first] report in
            guard report.kind == .waitTooLong, report.message.contains(label) else { return }
            reports.record(report)
            first.cancel()
        }
    }

    /// Checks the one report: the cycle and the queue's name.
    func checkCycleReport() -> OperationReport? {
        token.cancel()
        let report = reports.events.first
        #expect(reports.count == 1)
        let cycle = report?.cycle ?? []
        #expect(cycle.count == 3 && cycle.first == cycle.last, "\(cycle)")
        #expect(Set(cycle) == [first.misuseSubject, second.misuseSubject])
        #expect(report?.queueName == queue.name)
        return report
    }
}

/// A blocking wait for an operation on a cycle: its hang report names the
/// operation, its queue and the cycle. The observer breaks the cycle, which
/// ends the wait.
func scenarioCycleHangReportFields() {
    let fixture = CycleHangFixture("hang-fields-blocking")
    #expect(fixture.first.waitUntilFinished(timeout: patience))
    let report = fixture.checkCycleReport()
    #expect(report?.subjectKind == .operation)
    #expect(report?.operationName == fixture.first.name)
    #expect(report?.operationTypeName == "BlockOperation")
    #expect(report?.subject == fixture.first.misuseSubject)
    #expect(fixture.queue.waitUntilAllOperationsAreFinished(timeout: patience))
}

/// An `async` wait for a queue holding a cycle: its hang report names the
/// queue and the cycle.
func scenarioAsyncCycleHangReportFields() async {
    let fixture = CycleHangFixture("hang-fields-async")
    await fixture.queue.drained()
    let report = fixture.checkCycleReport()
    #expect(report?.subjectKind == .queue)
    #expect(report?.subject == fixture.queue.misuseSubject)
    #expect(report?.operationName == nil && report?.operationTypeName == nil)
}

/// Each wait for an operation on a cycle names its own call in the hang
/// report: `waitUntilFinished`, `await finished()`, `await value`.
func scenarioHangReportNamesTheWait() async {
    checkBlockingHangReportNamesTheWait()

    let awaited = CycleHangFixture("hang-call-finished")
    await awaited.first.finished()
    let awaitedText = awaited.checkCycleReport()?.message ?? ""
    #expect(awaitedText.contains("await finished() on \(awaited.first.misuseSubject)"), "\(awaitedText)")

    let label = "hang-call-value"
    let queue = makeQueue(label)
    let result = ResultOperation<Int, Never> { 7 }
    result.name = label + "-result"
    let partner = BlockOperation {}
    result.addDependency(partner)
    partner.addDependency(result)
    let reports = Recorder<OperationReport>()
    let token = OperationReporting.addObserver { report in
        guard report.kind == .waitTooLong, report.message.contains(label) else { return }
        reports.record(report)
        partner.cancel()
    }
    defer { token.cancel() }
    queue.addOperations([result, partner], waitUntilFinished: false)
    let value = try? await result.value
    #expect(value == 7)
    let valueText = reports.events.first?.message ?? ""
    #expect(valueText.contains("await value on \(result.misuseSubject)"), "\(valueText)")
}

func checkBlockingHangReportNamesTheWait() {
    let blocking = CycleHangFixture("hang-call-blocking")
    #expect(blocking.first.waitUntilFinished(timeout: patience))
    let blockingText = blocking.checkCycleReport()?.message ?? ""
    #expect(blockingText.contains("waitUntilFinished on \(blocking.first.misuseSubject)"), "\(blockingText)")
}

/// An operation in no queue, on a cycle: its wait's report names the cycle
/// too (in the text and in the field).
func scenarioUnqueuedCycleHangReport() {
    unsetenv("OPERATIONS_WAIT_WARNING_SECONDS")
    OperationReporting.waitWarningThreshold = .milliseconds(50)
    let first = BlockOperation {}
    first.name = "unqueued-cycle-first"
    let second = BlockOperation {}
    second.name = "unqueued-cycle-second"
    first.addDependency(second)
    second.addDependency(first)
    let reports = Recorder<OperationReport>()
    let token = OperationReporting.addObserver { report in
        guard report.kind == .waitTooLong, report.message.contains("unqueued-cycle") else { return }
        reports.record(report)
    }
    defer { token.cancel() }
    #expect(!first.waitUntilFinished(timeout: .milliseconds(300)))
    let report = reports.events.first
    #expect(report?.subjectKind == .operation)
    #expect(report?.queueName == nil)
    #expect(report?.cycle == [first, second, first].map(\.misuseSubject))
    #expect(report?.message.contains("cycle: ") == true, "\(report?.message ?? "")")
}

/// A wait for `OperationQueue.main`'s work made where that work can only run
/// if the waiter runs it (a block of the main dispatch queue, or the main
/// thread): the wait runs it inline, and while it waits for something else
/// (here a dependency in another queue) it is reported past the threshold,
/// as every other blocking wait is (probe 51: it hung silently).
func scenarioMainQueueWaitHangReport() {
    unsetenv("OPERATIONS_WAIT_WARNING_SECONDS")
    OperationReporting.waitWarningThreshold = .milliseconds(50)
    let label = "main-queue-wait-report"
    let other = makeQueue(label + "-other")
    let gate = Gate()
    let blocker = BlockOperation { _ = gate.wait() }
    blocker.name = label + "-blocker"
    let waited = BlockOperation {}
    waited.name = label + "-waited"
    waited.addDependency(blocker)
    let reports = Recorder<OperationReport>()
    let token = OperationReporting.addObserver { report in
        guard report.kind == .waitTooLong, report.message.contains(label + "-waited") else { return }
        reports.record(report)
        gate.open()
    }
    defer { token.cancel() }
    let finished = Recorder<Bool>()
    let done = Gate()
    DispatchQueue.main.async {
        OperationQueue.main.addOperation(waited)
        other.addOperation(blocker)
        finished.record(waited.waitUntilFinished(timeout: patience))
        done.open()
    }
    #expect(done.wait(timeout: .seconds(20)), "the main dispatch queue did not run the block")
    gate.open()
    #expect(finished.events == [true])
    #expect(reports.events.count == 1)
    #expect(reports.events.first?.subjectKind == .operation)
    #expect(reports.events.first?.message.contains("waitUntilFinished on") == true, "\(reports.events.first?.message ?? "")")
}

@Suite("OperationReporting.waitWarningThreshold")
struct WaitWarningThresholdTests {
    @Test("defaults to OPERATIONS_WAIT_WARNING_SECONDS; settable; nil, zero and negative turn it off")
    func defaultAndSettable() async {
        await #expect(processExitsWith: .success) { scenarioThresholdFromEnvironmentAndSettable() }
    }

    @Test("off without the environment variable")
    func offByDefault() async {
        await #expect(processExitsWith: .success) { scenarioThresholdOffWithoutEnvironment() }
    }

    @Test("a new threshold applies to waits that begin afterwards, and nil turns reports off again")
    func appliesToLaterWaits() async {
        await #expect(processExitsWith: .success) { scenarioThresholdAppliesToLaterWaits() }
    }

    @Test("a blocking wait's hang report about a cycle carries the operation, its queue's name and the cycle")
    func cycleHangReport() async {
        await #expect(processExitsWith: .success) { scenarioCycleHangReportFields() }
    }

    @Test("an async wait's hang report about a cycle carries the queue and the cycle")
    func asyncCycleHangReport() async {
        await #expect(processExitsWith: .success) { await scenarioAsyncCycleHangReportFields() }
    }

    @Test("a hang report names the wait: waitUntilFinished, await finished(), await value")
    func hangReportNamesTheWait() async {
        await #expect(processExitsWith: .success) { await scenarioHangReportNamesTheWait() }
    }

    @Test("the hang report of a blocking add made inside a Swift task says so and names the async add")
    func blockingAddInTaskHangReport() async {
        await #expect(processExitsWith: .success) { await scenarioBlockingAddInTaskHangReport() }
    }

    @Test("the hang report of an operation in no queue names the cycle it is on")
    func unqueuedCycleHangReport() async {
        await #expect(processExitsWith: .success) { scenarioUnqueuedCycleHangReport() }
    }

    @Test("a wait that runs OperationQueue.main's work on the calling thread is reported past the threshold")
    func mainQueueWaitHangReport() async {
        await #expect(processExitsWith: .success) { scenarioMainQueueWaitHangReport() }
    }
}
