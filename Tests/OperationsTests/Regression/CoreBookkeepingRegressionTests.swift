// Regression tests for issue 9, defects 14–17: quadratic release, waits that
// accumulate, refused calls that change state, and the smaller bookkeeping
// defects that the public API can observe.

import Dispatch
import Testing
@testable import Operations
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

// MARK: - Defect 14: releasing a fan-out in reverse order

/// 100,000 leaves depend on one root that never runs; they are released
/// last first. Linear work takes well under a second even in a debug build
/// (in order: 0.1 s for 25,000 leaves); the quadratic walk of the old
/// dependents list takes 60 s for 25,000 leaves and 232 s for 50,000 in a
/// debug build. The bound is generous (20 s, for sanitizer builds) so that
/// only a quadratic implementation misses it.
func scenarioReverseReleaseOfFanOut() {
    let leafCount = 100_000
    let root = BlockOperation {}
    let rootReference = WeakReference(root)
    var leaves: [BlockOperation] = []
    leaves.reserveCapacity(leafCount)
    for _ in 0..<leafCount {
        let leaf = BlockOperation {}
        leaf.addDependency(root)
        leaves.append(leaf)
    }
    let box = Box<[BlockOperation]>(leaves)
    leaves = []
    let started = nowNanoseconds()
    let finished = completesInTime(timeout: .seconds(20)) {
        var remaining = box.value
        box.value = []
        while !remaining.isEmpty { remaining.removeLast() }
    }
    let seconds = Double(nowNanoseconds() - started) / 1e9
    childLog("defect 14: releasing \(leafCount) leaves in reverse order took \(seconds) s (bounded at 20 s)")
    #expect(finished, "releasing \(leafCount) leaves in reverse order took more than 20 s: quadratic")
    #expect(rootReference.object != nil)
    withExtendedLifetime(root) {}
}

@Suite("Issue 9: releasing a fan-out (defect 14)")
struct FanOutReleaseRegressionTests {
    @Test("defect 14: 100,000 leaves of one dependency released in reverse order within 20 s (linear, not quadratic)")
    func reverseRelease() async {
        await #expect(processExitsWith: .success) { scenarioReverseReleaseOfFanOut() }
    }
}

// MARK: - Defect 15: timed-out waits accumulate

/// The growth of the resident set over `rounds` calls of `body`, after a
/// warm-up of 2,000 calls (allocator arenas, lazily created state).
private func residentGrowth(rounds: Int, _ body: () -> Void) -> Int {
    for _ in 0..<2_000 { body() }
    let before = residentBytes()
    for _ in 0..<rounds { body() }
    return residentBytes() - before
}

/// The bound on growth for 100,000 timed-out waits: 4 MB, a quarter of what
/// the old code accumulates (about 17 MB), 40 bytes a wait.
private let timedOutWaitGrowthBound = 4 << 20

func scenarioTimedOutQueueWaits() {
    let queue = OperationQueue()
    let release = Gate()
    queue.addOperation { release.wait() }
    let growth = residentGrowth(rounds: 100_000) {
        _ = queue.waitUntilAllOperationsAreFinished(timeout: .zero)
    }
    childLog("defect 15: 100,000 timed-out queue waits grew the resident set by \(growth) bytes")
    #expect(growth < timedOutWaitGrowthBound, "100,000 timed-out queue waits grew memory by \(growth) bytes: each left its waiter behind")
    release.open()
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
}

func scenarioTimedOutOperationWaits() {
    let queue = OperationQueue()
    let release = Gate()
    let op = BlockOperation { release.wait() }
    queue.addOperation(op)
    let growth = residentGrowth(rounds: 100_000) {
        _ = op.waitUntilFinished(timeout: .zero)
    }
    childLog("defect 15: 100,000 timed-out operation waits grew the resident set by \(growth) bytes")
    #expect(growth < timedOutWaitGrowthBound, "100,000 timed-out operation waits grew memory by \(growth) bytes: each left its waiter behind")
    release.open()
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
}

/// `await queue.drained()` in tasks that are cancelled while they wait.
func scenarioCancelledDrainedAwaits() {
    let queue = OperationQueue()
    let release = Gate()
    queue.addOperation { release.wait() }
    let rounds = 40_000
    let batch = 500
    func cancelledAwaits(_ count: Int) {
        let done = Latch(count: count)
        for _ in 0..<count {
            let task = Task.detached {
                await queue.drained()
                done.countDown()
            }
            task.cancel()
        }
        #expect(done.wait(), "cancelled drained() awaits did not return")
    }
    // Warm-up: the cooperative pool's threads and their allocator arenas.
    for _ in 0..<4 { cancelledAwaits(batch) }
    let before = residentBytes()
    for _ in 0..<(rounds / batch) { cancelledAwaits(batch) }
    let growth = residentBytes() - before
    childLog("defect 15: \(rounds) cancelled drained() awaits grew the resident set by \(growth) bytes")
    // The old code grows by about 155 bytes an await (6 MB here); with
    // nothing left behind the growth measured 0.35–0.5 MB (allocator noise).
    #expect(growth < 2 << 20, "\(rounds) cancelled drained() awaits grew memory by \(growth) bytes: each left its waiter behind")
    release.open()
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
}

@Suite("Issue 9: timed-out waits do not accumulate (defect 15)")
struct TimedOutWaitRegressionTests {
    @Test("defect 15: 100,000 timed-out waitUntilAllOperationsAreFinished(timeout: .zero) leave nothing behind", .disabled(if: runningUnderSanitizer, "a sanitizer's allocator quarantines freed memory"))
    func timedOutQueueWaits() async {
        await #expect(processExitsWith: .success) { scenarioTimedOutQueueWaits() }
    }

    @Test("defect 15: 100,000 timed-out waitUntilFinished(timeout: .zero) leave nothing behind", .disabled(if: runningUnderSanitizer, "a sanitizer's allocator quarantines freed memory"))
    func timedOutOperationWaits() async {
        await #expect(processExitsWith: .success) { scenarioTimedOutOperationWaits() }
    }

    @Test("defect 15: 40,000 cancelled await queue.drained() leave nothing behind", .disabled(if: runningUnderSanitizer, "a sanitizer's allocator quarantines freed memory"))
    func cancelledDrainedAwaits() async {
        await #expect(processExitsWith: .success) { scenarioCancelledDrainedAwaits() }
    }
}

// MARK: - Defect 16: refused calls leave everything unchanged

@Suite("Issue 9: refused adds change nothing (defect 16)")
struct RefusedAddRegressionTests {
    @Test("defect 16: a tryAddOperation refused for lack of room (behind a barrier) leaves the operation startable by hand")
    func refusedTryAddLeavesOperationUnchanged() {
        let queue = makeQueue("refused-try-add")
        let release = Gate()
        queue.addOperation { release.wait() }
        queue.addBarrierBlock {}
        queue.setPendingLimit(1)
        let ran = Counter()
        let op = BlockOperation { ran.increment() }
        op.name = "refused"
        #expect(!queue.tryAddOperation(op))
        #expect(op.dependencies.isEmpty)
        #expect(op.isReady, "the refused operation is no longer ready: the refusal left a hidden dependency behind")
        let reported = misuses { op.start() }
        #expect(reported.isEmpty, "\(describeMisuses(reported))")
        #expect(ran.count == 1 && op.isFinished)
        release.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    }

    @Test("defect 16: a barrier rejected under .reject does not keep earlier operations alive or gate later ones")
    func rejectedBarrierIsForgotten() {
        let tracker = LifetimeTracker()
        let queue = makeQueue("rejected-barrier")
        let release = Gate()
        do {
            let earlier = BlockOperation { release.wait() }
            tracker.track(earlier, "earlier operation")
            queue.addOperation(earlier)
        }
        queue.setPendingLimit(1, policy: .reject)
        queue.addBarrierBlock {}
        release.open()
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        let later = BlockOperation {}
        tracker.track(later, "later operation")
        queue.addOperation(later)
        #expect(later.waitUntilFinished(timeout: patience))
        #expect(later.dependencies.isEmpty)
        #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
        // Only `later` is still referenced here.
        #expect(tracker.waitForRelease(timeout: .seconds(2)) == ["later operation"],
                "still alive after the queue drained: \(tracker.alive) (the rejected barrier kept them)")
        withExtendedLifetime(later) {}
    }
}

// MARK: - Defect 17

/// A cycle closed in a dense graph (beyond what `addDependency` searches at
/// once) on queue Q1, while another queue Q2 stalls for an unrelated reason
/// first. The queue holding the cycle must still name it.
func scenarioCycleNamedAfterAnotherQueueStalls() {
    let misuses = installChildMisuseRecorder()
    let width = 300
    let a = BlockOperation {}
    a.name = "dense-a"
    let b = BlockOperation {}
    b.name = "dense-b"
    let first = (0..<width).map { index -> BlockOperation in
        let op = BlockOperation {}
        op.name = "first-\(index)"
        op.addDependency(a)
        return op
    }
    let second = (0..<width).map { index -> BlockOperation in
        let op = BlockOperation {}
        op.name = "second-\(index)"
        op.addDependency(first[index])
        b.addDependency(op)
        return op
    }
    // Closes a → b → second[i] → first[i] → a.
    a.addDependency(b)
    // Q2 stalls first: its operation waits for one nobody starts.
    let never = BlockOperation {}
    let q2 = OperationQueue()
    q2.name = "unrelated-stall"
    let stalled = BlockOperation {}
    stalled.addDependency(never)
    q2.addOperation(stalled)
    let q1 = OperationQueue()
    q1.name = "dense-graph"
    q1.addOperations([a, b] + first + second, waitUntilFinished: false)
    #expect(!q1.waitUntilAllOperationsAreFinished(timeout: .milliseconds(200)), "the cycle ran (or was broken) although nothing cancelled it: \(describeMisuses(misuses.events))")
    let report = q1.diagnostics()
    #expect(report.contains("cycle"), "the queue's diagnostics do not name the cycle:\n\(report.description.prefix(2_000))")
    #expect(report.contains("\"dense-a\"") && report.contains("\"dense-b\""))
    a.cancel()
    #expect(q1.waitUntilAllOperationsAreFinished(timeout: patience), "cancelling a member did not break the cycle")
    never.start()
    #expect(q2.waitUntilAllOperationsAreFinished(timeout: patience))
}

/// An `isCancelled` announcement by a subclass (its own flag, no
/// `super.cancel()`) cancels the task of a `ResultOperation`'s async body.
final class AnnouncingResultOperation: ResultOperation<Bool, any Error>, @unchecked Sendable {
    // @unchecked Sendable: `cancelledFlag` is a locked box.
    private let cancelledFlag = Box(false)

    init(body: @escaping @Sendable () async -> Bool) {
        super.init(work: .async(body))
    }

    override var isCancelled: Bool { cancelledFlag.value || super.isCancelled }

    /// Cancels the way some subclasses do: announce, without super.cancel().
    func announceCancellation() {
        willChangeValue(forKey: "isCancelled")
        cancelledFlag.value = true
        didChangeValue(forKey: "isCancelled")
    }
}

@Suite("Issue 9: bookkeeping (defect 17)")
struct BookkeepingRegressionTests {
    @Test("defect 17: a queue holding a cycle names it in diagnostics even after another queue's stall was searched")
    func cycleNamedAfterAnotherStall() async {
        await #expect(processExitsWith: .success) { scenarioCycleNamedAfterAnotherQueueStalls() }
    }

    @Test("defect 17: cancel() balances every will-change with a did-change for the same key, even if a .prior observer starts the operation")
    func cancelKeysBalanced() {
        let op = BlockOperation {}
        let priors = Recorder<String>()
        let dids = Recorder<String>()
        var tokens: [AnyObject] = []
        for key in ["isCancelled", "isReady", "isExecuting", "isFinished"] {
            tokens.append(op.observe(key: key, options: [.prior]) { op, change in
                if change.isPrior {
                    priors.record(key)
                    // The first prior of the cancel: the operation starts
                    // (and finishes) before the cancel takes effect.
                    if key == "isCancelled", !op.isExecuting, !op.isFinished { op.start() }
                } else {
                    dids.record(key)
                }
            })
        }
        op.cancel()
        #expect(op.isFinished)
        for key in ["isCancelled", "isReady", "isExecuting", "isFinished"] {
            let willCount = priors.events.filter { $0 == key }.count
            let didCount = dids.events.filter { $0 == key }.count
            #expect(willCount == didCount, "\(key): \(willCount) will-change but \(didCount) did-change (priors \(priors.events), dids \(dids.events))")
        }
        withExtendedLifetime(tokens) {}
    }

    @Test("defect 17: an isCancelled announcement (without super.cancel()) cancels a ResultOperation's async body")
    func isCancelledAnnouncementRunsCancellationHandlers() async throws {
        let started = AsyncGate()
        let resume = OneShotResume()
        let op = AnnouncingResultOperation { () async -> Bool in
            started.open()
            await withTaskCancellationHandler {
                await resume.suspend()
            } onCancel: {
                resume.resume()
            }
            return Task.isCancelled
        }
        let queue = makeQueue("announced-cancel")
        await queue.addOperationWhenRoom(op)
        try await withTimeLimit { await started.opened() }
        op.announceCancellation()
        if !(await eventually(timeout: .seconds(5)) { op.isFinished }) {
            Issue.record("the body's task was not cancelled by the isCancelled announcement")
            resume.resume()
        }
        #expect(await eventually { op.isFinished })
        #expect(op.result.flatMap { try? $0.get() } == true, "the body did not see its task cancelled")
        try await withTimeLimit { await queue.drained() }
    }
}
