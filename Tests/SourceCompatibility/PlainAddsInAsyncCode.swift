// Foundation's adds called without `await` in `async` code, as Foundation
// allows (probe 48: the library's suspending adds once shared these names, and
// an `async` overload is preferred in `async` code).
import Operations

func enqueue(_ queue: OperationQueue, _ operation: Operation) async {
    queue.addOperation(operation)
    queue.addOperation { print("block") }
    queue.addOperations([BlockOperation {}], waitUntilFinished: false)
    queue.addBarrierBlock {}
    let block = BlockOperation {}
    block.addExecutionBlock {}
    queue.addOperation(block)
}

@MainActor
func enqueueOnMain(_ operation: Operation) async {
    OperationQueue.main.addOperation(operation)
    OperationQueue.main.addOperation {}
}
