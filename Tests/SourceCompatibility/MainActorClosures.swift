// expect: warnings
// A main-actor class handing closures that call its own methods to the
// block-taking members and to `observe`, as UI code shared with Apple
// platforms does. Darwin's declarations are imported from Objective-C, and so
// implicitly `@preconcurrency`: these are warnings there, not errors (probe
// 50). The library's declarations are `@preconcurrency` for the same result.
import Operations

@MainActor
final class ViewModel {
    var count = 0
    func update() { count += 1 }

    func bind(_ queue: OperationQueue, _ operation: BlockOperation) -> KeyValueObservation {
        OperationQueue.main.addOperation { self.update() }
        queue.addBarrierBlock { [weak self] in self?.update() }
        operation.addExecutionBlock { self.update() }
        _ = BlockOperation { self.update() }
        _ = queue.observe(\.operationCount) { [weak self] _, _ in self?.update() }
        return operation.observe(\.isFinished) { [weak self] _, _ in self?.update() }
    }
}
