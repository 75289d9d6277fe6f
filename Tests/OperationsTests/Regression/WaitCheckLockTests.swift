// The deadlock check of a wait made from inside an operation takes time
// linear in the graph it reads (about a tenth of a second at 100,000
// dependencies). It once ran under the wait registry's lock, which every
// wait of the process takes to begin and end, so one check of a large graph
// held up every unrelated wait (probe 26). These scenarios hold a check open
// with the registry's test hook and show that other waits go on meanwhile,
// and that waits which begin and end during a check, or which the check
// meets on operations that are free anyway, do not keep a deadlock from
// being reported (probes 27 and 28). Exit tests: the hook is process-wide.

import Dispatch
import Glibc
import Synchronization
import Testing
@testable import Operations

/// Holds the first check to run until `release` opens (bounded), opening
/// `entered` when it begins.
private final class HeldCheck: Sendable {
    let entered = Gate()
    let release = Gate()
    private let first = Atomic<Bool>(true)
    /// Whether the check was released by the gate rather than by its bound.
    let releasedByGate = Atomic<Bool>(false)

    func hold() {
        guard first.exchange(false, ordering: .acquiringAndReleasing) else { return }
        entered.open()
        releasedByGate.store(release.wait(timeout: patience * 3), ordering: .releasing)
    }
}

/// A wait from inside an operation is checked, and its check is held open.
/// Meanwhile a plain wait begins and ends, and the registry answers.
func scenarioOtherWaitsGoOnDuringACheck() {
    let held = HeldCheck()
    WaitRegistry.setAnalysisHook { held.hold() }

    let queue = makeQueue("held-check")
    let awaited = BlockOperation {}
    awaited.name = "awaited"
    let waiterReturned = Gate()
    queue.addOperation {
        awaited.waitUntilFinished()
        waiterReturned.open()
    }
    #expect(held.entered.wait(), "the waiter's check never began")

    // The registry answers while the check runs.
    let answered = Gate()
    spawnThread {
        _ = WaitRegistry.shared.count
        answered.open()
    }
    #expect(answered.wait(), "the registry waited for the check")

    // A plain wait begins (it is registered) and ends meanwhile.
    let plain = BlockOperation {}
    let plainReturned = Gate()
    spawnThread {
        plain.waitUntilFinished()
        plainReturned.open()
    }
    #expect(waitUntil { WaitRegistry.shared.count >= 2 }, "the plain wait did not begin")
    plain.start()
    #expect(plainReturned.wait(), "the plain wait did not end")
    #expect(!held.release.opened, "the check ended before the other waits went on")

    held.release.open()
    awaited.start()
    #expect(waiterReturned.wait(), "the checked wait did not end")
    #expect(queue.waitUntilAllOperationsAreFinished(timeout: patience))
    let releasedByGate = held.releasedByGate.load(ordering: .acquiring)
    #expect(releasedByGate, "the check was held past its bound")
}

/// Makes an unrelated wait, from inside an operation of another queue,
/// begin and end during every check of the waits made on one thread.
private final class ChurnDuringChecks: Sendable {
    private let thread = Atomic<UInt>(0)
    private let churners = makeQueue("churners")
    private let targets = makeQueue("churn-targets")
    let churns = Atomic<Int>(0)

    /// Marks the calling thread as the one whose checks are overtaken.
    func watchCallingThread() { thread.store(UInt(pthread_self()), ordering: .releasing) }

    func churnIfWatched() {
        guard thread.load(ordering: .acquiring) == UInt(pthread_self()) else { return }
        // The target finishes only once the churn's wait has begun (it is
        // registered next to the watched wait), so that the wait does
        // begin and end during the check.
        let release = Gate()
        let target = BlockOperation { release.wait() }
        let churn = BlockOperation { target.waitUntilFinished() }
        targets.addOperation(target)
        churners.addOperation(churn)
        let began = waitUntil { WaitRegistry.shared.count >= 2 }
        release.open()
        if began, churn.waitUntilFinished(timeout: patience) { churns.add(1, ordering: .relaxed) }
    }
}

/// On a serial queue, an operation waits for one queued behind it; during
/// every check of that wait, another operation's wait begins and ends. The
/// deadlock is still reported (those waits are not part of it).
func scenarioDeadlockReportedDespiteChurn() {
    let misuses = installChildMisuseRecorder()
    let churn = ChurnDuringChecks()
    WaitRegistry.setAnalysisHook { churn.churnIfWatched() }
    let serial = makeQueue("churned-serial", width: 1)
    let behind = BlockOperation {}
    behind.name = "queued-behind"
    serial.addOperation {
        churn.watchCallingThread()
        behind.waitUntilFinished()
    }
    serial.addOperation(behind)
    #expect(serial.waitUntilAllOperationsAreFinished(timeout: patience), "the waiter hangs")
    #expect(misuses.events.map(\.code) == [.waitDeadlock], "\(describeMisuses(misuses.events))")
    let churns = churn.churns.load(ordering: .relaxed)
    #expect(churns > 0, "no wait was made during the checks")
}

/// An operation that keeps waiting for short-lived operations of its own,
/// one at a time, until stopped; `endCurrentWait()` ends its present wait
/// and returns once its next wait has begun (or it stopped).
private final class ChurningWaiter: Sendable {
    private(set) nonisolated(unsafe) var operation: BlockOperation!
    private let stop = Atomic<Bool>(false)
    private let step = DispatchSemaphore(value: 0)
    private let began = Atomic<Int>(0)
    let ended = Atomic<Int>(0)

    init(targets: OperationQueue) {
        // Set once, before the operation is shared.
        operation = BlockOperation { [self] in run(targets) }
    }

    private func run(_ targets: OperationQueue) {
        var round = 0
        while !stop.load(ordering: .acquiring), round < 10_000 {
            let step = step
            let target = BlockOperation { _ = step.wait(timeout: .now() + .seconds(10)) }
            targets.addOperation(target)
            began.store(round + 1, ordering: .releasing)
            target.waitUntilFinished()
            round += 1
        }
    }

    /// Ends the present wait (bounded) and waits for the next one to begin.
    func endCurrentWait() {
        let current = began.load(ordering: .acquiring)
        guard current > 0, !stop.load(ordering: .acquiring) else { return }
        step.signal()
        ended.add(1, ordering: .relaxed)
        _ = waitUntil { began.load(ordering: .acquiring) > current && WaitRegistry.shared.count >= 2 }
    }

    func finish() {
        stop.store(true, ordering: .releasing)
        step.signal()
    }
}

/// On a serial queue, W waits for L, queued behind it; L also depends on C,
/// which runs elsewhere and keeps making short waits of its own. The check
/// of W's wait meets C's wait, but C is free whatever it waits for: during
/// every check, C's wait ends and another begins, and the deadlock must
/// still be reported (probe 28).
func scenarioDeadlockReportedDespiteChurnItMeets() {
    let misuses = installChildMisuseRecorder()
    let churner = ChurningWaiter(targets: makeQueue("churn-targets"))
    let others = makeQueue("churner")
    let serial = makeQueue("met-churn-serial", width: 1)
    let waiterThread = Atomic<UInt>(0)
    WaitRegistry.setAnalysisHook {
        guard waiterThread.load(ordering: .acquiring) == UInt(pthread_self()) else { return }
        churner.endCurrentWait()
    }
    others.addOperation(churner.operation)
    #expect(waitUntil { WaitRegistry.shared.count >= 1 }, "the churning operation never waited")
    let behind = BlockOperation {}
    behind.name = "queued-behind"
    behind.addDependency(churner.operation)
    let waitReturned = Gate()
    serial.addOperation {
        waiterThread.store(UInt(pthread_self()), ordering: .releasing)
        behind.waitUntilFinished()
        waitReturned.open()
    }
    serial.addOperation(behind)
    #expect(waitReturned.wait(), "the wait was never reported")
    #expect(misuses.events.map(\.code) == [.waitDeadlock], "\(describeMisuses(misuses.events))")
    let ended = churner.ended.load(ordering: .relaxed)
    #expect(ended > 0, "no wait ended during the checks")
    churner.finish()
    #expect(serial.waitUntilAllOperationsAreFinished(timeout: patience))
    #expect(others.waitUntilAllOperationsAreFinished(timeout: patience))
}

@Suite("Wait checks among other waits (probes 26 to 28)")
struct WaitCheckLockTests {
    @Test("while a wait's check runs, other waits begin and end and the registry answers")
    func otherWaitsGoOn() async {
        await #expect(processExitsWith: .success) { scenarioOtherWaitsGoOnDuringACheck() }
    }

    @Test("a deadlock is reported although unrelated waits begin and end during each of its checks (probe 27)")
    func reportedDespiteChurn() async {
        await #expect(processExitsWith: .success) { scenarioDeadlockReportedDespiteChurn() }
    }

    @Test("a deadlock is reported although a wait its check meets, of an operation that is free anyway, keeps ending (probe 28)")
    func reportedDespiteChurnItMeets() async {
        await #expect(processExitsWith: .success) { scenarioDeadlockReportedDespiteChurnItMeets() }
    }
}
