import Foundation
import class Operations.BlockOperation
import class Operations.Operation
import class Operations.OperationQueue
import OperationsFoundation
import Testing

/// An operation that reports its own progress, as Apple-platform
/// subclasses do (OTOperations' `BasicOperation`, AdvancedOperation's
/// operations): `ProgressReporting` refines `NSObjectProtocol`.
private final class ReportingOperation: Operation, ProgressReporting, @unchecked Sendable {
    // @unchecked Sendable: `progress` is Foundation's, changed from `main()` only.
    let progress = Progress(totalUnitCount: 2)
    override func main() { progress.completedUnitCount = 2 }
}

@Suite("NSObjectProtocol")
struct NSObjectProtocolTests {
    @Test("a subclass adopts ProgressReporting, as on Darwin (ports 52: it did not compile)")
    func progressReportingSubclass() {
        let operation = ReportingOperation()
        let queue = OperationQueue()
        queue.addOperations([operation], waitUntilFinished: true)
        let reporting: any ProgressReporting = operation
        #expect(reporting.progress.fractionCompleted == 1)
    }

    @Test("the members NSObjectProtocol adds: self() and isProxy(); isEqual and hash are identity by default")
    func protocolMembers() {
        let operation = BlockOperation {}
        let other = BlockOperation {}
        let queue = OperationQueue()
        let objects: [any NSObjectProtocol] = [operation, queue]
        #expect(objects.allSatisfy { !$0.isProxy() })
        #expect(operation.`self`() === operation && queue.`self`() === queue)
        #expect(objects[0].isEqual(operation) && !objects[0].isEqual(other))
        #expect(objects[0].hash == operation.hash && objects[1].hash == queue.hash)
        #expect(objects[1].description == queue.description)
    }
}
