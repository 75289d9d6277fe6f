// Subclasses overriding every open member with Foundation's signatures, as
// ported code declares them (probe 50's sweep; all compiled unchanged).
import Dispatch
import Operations

class AsyncOp: Operation, @unchecked Sendable {
    private var _executing = false
    private var _finished = false
    override init() { super.init(); name = "AsyncOp" }
    override var isAsynchronous: Bool { return true }
    override var isConcurrent: Bool { return true }
    override var isExecuting: Bool {
        get { _executing }
        set { willChangeValue(forKey: "isExecuting"); _executing = newValue; didChangeValue(forKey: "isExecuting") }
    }
    override var isFinished: Bool {
        get { _finished }
        set { willChangeValue(forKey: "isFinished"); _finished = newValue; didChangeValue(forKey: "isFinished") }
    }
    override var isReady: Bool { super.isReady && true }
    override var isCancelled: Bool { super.isCancelled }
    override func start() {
        if isCancelled { isFinished = true; return }
        isExecuting = true
        main()
    }
    override func main() { finish() }
    func finish() { isExecuting = false; isFinished = true }
    override func cancel() { super.cancel() }
    override var completionBlock: (@Sendable () -> Void)? {
        get { super.completionBlock }
        set { super.completionBlock = newValue }
    }
    override var name: String? { get { super.name } set { super.name = newValue } }
    override var queuePriority: Operation.QueuePriority { get { super.queuePriority } set { super.queuePriority = newValue } }
    override var qualityOfService: QualityOfService { get { super.qualityOfService } set { super.qualityOfService = newValue } }
    override func addDependency(_ op: Operation) { super.addDependency(op) }
    override func removeDependency(_ op: Operation) { super.removeDependency(op) }
    override var dependencies: [Operation] { super.dependencies }
    override func waitUntilFinished() { super.waitUntilFinished() }
    override var description: String { "AsyncOp" }
    override var debugDescription: String { "AsyncOp dbg" }
}
final class Sub2: AsyncOp, @unchecked Sendable {
    let value: Int
    init(value: Int) { self.value = value; super.init() }
    convenience init(v: String) { self.init(value: Int(v) ?? 0) }
    override func main() { print(value); super.main() }
}
class ReqOp: Operation, @unchecked Sendable {
    required override init() { super.init() }
}
final class ReqOp2: ReqOp, @unchecked Sendable {
    required init() { super.init() }
}
func make<T: ReqOp>(_ t: T.Type) -> T { t.init() }
class ResultOp<T>: Operation, @unchecked Sendable {
    var result: T?
    let work: () -> T
    init(work: @escaping () -> T) { self.work = work; super.init() }
    override func main() { result = work() }
}
final class MyBlock: BlockOperation, @unchecked Sendable {
    override func main() { super.main() }
    override func addExecutionBlock(_ block: @escaping @Sendable () -> Void) { super.addExecutionBlock(block) }
    override var executionBlocks: [@Sendable () -> Void] { super.executionBlocks }
}
final class MyBlock2: BlockOperation, @unchecked Sendable {
    convenience init(name: String, block: @escaping @Sendable () -> Void) { self.init(block: block); self.name = name }
}
class MyQueue: OperationQueue, @unchecked Sendable {
    override init() { super.init(); maxConcurrentOperationCount = 2 }
    override func addOperation(_ op: Operation) { super.addOperation(op) }
    override func addOperation(_ block: @escaping @Sendable () -> Void) { super.addOperation(block) }
    override func addOperations(_ ops: [Operation], waitUntilFinished wait: Bool) { super.addOperations(ops, waitUntilFinished: wait) }
    override func cancelAllOperations() { super.cancelAllOperations() }
    override var operationCount: Int { super.operationCount }
    override var operations: [Operation] { super.operations }
    override var maxConcurrentOperationCount: Int { get { super.maxConcurrentOperationCount } set { super.maxConcurrentOperationCount = newValue } }
    override var isSuspended: Bool { get { super.isSuspended } set { super.isSuspended = newValue } }
    override var name: String? { get { super.name } set { super.name = newValue } }
    override var qualityOfService: QualityOfService { get { super.qualityOfService } set { super.qualityOfService = newValue } }
    override var underlyingQueue: DispatchQueue? { get { super.underlyingQueue } set { super.underlyingQueue = newValue } }
    override func addBarrierBlock(_ barrier: @escaping @Sendable () -> Void) { super.addBarrierBlock(barrier) }
    override func waitUntilAllOperationsAreFinished() { super.waitUntilAllOperationsAreFinished() }
    override class var main: OperationQueue { super.main }
    override class var current: OperationQueue? { super.current }
}
final class KeyedOperation: Operation, @unchecked Sendable {
    let key: Int
    init(key: Int) { self.key = key }
    override func isEqual(_ object: Any?) -> Bool { (object as? KeyedOperation)?.key == key }
    override var hash: Int { key }
    override class func automaticallyNotifiesObservers(forKey key: String) -> Bool { false }
    override class func keyPathsForValuesAffectingValue(forKey key: String) -> Set<String> { [] }
}
