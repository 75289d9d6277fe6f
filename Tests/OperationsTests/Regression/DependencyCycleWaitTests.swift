// Waits on operations that sit in a dependency cycle. A dependency cycle
// alone is not a wait deadlock (cancelling a member ends it; the hang report
// names it), but it must not hide one: a member that also needs work queued
// behind the waiter can never finish, whatever is cancelled elsewhere.

import Testing
@testable import Operations

/// An operation with nothing to do, named for the misuse messages.
private func emptyOperation(_ name: String) -> BlockOperation {
    let operation = BlockOperation {}
    operation.name = name
    return operation
}

/// The awaited operation depends on itself and on an operation queued
/// behind its waiter on a serial queue.
func scenarioSelfDependentTargetNeedsWorkBehindWaiter() {
    let misuses = installChildMisuseRecorder()
    let serial = makeQueue("self-dependent-serial", width: 1)
    let other = makeQueue("self-dependent-other")
    let behind = emptyOperation("behind-the-waiter")
    let target = emptyOperation("self-dependent-target")
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
    let serial = makeQueue("cycle-behind-serial", width: 1)
    let first = emptyOperation("cycle-first")
    let second = emptyOperation("cycle-second")
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
    let waiters = makeQueue("cycle-waiters", width: 1)
    let members = makeQueue("cycle-members")
    let first = emptyOperation("other-first")
    let second = emptyOperation("other-second")
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

/// The awaited operation's partner in a dependency cycle needs an
/// operation queued behind the waiter on a serial queue: the cycle as a
/// whole needs it (probe 26, W06).
func scenarioCyclePartnerNeedsWorkBehindWaiter() {
    let misuses = installChildMisuseRecorder()
    let serial = makeQueue("partner-serial", width: 1)
    let other = makeQueue("partner-other")
    let behind = emptyOperation("partner-behind")
    let first = emptyOperation("partner-first")
    let second = emptyOperation("partner-second")
    first.addDependency(second)
    second.addDependency(first)
    second.addDependency(behind)
    serial.addOperation { first.waitUntilFinished() }
    serial.addOperation(behind)
    other.addOperations([first, second], waitUntilFinished: false)
    #expect(serial.waitUntilAllOperationsAreFinished(timeout: patience), "the waiter hangs")
    #expect(misuses.events.map(\.code) == [.waitDeadlock], "\(describeMisuses(misuses.events))")
    first.cancel()
    #expect(other.waitUntilAllOperationsAreFinished(timeout: patience))
}

/// The awaited operation's partner in a dependency cycle is queued behind
/// the waiter on its serial queue (probe 26, W06b).
func scenarioCyclePartnerQueuedBehindWaiter() {
    let misuses = installChildMisuseRecorder()
    let serial = makeQueue("partner-behind-serial", width: 1)
    let other = makeQueue("partner-behind-other")
    let first = emptyOperation("queued-partner")
    let second = emptyOperation("awaited-partner")
    first.addDependency(second)
    second.addDependency(first)
    serial.addOperation { second.waitUntilFinished() }
    serial.addOperation(first)
    other.addOperation(second)
    #expect(waitUntil { !misuses.events.isEmpty }, "the wait is never reported")
    #expect(misuses.events.map(\.code) == [.waitDeadlock], "\(describeMisuses(misuses.events))")
    second.cancel()
    #expect(other.waitUntilAllOperationsAreFinished(timeout: patience))
    first.cancel()
    #expect(serial.waitUntilAllOperationsAreFinished(timeout: patience))
}

/// A wait from an operation on the end of a chain of 50,000 dependencies,
/// whose head is in no queue: the check explores the whole chain without
/// recursion (it overflowed the stack, probe 26) and in linear time; the
/// wait is legitimate and ends once the head is started by hand.
func scenarioWaitOnLongChain() {
    let misuses = installChildMisuseRecorder()
    let head = BlockOperation {}
    var chain: [Operation] = []
    chain.reserveCapacity(50_000)
    var previous: Operation = head
    for _ in 0..<50_000 {
        let link = BlockOperation {}
        link.addDependency(previous)
        chain.append(link)
        previous = link
    }
    let links = OperationQueue()
    links.addOperations(chain, waitUntilFinished: false)
    let waiters = OperationQueue()
    let last = previous
    waiters.addOperation { last.waitUntilFinished() }
    // Generous bounds: under ThreadSanitizer each check of the chain and
    // the run of its 50,000 operations take seconds (one CI run needed
    // more than 10 s); what the test guards against is a crash or a hang.
    let sanitizerPatience: Duration = .seconds(120)
    #expect(waitUntil(timeout: sanitizerPatience) { WaitRegistry.shared.count >= 1 })
    // Several re-checks of the whole chain happen meanwhile.
    #expect(staysFalse(for: .milliseconds(300)) { last.isFinished })
    head.start()
    #expect(waiters.waitUntilAllOperationsAreFinished(timeout: sanitizerPatience), "the waiter hangs")
    #expect(links.waitUntilAllOperationsAreFinished(timeout: sanitizerPatience))
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

    @Test("a dependency cycle whose other member needs work queued behind the waiter: reported")
    func cyclePartnerNeedsWorkBehindWaiter() async {
        await #expect(processExitsWith: .success) { scenarioCyclePartnerNeedsWorkBehindWaiter() }
    }

    @Test("a dependency cycle whose other member is queued behind the waiter: reported")
    func cyclePartnerQueuedBehindWaiter() async {
        await #expect(processExitsWith: .success) { scenarioCyclePartnerQueuedBehindWaiter() }
    }

    @Test("a wait on the end of a 50,000-link chain is checked without overflowing the stack, and ends")
    func waitOnLongChain() async {
        await #expect(processExitsWith: .success) { scenarioWaitOnLongChain() }
    }

    @Test("a dependency cycle on another queue, waited for by an operation: not reported")
    func cycleOnOtherQueueIsNotReported() async {
        await #expect(processExitsWith: .success) { scenarioCycleOnOtherQueueIsNotReported() }
    }
}
