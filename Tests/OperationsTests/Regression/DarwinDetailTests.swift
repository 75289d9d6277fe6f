// Details where Darwin's Foundation is the reference, found by the second
// black-box conformance pass: each test failed before its fix.

import Dispatch
import Synchronization
import Testing
@testable import Operations

/// The chapter's style: a concurrent operation that overrides only the older
/// `isConcurrent`.
private final class ConcurrentOnlyOperation: Operation, @unchecked Sendable {
    override var isConcurrent: Bool { true }
}

/// Overrides `isConcurrent` and asks `super` for its base value.
private final class ConcurrentCallingSuper: Operation, @unchecked Sendable {
    override var isConcurrent: Bool { super.isConcurrent }
}

/// Overrides `isAsynchronous` and asks `super` for its base value.
private final class AsynchronousCallingSuper: Operation, @unchecked Sendable {
    override var isAsynchronous: Bool { super.isAsynchronous }
}

/// Overrides both; `isConcurrent` asks `super`.
private final class BothCallingSuper: Operation, @unchecked Sendable {
    override var isAsynchronous: Bool { true }
    override var isConcurrent: Bool { super.isConcurrent }
}

/// Overrides both, with different answers.
private final class BothOverridden: Operation, @unchecked Sendable {
    override var isAsynchronous: Bool { true }
    override var isConcurrent: Bool { false }
}

@Suite("Darwin details (conformance pass 2)")
struct DarwinDetailTests {
    @Test("a class that overrides only isConcurrent is asynchronous (Darwin's base isAsynchronous answers with isConcurrent)")
    func isConcurrentOnly() {
        let op = ConcurrentOnlyOperation()
        #expect(op.isConcurrent)
        #expect(op.isAsynchronous)
    }

    @Test("isAsynchronous and isConcurrent: overrides calling super, both overridden, neither, AsyncOperation")
    func asynchronousCombinations() {
        #expect(!ConcurrentCallingSuper().isConcurrent)
        #expect(!ConcurrentCallingSuper().isAsynchronous)
        #expect(!AsynchronousCallingSuper().isAsynchronous)
        #expect(!AsynchronousCallingSuper().isConcurrent)
        #expect(!BothCallingSuper().isConcurrent, "Darwin: the base isConcurrent answers NO to an override calling super")
        let both = BothOverridden()
        #expect(both.isAsynchronous && !both.isConcurrent)
        let plain = BlockOperation {}
        #expect(!plain.isAsynchronous && !plain.isConcurrent)
        let async = AsyncOperation(block: { _ in })
        #expect(async.isAsynchronous && async.isConcurrent)
    }

    @Test("threadPriority set once the operation has started is ignored (Darwin)")
    func threadPriorityAfterStart() {
        let op = BlockOperation()
        let inBody = Recorder<Double>()
        op.addExecutionBlock { [unowned op] in
            op.threadPriority = 0.9
            inBody.record(op.threadPriority)
        }
        op.threadPriority = 0.3
        op.start()
        op.threadPriority = 0.2
        #expect(inBody.events == [0.3])
        #expect(op.threadPriority == 0.3)
    }

    @Test("with no misuse handler, an out-of-range threadPriority is clamped, not trapped (Darwin); NaN is ignored")
    func threadPriorityClamped() async {
        await #expect(processExitsWith: .success) {
            let reports = ReportCollector(mentioning: "clamped-priority")
            defer { reports.cancel() }
            let op = BlockOperation {}
            op.name = "clamped-priority"
            op.threadPriority = 2.0
            #expect(op.threadPriority == 1.0)
            op.threadPriority = -1
            #expect(op.threadPriority == 0.0)
            op.threadPriority = .nan
            #expect(op.threadPriority == 0.0)
            #expect(reports.all.map(\.kind) == Array(repeating: .misuse(.invalidThreadPriority), count: 3))
        }
    }

    @Test("setting queuePriority to the value it has tells no observer (Darwin)")
    func samePriorityIsSilent() {
        let op = BlockOperation {}
        let changes = Recorder<Operation.QueuePriority?>()
        let token = op.observe(\.queuePriority, options: [.new]) { _, change in changes.record(change.newValue) }
        op.queuePriority = .normal
        op.queuePriority = .high
        op.queuePriority = .high
        token.invalidate()
        #expect(changes.events == [.high])
        #expect(op.queuePriority == .high)
    }

    @Test("QueuePriority(rawValue:) accepts any value and rounds it as Darwin's queuePriority setter does (probe 48)")
    func anyRawPriority() {
        let expected: [(Int, Operation.QueuePriority)] = [
            (Int.min, .veryLow), (-9, .veryLow), (-8, .veryLow), (-7, .low), (-5, .low), (-4, .low),
            (-3, .normal), (-1, .normal), (0, .normal), (3, .normal), (4, .high), (7, .high),
            (8, .veryHigh), (9, .veryHigh), (Int.max, .veryHigh),
        ]
        for (raw, priority) in expected {
            #expect(Operation.QueuePriority(rawValue: raw) == priority, "raw value \(raw)")
        }
        for priority in Operation.QueuePriority.allCases {
            #expect(Operation.QueuePriority(rawValue: priority.rawValue) == priority)
        }
        let op = BlockOperation {}
        op.queuePriority = Operation.QueuePriority(rawValue: 6) ?? .veryLow
        #expect(op.queuePriority == .high)
    }
}

#if canImport(Glibc)
import Glibc

/// The calling thread's nice value (Linux: per thread).
private func currentNice() -> Int32 {
    getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
}

@Suite("Quality of service: queue and operation (conformance pass 2)")
struct QueueQualityOfServiceTests {
    @Test("an operation's lower quality of service is raised to its queue's, never lowered (Darwin)")
    func queueRaisesOperations() {
        let queue = makeQueue("raising-qos", width: 1)
        queue.qualityOfService = .userInitiated
        let nices = Recorder<(String, Int32)>()
        let low = BlockOperation { nices.record(("background", currentNice())) }
        low.qualityOfService = .background
        let plain = BlockOperation { nices.record(("default", currentNice())) }
        queue.addOperations([low, plain], waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        let values = Dictionary(uniqueKeysWithValues: nices.events)
        #expect(values.count == 2)
        #expect(values["background"] == values["default"], "\(nices.events)")
    }

    @Test("the effective quality of service: the queue's for .default operations, the higher of the two otherwise")
    func effectiveRule() {
        let index = { (qos: QualityOfService) in qos.index }
        #expect(OperationQueue.effectiveQualityOfService(operation: index(.default), queue: index(.utility)) == index(.utility))
        #expect(OperationQueue.effectiveQualityOfService(operation: index(.background), queue: index(.default)) == index(.background))
        #expect(OperationQueue.effectiveQualityOfService(operation: index(.background), queue: index(.userInitiated)) == index(.userInitiated))
        #expect(OperationQueue.effectiveQualityOfService(operation: index(.userInteractive), queue: index(.utility)) == index(.userInteractive))
    }
}
#endif

@Suite("An async body runs at its queue's quality of service when that is higher (probe 8)")
struct AsyncBodyQualityOfServiceTests {
    @Test("a .utility async body in a .userInitiated queue runs at .userInitiated's task priority; a .userInteractive one keeps its own")
    func asyncBodyRaised() async throws {
        let queue = makeQueue("async-qos")
        queue.qualityOfService = .userInitiated
        let low = ResultOperation<TaskPriority?, Never> { () async in Task.currentPriority }
        low.qualityOfService = .utility
        let high = ResultOperation<TaskPriority?, Never> { () async in Task.currentPriority }
        high.qualityOfService = .userInteractive
        queue.addOperations([low, high], waitUntilFinished: false)
        let lowPriority = try await withTimeLimit { try await low.value }
        let highPriority = try await withTimeLimit { try await high.value }
        #expect(lowPriority == QualityOfService.userInitiated.taskPriority)
        #expect(highPriority == QualityOfService.userInteractive.taskPriority)
    }
}

@Suite("addOperation with a block takes the queue's quality of service (conformance pass 2)")
struct BlockQualityOfServiceTests {
    @Test("a queue with a quality of service gives it to the operation addOperation(_:) makes from a block (Darwin)")
    func blockTakesQueueQoS() {
        let queue = makeQueue("block-qos")
        queue.isSuspended = true
        queue.qualityOfService = .utility
        queue.addOperation {}
        let plainQueue = makeQueue("block-default-qos")
        plainQueue.isSuspended = true
        plainQueue.addOperation {}
        #expect(queue.operations.first?.qualityOfService == .utility)
        #expect(plainQueue.operations.first?.qualityOfService == .default)
        queue.isSuspended = false
        plainQueue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(plainQueue.waitUntilAllOperationsAreFinished(timeout: patience))
    }
}

/// Cancels itself from its own `isFinished` getter, the first time that
/// getter reads true: the moment the library asks whether the body's end
/// finished the operation, before the finish is carried out.
private final class CancelsWhenReadFinished: Operation, @unchecked Sendable {
    // @unchecked Sendable: `tried` is atomic.
    private let tried = Atomic<Bool>(false)

    override var isFinished: Bool {
        let finished = super.isFinished
        if finished, !tried.exchange(true, ordering: .acquiringAndReleasing) { cancel() }
        return finished
    }
}

@Suite("cancel() of an operation whose isFinished already reads true (probe 27)")
struct CancelAfterFinishReadsTrueTests {
    @Test("an operation whose isFinished getter reads true is not cancelled, and tells no isCancelled observer")
    func cancelFromFinishedGetter() {
        let operation = CancelsWhenReadFinished()
        let cancelledChanges = Counter()
        let token = operation.observe(\.isCancelled, options: [.prior]) { _, _ in cancelledChanges.increment() }
        operation.start()
        #expect(operation.isFinished)
        #expect(!operation.isCancelled, "cancel() changed an operation that read finished")
        #expect(cancelledChanges.count == 0)
        withExtendedLifetime(token) {}
    }

    @Test("cancel() racing the finish: once isFinished reads true, cancel() changes nothing (observed operations, 400 rounds)")
    func cancelRacingFinish() {
        let queue = makeQueue("cancel-racing-finish")
        let cancelledAfterFinish = Counter()
        for _ in 0..<400 {
            let operation = BlockOperation {}
            let token = operation.observe(\.isFinished) { _, _ in }
            let spinning = Gate()
            let done = Gate()
            spawnThread {
                spinning.open()
                // A tight spin (the window is a few instructions), bounded.
                let clock = ContinuousClock()
                let deadline = clock.now + patience
                var finished = operation.isFinished
                while !finished, clock.now < deadline { finished = operation.isFinished }
                if finished {
                    operation.cancel()
                    if operation.isCancelled { cancelledAfterFinish.increment() }
                }
                done.open()
            }
            #expect(spinning.wait())
            queue.addOperation(operation)
            #expect(done.wait())
            withExtendedLifetime(token) {}
        }
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(cancelledAfterFinish.count == 0, "\(cancelledAfterFinish.count) of 400 operations were cancelled after isFinished read true")
    }

    @Test("the description of an operation that finished in a queue no longer says it is in one")
    func finishedDescription() {
        let queue = makeQueue("described")
        queue.isSuspended = true
        let operation = BlockOperation {}
        operation.name = "described"
        queue.addOperation(operation)
        #expect(operation.description.contains("in a queue"))
        queue.isSuspended = false
        #expect(operation.waitUntilFinished(timeout: patience))
        #expect(!operation.description.contains("in a queue"), "\(operation.description)")
    }
}
