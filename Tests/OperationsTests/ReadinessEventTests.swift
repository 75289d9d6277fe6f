// Readiness events for instruments: `.ready` and `.notReady` follow a queued
// operation's readiness both ways, so that a gauge of ready operations stays
// right — through dependencies added and removed, cancellation, and
// `isReady` overrides announced with willChange/didChange.
//
// Instruments are process-wide: each test keeps only the events of its own
// operations. The changes below happen on the test's thread, which delivers
// their events before the call returns.

import Synchronization
import Testing
@testable import Operations

/// Records the readiness events of some operations, while installed.
final class ReadinessLog: Sendable {
    private let token: OperationInstrumentation.Token
    private let events = Recorder<OperationEvent>()

    init(_ operations: [Operation]) {
        let watched = Set(operations.map(ObjectIdentifier.init))
        token = OperationInstrumentation.addInstrument { [events] event in
            guard watched.contains(ObjectIdentifier(event.operation)) else { return }
            events.record(event)
        }
    }

    /// The readiness events of `operation` (`ready` / `notReady`), in time order.
    func readiness(of operation: Operation) -> [OperationEvent.Kind] {
        events.events
            .filter { $0.operation === operation && ($0.kind == .ready || $0.kind == .notReady) }
            .sorted { $0.time < $1.time }
            .map(\.kind)
    }

    /// Every event kind of `operation`, in time order.
    func kinds(of operation: Operation) -> [OperationEvent.Kind] {
        all(of: operation).sorted { $0.time < $1.time }.map(\.kind)
    }

    /// Every event of `operation`, in arrival order.
    func all(of operation: Operation) -> [OperationEvent] {
        events.events.filter { $0.operation === operation }
    }

    func cancel() { token.cancel() }
}

/// Its readiness is user code: `super.isReady` and a flag, announced.
private final class SwitchedReadiness: Operation, @unchecked Sendable {
    // @unchecked Sendable: `allowed` is atomic; `ran` is a Gate.
    private let allowed: Atomic<Bool>
    let ran = Gate()

    init(allowed: Bool) {
        self.allowed = Atomic(allowed)
        super.init()
    }

    override var isReady: Bool { super.isReady && allowed.load(ordering: .acquiring) }

    func set(_ value: Bool) {
        willChangeValue(forKey: "isReady")
        allowed.store(value, ordering: .releasing)
        didChangeValue(forKey: "isReady")
    }

    override func main() { ran.open() }
}

@Suite("Readiness events: ready and notReady")
struct ReadinessEventTests {
    @Test("a dependency added to a ready queued operation: notReady, then ready when it finishes")
    func addDependencyAfterReady() {
        let queue = makeQueue("ready-events-add-dependency")
        queue.isSuspended = true
        let operation = BlockOperation {}
        let dependency = BlockOperation {}
        let log = ReadinessLog([operation])
        defer { log.cancel() }

        queue.addOperation(operation)
        #expect(log.readiness(of: operation) == [.ready])
        operation.addDependency(dependency)
        #expect(log.readiness(of: operation) == [.ready, .notReady])
        let notReady = log.all(of: operation).first { $0.kind == .notReady }
        #expect(notReady?.queue === queue, "the event names the queue")
        operation.addDependency(BlockOperation {})   // already not ready: nothing new
        #expect(log.readiness(of: operation) == [.ready, .notReady])

        operation.removeDependency(operation.dependencies[1])
        dependency.start()                          // by hand; its dependent becomes ready
        #expect(log.readiness(of: operation) == [.ready, .notReady, .ready])
        #expect(log.all(of: operation).last { $0.kind == .ready }?.queue === queue)

        queue.isSuspended = false
        #expect(operation.waitUntilFinished(timeout: patience))
    }

    @Test("a cancelled queued operation given a dependency stays ready: no notReady (regression: probe 12)")
    func dependencyOnCancelledStaysReady() {
        let queue = makeQueue("ready-events-cancelled-dependency")
        queue.isSuspended = true
        let operation = BlockOperation {}
        let selfDependent = BlockOperation {}
        let log = ReadinessLog([operation, selfDependent])
        defer { log.cancel() }

        queue.addOperations([operation, selfDependent], waitUntilFinished: false)
        operation.cancel()
        selfDependent.cancel()
        operation.addDependency(BlockOperation {})
        selfDependent.addDependency(selfDependent)
        #expect(operation.isReady && selfDependent.isReady, "a cancelled operation is ready")
        #expect(log.readiness(of: operation) == [.ready], "the last readiness event says ready")
        #expect(log.readiness(of: selfDependent) == [.ready])

        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.readiness(of: operation) == [.ready])
        #expect(log.readiness(of: selfDependent) == [.ready])
    }

    @Test("an operation whose class overrides start(): no readiness events once its queue started it (regression: probe 13)")
    func noReadinessEventsAfterCustomStart() {
        let queue = makeQueue("ready-events-custom-start")
        let operation = ManualConcurrentOperation()
        let dependency = BlockOperation {}
        let log = ReadinessLog([operation])
        defer { log.cancel() }

        queue.addOperation(operation)
        #expect(operation.started.wait())
        #expect(log.readiness(of: operation) == [.ready])
        operation.addDependency(dependency)     // too late to hold it back
        operation.removeDependency(dependency)
        operation.addDependency(dependency)
        operation.cancel()
        dependency.start()
        #expect(log.readiness(of: operation) == [.ready], "readiness events after started")
        operation.finish()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(log.readiness(of: operation) == [.ready])
    }

    @Test("a dependency given when the queue has announced the start is too late: no notReady after started (regression: probe 13)")
    func noNotReadyAfterStarted() {
        let queue = makeQueue("ready-events-started-window")
        let operation = BlockOperation {}
        let dependency = BlockOperation {}
        let log = ReadinessLog([operation])
        defer { log.cancel() }
        // Called on the thread that starts the operation, between the
        // queue's `started` and the start itself.
        let token = OperationInstrumentation.addInstrument { event in
            if event.kind == .started, event.operation === operation { operation.addDependency(dependency) }
        }
        defer { token.cancel() }

        queue.addOperation(operation)
        #expect(operation.waitUntilFinished(timeout: patience))
        let kinds = log.kinds(of: operation)
        #expect(kinds == [.added, .ready, .started, .finished], "\(kinds)")
    }

    @Test("an operation that finishes from its isCancelled observer: cancelled comes before finished (regression: probe 13)")
    func cancelledBeforeFinished() {
        let queue = makeQueue("events-cancel-then-finish")
        let operation = ManualConcurrentOperation()
        let log = ReadinessLog([operation])
        defer { log.cancel() }
        // The common pattern: an asynchronous operation finishes when it is
        // cancelled. The observer runs before `cancel()` returns.
        let token = operation.observe(key: "isCancelled", options: [.new]) { observed, _ in
            observed.finish()
        }
        queue.addOperation(operation)
        #expect(operation.started.wait())
        operation.cancel()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        let kinds = log.kinds(of: operation)
        #expect(kinds == [.added, .ready, .started, .cancelled, .finished], "\(kinds)")
        withExtendedLifetime(token) {}
    }

    @Test("no readiness events before an operation is in a queue: the first one comes with the add (regression: probe 13)")
    func noReadinessEventsOutsideQueues() {
        let queue = makeQueue("ready-events-outside")
        queue.isSuspended = true
        let operation = BlockOperation {}
        let first = BlockOperation {}
        let second = BlockOperation {}
        let third = BlockOperation {}
        let log = ReadinessLog([operation])
        defer { log.cancel() }

        operation.addDependency(first)
        operation.removeDependency(first)       // ready again, outside a queue
        operation.addDependency(second)
        second.start()                          // ready again, outside a queue
        operation.addDependency(third)
        #expect(log.readiness(of: operation).isEmpty, "readiness events before the add")
        queue.addOperation(operation)
        #expect(log.readiness(of: operation).isEmpty, "added not ready: no readiness event")
        third.start()
        #expect(log.readiness(of: operation) == [.ready])
        queue.isSuspended = false
        #expect(operation.waitUntilFinished(timeout: patience))
    }

    @Test("readiness events alternate, starting with ready, when a dependency is added while the operation is being added (regression: probe 13)")
    func readinessEventsAlternateAcrossAdd() {
        let queue = makeQueue("ready-events-add-race")
        queue.isSuspended = true
        let rounds = 300
        let operations = (0..<rounds).map { _ in BlockOperation {} }
        let dependencies = (0..<rounds).map { _ in BlockOperation {} }
        let log = ReadinessLog(operations)
        defer { log.cancel() }
        for round in 0..<rounds {
            let go = Latch(count: 1)
            let done = Latch(count: 1)
            let operation = operations[round]
            let dependency = dependencies[round]
            spawnThread {
                go.wait()
                operation.addDependency(dependency)
                done.countDown()
            }
            go.countDown()
            queue.addOperation(operation)
            #expect(done.wait(timeout: patience))
        }
        for (operation, dependency) in zip(operations, dependencies) {
            let kinds = log.readiness(of: operation)
            // Not ready now: either no event (added after the edge), or
            // ready then notReady (added before it).
            #expect(kinds == [] || kinds == [.ready, .notReady], "\(kinds)")
            dependency.start()
        }
        for operation in operations {
            let kinds = log.readiness(of: operation)
            #expect(kinds == [.ready] || kinds == [.ready, .notReady, .ready], "\(kinds)")
        }
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("removing the last unfinished dependency makes a queued operation ready")
    func removeDependencyMakesReady() {
        let queue = makeQueue("ready-events-remove-dependency")
        queue.isSuspended = true
        let operation = BlockOperation {}
        let dependency = BlockOperation {}
        operation.addDependency(dependency)
        let log = ReadinessLog([operation])
        defer { log.cancel() }

        queue.addOperation(operation)
        #expect(log.readiness(of: operation).isEmpty, "added not ready")
        operation.removeDependency(dependency)
        #expect(log.readiness(of: operation) == [.ready])
        queue.isSuspended = false
        #expect(operation.waitUntilFinished(timeout: patience))
    }

    @Test("cancelling a queued operation that waits for a dependency makes it ready")
    func cancelMakesReady() {
        let queue = makeQueue("ready-events-cancel")
        queue.isSuspended = true
        let operation = BlockOperation {}
        operation.addDependency(BlockOperation {})
        let log = ReadinessLog([operation])
        defer { log.cancel() }

        queue.addOperation(operation)
        operation.cancel()
        #expect(log.readiness(of: operation) == [.ready])
        #expect(log.all(of: operation).map(\.kind).contains(.cancelled))
        queue.isSuspended = false
        #expect(operation.waitUntilFinished(timeout: patience))
    }

    @Test("an operation in no queue gets no notReady")
    func noNotReadyOutsideQueues() {
        let operation = BlockOperation {}
        let log = ReadinessLog([operation])
        defer { log.cancel() }
        operation.addDependency(BlockOperation {})
        #expect(log.readiness(of: operation).isEmpty)
    }

    @Test("an isReady override: ready and notReady follow its announced value, from when it is added")
    func overrideFollowsAnnouncements() {
        let queue = makeQueue("ready-events-override")
        queue.isSuspended = true
        let operation = SwitchedReadiness(allowed: false)
        let log = ReadinessLog([operation])
        defer { log.cancel() }

        queue.addOperation(operation)
        #expect(log.readiness(of: operation).isEmpty, "added with the override false: not ready")
        operation.set(true)
        #expect(log.readiness(of: operation) == [.ready])
        operation.set(true)                          // no change: nothing new
        #expect(log.readiness(of: operation) == [.ready])
        operation.set(false)
        #expect(log.readiness(of: operation) == [.ready, .notReady])
        #expect(log.all(of: operation).last?.queue === queue)
        operation.set(true)
        #expect(log.readiness(of: operation) == [.ready, .notReady, .ready])

        queue.isSuspended = false
        #expect(operation.ran.wait())
        #expect(operation.waitUntilFinished(timeout: patience))
    }

    @Test("an isReady override given an unfinished dependency: the queue re-reads it (notReady) and does not start it")
    func overrideWithAddedDependency() {
        let queue = makeQueue("ready-events-override-dependency")
        queue.isSuspended = true
        let operation = SwitchedReadiness(allowed: true)
        let dependency = BlockOperation {}
        let log = ReadinessLog([operation])
        defer { log.cancel() }

        queue.addOperation(operation)
        #expect(log.readiness(of: operation) == [.ready])
        operation.addDependency(dependency)
        #expect(log.readiness(of: operation) == [.ready, .notReady])

        queue.isSuspended = false
        #expect(!operation.ran.wait(timeout: negativeWindow), "started while its isReady is false")
        dependency.start()
        #expect(log.readiness(of: operation) == [.ready, .notReady, .ready])
        #expect(operation.ran.wait())
        #expect(operation.waitUntilFinished(timeout: patience))
    }
}
