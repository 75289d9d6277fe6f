import Dispatch
import Synchronization
import Testing
@testable import Operations

@Suite("OperationQueue.main", .serialized)
struct MainQueueTests {
    @Test("main runs its operations serially, with current == main")
    func mainQueueRuns() {
        let main = OperationQueue.main
        #expect(main.maxConcurrentOperationCount == 1)
        let seen = LockedValue<[Bool]>([])
        let meter = ConcurrencyMeter()
        for _ in 0..<5 {
            main.addOperation {
                meter.enter()
                seen.withLock { $0.append(OperationQueue.current === OperationQueue.main) }
                meter.leave()
            }
        }
        #expect(main.waitUntilAllOperationsAreFinished(timeout: .seconds(10)))
        #expect(seen.withLock { $0 } == [true, true, true, true, true])
        #expect(meter.peak == 1)
    }

    @Test("a main-thread queue run by a wait on the main thread tells its operationCount observers of each finish, as its drain does")
    func mainThreadWaitAnnouncesOperationCount() {
        // The main dispatch queue is held busy, so that only the wait below
        // runs the queue's operations (not a drain posted to the main thread).
        let mainBusy = Gate()
        let releaseMain = Gate()
        DispatchQueue.main.async {
            mainBusy.open()
            _ = releaseMain.wait(timeout: patience)
        }
        defer { releaseMain.open() }
        #expect(mainBusy.wait(timeout: patience))
        let queue = OperationQueue(mainThread: ())
        let counts = Recorder<String>()
        let token = queue.observe(key: "operationCount", options: [.new]) { _, change in
            counts.record(String(describing: change.newValue ?? nil))
        }
        let ranOn = Recorder<Bool>()
        for _ in 0..<2 {
            queue.addOperation { ranOn.record(ThreadContext.current.isMainThread) }
        }
        let waited = completesInTime {
            // This thread stands for the main thread: the wait runs the queue.
            ThreadContext.current.isMainThread = true
            queue.waitUntilAllOperationsAreFinished()
        }
        #expect(waited)
        #expect(ranOn.events == [true, true], "the wait ran the operations")
        #expect(counts.events == ["Optional(1)", "Optional(2)", "Optional(1)", "Optional(0)"])
        token.invalidate()
    }

    @Test("main's configuration is fixed, as in Foundation: suspension, name, quality of service, width and underlying queue are ignored, untold")
    func mainQueueSettings() {
        let main = OperationQueue.main
        let told = Recorder<String>()
        let tokens = [
            main.observe(\.isSuspended) { _, _ in told.record("isSuspended") },
            main.observe(\.name) { _, _ in told.record("name") },
            main.observe(\.qualityOfService) { _, _ in told.record("qualityOfService") },
            main.observe(\.maxConcurrentOperationCount) { _, _ in told.record("maxConcurrentOperationCount") },
        ]
        main.isSuspended = true
        main.name = "renamed main"
        main.qualityOfService = .background
        main.maxConcurrentOperationCount = 4
        main.underlyingQueue = DispatchQueue(label: "other")
        for token in tokens { token.invalidate() }
        #expect(!main.isSuspended)
        #expect(main.name == "NSOperationQueue Main Queue")
        #expect(main.qualityOfService == .userInteractive)
        #expect(main.maxConcurrentOperationCount == 1)
        #expect(main.underlyingQueue?.label == DispatchQueue.main.label)
        #expect(told.events.isEmpty, "\(told.events)")
        let ran = LockedValue(false)
        let operation = BlockOperation { ran.withLock { $0 = true } }
        main.addOperation(operation)
        #expect(operation.waitUntilFinished(timeout: .seconds(10)), "main cannot be suspended")
        #expect(ran.withLock { $0 })
    }

    @Test("cancelAllOperations() does nothing on main, as in Foundation; cancelling one operation does")
    func mainQueueCancelAll() {
        let main = OperationQueue.main
        let gate = Gate()
        let ranSecond = LockedValue(false)
        let first = BlockOperation { _ = gate.wait() }
        let second = BlockOperation { ranSecond.withLock { $0 = true } }
        let third = BlockOperation {}
        main.addOperations([first, second, third], waitUntilFinished: false)
        main.cancelAllOperations()
        #expect(!first.isCancelled && !second.isCancelled && !third.isCancelled)
        third.cancel()
        gate.open()
        #expect(main.waitUntilAllOperationsAreFinished(timeout: .seconds(10)))
        #expect(ranSecond.withLock { $0 })
        #expect(third.isCancelled && third.isFinished)
    }

    // Probe 48: under `swift test` the main dispatch queue is drained by a
    // worker thread (`dispatchMain()`), where `@MainActor` code runs too.
    // Darwin runs both on the main thread, where `current` is `main`.

    @Test("current is main in @MainActor code, on whichever thread runs it")
    @MainActor
    func currentOnMainActor() async {
        #expect(OperationQueue.current === OperationQueue.main)
    }

    @Test("current is main in a block of the main dispatch queue, on whichever thread runs it")
    func currentOnMainDispatchQueue() {
        let seen = Recorder<Bool>()
        let done = Gate()
        DispatchQueue.main.async {
            seen.record(OperationQueue.current === OperationQueue.main)
            done.open()
        }
        #expect(done.wait(timeout: patience), "the main dispatch queue did not run the block")
        #expect(seen.events == [true])
    }

    @Test("a wait made in a block of the main dispatch queue runs main's operations, as on the main thread")
    func waitOnMainDispatchQueueRunsMainOperations() {
        let result = Recorder<Bool>()
        let done = Gate()
        DispatchQueue.main.async {
            let ran = Counter()
            let operation = BlockOperation { ran.increment() }
            OperationQueue.main.addOperation(operation)
            // Before, off the main thread this wait waited for a drain posted
            // to the main dispatch queue, which this block keeps busy.
            result.record(operation.waitUntilFinished(timeout: .seconds(5)) && ran.count == 1)
            OperationQueue.main.addOperation { ran.increment() }
            result.record(OperationQueue.main.waitUntilAllOperationsAreFinished(timeout: .seconds(5)) && ran.count == 2)
            done.open()
        }
        #expect(done.wait(timeout: patience), "the main dispatch queue did not run the block")
        #expect(result.events == [true, true])
    }

    @Test("an operation of main waiting for itself, or for main, from its own body: reported, not a silent hang (probe 51)")
    func selfWaitsOnMainAreReported() {
        let results = Recorder<String>()
        let done = Latch(count: 2)
        let waitsForItself = BlockOperation()
        waitsForItself.addExecutionBlock { [unowned waitsForItself] in
            let misuses = Recorder<OperationMisuse.Code>()
            let returned = OperationMisuse.withHandler({ misuses.record($0.code) }) {
                waitsForItself.waitUntilFinished()
                return "returned"
            }
            results.record("operation: \(returned), \(misuses.events)")
            done.countDown()
        }
        let waitsForMain = BlockOperation {
            let misuses = Recorder<OperationMisuse.Code>()
            OperationMisuse.withHandler({ misuses.record($0.code) }) {
                OperationQueue.main.waitUntilAllOperationsAreFinished()
            }
            results.record("queue: returned, \(misuses.events)")
            done.countDown()
        }
        OperationQueue.main.addOperation(waitsForItself)
        OperationQueue.main.addOperation(waitsForMain)
        #expect(done.wait(timeout: patience), "a wait hung: \(results.events)")
        #expect(Set(results.events) == ["operation: returned, [waitDeadlock]", "queue: returned, [waitDeadlock]"])
    }

    @Test("an isFinished observer of an operation of main waits for main's other work, as on any queue (probe 53: the wait never ended)")
    func observerWaitsForMain() {
        let results = Recorder<String>()
        let done = Gate()
        let operation = BlockOperation {}
        let token = operation.observe(\.isFinished, options: [.new]) { _, change in
            guard change.newValue == true else { return }
            let misuses = Recorder<OperationMisuse.Code>()
            let idle = OperationMisuse.withHandler({ misuses.record($0.code) }) {
                OperationQueue.main.waitUntilAllOperationsAreFinished(timeout: patience)
            }
            let forItself = operation.waitUntilFinished(timeout: patience)
            results.record("queue idle: \(idle), itself: \(forItself), \(misuses.events)")
            done.open()
        }
        OperationQueue.main.addOperation(operation)
        #expect(done.wait(timeout: patience * 3), "the observer's waits hung: \(results.events)")
        #expect(results.events == ["queue idle: true, itself: true, []"])
        token.invalidate()
    }
}
