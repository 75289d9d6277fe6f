// The helpers projects add to the Foundation classes, and the classes used
// from main-actor classes and actors (probe 50's sweep; all compiled
// unchanged). Extension members named like the library's own (`failure`,
// `dependencyErrors`, a synchronous `finished() -> Bool`) resolve to the
// project's.
import Dispatch
import Operations

extension Operation {
    @discardableResult func then(_ next: Operation) -> Operation { next.addDependency(self); return next }
    func addCompletionBlock(_ block: @escaping @Sendable () -> Void) {
        if let existing = completionBlock { completionBlock = { existing(); block() } } else { completionBlock = block }
    }
    var failure: Error? { nil }
    func finished() -> Bool { isFinished }
    var dependencyErrors: [Error] { [] }
    func addDependencies(_ operations: [Operation]) { operations.forEach(addDependency) }
    func removeAllDependencies() { dependencies.forEach(removeDependency) }
}

extension OperationQueue {
    static let shared = OperationQueue()
    convenience init(name: String, maxConcurrentOperationCount: Int) {
        self.init()
        self.name = name
        self.maxConcurrentOperationCount = maxConcurrentOperationCount
    }
    static func serial(_ name: String) -> OperationQueue { OperationQueue(name: name, maxConcurrentOperationCount: 1) }
}

protocol Chainable {}
extension Chainable where Self: Operation {
    func chain(_ other: Operation) -> Self { addDependency(other); return self }
}
extension BlockOperation: Chainable {}

func useHelpers(_ first: BlockOperation, _ second: Operation) async {
    first.then(second)
    first.addCompletionBlock {}
    _ = first.failure
    let done: Bool = first.finished()
    _ = done
    _ = first.dependencyErrors
    _ = first.chain(second)
    OperationQueue.serial("helpers").addOperations([first, second], waitUntilFinished: false)
    OperationQueue.shared.addOperation {}
}

@MainActor
final class ScreenModel {
    let queue = OperationQueue()
    var count = 0

    func load() {
        let operation = BlockOperation { print("work") }
        operation.completionBlock = { [weak self] in
            DispatchQueue.main.async { self?.count += 1 }
        }
        queue.addOperations([operation], waitUntilFinished: false)
        OperationQueue.main.addOperation { print("on main") }
        queue.addBarrierBlock {}
    }

    func loadAsync() async {
        queue.addOperation(BlockOperation { print("work") })
        queue.cancelAllOperations()
        await queue.drained()
    }
}

actor Loader {
    let queue = OperationQueue()
    func go() {
        queue.addOperations([BlockOperation()], waitUntilFinished: false)
        queue.addBarrierBlock {}
        queue.cancelAllOperations()
    }
}
