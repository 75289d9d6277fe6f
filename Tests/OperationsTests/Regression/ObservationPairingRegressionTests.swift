// Regressions from probe 16: a will-change and its did-change reach an
// observer as a pair, on one thread, with the old value read before the
// change, and once per change.

import Dispatch
import Synchronization
import Testing
@testable import Operations
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

@Suite("observation: will/did pairs (regressions: probe 16)")
struct ObservationPairingRegressionTests {
    /// One `isFinished` notification: which operation, prior or not, the
    /// thread it came on, and its old and new values.
    private struct Note: Sendable {
        let index: Int
        let isPrior: Bool
        let thread: UInt
        let old: Bool?
        let new: Bool?
    }

    private static func threadToken() -> UInt {
        #if canImport(Glibc)
        UInt(pthread_self())
        #else
        UInt(bitPattern: pthread_self())
        #endif
    }

    @Test("cancelled operations retired together: each one's will and did isFinished come on one thread, and the did has its old value")
    func cancelledBatchPairsOnOneThread() {
        for _ in 0..<20 {
            let queue = OperationQueue()
            queue.isSuspended = true
            let notes = LockedValue<[Note]>([])
            var operations: [BlockOperation] = []
            var tokens: [KeyValueObservation] = []
            for index in 0..<6 {
                let operation = BlockOperation {}
                tokens.append(operation.observe(\.isFinished, options: [.prior, .old, .new]) { _, change in
                    let note = Note(index: index, isPrior: change.isPrior, thread: Self.threadToken(), old: change.oldValue, new: change.newValue)
                    notes.withLock { $0.append(note) }
                })
                // A completion block gives every operation a tail of user
                // code, which is what sent all but one of them to other threads.
                operation.completionBlock = {}
                operations.append(operation)
            }
            queue.addOperations(operations, waitUntilFinished: false)
            for operation in operations { operation.cancel() }
            queue.isSuspended = false
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            let all = notes.withLock { $0 }
            for index in 0..<6 {
                let mine = all.filter { $0.index == index }
                guard mine.count == 2 else {
                    Issue.record("operation \(index): \(mine.count) isFinished notifications, expected 2")
                    continue
                }
                #expect(mine[0].isPrior && !mine[1].isPrior)
                #expect(mine[0].thread == mine[1].thread, "operation \(index): will and did on different threads")
                #expect(mine[0].old == false)
                #expect(mine[1].old == false && mine[1].new == true, "operation \(index): did reported \(String(describing: mine[1].old)) → \(String(describing: mine[1].new))")
            }
            withExtendedLifetime(tokens) {}
        }
    }

    @Test("finish() called again while the first call announces the change: one isFinished and one isExecuting change")
    func asyncFinishTwiceAnnouncesOnce() {
        let operation = AsyncOperation { operation in operation.finish() }
        let finished = LockedValue<[String]>([])
        let executing = LockedValue<Int>(0)
        let reentered = LockedValue<Bool>(false)
        let finishToken = operation.observe(\.isFinished, options: [.prior, .old, .new]) { operation, change in
            finished.withLock { $0.append("\(change.isPrior ? "will" : "did") \(String(describing: change.oldValue)) \(String(describing: change.newValue))") }
            // A second finish() while the first is announcing; it must do
            // nothing. (Two threads calling finish() at once met the same
            // window, less reliably.)
            // Once only: before the fix, each call announced again, and
            // calling finish() from every announcement recursed without end.
            guard change.isPrior, !reentered.withLock({ $0 }) else { return }
            reentered.withLock { $0 = true }
            (operation as AsyncOperation).finish()
        }
        let executingToken = operation.observe(\.isExecuting, options: [.new]) { _, change in
            if change.newValue == false { executing.withLock { $0 += 1 } }
        }
        let queue = OperationQueue()
        queue.addOperation(operation)
        #expect(operation.waitUntilFinished(timeout: patience))
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        #expect(finished.withLock { $0 } == ["will Optional(false) nil", "did Optional(false) Optional(true)"])
        #expect(executing.withLock { $0 } == 1)
        withExtendedLifetime((finishToken, executingToken)) {}
    }

    @Test("a cancel that lands after the start announced isExecuting: the body runs, and every change announced happens (false → true)")
    func cancelDuringStartKeepsAnnouncedRun() {
        for _ in 0..<5 {
            let queue = OperationQueue()
            let ran = LockedValue<Bool>(false)
            let operation = BlockOperation { ran.withLock { $0 = true } }
            let finished = LockedValue<[String]>([])
            let executing = LockedValue<[String]>([])
            let finishedToken = operation.observe(\.isFinished, options: [.prior, .old, .new]) { _, change in
                finished.withLock { $0.append("\(change.isPrior ? "will" : "did") \(String(describing: change.oldValue)) \(String(describing: change.newValue))") }
            }
            // The cancel lands after the start announced "will isExecuting"
            // and before it changed the state.
            let executingToken = operation.observe(\.isExecuting, options: [.prior, .old, .new]) { operation, change in
                executing.withLock { $0.append("\(change.isPrior ? "will" : "did") \(String(describing: change.oldValue)) \(String(describing: change.newValue))") }
                if change.isPrior, change.oldValue == false { operation.cancel() }
            }
            queue.addOperation(operation)
            #expect(operation.waitUntilFinished(timeout: patience))
            #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
            #expect(finished.withLock { $0 } == ["will Optional(false) nil", "did Optional(false) Optional(true)"])
            #expect(executing.withLock { $0 } == [
                "will Optional(false) nil", "did Optional(false) Optional(true)",
                "will Optional(true) nil", "did Optional(true) Optional(false)",
            ])
            #expect(ran.withLock { $0 })
            #expect(operation.isCancelled && operation.isFinished && !operation.isExecuting)
            withExtendedLifetime((finishedToken, executingToken)) {}
        }
    }

    @Test("a cancel that announced isCancelled and found the operation finished still cancels it: false → true")
    func cancelRacingFinishKeepsAnnouncedChange() {
        let operation = BlockOperation {}
        let notes = LockedValue<[String]>([])
        let token = operation.observe(\.isCancelled, options: [.prior, .old, .new]) { operation, change in
            notes.withLock { $0.append("\(change.isPrior ? "will" : "did") \(String(describing: change.oldValue)) \(String(describing: change.newValue))") }
            // The operation runs and finishes between the cancel's
            // announcement and its change (a finish on another thread met
            // the same window, less reliably).
            if change.isPrior { operation.start() }
        }
        operation.cancel()
        #expect(notes.withLock { $0 } == ["will Optional(false) nil", "did Optional(false) Optional(true)"])
        #expect(operation.isFinished && operation.isCancelled)
        withExtendedLifetime(token) {}
    }
}

@Suite("An observer that repeats the dependency edit it is being told of (regression: probe 53)")
struct RepeatedEdgeEditTests {
    /// Before: the prior notification came while the edge was still there,
    /// so the observer's removal announced again, and so on until the stack
    /// overflowed (a crash, every time).
    @Test("a .prior isReady observer that removes the dependency being removed: one removal, one will/did pair")
    func priorObserverRemovesSameDependency() {
        let never = BlockOperation {}
        let operation = BlockOperation {}
        operation.addDependency(never)
        let log = Recorder<String>()
        let token = operation.observe(\.isReady, options: [.prior, .new]) { observed, change in
            log.record(change.isPrior ? "will" : "did \(change.newValue!)")
            for dependency in observed.dependencies { observed.removeDependency(dependency) }
        }
        operation.removeDependency(never)
        #expect(operation.dependencies.isEmpty && operation.isReady)
        #expect(log.events == ["will", "did true"])
        token.invalidate()
    }

    @Test("a .prior dependencies observer that adds the dependency being added: one edge, one will/did pair")
    func priorObserverAddsSameDependency() {
        let dependency = BlockOperation {}
        let operation = BlockOperation {}
        let log = Recorder<String>()
        let token = operation.observe(\.dependencies, options: [.prior]) { observed, change in
            log.record(change.isPrior ? "will" : "did")
            if change.isPrior { observed.addDependency(dependency) }
        }
        operation.addDependency(dependency)
        #expect(operation.dependencies.count == 1 && !operation.isReady)
        #expect(log.events == ["will", "did"])
        token.invalidate()
    }
}
