// Misuse under a pending limit (regression: probe 7, finding 1). A refusal
// "for lack of room" cancels and finishes the refused operations; it ran
// before the add's own checks, so it cancelled another queue's operation
// (or a running or finished one) and reported the wrong rule.

import Dispatch
import Testing
@testable import Operations

/// A queue held full: suspended, with a limit of one and one operation in.
private func fullQueue(_ name: String, policy: PendingLimitPolicy) -> OperationQueue {
    let queue = makeQueue(name)
    queue.isSuspended = true
    queue.setPendingLimit(1, policy: policy)
    queue.addOperation(BlockOperation {})
    return queue
}

/// An operation waiting in another, suspended queue.
private func operationOfAnotherQueue(_ name: String) -> (BlockOperation, OperationQueue, Counter) {
    let owner = makeQueue(name)
    owner.isSuspended = true
    let ran = Counter()
    let operation = BlockOperation { ran.increment() }
    operation.name = "owned"
    owner.addOperation(operation)
    return (operation, owner, ran)
}

/// Resumes `queues` and waits for them.
private func drain(_ queues: OperationQueue..., sourceLocation: SourceLocation = #_sourceLocation) {
    for queue in queues { queue.isSuspended = false }
    for queue in queues {
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience), sourceLocation: sourceLocation)
    }
}

@Suite("Misuse under a pending limit is reported as an add reports it, and touches nothing")
struct PendingLimitMisuseTests {
    @Test("reject policy: another queue's operation is reported (alreadyInQueue), not cancelled, and still runs")
    func rejectForeignOperation() {
        let queue = fullQueue("full-reject", policy: .reject)
        let (operation, owner, ran) = operationOfAnotherQueue("owner-reject")
        let reported = misuses { queue.addOperation(operation) }
        #expect(reported.map(\.code) == [.alreadyInQueue], "\(describeMisuses(reported))")
        #expect(!operation.isCancelled)
        drain(queue, owner)
        #expect(ran.count == 1)
    }

    @Test("reject policy: a finished operation is addedAfterStart; a duplicate in the batch is duplicateInBatch")
    func rejectFinishedAndDuplicate() {
        let queue = fullQueue("full-reject-2", policy: .reject)
        let finished = BlockOperation {}
        finished.start()
        let twice = BlockOperation {}
        let reported = misuses {
            queue.addOperation(finished)
            queue.addOperations([twice, twice], waitUntilFinished: false)
        }
        #expect(reported.map(\.code) == [.addedAfterStart, .duplicateInBatch], "\(describeMisuses(reported))")
        #expect(!finished.isCancelled)
        #expect(twice.isCancelled && twice.isFinished, "its first occurrence was refused for lack of room")
        drain(queue)
    }

    @Test("a blocking add whose duplicate does not fit reports it at once and adds the rest without waiting; a batch with a finished operation adds nothing (probes 8, 46)")
    func blockingAddCountsOnlyValidOperations() {
        let queue = makeQueue("room-for-one")
        let gate = Gate()
        queue.setPendingLimit(2)
        queue.addOperation { _ = gate.wait() }
        let twice = BlockOperation {}
        let finished = BlockOperation {}
        finished.start()
        let other = BlockOperation {}
        let reported = misuses {
            // Each batch holds one valid operation and room is left for one:
            // neither waits for the gate.
            queue.addOperations([twice, twice], waitUntilFinished: false)
            #expect(queue.operationCount == 2)
            gate.open()
            #expect(twice.waitUntilFinished(timeout: patience))
            queue.addOperations([other, finished], waitUntilFinished: false)
        }
        #expect(reported.map(\.code) == [.duplicateInBatch, .addedAfterStart], "\(describeMisuses(reported))")
        #expect(!twice.isCancelled && !other.isCancelled)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        // Refused as a whole, as Foundation raises before adding any: untouched.
        #expect(!other.isFinished && !other.isCancelled)
    }

    @Test("reject policy: a batch that holds another queue's operation is refused as a whole, for the misuse and not for lack of room (probes 8, 46)")
    func rejectAddsValidOperationThatFits() {
        let queue = makeQueue("reject-room-for-one")
        queue.isSuspended = true
        queue.setPendingLimit(2, policy: .reject)
        queue.addOperation(BlockOperation {})
        let (foreign, owner, ran) = operationOfAnotherQueue("owner-reject-fit")
        let valid = BlockOperation {}
        let reported = misuses { queue.addOperations([valid, foreign], waitUntilFinished: false) }
        #expect(reported.map(\.code) == [.alreadyInQueue], "\(describeMisuses(reported))")
        #expect(!valid.isCancelled, "it was not refused for lack of room")
        #expect(queue.operationCount == 1)
        drain(queue, owner)
        #expect(ran.count == 1)
        #expect(!valid.isFinished && !valid.isCancelled)
    }

    @Test("tryAddOperation on a full queue reports another queue's operation and leaves it alone")
    func tryAddForeignOperation() {
        let queue = fullQueue("full-try", policy: .block)
        let (operation, owner, ran) = operationOfAnotherQueue("owner-try")
        let (added, reported) = recordingMisuse { queue.tryAddOperation(operation) }
        #expect(!added)
        #expect(reported.map(\.code) == [.alreadyInQueue], "\(describeMisuses(reported))")
        #expect(!operation.isCancelled)
        drain(queue, owner)
        #expect(ran.count == 1)
    }

    @Test("a cancelled async add waiting for room does not cancel another queue's operation")
    func cancelledAsyncAddOfForeignOperation() async throws {
        let queue = fullQueue("full-async", policy: .block)
        let (operation, owner, ran) = operationOfAnotherQueue("owner-async")
        let reported = try await recordingMisuseAsync {
            let producer = Task { await queue.addOperationWhenRoom(operation) }
            producer.cancel()
            try await withTimeLimit { await producer.value }
        }
        #expect(reported.map(\.code) == [.alreadyInQueue], "\(describeMisuses(reported))")
        #expect(!operation.isCancelled)
        drain(queue, owner)
        #expect(ran.count == 1)
    }
}

/// Collects the misuses reported while the async `body` runs.
private func recordingMisuseAsync(_ body: () async throws -> Void) async rethrows -> [OperationMisuse] {
    let log = Recorder<OperationMisuse>()
    try await OperationMisuse.withHandler({ log.record($0) }) {
        try await body()
    }
    return log.events
}

@Suite("Adds waiting for room (regression: probe 7, finding 3)")
struct RoomWaitersTests {
    /// A batch of three waits for an empty queue; behind it, a single add
    /// fits as soon as two fillers finish, and the queue's last operation
    /// depends on it. Woken strictly in arrival order, the single add waited
    /// behind the batch, which waited for the queue to empty: both forever.
    @Test("an add that fits goes ahead of an earlier batch that does not")
    func laterAddThatFitsIsNotHeldBack() {
        let queue = makeQueue("room-waiters")
        queue.setPendingLimit(3)
        let release = Gate()
        let needed = BlockOperation {}
        let last = BlockOperation {}
        last.addDependency(needed)
        queue.addOperations([last, BlockOperation { _ = release.wait() }, BlockOperation { _ = release.wait() }], waitUntilFinished: false)
        let batchAdded = Gate()
        let batchWaiting = Gate()
        spawnThread {
            batchWaiting.open()
            queue.addOperations([BlockOperation {}, BlockOperation {}, BlockOperation {}], waitUntilFinished: false)
            batchAdded.open()
        }
        // Usually the batch registers as a waiter before the single add
        // below does (the order the defect needed); either order must work.
        #expect(batchWaiting.wait())
        let singleAdded = Gate()
        spawnThread {
            queue.addOperation(needed)
            singleAdded.open()
        }
        release.open()
        #expect(singleAdded.wait(), "the add that fits waited behind the batch")
        #expect(batchAdded.wait(), "the batch never got in")
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(last.isFinished)
    }
}
