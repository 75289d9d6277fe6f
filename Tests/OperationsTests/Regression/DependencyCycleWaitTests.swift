// Waits on operations that sit in a dependency cycle. A dependency cycle
// alone is not a wait deadlock (cancelling a member ends it; the hang report
// names it), but it must not hide one: a member that also needs work queued
// behind the waiter can never finish, whatever is cancelled elsewhere.

import Testing
@testable import Operations

/// The awaited operation depends on itself and on an operation queued
/// behind its waiter on a serial queue.
func scenarioSelfDependentTargetNeedsWorkBehindWaiter() {
    let misuses = installChildMisuseRecorder()
    let serial = OperationQueue()
    serial.name = "self-dependent-serial"
    serial.maxConcurrentOperationCount = 1
    let other = OperationQueue()
    other.name = "self-dependent-other"
    let behind = BlockOperation {}
    behind.name = "behind-the-waiter"
    let target = BlockOperation {}
    target.name = "self-dependent-target"
    target.addDependency(behind)
    target.addDependency(target)
    serial.addOperation { target.waitUntilFinished() }
    serial.addOperation(behind)
    other.addOperation(target)
    #expect(serial.waitUntilAllOperationsAreFinished(timeout: patience), "the waiter hangs")
    #expect(misuses.events.map(\.code) == [.waitDeadlock], "\(describeMisuses(misuses.events))")
    #expect(misuses.events.first?.message.contains("\"self-dependent-target\"") == true)
    target.cancel()
    #expect(other.waitUntilAllOperationsAreFinished(timeout: patience))
}

/// The awaited operation and its partner depend on each other, and both are
/// queued behind their waiter on a serial queue: even cancelled, neither
/// could start before the waiter returns.
func scenarioCycleMembersQueuedBehindWaiter() {
    let misuses = installChildMisuseRecorder()
    let serial = OperationQueue()
    serial.name = "cycle-behind-serial"
    serial.maxConcurrentOperationCount = 1
    let first = BlockOperation {}
    first.name = "cycle-first"
    let second = BlockOperation {}
    second.name = "cycle-second"
    first.addDependency(second)
    second.addDependency(first)
    let waiter = BlockOperation { first.waitUntilFinished() }
    waiter.name = "cycle-waiter"
    serial.addOperations([waiter, first, second], waitUntilFinished: false)
    #expect(waiter.waitUntilFinished(timeout: patience), "the waiter hangs")
    #expect(misuses.events.map(\.code) == [.waitDeadlock], "\(describeMisuses(misuses.events))")
    #expect(misuses.events.first?.message.contains("\"cycle-first\"") == true)
    first.cancel()
    #expect(serial.waitUntilAllOperationsAreFinished(timeout: patience))
}

/// A dependency cycle on another queue, waited for from inside an
/// operation: cancelling a member ends the wait, so it is not reported.
func scenarioCycleOnOtherQueueIsNotReported() {
    let misuses = installChildMisuseRecorder()
    let waiters = OperationQueue()
    waiters.name = "cycle-waiters"
    waiters.maxConcurrentOperationCount = 1
    let members = OperationQueue()
    members.name = "cycle-members"
    let first = BlockOperation {}
    first.name = "other-first"
    let second = BlockOperation {}
    second.name = "other-second"
    first.addDependency(second)
    second.addDependency(first)
    members.addOperations([first, second], waitUntilFinished: false)
    waiters.addOperation { first.waitUntilFinished() }
    #expect(waitUntil { WaitRegistry.shared.count >= 1 })
    // Past the re-check that confirms a deadlock (about a second).
    #expect(staysFalse(for: .milliseconds(1_500)) { !misuses.events.isEmpty })
    first.cancel()
    #expect(waiters.waitUntilAllOperationsAreFinished(timeout: patience))
    #expect(members.waitUntilAllOperationsAreFinished(timeout: patience))
    #expect(misuses.events.isEmpty, "\(describeMisuses(misuses.events))")
}

@Suite("Waits on members of dependency cycles")
struct DependencyCycleWaitTests {
    @Test("a self-dependent operation that also needs work queued behind its waiter: reported")
    func selfDependentTargetNeedsWorkBehindWaiter() async {
        await #expect(processExitsWith: .success) { scenarioSelfDependentTargetNeedsWorkBehindWaiter() }
    }

    @Test("the members of a dependency cycle queued behind their waiter on a serial queue: reported")
    func cycleMembersQueuedBehindWaiter() async {
        await #expect(processExitsWith: .success) { scenarioCycleMembersQueuedBehindWaiter() }
    }

    @Test("a dependency cycle on another queue, waited for by an operation: not reported")
    func cycleOnOtherQueueIsNotReported() async {
        await #expect(processExitsWith: .success) { scenarioCycleOnOtherQueueIsNotReported() }
    }
}
