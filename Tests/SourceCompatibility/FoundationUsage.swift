// Foundation's members used the way ported code uses them: typed reads and
// writes, unapplied references (probe 50's sweep; all compiled unchanged).
import Dispatch
import Operations

func useOp(_ op: Operation) {
    let a: Bool = op.isCancelled
    let b: Bool = op.isExecuting
    let c: Bool = op.isFinished
    let d: Bool = op.isConcurrent
    let e: Bool = op.isAsynchronous
    let f: Bool = op.isReady
    let deps: [Operation] = op.dependencies
    let p: Operation.QueuePriority = op.queuePriority
    op.queuePriority = .veryHigh
    op.queuePriority = .high; op.queuePriority = .normal; op.queuePriority = .low; op.queuePriority = .veryLow
    let q: QualityOfService = op.qualityOfService
    op.qualityOfService = .userInitiated
    op.qualityOfService = .userInteractive; op.qualityOfService = .utility; op.qualityOfService = .background; op.qualityOfService = .default
    let n: String? = op.name
    op.name = "x"
    op.name = nil
    let cb: (@Sendable () -> Void)? = op.completionBlock
    op.completionBlock = { print("done") }
    op.completionBlock = nil
    op.completionBlock = cb
    let tp: Double = op.threadPriority
    op.threadPriority = 0.5
    op.addDependency(Operation())
    op.removeDependency(deps[0])
    op.cancel()
    op.start()
    op.main()
    op.waitUntilFinished()
    _ = (a, b, c, d, e, f, p, q, n, tp)
    let raw: Int = Operation.QueuePriority.high.rawValue
    let pr = Operation.QueuePriority(rawValue: 4)
    let qr: Int = QualityOfService.utility.rawValue
    let qq = QualityOfService(rawValue: 0x11)
    _ = (raw, pr, qr, qq)
    switch op.queuePriority { case .veryLow, .low, .normal, .high, .veryHigh: break; @unknown default: break }
    switch op.qualityOfService { case .userInteractive, .userInitiated, .utility, .background, .default: break; @unknown default: break }
}
func useBlock() {
    let b = BlockOperation()
    b.addExecutionBlock { print("1") }
    let blocks: [() -> Void] = b.executionBlocks
    let blocks2: [@Sendable () -> Void] = b.executionBlocks
    let b2 = BlockOperation(block: { print("2") })
    let b3 = BlockOperation { print("3") }
    _ = (blocks, blocks2, b2, b3)
}
func useQueue() {
    let q = OperationQueue()
    q.name = "q"; let n: String? = q.name
    q.maxConcurrentOperationCount = 1
    q.maxConcurrentOperationCount = OperationQueue.defaultMaxConcurrentOperationCount
    let m: Int = q.maxConcurrentOperationCount
    q.isSuspended = true; let s: Bool = q.isSuspended
    q.qualityOfService = .utility; let qos: QualityOfService = q.qualityOfService
    q.underlyingQueue = DispatchQueue(label: "x"); let u: DispatchQueue? = q.underlyingQueue
    let ops: [Operation] = q.operations
    let c: Int = q.operationCount
    q.addOperation(BlockOperation())
    q.addOperation { print("b") }
    q.addOperations([Operation()], waitUntilFinished: false)
    q.addBarrierBlock { print("barrier") }
    q.cancelAllOperations()
    q.waitUntilAllOperationsAreFinished()
    let cur: OperationQueue? = OperationQueue.current
    let main: OperationQueue = OperationQueue.main
    _ = (n, m, s, qos, u, ops, c, cur, main)
    _ = q.operations as [Operation]
    OperationQueue.main.addOperation { print("main") }
    OperationQueue.current?.addOperation { }
}
func unapplied(_ q: OperationQueue, _ op: Operation) {
    let w = q.waitUntilAllOperationsAreFinished
    w()
    let u = op.waitUntilFinished
    u()
    DispatchQueue.global().async(execute: q.waitUntilAllOperationsAreFinished)
    DispatchQueue.global().async(execute: op.waitUntilFinished)
    let s = op.start; s()
    let ob = q.addBarrierBlock; _ = ob
    let a = op.addDependency; a(BlockOperation())
    let k = q.cancelAllOperations; k()
}
