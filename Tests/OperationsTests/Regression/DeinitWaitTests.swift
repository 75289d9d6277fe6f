// An operation that only its queue holds is deallocated when the drain loop
// that ran it lets go of it. By then the loop has already taken the queue's
// next operation to start. Probe 55 (F5): a `deinit` that waited for that
// next operation, or for the queue, waited forever, with no report, because
// the operation it waited for could only start on the thread that waited.
// On Darwin the operation is deallocated on its worker once it has finished
// and the next one starts on another thread, so the wait returns. Now a
// library wait made there gives the taken operation back to its queue first
// (`DrainClaim`).

import Dispatch
import Testing
@testable import Operations

/// An operation whose `deinit` runs `onDeinit`.
private final class WaitsWhenReleased: Operation, @unchecked Sendable {
    // @unchecked Sendable: both fields are set once, in `init`.
    private let onDeinit: @Sendable () -> Void
    private let work: @Sendable () -> Void

    init(work: @escaping @Sendable () -> Void = {}, onDeinit: @escaping @Sendable () -> Void) {
        self.work = work
        self.onDeinit = onDeinit
    }

    override func main() { work() }

    deinit { onDeinit() }
}

@Suite("An operation's deinit may wait for the next operation (regression: probe 55)")
struct DeinitWaitTests {
    enum Shape: String, CaseIterable, CustomTestStringConvertible {
        /// Width 1; the deinit waits for the next operation.
        case serial
        /// The default width; the deinit waits for the whole queue.
        case concurrentWaitsForQueue
        /// Width 1; the released operation was cancelled before it started.
        case cancelled
        /// Width 1; the deinit is the one of an `async` body's result.
        case asyncResult
        /// Width 1; the deinit is the one of a synchronous body's result.
        case syncResult
        /// Width 1, on a concurrent `underlyingQueue`.
        case underlyingQueue

        var testDescription: String { rawValue }
    }

    /// Before the fix, every case's wait timed out (the queue could not
    /// start the operation that its drain loop had taken onto the waiting
    /// thread) and nothing was reported.
    @Test("a wait in the deinit of an operation only its queue holds returns", arguments: Shape.allCases)
    func deinitWaitsForNextOperation(shape: Shape) {
        let queue = makeQueue("deinit-wait-\(shape)", width: shape == .concurrentWaitsForQueue ? -1 : 1)
        if shape == .underlyingQueue {
            queue.underlyingQueue = DispatchQueue(label: "deinit-wait-underlying", attributes: .concurrent)
        }
        let ran = Recorder<String>()
        let waitReturned = Box<Bool?>(nil)
        do {
            // In a function of its own, so that only the queue holds what it adds.
            func add() {
                let next = BlockOperation { ran.record("next") }
                let last = BlockOperation { ran.record("last") }
                let wait: @Sendable () -> Void = { [weak next] in
                    let returned = shape == .concurrentWaitsForQueue
                        ? queue.waitUntilAllOperationsAreFinished(timeout: patience)
                        : next?.waitUntilFinished(timeout: patience) ?? true
                    waitReturned.value = returned
                }
                let first: Operation
                switch shape {
                case .serial, .concurrentWaitsForQueue, .underlyingQueue:
                    first = WaitsWhenReleased(work: { ran.record("first") }, onDeinit: wait)
                case .cancelled:
                    first = WaitsWhenReleased(onDeinit: wait)
                    first.cancel()
                case .asyncResult:
                    let result = DeinitAction(wait)
                    first = ResultOperation { () async -> DeinitAction in
                        ran.record("first")
                        return result
                    }
                case .syncResult:
                    let result = DeinitAction(wait)
                    first = ResultOperation { () -> DeinitAction in
                        ran.record("first")
                        return result
                    }
                }
                queue.isSuspended = true
                queue.addOperations([first, next, last], waitUntilFinished: false)
                queue.isSuspended = false
            }
            add()
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience), "the queue drains")
            #expect(waitUntil { waitReturned.value != nil }, "the deinit ran and its wait ended")
        }
        #expect(waitReturned.value == true, "the deinit's wait returned before its bound")
        let expected = shape == .cancelled ? ["next", "last"] : ["first", "next", "last"]
        if shape == .concurrentWaitsForQueue {
            #expect(ran.events.sorted() == expected.sorted())
        } else {
            #expect(ran.events == expected, "a serial queue keeps its order")
        }
        expectQueueInvariants(queue)
    }
}

/// An asynchronous operation that another thread finishes, holding it
/// weakly: the finishing thread lets go of it last. Its `deinit` runs
/// `onDeinit`.
private final class FinishedElsewhere: AsyncOperation, @unchecked Sendable {
    // @unchecked Sendable: `onDeinit` is set once, in `init`.
    private let onDeinit: @Sendable () -> Void

    init(onDeinit: @escaping @Sendable () -> Void) {
        self.onDeinit = onDeinit
        super.init()
    }

    override func execute() {
        spawnThread { [weak self] in self?.finish() }
    }

    deinit { onDeinit() }
}

@Suite("An operation's deinit may wait for its own queue (regression)")
struct DeinitQueueWaitTests {
    enum Shape: String, CaseIterable, CustomTestStringConvertible {
        /// The queue's only operation, with an instrument installed (its
        /// retirement is then counted until the drain loop settles it).
        case instrumentedOnly
        /// With an instrument installed, on a queue of the default width
        /// running another operation.
        case instrumentedWithAnother
        /// An asynchronous operation finished by another thread, which
        /// settles its retirement only after letting go of it.
        case finishedElsewhere
        /// The result of an `async` body.
        case asyncResult
        /// An operation with an `isFinished` observer, on a serial queue
        /// (probe 56: its retirement counted until the drain loop settled
        /// it, after the observers and the release).
        case observed

        var testDescription: String { rawValue }
    }

    /// The retirement of the operation being deallocated was still counted
    /// while its `deinit` ran, so a wait there for the queue waited for
    /// itself: it timed out in every case before the fix (found in review
    /// of the probe 55 fix). The wait now returns once the queue's other
    /// work is done, as a wait from the operation's own `isFinished`
    /// observer does.
    @Test("a wait for the queue from the deinit of an operation only the queue held returns", arguments: Shape.allCases)
    func deinitWaitsForItsQueue(shape: Shape) {
        let instrumented = shape == .instrumentedOnly || shape == .instrumentedWithAnother
        let instrument = instrumented ? OperationInstrumentation.addInstrument { _ in } : nil
        defer { instrument?.cancel() }
        let queue = makeQueue("deinit-queue-wait-\(shape)")
        let waitReturned = Box<Bool?>(nil)
        let tokens = Box<[KeyValueObservation]>([])
        func add() {
            let wait: @Sendable () -> Void = { waitReturned.value = queue.waitUntilAllOperationsAreFinished(timeout: patience) }
            let released: Operation
            switch shape {
            case .finishedElsewhere: released = FinishedElsewhere(onDeinit: wait)
            case .asyncResult:
                let result = DeinitAction(wait)
                released = ResultOperation { () async -> DeinitAction in result }
            case .instrumentedOnly, .instrumentedWithAnother, .observed: released = WaitsWhenReleased(onDeinit: wait)
            }
            if shape == .observed {
                queue.maxConcurrentOperationCount = 1
                tokens.value = [released.observe(\.isFinished, options: [.new]) { _, _ in }]
            }
            var added = [released]
            if shape == .instrumentedWithAnother { added.append(BlockOperation {}) }
            queue.addOperations(added, waitUntilFinished: false)
        }
        add()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience * 2), "the queue drains")
        #expect(waitUntil { waitReturned.value != nil }, "the deinit ran and its wait ended")
        #expect(waitReturned.value == true, "the deinit's wait returned before its bound")
        expectQueueInvariants(queue)
        withExtendedLifetime(tokens) {}
    }
}

@Suite("Giving back taken operations (scheduling state)")
struct GiveBackStateTests {
    /// A serial queue's state: the operation given back frees its slot,
    /// starts next again (before the later ones), and is flagged so that
    /// its `.started` event is not sent twice.
    @Test("an operation given back frees its slot and starts next, in add order")
    func givenBackStartsNextInOrder() {
        var state = QueueState()
        defer { state.releaseStorage() }
        state.width = 1
        let operations = (0..<4).map { _ in BlockOperation {} }
        for operation in operations {
            state.link(operation, barrier: false, customReadiness: false, customStart: false)
            state.apply(operation, ready: true, cancelled: false)
        }
        let first = state.popNext()?.takeUnretainedValue()
        #expect(first === operations[0])
        if let first, let owned = state.unlink(first, retirementPending: false) { owned.release() }
        let taken = state.popNext()?.takeUnretainedValue()
        #expect(taken === operations[1])
        #expect(state.popNext() == nil, "width 1: the slot is taken")
        if let taken { state.giveBack(taken) }
        #expect(state.checkInvariants() == nil)
        #expect(state.usedSlots == 0)
        #expect(operations[1].queueLink.has(QueueLink.Flags.givenBack))
        #expect(!operations[2].queueLink.has(QueueLink.Flags.givenBack))
        var order: [Operation] = []
        while let popped = state.popNext() {
            let next = popped.takeUnretainedValue()
            order.append(next)
            if let owned = state.unlink(next, retirementPending: false) { owned.release() }
        }
        #expect(order.map { operation in operations.firstIndex { $0 === operation } ?? -1 } == [1, 2, 3])
        #expect(state.checkInvariants() == nil)
    }

    /// Cancelled operations taken as one batch go back to the cancelled
    /// lane, in order, and hold no slot.
    @Test("cancelled operations given back return to the cancelled lane in order")
    func givenBackCancelledBatch() {
        var state = QueueState()
        defer { state.releaseStorage() }
        let operations = (0..<3).map { _ in BlockOperation {} }
        for operation in operations {
            operation.cancel()
            state.link(operation, barrier: false, customReadiness: false, customStart: false)
            state.apply(operation, ready: true, cancelled: true)
        }
        var batch: [Operation] = []
        guard let head = state.popNext()?.takeUnretainedValue() else {
            Issue.record("nothing to pop")
            return
        }
        state.popCancelled(upTo: 63, into: &batch)
        #expect(batch.count == 2)
        state.giveBack(head)
        for operation in batch { state.giveBack(operation) }
        #expect(state.checkInvariants() == nil)
        #expect(state.count(ofLane: QueueState.cancelledLane) == 3)
        var order: [Operation] = []
        while let popped = state.popNext() {
            let next = popped.takeUnretainedValue()
            order.append(next)
            if let owned = state.unlink(next, retirementPending: false) { owned.release() }
        }
        #expect(order.map { operation in operations.firstIndex { $0 === operation } ?? -1 } == [0, 1, 2])
    }
}
