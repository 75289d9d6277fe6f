// Two `cancel()` calls at the same moment on an observed operation (probe
// 30, scenarios Z10 and Z12): both passed the check, both announced
// `isCancelled`, and observers heard the change twice (`NO→YES` twice, or a
// `YES→YES`). One call announces now; the other waits for its change.

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
        let token = operation.observe(\.isCancelled, options: [.prior]) { operation, change in
            if change.isPrior {
                priors.increment()
                operation.cancel()
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
