import Operations
import Synchronization

// Operations built by hand, as the documents build them: each keeps its own
// executing/finished state, overrides the state properties, and announces
// every change with willChangeValue(forKey:) / didChangeValue(forKey:). The
// library learns of their progress only through those announcements.

/// The async-operation article's `MLAsyncOperation`: an operation that stays executing after
/// `start()` returns, until its work calls ``finishOperation()`` from a
/// callback. The article's `willSet`/`didSet` pairs become the explicit
/// announcements in ``setExecuting(_:)`` and ``setFinished(_:)``.
///
/// The library offers the same behaviour ready-made as `AsyncOperation`;
/// the `async-fan-in` demo runs one of each.
final class MLAsyncOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `flags` is guarded by its Mutex; `block` is
    // immutable after init.
    private struct Flags {
        var executing = false
        var finished = false
    }

    private let flags = Mutex(Flags())
    private let block: @Sendable (MLAsyncOperation) -> Void

    /// Creates an operation whose `block` starts the work and arranges for
    /// ``finishOperation()`` to be called when it is done.
    init(block: @escaping @Sendable (MLAsyncOperation) -> Void) {
        self.block = block
        super.init()
    }

    override var isAsynchronous: Bool { true }
    override var isConcurrent: Bool { true }
    override var isExecuting: Bool { flags.withLock { $0.executing } }
    override var isFinished: Bool { flags.withLock { $0.finished } }

    override func start() {
        if isCancelled {
            setFinished(true)
            return
        }
        setExecuting(true)
        block(self)
    }

    /// Called by the work when its callback arrives.
    func finishOperation() {
        setExecuting(false)
        setFinished(true)
    }

    private func setExecuting(_ value: Bool) {
        willChangeValue(forKey: "isExecuting")
        flags.withLock { $0.executing = value }
        didChangeValue(forKey: "isExecuting")
    }

    private func setFinished(_ value: Bool) {
        willChangeValue(forKey: "isFinished")
        flags.withLock { $0.finished = value }
        didChangeValue(forKey: "isFinished")
    }
}

/// The concurrent-operation article's `MyOperation`: a concurrent operation with its own state
/// enum and cancelled flag, overriding `isReady`, `isExecuting`,
/// `isFinished`, `isCancelled` and `cancel()`, whose action runs on one
/// shared thread of its own (the concurrent-operation article's `threadForMyOperation`, here
/// `MyOp.Thread`: thread names keep 15 bytes).
///
/// Two changes from the article, both fixes: `isReady` also asks
/// `super.isReady`, so that dependencies still count (the chapter's advice,
/// and the article's own closing remark); and a cancelled operation
/// announces `isExecuting` (which does change) instead of `isCancelled`
/// (which does not) when it moves to finished.
final class MyOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `storage` (state and cancelled flag) is guarded by
    // its Mutex; `label`, `log` and `action` are immutable.

    /// The concurrent-operation article's `MyOperationState`.
    enum State {
        case ready
        case executing
        case finished
    }

    private struct Storage {
        var state = State.ready
        var cancelled = false
    }

    /// The thread every `MyOperation` runs its action on.
    static let thread = SerialThread(name: "MyOp.Thread")

    private let storage = Mutex(Storage())
    private let label: String
    private let log: DemoLog
    private let action: @Sendable () -> Void

    /// The concurrent-operation article's `initWithAction:`.
    init(_ label: String, log: DemoLog, action: @escaping @Sendable () -> Void) {
        self.label = label
        self.log = log
        self.action = action
        super.init()
        name = label
    }

    override var isConcurrent: Bool { true }
    override var isReady: Bool { storage.withLock { $0.state == .ready } && super.isReady }
    override var isExecuting: Bool { storage.withLock { $0.state == .executing } }
    override var isFinished: Bool { storage.withLock { $0.state == .finished } }
    override var isCancelled: Bool { storage.withLock { $0.cancelled } }

    override func cancel() {
        willChangeValue(forKey: "isCancelled")
        storage.withLock { $0.cancelled = true }
        didChangeValue(forKey: "isCancelled")
    }

    override func start() {
        guard isReady else { return }
        willChangeValue(forKey: "isExecuting")
        willChangeValue(forKey: "isReady")
        storage.withLock { $0.state = .executing }
        didChangeValue(forKey: "isReady")
        didChangeValue(forKey: "isExecuting")
        Self.thread.perform { [self] in operationDidStart() }
    }

    /// Runs on ``thread``: the action, unless cancelled, then finished.
    private func operationDidStart() {
        if isCancelled {
            log.note("\(label) was cancelled: finishing without its action")
        } else {
            log.note("\(label) is running on thread \(ThreadInfo.label())")
            action()
        }
        willChangeValue(forKey: "isFinished")
        willChangeValue(forKey: "isExecuting")
        storage.withLock { $0.state = .finished }
        didChangeValue(forKey: "isExecuting")
        didChangeValue(forKey: "isFinished")
    }
}

/// The chapter's `MyOperation` (Listings 2-5, 2-6 and 2-7): `executing` and
/// `finished` flags of its own; `start()` detaches a new thread that runs
/// `main()`, which does the work and calls ``completeOperation()``.
///
/// One change from Listing 2-6: the thread is detached after `executing` is
/// set and announced, not between `willChangeValue` and the assignment;
/// otherwise a quick `main()` could complete the operation before `start()`
/// marks it executing, leaving it executing and finished at once.
final class ListingOperation: Operation, @unchecked Sendable {
    // @unchecked Sendable: `flags` is guarded by its Mutex; `label`, `log`
    // and `work` are immutable.
    private struct Flags {
        var executing = false
        var finished = false
    }

    private static let threadNumber = Atomic<Int>(0)

    private let flags = Mutex(Flags())
    private let label: String
    private let log: DemoLog
    private let work: @Sendable () -> Void

    /// Listing 2-5's `init`, with the work to do in `main()`.
    init(_ label: String, log: DemoLog, work: @escaping @Sendable () -> Void) {
        self.label = label
        self.log = log
        self.work = work
        super.init()
        name = label
    }

    // Listing 2-5.
    override var isConcurrent: Bool { true }
    override var isExecuting: Bool { flags.withLock { $0.executing } }
    override var isFinished: Bool { flags.withLock { $0.finished } }

    // Listing 2-6.
    override func start() {
        // Always check for cancellation before launching the task.
        if isCancelled {
            // Must move the operation to the finished state if it is cancelled.
            willChangeValue(forKey: "isFinished")
            flags.withLock { $0.finished = true }
            didChangeValue(forKey: "isFinished")
            return
        }
        // If the operation is not cancelled, begin executing the task.
        willChangeValue(forKey: "isExecuting")
        flags.withLock { $0.executing = true }
        didChangeValue(forKey: "isExecuting")
        let number = Self.threadNumber.add(1, ordering: .relaxed).newValue
        DemoThread.detach(name: "detached.\(number)") { [self] in main() }
    }

    // Listing 2-7.
    override func main() {
        log.note("\(label) main() on its own thread")
        work()
        completeOperation()
    }

    /// Listing 2-7's `completeOperation`: both flags change, both announced.
    func completeOperation() {
        log.note("\(label) completeOperation()")
        willChangeValue(forKey: "isFinished")
        willChangeValue(forKey: "isExecuting")
        flags.withLock {
            $0.executing = false
            $0.finished = true
        }
        didChangeValue(forKey: "isExecuting")
        didChangeValue(forKey: "isFinished")
    }
}
