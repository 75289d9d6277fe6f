// The deadlock check of a wait made from inside an operation takes time
// linear in the graph it reads (about a tenth of a second at 100,000
// dependencies). It once ran under the wait registry's lock, which every
// wait of the process takes to begin and end, so one check of a large graph
// held up every unrelated wait (probe 26). These scenarios hold a check open
// with the registry's test hook and show that other waits go on meanwhile.
// Exit tests: the hook is process-wide.

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
    WaitRegistry.analysisWillRun.withLock { $0 = { held.hold() } }

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

@Suite("Probe 26: the deadlock check of one wait holds up no other wait")
struct WaitCheckLockTests {
    @Test("while a wait's check runs, other waits begin and end and the registry answers")
    func otherWaitsGoOn() async {
        await #expect(processExitsWith: .success) { scenarioOtherWaitsGoOnDuringACheck() }
    }
}
