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

/// An object whose `deinit` runs `onDeinit`: an operation's result.
private final class ReleasedResult: Sendable {
    let onDeinit: @Sendable () -> Void
    init(_ onDeinit: @escaping @Sendable () -> Void) { self.onDeinit = onDeinit }
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
                    let result = ReleasedResult(wait)
                    first = ResultOperation { () async -> ReleasedResult in
                        ran.record("first")
                        return result
                    }
                case .syncResult:
                    let result = ReleasedResult(wait)
                    first = ResultOperation { () -> ReleasedResult in
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

    /// The operation given back is started once, and the queue's events
    /// say so once.
    @Test("an operation given back to its queue is started, and announced started, once")
    func givenBackOperationStartsOnce() {
        let queue = makeQueue("deinit-wait-events", width: 1)
        let starts = Counter()
        let started = Recorder<String>()
        let collected = Gate()
        let events = queue.events
        let consumer = Task {
            for await event in events {
                if case .started(let operation) = event { started.record(operation.name ?? "?") }
                if case .drained = event { break }
            }
            collected.open()
        }
        func add() {
            let next = BlockOperation { _ = starts.increment() }
            next.name = "next"
            let first = WaitsWhenReleased { [weak next] in _ = next?.waitUntilFinished(timeout: patience) }
            first.name = "first"
            queue.addOperations([first, next], waitUntilFinished: false)
        }
        add()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        // The consumer needs a thread of Swift's cooperative pool, which the
        // suite's blocking tests can hold for seconds: a longer bound.
        #expect(collected.wait(timeout: .seconds(60)), "the queue's events end with `drained`")
        consumer.cancel()
        #expect(started.events == ["first", "next"])
        #expect(starts.count == 1)
    }
}
