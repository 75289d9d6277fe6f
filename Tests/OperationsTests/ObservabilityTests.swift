// Observability without integrations: a queue's progress is observable,
// its events come in order with times, and task-local values registered
// with OperationContextPropagation reach operation bodies.

import Testing
@testable import Operations

enum RequestContext {
    @TaskLocal static var id: String?
}

@Suite("Observability in the core", .serialized)
struct ObservabilityTests {
    @Test("observe(\\.progress) on a queue fires as operations are added and finish")
    func progressIsObservable() {
        let queue = makeQueue("progress-observed", width: 1)
        let seen = Recorder<String>()
        let token = queue.observe(\.progress, options: [.new]) { _, change in
            if let progress = change.newValue { seen.record("\(progress.completedUnitCount)/\(progress.totalUnitCount)") }
        }
        queue.isSuspended = true
        let operations = (0..<10).map { _ in BlockOperation {} }
        for operation in operations { queue.addOperation(operation) }
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        token.invalidate()
        let events = seen.events
        #expect(events.count >= 20, "\(events)")
        #expect(events.contains("0/10") && events.last == "10/10", "\(events)")
    }

    @Test("queue events: added before anything else about the operation, with ordered times")
    func eventsInOrder() async {
        let queue = makeQueue("events-ordered", width: 2)
        let stream = queue.timedEvents
        let operations = (0..<20).map { index -> BlockOperation in
            let operation = BlockOperation {}
            operation.name = "event-\(index)"
            return operation
        }
        queue.addOperations(operations, waitUntilFinished: false)
        var seen: [String] = []
        var last: ContinuousClock.Instant?
        for await event in stream {
            if let last { #expect(last <= event.time) }
            last = event.time
            switch event.event {
            case .added(let operation): seen.append("added \(operation.name ?? "")")
            case .started(let operation): seen.append("started \(operation.name ?? "")")
            case .finished(let operation): seen.append("finished \(operation.name ?? "")")
            case .drained: seen.append("drained")
            case .suspended: break
            }
            if seen.last == "drained" { break }
        }
        for operation in operations {
            let name = operation.name!
            let added = seen.firstIndex(of: "added \(name)")
            let started = seen.firstIndex(of: "started \(name)")
            let finished = seen.firstIndex(of: "finished \(name)")
            #expect(added != nil && started != nil && finished != nil)
            if let added, let started, let finished { #expect(added < started && started < finished) }
        }
    }

    @Test("a start by hand that is refused is no start: instruments hear nothing of it")
    func refusedStartIsNoStart() {
        let seen = Recorder<String>()
        let token = OperationInstrumentation.addInstrument { event in
            guard let name = event.operation.name, name.hasPrefix("refused-start-") else { return }
            seen.record("\(event.kind) \(name)")
        }
        defer { token.cancel() }
        let finished = BlockOperation {}
        finished.name = "refused-start-finished"
        finished.start()
        let blocked = BlockOperation {}
        blocked.name = "refused-start-not-ready"
        blocked.addDependency(BlockOperation {})
        let misuses = Recorder<OperationMisuse.Code>()
        OperationMisuse.withHandler({ misuses.record($0.code) }) {
            finished.start()
            blocked.start()
        }
        #expect(misuses.count == 2)
        #expect(seen.events == ["started refused-start-finished", "finished refused-start-finished"], "\(seen.events)")
        #expect(!blocked.isExecuting && !blocked.isFinished)
    }

    @Test("instruments are told every operation finished before the queue's waiters wake")
    func instrumentsBeforeIdle() {
        let queue = makeQueue("instrumented-idle")
        let finished = Counter()
        let token = OperationInstrumentation.addInstrument { event in
            guard event.kind == .finished, event.queue === queue else { return }
            // A slow instrument: the queue must not look idle before it returns.
            let clock = ContinuousClock()
            let until = clock.now.advanced(by: .microseconds(200))
            while clock.now < until {}
            finished.increment()
        }
        defer { token.cancel() }
        for round in 1...20 {
            for _ in 0..<5 { queue.addOperation(BlockOperation {}) }
            // A waiter that arrives while the last instrument runs must not
            // find the queue idle: poll, as a late waiter would.
            #expect(waitUntil { queue.waitUntilAllOperationsAreFinished(timeout: .zero) })
            #expect(finished.count == round * 5, "round \(round): the queue looked idle before instruments saw every finish")
        }
    }

    @Test("a carried @TaskLocal reaches main(), block, ResultOperation and queue.run bodies, sync and async")
    func taskLocalsAreCarried() async throws {
        let token = OperationContextPropagation.carry(RequestContext.$id)
        defer { token.cancel() }
        let queue = makeQueue("task-locals")
        let seen = Recorder<String>()
        try await RequestContext.$id.withValue("req-42") {
            let block = BlockOperation { seen.record("block \(RequestContext.id ?? "nil")") }
            let sync = ResultOperation<String, Never> { "sync \(RequestContext.id ?? "nil")" }
            let async = ResultOperation<String, Never> { () async -> String in
                await Task.yield()
                return "async \(RequestContext.id ?? "nil")"
            }
            await queue.addOperationsWhenRoom([block, sync, async])
            seen.record(try await sync.value)
            seen.record(try await async.value)
            seen.record(try await queue.run { "run \(RequestContext.id ?? "nil")" })
            await queue.drained()
        }
        #expect(Set(seen.events) == ["block req-42", "sync req-42", "async req-42", "run req-42"])
        // Added outside the binding: nothing is carried.
        let plain = ResultOperation<String, Never> { RequestContext.id ?? "nil" }
        await queue.addOperationWhenRoom(plain)
        #expect(try await plain.value == "nil")
    }

    @Test("without a registration, nothing is carried (and nothing is paid)")
    func nothingCarriedUnregistered() async throws {
        let queue = makeQueue("task-locals-off")
        let value = try await RequestContext.$id.withValue("req-7") { () async throws -> String in
            let operation = ResultOperation<String, Never> { RequestContext.id ?? "nil" }
            await queue.addOperationWhenRoom(operation)
            return try await operation.value
        }
        #expect(value == "nil")
    }
}
