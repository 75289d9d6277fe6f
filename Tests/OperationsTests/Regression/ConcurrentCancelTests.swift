// Two `cancel()` calls at the same moment on an observed operation (probe
// 30, scenarios Z10 and Z12): both passed the check, both announced
// `isCancelled`, and observers heard the change twice (`NO→YES` twice, or a
// `YES→YES`). One call announces now; the other waits for its change, and
// sets the flag itself when waiting could not end (probe 32: a first
// version waited up to a second, and could return uncancelled).

import Dispatch
import Synchronization
import Testing
@testable import Operations

@Suite("Concurrent cancel() calls announce isCancelled once")
struct ConcurrentCancelTests {
    @Test("a cancel() arriving while another announces isCancelled does not announce it again, and returns with isCancelled true")
    func secondCancelDuringAnnouncement() {
        let operation = BlockOperation {}
        let priors = Counter()
        let changes = Recorder<String>()
        let secondCalling = Gate()
        let secondReturned = Gate()
        let secondSawCancelled = Atomic<Bool>(false)
        let token = operation.observe(\.isCancelled, options: [.prior, .old, .new]) { operation, change in
            guard change.isPrior else {
                changes.record("\(change.oldValue.map(String.init) ?? "nil")→\(change.newValue.map(String.init) ?? "nil")")
                return
            }
            guard priors.increment() == 1 else { return }
            // The first announcement: another thread cancels now. Before the
            // fix, its announcement arrived here within the window.
            spawnThread {
                secondCalling.open()
                operation.cancel()
                secondSawCancelled.store(operation.isCancelled, ordering: .releasing)
                secondReturned.open()
            }
            #expect(secondCalling.wait())
            #expect(staysFalse(for: .milliseconds(200)) { priors.count > 1 }, "the second cancel() announced isCancelled too")
        }
        operation.cancel()
        #expect(secondReturned.wait())
        #expect(priors.count == 1)
        #expect(changes.events == ["false→true"])
        let sawCancelled = secondSawCancelled.load(ordering: .acquiring)
        #expect(sawCancelled, "the second cancel() returned before isCancelled was set")
        withExtendedLifetime(token) {}
    }

    @Test("an isCancelled observer that cancels again on its own thread neither waits nor announces again")
    func reentrantCancelFromObserver() {
        let operation = BlockOperation {}
        let priors = Counter()
        let dids = Counter()
        let sawCancelledInObserver = Atomic<Int>(0)
        let token = operation.observe(\.isCancelled, options: [.prior]) { operation, change in
            if change.isPrior {
                priors.increment()
                operation.cancel()
                if operation.isCancelled { sawCancelledInObserver.add(1, ordering: .acquiringAndReleasing) }
            } else {
                dids.increment()
                operation.cancel()
            }
        }
        let done = Gate()
        spawnThread {
            operation.cancel()
            done.open()
        }
        #expect(done.wait(), "a cancel() from the observer of its own announcement waited for itself")
        #expect(operation.isCancelled)
        #expect(sawCancelledInObserver.load(ordering: .acquiring) == 1, "the observer's cancel() returned with isCancelled false")
        #expect(priors.count == 1)
        #expect(dids.count == 1)
        withExtendedLifetime(token) {}
    }

    @Test("an isCancelled observer that waits for another thread's cancel() of the same operation is not stuck for good")
    func observerWaitingForTheOtherCancel() {
        let operation = BlockOperation {}
        let priors = Counter()
        let otherReturned = Gate()
        let token = operation.observe(\.isCancelled, options: [.prior]) { operation, change in
            guard change.isPrior, priors.increment() == 1 else { return }
            spawnThread {
                operation.cancel()
                otherReturned.open()
            }
            // Waits for the other call, which waits for this announcement:
            // the other call gives up waiting after a bounded time.
            #expect(otherReturned.wait())
        }
        operation.cancel()
        #expect(operation.isCancelled)
        #expect(priors.count == 1)
        withExtendedLifetime(token) {}
    }

    @Test("a cancel() made while holding a lock that the announcing call's observer needs returns, with isCancelled true")
    func cancelWhileHoldingTheObserversLock() {
        let lock = DispatchSemaphore(value: 1)
        let operation = BlockOperation {}
        let inObserver = Gate()
        let token = operation.observe(\.isCancelled, options: [.prior]) { _, change in
            guard change.isPrior else { return }
            inObserver.open()
            _ = lock.wait(timeout: patience.dispatchTimeout)
            lock.signal()
        }
        let holderDone = Gate()
        let holderSawCancelled = Atomic<Bool>(false)
        let holding = Gate()
        spawnThread {
            _ = lock.wait(timeout: patience.dispatchTimeout)
            holding.open()
            _ = inObserver.wait()
            operation.cancel()
            holderSawCancelled.store(operation.isCancelled, ordering: .releasing)
            lock.signal()
            holderDone.open()
        }
        #expect(holding.wait())
        let announcerDone = Gate()
        spawnThread {
            operation.cancel()
            announcerDone.open()
        }
        #expect(holderDone.wait())
        #expect(announcerDone.wait())
        let sawCancelled = holderSawCancelled.load(ordering: .acquiring)
        #expect(sawCancelled, "the call that could not wait returned with isCancelled false")
        withExtendedLifetime(token) {}
    }

    @Test("observers calling cancelAllOperations() on two threads: every operation is cancelled when each call returns")
    func cancelAllFromObserversOnTwoThreads() {
        let count = 20
        let queue = makeQueue("cancel-all-from-observers")
        queue.isSuspended = true
        var operations: [BlockOperation] = []
        var tokens: [KeyValueObservation] = []
        for _ in 0..<count {
            let operation = BlockOperation {}
            let fired = Counter()
            tokens.append(operation.observe(\.isCancelled, options: [.prior]) { _, change in
                if change.isPrior, fired.increment() == 1 { queue.cancelAllOperations() }
            })
            operations.append(operation)
        }
        queue.addOperations(operations, waitUntilFinished: false)
        let all = operations
        let uncancelled = Counter()
        let go = DispatchSemaphore(value: 0)
        let finished = DispatchSemaphore(value: 0)
        for thread in 0..<2 {
            spawnThread {
                _ = go.wait(timeout: patience.dispatchTimeout)
                all[thread * count / 2].cancel()
                queue.cancelAllOperations()
                for operation in all where !operation.isCancelled { uncancelled.increment() }
                finished.signal()
            }
        }
        go.signal()
        go.signal()
        #expect(finished.wait(timeout: patience.dispatchTimeout) == .success)
        #expect(finished.wait(timeout: patience.dispatchTimeout) == .success)
        #expect(uncancelled.count == 0, "cancelAllOperations() returned with \(uncancelled.count) operations not cancelled")
        queue.isSuspended = false
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        withExtendedLifetime(tokens) {}
    }

    @Test("an operation that its own isCancelled observer adds to a full .reject queue is refused without running its work")
    func refusedFromItsOwnCancelObserver() {
        let queue = makeQueue("full-reject", width: 1)
        queue.setPendingLimit(1, policy: .reject)
        let gate = Gate()
        queue.addOperation(BlockOperation { _ = gate.wait() })
        let ran = Counter()
        let operation = BlockOperation { ran.increment() }
        let fired = Counter()
        let token = operation.observe(\.isCancelled, options: [.prior]) { operation, change in
            if change.isPrior, fired.increment() == 1 { queue.addOperation(operation) }
        }
        operation.cancel()
        gate.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(operation.waitUntilFinished(timeout: patience))
        #expect(ran.count == 0, "the refused operation ran its work")
        withExtendedLifetime(token) {}
    }

    @Test("an observer of a cancellation in cancelAllOperations() can wait for an operation the same call cancelled earlier")
    func observerWaitsForAnEarlierCancelledOperation() {
        let queue = makeQueue("batch-news")
        let blocker = BlockOperation {}
        let first = BlockOperation {}
        let second = BlockOperation {}
        first.addDependency(blocker)
        second.addDependency(blocker)
        let firstFinished = Atomic<Int>(0)
        let token = second.observe(\.isCancelled, options: [.prior]) { _, change in
            // `first` was cancelled just before; its queue retires it only
            // once told, which the call used to do after the whole batch.
            if change.isPrior, first.waitUntilFinished(timeout: patience) {
                firstFinished.add(1, ordering: .acquiringAndReleasing)
            }
        }
        queue.addOperations([first, second], waitUntilFinished: false)
        queue.cancelAllOperations()
        #expect(firstFinished.load(ordering: .acquiring) == 1, "the observer's wait for the operation cancelled before timed out")
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        withExtendedLifetime((token, blocker)) {}
    }

    @Test("an isCancelled observer can wait for the cancelled operation to finish in its queue")
    func observerWaitsForTheCancelledOperation() {
        let queue = makeQueue("did-news")
        let blocker = BlockOperation {}
        let operation = BlockOperation {}
        operation.addDependency(blocker)
        let finishedInObserver = Atomic<Int>(0)
        let token = operation.observe(\.isCancelled, options: [.new]) { operation, change in
            if change.newValue == true, operation.waitUntilFinished(timeout: patience) {
                finishedInObserver.add(1, ordering: .acquiringAndReleasing)
            }
        }
        queue.addOperation(operation)
        operation.cancel()
        #expect(finishedInObserver.load(ordering: .acquiring) == 1, "the queue heard of the cancellation only after the observers")
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        withExtendedLifetime((token, blocker)) {}
    }

    @Test("two threads cancelling an observed operation at once: one isCancelled change per operation (2,000 rounds)")
    func racingCancels() {
        let duplicated = Counter()
        let notCancelled = Counter()
        for _ in 0..<2_000 {
            let operation = BlockOperation {}
            let dids = Counter()
            let token = operation.observe(\.isCancelled, options: [.old, .new]) { _, _ in dids.increment() }
            let go = DispatchSemaphore(value: 0)
            let finished = DispatchSemaphore(value: 0)
            for _ in 0..<2 {
                spawnThread {
                    _ = go.wait(timeout: patience.dispatchTimeout)
                    operation.cancel()
                    if !operation.isCancelled { notCancelled.increment() }
                    finished.signal()
                }
            }
            go.signal()
            go.signal()
            #expect(finished.wait(timeout: patience.dispatchTimeout) == .success)
            #expect(finished.wait(timeout: patience.dispatchTimeout) == .success)
            if dids.count != 1 { duplicated.increment() }
            withExtendedLifetime(token) {}
        }
        #expect(duplicated.count == 0, "\(duplicated.count) of 2,000 operations announced isCancelled more than once")
        #expect(notCancelled.count == 0, "\(notCancelled.count) cancel() calls returned before isCancelled was set")
    }
}

@Suite("The cancel announcement's state bits")
struct CancelAnnouncementStateTests {
    @Test("an observed cancel claims the announcement; a second call waits; completing sets the flag and reports the waiter")
    func observedCancelSteps() {
        var state = OperationState()
        state.isObserved = true
        #expect(state.beginCancel(baseFinishCounts: true) == .announce(includesReadiness: true))
        #expect(state.isCancelAnnouncing && !state.isCancelled)
        #expect(state.beginCancel(baseFinishCounts: true) == .awaitAnnouncement)
        #expect(state.checkInvariants() == nil)
        let (outcome, awaited) = state.completeCancel(baseFinishCounts: true)
        #expect(outcome == OperationState.CancelOutcome(changed: true, wasReady: true))
        #expect(awaited)
        #expect(state.isCancelled && !state.isCancelAnnouncing)
        #expect(state.beginCancel(baseFinishCounts: true) == .nothing)
        #expect(state.checkInvariants() == nil)
    }

    @Test("a call that cannot wait sets the flag even if the operation finished meanwhile, and nothing follows; the announcer then reports no change")
    func forcedAfterFinish() {
        var state = OperationState()
        state.isObserved = true
        _ = state.beginCancel(baseFinishCounts: true)
        #expect(state.beginCancel(baseFinishCounts: true) == .awaitAnnouncement)
        #expect(state.beginBaseStart(announcedRun: false) == .run)
        _ = state.finishBody()
        let forced = state.forceCancel(baseFinishCounts: true)
        #expect(!forced.changed)
        #expect(state.isCancelled, "the forced call returned with isCancelled false")
        let (outcome, awaited) = state.completeCancel(baseFinishCounts: true)
        #expect(!outcome.changed && awaited)
        #expect(state.checkInvariants() == nil)
    }

    @Test("an unobserved cancel sets the flag at once; a waiting operation becomes ready")
    func unobservedCancel() {
        var state = OperationState()
        _ = state.addUnfinishedDependency()
        #expect(state.beginCancel(baseFinishCounts: true) == .cancelled(OperationState.CancelOutcome(changed: true, wasReady: false)))
        #expect(state.isCancelled && state.isBaseReady)
    }

    @Test("an announced cancel whose operation finished meanwhile sets the flag, and nothing follows")
    func finishedDuringAnnouncement() {
        var state = OperationState()
        state.isObserved = true
        _ = state.beginCancel(baseFinishCounts: true)
        #expect(state.beginBaseStart(announcedRun: false) == .run)
        _ = state.finishBody()
        let (outcome, awaited) = state.completeCancel(baseFinishCounts: true)
        #expect(!outcome.changed && !awaited)
        #expect(state.isCancelled)
    }
}
