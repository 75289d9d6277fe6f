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

    @Test("main's name, suspension and cancellation work")
    func mainQueueSettings() {
        let main = OperationQueue.main
        #expect(main.name == "NSOperationQueue Main Queue")
        main.isSuspended = true
        let ran = LockedValue(false)
        let operation = BlockOperation { ran.withLock { $0 = true } }
        main.addOperation(operation)
        #expect(!operation.waitUntilFinished(timeout: .milliseconds(50)))
        #expect(!ran.withLock { $0 })
        operation.cancel()
        main.isSuspended = false
        #expect(operation.waitUntilFinished(timeout: .seconds(10)))
        #expect(!ran.withLock { $0 })
        #expect(operation.isCancelled)
        main.maxConcurrentOperationCount = 4
        #expect(main.maxConcurrentOperationCount == 1)
    }
}
