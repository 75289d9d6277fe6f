import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization
import Testing
@testable import Operations

@Suite("async bodies and awaiting")
struct AsyncBodyTests {
    @Test("an async body keeps the operation executing until it returns")
    func asyncBodyStaysExecuting() async throws {
        let entered = AsyncGate()
        let release = AsyncGate()
        let operation = ResultOperation { () async -> Int in
            entered.open()
            await release.opened()
            return 7
        }
        #expect(operation.isAsynchronous)
        let queue = OperationQueue()
        await queue.addOperationWhenRoom(operation)
        try await withTimeLimit { await entered.opened() }
        #expect(operation.isExecuting)
        #expect(!operation.isFinished)
        #expect(queue.operationCount == 1)
        release.open()
        let value = try await withTimeLimit { try await operation.value }
        #expect(value == 7)
        #expect(operation.isFinished)
        #expect(!operation.isExecuting)
    }

    @Test("an async body started by its queue begins on the queue's worker, until its first suspension")
    func asyncBodyStartsOnTheStartingThread() async throws {
        let starterThread = LockedValue<ThreadID?>(nil)
        let bodyThread = LockedValue<ThreadID?>(nil)
        let release = AsyncGate()
        let operation = ResultOperation { () async -> Int in
            bodyThread.withLock { $0 = currentThreadID() }
            await release.opened()
            return 3
        }
        // The isExecuting observer runs inside start(), on the thread that
        // starts the operation, right before the body.
        let token = operation.observe(\.isExecuting, options: [.new]) { _, change in
            if change.newValue == true { starterThread.withLock { $0 = currentThreadID() } }
        }
        let queue = OperationQueue()
        await queue.addOperationWhenRoom(operation)
        let clock = ContinuousClock()
        let deadline = clock.now + patience
        while bodyThread.withLock({ $0 }) == nil, clock.now < deadline {
            try await Task.sleep(for: .milliseconds(1))
        }
        let starter = try #require(starterThread.withLock { $0 })
        let body = try #require(bodyThread.withLock { $0 })
        #expect(pthread_equal(body, starter) != 0)
        #expect(operation.isExecuting)
        release.open()
        let value = try await withTimeLimit { try await operation.value }
        #expect(value == 3)
        withExtendedLifetime(token) {}
    }

    @Test("an async body that returns before suspending is retired by its queue's loop, like a synchronous body")
    func asyncBodyReturningInlineIsRetiredByTheLoop() throws {
        let bodyThread = LockedValue<ThreadID?>(nil)
        let completionThread = LockedValue<ThreadID?>(nil)
        let completions = Atomic<Int>(0)
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        let first = ResultOperation { () async -> Int in
            bodyThread.withLock { $0 = currentThreadID() }
            return 1
        }
        // Its isFinished observers are told on the thread that finished it.
        let token = first.observe(\.isFinished, options: [.new]) { _, change in
            guard change.newValue == true else { return }
            completionThread.withLock { $0 = currentThreadID() }
            completions.add(1, ordering: .relaxed)
        }
        let second = ResultOperation { () async -> Int in 2 }
        second.addDependency(first)
        queue.addOperations([first, second], waitUntilFinished: false)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(first.result == .success(1))
        #expect(second.result == .success(2))
        #expect(completions.load(ordering: .relaxed) == 1)
        // The loop that ran the body's first part also finished the
        // operation: its observers were told there, not on a thread the
        // body's task handed it to.
        let body = try #require(bodyThread.withLock { $0 })
        let finisher = try #require(completionThread.withLock { $0 })
        #expect(pthread_equal(body, finisher) != 0)
        #expect(queue.operationCount == 0)
        withExtendedLifetime(token) {}
    }

    @Test("an async body started by hand runs in a detached task: the caller's task-local values do not leak in")
    func asyncBodyStartedByHandIsDetached() async throws {
        let seen = LockedValue<String?>("unset")
        let operation = ResultOperation { () async -> Int in
            seen.withLock { $0 = StartContext.marker }
            return 4
        }
        StartContext.$marker.withValue("caller") {
            operation.start()
        }
        #expect(try await withTimeLimit { try await operation.value } == 4)
        #expect(seen.withLock { $0 } == nil, "the body saw the caller's task-local value")
    }

    @Test("cancel() reaches a body that has not suspended yet (regression)")
    func cancelReachesTheFirstPart() async throws {
        let started = Gate()
        let sawCancellation = LockedValue(false)
        let operation = ResultOperation { () async throws -> Int in
            started.open()
            // CPU-bound work that polls for cancellation, with no suspension
            // (bounded: 30 s at most).
            let clock = ContinuousClock()
            let end = clock.now + .seconds(30)
            while clock.now < end {
                if Task.isCancelled {
                    sawCancellation.withLock { $0 = true }
                    throw CancellationError()
                }
            }
            return 1
        }
        // Cancelled from a plain thread as soon as the body runs: nothing
        // here waits for Swift's cooperative pool, which other tests may keep
        // busy.
        spawnThread { if started.wait() { operation.cancel() } }
        let queue = OperationQueue()
        await queue.addOperationWhenRoom(operation)
        let result = try await withTimeLimit(90) { () -> Result<Int, any Error>? in
            await operation.finished()
            return operation.result
        }
        #expect(sawCancellation.withLock { $0 }, "the body never saw the cancellation")
        guard case .failure(let error)? = result else {
            Issue.record("expected a failure, got \(String(describing: result))")
            return
        }
        #expect(error is CancellationError)
    }

    @Test("cancel() cancels the body's task, which sees Task.isCancelled")
    func cancelReachesTheTask() async throws {
        let entered = AsyncGate()
        let cancelled = AsyncGate()
        let sawCancellation = LockedValue(false)
        let operation = ResultOperation { () async throws -> Int in
            entered.open()
            await withTaskCancellationHandler {
                await cancelled.opened()
            } onCancel: {
                cancelled.open()
            }
            sawCancellation.withLock { $0 = Task.isCancelled }
            throw CancellationError()
        }
        await OperationQueue().addOperationWhenRoom(operation)
        try await withTimeLimit { await entered.opened() }
        operation.cancel()
        let result = try await withTimeLimit { () -> Result<Int, any Error>? in
            await operation.finished()
            return operation.result
        }
        #expect(sawCancellation.withLock { $0 })
        #expect(operation.isCancelled)
        guard case .failure(let error)? = result else {
            Issue.record("expected a failure, got \(String(describing: result))")
            return
        }
        #expect(error is CancellationError)
        #expect(operation.failure is CancellationError)
    }

    @Test("cancelled before start: no body, value throws CancellationError")
    func cancelledBeforeStart() async throws {
        let ran = LockedValue(false)
        let operation = ResultOperation { () async -> Int in
            ran.withLock { $0 = true }
            return 1
        }
        operation.cancel()
        let queue = OperationQueue()
        await queue.addOperationWhenRoom(operation)
        await #expect(throws: CancellationError.self) {
            try await withTimeLimit { try await operation.value }
        }
        #expect(!ran.withLock { $0 })
        #expect(operation.result == nil)
    }

    @Test("await finished() on a plain operation, and on one already finished")
    func awaitFinished() async throws {
        let operation = BlockOperation {}
        let queue = OperationQueue()
        await queue.addOperationWhenRoom(operation)
        try await withTimeLimit { await operation.finished() }
        #expect(operation.isFinished)
        try await withTimeLimit { await operation.finished() }
    }

    @Test("cancelling the awaiting task cancels the operation")
    func awaitingTaskCancellationCancelsOperation() async throws {
        let queue = OperationQueue()
        queue.isSuspended = true
        let operation = BlockOperation {}
        await queue.addOperationWhenRoom(operation)
        let cancelled = AsyncGate()
        let token = operation.observe(\.isCancelled) { op, _ in if op.isCancelled { cancelled.open() } }
        let waiter = Task { await operation.finished() }
        waiter.cancel()
        // The awaiting task's cancellation cancels the operation; the queue
        // retires it once resumed.
        try await withTimeLimit { await cancelled.opened() }
        token.invalidate()
        queue.isSuspended = false
        try await withTimeLimit { await waiter.value }
        #expect(operation.isCancelled)
        #expect(operation.isFinished)
    }

    @Test("await queue.drained() covers operations added while waiting and async bodies")
    func drained() async throws {
        let queue = OperationQueue()
        let release = AsyncGate()
        let counter = Atomic<Int>(0)
        await queue.addOperationWhenRoom(ResultOperation { () async -> Void in
            await release.opened()
            counter.add(1, ordering: .relaxed)
        })
        let waiter = Task { await queue.drained() }
        await queue.addOperationWhenRoom { counter.add(1, ordering: .relaxed) }
        release.open()
        try await withTimeLimit { await waiter.value }
        #expect(counter.load(ordering: .relaxed) == 2)
        #expect(queue.operationCount == 0)
        try await withTimeLimit { await OperationQueue().drained() }
    }

    @Test("queue.run returns the body's value and throws its error")
    func runReturnsValue() async throws {
        let queue = OperationQueue()
        let value = try await withTimeLimit { try await queue.run { () async in 40 + 2 } }
        #expect(value == 42)
        let sync = try await withTimeLimit { try await queue.run { "sync" } }
        #expect(sync == "sync")
        struct Boom: Error {}
        await #expect(throws: Boom.self) {
            try await withTimeLimit { try await queue.run { () async throws -> Int in throw Boom() } }
        }
    }

    @Test("queue.run respects the width of a serial queue")
    func runRespectsWidth() async throws {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        let meter = ConcurrencyMeter()
        try await withTimeLimit {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        try await queue.run { () async in
                            meter.enter()
                            try? await Task.sleep(for: .milliseconds(2))
                            meter.leave()
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        #expect(meter.peak == 1)
    }

    @Test("queue.run waits while the queue is suspended, and goes by priority")
    func runRespectsSuspensionAndPriority() async throws {
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = 1
        queue.isSuspended = true
        let log = EventLog()
        let bothQueued = AsyncGate()
        let token = queue.observe(\.operationCount) { queue, _ in
            if queue.operationCount == 2 { bothQueued.open() }
        }
        let low = Task { try await queue.run(priority: .low) { log.append("low") } }
        let high = Task { try await queue.run(priority: .veryHigh) { log.append("high") } }
        // Both must be queued (not started) before resuming.
        try await withTimeLimit { await bothQueued.opened() }
        token.invalidate()
        #expect(log.all.isEmpty)
        queue.isSuspended = false
        try await withTimeLimit { _ = try await (low.value, high.value) }
        #expect(log.all == ["high", "low"])
    }

    @Test("cancelling a task awaiting queue.run cancels the operation")
    func runCancellation() async throws {
        let queue = OperationQueue()
        let entered = AsyncGate()
        let task = Task {
            try await queue.run { () async throws -> Int in
                entered.open()
                try await Task.sleep(for: .seconds(60))
                return 0
            }
        }
        try await withTimeLimit { await entered.opened() }
        task.cancel()
        await #expect(throws: CancellationError.self) {
            try await withTimeLimit { try await task.value }
        }
        try await withTimeLimit { await queue.drained() }
    }

    @Test("OperationQueue.current inside an async body is the queue")
    func currentQueueInAsyncBody() async throws {
        let queue = OperationQueue()
        let seen = try await withTimeLimit {
            try await queue.run { () async in OperationQueue.current === queue }
        }
        #expect(seen)
    }

    @Test("quality of service and task priority map to each other")
    func qualityOfServiceMapping() {
        #expect(QualityOfService.userInitiated.taskPriority == .userInitiated)
        #expect(QualityOfService.default.taskPriority == .medium)
        #expect(QualityOfService.utility.taskPriority == .utility)
        #expect(QualityOfService.background.taskPriority == .background)
        for qos in QualityOfService.allCases {
            #expect(QualityOfService(qos.taskPriority) == qos)
        }
        #expect(QualityOfService(.high) == .userInitiated)
        #expect(QualityOfService(.low) == .utility)
    }

    @Test("an async body's task runs at the priority of its quality of service")
    func asyncBodyPriority() async throws {
        let queue = OperationQueue()
        let priority = try await withTimeLimit {
            try await queue.run(qualityOfService: .utility) { () async in Task.currentPriority }
        }
        #expect(priority == .utility)
    }
}

/// A task-local value bound around a `start()` by hand.
private enum StartContext {
    @TaskLocal static var marker: String?
}
